/* Parity of every CUDA kernel with its CPU counterpart, on random inputs with odd shapes.
 *
 * Each check prints one line: the kernel, the output compared, and its maximum relative error
 * max |gpu - want| / (|want| + rms(want)), where the rms floor keeps entries that happen to be near
 * zero from dominating. Tolerances: 1e-5 for elementwise results, 1e-4 for results of
 * reductions (GEMM, norms' gradients, attention). Backward calls start from random gradients, so
 * the checks also cover accumulation. All of this runs on a context in SDP_PRECISION_FP32.
 *
 * Causal attention is compared with the CPU kernel; non-causal attention with a naive
 * double-precision reference (forward) and central differences of it (backward).
 *
 * The bf16 checks run GEMM and attention on a second context in SDP_PRECISION_BF16 against the
 * CPU kernels, by the normwise relative error |gpu - want|_2 / |want|_2 (an elementwise bound
 * would be ruled by the few entries that cancel). Tolerance 2e-2: bf16 keeps 8 significant bits
 * (unit roundoff 2^-9 = 2e-3), each result goes through two or three GEMMs with rounded operands,
 * and a CPU emulation of these very calls with operands rounded to nearest bf16 gave normwise
 * errors of 3e-3 (GEMM) and 3e-3 to 6e-3 (attention's out and dqkv). A wrong layout or a lost
 * term errs by O(1).
 *
 * The ResNet's kernels (sdp/ops_cuda_vision.h) are compared with sdp/ops_vision.h: convolutions
 * (cuDNN) with the im2col kernel at the reduction tolerance, which TF32 would exceed (its errors
 * are near 1e-3); batch norm, pooling and SGD at the elementwise one, though they compute the CPU's
 * formulas and should differ only where a double sum rounds differently; ReLU and add_rows
 * exactly.
 *
 * Exits 77 (skipped, for ctest) when there is no CUDA device or no driver. */
#include "../testutil.h"

#include "sdp/cuda_scratch.h"
#include "sdp/ops.h"
#include "sdp/ops_cuda.h"
#include "sdp/ops_cuda_vision.h"
#include "sdp/ops_vision.h"
#include "sdp/optim.h"

enum { MAX_BUFFERS = 64 };
static const double ELEMENTWISE_TOL = 1e-5;
static const double REDUCTION_TOL = 1e-4;
static const double BF16_TOL = 2e-2; /* normwise; see the top of the file */

/* ---- buffers ------------------------------------------------------------------------------- */

/* The buffers of one check, host and device, freed together. */
typedef struct {
    sdp_cuda_ctx *ctx;
    void *host[MAX_BUFFERS], *dev[MAX_BUFFERS];
    int nhost, ndev;
    sdp_rng rng;
} bufs;

static bufs bufs_make(sdp_cuda_ctx *ctx, uint64_t seed) {
    bufs b = {.ctx = ctx, .rng = sdp_rng_make(seed, 0)};
    return b;
}

static void bufs_free(bufs *b) {
    for (int i = 0; i < b->nhost; i++) free(b->host[i]);
    for (int i = 0; i < b->ndev; i++) sdp_cuda_free(b->ctx, b->dev[i]);
    b->nhost = b->ndev = 0;
}

static void *host_alloc(bufs *b, size_t bytes) {
    assert_true(b->nhost < MAX_BUFFERS);
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return b->host[b->nhost++] = p;
}

static float *host_randn(bufs *b, size_t n, float scale) {
    float *x = host_alloc(b, n * sizeof *x);
    tu_fill(x, n, &b->rng, scale);
    return x;
}

static float *host_copy(bufs *b, const float *x, size_t n) {
    float *y = host_alloc(b, n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static void *dev_upload(bufs *b, const void *h, size_t bytes) {
    assert_true(b->ndev < MAX_BUFFERS);
    void *d = sdp_cuda_malloc(b->ctx, SDP_MEM_ACTS, bytes);
    sdp_cuda_upload(b->ctx, d, h, bytes);
    return b->dev[b->ndev++] = d;
}

static float *dev_floats(bufs *b, const float *h, size_t n) {
    return dev_upload(b, h, n * sizeof *h);
}

static int *dev_ints(bufs *b, const int *h, size_t n) {
    return dev_upload(b, h, n * sizeof *h);
}

static float *download(bufs *b, const float *d, size_t n) {
    float *h = host_alloc(b, n * sizeof *h);
    sdp_cuda_download(b->ctx, h, d, n * sizeof *h);
    return h;
}

/* ---- comparison ---------------------------------------------------------------------------- */

static double rms(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / n) : 0;
}

static double max_rel_err(const float *got, const double *want, size_t n) {
    double floor = rms(want, n) + 1e-30, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + floor);
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* Prints the kernel's line and fails the test if the error exceeds tol. */
static void expect_close_d(const char *kernel, const char *what, const float *got,
                           const double *want, size_t n, double tol) {
    double e = max_rel_err(got, want, n);
    printf("  %-26s %-8s n=%-8zu max rel err %.2e (tol %.0e)%s\n", kernel, what, n, e, tol,
           e <= tol ? "" : "  FAIL");
    fflush(stdout);
    assert_true(e <= tol);
}

static void expect_close(const char *kernel, const char *what, const float *got, const float *want,
                         size_t n, double tol) {
    double *w = calloc(n ? n : 1, sizeof *w);
    tu_to_double(w, want, n);
    expect_close_d(kernel, what, got, w, n, tol);
    free(w);
}

/* A result of matrix products: elementwise to REDUCTION_TOL on an fp32 context, normwise to
 * BF16_TOL on a bf16 one. */
static void expect_product(sdp_cuda_ctx *ctx, const char *kernel, const char *what,
                           const float *got, const float *want, size_t n) {
    if (ctx->precision == SDP_PRECISION_FP32) {
        expect_close(kernel, what, got, want, n, REDUCTION_TOL);
        return;
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        norm += (double)want[i] * want[i];
    }
    const double e = sqrt(diff / (norm + 1e-300));
    printf("  %-26s %-8s n=%-8zu bf16 normwise rel err %.2e (tol %.0e)%s\n", kernel, what, n, e,
           BF16_TOL, e <= BF16_TOL ? "" : "  FAIL");
    fflush(stdout);
    assert_true(e <= BF16_TOL); /* also false for NaN */
}

/* Device result against host result. */
static void expect_dev(bufs *b, const char *kernel, const char *what, const float *dev,
                       const float *want, size_t n, double tol) {
    expect_close(kernel, what, download(b, dev, n), want, n, tol);
}

/* ---- GEMM and linear ----------------------------------------------------------------------- */

static void check_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K) {
    bufs b = bufs_make(ctx, 100 + (uint64_t)(ta * 2 + tb));
    /* Row strides larger than the rows, to check that they are honoured. */
    int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
    float *A = host_randn(&b, (size_t)a_rows * lda, 1.0f);
    float *B = host_randn(&b, (size_t)b_rows * ldb, 1.0f);
    float *C = host_randn(&b, (size_t)M * ldc, 1.0f);
    float *dA = dev_floats(&b, A, (size_t)a_rows * lda),
          *dB = dev_floats(&b, B, (size_t)b_rows * ldb);
    float *dC = dev_floats(&b, C, (size_t)M * ldc);
    sdp_gemm(tu_cpu(SDP_GEMM_OPENBLAS), ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C, ldc);
    sdp_cuda_gemm(ctx, ta, tb, M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, dC, ldc);
    char name[64];
    snprintf(name, sizeof name, "gemm %s %c%c %dx%dx%d",
             ctx->precision == SDP_PRECISION_BF16 ? "bf16" : "fp32", ta ? 'T' : 'N', tb ? 'T' : 'N',
             M, N, K);
    expect_product(ctx, name, "C", download(&b, dC, (size_t)M * ldc), C, (size_t)M * ldc);
    bufs_free(&b);
}

static void check_gemms(sdp_cuda_ctx *ctx) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(ctx, ta, tb, 37, 53, 29);
            check_gemm(ctx, ta, tb, 128, 96, 300);
        }
}

static void test_gemm(void **state) {
    check_gemms(*state);
}

static void test_gemm_bf16(void **state) {
    (void)state;
    sdp_cuda_ctx *bf16 = sdp_cuda_ctx_create(0, SDP_PRECISION_BF16);
    check_gemms(bf16);
    sdp_cuda_ctx_destroy(bf16);
}

