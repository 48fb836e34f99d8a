/* Token + position embedding forward and backward against a double-precision reference and its
 * finite differences. Tokens repeat within a batch, so the backward's scatter into the token table
 * must add every occurrence; the large case runs it with a thread team. */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/ops.h"

typedef struct {
    int B, T, C, V;
} dims;

static const dims SMALL = {3, 5, 13, 11};  /* 15 positions over 11 tokens: repeats */
static const dims LARGE = {4, 64, 67, 50}; /* B*T*C > 2^14: parallel paths */

typedef struct {
    dims d;
    int *tokens;
    float *wte, *wpe, *r;
    double *wte64, *wpe64, *r64;
    bool with_wpe;
} embed_case;

static embed_case make_case(dims d, bool with_wpe, uint64_t seed) {
    embed_case c = {.d = d, .with_wpe = with_wpe};
    size_t n = (size_t)d.B * d.T, nte = (size_t)d.V * d.C, npe = (size_t)d.T * d.C;
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.tokens = malloc(n * sizeof(int));
    /* Tokens from the lower part of the vocabulary only, so some rows get no gradient at all. */
    for (size_t i = 0; i < n; i++) c.tokens[i] = (int)sdp_rng_below(&rng, (uint64_t)d.V - 2);
    c.wte = malloc(nte * sizeof(float));
    c.wpe = malloc(npe * sizeof(float));
    c.r = malloc(n * d.C * sizeof(float));
    tu_fill(c.wte, nte, &rng, 1.0f);
    tu_fill(c.wpe, npe, &rng, 1.0f);
    tu_fill(c.r, n * d.C, &rng, 1.0f);
    c.wte64 = malloc(nte * sizeof(double));
    c.wpe64 = malloc(npe * sizeof(double));
    c.r64 = malloc(n * d.C * sizeof(double));
    tu_to_double(c.wte64, c.wte, nte);
    tu_to_double(c.wpe64, c.wpe, npe);
    tu_to_double(c.r64, c.r, n * d.C);
    return c;
}

static void free_case(embed_case *c) {
    free(c->tokens), free(c->wte), free(c->wpe), free(c->r);
    free(c->wte64), free(c->wpe64), free(c->r64);
}

static double ref_out(const embed_case *c, int i, int ch) {
    int t = i % c->d.T;
    double v = c->wte64[(size_t)c->tokens[i] * c->d.C + ch];
    return c->with_wpe ? v + c->wpe64[(size_t)t * c->d.C + ch] : v;
}

static double embed_loss(const double *x, void *ctx) {
    (void)x;
    const embed_case *c = ctx;
    double loss = 0;
    for (int i = 0; i < c->d.B * c->d.T; i++)
        for (int ch = 0; ch < c->d.C; ch++)
            loss += c->r64[(size_t)i * c->d.C + ch] * ref_out(c, i, ch);
    return loss;
}

static void check_forward(dims d, bool with_wpe) {
    embed_case c = make_case(d, with_wpe, 3);
    size_t no = (size_t)d.B * d.T * d.C;
    float *out = malloc(no * sizeof(float));
    double *ref = malloc(no * sizeof(double));
    for (size_t i = 0; i < no; i++) out[i] = NAN;
    sdp_embed_fwd(tu_cpu(SDP_GEMM_DNNL), out, c.tokens, c.wte, with_wpe ? c.wpe : NULL, d.B, d.T,
                  d.C);
    for (int i = 0; i < d.B * d.T; i++)
        for (int ch = 0; ch < d.C; ch++) ref[(size_t)i * d.C + ch] = ref_out(&c, i, ch);
    assert_true(tu_err_ratio(out, ref, no, 1e-6, 1e-6) <= 1);
    free(out);
    free(ref);
    free_case(&c);
}

static void test_forward(void **state) {
    (void)state;
    for (int wpe = 0; wpe < 2; wpe++) {
        check_forward(SMALL, wpe);
        check_forward(LARGE, wpe);
    }
}

static float *prefilled(size_t n, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, 1.0f);
    return p;
}

static void check_backward(dims d, size_t samples) {
    embed_case c = make_case(d, true, 4);
    size_t nte = (size_t)d.V * d.C, npe = (size_t)d.T * d.C;
    float *dwte0 = prefilled(nte, 1), *dwpe0 = prefilled(npe, 2);
    float *dwte = prefilled(nte, 1), *dwpe = prefilled(npe, 2);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), dwte, dwpe, c.r, c.tokens, d.B, d.T, d.C);
    double h = 1e-3, atol = 1e-5, rtol = 1e-4; /* sums of a few dozen terms at most */
    assert_true(gc_grad_err("dwte", dwte, dwte0, embed_loss, c.wte64, nte, &c, samples, h, atol,
                            rtol) <= 1);
    assert_true(gc_grad_err("dwpe", dwpe, dwpe0, embed_loss, c.wpe64, npe, &c, samples, h, atol,
                            rtol) <= 1);

    /* Deterministic: a second run gives bitwise the same; NULL skips exactly one gradient. */
    float *dwte2 = prefilled(nte, 1), *dwpe2 = prefilled(npe, 2);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), dwte2, NULL, c.r, c.tokens, d.B, d.T, d.C);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, dwpe2, c.r, c.tokens, d.B, d.T, d.C);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), NULL, NULL, c.r, c.tokens, d.B, d.T, d.C);
    assert_memory_equal(dwte2, dwte, nte * sizeof(float));
    assert_memory_equal(dwpe2, dwpe, npe * sizeof(float));
    free(dwte0), free(dwpe0), free(dwte), free(dwpe), free(dwte2), free(dwpe2);
    free_case(&c);
}

static void test_backward(void **state) {
    (void)state;
    check_backward(SMALL, SIZE_MAX);
    check_backward(LARGE, 400);
}

/* The token table gradient must not depend on how the channels are split among threads. */
static void test_backward_same_for_any_thread_count(void **state) {
    (void)state;
    dims d = LARGE;
    embed_case c = make_case(d, true, 5);
    size_t nte = (size_t)d.V * d.C;
    float *one = prefilled(nte, 3), *two = prefilled(nte, 3);
    sdp_set_threads(1);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), one, NULL, c.r, c.tokens, d.B, d.T, d.C);
    sdp_set_threads(2);
    sdp_embed_bwd(tu_cpu(SDP_GEMM_DNNL), two, NULL, c.r, c.tokens, d.B, d.T, d.C);
    assert_memory_equal(one, two, nte * sizeof(float));
    free(one), free(two);
    free_case(&c);
}

static void embed_negative_token(void *ctx) {
    (void)ctx;
    int tokens[2] = {0, -3};
    float wte[4] = {0}, out[4];
    sdp_embed_fwd(tu_cpu(SDP_GEMM_DNNL), out, tokens, wte, NULL, 1, 2, 2);
}

static void test_negative_token_fails(void **state) {
    (void)state;
    tu_expect_fatal(embed_negative_token, NULL, "token id -3 at position 1");
}

int main(void) {
    sdp_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_backward_same_for_any_thread_count),
        cmocka_unit_test(test_negative_token_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
