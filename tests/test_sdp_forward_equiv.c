/* Invariant I4 of docs/architecture.md, forward-masking equivalence: a worker's compact model
 * (the blocks, heads and MLP neurons it owns, built from sdp_subnet_spec_make and
 * sdp_tf_shape_from_keep) computes the same loss and the same gradients as the full model whose
 * parameters are the compact ones placed at their global positions (through the compact map)
 * and zero everywhere else, with each layer's branch scale set to the spec's. A zeroed block is
 * the identity, and a zeroed head or MLP neuron contributes nothing, so the two are the same
 * function. Every rank of plans with N in {2, 3, 4} and k < N, block and neuron units, cyclic
 * and random assignment, gpt, llama and vit, branch scale none and inverse. */
#include "testutil.h"

#include "sdp/ops.h"
#include "sdp/plan.h"
#include "sdp/subnet.h"
#include "sdp/transformer.h"

enum { BATCH = 2, SEQ = 8, VOCAB = 40 };
/* vit: 2-channel 8x8 images in 2x2 patches (16 patches + the class token), 5 classes */
enum { IMG_CH = 2, IMG_SIZE = 8, PATCH = 2, CLASSES = 5, IMG_LEN = IMG_CH * IMG_SIZE * IMG_SIZE };

/* Losses are sums over 16 tokens of about log(40) each, computed by GEMMs of different sizes
 * (the full model adds exact zeros for dropped heads and neurons, in another blocking order). */
static const double LOSS_RTOL = 1e-5;
/* Gradients: relative to each element, with an absolute floor of 1e-4 of the largest gradient
 * of the tensor set, for elements that nearly cancel. */
static const double GRAD_RTOL = 1e-3, GRAD_ATOL_REL = 1e-4;

/* Twelve heads (of size 2) and 48 MLP neurons: one chunk per worker divides both for N <= 4.
 * Three layers, so with N = 4 and k = 1 some worker keeps no block at all. */
static sdp_tf_config model_config(sdp_tf_style style) {
    sdp_tf_config c = {.model = {.layers = 3,
                                 .heads = 12,
                                 .width = 24,
                                 .d_ff = 48,
                                 .seq_len = SEQ,
                                 .vocab = VOCAB,
                                 .in_channels = IMG_CH,
                                 .image_size = IMG_SIZE,
                                 .patch = PATCH,
                                 .classes = CLASSES}};
    snprintf(c.model.arch, sizeof c.model.arch, "%s", sdp_tf_style_name(style));
    sdp_tf_config_finish(&c);
    return c;
}

typedef struct {
    sdp_tf_style style;
    sdp_unit_kind unit;
    sdp_assign_kind assign;
    sdp_branch_scale scale;
    int world, owners, rank;
} equiv_case;

typedef struct {
    int cases, smaller; /* cases run; of them, compact models smaller than the full one */
    double worst_loss, worst_grad;
} tally;

static void describe_case(char *buf, size_t n, const equiv_case *c) {
    snprintf(buf, n, "%s %s %s scale=%s N=%d k=%d rank %d", sdp_tf_style_name(c->style),
             sdp_unit_kind_name(c->unit), sdp_assign_kind_name(c->assign),
             sdp_branch_scale_name(c->scale), c->world, c->owners, c->rank);
}

/* Tokens and targets for token models, images and labels for vit. */
typedef struct {
    int inputs[BATCH * SEQ], targets[BATCH * SEQ];
    float images[BATCH * IMG_LEN];
    int labels[BATCH];
} batch;

static void random_batch(batch *b, uint64_t seed) {
    sdp_rng r = sdp_rng_make(seed, 3);
    for (int i = 0; i < BATCH * SEQ; i++) {
        b->inputs[i] = (int)sdp_rng_below(&r, VOCAB);
        b->targets[i] = (int)sdp_rng_below(&r, VOCAB);
    }
    tu_fill(b->images, BATCH * IMG_LEN, &r, 1.0f);
    for (int i = 0; i < BATCH; i++) b->labels[i] = (int)sdp_rng_below(&r, CLASSES);
}

static double forward(sdp_tf *m, const batch *b) {
    if (m->cfg.style == SDP_STYLE_VIT) return sdp_tf_forward_images(m, b->images, b->labels, BATCH);
    return sdp_tf_forward(m, b->inputs, b->targets, BATCH, SEQ);
}

