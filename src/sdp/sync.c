#include "sdp/sync.h"

#include "sdp/check.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest MPI count used in one call (MPI counts are ints). */
#define MAX_PIECE ((size_t)1 << 30)

/* ---- set-up ------------------------------------------------------------------------------- */

static int group_of_run(const sdp_sync *s, const sdp_run *r) {
    if (r->unit < 0) return -1;
    int g = s->plan->units[r->unit].owner_group;
    return s->plan->groups[g].nmembers == s->world ? -1 : g; /* everyone: same as shared */
}

static const sdp_run *run_at(const sdp_sync *s, int i) {
    return &s->map->runs[i];
}

/* Owned and trained: the runs that have gradients and optimizer state. */
static bool trained(const sdp_sync *s, const sdp_run *r) {
    return !r->buffer && sdp_run_owned(r, s->plan, s->rank);
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
    keyed_run *k = sdp_xmalloc(sizeof *k * (size_t)(n + 1), "sorting a bucket's runs");
    for (int i = 0; i < n; i++) k[i] = (keyed_run){map->runs[runs[i]].global, runs[i]};
    qsort(k, (size_t)n, sizeof *k, by_global);
    for (int i = 0; i < n; i++) runs[i] = k[i].run;
    free(k);
}

static bool is_member(const sdp_owner_group *g, int rank) {
    return sdp_owner_group_index(g, rank) >= 0;
}

static int bucket_ready_after(const sdp_sync *s, const sdp_bucket *b, const int *layer_of) {
    int ready = INT_MAX;
    for (int j = 0; j < b->nruns; j++) {
        int l = layer_of[run_at(s, b->runs[j])->param];
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
        const sdp_run *r = run_at(s, i);
        if (trained(s, r) && group_of_run(s, r) == group) {
            b->runs[b->nruns++] = i;
            b->count += r->len;
        }
    }
    sort_by_global(s->map, b->runs, b->nruns);
    b->ready_after = bucket_ready_after(s, b, layer_of);
    b->reqs = sdp_xmalloc(sizeof(MPI_Request) * (b->count / MAX_PIECE + 2), "a bucket's requests");
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
            s->owned += run_at(s, bk->runs[j])->len;
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
            const sdp_run *r = run_at(s, bk->runs[j]);
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

/* Both inits: buckets, compact offsets and the publishing buffer. With simulate, one process
 * stands for `rank` of `world` workers: the buckets get no communicators (MPI_COMM_NULL). */
static void sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
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
        if (og->nmembers == world || !is_member(og, rank)) continue;
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

/* The bucket that holds trained run i's gradient. */
static const sdp_bucket *bucket_of(const sdp_sync *s, int i) {
    return s->run_bucket[i] < 0 ? NULL : &s->buckets[s->run_bucket[i]];
}

/* The part of trained run i whose optimizer state this worker keeps (the whole run without
 * --zero 1): returns its length, with *at its offset in the run and *state where its state lies
 * in the compact state buffers. */
static size_t state_part(const sdp_sync *s, int i, size_t *at, size_t *state) {
    const sdp_bucket *b = run_at(s, i)->len ? bucket_of(s, i) : NULL;
    *at = 0, *state = 0;
    if (!b) return 0;
    /* The shard that may hold it: the bucket's (--zero 1), or its piece's (--zero 2). */
    size_t slo = b->shard_lo, shi = b->shard_hi, sstate = b->state_start;
    if (s->zero2) {
        const sdp_piece *p = &s->pieces[s->run_piece[i]];
        slo = p->shard_lo, shi = p->shard_hi, sstate = p->state_start;
    }
    const size_t pos = s->run_pos[i], end = pos + run_at(s, i)->len;
    const size_t lo = pos > slo ? pos : slo;
    const size_t hi = end < shi ? end : shi;
    if (hi <= lo) return 0;
    *at = lo - pos;
    *state = sstate + (lo - slo);
    return hi - lo;
}

int sdp_sync_segments(const sdp_sync *s, const sdp_layout *local, bool decay_all,
                      sdp_opt_segment **segs) {
    *segs = sdp_xmalloc(sizeof **segs * (size_t)(s->map->nruns + 1), "the optimizer's segments");
    int n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = run_at(s, i);
        size_t at, st;
        const size_t len = trained(s, r) ? state_part(s, i, &at, &st) : 0;
        if (len == 0) continue;
        const bool decay = decay_all || local->params[r->param].decay;
        /* Under --zero 2 a shard's gradient lies where its state does. */
        const size_t p = r->local + at, g = s->zero2 ? st : s->grad_index[i] + at;
        sdp_opt_segment *last = n ? &(*segs)[n - 1] : NULL;
        /* Merge neighbours that are contiguous in every buffer: fewer, longer loops. */
        if (last && last->decay == decay && last->offset + last->count == p &&
            last->grad_offset + last->count == g && last->state_offset + last->count == st) {
            last->count += len;
            continue;
        }
        (*segs)[n++] = (sdp_opt_segment){p, len, decay, g, st};
    }
    return n;
}

