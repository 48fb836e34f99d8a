/* Invariants I1 and I3 of docs/architecture.md on real MPI ranks, for every SDP mode: forward and
 * backward masking, block and neuron units, cyclic and random assignment, k in {1, 2, N-1},
 * gpt, llama and vit models, branch scale none and inverse, one micro-batch or two per step.
 *
 * The worker is the trainer that `sdp train` runs (src/train/trainer.h), configured through the
 * same options as the command line and stepped with trainer_step: gradient accumulation, the
 * gradient sync overlapped with the backward pass, the global norm, clipping, AdamW and
 * publishing under backward masking. Only the batches are the test's own (trainer.next_batch):
 * random tokens or images, different on every rank, at every step and in every micro-batch.
 *
 * Identical replicas (I1). Each mode trains for a few steps. Each rank then lays its parameters
 * and optimizer state out at full-model positions through its map, and rank 0 checks every
 * element: all owners of a unit hold bitwise the same parameter and optimizer state, shared
 * elements are the same on every rank, under backward masking every rank holds the whole model
 * and it is the same everywhere, the ranks agree on which unit each element belongs to, and
 * together they hold the whole model.
 *
 * Synced gradients (I3). One step of a fresh worker, without clipping: the gradient the trainer
 * leaves for the optimizer must equal the oracle, a world-wide all-reduce (in double) of every
 * rank's masked gradient (zero where the rank owns nothing) divided by the per-element owner
 * count. Each rank's gradient comes from an independently built copy of its own model with
 * a gradient buffer of its own (the full model under backward masking, the compact one under
 * forward masking), run over the same micro-batches: so the check also covers the masked
 * backward pass into the compact gradient buffer (sdp_sync_grad_layout and the models'
 * use_grads), where unowned tensors get no weight gradient and tensors owned in part get theirs
 * as one GEMM per owned slice.
 *
 * Where the buffers live. The checks run on the CPU (`host`), or with --device emulated, a
 * stand-in device made of host memory: with device communicators (`devcomm`, MPI behind the
 * NCCL-shaped calls) or without (`emulated-shared`: `staged`, each bucket and publication copied
 * to the host, sent and copied back). So the invariants check the device paths of sync_grads.c and
 * sync_params.c on any machine; NCCL itself runs only on a GPU.
 *
 * usage: mpiexec -n N mpi_invariants [replicas|grads|all] [host|staged|devcomm]
 * (exit status 0 when every check holds) */
#include "train/trainer.h"

#include "sdp/check.h"
#include "sdp/comm.h"
#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/rng.h"
#include "sdp/subnet.h"
#include "sdp/sync.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BATCH = 2, SEQ = 8, VOCAB = 64, STEPS = 3 };
/* Fashion-MNIST's shape: 1 channel of 28 x 28, 10 classes; patches of 7 make 16 (and the class
 * token). */
enum { IMG_LEN = 28 * 28, CLASSES = 10 };

typedef enum { MEMORY_HOST, MEMORY_STAGED, MEMORY_DEVCOMM } memory_kind;

typedef struct {
    const char *model; /* gpt, llama or vit */
    sdp_mask_mode mask;
    sdp_unit_kind unit;
    sdp_assign_kind assign;
    sdp_branch_scale scale;
    int owners, accum;
} mode;

static void mode_name(char *buf, size_t n, const mode *m) {
    snprintf(buf, n, "%s %s %s %s k=%d scale=%s accum=%d", m->model, sdp_mask_mode_name(m->mask),
             sdp_unit_kind_name(m->unit), sdp_assign_kind_name(m->assign), m->owners,
             sdp_branch_scale_name(m->scale), m->accum);
}

/* ---- the worker: the trainer, with the test's batches ------------------------------------------
 */

/* Twelve heads and 48 MLP neurons: chunks of 2, 3, 4 and 6 divide both. One neuron unit per
 * worker when that divides the groups, else 6 chunks (N = 8). */
static int chunks_for(int world) {
    return 12 % world == 0 && 48 % world == 0 ? 0 : 6;
}

/* The batches a worker trains on: random, a function of (rank, step, micro-batch) alone, so that
 * the oracle can replay them. */
typedef struct {
    int rank, step, micro, accum, vocab;
    bool images;
    int tokens[BATCH * SEQ], targets[BATCH * SEQ], labels[BATCH];
    float pixels[BATCH * IMG_LEN];
} feed;

