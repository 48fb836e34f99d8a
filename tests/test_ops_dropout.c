/* Dropout's ops (sdp/ops.h): a mask is the stream's draws in order, as a plain walk through the
 * project's RNG gives them; its fraction of dropped elements is p within a few standard errors;
 * the forward against a simple reference, in place too; the backward against central differences
 * with the mask held fixed; the results do not depend on the thread count; bad arguments fail. */
#include "grad_check.h"

#include <omp.h>

#include "sdp/ops.h"

static const sdp_backend *cpu(void) {
    return tu_cpu(SDP_GEMM_DNNL);
}

static bool bit(const uint32_t *mask, size_t i) {
    return (mask[i / 32] >> (i % 32)) & 1u;
}

static uint32_t *draw_mask(size_t n, sdp_dropout d) {
    uint32_t *mask = malloc(sdp_dropout_words(n) * sizeof *mask);
    memset(mask, 0xa5, sdp_dropout_words(n) * sizeof *mask); /* whatever was there before */
    sdp_dropout_mask(cpu(), mask, n, d);
    return mask;
}

/* Element i is kept when the top 32 bits of the stream's draw i are at least p * 2^32: the
 * definition, walked through sdp_rng_u64 from the key as the stream's state. */
static void test_mask_is_the_stream_in_order(void **state) {
    (void)state;
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.75f};
    for (int k = 0; k < 4; k++) {
        const size_t n = 1000 + (size_t)k; /* a ragged last word */
        const sdp_dropout d = {ps[k], 0x0123456789abcdefull * (uint64_t)(k + 1)};
        uint32_t *mask = draw_mask(n, d);
        sdp_rng r = {d.key};
        for (size_t i = 0; i < n; i++) {
            const uint64_t x = sdp_rng_u64(&r);
            const bool keep = (double)(x >> 32) >= (double)d.p * 4294967296.0;
            assert_int_equal(bit(mask, i), keep);
        }
        for (size_t i = n; i < 32 * sdp_dropout_words(n); i++) assert_false(bit(mask, i));
        free(mask);
    }
}

/* Over n decisions the fraction dropped has standard error sqrt(p (1-p) / n): it must lie within
 * 4 of them of p, and the forward of ones must keep exactly the kept elements, each 1/(1-p). */
static void test_fraction_dropped_is_p(void **state) {
    (void)state;
    const size_t n = (size_t)1 << 22;
    const float ps[] = {0.05f, 0.2f, 0.5f, 0.9f};
    float *x = malloc(n * sizeof *x);
    for (int k = 0; k < 4; k++) {
        const float p = ps[k], scale = sdp_dropout_scale(p);
        uint32_t *mask = draw_mask(n, (sdp_dropout){p, 1234 + (uint64_t)k});
        for (size_t i = 0; i < n; i++) x[i] = 1.0f;
        sdp_dropout_fwd(cpu(), x, x, mask, scale, n);
        size_t zeros = 0;
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            zeros += x[i] == 0.0f;
            sum += x[i];
            assert_true(x[i] == (bit(mask, i) ? scale : 0.0f));
        }
        const double frac = (double)zeros / (double)n, se = sqrt(p * (1.0 - p) / (double)n);
        print_message("p = %.2f: %.5f of %zu dropped (%.2f standard errors off), mean %.5f\n",
                      (double)p, frac, n, (frac - p) / se, sum / (double)n);
        assert_true(fabs(frac - p) < 4 * se);
        /* inverted dropout keeps the mean: 1/(1-p) times the kept fraction 1-p */
        assert_true(fabs(sum / (double)n - 1.0) < 4 * se / (1.0 - p));
        free(mask);
    }
    free(x);
}

static void test_same_key_same_mask_other_key_other_mask(void **state) {
    (void)state;
    const size_t n = 4096;
    uint32_t *a = draw_mask(n, (sdp_dropout){0.3f, 99}), *b = draw_mask(n, (sdp_dropout){0.3f, 99});
    uint32_t *c = draw_mask(n, (sdp_dropout){0.3f, 100});
    const size_t bytes = sdp_dropout_words(n) * sizeof *a;
    assert_memory_equal(a, b, bytes);
    assert_memory_not_equal(a, c, bytes);
    free(a), free(b), free(c);
}

