/* The transformer (gpt and llama styles on tokens, vit on images) behind the generic model
 * interface (sdp/model.h), on the configuration's backend. Token and image models have tables of
 * their own, chosen by the family when the model is built. */
#include "sdp/check.h"
#include "sdp/model.h"
#include "sdp/transformer.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    sdp_tf tf;
} tf_model;

static sdp_tf *tf(const sdp_model *m) {
    return &((tf_model *)m->impl)->tf;
}

static void destroy(sdp_model *m) {
    tf_model *impl = m->impl;
    sdp_tf_destroy(&impl->tf);
    free(impl);
    memset(m, 0, sizeof *m);
}

static void check_tokens(const sdp_tf *t, const sdp_batch *b) {
    SDP_CHECK(b->tokens, "%s: the batch has no tokens: feed text or token shards",
              sdp_tf_style_name(t->cfg.style));
}

static void check_images(const sdp_batch *b) {
    SDP_CHECK(b->images, "vit: the batch has no images: feed an image dataset "
                         "(Fashion-MNIST or CIFAR)");
}

/* Training turns dropout on (where the model has any), with the caller's stream for its masks;
 * there are no batch statistics. */
static void forward_tokens(sdp_model *m, const sdp_batch *b, bool training, sdp_metrics *out) {
    sdp_tf *t = tf(m);
    check_tokens(t, b);
    sdp_tf_set_dropout(t, training, m->dropout_key);
    out->loss = sdp_tf_forward(t, b->tokens, b->targets, b->B, b->T);
    out->correct = 0;
    out->count = t->n_targets;
}

static void forward_images(sdp_model *m, const sdp_batch *b, bool training, sdp_metrics *out) {
    sdp_tf *t = tf(m);
    check_images(b);
    sdp_tf_set_dropout(t, training, m->dropout_key);
    out->loss = sdp_tf_forward_images(t, b->images, b->labels, b->B);
    out->correct = t->n_correct;
    out->count = t->n_targets;
}

static void backward(sdp_model *m, float dloss) {
    sdp_tf *t = tf(m);
    t->layer_done = m->layer_done;
    t->layer_done_ctx = m->layer_done_ctx;
    sdp_tf_backward(t, dloss);
}

static void use_grads(sdp_model *m, float *grads, const long *grad_offset,
                      const sdp_grad_slices *slices) {
    sdp_tf_use_grads(tf(m), grads, grad_offset, slices);
}

static double train_flops_per_example(const sdp_model *m) {
    return sdp_tf_train_flops_per_token(tf(m), tf(m)->T);
}

static size_t stream_floats(const sdp_model *m) {
    const sdp_tf *t = tf(m);
    return (size_t)t->B * t->T * t->cfg.model.width;
}

/* The stages copy the stem's output out of the model: the stream is the caller's. A token model's
 * stream has the batch's T rows per example, a ViT's its patches and class token (the model's T).
 * They evaluate: training or not, they apply no dropout.
 */
static void forward_stem_tokens(sdp_model *m, const sdp_batch *b, bool training, float *x) {
    (void)training;
    sdp_tf *t = tf(m);
    check_tokens(t, b);
    sdp_tf_stem_tokens(t, b->tokens, b->B, b->T);
    const size_t n = (size_t)b->B * b->T * t->cfg.model.width;
    sdp_copy_rows(t->be, x, 0, t->embed, 0, 1, n);
}

static void forward_stem_images(sdp_model *m, const sdp_batch *b, bool training, float *x) {
    (void)training;
    sdp_tf *t = tf(m);
    check_images(b);
    sdp_tf_stem_images(t, b->images, b->B);
    const size_t n = (size_t)b->B * t->T * t->cfg.model.width;
    sdp_copy_rows(t->be, x, 0, t->embed, 0, 1, n);
}

static void forward_block_tokens(sdp_model *m, int i, const sdp_batch *b, bool training, float *x) {
    (void)training;
    sdp_tf_layer_forward(tf(m), i, x, b->B, b->T);
}