static void fill(feed *f, sdp_batch *b) {
    memset(b, 0, sizeof *b);
    sdp_rng r = sdp_rng_make(2024, (uint64_t)(1000 * f->rank + 10 * f->step + f->micro));
    b->B = BATCH;
    if (f->images) {
        for (int i = 0; i < BATCH * IMG_LEN; i++) f->pixels[i] = sdp_rng_normal(&r);
        for (int i = 0; i < BATCH; i++) f->labels[i] = (int)sdp_rng_below(&r, CLASSES);
        b->T = 1;
        b->images = f->pixels;
        b->labels = f->labels;
        return;
    }
    for (int i = 0; i < BATCH * SEQ; i++) {
        f->tokens[i] = (int)sdp_rng_below(&r, (uint64_t)f->vocab);
        f->targets[i] = (int)sdp_rng_below(&r, (uint64_t)f->vocab);
    }
    b->T = SEQ;
    b->tokens = f->tokens;
    b->targets = f->targets;
}

/* trainer.next_batch: micro-batch after micro-batch, step after step. */
static void next_batch(void *ctx, sdp_batch *b) {
    feed *f = ctx;
    fill(f, b);
    if (++f->micro == f->accum) f->micro = 0, f->step++;
}

typedef struct {
    trainer t;
    feed data;
} worker;

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

static void worker_build(worker *w, const mode *md, memory_kind memory, const sdp_world *world) {
    memset(w, 0, sizeof *w);
    train_opts *o = &w->t.o;
    train_opts_set_defaults(TRAIN_OPTS, o);
    const bool vit = !strcmp(md->model, "vit");
    set(o, "model", md->model);
    set_int(o, "layers", 4);
    set_int(o, "heads", 12);
    set_int(o, "width", 24);
    set_int(o, "d-ff", 48);
    set_int(o, "batch", BATCH);
    if (vit)
        set_int(o, "patch", 7);
    else {
        set_int(o, "vocab", VOCAB);
        set_int(o, "seq-len", SEQ);
    }
    set(o, "sdp-mask", sdp_mask_mode_name(md->mask));
    set(o, "sdp-unit", sdp_unit_kind_name(md->unit));
    set(o, "sdp-assign", sdp_assign_kind_name(md->assign));
    set(o, "branch-scale", sdp_branch_scale_name(md->scale));
    set_int(o, "sdp-owners", md->owners);
    set_int(o, "sdp-chunks", chunks_for(world->size));
    set_int(o, "sdp-seed", 11);
    set_int(o, "seed", 5);
    set_int(o, "grad-accum", md->accum);
    set_int(o, "steps", 1000);
    set_int(o, "warmup", 0);
    set(o, "lr", "1e-2");
    set(o, "lr-min", "1e-2");
    set(o, "weight-decay", "0.1");
    set(o, "device",
        memory == MEMORY_HOST     ? "cpu"
        : memory == MEMORY_STAGED ? "emulated-shared"
                                  : "emulated");
    w->t.world = *world;
    w->data = (feed){.rank = world->rank, .accum = md->accum, .vocab = VOCAB, .images = vit};
    w->t.next_batch = next_batch; /* before building: the trainer then reads no data */
    w->t.next_batch_ctx = &w->data;
    trainer_build(&w->t);
}

static void worker_free(worker *w) {
    trainer_free(&w->t);
}

static bool owns(const trainer *w, int unit, int rank) {
    return unit < 0 || sdp_plan_owns(&w->plan, unit, rank);
}

static double as_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static const char *tensor_at(const sdp_layout *L, size_t global) {
    for (int i = 0; i < L->nparams; i++)
        if (global >= L->params[i].offset && global < L->params[i].offset + L->params[i].numel)
            return L->params[i].name;
    return "?";
}

/* ---- I1: identical replicas ------------------------------------------------------------------ */

enum { ABSENT = -2 }; /* unit tag of a full-model element that a rank does not hold */

/* A rank's state at full-model positions: parameter, AdamW moments and unit tag per element.
 * Optimizer state exists only for owned elements (zero elsewhere). */
typedef struct {
    uint32_t *p, *m, *v;
    int *unit;
} image;

