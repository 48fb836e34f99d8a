/* Convolution as im2col + GEMM. Each thread takes whole images (a static split, so the work
 * and the order of every sum depend only on the thread count) and runs single-threaded GEMMs on
 * them: both BLAS libraries fall back to one thread inside a parallel region. Per image:
 *   forward      out[OC, OH*OW]   = w[OC, IC*KH*KW] col[IC*KH*KW, OH*OW]
 *   input grad   dcol             = w^T dout, then col2im adds dcol into dinp
 *   weight grad  dw_thread       += dout col^T, and the per-thread sums are added in thread order.
 * A 1x1 stride-1 unpadded conv needs no col matrix: the image is one already. */
#include "ops/cpu/conv2d.h"

#include <omp.h>
#include <string.h>

enum { FLOAT_ALIGN = 16 }; /* thread slices start on 64-byte boundaries */

static size_t round_up(size_t n) {
    return (n + FLOAT_ALIGN - 1) / FLOAT_ALIGN * FLOAT_ALIGN;
}

static size_t col_floats(const cpu_conv_plan *plan) {
    const sdp_conv_shape *s = &plan->shape;
    return sdp_conv_is_pointwise(plan) ? 0 : (size_t)s->IC * s->KH * s->KW * plan->OH * plan->OW;
}

static size_t dw_floats(const cpu_conv_plan *plan) {
    const sdp_conv_shape *s = &plan->shape;
    return (size_t)s->OC * s->IC * s->KH * s->KW;
}

/* One thread's slice: col, dcol, then its partial weight gradient. */
static size_t thread_floats(const cpu_conv_plan *plan) {
    return 2 * round_up(col_floats(plan)) + round_up(dw_floats(plan));
}

size_t sdp_conv_im2col_scratch_floats(const cpu_conv_plan *plan) {
    return (size_t)plan->threads * thread_floats(plan);
}

void sdp_conv_im2col_fwd(const cpu_conv_plan *plan, float *out, const float *inp, const float *w,
                         float *scratch) {
    const sdp_conv_shape *s = &plan->shape;
    int K = s->IC * s->KH * s->KW, N = plan->OH * plan->OW;
    size_t in_image = (size_t)s->IC * s->H * s->W, out_image = (size_t)s->OC * N;
    bool pointwise = sdp_conv_is_pointwise(plan);
#pragma omp parallel
    {
        float *col = scratch + (size_t)omp_get_thread_num() * thread_floats(plan);
#pragma omp for schedule(static)
        for (int b = 0; b < s->B; b++) {
            const float *x = inp + b * in_image;
            if (!pointwise) sdp_im2col(col, x, plan);
            sdp_cpu_gemm(plan->gemm, false, false, s->OC, N, K, 1.0f, w, K, pointwise ? x : col, N,
                         0.0f, out + b * out_image, N);
        }
    }
}

/* dw += the per-thread partial sums, in thread order; split over elements, not threads. */
static void reduce_dw(const cpu_conv_plan *plan, float *dw, const float *scratch) {
    size_t n = dw_floats(plan), stride = thread_floats(plan);
    size_t partial = 2 * round_up(col_floats(plan));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float sum = 0.0f;
        for (int t = 0; t < plan->threads; t++) sum += scratch[t * stride + partial + i];
        dw[i] += sum;
    }
}

void sdp_conv_im2col_bwd(const cpu_conv_plan *plan, float *dinp, float *dw, const float *dout,
                         const float *inp, const float *w, float *scratch) {
    const sdp_conv_shape *s = &plan->shape;
    int K = s->IC * s->KH * s->KW, N = plan->OH * plan->OW;
    size_t in_image = (size_t)s->IC * s->H * s->W, out_image = (size_t)s->OC * N;
    bool pointwise = sdp_conv_is_pointwise(plan);
    size_t col_stride = round_up(col_floats(plan));
#pragma omp parallel
    {
        float *col = scratch + (size_t)omp_get_thread_num() * thread_floats(plan);
        float *dcol = col + col_stride, *dw_part = dcol + col_stride;
        if (dw) memset(dw_part, 0, dw_floats(plan) * sizeof(float));
#pragma omp for schedule(static)
        for (int b = 0; b < s->B; b++) {
            const float *dy = dout + b * out_image;
            if (dw) {
                const float *x = inp + b * in_image;
                if (!pointwise) sdp_im2col(col, x, plan);
                sdp_cpu_gemm(plan->gemm, false, true, s->OC, K, N, 1.0f, dy, N, pointwise ? x : col,
                             N, 1.0f, dw_part, K);
            }
            if (dinp && pointwise) {
                sdp_cpu_gemm(plan->gemm, true, false, K, N, s->OC, 1.0f, w, K, dy, N, 1.0f,
                             dinp + b * in_image, N);
            } else if (dinp) {
                sdp_cpu_gemm(plan->gemm, true, false, K, N, s->OC, 1.0f, w, K, dy, N, 0.0f, dcol,
                             N);
                sdp_col2im_add(dinp + b * in_image, dcol, plan);
            }
        }
    }
    if (dw) reduce_dw(plan, dw, scratch);
}
