/* Batch normalization over NCHW activations with the formulas of src/ops/cpu/batchnorm.c
 * (nn.BatchNorm2d: eps 1e-5, momentum 0.1, biased variance for normalising, unbiased for the
 * running variance), without atomics:
 *  - Per-channel sums run in double, in two steps: a block per (channel, chunk of its B*H*W
 *    values) writes a partial sum to the workspace, then one thread per channel adds its chunks
 *    in order. The launch shape fixes the order, so results are the same run to run; they differ
 *    from the CPU's (which sums each channel in order) only by the rounding of double sums.
 *  - Statistics take two passes, as on the CPU: the mean, then the squared deviations about it.
 *  - The elementwise formulas round each product and sum on their own (__fmul_rn, __fadd_rn, and
 *    __dmul_rn for the running statistics), as the CPU's C does (ISO C: no FP contraction), where
 *    nvcc would otherwise fuse them into FMAs.
 * Indices are 32-bit: every tensor is checked to have fewer than 2^31 elements. */
#include "ops/cuda/common.cuh"

#include <limits.h>

enum {
    BN_THREADS = 256,
    BN_MIN_CHUNK = 4 * BN_THREADS, /* fewer values per block and the partials outweigh them */
    BN_MAX_CHUNKS = 64             /* blocks per channel: enough to fill a GPU for 16 channels */
};
#define BN_EPS      1e-5
#define BN_MOMENTUM 0.1

/* Elementwise loop over [0, n), n < 2^31. */
#define FOR_EACH_INDEX_32(i, n)                                                                    \
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

/* One channel's values as the CPU visits them: value j < n = B*hw is pixel j % hw of image j / hw.
 */
__device__ __forceinline__ unsigned channel_at(unsigned j, unsigned c, unsigned C, unsigned hw) {
    const unsigned b = j / hw;
    return (b * C + c) * hw + (j - b * hw);
}

__device__ __forceinline__ double2 add2(double2 a, double2 b) {
    return make_double2(a.x + b.x, a.y + b.y);
}

/* Sum over the block (BN_THREADS threads), valid in thread 0. */
__device__ double2 block_sum2(double2 v, double2 *shared) {
    const unsigned lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    for (int o = WARP / 2; o > 0; o /= 2)
        v = add2(v, make_double2(__shfl_xor_sync(0xffffffffu, v.x, o),
                                 __shfl_xor_sync(0xffffffffu, v.y, o)));
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp != 0) return v;
    v = lane < BN_THREADS / WARP ? shared[lane] : make_double2(0.0, 0.0);
    for (int o = WARP / 2; o > 0; o /= 2)
        v = add2(v, make_double2(__shfl_xor_sync(0xffffffffu, v.x, o),
                                 __shfl_xor_sync(0xffffffffu, v.y, o)));
    return v;
}

/* partials[c * nchunks + k] = the sum of term(index, c) over chunk k of channel c, where term
 * gives two sums at once as a double2. Grid: (C, nchunks). */
template <class Term>
__global__ void __launch_bounds__(BN_THREADS)
    channel_partials_kernel(double2 *partials, unsigned C, unsigned hw, unsigned n, unsigned chunk,
                            Term term) {
    __shared__ double2 shared[BN_THREADS / WARP];
    const unsigned c = blockIdx.x, begin = blockIdx.y * chunk;
    const unsigned end = min(n, begin + chunk);
    double2 acc = make_double2(0.0, 0.0);
    for (unsigned j = begin + threadIdx.x; j < end; j += BN_THREADS)
        acc = add2(acc, term(channel_at(j, c, C, hw), c));
    acc = block_sum2(acc, shared);
    if (threadIdx.x == 0) partials[(size_t)c * gridDim.y + blockIdx.y] = acc;
}

/* A channel's chunks, added in order. */
__device__ double2 channel_total(const double2 *partials, unsigned c, unsigned nchunks) {
    double2 s = make_double2(0.0, 0.0);
    for (unsigned k = 0; k < nchunks; k++) s = add2(s, partials[(size_t)c * nchunks + k]);
    return s;
}

/* How a channel's n values are cut into blocks. */
typedef struct {
    unsigned C, hw, n, chunk, nchunks;
} bn_shape;

static void check_dims(const char *what, int B, int C, int H, int W) {
    SDP_CHECK(B >= 1 && C >= 1 && H >= 1 && W >= 1,
              "%s: sizes B=%d C=%d H=%d W=%d must all be >= 1", what, B, C, H, W);
    const long long total = (long long)B * C * H * W;
    SDP_CHECK(total <= INT_MAX,
              "%s: %lld values exceed the CUDA kernels' 2^31 limit: use a smaller batch", what,
              total);
}

