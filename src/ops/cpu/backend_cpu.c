/* The CPU backend: the kernels of sdp/ops.h and sdp/ops_vision.h (GEMMs by the chosen provider)
 * over host memory from sdp_alloc. Each entry forwards to its kernel unchanged, so a model on this
 * backend computes exactly what it computed when it called those kernels itself. */
#include "sdp/backend.h"
#include "sdp/check.h"
#include "sdp/ops_vision.h"
#include "sdp/optim.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    sdp_backend table;
    sdp_gemm_provider gemm;
} cpu_backend;

static sdp_gemm_provider prov(const sdp_backend *be) {
    return ((const cpu_backend *)be->ctx)->gemm;
}

/* ---- memory ---- */

static void cpu_destroy(sdp_backend *be) {
    free(be->ctx); /* the cpu_backend that holds be */
}

static void *cpu_alloc(const sdp_backend *be, sdp_memcat cat, size_t bytes) {
    return sdp_alloc(be->mem, cat, bytes);
}

static void cpu_free(const sdp_backend *be, void *p) {
    sdp_free(be->mem, p);
}

static void cpu_zero(const sdp_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}

static void cpu_copy(const sdp_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_sync(const sdp_backend *be) {
    (void)be;
}

static void cpu_copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                          size_t ld_src, size_t rows, size_t cols) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * ld_dst, src + r * ld_src, cols * sizeof(float));
}

/* ---- reductions ---- */

static void cpu_scale(const sdp_backend *be, float *x, size_t n, float s) {
    (void)be;
    sdp_scale(x, n, s);
}

static double cpu_sumsq(const sdp_backend *be, const float *x, size_t n) {
    (void)be;
    return sdp_sumsq(x, n);
}

/* ---- the optimizer ---- */

/* The optimizers of src/optim on the given state, t being the step's count after the increment
 * (sdp_optim_step increments it itself). */
static void run_optim(const sdp_opt_cfg *cfg, long t, float *m, float *v, float *params,
                      const float *grads, const sdp_opt_segment *segs, int nseg, float lr) {
    size_t n = 0; /* the state the segments reach: all the update may touch */
    for (int i = 0; i < nseg; i++)
        if (segs[i].state_offset + segs[i].count > n) n = segs[i].state_offset + segs[i].count;
    sdp_optim o = {.cfg = *cfg, .n = n, .m = m, .v = v, .t = t - 1};
    sdp_optim_step(&o, params, grads, segs, nseg, lr);
}

static void cpu_adamw_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *m,
                             float *v, float *params, const float *grads,
                             const sdp_opt_segment *segs, int nseg, float lr) {
    (void)be;
    run_optim(cfg, t, m, v, params, grads, segs, nseg, lr);
}

static void cpu_sgd_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *buf,
                           float *params, const float *grads, const sdp_opt_segment *segs, int nseg,
                           float lr) {
    (void)be;
    run_optim(cfg, t, buf, NULL, params, grads, segs, nseg, lr);
}

static size_t cpu_bytes_in_use(const sdp_backend *be) {
    return be->mem->total_cur;
}

/* ---- communication ---- */

/* Host memory needs no device communicator: MPI reduces and broadcasts the buffers in place (the
 * caller's MPI_Iallreduce, which overlaps the backward pass). So none is ever opened, and the
 * entries that take one are never reached. */
static void *cpu_comm_open(const sdp_backend *be, MPI_Comm comm) {
    (void)be, (void)comm;
    return NULL;
}

static void cpu_comm_close(const sdp_backend *be, void *dc) {
    (void)be;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_allreduce_start(const sdp_backend *be, void *dc, float *x, size_t n) {
    (void)be, (void)x, (void)n;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_broadcast_start(const sdp_backend *be, void *dc, float *x, size_t n, int root) {
    (void)be, (void)x, (void)n, (void)root;
    SDP_CHECK(!dc, "the CPU backend opens no device communicators");
}

static void cpu_allreduce_wait(const sdp_backend *be) {
    (void)be; /* nothing is ever in flight */
}

/* ---- dense algebra ---- */

static void cpu_gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc) {
    sdp_gemm(prov(be), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                           const float *bias, int n, int ic, int oc) {
    sdp_linear_fwd(prov(be), out, inp, w, bias, n, ic, oc);
}

static void cpu_linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias,
                           const float *dout, const float *inp, const float *w, int n, int ic,
                           int oc) {
    sdp_linear_bwd(prov(be), dinp, dw, dbias, dout, inp, w, n, ic, oc);
}

/* Summed in double, rows in order: the sum the transformer has always used for these slices. */
static void cpu_bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n,
                               int ld, int col0, int len) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < len; j++) {
        double sum = 0;
        for (int r = 0; r < n; r++) sum += dout[(size_t)r * ld + col0 + j];
        dbias[j] += (float)sum;
    }
}