static void check_case(const equiv_case *c, tally *t) {
    char what[160];
    describe_case(what, sizeof what, c);
    sdp_tf_config cfg = model_config(c->style);
    sdp_tf_shape full_shape;
    sdp_tf_shape_full(&full_shape, &cfg);
    sdp_layout full;
    sdp_tf_describe(&full, &cfg, &full_shape);
    sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                       .unit = c->unit,
                       .assign = c->assign,
                       .scale = c->scale,
                       .world = c->world,
                       .owners = c->owners,
                       .seed = 9};
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &plan, &full, c->rank);

    /* The compact model, with random parameters (biases and norms included). */
    sdp_mem mem = {0};
    sdp_tf_shape shape;
    sdp_tf_shape_from_keep(&shape, &cfg, spec.nblocks, spec.keep,
                           (const int(*)[SDP_MAX_GROUPS])spec.kept, spec.scale);
    sdp_tf compact;
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_tf_create(&compact, &cfg, &shape, BATCH, SEQ, SDP_MODEL_TRAIN, be);
    sdp_subnet_map map;
    sdp_subnet_map_build(&map, &full, &compact.layout, &plan, c->rank, true);
    sdp_rng rng = sdp_rng_make(77, (uint64_t)t->cases);
    tu_fill(compact.params, compact.layout.numel, &rng, 0.3f);

    /* The full model: the compact parameters at their global positions, zero elsewhere, and
     * the spec's branch scale on every layer. */
    for (int l = 0; l < full_shape.n_layer; l++) full_shape.branch_scale[l] = spec.scale[l];
    sdp_tf whole;
    sdp_tf_create(&whole, &cfg, &full_shape, BATCH, SEQ, SDP_MODEL_TRAIN, be);
    assert_int_equal(whole.layout.numel, full.numel);
    size_t mapped = 0;
    for (int i = 0; i < map.nruns; i++) {
        const sdp_run *r = &map.runs[i];
        assert_true(r->global + r->len <= full.numel);
        memcpy(whole.params + r->global, compact.params + r->local, r->len * sizeof(float));
        mapped += r->len;
    }
    assert_int_equal(mapped, compact.layout.numel); /* every compact element has a place */

    batch b;
    random_batch(&b, (uint64_t)t->cases);
    const double lc = forward(&compact, &b);
    const double lf = forward(&whole, &b);
    const double loss_ratio = fabs(lc - lf) / (LOSS_RTOL * fabs(lf));
    if (loss_ratio > t->worst_loss) t->worst_loss = loss_ratio;
    if (!(loss_ratio <= 1)) {
        print_error("%s: compact loss %.9g, full loss with zeroed units %.9g\n", what, lc, lf);
        fail();
    }

    memset(compact.grads, 0, compact.layout.numel * sizeof(float));
    memset(whole.grads, 0, whole.layout.numel * sizeof(float));
    sdp_tf_backward(&compact, 1.0f / (BATCH * SEQ));
    sdp_tf_backward(&whole, 1.0f / (BATCH * SEQ));
    float *want = malloc(compact.layout.numel * sizeof(float));
    assert_non_null(want);
    for (int i = 0; i < map.nruns; i++) {
        const sdp_run *r = &map.runs[i];
        memcpy(want + r->local, whole.grads + r->global, r->len * sizeof(float));
    }
    double scale = 0;
    for (size_t e = 0; e < compact.layout.numel; e++) scale = fmax(scale, fabs((double)want[e]));
    assert_true(scale > 0);
    const double ratio = tu_err_ratio_ff(compact.grads, want, compact.layout.numel,
                                         GRAD_ATOL_REL * scale, GRAD_RTOL);
    if (ratio > t->worst_grad) t->worst_grad = ratio;
    if (!(ratio <= 1)) {
        for (size_t e = 0; e < compact.layout.numel; e++) {
            double err = fabs((double)compact.grads[e] - want[e]);
            if (err > GRAD_ATOL_REL * scale + GRAD_RTOL * fabs((double)want[e])) {
                print_error("%s: gradient %zu differs: compact %.9g, full %.9g\n", what, e,
                            (double)compact.grads[e], (double)want[e]);
                break;
            }
        }
        fail();
    }
    t->cases++;
    t->smaller += compact.layout.numel < full.numel;

    free(want);
    sdp_subnet_map_free(&map);
    sdp_tf_destroy(&whole);
    sdp_tf_destroy(&compact);
    sdp_backend_destroy(be);
    sdp_tf_shape_free(&shape);
    sdp_subnet_spec_free(&spec);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
    sdp_tf_shape_free(&full_shape);
}

/* Every rank of every plan with N in {2, 3, 4} and 1 <= k < N, both assignments. */
static void check_all(sdp_tf_style style, sdp_unit_kind unit) {
    tally t = {0};
    for (int s = 0; s < 2; s++)
        for (int N = 2; N <= 4; N++)
            for (int k = 1; k < N; k++)
                for (int a = 0; a < 2; a++)
                    for (int r = 0; r < N; r++) {
                        equiv_case c = {style,
                                        unit,
                                        a ? SDP_ASSIGN_RANDOM : SDP_ASSIGN_CYCLIC,
                                        s ? SDP_SCALE_INVERSE : SDP_SCALE_NONE,
                                        N,
                                        k,
                                        r};
                        check_case(&c, &t);
                    }
    printf("%s %s: %d cases (%d with a compact model smaller than the full one); worst loss "
           "error %.3g and gradient error %.3g of the tolerance\n",
           sdp_tf_style_name(style), sdp_unit_kind_name(unit), t.cases, t.smaller, t.worst_loss,
           t.worst_grad);
    assert_true(2 * t.smaller > t.cases); /* mostly real subnetworks, not the full model */
}

static void test_gpt_block(void **state) {
    (void)state;
    check_all(SDP_STYLE_GPT, SDP_UNIT_BLOCK);
}

static void test_gpt_neuron(void **state) {
    (void)state;
    check_all(SDP_STYLE_GPT, SDP_UNIT_NEURON);
}

static void test_llama_block(void **state) {
    (void)state;
    check_all(SDP_STYLE_LLAMA, SDP_UNIT_BLOCK);
}

static void test_llama_neuron(void **state) {
    (void)state;
    check_all(SDP_STYLE_LLAMA, SDP_UNIT_NEURON);
}

static void test_vit_block(void **state) {
    (void)state;
    check_all(SDP_STYLE_VIT, SDP_UNIT_BLOCK);
}

static void test_vit_neuron(void **state) {
    (void)state;
    check_all(SDP_STYLE_VIT, SDP_UNIT_NEURON);
}

int main(void) {
    sdp_set_threads(1); /* tiny GEMMs: more threads only spin */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_block),   cmocka_unit_test(test_gpt_neuron),
        cmocka_unit_test(test_llama_block), cmocka_unit_test(test_llama_neuron),
        cmocka_unit_test(test_vit_block),   cmocka_unit_test(test_vit_neuron),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
