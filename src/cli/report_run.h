/* One run directory as `sdp report` sees it: its configuration, its final figures, its loss
 * curves and the largest worker's memory. */
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

typedef struct {
    char dir[OPT_STR_MAX]; /* without trailing slashes */
    train_opts o;
    run_resolved resolved; /* config.json's record of k and the plan; absent in older runs */
    int world;             /* workers, from memory.json (else the record); 0 when neither knows */
    long steps;
    double train_loss, val_loss, val_acc, flops, tok_s, elapsed;
    double state_bytes, total_bytes, peak_rss, sent;
    double bars[REPORT_NBARS]; /* bytes of the worker with the largest total */
    report_curve train, val;
} report_run;

/* Reads DIR's config.json, metrics.jsonl and (when present) memory.json; fails with one line
 * naming the directory and the missing file. */
void report_run_load(report_run *r, const char *dir);
void report_run_free(report_run *r);
/* k, the owners of each unit (N under data parallelism), and the coverage k/N, as the run
 * recorded them; 0 and NAN when N is unknown. */
int report_run_owners(const report_run *r);
double report_run_coverage(const report_run *r);
/* The run directory's last component, which names the run in tables and legends. */
const char *report_run_name(const report_run *r);

void report_curve_push(report_curve *c, double step, double flops, double loss, double acc);
void report_curve_free(report_curve *c);

#endif
