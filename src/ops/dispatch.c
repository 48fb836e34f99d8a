/* The ops' entry points (sdp/ops.h, sdp/ops_vision.h): each checks its shapes and arguments, here
 * and nowhere else, then runs the backend's entry of the same name. A check fails with a message
 * that names the op and says what to change; the implementations may then assume valid arguments.
 *
 * Checks cover what the arguments alone tell: sizes, NULL pointers where a result or an input is
 * required (a gradient may always be NULL: it is then skipped), divisibility, and products that
 * must fit an int. Values in backend memory (token ids,
 * targets) cannot be read here: the CPU kernels check those themselves. */
#include "sdp/backend.h"
#include "sdp/check.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

/* Fails unless p is given; the message names the argument. An expression, so that the checks of
 * one call's arguments read as one line. */
static void need(const char *op, const void *p, const char *name) {
    SDP_CHECK(p != NULL, "%s: %s is NULL: pass a buffer", op, name);
}
#define NEED(op, p) need(op, p, #p)

/* Fails unless the product of a and b (both >= 0) fits an int: the kernels index with ints. */
static void fits_int(const char *op, const char *what, int64_t a, int64_t b) {
    SDP_CHECK(a <= INT_MAX && (a == 0 || b <= INT_MAX / a),
              "%s: %s = %lld x %lld exceeds the int range: use smaller sizes", op, what,
              (long long)a, (long long)b);
}

static void rows_args(const char *op, const float *dst, size_t ld_dst, const float *src,
                      size_t ld_src, size_t rows, size_t cols) {
    SDP_CHECK(rows <= 1 || (cols <= ld_dst && cols <= ld_src),
              "%s: %zu columns exceed a row stride (ld_dst=%zu, ld_src=%zu): pass the strides of "
              "the matrices as stored",
              op, cols, ld_dst, ld_src);
    if (rows && cols) NEED(op, dst), NEED(op, src);
}

/* ---- optimizers and reductions ---- */

static void optim_args(const char *op, const void *k, float *params, const float *grads,
                       const sdp_opt_segment *segs, int nseg) {
    SDP_CHECK(k != NULL, "%s: k is NULL: pass the step's scalars", op);
    SDP_CHECK(nseg >= 0 && (nseg == 0 || segs), "%s: %d segments at %p: pass the segments", op,
              nseg, (const void *)segs);
    if (nseg) NEED(op, params), NEED(op, grads);
}

void sdp_adamw_update(const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v,
                      float *params, const float *grads, const sdp_opt_segment *segs, int nseg) {
    optim_args("sdp_adamw_update", k, params, grads, segs, nseg);
    if (nseg) NEED("sdp_adamw_update", m), NEED("sdp_adamw_update", v);
    be->adamw_update(be, k, m, v, params, grads, segs, nseg);
}

void sdp_sgd_update(const sdp_backend *be, const sdp_sgd_scalars *k, float *buf, float *params,
                    const float *grads, const sdp_opt_segment *segs, int nseg) {
    optim_args("sdp_sgd_update", k, params, grads, segs, nseg);
    if (nseg && k->momentum != 0.0f) NEED("sdp_sgd_update", buf);
    be->sgd_update(be, k, buf, params, grads, segs, nseg);
}

void sdp_scale(const sdp_backend *be, float *x, size_t n, float s) {
    if (n) NEED("sdp_scale", x);
    be->scale(be, x, n, s);
}

double sdp_sumsq(const sdp_backend *be, const float *x, size_t n) {
    if (n) NEED("sdp_sumsq", x);
    return be->sumsq(be, x, n);
}

void sdp_copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                   size_t ld_src, size_t rows, size_t cols) {
    rows_args("sdp_copy_rows", dst, ld_dst, src, ld_src, rows, cols);
    be->copy_rows(be, dst, ld_dst, src, ld_src, rows, cols);
}

/* ---- dense algebra ---- */

static int max1(int x) {
    return x > 1 ? x : 1;
}

void sdp_gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    SDP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d: pass sizes >= 0", M,
              N, K);
    /* Row-major: the stored A is [M, K], or [K, M] when transposed; likewise for B. */
    int a_cols = ta ? M : K, b_cols = tb ? K : N;
    SDP_CHECK(lda >= max1(a_cols),
              "gemm: lda=%d is less than the %d columns of A as stored: "
              "pass the row stride of A",
              lda, a_cols);
    SDP_CHECK(ldb >= max1(b_cols),
              "gemm: ldb=%d is less than the %d columns of B as stored: "
              "pass the row stride of B",
              ldb, b_cols);
    SDP_CHECK(ldc >= max1(N),
              "gemm: ldc=%d is less than the %d columns of C: "
              "pass the row stride of C",
              ldc, N);
    if (M && N) NEED("gemm", C);
    if (M && N && K) NEED("gemm", A), NEED("gemm", B);
    be->gemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void linear_dims(const char *op, int n, int ic, int oc) {
    SDP_CHECK(n >= 1 && ic >= 1 && oc >= 1, "%s: sizes n=%d ic=%d oc=%d must all be >= 1", op, n,
              ic, oc);
}

