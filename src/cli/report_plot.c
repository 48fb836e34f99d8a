#include "report_plot.h"

#include "train/run.h"
#include "train/run_dir.h"

#include "sdp/check.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Dense training curves are thinned to this many points, which keeps each SVG a few tens of KB
 * and is more than a chart's width can show. */
enum { MAX_POINTS = 300 };
/* Validation curves get a marker per point only up to this many points. */
enum { MAX_MARKERS = 50 };

static const char *const COLOURS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define NCOLOURS (int)(sizeof COLOURS / sizeof *COLOURS)

static const char *colour(int group) {
    return COLOURS[group % NCOLOURS];
}

static bool on_path(const char *program) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char *dirs = sdp_xstrdup(path, "searching PATH"), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[1024];
        found = snprintf(full, sizeof full, "%s/%s", *d ? d : ".", program) < (int)sizeof full &&
                access(full, X_OK) == 0;
    }
    free(dirs);
    return found;
}

static FILE *open_in(const char *dir, const char *name) {
    char path[1024];
    train_run_path(path, sizeof path, dir, name);
    return sdp_fopen(path, "wb");
}

static void close_file(FILE *f, const char *dir, const char *name) {
    SDP_CHECK(ferror(f) == 0 && fclose(f) == 0, "cannot write %s/%s: is the disk full?", dir, name);
}

/* A string as gnuplot reads it in single quotes, where only the quote itself needs doubling. */
static void put_quoted(FILE *f, const char *s) {
    /* Labels quote config.json's strings: a newline in one would end the string and let the
     * next line of the script run as a gnuplot command (system "..."). */
    size_t n = 4 * strlen(s) + 1;
    char *escaped = sdp_xmalloc(n, "a plot's label");
    s = sdp_escape(escaped, n, s);
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
    free(escaped);
}

/* The FLOP unit that keeps the largest figure on the x axis readable. */
typedef struct {
    const char *name;
    double scale;
} flop_unit;

static flop_unit pick_flop_unit(const report_group *g, int ngroups) {
    double most = 0;
    for (int i = 0; i < ngroups; i++)
        if (g[i].train.n) most = fmax(most, g[i].train.flops[g[i].train.n - 1]);
    if (most >= 1e15) return (flop_unit){"PFLOP", 1e-15};
    if (most >= 1e12 || most == 0) return (flop_unit){"TFLOP", 1e-12};
    return (flop_unit){"GFLOP", 1e-9};
}

/* Columns: step, FLOPs in the chosen unit, loss, accuracy in % (NaN where not logged). A curve
 * longer than MAX_POINTS is written as the means of runs of consecutive points: keeping every
 * k-th point instead would alias the step-to-step noise of the training loss. */
static void write_curve(const char *dir, const char *name, const report_curve *c, flop_unit u) {
    FILE *f = open_in(dir, name);
    fprintf(f, "# step %s loss accuracy%%\n", u.name);
    const int stride = (c->n + MAX_POINTS - 1) / MAX_POINTS;
    for (int i = 0; i < c->n; i += stride) {
        const int end = i + stride < c->n ? i + stride : c->n;
        double step = 0, flops = 0, loss = 0, acc = 0;
        for (int j = i; j < end; j++)
            step += c->step[j], flops += c->flops[j], loss += c->loss[j], acc += c->acc[j];
        const double k = end - i;
        fprintf(f, "%.6g %.9g %.9g %.6g\n", step / k, flops / k * u.scale, loss / k, 100 * acc / k);
    }
    close_file(f, dir, name);
}

static const char *val_style(const report_curve *c) {
    return c->n <= MAX_MARKERS ? "linespoints lw 3 pt 7 ps 0.7" : "lines lw 3";
}

static void curve_name(char *buf, size_t n, int group, bool val) {
    snprintf(buf, n, "curve_%d_%s.dat", group, val ? "val" : "train");
}

static void write_memory_data(const char *dir, const report_group *g, int ngroups) {
    FILE *f = open_in(dir, "memory.dat");
    fprintf(f, "# group");
    for (int b = 0; b < REPORT_NBARS; b++) fprintf(f, " %s", REPORT_BAR_NAMES[b]);
    fprintf(f, " (MiB of the largest worker)\n");
    for (int i = 0; i < ngroups; i++) { /* bars are numbered; memory.gp lists the labels */
        fprintf(f, "%d", i + 1);
        for (int b = 0; b < REPORT_NBARS; b++) fprintf(f, " %.6g", g[i].bars[b] / 1048576.0);
        fprintf(f, " # %s\n", g[i].label);
    }
    close_file(f, dir, "memory.dat");
}

