/* The entry points of sdp/ops.h (those of sdp/ops_vision.h are in ops_vision.c): each checks
 * its shapes and arguments, here and nowhere else, then runs the backend's entry of the same name.
 * A check fails with a message that names the op and says what to change; the implementations
 * may then assume valid arguments.
 *
 * Checks cover what the arguments alone tell: sizes, NULL pointers where a result or an input is
 * required (a gradient may always be NULL: it is then skipped), divisibility, and products that
 * must fit an int. Values in backend memory (token ids, targets) cannot be read here: the CPU
 * kernels check those themselves. */
#include "sdp/backend.h"
#include "sdp/check.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "op_args.h"

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
