#include "sdp/check.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
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
    FILE *f = fopen(path, mode);
    SDP_CHECK(f, "cannot open '%s' (%s): check the path and permissions", path, strerror(errno));
    return f;
}
