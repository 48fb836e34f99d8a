/* sdp_sync set-up and teardown: buckets, compact offsets, shards, --zero 2 pieces, and where
 * the buffers live (sdp_sync_use_backend). */
#include "sync_internal.h"

#include "sdp/check.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- set-up ------------------------------------------------------------------------------- */

int sync_group_of_run(const sdp_sync *s, const sdp_run *r) {
    if (r->unit < 0) return -1;
    int g = s->plan->units[r->unit].owner_group;
    return s->plan->groups[g].nmembers == s->world ? -1 : g; /* everyone: same as shared */
}

typedef struct {
    size_t global;
    int run;
} keyed_run;

static int by_global(const void *a, const void *b) {
    size_t x = ((const keyed_run *)a)->global, y = ((const keyed_run *)b)->global;
    return (x > y) - (x < y);
}

void sync_sort_by_global(const sdp_subnet_map *map, int *runs, int n) {
    keyed_run *k = sdp_xmalloc(sizeof *k * (size_t)(n + 1), "sorting a bucket's runs");
    for (int i = 0; i < n; i++) k[i] = (keyed_run){map->runs[runs[i]].global, runs[i]};
    qsort(k, (size_t)n, sizeof *k, by_global);
    for (int i = 0; i < n; i++) runs[i] = k[i].run;
    free(k);
}

int *sync_runs_of_group(const sdp_sync *s, int group, int *n) {
    int *runs = sdp_xmalloc(sizeof(int) * (size_t)(s->map->nruns + 1), "a group's runs");
    *n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        int u = s->map->runs[i].unit;
        if (u >= 0 && s->plan->units[u].owner_group == group) runs[(*n)++] = i;
    }
    sync_sort_by_global(s->map, runs, *n);
    return runs;
}

static int bucket_ready_after(const sdp_sync *s, const sdp_bucket *b, const int *layer_of) {
    int ready = INT_MAX;
    for (int j = 0; j < b->nruns; j++) {
        int l = layer_of[sync_run_at(s, b->runs[j])->param];
        if (l < 0) return -1; /* stem or head: complete only at the end */
        if (l < ready) ready = l;
    }
    return ready == INT_MAX ? -1 : ready;
}

static void add_bucket(sdp_sync *s, int group, MPI_Comm comm, int nmembers, const int *layer_of) {
    sdp_bucket *b = &s->buckets[s->nbuckets++];
    memset(b, 0, sizeof *b);
    b->group = group;
    b->comm = comm;
    b->nmembers = nmembers;
    b->runs = sdp_xmalloc(sizeof(int) * (size_t)(s->map->nruns + 1), "a bucket's runs");
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        if (sync_trained(s, r) && sync_group_of_run(s, r) == group) {
            b->runs[b->nruns++] = i;
            b->count += r->len;
        }
    }
    sync_sort_by_global(s->map, b->runs, b->nruns);
    b->ready_after = bucket_ready_after(s, b, layer_of);
    b->reqs =
        sdp_xmalloc(sizeof(MPI_Request) * (b->count / SYNC_MAX_PIECE + 2), "a bucket's requests");
}

/* Compact gradients and optimizer state are laid out bucket after bucket. */
static void assign_compact_offsets(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        bk->start = s->owned;
        for (int j = 0; j < bk->nruns; j++) {
            s->grad_index[bk->runs[j]] = s->owned;
            s->run_bucket[bk->runs[j]] = b;
            s->run_pos[bk->runs[j]] = s->owned - bk->start;
            s->owned += sync_run_at(s, bk->runs[j])->len;
        }
    }
}

void sdp_sync_shard(size_t count, int k, int j, size_t *lo, size_t *hi) {
    SDP_ASSERT(k >= 1 && j >= 0 && j < k);
    *lo = (size_t)j * count / (size_t)k;
    *hi = (size_t)(j + 1) * count / (size_t)k;
}

/* This worker's index in a bucket's communicator: its place in the group's members, in whose
 * order MPI_Group_incl ranked the communicator, or its world rank in the shared bucket. */
