/* The CUDA backend: the kernels of ops_cuda.h and ops_cuda_vision.h over device memory of
 * one sdp_cuda_ctx (be->ctx). Each entry forwards to the CUDA kernel of the same name; the
 * CPU-only arguments (the attention and convolution scratch, the CPU convolution algorithm) are
 * dropped. */
#include "sdp/backend.h"
#include "sdp/check.h"
#include "sdp/cuda_scratch.h"
#include "ops/cuda/ops_cuda.h"
#include "ops/cuda/ops_cuda_vision.h"

#include <stdlib.h>

static sdp_cuda_ctx *cu(const sdp_backend *be) {
    return be->ctx;
}

/* ---- memory ---- */

static void cuda_destroy(sdp_backend *be) {
    sdp_cuda_ctx_destroy(cu(be));
    free(be);
}

static void *cuda_alloc(const sdp_backend *be, sdp_memcat cat, size_t bytes) {
    return sdp_cuda_malloc(cu(be), cat, bytes);
}

static void cuda_free(const sdp_backend *be, void *p) {
    sdp_cuda_free(cu(be), p);
}

static void cuda_zero(const sdp_backend *be, void *p, size_t bytes) {
    sdp_cuda_zero(cu(be), p, bytes);
}

/* Waits, so the caller may reuse its host array at once (the model uploads each batch). */
static void cuda_upload(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    sdp_cuda_upload(cu(be), dst, src, bytes);
    sdp_cuda_sync(cu(be));
}

static void cuda_download(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    sdp_cuda_download(cu(be), dst, src, bytes);
}

static void cuda_sync(const sdp_backend *be) {
    sdp_cuda_sync(cu(be));
}

static void cuda_copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                           size_t ld_src, size_t rows, size_t cols) {
    sdp_cuda_copy_rows(cu(be), dst, ld_dst, src, ld_src, rows, cols);
}

/* ---- dense algebra ---- */

static void cuda_gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
    sdp_cuda_gemm(cu(be), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cuda_linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                            const float *bias, int n, int ic, int oc) {
    sdp_cuda_linear_fwd(cu(be), out, inp, w, bias, n, ic, oc);
}

static void cuda_linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int n, int ic,
                            int oc) {
    sdp_cuda_linear_bwd(cu(be), dinp, dw, dbias, dout, inp, w, n, ic, oc);
}

static void cuda_bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n,
                                int ld, int col0, int len) {
    sdp_cuda_bias_slice_bwd(cu(be), dbias, dout, n, ld, col0, len);
}

/* ---- embeddings and norms ---- */

static void cuda_embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                           const float *wpe, int B, int T, int C) {
    sdp_cuda_embed_fwd(cu(be), out, tokens, wte, wpe, B, T, C);
}

static void cuda_embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                           const int *tokens, int B, int T, int C) {
    sdp_cuda_embed_bwd(cu(be), dwte, dwpe, dout, tokens, B, T, C);
}

static void cuda_layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int n, int C) {
    sdp_cuda_layernorm_fwd(cu(be), out, mean, rstd, inp, w, b, n, C);
}

static void cuda_layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int n, int C) {
    sdp_cuda_layernorm_bwd(cu(be), dinp, dw, db, dout, inp, w, mean, rstd, n, C);
}

static void cuda_rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                             const float *w, int n, int C) {
    sdp_cuda_rmsnorm_fwd(cu(be), out, rstd, inp, w, n, C);
}

static void cuda_rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int n, int C) {
    sdp_cuda_rmsnorm_bwd(cu(be), dinp, dw, dout, inp, w, rstd, n, C);
}

/* ---- activations and residuals ---- */

static void cuda_gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    sdp_cuda_gelu_fwd(cu(be), out, inp, n);
}

static void cuda_gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                          size_t n) {
    sdp_cuda_gelu_bwd(cu(be), dinp, dout, inp, n);
}

static void cuda_swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F) {
    sdp_cuda_swiglu_fwd(cu(be), out, inp, n, F);
}

