/* Invariants 1 and 3 of DESIGN.md section 2 on real MPI ranks, for every SDP mode: forward and
 * backward masking, block and neuron units, cyclic and random assignment, k in {1, 2, N-1},
 * gpt, llama and vit styles, branch scale none and inverse.
 *
 * Identical replicas (invariant 1). Each mode trains a tiny transformer for a few real steps as
 * `sdp train` does (src/cli/train.c: zero gradients, forward and backward, sdp_sync_grads, the
 * global norm, clipping, AdamW, publishing under backward masking), every rank on its own
 * random data. Each rank then lays its parameters and optimizer state out at full-model
 * positions through its map, and rank 0 checks every element: all owners of a unit hold
 * bitwise the same parameter and optimizer state, shared elements are the same on every rank,
 * under backward masking every rank holds the whole model and it is the same everywhere, the
 * ranks agree on which unit each element belongs to, and together they hold the whole model.
 *
 * Backward-masking gradients (invariant 3). One step on a fresh worker: the engine's synced
 * gradient must equal the oracle, a world-wide all-reduce (in double) of every rank's masked
 * gradient (zero where the rank owns nothing) divided by the per-element owner count. Under
 * backward masking the masked gradient comes from an independently built full model with a
 * gradient buffer of its own, so the check also covers the masked backward pass into the compact
 * gradient buffer (sdp_sync_grad_layout and sdp_tf_use_grads): unowned tensors get no weight
 * gradient, and tensors owned in part get theirs as one GEMM per owned slice. Under forward masking
 * it is each rank's own compact-model gradient before the sync, so only the averaging is checked
 * there (the compact gradients themselves are checked by test_sdp_forward_equiv).
 *
 * Where the buffers live. The checks run with the sync reading host memory (`host`), or told that
 * the buffers are a device's (sdp_sync_use_backend): with device communicators (`devcomm`, a
 * stand-in for NCCL that all-reduces and broadcasts through MPI when a transfer starts) or
 * without (`staged`, each bucket and publication copied to the host, sent and copied back). The
 * stand-in device is sdp_backend_emulated, host memory behind the CPU backend's copies, so the
 * same invariants check sync.c's device paths on any machine; NCCL itself runs only on a GPU.
 *
 * usage: mpiexec -n N mpi_invariants [replicas|grads|all] [host|staged|devcomm]
 * (exit status 0 when every check holds) */
#include "sdp/check.h"
#include "sdp/comm.h"
#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/rng.h"
#include "sdp/subnet.h"
#include "sdp/sync.h"
#include "sdp/transformer.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, SEQ = 8, VOCAB = 32, STEPS = 3 };
/* vit: 2-channel 4x4 images in 2x2 patches (4 patches + the class token), 5 classes */
enum { IMG_CH = 2, IMG_SIZE = 4, PATCH = 2, CLASSES = 5, IMG_LEN = IMG_CH * IMG_SIZE * IMG_SIZE };

/* Twelve heads and 48 MLP neurons: chunks of 2, 3, 4 and 6 divide both. */
static sdp_tf_config model_config(sdp_tf_style style) {
    sdp_tf_config c = {.style = style,
                       .n_layer = 4,
                       .n_head = 12,
                       .d_model = 24,
                       .d_ff = 48,
                       .seq_len = SEQ,
                       .vocab = VOCAB,
                       .in_channels = IMG_CH,
                       .image_size = IMG_SIZE,
                       .patch = PATCH,
                       .classes = CLASSES};
    sdp_tf_config_finish(&c);
    return c;
}

/* One neuron unit per worker when that divides the groups, else 6 chunks (N = 8). */
static int chunks_for(int world) {
    return 12 % world == 0 && 48 % world == 0 ? 0 : 6;
}

typedef struct {
    sdp_tf_style style;
    sdp_mask_mode mask;
    sdp_unit_kind unit;
    sdp_assign_kind assign;
    sdp_branch_scale scale;
    int owners;
} mode;

static void mode_name(char *buf, size_t n, const mode *m) {
    snprintf(buf, n, "%s %s %s %s k=%d scale=%s", sdp_tf_style_name(m->style),
             sdp_mask_mode_name(m->mask), sdp_unit_kind_name(m->unit),
             sdp_assign_kind_name(m->assign), m->owners, sdp_branch_scale_name(m->scale));
}

/* ---- a worker, assembled as build_worker in src/cli/train.c does ------------------------------
 */

typedef struct {
    sdp_tf_config cfg;
    sdp_layout full;
    sdp_plan plan;
    sdp_tf model;
    sdp_subnet_map map;
    sdp_sync sync;
    long *grad_offset; /* where each tensor's gradient lives in the compact buffer */
    sdp_grad_slices *grad_slices;
    float *grads;
    size_t ngrads;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    sdp_mem mem;
    sdp_backend *be;
    sdp_backend *device; /* the stand-in device the sync is told about (not `host`), or NULL */
} worker;

