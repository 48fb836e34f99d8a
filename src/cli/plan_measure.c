/* sdp plan --measure-compute: each worker's forward and backward, timed (plan_measure.h). */
#include "plan_measure.h"

#include "train/trainer.h"

#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP_STEPS = 2 };

/* Random batches of the run's shape, drawn outside the timed parts: the kernels' time does not
 * depend on the values (no sparsity is exploited), and no data file is needed. */
typedef struct {
    sdp_rng rng;
    const trainer *t;
    int *tokens, *targets, *labels;
    float *images;
} random_feed;

static void next_batch(void *ctx, sdp_batch *b) {
    random_feed *f = ctx;
    const batch_source *s = &f->t->data;
    const int n = s->B * s->T;
    if (s->images) {
        const size_t px = (size_t)s->B * s->train_img.C * s->train_img.H * s->train_img.W;
        for (size_t i = 0; i < px; i++) f->images[i] = 2 * sdp_rng_uniform(&f->rng) - 1;
        for (int i = 0; i < s->B; i++)
            f->labels[i] = (int)sdp_rng_below(&f->rng, (uint64_t)s->train_img.nclasses);
        *b = (sdp_batch){.B = s->B, .T = 1, .images = f->images, .labels = f->labels};
        return;
    }
    const uint64_t vocab = (uint64_t)train_batches_vocab(s);
    for (int i = 0; i < n; i++) {
        f->tokens[i] = (int)sdp_rng_below(&f->rng, vocab);
        f->targets[i] = (int)sdp_rng_below(&f->rng, vocab);
    }
    *b = (sdp_batch){.B = s->B, .T = s->T, .tokens = f->tokens, .targets = f->targets};
}

static bool is_given(const char *const *given, const char *name) {
    for (; *given; given++)
        if (!strcmp(*given, name)) return true;
    return false;
}

static size_t field_size(opt_type type) {
    switch (type) {
    case OPT_INT:
        return sizeof(int);
    case OPT_FLOAT:
        return sizeof(double);
    case OPT_STR:
        return OPT_STR_MAX;
    case OPT_FLAG:
        return sizeof(bool);
    }
    return 0;
}

/* sdp train's options for worker `rank` of the simulated job: its defaults, then what the plan
 * was given. One micro-batch per step, no ZeRO (neither changes a micro-batch's compute). */
static void worker_opts(const plan_measure_request *req, int rank, bool ddp, train_opts *o) {
    train_opts_set_defaults(TRAIN_OPTS, o);
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++)
        if (is_given(req->given, s->name))
            memcpy((char *)o + s->offset, (const char *)req->plan + s->offset, field_size(s->type));
    if (o->arch.vocab == 0) o->arch.vocab = 256; /* as sdp plan counts a token model with none */
    if (ddp) snprintf(o->sdp_mask, sizeof o->sdp_mask, "none");
    o->sim_world = req->world;
    o->sim_rank = rank;
    o->grad_accum = 1;
    o->zero = 0;
    o->threads = req->threads;
    o->steps = WARMUP_STEPS + req->steps;
    o->warmup = 0;
}

/* What a worker's compute depends on: each of its model's tensors, with how much of it the worker
 * trains (-1: none, SDP_GRAD_SLICED: part, else all). Workers alike in it run the same kernels
 * on the same shapes, so one timing serves them all (and noise cannot tell them apart). */
typedef struct {
    int n;
    long *v; /* n pairs of numel and ownership */
} compute_key;

static compute_key key_of(const trainer *t) {
    const sdp_layout *l = t->model.layout;
    compute_key k = {2 * l->nparams, sdp_xmalloc(sizeof(long) * 2 * (size_t)l->nparams, "a key")};
    for (int i = 0; i < l->nparams; i++) {
        const long g = t->grad_offset[i];
        k.v[2 * i] = (long)l->params[i].numel;
        k.v[2 * i + 1] = g < 0 ? -1 : g == SDP_GRAD_SLICED ? SDP_GRAD_SLICED : 0;
    }
    return k;
}

static bool same_key(const compute_key *a, const compute_key *b) {
    return a->n == b->n && memcmp(a->v, b->v, sizeof(long) * (size_t)a->n) == 0;
}

/* Seconds of one micro-batch's forward and backward. */
typedef struct {
    double forward_s, backward_s;
} compute_time;

