/* Average pooling (kernel = stride = k) and global average pooling over NCHW activations. Each
 * (image, channel) plane is one OpenMP iteration and is written by nobody else, so there are no
 * races and the sums do not depend on the thread count. */
#include "sdp/check.h"
#include "sdp/ops_vision.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void check_pool(const char *what, int B, int C, int H, int W, int k) {
    SDP_CHECK(B >= 1 && C >= 1 && H >= 1 && W >= 1,
              "%s: sizes B=%d C=%d H=%d W=%d must all be >= 1", what, B, C, H, W);
    SDP_CHECK(k >= 1 && k <= H && k <= W,
              "%s: pooling size %d must be between 1 and the image size %dx%d", what, k, H, W);
}

void sdp_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k) {
    check_pool("sdp_avgpool_fwd", B, C, H, W, k);
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

void sdp_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k) {
    check_pool("sdp_avgpool_bwd", B, C, H, W, k);
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

void sdp_global_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W) {
    check_pool("sdp_global_avgpool_fwd", B, C, H, W, 1);
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

void sdp_global_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W) {
    check_pool("sdp_global_avgpool_bwd", B, C, H, W, 1);
    if (!dinp) return;
    int planes = B * C;
    size_t hw = (size_t)H * W;
#pragma omp parallel for schedule(static) if (planes * hw >= PARALLEL_MIN_ELEMS)
    for (int p = 0; p < planes; p++) {
        float *dx = dinp + (size_t)p * hw, g = dout[p] / (float)hw;
        for (size_t i = 0; i < hw; i++) dx[i] += g;
    }
}
