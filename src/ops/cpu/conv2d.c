/* 2D convolution front end: the plan, the table entries, and the bias (added and summed here, the
 * same way for both implementations; ResNets have none, so it need not be fused). */
#include "ops/cpu/conv2d.h"

#include "sdp/check.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
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

/* A plan is a cpu_conv_plan of its own allocation, made for the backend's GEMM provider (the
 * im2col implementation's). */
static void *conv_plan_create(const sdp_backend *be, const sdp_conv_shape *shape,
                              sdp_conv_algo algo) {
    cpu_conv_plan *plan = sdp_xmalloc(sizeof *plan, "a convolution plan");
    *plan = (cpu_conv_plan){
        .shape = *shape,
        .OH = (shape->H + 2 * shape->pad_h - shape->KH) / shape->stride_h + 1,
        .OW = (shape->W + 2 * shape->pad_w - shape->KW) / shape->stride_w + 1,
        .algo = algo,
        .gemm = cpu_gemm_provider(be),
        .threads = omp_get_max_threads(),
    };
    if (algo == SDP_CONV_DNNL)
        plan->dnnl = sdp_conv_dnnl_create(plan, &plan->scratch_floats);
    else
        plan->scratch_floats = sdp_conv_im2col_scratch_floats(plan);
    return plan;
}

static void conv_plan_free(const sdp_backend *be, void *p) {
    (void)be;
    cpu_conv_plan *plan = p;
    if (plan->dnnl) sdp_conv_dnnl_destroy(plan->dnnl);
    free(plan);
}

static size_t conv_scratch_bytes(const sdp_backend *be, const void *plan) {
    (void)be;
    return ((const cpu_conv_plan *)plan)->scratch_floats * sizeof(float);
}

/* oneDNN sizes its work split and scratchpad for the thread count at creation, and the im2col
 * scratch holds one slice per thread: running under another count would be wrong or slow. */
static void check_threads(const cpu_conv_plan *plan, const char *what) {
    SDP_CHECK(plan->threads == omp_get_max_threads(),
              "%s: the conv plan was made for %d threads but %d are set now: make the plan after "
              "sdp_set_threads",
              what, plan->threads, omp_get_max_threads());
}

static void add_bias(const cpu_conv_plan *plan, float *out, const float *bias) {
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
static void accumulate_dbias(const cpu_conv_plan *plan, float *dbias, const float *dout) {
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

static void conv2d_fwd(const sdp_backend *be, const void *p, float *out, const float *inp,
                       const float *w, const float *bias, float *scratch) {
    (void)be;
    const cpu_conv_plan *plan = p;
    check_threads(plan, "sdp_conv2d_fwd");
    if (plan->algo == SDP_CONV_DNNL)
        sdp_conv_dnnl_fwd(plan->dnnl, out, inp, w, scratch);
    else
        sdp_conv_im2col_fwd(plan, out, inp, w, scratch);
    if (bias) add_bias(plan, out, bias);
}

static void conv2d_bwd(const sdp_backend *be, const void *p, float *dinp, float *dw, float *dbias,
                       const float *dout, const float *inp, const float *w, float *scratch) {
    (void)be;
    const cpu_conv_plan *plan = p;
    check_threads(plan, "sdp_conv2d_bwd");
    if (dinp || dw) {
        if (plan->algo == SDP_CONV_DNNL)
            sdp_conv_dnnl_bwd(plan->dnnl, dinp, dw, dout, inp, w, scratch);
        else
            sdp_conv_im2col_bwd(plan, dinp, dw, dout, inp, w, scratch);
    }
    if (dbias) accumulate_dbias(plan, dbias, dout);
}

void cpu_ops_conv2d(sdp_backend *t) {
    t->conv_plan_create = conv_plan_create;
    t->conv_plan_free = conv_plan_free;
    t->conv_scratch_bytes = conv_scratch_bytes;
    t->conv2d_fwd = conv2d_fwd;
    t->conv2d_bwd = conv2d_bwd;
}
