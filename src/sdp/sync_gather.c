/* The full model from and to the workers' local buffers: gathering ranges on rank 0 (what each
 * rank provides, and how much), and scattering. */
#include "sync_internal.h"

#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

static size_t local_index(const sdp_sync *s, int i, bool state_compact) {
    return state_compact ? s->grad_index[i] : sync_run_at(s, i)->local;
}

/* Whether `rank` is the worker that provides run r when the full model is assembled. */
bool sdp_sync_provides(const sdp_plan *p, const sdp_run *r, int rank, bool state_compact) {
    if (state_compact && r->buffer) return false; /* no optimizer state */
    if (r->unit < 0) return rank == 0;
    return p->groups[p->units[r->unit].owner_group].publisher == rank;
}

static bool provides(const sdp_sync *s, int i, bool state_compact) {
    return sdp_sync_provides(s->plan, sync_run_at(s, i), s->rank, state_compact);
}

/* The part of run r inside the global range [lo, hi): its first global element and its length
 * (0 when it lies outside). */
static size_t part_in_range(const sdp_run *r, size_t lo, size_t hi, size_t *first) {
    const size_t a = r->global > lo ? r->global : lo;
    const size_t b = r->global + r->len < hi ? r->global + r->len : hi;
    *first = a;
    return b > a ? b - a : 0;
}

/* Every piece this worker provides in a gather, as fn(ctx, its first global element, its length,
 * its place in the local buffer): the runs it provides (sdp_sync_provides), or under --zero 1 for
 * optimizer state the parts of its trained runs inside its shards. */
static void for_each_provided(const sdp_sync *s, bool state_compact,
                              void (*fn)(void *ctx, size_t global, size_t len, size_t from),
                              void *ctx) {
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        if (state_compact && s->zero) {
            size_t at, st;
            const size_t len = sync_trained(s, r) ? sync_state_part(s, i, &at, &st) : 0;
            if (len) fn(ctx, r->global + at, len, st);
        } else if (provides(s, i, state_compact)) {
            fn(ctx, r->global, r->len, local_index(s, i, state_compact));
        }
    }
}

/* What a worker sends of [lo, hi): counted, or packed as (offset in the range, length) pairs and
 * values when pairs is not NULL. */
typedef struct {
    size_t lo, hi;
    const float *local;
    uint64_t *pairs;
    float *vals;
    int np;
    size_t nv;
} range_pack;

static void pack_piece(void *ctx, size_t global, size_t len, size_t from) {
    range_pack *c = ctx;
    const sdp_run piece = {.global = global, .len = len};
    size_t first;
    const size_t n = part_in_range(&piece, c->lo, c->hi, &first);
    if (n == 0) return;
    if (c->pairs) {
        c->pairs[2 * c->np] = first - c->lo;
        c->pairs[2 * c->np + 1] = n;
        memcpy(c->vals + c->nv, c->local + from + (first - global), n * sizeof(float));
    }
    c->np++;
    c->nv += n;
}

static int walk_range(const sdp_sync *s, const float *local, bool state_compact, size_t lo,
                      size_t hi, uint64_t *pairs, float *vals, size_t *nvals) {
    range_pack c = {lo, hi, local, pairs, vals, 0, 0};
    for_each_provided(s, state_compact, pack_piece, &c);
    *nvals = c.nv;
    return c.np;
}

/* A sync of `rank`'s buckets and compact layout without communicators or buffers, for questions
 * asked from the plan and a map alone. */
/* The layers are the local layout's blocks: --zero 2 cuts its pieces, and shards them, by them. */
static void sync_of(sdp_sync *s, const sdp_plan *p, const sdp_subnet_map *map,
                    const sdp_layout *local, int rank, sdp_mem *dry) {
    int *layer_of = sdp_xcalloc((size_t)local->nparams + 1, sizeof(int), "the tensors' layers");
    for (int i = 0; i < local->nparams; i++) layer_of[i] = local->params[i].block;
    sync_init(s, p, map, layer_of, rank, p->cfg.world, dry, true);
    free(layer_of);
}

int sdp_sync_gather_count(const sdp_plan *p, const sdp_subnet_map *map, const sdp_layout *local,
                          int rank, bool state_compact, size_t lo, size_t hi, size_t *nvals) {
    sdp_mem dry = {.dry = true};
    sdp_sync s;
    sync_of(&s, p, map, local, rank, &dry);
    const int np = walk_range(&s, NULL, state_compact, lo, hi, NULL, NULL, nvals);
    sdp_sync_free(&s);
    return np;
}

typedef struct {
    void (*fn)(void *ctx, size_t global, size_t len);
    void *ctx;
} provided_fn;

static void call_provided(void *ctx, size_t global, size_t len, size_t from) {
    (void)from;
    const provided_fn *c = ctx;
    c->fn(c->ctx, global, len);
}

void sdp_sync_provided(const sdp_plan *p, const sdp_subnet_map *map, const sdp_layout *local,
                       int rank, bool state_compact,
                       void (*fn)(void *ctx, size_t global, size_t len), void *ctx) {
    if (!(state_compact && p->cfg.zero)) { /* whole runs: no layout needed */
        for (int i = 0; i < map->nruns; i++)
            if (sdp_sync_provides(p, &map->runs[i], rank, state_compact))
                fn(ctx, map->runs[i].global, map->runs[i].len);
        return;
    }
    sdp_mem dry = {.dry = true};
    sdp_sync s;
    sync_of(&s, p, map, local, rank, &dry);
    provided_fn c = {fn, ctx};
    for_each_provided(&s, state_compact, call_provided, &c);
    sdp_sync_free(&s);
}