/* ---- embeddings and norms ---- */

static void cpu_embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                          const float *wpe, int B, int T, int C) {
    (void)be;
    sdp_embed_fwd(out, tokens, wte, wpe, B, T, C);
}

static void cpu_embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                          const int *tokens, int B, int T, int C) {
    (void)be;
    sdp_embed_bwd(dwte, dwpe, dout, tokens, B, T, C);
}

static void cpu_layernorm_fwd(const sdp_backend *be, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int n, int C) {
    (void)be;
    sdp_layernorm_fwd(out, mean, rstd, inp, w, b, n, C);
}

static void cpu_layernorm_bwd(const sdp_backend *be, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int n, int C) {
    (void)be;
    sdp_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, n, C);
}

static void cpu_rmsnorm_fwd(const sdp_backend *be, float *out, float *rstd, const float *inp,
                            const float *w, int n, int C) {
    (void)be;
    sdp_rmsnorm_fwd(out, rstd, inp, w, n, C);
}

static void cpu_rmsnorm_bwd(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, const float *rstd, int n, int C) {
    (void)be;
    sdp_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, n, C);
}

/* ---- activations and residuals ---- */

static void cpu_gelu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    sdp_gelu_fwd(out, inp, n);
}

static void cpu_gelu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                         size_t n) {
    (void)be;
    sdp_gelu_bwd(dinp, dout, inp, n);
}

static void cpu_swiglu_fwd(const sdp_backend *be, float *out, const float *inp, int n, int F) {
    (void)be;
    sdp_swiglu_fwd(out, inp, n, F);
}

static void cpu_swiglu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                           int n, int F) {
    (void)be;
    sdp_swiglu_bwd(dinp, dout, inp, n, F);
}

static void cpu_residual_fwd(const sdp_backend *be, float *out, const float *a, const float *b,
                             float s, size_t n) {
    (void)be;
    sdp_residual_fwd(out, a, b, s, n);
}

static void cpu_residual_bwd(const sdp_backend *be, float *da, float *db, const float *dout,
                             float s, size_t n) {
    (void)be;
    sdp_residual_bwd(da, db, dout, s, n);
}

/* ---- attention ---- */

static size_t cpu_attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs) {
    (void)be;
    (void)B; /* one slice per thread, whatever the batch and heads */
    (void)H;
    return sdp_attention_scratch_floats(T, hs) * sizeof(float);
}

static void cpu_attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv,
                              int B, int T, int H, int hs, bool causal, float *scratch) {
    (void)be;
    sdp_attention_fwd(out, lse, qkv, B, T, H, hs, causal, scratch);
}

static void cpu_attention_bwd(const sdp_backend *be, float *dqkv, const float *dout,
                              const float *qkv, const float *out, const float *lse, int B, int T,
                              int H, int hs, bool causal, float *scratch) {
    (void)be;
    sdp_attention_bwd(dqkv, dout, qkv, out, lse, B, T, H, hs, causal, scratch);
}

static void cpu_rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs,
                         float theta) {
    (void)be;
    sdp_rope_fwd(qkv, B, T, H, hs, theta);
}

static void cpu_rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs,
                         float theta) {
    (void)be;
    sdp_rope_bwd(dqkv, B, T, H, hs, theta);
}

/* ---- loss ---- */

static double cpu_softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs,
                                   const float *logits, const int *targets, int n, int V, int Vp) {
    (void)be;
    return sdp_softmax_xent_fwd(losses, probs, logits, targets, n, V, Vp);
}

