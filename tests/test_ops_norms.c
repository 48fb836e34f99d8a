/* LayerNorm and RMSNorm, forward (outputs and saved statistics) and backward, against
 * double-precision references and their finite differences, at a small odd size and at a size
 * that runs the row- and column-parallel paths. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops.h"

static const double EPS = 1e-5;

typedef struct {
    int n, C;
} dims;

static const dims SMALL = {7, 13};
static const dims LARGE = {48, 387}; /* n*C > 2^14 */

typedef struct {
    dims d;
    float *inp, *w, *b, *r;
    double *inp64, *w64, *b64, *r64;
} norm_case;

/* Inputs are offset from zero so that layernorm's centring matters. */
static norm_case make_case(dims d, uint64_t seed) {
    norm_case c = {.d = d};
    size_t nx = (size_t)d.n * d.C;
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.inp = malloc(nx * sizeof(float));
    c.r = malloc(nx * sizeof(float));
    c.w = malloc(d.C * sizeof(float));
    c.b = malloc(d.C * sizeof(float));
    tu_fill(c.inp, nx, &rng, 1.5f);
    for (size_t i = 0; i < nx; i++) c.inp[i] += 2.0f;
    tu_fill(c.r, nx, &rng, 1.0f);
    tu_fill(c.w, d.C, &rng, 1.0f);
    tu_fill(c.b, d.C, &rng, 1.0f);
    c.inp64 = malloc(nx * sizeof(double));
    c.r64 = malloc(nx * sizeof(double));
    c.w64 = malloc(d.C * sizeof(double));
    c.b64 = malloc(d.C * sizeof(double));
    tu_to_double(c.inp64, c.inp, nx);
    tu_to_double(c.r64, c.r, nx);
    tu_to_double(c.w64, c.w, d.C);
    tu_to_double(c.b64, c.b, d.C);
    return c;
}

static void free_case(norm_case *c) {
    free(c->inp), free(c->w), free(c->b), free(c->r);
    free(c->inp64), free(c->w64), free(c->b64), free(c->r64);
}

static float *prefilled(size_t n, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, 1.0f);
    return p;
}

/* ---- references ---------------------------------------------------------------------------- */

/* Row i of layernorm (out may be NULL) and its mean and rstd. */
static void layernorm_ref_row(const norm_case *c, int i, double *out, double *mean, double *rstd) {
    const double *x = c->inp64 + (size_t)i * c->d.C;
    int C = c->d.C;
    double m = 0, v = 0;
    for (int k = 0; k < C; k++) m += x[k];
    m /= C;
    for (int k = 0; k < C; k++) v += (x[k] - m) * (x[k] - m);
    double rs = 1.0 / sqrt(v / C + EPS);
    if (out)
        for (int k = 0; k < C; k++) out[k] = (x[k] - m) * rs * c->w64[k] + c->b64[k];
    *mean = m;
    *rstd = rs;
}

static void rmsnorm_ref_row(const norm_case *c, int i, double *out, double *rstd) {
    const double *x = c->inp64 + (size_t)i * c->d.C;
    int C = c->d.C;
    double sq = 0;
    for (int k = 0; k < C; k++) sq += x[k] * x[k];
    double rs = 1.0 / sqrt(sq / C + EPS);
    for (int k = 0; k < C; k++) out[k] = x[k] * rs * c->w64[k];
    *rstd = rs;
}

static double layernorm_loss(const double *x, void *ctx) {
    (void)x;
    const norm_case *c = ctx;
    double *row = malloc(c->d.C * sizeof(double)), loss = 0, m, rs;
    for (int i = 0; i < c->d.n; i++) {
        layernorm_ref_row(c, i, row, &m, &rs);
        for (int k = 0; k < c->d.C; k++) loss += c->r64[(size_t)i * c->d.C + k] * row[k];
    }
    free(row);
    return loss;
}

