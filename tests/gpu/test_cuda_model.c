/* The transformer on the CUDA backend against the same model on the CPU backend.
 *
 * (a) Training parity: a small GPT, LLaMA and ViT start from the same parameters and see the same
 *     batches on both backends; five steps of forward, backward and AdamW (sdp_optim on the CPU,
 *     sdp_cuda_adamw_update on the GPU). The losses agree to 1e-4 relative at every step. The
 *     final parameters agree element by element to 1e-5 relative plus 1% of the most a parameter
 *     can move in five steps (5 lr): Adam divides each gradient by its own running magnitude, so
 *     a gradient that rounding alone makes differ in its last bits moves a parameter by a
 *     different fraction of lr. AdamW's eps is 1e-6 rather than 1e-8 so that gradients that are
 *     zero in exact arithmetic (attention's key bias: softmax cancels it) and are pure rounding
 *     noise on both backends stay out of Adam's normalisation instead of becoming steps of +-lr.
 * (b) The SDP invariant on the GPU (tests/test_sdp_forward_equiv.c, with simulated ranks and no
 *     MPI): a worker's compact model computes the loss and gradients of the full model whose
 *     parameters are the compact ones at their global positions and zero elsewhere, for block
 *     and neuron units of a few plans, on gpt, llama and vit. Tolerances as on the CPU: loss 1e-5
 *     relative, gradients 1e-3 relative with a floor of 1e-4 of the largest.
 * (c) bf16 follows fp32: the GPT of (a) on two CUDA backends, fp32 and bf16, from the same
 *     parameters, trained BF16_STEPS steps of AdamW on one fixed batch (so that the loss falls, by
 *     about a quarter): the bf16 loss is within 1e-3 relative of the fp32 loss at every step. A
 *     CPU emulation of the bf16 backend (GEMM operands rounded to nearest bf16, attention by the
 *     same GEMM calls) stayed within 8e-5 of fp32 over these ten steps; bf16 with a wrong layout
 *     or a lost term would not train like fp32 at all.
 *
 * Exits 77 (skipped, for ctest) when there is no CUDA device or no driver. */
#include "../testutil.h"

#include "sdp/backend.h"
#include "sdp/ops_cuda.h"
#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/subnet.h"
#include "sdp/transformer.h"

enum { STEPS = 5, TOKEN_B = 4, TOKEN_T = 32, VOCAB = 100 };
enum { IMG_B = 8, IMG_CH = 3, IMG_SIZE = 16, PATCH = 4, CLASSES = 10 };
enum { IMG_LEN = IMG_CH * IMG_SIZE * IMG_SIZE };
static const float LR = 1e-3f;
static const double LOSS_RTOL = 1e-4;
static const double PARAM_RTOL = 1e-5, PARAM_ATOL_STEPS = 1e-2; /* of STEPS * LR */

/* ---- shared ----------------------------------------------------------------------------------
 */

static sdp_tf_config small_config(sdp_tf_style style) {
    sdp_tf_config c = {.style = style,
                       .n_layer = 2,
                       .n_head = 4,
                       .d_model = 64,
                       .seq_len = TOKEN_T,
                       .vocab = VOCAB,
                       .in_channels = IMG_CH,
                       .image_size = IMG_SIZE,
                       .patch = PATCH,
                       .classes = CLASSES};
    sdp_tf_config_finish(&c);
    return c;
}

/* One batch of either kind, host side. */
typedef struct {
    int tokens[TOKEN_B * TOKEN_T], targets[TOKEN_B * TOKEN_T];
    float images[IMG_B * IMG_LEN];
    int labels[IMG_B];
} batch;

static void random_batch(batch *b, uint64_t seed, int vocab, int classes) {
    sdp_rng r = sdp_rng_make(seed, 5);
    for (int i = 0; i < TOKEN_B * TOKEN_T; i++) {
        b->tokens[i] = (int)sdp_rng_below(&r, (uint64_t)vocab);
        b->targets[i] = (int)sdp_rng_below(&r, (uint64_t)vocab);
    }
    b->targets[3] = -1; /* an ignored target */
    tu_fill(b->images, IMG_B * IMG_LEN, &r, 1.0f);
    for (int i = 0; i < IMG_B; i++) b->labels[i] = (int)sdp_rng_below(&r, (uint64_t)classes);
    b->labels[1] = -1;
}