static void image_alloc(image *im, size_t n) {
    im->p = calloc(n, sizeof *im->p);
    im->m = calloc(n, sizeof *im->m);
    im->v = calloc(n, sizeof *im->v);
    im->unit = malloc(n * sizeof *im->unit);
    SDP_CHECK(im->p && im->m && im->v && im->unit, "out of memory");
}

static void image_free(image *im) {
    free(im->p);
    free(im->m);
    free(im->v);
    free(im->unit);
}

static void image_of(image *im, const trainer *w, int rank) {
    for (size_t e = 0; e < w->full.numel; e++) im->unit[e] = ABSENT;
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        const size_t bytes = r->len * sizeof(float);
        memcpy(im->p + r->global, w->model.params + r->local, bytes);
        for (size_t e = 0; e < r->len; e++) im->unit[r->global + e] = r->unit;
        if (!owns(w, r->unit, rank)) continue;
        memcpy(im->m + r->global, w->opt.m + w->sync.grad_index[i], bytes);
        memcpy(im->v + r->global, w->opt.v + w->sync.grad_index[i], bytes);
    }
}

/* All ranks' images on rank 0 (one contiguous image per rank). */
static void gather_images(image *all, const image *mine, size_t n, int rank, int world) {
    if (rank == 0) image_alloc(all, n * (size_t)world);
    MPI_Gather(mine->p, (int)n, MPI_UINT32_T, rank == 0 ? all->p : NULL, (int)n, MPI_UINT32_T, 0,
               MPI_COMM_WORLD);
    MPI_Gather(mine->m, (int)n, MPI_UINT32_T, rank == 0 ? all->m : NULL, (int)n, MPI_UINT32_T, 0,
               MPI_COMM_WORLD);
    MPI_Gather(mine->v, (int)n, MPI_UINT32_T, rank == 0 ? all->v : NULL, (int)n, MPI_UINT32_T, 0,
               MPI_COMM_WORLD);
    MPI_Gather(mine->unit, (int)n, MPI_INT, rank == 0 ? all->unit : NULL, (int)n, MPI_INT, 0,
               MPI_COMM_WORLD);
}

typedef struct {
    long bad;
    char first[512];
} problems;

static void problem(problems *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems *pr, const char *fmt, ...) {
    if (pr->bad++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pr->first, sizeof pr->first, fmt, ap);
        va_end(ap);
    }
}

/* Rank 0: every element of the full model, across all ranks' images. */
static void check_images(problems *pr, const trainer *w, const image *all, int world) {
    const size_t n = w->full.numel;
    const bool backward = w->plan.cfg.mask == SDP_MASK_BACKWARD;
    bool *trained = calloc((size_t)w->plan.nunits + 1, sizeof *trained); /* [0]: shared */
    SDP_CHECK(trained, "out of memory");
    for (size_t e = 0; e < n; e++) {
        int unit = ABSENT, ref = -1;
        for (int r = 0; r < world && unit == ABSENT; r++) unit = all->unit[(size_t)r * n + e];
        if (unit == ABSENT) {
            problem(pr, "element %zu (%s) is held by no worker", e, tensor_at(&w->full, e));
            continue;
        }
        for (int r = 0; r < world; r++) {
            const size_t i = (size_t)r * n + e;
            const int tag = all->unit[i];
            const bool owner = owns(w, unit, r);
            if (tag != ABSENT && tag != unit) {
                problem(pr, "ranks disagree on the unit of element %zu (%s): %d vs %d", e,
                        tensor_at(&w->full, e), unit, tag);
                continue;
            }
            if (tag == ABSENT && (owner || backward)) {
                problem(pr, "rank %d lacks element %zu (%s) of unit %d", r, e,
                        tensor_at(&w->full, e), unit);
                continue;
            }
            if (tag != ABSENT && !owner && !backward) {
                problem(pr, "rank %d holds element %zu (%s) of unit %d, which it does not own", r,
                        e, tensor_at(&w->full, e), unit);
                continue;
            }
            if (tag == ABSENT) continue;
            if (ref < 0 && owner) {
                ref = (int)i;
                trained[unit + 1] |= all->m[i] != 0;
            }
        }
        for (int r = 0; r < world && ref >= 0; r++) {
            const size_t i = (size_t)r * n + e;
            if (all->unit[i] == ABSENT) continue;
            const bool owner = owns(w, unit, r);
            const size_t o = (size_t)ref;
            const int ref_rank = (int)(o / n);
            if (all->p[i] != all->p[o])
                problem(pr, "parameter %zu (%s, unit %d): rank %d holds %a, rank %d (owner) %a", e,
                        tensor_at(&w->full, e), unit, r, as_float(all->p[i]), ref_rank,
                        as_float(all->p[o]));
            if (owner && (all->m[i] != all->m[o] || all->v[i] != all->v[o]))
                problem(pr, "optimizer state %zu (%s, unit %d) differs between owners %d and %d", e,
                        tensor_at(&w->full, e), unit, r, ref_rank);
        }
    }
    /* Training must have moved every unit, or identical replicas would prove nothing. */
    for (int u = -1; u < w->plan.nunits; u++)
        if (!trained[u + 1]) problem(pr, "unit %d has no optimizer state: it was never trained", u);
    free(trained);
}

