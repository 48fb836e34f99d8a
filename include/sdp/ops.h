/* The ops every model runs, as checked entry points over a backend: sdp_<op>(be, ...) checks the
 * shapes and arguments, failing with a message that names the op, then runs be-><op>, the entry of
 * the same name in the backend table (sdp/backend.h, where each op's signature is declared). All
 * arrays are the backend's memory. The entry points are defined in src/ops/ops.c.
 *
 * Conventions
 *  - Activations are [N, C] with N = B*T rows (tokens), row-major.
 *  - Weights follow PyTorch nn.Linear: w is [out, in], y = x w^T + b.
 *  - Backward ops ACCUMULATE (+=) into every gradient they are given (parameter and input
 *    gradients alike): callers zero gradient buffers once per step. Any gradient pointer may be
 *    NULL, and then that gradient is not computed (used by SDP backward masking).
 *    The one exception is sdp_softmax_xent_bwd, which overwrites.
 *  - Ops never allocate; those that need temporaries take a caller-owned scratch buffer.
 */
#ifndef SDP_OPS_H
#define SDP_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "sdp/rng.h"

typedef struct sdp_backend sdp_backend;

/* ---- the CPU's GEMM provider --------------------------------------------------------------- */

typedef enum { SDP_GEMM_DNNL, SDP_GEMM_OPENBLAS } sdp_gemm_provider;

/* The CPU kernels' own GEMM on host memory, by the given provider, unchecked: the CPU backend's
 * gemm entry and its kernels run it; others call sdp_gemm. */
void sdp_cpu_gemm(sdp_gemm_provider prov, bool ta, bool tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
const char *sdp_gemm_provider_name(sdp_gemm_provider prov);
/* Parses "dnnl" or "openblas"; returns false for anything else. */
bool sdp_gemm_provider_parse(const char *s, sdp_gemm_provider *out);
/* Sets the thread count used by OpenMP, OpenBLAS and oneDNN. */
void sdp_set_threads(int n);

/* ---- optimizers and reductions, where the parameters are ------------------------------------ */

/* A run of parameters updated together. Gradients and optimizer state may live in compact
 * buffers (SDP keeps them only for owned units), so each has its own offset. */
typedef struct {
    size_t offset, count; /* in the parameter buffer */
    bool decay;
    size_t grad_offset;  /* in the gradient buffer */
    size_t state_offset; /* in the optimizer state buffers (m, v) */
} sdp_opt_segment;

/* The scalars of one AdamW step (torch.optim.AdamW: decoupled weight decay shrinks the old
 * parameter, then the bias-corrected Adam step is applied). src/optim derives them once per step
 * (sdp_adamw_scalars_at of sdp/optim.h, in double where beta^t is involved), so that every
 * backend's kernel computes with the same values; the element math is float. */
typedef struct {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float step_size;        /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2;     /* 1 / sqrt(1 - beta2^t) */
    float decay_multiplier; /* 1 - lr * weight_decay, applied only to decaying segments */
} sdp_adamw_scalars;

/* The scalars of one SGD step (torch.optim.SGD, dampening 0: weight decay is L2 added to the
 * gradient, Nesterov looks one buffer step ahead), from sdp_sgd_scalars_at of sdp/optim.h. */
typedef struct {
    float lr;
    float weight_decay; /* of decaying segments; the others add none */
    float momentum;     /* 0: no momentum buffer */
    bool nesterov;
    bool first_step; /* the momentum buffer starts as the gradient, whatever it holds */
} sdp_sgd_scalars;

/* One AdamW update of the segments with the step's scalars k; m and v are the moments, at the
 * segments' state offsets. */
void sdp_adamw_update(const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v,
                      float *params, const float *grads, const sdp_opt_segment *segs, int nseg);
/* One SGD update; buf is the momentum buffer (NULL when k->momentum is 0). */
void sdp_sgd_update(const sdp_backend *be, const sdp_sgd_scalars *k, float *buf, float *params,
                    const float *grads, const sdp_opt_segment *segs, int nseg);
/* The CPU's kernels of those two on host memory, unchecked: the CPU backend's entries run them,
 * and so does sdp_optim_step (sdp/optim.h), whose state is host memory. */
void sdp_cpu_adamw_update(const sdp_adamw_scalars *k, float *m, float *v, float *params,
                          const float *grads, const sdp_opt_segment *segs, int nseg);
void sdp_cpu_sgd_update(const sdp_sgd_scalars *k, float *buf, float *params, const float *grads,
                        const sdp_opt_segment *segs, int nseg);

/* x *= s */
void sdp_scale(const sdp_backend *be, float *x, size_t n, float s);
/* Waits: the sum of squares of x in double, in a fixed order (the same result run to run). */
double sdp_sumsq(const sdp_backend *be, const float *x, size_t n);
/* dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < cols. */
void sdp_copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                   size_t ld_src, size_t rows, size_t cols);

