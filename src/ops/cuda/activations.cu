/* Elementwise activations with the formulas of the CPU kernels:
 *  - GELU, tanh approximation (GPT-2), evaluated as x * sigmoid(2u) with u = k (x + 0.044715 x^3),
 *    which equals 0.5 x (1 + tanh(u));
 *  - SwiGLU on rows [gate F | up F]: out = silu(gate) * up.
 * expf here is the accurate one (the build has no --use_fast_math). */
#include "ops/cuda/common.cuh"

#define GELU_K     0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* sigmoid(2u), i.e. 0.5 (1 + tanh(u)). */
__device__ __forceinline__ float gelu_gate(float x) {
    float u = GELU_K * (x + GELU_CUBIC * x * x * x);
    return sigmoid(2.0f * u);
}

__global__ void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
    FOR_EACH_INDEX(i, n) out[i] = inp[i] * gelu_gate(inp[i]);
}

/* d/dx = s + x * 2 s (1 - s) du/dx with s = sigmoid(2u). */
__global__ void gelu_bwd_kernel(float *dinp, const float *dout, const float *inp, size_t n) {
    FOR_EACH_INDEX(i, n) {
        float x = inp[i], s = gelu_gate(x);
        float du_dx = GELU_K * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] += (s + x * 2.0f * s * (1.0f - s) * du_dx) * dout[i];
    }
}

/* One thread per output element (row i, unit f). */
__global__ void swiglu_fwd_kernel(float *out, const float *inp, size_t n_out, int F) {
    FOR_EACH_INDEX(j, n_out) {
        size_t i = j / F, f = j % F;
        const float *gate = inp + i * 2 * F, *up = gate + F;
        float g = gate[f];
        out[j] = g * sigmoid(g) * up[f];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g). */
__global__ void swiglu_bwd_kernel(float *dinp, const float *dout, const float *inp, size_t n_out,
                                  int F) {
    FOR_EACH_INDEX(j, n_out) {
        size_t i = j / F, f = j % F;
        const float *gate = inp + i * 2 * F, *up = gate + F;
        float *dgate = dinp + i * 2 * F, *dup = dgate + F;
        float g = gate[f], s = sigmoid(g), dy = dout[j];
        dgate[f] += dy * up[f] * s * (1.0f + g * (1.0f - s));
        dup[f] += dy * g * s;
    }
}

static void cuda_gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return;
    gelu_fwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, inp, n);
    LAUNCH_CHECK();
}

static void cuda_gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                          size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dinp || n == 0) return;
    gelu_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(dinp, dout, inp,
                                                                                    n);
    LAUNCH_CHECK();
}

static void cuda_swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    size_t n_out = (size_t)n * F;
    if (n_out == 0) return;
    swiglu_fwd_kernel<<<elementwise_blocks(n_out), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, inp,
                                                                                          n_out, F);
    LAUNCH_CHECK();
}

static void cuda_swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                            int n, int F) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    size_t n_out = (size_t)n * F;
    if (!dinp || n_out == 0) return;
    swiglu_bwd_kernel<<<elementwise_blocks(n_out), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dinp, dout, inp, n_out, F);
    LAUNCH_CHECK();
}

void cuda_ops_activations(sdp_backend *t) {
    t->gelu_fwd = cuda_gelu_fwd;
    t->gelu_bwd = cuda_gelu_bwd;
    t->swiglu_fwd = cuda_swiglu_fwd;
    t->swiglu_bwd = cuda_swiglu_bwd;
}
