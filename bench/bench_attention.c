/* Throughput of the attention kernels at GPT-like sizes. FLOPs count only the causal half:
 * forward 2 products (q k^T, P v), backward 5 (recomputed q k^T, dv, dP, dq, dk), each
 * 2 * hs * T(T+1)/2 per (batch, head). Usage: bench_attention [threads]. */
#include "sdp/backend.h"
#include "sdp/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void bench(const sdp_backend *cpu, int B, int T, int H, int hs) {
    size_t n = (size_t)B * T * 3 * H * hs, m = (size_t)B * T * H * hs;
    float *qkv = malloc(n * sizeof *qkv), *dqkv = calloc(n, sizeof *dqkv);
    float *out = malloc(m * sizeof *out), *dout = malloc(m * sizeof *dout);
    float *lse = malloc((size_t)B * H * T * sizeof *lse);
    float *scratch = malloc(sdp_attention_scratch_bytes(cpu, B, T, H, hs));
    sdp_rng rng = sdp_rng_make(1, 0);
    for (size_t i = 0; i < n; i++) qkv[i] = sdp_rng_normal(&rng);
    for (size_t i = 0; i < m; i++) dout[i] = sdp_rng_normal(&rng);

    double unit = 2.0 * hs * T * (T + 1) / 2 * B * H;
    double t_fwd = 1e30, t_bwd = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now();
        sdp_attention_fwd(cpu, out, lse, qkv, B, T, H, hs, true, SDP_NO_DROPOUT, scratch);
        double t1 = now();
        sdp_attention_bwd(cpu, dqkv, dout, qkv, out, lse, B, T, H, hs, true, SDP_NO_DROPOUT,
                          scratch);
        double t2 = now();
        if (rep > 0 && t1 - t0 < t_fwd) t_fwd = t1 - t0;
        if (rep > 0 && t2 - t1 < t_bwd) t_bwd = t2 - t1;
    }
    printf("B=%d T=%4d H=%2d hs=%d threads=%d: fwd %7.3f ms %6.1f GFLOP/s, bwd %7.3f ms %6.1f "
           "GFLOP/s\n",
           B, T, H, hs, omp_get_max_threads(), 1e3 * t_fwd, 2 * unit / t_fwd * 1e-9, 1e3 * t_bwd,
           5 * unit / t_bwd * 1e-9);
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(scratch);
}

int main(int argc, char **argv) {
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    sdp_mem mem = {0};
    sdp_backend *cpu = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    bench(cpu, 4, 256, 6, 64);
    bench(cpu, 4, 64, 12, 64);
    bench(cpu, 4, 1024, 6, 64);
    sdp_backend_destroy(cpu);
    return 0;
}
