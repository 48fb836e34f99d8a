/* Batch normalization: the training forward (output, saved statistics, running-statistics update)
 * and the eval forward against double-precision references; the backward against central finite
 * differences of the double training forward's loss sum(r * y). At a small odd size and at one
 * large enough for the OpenMP path, whose results must not depend on the thread count. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops_vision.h"

static const double EPS = 1e-5, MOMENTUM = 0.1;

typedef struct {
    int B, C, H, W;
} dims;

static const dims SMALL = {2, 3, 7, 5};
static const dims LARGE = {4, 16, 16, 16}; /* B*C*H*W = 2^14: the parallel path */

typedef struct {
    dims d;
    size_t n; /* elements of the activation */
    float *inp, *gamma, *beta, *r, *run_mean, *run_var;
    double *inp64, *gamma64, *beta64, *r64;
} bn_case;

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    tu_to_double(d, x, n);
    return d;
}

/* Inputs are offset from zero so that centring matters; running variances are positive. */
static bn_case make_case(dims d, uint64_t seed) {
    bn_case c = {.d = d, .n = (size_t)d.B * d.C * d.H * d.W};
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.inp = malloc(c.n * sizeof(float));
    c.r = malloc(c.n * sizeof(float));
    c.gamma = malloc(d.C * sizeof(float));
    c.beta = malloc(d.C * sizeof(float));
    c.run_mean = malloc(d.C * sizeof(float));
    c.run_var = malloc(d.C * sizeof(float));
    tu_fill(c.inp, c.n, &rng, 1.5f);
    for (size_t i = 0; i < c.n; i++) c.inp[i] += 2.0f;
    tu_fill(c.r, c.n, &rng, 1.0f);
    tu_fill(c.gamma, d.C, &rng, 1.0f);
    tu_fill(c.beta, d.C, &rng, 1.0f);
    tu_fill(c.run_mean, d.C, &rng, 1.0f);
    for (int k = 0; k < d.C; k++) c.run_var[k] = 0.5f + sdp_rng_uniform(&rng);
    c.inp64 = to_double(c.inp, c.n);
    c.r64 = to_double(c.r, c.n);
    c.gamma64 = to_double(c.gamma, d.C);
    c.beta64 = to_double(c.beta, d.C);
    return c;
}

static void free_case(bn_case *c) {
    free(c->inp), free(c->r), free(c->gamma), free(c->beta), free(c->run_mean), free(c->run_var);
    free(c->inp64), free(c->r64), free(c->gamma64), free(c->beta64);
}

static size_t idx(const dims *d, int b, int ch, size_t i) {
    return ((size_t)b * d->C + ch) * d->H * d->W + i;
}

/* Batch mean and biased variance of channel ch, in double. */
static void ref_stats(const bn_case *c, int ch, double *mean, double *var) {
    const dims *d = &c->d;
    size_t hw = (size_t)d->H * d->W, n = (size_t)d->B * hw;
    double m = 0, v = 0;
    for (int b = 0; b < d->B; b++)
        for (size_t i = 0; i < hw; i++) m += c->inp64[idx(d, b, ch, i)];
    m /= (double)n;
    for (int b = 0; b < d->B; b++)
        for (size_t i = 0; i < hw; i++) {
            double e = c->inp64[idx(d, b, ch, i)] - m;
            v += e * e;
        }
    *mean = m;
    *var = v / (double)n;
}

static void ref_train(const bn_case *c, double *out) {
    const dims *d = &c->d;
    size_t hw = (size_t)d->H * d->W;
    for (int ch = 0; ch < d->C; ch++) {
        double m, v;
        ref_stats(c, ch, &m, &v);
        for (int b = 0; b < d->B; b++)
            for (size_t i = 0; i < hw; i++) {
                size_t k = idx(d, b, ch, i);
                out[k] = (c->inp64[k] - m) / sqrt(v + EPS) * c->gamma64[ch] + c->beta64[ch];
            }
    }
}

static double train_loss(const double *x, void *ctx) {
    (void)x;
    const bn_case *c = ctx;
    double *y = malloc(c->n * sizeof(double)), loss = 0;
    ref_train(c, y);
    for (size_t i = 0; i < c->n; i++) loss += c->r64[i] * y[i];
    free(y);
    return loss;
}

/* ---- forward ------------------------------------------------------------------------------- */