static void cuda_swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                            int n, int F) {
    sdp_cuda_swiglu_bwd(cu(be), dinp, dout, inp, n, F);
}

static void cuda_residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b,
                              float s, size_t n) {
    sdp_cuda_residual_fwd(cu(be), out, a, b, s, n);
}

static void cuda_residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout,
                              float s, size_t n) {
    sdp_cuda_residual_bwd(cu(be), da, db, dout, s, n);
}

/* ---- attention: its score matrices live in the model's scratch ---- */

static size_t cuda_attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs) {
    (void)be;
    (void)hs;
    return sdp_cuda_attention_scratch_bytes(B, T, H);
}

static void cuda_attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv,
                               int B, int T, int H, int hs, bool causal, float *scratch) {
    sdp_cuda_attention_fwd(cu(be), out, lse, qkv, B, T, H, hs, causal, scratch);
}

static void cuda_attention_bwd(const sdp_backend *be, float *dqkv, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B, int T,
                               int H, int hs, bool causal, float *scratch) {
    sdp_cuda_attention_bwd(cu(be), dqkv, dout, qkv, out, lse, B, T, H, hs, causal, scratch);
}

static void cuda_rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs,
                          float theta) {
    sdp_cuda_rope_fwd(cu(be), qkv, B, T, H, hs, theta);
}

static void cuda_rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs,
                          float theta) {
    sdp_cuda_rope_bwd(cu(be), dqkv, B, T, H, hs, theta);
}

/* ---- loss ---- */

static double cuda_softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs,
                                    const float *logits, const int *targets, int n, int V, int Vp) {
    return sdp_cuda_softmax_xent_fwd(cu(be), losses, probs, logits, targets, n, V, Vp);
}

static void cuda_softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                                  const int *targets, float dloss, int n, int V, int Vp) {
    sdp_cuda_softmax_xent_bwd(cu(be), dlogits, probs, targets, dloss, n, V, Vp);
}

static int cuda_count_correct(const sdp_backend *be, const float *logits, const int *labels, int n,
                              int K, int ld) {
    return sdp_cuda_count_correct(cu(be), logits, labels, n, K, ld);
}

/* ---- ViT stem ---- */

static void cuda_patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C,
                              int H, int W, int p) {
    sdp_cuda_patch_gather(cu(be), rows, images, B, C, H, W, p);
}

static void cuda_vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches,
                               const float *cls, const float *pos, int B, int T, int C) {
    sdp_cuda_vit_embed_fwd(cu(be), embed, patches, cls, pos, B, T, C);
}

static void cuda_vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                               const float *dembed, int B, int T, int C) {
    sdp_cuda_vit_embed_bwd(cu(be), dpatches, dcls, dpos, dembed, B, T, C);
}

static void cuda_adamw_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *m,
                              float *v, float *params, const float *grads,
                              const sdp_opt_segment *segs, int nseg, float lr) {
    sdp_cuda_adamw_update(cu(be), cfg, t, m, v, params, grads, segs, nseg, lr);
}

/* ---- reductions and communication ---- */

static void cuda_scale(const sdp_backend *be, float *x, size_t n, float s) {
    sdp_cuda_scale(cu(be), x, n, s);
}

static double cuda_sumsq(const sdp_backend *be, const float *x, size_t n) {
    return sdp_cuda_sumsq(cu(be), x, n);
}

static void *cuda_comm_open(const sdp_backend *be, MPI_Comm comm) {
    return sdp_cuda_comm_open(cu(be), comm);
}

static void cuda_comm_close(const sdp_backend *be, void *dc) {
    sdp_cuda_comm_close(cu(be), dc);
}

static void cuda_allreduce_start(const sdp_backend *be, void *dc, float *x, size_t n) {
    sdp_cuda_allreduce_start(cu(be), dc, x, n);
}

static void cuda_broadcast_start(const sdp_backend *be, void *dc, float *x, size_t n, int root) {
    sdp_cuda_broadcast_start(cu(be), dc, x, n, root);
}

