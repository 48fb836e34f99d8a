/* Self-attention kernels, causal and bidirectional, without and with dropout on the
 * probabilities, against a naive double-precision reference that builds the full T x T score
 * matrix with an explicit causal mask and applies the dropout mask entry by entry; the backward
 * against central differences of that reference (the dropout mask held fixed by its key). */
#include "testutil.h"

#include <omp.h>

#include "sdp/ops.h"

typedef struct {
    int B, T, H, hs;
    bool bidirectional; /* every query sees every key (ViT); false: causal */
    float dropout;      /* on the probabilities, drawn from DROP_KEY; 0: none */
} shape;

static const uint64_t DROP_KEY = 0x5eed5eed12345678ull;

static sdp_dropout drop_of(shape s) {
    return (sdp_dropout){s.dropout, DROP_KEY};
}

static size_t qkv_len(shape s) {
    return (size_t)s.B * s.T * 3 * s.H * s.hs;
}

static size_t out_len(shape s) {
    return (size_t)s.B * s.T * s.H * s.hs;
}

/* Scratch full of NaN: any entry the kernels read before writing would poison the results. */
static float *poisoned_scratch(shape s) {
    size_t n =
        sdp_attention_scratch_bytes(tu_cpu(SDP_GEMM_DNNL), s.B, s.T, s.H, s.hs) / sizeof(float);
    float *scratch = malloc(n * sizeof *scratch);
    for (size_t i = 0; i < n; i++) scratch[i] = NAN;
    return scratch;
}

/* The dropout factors of every probability of s, [B, H, T, T] (the mask drawn once, as
 * drop_factor defines it, by walking the stream in order). */
static double *drop_factors(shape s) {
    const size_t n = (size_t)s.B * s.H * s.T * s.T;
    double *f = malloc(n * sizeof *f);
    sdp_rng r = {DROP_KEY};
    for (size_t i = 0; i < n; i++) {
        const uint64_t x = sdp_rng_u64(&r);
        const bool keep = s.dropout == 0 || (double)(x >> 32) >= (double)s.dropout * 4294967296.0;
        f[i] = s.dropout == 0 ? 1.0 : keep ? 1.0 / (1.0 - (double)s.dropout) : 0.0;
    }
    return f;
}

/* out and lse of softmax attention, straight from the definition; dropout multiplies each
 * probability by its factor after the softmax. */
static void ref_attention(double *out, double *lse, const double *qkv, shape s) {
    int D = s.H * s.hs, T = s.T;
    double scale = 1.0 / sqrt(s.hs);
    double *scores = malloc((size_t)T * T * sizeof *scores);
    double *dfac = drop_factors(s);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++) {
            const double *base = qkv + (size_t)b * T * 3 * D + h * s.hs;
            for (int t = 0; t < T; t++)
                for (int u = 0; u < T; u++) {
                    double dot = 0;
                    for (int d = 0; d < s.hs; d++)
                        dot += base[t * 3 * D + d] * base[u * 3 * D + D + d];
                    scores[t * T + u] = u <= t || s.bidirectional ? scale * dot : -INFINITY;
                }
            for (int t = 0; t < T; t++) {
                double *row = scores + (size_t)t * T, mx = -INFINITY, sum = 0;
                double *drops = dfac + ((((size_t)b * s.H + h) * T) + t) * T;
                for (int u = 0; u < T; u++) mx = fmax(mx, row[u]);
                for (int u = 0; u < T; u++) sum += exp(row[u] - mx);
                if (lse) lse[((size_t)b * s.H + h) * T + t] = mx + log(sum);
                double *o = out + ((size_t)b * T + t) * D + h * s.hs;
                for (int d = 0; d < s.hs; d++) o[d] = 0;
                for (int u = 0; u < T; u++) {
                    const double pu = exp(row[u] - mx) / sum * drops[u];
                    for (int d = 0; d < s.hs; d++) o[d] += pu * base[u * 3 * D + 2 * D + d];
                }
            }
        }
    free(scores);
    free(dfac);
}

/* Loss sum(r * out) as a function of the qkv entries listed in idx (the rest held fixed). */
typedef struct {
    shape s;
    double *qkv, *out;
    const double *r;
    const size_t *idx;
} loss_ctx;

