/* The ViT's image stem and classifier head around the transformer's layers (transformer.c):
 * patches projected by a strided conv, a class token prepended, learned positions added; the
 * class token's output, normalised, feeds the classifier. Attention is bidirectional. */
#include "models/transformer_internal.h"
#include "sdp/check.h"
#include "sdp/ops_vision.h"

#include <string.h>

static int patches_per_image(const sdp_tf *m) {
    return m->T - 1;
}

void tf_vit_alloc(sdp_tf *m) {
    const sdp_tf_config *c = &m->cfg;
    const size_t B = (size_t)m->B, P = (size_t)patches_per_image(m), C = (size_t)c->d_model;
    m->patches = sdp_alloc(m->mem, SDP_MEM_ACTS, B * P * C * sizeof(float));
    m->pooled = sdp_alloc(m->mem, SDP_MEM_ACTS, B * C * sizeof(float));
    const size_t scratch = sdp_patch_embed_scratch_floats(m->B, c->in_channels, c->image_size,
                                                          c->image_size, c->patch);
    m->patch_scratch = sdp_alloc(m->mem, SDP_MEM_SCRATCH, scratch * sizeof(float));
}

void tf_vit_free(sdp_tf *m) {
    sdp_free(m->mem, m->patches);
    sdp_free(m->mem, m->pooled);
    sdp_free(m->mem, m->patch_scratch);
}

/* embed[b, 0] = cls + pos[0]; embed[b, 1 + i] = patch i + pos[1 + i]. */
static void embed_tokens(sdp_tf *m, int B) {
    const int T = m->T, P = T - 1, C = m->cfg.d_model;
    const float *cls = tf_param(m, m->off.cls), *pos = tf_param(m, m->off.wpe);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *src = t == 0 ? cls : m->patches + ((size_t)b * P + t - 1) * C;
            float *dst = m->embed + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dst[c] = src[c] + pos[(size_t)t * C + c];
        }
}

/* Copies row 0 (the class token) of each image's rows of x into dst [B, C]. */
static void gather_class_rows(float *dst, const float *x, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * C, x + (size_t)b * T * C, (size_t)C * sizeof(float));
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static double classify(sdp_tf *m, const int *labels, int B) {
    const int K = m->cfg.classes;
    m->n_targets = m->n_correct = 0;
    for (int b = 0; b < B; b++) {
        SDP_CHECK(labels[b] < K,
                  "label %d is outside the model's %d classes: the data does not "
                  "match the model",
                  labels[b], K);
        if (labels[b] < 0) continue;
        m->n_targets++;
        m->n_correct += argmax(m->probs + (size_t)b * K, K) == labels[b];
    }
    memcpy(m->targets, labels, (size_t)B * sizeof(int));
    return sdp_softmax_xent_fwd(m->losses, m->probs, m->probs, m->targets, B, K, K);
}

double sdp_tf_forward_images(sdp_tf *m, const float *images, const int *labels, int B) {
    SDP_CHECK(m->cfg.style == SDP_STYLE_VIT, "only vit reads images");
    SDP_ASSERT(B >= 1 && B <= m->B && images);
    const sdp_tf_config *c = &m->cfg;
    const int T = m->T, C = c->d_model, S = c->image_size;
    m->images = images;
    m->last_B = B;
    m->last_T = T;
    sdp_patch_embed_fwd(m->gemm, m->patches, images, tf_param(m, m->off.wte),
                        tf_param(m, m->off.patch_b), B, c->in_channels, S, S, c->patch, C,
                        m->patch_scratch);
    embed_tokens(m, B);
    const float *top = tf_layers_forward(m, m->embed, B, T);
    gather_class_rows(m->pooled, top, B, T, C);
    tf_norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->pooled, m->off.lnf_w, m->off.lnf_b, B);
    sdp_linear_fwd(m->gemm, m->probs, m->lnf, tf_param(m, m->off.lm_head),
                   tf_param(m, m->off.head_b), B, C, c->classes);
    m->has_targets = labels != NULL;
    return labels ? classify(m, labels, B) : 0.0;
}

/* Gradients of the class token, the positions and the patch projection from d_res. */
static void stem_backward(sdp_tf *m, int B) {
    const sdp_tf_config *c = &m->cfg;
    const int T = m->T, P = T - 1, C = c->d_model, S = c->image_size;
    float *dcls = tf_grad(m, m->goff.cls), *dpos = tf_grad(m, m->goff.wpe);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = m->d_res + ((size_t)b * T + t) * C;
            if (dpos)
                for (int k = 0; k < C; k++) dpos[(size_t)t * C + k] += d[k];
            if (t == 0 && dcls)
                for (int k = 0; k < C; k++) dcls[k] += d[k];
            if (t > 0) /* the patch embeddings are not needed any more: reuse them */
                memcpy(m->patches + ((size_t)b * P + t - 1) * C, d, (size_t)C * sizeof(float));
        }
    sdp_patch_embed_bwd(m->gemm, NULL, tf_grad(m, m->goff.wte), tf_grad(m, m->goff.patch_b),
                        m->patches, m->images, tf_param(m, m->off.wte), B, c->in_channels, S, S,
                        c->patch, C, m->patch_scratch);
}

void tf_vit_backward(sdp_tf *m, float dloss) {
    const int B = m->last_B, T = m->T, C = m->cfg.d_model, K = m->cfg.classes;
    sdp_softmax_xent_bwd(m->probs, m->probs, m->targets, dloss, B, K, K);
    memset(m->d_norm, 0, (size_t)B * C * sizeof(float));
    sdp_linear_bwd(m->gemm, m->d_norm, tf_grad(m, m->goff.lm_head), tf_grad(m, m->goff.head_b),
                   m->probs, m->lnf, tf_param(m, m->off.lm_head), B, C, K);
    float *d_pooled = m->d_branch; /* free until the layers' backward */
    memset(d_pooled, 0, (size_t)B * C * sizeof(float));
    tf_norm_bwd(m, d_pooled, m->d_norm, m->pooled, m->lnf_mean, m->lnf_rstd, m->off.lnf_w,
                m->goff.lnf_w, m->goff.lnf_b, B);
    memset(m->d_res, 0, (size_t)B * T * C * sizeof(float));
    for (int b = 0; b < B; b++)
        memcpy(m->d_res + (size_t)b * T * C, d_pooled + (size_t)b * C, (size_t)C * sizeof(float));
    tf_layers_backward(m, B, T);
    if (m->backward_floor < 0) stem_backward(m, B);
    m->has_targets = false; /* probs now hold gradients */
}
