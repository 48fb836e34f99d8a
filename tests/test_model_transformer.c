/* The transformer as a whole: its tensor description, and its gradient against finite
 * differences for both styles on a tiny configuration, without and with dropout (its masks held
 * fixed by one key); that dropout is training's alone (evaluation equals the same weights without
 * dropout, bit for bit) and that its masks are counted with the activations, exactly; that
 * activation recomputation keeps one layer's activations and gives bitwise the same gradients. */
#include "testutil.h"

#include "sdp/transformer.h"

#include <omp.h>

static sdp_tf_config tiny(sdp_tf_style style) {
    sdp_tf_config c = {
        .model = {.layers = 2, .heads = 2, .width = 8, .d_ff = 12, .seq_len = 6, .vocab = 11}};
    snprintf(c.model.arch, sizeof c.model.arch, "%s", sdp_tf_style_name(style));
    sdp_tf_config_finish(&c);
    return c;
}

static void make_batch(int *in, int *tg, int n, int V, sdp_rng *r) {
    for (int i = 0; i < n; i++) {
        in[i] = (int)sdp_rng_below(r, (uint64_t)V);
        tg[i] = (int)sdp_rng_below(r, (uint64_t)V);
    }
    tg[1] = -1; /* an ignored target must not contribute */
}

/* Every parameter's gradient against central differences of the summed loss. The model runs
 * in float, so the differences use a step of 1e-2 and a tolerance that a wrong backward (an
 * error of the order of the gradient itself) cannot meet. With dropout every forward draws its
 * masks from the same key: the differences are then those of one fixed function, which drops
 * the embeddings, attention probabilities and both branches' outputs of every layer. */
