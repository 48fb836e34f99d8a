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
    const int C = c->d_model, hs = C / c->n_head, D = H * hs;
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    char n[SDP_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", gl, suffix), n)
    *o = (sdp_tf_layer_offsets){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    o->ln1_w =
        tf_add(a, NAME("input_layernorm.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
    o->w_qkv = tf_add(a, NAME("self_attn.q_proj.weight"), 2, D, C, TF_GROUP_ATTN, 0, 1, true,
                      SDP_INIT_NORMAL, std);
    tf_add(a, NAME("self_attn.k_proj.weight"), 2, D, C, TF_GROUP_ATTN, 0, 1, true, SDP_INIT_NORMAL,
           std);
    tf_add(a, NAME("self_attn.v_proj.weight"), 2, D, C, TF_GROUP_ATTN, 0, 1, true, SDP_INIT_NORMAL,
           std);
    o->w_o = tf_add(a, NAME("self_attn.o_proj.weight"), 2, C, D, TF_GROUP_ATTN, 1, 1, true,
                    SDP_INIT_NORMAL, proj_std);
    o->ln2_w = tf_add(a, NAME("post_attention_layernorm.weight"), 1, C, 0, -1, 0, 1, false,
                      SDP_INIT_ONES, 0);
    o->w_fc = tf_add(a, NAME("mlp.gate_proj.weight"), 2, F, C, TF_GROUP_MLP, 0, 1, true,
                     SDP_INIT_NORMAL, std);
    tf_add(a, NAME("mlp.up_proj.weight"), 2, F, C, TF_GROUP_MLP, 0, 1, true, SDP_INIT_NORMAL, std);
    o->w_proj = tf_add(a, NAME("mlp.down_proj.weight"), 2, C, F, TF_GROUP_MLP, 1, 1, true,
                       SDP_INIT_NORMAL, proj_std);
#undef NAME
}

void tf_llama_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                       sdp_tf_offsets *o) {
    const int C = c->d_model, Vp = c->vocab_padded;
    tf_adder a = tf_describe_begin(L, s, o);
    o->wte =
        tf_add(&a, "model.embed_tokens.weight", 2, Vp, C, -1, 0, 1, false, SDP_INIT_NORMAL, 0.02f);
    for (int i = 0; i < s->n_layer; i++) {
        tf_describe_block(&a, c, s, i, "model.layers");
        sdp_tf_layer_offsets lo;
        describe_layer(&a, c, s->layer_id[i], s->n_head[i], s->d_ff[i], &lo);
        if (o->layers) o->layers[i] = lo;
    }
    a.block = -1;
    o->lnf_w = tf_add(&a, "model.norm.weight", 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
    o->lm_head = tf_add(&a, "lm_head.weight", 2, Vp, C, -1, 0, 1, true, SDP_INIT_NORMAL, 0.02f);
}

void tf_llama_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                     sdp_model_mode mode, const sdp_backend *be) {
    tf_begin(m, cfg, shape, B, T, false, be);
    m->family = &TF_TOKEN_FAMILY;
    m->opts = (sdp_tf_layer_opts){.norm = SDP_TF_RMSNORM,
                                  .mlp = SDP_TF_SWIGLU,
                                  .rope = true,
                                  .rope_theta = m->cfg.rope_theta,
                                  .causal = true};
    tf_llama_describe(&m->layout, &m->cfg, &m->shape, &m->off);
    tf_tokens_build(m, mode);
}
