/* Counting every worker's model once per distinct subnetwork (worker_count.h). */
#include "worker_count.h"

#include "eval_size.h"
#include "run.h"

#include "sdp/check.h"
#include "sdp/cuda_scratch.h"
#include "sdp/subnet.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* CUDA's attention scratch under each precision: the score matrices unless the fused kernels
 * run, which the counted model's sizes decide as the device's backend does. */
static size_t cuda_attention_scratch_fp32(const sdp_backend *be, int B, int T, int H, int hs) {
    (void)be;
    (void)hs; /* fp32 always takes the cuBLAS path */
    return sdp_cuda_attention_scratch_bytes(false, B, T, H);
}

static size_t cuda_attention_scratch_bf16(const sdp_backend *be, int B, int T, int H, int hs) {
    (void)be;
    const bool fused = sdp_cuda_attention_fused(SDP_PRECISION_BF16, true, B, H, hs);
    return sdp_cuda_attention_scratch_bytes(fused, B, T, H);
}

static size_t cuda_conv_scratch(const sdp_backend *be, const void *plan) {
    (void)be;
    (void)plan;
    return 0; /* cuDNN's lives in the context's workspace */
}

sdp_backend *train_counting_backend(bool cuda, sdp_precision precision, sdp_gemm_provider gemm,
                                    sdp_mem *dry) {
    sdp_backend *be = sdp_backend_cpu(gemm, dry);
    if (cuda) {
        be->attention_scratch_bytes = precision == SDP_PRECISION_BF16 ? cuda_attention_scratch_bf16
                                                                      : cuda_attention_scratch_fp32;
        be->conv_scratch_bytes = cuda_conv_scratch;
    }
    return be;
}

sdp_backend *train_worker_count_cpu(const void *ctx, sdp_mem *dry) {
    return sdp_backend_cpu(*(const sdp_gemm_provider *)ctx, dry);
}

static worker_count count_spec(const sdp_model_config *cfg, const sdp_subnet_spec *spec, int B,
                               int T, worker_count_backend make, const void *ctx) {
    sdp_mem dry = {.dry = true};
    sdp_model_config counted = *cfg;
    counted.backend = make(ctx, &dry);
    sdp_model m;
    train_run_family(cfg)->create(&m, &counted, spec, B, T, SDP_MODEL_TRAIN_BARE);
    worker_count c = {.numel = m.layout->numel,
                      .flops_per_example = m.ops->train_flops_per_example(&m),
                      .acts_pool = dry.pooled_by[SDP_MEM_ACTS]};
    m.ops->destroy(&m);
    sdp_backend_destroy(counted.backend);
    memcpy(c.peak, dry.peak, sizeof c.peak);
    return c;
}

worker_count train_worker_count_one(const sdp_model_config *cfg, const sdp_plan *p,
                                    const sdp_layout *full, int rank, int B, int T,
                                    worker_count_backend make, const void *ctx) {
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, p, full, rank);
    const worker_count c = count_spec(cfg, &spec, B, T, make, ctx);
    sdp_subnet_spec_free(&spec);
    return c;
}

/* ---- distinct subnetworks ------------------------------------------------------------------ */

/* What a worker's model is built from: the blocks it keeps, in order, each as its kind (blocks
 * alike, train_eval_block_kinds), its kept atoms and its scale. Workers with equal keys build the
 * same model, whichever alike blocks they keep: with block units, a transformer worker's model
 * depends only on how many layers it keeps. */
static size_t shape_key(const sdp_subnet_spec *s, const int *kinds, int *key) {
    size_t n = 0;
    for (int b = 0; b < s->nblocks; b++) {
        if (!s->keep[b]) continue;
        key[n++] = kinds[b];
        for (int j = 0; j < SDP_MAX_GROUPS; j++) key[n++] = s->kept[b][j];
        int32_t bits;
        memcpy(&bits, &s->scale[b], sizeof bits);
        key[n++] = bits;
    }
    return n;
}

static uint64_t key_hash(const int *key, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    const unsigned char *b = (const unsigned char *)key;
    for (size_t i = 0; i < n * sizeof *key; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct {
    int *key;
    size_t n;
    uint64_t hash;
    worker_count count;
} seen_shape;

void train_worker_count_all(const sdp_model_config *cfg, const sdp_plan *p, const sdp_layout *full,
                            int B, int T, worker_count_backend make, const void *ctx,
                            worker_count *out) {
    const int N = p->cfg.world;
    const size_t per_block = SDP_MAX_GROUPS + 2;
    /* Open addressing over twice as many slots as workers: each slot indexes `seen`. */
    const size_t nslots = 2 * (size_t)N + 1;
    const char *what = "counting the workers' models";
    int *slot = sdp_xmalloc(nslots * sizeof *slot, what);
    seen_shape *seen = sdp_xmalloc((size_t)N * sizeof *seen, what);
    int *kinds = sdp_xmalloc(sizeof(int) * ((size_t)full->nblocks + 1), what);
    int *key = sdp_xmalloc(sizeof(int) * ((size_t)full->nblocks * per_block + 1), what);
    train_eval_block_kinds(full, false, kinds);
    for (size_t i = 0; i < nslots; i++) slot[i] = -1;
    int nseen = 0;
    for (int r = 0; r < N; r++) {
        sdp_subnet_spec spec;
        sdp_subnet_spec_make(&spec, p, full, r);
        const size_t n = shape_key(&spec, kinds, key);
        const uint64_t h = key_hash(key, n);
        size_t i = (size_t)(h % nslots);
        while (slot[i] >= 0 && !(seen[slot[i]].hash == h && seen[slot[i]].n == n &&
                                 !memcmp(seen[slot[i]].key, key, n * sizeof *key)))
            i = (i + 1) % nslots;
        if (slot[i] < 0) {
            seen_shape *sh = &seen[nseen];
            sh->key = sdp_xmalloc(sizeof(int) * (n + 1), what);
            memcpy(sh->key, key, n * sizeof *key);
            sh->n = n, sh->hash = h;
            sh->count = count_spec(cfg, &spec, B, T, make, ctx);
            slot[i] = nseen++;
        }
        sdp_subnet_spec_free(&spec);
        out[r] = seen[slot[i]].count;
    }
    for (int i = 0; i < nseen; i++) free(seen[i].key);
    free(seen), free(slot), free(kinds), free(key);
}
