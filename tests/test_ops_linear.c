/* sdp_linear_fwd/bwd against a naive double-precision reference and finite differences of it,
 * for both gemm providers, with and without bias, at a small odd size and at a size that takes
 * the OpenMP paths of the bias add and bias gradient. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops.h"

static const sdp_gemm_provider PROVIDERS[2] = {SDP_GEMM_DNNL, SDP_GEMM_OPENBLAS};

typedef struct {
    int n, ic, oc;
} dims;

static const dims SMALL = {7, 5, 13};
static const dims LARGE = {64, 96, 257}; /* n * oc > 2^14: parallel bias add and bias gradient */

/* Inputs in float (for the kernel) and double (for the reference), plus the loss weights r. */
typedef struct {
    dims d;
    float *inp, *w, *b, *r;
    double *inp64, *w64, *b64, *r64;
    bool with_bias;
} linear_case;

static linear_case make_case(dims d, bool with_bias, uint64_t seed) {
    linear_case c = {.d = d, .with_bias = with_bias};
    size_t ni = (size_t)d.n * d.ic, nw = (size_t)d.oc * d.ic, no = (size_t)d.n * d.oc;
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.inp = malloc(ni * sizeof(float));
    c.w = malloc(nw * sizeof(float));
    c.b = malloc(d.oc * sizeof(float));
    c.r = malloc(no * sizeof(float));
    tu_fill(c.inp, ni, &rng, 1.0f);
    tu_fill(c.w, nw, &rng, 0.5f);
    tu_fill(c.b, d.oc, &rng, 1.0f);
    tu_fill(c.r, no, &rng, 1.0f);
    c.inp64 = malloc(ni * sizeof(double));
    c.w64 = malloc(nw * sizeof(double));
    c.b64 = malloc(d.oc * sizeof(double));
    c.r64 = malloc(no * sizeof(double));
    tu_to_double(c.inp64, c.inp, ni);
    tu_to_double(c.w64, c.w, nw);
    tu_to_double(c.b64, c.b, d.oc);
    tu_to_double(c.r64, c.r, no);
    return c;
}

static void free_case(linear_case *c) {
    free(c->inp), free(c->w), free(c->b), free(c->r);
    free(c->inp64), free(c->w64), free(c->b64), free(c->r64);
}

static double ref_out(const linear_case *c, int i, int o) {
    double acc = c->with_bias ? c->b64[o] : 0.0;
    for (int k = 0; k < c->d.ic; k++)
        acc += c->inp64[(size_t)i * c->d.ic + k] * c->w64[(size_t)o * c->d.ic + k];
    return acc;
}

/* loss = sum r * y over the double inputs in ctx (whichever one tu_fd_grad is perturbing). */
static double linear_loss(const double *x, void *ctx) {
    (void)x;
    const linear_case *c = ctx;
    double loss = 0;
    for (int i = 0; i < c->d.n; i++)
        for (int o = 0; o < c->d.oc; o++)
            loss += c->r64[(size_t)i * c->d.oc + o] * ref_out(c, i, o);
    return loss;
}

static void check_forward(sdp_gemm_provider prov, dims d, bool with_bias) {
    linear_case c = make_case(d, with_bias, 11);
    size_t no = (size_t)d.n * d.oc;
    float *out = malloc(no * sizeof(float));
    double *ref = malloc(no * sizeof(double));
    for (size_t i = 0; i < no; i++) out[i] = NAN; /* output only: stale contents must not leak */
    sdp_linear_fwd(tu_cpu(prov), out, c.inp, c.w, with_bias ? c.b : NULL, d.n, d.ic, d.oc);
    for (int i = 0; i < d.n; i++)
        for (int o = 0; o < d.oc; o++) ref[(size_t)i * d.oc + o] = ref_out(&c, i, o);
    assert_true(tu_err_ratio(out, ref, no, 1e-5, 1e-4) <= 1);
    free(out);
    free(ref);
    free_case(&c);
}

static void test_forward(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++)
        for (int bias = 0; bias < 2; bias++) {
            check_forward(PROVIDERS[p], SMALL, bias);
            check_forward(PROVIDERS[p], LARGE, bias);
        }
}

/* Gradient buffers pre-filled with random values, so accumulation is checked along the way. */
typedef struct {
    float *dinp, *dw, *db;
} grads;

