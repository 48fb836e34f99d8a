/* Rotary position embedding against a double-precision reference written from the definition,
 * its backward against central differences, and the property RoPE exists for: the product of a
 * rotated query and key depends only on their distance. */
#include "testutil.h"

#include <omp.h>

#include "sdp/ops.h"

typedef struct {
    int B, T, H, hs;
    float theta;
} shape;

static size_t qkv_len(shape s) {
    return (size_t)s.B * s.T * 3 * s.H * s.hs;
}

/* Rotates pair (i, i + hs/2) of every q and k head at position t by t * theta^(-2i/hs). */
static void ref_rope(double *y, const double *x, shape s) {
    int D = s.H * s.hs, half = s.hs / 2;
    memcpy(y, x, qkv_len(s) * sizeof *y);
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.T; t++)
            for (int part = 0; part < 2; part++) /* q, then k; v stays */
                for (int h = 0; h < s.H; h++) {
                    size_t at = ((size_t)b * s.T + t) * 3 * D + part * D + h * s.hs;
                    for (int i = 0; i < half; i++) {
                        double angle = t * pow(s.theta, -2.0 * i / s.hs);
                        double x1 = x[at + i], x2 = x[at + i + half];
                        y[at + i] = x1 * cos(angle) - x2 * sin(angle);
                        y[at + i + half] = x2 * cos(angle) + x1 * sin(angle);
                    }
                }
}

/* True for the entries of the v part of qkv. */
static bool is_v(shape s, size_t i) {
    int D = s.H * s.hs;
    return (int)(i % (size_t)(3 * D)) >= 2 * D;
}

static void check_forward(shape s, int threads) {
    omp_set_num_threads(threads);
    sdp_rng rng = sdp_rng_make(21, (uint64_t)s.T);
    size_t n = qkv_len(s);
    float *x = malloc(n * sizeof *x), *orig = malloc(n * sizeof *orig);
    double *xd = malloc(n * sizeof *xd), *yd = malloc(n * sizeof *yd);
    tu_fill(x, n, &rng, 1.0f);
    memcpy(orig, x, n * sizeof *x);
    tu_to_double(xd, x, n);
    ref_rope(yd, xd, s);

    sdp_rope_fwd(tu_cpu(SDP_GEMM_DNNL), x, s.B, s.T, s.H, s.hs, s.theta);
    double e = tu_err_ratio(x, yd, n, 1e-6, 1e-5);
    print_message("rope fwd B=%d T=%d H=%d hs=%d theta=%g: err ratio %.3g\n", s.B, s.T, s.H, s.hs,
                  (double)s.theta, e);
    assert_true(e <= 1);
    for (size_t i = 0; i < n; i++)
        if (is_v(s, i)) assert_true(x[i] == orig[i]); /* bit for bit */
    free(x), free(orig), free(xd), free(yd);
}

static void test_forward_matches_reference(void **state) {
    (void)state;
    check_forward((shape){2, 5, 3, 4, 10000.0f}, 1);
    check_forward((shape){2, 67, 4, 16, 10000.0f}, 3);
    check_forward((shape){1, 1000, 2, 64, 500.0f}, 2); /* angles of hundreds of radians */
}

/* Rotations are orthogonal: the transposed rotation undoes the forward one. */
static void test_backward_inverts_forward(void **state) {
    (void)state;
    omp_set_num_threads(2);
    shape s = {3, 50, 4, 32, 10000.0f};
    sdp_rng rng = sdp_rng_make(22, 0);
    size_t n = qkv_len(s);
    float *x = malloc(n * sizeof *x), *orig = malloc(n * sizeof *orig);
    tu_fill(x, n, &rng, 1.0f);
    memcpy(orig, x, n * sizeof *x);
    sdp_rope_fwd(tu_cpu(SDP_GEMM_DNNL), x, s.B, s.T, s.H, s.hs, s.theta);
    sdp_rope_bwd(tu_cpu(SDP_GEMM_DNNL), x, s.B, s.T, s.H, s.hs, s.theta);
    assert_true(tu_err_ratio_ff(x, orig, n, 1e-6, 1e-6) <= 1);
    for (size_t i = 0; i < n; i++)
        if (is_v(s, i)) assert_true(x[i] == orig[i]);
    free(x), free(orig);
}

typedef struct {
    shape s;
    const double *r;
    double *y;
} loss_ctx;

static double ref_loss(const double *x, void *vctx) {
    loss_ctx *c = vctx;
    ref_rope(c->y, x, c->s);
    double loss = 0;
    for (size_t i = 0; i < qkv_len(c->s); i++) loss += c->r[i] * c->y[i];
    return loss;
}