static void gradient_check(sdp_tf_style style, float dropout) {
    sdp_mem mem = {0};
    sdp_tf_config c = tiny(style);
    c.model.dropout = dropout;
    sdp_tf m;
    const int B = 2, T = 5, N = B * T;
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_tf_create(&m, &c, NULL, B, T, SDP_MODEL_TRAIN, be);
    sdp_layout_init_values(&m.layout, m.params, 7);
    /* Larger-than-default weights make every path (norm gains, biases) matter. */
    sdp_rng r = sdp_rng_make(3, 0);
    for (size_t i = 0; i < m.layout.numel; i++) m.params[i] += 0.3f * sdp_rng_normal(&r);
    int in[10], tg[10];
    make_batch(in, tg, N, c.model.vocab, &r);

    if (dropout > 0) { /* dropout changes the loss; evaluation (off) does not see it */
        const double plain = sdp_tf_forward(&m, in, tg, B, T);
        sdp_tf_set_dropout(&m, true, 0xd1ce);
        const double dropped = sdp_tf_forward(&m, in, tg, B, T);
        print_message("%s: loss %.6f without dropout, %.6f with p = %g\n", sdp_tf_style_name(style),
                      plain, dropped, (double)dropout);
        assert_true(dropped != plain);
    }
    sdp_tf_forward(&m, in, tg, B, T);
    sdp_tf_backward(&m, 1.0f);
    double err2 = 0, ref2 = 0;
    int bad = 0;
    const float h = 1e-2f;
    for (size_t i = 0; i < m.layout.numel; i++) {
        float p0 = m.params[i];
        m.params[i] = p0 + h;
        double lp = sdp_tf_forward(&m, in, tg, B, T);
        m.params[i] = p0 - h;
        double lm = sdp_tf_forward(&m, in, tg, B, T);
        m.params[i] = p0;
        double fd = (lp - lm) / (2.0 * h), an = m.grads[i];
        err2 += (fd - an) * (fd - an);
        ref2 += fd * fd;
        if (fabs(fd - an) > 5e-3 + 3e-2 * fabs(fd)) {
            if (bad++ < 5) print_error("param %zu: analytic %g, numeric %g\n", i, an, fd);
        }
    }
    double rel = sqrt(err2 / ref2);
    print_message("%s (dropout %g): %zu params, relative gradient error %.2e, %d outside "
                  "tolerance\n",
                  sdp_tf_style_name(style), (double)dropout, m.layout.numel, rel, bad);
    assert_true(ref2 > 0);
    assert_true(rel < 5e-3);
    assert_int_equal(bad, 0);
    sdp_tf_destroy(&m);
    sdp_backend_destroy(be);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

static void test_gradcheck_gpt(void **state) {
    (void)state;
    gradient_check(SDP_STYLE_GPT, 0.0f);
}

static void test_gradcheck_llama(void **state) {
    (void)state;
    gradient_check(SDP_STYLE_LLAMA, 0.0f);
}

static void test_gradcheck_gpt_dropout(void **state) {
    (void)state;
    gradient_check(SDP_STYLE_GPT, 0.3f);
}

static void test_gradcheck_llama_dropout(void **state) {
    (void)state;
    gradient_check(SDP_STYLE_LLAMA, 0.3f);
}

/* Parameter count from the architecture, computed independently of the layout code. */
static size_t expected_params(const sdp_tf_config *c) {
    size_t C = (size_t)c->model.width, F = (size_t)c->model.d_ff, V = (size_t)c->vocab_padded;
    if (c->style == SDP_STYLE_GPT)
        return V * C + (size_t)c->model.seq_len * C +
               (size_t)c->model.layers *
                   (4 * C + 3 * C * C + 3 * C + C * C + C + 2 * F * C + F + C) +
               2 * C;
    return V * C + (size_t)c->model.layers * (2 * C + 4 * C * C + 3 * F * C) + C + V * C;
}

static void test_layout(void **state) {
    (void)state;
    sdp_tf_config g = {.model = {.arch = "gpt",
                                 .layers = 12,
                                 .heads = 12,
                                 .width = 768,
                                 .seq_len = 1024,
                                 .vocab = 50257}};
    sdp_tf_config_finish(&g);
    assert_int_equal(g.style, SDP_STYLE_GPT);
    assert_int_equal(g.vocab_padded, 50304);
    assert_int_equal(g.model.d_ff, 3072);
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, &g);
    sdp_layout L;
    sdp_tf_describe(&L, &g, &s);
    assert_int_equal(L.numel, expected_params(&g));
    /* GPT-2 124M: 124,475,904 parameters with the padded vocabulary. */
    assert_int_equal(L.numel, 124475904);
    const sdp_param *p = sdp_layout_find(&L, "transformer.h.3.attn.c_attn.weight");
    assert_non_null(p);
    assert_int_equal(p->shape[0], 3 * 768);
    assert_int_equal(p->shape[1], 768);
    assert_int_equal(p->block, 3);
    assert_int_equal(p->segments, 3);
    assert_true(p->decay);
    assert_false(sdp_layout_find(&L, "transformer.wte.weight")->decay);
    assert_false(sdp_layout_find(&L, "transformer.h.0.ln_1.bias")->decay);
    assert_int_equal(sdp_layout_find(&L, "transformer.ln_f.weight")->block, -1);
    assert_int_equal(L.nblocks, 12);
    assert_int_equal(L.blocks[5].groups[0].width, 12);
    assert_int_equal(L.blocks[5].groups[1].width, 3072);
    sdp_layout_free(&L);
    sdp_tf_shape_free(&s);

    sdp_tf_config l = {
        .model = {
            .arch = "llama", .layers = 3, .heads = 4, .width = 64, .seq_len = 32, .vocab = 256}};
    sdp_tf_config_finish(&l);
    sdp_tf_shape_full(&s, &l);
    sdp_tf_describe(&L, &l, &s);
    assert_int_equal(L.numel, expected_params(&l));
    /* q, k, v are adjacent so the model can run them as one GEMM. */
    const sdp_param *q = sdp_layout_find(&L, "model.layers.1.self_attn.q_proj.weight");
    const sdp_param *v = sdp_layout_find(&L, "model.layers.1.self_attn.v_proj.weight");
    assert_int_equal(v->offset, q->offset + 2 * q->numel);
    assert_non_null(sdp_layout_find(&L, "lm_head.weight"));
    sdp_layout_free(&L);
    sdp_tf_shape_free(&s);
}

