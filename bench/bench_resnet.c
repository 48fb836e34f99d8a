/* Images/s and model FLOP utilization (MFU) of one worker's full training step of the CIFAR
 * ResNets: zero grads, forward with batch statistics, backward, SGD with momentum (weight decay
 * on conv and fc weights; batch-norm running statistics are not updated by the optimizer), as
 * `sdp train` runs it without data parallelism. FLOPs are 3 x the forward's 2 per multiply-add of
 * the convolutions and the classifier. MFU is against the dnnl sgemm peak timed in the same run,
 * right before each model's steps, because the machine is shared and its speed drifts. Figures
 * are medians over the timed steps.
 *
 * Usage: bench_resnet [threads (0 = all cores)] [steps] [dnnl|im2col] [all|small|cifar|resnet18]
 *   small:    ResNet-20 (width 16) on Fashion-MNIST's 1x28x28
 *   cifar:    ResNet-20 (width 16) on CIFAR's 3x32x32
 *   resnet18: ResNet-18 (width 64) on CIFAR's 3x32x32 */
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/optim.h"
#include "sdp/resnet.h"
#include "sdp/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64, PEAK_SIZE = 2048, PEAK_REPEATS = 3, WARMUP_STEPS = 1, MAX_STEPS = 1000 };

static const float LR = 0.1f;

typedef struct {
    const char *name;
    sdp_resnet_config cfg;
} bench_model;

static const bench_model MODELS[] = {
    {"small", {20, 16, 1, 28, 10}},
    {"cifar", {20, 16, 3, 32, 10}},
    {"resnet18", {18, 64, 3, 32, 10}},
};

typedef enum { PH_ZERO, PH_FWD, PH_BWD, PH_OPT, PH_TOTAL, NPHASES } phase;
static const char *PHASE_NAMES[NPHASES] = {"zero", "forward", "backward", "sgd", "total"};

typedef struct {
    sdp_resnet *model;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    float *images;
    int *labels;
    sdp_rng rng;
} trainer;

/* One segment per trainable tensor; buffers (running statistics) are not the optimizer's. */
static void init_optimizer(trainer *t, sdp_mem *mem) {
    const sdp_layout *L = sdp_resnet_layout(t->model);
    t->segs = calloc((size_t)L->nparams, sizeof *t->segs);
    SDP_CHECK(t->segs, "out of memory");
    size_t state = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        if (p->buffer) continue;
        t->segs[t->nsegs++] = (sdp_opt_segment){p->offset, p->numel, p->decay, p->offset, state};
        state += p->numel;
    }
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_SGD); /* momentum 0.9, weight decay 5e-4 */
    sdp_optim_init(&t->opt, &oc, state, mem);
}

static void trainer_init(trainer *t, const bench_model *bm, sdp_conv_algo algo, sdp_mem *mem) {
    memset(t, 0, sizeof *t);
    t->model = sdp_resnet_create(&bm->cfg, NULL, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, algo, mem);
    sdp_layout_init_values(sdp_resnet_layout(t->model), sdp_resnet_params(t->model), 1234);
    init_optimizer(t, mem);
    const size_t S = (size_t)bm->cfg.image_size;
    t->images = sdp_alloc(mem, SDP_MEM_DATA, BATCH * (size_t)bm->cfg.in_channels * S * S * 4);
    t->labels = sdp_alloc(mem, SDP_MEM_DATA, BATCH * sizeof(int));
    t->rng = sdp_rng_make(42, 0);
}

static void trainer_free(trainer *t, sdp_mem *mem) {
    sdp_free(mem, t->images);
    sdp_free(mem, t->labels);
    free(t->segs);
    sdp_optim_free(&t->opt, mem);
    sdp_resnet_destroy(t->model);
}

/* Fresh random images and labels (drawn outside the timed step). */
static void random_batch(trainer *t, const sdp_resnet_config *c) {
    const size_t n = (size_t)BATCH * c->in_channels * c->image_size * c->image_size;
    for (size_t i = 0; i < n; i++) t->images[i] = sdp_rng_normal(&t->rng);
    for (int i = 0; i < BATCH; i++)
        t->labels[i] = (int)sdp_rng_below(&t->rng, (uint64_t)c->classes);
}

