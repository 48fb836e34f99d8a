#include "sdp/sync.h"

#include "sdp/check.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- set-up ------------------------------------------------------------------------------- */

static int group_of_run(const sdp_sync *s, const sdp_run *r) {
    if (r->unit < 0) return -1;
    int g = s->plan->units[r->unit].owner_group;
    return s->plan->groups[g].nmembers == s->world ? -1 : g; /* everyone: same as shared */
}

static const sdp_run *run_at(const sdp_sync *s, int i) {
    return &s->map->runs[i];
}

typedef struct {
    size_t global;
    int run;
} keyed_run;

static int by_global(const void *a, const void *b) {
    size_t x = ((const keyed_run *)a)->global, y = ((const keyed_run *)b)->global;
    return (x > y) - (x < y);
}

/* Sorts run indices by their global offset: the order every owner agrees on. */
static void sort_by_global(const sdp_subnet_map *map, int *runs, int n) {
    keyed_run *k = malloc(sizeof *k * (size_t)(n + 1));
    SDP_CHECK(k, "out of memory");
    for (int i = 0; i < n; i++) k[i] = (keyed_run){map->runs[runs[i]].global, runs[i]};
    qsort(k, (size_t)n, sizeof *k, by_global);
    for (int i = 0; i < n; i++) runs[i] = k[i].run;
    free(k);
}

static bool is_member(const sdp_owner_group *g, int rank) {
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i] == rank) return true;
    return false;
}

static void add_bucket(sdp_sync *s, int group, MPI_Comm comm, int nmembers) {
    sdp_bucket *b = &s->buckets[s->nbuckets++];
    memset(b, 0, sizeof *b);
    b->group = group;
    b->comm = comm;
    b->nmembers = nmembers;
    b->runs = malloc(sizeof(int) * (size_t)(s->map->nruns + 1));
    SDP_CHECK(b->runs, "out of memory");
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = run_at(s, i);
        if (sdp_run_owned(r, s->plan, s->rank) && group_of_run(s, r) == group) {
            b->runs[b->nruns++] = i;
            b->count += r->len;
        }
    }
    sort_by_global(s->map, b->runs, b->nruns);
}

void sdp_sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map, int rank,
                   int world, sdp_mem *mem) {
    memset(s, 0, sizeof *s);
    s->plan = plan;
    s->map = map;
    s->rank = rank;
    s->world = world;
    s->mem = mem;
    s->grad_index = malloc(sizeof(size_t) * (size_t)(map->nruns + 1));
    SDP_CHECK(s->grad_index, "out of memory");
    for (int i = 0; i < map->nruns; i++) {
        s->grad_index[i] = s->owned;
        if (sdp_run_owned(&map->runs[i], plan, rank)) s->owned += map->runs[i].len;
    }
    s->buckets = calloc((size_t)plan->ngroups + 1, sizeof *s->buckets);
    SDP_CHECK(s->buckets, "out of memory");
    MPI_Comm world_comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);
    add_bucket(s, -1, world_comm, world);
    MPI_Group world_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    /* Members create each group's communicator in the same global order, so creation never
     * deadlocks; non-members skip it. */
    for (int g = 0; g < plan->ngroups; g++) {
        const sdp_owner_group *og = &plan->groups[g];
        if (og->nmembers == world || !is_member(og, rank)) continue;
        MPI_Group grp;
        MPI_Comm comm;
        MPI_Group_incl(world_group, og->nmembers, og->members, &grp);
        MPI_Comm_create_group(MPI_COMM_WORLD, grp, g, &comm);
        MPI_Group_free(&grp);
        add_bucket(s, g, comm, og->nmembers);
    }
    MPI_Group_free(&world_group);
    size_t largest = 0;
    for (int b = 0; b < s->nbuckets; b++)
        if (s->buckets[b].count > largest) largest = s->buckets[b].count;
    for (int g = 0; g < plan->ngroups; g++) { /* publishing and gathering use the same buffer */
        size_t n = 0;
        for (int i = 0; i < map->nruns; i++)
            if (map->runs[i].unit >= 0 && plan->units[map->runs[i].unit].owner_group == g)
                n += map->runs[i].len;
        if (n > largest) largest = n;
    }
    s->pack = sdp_alloc(mem, SDP_MEM_BUFFERS, (largest + 1) * sizeof(float));
}