static double ref_loss(const double *x, void *vctx) {
    loss_ctx *c = vctx;
    size_t m = out_len(c->s);
    for (size_t i = 0; c->idx[i] != SIZE_MAX; i++) c->qkv[c->idx[i]] = x[i];
    ref_attention(c->out, NULL, c->qkv, c->s);
    double loss = 0;
    for (size_t i = 0; i < m; i++) loss += c->r[i] * c->out[i];
    return loss;
}

/* The kernel's forward on s, compared with the reference. */
static void check_forward(shape s, int threads) {
    omp_set_num_threads(threads);
    sdp_rng rng = sdp_rng_make(11, (uint64_t)s.T);
    size_t n = qkv_len(s), m = out_len(s), nl = (size_t)s.B * s.H * s.T;
    float *qkv = malloc(n * sizeof *qkv), *out = malloc(m * sizeof *out);
    float *lse = malloc(nl * sizeof *lse);
    float *scratch = poisoned_scratch(s);
    double *qkv_d = calloc(n, sizeof *qkv_d), *out_d = malloc(m * sizeof *out_d);
    double *lse_d = malloc(nl * sizeof *lse_d);
    tu_fill(qkv, n, &rng, 1.5f);
    tu_to_double(qkv_d, qkv, n);

    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), out, lse, qkv, s.B, s.T, s.H, s.hs, !s.bidirectional,
                      drop_of(s), scratch);
    ref_attention(out_d, lse_d, qkv_d, s);
    double e_out = tu_err_ratio(out, out_d, m, 1e-5, 1e-4);
    double e_lse = tu_err_ratio(lse, lse_d, nl, 1e-5, 1e-5);
    print_message(
        "fwd B=%d T=%d H=%d hs=%d %s dropout %g threads=%d: err ratio out %.3g lse %.3g\n", s.B,
        s.T, s.H, s.hs, s.bidirectional ? "bidirectional" : "causal", (double)s.dropout, threads,
        e_out, e_lse);
    assert_true(e_out <= 1);
    assert_true(e_lse <= 1);
    free(qkv), free(out), free(lse), free(scratch), free(qkv_d), free(out_d), free(lse_d);
}

static void test_forward_matches_reference(void **state) {
    (void)state;
    check_forward((shape){1, 1, 1, 4, false, 0}, 1);    /* one token: out is v, lse is q.k scaled */
    check_forward((shape){2, 5, 3, 4, false, 0}, 1);    /* odd sizes, all ragged tiles */
    check_forward((shape){2, 67, 4, 16, false, 0}, 3);  /* two row blocks, several threads */
    check_forward((shape){1, 130, 2, 64, false, 0}, 2); /* three row blocks, full micro-tiles */
    check_forward((shape){1, 1, 1, 4, true, 0}, 1);
    check_forward((shape){2, 5, 3, 4, true, 0}, 1);
    check_forward((shape){2, 67, 4, 16, true, 0}, 3);
    check_forward((shape){1, 130, 2, 64, true, 0}, 2);
    /* dropout on the probabilities: p = 0.3 here and there, 0.9 where most are dropped */
    check_forward((shape){2, 5, 3, 4, false, 0.3f}, 1);
    check_forward((shape){2, 67, 4, 16, false, 0.3f}, 3);
    check_forward((shape){1, 130, 2, 64, true, 0.3f}, 2);
    check_forward((shape){2, 17, 2, 8, true, 0.9f}, 1);
}

/* The kernel's backward on s (with dqkv holding random values beforehand, to check that it
 * accumulates) against central differences of the reference on `checked` random entries of qkv
 * (all of them when checked is 0). */
