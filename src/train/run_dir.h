/* A run directory belongs to one run: rank 0 holds a lock on it for the whole run, and a new run
 * does not silently mix its files with an earlier run's. */
#ifndef SDP_TRAIN_RUN_DIR_H
#define SDP_TRAIN_RUN_DIR_H

#include <stdbool.h>

/* mkdir -p; `what` names the directory in the error ("run directory", "plots directory"). */
void train_run_make_dir(const char *dir, const char *what);

/* Creates dir if needed and takes its lock (a flock on dir/.lock, which records the holder), or
 * fails naming the run that holds it. A new run (resuming false) refuses a directory that holds
 * an earlier run's files unless overwrite, which deletes those files first. Returns the lock's
 * file descriptor: keep it open for the whole run (the lock ends with the process). */
int train_run_dir_claim(const char *dir, bool resuming, bool overwrite);

/* Before rank 0 writes into dir again (a checkpoint, memory.json): fails with one line when dir's
 * .lock is no longer the file lock_fd holds, because the directory was deleted or moved, and
 * perhaps claimed by another run, while this one trained. A flock on a deleted file guards
 * nothing, and the files would land among another run's. */
void train_run_dir_check_held(const char *dir, int lock_fd);

/* Before a resume reads anything: fails naming the holder when a live run holds dir's lock (it
 * only tests the lock, so that every rank may ask at once). */
void train_run_dir_check_free(const char *dir);
/* Fails with one line when dir holds no checkpoint to resume from (a run stopped before its first
 * save). */
void train_run_dir_check_saved(const char *dir);

#endif
