/* Tokens/s and model FLOP utilization (MFU) of a full training step: zero grads, forward,
 * backward, global-norm clip and AdamW update, as `sdp train` runs it, for a GPT-2 124M shape
 * and a small byte-level model. MFU is measured against the sgemm peak of the provider in use,
 * timed in the same run right before each model's steps, because the machine is shared and its
 * speed drifts. Every figure is a median over the timed steps.
 *
 * Usage: bench_train [threads (0 = all cores)] [steps] [dnnl|openblas] [all|gpt2|bytes] */
#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/optim.h"
#include "sdp/rng.h"
#include "sdp/transformer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PEAK_SIZE = 2048, PEAK_REPEATS = 5, WARMUP_STEPS = 2, MAX_STEPS = 1000 };

static const float LR = 3e-4f, CLIP = 1.0f;

typedef struct {
    const char *name;
    sdp_tf_config cfg;
    int B, T;
} bench_model;

/* Wall-clock milliseconds of each phase of one step. */
typedef enum { PH_ZERO, PH_FWD, PH_BWD, PH_OPT, PH_TOTAL, NPHASES } phase;
static const char *PHASE_NAMES[NPHASES] = {"zero", "forward", "backward", "clip+adamw", "total"};

typedef struct {
    sdp_tf model;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    int *inputs, *targets;
    sdp_rng rng;
    sdp_backend *be;
} trainer;

/* One segment per tensor, decaying as the layout says (what `sdp train` does by default). */
static void build_segments(trainer *t) {
    const sdp_layout *L = &t->model.layout;
    t->segs = calloc((size_t)L->nparams, sizeof *t->segs);
    SDP_CHECK(t->segs, "out of memory");
    for (int i = 0; i < L->nparams; i++)
        t->segs[i] = (sdp_opt_segment){L->params[i].offset, L->params[i].numel, L->params[i].decay,
                                       L->params[i].offset, L->params[i].offset};
    t->nsegs = L->nparams;
}

static void trainer_init(trainer *t, const bench_model *bm, sdp_gemm_provider gemm, sdp_mem *mem) {
    memset(t, 0, sizeof *t);
    t->be = sdp_backend_cpu(gemm, mem);
    sdp_tf_create(&t->model, &bm->cfg, NULL, bm->B, bm->T, SDP_MODEL_TRAIN, t->be);
    sdp_layout_init_values(&t->model.layout, t->model.params, 1234);
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    sdp_optim_init(&t->opt, &oc, t->model.layout.numel, mem);
    build_segments(t);
    size_t N = (size_t)bm->B * bm->T;
    t->inputs = sdp_alloc(mem, SDP_MEM_DATA, N * sizeof(int));
    t->targets = sdp_alloc(mem, SDP_MEM_DATA, N * sizeof(int));
    t->rng = sdp_rng_make(42, 0);
}

static void trainer_free(trainer *t, sdp_mem *mem) {
    sdp_free(mem, t->inputs);
    sdp_free(mem, t->targets);
    free(t->segs);
    sdp_optim_free(&t->opt, mem);
    sdp_tf_destroy(&t->model);
    sdp_backend_destroy(t->be);
}

/* A fresh batch of uniformly random tokens (drawn outside the timed step). */
static void random_batch(trainer *t, int n) {
    const uint64_t V = (uint64_t)t->model.cfg.vocab;
    for (int i = 0; i < n; i++) {
        t->inputs[i] = (int)sdp_rng_below(&t->rng, V);
        t->targets[i] = (int)sdp_rng_below(&t->rng, V);
    }
}

/* The step of src/cli/train.c without data parallelism; returns the mean loss. */
static double timed_step(trainer *t, int B, int T, double ms[NPHASES]) {
    sdp_tf *m = &t->model;
    const size_t n = m->layout.numel;
    double t0 = sdp_bench_now_ms();
    memset(m->grads, 0, n * sizeof(float));
    double t1 = sdp_bench_now_ms();
    double loss = sdp_tf_forward(m, t->inputs, t->targets, B, T);
    double t2 = sdp_bench_now_ms();
    sdp_tf_backward(m, 1.0f / (float)(B * T));
    double t3 = sdp_bench_now_ms();
    double norm = sqrt(sdp_sumsq(m->grads, n));
    sdp_scale(m->grads, n, sdp_clip_scale(norm, CLIP));
    sdp_optim_step(&t->opt, m->params, m->grads, t->segs, t->nsegs, LR);
    double t4 = sdp_bench_now_ms();
    ms[PH_ZERO] = t1 - t0;
    ms[PH_FWD] = t2 - t1;
    ms[PH_BWD] = t3 - t2;
    ms[PH_OPT] = t4 - t3;
    ms[PH_TOTAL] = t4 - t0;
    return loss / (double)(B * T);
}

/* Best GFLOP/s of each provider on a square product; [0] dnnl, [1] openblas. */
static void measure_peaks(double peak[2]) {
    peak[0] = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, PEAK_REPEATS);
    peak[1] = sdp_measure_sgemm_peak(SDP_GEMM_OPENBLAS, PEAK_SIZE, PEAK_REPEATS);
}

typedef struct {
    const char *model;
    sdp_gemm_provider gemm;
    double tok_s, gflops, peak, mfu;
    double med[NPHASES], best_total;
} bench_result;

