/* Gradient and parameter synchronisation among owners (docs/architecture.md, "One training step",
 * and invariants I1 and I3): one communicator per owner group, gradients packed into one
 * contiguous bucket per group and all-reduced there, global-norm clipping that counts each unit
 * once, publication of updated units to non-owners (backward masking), assembly of the full
 * model on rank 0, and a replica check. It counts the bytes each worker sends and receives
 * (sdp_comm_bytes), which is what sdp plan predicts (I7). */
#ifndef SDP_SYNC_H
#define SDP_SYNC_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/backend.h"
#include "sdp/mem.h"
#include "sdp/plan.h"
#include "sdp/subnet.h"

/* The runs of one owner group that this worker belongs to. Their gradients form one contiguous
 * region of the compact gradient buffer, in global order, so the region lines up element for
 * element on every member and is all-reduced in place. */
typedef struct {
    int group; /* index into plan.groups, or -1 for the shared runs (every worker) */
    MPI_Comm comm;
    int nmembers;
    int nruns;
    int *runs;       /* indices into map.runs, ascending in global offset */
    size_t start;    /* of the region in the compact gradient buffer */
    size_t count;    /* elements */
    int ready_after; /* local layer whose backward completes the bucket; -1: at the end */
    bool started;    /* its reduction of this step has begun */
    int nreq;
    MPI_Request *reqs; /* outstanding all-reduce pieces (host memory) */
    void *dev;         /* device communicator (backend comm_open), or NULL */
    /* The part of the region whose optimizer state this worker keeps: all of it, or under
     * --zero 1 its shard [shard_lo, shard_hi) (from start; sdp_sync_shard of its index in the
     * communicator), whose state lies at state_start of the compact state buffers. */
    size_t shard_lo, shard_hi, state_start;
    int *shard_counts; /* --zero 1, more than one member: every member's shard size, and where */
    int *shard_displs; /* it starts in the region, as MPI takes them */
} sdp_bucket;

/* --zero 2: the part of a bucket's region [lo, hi) that lies in one local layer (-1: stem and
 * head). Its gradient is computed into a slot of the gradient buffer shared with every other layer
 * of the same parity (or, for the stem and head, a place of its own), reduce-scattered as soon as
 * the layer's backward is done, this member's shard of it copied out, and the slot cleared for the
 * layer two below. Each piece is sharded over the bucket's members on its own (sdp_sync_shard of
 * hi - lo), so its collectives are balanced; counts and displs are every member's shard as MPI
 * takes them. The all-gather of the updated parameters goes piece by piece through its place. */
typedef struct {
    int bucket;
    int layer;
    size_t lo, hi;             /* in the bucket's region */
    size_t store;              /* where its gradient lies in the gradient buffer */
    size_t shard_lo, shard_hi; /* this member's shard, in the bucket's region */
    size_t state_start;        /* where the shard's state (and averaged gradient) lies */
    int *counts, *displs;
    MPI_Request req;
    bool started, done;
} sdp_piece;

typedef struct {
    uint64_t sent, recv; /* bytes, cumulative */
} sdp_comm_bytes;

typedef struct {
    const sdp_plan *plan;
    const sdp_subnet_map *map;
    int rank, world;
    int nbuckets;
    sdp_bucket *buckets; /* the groups this worker is a member of */
    float *pack;         /* SDP_MEM_BUFFERS: publishing buffer (backward masking only) */
    size_t owned;        /* elements of the local buffer this worker owns */
    size_t state;        /* elements of its optimizer state: owned, or its shards' under --zero 1 */
    bool zero;           /* --zero 1 or 2 (plan->cfg.zero): buckets are reduce-scattered, not
                            all-reduced, and the updated shards all-gathered */
    bool zero2;          /* --zero 2: the gradient buffer holds the shards, the stem's and head's
                            pieces and two layer slots, not every owned gradient (sdp_piece) */
    size_t grad_elems;   /* elements of the gradient buffer: owned, or under --zero 2 as above */
    size_t *grad_index;  /* per run: offset of its gradient (and state) in the compact buffers */
    int *run_bucket;     /* per run: its bucket (-1: not trained here) */
    int *run_piece;      /* per run, under --zero 2: its piece (-1: not trained here) */
    size_t *run_pos;     /* per run: its place in that bucket's region */
    int npieces;
    sdp_piece *pieces; /* --zero 2 only: every bucket's, bucket after bucket, in region order */
    bool early_micro_batch; /* --zero 2: a micro-batch before the step's last is being reduced */
    int micro_batches_in;   /* --zero 2: micro-batches of this step whose layers' pieces are in
                               the shards already (the next ones add to them) */
    sdp_comm_bytes bytes;
    sdp_mem *mem;
    /* Where the gradients and parameters passed in live (sdp_sync_use_backend) */
    const sdp_backend *be;
    float *stage;    /* SDP_MEM_BUFFERS: host copy of what goes through MPI from a device */
    float *dev_pack; /* the publishing buffer in the backend's memory (replaces pack there) */
} sdp_sync;