static void check_forward_train(dims d) {
    bn_case c = make_case(d, 1);
    float *out = malloc(c.n * sizeof(float)), *mean = malloc(d.C * sizeof(float));
    float *rstd = malloc(d.C * sizeof(float)), *rm = malloc(d.C * sizeof(float));
    float *rv = malloc(d.C * sizeof(float));
    memcpy(rm, c.run_mean, d.C * sizeof(float));
    memcpy(rv, c.run_var, d.C * sizeof(float));
    sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, rm, rv, c.inp, c.gamma, c.beta,
                            d.B, d.C, d.H, d.W);

    double *ref = malloc(c.n * sizeof(double)), *ref_mean = malloc(d.C * sizeof(double));
    double *ref_rstd = malloc(d.C * sizeof(double)), *ref_rm = malloc(d.C * sizeof(double));
    double *ref_rv = malloc(d.C * sizeof(double));
    ref_train(&c, ref);
    double n = (double)d.B * d.H * d.W;
    for (int ch = 0; ch < d.C; ch++) {
        double m, v;
        ref_stats(&c, ch, &m, &v);
        ref_mean[ch] = m;
        ref_rstd[ch] = 1.0 / sqrt(v + EPS);
        /* PyTorch: running = (1 - momentum) running + momentum * stat, unbiased variance */
        ref_rm[ch] = (1 - MOMENTUM) * c.run_mean[ch] + MOMENTUM * m;
        ref_rv[ch] = (1 - MOMENTUM) * c.run_var[ch] + MOMENTUM * v * n / (n - 1);
    }
    assert_true(tu_err_ratio(out, ref, c.n, 1e-5, 1e-5) <= 1);
    assert_true(tu_err_ratio(mean, ref_mean, d.C, 1e-6, 1e-6) <= 1);
    assert_true(tu_err_ratio(rstd, ref_rstd, d.C, 1e-6, 1e-6) <= 1);
    assert_true(tu_err_ratio(rm, ref_rm, d.C, 1e-6, 1e-6) <= 1);
    assert_true(tu_err_ratio(rv, ref_rv, d.C, 1e-6, 1e-6) <= 1);

    /* Without running statistics: the same output and saved statistics, bitwise, on 1 and 2
     * threads. */
    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        float *out2 = malloc(c.n * sizeof(float)), *mean2 = malloc(d.C * sizeof(float));
        float *rstd2 = malloc(d.C * sizeof(float));
        sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), out2, mean2, rstd2, NULL, NULL, c.inp,
                                c.gamma, c.beta, d.B, d.C, d.H, d.W);
        assert_memory_equal(out2, out, c.n * sizeof(float));
        assert_memory_equal(mean2, mean, d.C * sizeof(float));
        assert_memory_equal(rstd2, rstd, d.C * sizeof(float));
        free(out2), free(mean2), free(rstd2);
    }
    free(out), free(mean), free(rstd), free(rm), free(rv);
    free(ref), free(ref_mean), free(ref_rstd), free(ref_rm), free(ref_rv);
    free_case(&c);
}

static void test_forward_train(void **state) {
    (void)state;
    check_forward_train(SMALL);
    check_forward_train(LARGE);
}

static void check_forward_eval(dims d) {
    bn_case c = make_case(d, 2);
    float *out = malloc(c.n * sizeof(float));
    double *ref = malloc(c.n * sizeof(double));
    sdp_batchnorm_fwd_eval(tu_cpu(SDP_GEMM_DNNL), out, c.inp, c.run_mean, c.run_var, c.gamma,
                           c.beta, d.B, d.C, d.H, d.W);
    size_t hw = (size_t)d.H * d.W;
    for (int b = 0; b < d.B; b++)
        for (int ch = 0; ch < d.C; ch++)
            for (size_t i = 0; i < hw; i++) {
                size_t k = idx(&d, b, ch, i);
                ref[k] = (c.inp64[k] - c.run_mean[ch]) / sqrt((double)c.run_var[ch] + EPS) *
                             c.gamma64[ch] +
                         c.beta64[ch];
            }
    assert_true(tu_err_ratio(out, ref, c.n, 1e-5, 1e-5) <= 1);
    /* In place gives the same bits. */
    float *x = malloc(c.n * sizeof(float));
    memcpy(x, c.inp, c.n * sizeof(float));
    sdp_batchnorm_fwd_eval(tu_cpu(SDP_GEMM_DNNL), x, x, c.run_mean, c.run_var, c.gamma, c.beta, d.B,
                           d.C, d.H, d.W);
    assert_memory_equal(x, out, c.n * sizeof(float));
    free(out), free(ref), free(x);
    free_case(&c);
}