/* ---- gradient layout for the model -------------------------------------------------------- */

static void slices_alloc(sdp_grad_slices *s, int cap, int axis) {
    s->axis = axis;
    const size_t bytes = sizeof(long) * (size_t)(cap + 1);
    s->start = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->len = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->dst = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->ld = sdp_xmalloc(bytes, "a tensor's gradient slices");
}

/* The owned slices of partly owned tensor pi. Along axis 0 each owned run is a block of rows;
 * along axis 1 row 0's runs name the columns, and row 1's place gives each slice's row stride
 * (its bucket may interleave other chunks' columns). */
static void slices_of(const sdp_sync *s, const sdp_param *lp, int pi, sdp_grad_slices *out) {
    int cap = 0;
    for (int i = 0; i < s->map->nruns; i++) cap += s->map->runs[i].param == pi;
    slices_alloc(out, cap, lp->axis);
    /* Tensors are seen as [shape[0], numel / shape[0]]. */
    const size_t cols = lp->numel / (size_t)lp->shape[0];
    const size_t inner = lp->axis == 0 ? cols : 1;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = run_at(s, i);
        if (r->param != pi || !trained(s, r)) continue;
        const size_t at = r->local - lp->offset;
        const long dst = (long)s->grad_index[i];
        if (lp->axis == 0) {
            out->start[out->n] = (long)(at / inner);
            out->len[out->n] = (long)(r->len / inner);
            out->dst[out->n] = dst;
            out->ld[out->n] = (long)inner;
            out->n++;
        } else if (at < cols) {
            out->start[out->n] = (long)at;
            out->len[out->n] = (long)r->len;
            out->dst[out->n] = dst;
            out->ld[out->n] = (long)r->len; /* one row only, unless row 1 says otherwise */
            out->n++;
        } else if (at < 2 * cols) {
            for (int k = 0; k < out->n; k++)
                if ((size_t)out->start[k] == at - cols) out->ld[k] = dst - out->dst[k];
        }
    }
}

void sdp_sync_grad_layout(const sdp_sync *s, const sdp_layout *local, long **grad_offset,
                          sdp_grad_slices **slices) {
    const int np = local->nparams;
    const char *what = "the gradients' layout";
    long *off = sdp_xmalloc(sizeof(long) * (size_t)(np + 1), what);
    int *owned = sdp_xcalloc((size_t)np + 1, sizeof(int), what),
        *total = sdp_xcalloc((size_t)np + 1, sizeof(int), what);
    bool *scattered = sdp_xcalloc((size_t)np + 1, sizeof(bool), what);
    size_t *next = sdp_xcalloc((size_t)np + 1, sizeof(size_t), what);
    sdp_grad_slices *sl = sdp_xcalloc((size_t)np + 1, sizeof *sl, what);
    for (int i = 0; i < np; i++) off[i] = -1;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = run_at(s, i);
        total[r->param]++;
        if (!trained(s, r)) continue;
        if (owned[r->param]++ == 0)
            off[r->param] = (long)s->grad_index[i];
        else if (s->grad_index[i] != next[r->param])
            scattered[r->param] = true;
        next[r->param] = s->grad_index[i] + r->len;
    }
    /* A tensor owned in part, or whose owned runs lie in several buckets, takes its gradient
     * as slices; any other owned tensor is one contiguous block. */
    for (int i = 0; i < np; i++)
        if (owned[i] > 0 && (owned[i] < total[i] || scattered[i])) {
            off[i] = SDP_GRAD_SLICED;
            slices_of(s, &local->params[i], i, &sl[i]);
        }
    free(owned);
    free(total);
    free(scattered);
    free(next);
    *grad_offset = off;
    *slices = sl;
}

void sdp_sync_grad_layout_free(long *grad_offset, sdp_grad_slices *slices, int nparams) {
    for (int i = 0; slices && i < nparams; i++) {
        free(slices[i].start);
        free(slices[i].len);
        free(slices[i].dst);
        free(slices[i].ld);
    }
    free(slices);
    free(grad_offset);
}

/* ---- where the buffers live ------------------------------------------------------------------ */

