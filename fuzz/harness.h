/* What every fuzz target shares. Each target hands the fuzzer's bytes to the reader users run, as
 * a file, since the readers take paths. A clean error (sdp_fatal) is a correct answer to bad
 * bytes: the harness takes it back with longjmp (SDP_FUZZ builds only) and releases whatever the
 * reader held (ledger.c), so a target runs millions of inputs in one process. */
#ifndef SDP_FUZZ_HARNESS_H
#define SDP_FUZZ_HARNESS_H

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger.h"
#include "sdp/check.h"
#include "sdp/mem.h"

/* A directory of this process's own for the input files. */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/sdp-fuzz.%ld", (long)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

/* Writes bytes to DIR/name and returns the path (a static buffer per slot). */
static inline const char *fuzz_file(int slot, const char *name, const uint8_t *data, size_t n) {
    static char paths[4][256];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return paths[slot];
}

static inline void fuzz_remove(int slot_unused, const char *name) {
    (void)slot_unused;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

/* Runs read(ctx) with sdp_fatal taken back; returns 0 when it returned, 1 when it failed. What a
 * failed reader held is released (ledger.c); what an accepted one still holds is a leak, which
 * LeakSanitizer reports. */
static inline int fuzz_run(void (*read)(void *ctx), void *ctx) {
    jmp_buf here;
    sdp_fuzz_on_error = &here;
    int failed = 0;
    fuzz_ledger_start();
    if (setjmp(here) == 0) {
        read(ctx);
        fuzz_ledger_accept();
    } else {
        fuzz_ledger_release();
        failed = 1;
    }
    sdp_fuzz_on_error = NULL;
    return failed;
}

#endif