static long check_replicas(const mode *md, memory_kind memory, const sdp_world *world) {
    const int rank = world->rank;
    worker wk;
    worker_build(&wk, md, memory, world);
    const trainer *w = &wk.t;
    for (int s = 0; s < STEPS; s++) trainer_step(&wk.t);
    const size_t n = w->full.numel;
    image mine, all = {0};
    image_alloc(&mine, n);
    image_of(&mine, w, rank);
    gather_images(&all, &mine, n, rank, world->size);
    problems pr = {0};
    if (rank == 0) {
        check_images(&pr, w, &all, world->size);
        image_free(&all);
        char name[160];
        mode_name(name, sizeof name, md);
        if (pr.bad)
            printf("FAIL replicas N=%d %s: %ld problems; first: %s\n", world->size, name, pr.bad,
                   pr.first);
        else
            printf("ok   replicas N=%d %s: %d units, %zu elements identical across owners\n",
                   world->size, name, w->plan.nunits, n);
    }
    image_free(&mine);
    worker_free(&wk);
    MPI_Bcast(&pr.bad, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return pr.bad;
}

/* ---- I3: synced gradients against the oracle ------------------------------------------------- */

/* This rank's gradient for the step its feed is at, before any sync, at full-model positions
 * where it owns them (zero elsewhere): from an independently built copy of its own model (the
 * full model under backward masking, the compact one under forward masking) with a gradient for
 * every tensor, over the same micro-batches and with the trainer's loss scale. */
static void masked_gradient(double *g, const worker *wk, int rank) {
    const trainer *w = &wk->t;
    sdp_mem mem = {0};
    sdp_model_config cfg = w->cfg;
    cfg.backend = sdp_backend_cpu(w->gemm, &mem);
    sdp_model ref;
    train_run_create_worker_model(&ref, &cfg, &w->plan, &w->full, rank, w->data.B, w->data.T,
                                  SDP_MODEL_TRAIN_BARE);
    const sdp_layout *L = ref.layout;
    SDP_ASSERT(L->numel == w->model.layout->numel);
    memcpy(ref.params, w->model.params, L->numel * sizeof(float));
    float *grads = sdp_alloc(&mem, SDP_MEM_GRADS, L->numel * sizeof(float));
    long *offset = malloc(sizeof(long) * (size_t)(L->nparams + 1));
    SDP_CHECK(offset, "out of memory");
    for (int i = 0; i < L->nparams; i++) offset[i] = (long)L->params[i].offset;
    ref.ops->use_grads(&ref, grads, offset, NULL);
    feed f = wk->data; /* a copy: the same batches the trainer is about to take */
    const float scale = 1.0f / (float)(w->data.B * w->data.T * f.accum);
    for (int a = 0; a < f.accum; a++) {
        sdp_batch b;
        fill(&f, &b);
        f.micro++;
        sdp_metrics mt;
        ref.ops->forward(&ref, &b, true, &mt);
        ref.ops->backward(&ref, scale);
    }
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        if (owns(w, r->unit, rank))
            for (size_t e = 0; e < r->len; e++) g[r->global + e] = grads[r->local + e];
    }
    ref.ops->destroy(&ref);
    sdp_backend_destroy(cfg.backend);
    sdp_free(&mem, grads);
    free(offset);
}