/* Backward runs twice: with every gradient, and with dinp and dbias NULL (skipped). */
static void check_linear(sdp_cuda_ctx *ctx, int n, int ic, int oc, bool with_bias) {
    bufs b = bufs_make(ctx, 200 + (uint64_t)n);
    size_t ni = (size_t)n * ic, no = (size_t)n * oc, nw = (size_t)oc * ic;
    float *inp = host_randn(&b, ni, 1.0f), *w = host_randn(&b, nw, 0.3f);
    float *bias = with_bias ? host_randn(&b, oc, 1.0f) : NULL;
    float *out = host_alloc(&b, no * sizeof *out), *dout = host_randn(&b, no, 1.0f);
    float *dinp = host_randn(&b, ni, 1.0f), *dw = host_randn(&b, nw, 1.0f);
    float *dbias = host_randn(&b, oc, 1.0f), *dw_only = host_copy(&b, dw, nw);
    float *d_inp = dev_floats(&b, inp, ni), *d_w = dev_floats(&b, w, nw);
    float *d_bias = with_bias ? dev_floats(&b, bias, oc) : NULL;
    float *d_out = dev_floats(&b, out, no), *d_dout = dev_floats(&b, dout, no);
    float *d_dinp = dev_floats(&b, dinp, ni), *d_dw = dev_floats(&b, dw, nw);
    float *d_dbias = dev_floats(&b, dbias, oc), *d_dw_only = dev_floats(&b, dw_only, nw);

    sdp_linear_fwd(tu_cpu(SDP_GEMM_OPENBLAS), out, inp, w, bias, n, ic, oc);
    sdp_cuda_linear_fwd(ctx, d_out, d_inp, d_w, d_bias, n, ic, oc);
    sdp_linear_bwd(tu_cpu(SDP_GEMM_OPENBLAS), dinp, dw, with_bias ? dbias : NULL, dout, inp, w, n,
                   ic, oc);
    sdp_cuda_linear_bwd(ctx, d_dinp, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w, n, ic,
                        oc);
    sdp_linear_bwd(tu_cpu(SDP_GEMM_OPENBLAS), NULL, dw_only, NULL, dout, inp, w, n, ic, oc);
    sdp_cuda_linear_bwd(ctx, NULL, d_dw_only, NULL, d_dout, d_inp, d_w, n, ic, oc);

    expect_dev(&b, "linear_fwd", "out", d_out, out, no, REDUCTION_TOL);
    expect_dev(&b, "linear_bwd", "dinp", d_dinp, dinp, ni, REDUCTION_TOL);
    expect_dev(&b, "linear_bwd", "dw", d_dw, dw, nw, REDUCTION_TOL);
    if (with_bias) expect_dev(&b, "linear_bwd", "dbias", d_dbias, dbias, oc, REDUCTION_TOL);
    expect_dev(&b, "linear_bwd (dw only)", "dw", d_dw_only, dw_only, nw, REDUCTION_TOL);
    bufs_free(&b);
}

static void test_linear(void **state) {
    check_linear(*state, 45, 67, 33, true);
    check_linear(*state, 300, 96, 288, true); /* column sums over several row chunks */
    check_linear(*state, 7, 5, 3, false);
}

/* ---- embeddings ---------------------------------------------------------------------------- */

static void check_embed(sdp_cuda_ctx *ctx, int B, int T, int C, int V, bool with_wpe) {
    bufs b = bufs_make(ctx, 300 + (uint64_t)C);
    size_t n = (size_t)B * T, no = n * C;
    int *tokens = host_alloc(&b, n * sizeof *tokens);
    for (size_t i = 0; i < n; i++) tokens[i] = (int)sdp_rng_below(&b.rng, (uint64_t)V);
    float *wte = host_randn(&b, (size_t)V * C, 1.0f);
    float *wpe = with_wpe ? host_randn(&b, (size_t)T * C, 1.0f) : NULL;
    float *out = host_alloc(&b, no * sizeof *out), *dout = host_randn(&b, no, 1.0f);
    float *dwte = host_randn(&b, (size_t)V * C, 1.0f), *dwpe = host_randn(&b, (size_t)T * C, 1.0f);
    int *d_tokens = dev_ints(&b, tokens, n);
    float *d_wte = dev_floats(&b, wte, (size_t)V * C);
    float *d_wpe = with_wpe ? dev_floats(&b, wpe, (size_t)T * C) : NULL;
    float *d_out = dev_floats(&b, out, no), *d_dout = dev_floats(&b, dout, no);
    float *d_dwte = dev_floats(&b, dwte, (size_t)V * C),
          *d_dwpe = dev_floats(&b, dwpe, (size_t)T * C);

    sdp_embed_fwd(tu_cpu(SDP_GEMM_DNNL), out, tokens, wte, wpe, B, T, C);
    sdp_cuda_embed_fwd(ctx, d_out, d_tokens, d_wte, d_wpe, B, T, C);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), dwte, with_wpe ? dwpe : NULL, dout, tokens, B, T, C);
    sdp_cuda_embed_bwd(ctx, d_dwte, with_wpe ? d_dwpe : NULL, d_dout, d_tokens, B, T, C);

    expect_dev(&b, "embed_fwd", "out", d_out, out, no, ELEMENTWISE_TOL);
    expect_dev(&b, "embed_bwd", "dwte", d_dwte, dwte, (size_t)V * C, ELEMENTWISE_TOL);
    expect_dev(&b, "embed_bwd", "dwpe", d_dwpe, dwpe, (size_t)T * C, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void test_embed(void **state) {
    check_embed(*state, 3, 13, 19, 11, true); /* 39 positions, 11 tokens: many repeats */
    check_embed(*state, 2, 70, 96, 500, false);
}

/* ---- norms --------------------------------------------------------------------------------- */

static void check_layernorm(sdp_cuda_ctx *ctx, int n, int C) {
    bufs b = bufs_make(ctx, 400 + (uint64_t)C);
    size_t nc = (size_t)n * C;
    float *inp = host_randn(&b, nc, 2.0f), *w = host_randn(&b, C, 1.0f);
    float *bb = host_randn(&b, C, 1.0f), *dout = host_randn(&b, nc, 1.0f);
    for (size_t i = 0; i < nc; i++) inp[i] += 3.0f; /* a mean away from zero */
    float *out = host_alloc(&b, nc * sizeof *out), *mean = host_alloc(&b, n * sizeof *mean);
    float *rstd = host_alloc(&b, n * sizeof *rstd);
    float *dinp = host_randn(&b, nc, 1.0f), *dw = host_randn(&b, C, 1.0f);
    float *db = host_randn(&b, C, 1.0f);
    float *d_inp = dev_floats(&b, inp, nc), *d_w = dev_floats(&b, w, C);
    float *d_b = dev_floats(&b, bb, C), *d_dout = dev_floats(&b, dout, nc);
    float *d_out = dev_floats(&b, out, nc), *d_mean = dev_floats(&b, mean, n);
    float *d_rstd = dev_floats(&b, rstd, n);
    float *d_dinp = dev_floats(&b, dinp, nc), *d_dw = dev_floats(&b, dw, C);
    float *d_db = dev_floats(&b, db, C);

    sdp_layernorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, inp, w, bb, n, C);
    sdp_cuda_layernorm_fwd(ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, n, C);
    sdp_layernorm_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dw, db, dout, inp, w, mean, rstd, n, C);
    sdp_cuda_layernorm_bwd(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, n, C);

    char name[64];
    snprintf(name, sizeof name, "layernorm n=%d C=%d", n, C);
    expect_dev(&b, name, "out", d_out, out, nc, ELEMENTWISE_TOL);
    expect_dev(&b, name, "mean", d_mean, mean, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "rstd", d_rstd, rstd, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, nc, REDUCTION_TOL);
    expect_dev(&b, name, "dw", d_dw, dw, C, REDUCTION_TOL);
    expect_dev(&b, name, "db", d_db, db, C, REDUCTION_TOL);
    bufs_free(&b);
}

