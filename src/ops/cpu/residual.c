/* Scaled residual connection out = a + s * b (s = 1 is the plain residual). No restrict: the
 * forward is used in place (out == a). */
#include "ops/cpu/cpu_ops.h"

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b, float s,
                         size_t n) {
    (void)be;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + s * b[i];
}

static void residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout, float s,
                         size_t n) {
    (void)be;
    if (da) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    }
    if (db) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) db[i] += s * dout[i];
    }
}

void cpu_ops_residual(sdp_backend *t) {
    t->residual_fwd = residual_fwd;
    t->residual_bwd = residual_bwd;
}
