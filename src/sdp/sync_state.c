/* State the owners must agree on: the replica check, and averaging the non-trained tensors
 * (batch-norm running statistics). */
#include "sync_internal.h"

#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

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
            size_t len = sync_run_at(s, i)->len * sizeof(float);
            h = fnv1a(h, params + sync_run_at(s, i)->local, len);
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
        const sdp_run *r = sync_run_at(s, runs[j]);
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
        int *runs = sync_runs_of_group(s, g, &n);
        const size_t count = pack_buffers(s, runs, n, params, NULL, true);
        float *pack = sdp_xmalloc(sizeof(float) * (count + 1), "publishing running statistics");
        const bool root = s->rank == og->publisher, member = sync_is_member(og, s->rank);
        if (root) pack_buffers(s, runs, n, params, pack, true);
        for (size_t off = 0; off < count; off += SYNC_MAX_PIECE) {
            size_t len = count - off < SYNC_MAX_PIECE ? count - off : SYNC_MAX_PIECE;
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
            const sdp_run *r = sync_run_at(s, i);
            if (r->buffer && sdp_run_owned(r, s->plan, s->rank) &&
                sync_group_of_run(s, r) == bk->group) {
                runs[n++] = i;
                count += r->len;
            }
        }
        if (bk->nmembers == 1 || count == 0) continue;
        sync_sort_by_global(s->map, runs, n);
        float *pack = sdp_xmalloc(sizeof(float) * count, "averaging running statistics");
        for (size_t at = 0, j = 0; j < (size_t)n; at += sync_run_at(s, runs[j])->len, j++)
            memcpy(pack + at, params + sync_run_at(s, runs[j])->local,
                   sync_run_at(s, runs[j])->len * sizeof(float));
        MPI_Allreduce(MPI_IN_PLACE, pack, (int)count, MPI_FLOAT, MPI_SUM, bk->comm);
        sync_count_ring_allreduce(s, count, bk->nmembers);
        const float inv = 1.0f / (float)bk->nmembers;
        for (size_t at = 0, j = 0; j < (size_t)n; at += sync_run_at(s, runs[j])->len, j++)
            for (size_t e = 0; e < sync_run_at(s, runs[j])->len; e++)
                params[sync_run_at(s, runs[j])->local + e] = pack[at + e] * inv;
        free(pack);
    }
    free(runs);
    if (s->plan->cfg.mask == SDP_MASK_BACKWARD) publish_buffers(s, params);
}