/* Whether the buffers are a device's, which MPI cannot read in place: they go through host
 * memory (staged) unless a device communicator reduces them. */
static bool on_device(const sdp_sync *s) {
    return !s->be->host_memory;
}

/* A bucket in device memory without a device communicator: reduced through host memory. */
static bool staged(const sdp_sync *s, const sdp_bucket *b) {
    return on_device(s) && !b->dev;
}

static bool reduced(const sdp_bucket *b) {
    return b->nmembers > 1 && b->count > 0;
}

/* The device communicator over every worker: the shared bucket's (always the first). */
static void *world_device_comm(const sdp_sync *s) {
    return s->buckets[0].dev;
}

/* The publishing buffer moves to the device, and publishing broadcasts over the device
 * communicator of every worker; without one it stages through host memory (returns the elements
 * that needs). */
static size_t use_device_publishing(sdp_sync *s) {
    const size_t elems = publish_buffer_elems(s);
    if (!elems) return 0;
    sdp_free(s->mem, s->pack);
    s->pack = NULL;
    s->dev_pack = s->be->alloc(s->be, SDP_MEM_BUFFERS, elems * sizeof(float));
    return world_device_comm(s) ? 0 : elems;
}

void sdp_sync_use_backend(sdp_sync *s, const sdp_backend *be) {
    s->be = be;
    if (!on_device(s)) return;
    size_t largest_staged = 0;
    /* Buckets are opened in group order on every rank, as their MPI communicators were made. */
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (bk->comm != MPI_COMM_NULL && bk->nmembers > 1) bk->dev = be->comm_open(be, bk->comm);
        if (staged(s, bk) && bk->count > largest_staged) largest_staged = bk->count;
    }
    const size_t publish_staged = use_device_publishing(s);
    if (publish_staged > largest_staged) largest_staged = publish_staged;
    if (largest_staged)
        s->stage = sdp_alloc(s->mem, SDP_MEM_BUFFERS, largest_staged * sizeof(float));
}

/* dst (host) = src (the backend's memory), and the reverse. */
static void to_host(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->download(s->be, dst, src, n * sizeof(float));
}

static void from_host(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->upload(s->be, dst, src, n * sizeof(float));
}

/* One copy within the backend's memory (a row of n). */
static void device_copy(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->copy_rows(s->be, dst, n, src, n, 1, n);
}

/* ---- gradients ------------------------------------------------------------------------------ */

/* A ring pass (a reduce-scatter or an all-gather) moves (k - 1) / k of the buffer each way; an
 * all-reduce is two passes. sdp plan counts them alike (memplan.c). */
static void count_ring(sdp_sync *s, size_t elems, int members, int passes) {
    uint64_t bytes =
        (uint64_t)((double)passes * (members - 1) / members * (double)elems * sizeof(float));
    s->bytes.sent += bytes;
    s->bytes.recv += bytes;
}

static void count_ring_allreduce(sdp_sync *s, size_t elems, int members) {
    count_ring(s, elems, members, 2);
}

/* MPI counts are ints: very large buckets go in pieces. */
static void start_bucket(sdp_sync *s, sdp_bucket *b, float *grads) {
    if (b->started || !reduced(b) || staged(s, b)) return;
    b->started = true;
    /* --zero 1: a ring reduce-scatter and, after the update, a ring all-gather each move
     * (k - 1) / k of the bucket each way, together what one ring all-reduce moves: counted here
     * once for both, so the bytes sdp plan predicts are the same with and without it. */
    count_ring_allreduce(s, b->count, b->nmembers);
    if (s->zero && b->dev) { /* the member's sum lands at its own shard's place */
        s->be->reduce_scatter_start(s->be, b->dev, grads + b->start, b->shard_counts,
                                    b->shard_displs);
        return;
    }
    if (s->zero) {
        MPI_Ireduce_scatter(MPI_IN_PLACE, grads + b->start, b->shard_counts, MPI_FLOAT, MPI_SUM,
                            b->comm, &b->reqs[b->nreq++]);
        return;
    }
    if (b->dev) {
        s->be->allreduce_start(s->be, b->dev, grads + b->start, b->count);
        return;
    }
    for (size_t off = 0; off < b->count; off += MAX_PIECE) {
        size_t len = b->count - off < MAX_PIECE ? b->count - off : MAX_PIECE;
        MPI_Iallreduce(MPI_IN_PLACE, grads + b->start + off, (int)len, MPI_FLOAT, MPI_SUM, b->comm,
                       &b->reqs[b->nreq++]);
    }
}