static double forward(sdp_tf *m, const batch *b, int B, int T) {
    if (m->cfg.style == SDP_STYLE_VIT) return sdp_tf_forward_images(m, b->images, b->labels, B);
    return sdp_tf_forward(m, b->tokens, b->targets, B, T);
}

/* The model's gradients (or parameters), on the host. */
static float *host_copy_of(const sdp_tf *m, const float *buf) {
    float *h = malloc(m->layout.numel * sizeof *h);
    assert_non_null(h);
    m->be->download(m->be, h, buf, m->layout.numel * sizeof *h);
    return h;
}

/* ---- (a) training parity ---------------------------------------------------------------------
 */

/* One segment per tensor, decaying as the layout says (what `sdp train` does by default). */
static sdp_opt_segment *tensor_segments(const sdp_layout *L) {
    sdp_opt_segment *segs = calloc((size_t)L->nparams, sizeof *segs);
    assert_non_null(segs);
    for (int i = 0; i < L->nparams; i++)
        segs[i] = (sdp_opt_segment){L->params[i].offset, L->params[i].numel, L->params[i].decay,
                                    L->params[i].offset, L->params[i].offset};
    return segs;
}

static void check_training(sdp_tf_style style) {
    const sdp_tf_config cfg = small_config(style);
    const bool vit = style == SDP_STYLE_VIT;
    const int B = vit ? IMG_B : TOKEN_B, T = vit ? 1 : TOKEN_T;
    sdp_mem host_mem = {0};
    sdp_backend *cpu = sdp_backend_cpu(SDP_GEMM_DNNL, &host_mem),
                *gpu = sdp_backend_cuda(0, SDP_PRECISION_FP32);
    sdp_tf mc, mg;
    sdp_tf_create(&mc, &cfg, NULL, B, T, SDP_MODEL_TRAIN, cpu);
    sdp_tf_create(&mg, &cfg, NULL, B, T, SDP_MODEL_TRAIN, gpu);
    const size_t n = mc.layout.numel, bytes = n * sizeof(float);
    assert_int_equal(mg.layout.numel, n);
    sdp_layout_init_values(&mc.layout, mc.params, 11);
    gpu->upload(gpu, mg.params, mc.params, bytes);
    float *initial = malloc(bytes);
    assert_non_null(initial);
    memcpy(initial, mc.params, bytes);

    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    oc.eps = 1e-6f;
    sdp_optim opt;
    sdp_optim_init(&opt, &oc, n, &host_mem);
    float *gm = gpu->alloc(gpu, SDP_MEM_OPTIM, bytes), *gv = gpu->alloc(gpu, SDP_MEM_OPTIM, bytes);
    sdp_opt_segment *segs = tensor_segments(&mc.layout);
    const int nseg = mc.layout.nparams;

    double worst_loss = 0;
    for (int step = 0; step < STEPS; step++) {
        batch b;
        random_batch(&b, (uint64_t)step, cfg.vocab, cfg.classes);
        memset(mc.grads, 0, bytes);
        gpu->zero(gpu, mg.grads, bytes);
        const double lc = forward(&mc, &b, B, TOKEN_T), lg = forward(&mg, &b, B, TOKEN_T);
        assert_int_equal(mc.n_targets, mg.n_targets);
        if (vit) assert_int_equal(mc.n_correct, mg.n_correct);
        const double err = fabs(lg - lc) / fabs(lc);
        printf("  %-5s step %d: loss cpu %.9g cuda %.9g (rel err %.2e)\n", sdp_tf_style_name(style),
               step, lc, lg, err);
        if (!(err <= LOSS_RTOL))
            fail_msg("%s: losses differ at step %d", sdp_tf_style_name(style), step);
        if (err > worst_loss) worst_loss = err;
        const float dloss = 1.0f / (float)mc.n_targets;
        sdp_tf_backward(&mc, dloss);
        sdp_tf_backward(&mg, dloss);
        sdp_optim_step(&opt, mc.params, mc.grads, segs, nseg, LR);
        sdp_cuda_adamw_update(gpu->ctx, &oc, opt.t, gm, gv, mg.params, mg.grads, segs, nseg, LR);
    }

    float *pg = host_copy_of(&mg, mg.params);
    const double atol = PARAM_ATOL_STEPS * STEPS * LR;
    const double ratio = tu_err_ratio_ff(pg, mc.params, n, atol, PARAM_RTOL);
    double moved = 0;
    for (size_t i = 0; i < n; i++) moved = fmax(moved, fabs((double)mc.params[i] - initial[i]));
    printf("  %-5s %zu params: worst loss error %.2e; final parameters: worst error %.3g of the "
           "tolerance (%.1e + %.0e relative), largest move %.2e\n",
           sdp_tf_style_name(style), n, worst_loss, ratio, atol, PARAM_RTOL, moved);
    assert_true(moved > 0.5 * LR); /* the optimizer did move them */
    if (!(ratio <= 1)) {
        for (size_t i = 0; i < n; i++)
            if (fabs((double)pg[i] - mc.params[i]) > atol + PARAM_RTOL * fabs(mc.params[i])) {
                fail_msg("parameter %zu: cpu %.9g cuda %.9g", i, (double)mc.params[i],
                         (double)pg[i]);
            }
    }

    free(pg);
    free(initial);
    free(segs);
    gpu->free(gpu, gm);
    gpu->free(gpu, gv);
    sdp_optim_free(&opt, &host_mem);
    sdp_tf_destroy(&mg);
    sdp_tf_destroy(&mc);
    for (int k = 0; k < SDP_MEM_NCAT; k++)
        if (k != SDP_MEM_SCRATCH) assert_int_equal(gpu->mem->cur[k], 0); /* all freed */
    sdp_backend_destroy(gpu);
    sdp_backend_destroy(cpu);
}