static void forward_block_images(sdp_model *m, int i, const sdp_batch *b, bool training, float *x) {
    (void)training;
    sdp_tf_layer_forward(tf(m), i, x, b->B, tf(m)->T);
}

static void forward_head_tokens(sdp_model *m, const sdp_batch *b, bool training, const float *x,
                                sdp_metrics *out) {
    (void)training;
    sdp_tf *t = tf(m);
    out->loss = sdp_tf_head_tokens(t, x, b->targets, b->B, b->T);
    out->correct = 0;
    out->count = t->n_targets;
}

static void forward_head_images(sdp_model *m, const sdp_batch *b, bool training, const float *x,
                                sdp_metrics *out) {
    (void)training;
    sdp_tf *t = tf(m);
    out->loss = sdp_tf_head_images(t, x, b->labels, b->B);
    out->correct = t->n_correct;
    out->count = t->n_targets;
}

static const sdp_model_ops TOKEN_OPS = {destroy,
                                        forward_tokens,
                                        backward,
                                        use_grads,
                                        train_flops_per_example,
                                        stream_floats,
                                        forward_stem_tokens,
                                        forward_block_tokens,
                                        forward_head_tokens};

static const sdp_model_ops IMAGE_OPS = {destroy,
                                        forward_images,
                                        backward,
                                        use_grads,
                                        train_flops_per_example,
                                        stream_floats,
                                        forward_stem_images,
                                        forward_block_images,
                                        forward_head_images};

/* The transformer's configuration of c: the knobs as they are, with the style's defaults filled
 * and what they imply derived. */
static sdp_tf_config finished(const sdp_model_config *c) {
    sdp_tf_config t = {.model = *c};
    sdp_tf_config_finish(&t);
    return t;
}

/* d_ff's and rope_theta's defaults; vit's seq_len, its patches and the class token. */
static void finish_config(sdp_model_config *c) {
    *c = finished(c).model;
}

static void describe_full(sdp_layout *full, const sdp_model_config *c) {
    const sdp_tf_config t = finished(c);
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, &t);
    sdp_tf_describe(full, &t, &s);
    sdp_tf_shape_free(&s);
}

static void create(sdp_model *m, const sdp_model_config *c, const sdp_subnet_spec *spec, int B,
                   int T, sdp_model_mode mode, const sdp_model_ops *ops) {
    SDP_CHECK(c->backend,
              "%s: no backend in the model configuration: the caller creates one "
              "(sdp_backend_cpu on the CPU)",
              c->arch);
    const sdp_tf_config t = finished(c);
    sdp_tf_shape shape;
    if (spec)
        sdp_tf_shape_from_keep(&shape, &t, spec->nblocks, spec->keep,
                               (const int(*)[SDP_MAX_GROUPS])spec->kept, spec->scale);
    else
        sdp_tf_shape_full(&shape, &t);
    tf_model *impl = sdp_xcalloc(1, sizeof *impl, "a transformer");
    sdp_tf_create(&impl->tf, &t, &shape, B, T, mode, c->backend);
    sdp_tf_shape_free(&shape);
    memset(m, 0, sizeof *m);
    m->ops = ops;
    m->impl = impl;
    m->layout = &impl->tf.layout;
    m->params = impl->tf.params;
}

static void create_tokens(sdp_model *m, const sdp_model_config *c, const sdp_subnet_spec *spec,
                          int B, int T, sdp_model_mode mode) {
    create(m, c, spec, B, T, mode, &TOKEN_OPS);
}

static void create_images(sdp_model *m, const sdp_model_config *c, const sdp_subnet_spec *spec,
                          int B, int T, sdp_model_mode mode) {
    create(m, c, spec, B, T, mode, &IMAGE_OPS);
}

const sdp_model_family SDP_FAMILY_GPT = {"gpt", false, finish_config, describe_full, create_tokens};
const sdp_model_family SDP_FAMILY_LLAMA = {"llama", false, finish_config, describe_full,
                                           create_tokens};
const sdp_model_family SDP_FAMILY_VIT = {"vit", true, finish_config, describe_full, create_images};