static double rmsnorm_loss(const double *x, void *ctx) {
    (void)x;
    const norm_case *c = ctx;
    double *row = malloc(c->d.C * sizeof(double)), loss = 0, rs;
    for (int i = 0; i < c->d.n; i++) {
        rmsnorm_ref_row(c, i, row, &rs);
        for (int k = 0; k < c->d.C; k++) loss += c->r64[(size_t)i * c->d.C + k] * row[k];
    }
    free(row);
    return loss;
}

/* ---- layernorm ----------------------------------------------------------------------------- */

static void check_layernorm_forward(dims d) {
    norm_case c = make_case(d, 1);
    size_t nx = (size_t)d.n * d.C;
    float *out = malloc(nx * sizeof(float)), *mean = malloc(d.n * sizeof(float));
    float *rstd = malloc(d.n * sizeof(float));
    double *ref = malloc(nx * sizeof(double)), *ref_mean = malloc(d.n * sizeof(double));
    double *ref_rstd = malloc(d.n * sizeof(double));
    sdp_layernorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, c.inp, c.w, c.b, d.n, d.C);
    for (int i = 0; i < d.n; i++)
        layernorm_ref_row(&c, i, ref + (size_t)i * d.C, &ref_mean[i], &ref_rstd[i]);
    assert_true(tu_err_ratio(out, ref, nx, 1e-5, 1e-5) <= 1);
    assert_true(tu_err_ratio(mean, ref_mean, d.n, 1e-6, 1e-6) <= 1);
    assert_true(tu_err_ratio(rstd, ref_rstd, d.n, 1e-6, 1e-6) <= 1);
    free(out), free(mean), free(rstd), free(ref), free(ref_mean), free(ref_rstd);
    free_case(&c);
}

static void test_layernorm_forward(void **state) {
    (void)state;
    check_layernorm_forward(SMALL);
    check_layernorm_forward(LARGE);
}

typedef struct {
    float *dinp, *dw, *db;
} ln_grads;

static ln_grads ln_prefilled(dims d) {
    return (ln_grads){prefilled((size_t)d.n * d.C, 1), prefilled(d.C, 2), prefilled(d.C, 3)};
}

static void ln_free(ln_grads *g) {
    free(g->dinp), free(g->dw), free(g->db);
}

static void check_layernorm_backward(dims d, size_t samples) {
    norm_case c = make_case(d, 2);
    size_t nx = (size_t)d.n * d.C;
    float *out = malloc(nx * sizeof(float)), *mean = malloc(d.n * sizeof(float));
    float *rstd = malloc(d.n * sizeof(float));
    sdp_layernorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, c.inp, c.w, c.b, d.n, d.C);
    ln_grads before = ln_prefilled(d), got = ln_prefilled(d);
    sdp_layernorm_bwd(tu_cpu(SDP_GEMM_DNNL), got.dinp, got.dw, got.db, c.r, c.inp, c.w, mean, rstd,
                      d.n, d.C);
    double h = 1e-4, atol = 1e-4, rtol = 1e-3;
    assert_true(gc_grad_err("dinp", got.dinp, before.dinp, layernorm_loss, c.inp64, nx, &c, samples,
                            h, atol, rtol) <= 1);
    assert_true(gc_grad_err("dw", got.dw, before.dw, layernorm_loss, c.w64, d.C, &c, samples, h,
                            atol, rtol) <= 1);
    assert_true(gc_grad_err("db", got.db, before.db, layernorm_loss, c.b64, d.C, &c, samples, h,
                            atol, rtol) <= 1);

    /* Any subset of gradients: those given match the full call bitwise, on 1 or 2 threads. */
    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        for (int mask = 0; mask < 8; mask++) {
            ln_grads g = ln_prefilled(d);
            sdp_layernorm_bwd(tu_cpu(SDP_GEMM_DNNL), mask & 1 ? g.dinp : NULL,
                              mask & 2 ? g.dw : NULL, mask & 4 ? g.db : NULL, c.r, c.inp, c.w, mean,
                              rstd, d.n, d.C);
            assert_memory_equal(g.dinp, mask & 1 ? got.dinp : before.dinp, nx * sizeof(float));
            assert_memory_equal(g.dw, mask & 2 ? got.dw : before.dw, d.C * sizeof(float));
            assert_memory_equal(g.db, mask & 4 ? got.db : before.db, d.C * sizeof(float));
            ln_free(&g);
        }
    }
    ln_free(&before), ln_free(&got);
    free(out), free(mean), free(rstd);
    free_case(&c);
}

