/* Gradient reductions among GPUs with NCCL, for SDP's owner groups: one NCCL communicator per
 * owner-group MPI communicator, bootstrapped over it (its rank 0 makes the unique id and
 * broadcasts it), so every group reduces among its own members only.
 *
 * Reductions run on one communication stream per context. A reduction starts after an event
 * recorded on the compute stream, so it sees the gradients the backward pass has written so far
 * while the layers below keep computing; allreduce_wait makes the compute stream wait for all of
 * them. One stream for every group keeps the reductions in the order they are started, which
 * sdp/sync.h makes the same on every member of a group, so no two ranks wait on each other in
 * opposite orders.
 *
 * NCCL refuses two ranks on one device. When ranks share a device (a one-GPU machine running
 * several ranks, as the tests do), comm_open returns NULL and sdp/sync.h stages those reductions
 * through host memory and MPI instead.
 *
 * Its table entries are the backend's comm_open, comm_close, allreduce_start, broadcast_start,
 * reduce_scatter_start, allgather_start and allreduce_wait (sdp/backend.h). */
#include "sdp/cuda_check.h"
#include "ops/cuda/cuda_ops.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t sdp_nccl_res_ = (call);                                                       \
        if (sdp_nccl_res_ != ncclSuccess)                                                          \
            sdp_fatal("NCCL error at %s:%d: %s: check that every rank has its own GPU and that "   \
                      "NCCL can reach the others (NCCL_DEBUG=INFO says more)",                     \
                      __FILE__, __LINE__, ncclGetErrorString(sdp_nccl_res_));                      \
    } while (0)

typedef struct {
    ncclComm_t comm;
} device_comm;

enum { UUID_BYTES = 16 };

/* Whether two ranks of comm run on the same device (by UUID, which also tells apart devices of
 * the same index on different nodes). Every rank gets the same answer. */
static bool ranks_share_a_device(const sdp_cuda_ctx *ctx, MPI_Comm comm, int size) {
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx->device));
    char *all = sdp_xmalloc((size_t)size * UUID_BYTES, "the ranks' device UUIDs");
    MPI_Allgather(prop.uuid.bytes, UUID_BYTES, MPI_BYTE, all, UUID_BYTES, MPI_BYTE, comm);
    bool shared = false;
    for (int i = 0; i < size && !shared; i++)
        for (int j = i + 1; j < size && !shared; j++)
            shared =
                memcmp(all + (size_t)i * UUID_BYTES, all + (size_t)j * UUID_BYTES, UUID_BYTES) == 0;
    free(all);
    return shared;
}

static void make_comm_stream(sdp_cuda_ctx *ctx) {
    if (ctx->comm_stream) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ctx->comm_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&ctx->comm_done, cudaEventDisableTiming));
}

static void *cuda_comm_open(const sdp_backend *be, MPI_Comm comm) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    int size = 0, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    if (size < 2 || ranks_share_a_device(ctx, comm, size)) return NULL;
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
    CUDA_CHECK(cudaSetDevice(ctx->device));
    make_comm_stream(ctx);
    device_comm *dc = sdp_xcalloc(1, sizeof *dc, "a NCCL communicator");
    NCCL_CHECK(ncclCommInitRank(&dc->comm, size, id, rank));
    return dc;
}

static void cuda_comm_close(const sdp_backend *be, void *p) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!p) return;
    device_comm *dc = p;
    CUDA_CHECK(cudaStreamSynchronize(ctx->comm_stream));
    NCCL_CHECK(ncclCommDestroy(dc->comm));
    free(dc);
}

static void cuda_allreduce_start(const sdp_backend *be, void *p, float *x, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    device_comm *dc = p;
    SDP_ASSERT(dc && ctx->comm_stream);
    if (n == 0) return;
    CUDA_CHECK(cudaEventRecord(ctx->comm_ready, ctx->stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx->comm_stream, ctx->comm_ready, 0));
    NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, dc->comm, ctx->comm_stream));
}

static void cuda_broadcast_start(const sdp_backend *be, void *p, float *x, size_t n, int root) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    device_comm *dc = p;
    SDP_ASSERT(dc && ctx->comm_stream);
    if (n == 0) return;
    CUDA_CHECK(cudaEventRecord(ctx->comm_ready, ctx->stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx->comm_stream, ctx->comm_ready, 0));
    NCCL_CHECK(ncclBroadcast(x, x, n, ncclFloat32, root, dc->comm, ctx->comm_stream));
}

/* One collective per rank's part of x, grouped into one launch: a reduce to that rank (the
 * reduce-scatter) or a broadcast from it (the all-gather). NCCL's own reduce-scatter and
 * all-gather take equal parts, and --zero's shards may differ by an element. */
static void each_part(const sdp_backend *be, void *p, float *x, const int *counts,
                      const int *displs, bool reduce) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    device_comm *dc = p;
    SDP_ASSERT(dc && ctx->comm_stream);
    int size = 0;
    NCCL_CHECK(ncclCommCount(dc->comm, &size));
    CUDA_CHECK(cudaEventRecord(ctx->comm_ready, ctx->stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx->comm_stream, ctx->comm_ready, 0));
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size; j++) {
        float *part = x + displs[j];
        const size_t n = (size_t)counts[j];
        if (reduce)
            NCCL_CHECK(
                ncclReduce(part, part, n, ncclFloat32, ncclSum, j, dc->comm, ctx->comm_stream));
        else
            NCCL_CHECK(ncclBroadcast(part, part, n, ncclFloat32, j, dc->comm, ctx->comm_stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

static void cuda_reduce_scatter_start(const sdp_backend *be, void *p, float *x, const int *counts,
                                      const int *displs) {
    each_part(be, p, x, counts, displs, true);
}

static void cuda_allgather_start(const sdp_backend *be, void *p, float *x, const int *counts,
                                 const int *displs) {
    each_part(be, p, x, counts, displs, false);
}

static void cuda_allreduce_wait(const sdp_backend *be) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!ctx->comm_stream) return;
    CUDA_CHECK(cudaEventRecord(ctx->comm_done, ctx->comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(ctx->stream, ctx->comm_done, 0));
}

void cuda_ops_comm_nccl(sdp_backend *t) {
    t->comm_open = cuda_comm_open;
    t->comm_close = cuda_comm_close;
    t->allreduce_start = cuda_allreduce_start;
    t->broadcast_start = cuda_broadcast_start;
    t->reduce_scatter_start = cuda_reduce_scatter_start;
    t->allgather_start = cuda_allgather_start;
    t->allreduce_wait = cuda_allreduce_wait;
}
