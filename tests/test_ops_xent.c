/* Fused softmax + cross-entropy over a padded vocabulary: probabilities, per-row losses and their
 * sum against a double-precision log-softmax; the gradient against finite differences of it.
 * Padding columns hold NaN (they must never be read into a result), some targets are -1
 * (ignored), some rows have logits far beyond expf's range (the max must be subtracted), and both
 * aliasing cases of the interface are run. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops.h"

typedef struct {
    int n, V, Vp;
} dims;

static const dims SMALL = {7, 13, 16};
static const dims LARGE = {9, 2001, 2048}; /* n*Vp > 2^14: rows in parallel */
static const float DLOSS = 0.25f;

typedef struct {
    dims d;
    int *targets;
    float *logits;
    double *logits64;
} xent_case;

static xent_case make_case(dims d, uint64_t seed) {
    xent_case c = {.d = d};
    size_t nl = (size_t)d.n * d.Vp;
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.targets = malloc(d.n * sizeof(int));
    c.logits = malloc(nl * sizeof(float));
    tu_fill(c.logits, nl, &rng, 2.0f);
    for (int i = 0; i < d.n; i++) {
        c.targets[i] = i % 3 == 1 ? -1 : (int)sdp_rng_below(&rng, d.V);
        float offset = i % 3 == 2 ? 100.0f : 0.0f; /* expf(100) overflows float */
        for (int v = 0; v < d.Vp; v++)
            c.logits[(size_t)i * d.Vp + v] =
                v < d.V ? c.logits[(size_t)i * d.Vp + v] + offset : NAN;
    }
    c.targets[d.n - 1] = d.V - 1; /* the last real class, next to the padding */
    c.logits64 = malloc(nl * sizeof(double));
    tu_to_double(c.logits64, c.logits, nl);
    return c;
}

static void free_case(xent_case *c) {
    free(c->targets), free(c->logits), free(c->logits64);
}

/* log-sum-exp of the real classes of row i, in double. */
static double ref_lse(const xent_case *c, int i) {
    const double *x = c->logits64 + (size_t)i * c->d.Vp;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < c->d.V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < c->d.V; v++) sum += exp(x[v] - mx);
    return mx + log(sum);
}

static double ref_row_loss(const xent_case *c, int i) {
    int t = c->targets[i];
    return t < 0 ? 0.0 : ref_lse(c, i) - c->logits64[(size_t)i * c->d.Vp + t];
}

/* The backward is checked as the gradient of DLOSS * (sum of row losses). */
static double xent_loss(const double *x, void *ctx) {
    (void)x;
    const xent_case *c = ctx;
    double loss = 0;
    for (int i = 0; i < c->d.n; i++) loss += ref_row_loss(c, i);
    return DLOSS * loss;
}

static void check_forward(dims d) {
    xent_case c = make_case(d, 1);
    size_t nl = (size_t)d.n * d.Vp;
    float *losses = malloc(d.n * sizeof(float)), *probs = malloc(nl * sizeof(float));
    double *ref_losses = malloc(d.n * sizeof(double)), *ref_probs = malloc(nl * sizeof(double));
    double total = sdp_softmax_xent_fwd(tu_cpu(SDP_GEMM_DNNL), losses, probs, c.logits, c.targets,
                                        d.n, d.V, d.Vp);

    double ref_total = 0;
    for (int i = 0; i < d.n; i++) {
        ref_losses[i] = ref_row_loss(&c, i);
        ref_total += ref_losses[i];
        double lse = ref_lse(&c, i);
        for (int v = 0; v < d.Vp; v++)
            ref_probs[(size_t)i * d.Vp + v] =
                v < d.V ? exp(c.logits64[(size_t)i * d.Vp + v] - lse) : 0.0;
    }
    assert_true(tu_err_ratio(losses, ref_losses, d.n, 1e-5, 1e-5) <= 1);
    assert_true(tu_err_ratio(probs, ref_probs, nl, 1e-7, 1e-5) <= 1);
    assert_true(fabs(total - ref_total) <= 1e-5 * (1 + fabs(ref_total)));
    for (int i = 0; i < d.n; i++)
        if (c.targets[i] < 0) assert_true(losses[i] == 0.0f);

    /* probs may alias logits: the same bits as the separate-buffer call. */
    float *inplace = malloc(nl * sizeof(float)), *losses2 = malloc(d.n * sizeof(float));
    memcpy(inplace, c.logits, nl * sizeof(float));
    double total2 = sdp_softmax_xent_fwd(tu_cpu(SDP_GEMM_DNNL), losses2, inplace, inplace,
                                         c.targets, d.n, d.V, d.Vp);
    assert_memory_equal(inplace, probs, nl * sizeof(float));
    assert_memory_equal(losses2, losses, d.n * sizeof(float));
    assert_true(total2 == total);

    free(losses), free(probs), free(ref_losses), free(ref_probs), free(inplace), free(losses2);
    free_case(&c);
}