static void cpu_softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                                 const int *targets, float dloss, int n, int V, int Vp) {
    (void)be;
    sdp_softmax_xent_bwd(dlogits, probs, targets, dloss, n, V, Vp);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cpu_count_correct(const sdp_backend *be, const float *logits, const int *labels, int n,
                             int K, int ld) {
    (void)be;
    int hits = 0;
    for (int r = 0; r < n; r++)
        hits += labels[r] >= 0 && argmax(logits + (size_t)r * ld, K) == labels[r];
    return hits;
}

/* ---- ViT stem ---- */

static void cpu_patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C,
                             int H, int W, int p) {
    (void)be;
    sdp_patch_gather(rows, images, B, C, H, W, p);
}

static void cpu_vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches,
                              const float *cls, const float *pos, int B, int T, int C) {
    (void)be;
    const int P = T - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *src = t == 0 ? cls : patches + ((size_t)b * P + t - 1) * C;
            float *dst = embed + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dst[c] = src[c] + pos[(size_t)t * C + c];
        }
}

static void cpu_vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                              const float *dembed, int B, int T, int C) {
    (void)be;
    const int P = T - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dembed + ((size_t)b * T + t) * C;
            if (dpos)
                for (int k = 0; k < C; k++) dpos[(size_t)t * C + k] += d[k];
            if (t == 0 && dcls)
                for (int k = 0; k < C; k++) dcls[k] += d[k];
            if (t > 0) memcpy(dpatches + ((size_t)b * P + t - 1) * C, d, (size_t)C * sizeof(float));
        }
}

/* ---- vision (ResNet) ---- */

/* A plan is an sdp_conv_plan of its own allocation, made for the backend's GEMM provider (the
 * im2col implementation's). */
static void *cpu_conv_plan_create(const sdp_backend *be, const sdp_conv_shape *shape,
                                  sdp_conv_algo algo) {
    sdp_conv_plan *plan = malloc(sizeof *plan);
    SDP_CHECK(plan, "out of memory creating a convolution plan");
    sdp_conv_plan_init(plan, shape, algo, prov(be));
    return plan;
}

static void cpu_conv_plan_free(const sdp_backend *be, void *plan) {
    (void)be;
    if (!plan) return;
    sdp_conv_plan_free(plan);
    free(plan);
}

static size_t cpu_conv_scratch_bytes(const sdp_backend *be, const void *plan) {
    (void)be;
    return sdp_conv_scratch_floats(plan) * sizeof(float);
}

static void cpu_conv2d_fwd(const sdp_backend *be, const void *plan, float *out, const float *inp,
                           const float *w, const float *bias, float *scratch) {
    (void)be;
    sdp_conv2d_fwd(plan, out, inp, w, bias, scratch);
}

static void cpu_conv2d_bwd(const sdp_backend *be, const void *plan, float *dinp, float *dw,
                           float *dbias, const float *dout, const float *inp, const float *w,
                           float *scratch) {
    (void)be;
    sdp_conv2d_bwd(plan, dinp, dw, dbias, dout, inp, w, scratch);
}

static void cpu_batchnorm_fwd_train(const sdp_backend *be, float *out, float *mean, float *rstd,
                                    float *running_mean, float *running_var, const float *inp,
                                    const float *gamma, const float *beta, int B, int C, int H,
                                    int W) {
    (void)be;
    sdp_batchnorm_fwd_train(out, mean, rstd, running_mean, running_var, inp, gamma, beta, B, C, H,
                            W);
}

static void cpu_batchnorm_fwd_eval(const sdp_backend *be, float *out, const float *inp,
                                   const float *running_mean, const float *running_var,
                                   const float *gamma, const float *beta, int B, int C, int H,
                                   int W) {
    (void)be;
    sdp_batchnorm_fwd_eval(out, inp, running_mean, running_var, gamma, beta, B, C, H, W);
}

static void cpu_batchnorm_bwd(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                              const float *dout, const float *inp, const float *gamma,
                              const float *mean, const float *rstd, int B, int C, int H, int W) {
    (void)be;
    sdp_batchnorm_bwd(dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, B, C, H, W);
}

static void cpu_relu_fwd(const sdp_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    sdp_relu_fwd(out, inp, n);
}

static void cpu_relu_bwd(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                         size_t n) {
    (void)be;
    sdp_relu_bwd(dinp, dout, out, n);
}

static void cpu_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B, int C,
                            int H, int W, int k) {
    (void)be;
    sdp_avgpool_fwd(out, inp, B, C, H, W, k);
}

static void cpu_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                            int H, int W, int k) {
    (void)be;
    sdp_avgpool_bwd(dinp, dout, B, C, H, W, k);
}