/* ---- dense algebra ------------------------------------------------------------------------- */

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(X) = X^T when tX is true.
 * lda/ldb/ldc are row strides in elements of the matrices as stored. */
void sdp_gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* out[n, oc] = inp[n, ic] w[oc, ic]^T + bias[oc]   (bias may be NULL) */
void sdp_linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                    const float *bias, int n, int ic, int oc);
/* dinp += dout w ; dw += dout^T inp ; dbias += column sums of dout */
void sdp_linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                    const float *inp, const float *w, int n, int ic, int oc);
/* dbias[j] += sum over rows r < n of dout[r * ld + col0 + j], j < len. */
void sdp_bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n, int ld,
                        int col0, int len);

/* ---- embeddings ---------------------------------------------------------------------------- */

/* out[b*T + t, :] = wte[tokens[b*T + t], :] + wpe[t, :]   (wpe may be NULL) */
void sdp_embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                   const float *wpe, int B, int T, int C);
void sdp_embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                   const int *tokens, int B, int T, int C);

/* ---- norms (eps = 1e-5) -------------------------------------------------------------------- */

/* out = (x - mean) * rstd * w + b, per row; saves mean[n] and rstd[n] for backward. */
void sdp_layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                       const float *inp, const float *w, const float *b, int n, int C);
void sdp_layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, const float *mean, const float *rstd,
                       int n, int C);
/* out = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps); saves rstd[n]. */
void sdp_rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                     const float *w, int n, int C);
void sdp_rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                     const float *inp, const float *w, const float *rstd, int n, int C);

/* ---- activations --------------------------------------------------------------------------- */

/* GELU, tanh approximation (as GPT-2). out may be inp (inference runs it in place). */
void sdp_gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n);
void sdp_gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                  size_t n);
/* inp is [n, 2F]: each row holds gate[F] then up[F]. out[n, F] = silu(gate) * up. */
void sdp_swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F);
void sdp_swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp, int n,
                    int F);

/* ---- residual ------------------------------------------------------------------------------ */

/* out = a + s * b, elementwise (out may alias a or b) */
void sdp_residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b, float s,
                      size_t n);
/* da += dout ; db += s * dout */
void sdp_residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout, float s,
                      size_t n);

/* ---- dropout ------------------------------------------------------------------------------- */

/* Inverted dropout with probability p (0 <= p < 1): a kept element is scaled by 1/(1-p), a dropped
 * one becomes 0, so the expectation is unchanged and evaluation runs without it.
 *
 * Masks are bits: element i is kept when bit i % 32 of word i / 32 is set (uint32_t words,
 * sdp_dropout_words(n) of them). A mask is drawn from a stream `key` (an sdp_rng state):
 * element i is kept when the top 32 bits of draw i of that stream (sdp_rng_at) are at least
 * sdp_dropout_threshold(p). Each decision is a function of (key, i) alone, so a mask is the same
 * on every backend and thread count, and attention regenerates its own instead of storing one. */
typedef struct {
    float p;      /* the probability of dropping an element; 0: no dropout */
    uint64_t key; /* the stream the decisions are drawn from */
} sdp_dropout;

#define SDP_NO_DROPOUT ((sdp_dropout){0.0f, 0})