static void cuda_allreduce_wait(const sdp_backend *be) {
    sdp_cuda_allreduce_wait(cu(be));
}

static void cuda_sgd_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *buf,
                            float *params, const float *grads, const sdp_opt_segment *segs,
                            int nseg, float lr) {
    sdp_cuda_sgd_update(cu(be), cfg, t, buf, params, grads, segs, nseg, lr);
}

/* ---- vision (ResNet): convolutions on cuDNN, their workspace the context's ---- */

static void *cuda_conv_plan_create(const sdp_backend *be, const sdp_conv_shape *shape,
                                   sdp_conv_algo algo) {
    (void)algo; /* the CPU's choice; cuDNN picks its own */
    return sdp_cuda_conv_create(cu(be), shape);
}

static void cuda_conv_plan_free(const sdp_backend *be, void *plan) {
    (void)be;
    sdp_cuda_conv_destroy(plan);
}

static size_t cuda_conv_scratch_bytes(const sdp_backend *be, const void *plan) {
    (void)be;
    (void)plan;
    return 0;
}

static void cuda_conv2d_fwd(const sdp_backend *be, const void *plan, float *out, const float *inp,
                            const float *w, const float *bias, float *scratch) {
    (void)scratch;
    sdp_cuda_conv2d_fwd(cu(be), plan, out, inp, w, bias);
}

static void cuda_conv2d_bwd(const sdp_backend *be, const void *plan, float *dinp, float *dw,
                            float *dbias, const float *dout, const float *inp, const float *w,
                            float *scratch) {
    (void)scratch;
    sdp_cuda_conv2d_bwd(cu(be), plan, dinp, dw, dbias, dout, inp, w);
}

static void cuda_batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                                     float *running_mean, float *running_var, const float *inp,
                                     const float *gamma, const float *beta, int B, int C, int H,
                                     int W) {
    sdp_cuda_batchnorm_fwd_train(cu(be), out, mean, rstd, running_mean, running_var, inp, gamma,
                                 beta, B, C, H, W);
}

static void cuda_batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                                    const float *running_mean, const float *running_var,
                                    const float *gamma, const float *beta, int B, int C, int H,
                                    int W) {
    sdp_cuda_batchnorm_fwd_eval(cu(be), out, inp, running_mean, running_var, gamma, beta, B, C, H,
                                W);
}

static void cuda_batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                               const float *dout, const float *inp, const float *gamma,
                               const float *mean, const float *rstd, int B, int C, int H, int W) {
    sdp_cuda_batchnorm_bwd(cu(be), dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, B, C, H, W);
}

static void cuda_relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    sdp_cuda_relu_fwd(cu(be), out, inp, n);
}

static void cuda_relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                          size_t n) {
    sdp_cuda_relu_bwd(cu(be), dinp, dout, out, n);
}

static void cuda_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                             int H, int W, int k) {
    sdp_cuda_avgpool_fwd(cu(be), out, inp, B, C, H, W, k);
}

static void cuda_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                             int H, int W, int k) {
    sdp_cuda_avgpool_bwd(cu(be), dinp, dout, B, C, H, W, k);
}

static void cuda_global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B,
                                    int C, int H, int W) {
    sdp_cuda_global_avgpool_fwd(cu(be), out, inp, B, C, H, W);
}

static void cuda_global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B,
                                    int C, int H, int W) {
    sdp_cuda_global_avgpool_bwd(cu(be), dinp, dout, B, C, H, W);
}

static void cuda_add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                          size_t ld_src, size_t rows, size_t cols) {
    sdp_cuda_add_rows(cu(be), dst, ld_dst, src, ld_src, rows, cols);
}

static size_t cuda_bytes_in_use(const sdp_backend *be) {
    (void)be;
    return sdp_cuda_bytes_in_use();
}

void *sdp_backend_cuda_cublas(const sdp_backend *be) {
    SDP_CHECK(be && be->destroy == cuda_destroy, "sdp_backend_cuda_cublas: not a CUDA backend");
    return cu(be)->cublas;
}