/* Creates the owner-group communicators (collective over MPI_COMM_WORLD). `layer_of_param`
 * gives the local layer of each local tensor (-1 for stem and head), so buckets can start as
 * soon as the backward pass has finished with them. */
void sdp_sync_init(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
                   const int *layer_of_param, int rank, int world, sdp_mem *mem);
/* One worker of a `world`-worker job run alone (sdp train --sim-world): the same buckets,
 * compact gradient layout and publishing buffer as sdp_sync_init, but no communicators (not
 * collective). Only the layout functions below may be called on it, and sdp_sync_free. */
void sdp_sync_init_simulated(sdp_sync *s, const sdp_plan *plan, const sdp_subnet_map *map,
                             const int *layer_of_param, int rank, int world, sdp_mem *mem);
void sdp_sync_free(sdp_sync *s);

/* Gradients and parameters live in be's memory: host arrays with a host-memory backend (the
 * CPU's, whose buffers MPI reduces and broadcasts in place). Required before any function below
 * that takes gradients or parameters, except those that take host arrays. On a device, a bucket
 * whose members each have their own device is reduced by the backend's device communicator (NCCL)
 * on its communication stream, overlapped with the backward pass; one whose members share a device
 * is staged through host memory and MPI after the backward pass. The norm and the averaging run on
 * device memory too, and publishing packs on the device and broadcasts by the device communicator
 * over every worker (or through host memory when ranks share a device). gather_full, scatter_full,
 * average_buffers and check_replicas still take host arrays. Collective over MPI_COMM_WORLD (not on
 * a simulated sync). */
void sdp_sync_use_backend(sdp_sync *s, const sdp_backend *be);

/* Per local tensor: where its gradient lives in the compact gradient buffer (-1: not owned;
 * SDP_GRAD_SLICED: owned in part, with slices[i] saying which parts and where). Arrays malloc'd
 * with local->nparams entries; free with sdp_sync_grad_layout_free. */
void sdp_sync_grad_layout(const sdp_sync *s, const sdp_layout *local, long **grad_offset,
                          sdp_grad_slices **slices);
void sdp_sync_grad_layout_free(long *grad_offset, sdp_grad_slices *slices, int nparams);

/* The shard of member j of `count` elements and k members, [*lo, *hi): [j * count / k,
 * (j + 1) * count / k), so the k shards tile the region and differ by at most one element; of a
 * bucket's compact region under --zero 1, of each piece of it under --zero 2. A pure function of
 * its arguments: the planner uses it too. */
void sdp_sync_shard(size_t count, int k, int j, size_t *lo, size_t *hi);

/* Optimizer segments over the owned runs, or under --zero 1 and 2 over their parts inside this
 * worker's shards: parameters at their local offsets, gradients in the compact gradient buffer
 * (under --zero 2 where the state lies), state in the compact state buffers (s->state elements).
 * Returns the count; *segs is malloc'd. */
int sdp_sync_segments(const sdp_sync *s, const sdp_layout *local, bool decay_all,
                      sdp_opt_segment **segs);

/* Averaging the compact gradients over each bucket's owners, overlapped with the backward pass:
 * begin before the last backward, layer_done after each layer's backward (it starts the buckets
 * that are complete and lets the outstanding ones progress), end after the backward (it starts
 * the rest, waits, and divides by the owner counts). sdp_sync_grads does all three at once. */
void sdp_sync_grads_begin(sdp_sync *s);
void sdp_sync_layer_done(sdp_sync *s, float *grads, int layer);
void sdp_sync_grads_end(sdp_sync *s, float *grads);
void sdp_sync_grads(sdp_sync *s, float *grads);

/* Under --zero 1 each bucket is reduce-scattered instead (the same bytes as a ring all-reduce):
 * after sdp_sync_grads_end a worker holds the averaged gradient of its own shards only, and the
 * rest of the gradient buffer is spent. Under --zero 2 each bucket goes piece by piece, a layer's
 * pieces started by layer_done (which the backward pass must call after every layer: the layer two
 * below reuses the slot) and the stem's and head's by grads_end; the shards lie at the start of
 * the gradient buffer (state order: sdp_bucket.state_start).
 *
 * With several micro-batches per step, --zero 2 has no room to accumulate a layer's gradients
 * in: every micro-batch before the last runs between micro_batch_begin and micro_batch_end,
 * with layer_done after each layer as usual, and its layers' pieces are reduce-scattered and
 * added to the shards (the stem's and head's, held whole, wait for the last). The last
 * micro-batch runs between grads_begin and grads_end. reduces_every_micro_batch says whether a
 * worker's sync needs this (--zero 2); the others accumulate locally and reduce once. */
bool sdp_sync_reduces_every_micro_batch(const sdp_sync *s);
void sdp_sync_micro_batch_begin(sdp_sync *s);
void sdp_sync_micro_batch_end(sdp_sync *s, float *grads);