/* Device memory, no device communicator: down to the host, all-reduced by MPI, and back. The
 * reduction is start_bucket's (MPI_Iallreduce, piece by piece), not MPI_Allreduce, whose
 * algorithm may add a group of three or more in another order: staged gradients then equal host
 * ones bit for bit. */
static void reduce_staged(sdp_sync *s, sdp_bucket *b, float *grads) {
    b->started = true;
    count_ring_allreduce(s, b->count, b->nmembers);
    to_host(s, s->stage, grads + b->start, b->count);
    for (size_t off = 0; off < b->count; off += MAX_PIECE) {
        size_t len = b->count - off < MAX_PIECE ? b->count - off : MAX_PIECE;
        MPI_Iallreduce(MPI_IN_PLACE, s->stage + off, (int)len, MPI_FLOAT, MPI_SUM, b->comm,
                       &b->reqs[b->nreq++]);
    }
    MPI_Waitall(b->nreq, b->reqs, MPI_STATUSES_IGNORE);
    b->nreq = 0;
    from_host(s, grads + b->start, s->stage, b->count);
}

/* A device's x[0, n) down to the host stage, reduce-scattered there as host memory is (the
 * non-blocking call, whose additions match it bit for bit), and this member's sum, `mine`
 * elements, back up to `to`. */
static void reduce_scatter_through_stage(sdp_sync *s, MPI_Comm comm, const float *x, size_t n,
                                         const int *counts, float *to, size_t mine) {
    to_host(s, s->stage, x, n);
    MPI_Request req;
    MPI_Ireduce_scatter(MPI_IN_PLACE, s->stage, counts, MPI_FLOAT, MPI_SUM, comm, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    from_host(s, to, s->stage, mine);
}

/* --zero 1 on a device without a communicator: the member's summed shard goes to its place. */
static void reduce_scatter_staged(sdp_sync *s, sdp_bucket *b, float *grads) {
    b->started = true;
    count_ring_allreduce(s, b->count, b->nmembers); /* with the all-gather, as start_bucket */
    reduce_scatter_through_stage(s, b->comm, grads + b->start, b->count, b->shard_counts,
                                 grads + b->start + b->shard_lo, b->shard_hi - b->shard_lo);
}

static void scale(const sdp_sync *s, float *x, size_t n, float by) {
    sdp_scale(s->be, x, n, by);
}

static double sumsq(const sdp_sync *s, const float *x, size_t n) {
    return sdp_sumsq(s->be, x, n);
}

static void start_piece(sdp_sync *s, sdp_piece *p, float *grads) {
    if (p->started) return;
    p->started = true;
    const sdp_bucket *b = &s->buckets[p->bucket];
    if (!reduced(b)) return;
    /* An early micro-batch's reduce-scatter has no all-gather to follow it. */
    count_ring(s, p->hi - p->lo, b->nmembers, s->early_micro_batch ? 1 : 2); /* as start_bucket */
    float *x = grads + p->store;
    if (b->dev) { /* the member's sum lands at its own part of the piece */
        s->be->reduce_scatter_start(s->be, b->dev, x, p->counts, p->displs);
        return;
    }
    if (!staged(s, b)) {
        MPI_Ireduce_scatter(MPI_IN_PLACE, x, p->counts, MPI_FLOAT, MPI_SUM, b->comm, &p->req);
        return;
    }
    /* Staged: at once, through the one stage, leaving the sum at the piece's start as host
     * memory's in-place reduce-scatter does. */
    reduce_scatter_through_stage(s, b->comm, x, p->hi - p->lo, p->counts, x,
                                 p->shard_hi - p->shard_lo);
}

/* dst = src, or dst += src, in the gradients' memory (host or the backend's). */
static void grads_put(const sdp_sync *s, float *dst, const float *src, size_t n, bool add) {
    if (n == 0) return;
    if (on_device(s) && add)
        s->be->add_rows(s->be, dst, n, src, n, 1, n);
    else if (on_device(s))
        device_copy(s, dst, src, n);
    else if (add)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, n * sizeof(float));
}

static void grads_clear(const sdp_sync *s, float *x, size_t n) {
    if (on_device(s))
        s->be->zero(s->be, x, n * sizeof(float));
    else
        memset(x, 0, n * sizeof(float));
}

/* Waits for a piece's reduce-scatter, copies this worker's part of its shard to the shards' area
 * (adds it, for a layer's piece after an earlier micro-batch of the step put its own there) and
 * clears the piece's place for the next layer that uses it. */
