/* Tokens/s and model FLOP utilization (MFU) of a full training step as `sdp train` runs it (the
 * trainer of src/train, one worker with no communication): zero grads, forward, backward, the
 * global-norm clip and AdamW, for a GPT-2 124M shape and a small byte-level model, on random
 * tokens. MFU is measured against the sgemm peak of the provider in use, timed in the same run
 * right before each model's steps, because the machine is shared and its speed drifts. Every
 * figure is a median over the timed steps. With `layer` as the last argument the trainer
 * recomputes each layer's activations in the backward (--recompute layer): the backward then
 * includes the recomputed forwards, and the FLOPs and MFU stay the model's (they count no
 * recomputation).
 *
 * Usage: bench_train [threads (0 = all cores)] [steps] [dnnl|openblas] [all|gpt2|bytes]
 *                    [none|layer] */
#include "train/trainer.h"

#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/rng.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PEAK_SIZE = 2048, PEAK_REPEATS = 5, WARMUP_STEPS = 2, MAX_STEPS = 1000 };

typedef struct {
    const char *name;
    int layers, heads, width, seq_len, vocab, batch;
} bench_model;

/* Wall-clock milliseconds of each part of one step (trainer_step_result). */
typedef enum { PH_FWD, PH_BWD, PH_NORM, PH_OPT, PH_TOTAL, NPHASES } phase;
static const char *PHASE_NAMES[NPHASES] = {"forward", "backward", "norm", "clip+adamw", "total"};

/* Random tokens, drawn by the trainer's feed outside the timed parts. */
typedef struct {
    sdp_rng rng;
    int vocab;
    int *tokens, *targets;
    int B, T;
} feed;

static void next_batch(void *ctx, sdp_batch *b) {
    feed *f = ctx;
    for (int i = 0; i < f->B * f->T; i++) {
        f->tokens[i] = (int)sdp_rng_below(&f->rng, (uint64_t)f->vocab);
        f->targets[i] = (int)sdp_rng_below(&f->rng, (uint64_t)f->vocab);
    }
    *b = (sdp_batch){.B = f->B, .T = f->T, .tokens = f->tokens, .targets = f->targets};
}

static void set(train_opts *o, const char *name, const char *value) {
    char err[256];
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++)
        if (!strcmp(s->name, name)) {
            SDP_CHECK(train_opts_set(s, o, value, err, sizeof err), "--%s %s: %s", name, value,
                      err);
            return;
        }
    sdp_fatal("no option --%s", name);
}

static void set_int(train_opts *o, const char *name, int value) {
    char v[32];
    snprintf(v, sizeof v, "%d", value);
    set(o, name, v);
}