/* Global gradient norm with every unit counted once (each owner contributes 1/k of its units'
 * squares; under --zero 1 each owner its shards' squares), identical on every rank. Call after
 * the gradients are synced. */
double sdp_sync_grad_norm(sdp_sync *s, const float *grads);

/* --zero 1, after the optimizer updated each worker's shards: every member's updated shard goes
 * to the other members of each bucket (an all-gather through the spent gradient buffer, which it
 * overwrites), so all owners hold the whole updated unit again. Does nothing without --zero 1. */
void sdp_sync_share_updates(sdp_sync *s, float *params, float *grads);

/* Backward masking: each owner group's publisher (chosen by the plan, sdp_owner_group.publisher)
 * sends the group's updated units to the workers that do not own them; afterwards every worker
 * holds the whole current model. */
void sdp_sync_publish(sdp_sync *s, float *params);

/* The most elements one sdp_sync_gather_range moves (16 MiB of floats): MPI counts are ints,
 * and a bounded range is what keeps streamed checkpoints small. */
#define SDP_SYNC_GATHER_MAX ((size_t)1 << 22)

/* Assembles the global range [lo, hi) of the full model (hi - lo <= SDP_SYNC_GATHER_MAX) into
 * out[0, hi - lo) on rank 0 from a local buffer laid out like the local model (params) or like
 * the compact owned state (state_compact; buffers' elements, which have no state, come out 0).
 * Each element comes from its unit's publisher, shared elements from rank 0; optimizer state under
 * --zero 1 from the owner whose shard holds it. Its packing buffers
 * come from io (a few bytes beyond the range's own size on any rank). Collective over
 * MPI_COMM_WORLD; out is only written on rank 0. */
void sdp_sync_gather_range(sdp_sync *s, const float *local, bool state_compact, size_t lo,
                           size_t hi, float *out, sdp_mem *io);
/* The whole model of numel elements, range by range, into full on rank 0. */
/* What rank `rank` sends to assemble [lo, hi) in sdp_sync_gather_range: returns its pieces and
 * sets *nvals to its values. From the plan, the rank's map and its local layout (whose blocks cut
 * --zero 2's pieces) alone, for predicting the gather's buffers without a job. */
int sdp_sync_gather_count(const sdp_plan *p, const sdp_subnet_map *map, const sdp_layout *local,
                          int rank, bool state_compact, size_t lo, size_t hi, size_t *nvals);
/* Whether rank `rank` sends run r in a gather: the publisher of its unit, rank 0 for shared runs
 * (and nobody for a buffer's optimizer state, which does not exist). Under --zero 1 optimizer
 * state is sent by shards, which cut runs: see sdp_sync_provided. */
bool sdp_sync_provides(const sdp_plan *p, const sdp_run *r, int rank, bool state_compact);
/* Every piece of the full model rank `rank` sends in a gather, as fn(ctx, its first global
 * element, its length), in the order of its map's runs: whole runs by sdp_sync_provides, or under
 * --zero 1 and 2 for optimizer state the parts of its trained runs inside its shards. From the
 * plan, the rank's map and its local layout alone. */
void sdp_sync_provided(const sdp_plan *p, const sdp_subnet_map *map, const sdp_layout *local,
                       int rank, bool state_compact,
                       void (*fn)(void *ctx, size_t global, size_t len), void *ctx);
void sdp_sync_gather_full(sdp_sync *s, const float *local, bool state_compact, size_t numel,
                          float *full, sdp_mem *io);
/* The inverse: every rank takes its elements from a full buffer that is valid on all ranks. */
void sdp_sync_scatter_full(const sdp_sync *s, const float *full, float *local, bool state_compact);
/* The runs sdp_sync_scatter_full fills, each as fn(ctx, its first global element, its length, its
 * place in local): a worker can read its own elements from elsewhere (a checkpoint file) with no
 * full buffer. State runs are the trained ones this worker owns, under --zero 1 cut to its
 * shards. */
void sdp_sync_for_each_run(const sdp_sync *s, float *local, bool state_compact,
                           void (*fn)(void *ctx, size_t global, size_t len, float *dst), void *ctx);

/* Averages the non-trained tensors (batch-norm running statistics) of every owned unit over its
 * owners (shared ones over every worker), so all owners hold the same values; under backward
 * masking, where every worker holds every unit, each publisher then sends them to the non-owners,
 * so every worker holds the owners' averages. Collective; call before evaluation and
 * checkpoints. */
void sdp_sync_average_buffers(sdp_sync *s, float *params);

/* Compares a checksum of every owned unit's parameters and optimizer state across its owners;
 * fails naming the unit's owner group and the step when they differ. Under --zero 1 no two
 * workers hold the same optimizer state (each element lives in one shard), so only parameters are
 * compared. Collective. */
void sdp_sync_check_replicas(sdp_sync *s, const float *params, const float *m, const float *v,
                             long step);

#endif
