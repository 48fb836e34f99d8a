/* conv2d, both algorithms (oneDNN primitives and im2col + GEMM), on 1 and 2 threads: the forward
 * against a direct 7-loop convolution in double precision, the backward against central finite
 * differences of that reference's loss sum(r * y). Small odd shapes (3x3 and 1x1, strides 1 and
 * 2, padding, a rectangular kernel) are checked at every coordinate; channel counts of 16 and 32,
 * which take oneDNN's blocked-layout JIT kernels, at a spread-out sample. Also: gradients
 * accumulate, NULL gradients are skipped without changing the others, results repeat bitwise,
 * and bad shapes or a thread-count mismatch fail with a clear message. */
#include "testutil.h"

#include "sdp/ops_vision.h"

#include <omp.h>

typedef struct {
    sdp_conv_shape s;
    bool with_bias;
} conv_dims;

/* B, IC, H, W, OC, KH, KW, stride_h, stride_w, pad_h, pad_w */
static const conv_dims SMALL[] = {
    {{2, 3, 7, 5, 4, 3, 3, 2, 2, 1, 1}, true},  /* 3x3, stride 2, pad 1, odd sizes */
    {{2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1}, false}, /* 3x3 "same" */
    {{2, 3, 7, 5, 4, 1, 1, 1, 1, 0, 0}, true},  /* 1x1: a matrix product per image */
    {{2, 3, 7, 5, 4, 1, 1, 2, 2, 0, 0}, false}, /* 1x1 stride 2: a ResNet shortcut */
    {{2, 3, 7, 5, 4, 3, 2, 1, 2, 0, 1}, true},  /* rectangular kernel, mixed strides and pads */
    {{1, 2, 6, 7, 3, 5, 5, 3, 2, 2, 2}, false}, /* 5x5, stride 3 drops the last rows */
};
static const conv_dims LARGE[] = {
    {{2, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1}, false}, /* basic-block conv */
    {{2, 16, 8, 8, 32, 3, 3, 2, 2, 1, 1}, true},  /* downsampling conv */
    {{2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0}, false}, /* downsampling shortcut */
    {{2, 3, 8, 8, 16, 3, 3, 1, 1, 1, 1}, false},  /* CIFAR stem */
};
enum { LARGE_SAMPLES = 48 };

/* ---- a case: inputs in float and double, the reference output and sampled differences ------- */

typedef enum { T_INP, T_W, T_BIAS, T_NTENSORS } tensor;
static const char *TENSOR_NAMES[T_NTENSORS] = {"dinp", "dw", "dbias"};

typedef struct {
    size_t n, count;
    size_t *idx;
    double *fd;
} fd_sample;

typedef struct {
    conv_dims d;
    int OH, OW;
    size_t n_out;
    float *x[T_NTENSORS], *r;
    double *x64[T_NTENSORS], *r64, *ref;
    fd_sample fd[T_NTENSORS];
} conv_case;

static size_t tensor_size(const conv_dims *d, tensor t) {
    const sdp_conv_shape *s = &d->s;
    switch (t) {
    case T_INP:
        return (size_t)s->B * s->IC * s->H * s->W;
    case T_W:
        return (size_t)s->OC * s->IC * s->KH * s->KW;
    default:
        return (size_t)s->OC;
    }
}

/* y[b, o, oy, ox] in double, zeros outside the input. */
static double ref_point(const conv_case *c, int b, int o, int oy, int ox) {
    const sdp_conv_shape *s = &c->d.s;
    const double *x = c->x64[T_INP], *w = c->x64[T_W];
    double acc = c->d.with_bias ? c->x64[T_BIAS][o] : 0.0;
    for (int ic = 0; ic < s->IC; ic++)
        for (int i = 0; i < s->KH; i++)
            for (int j = 0; j < s->KW; j++) {
                int iy = oy * s->stride_h - s->pad_h + i, ix = ox * s->stride_w - s->pad_w + j;
                if (iy < 0 || iy >= s->H || ix < 0 || ix >= s->W) continue;
                acc += w[((o * s->IC + ic) * s->KH + i) * s->KW + j] *
                       x[(((size_t)b * s->IC + ic) * s->H + iy) * s->W + ix];
            }
    return acc;
}

static void ref_forward(const conv_case *c, double *out) {
    const sdp_conv_shape *s = &c->d.s;
    size_t k = 0;
    for (int b = 0; b < s->B; b++)
        for (int o = 0; o < s->OC; o++)
            for (int oy = 0; oy < c->OH; oy++)
                for (int ox = 0; ox < c->OW; ox++) out[k++] = ref_point(c, b, o, oy, ox);
}

static double ref_loss(const double *x, void *ctx) {
    (void)x; /* the perturbed coordinate is inside one of the case's double tensors */
    const conv_case *c = ctx;
    const sdp_conv_shape *s = &c->d.s;
    double loss = 0;
    size_t k = 0;
    for (int b = 0; b < s->B; b++)
        for (int o = 0; o < s->OC; o++)
            for (int oy = 0; oy < c->OH; oy++)
                for (int ox = 0; ox < c->OW; ox++) loss += c->r64[k++] * ref_point(c, b, o, oy, ox);
    return loss;
}

