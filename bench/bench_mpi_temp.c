/* The memory MPI itself takes for the collectives sdp issues, which sdp's allocator cannot see:
 * each rank's peak RSS before and after one in-place MPI_Iallreduce (--zero 0), MPI_Ireduce_scatter
 * (--zero 1 and 2) and MPI_Allgatherv (their all-gather) of a bucket of the given size. Open MPI's
 * non-blocking collectives allocate temporaries of the bucket's size on some ranks: these are
 * the bytes by which a worker's peak RSS exceeds its accounted total (docs/performance.md).
 * One collective per run, so that none inherits another's peak.
 * Usage: mpiexec -n N bench_mpi_temp [MiB of the bucket, default 41.2: the 10.8M-parameter GPT]
 *                                    [allreduce|reduce_scatter|allgatherv] */
#include "sdp/check.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This process's peak resident set (VmHWM) in KiB. */
static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    SDP_CHECK(f, "bench_mpi_temp: cannot read /proc/self/status: it needs Linux");
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atol(line + 6);
    fclose(f);
    return kib;
}

typedef enum { ALLREDUCE, REDUCE_SCATTER, ALLGATHERV, NCOLLECTIVES } collective;

static const char *NAMES[NCOLLECTIVES] = {"MPI_Iallreduce", "MPI_Ireduce_scatter",
                                          "MPI_Allgatherv"};
static const char *KEYS[NCOLLECTIVES] = {"allreduce", "reduce_scatter", "allgatherv"};

/* Runs one collective in place over x[count], each rank's share count / n. */
static void run(collective c, float *x, int count, const int *counts, const int *displs) {
    MPI_Request req = MPI_REQUEST_NULL;
    if (c == ALLREDUCE)
        MPI_Iallreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    else if (c == REDUCE_SCATTER)
        MPI_Ireduce_scatter(MPI_IN_PLACE, x, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    else
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT,
                       MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const double mib = argc > 1 ? atof(argv[1]) : 41.2;
    const char *which = argc > 2 ? argv[2] : "allreduce";
    int c = 0;
    while (c < NCOLLECTIVES && strcmp(which, KEYS[c])) c++;
    SDP_CHECK(mib > 0 && mib < 4096 && c < NCOLLECTIVES,
              "usage: bench_mpi_temp [MiB of the bucket, in (0, 4096)] "
              "[allreduce|reduce_scatter|allgatherv]");
    const int count = (int)(mib * 1048576 / sizeof(float)) / n * n;
    float *x = sdp_xmalloc(sizeof(float) * (size_t)count, "the bucket");
    int *counts = sdp_xmalloc(sizeof(int) * (size_t)n, "the shards"),
        *displs = sdp_xmalloc(sizeof(int) * (size_t)n, "the shards");
    for (int j = 0; j < n; j++) counts[j] = count / n, displs[j] = j * (count / n);
    for (int i = 0; i < count; i++) x[i] = 1.0f; /* resident before the first measurement */
    MPI_Barrier(MPI_COMM_WORLD);
    const long before = peak_rss_kib();
    run((collective)c, x, count, counts, displs);
    const double grew = (double)(peak_rss_kib() - before) / 1024.0;
    double *all = rank == 0 ? sdp_xmalloc(sizeof(double) * (size_t)n, "the ranks' growth") : NULL;
    MPI_Gather(&grew, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s in place, %.1f MiB bucket, %d ranks: peak RSS growth per rank (MiB)", NAMES[c],
               count * 4.0 / 1048576, n);
        for (int r = 0; r < n; r++) printf(" %.1f", all[r]);
        printf("\n");
        free(all);
    }
    free(x), free(counts), free(displs);
    MPI_Finalize();
    return 0;
}
