/* SwiGLU gating: each input row is [gate F | up F] and out = silu(gate) * up, with
 * silu(g) = g * sigmoid(g). */
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

/* With the vectorisable exp (libm's expf is a scalar call); below x = -88 it gives 6e-39
 * instead of e^x, a difference no float product of it can show. */
static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + exp_clamped(-x));
}

static void swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F) {
    (void)be;
    size_t work = (size_t)n * (size_t)F;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *gate = inp + (size_t)i * 2 * F, *up = gate + F;
        float *o = out + (size_t)i * F;
        for (int f = 0; f < F; f++) o[f] = gate[f] * sigmoidf(gate[f]) * up[f];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g). */
static void swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                       int n, int F) {
    (void)be;
    if (!dinp) return; /* masked out by the caller */
    size_t work = (size_t)n * (size_t)F;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *gate = inp + (size_t)i * 2 * F, *up = gate + F;
        const float *dy = dout + (size_t)i * F;
        float *dgate = dinp + (size_t)i * 2 * F, *dup = dgate + F;
        for (int f = 0; f < F; f++) {
            float g = gate[f], s = sigmoidf(g);
            dgate[f] += dy[f] * up[f] * s * (1.0f + g * (1.0f - s));
            dup[f] += dy[f] * g * s;
        }
    }
}

void cpu_ops_swiglu(sdp_backend *t) {
    t->swiglu_fwd = swiglu_fwd;
    t->swiglu_bwd = swiglu_bwd;
}
