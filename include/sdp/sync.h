/* Gradient and parameter synchronisation among owners (DESIGN.md section 2): one communicator
 * per owner group, gradients packed into one contiguous bucket per group and all-reduced there,
 * global-norm clipping that counts each unit once, publication of updated units to non-owners
 * (backward masking), assembly of the full model on rank 0, and a replica check.
 * The comm layer counts the bytes each worker sends and receives. */
#ifndef SDP_SYNC_H
#define SDP_SYNC_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/mem.h"
#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/subnet.h"

/* The runs of one owner group that this worker belongs to, in the same (global) order on every
 * member, so packed buckets line up element for element. */
typedef struct {
    int group; /* index into plan.groups, or -1 for the shared runs (every worker) */
    MPI_Comm comm;
    int nmembers;
    int nruns;
    int *runs;    /* indices into map.runs, ascending in global offset */
    size_t count; /* elements */
} sdp_bucket;

typedef struct {
    uint64_t sent, recv; /* bytes, cumulative */
} sdp_comm_bytes;

typedef struct {
    const sdp_plan *plan;
    const sdp_subnet_map *map;
    int rank, world;
    int nbuckets;
    sdp_bucket *buckets; /* the groups this worker is a member of */
    float *pack;         /* SDP_MEM_BUFFERS, as large as the largest bucket */
    size_t owned;        /* elements of the local buffer this worker owns */
    size_t *grad_index;  /* per run: offset of its gradient in the compact gradient buffer */
    sdp_comm_bytes bytes;
    sdp_mem *mem;
} sdp_sync;

/* Creates the owner-group communicators (collective over MPI_COMM_WORLD). */
void sdp_sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map, int rank,
                   int world, sdp_mem *mem);
void sdp_sync_free(sdp_sync *s);

/* Segments for the optimizer over the owned runs: parameters at their local offsets, gradients
 * at grad_offset (compact when grads_compact, else the local offset), state compact.
 * decay_of(param index) says whether a tensor decays. Returns the count; *segs is malloc'd. */
int sdp_sync_segments(const sdp_sync *s, const sdp_layout *local, bool grads_compact,
                      bool decay_all, sdp_opt_segment **segs);

/* Averages the gradients of owned runs over each run's owners: pack, all-reduce in the group's
 * communicator, divide by the group size, unpack. grads_compact as above. */
void sdp_sync_grads(sdp_sync *s, float *grads, bool grads_compact);

/* Global gradient norm with every unit counted once (each owner contributes 1/k of its units'
 * squares), identical on every rank. Call after sdp_sync_grads. */
double sdp_sync_grad_norm(sdp_sync *s, const float *grads, bool grads_compact);

/* Backward masking: every unit's publisher (owners[unit mod k]) sends its updated values to the
 * workers that do not own it; afterwards every worker holds the whole current model. */
void sdp_sync_publish(sdp_sync *s, float *params);

/* Assembles a full-model buffer on rank 0 from a local buffer laid out like the local model
 * (params) or like the compact owned state (state_compact). full is only written on rank 0.
 * Each element comes from its unit's publisher; shared elements from rank 0. */
void sdp_sync_gather_full(sdp_sync *s, const float *local, bool state_compact, float *full);
/* The inverse: every rank takes its elements from a full buffer that is valid on all ranks. */
void sdp_sync_scatter_full(const sdp_sync *s, const float *full, float *local, bool state_compact);

/* Compares a checksum of every owned unit's parameters and optimizer state across its owners;
 * fails naming the unit's owner group and the step when they differ. Collective. */
void sdp_sync_check_replicas(sdp_sync *s, const float *params, const float *m, const float *v,
                             long step);

#endif