static void check_rmsnorm(sdp_cuda_ctx *ctx, int n, int C) {
    bufs b = bufs_make(ctx, 500 + (uint64_t)C);
    size_t nc = (size_t)n * C;
    float *inp = host_randn(&b, nc, 2.0f), *w = host_randn(&b, C, 1.0f);
    float *dout = host_randn(&b, nc, 1.0f);
    float *out = host_alloc(&b, nc * sizeof *out), *rstd = host_alloc(&b, n * sizeof *rstd);
    float *dinp = host_randn(&b, nc, 1.0f), *dw = host_randn(&b, C, 1.0f);
    float *d_inp = dev_floats(&b, inp, nc), *d_w = dev_floats(&b, w, C);
    float *d_dout = dev_floats(&b, dout, nc), *d_out = dev_floats(&b, out, nc);
    float *d_rstd = dev_floats(&b, rstd, n), *d_dinp = dev_floats(&b, dinp, nc);
    float *d_dw = dev_floats(&b, dw, C);

    sdp_rmsnorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, rstd, inp, w, n, C);
    sdp_cuda_rmsnorm_fwd(ctx, d_out, d_rstd, d_inp, d_w, n, C);
    sdp_rmsnorm_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dw, dout, inp, w, rstd, n, C);
    sdp_cuda_rmsnorm_bwd(ctx, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, n, C);

    char name[64];
    snprintf(name, sizeof name, "rmsnorm n=%d C=%d", n, C);
    expect_dev(&b, name, "out", d_out, out, nc, ELEMENTWISE_TOL);
    expect_dev(&b, name, "rstd", d_rstd, rstd, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, nc, REDUCTION_TOL);
    expect_dev(&b, name, "dw", d_dw, dw, C, REDUCTION_TOL);
    bufs_free(&b);
}

static void test_norms(void **state) {
    const int shapes[][2] = {{1, 1}, {37, 7}, {45, 96}, {300, 769}, {17000, 48}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_layernorm(*state, shapes[i][0], shapes[i][1]);
        check_rmsnorm(*state, shapes[i][0], shapes[i][1]);
    }
}

/* ---- activations and residual -------------------------------------------------------------- */

static void test_gelu(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 600);
    size_t n = 100003;
    float *inp = host_randn(&b, n, 3.0f), *dout = host_randn(&b, n, 1.0f);
    float *out = host_alloc(&b, n * sizeof *out), *dinp = host_randn(&b, n, 1.0f);
    float *d_inp = dev_floats(&b, inp, n), *d_dout = dev_floats(&b, dout, n);
    float *d_out = dev_floats(&b, out, n), *d_dinp = dev_floats(&b, dinp, n);
    sdp_gelu_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, n);
    sdp_cuda_gelu_fwd(ctx, d_out, d_inp, n);
    sdp_gelu_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dout, inp, n);
    sdp_cuda_gelu_bwd(ctx, d_dinp, d_dout, d_inp, n);
    sdp_cuda_gelu_bwd(ctx, NULL, d_dout, d_inp, n); /* skipped, must not fault */
    expect_dev(&b, "gelu_fwd", "out", d_out, out, n, ELEMENTWISE_TOL);
    expect_dev(&b, "gelu_bwd", "dinp", d_dinp, dinp, n, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void test_swiglu(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 700);
    int n = 29, F = 45;
    size_t ni = (size_t)n * 2 * F, no = (size_t)n * F;
    float *inp = host_randn(&b, ni, 2.0f), *dout = host_randn(&b, no, 1.0f);
    float *out = host_alloc(&b, no * sizeof *out), *dinp = host_randn(&b, ni, 1.0f);
    float *d_inp = dev_floats(&b, inp, ni), *d_dout = dev_floats(&b, dout, no);
    float *d_out = dev_floats(&b, out, no), *d_dinp = dev_floats(&b, dinp, ni);
    sdp_swiglu_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, n, F);
    sdp_cuda_swiglu_fwd(ctx, d_out, d_inp, n, F);
    sdp_swiglu_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dout, inp, n, F);
    sdp_cuda_swiglu_bwd(ctx, d_dinp, d_dout, d_inp, n, F);
    expect_dev(&b, "swiglu_fwd", "out", d_out, out, no, ELEMENTWISE_TOL);
    expect_dev(&b, "swiglu_bwd", "dinp", d_dinp, dinp, ni, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void test_residual(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 800);
    size_t n = 4099;
    float s = 0.5f;
    float *a = host_randn(&b, n, 1.0f), *x = host_randn(&b, n, 1.0f);
    float *dout = host_randn(&b, n, 1.0f), *da = host_randn(&b, n, 1.0f);
    float *dx = host_randn(&b, n, 1.0f);
    float *d_a = dev_floats(&b, a, n), *d_x = dev_floats(&b, x, n);
    float *d_dout = dev_floats(&b, dout, n), *d_da = dev_floats(&b, da, n);
    float *d_dx = dev_floats(&b, dx, n);
    sdp_residual_fwd(tu_cpu(SDP_GEMM_DNNL), a, a, x, s, n); /* in place, as the model uses it */
    sdp_cuda_residual_fwd(ctx, d_a, d_a, d_x, s, n);
    sdp_residual_bwd(tu_cpu(SDP_GEMM_DNNL), da, dx, dout, s, n);
    sdp_cuda_residual_bwd(ctx, d_da, d_dx, d_dout, s, n);
    expect_dev(&b, "residual_fwd (in place)", "out", d_a, a, n, ELEMENTWISE_TOL);
    expect_dev(&b, "residual_bwd", "da", d_da, da, n, ELEMENTWISE_TOL);
    expect_dev(&b, "residual_bwd", "db", d_dx, dx, n, ELEMENTWISE_TOL);
    bufs_free(&b);
}

/* ---- rope ---------------------------------------------------------------------------------- */

static void check_rope(sdp_cuda_ctx *ctx, int B, int T, int H, int hs) {
    bufs b = bufs_make(ctx, 900 + (uint64_t)hs);
    size_t n = (size_t)B * T * 3 * H * hs;
    float *qkv = host_randn(&b, n, 1.0f), *dqkv = host_randn(&b, n, 1.0f);
    float *d_qkv = dev_floats(&b, qkv, n), *d_dqkv = dev_floats(&b, dqkv, n);
    sdp_rope_fwd(tu_cpu(SDP_GEMM_DNNL), qkv, B, T, H, hs, 10000.0f);
    sdp_cuda_rope_fwd(ctx, d_qkv, B, T, H, hs, 10000.0f);
    sdp_rope_bwd(tu_cpu(SDP_GEMM_DNNL), dqkv, B, T, H, hs, 10000.0f);
    sdp_cuda_rope_bwd(ctx, d_dqkv, B, T, H, hs, 10000.0f);
    char name[64];
    snprintf(name, sizeof name, "rope B=%d T=%d H=%d hs=%d", B, T, H, hs);
    expect_dev(&b, name, "qkv", d_qkv, qkv, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dqkv", d_dqkv, dqkv, n, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void test_rope(void **state) {
    check_rope(*state, 2, 37, 3, 10);
    check_rope(*state, 1, 1000, 2, 64); /* far positions: angles up to ~1000 rad */
}

/* ---- attention ----------------------------------------------------------------------------- */

typedef struct {
    int B, T, H, hs;
} shape;

static size_t qkv_len(shape s) {
    return (size_t)s.B * s.T * 3 * s.H * s.hs;
}

static size_t out_len(shape s) {
    return (size_t)s.B * s.T * s.H * s.hs;
}

static size_t lse_len(shape s) {
    return (size_t)s.B * s.H * s.T;
}

/* out and lse of softmax attention straight from the definition, in double. */
static void ref_attention(double *out, double *lse, const double *qkv, shape s, bool causal) {
    int D = s.H * s.hs, T = s.T;
    double scale = 1.0 / sqrt(s.hs);
    double *row = malloc((size_t)T * sizeof *row);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++) {
            const double *base = qkv + (size_t)b * T * 3 * D + h * s.hs;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u < T; u++) {
                    double dot = 0;
                    for (int d = 0; d < s.hs; d++)
                        dot += base[(size_t)t * 3 * D + d] * base[(size_t)u * 3 * D + D + d];
                    row[u] = causal && u > t ? -INFINITY : scale * dot;
                    mx = fmax(mx, row[u]);
                }
                for (int u = 0; u < T; u++) sum += exp(row[u] - mx);
                if (lse) lse[((size_t)b * s.H + h) * T + t] = mx + log(sum);
                for (int u = 0; u < T; u++) row[u] = exp(row[u] - mx) / sum; /* probabilities */
                double *o = out + ((size_t)b * T + t) * D + h * s.hs;
                for (int d = 0; d < s.hs; d++) {
                    double acc = 0;
                    for (int u = 0; u < T; u++) acc += row[u] * base[(size_t)u * 3 * D + 2 * D + d];
                    o[d] = acc;
                }
            }
        }
    free(row);
}

/* The GPU's out, lse and dqkv (dqkv starting from dqkv0) for one shape. */
typedef struct {
    float *out, *lse, *dqkv;
} attention_result;

