/* What `sdp train` shows and writes (train_report.c): the run directory's files, the start-up
 * banner, progress and validation lines, metrics.jsonl, and the end-of-run summary. */
#ifndef SDP_CLI_TRAIN_REPORT_H
#define SDP_CLI_TRAIN_REPORT_H

#include "train/trainer.h"

/* On resume, open_metrics reads the log back: one that is not a regular file (a FIFO would
 * block) must fail before the run directory is claimed (rank 0). */
void check_metrics_log(const trainer *t);
void open_metrics(trainer *t);
void write_run_files(trainer *t);
void print_start(const trainer *t);
/* sum: the parts of the window's steps, summed (metrics.jsonl gets their means). */
void log_progress(trainer *t, double loss, double lr, double norm, double dt, int nsteps,
                  double elapsed, const trainer_step_result *sum);
void log_validation(trainer *t, sdp_metrics val, double elapsed);
void print_summary(trainer *t, sdp_metrics final_val, double wall);

#endif