/* Warm-up steps, then `steps` timed ones: the median of each phase and the fastest total. */
static double run_steps(trainer *t, const bench_model *bm, int steps, double med[NPHASES],
                        double *best_total) {
    double ms[NPHASES], *samples[NPHASES], loss = 0;
    for (int ph = 0; ph < NPHASES; ph++) {
        samples[ph] = calloc((size_t)steps, sizeof(double));
        SDP_CHECK(samples[ph], "out of memory");
    }
    for (int s = -WARMUP_STEPS; s < steps; s++) {
        random_batch(t, bm->B * bm->T);
        loss = timed_step(t, bm->B, bm->T, ms);
        if (s >= 0)
            for (int ph = 0; ph < NPHASES; ph++) samples[ph][s] = ms[ph];
    }
    for (int ph = 0; ph < NPHASES; ph++) {
        med[ph] = sdp_bench_median(samples[ph], steps);
        if (ph == PH_TOTAL) *best_total = samples[ph][0]; /* sorted by sdp_bench_median() */
        free(samples[ph]);
    }
    return loss;
}

static bench_result bench_one(const bench_model *bm, sdp_gemm_provider gemm, int threads,
                              int steps) {
    sdp_mem mem = {0};
    trainer t;
    trainer_init(&t, bm, gemm, &mem);
    const sdp_tf_config *c = &t.model.cfg;
    const int N = bm->B * bm->T;
    const int used = gemm == SDP_GEMM_DNNL ? 0 : 1;
    printf("\n%s: %s, %d layers, %d heads, width %d, vocab %d (padded %d), T=%d, B=%d, "
           "%.1fM params\n",
           bm->name, sdp_tf_style_name(c->style), c->n_layer, c->n_head, c->d_model, c->vocab,
           c->vocab_padded, bm->T, bm->B, 1e-6 * (double)t.model.layout.numel);
    sdp_bench_print_memory(&mem);

    /* The yardstick is timed right before the steps it judges, and again after them: on a
     * shared machine a large change means the figures are not to be trusted. */
    double peak[2], after[2];
    measure_peaks(peak);
    printf("  sgemm peak (%d^3, best of %d, %d threads): dnnl %.1f GFLOP/s, openblas %.1f "
           "GFLOP/s\n",
           PEAK_SIZE, PEAK_REPEATS, threads, peak[0], peak[1]);
    fflush(stdout);
    bench_result r = {bm->name, gemm, .peak = peak[used]};
    double loss = run_steps(&t, bm, steps, r.med, &r.best_total);
    measure_peaks(after);

    double flops = sdp_tf_train_flops_per_token(&t.model, bm->T) * N;
    r.tok_s = N / (r.med[PH_TOTAL] * 1e-3);
    r.gflops = flops / (r.med[PH_TOTAL] * 1e-3) * 1e-9;
    r.mfu = 100.0 * r.gflops / r.peak;
    printf("  %d steps after %d warm-up, gemm %s, last loss %.3f, %.1f GFLOP/step\n", steps,
           WARMUP_STEPS, sdp_gemm_provider_name(gemm), loss, flops * 1e-9);
    printf("  median ms:");
    for (int ph = 0; ph < NPHASES; ph++)
        printf(" %s %.1f%s", PHASE_NAMES[ph], r.med[ph], ph < NPHASES - 1 ? "," : "");
    printf(" (fastest step %.1f)\n", r.best_total);
    double drift = after[used] / peak[used] - 1.0;
    printf("  %s peak after the steps %.1f GFLOP/s (%+.0f%%)%s\n", sdp_gemm_provider_name(gemm),
           after[used], 100.0 * drift,
           drift > 0.1 || drift < -0.1 ? ": the machine's speed changed, run again" : "");
    fflush(stdout);
    trainer_free(&t, &mem);
    return r;
}

static void print_table(const bench_result *r, int n, int threads) {
    printf("\n%-6s %-8s %7s %9s %8s %7s %8s | median ms: %7s %7s %8s %10s\n", "model", "gemm",
           "threads", "tokens/s", "GFLOP/s", "MFU", "peak", "step", "forward", "backward",
           "clip+adamw");
    for (int i = 0; i < n; i++)
        printf("%-6s %-8s %7d %9.0f %8.1f %6.1f%% %8.1f | %18.1f %7.1f %8.1f %10.1f\n", r[i].model,
               sdp_gemm_provider_name(r[i].gemm), threads, r[i].tok_s, r[i].gflops, r[i].mfu,
               r[i].peak, r[i].med[PH_TOTAL], r[i].med[PH_FWD], r[i].med[PH_BWD], r[i].med[PH_OPT]);
}

static const bench_model MODELS[] = {
    {"gpt2", {SDP_STYLE_GPT, 12, 12, 768, 0, 1024, 50257, 50304, 0, 0, 0, 0, 0}, 4, 64},
    {"bytes", {SDP_STYLE_GPT, 6, 6, 384, 0, 256, 256, 0, 0, 0, 0, 0, 0}, 8, 256},
};

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int steps = argc > 2 ? atoi(argv[2]) : 5;
    sdp_gemm_provider gemm = SDP_GEMM_DNNL;
    const char *only = argc > 4 ? argv[4] : "all";
    SDP_CHECK(threads >= 0 && steps >= 1 && steps <= MAX_STEPS &&
                  (argc <= 3 || sdp_gemm_provider_parse(argv[3], &gemm)),
              "usage: bench_train [threads (0 = all cores)] [steps 1..%d] [dnnl|openblas] "
              "[all|gpt2|bytes]",
              MAX_STEPS);
    if (threads == 0) threads = omp_get_num_procs();
    sdp_set_threads(threads);
    enum { NMODELS = sizeof MODELS / sizeof *MODELS };
    bench_result results[NMODELS];
    int ran = 0;
    for (int i = 0; i < NMODELS; i++)
        if (strcmp(only, "all") == 0 || strcmp(only, MODELS[i].name) == 0)
            results[ran++] = bench_one(&MODELS[i], gemm, threads, steps);
    SDP_CHECK(ran > 0, "unknown model '%s': use all, gpt2 or bytes", only);
    print_table(results, ran, threads);
    return 0;
}
