/* Fully connected layer, weights [out, in] as in PyTorch: three cuBLAS products, plus the bias
 * (added by a broadcast kernel) and its gradient (deterministic column sums). */
#include "ops/cuda/column_sums.cuh"

__global__ void add_bias_kernel(float *out, const float *bias, size_t n, int oc) {
    FOR_EACH_INDEX(i, n) out[i] += bias[i % oc];
}

/* The bias gradient sums dout over rows. */
struct dout_term {
    const float *dout;
    int oc;
    __device__ void operator()(int i, int o, float v[1]) const {
        v[0] = dout[(size_t)i * oc + o];
    }
};

/* The gradient of a slice of a bias: columns col0.. of rows ld apart. */
struct dout_slice_term {
    const float *dout;
    int ld, col0;
    __device__ void operator()(int i, int j, float v[1]) const {
        v[0] = dout[(size_t)i * ld + col0 + j];
    }
};

static void cuda_linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                            const float *bias, int n, int ic, int oc) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    /* out[n, oc] = inp[n, ic] w[oc, ic]^T */
    sdp_cuda_gemm(ctx, false, true, n, oc, ic, 1.0f, inp, ic, w, ic, 0.0f, out, oc);
    size_t total = (size_t)n * oc;
    if (!bias || total == 0) return;
    add_bias_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, bias,
                                                                                        total, oc);
    LAUNCH_CHECK();
}

static void cuda_linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int n, int ic,
                            int oc) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    /* dinp[n, ic] += dout[n, oc] w[oc, ic] */
    if (dinp) sdp_cuda_gemm(ctx, false, false, n, ic, oc, 1.0f, dout, oc, w, ic, 1.0f, dinp, ic);
    /* dw[oc, ic] += dout[n, oc]^T inp[n, ic] */
    if (dw) sdp_cuda_gemm(ctx, true, false, oc, ic, n, 1.0f, dout, oc, inp, ic, 1.0f, dw, ic);
    if (dbias) column_sums<1>(ctx, column_outputs<1>{{dbias}}, n, oc, dout_term{dout, oc});
}

/* dbias[j] += sum over rows r < n of dout[r * ld + col0 + j], j < len (the gradient of a slice of
 * a bias; the CPU counterpart is the transformer's sliced bias gradient). Deterministic. */
static void cuda_bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n,
                                int ld, int col0, int len) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(col0 >= 0 && len >= 0 && col0 + len <= ld);
    column_sums<1>(ctx, column_outputs<1>{{dbias}}, n, len, dout_slice_term{dout, ld, col0});
}

void cuda_ops_linear(sdp_backend *t) {
    t->linear_fwd = cuda_linear_fwd;
    t->linear_bwd = cuda_linear_bwd;
    t->bias_slice_bwd = cuda_bias_slice_bwd;
}