static FILE *begin_script(const char *dir, const char *name, const char *title, const char *xlabel,
                          const char *ylabel) {
    char script[128];
    snprintf(script, sizeof script, "%s.gp", name);
    FILE *f = open_in(dir, script);
    fprintf(f,
            "# Written by sdp report; run `gnuplot %s` in this directory to redraw %s.svg.\n"
            "set terminal svg size 1200,560 dynamic noenhanced font 'sans,14' background "
            "rgb 'white'\n"
            "set output '%s.svg'\n",
            script, name, name);
    const char *what[3][2] = {{"title", title}, {"xlabel", xlabel}, {"ylabel", ylabel}};
    for (int i = 0; i < 3; i++) {
        fprintf(f, "set %s ", what[i][0]);
        put_quoted(f, what[i][1]);
        fputc('\n', f);
    }
    /* The key sits beside the plot: group labels are long, and inside they hide the curves. */
    fprintf(f, "set grid lc rgb '#dddddd'\nset key outside right top box\nset xrange [0:*]\n"
               "set offsets 0, graph 0.03, graph 0.05, graph 0.05\n");
    return f;
}

/* Training loss as thin lines and validation loss as thick lines with points, one colour per
 * group; x_column 1 is steps, 2 FLOPs. Two grey key entries explain the line styles. */
static void loss_script(const char *dir, const char *name, const char *title, const char *xlabel,
                        int x_column, const report_group *g, int ngroups) {
    FILE *f = begin_script(dir, name, title, xlabel, "loss (nats)");
    char file[64];
    fprintf(f, "plot \\\n");
    for (int i = 0; i < ngroups; i++) {
        curve_name(file, sizeof file, i, false);
        if (g[i].train.n) {
            fprintf(f, "  '%s' using %d:3 with lines lw 1 lc rgb '%s' title ", file, x_column,
                    colour(i));
            put_quoted(f, g[i].label);
            fprintf(f, ", \\\n");
        }
        curve_name(file, sizeof file, i, true);
        if (g[i].val.n) {
            fprintf(f, "  '%s' using %d:3 with %s lc rgb '%s' ", file, x_column,
                    val_style(&g[i].val), colour(i));
            if (g[i].train.n) {
                fprintf(f, "notitle");
            } else {
                fprintf(f, "title ");
                put_quoted(f, g[i].label);
            }
            fprintf(f, ", \\\n");
        }
    }
    fprintf(f, "  1/0 with lines lw 1 lc rgb 'gray40' title 'train loss', \\\n"
               "  1/0 with linespoints lw 3 pt 7 ps 0.7 lc rgb 'gray40' title 'val loss'\n");
    close_file(f, dir, "loss script");
}

static void accuracy_script(const char *dir, const report_group *g, int ngroups) {
    FILE *f = begin_script(dir, "accuracy", "Validation accuracy vs step", "step", "accuracy (%)");
    char file[64];
    const char *sep = "plot";
    for (int i = 0; i < ngroups; i++) {
        if (!g[i].val.n || isnan(g[i].val.acc[0])) continue;
        curve_name(file, sizeof file, i, true);
        fprintf(f, "%s \\\n  '%s' using 1:4 with %s lc rgb '%s' title ", sep, file,
                val_style(&g[i].val), colour(i));
        put_quoted(f, g[i].label);
        sep = ",";
    }
    fprintf(f, "\n");
    close_file(f, dir, "accuracy.gp");
}

/* Bars are numbered and the numbers explained under the plot, one per line: group labels are too
 * long to sit under the bars, and rotated text renders unreliably across SVG viewers. */
