/* Ending a job whose ranks wait forever. A rank that is stopped, or a host or link that goes
 * down without closing its connections, leaves every other rank blocked in a collective that
 * never completes; the launcher may never notice (a stopped process is alive, and a dead link is
 * only found by keepalive probes, if they are configured). Each rank therefore runs a watchdog:
 * the training loop beats at every micro-batch, validation batch and checkpoint window, and a
 * rank that has not beaten for the limit prints one line and ends the job with MPI_Abort. */
#ifndef SDP_WATCHDOG_H
#define SDP_WATCHDOG_H

typedef struct sdp_watchdog sdp_watchdog;

/* Starts the watchdog thread of this rank, not yet watching. limit_s > 0 is a fixed limit in
 * seconds; limit_s == 0 the automatic one: 10 times the longest gap between beats since
 * sdp_watchdog_begin, and at least SDP_WATCHDOG_MIN_S. limit_s < 0: no watchdog (returns NULL;
 * every function takes NULL). */
#define SDP_WATCHDOG_MIN_S 60.0
sdp_watchdog *sdp_watchdog_start(double limit_s, int rank);
/* The training loop starts: gaps count from here (setting up, which loads data and may take
 * long, does not), and a fixed limit watches from here. */
void sdp_watchdog_begin(sdp_watchdog *w);
/* Progress: the rank is not stuck. */
void sdp_watchdog_beat(sdp_watchdog *w);
/* The automatic limit watches from here: call it after the first step, whose gaps (the slowest,
 * with their first-time costs) the limit then covers ten times over. */
void sdp_watchdog_arm(sdp_watchdog *w);
/* Stops the thread and frees the watchdog. */
void sdp_watchdog_stop(sdp_watchdog *w);

#endif
