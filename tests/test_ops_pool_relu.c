/* ReLU, average pooling and global average pooling: forwards against double-precision
 * references, backwards against central finite differences of the reference loss sum(r * y),
 * gradients accumulating, NULL gradients skipped, and sizes both below and above the OpenMP
 * thresholds, where the results must not depend on the thread count. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops_vision.h"

static float *random_floats(size_t n, uint64_t seed, float scale) {
    sdp_rng rng = sdp_rng_make(seed, 0);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, scale);
    return p;
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    tu_to_double(d, x, n);
    return d;
}

/* ---- ReLU ---------------------------------------------------------------------------------- */

typedef struct {
    size_t n;
    double *x, *r;
} relu_ctx;

static double relu_loss(const double *x, void *ctx) {
    (void)x;
    const relu_ctx *c = ctx;
    double loss = 0;
    for (size_t i = 0; i < c->n; i++) loss += c->r[i] * (c->x[i] > 0 ? c->x[i] : 0);
    return loss;
}

static void check_relu(size_t n, size_t samples) {
    float *x = random_floats(n, 1, 1.0f), *r = random_floats(n, 2, 1.0f);
    /* Keep inputs at least 0.05 from the kink, so that differences with h = 1e-3 see one side. */
    for (size_t i = 0; i < n; i++) x[i] += x[i] >= 0 ? 0.05f : -0.05f;
    float *y = malloc(n * sizeof(float));
    sdp_relu_fwd(tu_cpu(SDP_GEMM_DNNL), y, x, n);
    for (size_t i = 0; i < n; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));

    float *before = random_floats(n, 3, 1.0f), *got = random_floats(n, 3, 1.0f);
    sdp_relu_bwd(tu_cpu(SDP_GEMM_DNNL), got, r, y, n);
    relu_ctx c = {n, to_double(x, n), to_double(r, n)};
    assert_true(
        gc_grad_err("dinp", got, before, relu_loss, c.x, n, &c, samples, 1e-3, 1e-6, 1e-6) <= 1);
    sdp_relu_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, r, y,
                 n); /* no gradient wanted: nothing to do, nothing to crash */

    /* In place, and on either thread count: the same bits. */
    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        float *z = malloc(n * sizeof(float)), *g = random_floats(n, 3, 1.0f);
        memcpy(z, x, n * sizeof(float));
        sdp_relu_fwd(tu_cpu(SDP_GEMM_DNNL), z, z, n);
        assert_memory_equal(z, y, n * sizeof(float));
        sdp_relu_bwd(tu_cpu(SDP_GEMM_DNNL), g, r, z, n);
        assert_memory_equal(g, got, n * sizeof(float));
        free(z), free(g);
    }
    free(x), free(r), free(y), free(before), free(got), free(c.x), free(c.r);
}

static void test_relu(void **state) {
    (void)state;
    check_relu(37, SIZE_MAX);
    check_relu(70001, 200); /* above the parallel threshold */
}

/* ---- average pooling ----------------------------------------------------------------------- */

typedef struct {
    int B, C, H, W, k; /* k = 0: global average pooling */
} pool_dims;

static const pool_dims POOLS[] = {
    {2, 3, 7, 5, 2},    /* odd sizes: the last row and column are dropped */
    {2, 3, 7, 5, 3},    /* out 2x1 */
    {1, 2, 4, 4, 4},    /* one window covers the image */
    {4, 16, 16, 16, 2}, /* above the parallel threshold */
    {2, 3, 7, 5, 0},    /* global */
    {4, 16, 16, 16, 0}, /* global, parallel */
};

typedef struct {
    pool_dims d;
    int OH, OW;
    size_t n_in, n_out;
    double *x, *r;
} pool_ctx;

static double ref_pool_point(const pool_ctx *c, int plane, int oy, int ox) {
    const pool_dims *d = &c->d;
    int kh = d->k ? d->k : d->H, kw = d->k ? d->k : d->W;
    double sum = 0;
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++)
            sum += c->x[((size_t)plane * d->H + oy * kh + i) * d->W + ox * kw + j];
    return sum / (kh * kw);
}

