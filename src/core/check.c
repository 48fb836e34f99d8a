#include "sdp/check.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef SDP_FUZZ
jmp_buf *sdp_fuzz_on_error;
#endif

/* Rank of this process, or -1 when MPI is not running (a plain single-process run). */
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

void sdp_fatal(const char *fmt, ...) {
    int world = 1;
    int rank = mpi_rank_if_running(&world);
    char raw[1024], msg[4 * sizeof raw];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    sdp_escape(msg, sizeof msg, raw);
#ifdef SDP_FUZZ
    /* Fuzzing builds only (fuzz/harness.h): a clean error is the right answer to bad bytes, not a
     * crash, so the harness takes it back instead of the process ending. The message is built
     * above, so its formatting is fuzzed too. */
    if (sdp_fuzz_on_error) longjmp(*sdp_fuzz_on_error, 1);
#endif
    /* Errors every rank detects alike (a bad option) would print N times: other ranks give rank
     * 0 a moment to print and abort the job first. */
    if (world > 1 && rank > 0) usleep(300000);
    if (world > 1)
        fprintf(stderr, "sdp: error (rank %d of %d): %s\n", rank, world, msg);
    else
        fprintf(stderr, "sdp: error: %s\n", msg);
    fflush(stderr);
    fflush(stdout);
    if (rank >= 0 && world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
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

int sdp_open_input(const char *path, const char *what, size_t *size) {
    /* O_NONBLOCK only so that opening a FIFO returns at once; reads of a regular file ignore it,
     * but it is cleared anyway so the descriptor behaves as an ordinary one. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        sdp_fatal("%s '%s' does not exist (%s): check the path", what, path, strerror(errno));
    SDP_CHECK(fd >= 0, "cannot open %s '%s' (%s): check its permissions", what, path,
              strerror(errno));
    struct stat st;
    SDP_CHECK(fstat(fd, &st) == 0, "cannot read %s '%s' (%s)", what, path, strerror(errno));
    SDP_CHECK(S_ISREG(st.st_mode),
              "%s '%s' is not a regular file (it is %s): give the path of a file", what, path,
              file_kind(st.st_mode));
    int flags = fcntl(fd, F_GETFL);
    SDP_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0,
              "cannot read %s '%s' (%s)", what, path, strerror(errno));
    if (size) *size = (size_t)st.st_size;
    return fd;
}

FILE *sdp_fopen_input(const char *path, const char *what, size_t *size) {
    FILE *f = fdopen(sdp_open_input(path, what, size), "rb");
    SDP_CHECK(f, "cannot read %s '%s' (%s)", what, path, strerror(errno));
    return f;
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
