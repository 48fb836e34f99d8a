#include "sdp/memplan.h"

#include "sdp/check.h"
#include "sdp/sync.h"

#include <stdlib.h>
#include <string.h>

static bool member(const sdp_owner_group *g, int rank) {
    return sdp_owner_group_index(g, rank) >= 0;
}

/* The size of member j's shard of a bucket of `count` elements and k members: its optimizer
 * state under --zero 1, all of it otherwise. */
static size_t shard_elems(const sdp_plan *p, size_t count, int k, int j) {
    if (!p->cfg.zero) return count;
    size_t lo, hi;
    sdp_sync_shard(count, k, j, &lo, &hi);
    return hi - lo;
}

/* Ring passes (a reduce-scatter or an all-gather: one; an all-reduce: two), as sdp_sync counts
 * them (count_ring). */
static uint64_t ring_pass_bytes(size_t elems, int members, int passes) {
    return (uint64_t)((double)passes * (members - 1) / members * (double)elems * sizeof(float));
}

static uint64_t ring_bytes(size_t elems, int members) {
    return ring_pass_bytes(elems, members, 2);
}

/* The trained elements of each owner group (malloc'd, ngroups + 1 entries) and, in *shared, of
 * the shared tensors. */
static size_t *trained_group_elems(const sdp_plan *p, const sdp_layout *full, size_t *shared) {
    size_t *unit_elems =
        sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), "a worker's memory plan");
    size_t *group_elems =
        sdp_xcalloc((size_t)p->ngroups + 1, sizeof(size_t), "a worker's memory plan");
    sdp_plan_unit_elems(p, full, true, unit_elems, shared);
    for (int u = 0; u < p->nunits; u++) group_elems[p->units[u].owner_group] += unit_elems[u];
    free(unit_elems);
    return group_elems;
}

/* --zero 2, per bucket (each owner group, then every worker's: ngroups) a row of its trained
 * elements by column: 0 its stem, 1 + b its part of block b, nblocks + 1 its head (malloc'd). */
static size_t *zero2_rows(const sdp_plan *p, const sdp_layout *full) {
    const char *what = "a worker's memory plan";
    const int N = p->cfg.world, nb = full->nblocks, shared = p->ngroups, cols = nb + 2;
    size_t *unit_elems = sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), what);
    size_t *before = sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), what);
    size_t *after = sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), what);
    size_t *in_block = sdp_xcalloc((size_t)nb + 1, sizeof(size_t), what);
    size_t *rows = sdp_xcalloc((size_t)(shared + 1) * (size_t)cols, sizeof(size_t), what);
    sdp_plan_unit_elems(p, full, true, unit_elems, NULL);
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *t = &full->params[i];
        if (t->buffer) continue;
        if (t->block >= 0) {
            in_block[t->block] += t->numel;
            continue;
        }
        const bool stem = sdp_param_is_stem(full, i);
        const int u = sdp_plan_shared_unit(p, full, i);
        if (u >= 0)
            (stem ? before : after)[u] += t->numel;
        else
            rows[(size_t)shared * (size_t)cols + (stem ? 0 : (size_t)nb + 1)] += t->numel;
    }
    for (int u = 0; u < p->nunits; u++) {
        const int g = p->units[u].owner_group, b = p->units[u].block;
        const int bucket = p->groups[g].nmembers == N ? shared : g;
        const size_t part = unit_elems[u] - before[u] - after[u];
        size_t *row = rows + (size_t)bucket * (size_t)cols;
        row[0] += before[u], row[1 + b] += part, row[nb + 1] += after[u];
        in_block[b] -= part; /* what is left of the block is every worker's */
    }
    for (int b = 0; b < nb; b++) rows[(size_t)shared * (size_t)cols + 1 + (size_t)b] += in_block[b];
    free(unit_elems), free(before), free(after), free(in_block);
    return rows;
}

/* --zero 2, for ranks [r0, r1) into state[r - r0], grads[r - r0] and sent[r - r0]. Each bucket is
 * cut into pieces as sdp_sync's cut_pieces cuts its region (stem, each block, head; tensors are
 * laid out in that order, sdp_layout_add), and each piece is sharded over the bucket's members on
 * its own: a worker's optimizer state is the sum of its shards. Its gradient buffer
 * (place_pieces) holds those shards, its stem's and head's gradients whole, and two slots as
 * large as its largest block's. With --grad-accum A, every micro-batch but the last also
 * reduce-scatters each layer's pieces, as sdp_sync counts them: sent gets those bytes; ring gets
 * the last micro-batch's reduce-scatter and all-gather of every piece. */