/* The float sum of k terms and the multiplication by 1/k round by at most about (k+1) ulps of
 * the sum of magnitudes; 8 float epsilons of sum |g_r| (over owners) covers k <= 7 with room.
 * With two micro-batches each rank's own sum rounds differently from the oracle's by about one
 * more ulp of the magnitudes.
 *
 * Each rank's own gradient also differs from the oracle's in its last bits wherever the two
 * compute it with GEMMs of different shapes (a worker computes the weight gradient of its owned
 * chunk only): the GEMM library blocks the reduction by shape and by instruction set. That
 * rounding is relative to the magnitudes summed, not to the result, and cancellation can make
 * an element far smaller than its terms. So the bound also carries GEMM_TOL of the run's RMS
 * magnitude (measured: under 12 float epsilons of it on an AVX2 machine; none on AVX-512,
 * where the shapes happen to block alike). An error in owners or averaging is of the order of the
 * gradients themselves, over 10^5 times larger. */
static const double GRAD_TOL = 10 * FLT_EPSILON, GEMM_TOL = 32 * FLT_EPSILON;

/* The RMS of mag over one run of the full layout: the scale of its gradients. */
static double run_rms(const double *mag, const sdp_run *r) {
    double s = 0;
    for (size_t e = 0; e < r->len; e++) s += mag[r->global + e] * mag[r->global + e];
    return r->len ? sqrt(s / (double)r->len) : 0;
}

/* No backward below the lowest owned block: the floor is the lowest block holding an owned run,
 * or -1 (the whole pass) when the worker owns a stem tensor. */
static void check_backward_floor(problems *pr, const mode *md, const trainer *w, int rank,
                                 int world) {
    const sdp_layout *L = w->model.layout;
    int expect_floor = L->nblocks;
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        if (!owns(w, r->unit, rank)) continue;
        const int b = L->params[r->param].block;
        if (sdp_param_is_stem(L, r->param))
            expect_floor = -1;
        else if (b >= 0 && b < expect_floor && expect_floor >= 0)
            expect_floor = b;
    }
    const int floor = sdp_layout_backward_floor(L, w->grad_offset);
    if (floor != expect_floor)
        problem(pr, "rank %d: backward stops at layer %d, expected %d", rank, floor, expect_floor);
    int truncated = floor > 0, any_truncated = 0;
    MPI_Allreduce(&truncated, &any_truncated, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (md->mask == SDP_MASK_BACKWARD && md->unit == SDP_UNIT_BLOCK && md->owners < world &&
        !any_truncated && rank == 0)
        problem(pr, "backward masking with block units and k < N: no worker skipped any layer");
}

static long check_grads(const mode *md, memory_kind memory, const sdp_world *world,
                        double *worst_overall) {
    const int rank = world->rank;
    worker wk;
    worker_build(&wk, md, memory, world);
    wk.t.o.clip = 0; /* so that the step leaves the synced gradients as they are */
    const trainer *w = &wk.t;
    problems pr = {0};
    double worst = 0;
    if (w->ngrads != w->sync.owned)
        problem(&pr, "rank %d: gradients should be kept for owned elements only", rank);
    check_backward_floor(&pr, md, w, rank, world->size);
    const size_t n = w->full.numel;
    double *sum = calloc(n, sizeof *sum), *mag = calloc(n, sizeof *mag);
    int *count = calloc(n, sizeof *count);
    SDP_CHECK(sum && mag && count, "out of memory");
    masked_gradient(sum, &wk, rank);
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        if (owns(w, r->unit, rank))
            for (size_t e = 0; e < r->len; e++) count[r->global + e] = 1;
    }
    for (size_t e = 0; e < n; e++) mag[e] = fabs(sum[e]);
    MPI_Allreduce(MPI_IN_PLACE, sum, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mag, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, count, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    trainer_step(&wk.t); /* --clip 0: the gradients it leaves are the synced ones */
    double nonzero = 0;
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        if (!owns(w, r->unit, rank)) continue;
        const int k = r->unit < 0 ? world->size : md->owners;
        const float *got = w->grads + w->sync.grad_index[i];
        const double scale = run_rms(mag, r);
        for (size_t e = 0; e < r->len; e++) {
            const size_t g = r->global + e;
            if (count[g] != k) {
                problem(&pr, "element %zu (%s) has %d owners, the plan says %d", g,
                        tensor_at(&w->full, g), count[g], k);
                continue;
            }
            const double oracle = sum[g] / count[g], err = fabs(got[e] - oracle);
            const double ratio = err / (GRAD_TOL * mag[g] + GEMM_TOL * scale + 1e-30);
            if (ratio > worst) worst = ratio;
            nonzero += fabs(oracle);
            if (ratio > 1)
                problem(&pr, "rank %d, element %zu (%s, unit %d): synced %.9g, oracle %.9g", rank,
                        g, tensor_at(&w->full, g), r->unit, (double)got[e], oracle);
        }
    }
    if (!(nonzero > 0)) problem(&pr, "rank %d: every owned gradient is zero", rank);
    free(sum);
    free(mag);
    free(count);
    worker_free(&wk);

    /* Ranks report in order, so the first problem printed is rank 0's when it has one. */
    long bad = 0;
    MPI_Allreduce(&pr.bad, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < world->size; r++) {
        if (r == rank && pr.bad) printf("     rank %d: %s\n", rank, pr.first);
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (worst > *worst_overall) *worst_overall = worst;
    if (rank == 0) {
        char name[160];
        mode_name(name, sizeof name, md);
        printf("%s grads    N=%d %s: worst error %.3g of the tolerance\n", bad ? "FAIL" : "ok  ",
               world->size, name, worst);
    }
    return bad;
}

