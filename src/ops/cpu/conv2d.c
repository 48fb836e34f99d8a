/* 2D convolution front end: shape checks, the plan, and the bias (added and summed here, the same
 * way for both implementations; ResNets have none, so it need not be fused). */
#include "ops/cpu/conv2d.h"

#include "sdp/check.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

const char *sdp_conv_algo_name(sdp_conv_algo algo) {
    switch (algo) {
    case SDP_CONV_DNNL:
        return "dnnl";
    case SDP_CONV_IM2COL:
        return "im2col";
    }
    return "unknown";
}

bool sdp_conv_algo_parse(const char *s, sdp_conv_algo *out) {
    if (!s) return false;
    if (strcmp(s, "dnnl") == 0) {
        *out = SDP_CONV_DNNL;
        return true;
    }
    if (strcmp(s, "im2col") == 0) {
        *out = SDP_CONV_IM2COL;
        return true;
    }
    return false;
}

static void check_shape(const sdp_conv_shape *s) {
    SDP_CHECK(s->B >= 1 && s->IC >= 1 && s->H >= 1 && s->W >= 1 && s->OC >= 1 && s->KH >= 1 &&
                  s->KW >= 1,
              "conv2d: sizes B=%d IC=%d H=%d W=%d OC=%d KH=%d KW=%d must all be >= 1", s->B, s->IC,
              s->H, s->W, s->OC, s->KH, s->KW);
    SDP_CHECK(s->stride_h >= 1 && s->stride_w >= 1 && s->pad_h >= 0 && s->pad_w >= 0,
              "conv2d: stride (%d, %d) must be >= 1 and padding (%d, %d) >= 0", s->stride_h,
              s->stride_w, s->pad_h, s->pad_w);
    SDP_CHECK(s->H + 2 * s->pad_h >= s->KH && s->W + 2 * s->pad_w >= s->KW,
              "conv2d: kernel %dx%d is larger than the padded input %dx%d: use a smaller kernel or "
              "more padding",
              s->KH, s->KW, s->H + 2 * s->pad_h, s->W + 2 * s->pad_w);
    /* GEMM sizes are ints: the largest is a col matrix of one image. */
    int64_t col_rows = (int64_t)s->IC * s->KH * s->KW;
    int64_t pixels = (int64_t)s->H * s->W;
    SDP_CHECK(col_rows <= INT32_MAX && pixels <= INT32_MAX && col_rows * pixels <= INT32_MAX,
              "conv2d: one image's im2col matrix (%lld x %lld) exceeds the int range: use smaller "
              "images or fewer channels",
              (long long)col_rows, (long long)pixels);
}

void sdp_conv_plan_init(sdp_conv_plan *plan, const sdp_conv_shape *shape, sdp_conv_algo algo,
                        sdp_gemm_provider gemm) {
    check_shape(shape);
    *plan = (sdp_conv_plan){
        .shape = *shape,
        .OH = (shape->H + 2 * shape->pad_h - shape->KH) / shape->stride_h + 1,
        .OW = (shape->W + 2 * shape->pad_w - shape->KW) / shape->stride_w + 1,
        .algo = algo,
        .gemm = gemm,
        .threads = omp_get_max_threads(),
    };
    switch (algo) {
    case SDP_CONV_DNNL:
        plan->dnnl = sdp_conv_dnnl_create(plan, &plan->scratch_floats);
        return;
    case SDP_CONV_IM2COL:
        plan->scratch_floats = sdp_conv_im2col_scratch_floats(plan);
        return;
    }
    sdp_fatal("conv2d: unknown algorithm %d: use dnnl or im2col", (int)algo);
}

void sdp_conv_plan_free(sdp_conv_plan *plan) {
    if (plan->dnnl) sdp_conv_dnnl_destroy(plan->dnnl);
    *plan = (sdp_conv_plan){0};
}

size_t sdp_conv_scratch_floats(const sdp_conv_plan *plan) {
    return plan->scratch_floats;
}

/* oneDNN sizes its work split and scratchpad for the thread count at creation, and the im2col
 * scratch holds one slice per thread: running under another count would be wrong or slow. */
static void check_call(const sdp_conv_plan *plan, const float *scratch, const char *what) {
    SDP_CHECK(plan->threads == omp_get_max_threads(),
              "%s: the conv plan was made for %d threads but %d are set now: make the plan after "
              "sdp_set_threads",
              what, plan->threads, omp_get_max_threads());
    SDP_CHECK(scratch || plan->scratch_floats == 0,
              "%s: scratch is NULL: pass sdp_conv_scratch_floats(plan) floats of scratch", what);
}

static void add_bias(const sdp_conv_plan *plan, float *out, const float *bias) {
    int planes = plan->shape.B * plan->shape.OC, OC = plan->shape.OC;
    size_t pixels = (size_t)plan->OH * plan->OW;
#pragma omp parallel for schedule(static) if (planes * pixels >= PARALLEL_MIN_ELEMS)
    for (int bo = 0; bo < planes; bo++) {
        float *y = out + (size_t)bo * pixels, b = bias[bo % OC];
        for (size_t i = 0; i < pixels; i++) y[i] += b;
    }
}

/* dbias[o] += sum over images and pixels of dout[b, o]: one thread per channel, images in order,
 * so the sum is the same for any thread count. */
static void accumulate_dbias(const sdp_conv_plan *plan, float *dbias, const float *dout) {
    int B = plan->shape.B, OC = plan->shape.OC;
    size_t pixels = (size_t)plan->OH * plan->OW;
#pragma omp parallel for schedule(static) if (B * OC * pixels >= PARALLEL_MIN_ELEMS)
    for (int o = 0; o < OC; o++) {
        double sum = 0;
        for (int b = 0; b < B; b++) {
            const float *dy = dout + ((size_t)b * OC + o) * pixels;
            for (size_t i = 0; i < pixels; i++) sum += dy[i];
        }
        dbias[o] += (float)sum;
    }
}

void sdp_conv2d_fwd(const sdp_conv_plan *plan, float *out, const float *inp, const float *w,
                    const float *bias, float *scratch) {
    check_call(plan, scratch, "sdp_conv2d_fwd");
    if (plan->algo == SDP_CONV_DNNL)
        sdp_conv_dnnl_fwd(plan->dnnl, out, inp, w, scratch);
    else
        sdp_conv_im2col_fwd(plan, out, inp, w, scratch);
    if (bias) add_bias(plan, out, bias);
}

void sdp_conv2d_bwd(const sdp_conv_plan *plan, float *dinp, float *dw, float *dbias,
                    const float *dout, const float *inp, const float *w, float *scratch) {
    check_call(plan, scratch, "sdp_conv2d_bwd");
    SDP_CHECK(!dinp || w, "sdp_conv2d_bwd: dinp needs the weights: pass w");
    SDP_CHECK(!dw || inp, "sdp_conv2d_bwd: dw needs the input: pass inp");
    if (dinp || dw) {
        if (plan->algo == SDP_CONV_DNNL)
            sdp_conv_dnnl_bwd(plan->dnnl, dinp, dw, dout, inp, w, scratch);
        else
            sdp_conv_im2col_bwd(plan, dinp, dw, dout, inp, w, scratch);
    }
    if (dbias) accumulate_dbias(plan, dbias, dout);
}
