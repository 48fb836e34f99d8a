/* ReLU, as src/ops/cpu/relu.c: the backward reads the saved output (positive exactly where the
 * input was), so the forward may run in place. */
#include "ops/cuda/common.cuh"

__global__ void relu_fwd_kernel(float *out, const float *inp, size_t n) {
    FOR_EACH_INDEX(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_bwd_kernel(float *dinp, const float *dout, const float *out, size_t n) {
    FOR_EACH_INDEX(i, n) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

static void cuda_relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return;
    relu_fwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, inp, n);
    LAUNCH_CHECK();
}

static void cuda_relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                          size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dinp || n == 0) return;
    relu_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(dinp, dout, out,
                                                                                    n);
    LAUNCH_CHECK();
}

void cuda_ops_relu(sdp_backend *t) {
    t->relu_fwd = cuda_relu_fwd;
    t->relu_bwd = cuda_relu_bwd;
}
