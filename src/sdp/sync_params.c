/* The updated parameters reach the workers that need them: --zero's all-gather among owners
 * (sdp_sync_share_updates) and backward masking's publishing to non-owners. */
#include "sync_internal.h"

#include <stdlib.h>
#include <string.h>

/* Copies the parameters of [lo, hi) of a bucket's region between params (at their local offsets)
 * and `region`, which holds the region's places from `region_lo` on: host memory when the
 * bucket is staged (params then live in the backend's memory), else params' own. */
static void bucket_params(const sdp_sync *s, const sdp_bucket *b, float *params, float *region,
                          size_t region_lo, bool into_region, size_t lo, size_t hi) {
    const bool host_region = sync_staged(s, b), device = sync_on_device(s) && !host_region;
    for (size_t pos = 0, j = 0; j < (size_t)b->nruns; pos += sync_run_at(s, b->runs[j])->len, j++) {
        const sdp_run *r = sync_run_at(s, b->runs[j]);
        const size_t a = pos > lo ? pos : lo, e = pos + r->len < hi ? pos + r->len : hi;
        if (e <= a) continue;
        float *in_params = params + r->local + (a - pos), *in_region = region + (a - region_lo);
        if (host_region && into_region)
            sync_to_host(s, in_region, in_params, e - a);
        else if (host_region)
            sync_from_host(s, in_params, in_region, e - a);
        else if (device)
            sync_device_copy(s, into_region ? in_region : in_params,
                             into_region ? in_params : in_region, e - a);
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
    float *region = sync_staged(s, bk) ? s->stage : place;
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
        if (!sync_reduced(bk)) continue;
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
        if (!sync_reduced(bk)) continue;
        /* The bytes were counted with the reduce-scatter (start_bucket). */
        gather_params(s, bk, params, grads + bk->start, 0, bk->count, bk->shard_lo, bk->shard_hi,
                      bk->shard_counts, bk->shard_displs);
    }
}

/* dst[0, n) = src[0, n), both in the backend's memory. */
static void copy_within(const sdp_sync *s, float *dst, const float *src, size_t n) {
    sdp_copy_rows(s->be, dst, n, src, n, 1, n);
}

/* pack[0, count) from world rank root to every worker. */
static void broadcast_pack(sdp_sync *s, float *pack, size_t count, int root) {
    if (sync_on_device(s) && sync_world_device_comm(s)) {
        s->be->broadcast_start(s->be, sync_world_device_comm(s), pack, count, root);
        s->be->allreduce_wait(s->be);
        return;
    }
    float *host = sync_on_device(s) ? s->stage : pack;
    if (sync_on_device(s) && s->rank == root) sync_to_host(s, host, pack, count);
    for (size_t off = 0; off < count; off += SYNC_MAX_PIECE) {
        size_t len = count - off < SYNC_MAX_PIECE ? count - off : SYNC_MAX_PIECE;
        MPI_Bcast(host + off, (int)len, MPI_FLOAT, root, MPI_COMM_WORLD);
    }
    if (sync_on_device(s) && s->rank != root) sync_from_host(s, pack, host, count);
}

void sdp_sync_publish(sdp_sync *s, float *params) {
    float *pack = sync_on_device(s) ? s->dev_pack : s->pack;
    for (int g = 0; g < s->plan->ngroups; g++) {
        const sdp_owner_group *og = &s->plan->groups[g];
        if (og->nmembers == s->world) continue; /* everyone owns it already */
        int n, root = og->publisher;
        int *runs = sync_runs_of_group(s, g, &n);
        size_t count = 0;
        for (int j = 0; j < n; j++) count += sync_run_at(s, runs[j])->len;
        if (s->rank == root)
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                copy_within(s, pack + at, params + sync_run_at(s, runs[j])->local,
                            sync_run_at(s, runs[j])->len);
                at += sync_run_at(s, runs[j])->len;
            }
        broadcast_pack(s, pack, count, root);
        const uint64_t bytes = count * sizeof(float);
        if (s->rank == root) s->bytes.sent += bytes * (uint64_t)(s->world - og->nmembers);
        if (!sync_is_member(og, s->rank)) {
            s->bytes.recv += bytes;
            for (size_t at = 0, j = 0; j < (size_t)n; j++) {
                copy_within(s, params + sync_run_at(s, runs[j])->local, pack + at,
                            sync_run_at(s, runs[j])->len);
                at += sync_run_at(s, runs[j])->len;
            }
        }
        free(runs);
    }
}