bool sdp_backend_cuda_available(void) {
    return sdp_cuda_device_count() > 0;
}

int sdp_backend_cuda_devices(void) {
    return sdp_cuda_device_count();
}

sdp_backend *sdp_backend_cuda(int device, sdp_precision precision) {
    sdp_cuda_ctx *ctx = sdp_cuda_ctx_create(device, precision);
    sdp_backend *be = malloc(sizeof *be);
    SDP_CHECK(be, "out of memory creating the CUDA backend");
    *be = (sdp_backend){
        .name = "cuda",
        .ctx = ctx,
        .mem = &ctx->mem,
        .destroy = cuda_destroy,
        .scale = cuda_scale,
        .sumsq = cuda_sumsq,
        .comm_open = cuda_comm_open,
        .comm_close = cuda_comm_close,
        .allreduce_start = cuda_allreduce_start,
        .broadcast_start = cuda_broadcast_start,
        .allreduce_wait = cuda_allreduce_wait,
        .adamw_update = cuda_adamw_update,
        .sgd_update = cuda_sgd_update,
        .bytes_in_use = cuda_bytes_in_use,
        .alloc = cuda_alloc,
        .free = cuda_free,
        .zero = cuda_zero,
        .upload = cuda_upload,
        .download = cuda_download,
        .sync = cuda_sync,
        .copy_rows = cuda_copy_rows,
        .gemm = cuda_gemm,
        .linear_fwd = cuda_linear_fwd,
        .linear_bwd = cuda_linear_bwd,
        .bias_slice_bwd = cuda_bias_slice_bwd,
        .embed_fwd = cuda_embed_fwd,
        .embed_bwd = cuda_embed_bwd,
        .layernorm_fwd = cuda_layernorm_fwd,
        .layernorm_bwd = cuda_layernorm_bwd,
        .rmsnorm_fwd = cuda_rmsnorm_fwd,
        .rmsnorm_bwd = cuda_rmsnorm_bwd,
        .gelu_fwd = cuda_gelu_fwd,
        .gelu_bwd = cuda_gelu_bwd,
        .swiglu_fwd = cuda_swiglu_fwd,
        .swiglu_bwd = cuda_swiglu_bwd,
        .residual_fwd = cuda_residual_fwd,
        .residual_bwd = cuda_residual_bwd,
        .attention_scratch_bytes = cuda_attention_scratch_bytes,
        .attention_fwd = cuda_attention_fwd,
        .attention_bwd = cuda_attention_bwd,
        .rope_fwd = cuda_rope_fwd,
        .rope_bwd = cuda_rope_bwd,
        .softmax_xent_fwd = cuda_softmax_xent_fwd,
        .softmax_xent_bwd = cuda_softmax_xent_bwd,
        .count_correct = cuda_count_correct,
        .patch_gather = cuda_patch_gather,
        .vit_embed_fwd = cuda_vit_embed_fwd,
        .vit_embed_bwd = cuda_vit_embed_bwd,
        .conv_plan_create = cuda_conv_plan_create,
        .conv_plan_free = cuda_conv_plan_free,
        .conv_scratch_bytes = cuda_conv_scratch_bytes,
        .conv2d_fwd = cuda_conv2d_fwd,
        .conv2d_bwd = cuda_conv2d_bwd,
        .batchnorm_fwd_train = cuda_batchnorm_fwd_train,
        .batchnorm_fwd_eval = cuda_batchnorm_fwd_eval,
        .batchnorm_bwd = cuda_batchnorm_bwd,
        .relu_fwd = cuda_relu_fwd,
        .relu_bwd = cuda_relu_bwd,
        .avgpool_fwd = cuda_avgpool_fwd,
        .avgpool_bwd = cuda_avgpool_bwd,
        .global_avgpool_fwd = cuda_global_avgpool_fwd,
        .global_avgpool_bwd = cuda_global_avgpool_bwd,
        .add_rows = cuda_add_rows,
    };
    return be;
}
