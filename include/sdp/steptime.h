/* A step-time model: each worker's step predicted from the collectives its plan issues, the
 * network (sdp/netcost.h) and a compute rate (docs/network.md, "A step-time model", has the
 * formulas and their check against measurements).
 *
 * Compute. A worker's forward takes F/3 of its model's FLOPs F and its backward 2F/3, at the
 * compute rate. The backward runs from the head down through the blocks, each block's share in
 * proportion to its parameters (exact for a transformer's matmuls). Under backward masking F is
 * the full model's and the backward does less: input gradients (F/3 in all) only down to the
 * lowest block the worker owns, weight gradients (F/3 in all) only for what it owns. With
 * activation recomputation, each block that the backward reaches runs its forward again first:
 * the backward grows by that block's share of F/3 (the head is not recomputed).
 *
 * Gradient sync. One all-reduce per owner group (and one over every worker for the shared
 * tensors), as sdp_sync issues them. Each becomes ready when every member's backward has passed
 * the group's lowest block. NCCL: ring all-reduces, each starting when ready and its members are
 * free, so they overlap the backward. Open MPI over TCP: progress only inside MPI calls, so all
 * start after the slowest backward and run together (sdp_net_mpi_allreduce_together). The sync
 * ends on every worker together (the gradient norm's all-gather).
 *
 * Update. The optimizer streams each owned element's gradient, weight and state through memory;
 * under backward masking the publishing broadcasts follow, one per owner group, after every
 * worker's optimizer and outside any overlap. They are blocking calls, and may be given their own
 * transport rate (bcast_host_Bps): a rank inside a blocking MPI_Bcast drives its transfers without
 * pause, where the non-blocking all-reduces that net.host_Bps is fitted to advance only as the
 * library is polled and do their reductions and copies on the same CPU.
 *
 * ZeRO stage 1 (the plan's cfg.zero). Each bucket's all-reduce becomes a reduce-scatter, issued
 * and overlapped as the all-reduce was (NCCL: a ring's first half; Open MPI: libnbc's binomial
 * reduce and a scatter from group rank 0). The optimizer sweeps the worker's shards alone. Then
 * every bucket's blocking all-gather of the updated shards (sdp_sync_share_updates), one after
 * another, after every worker's optimizer, before any publishing. Stage 2 is priced as stage 1.
 *
 * Several micro-batches a step (--grad-accum A). The gradients of the first A - 1 accumulate
 * where they are, so each of them is a forward and a backward alone, and the sync overlaps only
 * the last one's backward. Under --zero 2 each early micro-batch reduce-scatters its layers'
 * gradients: each is priced as the last one's forward, backward and sync, ended on every worker
 * together. */
#ifndef SDP_STEPTIME_H
#define SDP_STEPTIME_H

#include <stdbool.h>

#include "sdp/layout.h"
#include "sdp/netcost.h"
#include "sdp/plan.h"

typedef enum { SDP_COMM_MPI, SDP_COMM_NCCL } sdp_comm_lib;

typedef struct {
    sdp_net net;
    sdp_comm_lib lib;
    bool overlap;          /* NCCL only: buckets start during the backward (else after it) */
    bool recompute;        /* --recompute layer: blocks run their forward again in the backward */
    double flops_per_s;    /* one worker's compute rate */
    double mem_Bps;        /* memory bandwidth of the optimizer's sweep; 0 = not timed */
    double bcast_host_Bps; /* transport rate of the publishing broadcasts; 0 = net.host_Bps */
    double wire_bytes;     /* bytes per gradient or published element: 4 (fp32), 2 (bf16) */
    double update_bytes;   /* memory traffic per owned element of clipping and the optimizer */
    int micro_batches;     /* --grad-accum: micro-batches per step; 0 or 1 = one */
    /* Measured compute (sdp plan --measure-compute): each worker's forward and backward seconds
     * of one micro-batch, the backward spread over its blocks as its FLOPs are. NULL: its FLOPs
     * at flops_per_s. */
    const double *forward_s, *backward_s;
} sdp_steptime_cfg;

/* Seconds of one worker's step. */
typedef struct {
    double forward, backward; /* over every micro-batch of the step */
    double exposed;   /* its waits for the sync, from the end of its backward (and under --zero 2
                         of each early micro-batch's) to the end of the sync */
    double optimizer; /* its own optimizer sweep */
    double publish;   /* backward masking: the publishing broadcasts */
    double gather;    /* --zero 1: the all-gathers of the updated shards */
    double update;    /* optimizer, then (gathering or publishing) the wait for the slowest one,
                         the all-gathers and publishing */
    double step;      /* forward + backward + exposed + update */
} sdp_step_times;

/* "mpi" and "nccl". */
const char *sdp_comm_lib_name(sdp_comm_lib lib);
bool sdp_comm_lib_parse(const char *s, sdp_comm_lib *out);

/* Every worker's step: flops[r] is worker r's forward-and-backward FLOPs per micro-batch as its
 * model counts them (the full model's under backward masking), out[] has p->cfg.world entries.
 * Returns the job's step time, the largest worker's. */
double sdp_steptime_predict(const sdp_plan *p, const sdp_layout *full, const double *flops,
                            const sdp_steptime_cfg *cfg, sdp_step_times *out);

#endif
