/* What the files of sdp_sync share (sync.c, sync_layout.c, sync_grads.c, sync_params.c,
 * sync_gather.c, sync_state.c): queries about runs, where the buffers live, and the few functions
 * one file defines for another. Not part of the public interface (include/sdp/sync.h). Calls run
 * one way: sync_gather.c -> sync_layout.c, sync.c; sync_state.c -> sync_grads.c, sync.c;
 * sync_params.c -> sync.c. */
#ifndef SDP_SYNC_INTERNAL_H
#define SDP_SYNC_INTERNAL_H

#include "sdp/sync.h"

/* Largest MPI count used in one call (MPI counts are ints). */
#define SYNC_MAX_PIECE ((size_t)1 << 30)

/* ---- runs and set-up (sync.c) ------------------------------------------------------------- */

static inline const sdp_run *sync_run_at(const sdp_sync *s, int i) {
    return &s->map->runs[i];
}

/* Owned and trained: the runs that have gradients and optimizer state. */
static inline bool sync_trained(const sdp_sync *s, const sdp_run *r) {
    return !r->buffer && sdp_run_owned(r, s->plan, s->rank);
}

static inline bool sync_is_member(const sdp_owner_group *g, int rank) {
    return sdp_owner_group_index(g, rank) >= 0;
}

/* The bucket's group of run r: its unit's owner group, or -1 for shared runs and units that
 * every worker owns. */
int sync_group_of_run(const sdp_sync *s, const sdp_run *r);
/* Sorts run indices by their global offset: the order every owner agrees on. */
void sync_sort_by_global(const sdp_subnet_map *map, int *runs, int n);
/* Runs of one plan group present in this worker's map, in global order (malloc'd). */
int *sync_runs_of_group(const sdp_sync *s, int group, int *n);
/* Both inits: buckets, compact offsets and the publishing buffer. With simulate, one process
 * stands for `rank` of `world` workers: the buckets get no communicators (MPI_COMM_NULL). */
void sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
               const int *layer_of_param, int rank, int world, sdp_mem *mem, bool simulate);

/* ---- where the buffers live ------------------------------------------------------------------ */

/* Whether the buffers are a device's, which MPI cannot read in place: they go through host
 * memory (staged) unless a device communicator reduces them. */
static inline bool sync_on_device(const sdp_sync *s) {
    return !s->be->host_memory;
}

/* A bucket in device memory without a device communicator: reduced through host memory. */
static inline bool sync_staged(const sdp_sync *s, const sdp_bucket *b) {
    return sync_on_device(s) && !b->dev;
}

static inline bool sync_reduced(const sdp_bucket *b) {
    return b->nmembers > 1 && b->count > 0;
}

/* The device communicator over every worker: the shared bucket's (always the first). */
static inline void *sync_world_device_comm(const sdp_sync *s) {
    return s->buckets[0].dev;
}

/* dst (host) = src (the backend's memory), and the reverse. */
static inline void sync_to_host(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->download(s->be, dst, src, n * sizeof(float));
}

static inline void sync_from_host(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->upload(s->be, dst, src, n * sizeof(float));
}

/* One copy within the backend's memory (a row of n). */
static inline void sync_device_copy(const sdp_sync *s, float *dst, const float *src, size_t n) {
    s->be->copy_rows(s->be, dst, n, src, n, 1, n);
}

/* ---- defined in sync_layout.c and sync_grads.c ------------------------------------------- */

/* The part of trained run i whose optimizer state this worker keeps (the whole run without
 * --zero 1): returns its length, with *at its offset in the run and *state where its state lies
 * in the compact state buffers. */
size_t sync_state_part(const sdp_sync *s, int i, size_t *at, size_t *state);

/* Counts an all-reduce of elems over members: two ring passes, as sdp plan counts it. */
void sync_count_ring_allreduce(sdp_sync *s, size_t elems, int members);

#endif
