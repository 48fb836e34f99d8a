/* Scaled residual connection out = a + s * b. No __restrict__: the forward runs in place
 * (out == a), which is safe because each thread reads its element before writing it. */
#include "ops/cuda/common.cuh"

__global__ void residual_fwd_kernel(float *out, const float *a, const float *b, float s, size_t n) {
    FOR_EACH_INDEX(i, n) out[i] = a[i] + s * b[i];
}

__global__ void residual_bwd_kernel(float *da, float *db, const float *dout, float s, size_t n) {
    FOR_EACH_INDEX(i, n) {
        float g = dout[i];
        if (da) da[i] += g;
        if (db) db[i] += s * g;
    }
}

static void cuda_residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b,
                              float s, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return;
    residual_fwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, a, b,
                                                                                        s, n);
    LAUNCH_CHECK();
}

static void cuda_residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout,
                              float s, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0 || (!da && !db)) return;
    residual_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(da, db,
                                                                                        dout, s, n);
    LAUNCH_CHECK();
}

void cuda_ops_residual(sdp_backend *t) {
    t->residual_fwd = cuda_residual_fwd;
    t->residual_bwd = cuda_residual_bwd;
}
