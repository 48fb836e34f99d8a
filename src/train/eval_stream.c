/* Evaluation of the assembled model under forward masking, block by block, so that no worker
 * ever holds the assembled model (docs/design.md, "Block-streamed evaluation").
 *
 * Every worker evaluates its own share of the validation batches, as a data-parallel worker of
 * the same rank would, a chunk of batches at a time. For each block of the full model in order,
 * it builds a model of the shared tensors and that block alone, fills the shared tensors from its
 * own parameters (every worker holds them whole), takes the block's current values from their
 * publishers (gathered on rank 0, window by window, and broadcast), and moves the chunk's
 * residual streams through it. The stages are the model's own kernels, so each batch's loss is
 * bitwise what the assembled model gives (tests/test_model_staged.c).
 *
 * Image models re-estimate their batch-norm running statistics on the assembled model first, the
 * same way over the calibration batches, and keep them (a few floats per channel) for the
 * checkpoint of the same step. */
#include "eval_size.h"
#include "io_memplan.h"
#include "trainer.h"

#include "sdp/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    trainer *t;
    float *local;  /* this worker's parameters on the host (train_host_copy) */
    float *stream; /* chunk residual streams of `floats` each */
    size_t floats;
    int rows;          /* examples per call of a stage: the block models' batch */
    size_t row_floats; /* of the stream, per example */
    int chunk;
    void *region;        /* the block models' arena: borrowed, or from io_mem */
    eval_pass_lent lent; /* which of region and stream lie in the training activations */
    sdp_mem arena;       /* over region: each block's model in turn */
    sdp_backend *be;     /* the CPU backend over arena that the current block's model runs on */
    sdp_model m;         /* the current block's model */
    int local_block;
} streamer;

/* ---- the running statistics of the assembled model ------------------------------------------ */

/* Where tensor `name` of the full layout lives in t->recal, or NULL when it is not a buffer. */
static float *recal_values(trainer *t, const char *name) {
    const sdp_layout *full = &t->full;
    size_t at = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *p = &full->params[i];
        if (!p->buffer) continue;
        if (!strcmp(p->name, name)) return t->recal + at;
        at += p->numel;
    }
    return NULL;
}

/* Copies the block model's running statistics from t->recal (or back into it). */
static void exchange_recal(streamer *s, bool into_model) {
    const sdp_layout *L = s->m.layout;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        if (!p->buffer) continue;
        float *r = recal_values(s->t, p->name), *x = s->m.params + p->offset;
        SDP_ASSERT(r);
        memcpy(into_model ? x : r, into_model ? r : x, p->numel * sizeof(float));
    }
}

/* ---- one block's model ------------------------------------------------------------------- */

/* [lo, hi) of block g's tensors in the full layout's flat buffer, and where its first tensor lies
 * in the block model's: the same tensors in the same order, checked here. */
static void block_range(const streamer *s, int g, size_t *lo, size_t *hi, size_t *at) {
    const sdp_layout *full = &s->t->full, *L = s->m.layout;
    *lo = SIZE_MAX, *hi = 0, *at = SIZE_MAX;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *p = &full->params[i];
        if (p->block != g) continue;
        const sdp_param *q = sdp_layout_find(L, p->name);
        SDP_ASSERT(q && q->numel == p->numel);
        if (*lo == SIZE_MAX) *lo = p->offset, *at = q->offset;
        SDP_ASSERT(p->offset == *hi || *hi == 0);
        SDP_ASSERT(q->offset - *at == p->offset - *lo);
        *hi = p->offset + p->numel;
    }
    SDP_ASSERT(*lo != SIZE_MAX);
}

