/* LLaMA: token embeddings (positions come from RoPE in every layer); layers of RMSNorm, causal
 * attention on rotated q and k, and a SwiGLU MLP, without biases; a final RMSNorm and an untied
 * LM head. HF LLaMA names; q/k/v and gate/up are declared back to back, so each pair of
 * projections is one contiguous matrix and runs as one GEMM. */
#include "models/tf_families.h"
#include "models/tf_tokens.h"

#include <math.h>
#include <stdio.h>

static void describe_layer(tf_adder *a, const sdp_tf_config *c, int gl, int H, int F,
                           sdp_tf_layer_offsets *o) {
    const int C = c->model.width, hs = C / c->model.heads, D = H * hs;
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->model.layers);
    char n[SDP_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", gl, suffix), n)
    *o = (sdp_tf_layer_offsets){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    o->ln1_w = tf_add(a, (tensor_desc){.name = NAME("input_layernorm.weight"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ONES});
    o->w_qkv = tf_add(a, (tensor_desc){.name = NAME("self_attn.q_proj.weight"),
                                       .ndim = 2,
                                       .shape = {D, C},
                                       .group = TF_GROUP_ATTN,
                                       .decay = true,
                                       .std = std});
    tf_add(a, (tensor_desc){.name = NAME("self_attn.k_proj.weight"),
                            .ndim = 2,
                            .shape = {D, C},
                            .group = TF_GROUP_ATTN,
                            .decay = true,
                            .std = std});
    tf_add(a, (tensor_desc){.name = NAME("self_attn.v_proj.weight"),
                            .ndim = 2,
                            .shape = {D, C},
                            .group = TF_GROUP_ATTN,
                            .decay = true,
                            .std = std});
    o->w_o = tf_add(a, (tensor_desc){.name = NAME("self_attn.o_proj.weight"),
                                     .ndim = 2,
                                     .shape = {C, D},
                                     .group = TF_GROUP_ATTN,
                                     .axis = 1,
                                     .decay = true,
                                     .std = proj_std});
    o->ln2_w = tf_add(a, (tensor_desc){.name = NAME("post_attention_layernorm.weight"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .init = SDP_INIT_ONES});
    o->w_fc = tf_add(a, (tensor_desc){.name = NAME("mlp.gate_proj.weight"),
                                      .ndim = 2,
                                      .shape = {F, C},
                                      .group = TF_GROUP_MLP,
                                      .decay = true,
                                      .std = std});
    tf_add(a, (tensor_desc){.name = NAME("mlp.up_proj.weight"),
                            .ndim = 2,
                            .shape = {F, C},
                            .group = TF_GROUP_MLP,
                            .decay = true,
                            .std = std});
    o->w_proj = tf_add(a, (tensor_desc){.name = NAME("mlp.down_proj.weight"),
                                        .ndim = 2,
                                        .shape = {C, F},
                                        .group = TF_GROUP_MLP,
                                        .axis = 1,
                                        .decay = true,
                                        .std = proj_std});
#undef NAME
}

void tf_llama_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                       sdp_tf_offsets *o) {
    const int C = c->model.width, Vp = c->vocab_padded;
    tf_adder a = tf_describe_begin(L, s, o);
    o->wte = tf_add(
        &a, (tensor_desc){
                .name = "model.embed_tokens.weight", .ndim = 2, .shape = {Vp, C}, .std = 0.02f});
    for (int i = 0; i < s->n_layer; i++) {
        tf_describe_block(&a, c, s, i, "model.layers");
        sdp_tf_layer_offsets lo;
        describe_layer(&a, c, s->layer_id[i], s->n_head[i], s->d_ff[i], &lo);
        if (o->layers) o->layers[i] = lo;
    }
    a.block = -1;
    o->lnf_w = tf_add(
        &a,
        (tensor_desc){.name = "model.norm.weight", .ndim = 1, .shape = {C}, .init = SDP_INIT_ONES});
    o->lm_head = tf_add(
        &a,
        (tensor_desc){
            .name = "lm_head.weight", .ndim = 2, .shape = {Vp, C}, .decay = true, .std = 0.02f});
}

void tf_llama_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                     sdp_model_mode mode, const sdp_backend *be) {
    tf_begin(m, cfg, shape, B, T, false, be);
    m->family = &TF_TOKEN_FAMILY;
    m->opts = (sdp_tf_layer_opts){.norm = SDP_TF_RMSNORM,
                                  .mlp = SDP_TF_SWIGLU,
                                  .rope = true,
                                  .rope_theta = (float)m->cfg.model.rope_theta,
                                  .causal = true};
    tf_llama_describe(&m->layout, &m->cfg, &m->shape, &m->off);
    tf_tokens_build(m, mode);
}