/* The loss is linear in each tensor, so central differences are exact up to rounding. */
static fd_sample sample_fd(conv_case *c, tensor t, size_t max_samples) {
    fd_sample f = {.n = tensor_size(&c->d, t)};
    f.count = f.n < max_samples ? f.n : max_samples;
    f.idx = malloc(f.count * sizeof(size_t));
    f.fd = malloc(f.count * sizeof(double));
    for (size_t k = 0; k < f.count; k++) {
        f.idx[k] = f.count == f.n ? k : (k * 7919) % f.n; /* spread out, not a regular stride */
        tu_fd_grad(ref_loss, c->x64[t] + f.idx[k], 1, c, 1e-3, &f.fd[k]);
    }
    return f;
}

static conv_case make_case(const conv_dims *d, size_t max_samples, uint64_t seed) {
    conv_case c = {.d = *d};
    const sdp_conv_shape *s = &d->s;
    c.OH = (s->H + 2 * s->pad_h - s->KH) / s->stride_h + 1;
    c.OW = (s->W + 2 * s->pad_w - s->KW) / s->stride_w + 1;
    c.n_out = (size_t)s->B * s->OC * c.OH * c.OW;
    sdp_rng rng = sdp_rng_make(seed, 0);
    for (int t = 0; t < T_NTENSORS; t++) {
        size_t n = tensor_size(d, t);
        c.x[t] = malloc(n * sizeof(float));
        c.x64[t] = malloc(n * sizeof(double));
        tu_fill(c.x[t], n, &rng, t == T_W ? 0.3f : 1.0f);
        tu_to_double(c.x64[t], c.x[t], n);
    }
    c.r = malloc(c.n_out * sizeof(float));
    c.r64 = malloc(c.n_out * sizeof(double));
    c.ref = malloc(c.n_out * sizeof(double));
    tu_fill(c.r, c.n_out, &rng, 1.0f);
    tu_to_double(c.r64, c.r, c.n_out);
    ref_forward(&c, c.ref);
    for (int t = 0; t < T_NTENSORS; t++)
        if (t != T_BIAS || d->with_bias) c.fd[t] = sample_fd(&c, t, max_samples);
    return c;
}

static void free_case(conv_case *c) {
    for (int t = 0; t < T_NTENSORS; t++) {
        free(c->x[t]), free(c->x64[t]);
        free(c->fd[t].idx), free(c->fd[t].fd);
    }
    free(c->r), free(c->r64), free(c->ref);
}

/* ---- checks of one implementation ---------------------------------------------------------- */

static float *alloc_floats(size_t n, float fill) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes > 0 ? bytes : 64);
    for (size_t i = 0; i < n; i++) p[i] = fill;
    return p;
}

static float *prefilled(size_t n, uint64_t seed) {
    sdp_rng rng = sdp_rng_make(seed, 1);
    float *p = alloc_floats(n, 0.0f);
    tu_fill(p, n, &rng, 1.0f);
    return p;
}

/* |got - before - fd| / (atol + rtol |fd|) at the sampled coordinates; <= 1 passes. */
static double grad_err(tensor t, const float *got, const float *before, const fd_sample *f) {
    double worst = 0;
    for (size_t k = 0; k < f->count; k++) {
        size_t i = f->idx[k];
        double analytic = (double)got[i] - (double)before[i];
        double e = fabs(analytic - f->fd[k]) / (1e-4 + 1e-4 * fabs(f->fd[k]));
        if (isnan(e)) e = INFINITY;
        if (e > 1 && e > worst)
            print_message("%s[%zu]: analytic %.8g, finite differences %.8g\n", TENSOR_NAMES[t], i,
                          analytic, f->fd[k]);
        if (e > worst) worst = e;
    }
    return worst;
}

typedef struct {
    float *g[T_NTENSORS];
} grads;

static grads grads_prefilled(const conv_dims *d) {
    grads g;
    for (int t = 0; t < T_NTENSORS; t++) g.g[t] = prefilled(tensor_size(d, t), 10 + t);
    return g;
}

static void grads_free(grads *g) {
    for (int t = 0; t < T_NTENSORS; t++) free(g->g[t]);
}

static void run_backward(const sdp_backend *cpu, const void *plan, const conv_case *c, grads *g,
                         int mask, float *scratch) {
    float *dbias = c->d.with_bias && (mask & 4) ? g->g[T_BIAS] : NULL;
    sdp_conv2d_bwd(cpu, plan, mask & 1 ? g->g[T_INP] : NULL, mask & 2 ? g->g[T_W] : NULL, dbias,
                   c->r, c->x[T_INP], c->x[T_W], scratch);
}

