/* The transformer on the CUDA backend against the same model on the CPU backend.
 *
 * (a) Training parity: a small GPT, LLaMA and ViT start from the same parameters and see the same
 *     batches on both backends; five steps of forward, backward and AdamW (sdp_optim on the CPU,
 *     sdp_adamw_update on the GPU). The losses agree to 1e-4 relative at every step. The
 *     final parameters agree element by element to 1e-5 relative plus 1% of the most a parameter
 *     can move in five steps (5 lr): Adam divides each gradient by its own running magnitude, so
 *     a gradient that rounding alone makes differ in its last bits moves a parameter by a
 *     different fraction of lr. AdamW's eps is 1e-6 rather than 1e-8 so that gradients that are
 *     zero in exact arithmetic (attention's key bias: softmax cancels it) and are pure rounding
 *     noise on both backends stay out of Adam's normalisation instead of becoming steps of +-lr.
 *     Once more with dropout (p = 0.2, a new key each step): both backends draw the same masks,
 *     so the same tolerances hold.
 * (b) The SDP invariant on the GPU (tests/test_sdp_forward_equiv.c, with simulated ranks and no
 *     MPI): a worker's compact model computes the loss and gradients of the full model whose
 *     parameters are the compact ones at their global positions and zero elsewhere, for block
 *     and neuron units of a few plans, on gpt, llama and vit. Tolerances as on the CPU: loss 1e-5
 *     relative, gradients 1e-3 relative with a floor of 1e-4 of the largest.
 * (c) bf16 follows fp32: the GPT of (a) on three CUDA backends, fp32, bf16 with the attention's
 *     cuBLAS GEMMs and bf16 with the fused attention (bf16's default), from the same
 *     parameters, trained BF16_STEPS steps of AdamW on one fixed batch (so that the loss falls, by
 *     about a quarter): the bf16 loss is within 1e-3 relative of the fp32 loss at every step. A
 *     CPU emulation of the bf16 backend (GEMM operands rounded to nearest bf16, attention by the
 *     same GEMM calls) stayed within 8e-5 of fp32 over these ten steps; bf16 with a wrong layout
 *     or a lost term would not train like fp32 at all.
 * (d) ResNet training parity: a ResNet-14 (identity and downsampling blocks) at width 8 on
 *     3x16x16 images, from the same parameters and batches on both backends, five steps of
 *     forward (batch statistics), backward and SGD with momentum and weight decay (sdp_optim on
 *     the CPU, the backend's sgd_update on the GPU), then an evaluation forward on the running
 *     statistics. Losses agree to 1e-4 relative and the hit counts exactly; the final parameters
 *     and running statistics to 1e-4 relative plus 1e-3 of the largest move (SGD moves a
 *     parameter in proportion to its gradient, so rounding differences stay proportionate).
 * (e) The ResNet's sliced gradients on the GPU: a compact subnetwork (forward masking, neuron
 *     units, worker 1 of 2) built through the model family with the GPU backend, its gradients
 *     in turn whole, absent and in two owned slices (SDP backward masking), against the same
 *     model on the CPU: loss 1e-5 relative, gradients 1e-3 relative with a floor of 1e-4 of the
 *     largest, running statistics 1e-5 relative.
 *
 * Exits 77 (skipped, for ctest) when there is no CUDA device or no driver. */
#include "../testutil.h"

#include "sdp/sync.h"
#include "sdp/backend.h"
#include "sdp/model.h"
#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/resnet.h"
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
    sdp_tf_config c = {.model = {.layers = 2,
                                 .heads = 4,
                                 .width = 64,
                                 .seq_len = TOKEN_T,
                                 .vocab = VOCAB,
                                 .in_channels = IMG_CH,
                                 .image_size = IMG_SIZE,
                                 .patch = PATCH,
                                 .classes = CLASSES}};
    snprintf(c.model.arch, sizeof c.model.arch, "%s", sdp_tf_style_name(style));
    sdp_tf_config_finish(&c);
    return c;
}

/* One batch of either kind, host side. */
typedef struct {
    int tokens[TOKEN_B * TOKEN_T], targets[TOKEN_B * TOKEN_T];
    float images[IMG_B * IMG_LEN];
    int labels[IMG_B];
} batch;

