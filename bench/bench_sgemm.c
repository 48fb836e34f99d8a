/* sgemm throughput of each provider: square 2048 and the GEMM shapes of one GPT-2 124M training
 * step (256 tokens per micro-batch), with the transposes that a linear layer's forward, input
 * gradient and weight gradient use.  Usage: bench_sgemm [threads] [repeats] */
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/ops.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    char name[32];
    bool ta, tb;
    int M, N, K;
} gemm_shape;

enum { TOKENS = 256, C = 768, VOCAB = 50304, NLINEAR = 5, NSHAPES = 1 + 3 * NLINEAR };

/* A linear layer in -> out over n tokens runs out = inp w^T [n, out, in], dinp = dout w
 * [n, in, out] and dw = dout^T inp [out, in, n]. */
static void add_linear_shapes(gemm_shape *s, const char *name, int in, int out) {
    s[0] = (gemm_shape){"", false, true, TOKENS, out, in};
    s[1] = (gemm_shape){"", false, false, TOKENS, in, out};
    s[2] = (gemm_shape){"", true, false, out, in, TOKENS};
    const char *kinds[3] = {"fwd", "dinp", "dw"};
    for (int k = 0; k < 3; k++) snprintf(s[k].name, sizeof s[k].name, "%s %s", name, kinds[k]);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    SDP_CHECK(threads >= 1 && repeats >= 1, "usage: bench_sgemm [threads >= 1] [repeats >= 1]");
    sdp_set_threads(threads);

    gemm_shape shapes[NSHAPES];
    shapes[0] = (gemm_shape){"square 2048", false, false, 2048, 2048, 2048};
    add_linear_shapes(shapes + 1, "qkv", C, 3 * C);
    add_linear_shapes(shapes + 4, "attn proj", C, C);
    add_linear_shapes(shapes + 7, "mlp fc", C, 4 * C);
    add_linear_shapes(shapes + 10, "mlp proj", 4 * C, C);
    add_linear_shapes(shapes + 13, "lm head", C, VOCAB);

    const sdp_gemm_provider provs[2] = {SDP_GEMM_DNNL, SDP_GEMM_OPENBLAS};
    double peak[2] = {0, 0};
    printf("sgemm GFLOP/s, %d threads, best of %d after warm-up\n", threads, repeats);
    printf("%-16s %2s %2s %6s %6s %6s %10s %10s\n", "shape", "tA", "tB", "M", "N", "K",
           sdp_gemm_provider_name(provs[0]), sdp_gemm_provider_name(provs[1]));
    for (int i = 0; i < NSHAPES; i++) {
        const gemm_shape *s = &shapes[i];
        printf("%-16s %2s %2s %6d %6d %6d", s->name, s->ta ? "T" : "N", s->tb ? "T" : "N", s->M,
               s->N, s->K);
        for (int p = 0; p < 2; p++) {
            double g = sdp_measure_sgemm(provs[p], s->ta, s->tb, s->M, s->N, s->K, repeats);
            if (g > peak[p]) peak[p] = g;
            printf(" %10.1f", g);
        }
        printf("\n");
        fflush(stdout);
    }
    for (int p = 0; p < 2; p++)
        printf("peak %-10s %.1f GFLOP/s (%d threads)\n", sdp_gemm_provider_name(provs[p]), peak[p],
               threads);
    return 0;
}
