/* What a reader holds while a fuzz target runs it, so that a rejected input (sdp_fatal, taken back
 * with longjmp) leaks nothing and a target runs millions of inputs in one process. The targets
 * link with -Wl,--wrap=<name> for each function below (fuzz/fuzz.cmake), so the library's own
 * calls land here; __real_<name> is the function itself. Only calls made between
 * fuzz_ledger_start and the end of the input are recorded. */
#include "ledger.h"

#include "sdp/mem.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__real_sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes);
void __real_sdp_free(sdp_mem *m, void *p);
int __real_open(const char *path, int flags, ...);
int __real_close(int fd);
FILE *__real_fopen(const char *path, const char *mode);
FILE *__real_fdopen(int fd, const char *mode);
int __real_fclose(FILE *f);
gzFile __real_gzopen(const char *path, const char *mode);
int __real_gzclose(gzFile f);
int __real_gzbuffer(gzFile f, unsigned size);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
int __real_glob(const char *pattern, int flags, int (*err)(const char *, int), glob_t *g);
void __real_globfree(glob_t *g);
cJSON *__real_cJSON_Parse(const char *s);
cJSON *__real_cJSON_ParseWithLengthOpts(const char *s, size_t len, const char **end,
                                        cJSON_bool null_terminated);
void __real_cJSON_Delete(cJSON *item);

/* ---- the ledger --------------------------------------------------------------------------- */

/* Released in this order: a stream before the descriptor it owns, trees before heap blocks. */
typedef enum {
    HELD_CJSON,
    HELD_GLOB,
    HELD_FILE,
    HELD_GZ,
    HELD_FD,
    HELD_MAP,
    HELD_HEAP,
    HELD_SDP,
    HELD_KINDS
} held_kind;

typedef struct {
    held_kind kind;
    void *p;  /* the resource; a descriptor is stored as fd + 1 so that 0 means none */
    size_t n; /* a mapping's length; a glob's slot in globs[] */
} held;

enum { MAX_HELD = 1 << 16, MAX_GLOBS = 16 };
static held ledger[MAX_HELD];
static int nheld, nused; /* entries held; slots written since the last clear */
static bool recording;
/* glob() fills the caller's struct, which is gone after a jump: a copy frees the same lists. */
static struct { glob_t *user, copy; } globs[MAX_GLOBS];

static void hold(held_kind kind, void *p, size_t n) {
    if (!recording || !p) return;
    if (nheld == MAX_HELD) {
        fprintf(stderr, "fuzz harness: a reader holds more than %d resources at once\n", MAX_HELD);
        abort();
    }
    ledger[nheld++] = (held){kind, p, n};
    if (nheld > nused) nused = nheld;
}

/* The ledger is a global, which LeakSanitizer scans for pointers: a block it still names would
 * never be reported as leaked. */
static void clear_ledger(void) {
    memset(ledger, 0, (size_t)nused * sizeof *ledger);
    memset(globs, 0, sizeof globs);
    nheld = nused = 0;
}

/* Forgets p; returns the slot it had (n), or -1 when it was not recorded. */
static long drop(held_kind kind, const void *p) {
    if (!recording || !p) return -1;
    for (int i = nheld - 1; i >= 0; i--) {
        if (ledger[i].kind != kind || ledger[i].p != p) continue;
        long n = (long)ledger[i].n;
        ledger[i] = ledger[--nheld];
        return n;
    }
    return -1;
}

static void *fd_key(int fd) {
    return (void *)(intptr_t)(fd + 1);
}

/* A block is freed through an sdp_mem that can never run short: the reader's is gone after the
 * jump. */
static void free_sdp_block(void *p) {
    static sdp_mem sink;
    for (int c = 0; c < SDP_MEM_NCAT; c++) sink.cur[c] = SIZE_MAX / 2;
    sink.total_cur = SIZE_MAX / 2;
    sink.nallocs = SIZE_MAX / 2;
    __real_sdp_free(&sink, p);
}

static void release(const held *h) {
    switch (h->kind) {
    case HELD_CJSON:
        __real_cJSON_Delete(h->p);
        break;
    case HELD_GLOB:
        __real_globfree(&globs[h->n].copy);
        break;
    case HELD_FILE:
        __real_fclose(h->p);
        break;
    case HELD_GZ:
        __real_gzclose(h->p);
        break;
    case HELD_FD:
        __real_close((int)((intptr_t)h->p - 1));
        break;
    case HELD_MAP:
        __real_munmap(h->p, h->n);
        break;
    case HELD_HEAP:
        __real_free(h->p);
        break;
    case HELD_SDP:
        free_sdp_block(h->p);
        break;
    case HELD_KINDS:
        break;
    }
}

