/* The ViT as a whole: its tensors (HF ViTForImageClassification names and shapes, and a parameter
 * count computed here from the architecture), its gradient against finite differences, that the
 * class token sees every patch (bidirectional attention), the accuracy count, and bad shapes. */
#include "testutil.h"

#include "sdp/transformer.h"

enum { CH = 2, SIZE = 4, PATCH = 2, CLASSES = 3, B = 3 };

static sdp_tf_config tiny(void) {
    sdp_tf_config c = {.model = {.arch = "vit",
                                 .layers = 2,
                                 .heads = 2,
                                 .width = 8,
                                 .d_ff = 12,
                                 .in_channels = CH,
                                 .image_size = SIZE,
                                 .patch = PATCH,
                                 .classes = CLASSES}};
    sdp_tf_config_finish(&c);
    return c;
}

static size_t expected_params(const sdp_tf_config *c) {
    const sdp_model_config *m = &c->model;
    const size_t C = (size_t)m->width, F = (size_t)m->d_ff, K = (size_t)m->classes;
    const size_t p = (size_t)m->patch, side = (size_t)(m->image_size / m->patch);
    const size_t stem = C * (size_t)m->in_channels * p * p + C + C + (side * side + 1) * C;
    const size_t layer = 2 * C + 3 * (C * C + C) + C * C + C + 2 * C + F * C + F + C * F + C;
    return stem + (size_t)m->layers * layer + 2 * C + K * C + K;
}

static void assert_shape(const sdp_layout *L, const char *name, int ndim, const int64_t *shape) {
    const sdp_param *p = sdp_layout_find(L, name);
    if (!p) print_error("missing tensor %s\n", name);
    assert_non_null(p);
    assert_int_equal(p->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(p->shape[i], shape[i]);
}

static void test_layout(void **state) {
    (void)state;
    sdp_tf_config c = tiny();
    assert_int_equal(c.style, SDP_STYLE_VIT);
    assert_int_equal(c.model.seq_len, 5); /* 4 patches and the class token */
    /* The head predicts the classes; the vocabulary stays the caller's (a run records it). */
    assert_int_equal(c.vocab_padded, CLASSES);
    assert_int_equal(c.model.vocab, 0);
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, &c);
    sdp_layout L;
    sdp_tf_describe(&L, &c, &s);
    assert_int_equal(L.numel, expected_params(&c));
    assert_shape(&L, "vit.embeddings.patch_embeddings.projection.weight", 4,
                 (int64_t[]){8, CH, PATCH, PATCH});
    assert_shape(&L, "vit.embeddings.cls_token", 3, (int64_t[]){1, 1, 8});
    assert_shape(&L, "vit.embeddings.position_embeddings", 3, (int64_t[]){1, 5, 8});
    assert_shape(&L, "vit.encoder.layer.1.attention.attention.value.bias", 1, (int64_t[]){8});
    assert_shape(&L, "vit.encoder.layer.0.intermediate.dense.weight", 2, (int64_t[]){12, 8});
    assert_shape(&L, "classifier.weight", 2, (int64_t[]){CLASSES, 8});
    assert_string_equal(L.blocks[1].name, "vit.encoder.layer.1");
    /* The stem and head are shared; the layers are droppable blocks with heads and neurons. */
    assert_int_equal(sdp_layout_find(&L, "vit.embeddings.cls_token")->block, -1);
    assert_int_equal(sdp_layout_find(&L, "classifier.bias")->block, -1);
    assert_true(L.blocks[0].droppable);
    assert_int_equal(L.blocks[0].groups[0].width, 2);
    assert_int_equal(L.blocks[0].groups[1].width, 12);
    sdp_layout_free(&L);
    sdp_tf_shape_free(&s);
}

typedef struct {
    sdp_mem mem;
    sdp_backend *be;
    sdp_tf m;
    float images[B * CH * SIZE * SIZE];
    int labels[B];
} fixture;

static void setup_dropout(fixture *f, uint64_t seed, float dropout) {
    memset(f, 0, sizeof *f);
    sdp_tf_config c = tiny();
    c.model.dropout = dropout;
    f->be = sdp_backend_cpu(SDP_GEMM_DNNL, &f->mem);
    sdp_tf_create(&f->m, &c, NULL, B, 1, SDP_MODEL_TRAIN, f->be);
    sdp_layout_init_values(&f->m.layout, f->m.params, seed);
    /* Larger-than-default weights make every path (norm gains, biases, positions) matter. */
    sdp_rng r = sdp_rng_make(seed, 1);
    for (size_t i = 0; i < f->m.layout.numel; i++) f->m.params[i] += 0.3f * sdp_rng_normal(&r);
    tu_fill(f->images, B * CH * SIZE * SIZE, &r, 1.0f);
    for (int i = 0; i < B; i++) f->labels[i] = (int)sdp_rng_below(&r, CLASSES);
    f->labels[1] = -1; /* an ignored label must not contribute */
}

static void setup(fixture *f, uint64_t seed) {
    setup_dropout(f, seed, 0.0f);
}

