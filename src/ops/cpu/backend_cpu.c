/* The CPU backend over host memory from sdp_alloc: its memory and communication entries are
 * here; its ops are the kernels of src/ops/cpu/, each file filling in its own entries
 * (cpu_ops.h), GEMMs by the provider chosen here. */
#include "ops/cpu/cpu_ops.h"
#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

/* ---- memory ---- */

static void cpu_destroy(sdp_backend *be) {
    free(be->ctx); /* the cpu_backend that holds be */
}

static void *cpu_alloc(const sdp_backend *be, sdp_memcat cat, size_t bytes) {
    return sdp_alloc(be->mem, cat, bytes);
}

static void cpu_free(const sdp_backend *be, void *p) {
    sdp_free(be->mem, p);
}

static void cpu_zero(const sdp_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}

static void cpu_copy(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_sync(const sdp_backend *be) {
    (void)be;
}

static size_t cpu_bytes_in_use(const sdp_backend *be) {
    return be->mem->total_cur;
}

/* ---- communication ---- */

/* Host memory needs no device communicator: MPI reduces and broadcasts the buffers in place (the
 * caller's MPI_Iallreduce, which overlaps the backward pass). So none is ever opened, and the
 * entries that take one are never reached. */
static void *cpu_comm_open(const sdp_backend *be, MPI_Comm comm) {
    (void)be, (void)comm;
    return NULL;
}

static void cpu_comm_close(const sdp_backend *be, void *dc) {
    (void)be;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_allreduce_start(const sdp_backend *be, void *dc, float *x, size_t n) {
    (void)be, (void)x, (void)n;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_broadcast_start(const sdp_backend *be, void *dc, float *x, size_t n, int root) {
    (void)be, (void)x, (void)n, (void)root;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_reduce_scatter_start(const sdp_backend *be, void *dc, float *x, const int *counts,
                                     const int *displs) {
    (void)be, (void)x, (void)counts, (void)displs;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_allgather_start(const sdp_backend *be, void *dc, float *x, const int *counts,
                                const int *displs) {
    (void)be, (void)x, (void)counts, (void)displs;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_allreduce_wait(const sdp_backend *be) {
    (void)be; /* nothing is ever in flight */
}

sdp_backend *sdp_backend_cpu(sdp_gemm_provider gemm, sdp_mem *mem) {
    SDP_ASSERT(mem);
    cpu_backend *cb = sdp_xcalloc(1, sizeof *cb, "the CPU backend");
    cb->gemm = gemm;
    cb->table = (sdp_backend){
        .name = "cpu",
        .ctx = cb,
        .mem = mem,
        .host_memory = true,
        .destroy = cpu_destroy,
        .bytes_in_use = cpu_bytes_in_use,
        .comm_open = cpu_comm_open,
        .comm_close = cpu_comm_close,
        .allreduce_start = cpu_allreduce_start,
        .broadcast_start = cpu_broadcast_start,
        .reduce_scatter_start = cpu_reduce_scatter_start,
        .allgather_start = cpu_allgather_start,
        .allreduce_wait = cpu_allreduce_wait,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .zero = cpu_zero,
        .upload = cpu_copy,
        .download = cpu_copy,
        .sync = cpu_sync,
    };
    sdp_backend *t = &cb->table;
    cpu_ops_optim(t);
    cpu_ops_reduce(t);
    cpu_ops_rows(t);
    cpu_ops_gemm(t);
    cpu_ops_linear(t);
    cpu_ops_embed(t);
    cpu_ops_layernorm(t);
    cpu_ops_rmsnorm(t);
    cpu_ops_gelu(t);
    cpu_ops_swiglu(t);
    cpu_ops_residual(t);
    cpu_ops_dropout(t);
    cpu_ops_attention(t);
    cpu_ops_rope(t);
    cpu_ops_softmax_xent(t);
    cpu_ops_vit_stem(t);
    cpu_ops_conv2d(t);
    cpu_ops_batchnorm(t);
    cpu_ops_relu(t);
    cpu_ops_pool(t);
    return t;
}
