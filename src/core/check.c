#include "sdp/check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef SDP_FUZZ
jmp_buf *sdp_fuzz_on_error;
#endif

/* Rank of this process, or -1 when MPI is not running (a plain single-process run, or before
 * MPI_Init). */
static int mpi_rank_if_running(int *world) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized) return -1;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    return rank;
}

/* The rank this process's launcher gave it, known before MPI_Init: Open MPI's mpirun sets
 * OMPI_COMM_WORLD_RANK, PMIx launchers (srun --mpi=pmix) PMIX_RANK, PMI ones PMI_RANK. -1 when
 * no launcher started the process. */
static int launcher_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end = NULL;
        long r = strtol(v, &end, 10);
        if (*end == 0 && r >= 0 && r < INT_MAX) return (int)r;
    }
    return -1;
}

bool sdp_is_lead(void) {
    int world = 1;
    const int rank = mpi_rank_if_running(&world);
    return rank >= 0 ? rank == 0 : launcher_rank() <= 0;
}

static void format_message(char *msg, size_t n, const char *fmt, va_list ap) {
    char raw[1024];
    vsnprintf(raw, sizeof raw, fmt, ap);
    sdp_escape(msg, n, raw);
}

void sdp_warn(const char *fmt, ...) {
    if (!sdp_is_lead()) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sdp: warning: %s\n", msg);
    fflush(stderr);
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* How long a rank other than 0 waits for the launcher to end it, before MPI_Init (see
 * fail_before_mpi) and after (sdp_fatal). */
#define LAUNCHER_GRACE_S 10.0
#define ABORT_GRACE_S    3.0

/* An error before MPI_Init (or after MPI_Finalize), when no rank can abort the others. Every rank
 * of a job reads the same command line and files then, so every rank fails alike: the process
 * its launcher numbered 0 prints the line and exits 1, and the others print nothing and wait.
 * Open MPI's mpirun ends them as soon as rank 0 exits with a non-zero status (with SIGTERM, which
 * sdp train blocks until its signal thread starts: it is unblocked here). A rank still alive
 * after LAUNCHER_GRACE_S saw an error that rank 0 did not (a file missing on its host only, or
 * different options given to an MPMD launch), or runs under a launcher that does not end the
 * others (srun without --kill-on-bad-exit): it prints its own line, tagged with its rank. */
static _Noreturn void fail_before_mpi(const char *msg) {
    const int r = launcher_rank();
    if (r > 0) {
        fflush(stdout);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        const double until = seconds_now() + LAUNCHER_GRACE_S;
        while (seconds_now() < until) usleep(20000);
        fprintf(stderr, "sdp: error (rank %d): %s\n", r, msg);
    } else {
        fprintf(stderr, "sdp: error: %s\n", msg);
    }
    fflush(stderr);
    fflush(stdout);
    exit(1);
}

/* What both error paths do first, once the message is built: under fuzzing, hand the error back
 * to the harness (fuzz/harness.h: a clean error is the right answer to bad bytes, and the message
 * is built first so that its formatting is fuzzed too); before MPI_Init, fail_before_mpi; else
 * the rank, with the job's size in *world. */
static int fatal_rank(const char *msg, int *world) {
#ifdef SDP_FUZZ
    if (sdp_fuzz_on_error) longjmp(*sdp_fuzz_on_error, 1);
#endif
    const int rank = mpi_rank_if_running(world);
    if (rank < 0) fail_before_mpi(msg);
    return rank;
}

void sdp_fatal(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int world = 1;
    const int rank = fatal_rank(msg, &world);
    /* An error that every rank detects alike but that is not reported with sdp_fatal_all would
     * print N times, and ranks calling MPI_Abort together make mpirun print ORTE_ERROR_LOG lines:
     * other ranks give rank 0 time to print and abort the job first. The launcher then ends them
     * within ABORT_GRACE_S (SIGTERM, which sdp train's signal thread takes, then SIGKILL a second
     * later); a rank still alive saw a fault of its own and reports it. */
    if (world > 1 && rank > 0) {
        const double until = seconds_now() + ABORT_GRACE_S;
        while (seconds_now() < until) usleep(20000);
    }
    if (world > 1)
        fprintf(stderr, "sdp: error (rank %d of %d): %s\n", rank, world, msg);
    else
        fprintf(stderr, "sdp: error: %s\n", msg);
    fflush(stderr);
    fflush(stdout);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* sdp_fatal_all's own communicator, so that its barrier can never match a collective of the
 * computation (blocking and non-blocking collectives must not meet on one communicator). */
static MPI_Comm fatal_comm;
static bool fatal_comm_ready;

void sdp_fatal_all_init(void) {
    if (fatal_comm_ready) return;
    MPI_Comm_dup(MPI_COMM_WORLD, &fatal_comm);
    fatal_comm_ready = true;
}

/* How long sdp_fatal_all waits for every rank. The ranks reach an error they all detect alike
 * within the time some of them take longer to load their data; a rank that never comes did not
 * see the error, and MPI_Finalize would then wait for it for ever. */
#define ALL_RANKS_S 30.0

/* True once every rank has reached sdp_fatal_all; false after ALL_RANKS_S without that. */
static bool all_ranks_arrive(void) {
    MPI_Request req;
    if (MPI_Ibarrier(fatal_comm, &req) != MPI_SUCCESS) return false;
    const double until = seconds_now() + ALL_RANKS_S;
    for (;;) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
        if (done) return true;
        if (seconds_now() > until) return false;
        usleep(1000);
    }
}

void sdp_fatal_all(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int world = 1;
    const int rank = fatal_rank(msg, &world);
    if (world > 1 && !fatal_comm_ready) sdp_fatal("%s", msg); /* MPI started by another caller */
    if (rank == 0) {
        fprintf(stderr, "sdp: error: %s\n", msg);
        fflush(stderr);
    }
    fflush(stdout);
    /* No MPI_Abort: every rank leaves MPI as it would after a run, and the job's exit status is
     * non-zero. */
    if (world == 1 || all_ranks_arrive()) {
        MPI_Finalize();
        exit(1);
    }
    if (rank > 0) fprintf(stderr, "sdp: error (rank %d of %d): %s\n", rank, world, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* n * size bytes, which may overflow size_t (calloc). */
static _Noreturn void out_of_memory(size_t n, size_t size, const char *what) {
    if (size && n > SIZE_MAX / size)
        sdp_fatal("out of memory allocating %zu x %zu bytes for %s: close other programs", n, size,
                  what);
    sdp_fatal("out of memory allocating %zu bytes for %s: close other programs", n * size, what);
}

/* Each asks for one byte at least, so that a success is never NULL. */
void *sdp_xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes, 1, what);
    return p;
}

void *sdp_xcalloc(size_t n, size_t size, const char *what) {
    void *p = n && size ? calloc(n, size) : calloc(1, 1);
    if (!p) out_of_memory(n, size, what);
    return p;
}

void *sdp_xrealloc(void *p, size_t bytes, const char *what) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) out_of_memory(bytes, 1, what);
    return q;
}

