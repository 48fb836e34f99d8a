/* ReLU, as src/ops/cpu/relu.c: the backward reads the saved output (positive exactly where the
 * input was), so the forward may run in place. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/ops_cuda_vision.h"

__global__ void relu_fwd_kernel(float *out, const float *inp, size_t n) {
    FOR_EACH_INDEX(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_bwd_kernel(float *dinp, const float *dout, const float *out, size_t n) {
    FOR_EACH_INDEX(i, n) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

void sdp_cuda_relu_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, size_t n) {
    if (n == 0) return;
    relu_fwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, inp, n);
    LAUNCH_CHECK();
}

void sdp_cuda_relu_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, const float *out,
                       size_t n) {
    if (!dinp || n == 0) return;
    relu_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(dinp, dout, out,
                                                                                    n);
    LAUNCH_CHECK();
}
