/* dst[r * ld_dst + c] += src[r * ld_src + c]: an owned slice of a whole gradient added into the
 * caller's gradient buffer (the ResNet's sliced gradients). One thread per element. */
#include "ops/cuda/common.cuh"

__global__ void add_rows_kernel(float *dst, size_t ld_dst, const float *src, size_t ld_src,
                                size_t rows, size_t cols) {
    FOR_EACH_INDEX(i, rows * cols) {
        const size_t r = i / cols, c = i % cols;
        dst[r * ld_dst + c] += src[r * ld_src + c];
    }
}

/* dst[r * ld_dst + c] += src[r * ld_src + c] for r < rows, c < cols (the backend's add_rows). */
static void cuda_add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                          size_t ld_src, size_t rows, size_t cols) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (rows == 0 || cols == 0) return;
    add_rows_kernel<<<elementwise_blocks(rows * cols), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dst, ld_dst, src, ld_src, rows, cols);
    LAUNCH_CHECK();
}

void cuda_ops_add_rows(sdp_backend *t) {
    t->add_rows = cuda_add_rows;
}
