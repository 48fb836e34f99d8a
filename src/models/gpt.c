/* GPT-2: token embeddings plus learned positions; layers of LayerNorm, causal attention and a
 * GELU MLP, with biases; a final LayerNorm and the LM head tied to the token embeddings. HF GPT-2
 * names (weights in nn.Linear's [out, in], docs/checkpoints.md). */
#include "models/tf_families.h"
#include "models/tf_tokens.h"

#include <math.h>
#include <stdio.h>

static void describe_layer(tf_adder *a, const sdp_tf_config *c, int gl, int H, int F,
                           sdp_tf_layer_offsets *o) {
    const int C = c->model.width, hs = C / c->model.heads, D = H * hs;
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->model.layers);
    char n[SDP_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "transformer.h.%d.%s", gl, suffix), n)
    *o = (sdp_tf_layer_offsets){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    o->ln1_w = tf_add(
        a,
        (tensor_desc){.name = NAME("ln_1.weight"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ONES});
    o->ln1_b = tf_add(
        a,
        (tensor_desc){.name = NAME("ln_1.bias"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
    o->w_qkv = tf_add(a, (tensor_desc){.name = NAME("attn.c_attn.weight"),
                                       .ndim = 2,
                                       .shape = {3 * D, C},
                                       .group = TF_GROUP_ATTN,
                                       .segments = 3,
                                       .decay = true,
                                       .std = std});
    o->b_qkv = tf_add(a, (tensor_desc){.name = NAME("attn.c_attn.bias"),
                                       .ndim = 1,
                                       .shape = {3 * D},
                                       .group = TF_GROUP_ATTN,
                                       .segments = 3,
                                       .init = SDP_INIT_ZEROS});
    o->w_o = tf_add(a, (tensor_desc){.name = NAME("attn.c_proj.weight"),
                                     .ndim = 2,
                                     .shape = {C, D},
                                     .group = TF_GROUP_ATTN,
                                     .axis = 1,
                                     .decay = true,
                                     .std = proj_std});
    o->b_o = tf_add(
        a, (tensor_desc){
               .name = NAME("attn.c_proj.bias"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
    o->ln2_w = tf_add(
        a,
        (tensor_desc){.name = NAME("ln_2.weight"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ONES});
    o->ln2_b = tf_add(
        a,
        (tensor_desc){.name = NAME("ln_2.bias"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
    o->w_fc = tf_add(a, (tensor_desc){.name = NAME("mlp.c_fc.weight"),
                                      .ndim = 2,
                                      .shape = {F, C},
                                      .group = TF_GROUP_MLP,
                                      .decay = true,
                                      .std = std});
    o->b_fc = tf_add(a, (tensor_desc){.name = NAME("mlp.c_fc.bias"),
                                      .ndim = 1,
                                      .shape = {F},
                                      .group = TF_GROUP_MLP,
                                      .init = SDP_INIT_ZEROS});
    o->w_proj = tf_add(a, (tensor_desc){.name = NAME("mlp.c_proj.weight"),
                                        .ndim = 2,
                                        .shape = {C, F},
                                        .group = TF_GROUP_MLP,
                                        .axis = 1,
                                        .decay = true,
                                        .std = proj_std});
    o->b_proj = tf_add(
        a, (tensor_desc){
               .name = NAME("mlp.c_proj.bias"), .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
#undef NAME
}

void tf_gpt_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o) {
    const int C = c->model.width, Vp = c->vocab_padded;
    tf_adder a = tf_describe_begin(L, s, o);
    o->wte = tf_add(
        &a,
        (tensor_desc){.name = "transformer.wte.weight", .ndim = 2, .shape = {Vp, C}, .std = 0.02f});
    o->wpe = tf_add(&a, (tensor_desc){.name = "transformer.wpe.weight",
                                      .ndim = 2,
                                      .shape = {c->model.seq_len, C},
                                      .std = 0.01f});
    for (int i = 0; i < s->n_layer; i++) {
        tf_describe_block(&a, c, s, i, "transformer.h");
        sdp_tf_layer_offsets lo;
        describe_layer(&a, c, s->layer_id[i], s->n_head[i], s->d_ff[i], &lo);
        if (o->layers) o->layers[i] = lo;
    }
    a.block = -1;
    o->lnf_w = tf_add(
        &a, (tensor_desc){
                .name = "transformer.ln_f.weight", .ndim = 1, .shape = {C}, .init = SDP_INIT_ONES});
    o->lnf_b = tf_add(
        &a, (tensor_desc){
                .name = "transformer.ln_f.bias", .ndim = 1, .shape = {C}, .init = SDP_INIT_ZEROS});
    o->lm_head = o->wte; /* tied */
}

void tf_gpt_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be) {
    tf_begin(m, cfg, shape, B, T, false, be);
    m->family = &TF_TOKEN_FAMILY;
    m->opts = (sdp_tf_layer_opts){.norm = SDP_TF_LAYERNORM, .mlp = SDP_TF_GELU, .causal = true};
    tf_gpt_describe(&m->layout, &m->cfg, &m->shape, &m->off);
    tf_tokens_build(m, mode);
}