static inline size_t sdp_dropout_words(size_t n) {
    return (n + 31) / 32;
}
/* An element is dropped with probability threshold / 2^32, which is p to within 2^-32. */
static inline uint32_t sdp_dropout_threshold(float p) {
    return (uint32_t)((double)p * 4294967296.0);
}
static inline SDP_HOST_DEVICE bool sdp_dropout_keeps(uint64_t key, uint64_t i, uint32_t threshold) {
    const sdp_rng stream = {key};
    return (uint32_t)(sdp_rng_at(stream, i) >> 32) >= threshold;
}
/* The factor of kept elements, 1/(1-p). */
static inline float sdp_dropout_scale(float p) {
    return 1.0f / (1.0f - p);
}

/* mask (sdp_dropout_words(n) words) = the keep decisions of elements [0, n) under d; bits past n
 * in the last word are 0. */
void sdp_dropout_mask(const sdp_backend *be, uint32_t *mask, size_t n, sdp_dropout d);
/* out[i] = kept(i) ? scale * inp[i] : 0 (out may be inp) */
void sdp_dropout_fwd(const sdp_backend *be, float *out, const float *inp, const uint32_t *mask,
                     float scale, size_t n);
/* dinp[i] += kept(i) ? scale * dout[i] : 0 */
void sdp_dropout_bwd(const sdp_backend *be, float *dinp, const float *dout, const uint32_t *mask,
                     float scale, size_t n);

/* ---- attention ----------------------------------------------------------------------------- */

/* qkv is [B, T, 3*D] with D = H*hs: each row holds q (H heads of hs), then k, then v.
 * Softmax attention with scale 1/sqrt(hs), causal (query t sees keys <= t) or, with causal false,
 * bidirectional (ViT); out is [B, T, D] (head h at columns h*hs).
 * lse[B, H, T] keeps the log-sum-exp of each score row so backward can recompute the
 * probabilities one (batch, head) at a time: nothing of size B*H*T*T is ever stored.
 * drop: dropout on the probabilities (after the softmax, before the product with v), as
 * nanoGPT's attn_dropout; SDP_NO_DROPOUT for none. Probability (b, h, t, s) (query t, key s) is
 * element ((b*H + h)*T + t)*T + s of drop's mask, regenerated by the backward from drop.key, so
 * that no mask is stored either; lse is that of the probabilities before dropout.
 * scratch: sdp_attention_scratch_bytes for at most these sizes (NULL where that is 0). */
size_t sdp_attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs);
void sdp_attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv, int B,
                       int T, int H, int hs, bool causal, sdp_dropout drop, float *scratch);
/* dqkv += gradient w.r.t. qkv (q, k and v parts). out/lse are those saved by the forward, drop
 * the forward's. */
void sdp_attention_bwd(const sdp_backend *be, float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *lse, int B, int T, int H, int hs, bool causal,
                       sdp_dropout drop, float *scratch);

/* Rotary position embedding (rotate-half convention, as HF LLaMA), applied in place to the q and
 * k parts of qkv [B, T, 3*D]; position t rotates pair (i, i + hs/2) by t * theta^(-2i/hs). */
void sdp_rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs, float theta);
/* In place on the q and k parts of dqkv: the inverse rotation (the transpose). */
void sdp_rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs, float theta);

/* ---- loss ---------------------------------------------------------------------------------- */

/* logits is [n, Vp] with V <= Vp real classes (columns V..Vp-1 are padding, ignored).
 * probs[n, Vp] gets the softmax (padding columns set to 0); probs may alias logits.
 * losses[n] gets -log p[target]; targets < 0 are ignored (loss 0).
 * Waits: returns the sum of losses over non-ignored rows, in double. */
double sdp_softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs, const float *logits,
                            const int *targets, int n, int V, int Vp);
/* dlogits = dloss * (probs - onehot(target)) for real columns, 0 for padding and ignored rows.
 * OVERWRITES dlogits (which may alias probs). */
void sdp_softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                          const int *targets, float dloss, int n, int V, int Vp);
/* Waits: how many rows r < n with labels[r] >= 0 have their largest logit (the first, on a tie)
 * at column labels[r]; logits is [n, ld], K <= ld classes. */
int sdp_count_correct(const sdp_backend *be, const float *logits, const int *labels, int n, int K,
                      int ld);

#endif