/* The step of `sdp train` on one worker; returns the mean loss. */
static double timed_step(trainer *t, double ms[NPHASES]) {
    const size_t n = sdp_resnet_layout(t->model)->numel;
    float *grads = sdp_resnet_grads(t->model), *params = sdp_resnet_params(t->model);
    sdp_metrics m;
    double t0 = sdp_bench_now_ms();
    memset(grads, 0, n * sizeof(float));
    double t1 = sdp_bench_now_ms();
    sdp_resnet_forward(t->model, t->images, t->labels, BATCH, true, &m);
    double t2 = sdp_bench_now_ms();
    sdp_resnet_backward(t->model, 1.0f / BATCH, NULL, NULL);
    double t3 = sdp_bench_now_ms();
    sdp_optim_step(&t->opt, params, grads, t->segs, t->nsegs, LR);
    double t4 = sdp_bench_now_ms();
    ms[PH_ZERO] = t1 - t0;
    ms[PH_FWD] = t2 - t1;
    ms[PH_BWD] = t3 - t2;
    ms[PH_OPT] = t4 - t3;
    ms[PH_TOTAL] = t4 - t0;
    return m.loss / m.count;
}

static void bench_one(const bench_model *bm, sdp_conv_algo algo, int threads, int steps) {
    sdp_mem mem = {0};
    trainer t;
    trainer_init(&t, bm, algo, &mem);
    const sdp_resnet_config *c = &bm->cfg;
    size_t trainable = 0;
    const sdp_layout *L = sdp_resnet_layout(t.model);
    for (int i = 0; i < L->nparams; i++) trainable += L->params[i].buffer ? 0 : L->params[i].numel;
    printf("\n%s: depth %d, width %d, %dx%dx%d images, %d classes, B=%d, %.3fM trainable params\n",
           bm->name, c->depth, c->width, c->in_channels, c->image_size, c->image_size, c->classes,
           BATCH, 1e-6 * (double)trainable);
    sdp_bench_print_memory(&mem);
    const double peak = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, PEAK_REPEATS);
    printf("  sgemm peak (dnnl, %d^3, best of %d, %d threads): %.1f GFLOP/s\n", PEAK_SIZE,
           PEAK_REPEATS, threads, peak);
    fflush(stdout);

    double ms[NPHASES], *samples[NPHASES], loss = 0;
    for (int ph = 0; ph < NPHASES; ph++) {
        samples[ph] = calloc((size_t)steps, sizeof(double));
        SDP_CHECK(samples[ph], "out of memory");
    }
    for (int s = -WARMUP_STEPS; s < steps; s++) {
        random_batch(&t, c);
        loss = timed_step(&t, ms);
        if (s >= 0)
            for (int ph = 0; ph < NPHASES; ph++) samples[ph][s] = ms[ph];
    }
    double med[NPHASES];
    for (int ph = 0; ph < NPHASES; ph++) {
        med[ph] = sdp_bench_median(samples[ph], steps);
        free(samples[ph]);
    }
    const double flops = sdp_resnet_train_flops_per_image(t.model) * BATCH;
    const double img_s = BATCH / (med[PH_TOTAL] * 1e-3);
    const double gflops = flops / (med[PH_TOTAL] * 1e-3) * 1e-9;
    printf("  %d steps after %d warm-up, conv %s, last loss %.3f, %.1f GFLOP/step\n", steps,
           WARMUP_STEPS, sdp_conv_algo_name(algo), loss, flops * 1e-9);
    printf("  median ms:");
    for (int ph = 0; ph < NPHASES; ph++)
        printf(" %s %.1f%s", PHASE_NAMES[ph], med[ph], ph < NPHASES - 1 ? "," : "\n");
    printf("  RESULT %-8s %-6s threads %d: %7.1f images/s  %6.1f GFLOP/s  MFU %5.1f%% of %.1f\n",
           bm->name, sdp_conv_algo_name(algo), threads, img_s, gflops, 100.0 * gflops / peak, peak);
    fflush(stdout);
    trainer_free(&t, &mem);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int steps = argc > 2 ? atoi(argv[2]) : 3;
    sdp_conv_algo algo = SDP_CONV_DNNL;
    const char *only = argc > 4 ? argv[4] : "all";
    SDP_CHECK(threads >= 0 && steps >= 1 && steps <= MAX_STEPS &&
                  (argc <= 3 || sdp_conv_algo_parse(argv[3], &algo)),
              "usage: bench_resnet [threads (0 = all cores)] [steps 1..%d] [dnnl|im2col] "
              "[all|small|cifar|resnet18]",
              MAX_STEPS);
    if (threads == 0) threads = omp_get_num_procs();
    sdp_set_threads(threads);
    int ran = 0;
    for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS; i++) {
        if (strcmp(only, "all") != 0 && strcmp(only, MODELS[i].name) != 0) continue;
        bench_one(&MODELS[i], algo, threads, steps);
        ran++;
    }
    SDP_CHECK(ran > 0, "unknown model '%s': use all, small, cifar or resnet18", only);
    return 0;
}