void sdp_linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                    const float *bias, int n, int ic, int oc) {
    linear_dims("sdp_linear_fwd", n, ic, oc);
    NEED("sdp_linear_fwd", out), NEED("sdp_linear_fwd", inp), NEED("sdp_linear_fwd", w);
    be->linear_fwd(be, out, inp, w, bias, n, ic, oc);
}

void sdp_linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                    const float *inp, const float *w, int n, int ic, int oc) {
    linear_dims("sdp_linear_bwd", n, ic, oc);
    NEED("sdp_linear_bwd", dout);
    SDP_CHECK(!dinp || w, "sdp_linear_bwd: dinp needs the weights: pass w");
    SDP_CHECK(!dw || inp, "sdp_linear_bwd: dw needs the input: pass inp");
    be->linear_bwd(be, dinp, dw, dbias, dout, inp, w, n, ic, oc);
}

void sdp_bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n, int ld,
                        int col0, int len) {
    SDP_CHECK(n >= 0 && len >= 0 && col0 >= 0 && (n <= 1 || (int64_t)col0 + len <= ld),
              "sdp_bias_slice_bwd: columns [%d, %d + %d) of %d rows are not within rows of %d: "
              "pass the slice and the row stride of dout",
              col0, col0, len, n, ld);
    if (n && len) NEED("sdp_bias_slice_bwd", dbias), NEED("sdp_bias_slice_bwd", dout);
    be->bias_slice_bwd(be, dbias, dout, n, ld, col0, len);
}

/* ---- embeddings and norms ---- */

static void embed_dims(const char *op, int B, int T, int C) {
    SDP_CHECK(B >= 1 && T >= 1 && C >= 1, "%s: sizes B=%d T=%d C=%d must all be >= 1", op, B, T, C);
    fits_int(op, "B*T tokens", B, T);
}

void sdp_embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                   const float *wpe, int B, int T, int C) {
    embed_dims("sdp_embed_fwd", B, T, C);
    NEED("sdp_embed_fwd", out), NEED("sdp_embed_fwd", tokens), NEED("sdp_embed_fwd", wte);
    be->embed_fwd(be, out, tokens, wte, wpe, B, T, C);
}

void sdp_embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                   const int *tokens, int B, int T, int C) {
    embed_dims("sdp_embed_bwd", B, T, C);
    NEED("sdp_embed_bwd", dout), NEED("sdp_embed_bwd", tokens);
    be->embed_bwd(be, dwte, dwpe, dout, tokens, B, T, C);
}

static void norm_dims(const char *op, int n, int C) {
    SDP_CHECK(n >= 1 && C >= 1, "%s: sizes n=%d C=%d must both be >= 1", op, n, C);
}

void sdp_layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                       const float *inp, const float *w, const float *b, int n, int C) {
    const char *op = "sdp_layernorm_fwd";
    norm_dims(op, n, C);
    NEED(op, out), NEED(op, mean), NEED(op, rstd), NEED(op, inp), NEED(op, w), NEED(op, b);
    be->layernorm_fwd(be, out, mean, rstd, inp, w, b, n, C);
}

void sdp_layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, const float *mean, const float *rstd,
                       int n, int C) {
    const char *op = "sdp_layernorm_bwd";
    norm_dims(op, n, C);
    NEED(op, dout), NEED(op, inp), NEED(op, mean), NEED(op, rstd);
    SDP_CHECK(!dinp || w, "%s: dinp needs the weights: pass w", op);
    be->layernorm_bwd(be, dinp, dw, db, dout, inp, w, mean, rstd, n, C);
}

void sdp_rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                     const float *w, int n, int C) {
    const char *op = "sdp_rmsnorm_fwd";
    norm_dims(op, n, C);
    NEED(op, out), NEED(op, rstd), NEED(op, inp), NEED(op, w);
    be->rmsnorm_fwd(be, out, rstd, inp, w, n, C);
}

