/* RMSNorm over the last dimension (no centring, no bias). Sums of squares are accumulated in
 * double; the backward is split into row-parallel dinp and column-parallel dw, as in layernorm.c,
 * so it is race-free and deterministic. */
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };
enum { COLUMN_STRIP = 64 };
static const double RMSNORM_EPS = 1e-5;

static void rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                        const float *w, int n, int C) {
    (void)be;
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *x = inp + (size_t)i * C;
        double sq = 0;
        for (int c = 0; c < C; c++) sq += (double)x[c] * x[c];
        float rs = (float)(1.0 / sqrt(sq / C + RMSNORM_EPS));
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * rs * w[c];
        rstd[i] = rs;
    }
}

/* With g = dout * w: dinp += rstd * (g - x * rstd^2 * mean(g * x)). */
static void rmsnorm_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                         const float *rstd, int n, int C) {
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float rs = rstd[i];
        double gx_sum = 0;
        for (int c = 0; c < C; c++) gx_sum += (double)(dy[c] * w[c]) * x[c];
        float coef = (float)(gx_sum / C) * rs * rs;
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) dx[c] += (dy[c] * w[c] - x[c] * coef) * rs;
    }
}

/* dw += sum_i dout * x * rstd. One thread per strip of columns, rows in order. */
static void rmsnorm_dw(float *dw, const float *dout, const float *inp, const float *rstd, int n,
                       int C) {
    int nstrips = (C + COLUMN_STRIP - 1) / COLUMN_STRIP;
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int s = 0; s < nstrips; s++) {
        int c0 = s * COLUMN_STRIP;
        int width = C - c0 < COLUMN_STRIP ? C - c0 : COLUMN_STRIP;
        double sum[COLUMN_STRIP] = {0};
        for (int i = 0; i < n; i++) {
            const float *x = inp + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
            float rs = rstd[i];
            for (int k = 0; k < width; k++) sum[k] += dy[k] * (x[k] * rs);
        }
        for (int k = 0; k < width; k++) dw[c0 + k] += (float)sum[k];
    }
}

static void rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w, const float *rstd, int n, int C) {
    (void)be;
    if (dinp) rmsnorm_dinp(dinp, dout, inp, w, rstd, n, C);
    if (dw) rmsnorm_dw(dw, dout, inp, rstd, n, C);
}

void cpu_ops_rmsnorm(sdp_backend *t) {
    t->rmsnorm_fwd = rmsnorm_fwd;
    t->rmsnorm_bwd = rmsnorm_bwd;
}
