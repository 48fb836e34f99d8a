/* LayerNorm over the last dimension. Statistics are accumulated in double (two passes: mean, then
 * the variance about it) so long rows keep full float accuracy. The backward splits into a
 * row-parallel part (dinp) and a column-parallel part (dw, db), so no two threads ever add into
 * the same element and the sums run in a fixed order. */
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };
enum { COLUMN_STRIP = 64 };
static const double LAYERNORM_EPS = 1e-5;

static void layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                          const float *inp, const float *w, const float *b, int n, int C) {
    (void)be;
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *x = inp + (size_t)i * C;
        double sum = 0;
        for (int c = 0; c < C; c++) sum += x[c];
        double m = sum / C;
        double sq = 0;
        for (int c = 0; c < C; c++) sq += (x[c] - m) * (x[c] - m);
        double rs = 1.0 / sqrt(sq / C + LAYERNORM_EPS);
        float mf = (float)m, rsf = (float)rs;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - mf) * rsf * w[c] + b[c];
        mean[i] = mf;
        rstd[i] = rsf;
    }
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w, xhat the normed input. */
static void layernorm_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int n, int C) {
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float m = mean[i], rs = rstd[i];
        double g_sum = 0, gx_sum = 0;
        for (int c = 0; c < C; c++) {
            float g = dy[c] * w[c];
            g_sum += g;
            gx_sum += g * ((x[c] - m) * rs);
        }
        float g_mean = (float)(g_sum / C), gx_mean = (float)(gx_sum / C);
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * rs;
            dx[c] += (dy[c] * w[c] - g_mean - xhat * gx_mean) * rs;
        }
    }
}

/* dw += sum_i dout * xhat ; db += sum_i dout. One thread per strip of columns, rows in order. */
static void layernorm_dparams(float *dw, float *db, const float *dout, const float *inp,
                              const float *mean, const float *rstd, int n, int C) {
    int nstrips = (C + COLUMN_STRIP - 1) / COLUMN_STRIP;
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int s = 0; s < nstrips; s++) {
        int c0 = s * COLUMN_STRIP;
        int width = C - c0 < COLUMN_STRIP ? C - c0 : COLUMN_STRIP;
        double dw_sum[COLUMN_STRIP] = {0}, db_sum[COLUMN_STRIP] = {0};
        for (int i = 0; i < n; i++) {
            const float *x = inp + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
            float m = mean[i], rs = rstd[i];
            for (int k = 0; k < width; k++) {
                dw_sum[k] += dy[k] * ((x[k] - m) * rs);
                db_sum[k] += dy[k];
            }
        }
        for (int k = 0; k < width; k++) {
            if (dw) dw[c0 + k] += (float)dw_sum[k];
            if (db) db[c0 + k] += (float)db_sum[k];
        }
    }
}

static void layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db,
                          const float *dout, const float *inp, const float *w, const float *mean,
                          const float *rstd, int n, int C) {
    (void)be;
    if (dinp) layernorm_dinp(dinp, dout, inp, w, mean, rstd, n, C);
    if (dw || db) layernorm_dparams(dw, db, dout, inp, mean, rstd, n, C);
}

void cpu_ops_layernorm(sdp_backend *t) {
    t->layernorm_fwd = layernorm_fwd;
    t->layernorm_bwd = layernorm_bwd;
}
