/* Timing of sgemm for a given shape, used as the practical peak of the machine. */
#include "sdp/bench.h"
#include <stdio.h>
#include "sdp/check.h"

#include <stdlib.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_filled(size_t count, float value) {
    float *p = sdp_xmalloc(count * sizeof(float), "the sgemm benchmark's matrices");
    for (size_t i = 0; i < count; i++) p[i] = value;
    return p;
}

double sdp_measure_sgemm(sdp_gemm_provider prov, bool ta, bool tb, int M, int N, int K,
                         int repeats) {
    SDP_CHECK(M > 0 && N > 0 && K > 0 && repeats > 0,
              "sgemm benchmark: sizes (%d, %d, %d) and repeats %d must be positive", M, N, K,
              repeats);
    /* Stored shapes: A is [M, K] ([K, M] if ta), B is [K, N] ([N, K] if tb), C is [M, N]. */
    float *A = alloc_filled((size_t)M * K, 0.01f);
    float *B = alloc_filled((size_t)K * N, 0.02f);
    float *C = alloc_filled((size_t)M * N, 0.0f);
    int lda = ta ? M : K, ldb = tb ? K : N;
    double best = 1e300;
    for (int r = -1; r < repeats; r++) { /* r = -1 is the warm-up */
        double t0 = now_seconds();
        sdp_cpu_gemm(prov, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        double dt = now_seconds() - t0;
        if (r >= 0 && dt < best) best = dt;
    }
    free(A);
    free(B);
    free(C);
    return 2.0 * M * N * K / best * 1e-9;
}

double sdp_measure_sgemm_peak(sdp_gemm_provider prov, int size, int repeats) {
    return sdp_measure_sgemm(prov, false, false, size, size, size, repeats);
}

double sdp_bench_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sdp_bench_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

void sdp_bench_print_memory(const sdp_mem *mem) {
    const sdp_memcat cats[] = {SDP_MEM_PARAMS, SDP_MEM_GRADS,   SDP_MEM_OPTIM,
                               SDP_MEM_ACTS,   SDP_MEM_SCRATCH, SDP_MEM_DATA};
    char buf[32];
    printf("  memory:");
    for (size_t i = 0; i < sizeof cats / sizeof *cats; i++)
        printf(" %s %s,", sdp_memcat_name(cats[i]),
               sdp_fmt_bytes(buf, sizeof buf, (double)mem->cur[cats[i]]));
    printf(" total %s\n", sdp_fmt_bytes(buf, sizeof buf, (double)mem->total_cur));
}