static void zero2_elems(const sdp_plan *p, const sdp_layout *full, int r0, int r1, size_t *state,
                        size_t *grads, uint64_t *sent, uint64_t *ring) {
    const uint64_t early = p->cfg.grad_accum > 1 ? (uint64_t)p->cfg.grad_accum - 1 : 0;
    const char *what = "a worker's memory plan";
    const int N = p->cfg.world, nb = full->nblocks, shared = p->ngroups, cols = nb + 2;
    const size_t nr = (size_t)(r1 - r0);
    size_t *rows = zero2_rows(p, full);
    size_t *held = sdp_xcalloc(nr * (size_t)cols, sizeof(size_t), what); /* per rank, column */
    size_t *piece_count = sdp_xcalloc((size_t)cols, sizeof(size_t), what);
    int *piece_layer = sdp_xcalloc((size_t)cols, sizeof(int), what);
    for (size_t r = 0; r < nr; r++) state[r] = sent[r] = ring[r] = 0;
    for (int bucket = 0; bucket <= shared; bucket++) {
        const sdp_owner_group *og = bucket < shared ? &p->groups[bucket] : NULL;
        if (og && og->nmembers == N) continue; /* in the shared bucket */
        const int k = og ? og->nmembers : N;
        const size_t *row = rows + (size_t)bucket * (size_t)cols;
        /* Column c is layer -1 (stem, head) or block c - 1. Empty columns cut nothing, so the
         * stem's and head's merge into one piece when no block lies between. */
        int n = 0;
        for (int c = 0; c < cols; c++) {
            if (row[c] == 0) continue;
            const int layer = c == 0 || c == cols - 1 ? -1 : c - 1;
            if (n > 0 && piece_layer[n - 1] == layer) {
                piece_count[n - 1] += row[c];
            } else {
                piece_layer[n] = layer;
                piece_count[n++] = row[c];
            }
        }
        /* One rank: its place among the members alone (N in the thousands, k in the hundreds). */
        const int only = nr == 1 ? (og ? sdp_owner_group_index(og, r0) : r0) : -1;
        if (nr == 1 && only < 0) continue;
        for (int j = only >= 0 ? only : 0; j < (only >= 0 ? only + 1 : k); j++) {
            const int r = og ? og->members[j] : j;
            if (r < r0 || r >= r1) continue;
            for (int c = 0; c < cols; c++)
                held[(size_t)(r - r0) * (size_t)cols + (size_t)c] += row[c];
            for (int i = 0; i < n; i++) {
                size_t lo, hi;
                sdp_sync_shard(piece_count[i], k, j, &lo, &hi);
                state[r - r0] += hi - lo;
                /* Counted piece by piece, as the run counts them (each rounded down). */
                if (k > 1) ring[r - r0] += ring_pass_bytes(piece_count[i], k, 2);
                if (piece_layer[i] >= 0 && k > 1)
                    sent[r - r0] += early * ring_pass_bytes(piece_count[i], k, 1);
            }
        }
    }
    for (size_t r = 0; r < nr; r++) {
        const size_t *h = held + r * (size_t)cols;
        size_t largest = 0;
        for (int b = 0; b < nb; b++)
            if (h[1 + b] > largest) largest = h[1 + b];
        grads[r] = state[r] + h[0] + h[nb + 1] + 2 * largest;
    }
    free(rows), free(held), free(piece_layer), free(piece_count);
}

