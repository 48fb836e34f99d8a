#include "sdp/transformer.h"

#include "models/transformer_internal.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const STYLE_NAMES[] = {"gpt", "llama", "vit"};

const char *sdp_tf_style_name(sdp_tf_style s) {
    return STYLE_NAMES[s];
}

bool sdp_tf_style_parse(const char *s, sdp_tf_style *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, STYLE_NAMES[i]) == 0) {
            *out = (sdp_tf_style)i;
            return true;
        }
    return false;
}

/* A ViT reads patches plus a class token, and predicts classes instead of tokens. */
static void finish_vit(sdp_tf_config *c) {
    SDP_CHECK(c->in_channels >= 1 && c->image_size >= 1 && c->classes >= 2,
              "vit needs an image dataset (got %d channels, %d pixels, %d classes)", c->in_channels,
              c->image_size, c->classes);
    SDP_CHECK(c->patch >= 1 && c->image_size % c->patch == 0,
              "--patch %d does not divide the image size %d: choose a divisor (e.g. 4 or 7 for "
              "28x28 images)",
              c->patch, c->image_size);
    const int side = c->image_size / c->patch;
    c->seq_len = side * side + 1;
    c->vocab = c->vocab_padded = c->classes;
}

/* Sizes whose products would overflow the int and size_t arithmetic of the layout and kernels
 * (a damaged config.json, or a typo) are refused before anything is computed from them. */
static void check_size(const sdp_tf_config *c) {
    SDP_CHECK(c->d_model <= 65536 && c->n_layer <= 65536 && c->d_ff <= (1 << 20) &&
                  c->seq_len <= (1 << 20) && c->vocab <= (1 << 24),
              "model too large to describe: %d layers (at most 65536), width %d (65536), d_ff %d "
              "(2^20), sequence %d (2^20), vocabulary %d (2^24)",
              c->n_layer, c->d_model, c->d_ff, c->seq_len, c->vocab);
    const double C = c->d_model, F = c->d_ff ? c->d_ff : 4.0 * C;
    const double params = c->n_layer * (4 * C * C + 3 * C * F) + (c->vocab + c->seq_len) * C;
    SDP_CHECK(params < 0x1p40, "model of %.3g parameters is too large for sdp (at most 2^40)",
              params);
}

void sdp_tf_config_finish(sdp_tf_config *c) {
    if (c->style == SDP_STYLE_VIT) finish_vit(c);
    SDP_CHECK(c->n_layer >= 1, "--layers must be at least 1 (got %d)", c->n_layer);
    SDP_CHECK(c->n_head >= 1, "--heads must be at least 1 (got %d)", c->n_head);
    SDP_CHECK(c->d_model >= 1, "--width must be at least 1 (got %d)", c->d_model);
    SDP_CHECK(c->d_model % c->n_head == 0,
              "--heads %d does not divide --width %d: choose a width that is a multiple of the "
              "number of heads",
              c->n_head, c->d_model);
    int hs = c->d_model / c->n_head;
    SDP_CHECK(c->style != SDP_STYLE_LLAMA || hs % 2 == 0,
              "llama style needs an even head size for RoPE (width %d / heads %d = %d)", c->d_model,
              c->n_head, hs);
    SDP_CHECK(c->seq_len >= 1, "--seq-len must be at least 1 (got %d)", c->seq_len);
    SDP_CHECK(c->vocab >= 2, "vocabulary size must be at least 2 (got %d)", c->vocab);
    SDP_CHECK(c->d_ff >= 0, "--d-ff must be positive (got %d)", c->d_ff);
    check_size(c);
    if (c->d_ff == 0) {
        if (c->style != SDP_STYLE_LLAMA)
            c->d_ff = 4 * c->d_model;
        else
            c->d_ff = ((8 * c->d_model / 3 + 31) / 32) * 32; /* SwiGLU keeps ~4C x C params */
    }
    if (c->vocab_padded == 0) c->vocab_padded = ((c->vocab + 63) / 64) * 64;
    SDP_CHECK(c->vocab_padded >= c->vocab, "padded vocabulary %d is smaller than vocabulary %d",
              c->vocab_padded, c->vocab);
    if (c->rope_theta == 0) c->rope_theta = 10000.0f;
}

void sdp_tf_shape_full(sdp_tf_shape *s, const sdp_tf_config *cfg) {
    int L = cfg->n_layer;
    s->n_layer = L;
    s->layer_id = calloc((size_t)L, sizeof(int));
    s->n_head = calloc((size_t)L, sizeof(int));
    s->d_ff = calloc((size_t)L, sizeof(int));
    s->branch_scale = calloc((size_t)L, sizeof(float));
    SDP_CHECK(s->layer_id && s->n_head && s->d_ff && s->branch_scale, "out of memory");
    for (int i = 0; i < L; i++) {
        s->layer_id[i] = i;
        s->n_head[i] = cfg->n_head;
        s->d_ff[i] = cfg->d_ff;
        s->branch_scale[i] = 1.0f;
    }
}

void sdp_tf_shape_free(sdp_tf_shape *s) {
    free(s->layer_id);
    free(s->n_head);
    free(s->d_ff);
    free(s->branch_scale);
    memset(s, 0, sizeof *s);
}

void sdp_tf_shape_from_keep(sdp_tf_shape *s, const sdp_tf_config *cfg, int nblocks,
                            const bool *keep, const int (*kept)[SDP_MAX_GROUPS],
                            const float *scale) {
    SDP_ASSERT(nblocks == cfg->n_layer);
    sdp_tf_shape_full(s, cfg);
    int n = 0;
    for (int b = 0; b < nblocks; b++) {
        if (!keep[b]) continue;
        s->layer_id[n] = b;
        s->n_head[n] = kept[b][0];
        s->d_ff[n] = kept[b][1];
        s->branch_scale[n] = scale[b];
        n++;
    }
    s->n_layer = n;
}