static void test_gpt_training(void **state) {
    (void)state;
    check_training(SDP_STYLE_GPT);
}

static void test_llama_training(void **state) {
    (void)state;
    check_training(SDP_STYLE_LLAMA);
}

static void test_vit_training(void **state) {
    (void)state;
    check_training(SDP_STYLE_VIT);
}

/* ---- (b) forward-masking equivalence on the GPU ----------------------------------------------
 */

enum { EQ_B = 2, EQ_T = 8 };
static const double EQ_LOSS_RTOL = 1e-5, EQ_GRAD_RTOL = 1e-3, EQ_GRAD_ATOL_REL = 1e-4;

/* Twelve heads of size 2 and 48 MLP neurons, three layers, as on the CPU. */
static sdp_tf_config equiv_config(sdp_tf_style style) {
    sdp_tf_config c = {.style = style,
                       .n_layer = 3,
                       .n_head = 12,
                       .d_model = 24,
                       .d_ff = 48,
                       .seq_len = EQ_T,
                       .vocab = 40,
                       .in_channels = 2,
                       .image_size = 8,
                       .patch = 2,
                       .classes = 5};
    sdp_tf_config_finish(&c);
    return c;
}

typedef struct {
    sdp_tf_style style;
    sdp_unit_kind unit;
    int world, owners, rank;
} equiv_case;

