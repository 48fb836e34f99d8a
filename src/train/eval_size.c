/* What one pass of block-streamed evaluation (eval_stream.c) holds, computed before it runs, so
 * that the trainer allocates it and `sdp plan` predicts it with the same arithmetic
 * (io_memplan.c), and the one-block model specs the pass builds. */
#include "eval_size.h"
#include "io_memplan.h"
#include "run.h"

#include "sdp/check.h"

#include <stdlib.h>

/* Elements of the full layout's buffer tensors (running statistics), which t->recal holds. */
size_t train_eval_recal_floats(const sdp_layout *full) {
    size_t n = 0;
    for (int i = 0; i < full->nparams; i++)
        if (full->params[i].buffer) n += full->params[i].numel;
    return n;
}

eval_pass_lent train_eval_pass_lent(const eval_pass_size *z, size_t lent) {
    const size_t a = z->arena_bytes, s = z->stream_bytes;
    if (a + s <= lent) return (eval_pass_lent){true, true};
    if (a >= s) return (eval_pass_lent){a <= lent, a > lent && s <= lent};
    return (eval_pass_lent){s > lent && a <= lent, s <= lent};
}

/* Keeps block g whole, and the blocks no subnetwork drops (a ResNet's downsampling ones). */
sdp_subnet_spec train_eval_block_spec(const sdp_layout *full, int g) {
    const int n = full->nblocks;
    const char *what = "a one-block subnet";
    sdp_subnet_spec spec = {n, sdp_xcalloc((size_t)n, sizeof(bool), what),
                            sdp_xcalloc((size_t)n, sizeof *spec.kept, what),
                            sdp_xcalloc((size_t)n, sizeof(float), what)};
    for (int b = 0; b < n; b++) {
        spec.keep[b] = b == g || !full->blocks[b].droppable;
        spec.scale[b] = 1.0f;
        for (int j = 0; j < full->blocks[b].ngroups; j++)
            spec.kept[b][j] = full->blocks[b].groups[j].width;
    }
    return spec;
}

void train_eval_block_spec_free(sdp_subnet_spec *spec) {
    free(spec->keep);
    free(spec->kept);
    free(spec->scale);
}

/* The residual streams of a chunk of batches are about as large as the largest block: it bounds
 * what evaluation adds to a worker, and the blocks are re-sent once per chunk. */
static int chunk_batches(const sdp_layout *full, size_t floats) {
    size_t largest = 0;
    /* one pass: thousands of layers */
    size_t *n = sdp_xcalloc((size_t)full->nblocks + 1, sizeof *n, "the blocks' sizes");
    for (int i = 0; i < full->nparams; i++)
        if (full->params[i].block >= 0) n[full->params[i].block] += full->params[i].numel;
    for (int b = 0; b < full->nblocks; b++)
        if (n[b] > largest) largest = n[b];
    free(n);
    const size_t c = largest / floats;
    return c < 1 ? 1 : c > 1024 ? 1024 : (int)c;
}

/* Examples per stage call when evaluating: a divisor of B near B/8, so that the block model's
 * activations are an eighth of a batch's. Each example's loss does not depend on the others in
 * its batch (batch norm evaluates on running statistics), so any split gives the same losses. */
static int eval_rows(int B) {
    int rows = (B + 7) / 8;
    while (B % rows) rows--;
    return rows;
}

/* Block g's one-block model in counting mode: what its creation carves, and the stream's floats
 * per example. */
static size_t block_model_carved(const sdp_model_config *cfg, const sdp_layout *full, int g,
                                 int rows, int T, sdp_gemm_provider gemm, size_t *row_floats) {
    sdp_mem dry = {.dry = true};
    sdp_subnet_spec spec = train_eval_block_spec(full, g);
    sdp_model_config counted = *cfg;
    counted.backend = sdp_backend_cpu(gemm, &dry);
    sdp_model m;
    train_run_family(cfg)->create(&m, &counted, &spec, rows, T, SDP_MODEL_INFER);
    if (row_floats) *row_floats = m.ops->stream_floats(&m) / (size_t)rows;
    m.ops->destroy(&m);
    sdp_backend_destroy(counted.backend);
    train_eval_block_spec_free(&spec);
    return dry.carved;
}

/* Block g's tensors, and the undroppable blocks before it. */
typedef struct {
    int *start, *param; /* block g's tensors: param[start[g] .. start[g + 1]) */
    int *before;        /* undroppable blocks before block g */
} block_index;