static void shape_copy(sdp_tf_shape *dst, const sdp_tf_shape *src) {
    sdp_tf_config tmp = {.n_layer = src->n_layer};
    sdp_tf_shape_full(dst, &tmp);
    for (int i = 0; i < src->n_layer; i++) {
        dst->layer_id[i] = src->layer_id[i];
        dst->n_head[i] = src->n_head[i];
        dst->d_ff[i] = src->d_ff[i];
        dst->branch_scale[i] = src->branch_scale[i];
    }
}

/* ---- parameter description ---------------------------------------------------------------- */

typedef struct {
    sdp_layout *L;
    int block;
} adder;

static long add(adder *a, const char *name, int ndim, int64_t d0, int64_t d1, int group, int axis,
                int segments, bool decay, sdp_init_kind init, float std) {
    int64_t shape[2] = {d0, d1};
    int i =
        sdp_layout_add(a->L, name, ndim, shape, a->block, group, axis, segments, decay, init, std);
    return (long)a->L->params[i].offset;
}

enum { GROUP_ATTN = 0, GROUP_MLP = 1 };

static const char *layer_prefix(sdp_tf_style style) {
    return style == SDP_STYLE_GPT   ? "transformer.h"
           : style == SDP_STYLE_VIT ? "vit.encoder.layer"
                                    : "model.layers";
}

/* HF ViT keeps query, key and value apart; declared back to back (weights, then biases) they form
 * the same fused [3D, C] matrix and [3D] bias as gpt's c_attn. */
