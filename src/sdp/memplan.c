#include "sdp/memplan.h"

#include "sdp/check.h"
#include "sdp/subnet.h"

#include <stdlib.h>
#include <string.h>

/* Elements of every unit and of the shared part, from tensor shapes alone: a group's tensors
 * hold the same number of elements per atom, so a chunk of w atoms holds w times that.
 * trained_only leaves out non-trained tensors (batch-norm running statistics). */
static void unit_sizes(const sdp_plan *p, const sdp_layout *full, bool trained_only,
                       size_t *unit_elems, size_t *shared) {
    const size_t nb = (size_t)full->nblocks + 1;
    size_t *per_atom = calloc(nb * SDP_MAX_GROUPS, sizeof(size_t));
    size_t *all = calloc(nb, sizeof(size_t)); /* per block: every tensor */
    size_t *stem = calloc((size_t)p->nunits + 1, sizeof(size_t));
    SDP_CHECK(per_atom && all && stem, "out of memory");
    size_t total = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *t = &full->params[i];
        if (trained_only && t->buffer) continue;
        total += t->numel;
        if (t->block < 0) {
            int u = sdp_subnet_shared_unit(p, full, i);
            if (u >= 0) stem[u] += t->numel;
            continue;
        }
        all[t->block] += t->numel;
        if (t->group >= 0)
            per_atom[(size_t)t->block * SDP_MAX_GROUPS + (size_t)t->group] +=
                t->numel / (size_t)full->blocks[t->block].groups[t->group].width;
    }
    size_t in_units = 0;
    for (int u = 0; u < p->nunits; u++) {
        const sdp_unit *un = &p->units[u];
        unit_elems[u] = un->group < 0
                            ? all[un->block]
                            : per_atom[(size_t)un->block * SDP_MAX_GROUPS + (size_t)un->group] *
                                  (size_t)un->width;
        unit_elems[u] += stem[u];
        in_units += unit_elems[u];
    }
    if (shared) *shared = total - in_units;
    free(per_atom);
    free(all);
    free(stem);
}

static bool member(const sdp_owner_group *g, int rank) {
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i] == rank) return true;
    return false;
}

static uint64_t ring_bytes(size_t elems, int members) {
    return (uint64_t)(2.0 * (members - 1) / members * (double)elems * sizeof(float));
}

void sdp_memplan_worker(const sdp_plan *p, const sdp_layout *full, int rank, sdp_worker_plan *out) {
    const int N = p->cfg.world;
    size_t *unit_elems = calloc((size_t)p->nunits + 1, sizeof(size_t));
    size_t *group_elems = calloc((size_t)p->ngroups + 1, sizeof(size_t)); /* trained */
    size_t *group_all = calloc((size_t)p->ngroups + 1, sizeof(size_t));   /* with buffers */
    SDP_CHECK(unit_elems && group_elems && group_all, "out of memory");
    size_t shared;
    unit_sizes(p, full, false, unit_elems, NULL);
    for (int u = 0; u < p->nunits; u++) group_all[p->units[u].owner_group] += unit_elems[u];
    memset(unit_elems, 0, sizeof(size_t) * (size_t)p->nunits);
    unit_sizes(p, full, true, unit_elems, &shared);
    for (int u = 0; u < p->nunits; u++) group_elems[p->units[u].owner_group] += unit_elems[u];

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
        if (p->cfg.mask == SDP_MASK_BACKWARD && og->members[g % og->nmembers] == rank)
            out->sent_per_step +=
                (uint64_t)group_all[g] * sizeof(float) * (uint64_t)(N - og->nmembers);
    }
    /* Backward masking publishes through a buffer as large as the largest group. */
    out->bucket_elems = 0;
    if (p->cfg.mask == SDP_MASK_BACKWARD)
        for (int g = 0; g < p->ngroups; g++)
            if (group_all[g] > out->bucket_elems) out->bucket_elems = group_all[g];
    out->grad_elems = out->owned; /* gradients are kept for owned elements only, in every mode */
    free(unit_elems);
    free(group_elems);
    free(group_all);
}