void sdp_sync_free(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        MPI_Comm_free(&s->buckets[b].comm);
        free(s->buckets[b].runs);
    }
    free(s->buckets);
    free(s->grad_index);
    sdp_free(s->mem, s->pack);
    memset(s, 0, sizeof *s);
}

int sdp_sync_segments(const sdp_sync *s, const sdp_layout *local, bool grads_compact,
                      bool decay_all, sdp_opt_segment **segs) {
    *segs = malloc(sizeof **segs * (size_t)(s->map->nruns + 1));
    SDP_CHECK(*segs, "out of memory");
    int n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = run_at(s, i);
        if (!sdp_run_owned(r, s->plan, s->rank)) continue;
        bool decay = decay_all || local->params[r->param].decay;
        size_t g = grads_compact ? s->grad_index[i] : r->local;
        sdp_opt_segment *last = n ? &(*segs)[n - 1] : NULL;
        /* Merge neighbours that are contiguous in every buffer: fewer, longer loops. */
        if (last && last->decay == decay && last->offset + last->count == r->local &&
            last->grad_offset + last->count == g &&
            last->state_offset + last->count == s->grad_index[i]) {
            last->count += r->len;
            continue;
        }
        (*segs)[n++] = (sdp_opt_segment){r->local, r->len, decay, g, s->grad_index[i]};
    }
    return n;
}

/* ---- gradients ------------------------------------------------------------------------------ */

static float *grad_of(const sdp_sync *s, float *grads, int i, bool compact) {
    return grads + (compact ? s->grad_index[i] : run_at(s, i)->local);
}

/* MPI counts are ints: reduce very large buckets in pieces. */
static void allreduce_sum(float *x, size_t n, MPI_Comm comm) {
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        MPI_Allreduce(MPI_IN_PLACE, x + off, (int)len, MPI_FLOAT, MPI_SUM, comm);
    }
}

static void count_ring_allreduce(sdp_sync *s, size_t elems, int members) {
    uint64_t bytes = (uint64_t)(2.0 * (members - 1) / members * (double)elems * sizeof(float));
    s->bytes.sent += bytes;
    s->bytes.recv += bytes;
}

void sdp_sync_grads(sdp_sync *s, float *grads, bool grads_compact) {
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (bk->nmembers == 1 || bk->count == 0) continue;
        size_t at = 0;
        for (int j = 0; j < bk->nruns; j++) {
            int i = bk->runs[j];
            memcpy(s->pack + at, grad_of(s, grads, i, grads_compact),
                   run_at(s, i)->len * sizeof(float));
            at += run_at(s, i)->len;
        }
        allreduce_sum(s->pack, bk->count, bk->comm);
        count_ring_allreduce(s, bk->count, bk->nmembers);
        const float inv = 1.0f / (float)bk->nmembers;
        at = 0;
        for (int j = 0; j < bk->nruns; j++) {
            int i = bk->runs[j];
            float *dst = grad_of(s, grads, i, grads_compact);
            for (size_t e = 0; e < run_at(s, i)->len; e++) dst[e] = s->pack[at + e] * inv;
            at += run_at(s, i)->len;
        }
    }
}

