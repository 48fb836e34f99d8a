/* Batch normalization over NCHW activations, per channel, as nn.BatchNorm2d (eps 1e-5, momentum
 * 0.1). Each channel is one OpenMP iteration: its B planes are summed in order, in double, so the
 * results are the same for every thread count. Statistics take two passes (the mean, then the
 * variance about it); one channel's planes usually stay in cache between the passes. */
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };
static const double BN_EPS = 1e-5;
static const double BN_MOMENTUM = 0.1;

/* Offset of plane (b, c) of an NCHW tensor with hw pixels per plane. */
static size_t plane(int b, int c, int C, size_t hw) {
    return ((size_t)b * C + c) * hw;
}

static void batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                                float *running_mean, float *running_var, const float *inp,
                                const float *gamma, const float *beta, int B, int C, int H, int W) {
    (void)be;
    size_t hw = (size_t)H * W, n = (size_t)B * hw;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN_ELEMS)
    for (int c = 0; c < C; c++) {
        double sum = 0, sq = 0;
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++) sum += x[i];
        }
        double m = sum / (double)n;
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++) sq += (x[i] - m) * (x[i] - m);
        }
        double var = sq / (double)n;
        float mf = (float)m, rs = (float)(1.0 / sqrt(var + BN_EPS)), g = gamma[c], be = beta[c];
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw);
            float *y = out + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++) y[i] = (x[i] - mf) * rs * g + be;
        }
        mean[c] = mf;
        rstd[c] = rs;
        if (running_mean) {
            double unbiased = var * (double)n / (double)(n - 1);
            running_mean[c] = (float)((1 - BN_MOMENTUM) * running_mean[c] + BN_MOMENTUM * m);
            running_var[c] = (float)((1 - BN_MOMENTUM) * running_var[c] + BN_MOMENTUM * unbiased);
        }
    }
}

static void batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                               const float *running_mean, const float *running_var,
                               const float *gamma, const float *beta, int B, int C, int H, int W) {
    (void)be;
    size_t hw = (size_t)H * W, n = (size_t)B * hw;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN_ELEMS)
    for (int c = 0; c < C; c++) {
        float rs = (float)(1.0 / sqrt((double)running_var[c] + BN_EPS));
        float m = running_mean[c], g = gamma[c], be = beta[c];
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw);
            float *y = out + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++) y[i] = (x[i] - m) * rs * g + be;
        }
    }
}

/* With xhat = (x - mean) * rstd and n values per channel:
 *   dbeta += sum dy ; dgamma += sum dy * xhat
 *   dinp  += gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
static void batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                          const float *dout, const float *inp, const float *gamma,
                          const float *mean, const float *rstd, int B, int C, int H, int W) {
    (void)be;
    if (!dinp && !dgamma && !dbeta) return;
    size_t hw = (size_t)H * W, n = (size_t)B * hw;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN_ELEMS)
    for (int c = 0; c < C; c++) {
        float m = mean[c], rs = rstd[c];
        double dy_sum = 0, dy_xhat_sum = 0;
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw), *dy = dout + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++) {
                dy_sum += dy[i];
                dy_xhat_sum += dy[i] * ((x[i] - m) * rs);
            }
        }
        if (dbeta) dbeta[c] += (float)dy_sum;
        if (dgamma) dgamma[c] += (float)dy_xhat_sum;
        if (!dinp) continue;
        float dy_mean = (float)(dy_sum / (double)n);
        float dy_xhat_mean = (float)(dy_xhat_sum / (double)n), scale = gamma[c] * rs;
        for (int b = 0; b < B; b++) {
            const float *x = inp + plane(b, c, C, hw), *dy = dout + plane(b, c, C, hw);
            float *dx = dinp + plane(b, c, C, hw);
            for (size_t i = 0; i < hw; i++)
                dx[i] += scale * (dy[i] - dy_mean - (x[i] - m) * rs * dy_xhat_mean);
        }
    }
}

void cpu_ops_batchnorm(sdp_backend *t) {
    t->batchnorm_fwd_train = batchnorm_fwd_train;
    t->batchnorm_fwd_eval = batchnorm_fwd_eval;
    t->batchnorm_bwd = batchnorm_bwd;
}
