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

/* Seconds of one micro-batch's forward and backward, the median over the timed steps, of every
 * worker (forward_s[r], backward_s[r], r < world) and then of a data-parallel worker ([world]:
 * every DDP worker runs the same model), timed one after another, each alone on the machine.
 * Prints a progress line per worker timed to stderr. */
void plan_measure_compute(const plan_measure_request *req, double *forward_s, double *backward_s);

#endif
