/* ReLU. The backward reads the saved output rather than the input: the two are positive at the
 * same places, and needing only the output lets the forward overwrite its input. */
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 16 };

static void relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static void relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                     size_t n) {
    (void)be;
    if (!dinp) return;
#pragma omp parallel for simd schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

void cpu_ops_relu(sdp_backend *t) {
    t->relu_fwd = relu_fwd;
    t->relu_bwd = relu_bwd;
}
