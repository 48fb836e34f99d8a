/* What a worker will hold and send, predicted from the plan and the full layout alone (no
 * allocation), so it scales to any model and to N in the thousands. The model-specific part
 * (activations) comes from running the model's own allocation code in counting mode. */
#ifndef SDP_MEMPLAN_H
#define SDP_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/layout.h"
#include "sdp/plan.h"

typedef struct {
    size_t owned;           /* parameter elements whose gradients and state the worker keeps */
    size_t grad_elems;      /* elements of its gradient buffer: owned, or under --zero 2 its
                               shards, its stem and head, and two slots of its largest layer */
    size_t state_elems;     /* elements it keeps optimizer state for: owned, or under --zero 1
                               its shard of each bucket (sdp_sync_shard) */
    size_t bucket_elems;    /* largest buffer used to pack a bucket or a publication */
    uint64_t sent_per_step; /* bytes sent by gradient all-reduces (ring) and publishing */
} sdp_worker_plan;

void sdp_memplan_worker(const sdp_plan *p, const sdp_layout *full, int rank, sdp_worker_plan *out);
/* Every worker's (out[world]) at once, in one pass over the owner groups: the same figures as
 * sdp_memplan_worker for each rank, which recounts the units' elements every call. */
void sdp_memplan_workers(const sdp_plan *p, const sdp_layout *full, sdp_worker_plan *out);

#endif