static block_index index_blocks(const sdp_layout *full) {
    const int nb = full->nblocks;
    const char *what = "indexing the blocks' tensors";
    block_index x = {sdp_xcalloc((size_t)nb + 2, sizeof(int), what),
                     sdp_xmalloc(sizeof(int) * ((size_t)full->nparams + 1), what),
                     sdp_xmalloc(sizeof(int) * ((size_t)nb + 1), what)};
    for (int i = 0; i < full->nparams; i++)
        if (full->params[i].block >= 0) x.start[full->params[i].block + 1]++;
    for (int g = 0; g < nb; g++) x.start[g + 1] += x.start[g];
    int *fill = sdp_xcalloc((size_t)nb + 1, sizeof(int), what);
    for (int i = 0; i < full->nparams; i++) {
        const int g = full->params[i].block;
        if (g >= 0) x.param[x.start[g] + fill[g]++] = i;
    }
    free(fill);
    for (int g = 0, n = 0; g < nb; g++) {
        x.before[g] = n;
        n += !full->blocks[g].droppable;
    }
    return x;
}

static bool same_tensor(const sdp_param *a, const sdp_param *b) {
    if (a->ndim != b->ndim || a->numel != b->numel || a->group != b->group || a->axis != b->axis ||
        a->segments != b->segments || a->buffer != b->buffer || a->decay != b->decay ||
        a->init != b->init || a->init_std != b->init_std)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static bool alike(const sdp_layout *full, const block_index *x, bool by_position, int a, int b) {
    const sdp_block *A = &full->blocks[a], *B = &full->blocks[b];
    if ((by_position && x->before[a] != x->before[b]) || A->droppable != B->droppable ||
        A->ngroups != B->ngroups || x->start[a + 1] - x->start[a] != x->start[b + 1] - x->start[b])
        return false;
    for (int j = 0; j < A->ngroups; j++)
        if (A->groups[j].width != B->groups[j].width || A->groups[j].atom != B->groups[j].atom)
            return false;
    for (int j = 0; j < x->start[a + 1] - x->start[a]; j++)
        if (!same_tensor(&full->params[x->param[x->start[a] + j]],
                         &full->params[x->param[x->start[b] + j]]))
            return false;
    return true;
}

int train_eval_block_kinds(const sdp_layout *full, bool by_position, int *kinds) {
    block_index x = index_blocks(full);
    int *reps = sdp_xmalloc(sizeof(int) * ((size_t)full->nblocks + 1), "the kinds of blocks"),
        nkinds = 0;
    for (int g = 0; g < full->nblocks; g++) {
        kinds[g] = g;
        for (int k = 0; k < nkinds && kinds[g] == g; k++)
            if (alike(full, &x, by_position, reps[k], g)) kinds[g] = reps[k];
        if (kinds[g] == g) reps[nkinds++] = g;
    }
    free(reps);
    free(x.start), free(x.param), free(x.before);
    return nkinds;
}

eval_pass_size train_eval_pass_size_of(const sdp_model_config *cfg, const sdp_layout *full, int B,
                                       int T, uint64_t batches, bool training,
                                       sdp_gemm_provider gemm) {
    eval_pass_size z = {.rows = training ? B : eval_rows(B)};
    /* One model per kind of block: building every block's made planning a model of thousands of
     * layers quadratic in them (tests/test_plan_fast.c checks the sizes against every block's). */
    int *kinds = sdp_xmalloc(sizeof(int) * ((size_t)full->nblocks + 1), "the kinds of blocks");
    train_eval_block_kinds(full, true, kinds);
    for (int g = 0; g < full->nblocks; g++) {
        if (kinds[g] != g) continue;
        const size_t carved =
            block_model_carved(cfg, full, g, z.rows, T, gemm, g == 0 ? &z.row_floats : NULL);
        if (carved > z.arena_bytes) z.arena_bytes = carved;
    }
    free(kinds);
    const size_t floats = z.row_floats * (size_t)B;
    z.chunk = chunk_batches(full, floats);
    if ((uint64_t)z.chunk > batches) z.chunk = batches > 0 ? (int)batches : 1;
    z.stream_bytes = (size_t)z.chunk * floats * sizeof(float);
    return z;
}

eval_pass_size train_eval_pass_size_each_block(const sdp_model_config *cfg, const sdp_layout *full,
                                               int B, int T, uint64_t batches, bool training,
                                               sdp_gemm_provider gemm) {
    eval_pass_size z = {.rows = training ? B : eval_rows(B)};
    for (int g = 0; g < full->nblocks; g++) {
        const size_t carved =
            block_model_carved(cfg, full, g, z.rows, T, gemm, g == 0 ? &z.row_floats : NULL);
        if (carved > z.arena_bytes) z.arena_bytes = carved;
    }
    const size_t floats = z.row_floats * (size_t)B;
    z.chunk = chunk_batches(full, floats);
    if ((uint64_t)z.chunk > batches) z.chunk = batches > 0 ? (int)batches : 1;
    z.stream_bytes = (size_t)z.chunk * floats * sizeof(float);
    return z;
}