static attention_result gpu_attention(bufs *b, const float *qkv, const float *dout,
                                      const float *dqkv0, shape s, bool causal) {
    float *d_qkv = dev_floats(b, qkv, qkv_len(s)), *d_dout = dev_floats(b, dout, out_len(s));
    float *d_out = dev_floats(b, dout, out_len(s)); /* overwritten */
    float *d_lse = dev_floats(b, dout, lse_len(s));
    float *d_dqkv = dev_floats(b, dqkv0, qkv_len(s));
    float *d_scratch = dev_upload(b, host_alloc(b, sdp_cuda_attention_scratch_bytes(s.B, s.T, s.H)),
                                  sdp_cuda_attention_scratch_bytes(s.B, s.T, s.H));
    sdp_cuda_attention_fwd(b->ctx, d_out, d_lse, d_qkv, s.B, s.T, s.H, s.hs, causal, d_scratch);
    sdp_cuda_attention_bwd(b->ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse, s.B, s.T, s.H, s.hs, causal,
                           d_scratch);
    attention_result r = {download(b, d_out, out_len(s)), download(b, d_lse, lse_len(s)),
                          download(b, d_dqkv, qkv_len(s))};
    return r;
}

/* The GPU against the CPU kernel, forward and backward. On an fp32 context dqkv starts random (so
 * accumulation is checked too); on a bf16 one it starts at zero, so that the normwise error
 * measures the gradient alone. */
static void check_attention_vs_cpu(sdp_cuda_ctx *ctx, shape s, bool causal) {
    const bool bf16 = ctx->precision == SDP_PRECISION_BF16;
    bufs b = bufs_make(ctx, 1000 + (uint64_t)s.T);
    size_t n = qkv_len(s), m = out_len(s), nl = lse_len(s);
    float *qkv = host_randn(&b, n, 1.5f), *dout = host_randn(&b, m, 1.0f);
    float *dqkv = host_randn(&b, n, bf16 ? 0.0f : 1.0f);
    attention_result g = gpu_attention(&b, qkv, dout, dqkv, s, causal);

    float *out = host_alloc(&b, m * sizeof *out), *lse = host_alloc(&b, nl * sizeof *lse);
    float *scratch =
        host_alloc(&b, sdp_attention_scratch_bytes(tu_cpu(SDP_GEMM_DNNL), s.B, s.T, s.H, s.hs));
    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), out, lse, qkv, s.B, s.T, s.H, s.hs, causal, scratch);
    sdp_attention_bwd(tu_cpu(SDP_GEMM_DNNL), dqkv, dout, qkv, out, lse, s.B, s.T, s.H, s.hs, causal,
                      scratch);

    char name[80];
    snprintf(name, sizeof name, "attention %s %s %d,%d,%d,%d", bf16 ? "bf16" : "fp32",
             causal ? "causal" : "full", s.B, s.T, s.H, s.hs);
    expect_product(ctx, name, "out", g.out, out, m);
    expect_product(ctx, name, "lse", g.lse, lse, nl);
    expect_product(ctx, name, "dqkv", g.dqkv, dqkv, n);
    bufs_free(&b);
}

/* Loss sum(r * out) of the reference, as a function of the qkv entries listed in idx. */
typedef struct {
    shape s;
    double *qkv, *out;
    const double *r;
    const size_t *idx;
    size_t nidx;
} loss_ctx;

static double ref_loss(const double *x, void *vctx) {
    loss_ctx *c = vctx;
    for (size_t i = 0; i < c->nidx; i++) c->qkv[c->idx[i]] = x[i];
    ref_attention(c->out, NULL, c->qkv, c->s, false);
    double loss = 0;
    for (size_t i = 0; i < out_len(c->s); i++) loss += c->r[i] * c->out[i];
    return loss;
}

/* Non-causal: forward against the double reference, backward against its central differences
 * on `checked` distinct random entries of qkv (all when 0). */
