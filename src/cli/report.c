/* sdp report: turns run directories into a Markdown table of their final figures; with --group,
 * a second table over runs that differ only in their seed (each seed counted once, mixed runs
 * alone); with --plots DIR, gnuplot charts of the same runs or groups: loss against steps and
 * FLOPs, accuracy, and memory per worker. */
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
    "Prints a Markdown table of each run's final figures: mode, unit, N, k, steps trained (the\n"
    "last training step in metrics.jsonl), FLOPs per worker, final train and validation loss\n"
    "(and accuracy for image models), tokens or images per second per worker, the largest\n"
    "worker's memory over every rank, rank 0 included (training bytes, the dataset's bytes,\n"
    "and the total with evaluation and checkpoint buffers; peak RSS), and bytes sent per step.\n"
    "A run resumed with another plan (config.json's \"invocations\" differ in N, k, coverage,\n"
    "chunks, sdp-mask, sdp-unit, sdp-assign or branch scale) is mixed: its row shows each\n"
    "changed column as its values in order (\"4→2\") and its name is marked (mixed).\n\n"
    "  --group      also print one row per group of runs that trained the same steps and whose\n"
    "               config.json and plan (N, k, chunks, branch scale) are equal except for\n"
    "               seed and per-invocation options (steps, out, resume, overwrite, threads,\n"
    "               gemm, stop-after, ckpt-every, log-every, val-every, check-replicas,\n"
    "               stall-timeout, reschedule): the number of distinct seeds, final train\n"
    "               loss, val loss and val accuracy as mean ± sample standard deviation over\n"
    "               seeds (the mean alone for one seed), TFLOP per worker, and the largest\n"
    "               worker's params+grads+optimizer MiB, peak RSS and bytes sent per step.\n"
    "               Groups are labelled by mode, coverage and steps trained, plus any option\n"
    "               that differs between groups. A run with the seed of another in its group\n"
    "               (a copy, or a resumed copy) counts once, with a warning naming both; a\n"
    "               mixed run is not grouped: it stands alone, labelled mixed, with a warning\n"
    "               saying what changed.\n"
    "  --plots DIR  draw SVG charts with gnuplot (Debian: gnuplot-nox) into DIR, of exactly\n"
    "               the runs or groups in the table and over the steps it counts:\n"
    "               loss_vs_steps.svg and loss_vs_flops.svg (train loss thin, validation\n"
    "               loss thick with points, against steps and cumulative FLOPs per worker),\n"
    "               accuracy.svg (validation accuracy, when a run logged it) and memory.svg\n"
    "               (the largest worker's MiB by category, stacked: params, grads, optimizer,\n"
    "               activations, data, other). One colour per group with --group (curves are\n"
    "               the mean over seeds), else per run. DIR keeps the .gp scripts and .dat\n"
    "               files: edit one and run `gnuplot NAME.gp` there.\n"
    "  --help       print this help\n";

static const char *mib(char *b, size_t n, double bytes) {
    if (bytes <= 0 || isnan(bytes)) return "-";
    snprintf(b, n, "%.1f", bytes / 1048576.0);
    return b;
}

/* A '|' in a cell would end it: Markdown's escape keeps the table's columns. */
static void escape_pipes(char *buf, size_t n) {
    char *copy = sdp_xmalloc(strlen(buf) + 1, "a table cell");
    strcpy(copy, buf);
    size_t used = 0;
    for (const char *c = copy; *c && used + 2 < n; c++) {
        if (*c == '|') buf[used++] = '\\';
        buf[used++] = *c;
    }
    buf[used] = 0;
    free(copy);
}

/* Whether another run of the table has run i's name (A/run and B/run): both then show their
 * directories as given, or their rows could not be told apart. */
static bool name_shared(const report_run *r, int n, int i) {
    for (int j = 0; j < n; j++)
        if (j != i && !strcmp(report_run_name(&r[j]), report_run_name(&r[i]))) return true;
    return false;
}

/* The run column: its name (its directory when whole_path), and for a mixed run what changed
 * that no other column shows. */
