/* CUDA kernels for the ResNet, fp32, NCHW: the GPU counterparts of sdp/ops_vision.h.
 *
 * The conventions of ops_cuda.h hold: every sdp_cuda_<name> takes the arguments of
 * sdp_<name> after a leading sdp_cuda_ctx *, every array is a device pointer, backward kernels
 * ACCUMULATE (+=) into the gradients they are given and skip NULL ones, and everything runs in
 * order on ctx->stream. Size checks fail at once, with the CPU kernels' messages.
 *
 * Convolutions run on cuDNN; the rest are kernels of our own. Batch norm, ReLU and pooling
 * compute the CPU formulas (sums in double, elementwise products rounded one by one as the CPU's
 * C does) and reduce without atomics, so their results are the same run to run. */
#ifndef SDP_OPS_CUDA_VISION_H
#define SDP_OPS_CUDA_VISION_H

#include "ops/cuda/ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "sdp/ops_vision.h"

/* ---- conv2d (cuDNN) ------------------------------------------------------------------------ */

/* A convolution of one shape (sdp_conv_shape, zero padding, cross-correlation as nn.Conv2d):
 * cuDNN's descriptors and the algorithms picked for it once, by cuDNN's heuristics, among those
 * that run in plain fp32 (FMA math, never TF32) and deterministically where one exists. Their
 * workspace comes from the context's. */
typedef struct sdp_cuda_conv sdp_cuda_conv;

/* Fails with a clear message for an invalid shape. Makes ctx->cudnn on first use. */
sdp_cuda_conv *sdp_cuda_conv_create(sdp_cuda_ctx *ctx, const sdp_conv_shape *shape);
void sdp_cuda_conv_destroy(sdp_cuda_conv *conv);
/* out [B, OC, OH, OW] is overwritten; bias [OC] may be NULL. */
void sdp_cuda_conv2d_fwd(sdp_cuda_ctx *ctx, const sdp_cuda_conv *conv, float *out, const float *inp,
                         const float *w, const float *bias);
/* dinp += ; dw += ; dbias += . inp is needed only for dw, w only for dinp. */
void sdp_cuda_conv2d_bwd(sdp_cuda_ctx *ctx, const sdp_cuda_conv *conv, float *dinp, float *dw,
                         float *dbias, const float *dout, const float *inp, const float *w);

/* ---- batch normalization (eps = 1e-5, momentum 0.1) ---------------------------------------- */

void sdp_cuda_batchnorm_fwd_train(sdp_cuda_ctx *ctx, float *out, float *mean, float *rstd,
                                  float *running_mean, float *running_var, const float *inp,
                                  const float *gamma, const float *beta, int B, int C, int H,
                                  int W);
void sdp_cuda_batchnorm_fwd_eval(sdp_cuda_ctx *ctx, float *out, const float *inp,
                                 const float *running_mean, const float *running_var,
                                 const float *gamma, const float *beta, int B, int C, int H, int W);
void sdp_cuda_batchnorm_bwd(sdp_cuda_ctx *ctx, float *dinp, float *dgamma, float *dbeta,
                            const float *dout, const float *inp, const float *gamma,
                            const float *mean, const float *rstd, int B, int C, int H, int W);

/* ---- ReLU and pooling ---------------------------------------------------------------------- */

void sdp_cuda_relu_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, size_t n);
void sdp_cuda_relu_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, const float *out,
                       size_t n);
void sdp_cuda_avgpool_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, int B, int C, int H,
                          int W, int k);
void sdp_cuda_avgpool_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, int B, int C, int H,
                          int W, int k);
void sdp_cuda_global_avgpool_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, int B, int C,
                                 int H, int W);
void sdp_cuda_global_avgpool_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, int B, int C,
                                 int H, int W);

/* ---- gradient slices ----------------------------------------------------------------------- */

/* dst[r * ld_dst + c] += src[r * ld_src + c] for r < rows, c < cols (the backend's add_rows). */
void sdp_cuda_add_rows(sdp_cuda_ctx *ctx, float *dst, size_t ld_dst, const float *src,
                       size_t ld_src, size_t rows, size_t cols);

#ifdef __cplusplus
}
#endif

#endif
