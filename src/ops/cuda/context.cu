/* The CUDA context: device, precision of the matrix products, stream, cuBLAS handle and its
 * workspace, our own workspace, and device memory with the same per-category accounting as
 * sdp_alloc gives host memory.
 *
 * sdp_alloc keeps each buffer's size and category in a header in front of it, which device memory
 * cannot have (reading it back would need a copy). Device allocations are few (tens per model),
 * so their sizes and categories sit in a host-side list that sdp_cuda_free searches. */
#include "ops/cuda/common.cuh"
#include "sdp/cuda_scratch.h"

#include <stdlib.h>
#include <string.h>

struct sdp_cuda_block {
    void *ptr;
    size_t bytes;
    sdp_memcat cat;
    sdp_cuda_block *next;
};

int sdp_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* or the next launch check would report this error */
        return 0;
    }
    return n;
}

size_t sdp_cuda_bytes_in_use(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return total_b - free_b;
}

static void account(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    m->cur[cat] += bytes;
    if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
    m->total_cur += bytes;
    if (m->total_cur > m->total_peak) m->total_peak = m->total_cur;
    m->nallocs++;
}

static void unaccount(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(m->cur[cat] >= bytes && m->nallocs > 0);
    m->cur[cat] -= bytes;
    m->total_cur -= bytes;
    m->nallocs--;
}

void *sdp_cuda_malloc(sdp_cuda_ctx *ctx, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(ctx && cat < SDP_MEM_NCAT);
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        sdp_fatal("out of device memory allocating %zu bytes for %s (%s): use a smaller model or "
                  "batch",
                  bytes, sdp_memcat_name(cat), cudaGetErrorString(err));
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx->stream));
    sdp_cuda_block *b = (sdp_cuda_block *)malloc(sizeof *b);
    SDP_CHECK(b, "out of host memory: close other programs");
    b->ptr = p;
    b->bytes = bytes;
    b->cat = cat;
    b->next = ctx->blocks;
    ctx->blocks = b;
    account(&ctx->mem, cat, bytes);
    return p;
}

void sdp_cuda_free(sdp_cuda_ctx *ctx, void *p) {
    if (!p) return;
    sdp_cuda_block **link = &ctx->blocks;
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    SDP_ASSERT(*link); /* p came from sdp_cuda_malloc of this context and is still live */
    sdp_cuda_block *b = *link;
    *link = b->next;
    unaccount(&ctx->mem, b->cat, b->bytes);
    free(b);
    CUDA_CHECK(cudaFree(p)); /* waits for the device, so no queued kernel still uses p */
}

void *sdp_cuda_workspace(sdp_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->workspace_bytes) return ctx->workspace;
    size_t grown = ctx->workspace_bytes;
    while (grown < bytes) grown *= 2;
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream)); /* earlier kernels may still use it */
    sdp_cuda_free(ctx, ctx->workspace);
    ctx->workspace = sdp_cuda_malloc(ctx, SDP_MEM_SCRATCH, grown);
    ctx->workspace_bytes = grown;
    return ctx->workspace;
}

sdp_cuda_ctx *sdp_cuda_ctx_create(int device, sdp_precision precision) {
    SDP_CHECK(precision == SDP_PRECISION_FP32 || precision == SDP_PRECISION_BF16,
              "unknown CUDA precision %d: use SDP_PRECISION_FP32 or SDP_PRECISION_BF16",
              (int)precision);
    int count = sdp_cuda_device_count();
    SDP_CHECK(count > 0,
              "no usable CUDA device (none found, or the driver is older than the CUDA runtime "
              "sdp was built with): check nvidia-smi, or train on the CPU with --device cpu");
    SDP_CHECK(
        device >= 0 && device < count,
        "CUDA device %d does not exist (%d found): pick a device in [0, %d) or run on the CPU",
        device, count, count);
    sdp_cuda_ctx *ctx = (sdp_cuda_ctx *)calloc(1, sizeof *ctx);
    SDP_CHECK(ctx, "out of host memory: close other programs");
    ctx->device = device;
    ctx->precision = precision;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&ctx->cublas));
    CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->stream));
    /* No TF32 behind our back: each GEMM names its arithmetic by its compute type (gemm.cu). */
    CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH));
    void *cublas_workspace = sdp_cuda_malloc(ctx, SDP_MEM_SCRATCH, SDP_CUDA_CUBLAS_WORKSPACE_BYTES);
    CUBLAS_CHECK(
        cublasSetWorkspace(ctx->cublas, cublas_workspace, SDP_CUDA_CUBLAS_WORKSPACE_BYTES));
    ctx->workspace = sdp_cuda_malloc(ctx, SDP_MEM_SCRATCH, SDP_CUDA_WORKSPACE_BYTES);
    ctx->workspace_bytes = SDP_CUDA_WORKSPACE_BYTES;
    ctx->input_errors = (unsigned *)sdp_cuda_malloc(ctx, SDP_MEM_SCRATCH, sizeof(unsigned));
    return ctx;
}

void sdp_cuda_ctx_destroy(sdp_cuda_ctx *ctx) {
    if (!ctx) return;
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    CUBLAS_CHECK(cublasDestroy(ctx->cublas)); /* first: it holds a block (its workspace) */
    while (ctx->blocks) sdp_cuda_free(ctx, ctx->blocks->ptr);
    if (ctx->comm_stream) {
        CUDA_CHECK(cudaStreamSynchronize(ctx->comm_stream));
        CUDA_CHECK(cudaEventDestroy(ctx->comm_ready));
        CUDA_CHECK(cudaEventDestroy(ctx->comm_done));
        CUDA_CHECK(cudaStreamDestroy(ctx->comm_stream));
    }
    if (ctx->cudnn) CUDNN_CHECK(cudnnDestroy(ctx->cudnn));
    CUDA_CHECK(cudaStreamDestroy(ctx->stream));
    free(ctx);
}

void sdp_cuda_upload(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
}

void sdp_cuda_download(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    sdp_cuda_sync(ctx);
}

void sdp_cuda_zero(sdp_cuda_ctx *ctx, void *p, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx->stream));
}

void sdp_cuda_sync(sdp_cuda_ctx *ctx) {
    unsigned flags = 0;
    CUDA_CHECK(cudaMemcpyAsync(&flags, ctx->input_errors, sizeof flags, cudaMemcpyDeviceToHost,
                               ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    SDP_CHECK(!(flags & BAD_TOKEN),
              "embedding: a token id is negative: check the dataset and the tokenizer");
    SDP_CHECK(!(flags & BAD_TARGET), "cross-entropy: a target is not below the vocabulary size: "
                                     "check the dataset and the model's vocab_size");
}

void sdp_cuda_copy_rows(sdp_cuda_ctx *ctx, float *dst, size_t ld_dst, const float *src,
                        size_t ld_src, size_t rows, size_t cols) {
    if (rows == 0 || cols == 0) return;
    if (rows == 1) { /* a plain copy, which may be longer than a 2D copy's pitch limit */
        CUDA_CHECK(
            cudaMemcpyAsync(dst, src, cols * sizeof(float), cudaMemcpyDeviceToDevice, ctx->stream));
        return;
    }
    CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(float), src, ld_src * sizeof(float),
                                 cols * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                                 ctx->stream));
}
