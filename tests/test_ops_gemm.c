/* sdp_gemm against a naive double-precision product, for both providers, all four transpose
 * combinations, strides wider than the matrices, and the edge cases the model relies on. */
#include "testutil.h"

#include "sdp/ops.h"

static const sdp_gemm_provider PROVIDERS[2] = {SDP_GEMM_DNNL, SDP_GEMM_OPENBLAS};
static const float PAD_SENTINEL = 12345.0f;

/* Element (r, c) of op(X) for X stored row-major with stride ld. */
static double op_at(const float *X, int ld, bool t, int r, int c) {
    return t ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* ref[M, N] = alpha op(A) op(B) + beta C0, with beta = 0 meaning C0 is not read. */
static void gemm_ref(double *ref, bool ta, bool tb, int M, int N, int K, double alpha,
                     const float *A, int lda, const float *B, int ldb, double beta, const float *C0,
                     int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += op_at(A, lda, ta, m, k) * op_at(B, ldb, tb, k, n);
            ref[(size_t)m * N + n] = alpha * acc + (beta != 0 ? beta * C0[(size_t)m * ldc + n] : 0);
        }
}

typedef struct {
    int M, N, K;
} shape;

/* Runs one product with padded strides; checks the result and that the padding is untouched. */
static void check_one(sdp_gemm_provider prov, bool ta, bool tb, shape s, float alpha, float beta,
                      float c_init_nan) {
    int M = s.M, N = s.N, K = s.K;
    int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + 3, ldb = b_cols + 2, ldc = N + 5;
    sdp_rng rng = sdp_rng_make(7, (uint64_t)(M * 1000 + N * 10 + K));
    float *A = malloc(sizeof(float) * (size_t)a_rows * lda);
    float *B = malloc(sizeof(float) * (size_t)b_rows * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc);
    float *C0 = malloc(sizeof(float) * (size_t)M * ldc);
    double *ref = malloc(sizeof(double) * (size_t)M * N + 1);
    tu_fill(A, (size_t)a_rows * lda, &rng, 1.0f);
    tu_fill(B, (size_t)b_rows * ldb, &rng, 1.0f);
    tu_fill(C0, (size_t)M * ldc, &rng, 1.0f);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < ldc; n++)
            C0[(size_t)m * ldc + n] = n >= N ? PAD_SENTINEL : c_init_nan ? NAN : C0[m * ldc + n];
    memcpy(C, C0, sizeof(float) * (size_t)M * ldc);

    sdp_gemm(tu_cpu(prov), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_ref(ref, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc);

    double worst = 0;
    for (int m = 0; m < M; m++) {
        double e = tu_err_ratio(C + (size_t)m * ldc, ref + (size_t)m * N, (size_t)N, 1e-4, 1e-4);
        worst = e > worst ? e : worst;
        for (int n = N; n < ldc; n++) assert_true(C[(size_t)m * ldc + n] == PAD_SENTINEL);
    }
    if (worst > 1)
        print_error("%s ta=%d tb=%d M=%d N=%d K=%d: error ratio %g\n", sdp_gemm_provider_name(prov),
                    ta, tb, M, N, K, worst);
    assert_true(worst <= 1);
    free(A);
    free(B);
    free(C);
    free(C0);
    free(ref);
}

static void test_all_transposes_both_providers(void **state) {
    (void)state;
    const shape shapes[] = {{7, 13, 5}, {1, 1, 1}, {67, 45, 129}};
    for (int p = 0; p < 2; p++)
        for (int s = 0; s < 3; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    check_one(PROVIDERS[p], ta, tb, shapes[s], 0.75f, -0.5f, false);
}

/* oneDNN's C = A B^T is split into one band of columns (N > M) or rows per thread: bands of
 * uneven width, at 2 and 3 threads, must join into the same product with strided operands. */
static void test_banded_a_bt(void **state) {
    (void)state;
    const shape shapes[] = {{40, 300, 70}, {300, 40, 70}, {130, 129, 33}};
    for (int threads = 2; threads <= 3; threads++) {
        sdp_set_threads(threads);
        for (int s = 0; s < 3; s++) {
            check_one(SDP_GEMM_DNNL, false, true, shapes[s], 0.75f, -0.5f, false);
            check_one(SDP_GEMM_DNNL, false, true, shapes[s], 1.0f, 0.0f, true);
        }
    }
    sdp_set_threads(2);
}

/* With beta = 0, C is output only: stale contents (even NaN) must not leak into the result. */
static void test_beta_zero_ignores_c(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int ta = 0; ta < 2; ta++)
            check_one(PROVIDERS[p], ta, !ta, (shape){9, 11, 17}, 1.0f, 0.0f, true);
}

