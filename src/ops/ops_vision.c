/* The entry points of sdp/ops_vision.h (the ViT stem, convolutions, batch norm, pooling, ReLU,
 * row additions), checked as those of sdp/ops.h are (ops.c): shapes and arguments here, then the
 * backend's entry of the same name. */
#include "sdp/backend.h"
#include "sdp/check.h"

#include <limits.h>
#include <stdint.h>

#include "op_args.h"

/* ---- ViT stem ---- */

void sdp_patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C, int H,
                      int W, int p) {
    const char *op = "sdp_patch_gather";
    SDP_CHECK(B >= 1 && C >= 1 && H >= 1 && W >= 1 && p >= 1,
              "%s: sizes B=%d C=%d H=%d W=%d and patch size %d must all be >= 1", op, B, C, H, W,
              p);
    SDP_CHECK(H % p == 0 && W % p == 0,
              "%s: image %dx%d is not a multiple of the patch size %d: crop or resize the images, "
              "or use a patch size that divides both sides",
              op, H, W, p);
    fits_int(op, "the C*p*p columns", C, (int64_t)p * p);
    fits_int(op, "the B*(H/p)*(W/p) rows", B, (int64_t)(H / p) * (W / p));
    NEED(op, rows), NEED(op, images);
    be->patch_gather(be, rows, images, B, C, H, W, p);
}

static void vit_embed_dims(const char *op, int B, int T, int C) {
    SDP_CHECK(B >= 1 && T >= 2 && C >= 1,
              "%s: sizes B=%d T=%d C=%d: need B, C >= 1 and T >= 2 (the class token and a patch)",
              op, B, T, C);
}

void sdp_vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches, const float *cls,
                       const float *pos, int B, int T, int C) {
    const char *op = "sdp_vit_embed_fwd";
    vit_embed_dims(op, B, T, C);
    NEED(op, embed), NEED(op, patches), NEED(op, cls), NEED(op, pos);
    be->vit_embed_fwd(be, embed, patches, cls, pos, B, T, C);
}

void sdp_vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                       const float *dembed, int B, int T, int C) {
    const char *op = "sdp_vit_embed_bwd";
    vit_embed_dims(op, B, T, C);
    NEED(op, dpatches), NEED(op, dembed);
    be->vit_embed_bwd(be, dpatches, dcls, dpos, dembed, B, T, C);
}

/* ---- vision (ResNet) ---- */

void *sdp_conv_plan_create(const sdp_backend *be, const sdp_conv_shape *s, sdp_conv_algo algo) {
    NEED("conv2d", s);
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
    SDP_CHECK(algo == SDP_CONV_DNNL || algo == SDP_CONV_IM2COL,
              "conv2d: unknown algorithm %d: use dnnl or im2col", (int)algo);
    return be->conv_plan_create(be, s, algo);
}

void sdp_conv_plan_free(const sdp_backend *be, void *plan) {
    if (plan) be->conv_plan_free(be, plan);
}

size_t sdp_conv_scratch_bytes(const sdp_backend *be, const void *plan) {
    NEED("conv2d", plan);
    return be->conv_scratch_bytes(be, plan);
}

static void conv_call(const sdp_backend *be, const char *op, const void *plan,
                      const float *scratch) {
    NEED(op, plan);
    SDP_CHECK(scratch || be->conv_scratch_bytes(be, plan) == 0,
              "%s: scratch is NULL: pass sdp_conv_scratch_bytes(be, plan) bytes of scratch", op);
}

void sdp_conv2d_fwd(const sdp_backend *be, const void *plan, float *out, const float *inp,
                    const float *w, const float *bias, float *scratch) {
    conv_call(be, "sdp_conv2d_fwd", plan, scratch);
    NEED("sdp_conv2d_fwd", out), NEED("sdp_conv2d_fwd", inp), NEED("sdp_conv2d_fwd", w);
    be->conv2d_fwd(be, plan, out, inp, w, bias, scratch);
}

void sdp_conv2d_bwd(const sdp_backend *be, const void *plan, float *dinp, float *dw, float *dbias,
                    const float *dout, const float *inp, const float *w, float *scratch) {
    conv_call(be, "sdp_conv2d_bwd", plan, scratch);
    SDP_CHECK(!dinp || w, "sdp_conv2d_bwd: dinp needs the weights: pass w");
    SDP_CHECK(!dw || inp, "sdp_conv2d_bwd: dw needs the input: pass inp");
    NEED("sdp_conv2d_bwd", dout);
    be->conv2d_bwd(be, plan, dinp, dw, dbias, dout, inp, w, scratch);
}

