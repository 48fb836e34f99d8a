/* A run's SDP setup checked before anything is read or built (src/train/run_plan_check.c). */
#ifndef SDP_TRAIN_RUN_PLAN_CHECK_H
#define SDP_TRAIN_RUN_PLAN_CHECK_H

#include "train_opts.h"

/* What sdp train refuses for a job of `world` workers (N, or --sim-world's N), before any data
 * loads: the options (train_run_plan_check_options), then the plan they give, built as sdp plan
 * builds it (its own refusals: k, chunks, block units without droppable blocks), and a worker that
 * would own no unit (train_run_plan_check_owners). Warns of SDP options that --sdp-mask none
 * ignores. Every rank calls it with the same options: each refusal is one line for the job. */
void train_run_plan_check(const train_opts *o, int world, int argc, char **argv);

#endif
