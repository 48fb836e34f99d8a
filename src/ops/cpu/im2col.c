/* im2col and its transpose for one image. Each row of the col matrix is one kernel tap (c, i, j)
 * over all output pixels; the span of output columns whose input pixel lies inside the image is
 * computed once per tap, so the inner loops carry no bounds tests. */
#include "ops/cpu/conv2d.h"

#include <string.h>

/* Output positions o with 0 <= o*stride - pad + tap < in_size are lo <= o < hi. */
typedef struct {
    int lo, hi;
} span;

static span valid_span(int in_size, int out_size, int stride, int pad, int tap) {
    int offset = tap - pad; /* input position of output 0 */
    int lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int hi = in_size - 1 - offset < 0 ? 0 : (in_size - 1 - offset) / stride + 1;
    if (hi > out_size) hi = out_size;
    if (lo > hi) lo = hi;
    return (span){lo, hi};
}

bool sdp_conv_is_pointwise(const cpu_conv_plan *plan) {
    const sdp_conv_shape *s = &plan->shape;
    return s->KH == 1 && s->KW == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == 0 &&
           s->pad_w == 0;
}

void sdp_im2col(float *col, const float *img, const cpu_conv_plan *plan) {
    const sdp_conv_shape *s = &plan->shape;
    int OH = plan->OH, OW = plan->OW;
    for (int c = 0; c < s->IC; c++)
        for (int i = 0; i < s->KH; i++) {
            span ys = valid_span(s->H, OH, s->stride_h, s->pad_h, i);
            for (int j = 0; j < s->KW; j++) {
                span xs = valid_span(s->W, OW, s->stride_w, s->pad_w, j);
                float *row = col + (((size_t)c * s->KH + i) * s->KW + j) * OH * OW;
                for (int oy = 0; oy < OH; oy++) {
                    float *dst = row + (size_t)oy * OW;
                    if (oy < ys.lo || oy >= ys.hi) {
                        memset(dst, 0, (size_t)OW * sizeof(float));
                        continue;
                    }
                    int iy = oy * s->stride_h - s->pad_h + i;
                    const float *src = img + ((size_t)c * s->H + iy) * s->W;
                    for (int ox = 0; ox < xs.lo; ox++) dst[ox] = 0.0f;
                    for (int ox = xs.lo; ox < xs.hi; ox++)
                        dst[ox] = src[ox * s->stride_w - s->pad_w + j];
                    for (int ox = xs.hi; ox < OW; ox++) dst[ox] = 0.0f;
                }
            }
        }
}

void sdp_col2im_add(float *img, const float *col, const cpu_conv_plan *plan) {
    const sdp_conv_shape *s = &plan->shape;
    int OH = plan->OH, OW = plan->OW;
    for (int c = 0; c < s->IC; c++)
        for (int i = 0; i < s->KH; i++) {
            span ys = valid_span(s->H, OH, s->stride_h, s->pad_h, i);
            for (int j = 0; j < s->KW; j++) {
                span xs = valid_span(s->W, OW, s->stride_w, s->pad_w, j);
                const float *row = col + (((size_t)c * s->KH + i) * s->KW + j) * OH * OW;
                for (int oy = ys.lo; oy < ys.hi; oy++) {
                    const float *src = row + (size_t)oy * OW;
                    int iy = oy * s->stride_h - s->pad_h + i;
                    float *dst = img + ((size_t)c * s->H + iy) * s->W;
                    for (int ox = xs.lo; ox < xs.hi; ox++)
                        dst[ox * s->stride_w - s->pad_w + j] += src[ox];
                }
            }
        }
}