typedef enum { MEMORY_HOST, MEMORY_STAGED, MEMORY_DEVCOMM } memory_kind;

/* The stand-in device: sdp_backend_emulated, host memory flagged as a device's, whose device
 * communicators are MPI's (devcomm), or which has none (staged). */
static void use_stand_in_device(worker *w, memory_kind kind) {
    w->device = sdp_backend_emulated(SDP_GEMM_DNNL, kind == MEMORY_STAGED);
    sdp_sync_use_backend(&w->sync, w->device);
}

static void worker_build(worker *w, const mode *md, memory_kind memory, int rank, int world) {
    memset(w, 0, sizeof *w);
    w->cfg = model_config(md->style);
    sdp_tf_shape full_shape;
    sdp_tf_shape_full(&full_shape, &w->cfg);
    sdp_tf_describe(&w->full, &w->cfg, &full_shape);
    sdp_tf_shape_free(&full_shape);
    sdp_plan_cfg pc = {.mask = md->mask,
                       .unit = md->unit,
                       .assign = md->assign,
                       .scale = md->scale,
                       .world = world,
                       .owners = md->owners,
                       .chunks = chunks_for(world),
                       .seed = 11};
    sdp_plan_build(&w->plan, &pc, &w->full);

    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &w->plan, &w->full, rank);
    sdp_tf_shape shape;
    sdp_tf_shape_from_keep(&shape, &w->cfg, spec.nblocks, spec.keep,
                           (const int(*)[SDP_MAX_GROUPS])spec.kept, spec.scale);
    sdp_subnet_spec_free(&spec);
    const bool forward = md->mask == SDP_MASK_FORWARD;
    w->be = sdp_backend_cpu(SDP_GEMM_DNNL, &w->mem);
    sdp_tf_create(&w->model, &w->cfg, &shape, BATCH, SEQ, SDP_MODEL_TRAIN_BARE, w->be);
    sdp_tf_shape_free(&shape);
    sdp_subnet_map_build(&w->map, &w->full, &w->model.layout, &w->plan, rank, forward);
    sdp_subnet_init_values(&w->map, &w->full, &w->model.layout, w->model.params, 5);
    int *layer_of = malloc(sizeof(int) * (size_t)(w->model.layout.nparams + 1));
    SDP_CHECK(layer_of, "out of memory");
    for (int i = 0; i < w->model.layout.nparams; i++) layer_of[i] = w->model.layout.params[i].block;
    sdp_sync_init(&w->sync, &w->plan, &w->map, layer_of, rank, world, &w->mem);
    free(layer_of);
    if (memory != MEMORY_HOST) use_stand_in_device(w, memory);
    sdp_sync_grad_layout(&w->sync, &w->model.layout, &w->grad_offset, &w->grad_slices);
    w->ngrads = w->sync.owned;
    w->grads = sdp_alloc(&w->mem, SDP_MEM_GRADS, w->ngrads * sizeof(float));
    sdp_tf_use_grads(&w->model, w->grads, w->grad_offset, w->grad_slices);
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    oc.weight_decay = 0.1f;
    sdp_optim_init(&w->opt, &oc, w->sync.owned, &w->mem);
    w->nsegs = sdp_sync_segments(&w->sync, &w->model.layout, false, &w->segs);
}

static void worker_free(worker *w) {
    free(w->segs);
    sdp_optim_free(&w->opt, &w->mem);
    sdp_sync_free(&w->sync);
    sdp_backend_destroy(w->device); /* after the sync, which closes its communicators */
    sdp_subnet_map_free(&w->map);
    const int nparams = w->model.layout.nparams;
    sdp_tf_destroy(&w->model); /* leaves the caller-supplied gradients alone */
    sdp_backend_destroy(w->be);
    sdp_free(&w->mem, w->grads);
    sdp_sync_grad_layout_free(w->grad_offset, w->grad_slices, nparams);
    sdp_plan_free(&w->plan);
    sdp_layout_free(&w->full);
}

/* Random tokens, different on every rank and at every step. */
static void fill_batch(int *inputs, int *targets, int rank, int step) {
    sdp_rng r = sdp_rng_make(2024, (uint64_t)(1000 * rank + step));
    for (int i = 0; i < BATCH * SEQ; i++) {
        inputs[i] = (int)sdp_rng_below(&r, VOCAB);
        targets[i] = (int)sdp_rng_below(&r, VOCAB);
    }
}

/* Random images and labels (vit), different on every rank and at every step. */
static void fill_images(float *images, int *labels, int rank, int step) {
    sdp_rng r = sdp_rng_make(2025, (uint64_t)(1000 * rank + step));
    for (int i = 0; i < BATCH * IMG_LEN; i++) images[i] = sdp_rng_normal(&r);
    for (int i = 0; i < BATCH; i++) labels[i] = (int)sdp_rng_below(&r, CLASSES);
}

