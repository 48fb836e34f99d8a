/* Throughput of conv2d forward, backward-data and backward-weights at the ResNet-18 CIFAR layer
 * shapes, batch 64, for each algorithm, against the measured sgemm peak. Every pass counts
 * 2 * B * OC * OH * OW * IC * KH * KW FLOPs; times include the layout reorders and the gradient
 * accumulation, i.e. the whole kernel call. Best of `repeats` calls after one warm-up.
 * Usage: bench_conv [threads] [repeats] [dnnl|im2col|both] */
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/ops_vision.h"
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

typedef struct {
    const sdp_conv_plan *plan;
    float *inp, *w, *out, *dout, *dinp, *dw, *scratch;
} buffers;

static void run_pass(const buffers *b, pass p) {
    switch (p) {
    case FWD:
        sdp_conv2d_fwd(b->plan, b->out, b->inp, b->w, NULL, b->scratch);
        return;
    case BWD_DATA:
        sdp_conv2d_bwd(b->plan, b->dinp, NULL, NULL, b->dout, NULL, b->w, b->scratch);
        return;
    default:
        sdp_conv2d_bwd(b->plan, NULL, b->dw, NULL, b->dout, b->inp, NULL, b->scratch);
        return;
    }
}

static void bench_layer(const layer *l, sdp_conv_algo algo, int repeats, double peak) {
    sdp_conv_plan plan;
    sdp_conv_plan_init(&plan, &l->shape, algo, SDP_GEMM_DNNL);
    const sdp_conv_shape *s = &l->shape;
    size_t n_in = (size_t)s->B * s->IC * s->H * s->W, n_w = (size_t)s->OC * s->IC * s->KH * s->KW;
    size_t n_out = (size_t)s->B * s->OC * plan.OH * plan.OW;
    sdp_rng rng = sdp_rng_make(1, 0);
    buffers b = {&plan,
                 random_floats(n_in, &rng),
                 random_floats(n_w, &rng),
                 random_floats(n_out, &rng),
                 random_floats(n_out, &rng),
                 random_floats(n_in, &rng),
                 random_floats(n_w, &rng),
                 random_floats(sdp_conv_scratch_floats(&plan), &rng)};
    double flops = 2.0 * n_out * s->IC * s->KH * s->KW;
    printf("%-17s %-6s", l->name, sdp_conv_algo_name(algo));
    for (pass p = 0; p < NPASSES; p++) {
        double best = 1e30;
        for (int r = -1; r < repeats; r++) { /* r = -1 is the warm-up */
            double t0 = now();
            run_pass(&b, p);
            double dt = now() - t0;
            if (r >= 0 && dt < best) best = dt;
        }
        double gflops = flops / best * 1e-9;
        printf(" | %7.2f ms %6.1f GFLOP/s %3.0f%%", 1e3 * best, gflops, 100 * gflops / peak);
    }
    printf("   scratch %.1f MiB\n", sdp_conv_scratch_floats(&plan) * 4.0 / (1 << 20));
    free(b.inp), free(b.w), free(b.out), free(b.dout), free(b.dinp), free(b.dw), free(b.scratch);
    sdp_conv_plan_free(&plan);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    const char *which = argc > 3 ? argv[3] : "both";
    sdp_conv_algo only;
    bool both = strcmp(which, "both") == 0;
    SDP_CHECK(threads >= 1 && repeats >= 1 && (both || sdp_conv_algo_parse(which, &only)),
              "usage: bench_conv [threads >= 1] [repeats >= 1] [dnnl|im2col|both]");
    sdp_set_threads(threads);

    double peak = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, repeats);
    printf("threads %d, batch %d, sgemm peak (dnnl, %d^3) %.1f GFLOP/s; %% is of that peak\n",
           threads, BATCH, PEAK_SIZE, peak);
    printf("%-17s %-6s | %-31s | %-31s | %-31s\n", "layer", "algo", "forward", "backward data",
           "backward weights");
    for (size_t k = 0; k < sizeof LAYERS / sizeof LAYERS[0]; k++)
        for (int a = 0; a < 2; a++) {
            sdp_conv_algo algo = a == 0 ? SDP_CONV_DNNL : SDP_CONV_IM2COL;
            if (both || algo == only) bench_layer(&LAYERS[k], algo, repeats, peak);
        }
    double peak_after = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, repeats);
    printf("sgemm peak again at the end: %.1f GFLOP/s (a large change means a busy machine)\n",
           peak_after);
    return 0;
}