static int member_index(const sdp_sync *s, const sdp_bucket *b) {
    return b->group < 0 ? s->rank : sdp_owner_group_index(&s->plan->groups[b->group], s->rank);
}

/* The optimizer state, bucket after bucket: each bucket's shard of it (all of it without --zero
 * 1), so that without --zero 1 the state lies exactly as the gradients do. Under --zero 1 the
 * reduce-scatter and all-gather take every member's shard as MPI counts. */
static void assign_shards(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        bk->shard_lo = 0, bk->shard_hi = bk->count;
        if (s->zero)
            sdp_sync_shard(bk->count, bk->nmembers, member_index(s, bk), &bk->shard_lo,
                           &bk->shard_hi);
        bk->state_start = s->state;
        s->state += bk->shard_hi - bk->shard_lo;
        if (!s->zero || bk->nmembers == 1) continue;
        SDP_CHECK(bk->count <= INT_MAX,
                  "--zero %d: an owner group's gradients (%zu elements) exceed what one MPI "
                  "reduce-scatter takes (%d): use --zero 0",
                  s->plan->cfg.zero, bk->count, INT_MAX);
        const size_t k = (size_t)bk->nmembers;
        bk->shard_counts = sdp_xmalloc(sizeof(int) * k, "a bucket's shards");
        bk->shard_displs = sdp_xmalloc(sizeof(int) * k, "a bucket's shards");
        for (int j = 0; j < bk->nmembers; j++) {
            size_t lo, hi;
            sdp_sync_shard(bk->count, bk->nmembers, j, &lo, &hi);
            bk->shard_counts[j] = (int)(hi - lo);
            bk->shard_displs[j] = (int)lo;
        }
    }
}

/* ---- --zero 2: pieces of buckets, one local layer each ------------------------------------- */

/* A piece is sharded evenly over its bucket's members (sdp_sync_shard of its own size), so that
 * every member sends and receives its share of each piece's collectives. */
static void add_piece(sdp_sync *s, int b, int layer, size_t lo, size_t hi) {
    const sdp_bucket *bk = &s->buckets[b];
    sdp_piece *p = &s->pieces[s->npieces++];
    *p = (sdp_piece){.bucket = b, .layer = layer, .lo = lo, .hi = hi, .req = MPI_REQUEST_NULL};
    size_t slo, shi;
    sdp_sync_shard(hi - lo, bk->nmembers, member_index(s, bk), &slo, &shi);
    p->shard_lo = lo + slo, p->shard_hi = lo + shi;
    if (bk->nmembers == 1) return;
    const size_t k = (size_t)bk->nmembers;
    p->counts = sdp_xmalloc(sizeof(int) * k, "a piece's shards");
    p->displs = sdp_xmalloc(sizeof(int) * k, "a piece's shards");
    for (int j = 0; j < bk->nmembers; j++) {
        sdp_sync_shard(hi - lo, bk->nmembers, j, &slo, &shi);
        p->counts[j] = (int)(shi - slo);
        p->displs[j] = (int)slo;
    }
}

/* Cuts every bucket where the local layer of its runs changes (empty runs cut nothing). */
static void cut_pieces(sdp_sync *s, const int *layer_of) {
    s->pieces = sdp_xcalloc((size_t)s->map->nruns + 1, sizeof *s->pieces, "the gradients' pieces");
    for (int b = 0; b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        size_t lo = 0, pos = 0;
        int cur = 0;
        bool open = false;
        for (int j = 0; j < bk->nruns; j++) {
            const sdp_run *r = sync_run_at(s, bk->runs[j]);
            if (r->len == 0) continue;
            const int layer = layer_of[r->param] < 0 ? -1 : layer_of[r->param];
            if (open && layer != cur) add_piece(s, b, cur, lo, pos), lo = pos;
            cur = layer, open = true;
            pos += r->len;
            s->run_piece[bk->runs[j]] = s->npieces; /* the piece it opens or extends */
        }
        if (open) add_piece(s, b, cur, lo, pos);
    }
    /* The optimizer state: bucket after bucket, piece after piece, each piece's shard. */
    s->state = 0;
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (i == 0 || s->pieces[i - 1].bucket != p->bucket)
            s->buckets[p->bucket].state_start = s->state;
        p->state_start = s->state;
        s->state += p->shard_hi - p->shard_lo;
    }
}