/* A one-worker trainer of the model, simulating rank 0 of 1 (no communication). */
static void build(trainer *t, feed *f, const bench_model *bm, sdp_gemm_provider gemm,
                  const char *recompute, const sdp_world *world) {
    memset(t, 0, sizeof *t);
    train_opts *o = &t->o;
    train_opts_set_defaults(TRAIN_OPTS, o);
    set_int(o, "layers", bm->layers);
    set_int(o, "heads", bm->heads);
    set_int(o, "width", bm->width);
    set_int(o, "seq-len", bm->seq_len);
    set_int(o, "vocab", bm->vocab);
    set_int(o, "batch", bm->batch);
    set(o, "gemm", sdp_gemm_provider_name(gemm));
    set(o, "recompute", recompute);
    set_int(o, "sim-world", 1);
    set_int(o, "steps", MAX_STEPS + WARMUP_STEPS);
    set_int(o, "warmup", 0);
    t->world = *world;
    f->rng = sdp_rng_make(42, 0);
    f->vocab = bm->vocab;
    f->B = bm->batch;
    f->T = bm->seq_len;
    f->tokens = malloc(sizeof(int) * (size_t)(f->B * f->T));
    f->targets = malloc(sizeof(int) * (size_t)(f->B * f->T));
    SDP_CHECK(f->tokens && f->targets, "out of memory");
    t->next_batch = next_batch;
    t->next_batch_ctx = f;
    trainer_build(t);
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

/* Warm-up steps, then `steps` timed ones: the median of each part and the fastest total. */
static double run_steps(trainer *t, int steps, double med[NPHASES], double *best_total) {
    double *samples[NPHASES], loss = 0;
    for (int ph = 0; ph < NPHASES; ph++) {
        samples[ph] = calloc((size_t)steps, sizeof(double));
        SDP_CHECK(samples[ph], "out of memory");
    }
    for (int s = -WARMUP_STEPS; s < steps; s++) {
        const trainer_step_result r = trainer_step(t);
        loss = r.loss;
        const double ms[NPHASES] = {r.ms_forward, r.ms_backward, r.ms_sync, r.ms_update,
                                    r.ms_total};
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

static bench_result bench_one(const bench_model *bm, sdp_gemm_provider gemm, const char *recompute,
                              int threads, int steps, const sdp_world *world) {
    trainer t;
    feed f;
    build(&t, &f, bm, gemm, recompute, world);
    const sdp_model_config *c = &t.cfg;
    const int N = bm->batch * bm->seq_len;
    const int used = gemm == SDP_GEMM_DNNL ? 0 : 1;
    printf("\n%s: %s, %d layers, %d heads, width %d, vocab %d, T=%d, B=%d, %.1fM params, "
           "recompute %s\n",
           bm->name, c->arch, c->layers, c->heads, c->width, c->vocab, bm->seq_len, bm->batch,
           1e-6 * (double)t.model.layout->numel, recompute);
    sdp_bench_print_memory(&t.mem);

    /* The yardstick is timed right before the steps it judges, and again after them: on a
     * shared machine a large change means the figures are not to be trusted. */
    double peak[2], after[2];
    measure_peaks(peak);
    printf("  sgemm peak (%d^3, best of %d, %d threads): dnnl %.1f GFLOP/s, openblas %.1f "
           "GFLOP/s\n",
           PEAK_SIZE, PEAK_REPEATS, threads, peak[0], peak[1]);
    fflush(stdout);
    bench_result r = {bm->name, gemm, .peak = peak[used]};
    const double flops0 = t.flops_done;
    double loss = run_steps(&t, steps, r.med, &r.best_total);
    measure_peaks(after);

    const double flops = (t.flops_done - flops0) / (steps + WARMUP_STEPS); /* per step */
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
    trainer_free(&t);
    free(f.tokens);
    free(f.targets);
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

/* GPT-2 124M's layers and vocabulary at a context of T = 64 (1024 would not fit this machine's
 * time), and the byte-level model of the README's runs. */
static const bench_model MODELS[] = {
    {"gpt2", 12, 12, 768, 64, 50257, 4},
    {"bytes", 6, 6, 384, 256, 256, 8},
};

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int steps = argc > 2 ? atoi(argv[2]) : 5;
    sdp_gemm_provider gemm = SDP_GEMM_DNNL;
    const char *only = argc > 4 ? argv[4] : "all";
    const char *recompute = argc > 5 ? argv[5] : "none";
    SDP_CHECK(threads >= 0 && steps >= 1 && steps <= MAX_STEPS &&
                  (argc <= 3 || sdp_gemm_provider_parse(argv[3], &gemm)) &&
                  (!strcmp(recompute, "none") || !strcmp(recompute, "layer")),
              "usage: bench_train [threads (0 = all cores)] [steps 1..%d] [dnnl|openblas] "
              "[all|gpt2|bytes] [none|layer]",
              MAX_STEPS);
    if (threads == 0) threads = omp_get_num_procs();
    sdp_world world;
    sdp_world_init(&world, &argc, &argv, threads);
    sdp_set_threads(world.threads);
    enum { NMODELS = sizeof MODELS / sizeof *MODELS };
    bench_result results[NMODELS];
    int ran = 0;
    for (int i = 0; i < NMODELS; i++)
        if (strcmp(only, "all") == 0 || strcmp(only, MODELS[i].name) == 0)
            results[ran++] = bench_one(&MODELS[i], gemm, recompute, threads, steps, &world);
    SDP_CHECK(ran > 0, "unknown model '%s': use all, gpt2 or bytes", only);
    print_table(results, ran, threads);
    sdp_world_finalize();
    return 0;
}
