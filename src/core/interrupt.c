#include "sdp/interrupt.h"

#include "sdp/check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Signals are taken by one thread of ours, waiting in sigwait, and never delivered to the threads
 * that compute or communicate: a handler that interrupts them at any instruction was measured to
 * corrupt the heap of a run stopped mid-step about one time in three on the machines this was
 * written on, and interrupted system calls in MPI's threads would fail with EINTR. This file
 * keeps the one piece of mutable global state sdp has of its own: what the waiting thread saw,
 * and the temporary file a second signal must remove. */
static atomic_int received;
static atomic_bool lead; /* this process speaks for the job (sdp_is_lead, asked at install) */
static char temp_path[4096];
static atomic_int temp_set;

static void block_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

void sdp_interrupt_defer(void) {
    sigset_t set;
    block_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* A second signal: stop now, removing the temporary file being written. */
static _Noreturn void stop_now(int sig) {
    if (atomic_load(&temp_set)) unlink(temp_path);
    static const char msg[] = "sdp: second signal: stopping now, without a new checkpoint\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + sig);
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One stop often arrives as two signals at once: Ctrl-C reaches every process of the terminal's
 * group while mpirun passes its own SIGTERM on, and `timeout` signals both the child and its
 * group. So only a signal more than DEBOUNCE_S after the first counts as a second one. */
#define DEBOUNCE_S 1.0

static void *wait_for_signals(void *arg) {
    (void)arg;
    sigset_t set;
    block_set(&set);
    double first = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        int none = 0;
        if (atomic_compare_exchange_strong(&received, &none, sig)) {
            first = seconds_now();
            /* A step can be long: say at once that the signal was taken. */
            if (atomic_load(&lead))
                fprintf(stderr,
                        "sdp: %s: stopping when this step ends (a second signal stops at once, "
                        "without a checkpoint)\n",
                        sdp_interrupt_name(sig));
        } else if (seconds_now() - first > DEBOUNCE_S)
            stop_now(sig);
    }
    return NULL;
}

void sdp_interrupt_install(void) {
    sdp_interrupt_defer(); /* in case the caller did not */
    atomic_store(&lead, sdp_is_lead());
    pthread_t th;
    if (pthread_create(&th, NULL, wait_for_signals, NULL) == 0) pthread_detach(th);
}

int sdp_interrupt_signal(void) {
    return atomic_load(&received);
}

void sdp_interrupt_temp_file(const char *path) {
    atomic_store(&temp_set, 0); /* the waiting thread must never see a half-written name */
    if (!path) return;
    snprintf(temp_path, sizeof temp_path, "%s", path);
    atomic_store(&temp_set, 1);
}

const char *sdp_interrupt_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