static void check_equiv(sdp_backend *gpu, const equiv_case *c, uint64_t seed) {
    sdp_tf_config cfg = equiv_config(c->style);
    sdp_tf_shape full_shape;
    sdp_tf_shape_full(&full_shape, &cfg);
    sdp_layout full;
    sdp_tf_describe(&full, &cfg, &full_shape);
    sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                       .unit = c->unit,
                       .assign = SDP_ASSIGN_RANDOM,
                       .scale = SDP_SCALE_INVERSE,
                       .world = c->world,
                       .owners = c->owners,
                       .seed = 9};
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &plan, &full, c->rank);
    sdp_tf_shape shape;
    sdp_tf_shape_from_keep(&shape, &cfg, spec.nblocks, spec.keep,
                           (const int(*)[SDP_MAX_GROUPS])spec.kept, spec.scale);
    sdp_tf compact, whole;
    sdp_tf_create(&compact, &cfg, &shape, EQ_B, EQ_T, SDP_MODEL_TRAIN, gpu);
    for (int l = 0; l < full_shape.n_layer; l++) full_shape.branch_scale[l] = spec.scale[l];
    sdp_tf_create(&whole, &cfg, &full_shape, EQ_B, EQ_T, SDP_MODEL_TRAIN, gpu);
    sdp_subnet_map map;
    sdp_subnet_map_build(&map, &full, &compact.layout, &plan, c->rank, true);

    /* Parameters made on the host: random compact ones, and the full model's from them. */
    const size_t nc = compact.layout.numel, nf = whole.layout.numel;
    float *pc_host = malloc(nc * sizeof(float)), *pf_host = calloc(nf, sizeof(float));
    assert_true(pc_host && pf_host);
    sdp_rng rng = sdp_rng_make(77, seed);
    tu_fill(pc_host, nc, &rng, 0.3f);
    for (int i = 0; i < map.nruns; i++)
        memcpy(pf_host + map.runs[i].global, pc_host + map.runs[i].local,
               map.runs[i].len * sizeof(float));
    gpu->upload(gpu, compact.params, pc_host, nc * sizeof(float));
    gpu->upload(gpu, whole.params, pf_host, nf * sizeof(float));

    batch b;
    random_batch(&b, seed, cfg.vocab, cfg.classes);
    const int B = EQ_B;
    const double lc = forward(&compact, &b, B, EQ_T), lf = forward(&whole, &b, B, EQ_T);
    gpu->zero(gpu, compact.grads, nc * sizeof(float));
    gpu->zero(gpu, whole.grads, nf * sizeof(float));
    sdp_tf_backward(&compact, 1.0f / (B * EQ_T));
    sdp_tf_backward(&whole, 1.0f / (B * EQ_T));
    float *gc = host_copy_of(&compact, compact.grads), *gf = host_copy_of(&whole, whole.grads);
    float *want = malloc(nc * sizeof(float));
    assert_non_null(want);
    for (int i = 0; i < map.nruns; i++)
        memcpy(want + map.runs[i].local, gf + map.runs[i].global, map.runs[i].len * sizeof(float));
    double scale = 0;
    for (size_t e = 0; e < nc; e++) scale = fmax(scale, fabs((double)want[e]));
    const double loss_err = fabs(lc - lf) / fabs(lf);
    const double grad_ratio = tu_err_ratio_ff(gc, want, nc, EQ_GRAD_ATOL_REL * scale, EQ_GRAD_RTOL);
    printf("  %-5s %-6s N=%d k=%d rank %d: %zu of %zu params; loss rel err %.2e, gradient error "
           "%.3g of the tolerance\n",
           sdp_tf_style_name(c->style), sdp_unit_kind_name(c->unit), c->world, c->owners, c->rank,
           nc, nf, loss_err, grad_ratio);
    assert_true(scale > 0);
    assert_true(loss_err <= EQ_LOSS_RTOL);
    assert_true(grad_ratio <= 1);

    free(want);
    free(gc);
    free(gf);
    free(pc_host);
    free(pf_host);
    sdp_subnet_map_free(&map);
    sdp_tf_destroy(&whole);
    sdp_tf_destroy(&compact);
    sdp_tf_shape_free(&shape);
    sdp_subnet_spec_free(&spec);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
    sdp_tf_shape_free(&full_shape);
}

