/* Scaled residual connection out = a + s * b (s = 1 is the plain residual). No restrict: the
 * forward is used in place (out == a). */
#include "sdp/ops.h"

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

void sdp_residual_fwd(float *out, const float *a, const float *b, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + s * b[i];
}

void sdp_residual_bwd(float *da, float *db, const float *dout, float s, size_t n) {
    if (da) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    }
    if (db) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) db[i] += s * dout[i];
    }
}