/* ---- the modes
 * ----------------------------------------------------------------------------------- */

static int owner_counts(int world, int *k) {
    int n = 0;
    const int wanted[3] = {1, 2, world - 1};
    for (int i = 0; i < 3; i++) {
        bool dup = false;
        for (int j = 0; j < n; j++) dup |= k[j] == wanted[i];
        if (!dup && wanted[i] >= 1 && wanted[i] < world) k[n++] = wanted[i];
    }
    return n;
}

int main(int argc, char **argv) {
    sdp_world world;
    sdp_world_init(&world, &argc, &argv, 1);
    const char *what = argc > 1 ? argv[1] : "all", *where = argc > 2 ? argv[2] : "host";
    const bool replicas = strcmp(what, "all") == 0 || strcmp(what, "replicas") == 0;
    const bool grads = strcmp(what, "all") == 0 || strcmp(what, "grads") == 0;
    const memory_kind memory = strcmp(where, "staged") == 0    ? MEMORY_STAGED
                               : strcmp(where, "devcomm") == 0 ? MEMORY_DEVCOMM
                                                               : MEMORY_HOST;
    SDP_CHECK((replicas || grads) && (memory != MEMORY_HOST || strcmp(where, "host") == 0),
              "usage: mpi_invariants [replicas|grads|all] [host|staged|devcomm]");
    const int N = world.size, rank = world.rank;
    int ks[3];
    const int nk = owner_counts(N, ks);
    long bad = 0;
    int modes = 0;
    double worst = 0;
    const sdp_mask_mode masks[2] = {SDP_MASK_FORWARD, SDP_MASK_BACKWARD};
    const sdp_unit_kind units[2] = {SDP_UNIT_BLOCK, SDP_UNIT_NEURON};
    const sdp_assign_kind assigns[2] = {SDP_ASSIGN_CYCLIC, SDP_ASSIGN_RANDOM};
    const char *models[3] = {"gpt", "llama", "vit"};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < nk; d++, modes++) {
                    /* Models cycle, and branch scales and accumulation alternate, so each meets
                     * the other choices. */
                    mode md = {.model = models[modes % 3],
                               .mask = masks[a],
                               .unit = units[b],
                               .assign = assigns[c],
                               .scale = masks[a] == SDP_MASK_FORWARD && (modes / 2) % 2
                                            ? SDP_SCALE_INVERSE
                                            : SDP_SCALE_NONE,
                               .owners = ks[d],
                               .accum = 1 + (modes / 3) % 2};
                    if (replicas) bad += check_replicas(&md, memory, &world);
                    if (grads) bad += check_grads(&md, memory, &world, &worst);
                }
    if (rank == 0) {
        printf("%s: %d modes on %d ranks, %s memory, %ld problems; worst gradient error %.3g of "
               "the tolerance\n",
               bad ? "FAIL" : "PASS", modes, N, where, bad, worst);
    }
    sdp_world_finalize();
    return bad ? 1 : 0;
}
