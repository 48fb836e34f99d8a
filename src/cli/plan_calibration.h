/* The machine speeds that sdp plan's step-time model measures, measured once and kept in a file,
 * so that the same command prints the same figures every time. Today that is the sgemm peak (the
 * compute rate one worker reaches) at a given thread count, per host.
 *
 * The file, JSON, is written atomically (src/io/atomic_file.c):
 *   {"format": "sdp-calibration", "version": 1,
 *    "machines": [{"host": "node1", "threads": 2, "gemm": "dnnl", "sgemm_size": 2048,
 *                  "sgemm_gflops": 48.1, "measured": "2026-11-26T10:31:02Z"}, ...]}
 * Its place: --calibration FILE, else $SDP_CALIBRATION, else $XDG_CACHE_HOME/sdp/calibration.json,
 * else ~/.cache/sdp/calibration.json. */
#ifndef SDP_CLI_PLAN_CALIBRATION_H
#define SDP_CLI_PLAN_CALIBRATION_H

#include <stdbool.h>
#include <stddef.h>

enum { CALIBRATION_PATH_MAX = 4096 };

typedef struct {
    char path[CALIBRATION_PATH_MAX]; /* the file it was read from, or written to */
    char host[256];
    char measured[32]; /* when, in UTC: "2026-11-26T10:31:02Z" */
    int threads;
    double sgemm_gflops;
    int timed_steps; /* sdp plan --measure-compute: the steps timed per worker (path empty) */
} plan_calibration;

/* The calibration file's path: `given` when not empty, else the environment's (above). Fails with
 * one line when no place is known (no HOME). */
void plan_calibration_path(char *out, size_t n, const char *given);

/* The stored entry of `host` at `threads` in the file at `path`: true, with c filled in, when the
 * file holds one; false when the file or the entry is missing. A damaged file fails with one line
 * that names it and says how to replace it. Measures nothing. */
bool plan_calibration_read(plan_calibration *c, const char *path, const char *host, int threads);

/* This host's sgemm peak at `threads` (the current OpenMP thread count): read from the file, or,
 * when the file lacks it or `recalibrate` is set, measured now and stored there. A damaged file
 * fails with one line that names it and says how to replace it. */
void plan_calibration_get(plan_calibration *c, const char *given, int threads, bool recalibrate);

#endif
