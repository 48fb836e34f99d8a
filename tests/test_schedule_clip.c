/* The cosine learning-rate schedule against its formula and its landmarks (warmup ramp, peak,
 * midpoint, floor), and the clipping helpers against double-precision references. */
#include "testutil.h"

#include "sdp/optim.h"

#include <omp.h>

static const long WARMUP = 10, TOTAL = 110;
static const float LR_MAX = 3e-3f, LR_MIN = 3e-4f;

static void assert_close(double got, double want, double rtol) {
    if (fabs(got - want) > rtol * fabs(want)) {
        print_error("got %.9g, want %.9g\n", got, want);
        fail();
    }
}

static void test_warmup_ramp(void **state) {
    (void)state;
    for (long s = 0; s < WARMUP; s++)
        assert_close(sdp_lr_at(s, WARMUP, TOTAL, LR_MAX, LR_MIN), (double)LR_MAX * (s + 1) / WARMUP,
                     1e-6);
    assert_true(sdp_lr_at(0, WARMUP, TOTAL, LR_MAX, LR_MIN) > 0);
}

static void test_peak_midpoint_and_floor(void **state) {
    (void)state;
    assert_close(sdp_lr_at(WARMUP, WARMUP, TOTAL, LR_MAX, LR_MIN), LR_MAX, 1e-6);
    long mid = WARMUP + (TOTAL - WARMUP) / 2;
    assert_close(sdp_lr_at(mid, WARMUP, TOTAL, LR_MAX, LR_MIN), 0.5 * ((double)LR_MAX + LR_MIN),
                 1e-6);
    const long beyond[] = {TOTAL, TOTAL + 1, TOTAL + 1000};
    for (int k = 0; k < 3; k++)
        assert_close(sdp_lr_at(beyond[k], WARMUP, TOTAL, LR_MAX, LR_MIN), LR_MIN, 1e-6);
}

static void test_cosine_matches_formula_and_decreases(void **state) {
    (void)state;
    float prev = INFINITY;
    for (long s = WARMUP; s <= TOTAL; s++) {
        double progress = (double)(s - WARMUP) / (TOTAL - WARMUP);
        double want = LR_MIN + 0.5 * ((double)LR_MAX - LR_MIN) * (1 + cos(M_PI * progress));
        float lr = sdp_lr_at(s, WARMUP, TOTAL, LR_MAX, LR_MIN);
        assert_close(lr, want, 1e-6);
        assert_true(lr < prev);
        prev = lr;
    }
}

static void test_no_warmup_starts_at_peak(void **state) {
    (void)state;
    assert_close(sdp_lr_at(0, 0, 100, LR_MAX, LR_MIN), LR_MAX, 1e-6);
    assert_close(sdp_lr_at(50, 0, 100, LR_MAX, LR_MIN), 0.5 * ((double)LR_MAX + LR_MIN), 1e-6);
    /* total <= warmup leaves no room for decay: the floor follows the peak immediately. */
    assert_close(sdp_lr_at(5, 5, 5, LR_MAX, LR_MIN), LR_MAX, 1e-6);
    assert_close(sdp_lr_at(6, 5, 5, LR_MAX, LR_MIN), LR_MIN, 1e-6);
}

static double ref_sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static void test_sumsq_matches_reference(void **state) {
    (void)state;
    const size_t n = 1000003; /* not a multiple of the block count */
    float *x = malloc(n * sizeof(float));
    sdp_rng r = sdp_rng_make(7, 0);
    tu_fill(x, n, &r, 2.0f);
    assert_close(sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, n), ref_sumsq(x, n), 1e-12);
    const size_t small[] = {1, 3, 255, 257, 1000};
    for (int k = 0; k < 5; k++)
        assert_close(sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, small[k]), ref_sumsq(x, small[k]), 1e-12);
    assert_true(sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, 0) == 0.0);

    /* The fixed partition makes the result independent of the thread count, bit for bit. */
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double one = sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, n);
    omp_set_num_threads(3);
    double three = sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, n);
    omp_set_num_threads(threads);
    assert_memory_equal(&one, &three, sizeof one);
    free(x);
}

static void test_clip_brings_norm_to_max(void **state) {
    (void)state;
    const size_t n = 100000;
    float *x = malloc(n * sizeof(float));
    sdp_rng r = sdp_rng_make(8, 0);
    tu_fill(x, n, &r, 1.0f);
    double norm = sqrt(ref_sumsq(x, n));
    const float max_norm = 1.0f;
    assert_true(norm > 100 * max_norm);
    float s = sdp_clip_scale(norm, max_norm);
    assert_true(s < 1.0f);
    sdp_scale(tu_cpu(SDP_GEMM_DNNL), x, n, s);
    assert_close(sqrt(ref_sumsq(x, n)), max_norm, 1e-5);
    free(x);
}

static void test_no_clip_below_threshold_or_when_disabled(void **state) {
    (void)state;
    assert_true(sdp_clip_scale(0.5, 1.0f) == 1.0f);
    assert_true(sdp_clip_scale(1.0, 1.0f) == 1.0f);
    assert_true(sdp_clip_scale(0.0, 1.0f) == 1.0f);
    assert_true(sdp_clip_scale(1e9, 0.0f) == 1.0f);
    assert_true(sdp_clip_scale(1e9, -1.0f) == 1.0f);
}

/* A float product of two floats is the exact product rounded once, as is the double product
 * rounded to float, so the comparison is bitwise. */
static void test_scale_multiplies_in_place(void **state) {
    (void)state;
    const size_t n = 100001;
    float *x = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    sdp_rng r = sdp_rng_make(9, 0);
    tu_fill(x, n, &r, 1.0f);
    const float s = 0.37f;
    for (size_t i = 0; i < n; i++) want[i] = (float)((double)x[i] * s);
    sdp_scale(tu_cpu(SDP_GEMM_DNNL), x, n, s);
    assert_memory_equal(x, want, n * sizeof(float));
    sdp_scale(tu_cpu(SDP_GEMM_DNNL), x, 0, 2.0f);
    assert_memory_equal(x, want, n * sizeof(float));
    free(x), free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup_ramp),
        cmocka_unit_test(test_peak_midpoint_and_floor),
        cmocka_unit_test(test_cosine_matches_formula_and_decreases),
        cmocka_unit_test(test_no_warmup_starts_at_peak),
        cmocka_unit_test(test_sumsq_matches_reference),
        cmocka_unit_test(test_clip_brings_norm_to_max),
        cmocka_unit_test(test_no_clip_below_threshold_or_when_disabled),
        cmocka_unit_test(test_scale_multiplies_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