static void test_forward(void **state) {
    (void)state;
    check_forward(SMALL);
    check_forward(LARGE);
}

static void check_backward(dims d, size_t samples) {
    xent_case c = make_case(d, 2);
    size_t nl = (size_t)d.n * d.Vp;
    float *losses = malloc(d.n * sizeof(float)), *probs = malloc(nl * sizeof(float));
    sdp_softmax_xent_fwd(tu_cpu(SDP_GEMM_DNNL), losses, probs, c.logits, c.targets, d.n, d.V, d.Vp);

    float *dlogits = malloc(nl * sizeof(float)), *zeros = calloc(nl, sizeof(float));
    for (size_t i = 0; i < nl; i++) dlogits[i] = NAN; /* overwritten, not accumulated */
    sdp_softmax_xent_bwd(tu_cpu(SDP_GEMM_DNNL), dlogits, probs, c.targets, DLOSS, d.n, d.V, d.Vp);
    /* Padding columns and ignored rows do not enter the loss, so their differences are 0. */
    assert_true(gc_grad_err("dlogits", dlogits, zeros, xent_loss, c.logits64, nl, &c, samples, 1e-4,
                            1e-6, 1e-3) <= 1);
    for (int i = 0; i < d.n; i++)
        for (int v = 0; v < d.Vp; v++)
            if (c.targets[i] < 0 || v >= d.V) assert_true(dlogits[(size_t)i * d.Vp + v] == 0.0f);

    /* dlogits may alias probs. */
    sdp_softmax_xent_bwd(tu_cpu(SDP_GEMM_DNNL), probs, probs, c.targets, DLOSS, d.n, d.V, d.Vp);
    assert_memory_equal(probs, dlogits, nl * sizeof(float));

    free(losses), free(probs), free(dlogits), free(zeros);
    free_case(&c);
}

static void test_backward(void **state) {
    (void)state;
    check_backward(SMALL, SIZE_MAX);
    check_backward(LARGE, 400);
}

static void xent_target_too_large(void *ctx) {
    (void)ctx;
    float logits[8] = {0}, losses[2];
    int targets[2] = {1, 3};
    sdp_softmax_xent_fwd(tu_cpu(SDP_GEMM_DNNL), losses, logits, logits, targets, 2, 3, 4);
}

static void xent_vocab_above_padded(void *ctx) {
    (void)ctx;
    float probs[8] = {0};
    int targets[2] = {0, 0};
    sdp_softmax_xent_bwd(tu_cpu(SDP_GEMM_DNNL), probs, probs, targets, 1.0f, 2, 5, 4);
}

static void test_bad_input_fails_clearly(void **state) {
    (void)state;
    tu_expect_fatal(xent_target_too_large, NULL, "target 3 at row 1");
    tu_expect_fatal(xent_vocab_above_padded, NULL, "vocabulary size 5");
}

int main(void) {
    sdp_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_bad_input_fails_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