static void forward_backward(sdp_tf *m, int rank, int step) {
    if (m->cfg.style == SDP_STYLE_VIT) {
        float images[BATCH * IMG_LEN];
        int labels[BATCH];
        fill_images(images, labels, rank, step);
        sdp_tf_forward_images(m, images, labels, BATCH);
        sdp_tf_backward(m, 1.0f / BATCH);
        return;
    }
    int inputs[BATCH * SEQ], targets[BATCH * SEQ];
    fill_batch(inputs, targets, rank, step);
    sdp_tf_forward(m, inputs, targets, BATCH, SEQ);
    sdp_tf_backward(m, 1.0f / (BATCH * SEQ));
}

/* One step of src/cli/train.c's train_step, at a fixed learning rate. */
static void worker_step(worker *w, int rank, int step) {
    memset(w->grads, 0, w->ngrads * sizeof(float));
    forward_backward(&w->model, rank, step);
    sdp_sync_grads(&w->sync, w->grads);
    double norm = sdp_sync_grad_norm(&w->sync, w->grads);
    sdp_scale(w->grads, w->ngrads, sdp_clip_scale(norm, 1.0f));
    sdp_optim_step(&w->opt, w->model.params, w->grads, w->segs, w->nsegs, 1e-2f);
    if (w->plan.cfg.mask == SDP_MASK_BACKWARD) sdp_sync_publish(&w->sync, w->model.params);
}