static void teardown(fixture *f) {
    sdp_tf_destroy(&f->m);
    sdp_backend_destroy(f->be);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(f->mem.cur[k], 0);
}

/* Every parameter's gradient against central differences of the summed loss (float model, step
 * 1e-2; a wrong backward errs by the order of the gradient itself). With dropout, every forward
 * draws its masks from one key, so the differences are those of one fixed function. */
static void check_gradients(float dropout) {
    static fixture f;
    setup_dropout(&f, 5, dropout);
    sdp_tf *m = &f.m;
    sdp_tf_set_dropout(m, dropout > 0, 0xbead);
    sdp_tf_forward_images(m, f.images, f.labels, B);
    assert_int_equal(m->n_targets, B - 1);
    sdp_tf_backward(m, 1.0f);
    double err2 = 0, ref2 = 0;
    int bad = 0;
    const float h = 1e-2f;
    for (size_t i = 0; i < m->layout.numel; i++) {
        float p0 = m->params[i];
        m->params[i] = p0 + h;
        double lp = sdp_tf_forward_images(m, f.images, f.labels, B);
        m->params[i] = p0 - h;
        double lm = sdp_tf_forward_images(m, f.images, f.labels, B);
        m->params[i] = p0;
        double fd = (lp - lm) / (2.0 * h), an = m->grads[i];
        err2 += (fd - an) * (fd - an);
        ref2 += fd * fd;
        if (fabs(fd - an) > 5e-3 + 3e-2 * fabs(fd) && bad++ < 5)
            print_error("param %zu: analytic %g, numeric %g\n", i, an, fd);
    }
    double rel = sqrt(err2 / ref2);
    print_message("vit (dropout %g): %zu params, relative gradient error %.2e, %d outside "
                  "tolerance\n",
                  (double)dropout, m->layout.numel, rel, bad);
    assert_true(ref2 > 0);
    assert_true(rel < 5e-3);
    assert_int_equal(bad, 0);
    /* Every stem tensor got a gradient (the class token and positions included). */
    const char *stem[] = {"vit.embeddings.cls_token", "vit.embeddings.position_embeddings",
                          "vit.embeddings.patch_embeddings.projection.weight"};
    for (int t = 0; t < 3; t++) {
        const sdp_param *p = sdp_layout_find(&m->layout, stem[t]);
        double norm = 0;
        for (size_t e = 0; e < p->numel; e++) norm += fabs(m->grads[p->offset + e]);
        assert_true(norm > 0);
    }
    teardown(&f);
}

static void test_gradients_match_finite_differences(void **state) {
    (void)state;
    check_gradients(0.0f);
    check_gradients(0.3f);
}

/* The classifier reads the class token, the first token: under a causal mask it would see only
 * itself, and no pixel could change the prediction. Every patch must reach it. */
static void test_class_token_sees_every_patch(void **state) {
    (void)state;
    static fixture f;
    setup(&f, 6);
    const int K = CLASSES;
    float before[CLASSES];
    sdp_tf_forward_images(&f.m, f.images, NULL, 1);
    memcpy(before, sdp_tf_logits_row(&f.m, 0), sizeof before);
    /* The last pixel belongs to the last patch. */
    f.images[CH * SIZE * SIZE - 1] += 1.0f;
    sdp_tf_forward_images(&f.m, f.images, NULL, 1);
    double change = 0;
    for (int k = 0; k < K; k++) change += fabs(sdp_tf_logits_row(&f.m, 0)[k] - before[k]);
    print_message("logit change from the last patch: %.3g\n", change);
    assert_true(change > 1e-4);
    teardown(&f);
}

/* n_correct counts the labels equal to the argmax of each image's logits. */
static void test_accuracy_count(void **state) {
    (void)state;
    static fixture f;
    setup(&f, 7);
    sdp_tf_forward_images(&f.m, f.images, NULL, B);
    int labels[B], want = 0;
    for (int b = 0; b < B; b++) {
        const float *z = sdp_tf_logits_row(&f.m, b);
        int best = 0;
        for (int k = 1; k < CLASSES; k++) best = z[k] > z[best] ? k : best;
        labels[b] = b == 0 ? best : (best + 1) % CLASSES; /* one hit, then misses */
        want += labels[b] == best;
    }
    sdp_tf_forward_images(&f.m, f.images, labels, B);
    assert_int_equal(f.m.n_correct, want);
    assert_int_equal(want, 1);
    teardown(&f);
}

static void make_bad_patch(void *ctx) {
    (void)ctx;
    sdp_tf_config c = tiny();
    c.model.patch = 3; /* does not divide 4 */
    sdp_tf_config_finish(&c);
}

static void test_bad_patch_fails_clearly(void **state) {
    (void)state;
    tu_expect_fatal(make_bad_patch, NULL, "--patch 3 does not divide the image size 4");
}

int main(void) {
    sdp_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_class_token_sees_every_patch),
        cmocka_unit_test(test_accuracy_count),
        cmocka_unit_test(test_bad_patch_fails_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