static double pool_loss(const double *x, void *ctx) {
    (void)x;
    const pool_ctx *c = ctx;
    double loss = 0;
    size_t k = 0;
    for (int p = 0; p < c->d.B * c->d.C; p++)
        for (int oy = 0; oy < c->OH; oy++)
            for (int ox = 0; ox < c->OW; ox++) loss += c->r[k++] * ref_pool_point(c, p, oy, ox);
    return loss;
}

static void pool_fwd(const pool_dims *d, float *y, const float *x) {
    if (d->k)
        sdp_avgpool_fwd(tu_cpu(SDP_GEMM_DNNL), y, x, d->B, d->C, d->H, d->W, d->k);
    else
        sdp_global_avgpool_fwd(tu_cpu(SDP_GEMM_DNNL), y, x, d->B, d->C, d->H, d->W);
}

static void pool_bwd(const pool_dims *d, float *dx, const float *dy) {
    if (d->k)
        sdp_avgpool_bwd(tu_cpu(SDP_GEMM_DNNL), dx, dy, d->B, d->C, d->H, d->W, d->k);
    else
        sdp_global_avgpool_bwd(tu_cpu(SDP_GEMM_DNNL), dx, dy, d->B, d->C, d->H, d->W);
}

static void check_pool(const pool_dims *d) {
    pool_ctx c = {.d = *d, .OH = d->k ? d->H / d->k : 1, .OW = d->k ? d->W / d->k : 1};
    c.n_in = (size_t)d->B * d->C * d->H * d->W;
    c.n_out = (size_t)d->B * d->C * c.OH * c.OW;
    float *x = random_floats(c.n_in, 1, 1.0f), *r = random_floats(c.n_out, 2, 1.0f);
    c.x = to_double(x, c.n_in);
    c.r = to_double(r, c.n_out);

    float *y = malloc(c.n_out * sizeof(float));
    double *ref = malloc(c.n_out * sizeof(double));
    pool_fwd(d, y, x);
    size_t k = 0;
    for (int p = 0; p < d->B * d->C; p++)
        for (int oy = 0; oy < c.OH; oy++)
            for (int ox = 0; ox < c.OW; ox++) ref[k++] = ref_pool_point(&c, p, oy, ox);
    assert_true(tu_err_ratio(y, ref, c.n_out, 1e-6, 1e-5) <= 1);

    float *before = random_floats(c.n_in, 3, 1.0f), *got = random_floats(c.n_in, 3, 1.0f);
    pool_bwd(d, got, r);
    assert_true(
        gc_grad_err("dinp", got, before, pool_loss, c.x, c.n_in, &c, 400, 1e-3, 1e-6, 1e-5) <= 1);
    pool_bwd(d, NULL, r); /* no gradient wanted */

    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        float *y2 = malloc(c.n_out * sizeof(float)), *g = random_floats(c.n_in, 3, 1.0f);
        pool_fwd(d, y2, x);
        pool_bwd(d, g, r);
        assert_memory_equal(y2, y, c.n_out * sizeof(float));
        assert_memory_equal(g, got, c.n_in * sizeof(float));
        free(y2), free(g);
    }
    free(x), free(r), free(y), free(ref), free(before), free(got), free(c.x), free(c.r);
}

static void test_pool(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof POOLS / sizeof POOLS[0]; k++) check_pool(&POOLS[k]);
}

static void pool_larger_than_image(void *ctx) {
    (void)ctx;
    float x[20] = {0}, y[20];
    sdp_avgpool_fwd(tu_cpu(SDP_GEMM_DNNL), y, x, 1, 1, 4, 5, 5);
}

static void test_pool_errors(void **state) {
    (void)state;
    tu_expect_fatal(pool_larger_than_image, NULL,
                    "pooling size 5 must be between 1 and the image size 4x5");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