/* With dqkv = dL/dy for L = sum(r * rope(x)), sdp_rope_bwd must leave dL/dx in dqkv; v is not
 * rotated, so its gradient r passes through unchanged. */
static void check_backward(shape s) {
    omp_set_num_threads(1);
    sdp_rng rng = sdp_rng_make(23, (uint64_t)s.T);
    size_t n = qkv_len(s);
    float *g = malloc(n * sizeof *g), *x = malloc(n * sizeof *x);
    double *xd = malloc(n * sizeof *xd), *r = malloc(n * sizeof *r);
    double *y = malloc(n * sizeof *y), *grad = malloc(n * sizeof *grad);
    tu_fill(x, n, &rng, 1.0f);
    tu_fill(g, n, &rng, 1.0f);
    tu_to_double(xd, x, n);
    tu_to_double(r, g, n);
    loss_ctx ctx = {s, r, y};
    tu_fd_grad(ref_loss, xd, n, &ctx, 1e-5, grad);

    sdp_rope_bwd(tu_cpu(SDP_GEMM_DNNL), g, s.B, s.T, s.H, s.hs, s.theta);
    double e = tu_err_ratio(g, grad, n, 1e-5, 1e-5);
    print_message("rope bwd B=%d T=%d H=%d hs=%d: err ratio %.3g\n", s.B, s.T, s.H, s.hs, e);
    assert_true(e <= 1);
    free(g), free(x), free(xd), free(r), free(y), free(grad);
}

static void test_backward_matches_finite_differences(void **state) {
    (void)state;
    check_backward((shape){2, 5, 3, 4, 10000.0f});
    check_backward((shape){1, 9, 2, 8, 100.0f});
}

/* Every position holds the same query u and key w, so after rotation q_t . k_s must depend on
 * t - s alone (and, to show that something rotated, must change with it). */
static void check_relative_position(shape s) {
    omp_set_num_threads(1);
    sdp_rng rng = sdp_rng_make(24, 0);
    int D = s.H * s.hs;
    size_t n = qkv_len(s);
    float *x = malloc(n * sizeof *x), *u = malloc((size_t)2 * D * sizeof *u);
    tu_fill(u, (size_t)2 * D, &rng, 1.0f);
    for (int t = 0; t < s.T; t++) {
        memcpy(x + (size_t)t * 3 * D, u, (size_t)2 * D * sizeof *u);
        memset(x + (size_t)t * 3 * D + 2 * D, 0, (size_t)D * sizeof *x);
    }
    sdp_rope_fwd(tu_cpu(SDP_GEMM_DNNL), x, s.B, s.T, s.H, s.hs, s.theta);

    double *at_distance = malloc((size_t)s.T * sizeof *at_distance); /* q_d . k_0 */
    for (int h = 0; h < s.H; h++)
        for (int t = 0; t < s.T; t++)
            for (int r = 0; r <= t; r++) {
                const float *q = x + (size_t)t * 3 * D + h * s.hs;
                const float *k = x + (size_t)r * 3 * D + D + h * s.hs;
                double dot = 0;
                for (int i = 0; i < s.hs; i++) dot += (double)q[i] * k[i];
                if (r == 0) at_distance[t] = dot;
                assert_true(fabs(dot - at_distance[t - r]) <= 1e-5 * (1 + fabs(dot)));
            }
    assert_true(fabs(at_distance[1] - at_distance[0]) > 1e-3);
    free(x), free(u), free(at_distance);
}

static void test_scores_depend_only_on_distance(void **state) {
    (void)state;
    check_relative_position((shape){1, 64, 2, 16, 10000.0f});
    check_relative_position((shape){1, 200, 1, 8, 10.0f});
}

static void call_rope_with_odd_head(void *ctx) {
    (void)ctx;
    float x[9] = {0};
    sdp_rope_fwd(tu_cpu(SDP_GEMM_DNNL), x, 1, 1, 1, 3, 10000.0f);
}

static void call_rope_with_zero_theta(void *ctx) {
    (void)ctx;
    float x[12] = {0};
    sdp_rope_bwd(tu_cpu(SDP_GEMM_DNNL), x, 1, 1, 1, 4, 0.0f);
}

static void test_bad_arguments_fail_clearly(void **state) {
    (void)state;
    tu_expect_fatal(call_rope_with_odd_head, NULL, "rope needs an even head size");
    tu_expect_fatal(call_rope_with_zero_theta, NULL, "rope theta must be a positive number");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_backward_inverts_forward),
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_scores_depend_only_on_distance),
        cmocka_unit_test(test_bad_arguments_fail_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
