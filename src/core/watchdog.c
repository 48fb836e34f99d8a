#include "sdp/watchdog.h"

#include "sdp/check.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Times are microseconds of the monotonic clock, kept in atomics: the training thread writes
 * them while the watchdog thread reads them. The thread waits on a condition variable rather
 * than sleeping, so that stopping it wakes it at once: every process would otherwise end up to
 * one tick late. */
struct sdp_watchdog {
    pthread_t thread;
    double fixed_s; /* > 0: the fixed limit; 0: automatic */
    int rank;
    atomic_llong last_us;    /* the last beat */
    atomic_llong longest_us; /* the longest gap between two beats so far */
    atomic_bool measuring, armed;
    pthread_mutex_t lock; /* guards stopping, which wake announces */
    pthread_cond_t wake;
    bool stopping;
};

enum { WATCHDOG_TICK_US = 200 * 1000 };

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double limit_s(const sdp_watchdog *w) {
    if (w->fixed_s > 0) return w->fixed_s;
    const double auto_s = 10.0 * 1e-6 * (double)atomic_load(&w->longest_us);
    return auto_s > SDP_WATCHDOG_MIN_S ? auto_s : SDP_WATCHDOG_MIN_S;
}

/* The rank is stuck: say so and end the job. MPI_Abort reaches the launcher, which ends every
 * rank; should it block (its own connection may be what is down), SIGALRM's default action ends
 * this process a few seconds later, which the launcher sees too. */
static _Noreturn void end_job(const sdp_watchdog *w, double waited_s) {
    fprintf(stderr,
            "sdp: rank %d made no progress for %.0f s (--stall-timeout %s%.0f s): another rank "
            "is stopped or dead, or its host or link is down; ending the job\n",
            w->rank, waited_s, w->fixed_s > 0 ? "" : "auto, ", limit_s(w));
    fflush(stderr);
    alarm(5);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* A tick this late means this process itself was frozen (SIGSTOP, a suspended host) with its
 * training thread: the silence is its own, not another rank's. */
enum { WATCHDOG_FROZEN_US = 5 * WATCHDOG_TICK_US };

static void *watch(void *arg) {
    sdp_watchdog *w = arg;
    pthread_mutex_lock(&w->lock);
    long long tick_us = now_us();
    while (!w->stopping) {
        const long long until_us = now_us() + WATCHDOG_TICK_US;
        const struct timespec until = {until_us / 1000000, (until_us % 1000000) * 1000};
        pthread_cond_timedwait(&w->wake, &w->lock, &until); /* early on a spurious wake: harmless */
        const long long now = now_us(), late = now - tick_us;
        tick_us = now;
        if (w->stopping || !atomic_load(&w->armed)) continue;
        /* Woken from a freeze: the others, if they waited, have ended the job already; if not, the
         * training thread gets a whole window again rather than blame "another rank". */
        if (late > WATCHDOG_FROZEN_US) {
            atomic_store(&w->last_us, now);
            continue;
        }
        const double waited = 1e-6 * (double)(now - atomic_load(&w->last_us));
        if (waited > limit_s(w)) end_job(w, waited);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

sdp_watchdog *sdp_watchdog_start(double limit_s, int rank) {
    if (limit_s < 0) return NULL;
    sdp_watchdog *w = sdp_xcalloc(1, sizeof *w, "the watchdog");
    w->fixed_s = limit_s;
    w->rank = rank;
    atomic_store(&w->last_us, now_us());
    pthread_condattr_t attr;
    SDP_CHECK(pthread_condattr_init(&attr) == 0 &&
                  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                  pthread_cond_init(&w->wake, &attr) == 0 &&
                  pthread_mutex_init(&w->lock, NULL) == 0,
              "cannot set up the watchdog's clock: pass --stall-timeout -1 to run without it");
    pthread_condattr_destroy(&attr);
    SDP_CHECK(pthread_create(&w->thread, NULL, watch, w) == 0,
              "cannot start the watchdog thread: pass --stall-timeout -1 to run without it");
    return w;
}

void sdp_watchdog_begin(sdp_watchdog *w) {
    if (!w) return;
    atomic_store(&w->last_us, now_us());
    atomic_store(&w->measuring, true);
    if (w->fixed_s > 0) atomic_store(&w->armed, true);
}

void sdp_watchdog_beat(sdp_watchdog *w) {
    if (!w) return;
    const long long now = now_us(), gap = now - atomic_load(&w->last_us);
    if (atomic_load(&w->measuring) && gap > atomic_load(&w->longest_us))
        atomic_store(&w->longest_us, gap);
    atomic_store(&w->last_us, now);
}

void sdp_watchdog_arm(sdp_watchdog *w) {
    if (!w) return;
    sdp_watchdog_beat(w);
    atomic_store(&w->armed, true);
}

void sdp_watchdog_stop(sdp_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