/* K = 0 is an empty sum: C = beta C (just 0 when beta = 0, whatever C held). M = 0 or N = 0
 * must not touch anything. */
static void test_empty_dimensions(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        check_one(PROVIDERS[p], false, false, (shape){5, 6, 0}, 1.0f, 0.5f, false);
        check_one(PROVIDERS[p], true, true, (shape){5, 6, 0}, 1.0f, 0.5f, false);
        check_one(PROVIDERS[p], false, true, (shape){5, 6, 0}, 1.0f, 0.0f, true);
        float c = 3.0f;
        sdp_gemm(tu_cpu(PROVIDERS[p]), false, false, 0, 1, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, &c, 1);
        sdp_gemm(tu_cpu(PROVIDERS[p]), false, false, 1, 0, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, &c, 1);
        assert_true(c == 3.0f);
    }
}

/* Same inputs, same thread count: bitwise the same result (multi-threaded size). */
static void test_deterministic(void **state) {
    (void)state;
    enum { M = 192, N = 160, K = 224 };
    sdp_rng rng = sdp_rng_make(3, 0);
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    tu_fill(A, M * K, &rng, 1.0f);
    tu_fill(B, K * N, &rng, 1.0f);
    for (int p = 0; p < 2; p++) {
        sdp_gemm(tu_cpu(PROVIDERS[p]), false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
        sdp_gemm(tu_cpu(PROVIDERS[p]), false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
        assert_memory_equal(C1, C2, sizeof(float) * M * N);
    }
    free(A);
    free(B);
    free(C1);
    free(C2);
}

static void gemm_short_lda(void *ctx) {
    float buf[64] = {0};
    sdp_gemm(tu_cpu(*(sdp_gemm_provider *)ctx), false, false, 4, 4, 4, 1.0f, buf, 3, buf, 4, 0.0f,
             buf, 4);
}
static void gemm_short_ldb_transposed(void *ctx) {
    float buf[64] = {0};
    /* B^T stored as [N=2, K=6]: its stride must be at least 6. */
    sdp_gemm(tu_cpu(*(sdp_gemm_provider *)ctx), false, true, 4, 2, 6, 1.0f, buf, 6, buf, 5, 0.0f,
             buf, 2);
}
static void gemm_short_ldc(void *ctx) {
    float buf[64] = {0};
    sdp_gemm(tu_cpu(*(sdp_gemm_provider *)ctx), false, false, 4, 4, 4, 1.0f, buf, 4, buf, 4, 0.0f,
             buf, 2);
}
static void set_zero_threads(void *ctx) {
    (void)ctx;
    sdp_set_threads(0);
}

static void test_bad_arguments_fail_clearly(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        sdp_gemm_provider prov = PROVIDERS[p];
        tu_expect_fatal(gemm_short_lda, &prov, "lda=3");
        tu_expect_fatal(gemm_short_ldb_transposed, &prov, "ldb=5");
        tu_expect_fatal(gemm_short_ldc, &prov, "ldc=2");
    }
    tu_expect_fatal(set_zero_threads, NULL, "thread count 0");
}

static void test_provider_names(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        sdp_gemm_provider parsed;
        assert_true(sdp_gemm_provider_parse(sdp_gemm_provider_name(PROVIDERS[p]), &parsed));
        assert_int_equal(parsed, PROVIDERS[p]);
    }
    assert_string_equal(sdp_gemm_provider_name(SDP_GEMM_DNNL), "dnnl");
    assert_string_equal(sdp_gemm_provider_name(SDP_GEMM_OPENBLAS), "openblas");
    sdp_gemm_provider untouched = SDP_GEMM_OPENBLAS;
    assert_false(sdp_gemm_provider_parse("mkl", &untouched));
    assert_false(sdp_gemm_provider_parse("", &untouched));
    assert_false(sdp_gemm_provider_parse("DNNL", &untouched));
    assert_false(sdp_gemm_provider_parse(NULL, &untouched));
    assert_int_equal(untouched, SDP_GEMM_OPENBLAS);
}

int main(void) {
    sdp_set_threads(2); /* exercise the libraries' threaded paths even under OMP_NUM_THREADS=1 */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_transposes_both_providers),
        cmocka_unit_test(test_banded_a_bt),
        cmocka_unit_test(test_beta_zero_ignores_c),
        cmocka_unit_test(test_empty_dimensions),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_bad_arguments_fail_clearly),
        cmocka_unit_test(test_provider_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