/* Displacements of a gather from per-rank counts; returns the total. */
static int displacements(const int *counts, int *displs, int n) {
    int total = 0;
    for (int r = 0; r < n; r++) displs[r] = total, total += counts[r];
    return total;
}

/* Rank 0 writes what every rank sent of [lo, hi) into out. */
static void unpack_range(const uint64_t *pairs, int npairs, const float *vals, float *out) {
    size_t at = 0;
    for (int j = 0; j < npairs; j++) {
        memcpy(out + pairs[2 * j], vals + at, pairs[2 * j + 1] * sizeof(float));
        at += pairs[2 * j + 1];
    }
}

void sdp_sync_gather_range(sdp_sync *s, const float *local, bool state_compact, size_t lo,
                           size_t hi, float *out, sdp_mem *io) {
    SDP_ASSERT(lo <= hi && hi - lo <= SDP_SYNC_GATHER_MAX);
    size_t nv;
    const int np = walk_range(s, NULL, state_compact, lo, hi, NULL, NULL, &nv);
    uint64_t *pairs = sdp_alloc(io, SDP_MEM_BUFFERS, sizeof(uint64_t) * 2 * ((size_t)np + 1));
    float *vals = sdp_alloc(io, SDP_MEM_BUFFERS, sizeof(float) * (nv + 1));
    walk_range(s, local, state_compact, lo, hi, pairs, vals, &nv);
    const int mine[2] = {2 * np, (int)nv};
    const int W = s->world;
    /* Rank 0's counts: (pairs, values) per rank as gathered, then pair counts, value counts and
     * their displacements. */
    int *c = s->rank == 0 ? sdp_alloc(io, SDP_MEM_BUFFERS, sizeof(int) * 6 * (size_t)W) : NULL;
    MPI_Gather(mine, 2, MPI_INT, c, 2, MPI_INT, 0, MPI_COMM_WORLD);
    int *pc = NULL, *vc = NULL, *pd = NULL, *vd = NULL, npairs = 0, nvals = 0;
    uint64_t *all_pairs = NULL;
    float *all_vals = NULL;
    if (s->rank == 0) {
        pc = c + 2 * W, vc = c + 3 * W, pd = c + 4 * W, vd = c + 5 * W;
        for (int r = 0; r < W; r++) pc[r] = c[2 * r], vc[r] = c[2 * r + 1];
        npairs = displacements(pc, pd, W) / 2;
        nvals = displacements(vc, vd, W);
        all_pairs = sdp_alloc(io, SDP_MEM_BUFFERS, sizeof(uint64_t) * 2 * ((size_t)npairs + 1));
        all_vals = sdp_alloc(io, SDP_MEM_BUFFERS, sizeof(float) * ((size_t)nvals + 1));
    }
    MPI_Gatherv(pairs, mine[0], MPI_UINT64_T, all_pairs, pc, pd, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Gatherv(vals, mine[1], MPI_FLOAT, all_vals, vc, vd, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (s->rank == 0) {
        memset(out, 0, (hi - lo) * sizeof(float)); /* buffers have no optimizer state: zeros */
        unpack_range(all_pairs, npairs, all_vals, out);
        s->bytes.recv += (uint64_t)(nvals - vc[0]) * sizeof(float);
        sdp_free(io, all_pairs);
        sdp_free(io, all_vals);
        sdp_free(io, c);
    } else {
        s->bytes.sent += nv * sizeof(float);
    }
    sdp_free(io, pairs);
    sdp_free(io, vals);
}

void sdp_sync_gather_full(sdp_sync *s, const float *local, bool state_compact, size_t numel,
                          float *full, sdp_mem *io) {
    for (size_t lo = 0; lo < numel; lo += SDP_SYNC_GATHER_MAX) {
        const size_t hi = numel - lo < SDP_SYNC_GATHER_MAX ? numel : lo + SDP_SYNC_GATHER_MAX;
        sdp_sync_gather_range(s, local, state_compact, lo, hi, s->rank == 0 ? full + lo : NULL, io);
    }
}

void sdp_sync_for_each_run(const sdp_sync *s, float *local, bool state_compact,
                           void (*fn)(void *ctx, size_t global, size_t len, float *dst),
                           void *ctx) {
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        if (!state_compact) {
            fn(ctx, r->global, r->len, local + r->local);
            continue;
        }
        size_t at, st;
        const size_t len = sync_trained(s, r) ? sync_state_part(s, i, &at, &st) : 0;
        if (len) fn(ctx, r->global + at, len, local + st);
    }
}

static void copy_from_full(void *full, size_t global, size_t len, float *dst) {
    memcpy(dst, (const float *)full + global, len * sizeof(float));
}

void sdp_sync_scatter_full(const sdp_sync *s, const float *full, float *local, bool state_compact) {
    sdp_sync_for_each_run(s, local, state_compact, copy_from_full, (void *)full);
}
