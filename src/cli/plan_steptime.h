/* sdp plan's step-time model (include/sdp/steptime.h): its options, the compute rate (given,
 * or this machine's measured sgemm peak), and the table and JSON fields it adds. With no
 * --link-gbps it is off and sdp plan prints exactly what it printed before. */
#ifndef SDP_CLI_PLAN_STEPTIME_H
#define SDP_CLI_PLAN_STEPTIME_H

#include "train/options.h"

#include "sdp/steptime.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double link_gbps, latency_us, host_gbps, host_bcast_gbps, gflops, mem_gbs;
    int ranks_per_host;
    char comm[OPT_STR_MAX];
} plan_steptime_opts;

/* Appends the model's options to specs (their fields at `base` in the options struct); returns
 * how many. */
int plan_steptime_specs(opt_spec *specs, size_t base);

bool plan_steptime_on(const plan_steptime_opts *o);

/* The model's configuration for `world` workers. A --gflops of 0 measures the sgemm peak at
 * the current thread count (CPU only). state_bytes: optimizer state per trained parameter. */
void plan_steptime_config(const plan_steptime_opts *o, int world, bool cuda, bool bf16,
                          double state_bytes, sdp_steptime_cfg *cfg);

/* The table: one row per worker (the first `show`), the job's step and DDP's. */
void plan_steptime_print(const sdp_steptime_cfg *cfg, const sdp_step_times *t, int world, int show,
                         const sdp_step_times *ddp);

/* The fields a worker's JSON row gains (each starts with ", "). */
void plan_steptime_json_fields(const sdp_step_times *t, double flops);
/* The top-level "steptime" member, on a line of its own. */
void plan_steptime_json_summary(const sdp_steptime_cfg *cfg, const sdp_step_times *t, int world,
                                const sdp_step_times *ddp);

#endif