static void check_backward(shape s, int threads, size_t checked) {
    omp_set_num_threads(threads);
    sdp_rng rng = sdp_rng_make(12, (uint64_t)s.T);
    size_t n = qkv_len(s), m = out_len(s), nl = (size_t)s.B * s.H * s.T;
    float *qkv = malloc(n * sizeof *qkv), *dqkv = malloc(n * sizeof *dqkv);
    float *before = malloc(n * sizeof *before);
    float *out = malloc(m * sizeof *out), *dout = malloc(m * sizeof *dout);
    float *lse = malloc(nl * sizeof *lse);
    float *scratch = poisoned_scratch(s);
    tu_fill(qkv, n, &rng, 1.5f);
    tu_fill(dout, m, &rng, 1.0f);
    tu_fill(before, n, &rng, 1.0f);
    memcpy(dqkv, before, n * sizeof *dqkv);

    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), out, lse, qkv, s.B, s.T, s.H, s.hs, !s.bidirectional,
                      drop_of(s), scratch);
    sdp_attention_bwd(tu_cpu(SDP_GEMM_DNNL), dqkv, dout, qkv, out, lse, s.B, s.T, s.H, s.hs,
                      !s.bidirectional, drop_of(s), scratch);

    if (checked == 0 || checked > n) checked = n;
    /* Distinct entries: the first `checked` of a partial Fisher-Yates shuffle. */
    size_t *idx = malloc((n + 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    for (size_t i = 0; i < checked && checked < n; i++) {
        size_t j = i + sdp_rng_below(&rng, n - i), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    idx[checked] = SIZE_MAX;
    double *qkv_d = calloc(n, sizeof *qkv_d), *out_d = malloc(m * sizeof *out_d);
    double *r = malloc(m * sizeof *r), *x = malloc(checked * sizeof *x);
    double *grad = malloc(checked * sizeof *grad);
    tu_to_double(qkv_d, qkv, n);
    tu_to_double(r, dout, m);
    for (size_t i = 0; i < checked; i++) x[i] = qkv_d[idx[i]];
    loss_ctx ctx = {s, qkv_d, out_d, r, idx};
    tu_fd_grad(ref_loss, x, checked, &ctx, 1e-5, grad);

    float *got = malloc(checked * sizeof *got);
    for (size_t i = 0; i < checked; i++) {
        got[i] = dqkv[idx[i]];
        grad[i] += before[idx[i]];
    }
    double e = tu_err_ratio(got, grad, checked, 1e-5, 1e-4);
    print_message(
        "bwd B=%d T=%d H=%d hs=%d %s dropout %g threads=%d: %zu entries, err ratio %.3g\n", s.B,
        s.T, s.H, s.hs, s.bidirectional ? "bidirectional" : "causal", (double)s.dropout, threads,
        checked, e);
    assert_true(e <= 1);
    free(qkv), free(dqkv), free(before), free(out), free(dout), free(lse), free(scratch);
    free(idx), free(qkv_d), free(out_d), free(r), free(x), free(grad), free(got);
}

static void test_backward_matches_finite_differences(void **state) {
    (void)state;
    check_backward((shape){1, 1, 1, 4, false, 0}, 1, 0);
    check_backward((shape){2, 5, 3, 4, false, 0}, 1, 0);
    check_backward((shape){1, 20, 2, 8, false, 0}, 1, 0);
    check_backward((shape){2, 67, 4, 16, false, 0}, 3, 300);
    check_backward((shape){1, 130, 1, 64, false, 0}, 2, 150);
    check_backward((shape){2, 5, 3, 4, true, 0}, 1, 0);
    check_backward((shape){1, 17, 2, 8, true, 0}, 1, 0); /* 17 = ViT's 16 patches + class token */
    check_backward((shape){2, 67, 4, 16, true, 0}, 3, 300);
    check_backward((shape){2, 5, 3, 4, false, 0.3f}, 1, 0);
    check_backward((shape){1, 20, 2, 8, false, 0.5f}, 1, 0);
    check_backward((shape){1, 17, 2, 8, true, 0.3f}, 1, 0);
    check_backward((shape){2, 67, 4, 16, false, 0.2f}, 3, 300);
    check_backward((shape){1, 130, 1, 64, true, 0.1f}, 2, 150);
}

/* Each (batch, head) is computed by one thread with the same code, so the thread count must not
 * change a single bit, with dropout or without (its decisions depend on their indices alone). */
static void check_thread_count(shape s) {
    sdp_rng rng = sdp_rng_make(13, 0);
    size_t n = qkv_len(s), m = out_len(s), nl = (size_t)s.B * s.H * s.T;
    float *qkv = malloc(n * sizeof *qkv), *dout = malloc(m * sizeof *dout);
    float *out[2], *lse[2], *dqkv[2];
    tu_fill(qkv, n, &rng, 1.0f);
    tu_fill(dout, m, &rng, 1.0f);
    for (int i = 0; i < 2; i++) {
        omp_set_num_threads(i == 0 ? 1 : 4);
        float *scratch = poisoned_scratch(s);
        out[i] = malloc(m * sizeof *out[i]);
        lse[i] = malloc(nl * sizeof *lse[i]);
        dqkv[i] = calloc(n, sizeof *dqkv[i]);
        sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), out[i], lse[i], qkv, s.B, s.T, s.H, s.hs,
                          !s.bidirectional, drop_of(s), scratch);
        sdp_attention_bwd(tu_cpu(SDP_GEMM_DNNL), dqkv[i], dout, qkv, out[i], lse[i], s.B, s.T, s.H,
                          s.hs, !s.bidirectional, drop_of(s), scratch);
        free(scratch);
    }
    assert_memory_equal(out[0], out[1], m * sizeof *out[0]);
    assert_memory_equal(lse[0], lse[1], nl * sizeof *lse[0]);
    assert_memory_equal(dqkv[0], dqkv[1], n * sizeof *dqkv[0]);
    for (int i = 0; i < 2; i++) free(out[i]), free(lse[i]), free(dqkv[i]);
    free(qkv), free(dout);
}