static void test_forward_eval(void **state) {
    (void)state;
    check_forward_eval(SMALL);
    check_forward_eval(LARGE);
}

/* ---- backward ------------------------------------------------------------------------------ */

typedef struct {
    float *dinp, *dgamma, *dbeta;
} bn_grads;

static float *prefilled(size_t n, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, 1.0f);
    return p;
}

static bn_grads grads_prefilled(const bn_case *c) {
    return (bn_grads){prefilled(c->n, 1), prefilled(c->d.C, 2), prefilled(c->d.C, 3)};
}

static void grads_free(bn_grads *g) {
    free(g->dinp), free(g->dgamma), free(g->dbeta);
}

static void check_backward(dims d, size_t samples) {
    bn_case c = make_case(d, 3);
    float *out = malloc(c.n * sizeof(float)), *mean = malloc(d.C * sizeof(float));
    float *rstd = malloc(d.C * sizeof(float));
    sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), out, mean, rstd, NULL, NULL, c.inp, c.gamma,
                            c.beta, d.B, d.C, d.H, d.W);
    bn_grads before = grads_prefilled(&c), got = grads_prefilled(&c);
    sdp_batchnorm_bwd(tu_cpu(SDP_GEMM_DNNL), got.dinp, got.dgamma, got.dbeta, c.r, c.inp, c.gamma,
                      mean, rstd, d.B, d.C, d.H, d.W);
    double h = 1e-4, atol = 1e-4, rtol = 1e-3;
    assert_true(gc_grad_err("dinp", got.dinp, before.dinp, train_loss, c.inp64, c.n, &c, samples, h,
                            atol, rtol) <= 1);
    assert_true(gc_grad_err("dgamma", got.dgamma, before.dgamma, train_loss, c.gamma64, d.C, &c,
                            samples, h, atol, rtol) <= 1);
    assert_true(gc_grad_err("dbeta", got.dbeta, before.dbeta, train_loss, c.beta64, d.C, &c,
                            samples, h, atol, rtol) <= 1);

    /* Any subset of gradients, on 1 and 2 threads: those given match the full call bitwise and
     * the others are untouched. */
    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        for (int mask = 0; mask < 8; mask++) {
            bn_grads g = grads_prefilled(&c);
            sdp_batchnorm_bwd(tu_cpu(SDP_GEMM_DNNL), mask & 1 ? g.dinp : NULL,
                              mask & 2 ? g.dgamma : NULL, mask & 4 ? g.dbeta : NULL, c.r, c.inp,
                              c.gamma, mean, rstd, d.B, d.C, d.H, d.W);
            assert_memory_equal(g.dinp, mask & 1 ? got.dinp : before.dinp, c.n * sizeof(float));
            assert_memory_equal(g.dgamma, mask & 2 ? got.dgamma : before.dgamma,
                                d.C * sizeof(float));
            assert_memory_equal(g.dbeta, mask & 4 ? got.dbeta : before.dbeta, d.C * sizeof(float));
            grads_free(&g);
        }
    }
    grads_free(&before), grads_free(&got);
    free(out), free(mean), free(rstd);
    free_case(&c);
}

static void test_backward(void **state) {
    (void)state;
    check_backward(SMALL, SIZE_MAX);
    check_backward(LARGE, 300);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void single_value_per_channel(void *ctx) {
    (void)ctx;
    float x[2] = {1, 2}, y[2], m[2], rs[2], g[2] = {1, 1}, b[2] = {0, 0};
    sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), y, m, rs, NULL, NULL, x, g, b, 1, 2, 1, 1);
}

static void running_mean_only(void *ctx) {
    (void)ctx;
    float x[4] = {1, 2, 3, 4}, y[4], m[1], rs[1], g[1] = {1}, b[1] = {0}, rm[1] = {0};
    sdp_batchnorm_fwd_train(tu_cpu(SDP_GEMM_DNNL), y, m, rs, rm, NULL, x, g, b, 2, 1, 1, 2);
}

static void test_errors(void **state) {
    (void)state;
    tu_expect_fatal(single_value_per_channel, NULL, "has no batch variance");
    tu_expect_fatal(running_mean_only, NULL, "pass both running_mean and running_var");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_train),
        cmocka_unit_test(test_forward_eval),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