static void release_all(void) {
    recording = false;
    for (int k = 0; k < HELD_KINDS; k++)
        for (int i = 0; i < nheld; i++)
            if (ledger[i].kind == (held_kind)k) release(&ledger[i]);
    clear_ledger();
}

/* ---- the wrapped functions ---------------------------------------------------------------- */

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    hold(HELD_HEAP, p, 0);
    return p;
}

void *__wrap_calloc(size_t n, size_t size) {
    void *p = __real_calloc(n, size);
    hold(HELD_HEAP, p, 0);
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    void *q = __real_realloc(p, n);
    if (q || n == 0) drop(HELD_HEAP, p);
    hold(HELD_HEAP, q, 0);
    return q;
}

void __wrap_free(void *p) {
    drop(HELD_HEAP, p);
    __real_free(p);
}

void *__wrap_sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    void *p = __real_sdp_alloc(m, cat, bytes);
    hold(HELD_SDP, p, 0);
    return p;
}

void __wrap_sdp_free(sdp_mem *m, void *p) {
    drop(HELD_SDP, p);
    __real_sdp_free(m, p);
}

int __wrap_open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    int fd = __real_open(path, flags, mode);
    if (fd >= 0) hold(HELD_FD, fd_key(fd), 0);
    return fd;
}

int __wrap_close(int fd) {
    drop(HELD_FD, fd_key(fd));
    return __real_close(fd);
}

FILE *__wrap_fopen(const char *path, const char *mode) {
    FILE *f = __real_fopen(path, mode);
    hold(HELD_FILE, f, 0);
    return f;
}

/* The stream takes over the descriptor: fclose closes it. */
FILE *__wrap_fdopen(int fd, const char *mode) {
    FILE *f = __real_fdopen(fd, mode);
    if (f) drop(HELD_FD, fd_key(fd));
    hold(HELD_FILE, f, 0);
    return f;
}

int __wrap_fclose(FILE *f) {
    drop(HELD_FILE, f);
    return __real_fclose(f);
}

gzFile __wrap_gzopen(const char *path, const char *mode) {
    gzFile f = __real_gzopen(path, mode);
    hold(HELD_GZ, f, 0);
    return f;
}

/* zlib allocates three times this size per stream, and ASan maps and unmaps every block above
 * 128 KiB with a TLB flush each: at the 128 KiB the IDX reader asks for, that was most of an
 * execution. The stream reads the same bytes through a smaller buffer, only in more refills. */
int __wrap_gzbuffer(gzFile f, unsigned size) {
    return __real_gzbuffer(f, size < 8192 ? size : 8192);
}

int __wrap_gzclose(gzFile f) {
    drop(HELD_GZ, f);
    return __real_gzclose(f);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = __real_mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED) hold(HELD_MAP, p, len);
    return p;
}

int __wrap_munmap(void *addr, size_t len) {
    drop(HELD_MAP, addr);
    return __real_munmap(addr, len);
}

int __wrap_glob(const char *pattern, int flags, int (*err)(const char *, int), glob_t *g) {
    int rc = __real_glob(pattern, flags, err, g);
    if (rc != 0 || !recording) return rc;
    for (size_t i = 0; i < MAX_GLOBS; i++) {
        if (globs[i].user) continue;
        globs[i].user = g;
        globs[i].copy = *g;
        hold(HELD_GLOB, g, i);
        return rc;
    }
    fprintf(stderr, "fuzz harness: a reader holds more than %d globs at once\n", MAX_GLOBS);
    abort();
}

void __wrap_globfree(glob_t *g) {
    long slot = drop(HELD_GLOB, g);
    if (slot >= 0) globs[slot].user = NULL;
    __real_globfree(g);
}

cJSON *__wrap_cJSON_Parse(const char *s) {
    cJSON *j = __real_cJSON_Parse(s);
    hold(HELD_CJSON, j, 0);
    return j;
}

cJSON *__wrap_cJSON_ParseWithLengthOpts(const char *s, size_t len, const char **end,
                                        cJSON_bool null_terminated) {
    cJSON *j = __real_cJSON_ParseWithLengthOpts(s, len, end, null_terminated);
    hold(HELD_CJSON, j, 0);
    return j;
}

void __wrap_cJSON_Delete(cJSON *item) {
    drop(HELD_CJSON, item);
    __real_cJSON_Delete(item);
}

/* ---- the input's end ------------------------------------------------------------------------ */

void fuzz_ledger_start(void) {
    clear_ledger();
    recording = true;
}

/* Accepted: whatever is still held is a leak, left for LeakSanitizer to report. */
void fuzz_ledger_accept(void) {
    recording = false;
    clear_ledger();
}

void fuzz_ledger_release(void) {
    release_all();
}