double sdp_sync_grad_norm(sdp_sync *s, const float *grads, bool grads_compact) {
    double local = 0;
    for (int b = 0; b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        double part = 0;
        for (int j = 0; j < bk->nruns; j++) {
            int i = bk->runs[j];
            part += sdp_sumsq(grad_of(s, (float *)grads, i, grads_compact), run_at(s, i)->len);
        }
        local += part / bk->nmembers; /* each of the group's owners holds the same gradient */
    }
    /* Gather and add in rank order so every rank computes the bitwise same norm. */
    double *all = malloc(sizeof(double) * (size_t)s->world);
    SDP_CHECK(all, "out of memory");
    MPI_Allgather(&local, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double total = 0;
    for (int r = 0; r < s->world; r++) total += all[r];
    free(all);
    return sqrt(total);
}

/* ---- parameters ----------------------------------------------------------------------------- */

/* The publisher of an owner group: its members take turns across groups, spreading the load. */
static int publisher_of(const sdp_plan *p, int group) {
    const sdp_owner_group *g = &p->groups[group];
    return g->members[group % g->nmembers];
}

/* Runs of one plan group present in this worker's map, in global order (malloc'd). */
static int *runs_of_group(const sdp_sync *s, int group, int *n) {
    int *runs = malloc(sizeof(int) * (size_t)(s->map->nruns + 1));
    SDP_CHECK(runs, "out of memory");
    *n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        int u = s->map->runs[i].unit;
        if (u >= 0 && s->plan->units[u].owner_group == group) runs[(*n)++] = i;
    }
    sort_by_global(s->map, runs, *n);
    return runs;
}

void sdp_sync_publish(sdp_sync *s, float *params) {
    for (int g = 0; g < s->plan->ngroups; g++) {
        const sdp_owner_group *og = &s->plan->groups[g];
        if (og->nmembers == s->world) continue; /* everyone owns it already */
        int n, root = publisher_of(s->plan, g);
        int *runs = runs_of_group(s, g, &n);
        size_t count = 0;
        for (int j = 0; j < n; j++) count += run_at(s, runs[j])->len;
        if (s->rank == root)
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                memcpy(s->pack + at, params + run_at(s, runs[j])->local,
                       run_at(s, runs[j])->len * sizeof(float));
                at += run_at(s, runs[j])->len;
            }
        for (size_t off = 0; off < count; off += (size_t)1 << 30) {
            size_t len = count - off < ((size_t)1 << 30) ? count - off : (size_t)1 << 30;
            MPI_Bcast(s->pack + off, (int)len, MPI_FLOAT, root, MPI_COMM_WORLD);
        }
        const uint64_t bytes = count * sizeof(float);
        if (s->rank == root) s->bytes.sent += bytes * (uint64_t)(s->world - og->nmembers);
        if (!is_member(og, s->rank)) {
            s->bytes.recv += bytes;
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                memcpy(params + run_at(s, runs[j])->local, s->pack + at,
                       run_at(s, runs[j])->len * sizeof(float));
                at += run_at(s, runs[j])->len;
            }
        }
        free(runs);
    }
}

static size_t local_index(const sdp_sync *s, int i, bool state_compact) {
    return state_compact ? s->grad_index[i] : run_at(s, i)->local;
}

/* Whether this worker is the one that provides run i when the full model is assembled. */
static bool provides(const sdp_sync *s, int i) {
    const sdp_run *r = run_at(s, i);
    if (r->unit < 0) return s->rank == 0;
    return publisher_of(s->plan, s->plan->units[r->unit].owner_group) == s->rank;
}

