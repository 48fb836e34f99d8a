/* Images/s and model FLOP utilization (MFU) of one worker's full training step of the image
 * models, as `sdp train` runs it without data parallelism: zero grads, forward (batch statistics
 * for the ResNets), backward, optimizer (SGD with momentum for the ResNets, AdamW for the ViTs;
 * batch-norm running statistics are not the optimizer's). The models are built through the
 * generic model interface (sdp/model.h), exactly as the trainer builds them. FLOPs are each
 * model's train_flops_per_example (3 x the forward's 2 per multiply-add of its convolutions and
 * matrix products, attention's score and value products included). MFU is against the dnnl sgemm
 * peak timed in the same run, right before each model's steps, because the machine is shared and
 * its speed drifts. Figures are medians over the timed steps.
 *
 * Usage: bench_vision [threads (0 = all cores)] [steps] [all|MODEL]
 *   small:     ResNet-20 (width 16) on Fashion-MNIST's 1x28x28
 *   cifar:     ResNet-20 (width 16) on CIFAR's 3x32x32
 *   resnet18:  ResNet-18 (width 64) on CIFAR's 3x32x32
 *   vit-small: ViT, 6 layers of width 192 (3 heads), 4x4 patches of Fashion-MNIST (49 + 1 tokens)
 *   vit-tiny:  ViT-Tiny's layers (12 of width 192, 3 heads) on CIFAR in 4x4 patches (64 + 1) */
#include "sdp/backend.h"
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/model.h"
#include "sdp/optim.h"
#include "sdp/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 64, PEAK_SIZE = 2048, PEAK_REPEATS = 3, WARMUP_STEPS = 1, MAX_STEPS = 1000 };

typedef struct {
    const char *name;
    sdp_model_config cfg;
    sdp_opt_kind opt;
    float lr;
} bench_model;

#define RESNET(d, w, ch, size)                                                                     \
    {                                                                                              \
        .arch = "resnet", .depth = d, .channels = w, .in_channels = ch, .image_size = size,        \
        .classes = 10                                                                              \
    }
#define VIT(l, w, h, ch, size)                                                                     \
    {                                                                                              \
        .arch = "vit", .layers = l, .heads = h, .width = w, .in_channels = ch, .image_size = size, \
        .classes = 10, .patch = 4                                                                  \
    }

static const bench_model MODELS[] = {
    {"small", RESNET(20, 16, 1, 28), SDP_OPT_SGD, 0.1f},
    {"cifar", RESNET(20, 16, 3, 32), SDP_OPT_SGD, 0.1f},
    {"resnet18", RESNET(18, 64, 3, 32), SDP_OPT_SGD, 0.1f},
    {"vit-small", VIT(6, 192, 3, 1, 28), SDP_OPT_ADAMW, 1e-3f},
    {"vit-tiny", VIT(12, 192, 3, 3, 32), SDP_OPT_ADAMW, 1e-3f},
};

typedef enum { PH_ZERO, PH_FWD, PH_BWD, PH_OPT, PH_TOTAL, NPHASES } phase;
static const char *PHASE_NAMES[NPHASES] = {"zero", "forward", "backward", "optimizer", "total"};

typedef struct {
    sdp_backend *be; /* the CPU backend the model runs on */
    sdp_model model;
    float *grads;
    long *grad_offset;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    float lr;
    sdp_batch batch;
    float *images;
    int *labels;
    sdp_rng rng;
} trainer;

/* Gradients and optimizer state for every trainable tensor; none for buffers (running
 * statistics), as the trainer lays them out. */
static void init_training_state(trainer *t, const bench_model *bm, sdp_mem *mem) {
    const sdp_layout *L = t->model.layout;
    t->grad_offset = calloc((size_t)L->nparams, sizeof *t->grad_offset);
    t->segs = calloc((size_t)L->nparams, sizeof *t->segs);
    SDP_CHECK(t->grad_offset && t->segs, "out of memory");
    size_t n = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        t->grad_offset[i] = p->buffer ? -1 : (long)n;
        if (p->buffer) continue;
        t->segs[t->nsegs++] = (sdp_opt_segment){p->offset, p->numel, p->decay, n, n};
        n += p->numel;
    }
    t->grads = sdp_alloc(mem, SDP_MEM_GRADS, n * sizeof(float));
    t->model.ops->use_grads(&t->model, t->grads, t->grad_offset, NULL);
    sdp_opt_cfg oc = sdp_opt_defaults(bm->opt);
    sdp_optim_init(&t->opt, &oc, n, mem);
    t->lr = bm->lr;
}

static void trainer_init(trainer *t, const bench_model *bm, sdp_mem *mem) {
    memset(t, 0, sizeof *t);
    sdp_model_config cfg = bm->cfg;
    const sdp_model_family *f = sdp_model_family_find(cfg.arch);
    SDP_ASSERT(f && f->images);
    f->finish_config(&cfg);
    t->be = sdp_backend_cpu(SDP_GEMM_DNNL, mem);
    cfg.backend = t->be;
    f->create(&t->model, &cfg, NULL, BATCH, 1, SDP_MODEL_TRAIN_BARE);
    sdp_layout_init_values(t->model.layout, t->model.params, 1234);
    init_training_state(t, bm, mem);
    const size_t S = (size_t)cfg.image_size;
    t->images = sdp_alloc(mem, SDP_MEM_DATA, BATCH * (size_t)cfg.in_channels * S * S * 4);
    t->labels = sdp_alloc(mem, SDP_MEM_DATA, BATCH * sizeof(int));
    t->batch = (sdp_batch){.B = BATCH, .T = 1, .images = t->images, .labels = t->labels};
    t->rng = sdp_rng_make(42, 0);
}

