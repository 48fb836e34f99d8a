/* sdp plan --measure-compute: each worker's forward and backward, timed on this machine as
 * `sdp train --sim-world N --sim-rank r` would run them, for the step-time model in place of
 * FLOPs at one compute rate (which small and compact models run far below). */
#ifndef SDP_CLI_PLAN_MEASURE_H
#define SDP_CLI_PLAN_MEASURE_H

#include "train/train_opts.h"

/* What to time: the plan's options (only the fields named in `given`, a NULL-terminated list of
 * option names, were parsed; the others take sdp train's defaults), the job's size, and how
 * many steps to time after the warm-up ones, at `threads` threads per worker. */
typedef struct {
    const train_opts *plan;
    const char *const *given;
    int world, steps, threads;
} plan_measure_request;

/* Seconds of one micro-batch's forward and backward, the median over the timed steps. */
typedef struct {
    double forward_s, backward_s;
} plan_compute_time;

/* Every worker's time (out[world]), one worker after another, each alone on the machine; and,
 * when ddp is not NULL, a data-parallel worker's (every DDP worker runs the same model). Prints
 * a progress line per worker to stderr. */
void plan_measure_compute(const plan_measure_request *req, plan_compute_time *out,
                          plan_compute_time *ddp);

#endif
