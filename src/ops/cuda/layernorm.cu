/* LayerNorm over the last dimension, one warp per row: the warp's lanes stride the row and
 * combine their partial sums by shuffles. Statistics take two passes (mean, then the variance
 * about it), as on the CPU, so rows with a large mean keep their accuracy. The parameter
 * gradients are deterministic column sums (column_sums.cuh). */
#include "ops/cuda/column_sums.cuh"

enum { ROWS_PER_BLOCK = 8 }; /* one warp each */
#define LAYERNORM_EPS 1e-5f

__global__ void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int n, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= n) return;
    const float *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += WARP) sum += x[c];
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += WARP) sq += (x[c] - m) * (x[c] - m);
    float rs = 1.0f / sqrtf(warp_sum(sq) / C + LAYERNORM_EPS);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) o[c] = (x[c] - m) * rs * w[c] + b[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w. */
__global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int n,
                                      int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= n) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float g = dy[c] * w[c];
        g_sum += g;
        gx_sum += g * ((x[c] - m) * rs);
    }
    float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) {
        float xhat = (x[c] - m) * rs;
        dx[c] += (dy[c] * w[c] - g_mean - xhat * gx_mean) * rs;
    }
}

/* dw sums dout * xhat over rows, db sums dout. */
struct layernorm_param_terms {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ void operator()(int i, int c, float v[2]) const {
        size_t at = (size_t)i * C + c;
        v[0] = dout[at] * ((inp[at] - mean[i]) * rstd[i]);
        v[1] = dout[at];
    }
};

static void cuda_layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int n, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0) return;
    layernorm_fwd_kernel<<<ceil_div(n, ROWS_PER_BLOCK), ROWS_PER_BLOCK * WARP, 0, ctx->stream>>>(
        out, mean, rstd, inp, w, b, n, C);
    LAUNCH_CHECK();
}

static void cuda_layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int n, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0 || C <= 0) return;
    if (dinp) {
        layernorm_dinp_kernel<<<ceil_div(n, ROWS_PER_BLOCK), ROWS_PER_BLOCK * WARP, 0,
                                ctx->stream>>>(dinp, dout, inp, w, mean, rstd, n, C);
        LAUNCH_CHECK();
    }
    if (dw || db)
        column_sums<2>(ctx, column_outputs<2>{{dw, db}}, n, C,
                       layernorm_param_terms{dout, inp, mean, rstd, C});
}

void cuda_ops_layernorm(sdp_backend *t) {
    t->layernorm_fwd = cuda_layernorm_fwd;
    t->layernorm_bwd = cuda_layernorm_bwd;
}
