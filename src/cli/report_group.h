/* Runs that differ only in their seed form one group: its figures are the mean and spread over
 * seeds, its curves the mean at every step all of its seeds logged. */
#ifndef SDP_CLI_REPORT_GROUP_H
#define SDP_CLI_REPORT_GROUP_H

#include "report_run.h"

#include <stdbool.h>

typedef struct {
    char *label; /* malloc'd */
    int nruns;
    const report_run **runs;
    report_curve train, val;   /* means over the group's runs */
    double bars[REPORT_NBARS]; /* of the run whose largest worker holds the most */
} report_group;

/* Partitions runs[0..n) into groups (at most n, written to g) and returns how many. With
 * by_seed, runs whose configurations are equal but for the seed and where the run lives share a
 * group, labelled by mode, coverage, steps and whatever else sets groups apart; without it each
 * run is a group of its own, labelled by its directory name. */
int report_group_runs(report_group *g, const report_run *runs, int n, bool by_seed);
void report_group_free(report_group *g);

/* Markdown: one row per group with mean ± sample standard deviation over seeds. */
void report_group_print_table(const report_group *g, int ngroups);

/* The options that do not change what a run learns or measures, so runs differing only in them
 * belong to one group. */
bool report_option_ignored_by_group(const char *name);

#endif
