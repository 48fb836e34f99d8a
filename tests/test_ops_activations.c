/* GELU (tanh approximation), SwiGLU and the scaled residual: forward against double-precision
 * formulas, backward against finite differences of them, accumulation into pre-filled gradients,
 * NULL gradients, and the in-place residual. Small odd sizes and sizes past the OpenMP threshold.
 */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops.h"

static float *random_floats(size_t n, uint64_t seed, float scale) {
    sdp_rng rng = sdp_rng_make(seed, 0);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, scale);
    return p;
}

static double *to_double(const float *f, size_t n) {
    double *d = malloc(n * sizeof(double));
    tu_to_double(d, f, n);
    return d;
}

/* ---- GELU ---------------------------------------------------------------------------------- */

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct {
    size_t n;
    double *x, *r;
} pointwise_ctx;

static double gelu_loss(const double *x, void *ctx) {
    (void)x;
    const pointwise_ctx *c = ctx;
    double loss = 0;
    for (size_t i = 0; i < c->n; i++) loss += c->r[i] * gelu_ref(c->x[i]);
    return loss;
}

static void check_gelu(size_t n, size_t samples) {
    float *x = random_floats(n, 1, 2.5f), *r = random_floats(n, 2, 1.0f);
    float *out = malloc(n * sizeof(float)), *dinp0 = random_floats(n, 3, 1.0f);
    float *dinp = random_floats(n, 3, 1.0f);
    double *ref = malloc(n * sizeof(double));
    pointwise_ctx c = {n, to_double(x, n), to_double(r, n)};

    sdp_gelu_fwd(tu_cpu(SDP_GEMM_DNNL), out, x, n);
    for (size_t i = 0; i < n; i++) ref[i] = gelu_ref(c.x[i]);
    assert_true(tu_err_ratio(out, ref, n, 1e-6, 1e-5) <= 1);

    sdp_gelu_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, r, x, n);
    assert_true(gc_grad_err("gelu dinp", dinp, dinp0, gelu_loss, c.x, n, &c, samples, 1e-4, 1e-5,
                            1e-4) <= 1);
    sdp_gelu_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, r, x,
                 n); /* a masked gradient: nothing to do, nothing to crash */

    free(x), free(r), free(out), free(dinp0), free(dinp), free(ref), free(c.x), free(c.r);
}

static void test_gelu(void **state) {
    (void)state;
    check_gelu(13, SIZE_MAX);
    check_gelu(20011, 300);
}

/* ---- SwiGLU -------------------------------------------------------------------------------- */

static double silu_ref(double g) {
    return g / (1.0 + exp(-g));
}

typedef struct {
    int n, F;
    double *inp, *r;
} swiglu_ctx;

static double swiglu_ref(const swiglu_ctx *c, int i, int f) {
    const double *row = c->inp + (size_t)i * 2 * c->F;
    return silu_ref(row[f]) * row[c->F + f];
}

static double swiglu_loss(const double *x, void *ctx) {
    (void)x;
    const swiglu_ctx *c = ctx;
    double loss = 0;
    for (int i = 0; i < c->n; i++)
        for (int f = 0; f < c->F; f++) loss += c->r[(size_t)i * c->F + f] * swiglu_ref(c, i, f);
    return loss;
}

static void check_swiglu(int n, int F, size_t samples) {
    size_t nin = (size_t)n * 2 * F, nout = (size_t)n * F;
    float *inp = random_floats(nin, 4, 2.0f), *r = random_floats(nout, 5, 1.0f);
    float *out = malloc(nout * sizeof(float)), *dinp0 = random_floats(nin, 6, 1.0f);
    float *dinp = random_floats(nin, 6, 1.0f);
    double *ref = malloc(nout * sizeof(double));
    swiglu_ctx c = {n, F, to_double(inp, nin), to_double(r, nout)};

    sdp_swiglu_fwd(tu_cpu(SDP_GEMM_DNNL), out, inp, n, F);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < F; f++) ref[(size_t)i * F + f] = swiglu_ref(&c, i, f);
    assert_true(tu_err_ratio(out, ref, nout, 1e-6, 1e-5) <= 1);

    sdp_swiglu_bwd(tu_cpu(SDP_GEMM_DNNL), dinp, r, inp, n, F);
    assert_true(gc_grad_err("swiglu dinp", dinp, dinp0, swiglu_loss, c.inp, nin, &c, samples, 1e-4,
                            1e-5, 1e-4) <= 1);
    sdp_swiglu_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, r, inp, n, F);

    free(inp), free(r), free(out), free(dinp0), free(dinp), free(ref), free(c.inp), free(c.r);
}