static void cpu_global_avgpool_fwd(const sdp_backend *be, float *out, const float *inp, int B,
                                   int C, int H, int W) {
    (void)be;
    sdp_global_avgpool_fwd(out, inp, B, C, H, W);
}

static void cpu_global_avgpool_bwd(const sdp_backend *be, float *dinp, const float *dout, int B,
                                   int C, int H, int W) {
    (void)be;
    sdp_global_avgpool_bwd(dinp, dout, B, C, H, W);
}

static void cpu_add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                         size_t ld_src, size_t rows, size_t cols) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[r * ld_dst + c] += src[r * ld_src + c];
}

sdp_backend *sdp_backend_cpu(sdp_gemm_provider gemm, sdp_mem *mem) {
    SDP_ASSERT(mem);
    cpu_backend *cb = calloc(1, sizeof *cb);
    SDP_CHECK(cb, "out of memory creating the CPU backend");
    cb->gemm = gemm;
    cb->table = (sdp_backend){
        .name = "cpu",
        .ctx = cb,
        .mem = mem,
        .host_memory = true,
        .destroy = cpu_destroy,
        .adamw_update = cpu_adamw_update,
        .sgd_update = cpu_sgd_update,
        .bytes_in_use = cpu_bytes_in_use,
        .scale = cpu_scale,
        .sumsq = cpu_sumsq,
        .comm_open = cpu_comm_open,
        .comm_close = cpu_comm_close,
        .allreduce_start = cpu_allreduce_start,
        .broadcast_start = cpu_broadcast_start,
        .allreduce_wait = cpu_allreduce_wait,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .zero = cpu_zero,
        .upload = cpu_copy,
        .download = cpu_copy,
        .sync = cpu_sync,
        .copy_rows = cpu_copy_rows,
        .gemm = cpu_gemm,
        .linear_fwd = cpu_linear_fwd,
        .linear_bwd = cpu_linear_bwd,
        .bias_slice_bwd = cpu_bias_slice_bwd,
        .embed_fwd = cpu_embed_fwd,
        .embed_bwd = cpu_embed_bwd,
        .layernorm_fwd = cpu_layernorm_fwd,
        .layernorm_bwd = cpu_layernorm_bwd,
        .rmsnorm_fwd = cpu_rmsnorm_fwd,
        .rmsnorm_bwd = cpu_rmsnorm_bwd,
        .gelu_fwd = cpu_gelu_fwd,
        .gelu_bwd = cpu_gelu_bwd,
        .swiglu_fwd = cpu_swiglu_fwd,
        .swiglu_bwd = cpu_swiglu_bwd,
        .residual_fwd = cpu_residual_fwd,
        .residual_bwd = cpu_residual_bwd,
        .attention_scratch_bytes = cpu_attention_scratch_bytes,
        .attention_fwd = cpu_attention_fwd,
        .attention_bwd = cpu_attention_bwd,
        .rope_fwd = cpu_rope_fwd,
        .rope_bwd = cpu_rope_bwd,
        .softmax_xent_fwd = cpu_softmax_xent_fwd,
        .softmax_xent_bwd = cpu_softmax_xent_bwd,
        .count_correct = cpu_count_correct,
        .patch_gather = cpu_patch_gather,
        .vit_embed_fwd = cpu_vit_embed_fwd,
        .vit_embed_bwd = cpu_vit_embed_bwd,
        .conv_plan_create = cpu_conv_plan_create,
        .conv_plan_free = cpu_conv_plan_free,
        .conv_scratch_bytes = cpu_conv_scratch_bytes,
        .conv2d_fwd = cpu_conv2d_fwd,
        .conv2d_bwd = cpu_conv2d_bwd,
        .batchnorm_fwd_train = cpu_batchnorm_fwd_train,
        .batchnorm_fwd_eval = cpu_batchnorm_fwd_eval,
        .batchnorm_bwd = cpu_batchnorm_bwd,
        .relu_fwd = cpu_relu_fwd,
        .relu_bwd = cpu_relu_bwd,
        .avgpool_fwd = cpu_avgpool_fwd,
        .avgpool_bwd = cpu_avgpool_bwd,
        .global_avgpool_fwd = cpu_global_avgpool_fwd,
        .global_avgpool_bwd = cpu_global_avgpool_bwd,
        .add_rows = cpu_add_rows,
    };
    return &cb->table;
}