static void trainer_free(trainer *t, sdp_mem *mem) {
    sdp_free(mem, t->images);
    sdp_free(mem, t->labels);
    sdp_free(mem, t->grads);
    free(t->segs);
    free(t->grad_offset);
    sdp_optim_free(&t->opt, mem);
    t->model.ops->destroy(&t->model);
    sdp_backend_destroy(t->be);
}

/* Fresh random images and labels (drawn outside the timed step). */
static void random_batch(trainer *t, const sdp_model_config *c) {
    const size_t n = (size_t)BATCH * c->in_channels * c->image_size * c->image_size;
    for (size_t i = 0; i < n; i++) t->images[i] = sdp_rng_normal(&t->rng);
    for (int i = 0; i < BATCH; i++)
        t->labels[i] = (int)sdp_rng_below(&t->rng, (uint64_t)c->classes);
}

/* The step of `sdp train` on one worker; returns the mean loss. */
static double timed_step(trainer *t, double ms[NPHASES]) {
    const size_t n = t->opt.n;
    sdp_metrics m;
    double t0 = sdp_bench_now_ms();
    memset(t->grads, 0, n * sizeof(float));
    double t1 = sdp_bench_now_ms();
    t->model.ops->forward(&t->model, &t->batch, true, &m);
    double t2 = sdp_bench_now_ms();
    t->model.ops->backward(&t->model, 1.0f / BATCH);
    double t3 = sdp_bench_now_ms();
    sdp_optim_step(&t->opt, t->model.params, t->grads, t->segs, t->nsegs, t->lr);
    double t4 = sdp_bench_now_ms();
    ms[PH_ZERO] = t1 - t0;
    ms[PH_FWD] = t2 - t1;
    ms[PH_BWD] = t3 - t2;
    ms[PH_OPT] = t4 - t3;
    ms[PH_TOTAL] = t4 - t0;
    return m.loss / m.count;
}

static void describe(const bench_model *bm, size_t trainable) {
    const sdp_model_config *c = &bm->cfg;
    if (!strcmp(c->arch, "resnet"))
        printf("\n%s: ResNet depth %d, width %d", bm->name, c->depth, c->channels);
    else
        printf("\n%s: ViT %d layers, width %d, %d heads, %dx%d patches", bm->name, c->layers,
               c->width, c->heads, c->patch, c->patch);
    printf(", %dx%dx%d images, %d classes, B=%d, %.3fM trainable params\n", c->in_channels,
           c->image_size, c->image_size, c->classes, BATCH, 1e-6 * (double)trainable);
}

static void bench_one(const bench_model *bm, int threads, int steps) {
    sdp_mem mem = {0};
    trainer t;
    trainer_init(&t, bm, &mem);
    describe(bm, t.opt.n);
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
        random_batch(&t, &bm->cfg);
        loss = timed_step(&t, ms);
        if (s >= 0)
            for (int ph = 0; ph < NPHASES; ph++) samples[ph][s] = ms[ph];
    }
    double med[NPHASES];
    for (int ph = 0; ph < NPHASES; ph++) {
        med[ph] = sdp_bench_median(samples[ph], steps);
        free(samples[ph]);
    }
    const double flops = t.model.ops->train_flops_per_example(&t.model) * BATCH;
    const double img_s = BATCH / (med[PH_TOTAL] * 1e-3);
    const double gflops = flops / (med[PH_TOTAL] * 1e-3) * 1e-9;
    printf("  %d steps after %d warm-up, last loss %.3f, %.1f GFLOP/step\n", steps, WARMUP_STEPS,
           loss, flops * 1e-9);
    printf("  median ms:");
    for (int ph = 0; ph < NPHASES; ph++)
        printf(" %s %.1f%s", PHASE_NAMES[ph], med[ph], ph < NPHASES - 1 ? "," : "\n");
    printf("  RESULT %-9s threads %d: %7.1f images/s  %6.1f GFLOP/s  MFU %5.1f%% of %.1f\n",
           bm->name, threads, img_s, gflops, 100.0 * gflops / peak, peak);
    fflush(stdout);
    trainer_free(&t, &mem);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int steps = argc > 2 ? atoi(argv[2]) : 3;
    const char *only = argc > 3 ? argv[3] : "all";
    SDP_CHECK(threads >= 0 && steps >= 1 && steps <= MAX_STEPS,
              "usage: bench_vision [threads (0 = all cores)] [steps 1..%d] "
              "[all|small|cifar|resnet18|vit-small|vit-tiny]",
              MAX_STEPS);
    if (threads == 0) threads = omp_get_num_procs();
    sdp_set_threads(threads);
    int ran = 0;
    for (size_t i = 0; i < sizeof MODELS / sizeof *MODELS; i++) {
        if (strcmp(only, "all") != 0 && strcmp(only, MODELS[i].name) != 0) continue;
        bench_one(&MODELS[i], threads, steps);
        ran++;
    }
    SDP_CHECK(ran > 0, "unknown model '%s': use all, small, cifar, resnet18, vit-small or vit-tiny",
              only);
    return 0;
}