static void finish_piece(sdp_sync *s, sdp_piece *p, float *grads) {
    if (!p->started || p->done) return;
    p->done = true;
    const sdp_bucket *b = &s->buckets[p->bucket];
    /* An in-place MPI reduce-scatter (or a staged one) leaves this member's sum at the piece's
     * start, a device communicator's at its own part; with one member the piece is its shard. */
    size_t at = p->store;
    if (reduced(b) && b->dev) {
        s->be->allreduce_wait(s->be);
        at += p->shard_lo - p->lo;
    } else if (reduced(b) && !staged(s, b)) {
        MPI_Wait(&p->req, MPI_STATUS_IGNORE);
    }
    grads_put(s, grads + p->state_start, grads + at, p->shard_hi - p->shard_lo,
              p->layer >= 0 && s->micro_batches_in > 0);
    grads_clear(s, grads + p->store, p->hi - p->lo);
}

static void progress_pieces(sdp_sync *s) {
    for (int i = 0; i < s->npieces; i++) {
        int flag; /* lets the library progress outstanding reductions */
        if (s->pieces[i].started && !s->pieces[i].done && s->pieces[i].req != MPI_REQUEST_NULL)
            MPI_Test(&s->pieces[i].req, &flag, MPI_STATUS_IGNORE);
    }
}

/* After layer l's backward: its pieces start, and the pieces in the slot layer l - 1 is about to
 * use (those of layer l + 1) finish. */
static void layer_done_pieces(sdp_sync *s, float *grads, int layer) {
    for (int i = 0; i < s->npieces; i++)
        if (s->pieces[i].layer == layer) start_piece(s, &s->pieces[i], grads);
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (p->layer >= 0 && (p->layer & 1) != (layer & 1)) finish_piece(s, p, grads);
    }
    progress_pieces(s);
}

static void grads_end_pieces(sdp_sync *s, float *grads) {
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        SDP_CHECK(p->layer < 0 || p->started,
                  "--zero 2: layer %d's gradients were never handed over (the backward pass must "
                  "call layer_done after every layer); this is a bug in sdp, please report it",
                  p->layer);
        start_piece(s, p, grads);
    }
    for (int i = 0; i < s->npieces; i++) {
        const sdp_piece *p = &s->pieces[i];
        finish_piece(s, &s->pieces[i], grads);
        scale(s, grads + p->state_start, p->shard_hi - p->shard_lo,
              1.0f / (float)s->buckets[p->bucket].nmembers);
    }
    s->micro_batches_in = 0;
}

static void reset_reductions(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        s->buckets[b].started = false;
        s->buckets[b].nreq = 0;
    }
    for (int i = 0; i < s->npieces; i++) {
        s->pieces[i].started = s->pieces[i].done = false;
        s->pieces[i].req = MPI_REQUEST_NULL;
    }
}

void sdp_sync_grads_begin(sdp_sync *s) {
    reset_reductions(s);
    s->early_micro_batch = false;
}

bool sdp_sync_reduces_every_micro_batch(const sdp_sync *s) {
    return s->zero2;
}

void sdp_sync_micro_batch_begin(sdp_sync *s) {
    SDP_CHECK(s->zero2, "sdp_sync_micro_batch_begin is for --zero 2 only; this is a bug in sdp, "
                        "please report it");
    reset_reductions(s);
    s->early_micro_batch = true;
}

/* The layers' pieces go into the shards now: the next micro-batch's backward refills the slots.
 * The stem's and head's pieces, held whole, keep accumulating until the last micro-batch. */
void sdp_sync_micro_batch_end(sdp_sync *s, float *grads) {
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (p->layer < 0) continue;
        SDP_CHECK(p->started,
                  "--zero 2: layer %d's gradients were never handed over (the backward pass must "
                  "call layer_done after every layer); this is a bug in sdp, please report it",
                  p->layer);
        finish_piece(s, p, grads);
    }
    s->micro_batches_in++;
    s->early_micro_batch = false;
}

void sdp_sync_layer_done(sdp_sync *s, float *grads, int layer) {
    if (s->zero2) {
        layer_done_pieces(s, grads, layer);
        return;
    }
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (bk->ready_after == layer) start_bucket(s, bk, grads);
        int flag; /* lets the library progress outstanding reductions */
        if (bk->nreq > 0) MPI_Testall(bk->nreq, bk->reqs, &flag, MPI_STATUSES_IGNORE);
    }
}

