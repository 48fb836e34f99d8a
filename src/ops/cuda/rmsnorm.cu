/* RMSNorm over the last dimension (no centring, no bias), one warp per row as in layernorm.cu;
 * the weight gradient is a deterministic column sum. */
#include "ops/cuda/column_sums.cuh"

enum { ROWS_PER_BLOCK = 8 }; /* one warp each */
#define RMSNORM_EPS 1e-5f

__global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, int n,
                                   int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= n) return;
    const float *x = inp + (size_t)row * C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += WARP) sq += x[c] * x[c];
    float rs = 1.0f / sqrtf(warp_sum(sq) / C + RMSNORM_EPS);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) o[c] = x[c] * rs * w[c];
    if (lane == 0) rstd[row] = rs;
}

/* With g = dout * w: dinp += rstd * (g - x * rstd^2 * mean(g * x)). */
__global__ void rmsnorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *rstd, int n, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= n) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float rs = rstd[row];
    float gx_sum = 0.0f;
    for (int c = lane; c < C; c += WARP) gx_sum += (dy[c] * w[c]) * x[c];
    float coef = warp_sum(gx_sum) / C * rs * rs;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) dx[c] += (dy[c] * w[c] - x[c] * coef) * rs;
}

/* dw sums dout * x * rstd over rows. */
struct rmsnorm_weight_term {
    const float *dout, *inp, *rstd;
    int C;
    __device__ void operator()(int i, int c, float v[1]) const {
        size_t at = (size_t)i * C + c;
        v[0] = dout[at] * (inp[at] * rstd[i]);
    }
};

static void cuda_rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                             const float *w, int n, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0) return;
    rmsnorm_fwd_kernel<<<ceil_div(n, ROWS_PER_BLOCK), ROWS_PER_BLOCK * WARP, 0, ctx->stream>>>(
        out, rstd, inp, w, n, C);
    LAUNCH_CHECK();
}

static void cuda_rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int n, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0 || C <= 0) return;
    if (dinp) {
        rmsnorm_dinp_kernel<<<ceil_div(n, ROWS_PER_BLOCK), ROWS_PER_BLOCK * WARP, 0, ctx->stream>>>(
            dinp, dout, inp, w, rstd, n, C);
        LAUNCH_CHECK();
    }
    if (dw)
        column_sums<1>(ctx, column_outputs<1>{{dw}}, n, C, rmsnorm_weight_term{dout, inp, rstd, C});
}

void cuda_ops_rmsnorm(sdp_backend *t) {
    t->rmsnorm_fwd = cuda_rmsnorm_fwd;
    t->rmsnorm_bwd = cuda_rmsnorm_bwd;
}