static bn_shape bn_shape_of(int B, int C, int H, int W) {
    bn_shape s;
    s.C = (unsigned)C;
    s.hw = (unsigned)H * (unsigned)W;
    s.n = (unsigned)B * s.hw;
    s.chunk = ceil_div(s.n, BN_MAX_CHUNKS);
    if (s.chunk < BN_MIN_CHUNK) s.chunk = BN_MIN_CHUNK;
    s.nchunks = ceil_div(s.n, s.chunk);
    return s;
}

template <class Term>
static void channel_partials(sdp_cuda_ctx *ctx, double2 *partials, const bn_shape &s, Term term) {
    dim3 grid(s.C, s.nchunks);
    channel_partials_kernel<Term>
        <<<grid, BN_THREADS, 0, ctx->stream>>>(partials, s.C, s.hw, s.n, s.chunk, term);
    LAUNCH_CHECK();
}

static unsigned channel_blocks(unsigned C) {
    return ceil_div(C, ELEMENTWISE_THREADS);
}

/* ---- training forward ---------------------------------------------------------------------- */

struct value_term { /* sums x */
    const float *x;
    __device__ double2 operator()(unsigned i, unsigned) const {
        return make_double2((double)x[i], 0.0);
    }
};

struct deviation_term { /* sums (x - mean)^2, in double as on the CPU */
    const float *x;
    const double *mean;
    __device__ double2 operator()(unsigned i, unsigned c) const {
        const double d = (double)x[i] - mean[c];
        return make_double2(d * d, 0.0);
    }
};

__global__ void channel_mean_kernel(double *mean, const double2 *partials, bn_shape s) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < s.C) mean[c] = channel_total(partials, c, s.nchunks).x / (double)s.n;
}

/* The saved statistics and the running-statistic update, in the CPU's double arithmetic. */
__global__ void channel_stats_kernel(float *mean, float *rstd, float *running_mean,
                                     float *running_var, const double *mean_d,
                                     const double2 *partials, bn_shape s) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= s.C) return;
    const double m = mean_d[c], var = channel_total(partials, c, s.nchunks).x / (double)s.n;
    mean[c] = (float)m;
    rstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
    if (!running_mean) return;
    const double unbiased = var * (double)s.n / (double)(s.n - 1);
    running_mean[c] = (float)__dadd_rn(__dmul_rn(1 - BN_MOMENTUM, (double)running_mean[c]),
                                       __dmul_rn(BN_MOMENTUM, m));
    running_var[c] = (float)__dadd_rn(__dmul_rn(1 - BN_MOMENTUM, (double)running_var[c]),
                                      __dmul_rn(BN_MOMENTUM, unbiased));
}

/* (x - mean) * rstd * gamma + beta, rounded step by step as the CPU's expression. */
__device__ __forceinline__ float normalize(float x, float mean, float rstd, float gamma,
                                           float beta) {
    return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mean), rstd), gamma), beta);
}

__global__ void normalize_kernel(float *out, const float *inp, const float *mean, const float *rstd,
                                 const float *gamma, const float *beta, unsigned total, unsigned C,
                                 unsigned hw) {
    FOR_EACH_INDEX_32(i, total) {
        const unsigned c = (i / hw) % C;
        out[i] = normalize(inp[i], mean[c], rstd[c], gamma[c], beta[c]);
    }
}

static void cuda_batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                                     float *running_mean, float *running_var, const float *inp,
                                     const float *gamma, const float *beta, int B, int C, int H,
                                     int W) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    check_dims("sdp_batchnorm_fwd_train", B, C, H, W);
    const bn_shape s = bn_shape_of(B, C, H, W);
    const size_t partial_bytes = (size_t)s.C * s.nchunks * sizeof(double2);
    char *ws = (char *)sdp_cuda_workspace(ctx, partial_bytes + (size_t)s.C * sizeof(double));
    double2 *partials = (double2 *)ws;
    double *mean_d = (double *)(ws + partial_bytes); /* double2-aligned: partial_bytes is */
    channel_partials(ctx, partials, s, value_term{inp});
    channel_mean_kernel<<<channel_blocks(s.C), ELEMENTWISE_THREADS, 0, ctx->stream>>>(mean_d,
                                                                                      partials, s);
    LAUNCH_CHECK();
    channel_partials(ctx, partials, s, deviation_term{inp, mean_d});
    channel_stats_kernel<<<channel_blocks(s.C), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        mean, rstd, running_mean, running_var, mean_d, partials, s);
    LAUNCH_CHECK();
    const unsigned total = s.n * s.C;
    normalize_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        out, inp, mean, rstd, gamma, beta, total, s.C, s.hw);
    LAUNCH_CHECK();
}

/* ---- evaluation forward -------------------------------------------------------------------- */

