/* The ViT: an image stem and a classifier head around the transformer's layer stack (tf_stack.c),
 * HF ViTForImageClassification's names. Patches are projected by a strided conv (a gather and a
 * linear layer), a class token is prepended and learned positions added; the layers are GPT's
 * with bidirectional attention; the class token's output, normalised, feeds the classifier. */
#include "models/tf_families.h"
#include "models/tf_stack.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* What only the ViT has: wte, wpe and lm_head of sdp_tf_offsets are its patch projection's weight,
 * its position table and its classifier's weight; these are the rest. */
struct sdp_tf_vit {
    long patch_b, cls, head_b;       /* parameter offsets of its other tensors */
    long g_patch_b, g_cls, g_head_b; /* and of their gradients (as sdp_tf.goff) */
    float *images;                   /* [B, in_channels, S, S] the last forward's, uploaded */
    float *patches;                  /* [B, P, C] patch embeddings, then their gradients */
    float *patch_rows; /* [B * P, in_channels * patch^2] the patches gathered for the projection
                        * GEMM, kept from forward to backward (the projection's input) */
    float *pooled;     /* [B, C] the class token's output, the classifier's input */
};

/* ---- parameters ---------------------------------------------------------------------------- */

/* HF ViT keeps query, key and value apart; declared back to back (weights, then biases) they form
 * the same fused [3D, C] matrix and [3D] bias as gpt's c_attn. */