static void test_forward_masking_equivalence(void **state) {
    (void)state;
    sdp_backend *gpu = sdp_backend_cuda(0, SDP_PRECISION_FP32);
    const equiv_case cases[] = {
        {SDP_STYLE_GPT, SDP_UNIT_BLOCK, 4, 2, 1},   {SDP_STYLE_GPT, SDP_UNIT_NEURON, 3, 1, 2},
        {SDP_STYLE_LLAMA, SDP_UNIT_BLOCK, 2, 1, 0}, {SDP_STYLE_LLAMA, SDP_UNIT_NEURON, 4, 3, 3},
        {SDP_STYLE_VIT, SDP_UNIT_BLOCK, 3, 2, 1},   {SDP_STYLE_VIT, SDP_UNIT_NEURON, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_equiv(gpu, &cases[i], i);
    sdp_backend_destroy(gpu);
}

/* ---- (c) bf16 follows fp32 -------------------------------------------------------------------
 */

enum { BF16_STEPS = 10 };
static const double BF16_LOSS_RTOL = 1e-3;

static void test_gpt_bf16_follows_fp32(void **state) {
    (void)state;
    const sdp_tf_config cfg = small_config(SDP_STYLE_GPT);
    sdp_backend *be[2] = {sdp_backend_cuda(0, SDP_PRECISION_FP32),
                          sdp_backend_cuda(0, SDP_PRECISION_BF16)};
    sdp_tf m[2];
    float *om[2], *ov[2];
    float *initial = NULL;
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    oc.eps = 1e-6f; /* as in (a) */
    for (int k = 0; k < 2; k++) {
        sdp_tf_create(&m[k], &cfg, NULL, TOKEN_B, TOKEN_T, SDP_MODEL_TRAIN, be[k]);
        const size_t bytes = m[k].layout.numel * sizeof(float);
        if (!initial) {
            initial = malloc(bytes);
            assert_non_null(initial);
            sdp_layout_init_values(&m[k].layout, initial, 11);
        }
        be[k]->upload(be[k], m[k].params, initial, bytes);
        om[k] = be[k]->alloc(be[k], SDP_MEM_OPTIM, bytes);
        ov[k] = be[k]->alloc(be[k], SDP_MEM_OPTIM, bytes);
    }
    sdp_opt_segment *segs = tensor_segments(&m[0].layout);
    batch b;
    random_batch(&b, 0, cfg.vocab, cfg.classes);
    double first = 0, loss[2] = {0, 0}, worst = 0;
    for (int step = 0; step < BF16_STEPS; step++) {
        for (int k = 0; k < 2; k++) {
            be[k]->zero(be[k], m[k].grads, m[k].layout.numel * sizeof(float));
            loss[k] = forward(&m[k], &b, TOKEN_B, TOKEN_T) / m[k].n_targets;
            sdp_tf_backward(&m[k], 1.0f / (float)m[k].n_targets);
            sdp_cuda_adamw_update(be[k]->ctx, &oc, step + 1, om[k], ov[k], m[k].params, m[k].grads,
                                  segs, m[k].layout.nparams, LR);
        }
        const double err = fabs(loss[1] - loss[0]) / loss[0];
        printf("  gpt   step %d: loss fp32 %.7f bf16 %.7f (rel diff %.2e, tol %.0e)\n", step,
               loss[0], loss[1], err, BF16_LOSS_RTOL);
        if (!(err <= BF16_LOSS_RTOL)) fail_msg("bf16 loss left fp32's at step %d", step);
        if (step == 0) first = loss[0];
        if (err > worst) worst = err;
    }
    printf("  gpt   bf16 against fp32 over %d steps: worst rel diff %.2e; fp32 loss %.4f -> %.4f\n",
           BF16_STEPS, worst, first, loss[0]);
    assert_true(loss[0] < 0.9 * first); /* the steps did train, so following them means something */

    free(segs);
    free(initial);
    for (int k = 0; k < 2; k++) {
        be[k]->free(be[k], om[k]);
        be[k]->free(be[k], ov[k]);
        sdp_tf_destroy(&m[k]);
        sdp_backend_destroy(be[k]);
    }
}

int main(void) {
    if (!sdp_backend_cuda_available()) {
        printf("test_cuda_model: skipped: no CUDA device (or no working driver)\n");
        return 77;
    }
    sdp_set_threads(1); /* the CPU reference's GEMMs are tiny */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_training),
        cmocka_unit_test(test_llama_training),
        cmocka_unit_test(test_vit_training),
        cmocka_unit_test(test_forward_masking_equivalence),
        cmocka_unit_test(test_gpt_bf16_follows_fp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