__global__ void normalize_eval_kernel(float *out, const float *inp, const float *running_mean,
                                      const float *running_var, const float *gamma,
                                      const float *beta, unsigned total, unsigned C, unsigned hw) {
    FOR_EACH_INDEX_32(i, total) {
        const unsigned c = (i / hw) % C;
        const float rstd = (float)(1.0 / sqrt((double)running_var[c] + BN_EPS));
        out[i] = normalize(inp[i], running_mean[c], rstd, gamma[c], beta[c]);
    }
}

static void cuda_batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                                    const float *running_mean, const float *running_var,
                                    const float *gamma, const float *beta, int B, int C, int H,
                                    int W) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    check_dims("sdp_batchnorm_fwd_eval", B, C, H, W);
    const bn_shape s = bn_shape_of(B, C, H, W);
    const unsigned total = s.n * s.C;
    normalize_eval_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        out, inp, running_mean, running_var, gamma, beta, total, s.C, s.hw);
    LAUNCH_CHECK();
}

/* ---- backward ------------------------------------------------------------------------------ */

/* xhat = (x - mean) * rstd, in float as on the CPU. */
__device__ __forceinline__ float xhat_of(float x, float mean, float rstd) {
    return __fmul_rn(__fsub_rn(x, mean), rstd);
}

struct gradient_term { /* sums dy and dy * xhat (the float product, as on the CPU) */
    const float *x, *dy, *mean, *rstd;
    __device__ double2 operator()(unsigned i, unsigned c) const {
        const float d = dy[i];
        return make_double2((double)d, (double)__fmul_rn(d, xhat_of(x[i], mean[c], rstd[c])));
    }
};

/* Per channel, what dinp needs: mean(dy), mean(dy * xhat) and gamma * rstd. */
typedef struct {
    float dy_mean, dy_xhat_mean, scale;
} bn_coeffs;

__global__ void channel_grads_kernel(float *dgamma, float *dbeta, bn_coeffs *coeffs,
                                     const double2 *partials, const float *gamma, const float *rstd,
                                     bn_shape s) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= s.C) return;
    const double2 sums = channel_total(partials, c, s.nchunks); /* (dy, dy * xhat) */
    if (dbeta) dbeta[c] += (float)sums.x;
    if (dgamma) dgamma[c] += (float)sums.y;
    if (coeffs)
        coeffs[c] = bn_coeffs{(float)(sums.x / (double)s.n), (float)(sums.y / (double)s.n),
                              __fmul_rn(gamma[c], rstd[c])};
}

/* dinp += scale * (dy - mean(dy) - xhat * mean(dy * xhat)), rounded as the CPU's expression. */
__global__ void input_grad_kernel(float *dinp, const float *dout, const float *inp,
                                  const float *mean, const float *rstd, const bn_coeffs *coeffs,
                                  unsigned total, unsigned C, unsigned hw) {
    FOR_EACH_INDEX_32(i, total) {
        const unsigned c = (i / hw) % C;
        const bn_coeffs k = coeffs[c];
        const float t = __fmul_rn(xhat_of(inp[i], mean[c], rstd[c]), k.dy_xhat_mean);
        const float g = __fsub_rn(__fsub_rn(dout[i], k.dy_mean), t);
        dinp[i] = __fadd_rn(dinp[i], __fmul_rn(k.scale, g));
    }
}

static void cuda_batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                               const float *dout, const float *inp, const float *gamma,
                               const float *mean, const float *rstd, int B, int C, int H, int W) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    check_dims("sdp_batchnorm_bwd", B, C, H, W);
    if (!dinp && !dgamma && !dbeta) return;
    const bn_shape s = bn_shape_of(B, C, H, W);
    const size_t partial_bytes = (size_t)s.C * s.nchunks * sizeof(double2);
    char *ws = (char *)sdp_cuda_workspace(ctx, partial_bytes + (size_t)s.C * sizeof(bn_coeffs));
    double2 *partials = (double2 *)ws;
    bn_coeffs *coeffs = dinp ? (bn_coeffs *)(ws + partial_bytes) : NULL;
    channel_partials(ctx, partials, s, gradient_term{inp, dout, mean, rstd});
    channel_grads_kernel<<<channel_blocks(s.C), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dgamma, dbeta, coeffs, partials, gamma, rstd, s);
    LAUNCH_CHECK();
    if (!dinp) return;
    const unsigned total = s.n * s.C;
    input_grad_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dinp, dout, inp, mean, rstd, coeffs, total, s.C, s.hw);
    LAUNCH_CHECK();
}

void cuda_ops_batchnorm(sdp_backend *t) {
    t->batchnorm_fwd_train = cuda_batchnorm_fwd_train;
    t->batchnorm_fwd_eval = cuda_batchnorm_fwd_eval;
    t->batchnorm_bwd = cuda_batchnorm_bwd;
}
