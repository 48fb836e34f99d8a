/* The CUDA backend's kernels, private to src/ops/cuda/: the GPU counterparts of the CPU kernels
 * (src/ops/cpu/cpu_ops.h), row-major (NCHW for the ResNet's), fp32 in memory. As on the CPU, each
 * file keeps its table entries static, with the signatures of sdp/backend.h, and fills them in with
 * one cuda_ops_<file> function, so an op's signature is written only in sdp/backend.h and at its
 * definition; sdp_backend_cuda (backend_cuda.c) calls them all. Everything else runs them through
 * that table and the entry points of sdp/ops.h, which check the arguments first
 * (src/ops/ops.c), so the entries do not check again. The few checks left in them guard the
 * CUDA kernels' own limits (int indexing over a whole tensor, cuDNN's) and the GEMM's arguments,
 * which linear and attention pass to it past dispatch.
 *
 * An entry takes every argument of its table slot, also those that only the CPU uses (attention's
 * and the convolutions' scratch, the CPU convolution algorithm), and ignores those. Every array is
 * a device pointer. The conventions of sdp/ops.h hold unchanged: backward entries ACCUMULATE (+=)
 * into every gradient they are given and skip a NULL one; softmax_xent_bwd alone overwrites.
 *
 * Matrix products (the GEMMs and attention's) run in the context's precision (sdp_precision: plain
 * fp32, or bf16 tensor cores with fp32 accumulation); every other kernel computes in fp32.
 *
 * Everything runs asynchronously, in order, on ctx->stream. Only the entries that return a value
 * computed on the device (softmax_xent_fwd, count_correct, sumsq), upload, download and sync wait
 * for the stream. Bad ids met on the device (a negative token, a target >= V) cannot fail at once:
 * the kernel leaves that element out, raises a flag, and the next of those waiting calls fails
 * with a clear message.
 *
 * Results match the CPU kernels to rounding, and are the same run to run, except that embed_bwd
 * adds token gradients with atomics, so its dwte may differ in the last bits from run to run when a
 * token repeats within a batch. The ResNet's convolutions run on cuDNN; its batch norm, ReLU and
 * pooling are kernels of our own that compute the CPU formulas (sums in double, elementwise
 * products rounded one by one as the CPU's C does) and reduce without atomics.
 *
 * What the kernel files share beyond this (launch sizes, reductions, the workspace, the GEMM the
 * other kernels call) is C++ and in common.cuh; this header is also read by the C files
 * (backend_cuda.c, comm_nccl.c). */
#ifndef SDP_OPS_CUDA_OPS_H
#define SDP_OPS_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
/* MPI's C API only, also when nvcc compiles this header as C++. */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <cudnn.h>

/* The sdp headers are C headers without extern "C" of their own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "sdp/backend.h"
#include "sdp/mem.h"

typedef struct sdp_cuda_block sdp_cuda_block; /* one live device allocation (context.cu) */

/* What be->ctx points to. */
typedef struct {
    int device;
    sdp_precision precision; /* of every matrix product (the GEMMs, attention) */
    /* bf16 attention through the fused kernels (flash_attention.cuh) instead of cuBLAS GEMMs over
     * score matrices in device memory. On by default: on the H200 the fused kernels are the
     * faster (docs/cuda.md); benchmarks and tests turn them off to compare. */
    bool fused_attention;
    /* bf16: the GEMMs (sdp_cuda_gemm) take their operands rounded to bf16 copies in cast_buffer,
     * so that cuBLAS runs native bf16 tensor-core kernels, instead of fp32 operands that cuBLAS
     * serves through TF32 kernels under FAST_16BF (docs/cuda.md). Off by default until a GPU has
     * timed it; sdp_backend_cuda_set_bf16_operands turns it on. */
    bool bf16_operands;
    void *cast_buffer;       /* SDP_CUDA_CAST_BYTES, made by the first product that needs it */
    size_t max_shared_bytes; /* a block's shared memory on this device, opted in (the fused
                                attention's kernels need more than the default 48 KiB) */
    int fused_arch; /* the architecture the fused attention was built for on this device (80 for
                       sm_80); 0 until attention.cu first asks */
    cudaStream_t stream;   /* every kernel, copy and cuBLAS call of this context runs here */
    cublasHandle_t cublas; /* bound to stream */
    /* Bound to stream; made by the first convolution plan (conv2d.cu), so that contexts without
     * convolutions (the transformers') never pay for a cuDNN handle's start-up and device memory.
     * NULL until then. */
    cudnnHandle_t cudnn;
    /* Device scratch of the kernels that need temporaries (column sums, attention's score
     * matrices and row sums, the loss total, the rope table). Reused by every call, which is safe
     * because all of them run in stream order; grown on demand. Counted as SDP_MEM_SCRATCH. */
    void *workspace;
    size_t workspace_bytes;
    unsigned *input_errors; /* device: flags raised by kernels that met bad ids */
    /* Device bytes by category, kept apart from the host sdp_mem because sdp_alloc cannot hold
     * device memory (its block header lives in front of the buffer). Only the tally fields are
     * used; dry is always false. */
    sdp_mem mem;
    sdp_cuda_block *blocks; /* host-side list of live allocations: pointer, bytes, category */
    /* Gradient reductions among devices (comm_nccl.c), made by the first comm_open: they run on
     * comm_stream, after comm_ready (recorded on stream), and stream waits for comm_done. */
    cudaStream_t comm_stream;
    cudaEvent_t comm_ready, comm_done;
} sdp_cuda_ctx;

/* The context of a backend made by sdp_backend_cuda. The cast is for the .cu files, which are
 * C++, where void * does not convert by itself. */
static inline sdp_cuda_ctx *cuda_ctx(const sdp_backend *be) {
    return (sdp_cuda_ctx *)be->ctx;
}

/* Number of CUDA devices, or 0 when there is none or no working driver (never fails). */
int sdp_cuda_device_count(void);
/* Selects the device, creates the stream and the cuBLAS handle; matrix products will run in
 * `precision`. Failures are fatal. The backend's destroy entry frees it. */
sdp_cuda_ctx *sdp_cuda_ctx_create(int device, sdp_precision precision);

/* The table's entries, by file. */
void cuda_ops_activations(sdp_backend *t);
void cuda_ops_adamw(sdp_backend *t);
void cuda_ops_add_rows(sdp_backend *t);
void cuda_ops_attention(sdp_backend *t);
void cuda_ops_batchnorm(sdp_backend *t);
void cuda_ops_comm_nccl(sdp_backend *t);
void cuda_ops_context(sdp_backend *t);
void cuda_ops_conv2d(sdp_backend *t);
void cuda_ops_dropout(sdp_backend *t);
void cuda_ops_embed(sdp_backend *t);
void cuda_ops_gemm(sdp_backend *t);
void cuda_ops_layernorm(sdp_backend *t);
void cuda_ops_linear(sdp_backend *t);
void cuda_ops_pool(sdp_backend *t);
void cuda_ops_reduce(sdp_backend *t);
void cuda_ops_relu(sdp_backend *t);
void cuda_ops_residual(sdp_backend *t);
void cuda_ops_rmsnorm(sdp_backend *t);
void cuda_ops_rope(sdp_backend *t);
void cuda_ops_sgd(sdp_backend *t);
void cuda_ops_softmax_xent(sdp_backend *t);
void cuda_ops_vit(sdp_backend *t);

#ifdef __cplusplus
}
#endif

#endif
