/* The transformer's public entry points (sdp/transformer.h): the configuration, and the family
 * the style picks when a model is built (gpt.c, llama.c, vit.c). Everything after that goes
 * through the model's family table and never looks at the style again. */
#include "sdp/transformer.h"

#include "models/tf_families.h"
#include "models/tf_stack.h"
#include "sdp/check.h"

#include <string.h>

/* A ViT reads patches plus a class token, and predicts classes instead of tokens (tf_outputs). */
static void finish_vit(sdp_tf_config *c) {
    SDP_CHECK(c->model.in_channels >= 1 && c->model.image_size >= 1 && c->model.classes >= 2,
              "vit needs an image dataset (got %d channels, %d pixels, %d classes)",
              c->model.in_channels, c->model.image_size, c->model.classes);
    SDP_CHECK(c->model.patch >= 1 && c->model.image_size % c->model.patch == 0,
              "--patch %d does not divide the image size %d: choose a divisor (e.g. 4 or 7 for "
              "28x28 images)",
              c->model.patch, c->model.image_size);
    const int side = c->model.image_size / c->model.patch;
    c->model.seq_len = side * side + 1;
}

/* Sizes whose products would overflow the int and size_t arithmetic of the layout and kernels
 * (a damaged config.json, or a typo) are refused before anything is computed from them. */
static void check_size(const sdp_tf_config *c) {
    SDP_CHECK(c->model.width <= SDP_TF_MAX_WIDTH && c->model.layers <= SDP_TF_MAX_LAYERS &&
                  c->model.d_ff <= SDP_TF_MAX_D_FF && c->model.seq_len <= SDP_TF_MAX_SEQ &&
                  tf_outputs(c) <= SDP_TF_MAX_VOCAB,
              "model too large to describe: %d layers (at most 65536), width %d (65536), d_ff %d "
              "(2^20), sequence %d (2^20), vocabulary %d (2^24)",
              c->model.layers, c->model.width, c->model.d_ff, c->model.seq_len, tf_outputs(c));
    const double params = sdp_tf_params_estimate(c);
    SDP_CHECK(params < SDP_TF_MAX_PARAMS,
              "model of %.3g parameters is too large for sdp (at most 2^40)", params);
}

double sdp_tf_params_estimate(const sdp_tf_config *c) {
    const double C = c->model.width, F = c->model.d_ff ? c->model.d_ff : 4.0 * C;
    return c->model.layers * (4 * C * C + 3 * C * F) +
           ((double)tf_outputs(c) + c->model.seq_len) * C;
}

void sdp_tf_config_finish(sdp_tf_config *c) {
    SDP_CHECK(sdp_tf_style_parse(c->model.arch, &c->style), "'%s' is not a transformer style",
              c->model.arch);
    if (c->style == SDP_STYLE_VIT) finish_vit(c);
    SDP_CHECK(c->model.layers >= 1, "--layers must be at least 1 (got %d)", c->model.layers);
    SDP_CHECK(c->model.heads >= 1, "--heads must be at least 1 (got %d)", c->model.heads);
    SDP_CHECK(c->model.width >= 1, "--width must be at least 1 (got %d)", c->model.width);
    SDP_CHECK(c->model.width % c->model.heads == 0,
              "--heads %d does not divide --width %d: choose a width that is a multiple of the "
              "number of heads",
              c->model.heads, c->model.width);
    int hs = c->model.width / c->model.heads;
    SDP_CHECK(c->style != SDP_STYLE_LLAMA || hs % 2 == 0,
              "llama style needs an even head size for RoPE (width %d / heads %d = %d)",
              c->model.width, c->model.heads, hs);
    SDP_CHECK(c->model.seq_len >= 1, "--seq-len must be at least 1 (got %d)", c->model.seq_len);
    SDP_CHECK(tf_outputs(c) >= 2, "vocabulary size must be at least 2 (got %d)", tf_outputs(c));
    SDP_CHECK(c->model.d_ff >= 0, "--d-ff must be positive (got %d)", c->model.d_ff);
    /* The model computes in float: its real knobs become the floats it will use. */
    c->model.dropout = (float)c->model.dropout;
    c->model.rope_theta = (float)c->model.rope_theta;
    SDP_CHECK(c->model.dropout >= 0 && c->model.dropout < 1,
              "--dropout must be in [0, 1) (got %g): use 0 for none, e.g. 0.1 or 0.2 to regularise",
              c->model.dropout);
    check_size(c);
    if (c->model.d_ff == 0) {
        if (c->style != SDP_STYLE_LLAMA)
            c->model.d_ff = 4 * c->model.width;
        else /* SwiGLU keeps ~4C x C params */
            c->model.d_ff = ((8 * c->model.width / 3 + 31) / 32) * 32;
    }
    c->vocab_padded =
        c->style == SDP_STYLE_VIT ? c->model.classes : ((c->model.vocab + 63) / 64) * 64;
    if (c->model.rope_theta == 0) c->model.rope_theta = 10000;
}