static void describe_vit_layer(adder *a, const sdp_tf_config *c, int gl, int H, int F,
                               sdp_tf_layer_offsets *o) {
    const int C = c->d_model, D = H * (C / c->n_head);
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    char n[SDP_NAME_MAX];
#define NAME(suffix) (snprintf(n, sizeof n, "vit.encoder.layer.%d.%s", gl, suffix), n)
    o->ln1_w = add(a, NAME("layernorm_before.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
    o->ln1_b = add(a, NAME("layernorm_before.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
    static const char *const QKV[] = {"query", "key", "value"};
    char sub[64];
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "attention.attention.%s.weight", QKV[i]);
        long w = add(a, NAME(sub), 2, D, C, GROUP_ATTN, 0, 1, true, SDP_INIT_NORMAL, std);
        if (i == 0) o->w_qkv = w;
    }
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "attention.attention.%s.bias", QKV[i]);
        long b = add(a, NAME(sub), 1, D, 0, GROUP_ATTN, 0, 1, false, SDP_INIT_ZEROS, 0);
        if (i == 0) o->b_qkv = b;
    }
    o->w_o = add(a, NAME("attention.output.dense.weight"), 2, C, D, GROUP_ATTN, 1, 1, true,
                 SDP_INIT_NORMAL, proj_std);
    o->b_o =
        add(a, NAME("attention.output.dense.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
    o->ln2_w = add(a, NAME("layernorm_after.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
    o->ln2_b = add(a, NAME("layernorm_after.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
    o->w_fc = add(a, NAME("intermediate.dense.weight"), 2, F, C, GROUP_MLP, 0, 1, true,
                  SDP_INIT_NORMAL, std);
    o->b_fc =
        add(a, NAME("intermediate.dense.bias"), 1, F, 0, GROUP_MLP, 0, 1, false, SDP_INIT_ZEROS, 0);
    o->w_proj = add(a, NAME("output.dense.weight"), 2, C, F, GROUP_MLP, 1, 1, true, SDP_INIT_NORMAL,
                    proj_std);
    o->b_proj = add(a, NAME("output.dense.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
#undef NAME
}

static void describe_layer(adder *a, const sdp_tf_config *c, int gl, int H, int F,
                           sdp_tf_layer_offsets *o) {
    const bool gpt = c->style == SDP_STYLE_GPT;
    const int C = c->d_model, hs = C / c->n_head, D = H * hs;
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    char n[SDP_NAME_MAX];
    const char *pre = layer_prefix(c->style);
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%d.%s", pre, gl, suffix), n)
    *o = (sdp_tf_layer_offsets){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (c->style == SDP_STYLE_VIT) {
        describe_vit_layer(a, c, gl, H, F, o);
    } else if (gpt) {
        o->ln1_w = add(a, NAME("ln_1.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
        o->ln1_b = add(a, NAME("ln_1.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
        o->w_qkv = add(a, NAME("attn.c_attn.weight"), 2, 3 * D, C, GROUP_ATTN, 0, 3, true,
                       SDP_INIT_NORMAL, std);
        o->b_qkv = add(a, NAME("attn.c_attn.bias"), 1, 3 * D, 0, GROUP_ATTN, 0, 3, false,
                       SDP_INIT_ZEROS, 0);
        o->w_o = add(a, NAME("attn.c_proj.weight"), 2, C, D, GROUP_ATTN, 1, 1, true,
                     SDP_INIT_NORMAL, proj_std);
        o->b_o = add(a, NAME("attn.c_proj.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
        o->ln2_w = add(a, NAME("ln_2.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
        o->ln2_b = add(a, NAME("ln_2.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
        o->w_fc =
            add(a, NAME("mlp.c_fc.weight"), 2, F, C, GROUP_MLP, 0, 1, true, SDP_INIT_NORMAL, std);
        o->b_fc = add(a, NAME("mlp.c_fc.bias"), 1, F, 0, GROUP_MLP, 0, 1, false, SDP_INIT_ZEROS, 0);
        o->w_proj = add(a, NAME("mlp.c_proj.weight"), 2, C, F, GROUP_MLP, 1, 1, true,
                        SDP_INIT_NORMAL, proj_std);
        o->b_proj = add(a, NAME("mlp.c_proj.bias"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
    } else {
        o->ln1_w =
            add(a, NAME("input_layernorm.weight"), 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
        o->w_qkv = add(a, NAME("self_attn.q_proj.weight"), 2, D, C, GROUP_ATTN, 0, 1, true,
                       SDP_INIT_NORMAL, std);
        add(a, NAME("self_attn.k_proj.weight"), 2, D, C, GROUP_ATTN, 0, 1, true, SDP_INIT_NORMAL,
            std);
        add(a, NAME("self_attn.v_proj.weight"), 2, D, C, GROUP_ATTN, 0, 1, true, SDP_INIT_NORMAL,
            std);
        o->w_o = add(a, NAME("self_attn.o_proj.weight"), 2, C, D, GROUP_ATTN, 1, 1, true,
                     SDP_INIT_NORMAL, proj_std);
        o->ln2_w = add(a, NAME("post_attention_layernorm.weight"), 1, C, 0, -1, 0, 1, false,
                       SDP_INIT_ONES, 0);
        o->w_fc = add(a, NAME("mlp.gate_proj.weight"), 2, F, C, GROUP_MLP, 0, 1, true,
                      SDP_INIT_NORMAL, std);
        add(a, NAME("mlp.up_proj.weight"), 2, F, C, GROUP_MLP, 0, 1, true, SDP_INIT_NORMAL, std);
        o->w_proj = add(a, NAME("mlp.down_proj.weight"), 2, C, F, GROUP_MLP, 1, 1, true,
                        SDP_INIT_NORMAL, proj_std);
    }
#undef NAME
}

static long add_nd(adder *a, const char *name, int ndim, const int64_t *shape, bool decay,
                   sdp_init_kind init, float std) {
    int i = sdp_layout_add(a->L, name, ndim, shape, a->block, -1, 0, 1, decay, init, std);
    return (long)a->L->params[i].offset;
}

/* The stem, in HF ViT's shapes: a conv of kernel = stride = patch, the class token, and a
 * position table with the class token's row first. */
static void describe_vit_stem(adder *a, const sdp_tf_config *c, sdp_tf_offsets *o) {
    const int64_t C = c->d_model, p = c->patch;
    const int64_t conv[4] = {C, c->in_channels, p, p}, bias[1] = {C}, cls[3] = {1, 1, C};
    const int64_t pos[3] = {1, c->seq_len, C};
    o->wte = add_nd(a, "vit.embeddings.patch_embeddings.projection.weight", 4, conv, true,
                    SDP_INIT_NORMAL, 0.02f);
    o->patch_b = add_nd(a, "vit.embeddings.patch_embeddings.projection.bias", 1, bias, false,
                        SDP_INIT_ZEROS, 0);
    o->cls = add_nd(a, "vit.embeddings.cls_token", 3, cls, false, SDP_INIT_NORMAL, 0.02f);
    o->wpe = add_nd(a, "vit.embeddings.position_embeddings", 3, pos, false, SDP_INIT_NORMAL, 0.02f);
}

static void describe_vit_head(adder *a, const sdp_tf_config *c, sdp_tf_offsets *o) {
    const int C = c->d_model;
    o->lnf_w = add(a, "vit.layernorm.weight", 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
    o->lnf_b = add(a, "vit.layernorm.bias", 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
    o->lm_head =
        add(a, "classifier.weight", 2, c->classes, C, -1, 0, 1, true, SDP_INIT_NORMAL, 0.02f);
    o->head_b = add(a, "classifier.bias", 1, c->classes, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
}

static void describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o) {
    const bool gpt = c->style == SDP_STYLE_GPT, vit = c->style == SDP_STYLE_VIT;
    const int C = c->d_model, Vp = c->vocab_padded, hs = C / c->n_head;
    sdp_layout_init(L, s->n_layer);
    adder a = {L, -1};
    sdp_tf_offsets tmp = {0};
    if (!o) o = &tmp;
    o->wpe = o->lnf_b = o->patch_b = o->cls = o->head_b = -1;
    if (vit) {
        describe_vit_stem(&a, c, o);
    } else if (gpt) {
        o->wte =
            add(&a, "transformer.wte.weight", 2, Vp, C, -1, 0, 1, false, SDP_INIT_NORMAL, 0.02f);
        o->wpe = add(&a, "transformer.wpe.weight", 2, c->seq_len, C, -1, 0, 1, false,
                     SDP_INIT_NORMAL, 0.01f);
    } else {
        o->wte =
            add(&a, "model.embed_tokens.weight", 2, Vp, C, -1, 0, 1, false, SDP_INIT_NORMAL, 0.02f);
    }
    for (int i = 0; i < s->n_layer; i++) {
        sdp_block *b = &L->blocks[i];
        snprintf(b->name, sizeof b->name, "%s.%d", layer_prefix(c->style), s->layer_id[i]);
        b->global_index = s->layer_id[i];
        b->droppable = true;
        b->ngroups = 2;
        b->groups[GROUP_ATTN] = (sdp_group){"attn", s->n_head[i], hs};
        b->groups[GROUP_MLP] = (sdp_group){"mlp", s->d_ff[i], 1};
        a.block = i;
        sdp_tf_layer_offsets lo;
        describe_layer(&a, c, s->layer_id[i], s->n_head[i], s->d_ff[i], &lo);
        if (o->layers) o->layers[i] = lo;
    }
    a.block = -1;
    if (vit) {
        describe_vit_head(&a, c, o);
    } else if (gpt) {
        o->lnf_w = add(&a, "transformer.ln_f.weight", 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
        o->lnf_b = add(&a, "transformer.ln_f.bias", 1, C, 0, -1, 0, 1, false, SDP_INIT_ZEROS, 0);
        o->lm_head = o->wte; /* tied */
    } else {
        o->lnf_w = add(&a, "model.norm.weight", 1, C, 0, -1, 0, 1, false, SDP_INIT_ONES, 0);
        o->lm_head = add(&a, "lm_head.weight", 2, Vp, C, -1, 0, 1, true, SDP_INIT_NORMAL, 0.02f);
    }
}

void sdp_tf_describe(sdp_layout *L, const sdp_tf_config *cfg, const sdp_tf_shape *shape) {
    sdp_tf_offsets o = {0};
    describe(L, cfg, shape, &o);
}

/* ---- construction ------------------------------------------------------------------------- */

static float *acts(sdp_tf *m, size_t n) {
    return m->be->alloc(m->be, SDP_MEM_ACTS, n * sizeof(float));
}

/* One layer's forward activations, for H heads of attention width D and F MLP neurons. */
static void alloc_acts_set(sdp_tf *m, sdp_tf_layer_acts *a, int H, size_t D, size_t F) {
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.d_model;
    const size_t fc_width = m->cfg.style == SDP_STYLE_LLAMA ? 2 * F : F;
    a->ln1 = acts(m, N * C);
    a->ln1_mean = acts(m, N);
    a->ln1_rstd = acts(m, N);
    a->qkv = acts(m, N * 3 * D);
    a->att = acts(m, N * D);
    a->lse = acts(m, (size_t)m->B * H * m->T);
    a->mid = acts(m, N * C);
    a->ln2 = acts(m, N * C);
    a->ln2_mean = acts(m, N);
    a->ln2_rstd = acts(m, N);
    a->fc = acts(m, N * fc_width);
    a->act = acts(m, N * F);
    a->out = acts(m, N * C);
}

/* Training keeps every layer's activations: the backward reads them all. */
static void alloc_layer_acts(sdp_tf *m, int i) {
    alloc_acts_set(m, &m->layers[i], m->shape.n_head[i], (size_t)m->shape.n_head[i] * m->head_size,
                   (size_t)m->shape.d_ff[i]);
}

/* A forward-only pass needs one layer's activations at a time, and the layer below's output: one
 * set of buffers, sized for the widest layer, serves every layer, and the outputs alternate
 * between two buffers (layer i reads layer i-1's while writing its own, and that residual is the
 * only thing that crosses layers). The embeddings take the buffer of the odd layers' outputs:
 * layer 1 overwrites them only after layer 0 has read them. Inside a layer, buffers whose values
 * are dead share memory (layer_forward's order): ln1, then att (written once ln1 has been
 * projected), then ln2 (once att has been projected) take one; qkv, then fc (once attention has
 * read qkv) another, where GELU then runs in place (act is fc; SwiGLU's output is narrower than
 * its input, so LLaMA keeps act apart); the two norms' statistics one pair. So an inference
 * model holds about 7 B*T*C floats of activations for GPT, whatever its depth, where training
 * keeps about 16 B*T*C per layer. */
static void alloc_infer_acts(sdp_tf *m) {
    int H = 0;
    size_t D = 0, F = 0;
    for (int i = 0; i < m->shape.n_layer; i++) {
        if (m->shape.n_head[i] > H) H = m->shape.n_head[i];
        if ((size_t)m->shape.d_ff[i] > F) F = (size_t)m->shape.d_ff[i];
    }
    D = (size_t)H * m->head_size;
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.d_model;
    const size_t fc_width = m->cfg.style == SDP_STYLE_LLAMA ? 2 * F : F;
    /* The buffers, each once: shared_set owns them (the aliases stay NULL in it) */
    sdp_tf_layer_acts *own = &m->shared_set;
    memset(own, 0, sizeof *own);
    own->ln1 = acts(m, N * (D > C ? D : C));
    own->ln1_mean = acts(m, N);
    own->ln1_rstd = acts(m, N);
    own->qkv = acts(m, N * (3 * D > fc_width ? 3 * D : fc_width));
    own->lse = acts(m, (size_t)m->B * H * m->T);
    own->mid = acts(m, N * C);
    const bool swiglu = m->cfg.style == SDP_STYLE_LLAMA;
    if (swiglu) own->act = acts(m, N * F);
    own->out = acts(m, N * C);
    sdp_tf_layer_acts set = *own;
    set.att = set.ln2 = own->ln1;
    set.ln2_mean = own->ln1_mean;
    set.ln2_rstd = own->ln1_rstd;
    set.fc = own->qkv;
    if (!swiglu) set.act = own->qkv;
    for (int i = 0; i < m->shape.n_layer; i++) {
        m->layers[i] = set;
        if (i % 2) m->layers[i].out = m->embed;
    }
    m->shared_acts = true;
}

/* Backward work buffers are shared by all layers, so they are sized for the widest one. */
static void alloc_backward_buffers(sdp_tf *m) {
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.d_model;
    size_t D = 0, F = 0;
    for (int i = 0; i < m->shape.n_layer; i++) {
        size_t d = (size_t)m->shape.n_head[i] * m->head_size, f = (size_t)m->shape.d_ff[i];
        if (d > D) D = d;
        if (f > F) F = f;
    }
    const size_t fc_width = m->cfg.style == SDP_STYLE_LLAMA ? 2 * F : F;
    m->d_res = acts(m, N * C);
    m->d_branch = acts(m, N * C);
    m->d_norm = acts(m, N * C);
    m->d_att = acts(m, N * D);
    m->d_qkv = acts(m, N * 3 * D);
    m->d_fc = acts(m, N * fc_width);
    m->d_act = acts(m, N * F);
}

void sdp_tf_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    sdp_tf_config_finish(&m->cfg);
    SDP_CHECK(B >= 1 && T >= 1, "batch size and sequence length must be positive (got %d, %d)", B,
              T);
    const bool vit = m->cfg.style == SDP_STYLE_VIT;
    if (vit) T = m->cfg.seq_len; /* every image is patches + the class token */
    SDP_CHECK(T <= m->cfg.seq_len, "sequence length %d exceeds the model's maximum %d", T,
              m->cfg.seq_len);
    if (shape)
        shape_copy(&m->shape, shape);
    else
        sdp_tf_shape_full(&m->shape, &m->cfg);
    m->head_size = m->cfg.d_model / m->cfg.n_head;
    m->be = be;
    SDP_CHECK(
        (double)B * T *
                (m->cfg.d_model > m->cfg.vocab_padded ? m->cfg.d_model : m->cfg.vocab_padded) <
            0x1p31,
        "a batch of %d x %d is too large for this model's activations: lower --batch or "
        "--seq-len",
        B, T);
    m->B = B;
    m->T = T;
    m->off.layers = calloc((size_t)m->shape.n_layer + 1, sizeof *m->off.layers);
    SDP_CHECK(m->off.layers, "out of memory");
    describe(&m->layout, &m->cfg, &m->shape, &m->off);

    m->params = be->alloc(be, SDP_MEM_PARAMS, m->layout.numel * sizeof(float));
    m->own_grads = mode == SDP_MODEL_TRAIN;
    m->backward_floor = -1;
    if (m->own_grads) m->grads = be->alloc(be, SDP_MEM_GRADS, m->layout.numel * sizeof(float));
    m->goff = m->off;
    m->goff.layers = calloc((size_t)m->shape.n_layer + 1, sizeof *m->goff.layers);
    SDP_CHECK(m->goff.layers, "out of memory");
    memcpy(m->goff.layers, m->off.layers, (size_t)m->shape.n_layer * sizeof *m->goff.layers);

    const size_t N = (size_t)B * T, C = (size_t)m->cfg.d_model, Vp = (size_t)m->cfg.vocab_padded;
    const size_t head_rows = vit ? (size_t)B : N; /* a ViT classifies its class tokens alone */
    if (!vit) m->inputs = be->alloc(be, SDP_MEM_ACTS, N * sizeof(int));
    m->targets = be->alloc(be, SDP_MEM_ACTS, head_rows * sizeof(int));
    m->embed = acts(m, N * C);
    m->layers = calloc((size_t)m->shape.n_layer + 1, sizeof *m->layers);
    SDP_CHECK(m->layers, "out of memory");
    if (mode == SDP_MODEL_INFER)
        alloc_infer_acts(m);
    else
        for (int i = 0; i < m->shape.n_layer; i++) alloc_layer_acts(m, i);
    m->lnf = acts(m, head_rows * C);
    m->lnf_mean = acts(m, head_rows);
    m->lnf_rstd = acts(m, head_rows);
    m->probs = acts(m, head_rows * Vp);
    m->losses = acts(m, head_rows);
    if (vit) tf_vit_alloc(m);
    if (mode != SDP_MODEL_INFER) alloc_backward_buffers(m);
    int max_heads = 0;
    for (int i = 0; i < m->shape.n_layer; i++)
        if (m->shape.n_head[i] > max_heads) max_heads = m->shape.n_head[i];
    const size_t attn_scratch = be->attention_scratch_bytes(be, B, T, max_heads, m->head_size);
    if (attn_scratch) m->attn_scratch = be->alloc(be, SDP_MEM_SCRATCH, attn_scratch);
}

void sdp_tf_destroy(sdp_tf *m) {
    const sdp_backend *be = m->be;
    if (!m->own_grads) m->grads = NULL; /* the caller's (sdp_tf_use_grads) */
    /* an inference model's layers share one set (alloc_infer_acts), freed once */
    const int nsets = m->shared_acts ? 1 : m->shape.n_layer;
    for (int i = 0; i < nsets; i++) {
        sdp_tf_layer_acts *a = m->shared_acts ? &m->shared_set : &m->layers[i];
        float *bufs[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->att, a->lse, a->mid,
                         a->ln2, a->ln2_mean, a->ln2_rstd, a->fc,  a->act, a->out};
        for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++) be->free(be, bufs[j]);
    }
    float *bufs[] = {m->params, m->grads,  m->embed, m->lnf,         m->lnf_mean, m->lnf_rstd,
                     m->probs,  m->losses, m->d_res, m->d_branch,    m->d_norm,   m->d_att,
                     m->d_qkv,  m->d_fc,   m->d_act, m->attn_scratch};
    for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++) be->free(be, bufs[j]);
    be->free(be, m->inputs);
    be->free(be, m->targets);
    if (m->cfg.style == SDP_STYLE_VIT) tf_vit_free(m);
    free(m->layers);
    free(m->off.layers);
    free(m->goff.layers);
    sdp_layout_free(&m->layout);
    sdp_tf_shape_free(&m->shape);
    memset(m, 0, sizeof *m);
}

/* ---- forward ------------------------------------------------------------------------------ */

#define P tf_param
#define G tf_grad

/* Weight gradients of owned slices only, as one GEMM per slice. The weight at param offset w may
 * be a fused matrix of several tensors stacked along rows (llama's q/k/v, gate/up): each tensor's
 * slices are shifted by its first row in the fused matrix. */
static void sliced_weight_grads(const sdp_tf *m, long w, const float *dout, const float *inp, int n,
                                int ic, int oc) {
    const sdp_layout *L = &m->layout;
    for (int p = 0; p < L->nparams; p++) {
        const long off = (long)L->params[p].offset;
        if (off < w || off >= w + (long)oc * ic) continue;
        const sdp_grad_slices *s = &m->gslices[p];
        const long row0 = (off - w) / ic;
        for (int i = 0; i < s->n; i++) {
            if (s->axis == 0) /* dW[rows] += dout[:, rows]^T inp */
                m->be->gemm(m->be, true, false, (int)s->len[i], ic, n, 1.0f,
                            dout + row0 + s->start[i], oc, inp, ic, 1.0f, m->grads + s->dst[i],
                            (int)s->ld[i]);
            else /* dW[:, cols] += dout^T inp[:, cols] */
                m->be->gemm(m->be, true, false, oc, (int)s->len[i], n, 1.0f, dout, oc,
                            inp + s->start[i], ic, 1.0f, m->grads + s->dst[i], (int)s->ld[i]);
        }
    }
}

static void sliced_bias_grads(const sdp_tf *m, long b, const float *dout, int n, int oc) {
    const sdp_layout *L = &m->layout;
    for (int p = 0; p < L->nparams; p++) {
        const long off = (long)L->params[p].offset;
        if (off < b || off >= b + oc) continue;
        const sdp_grad_slices *s = &m->gslices[p];
        for (int i = 0; i < s->n; i++)
            m->be->bias_slice_bwd(m->be, m->grads + s->dst[i], dout, n, oc,
                                  (int)(off - b + s->start[i]), (int)s->len[i]);
    }
}

/* A linear layer's backward, honouring whole, absent (-1) and sliced gradients. */
static void linear_bwd(const sdp_tf *m, float *dinp, const float *dout, const float *inp, long w,
                       long gw, long b, long gb, int n, int ic, int oc) {
    m->be->linear_bwd(m->be, dinp, G(m, gw), G(m, gb), dout, inp, P(m, w), n, ic, oc);
    if (gw == SDP_GRAD_SLICED) sliced_weight_grads(m, w, dout, inp, n, ic, oc);
    if (gb == SDP_GRAD_SLICED) sliced_bias_grads(m, b, dout, n, oc);
}

/* The gradient offsets that mirror a parameter offset: look the tensor up by its offset. */
static long grad_offset_of(const sdp_layout *L, long param_off, const long *grad_offset) {
    if (param_off < 0) return -1;
    for (int i = 0; i < L->nparams; i++)
        if ((long)L->params[i].offset == param_off) return grad_offset[i];
    SDP_ASSERT(0);
    return -1;
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
    m->goff.wte = grad_offset_of(L, m->off.wte, grad_offset);
    m->goff.wpe = grad_offset_of(L, m->off.wpe, grad_offset);
    m->goff.lnf_w = grad_offset_of(L, m->off.lnf_w, grad_offset);
    m->goff.lnf_b = grad_offset_of(L, m->off.lnf_b, grad_offset);
    m->goff.lm_head = grad_offset_of(L, m->off.lm_head, grad_offset);
    m->goff.patch_b = grad_offset_of(L, m->off.patch_b, grad_offset);
    m->goff.cls = grad_offset_of(L, m->off.cls, grad_offset);
    m->goff.head_b = grad_offset_of(L, m->off.head_b, grad_offset);
    for (int i = 0; i < m->shape.n_layer; i++) {
        const long *src = &m->off.layers[i].ln1_w;
        long *dst = &m->goff.layers[i].ln1_w;
        for (size_t k = 0; k < sizeof(sdp_tf_layer_offsets) / sizeof(long); k++)
            dst[k] = grad_offset_of(L, src[k], grad_offset);
    }
}

void tf_norm_fwd(const sdp_tf *m, float *out, float *mean, float *rstd, const float *x, long w,
                 long b, int N) {
    if (m->cfg.style != SDP_STYLE_LLAMA)
        m->be->layernorm_fwd(m->be, out, mean, rstd, x, P(m, w), P(m, b), N, m->cfg.d_model);
    else
        m->be->rmsnorm_fwd(m->be, out, rstd, x, P(m, w), N, m->cfg.d_model);
}

void tf_norm_bwd(const sdp_tf *m, float *dx, const float *dout, const float *x, const float *mean,
                 const float *rstd, long w, long gw, long gb, int N) {
    if (m->cfg.style != SDP_STYLE_LLAMA)
        m->be->layernorm_bwd(m->be, dx, G(m, gw), G(m, gb), dout, x, P(m, w), mean, rstd, N,
                             m->cfg.d_model);
    else
        m->be->rmsnorm_bwd(m->be, dx, G(m, gw), dout, x, P(m, w), rstd, N, m->cfg.d_model);
}

#define norm_fwd tf_norm_fwd
#define norm_bwd tf_norm_bwd

/* Each branch's projection is written into `out` first and then folded into the residual, so no
 * extra [N, C] buffer is needed per layer. */
static void layer_forward(sdp_tf *m, int i, const float *x, int B, int T) {
    const sdp_tf_layer_offsets *o = &m->off.layers[i];
    sdp_tf_layer_acts *a = &m->layers[i];
    const int N = B * T, C = m->cfg.d_model, H = m->shape.n_head[i], hs = m->head_size;
    const int D = H * hs, F = m->shape.d_ff[i];
    const size_t NC = (size_t)N * C;
    const float s = m->shape.branch_scale[i];
    const bool llama = m->cfg.style == SDP_STYLE_LLAMA, causal = m->cfg.style != SDP_STYLE_VIT;
    const sdp_backend *be = m->be;

    if (H > 0) {
        norm_fwd(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, o->ln1_w, o->ln1_b, N);
        be->linear_fwd(be, a->qkv, a->ln1, P(m, o->w_qkv), P(m, o->b_qkv), N, C, 3 * D);
        if (llama) be->rope_fwd(be, a->qkv, B, T, H, hs, m->cfg.rope_theta);
        be->attention_fwd(be, a->att, a->lse, a->qkv, B, T, H, hs, causal, m->attn_scratch);
        be->linear_fwd(be, a->out, a->att, P(m, o->w_o), P(m, o->b_o), N, D, C);
        be->residual_fwd(be, a->mid, x, a->out, s, NC);
    } else {
        be->copy_rows(be, a->mid, 0, x, 0, 1, NC);
    }
    if (F > 0) {
        norm_fwd(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, o->ln2_w, o->ln2_b, N);
        be->linear_fwd(be, a->fc, a->ln2, P(m, o->w_fc), P(m, o->b_fc), N, C, llama ? 2 * F : F);
        if (llama)
            be->swiglu_fwd(be, a->act, a->fc, N, F);
        else
            be->gelu_fwd(be, a->act, a->fc, (size_t)N * F);
        be->linear_fwd(be, a->out, a->act, P(m, o->w_proj), P(m, o->b_proj), N, F, C);
        be->residual_fwd(be, a->out, a->mid, a->out, s, NC);
    } else {
        be->copy_rows(be, a->out, 0, a->mid, 0, 1, NC);
    }
}

const float *tf_layers_forward(sdp_tf *m, const float *x, int B, int T) {
    for (int i = 0; i < m->shape.n_layer; i++) {
        layer_forward(m, i, x, B, T);
        x = m->layers[i].out;
    }
    return x;
}

void sdp_tf_stem_tokens(sdp_tf *m, const int *inputs, int B, int T) {
    SDP_CHECK(m->cfg.style != SDP_STYLE_VIT, "vit reads images, not tokens");
    SDP_ASSERT(B <= m->B && T <= m->T && B * T <= m->B * m->T);
    const int N = B * T, V = m->cfg.vocab, C = m->cfg.d_model;
    for (int i = 0; i < N; i++)
        SDP_CHECK(inputs[i] >= 0 && inputs[i] < V,
                  "token id %d is outside the model's vocabulary of %d: the data does not match "
                  "the model (check --vocab)",
                  inputs[i], V);
    const sdp_backend *be = m->be;
    be->upload(be, m->inputs, inputs, (size_t)N * sizeof(int));
    m->last_B = B;
    m->last_T = T;
    be->embed_fwd(be, m->embed, m->inputs, P(m, m->off.wte), P(m, m->off.wpe), B, T, C);
}

void sdp_tf_layer_forward(sdp_tf *m, int i, float *x, int B, int T) {
    SDP_ASSERT(i >= 0 && i < m->shape.n_layer && B <= m->B && T <= m->T);
    layer_forward(m, i, x, B, T);
    const size_t NC = (size_t)B * T * m->cfg.d_model;
    m->be->copy_rows(m->be, x, 0, m->layers[i].out, 0, 1, NC);
}

double sdp_tf_head_tokens(sdp_tf *m, const float *x, const int *targets, int B, int T) {
    const int N = B * T, V = m->cfg.vocab, Vp = m->cfg.vocab_padded, C = m->cfg.d_model;
    const sdp_backend *be = m->be;
    m->last_B = B;
    m->last_T = T;
    norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, x, m->off.lnf_w, m->off.lnf_b, N);
    be->linear_fwd(be, m->probs, m->lnf, P(m, m->off.lm_head), NULL, N, C, Vp);
    m->has_targets = targets != NULL;
    if (!targets) return 0.0;
    int counted = 0;
    for (int i = 0; i < N; i++) {
        SDP_CHECK(targets[i] < V, "target id %d is outside the vocabulary of %d", targets[i], V);
        counted += targets[i] >= 0;
    }
    be->upload(be, m->targets, targets, (size_t)N * sizeof(int));
    m->n_targets = counted;
    return be->softmax_xent_fwd(be, m->losses, m->probs, m->probs, m->targets, N, V, Vp);
}

double sdp_tf_forward(sdp_tf *m, const int *inputs, const int *targets, int B, int T) {
    sdp_tf_stem_tokens(m, inputs, B, T);
    return sdp_tf_head_tokens(m, tf_layers_forward(m, m->embed, B, T), targets, B, T);
}

const float *sdp_tf_logits_row(const sdp_tf *m, int row) {
    SDP_ASSERT(!m->has_targets);
    return m->probs + (size_t)row * m->cfg.vocab_padded;
}

/* ---- backward ----------------------------------------------------------------------------- */

static void zero(const sdp_tf *m, float *x, size_t n) {
    m->be->zero(m->be, x, n * sizeof(float));
}

/* On entry d_res holds dL/d(layer output); on exit dL/d(layer input). */
static void layer_backward(sdp_tf *m, int i, const float *x, int B, int T) {
    const sdp_tf_layer_offsets *o = &m->off.layers[i], *go = &m->goff.layers[i];
    const sdp_tf_layer_acts *a = &m->layers[i];
    const int N = B * T, C = m->cfg.d_model, H = m->shape.n_head[i], hs = m->head_size;
    const int D = H * hs, F = m->shape.d_ff[i];
    const size_t NC = (size_t)N * C;
    const float s = m->shape.branch_scale[i];
    const bool llama = m->cfg.style == SDP_STYLE_LLAMA, causal = m->cfg.style != SDP_STYLE_VIT;
    const int fc_width = llama ? 2 * F : F;
    const sdp_backend *be = m->be;

    if (F > 0) { /* out = mid + s * proj(act(fc(norm2(mid)))) */
        zero(m, m->d_branch, NC);
        be->residual_bwd(be, NULL, m->d_branch, m->d_res, s, NC);
        zero(m, m->d_act, (size_t)N * F);
        linear_bwd(m, m->d_act, m->d_branch, a->act, o->w_proj, go->w_proj, o->b_proj, go->b_proj,
                   N, F, C);
        zero(m, m->d_fc, (size_t)N * fc_width);
        if (llama)
            be->swiglu_bwd(be, m->d_fc, m->d_act, a->fc, N, F);
        else
            be->gelu_bwd(be, m->d_fc, m->d_act, a->fc, (size_t)N * F);
        zero(m, m->d_norm, NC);
        linear_bwd(m, m->d_norm, m->d_fc, a->ln2, o->w_fc, go->w_fc, o->b_fc, go->b_fc, N, C,
                   fc_width);
        norm_bwd(m, m->d_res, m->d_norm, a->mid, a->ln2_mean, a->ln2_rstd, o->ln2_w, go->ln2_w,
                 go->ln2_b, N);
    }
    if (H > 0) { /* mid = x + s * o_proj(attention(qkv(norm1(x)))) */
        zero(m, m->d_branch, NC);
        be->residual_bwd(be, NULL, m->d_branch, m->d_res, s, NC);
        zero(m, m->d_att, (size_t)N * D);
        linear_bwd(m, m->d_att, m->d_branch, a->att, o->w_o, go->w_o, o->b_o, go->b_o, N, D, C);
        zero(m, m->d_qkv, (size_t)N * 3 * D);
        be->attention_bwd(be, m->d_qkv, m->d_att, a->qkv, a->att, a->lse, B, T, H, hs, causal,
                          m->attn_scratch);
        if (llama) be->rope_bwd(be, m->d_qkv, B, T, H, hs, m->cfg.rope_theta);
        zero(m, m->d_norm, NC);
        linear_bwd(m, m->d_norm, m->d_qkv, a->ln1, o->w_qkv, go->w_qkv, o->b_qkv, go->b_qkv, N, C,
                   3 * D);
        norm_bwd(m, m->d_res, m->d_norm, x, a->ln1_mean, a->ln1_rstd, o->ln1_w, go->ln1_w,
                 go->ln1_b, N);
    }
}

void tf_layers_backward(sdp_tf *m, int B, int T) {
    const int floor = m->backward_floor > 0 ? m->backward_floor : 0;
    for (int i = m->shape.n_layer - 1; i >= floor; i--) {
        layer_backward(m, i, i > 0 ? m->layers[i - 1].out : m->embed, B, T);
        if (m->layer_done) m->layer_done(m->layer_done_ctx, i);
    }
}

void sdp_tf_backward(sdp_tf *m, float dloss) {
    SDP_ASSERT(m->grads && m->has_targets);
    if (m->cfg.style == SDP_STYLE_VIT) {
        tf_vit_backward(m, dloss);
        return;
    }
    const int B = m->last_B, T = m->last_T, N = B * T, C = m->cfg.d_model;
    const int V = m->cfg.vocab, Vp = m->cfg.vocab_padded;
    const size_t NC = (size_t)N * C;
    const sdp_backend *be = m->be;
    be->softmax_xent_bwd(be, m->probs, m->probs, m->targets, dloss, N, V, Vp);
    zero(m, m->d_norm, NC);
    be->linear_bwd(be, m->d_norm, G(m, m->goff.lm_head), NULL, m->probs, m->lnf,
                   P(m, m->off.lm_head), N, C, Vp);
    const int L = m->shape.n_layer;
    const float *top = L > 0 ? m->layers[L - 1].out : m->embed;
    zero(m, m->d_res, NC);
    norm_bwd(m, m->d_res, m->d_norm, top, m->lnf_mean, m->lnf_rstd, m->off.lnf_w, m->goff.lnf_w,
             m->goff.lnf_b, N);
    tf_layers_backward(m, B, T);
    if (m->backward_floor < 0)
        be->embed_bwd(be, G(m, m->goff.wte), G(m, m->goff.wpe), m->d_res, m->inputs, B, T, C);
    m->has_targets = false; /* probs now hold gradients */
}

double sdp_tf_train_flops_per_token(const sdp_tf *m, int T) {
    const double C = m->cfg.d_model, hs = m->head_size;
    double layers = 0, attn = 0;
    for (int i = 0; i < m->shape.n_layer; i++) {
        const double D = m->shape.n_head[i] * hs, F = m->shape.d_ff[i];
        layers += 3 * D * C + D * C + (m->cfg.style == SDP_STYLE_LLAMA ? 3 : 2) * F * C;
        attn += 2.0 * T * D; /* q.k and p.v per token, counted over the full T as PaLM does */
    }
    if (m->cfg.style == SDP_STYLE_VIT) { /* per image: T tokens, one classifier row */
        const double p = m->cfg.patch, stem = (T - 1) * m->cfg.in_channels * p * p * C;
        return 6.0 * (T * layers + stem + C * m->cfg.classes) + 6.0 * T * attn;
    }
    return 6.0 * (layers + C * m->cfg.vocab_padded) + 6.0 * attn;
}
