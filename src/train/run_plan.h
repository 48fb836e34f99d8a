/* A run's SDP plan options resolved into the plan's configuration (src/train/run_plan.c). */
#ifndef SDP_TRAIN_RUN_PLAN_H
#define SDP_TRAIN_RUN_PLAN_H

#include "sdp/model.h"
#include "sdp/plan.h"
#include "train_opts.h"

/* k, the owners of each unit, for a job of `world` workers: --sdp-owners, or --sdp-coverage times
 * N rounded as the plan rounds it, or N under data parallelism. The one place the rule lives. */
int train_run_owners(const train_opts *o, int world);
/* The plan's configuration from the options (train_run_plan_check_options first); --branch-scale
 * auto is resolved for the full model's layout. */
sdp_plan_cfg train_run_plan_config(const train_opts *o, int world, const sdp_layout *full);

/* Refuses SDP options that no job of `world` workers can run: masking with fewer than 2 workers,
 * a --sdp-coverage outside (0, 1] or that gives no whole k. n_option names how N was chosen, for
 * the message: "--world" (sdp plan), or NULL for sdp train (mpirun -np N, or --sim-world N).
 * Every rank checks the same options, so every rank refuses alike: one line for the job
 * (sdp_fatal_all). */
void train_run_plan_check_options(const train_opts *o, int world, const char *n_option);
/* Under --sdp-mask none, one warning line (rank 0) naming the SDP options given on the command
 * line, which data parallelism ignores. */
void train_run_plan_warn_ignored(const train_opts *o, int argc, char **argv);
/* Refuses (once per job) a masked plan under which some worker would own no unit: too few blocks
 * or chunks for k and N, so that worker would train nothing but the shared part. The trainer
 * itself builds such plans (the invariant tests use them); sdp train and sdp plan refuse them
 * (train_run_plan_check in run_plan_check.c, and src/cli/plan_command.c). */
void train_run_plan_check_owners(const sdp_plan *p);

#endif