void sdp_rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                     const float *inp, const float *w, const float *rstd, int n, int C) {
    const char *op = "sdp_rmsnorm_bwd";
    norm_dims(op, n, C);
    NEED(op, dout), NEED(op, inp), NEED(op, rstd);
    SDP_CHECK(!dinp || w, "%s: dinp needs the weights: pass w", op);
    be->rmsnorm_bwd(be, dinp, dw, dout, inp, w, rstd, n, C);
}

/* ---- activations and residuals ---- */

void sdp_gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    if (n) NEED("sdp_gelu_fwd", out), NEED("sdp_gelu_fwd", inp);
    be->gelu_fwd(be, out, inp, n);
}

void sdp_gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                  size_t n) {
    if (n && dinp) NEED("sdp_gelu_bwd", dout), NEED("sdp_gelu_bwd", inp);
    be->gelu_bwd(be, dinp, dout, inp, n);
}

static void swiglu_dims(const char *op, int n, int F) {
    SDP_CHECK(n >= 1 && F >= 1, "%s: sizes n=%d F=%d must both be >= 1", op, n, F);
    fits_int(op, "the 2F columns", 2, F);
}

void sdp_swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F) {
    swiglu_dims("sdp_swiglu_fwd", n, F);
    NEED("sdp_swiglu_fwd", out), NEED("sdp_swiglu_fwd", inp);
    be->swiglu_fwd(be, out, inp, n, F);
}

void sdp_swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp, int n,
                    int F) {
    swiglu_dims("sdp_swiglu_bwd", n, F);
    if (dinp) NEED("sdp_swiglu_bwd", dout), NEED("sdp_swiglu_bwd", inp);
    be->swiglu_bwd(be, dinp, dout, inp, n, F);
}

void sdp_residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b, float s,
                      size_t n) {
    if (n) NEED("sdp_residual_fwd", out), NEED("sdp_residual_fwd", a), NEED("sdp_residual_fwd", b);
    be->residual_fwd(be, out, a, b, s, n);
}

void sdp_residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout, float s,
                      size_t n) {
    if (n && (da || db)) NEED("sdp_residual_bwd", dout);
    be->residual_bwd(be, da, db, dout, s, n);
}

/* ---- dropout ---- */

static void dropout_p(const char *op, float p) {
    SDP_CHECK(p >= 0.0f && p < 1.0f,
              "%s: dropout probability %g is outside [0, 1): use 0 (none) up to below 1", op,
              (double)p);
}

void sdp_dropout_mask(const sdp_backend *be, uint32_t *mask, size_t n, sdp_dropout d) {
    dropout_p("sdp_dropout_mask", d.p);
    if (n) NEED("sdp_dropout_mask", mask);
    be->dropout_mask(be, mask, n, d);
}

static void dropout_scale(const char *op, float scale) {
    SDP_CHECK(isfinite(scale) && scale >= 0.0f,
              "%s: scale %g must be finite and >= 0 (1/(1-p) for inverted dropout)", op,
              (double)scale);
}

void sdp_dropout_fwd(const sdp_backend *be, float *out, const float *inp, const uint32_t *mask,
                     float scale, size_t n) {
    const char *op = "sdp_dropout_fwd";
    dropout_scale(op, scale);
    if (n) NEED(op, out), NEED(op, inp), NEED(op, mask);
    be->dropout_fwd(be, out, inp, mask, scale, n);
}

void sdp_dropout_bwd(const sdp_backend *be, float *dinp, const float *dout, const uint32_t *mask,
                     float scale, size_t n) {
    const char *op = "sdp_dropout_bwd";
    dropout_scale(op, scale);
    if (n && dinp) NEED(op, dout), NEED(op, mask);
    be->dropout_bwd(be, dinp, dout, mask, scale, n);
}

/* ---- attention ---- */

static void attention_dims(int B, int T, int H, int hs) {
    SDP_CHECK(B > 0 && T > 0 && H > 0 && hs > 0,
              "attention needs positive sizes, got B=%d T=%d H=%d hs=%d: check the model config", B,
              T, H, hs);
    fits_int("attention", "3 * H * hs columns", 3 * (int64_t)H, hs);
    fits_int("attention", "B * H rows", B, H);
}

/* "At most H heads": a subnetwork may keep none (H = 0), and then needs no scratch. */
size_t sdp_attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs) {
    SDP_CHECK(B >= 0 && T >= 0 && H >= 0 && hs >= 0,
              "sdp_attention_scratch_bytes: sizes B=%d T=%d H=%d hs=%d must be >= 0", B, T, H, hs);
    fits_int("attention", "3 * H * hs columns", 3 * (int64_t)H, hs);
    fits_int("attention", "B * H rows", B, H);
    return be->attention_scratch_bytes(be, B, T, H, hs);
}