/* ---- choosing the family ------------------------------------------------------------------- */

typedef struct {
    void (*describe)(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o);
    void (*create)(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be);
} family_entry;

static const family_entry FAMILIES[] = {
    [SDP_STYLE_GPT] = {tf_gpt_describe, tf_gpt_create},
    [SDP_STYLE_LLAMA] = {tf_llama_describe, tf_llama_create},
    [SDP_STYLE_VIT] = {tf_vit_describe, tf_vit_create},
};

void sdp_tf_describe(sdp_layout *L, const sdp_tf_config *cfg, const sdp_tf_shape *shape) {
    sdp_tf_offsets o = {0};
    FAMILIES[cfg->style].describe(L, cfg, shape, &o);
}

void sdp_tf_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be) {
    sdp_tf_config c = *cfg;
    sdp_tf_config_finish(&c);
    FAMILIES[c.style].create(m, &c, shape, B, T, mode, be);
}

void sdp_tf_destroy(sdp_tf *m) {
    if (m->family->destroy) m->family->destroy(m);
    tf_stack_free(m);
    tf_free_common(m);
}

void sdp_tf_use_grads(sdp_tf *m, float *grads, const long *grad_offset,
                      const sdp_grad_slices *slices) {
    if (m->own_grads) m->be->free(m->be, m->grads);
    m->own_grads = false;
    m->grads = grads;
    m->gslices = slices;
    /* Nothing below the lowest layer with a gradient needs the backward pass. */
    m->backward_floor = sdp_layout_backward_floor(&m->layout, grad_offset);
    const sdp_layout *L = &m->layout;
    m->goff.wte = tf_grad_offset_of(L, m->off.wte, grad_offset);
    m->goff.wpe = tf_grad_offset_of(L, m->off.wpe, grad_offset);
    m->goff.lnf_w = tf_grad_offset_of(L, m->off.lnf_w, grad_offset);
    m->goff.lnf_b = tf_grad_offset_of(L, m->off.lnf_b, grad_offset);
    m->goff.lm_head = tf_grad_offset_of(L, m->off.lm_head, grad_offset);
    if (m->family->use_grads) m->family->use_grads(m, grad_offset);
    for (int i = 0; i < m->shape.n_layer; i++) {
        const long *src = &m->off.layers[i].ln1_w;
        long *dst = &m->goff.layers[i].ln1_w;
        for (size_t k = 0; k < sizeof(sdp_tf_layer_offsets) / sizeof(long); k++)
            dst[k] = tf_grad_offset_of(L, src[k], grad_offset);
    }
}

/* ---- forward and backward, through the family ---------------------------------------------- */

void sdp_tf_stem_tokens(sdp_tf *m, const int *inputs, int B, int T) {
    SDP_CHECK(m->family->stem_tokens, "vit reads images, not tokens");
    m->family->stem_tokens(m, inputs, B, T);
}

double sdp_tf_head_tokens(sdp_tf *m, const float *x, const int *targets, int B, int T) {
    SDP_ASSERT(m->family->head_tokens);
    return m->family->head_tokens(m, x, targets, B, T);
}

double sdp_tf_forward(sdp_tf *m, const int *inputs, const int *targets, int B, int T) {
    SDP_CHECK(m->family->forward_tokens, "vit reads images, not tokens");
    return m->family->forward_tokens(m, inputs, targets, B, T);
}

void sdp_tf_stem_images(sdp_tf *m, const float *images, int B) {
    SDP_CHECK(m->family->stem_images, "only vit reads images");
    m->family->stem_images(m, images, B);
}

double sdp_tf_head_images(sdp_tf *m, const float *x, const int *labels, int B) {
    SDP_ASSERT(m->family->head_images);
    return m->family->head_images(m, x, labels, B);
}

double sdp_tf_forward_images(sdp_tf *m, const float *images, const int *labels, int B) {
    SDP_CHECK(m->family->forward_images, "only vit reads images");
    return m->family->forward_images(m, images, labels, B);
}

const float *sdp_tf_logits_row(const sdp_tf *m, int row) {
    SDP_ASSERT(!m->has_targets);
    return m->probs + (size_t)row * m->cfg.vocab_padded;
}

void sdp_tf_backward(sdp_tf *m, float dloss) {
    SDP_ASSERT(m->grads && m->has_targets);
    m->family->backward(m, dloss);
}

double sdp_tf_train_flops_per_token(const sdp_tf *m, int T) {
    return m->family->train_flops(m, T);
}