static void describe_layer(tf_adder *a, const sdp_tf_config *c, int gl, int H, int F,
                           sdp_tf_layer_offsets *o) {
    const int C = c->model.width, D = H * (C / c->model.heads);
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->model.layers);
    char n[SDP_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "vit.encoder.layer.%d.%s", gl, suffix), n)
    *o = (sdp_tf_layer_offsets){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    o->ln1_w = tf_add(a, (tensor_desc){.name = NAME("layernorm_before.weight"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ONES});
    o->ln1_b = tf_add(a, (tensor_desc){.name = NAME("layernorm_before.bias"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ZEROS});
    static const char *const QKV[] = {"query", "key", "value"};
    char sub[64];
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "attention.attention.%s.weight", QKV[i]);
        long w = tf_add(a, (tensor_desc){.name = NAME(sub),
                                         .ndim = 2,
                                         .shape = {D, C},
                                         .group = TF_GROUP_ATTN,
                                         .decay = true,
                                         .std = std});
        if (i == 0) o->w_qkv = w;
    }
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "attention.attention.%s.bias", QKV[i]);
        long b = tf_add(a, (tensor_desc){.name = NAME(sub),
                                         .ndim = 1,
                                         .shape = {D},
                                         .group = TF_GROUP_ATTN,
                                         .init = SDP_INIT_ZEROS});
        if (i == 0) o->b_qkv = b;
    }
    o->w_o = tf_add(a, (tensor_desc){.name = NAME("attention.output.dense.weight"),
                                     .ndim = 2,
                                     .shape = {C, D},
                                     .group = TF_GROUP_ATTN,
                                     .axis = 1,
                                     .decay = true,
                                     .std = proj_std});
    o->b_o = tf_add(a, (tensor_desc){.name = NAME("attention.output.dense.bias"),
                                     .ndim = 1,
                                     .shape = {C},
                                     .init = SDP_INIT_ZEROS});
    o->ln2_w = tf_add(a, (tensor_desc){.name = NAME("layernorm_after.weight"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ONES});
    o->ln2_b = tf_add(a, (tensor_desc){.name = NAME("layernorm_after.bias"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ZEROS});
    o->w_fc = tf_add(a, (tensor_desc){.name = NAME("intermediate.dense.weight"),
                                      .ndim = 2,
                                      .shape = {F, C},
                                      .group = TF_GROUP_MLP,
                                      .decay = true,
                                      .std = std});
    o->b_fc = tf_add(a, (tensor_desc){.name = NAME("intermediate.dense.bias"),
                                      .ndim = 1,
                                      .shape = {F},
                                      .group = TF_GROUP_MLP,
                                      .init = SDP_INIT_ZEROS});
    o->w_proj = tf_add(a, (tensor_desc){.name = NAME("output.dense.weight"),
                                        .ndim = 2,
                                        .shape = {C, F},
                                        .group = TF_GROUP_MLP,
                                        .axis = 1,
                                        .decay = true,
                                        .std = proj_std});
    o->b_proj = tf_add(
        a, (tensor_desc){
               .name = NAME("output.dense.bias"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
#undef NAME
}

/* The stem, in HF ViT's shapes: a conv of kernel = stride = patch, the class token, and a
 * position table with the class token's row first. */
static void describe_stem(tf_adder *a, const sdp_tf_config *c, sdp_tf_offsets *o,
                          struct sdp_tf_vit *v) {
    const int64_t C = c->model.width, p = c->model.patch;
    o->wte = tf_add(a, (tensor_desc){.name = "vit.embeddings.patch_embeddings.projection.weight",
                                     .ndim = 4,
                                     .shape = {C, c->model.in_channels, p, p},
                                     .decay = true,
                                     .std = 0.02f});
    v->patch_b = tf_add(a, (tensor_desc){.name = "vit.embeddings.patch_embeddings.projection.bias",
                                         .ndim = 1,
                                         .shape = {C},
                                         .init = SDP_INIT_ZEROS});
    v->cls = tf_add(
        a, (tensor_desc){
               .name = "vit.embeddings.cls_token", .ndim = 3, .shape = {1, 1, C}, .std = 0.02f});
    o->wpe = tf_add(a, (tensor_desc){.name = "vit.embeddings.position_embeddings",
                                     .ndim = 3,
                                     .shape = {1, c->model.seq_len, C},
                                     .std = 0.02f});
}

static void describe_head(tf_adder *a, const sdp_tf_config *c, sdp_tf_offsets *o,
                          struct sdp_tf_vit *v) {
    const int C = c->model.width;
    o->lnf_w = tf_add(
        a, (tensor_desc){
               .name = "vit.layernorm.weight", .ndim = 1, .shape = {C}, .init = SDP_INIT_ONES});
    o->lnf_b = tf_add(
        a, (tensor_desc){
               .name = "vit.layernorm.bias", .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
    o->lm_head = tf_add(a, (tensor_desc){.name = "classifier.weight",
                                         .ndim = 2,
                                         .shape = {c->model.classes, C},
                                         .decay = true,
                                         .std = 0.02f});
    v->head_b = tf_add(a, (tensor_desc){.name = "classifier.bias",
                                        .ndim = 1,
                                        .shape = {c->model.classes},
                                        .init = SDP_INIT_ZEROS});
}

static void describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o, struct sdp_tf_vit *v) {
    tf_adder a = tf_describe_begin(L, s, o);
    describe_stem(&a, c, o, v);
    for (int i = 0; i < s->n_layer; i++) {
        tf_describe_block(&a, c, s, i, "vit.encoder.layer");
        sdp_tf_layer_offsets lo;
        describe_layer(&a, c, s->layer_id[i], s->n_head[i], s->d_ff[i], &lo);
        if (o->layers) o->layers[i] = lo;
    }
    a.block = -1;
    describe_head(&a, c, o, v);
}

void tf_vit_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o) {
    struct sdp_tf_vit v;
    describe(L, c, s, o, &v);
}

/* ---- the stem and the head ----------------------------------------------------------------- */

static int patches_per_image(const sdp_tf *m) {
    return m->T - 1;
}

/* Columns of a patch row: the projection's input width. */
static int patch_cols(const sdp_tf *m) {
    return m->cfg.model.in_channels * m->cfg.model.patch * m->cfg.model.patch;
}

static size_t image_floats(const sdp_tf *m) {
    return (size_t)m->cfg.model.in_channels * m->cfg.model.image_size * m->cfg.model.image_size;
}

static void alloc_part(sdp_tf *m) {
    const sdp_backend *be = m->be;
    struct sdp_tf_vit *v = m->vit;
    const size_t B = (size_t)m->B, P = (size_t)patches_per_image(m), C = (size_t)m->cfg.model.width;
    v->images = be->alloc(be, SDP_MEM_ACTS, B * image_floats(m) * sizeof(float));
    v->patches = be->alloc(be, SDP_MEM_ACTS, B * P * C * sizeof(float));
    v->pooled = be->alloc(be, SDP_MEM_ACTS, B * C * sizeof(float));
    v->patch_rows = be->alloc(be, SDP_MEM_SCRATCH, B * P * patch_cols(m) * sizeof(float));
}

static void destroy_part(sdp_tf *m) {
    struct sdp_tf_vit *v = m->vit;
    m->be->free(m->be, v->images);
    m->be->free(m->be, v->patches);
    m->be->free(m->be, v->pooled);
    m->be->free(m->be, v->patch_rows);
    free(v);
    m->vit = NULL;
}

static void use_grads(sdp_tf *m, const long *grad_offset) {
    struct sdp_tf_vit *v = m->vit;
    v->g_patch_b = tf_grad_offset_of(&m->layout, v->patch_b, grad_offset);
    v->g_cls = tf_grad_offset_of(&m->layout, v->cls, grad_offset);
    v->g_head_b = tf_grad_offset_of(&m->layout, v->head_b, grad_offset);
}

/* Labels are checked on the host; the hits are counted on the logits, before the softmax. */
static double classify(sdp_tf *m, const int *labels, int B) {
    const sdp_backend *be = m->be;
    const int K = m->cfg.model.classes;
    m->n_targets = 0;
    for (int b = 0; b < B; b++) {
        SDP_CHECK(labels[b] < K,
                  "label %d is outside the model's %d classes: the data does not "
                  "match the model",
                  labels[b], K);
        m->n_targets += labels[b] >= 0;
    }
    be->upload(be, m->targets, labels, (size_t)B * sizeof(int));
    m->n_correct = sdp_count_correct(be, m->probs, m->targets, B, K, K);
    return sdp_softmax_xent_fwd(be, m->losses, m->probs, m->probs, m->targets, B, K, K);
}

/* The patch embeddings, class token and positions of the images into m->embed, dropped where this
 * forward drops. */
static void embed(sdp_tf *m, const float *images, int B) {
    SDP_ASSERT(B >= 1 && B <= m->B && images);
    const sdp_backend *be = m->be;
    const sdp_tf_config *c = &m->cfg;
    struct sdp_tf_vit *v = m->vit;
    const int T = m->T, C = c->model.width;
    be->upload(be, v->images, images, (size_t)B * image_floats(m) * sizeof(float));
    m->last_B = B;
    m->last_T = T;
    sdp_patch_gather(be, v->patch_rows, v->images, B, c->model.in_channels, c->model.image_size,
                     c->model.image_size, c->model.patch);
    sdp_linear_fwd(be, v->patches, v->patch_rows, tf_param(m, m->off.wte), tf_param(m, v->patch_b),
                   B * patches_per_image(m), patch_cols(m), C);
    sdp_vit_embed_fwd(be, m->embed, v->patches, tf_param(m, v->cls), tf_param(m, m->off.wpe), B, T,
                      C);
    tf_stack_drop_stem(m, B, T);
}

/* The staged forward's stem: it evaluates, without dropout. */
static void stem(sdp_tf *m, const float *images, int B) {
    tf_stack_begin_forward(m, false);
    embed(m, images, B);
}

static double head(sdp_tf *m, const float *top, const int *labels, int B) {
    const sdp_backend *be = m->be;
    const sdp_tf_config *c = &m->cfg;
    struct sdp_tf_vit *v = m->vit;
    const int T = m->T, C = c->model.width;
    m->last_B = B;
    sdp_copy_rows(be, v->pooled, (size_t)C, top, (size_t)T * C, (size_t)B, (size_t)C);
    tf_norm_fwd(m, SDP_TF_LAYERNORM, m->lnf, m->lnf_mean, m->lnf_rstd, v->pooled, m->off.lnf_w,
                m->off.lnf_b, B);
    sdp_linear_fwd(be, m->probs, m->lnf, tf_param(m, m->off.lm_head), tf_param(m, v->head_b), B, C,
                   c->model.classes);
    m->has_targets = labels != NULL;
    return labels ? classify(m, labels, B) : 0.0;
}

static double forward(sdp_tf *m, const float *images, const int *labels, int B) {
    tf_stack_begin_forward(m, true);
    embed(m, images, B);
    return head(m, tf_stack_forward(m, m->embed, B, m->T), labels, B);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* From the loss to dL/d(top layer output) in d_res: only the class tokens' rows are nonzero. */
static void head_backward(sdp_tf *m, float dloss) {
    const sdp_backend *be = m->be;
    const struct sdp_tf_vit *v = m->vit;
    const int B = m->last_B, T = m->T, C = m->cfg.model.width, K = m->cfg.model.classes;
    const size_t BC = (size_t)B * C;
    sdp_softmax_xent_bwd(be, m->probs, m->probs, m->targets, dloss, B, K, K);
    be->zero(be, m->d_norm, BC * sizeof(float));
    sdp_linear_bwd(be, m->d_norm, tf_grad(m, m->goff.lm_head), tf_grad(m, v->g_head_b), m->probs,
                   m->lnf, tf_param(m, m->off.lm_head), B, C, K);
    float *d_pooled = m->d_branch; /* free until the layers' backward */
    be->zero(be, d_pooled, BC * sizeof(float));
    tf_norm_bwd(m, SDP_TF_LAYERNORM, d_pooled, m->d_norm, v->pooled, m->lnf_mean, m->lnf_rstd,
                m->off.lnf_w, m->goff.lnf_w, m->goff.lnf_b, B);
    be->zero(be, m->d_res, BC * T * sizeof(float));
    sdp_copy_rows(be, m->d_res, (size_t)T * C, d_pooled, (size_t)C, (size_t)B, (size_t)C);
}

/* Gradients of the class token, the positions and the patch projection from d_res. */
static void stem_backward(sdp_tf *m, int B) {
    const sdp_backend *be = m->be;
    const struct sdp_tf_vit *v = m->vit;
    const int T = m->T, C = m->cfg.model.width;
    /* the patch embeddings are not needed any more: they take their gradients */
    sdp_vit_embed_bwd(be, v->patches, tf_grad(m, v->g_cls), tf_grad(m, m->goff.wpe),
                      tf_stack_stem_grad(m, B, T), B, T, C);
    float *dw = tf_grad(m, m->goff.wte), *db = tf_grad(m, v->g_patch_b);
    if (dw || db)
        sdp_linear_bwd(be, NULL, dw, db, v->patches, v->patch_rows, tf_param(m, m->off.wte),
                       B * patches_per_image(m), patch_cols(m), C);
}

static void backward(sdp_tf *m, float dloss) {
    const int B = m->last_B;
    head_backward(m, dloss);
    tf_stack_backward(m, B, m->T);
    if (m->backward_floor < 0) stem_backward(m, B);
    m->has_targets = false; /* probs now hold gradients */
}

/* Per image: T tokens through the layers, P patches through the stem, one classifier row. */
static double train_flops(const sdp_tf *m, int T) {
    const double C = m->cfg.model.width;
    double layers, attn;
    tf_stack_flops(m, T, &layers, &attn);
    const double p = m->cfg.model.patch, stem = (T - 1) * m->cfg.model.in_channels * p * p * C;
    return 6.0 * (T * layers + stem + C * m->cfg.model.classes) + 6.0 * T * attn;
}

static const struct sdp_tf_family VIT = {
    .stem_images = stem,
    .head_images = head,
    .forward_images = forward,
    .backward = backward,
    .use_grads = use_grads,
    .destroy = destroy_part,
    .train_flops = train_flops,
};

void tf_vit_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be) {
    tf_begin(m, cfg, shape, B, T, true, be); /* every image is patches + the class token */
    m->family = &VIT;
    m->opts = (sdp_tf_layer_opts){.norm = SDP_TF_LAYERNORM, .mlp = SDP_TF_GELU, .causal = false};
    m->vit = sdp_xcalloc(1, sizeof *m->vit, "a ViT's own part");
    describe(&m->layout, &m->cfg, &m->shape, &m->off, m->vit);
    tf_alloc_params(m, mode);
    struct sdp_tf_vit *v = m->vit;
    v->g_patch_b = v->patch_b;
    v->g_cls = v->cls;
    v->g_head_b = v->head_b;
    const size_t rows = (size_t)m->B; /* a ViT classifies its class tokens alone */
    m->targets = tf_ints(m, rows);
    tf_stack_alloc(m, mode);
    tf_head_alloc(m, rows);
    alloc_part(m);
    tf_stack_alloc_backward(m, mode);
}