static void test_thread_count_does_not_change_results(void **state) {
    (void)state;
    check_thread_count((shape){3, 70, 5, 32, false, 0});
    check_thread_count((shape){3, 70, 5, 32, true, 0.3f});
}

/* Scores of several hundred must not overflow the softmax. fp32 dot products of that size carry
 * absolute errors near 1e-4, hence the looser tolerance; an overflow would give inf or NaN. */
static void test_large_scores_stay_finite(void **state) {
    (void)state;
    omp_set_num_threads(1);
    shape s = {1, 40, 2, 16, false, 0};
    sdp_rng rng = sdp_rng_make(14, 0);
    size_t n = qkv_len(s), m = out_len(s), nl = (size_t)s.B * s.H * s.T;
    float *qkv = malloc(n * sizeof *qkv), *out = malloc(m * sizeof *out);
    float *lse = malloc(nl * sizeof *lse);
    float *scratch = poisoned_scratch(s);
    double *qkv_d = calloc(n, sizeof *qkv_d), *out_d = malloc(m * sizeof *out_d);
    double *lse_d = malloc(nl * sizeof *lse_d);
    tu_fill(qkv, n, &rng, 12.0f); /* scores of several hundred */
    tu_to_double(qkv_d, qkv, n);
    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), out, lse, qkv, s.B, s.T, s.H, s.hs, !s.bidirectional,
                      drop_of(s), scratch);
    ref_attention(out_d, lse_d, qkv_d, s);
    double e_out = tu_err_ratio(out, out_d, m, 1e-3, 1e-3);
    double e_lse = tu_err_ratio(lse, lse_d, nl, 1e-3, 1e-5);
    print_message("large scores: err ratio out %.3g lse %.3g\n", e_out, e_lse);
    assert_true(e_out <= 1);
    assert_true(e_lse <= 1);
    free(qkv), free(out), free(lse), free(scratch), free(qkv_d), free(out_d), free(lse_d);
}

static void call_fwd_with_zero_heads(void *ctx) {
    (void)ctx;
    float x[48] = {0}, lse[4], scratch[4];
    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), x, lse, x, 1, 4, 0, 4, true, SDP_NO_DROPOUT, scratch);
}

static void call_bwd_without_scratch(void *ctx) {
    (void)ctx;
    float x[12] = {0}, lse[1] = {0};
    sdp_attention_bwd(tu_cpu(SDP_GEMM_DNNL), x, x, x, x, lse, 1, 1, 1, 4, true, SDP_NO_DROPOUT,
                      NULL);
}

static void call_fwd_dropping_everything(void *ctx) {
    (void)ctx;
    float x[12] = {0}, lse[1], scratch[4096];
    sdp_attention_fwd(tu_cpu(SDP_GEMM_DNNL), x, lse, x, 1, 1, 1, 4, true,
                      (sdp_dropout){1.0f, DROP_KEY}, scratch);
}

static void test_bad_arguments_fail_clearly(void **state) {
    (void)state;
    tu_expect_fatal(call_fwd_with_zero_heads, NULL, "attention needs positive sizes");
    tu_expect_fatal(call_bwd_without_scratch, NULL, "attention scratch is NULL");
    tu_expect_fatal(call_fwd_dropping_everything, NULL, "dropout probability 1 is outside [0, 1)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_thread_count_does_not_change_results),
        cmocka_unit_test(test_large_scores_stay_finite),
        cmocka_unit_test(test_bad_arguments_fail_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
