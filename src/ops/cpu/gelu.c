/* GELU with the tanh approximation used by GPT-2:
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2/pi).
 * Since 0.5 (1 + tanh(u)) = sigmoid(2u), it is evaluated as x * sigmoid(2u): the same function,
 * and e^x has a branch-free form (fast_exp.h) that vectorises, where libm's tanhf and expf are
 * scalar calls: this kernel runs on all 4C channels of every MLP, so that matters. */
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };
#define GELU_K     0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* sigmoid(2u), i.e. 0.5 (1 + tanh(u)); saturates to 1 for large u, and for large -u to below
 * 1e-38 (where tanh would give 0): either way x times it is below any float that matters. */
static inline float half_one_plus_tanh(float x) {
    float u = GELU_K * (x + GELU_CUBIC * x * x * x);
    return 1.0f / (1.0f + exp_clamped(-2.0f * u));
}

static void gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * half_one_plus_tanh(inp[i]);
}

/* d/dx = s + x * 2 s (1 - s) du/dx with s = sigmoid(2u), because 0.5 sech^2(u) = 2 s (1 - s). */
static void gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                     size_t n) {
    (void)be;
    if (!dinp) return; /* masked out by the caller */
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = half_one_plus_tanh(x);
        float du_dx = GELU_K * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] += (s + x * 2.0f * s * (1.0f - s) * du_dx) * dout[i];
    }
}

void cpu_ops_gelu(sdp_backend *t) {
    t->gelu_fwd = gelu_fwd;
    t->gelu_bwd = gelu_bwd;
}
