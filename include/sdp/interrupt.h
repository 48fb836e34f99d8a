/* Stopping a run cleanly on SIGINT or SIGTERM. The first signal only sets a flag: the trainer
 * finishes its step, writes a checkpoint and exits with 128 + the signal. A second signal exits
 * at once, first removing the temporary file being written, if any, so that none outlives the
 * run. */
#ifndef SDP_INTERRUPT_H
#define SDP_INTERRUPT_H

/* Blocks SIGINT and SIGTERM in this thread and in every thread it starts from now on. Call it
 * first thing, before MPI_Init and any computation starts threads: the signals must reach no
 * thread but the one sdp_interrupt_install starts. */
void sdp_interrupt_defer(void);
/* Starts the thread that takes SIGINT and SIGTERM (sigwait): the first sets the flag below, a
 * second one more than a second later exits at once (closer ones are the same stop, delivered
 * twice). A signal that arrived since sdp_interrupt_defer is taken then. */
void sdp_interrupt_install(void);
/* The first signal received since install, or 0. */
int sdp_interrupt_signal(void);
/* The temporary file being written now (removed by a second signal), or NULL when none. The
 * string is copied. */
void sdp_interrupt_temp_file(const char *path);
/* "SIGINT", "SIGTERM", or "a signal". */
const char *sdp_interrupt_name(int sig);

#endif
