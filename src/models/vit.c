/* The ViT's image stem and classifier head around the transformer's layers (transformer.c):
 * patches projected by a strided conv (a gather and a linear layer), a class token prepended,
 * learned positions added; the class token's output, normalised, feeds the classifier. Attention
 * is bidirectional. */
#include "models/transformer_internal.h"
#include "sdp/check.h"

static int patches_per_image(const sdp_tf *m) {
    return m->T - 1;
}

/* Columns of a patch row: the projection's input width. */
static int patch_cols(const sdp_tf *m) {
    return m->cfg.in_channels * m->cfg.patch * m->cfg.patch;
}

static size_t image_floats(const sdp_tf *m) {
    return (size_t)m->cfg.in_channels * m->cfg.image_size * m->cfg.image_size;
}

void tf_vit_alloc(sdp_tf *m) {
    const sdp_backend *be = m->be;
    const size_t B = (size_t)m->B, P = (size_t)patches_per_image(m), C = (size_t)m->cfg.d_model;
    m->images = be->alloc(be, SDP_MEM_ACTS, B * image_floats(m) * sizeof(float));
    m->patches = be->alloc(be, SDP_MEM_ACTS, B * P * C * sizeof(float));
    m->pooled = be->alloc(be, SDP_MEM_ACTS, B * C * sizeof(float));
    m->patch_rows = be->alloc(be, SDP_MEM_SCRATCH, B * P * patch_cols(m) * sizeof(float));
}

void tf_vit_free(sdp_tf *m) {
    m->be->free(m->be, m->images);
    m->be->free(m->be, m->patches);
    m->be->free(m->be, m->pooled);
    m->be->free(m->be, m->patch_rows);
}

/* Labels are checked on the host; the hits are counted on the logits, before the softmax. */
static double classify(sdp_tf *m, const int *labels, int B) {
    const sdp_backend *be = m->be;
    const int K = m->cfg.classes;
    m->n_targets = 0;
    for (int b = 0; b < B; b++) {
        SDP_CHECK(labels[b] < K,
                  "label %d is outside the model's %d classes: the data does not "
                  "match the model",
                  labels[b], K);
        m->n_targets += labels[b] >= 0;
    }
    be->upload(be, m->targets, labels, (size_t)B * sizeof(int));
    m->n_correct = be->count_correct(be, m->probs, m->targets, B, K, K);
    return be->softmax_xent_fwd(be, m->losses, m->probs, m->probs, m->targets, B, K, K);
}

void sdp_tf_stem_images(sdp_tf *m, const float *images, int B) {
    SDP_CHECK(m->cfg.style == SDP_STYLE_VIT, "only vit reads images");
    SDP_ASSERT(B >= 1 && B <= m->B && images);
    const sdp_backend *be = m->be;
    const sdp_tf_config *c = &m->cfg;
    const int T = m->T, C = c->d_model;
    be->upload(be, m->images, images, (size_t)B * image_floats(m) * sizeof(float));
    m->last_B = B;
    m->last_T = T;
    be->patch_gather(be, m->patch_rows, m->images, B, c->in_channels, c->image_size, c->image_size,
                     c->patch);
    be->linear_fwd(be, m->patches, m->patch_rows, tf_param(m, m->off.wte),
                   tf_param(m, m->off.patch_b), B * patches_per_image(m), patch_cols(m), C);
    be->vit_embed_fwd(be, m->embed, m->patches, tf_param(m, m->off.cls), tf_param(m, m->off.wpe), B,
                      T, C);
}

double sdp_tf_head_images(sdp_tf *m, const float *top, const int *labels, int B) {
    const sdp_backend *be = m->be;
    const sdp_tf_config *c = &m->cfg;
    const int T = m->T, C = c->d_model;
    m->last_B = B;
    be->copy_rows(be, m->pooled, (size_t)C, top, (size_t)T * C, (size_t)B, (size_t)C);
    tf_norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->pooled, m->off.lnf_w, m->off.lnf_b, B);
    be->linear_fwd(be, m->probs, m->lnf, tf_param(m, m->off.lm_head), tf_param(m, m->off.head_b), B,
                   C, c->classes);
    m->has_targets = labels != NULL;
    return labels ? classify(m, labels, B) : 0.0;
}

double sdp_tf_forward_images(sdp_tf *m, const float *images, const int *labels, int B) {
    sdp_tf_stem_images(m, images, B);
    return sdp_tf_head_images(m, tf_layers_forward(m, m->embed, B, m->T), labels, B);
}

/* Gradients of the class token, the positions and the patch projection from d_res. */
static void stem_backward(sdp_tf *m, int B) {
    const sdp_backend *be = m->be;
    const int T = m->T, C = m->cfg.d_model;
    /* the patch embeddings are not needed any more: they take their gradients */
    be->vit_embed_bwd(be, m->patches, tf_grad(m, m->goff.cls), tf_grad(m, m->goff.wpe), m->d_res, B,
                      T, C);
    float *dw = tf_grad(m, m->goff.wte), *db = tf_grad(m, m->goff.patch_b);
    if (dw || db)
        be->linear_bwd(be, NULL, dw, db, m->patches, m->patch_rows, tf_param(m, m->off.wte),
                       B * patches_per_image(m), patch_cols(m), C);
}

void tf_vit_backward(sdp_tf *m, float dloss) {
    const sdp_backend *be = m->be;
    const int B = m->last_B, T = m->T, C = m->cfg.d_model, K = m->cfg.classes;
    const size_t BC = (size_t)B * C;
    be->softmax_xent_bwd(be, m->probs, m->probs, m->targets, dloss, B, K, K);
    be->zero(be, m->d_norm, BC * sizeof(float));
    be->linear_bwd(be, m->d_norm, tf_grad(m, m->goff.lm_head), tf_grad(m, m->goff.head_b), m->probs,
                   m->lnf, tf_param(m, m->off.lm_head), B, C, K);
    float *d_pooled = m->d_branch; /* free until the layers' backward */
    be->zero(be, d_pooled, BC * sizeof(float));
    tf_norm_bwd(m, d_pooled, m->d_norm, m->pooled, m->lnf_mean, m->lnf_rstd, m->off.lnf_w,
                m->goff.lnf_w, m->goff.lnf_b, B);
    be->zero(be, m->d_res, BC * T * sizeof(float));
    be->copy_rows(be, m->d_res, (size_t)T * C, d_pooled, (size_t)C, (size_t)B, (size_t)C);
    tf_layers_backward(m, B, T);
    if (m->backward_floor < 0) stem_backward(m, B);
    m->has_targets = false; /* probs now hold gradients */
}