/* Warm-up steps, then the median of the timed ones' forward and backward. */
static compute_time time_steps(trainer *t, int steps) {
    const batch_source *s = &t->data;
    random_feed *f = t->next_batch_ctx;
    const size_t n = (size_t)s->B * (size_t)s->T;
    const size_t px =
        s->images ? (size_t)s->B * s->train_img.C * s->train_img.H * s->train_img.W : 1;
    f->tokens = sdp_xmalloc(sizeof(int) * n, "a timing batch");
    f->targets = sdp_xmalloc(sizeof(int) * n, "a timing batch");
    f->labels = sdp_xmalloc(sizeof(int) * (size_t)s->B, "a timing batch");
    f->images = sdp_xmalloc(sizeof(float) * px, "a timing batch");
    double *fwd = sdp_xmalloc(sizeof(double) * (size_t)steps, "the timed steps");
    double *bwd = sdp_xmalloc(sizeof(double) * (size_t)steps, "the timed steps");
    for (int k = -WARMUP_STEPS; k < steps; k++) {
        const trainer_step_result r = trainer_step(t);
        if (k < 0) continue;
        fwd[k] = r.ms_forward * 1e-3;
        bwd[k] = r.ms_backward * 1e-3;
    }
    const compute_time c = {sdp_bench_median(fwd, steps), sdp_bench_median(bwd, steps)};
    free(fwd);
    free(bwd);
    free(f->tokens);
    free(f->targets);
    free(f->labels);
    free(f->images);
    return c;
}

/* Timings so far, by what they depend on. */
typedef struct {
    int n;
    compute_key *keys;
    compute_time *times;
} timed_list;

/* Worker `rank`'s time: a timing already made of a worker alike, else its own. */
static compute_time time_worker(const plan_measure_request *req, const sdp_world *world, int rank,
                                bool ddp, timed_list *done) {
    trainer t;
    memset(&t, 0, sizeof t);
    worker_opts(req, rank, ddp, &t.o);
    t.world = *world;
    random_feed f = {.rng = sdp_rng_make(42, (uint64_t)rank), .t = &t};
    t.next_batch = next_batch;
    t.next_batch_ctx = &f;
    trainer_build(&t);
    compute_key k = key_of(&t);
    for (int i = 0; i < done->n; i++)
        if (same_key(&done->keys[i], &k)) {
            free(k.v);
            trainer_free(&t);
            return done->times[i];
        }
    char who[64];
    if (ddp)
        snprintf(who, sizeof who, "a data-parallel worker");
    else
        snprintf(who, sizeof who, "worker %d of %d", rank, req->world);
    fprintf(stderr, "sdp plan: timing %s: %d step%s after %d warm-up, %d thread%s\n", who,
            req->steps, req->steps == 1 ? "" : "s", WARMUP_STEPS, req->threads,
            req->threads == 1 ? "" : "s");
    const compute_time c = time_steps(&t, req->steps);
    trainer_free(&t);
    done->keys[done->n] = k;
    done->times[done->n++] = c;
    return c;
}

void plan_measure_compute(const plan_measure_request *req, double *forward_s, double *backward_s) {
    SDP_CHECK(req->steps >= 1, "--measure-compute %d: give the number of steps to time, 1 or more",
              req->steps);
    int argc = 0;
    char **argv = NULL;
    sdp_world world;
    sdp_world_init(&world, &argc, &argv, req->threads);
    SDP_CHECK_ALL(world.size == 1,
                  "sdp plan --measure-compute times every worker in one process, but %d MPI ranks "
                  "were started: run sdp plan without mpiexec",
                  world.size);
    const int n = req->world + 1; /* the workers, then a data-parallel one */
    timed_list done = {0, sdp_xcalloc((size_t)n, sizeof(compute_key), "the timings"),
                       sdp_xcalloc((size_t)n, sizeof(compute_time), "the timings")};
    for (int i = 0; i < n; i++) {
        const bool ddp = i == req->world;
        const compute_time c = time_worker(req, &world, ddp ? 0 : i, ddp, &done);
        forward_s[i] = c.forward_s;
        backward_s[i] = c.backward_s;
    }
    fprintf(stderr, "sdp plan: timed %d distinct worker%s of %d%s\n", done.n,
            done.n == 1 ? "" : "s", n,
            done.n < n ? "; the others run the same shapes as one of them" : "");
    for (int i = 0; i < done.n; i++) free(done.keys[i].v);
    free(done.keys);
    free(done.times);
}