void sdp_sync_grads_end(sdp_sync *s, float *grads) {
    if (s->zero2) {
        grads_end_pieces(s, grads);
        return;
    }
    bool device_comms = false;
    for (int b = 0; b < s->nbuckets; b++) {
        start_bucket(s, &s->buckets[b], grads);
        device_comms |= s->buckets[b].dev != NULL;
    }
    if (device_comms) s->be->allreduce_wait(s->be);
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (!reduced(bk)) continue;
        if (staged(s, bk)) (s->zero ? reduce_scatter_staged : reduce_staged)(s, bk, grads);
        if (bk->nreq > 0) MPI_Waitall(bk->nreq, bk->reqs, MPI_STATUSES_IGNORE);
        bk->nreq = 0;
        float *own = grads + bk->start + bk->shard_lo;
        const size_t n = bk->shard_hi - bk->shard_lo;
        /* An in-place MPI reduce-scatter leaves a member's sum at the start of the region (staged
         * or on a device communicator, it is at its place already). */
        if (s->zero && !on_device(s)) memmove(own, grads + bk->start, n * sizeof(float));
        scale(s, own, n, 1.0f / (float)bk->nmembers);
    }
}

void sdp_sync_grads(sdp_sync *s, float *grads) {
    sdp_sync_grads_begin(s);
    sdp_sync_grads_end(s, grads);
}

double sdp_sync_grad_norm(sdp_sync *s, const float *grads) {
    double local = 0;
    for (int i = 0; s->zero2 && i < s->npieces; i++) /* each element lies in one piece's shard */
        local += sumsq(s, grads + s->pieces[i].state_start,
                       s->pieces[i].shard_hi - s->pieces[i].shard_lo);
    for (int b = 0; !s->zero2 && b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        if (s->zero) /* each element lies in one owner's shard */
            local += sumsq(s, grads + bk->start + bk->shard_lo, bk->shard_hi - bk->shard_lo);
        else /* each of the group's owners holds the same gradient */
            local += sumsq(s, grads + bk->start, bk->count) / bk->nmembers;
    }
    /* Gather and add in rank order so every rank computes the bitwise same norm. */
    double *all = sdp_xmalloc(sizeof(double) * (size_t)s->world, "every rank's gradient norm");
    MPI_Allgather(&local, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double total = 0;
    for (int r = 0; r < s->world; r++) total += all[r];
    free(all);
    return sqrt(total);
}

/* ---- parameters ----------------------------------------------------------------------------- */

/* Copies the parameters of [lo, hi) of a bucket's region between params (at their local offsets)
 * and `region`, which holds the region's places from `region_lo` on: host memory when the
 * bucket is staged (params then live in the backend's memory), else params' own. */
static void bucket_params(const sdp_sync *s, const sdp_bucket *b, float *params, float *region,
                          size_t region_lo, bool into_region, size_t lo, size_t hi) {
    const bool host_region = staged(s, b), device = on_device(s) && !host_region;
    for (size_t pos = 0, j = 0; j < (size_t)b->nruns; pos += run_at(s, b->runs[j])->len, j++) {
        const sdp_run *r = run_at(s, b->runs[j]);
        const size_t a = pos > lo ? pos : lo, e = pos + r->len < hi ? pos + r->len : hi;
        if (e <= a) continue;
        float *in_params = params + r->local + (a - pos), *in_region = region + (a - region_lo);
        if (host_region && into_region)
            to_host(s, in_region, in_params, e - a);
        else if (host_region)
            from_host(s, in_params, in_region, e - a);
        else if (device)
            device_copy(s, into_region ? in_region : in_params, into_region ? in_params : in_region,
                        e - a);
        else if (into_region)
            memcpy(in_region, in_params, (e - a) * sizeof(float));
        else
            memcpy(in_params, in_region, (e - a) * sizeof(float));
    }
}

/* Every member's updated parameters of [lo, hi) of a bucket's region, each sending its own
 * [shard_lo, shard_hi) (counts and displs as MPI takes them), through `place` (where [lo, hi)
 * lies in the gradient buffer, spent by now) or, staged, the host stage. */
static void gather_params(sdp_sync *s, const sdp_bucket *bk, float *params, float *place, size_t lo,
                          size_t hi, size_t shard_lo, size_t shard_hi, const int *counts,
                          const int *displs) {
    float *region = staged(s, bk) ? s->stage : place;
    bucket_params(s, bk, params, region, lo, true, shard_lo, shard_hi);
    if (bk->dev) {
        s->be->allgather_start(s->be, bk->dev, region, counts, displs);
        s->be->allreduce_wait(s->be); /* the copies below read what it gathered */
    } else {
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, region, counts, displs, MPI_FLOAT,
                       bk->comm);
    }
    bucket_params(s, bk, params, region, lo, false, lo, hi);
}