void sdp_sync_gather_full(sdp_sync *s, const float *local, bool state_compact, float *full) {
    /* Each rank sends (global offset, length) pairs and the values of the runs it provides. */
    size_t nr = 0, ne = 0;
    for (int i = 0; i < s->map->nruns; i++)
        if (provides(s, i)) nr++, ne += run_at(s, i)->len;
    if (s->rank == 0) {
        for (int i = 0; i < s->map->nruns; i++)
            if (provides(s, i))
                memcpy(full + run_at(s, i)->global, local + local_index(s, i, state_compact),
                       run_at(s, i)->len * sizeof(float));
        for (int src = 1; src < s->world; src++) {
            uint64_t hdr[2];
            MPI_Recv(hdr, 2, MPI_UINT64_T, src, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            uint64_t *pairs = malloc(sizeof(uint64_t) * 2 * (hdr[0] + 1));
            float *vals = malloc(sizeof(float) * (hdr[1] + 1));
            SDP_CHECK(pairs && vals, "out of memory assembling the full model");
            MPI_Recv(pairs, (int)(2 * hdr[0]), MPI_UINT64_T, src, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Recv(vals, (int)hdr[1], MPI_FLOAT, src, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (uint64_t j = 0, at = 0; j < hdr[0]; j++) {
                memcpy(full + pairs[2 * j], vals + at, pairs[2 * j + 1] * sizeof(float));
                at += pairs[2 * j + 1];
            }
            s->bytes.recv += hdr[1] * sizeof(float);
            free(pairs);
            free(vals);
        }
        return;
    }
    uint64_t hdr[2] = {nr, ne};
    uint64_t *pairs = malloc(sizeof(uint64_t) * 2 * (nr + 1));
    float *vals = malloc(sizeof(float) * (ne + 1));
    SDP_CHECK(pairs && vals, "out of memory assembling the full model");
    for (int i = 0, j = 0, at = 0; i < s->map->nruns; i++) {
        if (!provides(s, i)) continue;
        pairs[2 * j] = run_at(s, i)->global;
        pairs[2 * j + 1] = run_at(s, i)->len;
        memcpy(vals + at, local + local_index(s, i, state_compact),
               run_at(s, i)->len * sizeof(float));
        at += (int)run_at(s, i)->len;
        j++;
    }
    MPI_Send(hdr, 2, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
    MPI_Send(pairs, (int)(2 * nr), MPI_UINT64_T, 0, 2, MPI_COMM_WORLD);
    MPI_Send(vals, (int)ne, MPI_FLOAT, 0, 3, MPI_COMM_WORLD);
    s->bytes.sent += ne * sizeof(float);
    free(pairs);
    free(vals);
}

void sdp_sync_scatter_full(const sdp_sync *s, const float *full, float *local, bool state_compact) {
    for (int i = 0; i < s->map->nruns; i++) {
        if (state_compact && !sdp_run_owned(run_at(s, i), s->plan, s->rank)) continue;
        memcpy(local + local_index(s, i, state_compact), full + run_at(s, i)->global,
               run_at(s, i)->len * sizeof(float));
    }
}

/* ---- replica check -------------------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void sdp_sync_check_replicas(sdp_sync *s, const float *params, const float *m, const float *v,
                             long step) {
    for (int b = 0; b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        uint64_t h = 0xcbf29ce484222325ull;
        for (int j = 0; j < bk->nruns; j++) {
            int i = bk->runs[j];
            size_t len = run_at(s, i)->len * sizeof(float);
            h = fnv1a(h, params + run_at(s, i)->local, len);
            if (m) h = fnv1a(h, m + s->grad_index[i], len);
            if (v) h = fnv1a(h, v + s->grad_index[i], len);
        }
        uint64_t lo, hi;
        MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, bk->comm);
        MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, bk->comm);
        if (lo != hi) {
            char who[256] = "all workers";
            if (bk->group >= 0) {
                const sdp_owner_group *g = &s->plan->groups[bk->group];
                int at = snprintf(who, sizeof who, "workers");
                for (int k = 0; k < g->nmembers && at < (int)sizeof who - 8; k++)
                    at += snprintf(who + at, sizeof who - (size_t)at, " %d", g->members[k]);
            }
            sdp_fatal("replica check failed at step %ld: the owners (%s) of %d runs hold "
                      "different parameters or optimizer state; this is a bug in sdp, please "
                      "report it with the run's config.json",
                      step, who, bk->nruns);
        }
    }
}