/* The gradient buffer under --zero 2: the shards (in state order), then the stem's and head's
 * pieces, then two slots as large as the largest layer's pieces; a layer's pieces lie in slot
 * (layer & 1), one after the other. */
static void place_pieces(sdp_sync *s) {
    int layers = 0;
    for (int i = 0; i < s->npieces; i++)
        if (s->pieces[i].layer + 1 > layers) layers = s->pieces[i].layer + 1;
    size_t *fill = sdp_xcalloc((size_t)layers + 1, sizeof(size_t), "the gradients' slots");
    size_t at = s->state, slot = 0;
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (p->layer < 0) {
            p->store = at;
            at += p->hi - p->lo;
        } else {
            p->store = fill[p->layer]; /* within the slot, for now */
            fill[p->layer] += p->hi - p->lo;
            if (fill[p->layer] > slot) slot = fill[p->layer];
        }
    }
    for (int i = 0; i < s->npieces; i++)
        if (s->pieces[i].layer >= 0)
            s->pieces[i].store += at + (size_t)(s->pieces[i].layer & 1) * slot;
    s->grad_elems = at + 2 * slot;
    free(fill);
    /* Each run's gradient moves to its piece. */
    for (int i = 0; i < s->npieces; i++) {
        const sdp_piece *p = &s->pieces[i];
        const sdp_bucket *bk = &s->buckets[p->bucket];
        for (int j = 0; j < bk->nruns; j++) {
            const size_t pos = s->run_pos[bk->runs[j]];
            if (pos >= p->lo && pos < p->hi) s->grad_index[bk->runs[j]] = p->store + (pos - p->lo);
        }
    }
}

/* The publishing buffer holds the largest group's runs (backward masking only). */
static size_t publish_buffer_elems(const sdp_sync *s) {
    if (s->plan->cfg.mask != SDP_MASK_BACKWARD) return 0;
    size_t largest = 0;
    for (int g = 0; g < s->plan->ngroups; g++) {
        size_t n = 0;
        for (int i = 0; i < s->map->nruns; i++)
            if (s->map->runs[i].unit >= 0 && s->plan->units[s->map->runs[i].unit].owner_group == g)
                n += s->map->runs[i].len;
        if (n > largest) largest = n;
    }
    return largest;
}

void sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
               const int *layer_of_param, int rank, int world, sdp_mem *mem, bool simulate) {
    memset(s, 0, sizeof *s);
    s->plan = plan;
    s->map = map;
    s->rank = rank;
    s->world = world;
    s->mem = mem;
    s->zero = plan->cfg.zero >= 1;
    s->zero2 = plan->cfg.zero == 2;
    s->grad_index = sdp_xcalloc((size_t)map->nruns + 1, sizeof(size_t), "the gradients' index");
    s->run_pos = sdp_xcalloc((size_t)map->nruns + 1, sizeof(size_t), "the gradients' index");
    s->run_bucket = sdp_xmalloc(sizeof(int) * (size_t)(map->nruns + 1), "the gradients' index");
    s->run_piece = sdp_xmalloc(sizeof(int) * (size_t)(map->nruns + 1), "the gradients' index");
    for (int i = 0; i < map->nruns; i++) s->run_bucket[i] = s->run_piece[i] = -1;
    s->buckets = sdp_xcalloc((size_t)plan->ngroups + 1, sizeof *s->buckets, "the sync's buckets");
    MPI_Comm world_comm = MPI_COMM_NULL;
    if (!simulate) MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);
    add_bucket(s, -1, world_comm, world, layer_of_param);
    MPI_Group world_group = MPI_GROUP_NULL;
    if (!simulate) MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    /* Members create each group's communicator in the same global order, so creation never
     * deadlocks; non-members skip it. */
    for (int g = 0; g < plan->ngroups; g++) {
        const sdp_owner_group *og = &plan->groups[g];
        if (og->nmembers == world || !sync_is_member(og, rank)) continue;
        MPI_Comm comm = MPI_COMM_NULL;
        if (!simulate) {
            MPI_Group grp;
            MPI_Group_incl(world_group, og->nmembers, og->members, &grp);
            MPI_Comm_create_group(MPI_COMM_WORLD, grp, g, &comm);
            MPI_Group_free(&grp);
        }
        add_bucket(s, g, comm, og->nmembers, layer_of_param);
    }
    if (!simulate) MPI_Group_free(&world_group);
    assign_compact_offsets(s);
    assign_shards(s);
    s->grad_elems = s->owned;
    if (s->zero2) {
        cut_pieces(s, layer_of_param);
        place_pieces(s);
    }
    size_t publish = publish_buffer_elems(s);
    if (publish) s->pack = sdp_alloc(mem, SDP_MEM_BUFFERS, publish * sizeof(float));
}

