/* One run directory as `sdp report` sees it: its configuration, the invocations of sdp train that
 * trained it, its final figures, its loss curves and the largest worker's memory. */
#ifndef SDP_CLI_REPORT_RUN_H
#define SDP_CLI_REPORT_RUN_H

#include "train/run_resolved.h"
#include "train/train_opts.h"

/* A logged curve: one point per metrics line, in step order. acc is NAN where not logged. */
typedef struct {
    int n, cap;
    double *step, *flops, *loss, *acc;
} report_curve;

/* The memory chart's bars: the first three make up the training state; data is the dataset and
 * its batches (memory.json's "data"); other is the rest (buffers, scratch, evaluation and
 * checkpoint buffers). */
enum { BAR_PARAMS, BAR_GRADS, BAR_OPTIM, BAR_ACTS, BAR_DATA, BAR_OTHER, REPORT_NBARS };
extern const char *const REPORT_BAR_NAMES[REPORT_NBARS];

/* What sets one invocation's plan apart: a run whose trained invocations differ in any of these
 * is mixed, and is never reported as one setting. */
enum {
    INV_WORLD,
    INV_OWNERS,
    INV_COVERAGE,
    INV_CHUNKS,
    INV_MASK,
    INV_UNIT,
    INV_ASSIGN,
    INV_SCALE,
    INV_SCHEDULE, /* the schedule's length: --reschedule makes a run's learning rate a hybrid */
    INV_NFIELDS
};

/* One `sdp train` invocation on the run, from config.json's "invocations" (a run without them is
 * one invocation: its top-level options and "resolved" record). It trained steps (from, to]
 * (to == from: none logged). */
typedef struct {
    long from, to;
    int steps;                 /* its --steps */
    int schedule;              /* its schedule's length; 0 where the record does not say */
    int world, owners, chunks; /* 0 where a run without the record does not say */
    double coverage;           /* NAN where unknown */
    char mask[OPT_STR_MAX], unit[OPT_STR_MAX], assign[OPT_STR_MAX], scale[OPT_STR_MAX];
} report_invocation;

typedef struct {
    char dir[OPT_STR_MAX]; /* without trailing slashes */
    /* The options as config.json records them: those of the latest invocation. */
    train_opts o;
    /* config.json's record of k and the plan (absent in older runs); with "invocations", the
     * latest one's. */
    run_resolved resolved;
    int world;  /* workers: the invocations', else memory.json's, else the record's; 0 if unknown */
    long steps; /* actually trained: the last training step in metrics.jsonl */
    int ninv;
    report_invocation *inv; /* in order */
    bool has_invocations;   /* config.json lists them */
    /* Which fields differ between the invocations (a mixed run has any set). */
    bool changed[INV_NFIELDS];
    double train_loss, val_loss, val_acc, flops, tok_s, elapsed;
    double state_bytes, total_bytes, peak_rss, sent;
    double bars[REPORT_NBARS]; /* bytes of the worker with the largest total */
    report_curve train, val;
} report_run;

/* Reads DIR's config.json, metrics.jsonl and (when present) memory.json; fails with one line
 * naming the directory and the missing file, or config.json and the damaged key. */
void report_run_load(report_run *r, const char *dir);
void report_run_free(report_run *r);
/* k, the owners of each unit (N under data parallelism), and the coverage k/N, as the run
 * recorded them; 0 and NAN when N is unknown. */
int report_run_owners(const report_run *r);
double report_run_coverage(const report_run *r);
/* The run directory's last component, which names the run in tables and legends. */
const char *report_run_name(const report_run *r);

/* Whether the run's invocations trained different plans (see INV_*). */
bool report_run_mixed(const report_run *r);
/* Names a field in messages: "world size", "sdp-mask"... */
const char *report_field_name(int field);
/* A field's value as the run trained it, or its values in order joined by "→" where they
 * changed ("4→2"); the mask reads "DDP" for none. Writes into buf and returns it. */
const char *report_run_field(char *buf, size_t n, const report_run *r, int field);
/* A mixed run's history, for messages: "sdp-mask forward for steps 0-30, then backward for
 * 30-60" (malloc'd, not escaped). */
char *report_run_history(const report_run *r);

void report_curve_push(report_curve *c, double step, double flops, double loss, double acc);
void report_curve_free(report_curve *c);

#endif
