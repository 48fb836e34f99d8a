/* The emulated device: the CPU backend behind a device's interface, so that every device path of
 * the trainer and of the synchronisation runs, and is tested, on a machine without a GPU.
 *
 * Its buffers are host memory, but flagged as a device's (host_memory false), so the trainer
 * reaches them only through upload and download, updates them through adamw_update and
 * sgd_update, and takes norms through sumsq and scale, exactly as it does on CUDA. Its owner
 * groups reduce through device communicators, which here are MPI communicators standing in for
 * NCCL's; with `shared` set, comm_open returns none, as CUDA's does for ranks that share a GPU,
 * and the synchronisation stages through host memory instead. Every number is the CPU backend's,
 * so a run on it must match --device cpu bit for bit: what differs would be a fault of the device
 * paths, not of arithmetic. */
#include "sdp/backend.h"
#include "sdp/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sdp_backend table; /* first: the table handed out is this struct */
    sdp_backend *cpu;  /* the CPU backend whose kernels and allocator it runs */
    sdp_mem mem;       /* the emulated device's tally */
} emulated;

static void emulated_destroy(sdp_backend *be) {
    emulated *e = (emulated *)be;
    sdp_backend_destroy(e->cpu);
    free(e);
}

static void *mpi_comm_open(const sdp_backend *be, MPI_Comm comm) {
    (void)be;
    MPI_Comm *dc = sdp_xmalloc(sizeof *dc, "a communicator");
    MPI_Comm_dup(comm, dc);
    return dc;
}

static void mpi_comm_close(const sdp_backend *be, void *dc) {
    (void)be;
    MPI_Comm_free(dc);
    free(dc);
}

/* Complete on return, so that allreduce_wait has nothing left to order. MPI_Iallreduce, as the
 * host path reduces, since MPI_Allreduce may add a group of three or more in another order. */
static void mpi_allreduce_start(const sdp_backend *be, void *dc, float *x, size_t n) {
    (void)be;
    SDP_CHECK(n <= (size_t)0x7fffffff, "a bucket of %zu floats is too large for MPI", n);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, *(MPI_Comm *)dc, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static void mpi_broadcast_start(const sdp_backend *be, void *dc, float *x, size_t n, int root) {
    (void)be;
    SDP_CHECK(n <= (size_t)0x7fffffff, "a publication of %zu floats is too large for MPI", n);
    MPI_Bcast(x, (int)n, MPI_FLOAT, root, *(MPI_Comm *)dc);
}

/* MPI_Ireduce_scatter, as the host path reduces (its sum lands at the start of x), then moved to
 * this rank's part: bitwise the host's. The rest of x is spent, as NCCL leaves it: it is filled
 * with NaN, so that a caller reading the sum anywhere else fails the tests. */
static void mpi_reduce_scatter_start(const sdp_backend *be, void *dc, float *x, const int *counts,
                                     const int *displs) {
    (void)be;
    MPI_Comm comm = *(MPI_Comm *)dc;
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Request req;
    MPI_Ireduce_scatter(MPI_IN_PLACE, x, counts, MPI_FLOAT, MPI_SUM, comm, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    const size_t lo = (size_t)displs[rank], hi = lo + (size_t)counts[rank];
    memmove(x + lo, x, (hi - lo) * sizeof(float));
    size_t n = 0;
    for (int j = 0; j < size; j++) n += (size_t)counts[j];
    for (size_t i = 0; i < n; i++)
        if (i < lo || i >= hi) x[i] = NAN;
}

static void mpi_allgather_start(const sdp_backend *be, void *dc, float *x, const int *counts,
                                const int *displs) {
    (void)be;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT,
                   *(MPI_Comm *)dc);
}

static void nothing_to_wait_for(const sdp_backend *be) {
    (void)be;
}

sdp_backend *sdp_backend_emulated(sdp_gemm_provider gemm, bool shared) {
    emulated *e = sdp_xcalloc(1, sizeof *e, "the emulated device");
    e->cpu = sdp_backend_cpu(gemm, &e->mem);
    e->table = *e->cpu; /* its kernels read only be->ctx and be->mem, which the copy keeps */
    e->table.name = "emulated";
    e->table.host_memory = false;
    e->table.destroy = emulated_destroy;
    /* The optimizers, sumsq, scale and bytes_in_use (its own tally's) are the CPU's. Shared: no
     * communicator, like the CPU's, so the synchronisation stages through host memory. */
    if (!shared) {
        e->table.comm_open = mpi_comm_open;
        e->table.comm_close = mpi_comm_close;
        e->table.allreduce_start = mpi_allreduce_start;
        e->table.broadcast_start = mpi_broadcast_start;
        e->table.reduce_scatter_start = mpi_reduce_scatter_start;
        e->table.allgather_start = mpi_allgather_start;
        e->table.allreduce_wait = nothing_to_wait_for;
    }
    return &e->table;
}
