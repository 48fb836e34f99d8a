/* ViT patch embedding as the ViT runs it (sdp_patch_gather, then a linear layer on the patch
 * rows) against a direct convolution with kernel = stride = p in double precision (output laid
 * out [B, P, D], patches row-major), its weight and bias gradients against central finite
 * differences of that reference's loss sum(r * y); both GEMM providers, with and without bias,
 * gradients accumulating, NULL gradients skipped, and images that do not tile into patches
 * refused. (The ViT needs no gradient of its input images.) */
#include "testutil.h"

#include "grad_check.h"
#include "sdp/backend.h"

static const sdp_gemm_provider PROVIDERS[2] = {SDP_GEMM_DNNL, SDP_GEMM_OPENBLAS};

typedef struct {
    int B, C, H, W, p, D;
    bool with_bias;
} dims;

static const dims CASES[] = {
    {2, 3, 8, 12, 4, 5, true},   /* non-square image */
    {2, 3, 6, 4, 2, 7, false},   /* no bias */
    {1, 2, 3, 3, 1, 3, true},    /* 1x1 patches: a pointwise conv */
    {2, 1, 28, 28, 7, 16, true}, /* Fashion-MNIST, 16 patches */
    {2, 3, 32, 32, 4, 48, true}, /* CIFAR, 64 patches: sampled differences */
};
enum { SAMPLES = 300 };

typedef struct {
    dims d;
    int P;
    size_t n_in, n_w, n_out;
    float *inp, *w, *b, *r;
    double *inp64, *w64, *b64, *r64;
} pe_case;

static double *to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    tu_to_double(d, x, n);
    return d;
}

static pe_case make_case(const dims *d, uint64_t seed) {
    pe_case c = {.d = *d, .P = (d->H / d->p) * (d->W / d->p)};
    c.n_in = (size_t)d->B * d->C * d->H * d->W;
    c.n_w = (size_t)d->D * d->C * d->p * d->p;
    c.n_out = (size_t)d->B * c.P * d->D;
    sdp_rng rng = sdp_rng_make(seed, 0);
    c.inp = malloc(c.n_in * sizeof(float));
    c.w = malloc(c.n_w * sizeof(float));
    c.b = malloc(d->D * sizeof(float));
    c.r = malloc(c.n_out * sizeof(float));
    tu_fill(c.inp, c.n_in, &rng, 1.0f);
    tu_fill(c.w, c.n_w, &rng, 0.3f);
    tu_fill(c.b, d->D, &rng, 1.0f);
    tu_fill(c.r, c.n_out, &rng, 1.0f);
    c.inp64 = to_double(c.inp, c.n_in);
    c.w64 = to_double(c.w, c.n_w);
    c.b64 = to_double(c.b, d->D);
    c.r64 = to_double(c.r, c.n_out);
    return c;
}

static void free_case(pe_case *c) {
    free(c->inp), free(c->w), free(c->b), free(c->r);
    free(c->inp64), free(c->w64), free(c->b64), free(c->r64);
}

/* out[b, patch, o] for patch = py * (W/p) + px: the conv output at (py, px), channel o. */
static double ref_point(const pe_case *c, int b, int patch, int o) {
    const dims *d = &c->d;
    int py = patch / (d->W / d->p), px = patch % (d->W / d->p);
    double acc = d->with_bias ? c->b64[o] : 0.0;
    for (int ch = 0; ch < d->C; ch++)
        for (int i = 0; i < d->p; i++)
            for (int j = 0; j < d->p; j++)
                acc += c->w64[((o * d->C + ch) * d->p + i) * d->p + j] *
                       c->inp64[(((size_t)b * d->C + ch) * d->H + py * d->p + i) * d->W +
                                px * d->p + j];
    return acc;
}

static double ref_loss(const double *x, void *ctx) {
    (void)x;
    const pe_case *c = ctx;
    double loss = 0;
    size_t k = 0;
    for (int b = 0; b < c->d.B; b++)
        for (int patch = 0; patch < c->P; patch++)
            for (int o = 0; o < c->d.D; o++) loss += c->r64[k++] * ref_point(c, b, patch, o);
    return loss;
}

