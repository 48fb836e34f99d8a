/* Throughput of conv2d forward, backward-data and backward-weights at the ResNet-18 CIFAR layer
 * shapes (and those of a ResNet-20-style network), batch 64, for each algorithm, against the
 * measured sgemm peak. Every pass counts 2 * B * OC * OH * OW * IC * KH * KW FLOPs; times include
 * the layout reorders and the gradient accumulation, i.e. the whole kernel call. Best of `repeats`
 * calls after one warm-up; the algorithms alternate call by call, so a busy machine slows both
 * alike. Usage: bench_conv [threads] [repeats] [dnnl|im2col|both] */
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/backend.h"
#include "sdp/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64, PEAK_SIZE = 2048 };

typedef struct {
    const char *name;
    sdp_conv_shape shape;
} layer;

/* B, IC, H, W, OC, KH, KW, stride_h, stride_w, pad_h, pad_w */
static const layer LAYERS[] = {
    {"stem 3->64 32x32", {BATCH, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1}},
    {"64->64 32x32", {BATCH, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1}},
    {"128->128 16x16", {BATCH, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1}},
    {"256->256 8x8", {BATCH, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1}},
    {"512->512 4x4", {BATCH, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1}},
    /* ResNet-18's downsampling: the first conv of a stage and its 1x1 shortcut */
    {"64->128 s2 32x32", {BATCH, 64, 32, 32, 128, 3, 3, 2, 2, 1, 1}},
    {"1x1 64->128 s2", {BATCH, 64, 32, 32, 128, 1, 1, 2, 2, 0, 0}},
    /* the small ResNet-20-style network: 16, 32, 64 channels */
    {"r20 16->16 32x32", {BATCH, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1}},
    {"r20 32->32 16x16", {BATCH, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1}},
    {"r20 64->64 8x8", {BATCH, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1}},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_floats(size_t n, sdp_rng *rng) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    SDP_CHECK(p, "bench_conv: out of memory allocating %zu floats", n);
    for (size_t i = 0; i < n; i++) p[i] = 0.1f * sdp_rng_normal(rng);
    return p;
}

typedef enum { FWD, BWD_DATA, BWD_WEIGHTS, NPASSES } pass;
enum { NALGOS = 2 };
static const sdp_conv_algo ALGOS[NALGOS] = {SDP_CONV_DNNL, SDP_CONV_IM2COL};

typedef struct {
    float *inp, *w, *out, *dout, *dinp, *dw, *scratch;
} buffers;

static void run_pass(const sdp_backend *cpu, const void *plan, const buffers *b, pass p) {
    switch (p) {
    case FWD:
        sdp_conv2d_fwd(cpu, plan, b->out, b->inp, b->w, NULL, b->scratch);
        return;
    case BWD_DATA:
        sdp_conv2d_bwd(cpu, plan, b->dinp, NULL, NULL, b->dout, NULL, b->w, b->scratch);
        return;
    default:
        sdp_conv2d_bwd(cpu, plan, NULL, b->dw, NULL, b->dout, b->inp, NULL, b->scratch);
        return;
    }
}

/* The algorithms take turns call by call, so that both see the same load on a shared machine. */
static void bench_layer(const sdp_backend *cpu, const layer *l, const bool use[NALGOS], int repeats,
                        double peak) {
    const sdp_conv_shape *s = &l->shape;
    void *plans[NALGOS] = {NULL};
    size_t scratch = 0;
    for (int a = 0; a < NALGOS; a++) {
        if (!use[a]) continue;
        plans[a] = sdp_conv_plan_create(cpu, s, ALGOS[a]);
        size_t need = sdp_conv_scratch_bytes(cpu, plans[a]) / sizeof(float);
        scratch = need > scratch ? need : scratch;
    }
    int OH = (s->H + 2 * s->pad_h - s->KH) / s->stride_h + 1;
    int OW = (s->W + 2 * s->pad_w - s->KW) / s->stride_w + 1;
    size_t n_in = (size_t)s->B * s->IC * s->H * s->W, n_w = (size_t)s->OC * s->IC * s->KH * s->KW;
    size_t n_out = (size_t)s->B * s->OC * OH * OW;
    sdp_rng rng = sdp_rng_make(1, 0);
    buffers b = {random_floats(n_in, &rng),   random_floats(n_w, &rng),  random_floats(n_out, &rng),
                 random_floats(n_out, &rng),  random_floats(n_in, &rng), random_floats(n_w, &rng),
                 random_floats(scratch, &rng)};
    double best[NALGOS][NPASSES];
    for (pass p = 0; p < NPASSES; p++)
        for (int a = 0; a < NALGOS; a++) best[a][p] = 1e30;
    for (pass p = 0; p < NPASSES; p++)
        for (int r = -1; r < repeats; r++) /* r = -1 is the warm-up */
            for (int a = 0; a < NALGOS; a++) {
                if (!use[a]) continue;
                double t0 = now();
                run_pass(cpu, plans[a], &b, p);
                double dt = now() - t0;
                if (r >= 0 && dt < best[a][p]) best[a][p] = dt;
            }
    double flops = 2.0 * n_out * s->IC * s->KH * s->KW;
    for (int a = 0; a < NALGOS; a++) {
        if (!use[a]) continue;
        printf("%-17s %-6s", l->name, sdp_conv_algo_name(ALGOS[a]));
        for (pass p = 0; p < NPASSES; p++) {
            double gflops = flops / best[a][p] * 1e-9;
            printf(" | %7.2f ms %6.1f GFLOP/s %3.0f%%", 1e3 * best[a][p], gflops,
                   100 * gflops / peak);
        }
        printf("   scratch %.1f MiB\n", sdp_conv_scratch_bytes(cpu, plans[a]) / (double)(1 << 20));
        sdp_conv_plan_free(cpu, plans[a]);
    }
    free(b.inp), free(b.w), free(b.out), free(b.dout), free(b.dinp), free(b.dw), free(b.scratch);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    const char *which = argc > 3 ? argv[3] : "both";
    sdp_conv_algo only = SDP_CONV_DNNL;
    bool both = strcmp(which, "both") == 0;
    SDP_CHECK(threads >= 1 && repeats >= 1 && (both || sdp_conv_algo_parse(which, &only)),
              "usage: bench_conv [threads >= 1] [repeats >= 1] [dnnl|im2col|both]");
    sdp_set_threads(threads);

    double peak = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, repeats);
    double peak_openblas = sdp_measure_sgemm_peak(SDP_GEMM_OPENBLAS, PEAK_SIZE, repeats);
    printf("threads %d, batch %d, sgemm peak at %d^3: dnnl %.1f GFLOP/s, openblas %.1f GFLOP/s; "
           "%% is of the dnnl peak\n",
           threads, BATCH, PEAK_SIZE, peak, peak_openblas);
    printf("%-17s %-6s | %-31s | %-31s | %-31s\n", "layer", "algo", "forward", "backward data",
           "backward weights");
    bool use[NALGOS];
    for (int a = 0; a < NALGOS; a++) use[a] = both || ALGOS[a] == only;
    sdp_mem mem = {0};
    sdp_backend *cpu = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    for (size_t k = 0; k < sizeof LAYERS / sizeof LAYERS[0]; k++)
        bench_layer(cpu, &LAYERS[k], use, repeats, peak);
    sdp_backend_destroy(cpu);
    double peak_after = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, repeats);
    printf("sgemm peak again at the end: %.1f GFLOP/s (a large change means a busy machine)\n",
           peak_after);
    return 0;
}
