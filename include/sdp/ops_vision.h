/* The ops of vision models (ResNets, ViTs), forward and backward: checked entry points over a
 * backend, as in sdp/ops.h (defined in src/ops/ops_vision.c).
 *
 * Conventions (those of sdp/ops.h, plus the image layout)
 *  - Activations are NCHW: [B, C, H, W], row-major. Convolution weights are [OC, IC, KH, KW] as in
 *    PyTorch's nn.Conv2d.
 *  - Backward kernels ACCUMULATE (+=) into every gradient they are given; any gradient pointer may
 *    be NULL, and then that gradient is not computed.
 *  - Ops never allocate: a convolution takes a caller-owned scratch buffer of the size
 *    sdp_conv_scratch_bytes gives (64-byte aligned, as sdp_alloc returns).
 *  - On the CPU, results are deterministic for a fixed thread count. Batch norm, ReLU and pooling
 *    give the same bits for every thread count.
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
 *    from and to NCHW. The primitives are created once, with the plan.
 *  - SDP_CONV_IM2COL: im2col + GEMM, one image per thread at a time. Faster for a stem with
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

/* A convolution runs through a plan, made once per shape: it fails with a clear message for an
 * invalid shape (e.g. a kernel larger than the padded input). algo picks the CPU implementation;
 * other backends choose their own. On the CPU a plan is made for the OpenMP thread count current
 * at its creation (sdp_set_threads), and the convolution refuses to run under another count. */
void *sdp_conv_plan_create(const sdp_backend *be, const sdp_conv_shape *shape, sdp_conv_algo algo);
void sdp_conv_plan_free(const sdp_backend *be, void *plan); /* NULL: nothing */
/* The scratch conv2d_fwd and conv2d_bwd take (0: none, and scratch may be NULL). */
size_t sdp_conv_scratch_bytes(const sdp_backend *be, const void *plan);
/* out [B, OC, OH, OW] is overwritten; bias [OC] may be NULL (no bias). */
void sdp_conv2d_fwd(const sdp_backend *be, const void *plan, float *out, const float *inp,
                    const float *w, const float *bias, float *scratch);
/* dinp [B, IC, H, W] += d/dinp ; dw [OC, IC, KH, KW] += d/dw ; dbias [OC] += d/dbias.
 * inp is needed only for dw, w only for dinp (either may be NULL when its gradient is). */
void sdp_conv2d_bwd(const sdp_backend *be, const void *plan, float *dinp, float *dw, float *dbias,
                    const float *dout, const float *inp, const float *w, float *scratch);

/* ---- batch normalization (eps = 1e-5, momentum 0.1, as nn.BatchNorm2d) --------------------- */

/* Training: statistics over (B, H, W) per channel. out = (x - mean) * rstd * gamma + beta with the
 * biased variance; saves mean[C] and rstd[C] for the backward. When running_mean and running_var
 * are given (both or neither) they become (1 - 0.1) * running + 0.1 * batch statistic, with the
 * unbiased variance (n / (n - 1)), n = B*H*W > 1. */
void sdp_batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                             float *running_mean, float *running_var, const float *inp,
                             const float *gamma, const float *beta, int B, int C, int H, int W);
/* Evaluation: out = (x - running_mean) / sqrt(running_var + eps) * gamma + beta. out may alias
 * inp. */
void sdp_batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                            const float *running_mean, const float *running_var, const float *gamma,
                            const float *beta, int B, int C, int H, int W);
/* Backward of the training forward (batch statistics), from its saved mean and rstd. */
void sdp_batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                       const float *dout, const float *inp, const float *gamma, const float *mean,
                       const float *rstd, int B, int C, int H, int W);

/* ---- ReLU ---------------------------------------------------------------------------------- */

/* out = max(x, 0); out may alias inp (in place). */
void sdp_relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n);
/* dinp += dout where out > 0. Takes the saved OUTPUT (out > 0 exactly where inp > 0), so the
 * forward can run in place. */
void sdp_relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                  size_t n);

/* ---- pooling ------------------------------------------------------------------------------- */

/* Average pooling, kernel k and stride k, no padding: out [B, C, H/k, W/k] (floor division, as
 * nn.AvgPool2d(k); the last H%k rows and W%k columns are not read). */
void sdp_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C, int H,
                     int W, int k);
void sdp_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C, int H,
                     int W, int k);
/* Global average pooling: out[b, c] = mean over (H, W) of inp[b, c]; out is [B, C]. */
void sdp_global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                            int H, int W);
void sdp_global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                            int H, int W);

/* dst[r * ld_dst + c] += src[r * ld_src + c] for r < rows, c < cols: an owned slice of a whole
 * gradient added into the caller's buffer (the ResNet's sliced gradients). */
void sdp_add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
                  size_t rows, size_t cols);

/* ---- ViT stem ------------------------------------------------------------------------------ */

/* rows [B * (H/p) * (W/p), C*p*p] = the non-overlapping p x p patches of images [B, C, H, W] in
 * row-major order, each row in the order (c, i, j) of a conv weight [D, C, p, p]: the patch
 * embedding (a conv with kernel = stride = p) is this gather and sdp_linear_fwd. H and W must be
 * multiples of p. */
void sdp_patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C, int H,
                      int W, int p);
/* embed[b, 0] = cls + pos[0]; embed[b, t] = patches[b, t - 1] + pos[t] for 0 < t < T. */
void sdp_vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches, const float *cls,
                       const float *pos, int B, int T, int C);
/* Its backward from dembed [B, T, C]: dcls and dpos accumulate (NULL: skipped); dpatches
 * [B, T - 1, C] is overwritten. */
void sdp_vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                       const float *dembed, int B, int T, int C);

#endif
