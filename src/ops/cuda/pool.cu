/* Average pooling (kernel = stride = k, no padding) and global average pooling over NCHW, as
 * src/ops/cpu/pool.c: the same float sums in the same order for the k x k windows, double sums
 * for the global mean. Every output (or input, in the backward) has one thread or one warp of
 * its own, so there are no atomics and the results are the same run to run. */
#include "ops/cuda/common.cuh"

enum { POOL_WARPS_PER_BLOCK = ELEMENTWISE_THREADS / WARP };

/* One thread per output pixel: its k x k window, rows then columns, as on the CPU. */
__global__ void avgpool_fwd_kernel(float *out, const float *inp, int H, int W, int k, int OH,
                                   int OW, size_t n_out, float inv) {
    FOR_EACH_INDEX(o, n_out) {
        const size_t plane = o / ((size_t)OH * OW);
        const int at = (int)(o % ((size_t)OH * OW)), oy = at / OW, ox = at % OW;
        const float *x = inp + plane * H * W + (size_t)oy * k * W + (size_t)ox * k;
        float sum = 0.0f;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) sum += x[(size_t)i * W + j];
        out[o] = sum * inv;
    }
}

/* One thread per input pixel: windows do not overlap, so each gets one output's share, or none
 * in the last H % k rows and W % k columns. */
__global__ void avgpool_bwd_kernel(float *dinp, const float *dout, int H, int W, int k, int OH,
                                   int OW, size_t n_in, float inv) {
    FOR_EACH_INDEX(i, n_in) {
        const size_t plane = i / ((size_t)H * W);
        const int at = (int)(i % ((size_t)H * W)), oy = at / W / k, ox = at % W / k;
        if (oy < OH && ox < OW)
            dinp[i] += __fmul_rn(dout[plane * OH * OW + (size_t)oy * OW + ox], inv);
    }
}

static void cuda_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                             int H, int W, int k) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const int OH = H / k, OW = W / k;
    const size_t n_out = (size_t)B * C * OH * OW;
    avgpool_fwd_kernel<<<elementwise_blocks(n_out), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        out, inp, H, W, k, OH, OW, n_out, 1.0f / (float)(k * k));
    LAUNCH_CHECK();
}

static void cuda_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                             int H, int W, int k) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dinp) return;
    const size_t n_in = (size_t)B * C * H * W;
    avgpool_bwd_kernel<<<elementwise_blocks(n_in), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dinp, dout, H, W, k, H / k, W / k, n_in, 1.0f / (float)(k * k));
    LAUNCH_CHECK();
}

/* One warp per (image, channel) plane: strided double sums, then the warp's tree. */
__global__ void global_avgpool_fwd_kernel(float *out, const float *inp, size_t planes, size_t hw) {
    const size_t plane = (size_t)blockIdx.x * POOL_WARPS_PER_BLOCK + threadIdx.x / WARP;
    const unsigned lane = threadIdx.x % WARP;
    if (plane >= planes) return; /* the whole warp leaves together */
    const float *x = inp + plane * hw;
    double sum = 0.0;
    for (size_t i = lane; i < hw; i += WARP) sum += x[i];
    for (int o = WARP / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) out[plane] = (float)(sum / (double)hw);
}

__global__ void global_avgpool_bwd_kernel(float *dinp, const float *dout, size_t n, size_t hw) {
    FOR_EACH_INDEX(i, n) dinp[i] += dout[i / hw] / (float)hw;
}

static void cuda_global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B,
                                    int C, int H, int W) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const size_t planes = (size_t)B * C, hw = (size_t)H * W;
    global_avgpool_fwd_kernel<<<ceil_div(planes, POOL_WARPS_PER_BLOCK), ELEMENTWISE_THREADS, 0,
                                ctx->stream>>>(out, inp, planes, hw);
    LAUNCH_CHECK();
}

static void cuda_global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B,
                                    int C, int H, int W) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dinp) return;
    const size_t hw = (size_t)H * W, n = (size_t)B * C * hw;
    global_avgpool_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dinp, dout, n, hw);
    LAUNCH_CHECK();
}

void cuda_ops_pool(sdp_backend *t) {
    t->avgpool_fwd = cuda_avgpool_fwd;
    t->avgpool_bwd = cuda_avgpool_bwd;
    t->global_avgpool_fwd = cuda_global_avgpool_fwd;
    t->global_avgpool_bwd = cuda_global_avgpool_bwd;
}