void sdp_memplan_worker(const sdp_plan *p, const sdp_layout *full, int rank, sdp_worker_plan *out) {
    const int N = p->cfg.world;
    size_t shared;
    size_t *group_elems = trained_group_elems(p, full, &shared);

    memset(out, 0, sizeof *out);
    size_t world_bucket = shared;
    out->owned = shared;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == N) world_bucket += group_elems[g];
        if (member(og, rank)) out->owned += group_elems[g];
    }
    /* The buckets' all-reduces (under --zero 2, replaced below by its pieces'), then what backward
     * masking publishes. */
    uint64_t ring_sent = N > 1 ? ring_bytes(world_bucket, N) : 0;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers != N && member(og, rank) && og->nmembers > 1)
            ring_sent += ring_bytes(group_elems[g], og->nmembers);
    }
    out->sent_per_step = ring_sent;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == N) continue;
        /* Backward masking: the group's publisher sends its units (running statistics too) to
         * every non-owner. */
        if (p->cfg.mask == SDP_MASK_BACKWARD && og->publisher == rank)
            out->sent_per_step +=
                (uint64_t)og->elems * sizeof(float) * (uint64_t)(N - og->nmembers);
    }
    /* Backward masking publishes through a buffer as large as the largest group. */
    out->bucket_elems = 0;
    if (p->cfg.mask == SDP_MASK_BACKWARD)
        for (int g = 0; g < p->ngroups; g++)
            if (p->groups[g].elems > out->bucket_elems) out->bucket_elems = p->groups[g].elems;
    out->grad_elems = out->owned; /* gradients are kept for owned elements only, in every mode */
    /* The buckets: every worker's (shared tensors and groups of all N), one per group it is in. */
    out->state_elems = shard_elems(p, world_bucket, N, rank);
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers != N && member(og, rank))
            out->state_elems +=
                shard_elems(p, group_elems[g], og->nmembers, sdp_owner_group_index(og, rank));
    }
    free(group_elems);
    if (p->cfg.zero != 2) return;
    uint64_t early, ring;
    zero2_elems(p, full, rank, rank + 1, &out->state_elems, &out->grad_elems, &early, &ring);
    out->sent_per_step += early + ring - ring_sent;
}

void sdp_memplan_workers(const sdp_plan *p, const sdp_layout *full, sdp_worker_plan *out) {
    const int N = p->cfg.world;
    size_t shared;
    size_t *group_elems = trained_group_elems(p, full, &shared);
    size_t world_bucket = shared, bucket = 0;
    for (int g = 0; g < p->ngroups; g++) {
        if (p->groups[g].nmembers == N) world_bucket += group_elems[g];
        if (p->cfg.mask == SDP_MASK_BACKWARD && p->groups[g].elems > bucket)
            bucket = p->groups[g].elems;
    }
    /* Each worker's buckets' all-reduces (under --zero 2, replaced below by its pieces'). */
    uint64_t *ring_sent =
        sdp_xmalloc(sizeof(uint64_t) * (size_t)(N + 1), "the workers' memory plans");
    for (int r = 0; r < N; r++) {
        ring_sent[r] = N > 1 ? ring_bytes(world_bucket, N) : 0;
        out[r] = (sdp_worker_plan){
            .owned = shared, .bucket_elems = bucket, .sent_per_step = ring_sent[r]};
    }
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        for (int j = 0; j < og->nmembers; j++) out[og->members[j]].owned += group_elems[g];
        if (og->nmembers == N) continue;
        if (og->nmembers > 1) {
            const uint64_t ring = ring_bytes(group_elems[g], og->nmembers);
            for (int j = 0; j < og->nmembers; j++) {
                out[og->members[j]].sent_per_step += ring;
                ring_sent[og->members[j]] += ring;
            }
        }
        if (p->cfg.mask == SDP_MASK_BACKWARD)
            out[og->publisher].sent_per_step +=
                (uint64_t)og->elems * sizeof(float) * (uint64_t)(N - og->nmembers);
    }
    for (int r = 0; r < N; r++) {
        out[r].grad_elems = out[r].owned;
        out[r].state_elems = shard_elems(p, world_bucket, N, r);
    }
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == N) continue;
        for (int j = 0; j < og->nmembers; j++)
            out[og->members[j]].state_elems += shard_elems(p, group_elems[g], og->nmembers, j);
    }
    free(group_elems);
    if (p->cfg.zero != 2) {
        free(ring_sent);
        return;
    }
    size_t *grads = sdp_xmalloc(sizeof(size_t) * (size_t)(N + 1), "the workers' memory plans");
    size_t *state = sdp_xmalloc(sizeof(size_t) * (size_t)(N + 1), "the workers' memory plans");
    uint64_t *early = sdp_xmalloc(sizeof(uint64_t) * (size_t)(N + 1), "the workers' memory plans");
    uint64_t *ring = sdp_xmalloc(sizeof(uint64_t) * (size_t)(N + 1), "the workers' memory plans");
    zero2_elems(p, full, 0, N, state, grads, early, ring);
    for (int r = 0; r < N; r++) {
        out[r].state_elems = state[r], out[r].grad_elems = grads[r];
        out[r].sent_per_step += early[r] + ring[r] - ring_sent[r];
    }
    free(grads), free(state), free(early), free(ring), free(ring_sent);
}
