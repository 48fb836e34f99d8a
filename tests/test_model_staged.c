/* The forward in stages (stem, each block, head), run the way block-streamed evaluation runs it,
 * one block's model at a time over several batches, gives bitwise the whole model's forward:
 * for every family, in training mode (batch statistics, whose running statistics the block models
 * update in the same order as the whole model) and then in evaluation mode. */
#include "testutil.h"

#include "sdp/model.h"

enum { NBATCH = 3 };

typedef struct {
    sdp_model_config cfg;
    int B, T;
    sdp_batch batch[NBATCH];
} setup;

static sdp_batch image_batch(const sdp_model_config *c, int B, sdp_rng *r) {
    const size_t n = (size_t)B * c->in_channels * c->image_size * c->image_size;
    float *x = malloc(n * sizeof *x);
    int *y = malloc((size_t)B * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    tu_fill(x, n, r, 1.0f);
    for (int i = 0; i < B; i++) y[i] = (int)sdp_rng_below(r, (uint64_t)c->classes);
    y[B - 1] = -1; /* ignored, as the padding of a last partial batch */
    return (sdp_batch){.B = B, .T = 1, .images = x, .labels = y};
}

static sdp_batch token_batch(const sdp_model_config *c, int B, int T, sdp_rng *r) {
    int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    assert_non_null(in);
    assert_non_null(tg);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)sdp_rng_below(r, (uint64_t)c->vocab);
        tg[i] = (int)sdp_rng_below(r, (uint64_t)c->vocab);
    }
    return (sdp_batch){.B = B, .T = T, .tokens = in, .targets = tg};
}

static void free_batches(setup *s) {
    for (int i = 0; i < NBATCH; i++) {
        free((void *)s->batch[i].images);
        free((void *)s->batch[i].labels);
        free((void *)s->batch[i].tokens);
        free((void *)s->batch[i].targets);
    }
}

static const sdp_model_family *family(setup *s) {
    const sdp_model_family *f = sdp_model_family_find(s->cfg.arch);
    assert_non_null(f);
    f->finish_config(&s->cfg);
    return f;
}

/* The spec of a model that keeps block g of the full layout whole and no other droppable one
 * (a block that cannot be dropped is in every subnetwork). */
static sdp_subnet_spec one_block(const sdp_layout *full, int g) {
    sdp_subnet_spec spec = {full->nblocks, calloc((size_t)full->nblocks, sizeof(bool)),
                            calloc((size_t)full->nblocks, sizeof *spec.kept),
                            calloc((size_t)full->nblocks, sizeof(float))};
    assert_true(spec.keep && spec.kept && spec.scale);
    for (int b = 0; b < full->nblocks; b++) {
        spec.keep[b] = b == g || !full->blocks[b].droppable;
        spec.scale[b] = 1.0f;
        for (int j = 0; j < full->blocks[b].ngroups; j++)
            spec.kept[b][j] = full->blocks[b].groups[j].width;
    }
    return spec;
}

/* Copies every tensor of `part` (buffers only, if so) between it and `state`, which has a tensor
 * of the same name and size for each: into part, or back into state. */
static void exchange(sdp_model *part, sdp_model *state, bool into_part, bool buffers_only) {
    for (int i = 0; i < part->layout->nparams; i++) {
        const sdp_param *p = &part->layout->params[i];
        const sdp_param *q = sdp_layout_find(state->layout, p->name);
        assert_non_null(q);
        assert_int_equal(p->numel, q->numel);
        if (buffers_only && !p->buffer) continue;
        float *a = part->params + p->offset, *b = state->params + q->offset;
        memcpy(into_part ? a : b, into_part ? b : a, p->numel * sizeof(float));
    }
}

static int local_block(const sdp_layout *L, int g) {
    for (int i = 0; i < L->nblocks; i++)
        if (L->blocks[i].global_index == g) return i;
    fail_msg("block %d is not in the one-block model", g);
    return -1;
}

/* Runs the batches through `state`'s parameters block by block, as block-streamed evaluation
 * does, and leaves the running statistics the stages updated in `state`. */