char *sdp_xstrdup(const char *s, const char *what) {
    char *d = strdup(s);
    if (!d) out_of_memory(strlen(s) + 1, 1, what);
    return d;
}

FILE *sdp_fopen(const char *path, const char *mode) {
    if (mode[0] == 'r' && !strchr(mode, '+')) return sdp_fopen_input(path, "file", NULL);
    FILE *f = fopen(path, mode);
    SDP_CHECK(f, "cannot open '%s' (%s): check the path and permissions", path, strerror(errno));
    return f;
}

static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a named pipe";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "a special file";
}

/* sdp_fatal, or with `all` sdp_fatal_all, when cond is false. */
#define INPUT_CHECK(all, cond, ...)                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (all) sdp_fatal_all(__VA_ARGS__);                                                   \
            sdp_fatal(__VA_ARGS__);                                                                \
        }                                                                                          \
    } while (0)

static int open_input(const char *path, const char *what, size_t *size, bool all) {
    /* O_NONBLOCK only so that opening a FIFO returns at once; reads of a regular file ignore it,
     * but it is cleared anyway so the descriptor behaves as an ordinary one. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    const int err = errno;
    INPUT_CHECK(all, fd >= 0 || err != ENOENT, "%s '%s' does not exist (%s): check the path", what,
                path, strerror(err));
    INPUT_CHECK(all, fd >= 0, "cannot open %s '%s' (%s): check its permissions", what, path,
                strerror(err));
    struct stat st;
    INPUT_CHECK(all, fstat(fd, &st) == 0, "cannot read %s '%s' (%s)", what, path, strerror(errno));
    INPUT_CHECK(all, S_ISREG(st.st_mode),
                "%s '%s' is not a regular file (it is %s): give the path of a file", what, path,
                file_kind(st.st_mode));
    int flags = fcntl(fd, F_GETFL);
    INPUT_CHECK(all, flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0,
                "cannot read %s '%s' (%s)", what, path, strerror(errno));
    if (size) *size = (size_t)st.st_size;
    return fd;
}

static FILE *fopen_input(const char *path, const char *what, size_t *size, bool all) {
    FILE *f = fdopen(open_input(path, what, size, all), "rb");
    INPUT_CHECK(all, f, "cannot read %s '%s' (%s)", what, path, strerror(errno));
    return f;
}

int sdp_open_input(const char *path, const char *what, size_t *size) {
    return open_input(path, what, size, false);
}

FILE *sdp_fopen_input(const char *path, const char *what, size_t *size) {
    return fopen_input(path, what, size, false);
}

int sdp_open_input_all(const char *path, const char *what, size_t *size) {
    return open_input(path, what, size, true);
}

FILE *sdp_fopen_input_all(const char *path, const char *what, size_t *size) {
    return fopen_input(path, what, size, true);
}

/* Length of the printable UTF-8 character at p (1 to 4), or 0 when p starts a control
 * character (C0, DEL or C1) or a byte sequence that is not UTF-8 (overlong forms and surrogates
 * included), which the caller escapes byte by byte. */
static int printable_utf8(const unsigned char *p) {
    if (p[0] >= 0x20 && p[0] < 0x7f) return 1;
    if (p[0] < 0xc2 || p[0] > 0xf4) return 0;
    if (p[0] < 0xe0) return p[0] == 0xc2 && p[1] < 0xa0 ? 0 : (p[1] & 0xc0) == 0x80 ? 2 : 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (p[0] == 0xe0) lo = 0xa0;
    if (p[0] == 0xed) hi = 0x9f;
    if (p[0] == 0xf0) lo = 0x90;
    if (p[0] == 0xf4) hi = 0x8f;
    if (p[1] < lo || p[1] > hi) return 0;
    int len = p[0] < 0xf0 ? 3 : 4;
    for (int i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return len;
}

const char *sdp_escape(char *out, size_t n, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p) {
        char esc[8];
        int len = printable_utf8(p);
        if (len == 0) {
            const char *named = *p == '\n' ? "\\n" : *p == '\r' ? "\\r" : *p == '\t' ? "\\t" : NULL;
            if (named)
                snprintf(esc, sizeof esc, "%s", named);
            else
                snprintf(esc, sizeof esc, "\\x%02x", *p);
            len = 1;
        } else {
            memcpy(esc, p, (size_t)len);
            esc[len] = 0;
        }
        size_t elen = strlen(esc);
        if (o + elen >= n) break; /* truncate whole characters and escapes only */
        memcpy(out + o, esc, elen);
        o += elen;
        p += len;
    }
    out[o] = 0;
    return out;
}
