/* Runs that differ only in their seed form one group: its figures are the mean and spread over
 * seeds, its curves the mean at every step all of its seeds logged. */
#ifndef SDP_CLI_REPORT_GROUP_H
#define SDP_CLI_REPORT_GROUP_H

#include "report_run.h"

#include <stdbool.h>

typedef struct {
    char *label; /* malloc'd */
    bool mixed;  /* one run whose invocations trained different plans */
    int nruns;   /* one per seed */
    const report_run **runs;
    report_curve train, val;   /* means over the group's runs */
    double bars[REPORT_NBARS]; /* of the run whose largest worker holds the most */
} report_group;

/* Partitions runs[0..n) into groups (at most n, written to g) and returns how many. With
 * by_seed, runs whose configurations and steps trained are equal but for the seed and
 * per-invocation options share a group, labelled by mode, coverage, steps and whatever else sets
 * groups apart; a run repeating a seed of its group is counted once, and a mixed run stands
 * alone, each with one warning line on stderr. Without by_seed each run is a group of its own,
 * labelled by its directory name. */
int report_group_runs(report_group *g, const report_run *runs, int n, bool by_seed);
void report_group_free(report_group *g);

/* Markdown: one row per group with mean ± sample standard deviation over seeds. */
void report_group_print_table(const report_group *g, int ngroups);

/* The options grouping does not compare: the seed, and those one invocation of sdp train may set
 * without changing what the run learns or measures. --steps is among them: the steps actually
 * trained are compared instead. */
bool report_option_ignored_by_group(const char *name);

#endif