/* out[i] = kept ? scale * inp[i] : 0, into another buffer and in place. */
static void test_forward_matches_reference(void **state) {
    (void)state;
    const size_t sizes[] = {1, 31, 32, 33, 1000, 100003};
    sdp_rng rng = sdp_rng_make(21, 0);
    for (int k = 0; k < 6; k++) {
        const size_t n = sizes[k];
        uint32_t *mask = draw_mask(n, (sdp_dropout){0.4f, (uint64_t)k});
        float *inp = malloc(n * sizeof *inp), *out = malloc(n * sizeof *out);
        tu_fill(inp, n, &rng, 2.0f);
        sdp_dropout_fwd(cpu(), out, inp, mask, 1.5f, n);
        for (size_t i = 0; i < n; i++) assert_true(out[i] == (bit(mask, i) ? 1.5f * inp[i] : 0.0f));
        sdp_dropout_fwd(cpu(), inp, inp, mask, 1.5f, n); /* in place */
        assert_memory_equal(inp, out, n * sizeof *out);
        free(mask), free(inp), free(out);
    }
}

/* Loss sum(r * dropout(x)) with the mask fixed; its gradient is scale * r where kept. The loss
 * reads x through ctx (grad_check.h). */
typedef struct {
    const uint32_t *mask;
    const double *r, *x;
    double scale;
    size_t n;
} loss_ctx;

static double ref_loss(const double *unused, void *vctx) {
    (void)unused;
    const loss_ctx *c = vctx;
    const double *x = c->x;
    double loss = 0;
    for (size_t i = 0; i < c->n; i++) loss += c->r[i] * (bit(c->mask, i) ? c->scale * x[i] : 0.0);
    return loss;
}

static void test_backward_matches_finite_differences(void **state) {
    (void)state;
    const size_t n = 517;
    const float p = 0.3f, scale = sdp_dropout_scale(p);
    sdp_rng rng = sdp_rng_make(22, 0);
    uint32_t *mask = draw_mask(n, (sdp_dropout){p, 77});
    float *dout = malloc(n * sizeof *dout), *dinp = malloc(n * sizeof *dinp);
    float *before = malloc(n * sizeof *before), *x = malloc(n * sizeof *x);
    double *xd = malloc(n * sizeof *xd), *r = malloc(n * sizeof *r);
    tu_fill(dout, n, &rng, 1.0f);
    tu_fill(before, n, &rng, 1.0f); /* the backward accumulates onto these */
    tu_fill(x, n, &rng, 1.0f);
    memcpy(dinp, before, n * sizeof *dinp);
    tu_to_double(xd, x, n);
    tu_to_double(r, dout, n);
    sdp_dropout_bwd(cpu(), dinp, dout, mask, scale, n);
    loss_ctx ctx = {mask, r, xd, scale, n};
    const double e = gc_grad_err("dinp", dinp, before, ref_loss, xd, n, &ctx, n, 1e-3, 1e-5, 1e-4);
    print_message("dropout backward: err ratio %.3g\n", e);
    assert_true(e <= 1);
    sdp_dropout_bwd(cpu(), NULL, dout, mask, scale, n); /* a NULL gradient is skipped */
    free(mask), free(dout), free(dinp), free(before), free(x), free(xd), free(r);
}

/* Each word is one unit of work, drawn from its indices alone. */
static void test_thread_count_does_not_change_results(void **state) {
    (void)state;
    const size_t n = 300001;
    uint32_t *m[2];
    for (int i = 0; i < 2; i++) {
        omp_set_num_threads(i == 0 ? 1 : 3);
        m[i] = draw_mask(n, (sdp_dropout){0.25f, 5});
    }
    assert_memory_equal(m[0], m[1], sdp_dropout_words(n) * sizeof *m[0]);
    free(m[0]), free(m[1]);
}

static void call_mask_of_p_one(void *ctx) {
    (void)ctx;
    uint32_t mask[1];
    sdp_dropout_mask(cpu(), mask, 10, (sdp_dropout){1.0f, 0});
}

static void call_fwd_without_mask(void *ctx) {
    (void)ctx;
    float x[4] = {0};
    sdp_dropout_fwd(cpu(), x, x, NULL, 1.0f, 4);
}

static void call_fwd_with_nan_scale(void *ctx) {
    (void)ctx;
    float x[4] = {0};
    uint32_t mask[1] = {0};
    sdp_dropout_fwd(cpu(), x, x, mask, NAN, 4);
}

static void test_bad_arguments_fail_clearly(void **state) {
    (void)state;
    tu_expect_fatal(call_mask_of_p_one, NULL, "dropout probability 1 is outside [0, 1)");
    tu_expect_fatal(call_fwd_without_mask, NULL, "sdp_dropout_fwd: mask is NULL");
    tu_expect_fatal(call_fwd_with_nan_scale, NULL, "sdp_dropout_fwd: scale nan");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_is_the_stream_in_order),
        cmocka_unit_test(test_fraction_dropped_is_p),
        cmocka_unit_test(test_same_key_same_mask_other_key_other_mask),
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_thread_count_does_not_change_results),
        cmocka_unit_test(test_bad_arguments_fail_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