/* Block g's current values, from their publishers to every worker (collective). */
static void fill_block(streamer *s, int g) {
    trainer *t = s->t;
    size_t lo, hi, at;
    block_range(s, g, &lo, &hi, &at);
    const size_t window = train_ckpt_window_floats(t->full.numel);
    for (size_t a = lo; a < hi; a += window) {
        const size_t b = hi - a < window ? hi : a + window;
        float *dst = s->m.params + at + (a - lo);
        sdp_sync_gather_range(&t->sync, s->local, false, a, b, is_rank0(t) ? dst : NULL,
                              &t->io_mem);
        MPI_Bcast(dst, (int)(b - a), MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
}

/* Every other tensor of the block model from this worker's own parameters: under forward masking
 * each worker holds the shared tensors and the blocks no subnetwork drops whole. */
static void fill_shared(streamer *s, int g) {
    const sdp_layout *L = s->m.layout, *own = s->t->model.layout;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        if (p->block >= 0 && L->blocks[p->block].global_index == g) continue;
        const sdp_param *q = sdp_layout_find(own, p->name);
        SDP_ASSERT(q && q->numel == p->numel);
        memcpy(s->m.params + p->offset, s->local + q->offset, p->numel * sizeof(float));
    }
}

static int find_local_block(const sdp_layout *L, int g) {
    for (int i = 0; i < L->nblocks; i++)
        if (L->blocks[i].global_index == g) return i;
    SDP_ASSERT(0 && "the block model lacks its block");
    return -1;
}

static void create_block_model(streamer *s, int g) {
    trainer *t = s->t;
    sdp_subnet_spec spec = train_eval_block_spec(&t->full, g);
    s->be = sdp_backend_cpu(t->gemm, &s->arena);
    sdp_model_config cfg = t->cfg;
    cfg.backend = s->be;
    train_run_family(&cfg)->create(&s->m, &cfg, &spec, s->rows, t->data.T, SDP_MODEL_INFER);
    train_eval_block_spec_free(&spec);
    s->local_block = find_local_block(s->m.layout, g);
}

/* Block g's model with the current values (collective). */
static void build(streamer *s, int g) {
    create_block_model(s, g);
    fill_shared(s, g);
    fill_block(s, g);
    if (s->t->recal) exchange_recal(s, true);
}

static void drop(streamer *s) {
    s->m.ops->destroy(&s->m);
    sdp_backend_destroy(s->be);
    s->be = NULL;
    sdp_mem_arena_reset(&s->arena);
}

/* ---- the pass ---------------------------------------------------------------------------- */

/* For a pass over n batches; in training mode (batch statistics) whole batches at a time. Every
 * block's model is built in turn in one arena, sized for the largest: the pages are touched once
 * a pass, not once a block, and what a pass holds is known before it starts (io_memplan.c). */
static void open_streamer(streamer *s, trainer *t, uint64_t n, bool training) {
    memset(s, 0, sizeof *s);
    s->t = t;
    const eval_pass_size z =
        train_eval_pass_size_of(&t->cfg, &t->full, t->data.B, t->data.T, n, training, t->gemm);
    s->rows = z.rows;
    s->row_floats = z.row_floats;
    s->floats = z.row_floats * (size_t)t->data.B;
    s->chunk = z.chunk;
    s->local = train_host_copy(t, t->model.params, t->model.layout->numel);
    /* Between steps the training activations hold nothing that the next step reads: the pass
     * borrows them where they are one pool (trainer.c), and allocates only what does not fit. */
    char *pool = t->mem.pool;
    s->lent = train_eval_pass_lent(&z, pool ? t->mem.pool_cap : 0);
    s->region = s->lent.arena ? (void *)pool : sdp_alloc(&t->io_mem, SDP_MEM_ACTS, z.arena_bytes);
    sdp_mem_use_arena(&s->arena, s->region, z.arena_bytes);
    if (s->lent.stream)
        s->stream = (float *)(s->lent.arena ? pool + z.arena_bytes : pool);
    else
        s->stream = sdp_alloc(&t->io_mem, SDP_MEM_ACTS, z.stream_bytes);
}

static void close_streamer(streamer *s) {
    trainer *t = s->t;
    if (!s->lent.stream) sdp_free(&t->io_mem, s->stream);
    if (!s->lent.arena) sdp_free(&t->io_mem, s->region);
    train_host_copy_done(t, s->local, t->model.params, t->model.layout->numel, false);
}

/* Batch v of a pass (calibration or validation) into *b. */
typedef void (*batch_fn)(trainer *t, uint64_t v, sdp_batch *b);

/* Examples [r, r + n) of batch b (whose data pointers may be NULL: a block reads none). */
static sdp_batch batch_rows(const trainer *t, const sdp_batch *b, int r, int n) {
    sdp_batch sub = *b;
    sub.B = n;
    const size_t T = (size_t)b->T,
                 image = (size_t)t->cfg.in_channels * t->cfg.image_size * (size_t)t->cfg.image_size;
    if (b->tokens) sub.tokens = b->tokens + (size_t)r * T;
    if (b->targets) sub.targets = b->targets + (size_t)r * T;
    if (b->images) sub.images = b->images + (size_t)r * image;
    if (b->labels) sub.labels = b->labels + r;
    return sub;
}

/* One batch's stages in block model s->m, s->rows examples at a time: the stem first when asked,
 * the block, and the head last when out is given (adding its metrics). */
static void run_batch(streamer *s, const sdp_batch *b, float *x, bool stem, bool training,
                      sdp_metrics *out) {
    for (int r = 0; r < b->B; r += s->rows) {
        const sdp_batch sub = batch_rows(s->t, b, r, s->rows);
        float *xr = x + (size_t)r * s->row_floats;
        if (stem) s->m.ops->forward_stem(&s->m, &sub, training, xr);
        s->m.ops->forward_block(&s->m, s->local_block, &sub, training, xr);
        if (!out) continue;
        sdp_metrics mt;
        s->m.ops->forward_head(&s->m, &sub, training, xr, &mt);
        if (mt.count > 0) out->loss += mt.loss, out->count += mt.count, out->correct += mt.correct;
    }
}

/* Moves batches [first, first + n) through every block, the stem before the first and, with
 * `out`, the head after the last (summing each batch's metrics into *out). */
static void run_chunk(streamer *s, uint64_t first, int n, batch_fn get, bool training,
                      sdp_metrics *out) {
    trainer *t = s->t;
    const int nblocks = t->full.nblocks;
    for (int g = 0; g < nblocks; g++) {
        build(s, g);
        const bool stem = g == 0, head = g == nblocks - 1 && out;
        for (int k = 0; k < n; k++) {
            sdp_batch b = {.B = t->data.B, .T = t->data.T};
            if (stem || head) get(t, first + (uint64_t)k, &b);
            run_batch(s, &b, s->stream + (size_t)k * s->floats, stem, training, head ? out : NULL);
            sdp_watchdog_beat(t->watchdog);
        }
        if (training) exchange_recal(s, false); /* the statistics this block updated */
        drop(s);
    }
}

static void calibration_batch(trainer *t, uint64_t v, sdp_batch *b) {
    train_batches_calibration(&t->data, (int)v, b);
}

static void validation_batch(trainer *t, uint64_t v, sdp_batch *b) {
    train_batches_val_batch(&t->data, v, b);
}

/* ---- entry points ------------------------------------------------------------------------ */

bool train_eval_borrows_activations(const trainer *t) {
    return t->be->host_memory && !simulating(t) && t->plan.cfg.mask == SDP_MASK_FORWARD &&
           t->plan.cfg.owners != t->plan.cfg.world;
}

bool train_eval_recalibrates(const trainer *t) {
    return t->data.images && t->plan.cfg.mask == SDP_MASK_FORWARD &&
           t->plan.cfg.owners != t->plan.cfg.world && t->o.bn_recal_batches > 0 &&
           train_eval_recal_floats(&t->full) > 0;
}

/* Running statistics gathered from subnetworks describe the subnetworks, not the assembled model,
 * whose blocks all add to the residual stream at once: they are re-estimated from scratch on
 * training batches, as the assembled model's forward in training mode would, block by block. */
void train_eval_recalibrate(trainer *t) {
    if (!train_eval_recalibrates(t) || (t->recal && t->recal_step == t->step)) return;
    const sdp_layout *full = &t->full;
    if (!t->recal)
        t->recal =
            sdp_alloc(&t->io_mem, SDP_MEM_BUFFERS, train_eval_recal_floats(full) * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *p = &full->params[i];
        if (!p->buffer) continue;
        for (size_t j = 0; j < p->numel; j++) t->recal[at + j] = sdp_param_init_value(p, 0, j);
        at += p->numel;
    }
    const uint64_t n = (uint64_t)t->o.bn_recal_batches;
    streamer s;
    open_streamer(&s, t, n, true);
    for (uint64_t v = 0; v < n; v += (uint64_t)s.chunk) {
        const int k = n - v < (uint64_t)s.chunk ? (int)(n - v) : s.chunk;
        run_chunk(&s, v, k, calibration_batch, true, NULL);
    }
    close_streamer(&s);
    t->recal_step = t->step;
}

sdp_metrics train_eval_streamed(trainer *t) {
    train_eval_recalibrate(t);
    const uint64_t n = train_batches_val_count(&t->data, t->o.val_batches);
    streamer s;
    open_streamer(&s, t, n, false);
    sdp_metrics total = {0, 0, 0};
    for (uint64_t v = 0; v < n; v += (uint64_t)s.chunk) {
        const int k = n - v < (uint64_t)s.chunk ? (int)(n - v) : s.chunk;
        run_chunk(&s, v, k, validation_batch, false, &total);
    }
    close_streamer(&s);
    double v[3] = {total.loss, total.count, total.correct};
    MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return (sdp_metrics){v[0], v[1], v[2]};
}

const float *train_eval_recalibrated(trainer *t, const char *name) {
    SDP_ASSERT(t->recal && t->recal_step == t->step);
    return recal_values(t, name);
}
