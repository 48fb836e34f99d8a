/* `sdp report --plots DIR`: SVG charts drawn by gnuplot from .gp scripts and .dat files that stay
 * in DIR, so a chart can be restyled by editing its script and running `gnuplot NAME.gp` there. */
#ifndef SDP_CLI_REPORT_PLOT_H
#define SDP_CLI_REPORT_PLOT_H

#include "report_group.h"

/* Fails with one line when gnuplot is not on the PATH (checked before any work is done). */
void report_plot_require_gnuplot(void);

/* Writes loss_vs_steps.svg, loss_vs_flops.svg, accuracy.svg (when any group has validation
 * accuracy) and memory.svg into dir (created if needed), one colour per group, and prints each
 * path written. Fails with one line when gnuplot is missing or fails. */
void report_plot(const char *dir, const report_group *g, int ngroups);

#endif