/* --zero 2: the all-gather piece by piece, through each piece's own (spent) place. */
static void share_pieces(sdp_sync *s, float *params, float *grads) {
    for (int i = 0; i < s->npieces; i++) {
        const sdp_piece *p = &s->pieces[i];
        const sdp_bucket *bk = &s->buckets[p->bucket];
        if (!reduced(bk)) continue;
        gather_params(s, bk, params, grads + p->store, p->lo, p->hi, p->shard_lo, p->shard_hi,
                      p->counts, p->displs);
    }
}

void sdp_sync_share_updates(sdp_sync *s, float *params, float *grads) {
    if (!s->zero) return;
    if (s->zero2) {
        share_pieces(s, params, grads);
        return;
    }
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (!reduced(bk)) continue;
        /* The bytes were counted with the reduce-scatter (start_bucket). */
        gather_params(s, bk, params, grads + bk->start, 0, bk->count, bk->shard_lo, bk->shard_hi,
                      bk->shard_counts, bk->shard_displs);
    }
}

/* Runs of one plan group present in this worker's map, in global order (malloc'd). */
static int *runs_of_group(const sdp_sync *s, int group, int *n) {
    int *runs = sdp_xmalloc(sizeof(int) * (size_t)(s->map->nruns + 1), "a group's runs");
    *n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        int u = s->map->runs[i].unit;
        if (u >= 0 && s->plan->units[u].owner_group == group) runs[(*n)++] = i;
    }
    sort_by_global(s->map, runs, *n);
    return runs;
}

/* dst[0, n) = src[0, n), both in the backend's memory. */
static void copy_within(const sdp_sync *s, float *dst, const float *src, size_t n) {
    sdp_copy_rows(s->be, dst, n, src, n, 1, n);
}

/* pack[0, count) from world rank root to every worker. */
static void broadcast_pack(sdp_sync *s, float *pack, size_t count, int root) {
    if (on_device(s) && world_device_comm(s)) {
        s->be->broadcast_start(s->be, world_device_comm(s), pack, count, root);
        s->be->allreduce_wait(s->be);
        return;
    }
    float *host = on_device(s) ? s->stage : pack;
    if (on_device(s) && s->rank == root) to_host(s, host, pack, count);
    for (size_t off = 0; off < count; off += MAX_PIECE) {
        size_t len = count - off < MAX_PIECE ? count - off : MAX_PIECE;
        MPI_Bcast(host + off, (int)len, MPI_FLOAT, root, MPI_COMM_WORLD);
    }
    if (on_device(s) && s->rank != root) from_host(s, pack, host, count);
}

void sdp_sync_publish(sdp_sync *s, float *params) {
    float *pack = on_device(s) ? s->dev_pack : s->pack;
    for (int g = 0; g < s->plan->ngroups; g++) {
        const sdp_owner_group *og = &s->plan->groups[g];
        if (og->nmembers == s->world) continue; /* everyone owns it already */
        int n, root = og->publisher;
        int *runs = runs_of_group(s, g, &n);
        size_t count = 0;
        for (int j = 0; j < n; j++) count += run_at(s, runs[j])->len;
        if (s->rank == root)
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                copy_within(s, pack + at, params + run_at(s, runs[j])->local,
                            run_at(s, runs[j])->len);
                at += run_at(s, runs[j])->len;
            }
        broadcast_pack(s, pack, count, root);
        const uint64_t bytes = count * sizeof(float);
        if (s->rank == root) s->bytes.sent += bytes * (uint64_t)(s->world - og->nmembers);
        if (!is_member(og, s->rank)) {
            s->bytes.recv += bytes;
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                copy_within(s, params + run_at(s, runs[j])->local, pack + at,
                            run_at(s, runs[j])->len);
                at += run_at(s, runs[j])->len;
            }
        }
        free(runs);
    }
}

static size_t local_index(const sdp_sync *s, int i, bool state_compact) {
    return state_compact ? s->grad_index[i] : run_at(s, i)->local;
}

/* Whether `rank` is the worker that provides run r when the full model is assembled. */
bool sdp_sync_provides(const sdp_plan *p, const sdp_run *r, int rank, bool state_compact) {
    if (state_compact && r->buffer) return false; /* no optimizer state */
    if (r->unit < 0) return rank == 0;
    return p->groups[p->units[r->unit].owner_group].publisher == rank;
}

static bool provides(const sdp_sync *s, int i, bool state_compact) {
    return sdp_sync_provides(s->plan, run_at(s, i), s->rank, state_compact);
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
        const sdp_run *r = run_at(s, i);
        if (state_compact && s->zero) {
            size_t at, st;
            const size_t len = trained(s, r) ? state_part(s, i, &at, &st) : 0;
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
        const sdp_run *r = run_at(s, i);
        if (!state_compact) {
            fn(ctx, r->global, r->len, local + r->local);
            continue;
        }
        size_t at, st;
        const size_t len = trained(s, r) ? state_part(s, i, &at, &st) : 0;
        if (len) fn(ctx, r->global + at, len, local + st);
    }
}

