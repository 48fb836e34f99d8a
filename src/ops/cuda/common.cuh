/* What the CUDA kernel files share: launch sizes, warp and block reductions, the workspace and
 * the bad-id flags of the context, and the GEMM and download that kernels call beside their own
 * entries. C++, for the .cu files only. Private to src/ops/cuda. */
#ifndef SDP_OPS_CUDA_COMMON_CUH
#define SDP_OPS_CUDA_COMMON_CUH

#include "sdp/cuda_check.h"
#include "ops/cuda/cuda_ops.h"

#include <stddef.h>

enum {
    WARP = 32,
    ELEMENTWISE_THREADS = 256,
    MAX_ELEMENTWISE_BLOCKS = 65535 /* grid-stride loops cover the rest */
};

/* Bits of ctx->input_errors, raised by kernels that meet bad ids. */
enum { BAD_TOKEN = 1u, BAD_TARGET = 2u };

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned elementwise_blocks(size_t n) {
    size_t blocks = (n + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS;
    if (blocks > MAX_ELEMENTWISE_BLOCKS) blocks = MAX_ELEMENTWISE_BLOCKS;
    return blocks ? (unsigned)blocks : 1u;
}

static inline unsigned ceil_div(size_t n, size_t d) {
    return (unsigned)((n + d - 1) / d);
}

/* A kernel launch reports bad arguments (too much shared memory, a zero grid) only here. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* Grid-stride loop over [0, n) with a size_t index. */
#define FOR_EACH_INDEX(i, n)                                                                       \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

/* Sum or max over the whole block (blockDim.x a multiple of 32, at most 1024), returned to every
 * thread. Every thread of the block must call it; `shared` holds 32 floats. */
__device__ __forceinline__ float block_sum(float x, float *shared) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    x = warp_sum(x);
    __syncthreads(); /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(x);
}

__device__ __forceinline__ float block_max(float x, float *shared) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(x);
}

/* ---- context and GEMM helpers that several kernel files call --------------------------------- */

/* C = alpha op(A) op(B) + beta C, row-major, in the context's precision: the gemm entry, for the
 * kernels that run products of their own (linear.cu). Defined in gemm.cu. */
void sdp_cuda_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* A batch of sdp_cuda_gemm products (row-major, the context's precision): for i < batch,
 * C + i stride_c = alpha op(A + i stride_a) op(B + i stride_b) + beta (C + i stride_c).
 * Strides are in floats. Defined in gemm.cu. */
void sdp_cuda_gemm_strided_batched(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K,
                                   float alpha, const float *A, int lda, long long stride_a,
                                   const float *B, int ldb, long long stride_b, float beta,
                                   float *C, int ldc, long long stride_c, int batch);

/* At least `bytes` of the context's device workspace (grown, and so reallocated, if needed: take
 * it once per call, before launching anything that uses it). Defined in context.cu. */
void *sdp_cuda_workspace(sdp_cuda_ctx *ctx, size_t bytes);
/* The context's SDP_CUDA_CAST_BYTES of bf16 operand copies, allocated (as scratch) on first use.
 * Defined in context.cu. */
void *sdp_cuda_cast_buffer(sdp_cuda_ctx *ctx);
/* The bytes from p to the end of the context's live allocation holding it, or 0 when none does:
 * how much a kernel may write at p (a check, run on the host). */
size_t sdp_cuda_bytes_from(const sdp_cuda_ctx *ctx, const void *p);

/* Device to host: the download entry, for the kernels that return a value computed on the device
 * (reduce.cu, softmax_xent.cu). Waits, then reports bad ids as the sync entry does. Defined in
 * context.cu. */
void sdp_cuda_download(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);

#endif
