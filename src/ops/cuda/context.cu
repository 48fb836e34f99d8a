/* The CUDA context: device, precision of the matrix products, stream, cuBLAS handle and its
 * workspace, our own workspace, and device memory with the same per-category accounting as
 * sdp_alloc gives host memory.
 *
 * sdp_alloc keeps each buffer's size and category in a header in front of it, which device memory
 * cannot have (reading it back would need a copy). Device allocations are few (tens per model),
 * so their sizes and categories sit in a host-side list that train_device_free searches.
 *
 * Its table entries are the backend's memory services (alloc ... copy_rows, bytes_in_use) and
 * destroy. */
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

/* Zero-filled device memory, counted in ctx->mem under cat: the alloc entry, and the context's own
 * blocks (its workspaces and bad-id flags), which it allocates before there is a backend. */
static void *train_device_alloc(sdp_cuda_ctx *ctx, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(ctx && cat < SDP_MEM_NCAT);
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        sdp_fatal("out of device memory allocating %zu bytes for %s (%s): use a smaller model or "
                  "batch",
                  bytes, sdp_memcat_name(cat), cudaGetErrorString(err));
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx->stream));
    sdp_cuda_block *b = (sdp_cuda_block *)sdp_xmalloc(sizeof *b, "a device block's record");
    b->ptr = p;
    b->bytes = bytes;
    b->cat = cat;
    b->next = ctx->blocks;
    ctx->blocks = b;
    account(&ctx->mem, cat, bytes);
    return p;
}

/* The free entry, and the workspace's and destroy's frees. */
static void train_device_free(sdp_cuda_ctx *ctx, void *p) {
    if (!p) return;
    sdp_cuda_block **link = &ctx->blocks;
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    SDP_ASSERT(*link); /* p came from train_device_alloc of this context and is still live */
    sdp_cuda_block *b = *link;
    *link = b->next;
    unaccount(&ctx->mem, b->cat, b->bytes);
    free(b);
    CUDA_CHECK(cudaFree(p)); /* waits for the device, so no queued kernel still uses p */
}

size_t sdp_cuda_bytes_from(const sdp_cuda_ctx *ctx, const void *p) {
    const char *at = (const char *)p;
    for (const sdp_cuda_block *b = ctx->blocks; b; b = b->next) {
        const char *start = (const char *)b->ptr;
        if (at >= start && at < start + b->bytes) return b->bytes - (size_t)(at - start);
    }
    return 0;
}

void *sdp_cuda_workspace(sdp_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->workspace_bytes) return ctx->workspace;
    size_t grown = ctx->workspace_bytes;
    while (grown < bytes) grown *= 2;
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream)); /* earlier kernels may still use it */
    train_device_free(ctx, ctx->workspace);
    ctx->workspace = train_device_alloc(ctx, SDP_MEM_SCRATCH, grown);
    ctx->workspace_bytes = grown;
    return ctx->workspace;
}

void *sdp_cuda_cast_buffer(sdp_cuda_ctx *ctx) {
    if (!ctx->cast_buffer)
        ctx->cast_buffer = train_device_alloc(ctx, SDP_MEM_SCRATCH, SDP_CUDA_CAST_BYTES);
    return ctx->cast_buffer;
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
    sdp_cuda_ctx *ctx = (sdp_cuda_ctx *)sdp_xcalloc(1, sizeof *ctx, "the CUDA context");
    ctx->device = device;
    ctx->precision = precision;
    ctx->fused_attention = true; /* the faster in bf16 on the H200 (docs/cuda.md) */
    CUDA_CHECK(cudaSetDevice(device));
    int max_shared = 0;
    CUDA_CHECK(
        cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    ctx->max_shared_bytes = (size_t)max_shared;
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&ctx->cublas));
    CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->stream));
    /* No TF32 behind our back: each GEMM names its arithmetic by its compute type (gemm.cu). */
    CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH));
    void *cublas_workspace =
        train_device_alloc(ctx, SDP_MEM_SCRATCH, SDP_CUDA_CUBLAS_WORKSPACE_BYTES);
    CUBLAS_CHECK(
        cublasSetWorkspace(ctx->cublas, cublas_workspace, SDP_CUDA_CUBLAS_WORKSPACE_BYTES));
    ctx->workspace = train_device_alloc(ctx, SDP_MEM_SCRATCH, SDP_CUDA_WORKSPACE_BYTES);
    ctx->workspace_bytes = SDP_CUDA_WORKSPACE_BYTES;
    ctx->input_errors = (unsigned *)train_device_alloc(ctx, SDP_MEM_SCRATCH, sizeof(unsigned));
    return ctx;
}