/* A subnetwork keeps global names for its layers and slices the inner widths. */
static void test_subnetwork_shape(void **state) {
    (void)state;
    sdp_tf_config c = tiny(SDP_STYLE_GPT);
    int ids[1] = {1}, heads[1] = {1}, ff[1] = {4};
    float sc[1] = {2.0f};
    sdp_tf_shape s = {1, ids, heads, ff, sc};
    sdp_layout L;
    sdp_tf_describe(&L, &c, &s);
    assert_null(sdp_layout_find(&L, "transformer.h.0.ln_1.weight"));
    const sdp_param *p = sdp_layout_find(&L, "transformer.h.1.mlp.c_fc.weight");
    assert_non_null(p);
    assert_int_equal(p->shape[0], 4);
    p = sdp_layout_find(&L, "transformer.h.1.attn.c_proj.weight");
    assert_int_equal(p->shape[1], 4); /* one head of size 4 */
    assert_int_equal(L.blocks[0].global_index, 1);
    sdp_layout_free(&L);
}

/* Initial values depend only on (seed, tensor, element): not on thread count or order. */
static void test_init_is_counter_based(void **state) {
    (void)state;
    sdp_tf_config c = tiny(SDP_STYLE_LLAMA);
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, &c);
    sdp_layout L;
    sdp_tf_describe(&L, &c, &s);
    float *a = malloc(L.numel * sizeof(float)), *b = malloc(L.numel * sizeof(float));
    omp_set_num_threads(1);
    sdp_layout_init_values(&L, a, 99);
    omp_set_num_threads(2);
    sdp_layout_init_values(&L, b, 99);
    assert_memory_equal(a, b, L.numel * sizeof(float));
    const sdp_param *p = sdp_layout_find(&L, "model.layers.0.mlp.up_proj.weight");
    for (size_t j = 0; j < p->numel; j += 7)
        assert_true(a[p->offset + j] == sdp_param_init_value(p, 99, j));
    double sum2 = 0;
    for (size_t j = 0; j < p->numel; j++) sum2 += (double)a[p->offset + j] * a[p->offset + j];
    double std = sqrt(sum2 / (double)p->numel);
    assert_true(fabs(std - 0.02) < 0.004); /* 144 samples of N(0, 0.02) */
    sdp_layout_init_values(&L, b, 100);
    assert_true(memcmp(a, b, L.numel * sizeof(float)) != 0);
    free(a);
    free(b);
    sdp_layout_free(&L);
    sdp_tf_shape_free(&s);
}

/* ---- inference models: activations for one layer at a time ------------------------------- */

static sdp_tf_config layered(sdp_tf_style style, int n_layer) {
    sdp_tf_config c = {
        .model = {
            .layers = n_layer, .heads = 2, .width = 8, .d_ff = 12, .seq_len = 6, .vocab = 11}};
    snprintf(c.model.arch, sizeof c.model.arch, "%s", sdp_tf_style_name(style));
    if (style == SDP_STYLE_VIT)
        c.model.in_channels = 2, c.model.image_size = 4, c.model.patch = 2, c.model.classes = 3,
        c.model.vocab = 3;
    sdp_tf_config_finish(&c);
    return c;
}

/* Activation bytes of a model, counted without allocating (a dry mem). */
static size_t act_bytes_dropout(sdp_tf_style style, int n_layer, sdp_model_mode mode,
                                float dropout) {
    sdp_mem dry = {.dry = true};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &dry);
    sdp_tf_config c = layered(style, n_layer);
    c.model.dropout = dropout;
    sdp_tf m;
    sdp_tf_create(&m, &c, NULL, 2, 5, mode, be);
    sdp_tf_destroy(&m);
    sdp_backend_destroy(be);
    return dry.peak[SDP_MEM_ACTS];
}

static size_t act_bytes(sdp_tf_style style, int n_layer, sdp_model_mode mode) {
    return act_bytes_dropout(style, n_layer, mode, 0.0f);
}

/* Rank 0 evaluates the assembled full model: built for inference, its activations must not grow
 * with depth (one layer's buffers serve every layer), while training keeps every layer's. */