static void staged(const sdp_model_family *f, setup *s, sdp_model *state, bool training,
                   sdp_metrics *out) {
    const sdp_layout *full = state->layout;
    const size_t n = state->ops->stream_floats(state);
    float *x = calloc(NBATCH * n, sizeof *x);
    assert_non_null(x);
    for (int g = 0; g < full->nblocks; g++) {
        sdp_subnet_spec spec = one_block(full, g);
        sdp_model m;
        f->create(&m, &s->cfg, &spec, s->B, s->T, SDP_MODEL_INFER);
        assert_int_equal(m.ops->stream_floats(&m), n);
        exchange(&m, state, true, false);
        const int i = local_block(m.layout, g);
        for (int k = 0; k < NBATCH; k++) {
            if (g == 0) m.ops->forward_stem(&m, &s->batch[k], training, x + k * n);
            m.ops->forward_block(&m, i, &s->batch[k], training, x + k * n);
            if (g == full->nblocks - 1)
                m.ops->forward_head(&m, &s->batch[k], training, x + k * n, &out[k]);
        }
        exchange(&m, state, false, true); /* the statistics the stages updated */
        m.ops->destroy(&m);
        free(spec.keep);
        free(spec.kept);
        free(spec.scale);
    }
    free(x);
}

static void check_family(setup *s) {
    const sdp_model_family *f = family(s);
    sdp_mem mem = {0};
    sdp_backend *be = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    s->cfg.backend = be;
    sdp_model whole, state;
    f->create(&whole, &s->cfg, NULL, s->B, s->T, SDP_MODEL_INFER);
    f->create(&state, &s->cfg, NULL, s->B, s->T, SDP_MODEL_INFER);
    sdp_layout_init_values(whole.layout, whole.params, 7);
    memcpy(state.params, whole.params, whole.layout->numel * sizeof(float));
    for (int training = 1; training >= 0; training--) {
        sdp_metrics want[NBATCH], got[NBATCH];
        for (int k = 0; k < NBATCH; k++)
            whole.ops->forward(&whole, &s->batch[k], training, &want[k]);
        staged(f, s, &state, training, got);
        for (int k = 0; k < NBATCH; k++) {
            assert_true(want[k].count > 0);
            assert_memory_equal(&want[k].loss, &got[k].loss, sizeof(double));
            assert_true(want[k].count == got[k].count && want[k].correct == got[k].correct);
        }
        /* the same running statistics, bit for bit (the parameters are untouched copies) */
        assert_memory_equal(whole.params, state.params, whole.layout->numel * sizeof(float));
    }
    whole.ops->destroy(&whole);
    state.ops->destroy(&state);
    s->cfg.backend = NULL;
    sdp_backend_destroy(be);
    free_batches(s);
}

static void test_resnet(void **st) {
    (void)st;
    /* depth 14: two blocks per stage, so identity blocks sit between downsampling ones */
    setup s = {.cfg = {.arch = "resnet",
                       .depth = 14,
                       .channels = 4,
                       .in_channels = 2,
                       .image_size = 8,
                       .classes = 5},
               .B = 4,
               .T = 1};
    sdp_rng r = sdp_rng_make(1, 0);
    for (int k = 0; k < NBATCH; k++) s.batch[k] = image_batch(&s.cfg, s.B, &r);
    check_family(&s);
}

static void test_vit(void **st) {
    (void)st;
    setup s = {.cfg = {.arch = "vit",
                       .layers = 3,
                       .heads = 2,
                       .width = 8,
                       .d_ff = 12,
                       .in_channels = 2,
                       .image_size = 4,
                       .patch = 2,
                       .classes = 3},
               .B = 3,
               .T = 1};
    sdp_rng r = sdp_rng_make(2, 0);
    for (int k = 0; k < NBATCH; k++) s.batch[k] = image_batch(&s.cfg, s.B, &r);
    check_family(&s);
}

static void check_tokens(const char *arch) {
    setup s = {
        .cfg = {.layers = 3, .heads = 2, .width = 16, .seq_len = 8, .vocab = 40}, .B = 2, .T = 8};
    snprintf(s.cfg.arch, sizeof s.cfg.arch, "%s", arch);
    sdp_rng r = sdp_rng_make(3, 0);
    for (int k = 0; k < NBATCH; k++) s.batch[k] = token_batch(&s.cfg, s.B, s.T, &r);
    check_family(&s);
}

static void test_gpt(void **st) {
    (void)st;
    check_tokens("gpt");
}

static void test_llama(void **st) {
    (void)st;
    check_tokens("llama");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet),
        cmocka_unit_test(test_vit),
        cmocka_unit_test(test_gpt),
        cmocka_unit_test(test_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
