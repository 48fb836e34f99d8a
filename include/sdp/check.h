/* Errors: every failure is one line naming the problem and the fix, then a non-zero exit.
 * Under MPI the process calls MPI_Abort so that no other rank is left waiting. */
#ifndef SDP_CHECK_H
#define SDP_CHECK_H

#include <stdio.h>

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

/* fopen that fails with a clear message. */
FILE *sdp_fopen(const char *path, const char *mode);

#endif
