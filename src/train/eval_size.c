/* What one pass of block-streamed evaluation (eval_stream.c) holds, computed before it runs, so
 * that the trainer allocates it and `sdp plan` predicts it with the same arithmetic
 * (io_memplan.c), and the one-block model specs the pass builds. */
#include "eval_size.h"
#include "io_memplan.h"
#include "run.h"

#include "sdp/check.h"

#include <stdlib.h>

/* Elements of the full layout's buffer tensors (running statistics), which t->recal holds. */
size_t eval_recal_floats(const sdp_layout *full) {
    size_t n = 0;
    for (int i = 0; i < full->nparams; i++)
        if (full->params[i].buffer) n += full->params[i].numel;
    return n;
}

/* Keeps block g whole, and the blocks no subnetwork drops (a ResNet's downsampling ones). */
sdp_subnet_spec eval_block_spec(const sdp_layout *full, int g) {
    const int n = full->nblocks;
    sdp_subnet_spec spec = {n, calloc((size_t)n, sizeof(bool)),
                            calloc((size_t)n, sizeof *spec.kept), calloc((size_t)n, sizeof(float))};
    SDP_CHECK(spec.keep && spec.kept && spec.scale, "out of memory");
    for (int b = 0; b < n; b++) {
        spec.keep[b] = b == g || !full->blocks[b].droppable;
        spec.scale[b] = 1.0f;
        for (int j = 0; j < full->blocks[b].ngroups; j++)
            spec.kept[b][j] = full->blocks[b].groups[j].width;
    }
    return spec;
}

void eval_block_spec_free(sdp_subnet_spec *spec) {
    free(spec->keep);
    free(spec->kept);
    free(spec->scale);
}

/* The residual streams of a chunk of batches are about as large as the largest block: it bounds
 * what evaluation adds to a worker, and the blocks are re-sent once per chunk. */
static int chunk_batches(const sdp_layout *full, size_t floats) {
    size_t largest = 0;
    size_t *n = calloc((size_t)full->nblocks + 1, sizeof *n); /* one pass: thousands of layers */
    SDP_CHECK(n, "out of memory");
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

eval_pass_size eval_pass_size_of(const sdp_model_config *cfg, const sdp_layout *full, int B, int T,
                                 uint64_t batches, bool training, sdp_gemm_provider gemm) {
    eval_pass_size z = {.rows = training ? B : eval_rows(B)};
    for (int g = 0; g < full->nblocks; g++) {
        sdp_mem dry = {.dry = true};
        sdp_subnet_spec spec = eval_block_spec(full, g);
        sdp_model_config counted = *cfg;
        counted.backend = sdp_backend_cpu(gemm, &dry);
        sdp_model m;
        run_family(cfg)->create(&m, &counted, &spec, z.rows, T, SDP_MODEL_INFER);
        if (g == 0) z.row_floats = m.ops->stream_floats(&m) / (size_t)z.rows;
        m.ops->destroy(&m);
        sdp_backend_destroy(counted.backend);
        eval_block_spec_free(&spec);
        if (dry.carved > z.arena_bytes) z.arena_bytes = dry.carved;
    }
    const size_t floats = z.row_floats * (size_t)B;
    z.chunk = chunk_batches(full, floats);
    if ((uint64_t)z.chunk > batches) z.chunk = batches > 0 ? (int)batches : 1;
    z.stream_bytes = (size_t)z.chunk * floats * sizeof(float);
    return z;
}
