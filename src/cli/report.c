/* sdp report: turns run directories into a Markdown table of their final figures; with --group,
 * a second table over runs that differ only in their seed; with --plots DIR, gnuplot charts of
 * loss against steps and FLOPs, accuracy, and memory per worker. */
#include "commands.h"
#include "report_group.h"
#include "report_plot.h"
#include "report_run.h"
#include "train/run.h"

#include "sdp/check.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: sdp report [--group] [--plots DIR] RUN_DIR...\n"
    "Prints a Markdown table of each run's final figures: mode, unit, N, k, steps, FLOPs per\n"
    "worker, final train and validation loss (and accuracy for image models), tokens or\n"
    "images per second per worker, the largest worker's memory over every rank, rank 0\n"
    "included (training bytes plus evaluation and checkpoint buffers; peak RSS), and bytes\n"
    "sent per step.\n\n"
    "  --group      also print one row per group of runs whose config.json and number of\n"
    "               workers are equal except for seed, out, resume, threads, stop-after and\n"
    "               ckpt-every (any other option, steps included, separates groups): the\n"
    "               number of seeds, final train loss, val loss and val accuracy as mean ±\n"
    "               sample standard deviation over seeds (the mean alone for one seed), TFLOP\n"
    "               per worker, and the largest worker's params+grads+optimizer MiB, peak RSS\n"
    "               and bytes sent per step. Groups are labelled by mode, coverage and steps,\n"
    "               plus any option that differs between groups.\n"
    "  --plots DIR  draw SVG charts with gnuplot (Debian: gnuplot-nox) into DIR:\n"
    "               loss_vs_steps.svg and loss_vs_flops.svg (train loss thin, validation\n"
    "               loss thick with points, against steps and cumulative FLOPs per worker),\n"
    "               accuracy.svg (validation accuracy, when a run logged it) and memory.svg\n"
    "               (the largest worker's MiB by category, stacked). One colour per group\n"
    "               with --group (curves are the mean over seeds), else per run. DIR keeps\n"
    "               the .gp scripts and .dat files: edit one and run `gnuplot NAME.gp` there.\n"
    "  --help       print this help\n";

static const char *mib(char *b, size_t n, double bytes) {
    if (bytes <= 0 || isnan(bytes)) return "-";
    snprintf(b, n, "%.1f", bytes / 1048576.0);
    return b;
}

static void print_table(const report_run *r, int n) {
    printf("| run | mode | unit | N | k | steps | TFLOP/worker | train loss | val loss | val acc | "
           "examples/s/worker | params+grads+opt MiB | total MiB | peak RSS MiB | sent/step MiB "
           "|\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const report_run *f = &r[i];
        const bool ddp = strcmp(f->o.sdp_mask, "none") == 0;
        char k[16], a[32], b[32], c[32], d[32];
        if (report_run_owners(f) > 0)
            snprintf(k, sizeof k, "%d", report_run_owners(f));
        else if (f->o.sdp_owners > 0 && !ddp)
            snprintf(k, sizeof k, "%d", f->o.sdp_owners);
        else if (!ddp)
            snprintf(k, sizeof k, "C=%g", f->o.sdp_coverage); /* unfinished: N unknown */
        else
            snprintf(k, sizeof k, "-");
        char acc[32] = "-", name[4 * OPT_STR_MAX], mask[4 * OPT_STR_MAX], unit[4 * OPT_STR_MAX];
        if (!isnan(f->val_acc)) snprintf(acc, sizeof acc, "%.2f%%", 100 * f->val_acc);
        printf(
            "| %s | %s | %s | %d | %s | %ld | %.4g | %.4f | %.4f | %s | %.0f | %s | %s | %s | %s "
            "|\n",
            sdp_escape(name, sizeof name, report_run_name(f)),
            ddp ? "DDP" : sdp_escape(mask, sizeof mask, f->o.sdp_mask),
            ddp ? "-" : sdp_escape(unit, sizeof unit, f->o.sdp_unit), f->world, k, f->steps,
            f->flops / 1e12, f->train_loss, f->val_loss, acc, f->tok_s,
            mib(a, sizeof a, f->state_bytes), mib(b, sizeof b, f->total_bytes),
            mib(c, sizeof c, f->peak_rss), mib(d, sizeof d, f->sent));
    }
}

typedef struct {
    bool group;
    const char *plots; /* NULL: no charts */
} report_opts;

/* Parses the flags; returns the index of the first run directory in the permuted argv. */
static int parse_flags(report_opts *ro, int argc, char **argv) {
    static const struct option flags[] = {{"group", no_argument, NULL, 'g'},
                                          {"plots", required_argument, NULL, 'p'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    *ro = (report_opts){0};
    opts_check_names(flags, argc, argv); /* whole names: getopt_long takes abbreviations */
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", flags, NULL)) != -1) {
        if (c == 'h') {
            if (sdp_is_lead()) fputs(USAGE, stdout);
            exit(0);
        }
        if (c == 'g') ro->group = true;
        if (c == 'p') ro->plots = optarg;
        if (c == '?')
            sdp_fatal("unknown option '%s': run with --help to list the options", argv[optind - 1]);
    }
    return optind;
}

int cmd_report(int argc, char **argv) {
    report_opts ro;
    const int first = parse_flags(&ro, argc, argv);
    const int n = argc - first;
    SDP_CHECK(n >= 1, "sdp report needs one or more run directories (written by sdp train)");
    if (ro.plots) report_plot_require_gnuplot();
    report_run *runs = calloc((size_t)n, sizeof *runs);
    report_group *groups = calloc((size_t)n, sizeof *groups);
    SDP_CHECK(runs && groups, "out of memory");
    for (int i = 0; i < n; i++) report_run_load(&runs[i], argv[first + i]);
    print_table(runs, n);
    const int ngroups = report_group_runs(groups, runs, n, ro.group);
    if (ro.group) {
        printf("\n");
        report_group_print_table(groups, ngroups);
    }
    if (ro.plots) report_plot(ro.plots, groups, ngroups);
    for (int i = 0; i < ngroups; i++) report_group_free(&groups[i]);
    for (int i = 0; i < n; i++) report_run_free(&runs[i]);
    free(groups);
    free(runs);
    return 0;
}
