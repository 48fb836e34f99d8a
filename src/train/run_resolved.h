/* What a run's plan options resolved to: config.json's "resolved" object. The options alone
 * (--sdp-coverage, --sdp-chunks 0, --branch-scale auto) need a rule to become k, chunks and a
 * branch scale; recording the outcome lets readers use it as trained, whatever the rule becomes. */
#ifndef SDP_TRAIN_RUN_RESOLVED_H
#define SDP_TRAIN_RUN_RESOLVED_H

#include "sdp/plan.h"
#include "train_opts.h"

#include <stdbool.h>

typedef struct {
    bool present;              /* false: a run directory written before the record existed */
    int world, owners, chunks; /* chunks per group with neuron units, else 0 */
    double coverage;           /* owners / world */
    sdp_branch_scale scale;
    int units_min, units_max; /* units owned by the least and most loaded worker */
} run_resolved;

/* The record of a built plan. */
run_resolved train_run_resolved_of(const sdp_plan *p);
/* config.json's text: every option of o, then the "resolved" object. */
char *train_run_resolved_config_json(const train_opts *o, const run_resolved *r);
/* Reads and checks the "resolved" object of config.json's text (source names the file in
 * errors); r->present is false when the key is absent. A damaged record fails in one line. */
void train_run_resolved_from_json(run_resolved *r, const char *json, const char *source);
/* On resume: the options recorded in config.json (o, before any change on the command line),
 * derived again for the recorded world, must give the recorded values; a run written under
 * another rule is refused in one line naming the first value that differs. */
void train_run_resolved_check(const run_resolved *r, const train_opts *o, const sdp_layout *full,
                              const char *source);

#endif