static void copy_from_full(void *full, size_t global, size_t len, float *dst) {
    memcpy(dst, (const float *)full + global, len * sizeof(float));
}

void sdp_sync_scatter_full(const sdp_sync *s, const float *full, float *local, bool state_compact) {
    sdp_sync_for_each_run(s, local, state_compact, copy_from_full, (void *)full);
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
            if (s->zero) continue; /* each state element lives in one shard: nothing to compare */
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

/* ---- non-trained state ----------------------------------------------------------------------- */

/* Copies the running statistics among runs[0, n) from params into pack (or back when
 * !into_pack), contiguous in the runs' order; pack NULL only counts. Returns the elements. */
static size_t pack_buffers(const sdp_sync *s, const int *runs, int n, float *params, float *pack,
                           bool into_pack) {
    size_t at = 0;
    for (int j = 0; j < n; j++) {
        const sdp_run *r = run_at(s, runs[j]);
        if (!r->buffer) continue;
        if (pack && into_pack) memcpy(pack + at, params + r->local, r->len * sizeof(float));
        if (pack && !into_pack) memcpy(params + r->local, pack + at, r->len * sizeof(float));
        at += r->len;
    }
    return at;
}

/* Backward masking: non-owners evaluate and checkpoint the units they do not own too, but they
 * last received them from the publisher, before the owners averaged them. Each publisher sends
 * the averaged statistics of its group's units (host memory, as the averaging). */
static void publish_buffers(sdp_sync *s, float *params) {
    for (int g = 0; g < s->plan->ngroups; g++) {
        const sdp_owner_group *og = &s->plan->groups[g];
        if (og->nmembers == s->world) continue; /* everyone averaged it already */
        int n;
        int *runs = runs_of_group(s, g, &n);
        const size_t count = pack_buffers(s, runs, n, params, NULL, true);
        float *pack = sdp_xmalloc(sizeof(float) * (count + 1), "publishing running statistics");
        const bool root = s->rank == og->publisher, member = is_member(og, s->rank);
        if (root) pack_buffers(s, runs, n, params, pack, true);
        for (size_t off = 0; off < count; off += MAX_PIECE) {
            size_t len = count - off < MAX_PIECE ? count - off : MAX_PIECE;
            MPI_Bcast(pack + off, (int)len, MPI_FLOAT, og->publisher, MPI_COMM_WORLD);
        }
        if (root) s->bytes.sent += count * sizeof(float) * (uint64_t)(s->world - og->nmembers);
        if (!member) s->bytes.recv += count * sizeof(float);
        if (!member) pack_buffers(s, runs, n, params, pack, false);
        free(pack);
        free(runs);
    }
}

void sdp_sync_average_buffers(sdp_sync *s, float *params) {
    int *runs = sdp_xmalloc(sizeof(int) * (size_t)(s->map->nruns + 1), "a bucket's buffers");
    for (int b = 0; b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        int n = 0;
        size_t count = 0;
        for (int i = 0; i < s->map->nruns; i++) {
            const sdp_run *r = run_at(s, i);
            if (r->buffer && sdp_run_owned(r, s->plan, s->rank) &&
                group_of_run(s, r) == bk->group) {
                runs[n++] = i;
                count += r->len;
            }
        }
        if (bk->nmembers == 1 || count == 0) continue;
        sort_by_global(s->map, runs, n);
        float *pack = sdp_xmalloc(sizeof(float) * count, "averaging running statistics");
        for (size_t at = 0, j = 0; j < (size_t)n; at += run_at(s, runs[j])->len, j++)
            memcpy(pack + at, params + run_at(s, runs[j])->local,
                   run_at(s, runs[j])->len * sizeof(float));
        MPI_Allreduce(MPI_IN_PLACE, pack, (int)count, MPI_FLOAT, MPI_SUM, bk->comm);
        count_ring_allreduce(s, count, bk->nmembers);
        const float inv = 1.0f / (float)bk->nmembers;
        for (size_t at = 0, j = 0; j < (size_t)n; at += run_at(s, runs[j])->len, j++)
            for (size_t e = 0; e < run_at(s, runs[j])->len; e++)
                params[run_at(s, runs[j])->local + e] = pack[at + e] * inv;
        free(pack);
    }
    free(runs);
    if (s->plan->cfg.mask == SDP_MASK_BACKWARD) publish_buffers(s, params);
}
