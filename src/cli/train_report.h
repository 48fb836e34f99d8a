/* What `sdp train` shows and writes (train_report.c): the run directory's files, the start-up
 * banner, progress and validation lines, metrics.jsonl, and the end-of-run summary. */
#ifndef SDP_CLI_TRAIN_REPORT_H
#define SDP_CLI_TRAIN_REPORT_H

#include "train/trainer.h"

/* On resume, open_metrics reads the log back: one that is not a regular file (a FIFO would
 * block) must fail before the run directory is claimed (rank 0). */
void check_metrics_log(const trainer *t);
/* Opens metrics.jsonl; returns the seconds earlier invocations logged (rank 0; else 0). */
double open_metrics(trainer *t);
/* config.json (the run's options and, on resume, one more invocation: argv's changes) and
 * plan.json. */
void write_run_files(trainer *t, int argc, char **argv);
void print_start(const trainer *t);
/* A progress window's time: its training steps alone (validation and checkpoints left out), the
 * invocation's wall-clock time so far, and one validation's measured cost (NAN before the
 * first), which the ETA adds for each validation still to come. */
typedef struct {
    double window_s, elapsed_s, val_s_each;
} progress_timing;
/* sum: the parts of the window's steps, summed (metrics.jsonl gets their means). */
void log_progress(trainer *t, double loss, double lr, double norm, int nsteps,
                  const progress_timing *pt, const trainer_step_result *sum);
void log_validation(trainer *t, sdp_metrics val, double elapsed);
/* Closes metrics.jsonl; a write the disk refused ends the run with one line (as when logging). */
void close_metrics(trainer *t);
/* Writes memory.json (collective), then, when `print`, the summary (rank 0). A run stopped by a
 * signal writes the record without the summary. */
void print_summary(trainer *t, sdp_metrics final_val, double wall, bool print);

#endif