/* Tokens below the model's vocabulary (vit's: its classes), images, and labels below its classes.
 */
static void random_batch(batch *b, uint64_t seed, const sdp_tf_config *c) {
    const int classes = c->model.classes;
    const int vocab = c->style == SDP_STYLE_VIT ? classes : c->model.vocab;
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

static void check_training(sdp_tf_style style, float dropout) {
    sdp_tf_config cfg = small_config(style);
    cfg.model.dropout = dropout;
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
        random_batch(&b, (uint64_t)step, &cfg);
        memset(mc.grads, 0, bytes);
        gpu->zero(gpu, mg.grads, bytes);
        sdp_tf_set_dropout(&mc, dropout > 0, 0xd0 + (uint64_t)step);
        sdp_tf_set_dropout(&mg, dropout > 0, 0xd0 + (uint64_t)step);
        const double lc = forward(&mc, &b, B, TOKEN_T), lg = forward(&mg, &b, B, TOKEN_T);
        assert_int_equal(mc.n_targets, mg.n_targets);
        if (vit) assert_int_equal(mc.n_correct, mg.n_correct);
        const double err = fabs(lg - lc) / fabs(lc);
        printf("  %-5s dropout %g step %d: loss cpu %.9g cuda %.9g (rel err %.2e)\n",
               sdp_tf_style_name(style), (double)dropout, step, lc, lg, err);
        if (!(err <= LOSS_RTOL))
            fail_msg("%s: losses differ at step %d", sdp_tf_style_name(style), step);
        if (err > worst_loss) worst_loss = err;
        const float dloss = 1.0f / (float)mc.n_targets;
        sdp_tf_backward(&mc, dloss);
        sdp_tf_backward(&mg, dloss);
        sdp_optim_step(&opt, mc.params, mc.grads, segs, nseg, LR);
        const sdp_adamw_scalars k = sdp_adamw_scalars_at(&oc, opt.t, LR); /* the CPU's step's */
        sdp_adamw_update(gpu, &k, gm, gv, mg.params, mg.grads, segs, nseg);
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
    check_training(SDP_STYLE_GPT, 0.0f);
}

static void test_llama_training(void **state) {
    (void)state;
    check_training(SDP_STYLE_LLAMA, 0.0f);
}

static void test_vit_training(void **state) {
    (void)state;
    check_training(SDP_STYLE_VIT, 0.0f);
}

static void test_training_with_dropout(void **state) {
    (void)state;
    check_training(SDP_STYLE_GPT, 0.2f);
    check_training(SDP_STYLE_LLAMA, 0.2f);
    check_training(SDP_STYLE_VIT, 0.2f);
}

/* ---- (b) forward-masking equivalence on the GPU ----------------------------------------------
 */

enum { EQ_B = 2, EQ_T = 8 };
static const double EQ_LOSS_RTOL = 1e-5, EQ_GRAD_RTOL = 1e-3, EQ_GRAD_ATOL_REL = 1e-4;

/* Twelve heads of size 2 and 48 MLP neurons, three layers, as on the CPU. */
static sdp_tf_config equiv_config(sdp_tf_style style) {
    sdp_tf_config c = {.model = {.layers = 3,
                                 .heads = 12,
                                 .width = 24,
                                 .d_ff = 48,
                                 .seq_len = EQ_T,
                                 .vocab = 40,
                                 .in_channels = 2,
                                 .image_size = 8,
                                 .patch = 2,
                                 .classes = 5}};
    snprintf(c.model.arch, sizeof c.model.arch, "%s", sdp_tf_style_name(style));
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
    random_batch(&b, seed, &cfg);
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
    /* fp32; bf16 with the attention's cuBLAS GEMMs; bf16 with the fused attention (its default);
     * and that with the GEMMs on bf16 copies of their operands */
    enum { NB = 4 };
    sdp_backend *be[NB] = {
        sdp_backend_cuda(0, SDP_PRECISION_FP32), sdp_backend_cuda(0, SDP_PRECISION_BF16),
        sdp_backend_cuda(0, SDP_PRECISION_BF16), sdp_backend_cuda(0, SDP_PRECISION_BF16)};
    sdp_backend_cuda_set_fused_attention(be[1], false);
    sdp_backend_cuda_set_fused_attention(be[2], true);
    sdp_backend_cuda_set_bf16_operands(be[3], true);
    sdp_tf m[NB];
    float *om[NB], *ov[NB];
    float *initial = NULL;
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    oc.eps = 1e-6f; /* as in (a) */
    for (int k = 0; k < NB; k++) {
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
    random_batch(&b, 0, &cfg);
    double first = 0, loss[NB] = {0}, worst = 0;
    for (int step = 0; step < BF16_STEPS; step++) {
        for (int k = 0; k < NB; k++) {
            be[k]->zero(be[k], m[k].grads, m[k].layout.numel * sizeof(float));
            loss[k] = forward(&m[k], &b, TOKEN_B, TOKEN_T) / m[k].n_targets;
            sdp_tf_backward(&m[k], 1.0f / (float)m[k].n_targets);
            const sdp_adamw_scalars ks = sdp_adamw_scalars_at(&oc, step + 1, LR);
            sdp_adamw_update(be[k], &ks, om[k], ov[k], m[k].params, m[k].grads, segs,
                             m[k].layout.nparams);
        }
        const double err = fabs(loss[1] - loss[0]) / loss[0],
                     err_fused = fabs(loss[2] - loss[0]) / loss[0],
                     err_operands = fabs(loss[3] - loss[0]) / loss[0];
        printf("  gpt   step %d: loss fp32 %.7f bf16 GEMM attention %.7f, fused %.7f, bf16 "
               "operands %.7f (rel diff %.2e, %.2e, %.2e; tol %.0e)\n",
               step, loss[0], loss[1], loss[2], loss[3], err, err_fused, err_operands,
               BF16_LOSS_RTOL);
        if (!(err <= BF16_LOSS_RTOL))
            fail_msg("bf16 loss (GEMM attention) left fp32's at step %d", step);
        if (!(err_fused <= BF16_LOSS_RTOL))
            fail_msg("bf16 loss with the fused attention left fp32's at step %d", step);
        if (!(err_operands <= BF16_LOSS_RTOL))
            fail_msg("bf16 loss with bf16 GEMM operands left fp32's at step %d", step);
        if (step == 0) first = loss[0];
        if (err > worst) worst = err;
        if (err_fused > worst) worst = err_fused;
        if (err_operands > worst) worst = err_operands;
    }
    printf("  gpt   bf16 against fp32 over %d steps: worst rel diff %.2e; fp32 loss %.4f -> %.4f\n",
           BF16_STEPS, worst, first, loss[0]);
    assert_true(loss[0] < 0.9 * first); /* the steps did train, so following them means something */

    free(segs);
    free(initial);
    for (int k = 0; k < NB; k++) {
        be[k]->free(be[k], om[k]);
        be[k]->free(be[k], ov[k]);
        sdp_tf_destroy(&m[k]);
        sdp_backend_destroy(be[k]);
    }
}

/* ---- (d) and (e): the ResNet -----------------------------------------------------------------
 */

enum { RN_B = 8, RN_CH = 3, RN_SIZE = 16, RN_CLASSES = 10, RN_DEPTH = 14, RN_WIDTH = 8 };
enum { RN_IMG_LEN = RN_CH * RN_SIZE * RN_SIZE };
static const float RN_LR = 0.05f;
static const double RN_PARAM_RTOL = 1e-4, RN_PARAM_ATOL_MOVE = 1e-3; /* of the largest move */

static sdp_resnet_config small_resnet(void) {
    sdp_resnet_config c = {.depth = RN_DEPTH,
                           .width = RN_WIDTH,
                           .in_channels = RN_CH,
                           .image_size = RN_SIZE,
                           .classes = RN_CLASSES};
    sdp_resnet_config_finish(&c);
    return c;
}

static void resnet_batch(float *images, int *labels, uint64_t seed) {
    sdp_rng r = sdp_rng_make(seed, 8);
    tu_fill(images, (size_t)RN_B * RN_IMG_LEN, &r, 1.0f);
    for (int i = 0; i < RN_B; i++) labels[i] = (int)sdp_rng_below(&r, RN_CLASSES);
    labels[2] = -1; /* an ignored label */
}

/* One segment per trained tensor (running statistics are not the optimizer's), decaying as the
 * layout says. */
static int trained_segments(const sdp_layout *L, sdp_opt_segment *segs) {
    int n = 0;
    for (int i = 0; i < L->nparams; i++)
        if (!L->params[i].buffer)
            segs[n++] =
                (sdp_opt_segment){L->params[i].offset, L->params[i].numel, L->params[i].decay,
                                  L->params[i].offset, L->params[i].offset};
    return n;
}

static void check_resnet_step(sdp_resnet *mc, sdp_resnet *mg, const float *images,
                              const int *labels, bool training, const char *what) {
    sdp_metrics c, g;
    sdp_resnet_forward(mc, images, labels, RN_B, training, &c);
    sdp_resnet_forward(mg, images, labels, RN_B, training, &g);
    const double err = fabs(g.loss - c.loss) / fabs(c.loss);
    printf("  resnet %-6s loss cpu %.9g cuda %.9g (rel err %.2e), hits %g and %g of %g\n", what,
           c.loss, g.loss, err, c.correct, g.correct, c.count);
    assert_true(c.count == RN_B - 1 && g.count == c.count);
    assert_true(g.correct == c.correct);
    if (!(err <= LOSS_RTOL)) fail_msg("resnet: losses differ (%s)", what);
}

static void test_resnet_training(void **state) {
    (void)state;
    const sdp_resnet_config cfg = small_resnet();
    sdp_mem host_mem = {0};
    sdp_backend *gpu = sdp_backend_cuda(0, SDP_PRECISION_FP32);
    sdp_resnet *mc = sdp_resnet_create(&cfg, NULL, RN_B, SDP_MODEL_TRAIN, SDP_GEMM_DNNL,
                                       SDP_CONV_DNNL, &host_mem);
    sdp_resnet *mg = sdp_resnet_create_on(&cfg, NULL, RN_B, SDP_MODEL_TRAIN, gpu, SDP_CONV_DNNL);
    const sdp_layout *L = sdp_resnet_layout(mc);
    const size_t n = L->numel, bytes = n * sizeof(float);
    assert_int_equal(sdp_resnet_layout(mg)->numel, n);
    float *pc = sdp_resnet_params(mc), *pg = sdp_resnet_params(mg);
    float *gc = sdp_resnet_grads(mc), *gg = sdp_resnet_grads(mg);
    sdp_layout_init_values(L, pc, 13);
    gpu->upload(gpu, pg, pc, bytes);
    float *initial = malloc(bytes);
    assert_non_null(initial);
    memcpy(initial, pc, bytes);

    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_SGD); /* momentum 0.9, weight decay 5e-4 */
    sdp_optim opt;
    sdp_optim_init(&opt, &oc, n, &host_mem);
    float *gbuf = gpu->alloc(gpu, SDP_MEM_OPTIM, bytes);
    sdp_opt_segment *segs = calloc((size_t)L->nparams, sizeof *segs);
    assert_non_null(segs);
    const int nseg = trained_segments(L, segs);

    float images[RN_B * RN_IMG_LEN];
    int labels[RN_B];
    for (int step = 0; step < STEPS; step++) {
        resnet_batch(images, labels, (uint64_t)step);
        memset(gc, 0, bytes);
        gpu->zero(gpu, gg, bytes);
        char what[16];
        snprintf(what, sizeof what, "step %d", step);
        check_resnet_step(mc, mg, images, labels, true, what);
        const float dloss = 1.0f / (RN_B - 1);
        sdp_resnet_backward(mc, dloss, NULL, NULL);
        sdp_resnet_backward(mg, dloss, NULL, NULL);
        sdp_optim_step(&opt, pc, gc, segs, nseg, RN_LR);
        const sdp_sgd_scalars k = sdp_sgd_scalars_at(&oc, opt.t, RN_LR); /* the CPU's step's */
        sdp_sgd_update(gpu, &k, gbuf, pg, gg, segs, nseg);
    }
    resnet_batch(images, labels, 99);
    check_resnet_step(mc, mg, images, labels, false, "eval");

    float *final = malloc(bytes);
    assert_non_null(final);
    gpu->download(gpu, final, pg, bytes);
    double moved = 0; /* by the optimizer: running statistics move on their own */
    for (int t = 0; t < L->nparams; t++) {
        const sdp_param *p = &L->params[t];
        if (p->buffer) continue;
        for (size_t i = p->offset; i < p->offset + p->numel; i++)
            moved = fmax(moved, fabs((double)pc[i] - initial[i]));
    }
    const double atol = RN_PARAM_ATOL_MOVE * moved;
    const double ratio = tu_err_ratio_ff(final, pc, n, atol, RN_PARAM_RTOL);
    printf("  resnet %zu params: final parameters and running statistics: worst error %.3g of the "
           "tolerance (%.1e + %.0e relative), largest move %.2e\n",
           n, ratio, atol, RN_PARAM_RTOL, moved);
    assert_true(moved > 0.1 * RN_LR);
    if (!(ratio <= 1)) {
        for (size_t i = 0; i < n; i++)
            if (fabs((double) final[i] - pc[i]) > atol + RN_PARAM_RTOL * fabs(pc[i]))
                fail_msg("resnet parameter %zu: cpu %.9g cuda %.9g", i, (double)pc[i],
                         (double) final[i]);
    }

    free(final);
    free(initial);
    free(segs);
    gpu->free(gpu, gbuf);
    sdp_optim_free(&opt, &host_mem);
    sdp_resnet_destroy(mg);
    sdp_resnet_destroy(mc);
    for (int k = 0; k < SDP_MEM_NCAT; k++)
        if (k != SDP_MEM_SCRATCH) assert_int_equal(gpu->mem->cur[k], 0); /* all freed */
    sdp_backend_destroy(gpu);
}

/* The owned slices of tensor t: channels {0} and [2, width) of its group, packed at *next (as
 * tests/test_model_resnet.c makes them). */
static void make_slices(const sdp_param *t, sdp_grad_slices *s, long *next) {
    const long rows = t->shape[0], cols = (long)t->numel / rows;
    const long per_channel = t->axis == 0 ? 1 : cols / t->shape[1];
    const long width = t->shape[t->axis], starts[2] = {0, 2}, lens[2] = {1, width - 2};
    s->axis = t->axis;
    s->n = 2;
    s->start = malloc(2 * sizeof(long));
    s->len = malloc(2 * sizeof(long));
    s->dst = malloc(2 * sizeof(long));
    s->ld = malloc(2 * sizeof(long));
    assert_true(s->start && s->len && s->dst && s->ld && width >= 3);
    for (int i = 0; i < 2; i++) {
        s->start[i] = starts[i] * per_channel;
        s->len[i] = lens[i] * per_channel;
        s->dst[i] = *next;
        s->ld[i] = t->axis == 0 ? cols : s->len[i];
        *next += t->axis == 0 ? s->len[i] * cols : s->len[i] * rows;
    }
}

static void test_resnet_sliced_gradients(void **state) {
    (void)state;
    const sdp_model_family *f = sdp_model_family_find("resnet");
    assert_non_null(f);
    sdp_model_config mc = {.arch = "resnet",
                           .depth = RN_DEPTH,
                           .channels = RN_WIDTH,
                           .in_channels = RN_CH,
                           .image_size = RN_SIZE,
                           .classes = RN_CLASSES};
    f->finish_config(&mc);
    sdp_layout full;
    f->describe_full(&full, &mc);
    sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                       .unit = SDP_UNIT_NEURON,
                       .assign = SDP_ASSIGN_RANDOM,
                       .scale = SDP_SCALE_INVERSE,
                       .world = 2,
                       .owners = 1,
                       .seed = 4};
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &plan, &full, 1);

    sdp_mem host_mem = {0};
    sdp_backend *gpu = sdp_backend_cuda(0, SDP_PRECISION_FP32);
    sdp_backend *cpu = sdp_backend_cpu(SDP_GEMM_DNNL, &host_mem);
    sdp_model_config mc_cpu = mc, mc_gpu = mc;
    mc_cpu.backend = cpu;
    mc_gpu.backend = gpu;
    sdp_model cm, gm;
    f->create(&cm, &mc_cpu, &spec, RN_B, 1, SDP_MODEL_TRAIN_BARE);
    f->create(&gm, &mc_gpu, &spec, RN_B, 1, SDP_MODEL_TRAIN_BARE);
    const sdp_layout *L = cm.layout;
    assert_int_equal(gm.layout->numel, L->numel);
    const size_t np = L->numel;
    sdp_rng rng = sdp_rng_make(31, 0);
    tu_fill(cm.params, np, &rng, 0.3f);
    gpu->upload(gpu, gm.params, cm.params, np * sizeof(float));

    /* In turn: a whole gradient, none, and (for the inner-group tensors) two owned slices. */
    long *off = malloc(sizeof(long) * (size_t)L->nparams), next = 0;
    sdp_grad_slices *slices = calloc((size_t)L->nparams, sizeof *slices);
    assert_true(off && slices);
    int sliced = 0, absent = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        const int pick = i % 3;
        if (t->buffer || pick == 1) {
            off[i] = -1;
            absent += !t->buffer;
        } else if (t->group >= 0 && (pick == 0 || i % 2 == 0)) {
            off[i] = SDP_GRAD_SLICED;
            make_slices(t, &slices[i], &next);
            sliced++;
        } else {
            off[i] = next;
            next += (long)t->numel;
        }
    }
    float *want = calloc((size_t)next, sizeof(float)), *got = malloc((size_t)next * sizeof(float));
    float *dev_grads = gpu->alloc(gpu, SDP_MEM_GRADS, (size_t)next * sizeof(float));
    assert_true(want && got);
    cm.ops->use_grads(&cm, want, off, slices);
    gm.ops->use_grads(&gm, dev_grads, off, slices);

    float images[RN_B * RN_IMG_LEN];
    int labels[RN_B];
    resnet_batch(images, labels, 5);
    sdp_batch b = {.B = RN_B, .T = 1, .images = images, .labels = labels};
    sdp_metrics mcpu, mgpu;
    cm.ops->forward(&cm, &b, true, &mcpu);
    gm.ops->forward(&gm, &b, true, &mgpu);
    cm.ops->backward(&cm, 1.0f / (float)mcpu.count);
    gm.ops->backward(&gm, 1.0f / (float)mgpu.count);
    gpu->download(gpu, got, dev_grads, (size_t)next * sizeof(float));
    float *params = malloc(np * sizeof(float));
    assert_non_null(params);
    gpu->download(gpu, params, gm.params, np * sizeof(float));

    double scale = 0;
    for (long e = 0; e < next; e++) scale = fmax(scale, fabs((double)want[e]));
    const double loss_err = fabs(mgpu.loss - mcpu.loss) / fabs(mcpu.loss);
    const double grad_ratio =
        tu_err_ratio_ff(got, want, (size_t)next, EQ_GRAD_ATOL_REL * scale, EQ_GRAD_RTOL);
    const double running_ratio = tu_err_ratio_ff(params, cm.params, np, 1e-6, 1e-5);
    printf("  resnet compact (neuron units, 1 of 2): %zu params, %d tensors sliced, %d without "
           "gradient, %ld gradient elements; loss rel err %.2e, gradients %.3g and running "
           "statistics %.3g of the tolerance\n",
           np, sliced, absent, next, loss_err, grad_ratio, running_ratio);
    assert_true(np < full.numel && sliced >= 5 && absent >= 5 && scale > 0);
    assert_true(loss_err <= EQ_LOSS_RTOL);
    assert_true(grad_ratio <= 1);
    assert_true(running_ratio <= 1);

    sdp_sync_grad_layout_free(off, slices, L->nparams);
    free(params);
    free(got);
    free(want);
    gpu->free(gpu, dev_grads);
    gm.ops->destroy(&gm);
    cm.ops->destroy(&cm);
    sdp_backend_destroy(gpu);
    sdp_backend_destroy(cpu);
    sdp_subnet_spec_free(&spec);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
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
        cmocka_unit_test(test_training_with_dropout),
        cmocka_unit_test(test_forward_masking_equivalence),
        cmocka_unit_test(test_gpt_bf16_follows_fp32),
        cmocka_unit_test(test_resnet_training),
        cmocka_unit_test(test_resnet_sliced_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