/* Inference models run GELU in place (out == inp): the same bits as out of place. */
static void test_gelu_in_place(void **state) {
    (void)state;
    const size_t sizes[] = {7, 70001};
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *x = random_floats(n, 11 + k, 2.0f), *y = malloc(n * sizeof(float));
        sdp_gelu_fwd(tu_cpu(SDP_GEMM_DNNL), y, x, n);
        sdp_gelu_fwd(tu_cpu(SDP_GEMM_DNNL), x, x, n);
        assert_memory_equal(x, y, n * sizeof(float));
        free(x);
        free(y);
    }
}

static void test_swiglu(void **state) {
    (void)state;
    check_swiglu(7, 13, SIZE_MAX);
    check_swiglu(37, 457, 300); /* n*F > 2^14 */
}

/* ---- residual ------------------------------------------------------------------------------ */

typedef struct {
    size_t n;
    double s;
    double *a, *b, *r;
} residual_ctx;

static double residual_loss(const double *x, void *ctx) {
    (void)x;
    const residual_ctx *c = ctx;
    double loss = 0;
    for (size_t i = 0; i < c->n; i++) loss += c->r[i] * (c->a[i] + c->s * c->b[i]);
    return loss;
}

static void check_residual(size_t n, float s, size_t samples) {
    float *a = random_floats(n, 7, 1.0f), *b = random_floats(n, 8, 1.0f);
    float *r = random_floats(n, 9, 1.0f), *out = malloc(n * sizeof(float));
    residual_ctx c = {n, s, to_double(a, n), to_double(b, n), to_double(r, n)};
    double *ref = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) ref[i] = c.a[i] + c.s * c.b[i];

    sdp_residual_fwd(tu_cpu(SDP_GEMM_DNNL), out, a, b, s, n);
    assert_true(tu_err_ratio(out, ref, n, 1e-6, 1e-6) <= 1);
    float *in_place = malloc(n * sizeof(float));
    memcpy(in_place, a, n * sizeof(float));
    sdp_residual_fwd(tu_cpu(SDP_GEMM_DNNL), in_place, in_place, b, s, n); /* out aliases a */
    assert_memory_equal(in_place, out, n * sizeof(float));

    float *da0 = random_floats(n, 10, 1.0f), *db0 = random_floats(n, 11, 1.0f);
    float *da = random_floats(n, 10, 1.0f), *db = random_floats(n, 11, 1.0f);
    sdp_residual_bwd(tu_cpu(SDP_GEMM_DNNL), da, db, r, s, n);
    assert_true(gc_grad_err("residual da", da, da0, residual_loss, c.a, n, &c, samples, 1e-3, 1e-5,
                            1e-4) <= 1);
    assert_true(gc_grad_err("residual db", db, db0, residual_loss, c.b, n, &c, samples, 1e-3, 1e-5,
                            1e-4) <= 1);
    for (int mask = 0; mask < 4; mask++) {
        float *ga = random_floats(n, 10, 1.0f), *gb = random_floats(n, 11, 1.0f);
        sdp_residual_bwd(tu_cpu(SDP_GEMM_DNNL), mask & 1 ? ga : NULL, mask & 2 ? gb : NULL, r, s,
                         n);
        assert_memory_equal(ga, mask & 1 ? da : da0, n * sizeof(float));
        assert_memory_equal(gb, mask & 2 ? db : db0, n * sizeof(float));
        free(ga), free(gb);
    }

    free(a), free(b), free(r), free(out), free(in_place), free(ref);
    free(da0), free(db0), free(da), free(db), free(c.a), free(c.b), free(c.r);
}

static void test_residual(void **state) {
    (void)state;
    check_residual(13, 1.0f, SIZE_MAX);
    check_residual(13, 0.37f, SIZE_MAX);
    check_residual(20011, 0.37f, 300);
}

int main(void) {
    sdp_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_gelu_in_place),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_residual),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
