/* Inverted dropout over masks of bits, as src/ops/cpu/dropout.c: a mask drawn from a
 * counter-based stream (sdp_dropout_keeps of sdp/ops.h, compiled for the device too, so the bits
 * are the CPU's), applied, and its backward. The mask kernel computes one 32-element word per
 * thread; the others one element per thread. No __restrict__ on the forward: it runs in place
 * (out == inp), which is safe because each thread reads its element before writing it. */
#include "ops/cuda/common.cuh"

__global__ void dropout_mask_kernel(uint32_t *mask, size_t n, size_t words, uint64_t key,
                                    uint32_t threshold) {
    FOR_EACH_INDEX(w, words) {
        const size_t first = 32 * w, count = n - first < 32 ? n - first : 32;
        uint32_t bits = 0;
        for (size_t j = 0; j < count; j++)
            bits |= (uint32_t)sdp_dropout_keeps(key, first + j, threshold) << j;
        mask[w] = bits;
    }
}

__device__ __forceinline__ bool mask_bit(const uint32_t *mask, size_t i) {
    return (mask[i / 32] >> (i % 32)) & 1u;
}

__global__ void dropout_fwd_kernel(float *out, const float *inp, const uint32_t *mask, float scale,
                                   size_t n) {
    FOR_EACH_INDEX(i, n) out[i] = mask_bit(mask, i) ? scale * inp[i] : 0.0f;
}

__global__ void dropout_bwd_kernel(float *dinp, const float *dout, const uint32_t *mask,
                                   float scale, size_t n) {
    FOR_EACH_INDEX(i, n) {
        if (mask_bit(mask, i)) dinp[i] += scale * dout[i];
    }
}

static void cuda_dropout_mask(const sdp_backend *be, uint32_t *mask, size_t n, sdp_dropout d) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return;
    const size_t words = sdp_dropout_words(n);
    dropout_mask_kernel<<<elementwise_blocks(words), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        mask, n, words, d.key, sdp_dropout_threshold(d.p));
    LAUNCH_CHECK();
}

static void cuda_dropout_fwd(const sdp_backend *be, float *out, const float *inp,
                             const uint32_t *mask, float scale, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return;
    dropout_fwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        out, inp, mask, scale, n);
    LAUNCH_CHECK();
}

static void cuda_dropout_bwd(const sdp_backend *be, float *dinp, const float *dout,
                             const uint32_t *mask, float scale, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dinp || n == 0) return;
    dropout_bwd_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dinp, dout, mask, scale, n);
    LAUNCH_CHECK();
}

void cuda_ops_dropout(sdp_backend *t) {
    t->dropout_mask = cuda_dropout_mask;
    t->dropout_fwd = cuda_dropout_fwd;
    t->dropout_bwd = cuda_dropout_bwd;
}
