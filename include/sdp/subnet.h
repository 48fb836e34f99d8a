/* A worker's subnetwork: what it keeps of the full model, and how each element of its own
 * (possibly compact) parameter buffer maps to the full model and to the unit that owns it.
 * Model-agnostic: it reads only layouts and the plan. */
#ifndef SDP_SUBNET_H
#define SDP_SUBNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/layout.h"
#include "sdp/plan.h"

/* Forward masking: owned blocks or owned chunks only, scaled by 1/C when the plan asks for it.
 * Otherwise (backward masking, data parallelism): the full model with scale 1. */
void sdp_subnet_spec_make(sdp_subnet_spec *s, const sdp_plan *p, const sdp_layout *full, int rank);
void sdp_subnet_spec_full(sdp_subnet_spec *s, const sdp_layout *full);
void sdp_subnet_spec_free(sdp_subnet_spec *s);

/* A run of consecutive elements, the same length in the local and the full buffer, inside one
 * unit (unit -1: shared by every worker). */
typedef struct {
    size_t local, global, len;
    int unit;
    int param;   /* index into the local layout */
    bool buffer; /* part of a non-trained tensor (see sdp_param.buffer) */
} sdp_run;

typedef struct {
    int nruns;
    sdp_run *runs; /* ascending in local offset, covering the local buffer exactly */
} sdp_subnet_map;

/* Maps a worker's local layout onto the full layout. `compact` says the local model keeps only
 * `rank`'s owned chunks (forward masking); otherwise inner widths are complete. */
void sdp_subnet_map_build(sdp_subnet_map *m, const sdp_layout *full, const sdp_layout *local,
                          const sdp_plan *p, int rank, bool compact);
void sdp_subnet_map_free(sdp_subnet_map *m);

/* Whether `rank` owns a run (shared runs are owned by everyone). */
bool sdp_run_owned(const sdp_run *r, const sdp_plan *p, int rank);

/* Initial values of a local buffer: each element takes the value its full-model element would
 * have (sdp_param_init_value), so every subnetwork starts as a slice of the same model. */
void sdp_subnet_init_values(const sdp_subnet_map *m, const sdp_layout *full,
                            const sdp_layout *local, float *params, uint64_t seed);

#endif
