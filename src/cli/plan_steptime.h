/* sdp plan's step-time model (include/sdp/steptime.h): its options, the compute rate (given, or
 * this machine's sgemm peak from its calibration file, measured once: plan_calibration.h), and
 * the table and JSON fields it adds. With no --link-gbps it is off and sdp plan prints exactly
 * what it printed before. */
#ifndef SDP_CLI_PLAN_STEPTIME_H
#define SDP_CLI_PLAN_STEPTIME_H

#include "plan_calibration.h"
#include "train/options.h"

#include "sdp/steptime.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double link_gbps, latency_us, host_gbps, host_bcast_gbps, gflops, mem_gbs;
    int ranks_per_host;
    int measure_steps; /* --measure-compute: steps timed per worker; 0: FLOPs at --gflops */
    char comm[OPT_STR_MAX], calibration[OPT_STR_MAX];
    bool recalibrate;
} plan_steptime_opts;

/* Appends the model's options to specs (their fields at `base` in the options struct); returns
 * how many. */
int plan_steptime_specs(opt_spec *specs, size_t base);

bool plan_steptime_on(const plan_steptime_opts *o);
/* One warning naming the model's options that argv gives and that will do nothing: without
 * --link-gbps, or under --fit (which prints no step times). */
void plan_steptime_warn_ignored(const plan_steptime_opts *o, bool fitting, int argc, char **argv);

/* The model's configuration for `world` workers. A --gflops of 0 takes this host's sgemm peak
 * at the current thread count from the calibration file, measuring it the first time (CPU only);
 * *cal says where it came from (its path empty when --gflops gave the rate). Under
 * --measure-compute no rate is read: the caller times the workers and sets cfg->forward_s and
 * cfg->backward_s. state_bytes: optimizer state per trained parameter. */
void plan_steptime_config(const plan_steptime_opts *o, int world, bool cuda, bool bf16,
                          double state_bytes, sdp_steptime_cfg *cfg, plan_calibration *cal);

/* The table: one row per worker (the first `show`), the job's step and DDP's, and where the
 * machine's speeds came from. */
void plan_steptime_print(const sdp_steptime_cfg *cfg, const plan_calibration *cal,
                         const sdp_step_times *t, int world, int show, const sdp_step_times *ddp);

/* The fields a worker's JSON row gains (each starts with ", "). */
void plan_steptime_json_fields(const sdp_step_times *t, double flops);
/* The top-level "steptime" member, on a line of its own. */
void plan_steptime_json_summary(const sdp_steptime_cfg *cfg, const plan_calibration *cal,
                                const sdp_step_times *t, int world, const sdp_step_times *ddp);

#endif