static void test_layernorm_backward(void **state) {
    (void)state;
    check_layernorm_backward(SMALL, SIZE_MAX);
    check_layernorm_backward(LARGE, 200);
}

/* ---- rmsnorm ------------------------------------------------------------------------------- */

static void check_rmsnorm_forward(dims d) {
    norm_case c = make_case(d, 3);
    size_t nx = (size_t)d.n * d.C;
    float *out = malloc(nx * sizeof(float)), *rstd = malloc(d.n * sizeof(float));
    double *ref = malloc(nx * sizeof(double)), *ref_rstd = malloc(d.n * sizeof(double));
    sdp_rmsnorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, rstd, c.inp, c.w, d.n, d.C);
    for (int i = 0; i < d.n; i++) rmsnorm_ref_row(&c, i, ref + (size_t)i * d.C, &ref_rstd[i]);
    assert_true(tu_err_ratio(out, ref, nx, 1e-5, 1e-5) <= 1);
    assert_true(tu_err_ratio(rstd, ref_rstd, d.n, 1e-6, 1e-6) <= 1);
    free(out), free(rstd), free(ref), free(ref_rstd);
    free_case(&c);
}

static void test_rmsnorm_forward(void **state) {
    (void)state;
    check_rmsnorm_forward(SMALL);
    check_rmsnorm_forward(LARGE);
}

static void check_rmsnorm_backward(dims d, size_t samples) {
    norm_case c = make_case(d, 4);
    size_t nx = (size_t)d.n * d.C;
    float *out = malloc(nx * sizeof(float)), *rstd = malloc(d.n * sizeof(float));
    sdp_rmsnorm_fwd(tu_cpu(SDP_GEMM_DNNL), out, rstd, c.inp, c.w, d.n, d.C);
    float *dinp0 = prefilled(nx, 1), *dw0 = prefilled(d.C, 2);
    float *dinp = prefilled(nx, 1), *dw = prefilled(d.C, 2);
    sdp_rmsnorm_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, dw, c.r, c.inp, c.w, rstd, d.n, d.C);
    double h = 1e-4, atol = 1e-4, rtol = 1e-3;
    assert_true(gc_grad_err("dinp", dinp, dinp0, rmsnorm_loss, c.inp64, nx, &c, samples, h, atol,
                            rtol) <= 1);
    assert_true(gc_grad_err("dw", dw, dw0, rmsnorm_loss, c.w64, d.C, &c, samples, h, atol, rtol) <=
                1);

    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        for (int mask = 0; mask < 4; mask++) {
            float *gi = prefilled(nx, 1), *gw = prefilled(d.C, 2);
            sdp_rmsnorm_bwd(tu_cpu(SDP_GEMM_DNNL), mask & 1 ? gi : NULL, mask & 2 ? gw : NULL, c.r,
                            c.inp, c.w, rstd, d.n, d.C);
            assert_memory_equal(gi, mask & 1 ? dinp : dinp0, nx * sizeof(float));
            assert_memory_equal(gw, mask & 2 ? dw : dw0, d.C * sizeof(float));
            free(gi), free(gw);
        }
    }
    free(dinp0), free(dw0), free(dinp), free(dw), free(out), free(rstd);
    free_case(&c);
}

static void test_rmsnorm_backward(void **state) {
    (void)state;
    check_rmsnorm_backward(SMALL, SIZE_MAX);
    check_rmsnorm_backward(LARGE, 200);
}

int main(void) {
    sdp_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_forward),
        cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_rmsnorm_forward),
        cmocka_unit_test(test_rmsnorm_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
