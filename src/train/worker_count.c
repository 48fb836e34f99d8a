/* Counting every worker's model once per distinct subnetwork (worker_count.h). */
#include "worker_count.h"

#include "run.h"

#include "sdp/check.h"
#include "sdp/subnet.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

sdp_backend *worker_count_cpu(const void *ctx, sdp_mem *dry) {
    return sdp_backend_cpu(*(const sdp_gemm_provider *)ctx, dry);
}

static worker_count count_spec(const sdp_model_config *cfg, const sdp_subnet_spec *spec, int B,
                               int T, worker_count_backend make, const void *ctx) {
    sdp_mem dry = {.dry = true};
    sdp_model_config counted = *cfg;
    counted.backend = make(ctx, &dry);
    sdp_model m;
    run_family(cfg)->create(&m, &counted, spec, B, T, SDP_MODEL_TRAIN_BARE);
    worker_count c = {.numel = m.layout->numel,
                      .flops_per_example = m.ops->train_flops_per_example(&m)};
    m.ops->destroy(&m);
    sdp_backend_destroy(counted.backend);
    memcpy(c.peak, dry.peak, sizeof c.peak);
    return c;
}

worker_count worker_count_one(const sdp_model_config *cfg, const sdp_plan *p,
                              const sdp_layout *full, int rank, int B, int T,
                              worker_count_backend make, const void *ctx) {
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, p, full, rank);
    const worker_count c = count_spec(cfg, &spec, B, T, make, ctx);
    sdp_subnet_spec_free(&spec);
    return c;
}

/* ---- distinct specs ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

static uint64_t spec_hash(const sdp_subnet_spec *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, s->keep, (size_t)s->nblocks * sizeof *s->keep);
    h = mix(h, s->kept, (size_t)s->nblocks * sizeof *s->kept);
    return mix(h, s->scale, (size_t)s->nblocks * sizeof *s->scale);
}

static bool spec_equal(const sdp_subnet_spec *a, const sdp_subnet_spec *b) {
    const size_t n = (size_t)a->nblocks;
    return a->nblocks == b->nblocks && !memcmp(a->keep, b->keep, n * sizeof *a->keep) &&
           !memcmp(a->kept, b->kept, n * sizeof *a->kept) &&
           !memcmp(a->scale, b->scale, n * sizeof *a->scale);
}

typedef struct {
    sdp_subnet_spec spec;
    uint64_t hash;
    worker_count count;
} seen_spec;

void worker_count_all(const sdp_model_config *cfg, const sdp_plan *p, const sdp_layout *full, int B,
                      int T, worker_count_backend make, const void *ctx, worker_count *out) {
    const int N = p->cfg.world;
    /* Open addressing over twice as many slots as workers: each slot indexes `seen`. */
    const size_t nslots = 2 * (size_t)N + 1;
    int *slot = malloc(nslots * sizeof *slot);
    seen_spec *seen = malloc((size_t)N * sizeof *seen);
    SDP_CHECK(slot && seen, "out of memory counting %d workers' models", N);
    for (size_t i = 0; i < nslots; i++) slot[i] = -1;
    int nseen = 0;
    for (int r = 0; r < N; r++) {
        sdp_subnet_spec spec;
        sdp_subnet_spec_make(&spec, p, full, r);
        const uint64_t h = spec_hash(&spec);
        size_t i = (size_t)(h % nslots);
        while (slot[i] >= 0 && !(seen[slot[i]].hash == h && spec_equal(&seen[slot[i]].spec, &spec)))
            i = (i + 1) % nslots;
        if (slot[i] < 0) {
            seen[nseen] = (seen_spec){spec, h, count_spec(cfg, &spec, B, T, make, ctx)};
            slot[i] = nseen++;
        } else {
            sdp_subnet_spec_free(&spec);
        }
        out[r] = seen[slot[i]].count;
    }
    for (int i = 0; i < nseen; i++) sdp_subnet_spec_free(&seen[i].spec);
    free(seen);
    free(slot);
}
