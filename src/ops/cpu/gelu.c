/* GELU with the tanh approximation used by GPT-2:
 *   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi). */
#include "sdp/ops.h"

#include <math.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };
#define GELU_K     0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

void sdp_gelu_fwd(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void sdp_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n) {
    if (!dinp) return; /* masked out by the caller */
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_CUBIC * x * x * x);
        float th = tanhf(u);
        float du_dx = GELU_K * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
        dinp[i] += grad * dout[i];
    }
}