static const char *run_cell(char *buf, size_t n, const report_run *f, bool whole_path) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    SDP_CHECK(m, "out of memory");
    fputs(whole_path ? f->dir : report_run_name(f), m);
    if (report_run_mixed(f)) {
        static const int elsewhere[] = {INV_CHUNKS, INV_ASSIGN, INV_SCALE, INV_SCHEDULE};
        const char *sep = ": ";
        fputs(" (mixed", m);
        for (size_t i = 0; i < sizeof elsewhere / sizeof *elsewhere; i++) {
            if (!f->changed[elsewhere[i]]) continue;
            char value[256];
            fprintf(m, "%s%s %s", sep, report_field_name(elsewhere[i]),
                    report_run_field(value, sizeof value, f, elsewhere[i]));
            sep = ", ";
        }
        fputs(")", m);
    }
    SDP_CHECK(fclose(m) == 0, "out of memory");
    sdp_escape(buf, n, text);
    escape_pipes(buf, n);
    free(text);
    return buf;
}

static void print_table(const report_run *r, int n) {
    printf("| run | mode | unit | N | k | steps | TFLOP/worker | train loss | val loss | val acc | "
           "examples/s/worker | params+grads+opt MiB | data MiB | total MiB | peak RSS MiB | "
           "sent/step MiB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const report_run *f = &r[i];
        /* A mixed run shows each changed column as its values in order ("4→2"). */
        bool ddp = true;
        for (int j = 0; j < f->ninv; j++) ddp &= strcmp(f->inv[j].mask, "none") == 0;
        char k[256], world[256], a[32], b[32], c[32], d[32], e[32];
        if (f->changed[INV_OWNERS])
            report_run_field(k, sizeof k, f, INV_OWNERS);
        else if (report_run_owners(f) > 0)
            snprintf(k, sizeof k, "%d", report_run_owners(f));
        else if (f->o.sdp_owners > 0 && !ddp)
            snprintf(k, sizeof k, "%d", f->o.sdp_owners);
        else if (!ddp)
            snprintf(k, sizeof k, "C=%g", f->o.sdp_coverage); /* unfinished: N unknown */
        else
            snprintf(k, sizeof k, "-");
        if (f->changed[INV_WORLD])
            report_run_field(world, sizeof world, f, INV_WORLD);
        else
            snprintf(world, sizeof world, "%d", f->world);
        char acc[32] = "-", name[4 * OPT_STR_MAX], mask[4 * OPT_STR_MAX], unit[4 * OPT_STR_MAX];
        char field[2 * OPT_STR_MAX];
        if (!isnan(f->val_acc)) snprintf(acc, sizeof acc, "%.2f%%", 100 * f->val_acc);
        char val[32] = "-", train[32] = "-"; /* "-": not logged yet */
        if (!isnan(f->val_loss)) snprintf(val, sizeof val, "%.4f", f->val_loss);
        if (!isnan(f->train_loss)) snprintf(train, sizeof train, "%.4f", f->train_loss);
        char flops[32] = "-", rate[32] = "-";
        if (!isnan(f->flops)) snprintf(flops, sizeof flops, "%.4g", f->flops / 1e12);
        if (!isnan(f->tok_s)) snprintf(rate, sizeof rate, "%.0f", f->tok_s);
        if (f->changed[INV_MASK])
            sdp_escape(mask, sizeof mask, report_run_field(field, sizeof field, f, INV_MASK));
        else
            sdp_escape(mask, sizeof mask, ddp ? "DDP" : f->o.sdp_mask);
        if (ddp)
            strcpy(unit, "-");
        else if (f->changed[INV_UNIT])
            sdp_escape(unit, sizeof unit, report_run_field(field, sizeof field, f, INV_UNIT));
        else
            sdp_escape(unit, sizeof unit, f->o.sdp_unit);
        printf("| %s | %s | %s | %s | %s | %ld | %s | %s | %s | %s | %s | %s | %s | %s | "
               "%s | %s |\n",
               run_cell(name, sizeof name, f, name_shared(r, n, i)), mask, unit, world, k, f->steps,
               flops, train, val, acc, rate, mib(a, sizeof a, f->state_bytes),
               mib(e, sizeof e, f->bars[BAR_DATA]), mib(b, sizeof b, f->total_bytes),
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
    train_opts_check_names(flags, argc, argv); /* whole names: getopt_long takes abbreviations */
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
    report_run *runs = sdp_xcalloc((size_t)n, sizeof *runs, "the runs");
    report_group *groups = sdp_xcalloc((size_t)n, sizeof *groups, "the runs' groups");
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
