/* Average pooling (kernel = stride = k) and global average pooling over NCHW activations. Each
 * (image, channel) plane is one OpenMP iteration and is written by nobody else, so there are no
 * races and the sums do not depend on the thread count. */
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C, int H,
                        int W, int k) {
    (void)be;
    int OH = H / k, OW = W / k, planes = B * C;
    float inv = 1.0f / (float)(k * k);
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W >= PARALLEL_MIN_ELEMS)
    for (int p = 0; p < planes; p++) {
        const float *x = inp + (size_t)p * H * W;
        float *y = out + (size_t)p * OH * OW;
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                float sum = 0.0f;
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < k; j++) sum += x[(oy * k + i) * W + ox * k + j];
                y[oy * OW + ox] = sum * inv;
            }
    }
}

static void avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C, int H,
                        int W, int k) {
    (void)be;
    if (!dinp) return;
    int OH = H / k, OW = W / k, planes = B * C;
    float inv = 1.0f / (float)(k * k);
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W >= PARALLEL_MIN_ELEMS)
    for (int p = 0; p < planes; p++) {
        float *dx = dinp + (size_t)p * H * W;
        const float *dy = dout + (size_t)p * OH * OW;
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                float g = dy[oy * OW + ox] * inv;
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < k; j++) dx[(oy * k + i) * W + ox * k + j] += g;
            }
    }
}

static void global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                               int H, int W) {
    (void)be;
    int planes = B * C;
    size_t hw = (size_t)H * W;
#pragma omp parallel for schedule(static) if (planes * hw >= PARALLEL_MIN_ELEMS)
    for (int p = 0; p < planes; p++) {
        const float *x = inp + (size_t)p * hw;
        double sum = 0;
        for (size_t i = 0; i < hw; i++) sum += x[i];
        out[p] = (float)(sum / (double)hw);
    }
}

static void global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                               int H, int W) {
    (void)be;
    if (!dinp) return;
    int planes = B * C;
    size_t hw = (size_t)H * W;
#pragma omp parallel for schedule(static) if (planes * hw >= PARALLEL_MIN_ELEMS)
    for (int p = 0; p < planes; p++) {
        float *dx = dinp + (size_t)p * hw, g = dout[p] / (float)hw;
        for (size_t i = 0; i < hw; i++) dx[i] += g;
    }
}

void cpu_ops_pool(sdp_backend *t) {
    t->avgpool_fwd = avgpool_fwd;
    t->avgpool_bwd = avgpool_bwd;
    t->global_avgpool_fwd = global_avgpool_fwd;
    t->global_avgpool_bwd = global_avgpool_bwd;
}