static void check_attention_bidirectional(sdp_cuda_ctx *ctx, shape s, size_t checked) {
    bufs b = bufs_make(ctx, 1100 + (uint64_t)s.T);
    size_t n = qkv_len(s), m = out_len(s), nl = lse_len(s);
    float *qkv = host_randn(&b, n, 1.5f), *dout = host_randn(&b, m, 1.0f);
    float *dqkv0 = host_randn(&b, n, 1.0f);
    attention_result g = gpu_attention(&b, qkv, dout, dqkv0, s, false);

    double *qkv_d = host_alloc(&b, n * sizeof *qkv_d), *out_d = host_alloc(&b, m * sizeof *out_d);
    double *lse_d = host_alloc(&b, nl * sizeof *lse_d), *r = host_alloc(&b, m * sizeof *r);
    tu_to_double(qkv_d, qkv, n);
    tu_to_double(r, dout, m);
    ref_attention(out_d, lse_d, qkv_d, s, false);

    if (checked == 0 || checked > n) checked = n;
    size_t *idx = host_alloc(&b, n * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    for (size_t i = 0; i < checked && checked < n; i++) { /* partial Fisher-Yates */
        size_t j = i + sdp_rng_below(&b.rng, n - i), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    double *x = host_alloc(&b, checked * sizeof *x), *grad = host_alloc(&b, checked * sizeof *grad);
    for (size_t i = 0; i < checked; i++) x[i] = qkv_d[idx[i]];
    loss_ctx lc = {s, qkv_d, host_alloc(&b, m * sizeof(double)), r, idx, checked};
    tu_fd_grad(ref_loss, x, checked, &lc, 1e-5, grad);
    float *got = host_alloc(&b, checked * sizeof *got);
    for (size_t i = 0; i < checked; i++) {
        got[i] = g.dqkv[idx[i]];
        grad[i] += dqkv0[idx[i]];
    }

    char name[80];
    snprintf(name, sizeof name, "attention full %d,%d,%d,%d", s.B, s.T, s.H, s.hs);
    expect_close_d(name, "out", g.out, out_d, m, REDUCTION_TOL);
    expect_close_d(name, "lse", g.lse, lse_d, nl, REDUCTION_TOL);
    expect_close_d(name, "dqkv(fd)", got, grad, checked, REDUCTION_TOL);
    bufs_free(&b);
}

/* T on and off multiples of the GEMM tiles (1, 5, 19, 33, 35, 37, 50, 67, 130 and 32, 64); head
 * sizes odd and even, 4 to 256. */
static const shape attention_shapes[] = {
    {1, 1, 1, 4},    {2, 5, 3, 4},   {1, 32, 2, 32},  {2, 67, 4, 16}, {1, 130, 2, 64},
    {2, 33, 2, 128}, {1, 50, 2, 48}, {1, 35, 1, 256}, {1, 19, 3, 7},  {2, 37, 3, 16},
    {2, 64, 2, 64},  {1, 37, 2, 64}, {1, 64, 3, 16}};

/* The bf16 shapes: T = 37 and 64, head sizes 16 and 64. */
static const shape bf16_attention_shapes[] = {
    {2, 37, 3, 16}, {2, 64, 2, 64}, {1, 37, 2, 64}, {1, 64, 3, 16}};

static void test_attention_causal(void **state) {
    for (size_t i = 0; i < sizeof attention_shapes / sizeof attention_shapes[0]; i++)
        check_attention_vs_cpu(*state, attention_shapes[i], true);
}

static void test_attention_bf16(void **state) {
    (void)state;
    sdp_cuda_ctx *bf16 = sdp_cuda_ctx_create(0, SDP_PRECISION_BF16);
    for (size_t i = 0; i < sizeof bf16_attention_shapes / sizeof bf16_attention_shapes[0]; i++) {
        check_attention_vs_cpu(bf16, bf16_attention_shapes[i], true);
        check_attention_vs_cpu(bf16, bf16_attention_shapes[i], false);
    }
    sdp_cuda_ctx_destroy(bf16);
}

static void test_attention_bidirectional(void **state) {
    for (size_t i = 0; i < sizeof attention_shapes / sizeof attention_shapes[0]; i++) {
        shape s = attention_shapes[i];
        check_attention_bidirectional(*state, s, qkv_len(s) <= 500 ? 0 : 120);
    }
}

/* ---- softmax cross-entropy ----------------------------------------------------------------- */

/* Forward and backward, out of place and in place (probs over logits, dlogits over probs), with
 * every fifth target ignored. */
static void check_xent(sdp_cuda_ctx *ctx, int n, int V, int Vp) {
    bufs b = bufs_make(ctx, 1200 + (uint64_t)V);
    size_t nv = (size_t)n * Vp;
    float *logits = host_randn(&b, nv, 3.0f);
    int *targets = host_alloc(&b, n * sizeof *targets);
    for (int i = 0; i < n; i++) targets[i] = i % 5 == 2 ? -1 : (int)sdp_rng_below(&b.rng, V);
    float dloss = 1.0f / n;
    float *probs = host_alloc(&b, nv * sizeof *probs), *losses = host_alloc(&b, n * sizeof *losses);
    float *dlogits = host_alloc(&b, nv * sizeof *dlogits);
    double total =
        sdp_softmax_xent_fwd(tu_cpu(SDP_GEMM_DNNL), losses, probs, logits, targets, n, V, Vp);
    sdp_softmax_xent_bwd(tu_cpu(SDP_GEMM_DNNL), dlogits, probs, targets, dloss, n, V, Vp);

    int *d_targets = dev_ints(&b, targets, n);
    /* Outputs start as copies of the logits: the kernels must overwrite every element. */
    float *d_logits = dev_floats(&b, logits, nv), *d_probs = dev_floats(&b, logits, nv);
    float *d_losses = dev_floats(&b, logits, n), *d_dlogits = dev_floats(&b, logits, nv);
    double d_total =
        sdp_cuda_softmax_xent_fwd(ctx, d_losses, d_probs, d_logits, d_targets, n, V, Vp);
    sdp_cuda_softmax_xent_bwd(ctx, d_dlogits, d_probs, d_targets, dloss, n, V, Vp);
    char name[64];
    snprintf(name, sizeof name, "softmax_xent n=%d V=%d Vp=%d", n, V, Vp);
    float total_f = (float)d_total;
    expect_close_d(name, "total", &total_f, &total, 1, ELEMENTWISE_TOL);
    expect_dev(&b, name, "losses", d_losses, losses, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "probs", d_probs, probs, nv, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dlogits", d_dlogits, dlogits, nv, ELEMENTWISE_TOL);

    /* In place: logits -> probs -> dlogits in one buffer. */
    float *d_inplace = dev_floats(&b, logits, nv);
    sdp_cuda_softmax_xent_fwd(ctx, d_losses, d_inplace, d_inplace, d_targets, n, V, Vp);
    expect_dev(&b, "softmax_xent (in place)", "probs", d_inplace, probs, nv, ELEMENTWISE_TOL);
    sdp_cuda_softmax_xent_bwd(ctx, d_inplace, d_inplace, d_targets, dloss, n, V, Vp);
    expect_dev(&b, "softmax_xent (in place)", "dlogits", d_inplace, dlogits, nv, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void test_softmax_xent(void **state) {
    check_xent(*state, 23, 1001, 1024);
    check_xent(*state, 4, 50257, 50304); /* GPT-2's vocabulary */
    check_xent(*state, 3, 1, 1);
}

/* ---- the backend's helpers: row copies, bias slices, classifier hits ----------------------- */

/* Rows of a wider matrix into a narrower one and back, and a single-row plain copy. */
static void test_copy_rows(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 1400);
    const size_t rows = 37, cols = 45, ld_src = 61, ld_dst = 50;
    float *src = host_randn(&b, rows * ld_src, 1.0f), *dst = host_randn(&b, rows * ld_dst, 1.0f);
    float *want = host_copy(&b, dst, rows * ld_dst);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) want[r * ld_dst + c] = src[r * ld_src + c];
    float *d_src = dev_floats(&b, src, rows * ld_src), *d_dst = dev_floats(&b, dst, rows * ld_dst);
    sdp_cuda_copy_rows(ctx, d_dst, ld_dst, d_src, ld_src, rows, cols);
    expect_dev(&b, "copy_rows 37x45", "dst", d_dst, want, rows * ld_dst, 0.0);
    float *d_flat = dev_floats(&b, dst, rows * ld_dst);
    sdp_cuda_copy_rows(ctx, d_flat, 0, d_src, 0, 1, rows * ld_dst); /* pitches unused */
    expect_dev(&b, "copy_rows (one row)", "dst", d_flat, src, rows * ld_dst, 0.0);
    bufs_free(&b);
}

/* Against a double-precision sum over rows of the slice's columns, onto a random start. */
static void check_bias_slice(sdp_cuda_ctx *ctx, int n, int ld, int col0, int len) {
    bufs b = bufs_make(ctx, 1500 + (uint64_t)n);
    float *dout = host_randn(&b, (size_t)n * ld, 1.0f), *dbias = host_randn(&b, len, 1.0f);
    double *want = calloc((size_t)len, sizeof *want);
    assert_non_null(want);
    for (int j = 0; j < len; j++) {
        want[j] = dbias[j];
        for (int r = 0; r < n; r++) want[j] += dout[(size_t)r * ld + col0 + j];
    }
    float *d_dout = dev_floats(&b, dout, (size_t)n * ld), *d_dbias = dev_floats(&b, dbias, len);
    sdp_cuda_bias_slice_bwd(ctx, d_dbias, d_dout, n, ld, col0, len);
    char name[64];
    snprintf(name, sizeof name, "bias_slice_bwd n=%d [%d,+%d)", n, col0, len);
    expect_close_d(name, "dbias", download(&b, d_dbias, len), want, len, REDUCTION_TOL);
    free(want);
    bufs_free(&b);
}

static void test_bias_slice(void **state) {
    check_bias_slice(*state, 45, 96, 17, 33);
    check_bias_slice(*state, 5000, 300, 200, 100); /* several row chunks */
}

/* Hits against a host argmax, with ignored labels and a tie (the first maximum wins). */
static void test_count_correct(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 1600);
    const int n = 300, K = 10, ld = 16;
    float *logits = host_randn(&b, (size_t)n * ld, 1.0f);
    int *labels = host_alloc(&b, n * sizeof *labels);
    for (int r = 0; r < n; r++) labels[r] = (int)sdp_rng_below(&b.rng, K + 1) - 1; /* -1: ignored */
    logits[3 * ld + 2] = logits[3 * ld + 7] = 100.0f; /* row 3 ties: 2 wins, not 7 */
    labels[3] = 7;
    logits[4 * ld + 12] = 1000.0f; /* a padding column is never a class */
    int want = 0;
    for (int r = 0; r < n; r++) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (logits[(size_t)r * ld + k] > logits[(size_t)r * ld + best]) best = k;
        want += labels[r] >= 0 && best == labels[r];
    }
    float *d_logits = dev_floats(&b, logits, (size_t)n * ld);
    int *d_labels = dev_ints(&b, labels, n);
    int got = sdp_cuda_count_correct(ctx, d_logits, d_labels, n, K, ld);
    printf("  %-26s hits %d of %d rows (host argmax %d)\n", "count_correct", got, n, want);
    assert_true(want > 0);
    assert_int_equal(got, want);
    bufs_free(&b);
}

/* ---- ViT stem ------------------------------------------------------------------------------ */

static void test_patch_gather(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 1700);
    const int B = 3, C = 3, H = 12, W = 8, p = 4;
    const size_t n = (size_t)B * C * H * W;
    float *images = host_randn(&b, n, 1.0f), *rows = host_alloc(&b, n * sizeof *rows);
    sdp_patch_gather(tu_cpu(SDP_GEMM_DNNL), rows, images, B, C, H, W, p);
    float *d_images = dev_floats(&b, images, n), *d_rows = dev_floats(&b, rows, n);
    sdp_cuda_zero(ctx, d_rows, n * sizeof(float));
    sdp_cuda_patch_gather(ctx, d_rows, d_images, B, C, H, W, p);
    expect_dev(&b, "patch_gather 12x8 p=4", "rows", d_rows, rows, n, 0.0);
    bufs_free(&b);
}

/* Forward against the definition; backward against sums in double, with the class token's
 * gradient alone (no positions) as well. */