static void memory_script(const char *dir, const report_group *g, int ngroups) {
    FILE *f = begin_script(dir, "memory", "Largest worker's memory by category", "",
                           "MiB (peak bytes per category)");
    const int height = 480 + 22 * ngroups;
    fprintf(f,
            "set terminal svg size 1200,%d dynamic noenhanced font 'sans,14' background "
            "rgb 'white'\nset output 'memory.svg'\n"
            "set style data histograms\nset style histogram rowstacked\n"
            "set style fill solid 0.85 border rgb 'black'\nset boxwidth 0.6\n"
            "set grid noxtics\nset xtics nomirror\nset autoscale x\nset yrange [0:*]\n"
            "set bmargin at screen %.4f\n",
            height, (double)(40 + 22 * ngroups) / height);
    for (int i = 0; i < ngroups; i++) {
        char text[SDP_NAME_MAX + 32];
        snprintf(text, sizeof text, "%d: %s", i + 1, g[i].label);
        fprintf(f, "set label %d ", i + 1);
        put_quoted(f, text);
        fprintf(f, " at screen 0.08, screen %.4f left\n",
                (double)(22 * (ngroups - i) + 4) / height);
    }
    fprintf(f, "plot 'memory.dat' using 2:xtic(1) lc rgb '%s' title '%s'", colour(0),
            REPORT_BAR_NAMES[0]);
    for (int b = 1; b < REPORT_NBARS; b++)
        fprintf(f, ", \\\n  '' using %d lc rgb '%s' title '%s'", b + 2, colour(b),
                REPORT_BAR_NAMES[b]);
    fprintf(f, "\n");
    close_file(f, dir, "memory.gp");
}

/* Runs `gnuplot NAME.gp` inside dir, so the script's relative file names resolve there. */
static void run_gnuplot(const char *dir, const char *name) {
    char script[128];
    snprintf(script, sizeof script, "%s.gp", name);
    fflush(stdout);
    const pid_t pid = fork();
    SDP_CHECK(pid >= 0, "cannot start gnuplot: %s", strerror(errno));
    if (pid == 0) {
        if (chdir(dir) == 0) execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    SDP_CHECK(waitpid(pid, &status, 0) == pid, "lost track of gnuplot: %s", strerror(errno));
    SDP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "gnuplot failed on %s/%s (see its messages above): check that gnuplot-nox can "
              "write SVG",
              dir, script);
    printf("wrote %s/%s.svg\n", dir, name);
}

static bool any_accuracy(const report_group *g, int ngroups) {
    for (int i = 0; i < ngroups; i++)
        if (g[i].val.n && !isnan(g[i].val.acc[0])) return true;
    return false;
}

void report_plot_require_gnuplot(void) {
    SDP_CHECK(on_path("gnuplot"), "gnuplot not found: install gnuplot-nox");
}

void report_plot(const char *dir, const report_group *g, int ngroups) {
    report_plot_require_gnuplot();
    bool any_loss = false;
    for (int i = 0; i < ngroups; i++) any_loss |= g[i].train.n > 0 || g[i].val.n > 0;
    SDP_CHECK(any_loss, "no run has logged a loss yet, so there is nothing to plot: wait for "
                        "the first progress line");
    train_run_make_dir(dir, "plots directory");
    const flop_unit u = pick_flop_unit(g, ngroups);
    char file[64], xlabel[64], title[128];
    for (int i = 0; i < ngroups; i++) {
        curve_name(file, sizeof file, i, false);
        write_curve(dir, file, &g[i].train, u);
        curve_name(file, sizeof file, i, true);
        write_curve(dir, file, &g[i].val, u);
    }
    write_memory_data(dir, g, ngroups);
    /* Each chart has a title of its own: the two loss charts differ only in their x axis. */
    loss_script(dir, "loss_vs_steps", "Training (thin) and validation (thick) loss vs step", "step",
                1, g, ngroups);
    snprintf(xlabel, sizeof xlabel, "cumulative %s per worker", u.name);
    snprintf(title, sizeof title,
             "Training (thin) and validation (thick) loss vs cumulative %s per worker", u.name);
    loss_script(dir, "loss_vs_flops", title, xlabel, 2, g, ngroups);
    memory_script(dir, g, ngroups);
    run_gnuplot(dir, "loss_vs_steps");
    run_gnuplot(dir, "loss_vs_flops");
    if (any_accuracy(g, ngroups)) {
        accuracy_script(dir, g, ngroups);
        run_gnuplot(dir, "accuracy");
    }
    run_gnuplot(dir, "memory");
}