static grads prefilled_grads(dims d, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    grads g = {malloc((size_t)d.n * d.ic * sizeof(float)),
               malloc((size_t)d.oc * d.ic * sizeof(float)), malloc(d.oc * sizeof(float))};
    tu_fill(g.dinp, (size_t)d.n * d.ic, &rng, 1.0f);
    tu_fill(g.dw, (size_t)d.oc * d.ic, &rng, 1.0f);
    tu_fill(g.db, d.oc, &rng, 1.0f);
    return g;
}

static void free_grads(grads *g) {
    free(g->dinp), free(g->dw), free(g->db);
}

static void check_backward(sdp_gemm_provider prov, dims d, size_t samples) {
    linear_case c = make_case(d, true, 21);
    grads before = prefilled_grads(d, 5), got = prefilled_grads(d, 5);
    sdp_linear_bwd(tu_cpu(prov), got.dinp, got.dw, got.db, c.r, c.inp, c.w, d.n, d.ic, d.oc);
    double h = 1e-3, atol = 1e-4, rtol = 1e-3; /* the loss is linear in each input */
    assert_true(gc_grad_err("dinp", got.dinp, before.dinp, linear_loss, c.inp64, (size_t)d.n * d.ic,
                            &c, samples, h, atol, rtol) <= 1);
    assert_true(gc_grad_err("dw", got.dw, before.dw, linear_loss, c.w64, (size_t)d.oc * d.ic, &c,
                            samples, h, atol, rtol) <= 1);
    assert_true(gc_grad_err("dbias", got.db, before.db, linear_loss, c.b64, d.oc, &c, samples, h,
                            atol, rtol) <= 1);

    /* Same inputs, same threads: bitwise the same gradients. */
    grads again = prefilled_grads(d, 5);
    sdp_linear_bwd(tu_cpu(prov), again.dinp, again.dw, again.db, c.r, c.inp, c.w, d.n, d.ic, d.oc);
    assert_memory_equal(again.dinp, got.dinp, (size_t)d.n * d.ic * sizeof(float));
    assert_memory_equal(again.dw, got.dw, (size_t)d.oc * d.ic * sizeof(float));
    assert_memory_equal(again.db, got.db, d.oc * sizeof(float));
    free_grads(&before);
    free_grads(&got);
    free_grads(&again);
    free_case(&c);
}

static void test_backward(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        check_backward(PROVIDERS[p], SMALL, SIZE_MAX);
        check_backward(PROVIDERS[p], LARGE, 48);
    }
}

/* Any subset of the gradients may be requested: the ones given come out exactly as in the full
 * call (checked against finite differences above), the others are not touched (they are NULL). */
static void test_null_gradients_are_skipped(void **state) {
    (void)state;
    dims d = SMALL;
    linear_case c = make_case(d, true, 31);
    for (int p = 0; p < 2; p++) {
        grads full = prefilled_grads(d, 9);
        sdp_linear_bwd(tu_cpu(PROVIDERS[p]), full.dinp, full.dw, full.db, c.r, c.inp, c.w, d.n,
                       d.ic, d.oc);
        for (int mask = 0; mask < 8; mask++) {
            grads g = prefilled_grads(d, 9), orig = prefilled_grads(d, 9);
            sdp_linear_bwd(tu_cpu(PROVIDERS[p]), mask & 1 ? g.dinp : NULL, mask & 2 ? g.dw : NULL,
                           mask & 4 ? g.db : NULL, c.r, c.inp, c.w, d.n, d.ic, d.oc);
            assert_memory_equal(g.dinp, mask & 1 ? full.dinp : orig.dinp,
                                (size_t)d.n * d.ic * sizeof(float));
            assert_memory_equal(g.dw, mask & 2 ? full.dw : orig.dw,
                                (size_t)d.oc * d.ic * sizeof(float));
            assert_memory_equal(g.db, mask & 4 ? full.db : orig.db, d.oc * sizeof(float));
            free_grads(&g);
            free_grads(&orig);
        }
        free_grads(&full);
    }
    free_case(&c);
}

int main(void) {
    sdp_set_threads(2); /* ctest runs with OMP_NUM_THREADS=1; the large cases need a team */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_null_gradients_are_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
