/* sdp plan --fit BYTES: the largest model of the family, in each mode (data parallelism, and
 * forward or backward masking with block or neuron units), whose largest worker fits in BYTES.
 * It varies the width (--fit-by width) or the depth (--fit-by layers), the other options as
 * given, and measures every size with sdp plan's own prediction (the measure callback), so a size
 * reported as fitting is one whose `sdp plan` total is at most BYTES. */
#ifndef SDP_CLI_PLAN_FIT_H
#define SDP_CLI_PLAN_FIT_H

#include "train/train_opts.h"

#include <stdbool.h>
#include <stddef.h>

/* One size in one mode, as sdp plan predicts it. */
typedef struct {
    double bytes; /* the largest worker's total, evaluation and checkpoint buffers included */
    int rank;     /* the first worker that holds it */
    size_t params;
} plan_fit_point;

/* sdp plan's prediction for the options t (--sdp-mask none: data parallelism, as the plan's DDP
 * row). */
typedef plan_fit_point (*plan_fit_measure)(void *ctx, const train_opts *t);

typedef struct {
    const train_opts *t; /* the plan's options as given */
    int world;
    const char *fit, *fit_by; /* --fit (NULL: not given) and --fit-by as given */
    bool json;
    bool mask_given, unit_given; /* --sdp-mask or --sdp-unit named: only those SDP modes */
    const char *device, *dtype;  /* for the title */
    int threads;                 /* per worker, as sdp plan counts their scratch */
    plan_fit_measure measure;
    void *ctx;
} plan_fit_request;

/* Under forward masking sdp plan builds every worker's subnetwork spec to count its model, which
 * costs workers x blocks: this bound keeps a plan to seconds (a thousand workers of 65536 layers
 * ran for minutes). --fit stops its ladders there. */
#define PLAN_MAX_WORKER_BLOCKS (1 << 22)
/* Fails with one line when forward masking's workers x blocks pass that bound. */
void plan_check_worker_blocks(int world, int nblocks, bool forward);

/* Parses a size in bytes ("24GiB", "512MiB", "80GB", "1.5e9"); false when malformed. */
bool plan_fit_parse_bytes(const char *s, double *bytes);

/* Prints the fitted size of every mode (a table, or JSON); returns the exit status. Fails with one
 * line when --fit or --fit-by is malformed. */
int plan_fit_run(const plan_fit_request *r);

#endif