/* Waits for all work on the stream; fails clearly if a kernel met a bad id since the last check.
 * The sync entry, and the end of upload and of sdp_cuda_download. */
static void sync_stream(sdp_cuda_ctx *ctx) {
    unsigned flags = 0;
    CUDA_CHECK(cudaMemcpyAsync(&flags, ctx->input_errors, sizeof flags, cudaMemcpyDeviceToHost,
                               ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    SDP_CHECK(!(flags & BAD_TOKEN),
              "embedding: a token id is negative: check the dataset and the tokenizer");
    SDP_CHECK(!(flags & BAD_TARGET), "cross-entropy: a target is not below the vocabulary size: "
                                     "check the dataset and the model's vocab_size");
}

void sdp_cuda_download(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    sync_stream(ctx);
}

/* ---- table entries ------------------------------------------------------------------------- */

/* Waits for the stream, then frees every allocation still live, the context, and the backend
 * (which sdp_backend_cuda allocated to hold it). */
static void cuda_destroy(sdp_backend *be) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    CUBLAS_CHECK(cublasDestroy(ctx->cublas)); /* first: it holds a block (its workspace) */
    while (ctx->blocks) train_device_free(ctx, ctx->blocks->ptr);
    if (ctx->comm_stream) {
        CUDA_CHECK(cudaStreamSynchronize(ctx->comm_stream));
        CUDA_CHECK(cudaEventDestroy(ctx->comm_ready));
        CUDA_CHECK(cudaEventDestroy(ctx->comm_done));
        CUDA_CHECK(cudaStreamDestroy(ctx->comm_stream));
    }
    if (ctx->cudnn) CUDNN_CHECK(cudnnDestroy(ctx->cudnn));
    CUDA_CHECK(cudaStreamDestroy(ctx->stream));
    free(ctx);
    free(be);
}

static void *cuda_alloc(const sdp_backend *be, sdp_memcat cat, size_t bytes) {
    return train_device_alloc(cuda_ctx(be), cat, bytes); /* the context's own blocks use it too */
}

static void cuda_free(const sdp_backend *be, void *p) {
    train_device_free(cuda_ctx(be), p); /* the workspace and destroy use it too */
}

static void cuda_zero(const sdp_backend *be, void *p, size_t bytes) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx->stream));
}

/* Host to device. The copy is asynchronous with respect to the stream, so src would have to stay
 * valid until the next waiting call; waiting here lets the caller reuse its host array at once
 * (the model uploads each batch), and reports bad ids as sync does. */
static void cuda_upload(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    sync_stream(ctx);
}

static void cuda_download(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    sdp_cuda_download(cuda_ctx(be), dst, src, bytes); /* which reduce.cu and softmax_xent.cu call */
}

static void cuda_sync(const sdp_backend *be) {
    sync_stream(cuda_ctx(be)); /* which upload and sdp_cuda_download end with */
}

/* dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < cols, device to device. */
static void cuda_copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                           size_t ld_src, size_t rows, size_t cols) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
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

/* Bytes in use on the current device by every process and context (cudaMemGetInfo's total minus
 * free), or 0 when the query fails: the device's, not this context's, because the peak callers
 * sample it for includes the CUDA context and cuBLAS. */
static size_t cuda_bytes_in_use(const sdp_backend *be) {
    (void)be;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return total_b - free_b;
}

void cuda_ops_context(sdp_backend *t) {
    t->destroy = cuda_destroy;
    t->alloc = cuda_alloc;
    t->free = cuda_free;
    t->zero = cuda_zero;
    t->upload = cuda_upload;
    t->download = cuda_download;
    t->sync = cuda_sync;
    t->copy_rows = cuda_copy_rows;
    t->bytes_in_use = cuda_bytes_in_use;
}
