/* A run's SDP plan options resolved into the plan's configuration (src/train/run_plan.c). */
#ifndef SDP_TRAIN_RUN_PLAN_H
#define SDP_TRAIN_RUN_PLAN_H

#include "sdp/model.h"
#include "sdp/plan.h"
#include "train_opts.h"

/* k, the owners of each unit, for a job of `world` workers: --sdp-owners, or --sdp-coverage times
 * N rounded as the plan rounds it, or N under data parallelism. The one place the rule lives. */
int run_owners(const train_opts *o, int world);
/* The plan's configuration from the options; --branch-scale auto is resolved for the full
 * model's layout. */
sdp_plan_cfg run_plan_config(const train_opts *o, int world, const sdp_layout *full);

#endif