static float *nan_floats(size_t n) {
    float *p = malloc((n > 0 ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *prefilled(size_t n, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    float *p = malloc(n * sizeof(float));
    tu_fill(p, n, &rng, 1.0f);
    return p;
}

typedef struct {
    float *dw, *db;
} pe_grads;

static pe_grads grads_prefilled(const pe_case *c) {
    return (pe_grads){prefilled(c->n_w, 2), prefilled(c->d.D, 3)};
}

static void grads_free(pe_grads *g) {
    free(g->dw), free(g->db);
}

/* The patch rows of the case's images, into rows [B*P, C*p*p] (as many floats as the images). */
static void gather(const sdp_backend *cpu, const pe_case *c, float *rows) {
    const dims *d = &c->d;
    sdp_patch_gather(cpu, rows, c->inp, d->B, d->C, d->H, d->W, d->p);
}

/* mask bit 0: dw, bit 1: dbias. */
static void run_backward(const sdp_backend *cpu, const pe_case *c, pe_grads *g, int mask,
                         const float *rows) {
    const dims *d = &c->d;
    sdp_linear_bwd(cpu, NULL, mask & 1 ? g->dw : NULL, d->with_bias && (mask & 2) ? g->db : NULL,
                   c->r, rows, c->w, d->B * c->P, d->C * d->p * d->p, d->D);
}

static void check_case(const dims *d, sdp_gemm_provider prov, uint64_t seed) {
    const sdp_backend *cpu = tu_cpu(prov);
    pe_case c = make_case(d, seed);
    float *rows = nan_floats(c.n_in), *out = nan_floats(c.n_out);
    gather(cpu, &c, rows);
    sdp_linear_fwd(cpu, out, rows, c.w, d->with_bias ? c.b : NULL, d->B * c.P, d->C * d->p * d->p,
                   d->D);
    double *ref = malloc(c.n_out * sizeof(double));
    size_t k = 0;
    for (int b = 0; b < d->B; b++)
        for (int patch = 0; patch < c.P; patch++)
            for (int o = 0; o < d->D; o++) ref[k++] = ref_point(&c, b, patch, o);
    assert_true(tu_err_ratio(out, ref, c.n_out, 1e-4, 1e-4) <= 1);

    pe_grads before = grads_prefilled(&c), got = grads_prefilled(&c);
    run_backward(cpu, &c, &got, 3, rows);
    double h = 1e-3, atol = 1e-4, rtol = 1e-4; /* the loss is linear in each tensor */
    assert_true(gc_grad_err("dw", got.dw, before.dw, ref_loss, c.w64, c.n_w, &c, SAMPLES, h, atol,
                            rtol) <= 1);
    if (d->with_bias)
        assert_true(gc_grad_err("dbias", got.db, before.db, ref_loss, c.b64, d->D, &c, SAMPLES, h,
                                atol, rtol) <= 1);

    /* Any subset of gradients, from freshly gathered rows: the given ones match the full call
     * bitwise, the others are untouched. */
    size_t sizes[2] = {c.n_w, (size_t)d->D};
    for (int mask = 0; mask < 4; mask++) {
        pe_grads g = grads_prefilled(&c);
        for (size_t i = 0; i < c.n_in; i++) rows[i] = NAN;
        gather(cpu, &c, rows);
        run_backward(cpu, &c, &g, mask, rows);
        float *gs[2] = {g.dw, g.db}, *full[2] = {got.dw, got.db};
        float *untouched[2] = {before.dw, before.db};
        for (int t = 0; t < 2; t++) {
            bool given = (mask >> t) & 1 && (t == 0 || d->with_bias);
            assert_memory_equal(gs[t], given ? full[t] : untouched[t], sizes[t] * sizeof(float));
        }
        grads_free(&g);
    }
    grads_free(&before), grads_free(&got);
    free(rows), free(out), free(ref);
    free_case(&c);
}

static void test_patch_embed(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
        for (int p = 0; p < 2; p++) check_case(&CASES[k], PROVIDERS[p], k);
}

static void image_not_tiled(void *ctx) {
    (void)ctx;
    float x[1];
    sdp_patch_gather(tu_cpu(SDP_GEMM_DNNL), x, x, 1, 3, 30, 32, 4);
}

static void test_errors(void **state) {
    (void)state;
    tu_expect_fatal(image_not_tiled, NULL, "image 30x32 is not a multiple of the patch size 4");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patch_embed),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