static void attention_scratch(const sdp_backend *be, int B, int T, int H, int hs,
                              const float *scratch) {
    SDP_CHECK(scratch || be->attention_scratch_bytes(be, B, T, H, hs) == 0,
              "attention scratch is NULL: pass a buffer of sdp_attention_scratch_bytes bytes");
}

void sdp_attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv, int B,
                       int T, int H, int hs, bool causal, sdp_dropout drop, float *scratch) {
    attention_dims(B, T, H, hs);
    attention_scratch(be, B, T, H, hs, scratch);
    dropout_p("sdp_attention_fwd", drop.p);
    NEED("sdp_attention_fwd", out), NEED("sdp_attention_fwd", lse), NEED("sdp_attention_fwd", qkv);
    be->attention_fwd(be, out, lse, qkv, B, T, H, hs, causal, drop, scratch);
}

void sdp_attention_bwd(const sdp_backend *be, float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *lse, int B, int T, int H, int hs, bool causal,
                       sdp_dropout drop, float *scratch) {
    const char *op = "sdp_attention_bwd";
    attention_dims(B, T, H, hs);
    attention_scratch(be, B, T, H, hs, scratch);
    dropout_p(op, drop.p);
    if (dqkv) NEED(op, dout), NEED(op, qkv), NEED(op, out), NEED(op, lse);
    be->attention_bwd(be, dqkv, dout, qkv, out, lse, B, T, H, hs, causal, drop, scratch);
}

enum { ROPE_MAX_HEAD = 4096 }; /* the CPU's per-position cos/sin tables live on the stack */

static void rope_args(const float *qkv, int B, int T, int H, int hs, float theta) {
    SDP_CHECK(B > 0 && T > 0 && H > 0 && hs > 0,
              "rope needs positive sizes, got B=%d T=%d H=%d hs=%d: check the model config", B, T,
              H, hs);
    SDP_CHECK(hs % 2 == 0 && hs <= ROPE_MAX_HEAD,
              "rope needs an even head size of at most %d, got %d: change n_embd or n_head",
              ROPE_MAX_HEAD, hs);
    SDP_CHECK(theta > 0 && isfinite(theta),
              "rope theta must be a positive number, got %g: fix rope_theta in the config",
              (double)theta);
    fits_int("rope", "3 * H * hs columns", 3 * (int64_t)H, hs);
    NEED("rope", qkv);
}

void sdp_rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs, float theta) {
    rope_args(qkv, B, T, H, hs, theta);
    be->rope_fwd(be, qkv, B, T, H, hs, theta);
}

void sdp_rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs, float theta) {
    rope_args(dqkv, B, T, H, hs, theta);
    be->rope_bwd(be, dqkv, B, T, H, hs, theta);
}

/* ---- loss ---- */

static void xent_dims(int n, int V, int Vp) {
    SDP_CHECK(n >= 1, "cross-entropy: %d rows: pass at least one", n);
    SDP_CHECK(V >= 1 && V <= Vp,
              "cross-entropy: vocabulary size %d must be in [1, padded size %d]: fix the model "
              "config",
              V, Vp);
}

double sdp_softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs, const float *logits,
                            const int *targets, int n, int V, int Vp) {
    const char *op = "sdp_softmax_xent_fwd";
    xent_dims(n, V, Vp);
    NEED(op, losses), NEED(op, probs), NEED(op, logits), NEED(op, targets);
    return be->softmax_xent_fwd(be, losses, probs, logits, targets, n, V, Vp);
}

void sdp_softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                          const int *targets, float dloss, int n, int V, int Vp) {
    const char *op = "sdp_softmax_xent_bwd";
    xent_dims(n, V, Vp);
    NEED(op, dlogits), NEED(op, probs), NEED(op, targets);
    be->softmax_xent_bwd(be, dlogits, probs, targets, dloss, n, V, Vp);
}

int sdp_count_correct(const sdp_backend *be, const float *logits, const int *labels, int n, int K,
                      int ld) {
    SDP_CHECK(n >= 0 && K >= 1 && K <= ld,
              "sdp_count_correct: %d rows of %d classes in rows of %d: need n >= 0 and "
              "1 <= K <= ld",
              n, K, ld);
    if (n) NEED("sdp_count_correct", logits), NEED("sdp_count_correct", labels);
    return be->count_correct(be, logits, labels, n, K, ld);
}

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