static void test_vit_embed(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 1800);
    const int B = 5, T = 17, C = 40, P = T - 1;
    const size_t nE = (size_t)B * T * C, nP = (size_t)B * P * C, TC = (size_t)T * C;
    float *patches = host_randn(&b, nP, 1.0f), *cls = host_randn(&b, C, 1.0f);
    float *pos = host_randn(&b, TC, 1.0f), *embed = host_alloc(&b, nE * sizeof *embed);
    for (int i = 0; i < B; i++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                embed[((size_t)i * T + t) * C + c] =
                    (t == 0 ? cls[c] : patches[((size_t)i * P + t - 1) * C + c]) + pos[t * C + c];
    float *d_patches = dev_floats(&b, patches, nP), *d_cls = dev_floats(&b, cls, C);
    float *d_pos = dev_floats(&b, pos, TC), *d_embed = dev_floats(&b, embed, nE);
    sdp_cuda_zero(ctx, d_embed, nE * sizeof(float));
    sdp_cuda_vit_embed_fwd(ctx, d_embed, d_patches, d_cls, d_pos, B, T, C);
    expect_dev(&b, "vit_embed_fwd", "embed", d_embed, embed, nE, ELEMENTWISE_TOL);

    float *dembed = host_randn(&b, nE, 1.0f), *dcls = host_randn(&b, C, 1.0f);
    float *dpos = host_randn(&b, TC, 1.0f), *dpatches = host_alloc(&b, nP * sizeof *dpatches);
    double *want_cls = calloc((size_t)C, sizeof *want_cls), *want_pos = calloc(TC, sizeof(double));
    assert_true(want_cls && want_pos);
    for (size_t e = 0; e < TC; e++) {
        want_pos[e] = dpos[e];
        for (int i = 0; i < B; i++) want_pos[e] += dembed[i * TC + e];
    }
    for (int c = 0; c < C; c++) want_cls[c] = dcls[c] + (want_pos[c] - dpos[c]);
    for (int i = 0; i < B; i++)
        for (int t = 1; t < T; t++)
            memcpy(dpatches + ((size_t)i * P + t - 1) * C, dembed + ((size_t)i * T + t) * C,
                   (size_t)C * sizeof(float));
    float *d_dembed = dev_floats(&b, dembed, nE), *d_dcls = dev_floats(&b, dcls, C);
    float *d_dpos = dev_floats(&b, dpos, TC), *d_dpatches = dev_floats(&b, dpatches, nP);
    float *d_dcls_only = dev_floats(&b, dcls, C);
    sdp_cuda_zero(ctx, d_dpatches, nP * sizeof(float));
    sdp_cuda_vit_embed_bwd(ctx, d_dpatches, d_dcls, d_dpos, d_dembed, B, T, C);
    sdp_cuda_vit_embed_bwd(ctx, d_dpatches, d_dcls_only, NULL, d_dembed, B, T, C);
    expect_dev(&b, "vit_embed_bwd", "dpatches", d_dpatches, dpatches, nP, 0.0);
    expect_close_d("vit_embed_bwd", "dcls", download(&b, d_dcls, C), want_cls, C, REDUCTION_TOL);
    expect_close_d("vit_embed_bwd", "dpos", download(&b, d_dpos, TC), want_pos, TC, REDUCTION_TOL);
    expect_close_d("vit_embed_bwd (no dpos)", "dcls", download(&b, d_dcls_only, C), want_cls, C,
                   REDUCTION_TOL);
    free(want_cls);
    free(want_pos);
    bufs_free(&b);
}

/* ---- AdamW --------------------------------------------------------------------------------- */

/* Three steps (bias correction changes with t) over two segments, one decaying, whose
 * gradients and state live at other offsets than the parameters, as under SDP. */
static void test_adamw(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 1300);
    size_t np = 3000, ng = 2500;
    sdp_opt_segment segs[2] = {
        {.offset = 100, .count = 1500, .decay = true, .grad_offset = 0, .state_offset = 0},
        {.offset = 1700, .count = 1001, .decay = false, .grad_offset = 1499, .state_offset = 1500}};
    sdp_opt_cfg cfg = sdp_opt_defaults(SDP_OPT_ADAMW);
    sdp_mem mem = {0};
    sdp_optim o;
    sdp_optim_init(&o, &cfg, 2501, &mem);
    float *params = host_randn(&b, np, 1.0f);
    float *d_params = dev_floats(&b, params, np);
    float *d_m = dev_floats(&b, o.m, o.n), *d_v = dev_floats(&b, o.v, o.n);
    for (int step = 0; step < 3; step++) {
        float *grads = host_randn(&b, ng, 0.1f);
        float *d_grads = dev_floats(&b, grads, ng);
        float lr = 1e-3f * (float)(step + 1);
        sdp_optim_step(&o, params, grads, segs, 2, lr);
        sdp_cuda_adamw_update(ctx, &cfg, o.t, d_m, d_v, d_params, d_grads, segs, 2, lr);
    }
    expect_dev(&b, "adamw x3", "params", d_params, params, np, ELEMENTWISE_TOL);
    expect_dev(&b, "adamw x3", "m", d_m, o.m, o.n, ELEMENTWISE_TOL);
    expect_dev(&b, "adamw x3", "v", d_v, o.v, o.n, ELEMENTWISE_TOL);
    sdp_optim_free(&o, &mem);
    bufs_free(&b);
}

/* ---- SGD ----------------------------------------------------------------------------------- */

/* Three steps (the momentum buffer starts as the first gradient) over two segments at other
 * offsets than the parameters, one decaying: plain, with momentum, and Nesterov. */
static void check_sgd(sdp_cuda_ctx *ctx, float momentum, bool nesterov) {
    bufs b = bufs_make(ctx, 1350 + (uint64_t)(momentum * 10) + nesterov);
    size_t np = 3000, ng = 2500;
    sdp_opt_segment segs[2] = {
        {.offset = 100, .count = 1500, .decay = true, .grad_offset = 0, .state_offset = 0},
        {.offset = 1700, .count = 1001, .decay = false, .grad_offset = 1499, .state_offset = 1500}};
    sdp_opt_cfg cfg = sdp_opt_defaults(SDP_OPT_SGD);
    cfg.momentum = momentum;
    cfg.nesterov = nesterov;
    sdp_mem mem = {0};
    sdp_optim o;
    sdp_optim_init(&o, &cfg, 2501, &mem);
    float *params = host_randn(&b, np, 1.0f);
    float *d_params = dev_floats(&b, params, np);
    float *d_buf = NULL;
    if (o.m) {
        tu_fill(o.m, o.n, &b.rng, 1.0f); /* ignored at the first step, as by torch */
        d_buf = dev_floats(&b, o.m, o.n);
    }
    for (int step = 0; step < 3; step++) {
        float *grads = host_randn(&b, ng, 0.1f);
        float *d_grads = dev_floats(&b, grads, ng);
        float lr = 0.05f * (float)(step + 1);
        sdp_optim_step(&o, params, grads, segs, 2, lr);
        sdp_cuda_sgd_update(ctx, &cfg, o.t, d_buf, d_params, d_grads, segs, 2, lr);
    }
    char name[64];
    snprintf(name, sizeof name, "sgd x3 momentum %.1f%s", (double)momentum,
             nesterov ? " nesterov" : "");
    expect_dev(&b, name, "params", d_params, params, np, ELEMENTWISE_TOL);
    if (o.m) expect_dev(&b, name, "buf", d_buf, o.m, o.n, ELEMENTWISE_TOL);
    sdp_optim_free(&o, &mem);
    bufs_free(&b);
}

static void test_sgd(void **state) {
    check_sgd(*state, 0.0f, false);
    check_sgd(*state, 0.9f, false);
    check_sgd(*state, 0.9f, true);
}

/* ---- vision: convolution (cuDNN) ----------------------------------------------------------- */

/* Forward (with or without bias) and backward, all gradients accumulating onto random values;
 * then backward with dinp alone and with dw alone (the others NULL: skipped). */
