/* CPU kernels for vision models (ResNets, ViTs), fp32, forward and backward.
 *
 * Conventions (those of sdp/ops.h, plus the image layout)
 *  - Activations are NCHW: [B, C, H, W], row-major. Convolution weights are [OC, IC, KH, KW] as in
 *    PyTorch's nn.Conv2d.
 *  - Backward kernels ACCUMULATE (+=) into every gradient they are given; any gradient pointer may
 *    be NULL, and then that gradient is not computed.
 *  - Kernels never allocate: those that need temporaries take a caller-owned scratch buffer of the
 *    size their *_scratch_floats function gives (64-byte aligned, as sdp_alloc returns).
 *  - Results are deterministic for a fixed thread count. Batch norm, ReLU and pooling give the
 *    same bits for every thread count.
 */
#ifndef SDP_OPS_VISION_H
#define SDP_OPS_VISION_H

#include "sdp/ops.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- conv2d -------------------------------------------------------------------------------- */

/* Two implementations; docs/vision_kernels.md has the measurements between them.
 *  - SDP_CONV_DNNL, the default: 1.2x to 3.5x faster on 2 threads on every stride-1 layer but
 *    the stem. oneDNN's convolution primitives, in the blocked layouts they prefer, with reorders
 *    from and to NCHW. The primitives are created once, by sdp_conv_plan_init.
 *  - SDP_CONV_IM2COL: im2col + sdp_gemm, one image per thread at a time. Faster for a stem with
 *    1-3 input channels, and in backward data of the stride-2 shortcut. */
typedef enum { SDP_CONV_DNNL, SDP_CONV_IM2COL } sdp_conv_algo;

const char *sdp_conv_algo_name(sdp_conv_algo algo);
/* Parses "dnnl" or "im2col"; returns false for anything else. */
bool sdp_conv_algo_parse(const char *s, sdp_conv_algo *out);

/* out[b, o, y, x] = bias[o] + sum_{c, i, j} w[o, c, i, j] *
 *                   inp[b, c, y*stride_h - pad_h + i, x*stride_w - pad_w + j]
 * with zeros outside the input. OH = (H + 2 pad_h - KH) / stride_h + 1, likewise OW. */
typedef struct {
    int B, IC, H, W;                      /* input [B, IC, H, W] */
    int OC, KH, KW;                       /* weight [OC, IC, KH, KW] */
    int stride_h, stride_w, pad_h, pad_w; /* the same zero padding on both sides */
} sdp_conv_shape;

typedef struct sdp_conv_dnnl sdp_conv_dnnl; /* oneDNN objects, private to conv2d_dnnl.c */

/* Everything that depends only on the shape, made once per layer: output size, scratch size and,
 * for SDP_CONV_DNNL, the primitives. A plan is made for the OpenMP thread count current at
 * sdp_conv_plan_init (sdp_set_threads), and the kernels refuse to run under another count. */
typedef struct {
    sdp_conv_shape shape;
    int OH, OW;
    sdp_conv_algo algo;
    sdp_gemm_provider gemm; /* SDP_CONV_IM2COL only */
    int threads;
    size_t scratch_floats; /* enough for the forward and for any backward */
    sdp_conv_dnnl *dnnl;   /* SDP_CONV_DNNL only */
} sdp_conv_plan;

/* Fails with a clear message for an invalid shape (e.g. a kernel larger than the padded input). */
void sdp_conv_plan_init(sdp_conv_plan *plan, const sdp_conv_shape *shape, sdp_conv_algo algo,
                        sdp_gemm_provider gemm);
void sdp_conv_plan_free(sdp_conv_plan *plan);
size_t sdp_conv_scratch_floats(const sdp_conv_plan *plan);

/* out [B, OC, OH, OW] is overwritten; bias [OC] may be NULL (no bias). */
void sdp_conv2d_fwd(const sdp_conv_plan *plan, float *out, const float *inp, const float *w,
                    const float *bias, float *scratch);
/* dinp [B, IC, H, W] += d/dinp ; dw [OC, IC, KH, KW] += d/dw ; dbias [OC] += d/dbias.
 * inp is needed only for dw, w only for dinp (either may be NULL when its gradient is). */
