/* Errors: every failure is one line naming the problem and the fix, then a non-zero exit.
 * Under MPI the process calls MPI_Abort so that no other rank is left waiting. Messages quote
 * names and values read from files, so sdp_fatal escapes control characters (sdp_escape): a
 * hostile file can neither forge a second line nor send the terminal escape sequences. */
#ifndef SDP_CHECK_H
#define SDP_CHECK_H

#include <stddef.h>
#include <stdio.h>

#ifdef SDP_FUZZ
#include <setjmp.h>
/* Fuzzing builds only: when set, sdp_fatal prints nothing and jumps here instead of exiting. */
extern jmp_buf *sdp_fuzz_on_error;
#endif

_Noreturn void sdp_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Use for user-facing conditions: the message must say what is wrong and what to do. */
#define SDP_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) sdp_fatal(__VA_ARGS__);                                                       \
    } while (0)

/* Use for internal invariants: a failure here is a bug in sdp, reported with its location. */
#define SDP_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) sdp_fatal("internal error at %s:%d: %s", __FILE__, __LINE__, #cond);          \
    } while (0)

/* fopen that fails with a clear message; a read mode ("r...") opens only a regular file, as
 * sdp_open_input does. */
FILE *sdp_fopen(const char *path, const char *mode);

/* Opens a file to read and returns its descriptor, failing with one line unless it is a regular
 * file. The open itself does not block: a FIFO named as input would otherwise hold every rank
 * until a writer appears. `what` names the file's role in messages ("text file"); *size, when
 * not NULL, gets the file's size. */
int sdp_open_input(const char *path, const char *what, size_t *size);
/* sdp_open_input as a stdio stream. */
FILE *sdp_fopen_input(const char *path, const char *what, size_t *size);

/* Copies s into out (at most n bytes with the terminating NUL, n >= 1) with each control
 * character, and each byte that is not part of valid UTF-8, written as an escape (\n, \x1b),
 * and returns out. Printable UTF-8 is kept as is. Use it for any text read from a file that is
 * printed other than through sdp_fatal, which applies it to whole messages. */
const char *sdp_escape(char *out, size_t n, const char *s);

#endif