static void check_impl(const conv_case *c, sdp_conv_algo algo, sdp_gemm_provider gemm) {
    const sdp_backend *cpu = tu_cpu(gemm);
    void *plan = sdp_conv_plan_create(cpu, &c->d.s, algo);
    /* NaN scratch: any read of scratch that was not written first shows up in the results. */
    size_t nscratch = sdp_conv_scratch_bytes(cpu, plan) / sizeof(float);
    float *scratch = alloc_floats(nscratch, NAN);

    float *out = alloc_floats(c->n_out, NAN); /* output only: stale contents must not leak */
    const float *bias = c->d.with_bias ? c->x[T_BIAS] : NULL;
    sdp_conv2d_fwd(cpu, plan, out, c->x[T_INP], c->x[T_W], bias, scratch);
    assert_true(tu_err_ratio(out, c->ref, c->n_out, 1e-4, 1e-4) <= 1);

    grads before = grads_prefilled(&c->d), got = grads_prefilled(&c->d);
    run_backward(cpu, plan, c, &got, 7, scratch);
    for (int t = 0; t < T_NTENSORS; t++)
        if (t != T_BIAS || c->d.with_bias)
            assert_true(grad_err(t, got.g[t], before.g[t], &c->fd[t]) <= 1);

    /* Any subset of gradients, and the same call again: the given ones match the full call
     * bitwise and the others are untouched. Fresh NaN scratch each time, so that nothing left
     * there by an earlier call can stand in for work this call skipped. */
    for (int mask = 0; mask < 8; mask++) {
        grads g = grads_prefilled(&c->d);
        for (size_t i = 0; i < nscratch; i++) scratch[i] = NAN;
        run_backward(cpu, plan, c, &g, mask, scratch);
        for (int t = 0; t < T_NTENSORS; t++) {
            bool given = (mask >> t) & 1 && (t != T_BIAS || c->d.with_bias);
            assert_memory_equal(g.g[t], given ? got.g[t] : before.g[t],
                                tensor_size(&c->d, t) * sizeof(float));
        }
        grads_free(&g);
    }
    grads_free(&before), grads_free(&got);
    free(out), free(scratch);
    sdp_conv_plan_free(cpu, plan);
}

/* Each algorithm on 1 and 2 threads; im2col with one GEMM provider per thread count. */
static void check_case(const conv_dims *d, size_t max_samples, uint64_t seed) {
    conv_case c = make_case(d, max_samples, seed);
    for (int threads = 1; threads <= 2; threads++) {
        sdp_set_threads(threads);
        check_impl(&c, SDP_CONV_DNNL, SDP_GEMM_DNNL);
        check_impl(&c, SDP_CONV_IM2COL, threads == 1 ? SDP_GEMM_DNNL : SDP_GEMM_OPENBLAS);
    }
    free_case(&c);
}

static void test_conv_small(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof SMALL / sizeof SMALL[0]; k++) check_case(&SMALL[k], SIZE_MAX, k);
}

static void test_conv_large(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof LARGE / sizeof LARGE[0]; k++)
        check_case(&LARGE[k], LARGE_SAMPLES, 100 + k);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void plan_too_large_kernel(void *ctx) {
    (void)ctx;
    sdp_conv_plan_create(tu_cpu(SDP_GEMM_DNNL), &(sdp_conv_shape){1, 1, 4, 4, 1, 7, 7, 1, 1, 1, 1},
                         SDP_CONV_DNNL);
}

static void plan_zero_stride(void *ctx) {
    (void)ctx;
    sdp_conv_plan_create(tu_cpu(SDP_GEMM_DNNL), &(sdp_conv_shape){1, 1, 4, 4, 1, 3, 3, 0, 1, 1, 1},
                         SDP_CONV_IM2COL);
}

static void run_under_other_thread_count(void *ctx) {
    sdp_conv_algo algo = *(sdp_conv_algo *)ctx;
    sdp_set_threads(2);
    const sdp_backend *cpu = tu_cpu(SDP_GEMM_DNNL);
    sdp_conv_shape s = {1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1};
    void *plan = sdp_conv_plan_create(cpu, &s, algo);
    float *scratch = alloc_floats(sdp_conv_scratch_bytes(cpu, plan) / sizeof(float), 0.0f);
    float x[50] = {0}, w[36] = {0}, y[50];
    sdp_set_threads(1);
    sdp_conv2d_fwd(cpu, plan, y, x, w, NULL, scratch);
}

static void test_conv_errors(void **state) {
    (void)state;
    tu_expect_fatal(plan_too_large_kernel, NULL, "kernel 7x7 is larger than the padded input 6x6");
    tu_expect_fatal(plan_zero_stride, NULL, "stride (0, 1) must be >= 1");
    for (int a = 0; a < 2; a++) {
        sdp_conv_algo algo = a == 0 ? SDP_CONV_DNNL : SDP_CONV_IM2COL;
        tu_expect_fatal(run_under_other_thread_count, &algo,
                        "made for 2 threads but 1 are set now");
    }
    sdp_conv_algo parsed;
    assert_true(sdp_conv_algo_parse("im2col", &parsed) && parsed == SDP_CONV_IM2COL);
    assert_true(sdp_conv_algo_parse("dnnl", &parsed) && parsed == SDP_CONV_DNNL);
    assert_false(sdp_conv_algo_parse("winograd", &parsed));
    assert_string_equal(sdp_conv_algo_name(SDP_CONV_IM2COL), "im2col");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_small),
        cmocka_unit_test(test_conv_large),
        cmocka_unit_test(test_conv_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