static bool owns(const worker *w, int unit, int rank) {
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

/* ---- invariant 1: identical replicas -----------------------------------------------------------
 */

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

static void image_of(image *im, const worker *w, int rank) {
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
static void check_images(problems *pr, const worker *w, const image *all, int world) {
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

static long check_replicas(const mode *md, memory_kind memory, int rank, int world) {
    worker w;
    worker_build(&w, md, memory, rank, world);
    for (int s = 0; s < STEPS; s++) worker_step(&w, rank, s);
    const size_t n = w.full.numel;
    image mine, all = {0};
    image_alloc(&mine, n);
    image_of(&mine, &w, rank);
    gather_images(&all, &mine, n, rank, world);
    problems pr = {0};
    if (rank == 0) {
        check_images(&pr, &w, &all, world);
        image_free(&all);
        char name[160];
        mode_name(name, sizeof name, md);
        if (pr.bad)
            printf("FAIL replicas N=%d %s: %ld problems; first: %s\n", world, name, pr.bad,
                   pr.first);
        else
            printf("ok   replicas N=%d %s: %d units, %zu elements identical across owners\n", world,
                   name, w.plan.nunits, n);
    }
    image_free(&mine);
    worker_free(&w);
    MPI_Bcast(&pr.bad, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return pr.bad;
}

/* ---- invariant 3: synced gradients against the oracle ------------------------------------------
 */

/* Every rank's gradient before the sync at full-model positions, zero where the rank owns
 * nothing. Under backward masking it comes from a separate full model with its own gradients. */
static void masked_gradient(double *g, const worker *w, int rank, int step) {
    if (w->plan.cfg.mask == SDP_MASK_BACKWARD) {
        sdp_mem mem = {0};
        sdp_tf ref;
        sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
        sdp_tf_create(&ref, &w->cfg, NULL, BATCH, SEQ, SDP_MODEL_TRAIN, be);
        SDP_ASSERT(ref.layout.numel == w->model.layout.numel);
        memcpy(ref.params, w->model.params, ref.layout.numel * sizeof(float));
        forward_backward(&ref, rank, step);
        for (int i = 0; i < w->map.nruns; i++) {
            const sdp_run *r = &w->map.runs[i];
            if (owns(w, r->unit, rank))
                for (size_t e = 0; e < r->len; e++) g[r->global + e] = ref.grads[r->global + e];
        }
        sdp_tf_destroy(&ref);
        sdp_backend_destroy(be);
        return;
    }
    for (int i = 0; i < w->map.nruns; i++) {
        const sdp_run *r = &w->map.runs[i];
        if (!owns(w, r->unit, rank)) continue;
        const float *src = w->grads + w->sync.grad_index[i];
        for (size_t e = 0; e < r->len; e++) g[r->global + e] = src[e];
    }
}

/* The float sum of k terms and the multiplication by 1/k round by at most about (k+1) ulps of
 * the sum of magnitudes; 8 float epsilons of sum |g_r| (over owners) covers k <= 7 with room. */
static const double GRAD_TOL = 8 * FLT_EPSILON;

static long check_grads(const mode *md, memory_kind memory, int rank, int world,
                        double *worst_overall) {
    worker w;
    worker_build(&w, md, memory, rank, world);
    problems pr = {0};
    double worst = 0;
    if (w.ngrads != w.sync.owned)
        problem(&pr, "rank %d: gradients should be kept for owned elements only", rank);
    /* No backward below the lowest owned block: the floor is the lowest block holding an owned
     * run, or -1 (the whole pass) when the worker owns a stem tensor. */
    int expect_floor = w.model.layout.nblocks;
    for (int i = 0; i < w.map.nruns; i++) {
        const sdp_run *r = &w.map.runs[i];
        if (!owns(&w, r->unit, rank)) continue;
        const int b = w.model.layout.params[r->param].block;
        if (sdp_param_is_stem(&w.model.layout, r->param))
            expect_floor = -1;
        else if (b >= 0 && b < expect_floor && expect_floor >= 0)
            expect_floor = b;
    }
    if (w.model.backward_floor != expect_floor)
        problem(&pr, "rank %d: backward stops at layer %d, expected %d", rank,
                w.model.backward_floor, expect_floor);
    int truncated = w.model.backward_floor > 0, any_truncated = 0;
    MPI_Allreduce(&truncated, &any_truncated, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (md->mask == SDP_MASK_BACKWARD && md->unit == SDP_UNIT_BLOCK && md->owners < world &&
        !any_truncated && rank == 0)
        problem(&pr, "backward masking with block units and k < N: no worker skipped any layer");
    const size_t n = w.full.numel;
    const int step = 100;
    memset(w.grads, 0, w.ngrads * sizeof(float));
    forward_backward(&w.model, rank, step);
    double *sum = calloc(n, sizeof *sum), *mag = calloc(n, sizeof *mag);
    int *count = calloc(n, sizeof *count);
    SDP_CHECK(sum && mag && count, "out of memory");
    masked_gradient(sum, &w, rank, step);
    for (int i = 0; i < w.map.nruns; i++) {
        const sdp_run *r = &w.map.runs[i];
        if (owns(&w, r->unit, rank))
            for (size_t e = 0; e < r->len; e++) count[r->global + e] = 1;
    }
    for (size_t e = 0; e < n; e++) mag[e] = fabs(sum[e]);
    MPI_Allreduce(MPI_IN_PLACE, sum, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mag, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, count, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    sdp_sync_grads(&w.sync, w.grads);
    double nonzero = 0;
    for (int i = 0; i < w.map.nruns; i++) {
        const sdp_run *r = &w.map.runs[i];
        if (!owns(&w, r->unit, rank)) continue;
        const int k = r->unit < 0 ? world : md->owners;
        const float *got = w.grads + w.sync.grad_index[i];
        for (size_t e = 0; e < r->len; e++) {
            const size_t g = r->global + e;
            if (count[g] != k) {
                problem(&pr, "element %zu (%s) has %d owners, the plan says %d", g,
                        tensor_at(&w.full, g), count[g], k);
                continue;
            }
            const double oracle = sum[g] / count[g], err = fabs(got[e] - oracle);
            const double ratio = err / (GRAD_TOL * mag[g] + 1e-30);
            if (ratio > worst) worst = ratio;
            nonzero += fabs(oracle);
            if (ratio > 1)
                problem(&pr, "rank %d, element %zu (%s, unit %d): synced %.9g, oracle %.9g", rank,
                        g, tensor_at(&w.full, g), r->unit, (double)got[e], oracle);
        }
    }
    if (!(nonzero > 0)) problem(&pr, "rank %d: every owned gradient is zero", rank);
    free(sum);
    free(mag);
    free(count);
    worker_free(&w);

    /* Ranks report in order, so the first problem printed is rank 0's when it has one. */
    long bad = 0;
    MPI_Allreduce(&pr.bad, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++) {
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
               world, name, worst);
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
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < nk; d++, modes++) {
                    /* Styles cycle and branch scales alternate, so each meets the other
                     * choices. */
                    const sdp_tf_style styles[3] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
                    mode md = {.style = styles[modes % 3],
                               .mask = masks[a],
                               .unit = units[b],
                               .assign = assigns[c],
                               .scale = masks[a] == SDP_MASK_FORWARD && (modes / 2) % 2
                                            ? SDP_SCALE_INVERSE
                                            : SDP_SCALE_NONE,
                               .owners = ks[d]};
                    if (replicas) bad += check_replicas(&md, memory, rank, N);
                    if (grads) bad += check_grads(&md, memory, rank, N, &worst);
                }
    if (rank == 0)
        printf("%s: %d modes on %d ranks, %s memory, %ld problems; worst gradient error %.3g of "
               "the tolerance\n",
               bad ? "FAIL" : "PASS", modes, N, where, bad, worst);
    sdp_world_finalize();
    return bad ? 1 : 0;
}