void sdp_sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
                   const int *layer_of_param, int rank, int world, sdp_mem *mem) {
    sync_init(s, plan, map, layer_of_param, rank, world, mem, false);
}

void sdp_sync_init_simulated(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
                             const int *layer_of_param, int rank, int world, sdp_mem *mem) {
    sync_init(s, plan, map, layer_of_param, rank, world, mem, true);
}

void sdp_sync_free(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        if (s->buckets[b].dev) s->be->comm_close(s->be, s->buckets[b].dev);
        if (s->buckets[b].comm != MPI_COMM_NULL) MPI_Comm_free(&s->buckets[b].comm);
        free(s->buckets[b].runs);
        free(s->buckets[b].reqs);
        free(s->buckets[b].shard_counts);
        free(s->buckets[b].shard_displs);
    }
    free(s->buckets);
    for (int i = 0; i < s->npieces; i++) {
        free(s->pieces[i].counts);
        free(s->pieces[i].displs);
    }
    free(s->pieces);
    free(s->grad_index);
    free(s->run_pos);
    free(s->run_bucket);
    free(s->run_piece);
    sdp_free(s->mem, s->pack);
    sdp_free(s->mem, s->stage);
    if (s->dev_pack) s->be->free(s->be, s->dev_pack);
    memset(s, 0, sizeof *s);
}

/* ---- where the buffers live ------------------------------------------------------------------ */

/* The publishing buffer moves to the device, and publishing broadcasts over the device
 * communicator of every worker; without one it stages through host memory (returns the elements
 * that needs). */
static size_t use_device_publishing(sdp_sync *s) {
    const size_t elems = publish_buffer_elems(s);
    if (!elems) return 0;
    sdp_free(s->mem, s->pack);
    s->pack = NULL;
    s->dev_pack = s->be->alloc(s->be, SDP_MEM_BUFFERS, elems * sizeof(float));
    return sync_world_device_comm(s) ? 0 : elems;
}

void sdp_sync_use_backend(sdp_sync *s, const sdp_backend *be) {
    s->be = be;
    if (!sync_on_device(s)) return;
    size_t largest_staged = 0;
    /* Buckets are opened in group order on every rank, as their MPI communicators were made. */
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (bk->comm != MPI_COMM_NULL && bk->nmembers > 1) bk->dev = be->comm_open(be, bk->comm);
        if (sync_staged(s, bk) && bk->count > largest_staged) largest_staged = bk->count;
    }
    const size_t publish_staged = use_device_publishing(s);
    if (publish_staged > largest_staged) largest_staged = publish_staged;
    if (largest_staged)
        s->stage = sdp_alloc(s->mem, SDP_MEM_BUFFERS, largest_staged * sizeof(float));
}