static void test_infer_acts_do_not_grow_with_depth(void **state) {
    (void)state;
    const sdp_tf_style styles[] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
    for (int s = 0; s < 3; s++) {
        const size_t two = act_bytes(styles[s], 2, SDP_MODEL_INFER);
        const size_t four = act_bytes(styles[s], 4, SDP_MODEL_INFER);
        print_message("%s inference activations: %zu bytes with 2 layers, %zu with 4\n",
                      sdp_tf_style_name(styles[s]), two, four);
        assert_true(two > 0);
        assert_int_equal(two, four);
        assert_true(act_bytes(styles[s], 4, SDP_MODEL_TRAIN) >
                    act_bytes(styles[s], 2, SDP_MODEL_TRAIN));
    }
}

/* With shared buffers the forward must compute exactly what a training model's does: the same
 * loss and logits, bit for bit, with an odd and an even number of layers (the top layer's output
 * lies in either of the two alternating buffers). */
static void check_infer_matches_train(sdp_tf_style style, int n_layer) {
    sdp_mem mem = {0};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_tf_config c = layered(style, n_layer);
    const bool vit = style == SDP_STYLE_VIT;
    const int B = 2, T = vit ? c.model.seq_len : 5, N = B * T;
    sdp_tf inf, train;
    sdp_tf_create(&inf, &c, NULL, B, T, SDP_MODEL_INFER, be);
    sdp_tf_create(&train, &c, NULL, B, T, SDP_MODEL_TRAIN, be);
    sdp_layout_init_values(&inf.layout, inf.params, 3);
    sdp_rng r = sdp_rng_make(3, 1);
    for (size_t i = 0; i < inf.layout.numel; i++) inf.params[i] += 0.3f * sdp_rng_normal(&r);
    memcpy(train.params, inf.params, inf.layout.numel * sizeof(float));
    float images[2 * 2 * 4 * 4];
    int in[2 * 5], tg[2 * 5];
    tu_fill(images, sizeof images / sizeof *images, &r, 1.0f);
    make_batch(in, tg, vit ? B : N, c.model.vocab, &r);
    for (int pass = 0; pass < 2; pass++) { /* twice: the buffers hold the last batch's values */
        double li, lt;
        if (vit) {
            li = sdp_tf_forward_images(&inf, images, tg, B);
            lt = sdp_tf_forward_images(&train, images, tg, B);
        } else {
            li = sdp_tf_forward(&inf, in, tg, B, T);
            lt = sdp_tf_forward(&train, in, tg, B, T);
        }
        assert_true(li == lt);
        const int rows = vit ? B : N;
        assert_memory_equal(inf.probs, train.probs, (size_t)rows * c.vocab_padded * sizeof(float));
        images[pass] += 0.5f;
        in[pass] = (in[pass] + 1) % c.model.vocab;
    }
    sdp_tf_destroy(&inf);
    sdp_tf_destroy(&train);
    sdp_backend_destroy(be);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

static void test_infer_matches_train(void **state) {
    (void)state;
    const sdp_tf_style styles[] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
    for (int s = 0; s < 3; s++)
        for (int n_layer = 1; n_layer <= 4; n_layer++)
            check_infer_matches_train(styles[s], n_layer);
}

/* ---- dropout: training's alone, its masks counted ----------------------------------------- */

/* A training model keeps one mask of bits per dropped [B*T, C] tensor: the stem's output and
 * each layer's two branch outputs (attention regenerates its own); an inference model none. The
 * bytes come from the activations' tally, exactly; without dropout nothing is added. */
static void test_dropout_masks_are_counted(void **state) {
    (void)state;
    const sdp_tf_style styles[] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
    for (int s = 0; s < 3; s++)
        for (int n_layer = 1; n_layer <= 3; n_layer += 2) {
            const sdp_tf_config c = layered(styles[s], n_layer);
            const size_t T = styles[s] == SDP_STYLE_VIT ? (size_t)c.model.seq_len : 5;
            const size_t mask = sdp_dropout_words(2 * T * (size_t)c.model.width) * sizeof(uint32_t);
            const size_t plain = act_bytes(styles[s], n_layer, SDP_MODEL_TRAIN);
            const size_t dropped = act_bytes_dropout(styles[s], n_layer, SDP_MODEL_TRAIN, 0.2f);
            print_message("%s, %d layers: %zu activation bytes, %zu with dropout (%zu per mask)\n",
                          sdp_tf_style_name(styles[s]), n_layer, plain, dropped, mask);
            assert_int_equal(dropped - plain, (1 + 2 * (size_t)n_layer) * mask);
            assert_int_equal(act_bytes_dropout(styles[s], n_layer, SDP_MODEL_TRAIN_BARE, 0.2f),
                             dropped);
            assert_int_equal(act_bytes_dropout(styles[s], n_layer, SDP_MODEL_INFER, 0.2f),
                             act_bytes(styles[s], n_layer, SDP_MODEL_INFER));
        }
}

/* Builds a family's model through the generic interface (sdp/model.h), as sdp train does. */
static void model_create(sdp_model *m, sdp_tf_style style, float dropout, sdp_model_mode mode,
                         sdp_backend *be) {
    sdp_model_config mc = {.layers = 2,
                           .heads = 2,
                           .width = 8,
                           .d_ff = 12,
                           .seq_len = 6,
                           .vocab = 11,
                           .dropout = dropout,
                           .backend = be};
    strcpy(mc.arch, sdp_tf_style_name(style));
    if (style == SDP_STYLE_VIT)
        mc.in_channels = 2, mc.image_size = 4, mc.patch = 2, mc.classes = 3, mc.vocab = 0;
    const sdp_model_family *f = sdp_model_family_find(mc.arch);
    f->finish_config(&mc);
    f->create(m, &mc, NULL, 2, 5, mode);
}

/* The loss of a forward through the generic interface, training or not, dropout's stream `key`. */
static double model_loss(sdp_model *m, const sdp_batch *b, bool training, uint64_t key) {
    sdp_metrics mt;
    m->dropout_key = key;
    m->ops->forward(m, b, training, &mt);
    return mt.loss;
}

/* Evaluation (training false, and an inference model) applies no dropout: the same loss, bit for
 * bit, as the same weights without dropout, every time, before and after training forwards.
 * Training forwards drop: one key gives one loss again, another key another; and without dropout
 * training changes nothing. */
static void check_dropout_is_training_only(sdp_tf_style style) {
    sdp_mem mem = {0};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_model drop, plain, infer;
    model_create(&drop, style, 0.3f, SDP_MODEL_TRAIN, be);
    model_create(&plain, style, 0.0f, SDP_MODEL_TRAIN, be);
    model_create(&infer, style, 0.3f, SDP_MODEL_INFER, be);
    const size_t numel = drop.layout->numel;
    assert_int_equal(plain.layout->numel, numel);
    sdp_layout_init_values(drop.layout, drop.params, 9);
    memcpy(plain.params, drop.params, numel * sizeof(float));
    memcpy(infer.params, drop.params, numel * sizeof(float));
    sdp_rng r = sdp_rng_make(9, 2);
    int in[10], tg[10];
    float images[2 * 2 * 4 * 4];
    sdp_batch b = {.B = 2};
    if (style == SDP_STYLE_VIT) {
        tu_fill(images, sizeof images / sizeof *images, &r, 1.0f);
        make_batch(in, tg, 2, 3, &r);
        b.T = 1, b.images = images, b.labels = tg;
    } else {
        make_batch(in, tg, 10, 11, &r);
        b.T = 5, b.tokens = in, b.targets = tg;
    }
    const double reference = model_loss(&plain, &b, false, 0);
    assert_true(model_loss(&plain, &b, true, 1) == reference);
    assert_true(model_loss(&drop, &b, false, 1) == reference);
    assert_true(model_loss(&infer, &b, false, 1) == reference);
    const double a = model_loss(&drop, &b, true, 1), again = model_loss(&drop, &b, true, 1);
    const double other = model_loss(&drop, &b, true, 2);
    print_message("%s: evaluation %.6f; training with dropout %.6f (key 1), %.6f (key 2)\n",
                  sdp_tf_style_name(style), reference, a, other);
    assert_true(a == again);
    assert_true(a != reference && other != a);
    assert_true(model_loss(&drop, &b, false, 2) == reference);
    drop.ops->destroy(&drop);
    plain.ops->destroy(&plain);
    infer.ops->destroy(&infer);
    sdp_backend_destroy(be);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

static void test_dropout_is_training_only(void **state) {
    (void)state;
    check_dropout_is_training_only(SDP_STYLE_GPT);
    check_dropout_is_training_only(SDP_STYLE_LLAMA);
    check_dropout_is_training_only(SDP_STYLE_VIT);
}

static void call_dropout_of_one(void *ctx) {
    (void)ctx;
    sdp_tf_config c = {.model = {.arch = "gpt",
                                 .layers = 1,
                                 .heads = 1,
                                 .width = 4,
                                 .seq_len = 4,
                                 .vocab = 4,
                                 .dropout = 1.0}};
    sdp_tf_config_finish(&c);
}

static void test_dropout_of_one_fails_clearly(void **state) {
    (void)state;
    tu_expect_fatal(call_dropout_of_one, NULL, "--dropout must be in [0, 1) (got 1)");
}

/* ---- recomputation: one layer's activations, the same gradients ---------------------------- */

static size_t recompute_act_bytes(sdp_tf_style style, int n_layer, float dropout) {
    sdp_mem dry = {.dry = true};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &dry);
    sdp_tf_config c = layered(style, n_layer);
    c.model.dropout = dropout;
    c.model.recompute = true;
    sdp_tf m;
    sdp_tf_create(&m, &c, NULL, 2, 5, SDP_MODEL_TRAIN, be);
    sdp_tf_destroy(&m);
    sdp_backend_destroy(be);
    return dry.peak[SDP_MEM_ACTS];
}

/* A recomputing model keeps one residual stream of B*T*C floats per layer (its input) beside one
 * layer's activations and masks: each further layer adds that stream exactly, dropout or not. An
 * inference model is unchanged by the option. */
static void test_recompute_keeps_one_layer(void **state) {
    (void)state;
    const sdp_tf_style styles[] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
    for (int s = 0; s < 3; s++) {
        const sdp_tf_config c = layered(styles[s], 1);
        const size_t T = styles[s] == SDP_STYLE_VIT ? (size_t)c.model.seq_len : 5;
        const size_t stream = 2 * T * (size_t)c.model.width * sizeof(float);
        const size_t two = recompute_act_bytes(styles[s], 2, 0.0f);
        const size_t five = recompute_act_bytes(styles[s], 5, 0.0f);
        const size_t plain = act_bytes(styles[s], 5, SDP_MODEL_TRAIN);
        print_message("%s: 5 layers keep %zu activation bytes, %zu recomputing (2 layers: %zu)\n",
                      sdp_tf_style_name(styles[s]), plain, five, two);
        assert_int_equal(five - two, 3 * stream);
        assert_int_equal(recompute_act_bytes(styles[s], 5, 0.2f) -
                             recompute_act_bytes(styles[s], 2, 0.2f),
                         3 * stream);
        assert_true(five < plain);
    }
}

/* Four layers of unequal widths, the widest not first, so that the shared buffers serve every
 * width: one without heads, one without MLP neurons, others kept in part, scaled branches. */
static void uneven_shape(sdp_tf_shape *s, const sdp_tf_config *c) {
    sdp_tf_shape_full(s, c);
    const int heads[4] = {1, 0, 2, 1}, ff[4] = {4, 12, 0, 8};
    const float scale[4] = {1.0f, 2.0f, 1.0f, 0.5f};
    for (int i = 0; i < 4; i++)
        s->n_head[i] = heads[i], s->d_ff[i] = ff[i], s->branch_scale[i] = scale[i];
}

/* One model of each kind, the same weights: gradients accumulated over two micro-batches (new
 * dropout masks each) must be bitwise equal with and without recomputation, and so must the
 * losses. floor: the backward stops below block `floor` (its stem and lower layers get no
 * gradient, as under backward masking with block units); 0 for the whole pass. */
static void check_recompute_exact(sdp_tf_style style, float dropout, bool uneven, int floor) {
    sdp_mem mem = {0};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_tf_config c = layered(style, 4);
    c.model.dropout = dropout;
    sdp_tf_shape s;
    if (uneven)
        uneven_shape(&s, &c);
    else
        sdp_tf_shape_full(&s, &c);
    const bool vit = style == SDP_STYLE_VIT;
    const int B = 2, T = vit ? c.model.seq_len : 5;
    sdp_tf m[2];
    for (int k = 0; k < 2; k++) {
        c.model.recompute = k == 1;
        sdp_tf_create(&m[k], &c, &s, B, T, SDP_MODEL_TRAIN, be);
    }
    const sdp_layout *L = &m[0].layout;
    sdp_layout_init_values(L, m[0].params, 5);
    sdp_rng r = sdp_rng_make(5, 3);
    for (size_t i = 0; i < L->numel; i++) m[0].params[i] += 0.3f * sdp_rng_normal(&r);
    memcpy(m[1].params, m[0].params, L->numel * sizeof(float));
    long *goff = malloc(sizeof(long) * (size_t)L->nparams);
    float *grads[2];
    for (int i = 0; i < L->nparams; i++) {
        const int b = L->params[i].block;
        const bool kept = b >= floor || (b < 0 && (floor == 0 || !sdp_param_is_stem(L, i)));
        goff[i] = kept ? (long)L->params[i].offset : -1;
    }
    for (int k = 0; k < 2; k++) {
        grads[k] = be->alloc(be, SDP_MEM_GRADS, L->numel * sizeof(float));
        sdp_tf_use_grads(&m[k], grads[k], goff, NULL);
    }
    assert_int_equal(m[0].backward_floor, floor ? floor : -1);
    float images[2 * 2 * 4 * 4];
    int in[2 * 5], tg[2 * 5];
    for (int pass = 0; pass < 2; pass++) {
        tu_fill(images, sizeof images / sizeof *images, &r, 1.0f);
        make_batch(in, tg, vit ? B : B * T, c.model.vocab, &r);
        double loss[2];
        for (int k = 0; k < 2; k++) {
            sdp_tf_set_dropout(&m[k], true, 0xd1ce + (uint64_t)pass);
            loss[k] = vit ? sdp_tf_forward_images(&m[k], images, tg, B)
                          : sdp_tf_forward(&m[k], in, tg, B, T);
            sdp_tf_backward(&m[k], 0.5f);
        }
        assert_true(loss[0] == loss[1]);
    }
    double norm = 0;
    for (size_t i = 0; i < L->numel; i++) norm += (double)grads[0][i] * grads[0][i];
    print_message("%s, dropout %g, %s layers, floor %d: gradient norm %.6g\n",
                  sdp_tf_style_name(style), (double)dropout, uneven ? "uneven" : "full", floor,
                  sqrt(norm));
    assert_true(norm > 0);
    assert_memory_equal(grads[0], grads[1], L->numel * sizeof(float));
    for (int k = 0; k < 2; k++) {
        sdp_tf_destroy(&m[k]);
        be->free(be, grads[k]);
    }
    free(goff);
    sdp_tf_shape_free(&s);
    sdp_backend_destroy(be);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

static void test_recompute_is_exact(void **state) {
    (void)state;
    const sdp_tf_style styles[] = {SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++) {
            const float dropout = d ? 0.3f : 0.0f;
            check_recompute_exact(styles[s], dropout, false, 0);
            check_recompute_exact(styles[s], dropout, true, 0);
            check_recompute_exact(styles[s], dropout, true, 2);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_gpt),
        cmocka_unit_test(test_gradcheck_llama),
        cmocka_unit_test(test_gradcheck_gpt_dropout),
        cmocka_unit_test(test_gradcheck_llama_dropout),
        cmocka_unit_test(test_dropout_masks_are_counted),
        cmocka_unit_test(test_dropout_is_training_only),
        cmocka_unit_test(test_dropout_of_one_fails_clearly),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_subnetwork_shape),
        cmocka_unit_test(test_init_is_counter_based),
        cmocka_unit_test(test_infer_acts_do_not_grow_with_depth),
        cmocka_unit_test(test_infer_matches_train),
        cmocka_unit_test(test_recompute_keeps_one_layer),
        cmocka_unit_test(test_recompute_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
