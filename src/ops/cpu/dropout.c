/* Inverted dropout over masks of bits (sdp/ops.h): drawing a mask from a counter-based stream,
 * applying it, and its backward. Each word of 32 elements is one unit of work, so the results do
 * not depend on the thread count. No restrict on the forward: it runs in place (out == inp). */
#include "ops/cpu/cpu_ops.h"

enum { PARALLEL_MIN_WORDS = 1 << 10 };

static void dropout_mask(const sdp_backend *be, uint32_t *mask, size_t n, sdp_dropout d) {
    (void)be;
    const size_t words = sdp_dropout_words(n);
    const uint32_t threshold = sdp_dropout_threshold(d.p);
#pragma omp parallel for schedule(static) if (words >= PARALLEL_MIN_WORDS)
    for (size_t w = 0; w < words; w++) {
        const size_t first = 32 * w, count = n - first < 32 ? n - first : 32;
        uint32_t bits = 0;
        for (size_t j = 0; j < count; j++)
            bits |= (uint32_t)sdp_dropout_keeps(d.key, first + j, threshold) << j;
        mask[w] = bits;
    }
}

static void dropout_fwd(const sdp_backend *be, float *out, const float *inp, const uint32_t *mask,
                        float scale, size_t n) {
    (void)be;
    const size_t words = sdp_dropout_words(n);
#pragma omp parallel for schedule(static) if (words >= PARALLEL_MIN_WORDS)
    for (size_t w = 0; w < words; w++) {
        const size_t first = 32 * w, count = n - first < 32 ? n - first : 32;
        const uint32_t bits = mask[w];
        for (size_t j = 0; j < count; j++)
            out[first + j] = (bits >> j) & 1u ? scale * inp[first + j] : 0.0f;
    }
}

static void dropout_bwd(const sdp_backend *be, float *dinp, const float *dout, const uint32_t *mask,
                        float scale, size_t n) {
    (void)be;
    if (!dinp) return;
    const size_t words = sdp_dropout_words(n);
#pragma omp parallel for schedule(static) if (words >= PARALLEL_MIN_WORDS)
    for (size_t w = 0; w < words; w++) {
        const size_t first = 32 * w, count = n - first < 32 ? n - first : 32;
        const uint32_t bits = mask[w];
        for (size_t j = 0; j < count; j++)
            if ((bits >> j) & 1u) dinp[first + j] += scale * dout[first + j];
    }
}

void cpu_ops_dropout(sdp_backend *t) {
    t->dropout_mask = dropout_mask;
    t->dropout_fwd = dropout_fwd;
    t->dropout_bwd = dropout_bwd;
}