static void image_dims(const char *op, int B, int C, int H, int W) {
    SDP_CHECK(B >= 1 && C >= 1 && H >= 1 && W >= 1,
              "%s: sizes B=%d C=%d H=%d W=%d must all be >= 1", op, B, C, H, W);
    fits_int(op, "B*C planes", B, C);
}

void sdp_batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                             float *running_mean, float *running_var, const float *inp,
                             const float *gamma, const float *beta, int B, int C, int H, int W) {
    const char *op = "sdp_batchnorm_fwd_train";
    image_dims(op, B, C, H, W);
    SDP_CHECK((size_t)B * H * W > 1,
              "%s: one value per channel (B=%d, H=%d, W=%d) has no batch variance: train with a "
              "larger batch or use eval mode",
              op, B, H, W);
    SDP_CHECK(!running_mean == !running_var,
              "%s: pass both running_mean and running_var, or neither", op);
    NEED(op, out), NEED(op, mean), NEED(op, rstd), NEED(op, inp), NEED(op, gamma), NEED(op, beta);
    be->batchnorm_fwd_train(be, out, mean, rstd, running_mean, running_var, inp, gamma, beta, B, C,
                            H, W);
}

void sdp_batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                            const float *running_mean, const float *running_var, const float *gamma,
                            const float *beta, int B, int C, int H, int W) {
    const char *op = "sdp_batchnorm_fwd_eval";
    image_dims(op, B, C, H, W);
    NEED(op, out), NEED(op, inp), NEED(op, running_mean), NEED(op, running_var);
    NEED(op, gamma), NEED(op, beta);
    be->batchnorm_fwd_eval(be, out, inp, running_mean, running_var, gamma, beta, B, C, H, W);
}

void sdp_batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                       const float *dout, const float *inp, const float *gamma, const float *mean,
                       const float *rstd, int B, int C, int H, int W) {
    const char *op = "sdp_batchnorm_bwd";
    image_dims(op, B, C, H, W);
    NEED(op, dout), NEED(op, inp), NEED(op, gamma), NEED(op, mean), NEED(op, rstd);
    be->batchnorm_bwd(be, dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, B, C, H, W);
}

void sdp_relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    if (n) NEED("sdp_relu_fwd", out), NEED("sdp_relu_fwd", inp);
    be->relu_fwd(be, out, inp, n);
}

void sdp_relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                  size_t n) {
    if (n && dinp) NEED("sdp_relu_bwd", dout), NEED("sdp_relu_bwd", out);
    be->relu_bwd(be, dinp, dout, out, n);
}

static void pool_dims(const char *op, int B, int C, int H, int W, int k) {
    image_dims(op, B, C, H, W);
    SDP_CHECK(k >= 1 && k <= H && k <= W,
              "%s: pooling size %d must be between 1 and the image size %dx%d", op, k, H, W);
}

void sdp_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C, int H,
                     int W, int k) {
    pool_dims("sdp_avgpool_fwd", B, C, H, W, k);
    NEED("sdp_avgpool_fwd", out), NEED("sdp_avgpool_fwd", inp);
    be->avgpool_fwd(be, out, inp, B, C, H, W, k);
}

void sdp_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C, int H,
                     int W, int k) {
    pool_dims("sdp_avgpool_bwd", B, C, H, W, k);
    if (dinp) NEED("sdp_avgpool_bwd", dout);
    be->avgpool_bwd(be, dinp, dout, B, C, H, W, k);
}

void sdp_global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                            int H, int W) {
    pool_dims("sdp_global_avgpool_fwd", B, C, H, W, 1);
    NEED("sdp_global_avgpool_fwd", out), NEED("sdp_global_avgpool_fwd", inp);
    be->global_avgpool_fwd(be, out, inp, B, C, H, W);
}

void sdp_global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                            int H, int W) {
    pool_dims("sdp_global_avgpool_bwd", B, C, H, W, 1);
    if (dinp) NEED("sdp_global_avgpool_bwd", dout);
    be->global_avgpool_bwd(be, dinp, dout, B, C, H, W);
}

void sdp_add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
                  size_t rows, size_t cols) {
    rows_args("sdp_add_rows", dst, ld_dst, src, ld_src, rows, cols);
    be->add_rows(be, dst, ld_dst, src, ld_src, rows, cols);
}
