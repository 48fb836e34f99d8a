/* Measurements shared by the benchmarks: the sgemm throughput a provider reaches on this machine
 * is the yardstick for model FLOP utilization. */
#ifndef SDP_BENCH_H
#define SDP_BENCH_H

#include "sdp/mem.h"
#include "sdp/ops.h"

#include <stdbool.h>

/* Best GFLOP/s over `repeats` timed calls (after one warm-up) of
 * C[M,N] = op(A) op(B) with dense operands, at the current thread count. */
double sdp_measure_sgemm(sdp_gemm_provider prov, bool ta, bool tb, int M, int N, int K,
                         int repeats);
/* The same for a square size x size x size product: the practical sgemm peak. */
double sdp_measure_sgemm_peak(sdp_gemm_provider prov, int size, int repeats);

/* A monotonic clock in milliseconds. */
double sdp_bench_now_ms(void);
/* The median of x[0..n) (sorts x). */
double sdp_bench_median(double *x, int n);
/* One line of bytes by category. */
void sdp_bench_print_memory(const sdp_mem *mem);

#endif