static void check_conv(sdp_cuda_ctx *ctx, sdp_conv_shape s, bool with_bias) {
    bufs b = bufs_make(ctx, 2000 + (uint64_t)(s.IC * 16 + s.KH * 4 + s.stride_h));
    const sdp_backend *cpu = tu_cpu(SDP_GEMM_OPENBLAS);
    void *plan = sdp_conv_plan_create(cpu, &s, SDP_CONV_IM2COL);
    const int OH = (s.H + 2 * s.pad_h - s.KH) / s.stride_h + 1;
    const int OW = (s.W + 2 * s.pad_w - s.KW) / s.stride_w + 1;
    const size_t ni = (size_t)s.B * s.IC * s.H * s.W, no = (size_t)s.B * s.OC * OH * OW;
    const size_t nw = (size_t)s.OC * s.IC * s.KH * s.KW, nb = (size_t)s.OC;
    float *inp = host_randn(&b, ni, 1.0f), *w = host_randn(&b, nw, 0.3f);
    float *bias = with_bias ? host_randn(&b, nb, 1.0f) : NULL;
    float *out = host_randn(&b, no, 1.0f), *dout = host_randn(&b, no, 1.0f);
    float *dinp = host_randn(&b, ni, 1.0f), *dw = host_randn(&b, nw, 1.0f);
    float *dbias = host_randn(&b, nb, 1.0f);
    float *dinp_only = host_copy(&b, dinp, ni), *dw_only = host_copy(&b, dw, nw);
    float *d_inp = dev_floats(&b, inp, ni), *d_w = dev_floats(&b, w, nw);
    float *d_bias = with_bias ? dev_floats(&b, bias, nb) : NULL;
    float *d_out = dev_floats(&b, out, no); /* random: the forward must overwrite it */
    float *d_dout = dev_floats(&b, dout, no);
    float *d_dinp = dev_floats(&b, dinp, ni), *d_dw = dev_floats(&b, dw, nw);
    float *d_dbias = dev_floats(&b, dbias, nb);
    float *d_dinp_only = dev_floats(&b, dinp_only, ni), *d_dw_only = dev_floats(&b, dw_only, nw);

    float *scratch = host_alloc(&b, sdp_conv_scratch_bytes(cpu, plan));
    sdp_conv2d_fwd(cpu, plan, out, inp, w, bias, scratch);
    sdp_conv2d_bwd(cpu, plan, dinp, dw, with_bias ? dbias : NULL, dout, inp, w, scratch);
    sdp_conv2d_bwd(cpu, plan, dinp_only, NULL, NULL, dout, NULL, w, scratch);
    sdp_conv2d_bwd(cpu, plan, NULL, dw_only, NULL, dout, inp, NULL, scratch);
    sdp_cuda_conv *conv = sdp_cuda_conv_create(ctx, &s);
    sdp_cuda_conv2d_fwd(ctx, conv, d_out, d_inp, d_w, d_bias);
    sdp_cuda_conv2d_bwd(ctx, conv, d_dinp, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w);
    sdp_cuda_conv2d_bwd(ctx, conv, d_dinp_only, NULL, NULL, d_dout, NULL, d_w);
    sdp_cuda_conv2d_bwd(ctx, conv, NULL, d_dw_only, NULL, d_dout, d_inp, NULL);

    char name[80];
    snprintf(name, sizeof name, "conv2d %dx%dx%dx%d k%d s%d ->%d%s", s.B, s.IC, s.H, s.W, s.KH,
             s.stride_h, s.OC, with_bias ? " +b" : "");
    expect_dev(&b, name, "out", d_out, out, no, REDUCTION_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, ni, REDUCTION_TOL);
    expect_dev(&b, name, "dw", d_dw, dw, nw, REDUCTION_TOL);
    if (with_bias) expect_dev(&b, name, "dbias", d_dbias, dbias, nb, REDUCTION_TOL);
    expect_dev(&b, name, "dinp only", d_dinp_only, dinp_only, ni, REDUCTION_TOL);
    expect_dev(&b, name, "dw only", d_dw_only, dw_only, nw, REDUCTION_TOL);
    sdp_cuda_conv_destroy(conv);
    sdp_conv_plan_free(cpu, plan);
    bufs_free(&b);
}

/* The ResNet's shapes (stem, 3x3 at stride 1 and 2, the 1x1 stride-2 shortcut, a wide layer),
 * odd sizes, and a non-square kernel with its own padding. */
static void test_conv2d(void **state) {
    const sdp_conv_shape shapes[] = {
        {2, 3, 17, 17, 8, 3, 3, 1, 1, 1, 1},  {3, 8, 16, 16, 16, 3, 3, 2, 2, 1, 1},
        {3, 8, 16, 16, 16, 1, 1, 2, 2, 0, 0}, {2, 5, 9, 7, 6, 3, 3, 1, 1, 1, 1},
        {4, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1},  {2, 4, 11, 13, 3, 3, 5, 2, 1, 0, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        check_conv(*state, shapes[i], i % 2 == 1);
}

/* ---- vision: batch norm, ReLU, pooling, gradient slices ------------------------------------ */

/* Training forward with running statistics (and without: the same output), evaluation forward
 * from the updated running statistics, backward with every gradient and with the parameters'
 * alone. Inputs have a mean away from zero; outputs start random, as they must be overwritten. */
static void check_batchnorm(sdp_cuda_ctx *ctx, int B, int C, int H, int W) {
    bufs b = bufs_make(ctx, 2100 + (uint64_t)(B * 1000 + C));
    const size_t n = (size_t)B * C * H * W;
    float *inp = host_randn(&b, n, 2.0f), *gamma = host_randn(&b, C, 1.0f);
    float *beta = host_randn(&b, C, 1.0f), *rmean = host_randn(&b, C, 0.5f);
    float *rvar = host_alloc(&b, C * sizeof *rvar);
    for (size_t i = 0; i < n; i++) inp[i] += 3.0f;
    for (int c = 0; c < C; c++) rvar[c] = 0.5f + sdp_rng_uniform(&b.rng);
    float *out = host_randn(&b, n, 1.0f), *mean = host_randn(&b, C, 1.0f);
    float *rstd = host_randn(&b, C, 1.0f), *eval = host_randn(&b, n, 1.0f);
    float *dout = host_randn(&b, n, 1.0f), *dinp = host_randn(&b, n, 1.0f);
    float *dgamma = host_randn(&b, C, 1.0f), *dbeta = host_randn(&b, C, 1.0f);
    float *dgamma_only = host_copy(&b, dgamma, C), *dbeta_only = host_copy(&b, dbeta, C);
    float *d_inp = dev_floats(&b, inp, n), *d_gamma = dev_floats(&b, gamma, C);
    float *d_beta = dev_floats(&b, beta, C), *d_rmean = dev_floats(&b, rmean, C);
    float *d_rvar = dev_floats(&b, rvar, C), *d_out = dev_floats(&b, out, n);
    float *d_out2 = dev_floats(&b, out, n), *d_mean = dev_floats(&b, mean, C);
    float *d_rstd = dev_floats(&b, rstd, C), *d_eval = dev_floats(&b, eval, n);
    float *d_dout = dev_floats(&b, dout, n), *d_dinp = dev_floats(&b, dinp, n);
    float *d_dgamma = dev_floats(&b, dgamma, C), *d_dbeta = dev_floats(&b, dbeta, C);
    float *d_dgamma_only = dev_floats(&b, dgamma_only, C);
    float *d_dbeta_only = dev_floats(&b, dbeta_only, C);

    sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, rmean, rvar, inp, gamma, beta,
                            B, C, H, W);
    sdp_batchnorm_fwd_eval(tu_cpu(SDP_GEMM_DNNL), eval, inp, rmean, rvar, gamma, beta, B, C, H, W);
    sdp_batchnorm_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, B,
                      C, H, W);
    sdp_batchnorm_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, dgamma_only, dbeta_only, dout, inp, gamma, mean,
                      rstd, B, C, H, W);
    sdp_cuda_batchnorm_fwd_train(ctx, d_out, d_mean, d_rstd, d_rmean, d_rvar, d_inp, d_gamma,
                                 d_beta, B, C, H, W);
    sdp_cuda_batchnorm_fwd_train(ctx, d_out2, d_mean, d_rstd, NULL, NULL, d_inp, d_gamma, d_beta, B,
                                 C, H, W);
    sdp_cuda_batchnorm_fwd_eval(ctx, d_eval, d_inp, d_rmean, d_rvar, d_gamma, d_beta, B, C, H, W);
    sdp_cuda_batchnorm_bwd(ctx, d_dinp, d_dgamma, d_dbeta, d_dout, d_inp, d_gamma, d_mean, d_rstd,
                           B, C, H, W);
    sdp_cuda_batchnorm_bwd(ctx, NULL, d_dgamma_only, d_dbeta_only, d_dout, d_inp, d_gamma, d_mean,
                           d_rstd, B, C, H, W);

    char name[64];
    snprintf(name, sizeof name, "batchnorm %dx%dx%dx%d", B, C, H, W);
    expect_dev(&b, name, "out", d_out, out, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "out(norun)", d_out2, out, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "mean", d_mean, mean, C, ELEMENTWISE_TOL);
    expect_dev(&b, name, "rstd", d_rstd, rstd, C, ELEMENTWISE_TOL);
    expect_dev(&b, name, "run_mean", d_rmean, rmean, C, ELEMENTWISE_TOL);
    expect_dev(&b, name, "run_var", d_rvar, rvar, C, ELEMENTWISE_TOL);
    expect_dev(&b, name, "eval", d_eval, eval, n, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, n, REDUCTION_TOL);
    expect_dev(&b, name, "dgamma", d_dgamma, dgamma, C, REDUCTION_TOL);
    expect_dev(&b, name, "dbeta", d_dbeta, dbeta, C, REDUCTION_TOL);
    expect_dev(&b, name, "dgamma(p)", d_dgamma_only, dgamma_only, C, REDUCTION_TOL);
    expect_dev(&b, name, "dbeta(p)", d_dbeta_only, dbeta_only, C, REDUCTION_TOL);
    bufs_free(&b);
}

/* Two values per channel (the fewest with a variance), one pixel per image, odd sizes, many
 * chunks per channel (64 x 32 x 32 values) and many channels. */
