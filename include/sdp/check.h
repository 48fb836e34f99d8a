/* Errors: every failure is one line naming the problem and the fix, then a non-zero exit, and one
 * line per job, not per rank. Two kinds:
 * - sdp_fatal / SDP_CHECK: a fault that a rank may see alone (its own file, its own memory). Under
 *   MPI the process prints its line, tagged with its rank, and calls MPI_Abort so that no other
 *   rank is left waiting.
 * - sdp_fatal_all / SDP_CHECK_ALL: an error that every rank detects alike, at the same point
 *   (options, the SDP plan, which every rank derives from the same options). Rank 0 alone prints
 *   it; every rank then calls MPI_Finalize and exits 1, which ends the job without MPI_Abort.
 * Before MPI_Init every rank reads the same command line and files, so both behave as
 * sdp_fatal_all: only the process its launcher numbered 0 prints (see sdp_fatal in check.c).
 * Messages quote names and values read from files, so both escape control characters
 * (sdp_escape): a hostile file can neither forge a second line nor send the terminal escape
 * sequences. */
#ifndef SDP_CHECK_H
#define SDP_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef SDP_FUZZ
#include <setjmp.h>
/* Fuzzing builds only: when set, sdp_fatal prints nothing and jumps here instead of exiting. */
extern jmp_buf *sdp_fuzz_on_error;
#endif

_Noreturn void sdp_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Every rank must call it, with the same message: see above. Should a rank fail to arrive within
 * 30 s (it did not see the error, which is a bug), the ranks that did fall back to MPI_Abort. */
_Noreturn void sdp_fatal_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Use for user-facing conditions: the message must say what is wrong and what to do. */
#define SDP_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) sdp_fatal(__VA_ARGS__);                                                       \
    } while (0)
/* SDP_CHECK for a condition that every rank evaluates alike (see sdp_fatal_all). */
#define SDP_CHECK_ALL(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) sdp_fatal_all(__VA_ARGS__);                                                   \
    } while (0)

/* Readies sdp_fatal_all once MPI is initialised (sdp_world_init calls it; collective). */
void sdp_fatal_all_init(void);
/* Whether this process speaks for the job: MPI rank 0, or before MPI_Init the process its
 * launcher numbered 0, or a process started without a launcher. Warnings print on it alone. */
bool sdp_is_lead(void);
/* A one-line warning ("sdp: warning: ..."), printed by the lead process alone. */
void sdp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Use for internal invariants: a failure here is a bug in sdp, reported with its location. */
#define SDP_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) sdp_fatal("internal error at %s:%d: %s", __FILE__, __LINE__, #cond);          \
    } while (0)

/* malloc, calloc, realloc and strdup that fail with one line naming what the bytes were for
 * (`what`, as in "the SDP plan's groups"). They are for host bookkeeping, which the memory
 * accounting leaves out: indices, plans, names, a report's tables. Buffers that grow with the
 * model, batch or data come from sdp_alloc (sdp/mem.h) instead, which counts them by category. */
void *sdp_xmalloc(size_t bytes, const char *what);
void *sdp_xcalloc(size_t n, size_t size, const char *what);
void *sdp_xrealloc(void *p, size_t bytes, const char *what);
char *sdp_xstrdup(const char *s, const char *what);

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
/* The same for a file that every rank of the job reads alike (the training data): its errors end
 * the job as sdp_fatal_all does, with one line and without MPI_Abort. */
int sdp_open_input_all(const char *path, const char *what, size_t *size);
FILE *sdp_fopen_input_all(const char *path, const char *what, size_t *size);

/* Copies s into out (at most n bytes with the terminating NUL, n >= 1) with each control
 * character, and each byte that is not part of valid UTF-8, written as an escape (\n, \x1b),
 * and returns out. Printable UTF-8 is kept as is. Use it for any text read from a file that is
 * printed other than through sdp_fatal, which applies it to whole messages. */
const char *sdp_escape(char *out, size_t n, const char *s);

#endif