void sdp_conv2d_bwd(const sdp_conv_plan *plan, float *dinp, float *dw, float *dbias,
                    const float *dout, const float *inp, const float *w, float *scratch);

/* ---- batch normalization (eps = 1e-5, momentum 0.1, as nn.BatchNorm2d) --------------------- */

/* Training: statistics over (B, H, W) per channel. out = (x - mean) * rstd * gamma + beta with the
 * biased variance; saves mean[C] and rstd[C] for the backward. When running_mean and running_var
 * are given (both or neither) they become (1 - 0.1) * running + 0.1 * batch statistic, with the
 * unbiased variance (n / (n - 1)), n = B*H*W > 1. */
void sdp_batchnorm_fwd_train(float *out, float *mean, float *rstd, float *running_mean,
                             float *running_var, const float *inp, const float *gamma,
                             const float *beta, int B, int C, int H, int W);
/* Evaluation: out = (x - running_mean) / sqrt(running_var + eps) * gamma + beta. out may alias
 * inp. */
void sdp_batchnorm_fwd_eval(float *out, const float *inp, const float *running_mean,
                            const float *running_var, const float *gamma, const float *beta, int B,
                            int C, int H, int W);
/* Backward of the training forward (batch statistics), from its saved mean and rstd. */
void sdp_batchnorm_bwd(float *dinp, float *dgamma, float *dbeta, const float *dout,
                       const float *inp, const float *gamma, const float *mean, const float *rstd,
                       int B, int C, int H, int W);

/* ---- ReLU ---------------------------------------------------------------------------------- */

/* out = max(x, 0); out may alias inp (in place). */
void sdp_relu_fwd(float *out, const float *inp, size_t n);
/* dinp += dout where out > 0. Takes the saved OUTPUT (out > 0 exactly where inp > 0), so the
 * forward can run in place. */
void sdp_relu_bwd(float *dinp, const float *dout, const float *out, size_t n);

/* ---- pooling ------------------------------------------------------------------------------- */

/* Average pooling, kernel k and stride k, no padding: out [B, C, H/k, W/k] (floor division, as
 * nn.AvgPool2d(k); the last H%k rows and W%k columns are not read). */
void sdp_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W, int k);
void sdp_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W, int k);
/* Global average pooling: out[b, c] = mean over (H, W) of inp[b, c]; out is [B, C]. */
void sdp_global_avgpool_fwd(float *out, const float *inp, int B, int C, int H, int W);
void sdp_global_avgpool_bwd(float *dinp, const float *dout, int B, int C, int H, int W);

/* ---- ViT patch embedding ------------------------------------------------------------------- */

/* out [B, P, D] with P = (H/p) * (W/p) patches in row-major order: the conv with kernel = stride =
 * p, weight [D, C, p, p], bias [D] (may be NULL), flattened over space and transposed, as ViT's
 * proj(x).flatten(2).transpose(1, 2). H and W must be multiples of p. Runs as a gather of the
 * patches into scratch and one sdp_linear_fwd. */
size_t sdp_patch_embed_scratch_floats(int B, int C, int H, int W, int p);
void sdp_patch_embed_fwd(sdp_gemm_provider prov, float *out, const float *inp, const float *w,
                         const float *bias, int B, int C, int H, int W, int p, int D,
                         float *scratch);
/* dinp [B, C, H, W] += ; dw [D, C, p, p] += ; dbias [D] += . inp is needed only for dw, w only
 * for dinp. */
void sdp_patch_embed_bwd(sdp_gemm_provider prov, float *dinp, float *dw, float *dbias,
                         const float *dout, const float *inp, const float *w, int B, int C, int H,
                         int W, int p, int D, float *scratch);
/* rows [B * (H/p) * (W/p), C*p*p] = the patches of inp, each in weight order (c, i, j): the
 * gather that sdp_patch_embed_fwd does before its linear layer. */
void sdp_patch_gather(float *rows, const float *inp, int B, int C, int H, int W, int p);

#endif
