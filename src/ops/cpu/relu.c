/* ReLU. The backward reads the saved output rather than the input: the two are positive at the
 * same places, and needing only the output lets the forward overwrite its input. */
#include "sdp/ops_vision.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 16 };

void sdp_relu_fwd(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void sdp_relu_bwd(float *dinp, const float *dout, const float *out, size_t n) {
    if (!dinp) return;
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}
