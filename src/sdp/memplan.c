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

static uint64_t ring_bytes(size_t elems, int members) {
    return (uint64_t)(2.0 * (members - 1) / members * (double)elems * sizeof(float));
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
    out->sent_per_step = N > 1 ? ring_bytes(world_bucket, N) : 0;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == N) continue;
        if (member(og, rank) && og->nmembers > 1)
            out->sent_per_step += ring_bytes(group_elems[g], og->nmembers);
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
    for (int r = 0; r < N; r++)
        out[r] = (sdp_worker_plan){.owned = shared,
                                   .bucket_elems = bucket,
                                   .sent_per_step = N > 1 ? ring_bytes(world_bucket, N) : 0};
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        for (int j = 0; j < og->nmembers; j++) out[og->members[j]].owned += group_elems[g];
        if (og->nmembers == N) continue;
        if (og->nmembers > 1) {
            const uint64_t ring = ring_bytes(group_elems[g], og->nmembers);
            for (int j = 0; j < og->nmembers; j++) out[og->members[j]].sent_per_step += ring;
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
}