static void test_batchnorm(void **state) {
    const int shapes[][4] = {{1, 1, 1, 2},    {2, 3, 1, 1},    {3, 5, 7, 9},
                             {8, 16, 32, 32}, {64, 4, 32, 32}, {5, 600, 2, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_batchnorm(*state, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
}

/* Out of place and in place (as the ResNet runs it); the backward accumulates, and skips NULL. */
static void test_relu(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 2200);
    const size_t n = 100003;
    float *inp = host_randn(&b, n, 1.0f), *dout = host_randn(&b, n, 1.0f);
    float *out = host_randn(&b, n, 1.0f), *dinp = host_randn(&b, n, 1.0f);
    float *d_inp = dev_floats(&b, inp, n), *d_out = dev_floats(&b, out, n);
    float *d_inplace = dev_floats(&b, inp, n), *d_dout = dev_floats(&b, dout, n);
    float *d_dinp = dev_floats(&b, dinp, n);
    sdp_relu_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, n);
    sdp_relu_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dout, out, n);
    sdp_cuda_relu_fwd(ctx, d_out, d_inp, n);
    sdp_cuda_relu_fwd(ctx, d_inplace, d_inplace, n);
    sdp_cuda_relu_bwd(ctx, d_dinp, d_dout, d_out, n);
    sdp_cuda_relu_bwd(ctx, NULL, d_dout, d_out, n); /* skipped, must not fault */
    expect_dev(&b, "relu_fwd", "out", d_out, out, n, 0.0);
    expect_dev(&b, "relu_fwd (in place)", "out", d_inplace, out, n, 0.0);
    expect_dev(&b, "relu_bwd", "dinp", d_dinp, dinp, n, 0.0);
    bufs_free(&b);
}

static void check_avgpool(sdp_cuda_ctx *ctx, int B, int C, int H, int W, int k) {
    bufs b = bufs_make(ctx, 2300 + (uint64_t)k);
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C * (H / k) * (W / k);
    float *inp = host_randn(&b, ni, 1.0f), *out = host_randn(&b, no, 1.0f);
    float *dout = host_randn(&b, no, 1.0f), *dinp = host_randn(&b, ni, 1.0f);
    float *d_inp = dev_floats(&b, inp, ni), *d_out = dev_floats(&b, out, no);
    float *d_dout = dev_floats(&b, dout, no), *d_dinp = dev_floats(&b, dinp, ni);
    sdp_avgpool_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, B, C, H, W, k);
    sdp_avgpool_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dout, B, C, H, W, k);
    sdp_cuda_avgpool_fwd(ctx, d_out, d_inp, B, C, H, W, k);
    sdp_cuda_avgpool_bwd(ctx, d_dinp, d_dout, B, C, H, W, k);
    sdp_cuda_avgpool_bwd(ctx, NULL, d_dout, B, C, H, W, k);
    char name[64];
    snprintf(name, sizeof name, "avgpool %dx%dx%dx%d k%d", B, C, H, W, k);
    expect_dev(&b, name, "out", d_out, out, no, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, ni, ELEMENTWISE_TOL);
    bufs_free(&b);
}

static void check_global_avgpool(sdp_cuda_ctx *ctx, int B, int C, int H, int W) {
    bufs b = bufs_make(ctx, 2400 + (uint64_t)H);
    const size_t ni = (size_t)B * C * H * W, no = (size_t)B * C;
    float *inp = host_randn(&b, ni, 1.0f), *out = host_randn(&b, no, 1.0f);
    float *dout = host_randn(&b, no, 1.0f), *dinp = host_randn(&b, ni, 1.0f);
    float *d_inp = dev_floats(&b, inp, ni), *d_out = dev_floats(&b, out, no);
    float *d_dout = dev_floats(&b, dout, no), *d_dinp = dev_floats(&b, dinp, ni);
    sdp_global_avgpool_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, B, C, H, W);
    sdp_global_avgpool_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dout, B, C, H, W);
    sdp_cuda_global_avgpool_fwd(ctx, d_out, d_inp, B, C, H, W);
    sdp_cuda_global_avgpool_bwd(ctx, d_dinp, d_dout, B, C, H, W);
    sdp_cuda_global_avgpool_bwd(ctx, NULL, d_dout, B, C, H, W);
    char name[64];
    snprintf(name, sizeof name, "global_avgpool %dx%dx%dx%d", B, C, H, W);
    expect_dev(&b, name, "out", d_out, out, no, ELEMENTWISE_TOL);
    expect_dev(&b, name, "dinp", d_dinp, dinp, ni, ELEMENTWISE_TOL);
    bufs_free(&b);
}

/* Windows that leave rows and columns over (11 x 9 by 2 and by 3); planes of fewer pixels than a
 * warp's lanes (4 x 4), of more (33 x 33), and a count of planes that fills no block (3 x 7). */
static void test_pool(void **state) {
    check_avgpool(*state, 3, 5, 11, 9, 2);
    check_avgpool(*state, 2, 4, 11, 9, 3);
    check_avgpool(*state, 2, 3, 8, 8, 1);
    check_global_avgpool(*state, 3, 7, 4, 4);
    check_global_avgpool(*state, 2, 5, 33, 33);
    check_global_avgpool(*state, 16, 64, 8, 8);
}

/* Rows of a wider source added into a narrower destination (a slice of a gradient), exactly. */
static void test_add_rows(void **state) {
    sdp_cuda_ctx *ctx = *state;
    bufs b = bufs_make(ctx, 2500);
    const size_t rows = 37, cols = 45, ld_src = 61, ld_dst = 50;
    float *src = host_randn(&b, rows * ld_src, 1.0f), *dst = host_randn(&b, rows * ld_dst, 1.0f);
    float *want = host_copy(&b, dst, rows * ld_dst);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) want[r * ld_dst + c] += src[r * ld_src + c];
    float *d_src = dev_floats(&b, src, rows * ld_src), *d_dst = dev_floats(&b, dst, rows * ld_dst);
    sdp_cuda_add_rows(ctx, d_dst, ld_dst, d_src, ld_src, rows, cols);
    expect_dev(&b, "add_rows 37x45", "dst", d_dst, want, rows * ld_dst, 0.0);
    bufs_free(&b);
}

/* ---- device memory accounting -------------------------------------------------------------- */

static void test_device_memory_accounting(void **state) {
    sdp_cuda_ctx *ctx = *state;
    sdp_mem before = ctx->mem;
    float *p = sdp_cuda_malloc(ctx, SDP_MEM_PARAMS, 1000 * sizeof(float));
    void *g = sdp_cuda_malloc(ctx, SDP_MEM_GRADS, 24);
    assert_int_equal(ctx->mem.cur[SDP_MEM_PARAMS], before.cur[SDP_MEM_PARAMS] + 4000);
    assert_int_equal(ctx->mem.cur[SDP_MEM_GRADS], before.cur[SDP_MEM_GRADS] + 24);
    assert_int_equal(ctx->mem.nallocs, before.nallocs + 2);
    float host[1000];
    sdp_cuda_download(ctx, host, p, sizeof host);
    for (int i = 0; i < 1000; i++) assert_true(host[i] == 0.0f); /* zero-filled */
    sdp_cuda_free(ctx, p);
    sdp_cuda_free(ctx, g);
    assert_int_equal(ctx->mem.total_cur, before.total_cur);
    assert_int_equal(ctx->mem.nallocs, before.nallocs);
    printf("  device memory accounting: ok (peak %zu bytes)\n", ctx->mem.total_peak);
}

/* ---- main ---------------------------------------------------------------------------------- */

static int create_ctx(void **state) {
    *state = sdp_cuda_ctx_create(0, SDP_PRECISION_FP32);
    return 0;
}

static int destroy_ctx(void **state) {
    sdp_cuda_ctx_destroy(*state);
    return 0;
}

int main(void) {
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        /* An old driver lands here too: say why, so that a skip on a GPU machine is noticed. */
        printf("test_cuda_ops: skipped: %s\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
        return 77;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("test_cuda_ops: %s (sm_%d%d), %d device(s)\n", prop.name, prop.major, prop.minor,
               devices);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_memory_accounting),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_bidirectional),
        cmocka_unit_test(test_attention_bf16),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_copy_rows),
        cmocka_unit_test(test_bias_slice),
        cmocka_unit_test(test_count_correct),
        cmocka_unit_test(test_patch_gather),
        cmocka_unit_test(test_vit_embed),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_add_rows),
    };
    return cmocka_run_group_tests(tests, create_ctx, destroy_ctx);
}
