/* AdamW and SGD against double-precision references that follow the PyTorch update rules
 * literally, plus the segment contract (untouched gaps, per-segment decay), AdamW bias
 * correction, configuration checks and memory accounting. */
#include "testutil.h"

#include "sdp/optim.h"

#include <stdbool.h>

/* Buffer layout shared by the tests: three segments (two decaying) with untouched gaps between
 * and after them; the first two are long enough to take the multithreaded path. */
enum { N = 70000, NSEG = 3, NSTEPS = 6 };
static const sdp_opt_segment SEGS[NSEG] = {
    {.offset = 0, .count = 30000, .decay = true, .grad_offset = 0, .state_offset = 0},
    {.offset = 30500, .count = 20000, .decay = false, .grad_offset = 30500, .state_offset = 30500},
    {.offset = 50500, .count = 18500, .decay = true, .grad_offset = 50500, .state_offset = 50500},
};
/* Gaps: [30000, 30500) and [69000, 70000). */
static const size_t GAP_LO[2] = {30000, 69000}, GAP_HI[2] = {30500, 70000};

static const float LRS[NSTEPS] = {1e-3f, 3e-3f, 2e-3f, 5e-4f, 1e-2f, 1e-3f};

static void ref_adamw_step(double *p, double *m, double *v, const float *g, long t, double lr,
                           const sdp_opt_cfg *c) {
    double b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->weight_decay;
    for (int s = 0; s < NSEG; s++) {
        for (size_t i = SEGS[s].offset; i < SEGS[s].offset + SEGS[s].count; i++) {
            if (SEGS[s].decay) p[i] -= lr * wd * p[i];
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
            double mhat = m[i] / (1 - pow(b1, (double)t));
            double vhat = v[i] / (1 - pow(b2, (double)t));
            p[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
}

static void ref_sgd_step(double *p, double *buf, const float *g, long t, double lr,
                         const sdp_opt_cfg *c) {
    double mu = c->momentum, wd = c->weight_decay;
    for (int s = 0; s < NSEG; s++) {
        for (size_t i = SEGS[s].offset; i < SEGS[s].offset + SEGS[s].count; i++) {
            double gi = g[i] + (SEGS[s].decay ? wd * p[i] : 0.0);
            double update = gi;
            if (mu != 0) {
                buf[i] = t == 1 ? gi : mu * buf[i] + gi;
                update = c->nesterov ? gi + mu * buf[i] : buf[i];
            }
            p[i] -= lr * update;
        }
    }
}

static bool gaps_equal(const float *a, const float *b) {
    for (int k = 0; k < 2; k++)
        if (memcmp(a + GAP_LO[k], b + GAP_LO[k], (GAP_HI[k] - GAP_LO[k]) * sizeof(float)))
            return false;
    return true;
}

/* Starts the state from noise rather than zeros: a kernel writing into a gap is then caught, the
 * beta * state terms matter from the first step, and SGD must ignore the buffer on its first
 * step (torch creates it from the gradient). */
static void fill_state(float *state, sdp_rng *r, bool positive) {
    if (!state) return;
    for (size_t i = 0; i < N; i++) {
        float x = 0.1f * sdp_rng_normal(r);
        state[i] = positive ? x * x : x;
    }
}

/* Runs NSTEPS of the optimizer and of the reference from the same start with fresh random
 * gradients each step, then compares params and state and checks the gaps bitwise. */
static void run_against_reference(const sdp_opt_cfg *cfg, uint64_t seed) {
    sdp_rng r = sdp_rng_make(seed, 0);
    sdp_mem mem = {0};
    sdp_optim o;
    sdp_optim_init(&o, cfg, N, &mem);
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *p0 = malloc(N * sizeof(float)), *m0 = calloc(N, sizeof(float)),
          *v0 = calloc(N, sizeof(float));
    double *rp = malloc(N * sizeof(double)), *rm = calloc(N, sizeof(double)),
           *rv = calloc(N, sizeof(double));
    tu_fill(p, N, &r, 1.0f);
    fill_state(o.m, &r, false);
    fill_state(o.v, &r, true);
    memcpy(p0, p, N * sizeof(float));
    if (o.m) memcpy(m0, o.m, N * sizeof(float));
    if (o.v) memcpy(v0, o.v, N * sizeof(float));
    tu_to_double(rp, p, N);
    tu_to_double(rm, m0, N);
    tu_to_double(rv, v0, N);

    for (int step = 0; step < NSTEPS; step++) {
        tu_fill(g, N, &r, 0.1f);
        sdp_optim_step(&o, p, g, SEGS, NSEG, LRS[step]);
        if (cfg->kind == SDP_OPT_ADAMW)
            ref_adamw_step(rp, rm, rv, g, step + 1, LRS[step], cfg);
        else
            ref_sgd_step(rp, rm, g, step + 1, LRS[step], cfg);
    }
    assert_int_equal(o.t, NSTEPS);
    double err = tu_err_ratio(p, rp, N, 1e-6, 1e-6);
    if (err > 1) print_error("params error ratio %g\n", err);
    assert_true(err <= 1);
    if (o.m) {
        err = tu_err_ratio(o.m, rm, N, 1e-7, 1e-6);
        if (err > 1) print_error("first moment / buffer error ratio %g\n", err);
        assert_true(err <= 1);
        assert_true(gaps_equal(o.m, m0));
    }
    if (o.v) {
        err = tu_err_ratio(o.v, rv, N, 1e-10, 1e-6);
        if (err > 1) print_error("second moment error ratio %g\n", err);
        assert_true(err <= 1);
        assert_true(gaps_equal(o.v, v0));
    }
    assert_true(gaps_equal(p, p0));

    sdp_optim_free(&o, &mem);
    assert_int_equal(mem.cur[SDP_MEM_OPTIM], 0);
    free(p), free(g), free(p0), free(m0), free(v0), free(rp), free(rm), free(rv);
}

static void test_adamw_matches_reference(void **state) {
    (void)state;
    sdp_opt_cfg cfg = sdp_opt_defaults(SDP_OPT_ADAMW);
    run_against_reference(&cfg, 1);
    cfg.weight_decay = 0.0f;
    cfg.beta2 = 0.999f;
    run_against_reference(&cfg, 2);
}

static void test_sgd_matches_reference(void **state) {
    (void)state;
    sdp_opt_cfg cfg = sdp_opt_defaults(SDP_OPT_SGD);
    const float momenta[] = {0.0f, 0.9f};
    const float decays[] = {0.0f, 5e-2f};
    uint64_t seed = 10;
    for (int mi = 0; mi < 2; mi++)
        for (int di = 0; di < 2; di++)
            for (int nesterov = 0; nesterov <= (momenta[mi] > 0); nesterov++) {
                cfg.momentum = momenta[mi];
                cfg.weight_decay = decays[di];
                cfg.nesterov = nesterov;
                run_against_reference(&cfg, seed++);
            }
}

/* At t = 1, mhat = g and vhat = g^2, so each parameter moves by lr * g / (|g| + eps): almost
 * exactly lr. Without bias correction the move would be (1-b1)/sqrt(1-b2) lr, about 0.45 lr. */
static void test_adamw_first_step_moves_by_lr(void **state) {
    (void)state;
    enum { n = 4096 };
    sdp_opt_cfg cfg = sdp_opt_defaults(SDP_OPT_ADAMW);
    cfg.weight_decay = 0.0f;
    sdp_mem mem = {0};
    sdp_optim o;
    sdp_optim_init(&o, &cfg, n, &mem);
    float *p = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));
    sdp_rng r = sdp_rng_make(3, 0);
    for (size_t i = 0; i < n; i++)
        g[i] = (sdp_rng_uniform(&r) < 0.5f ? -1.0f : 1.0f) * (0.01f + sdp_rng_uniform(&r));
    const float lr = 1e-3f;
    sdp_opt_segment all = {
        .offset = 0, .count = n, .decay = true, .grad_offset = 0, .state_offset = 0};
    sdp_optim_step(&o, p, g, &all, 1, lr);
    for (size_t i = 0; i < n; i++) {
        double expected = g[i] > 0 ? -lr : lr;
        assert_true(fabs(p[i] - expected) <= 1e-5 * lr);
    }
    sdp_optim_free(&o, &mem);
    free(p), free(g);
}

/* With zero gradients only weight decay moves parameters, so decaying segments shrink by exactly
 * (1 - lr*wd) and the others stay bitwise equal. */
static void test_decay_only_where_segment_decays(void **state) {
    (void)state;
    const sdp_opt_kind kinds[] = {SDP_OPT_ADAMW, SDP_OPT_SGD};
    for (int k = 0; k < 2; k++) {
        sdp_opt_cfg cfg = sdp_opt_defaults(kinds[k]);
        cfg.weight_decay = 0.3f;
        sdp_mem mem = {0};
        sdp_optim o;
        sdp_optim_init(&o, &cfg, N, &mem);
        float *p = malloc(N * sizeof(float)), *p0 = malloc(N * sizeof(float));
        float *g = calloc(N, sizeof(float));
        sdp_rng r = sdp_rng_make(4, (uint64_t)k);
        tu_fill(p, N, &r, 1.0f);
        memcpy(p0, p, N * sizeof(float));
        const float lr = 0.1f;
        sdp_optim_step(&o, p, g, SEGS, NSEG, lr);
        for (int s = 0; s < NSEG; s++) {
            const float *a = p + SEGS[s].offset, *b = p0 + SEGS[s].offset;
            size_t c = SEGS[s].count;
            if (!SEGS[s].decay) {
                assert_memory_equal(a, b, c * sizeof(float));
                continue;
            }
            for (size_t i = 0; i < c; i++) {
                double expected = (double)b[i] * (1.0 - (double)lr * cfg.weight_decay);
                assert_true(fabs(a[i] - expected) <= 1e-6 * fabs(expected) + 1e-12);
            }
        }
        assert_true(gaps_equal(p, p0));
        sdp_optim_free(&o, &mem);
        free(p), free(p0), free(g);
    }
}

static void test_state_memory_is_accounted(void **state) {
    (void)state;
    sdp_opt_cfg adamw = sdp_opt_defaults(SDP_OPT_ADAMW);
    sdp_opt_cfg sgd = sdp_opt_defaults(SDP_OPT_SGD);
    sdp_opt_cfg plain = sgd;
    plain.momentum = 0.0f;
    assert_int_equal(sdp_optim_state_bytes_per_param(&adamw), 8);
    assert_int_equal(sdp_optim_state_bytes_per_param(&sgd), 4);
    assert_int_equal(sdp_optim_state_bytes_per_param(&plain), 0);
    const sdp_opt_cfg *cfgs[] = {&adamw, &sgd, &plain};
    for (int k = 0; k < 3; k++) {
        sdp_mem mem = {0};
        sdp_optim o;
        const size_t n = 12345;
        sdp_optim_init(&o, cfgs[k], n, &mem);
        assert_int_equal(mem.cur[SDP_MEM_OPTIM], n * sdp_optim_state_bytes_per_param(cfgs[k]));
        assert_int_equal(mem.total_cur, mem.cur[SDP_MEM_OPTIM]);
        sdp_optim_free(&o, &mem);
        assert_int_equal(mem.cur[SDP_MEM_OPTIM], 0);
        assert_int_equal(mem.nallocs, 0);
    }
}

static void test_defaults(void **state) {
    (void)state;
    sdp_opt_cfg a = sdp_opt_defaults(SDP_OPT_ADAMW);
    assert_int_equal(a.kind, SDP_OPT_ADAMW);
    assert_true(a.beta1 == 0.9f && a.beta2 == 0.95f && a.eps == 1e-8f && a.weight_decay == 0.1f);
    sdp_opt_cfg s = sdp_opt_defaults(SDP_OPT_SGD);
    assert_int_equal(s.kind, SDP_OPT_SGD);
    assert_true(s.momentum == 0.9f && !s.nesterov && s.weight_decay == 5e-4f);
}

static void init_with(void *ctx) {
    sdp_mem mem = {0};
    sdp_optim o;
    sdp_optim_init(&o, ctx, 16, &mem);
}

static void test_bad_config_fails_clearly(void **state) {
    (void)state;
    sdp_opt_cfg c = sdp_opt_defaults(SDP_OPT_SGD);
    c.momentum = 0.0f;
    c.nesterov = true;
    tu_expect_fatal(init_with, &c, "nesterov needs momentum > 0");
    c = sdp_opt_defaults(SDP_OPT_ADAMW);
    c.beta2 = 1.0f;
    tu_expect_fatal(init_with, &c, "beta2 1 is outside [0, 1)");
    c = sdp_opt_defaults(SDP_OPT_ADAMW);
    c.weight_decay = -0.1f;
    tu_expect_fatal(init_with, &c, "weight decay -0.1 is invalid");
    c = sdp_opt_defaults(SDP_OPT_ADAMW);
    c.eps = 0.0f;
    tu_expect_fatal(init_with, &c, "eps 0 is invalid");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_matches_reference),
        cmocka_unit_test(test_sgd_matches_reference),
        cmocka_unit_test(test_adamw_first_step_moves_by_lr),
        cmocka_unit_test(test_decay_only_where_segment_decays),
        cmocka_unit_test(test_state_memory_is_accounted),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad_config_fails_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
