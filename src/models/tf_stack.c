/* The transformer's layer stack: every layer's forward and backward, and their buffers. A layer
 * is pre-norm, x += s * attn(norm1(x)) then x += s * mlp(norm2(x)), of the heads and MLP neurons
 * its shape keeps; m->opts, fixed when the model is built, says which norm and MLP, whether RoPE
 * turns q and k and whether attention is causal. Biases are there where the family declared them
 * (an offset of -1 runs without). Calls nothing above it (tf_common.c only). */
#include "models/tf_stack.h"

#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

#define P tf_param
#define G tf_grad

/* The fc output's width for F neurons: SwiGLU's gate and up are one [N, 2F] GEMM. */
static size_t fc_width(const sdp_tf *m, size_t F) {
    return m->opts.mlp == SDP_TF_SWIGLU ? 2 * F : F;
}

/* ---- buffers ------------------------------------------------------------------------------- */

/* The heads H, attention width D and MLP neurons F of the widest layer: a buffer shared by every
 * layer is sized for it. */
static void widest_layer(const sdp_tf *m, int *H, size_t *D, size_t *F) {
    *H = 0;
    *F = 0;
    for (int i = 0; i < m->shape.n_layer; i++) {
        if (m->shape.n_head[i] > *H) *H = m->shape.n_head[i];
        if ((size_t)m->shape.d_ff[i] > *F) *F = (size_t)m->shape.d_ff[i];
    }
    *D = (size_t)*H * m->head_size;
}

/* One layer's forward activations but its output, for H heads of attention width D and F MLP
 * neurons. */
static void alloc_acts_set(sdp_tf *m, sdp_tf_layer_acts *a, int H, size_t D, size_t F) {
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.model.width;
    a->ln1 = tf_acts(m, N * C);
    a->ln1_mean = tf_acts(m, N);
    a->ln1_rstd = tf_acts(m, N);
    a->qkv = tf_acts(m, N * 3 * D);
    a->att = tf_acts(m, N * D);
    a->lse = tf_acts(m, (size_t)m->B * H * m->T);
    a->mid = tf_acts(m, N * C);
    a->ln2 = tf_acts(m, N * C);
    a->ln2_mean = tf_acts(m, N);
    a->ln2_rstd = tf_acts(m, N);
    a->fc = tf_acts(m, N * fc_width(m, F));
    a->act = tf_acts(m, N * F);
}

/* A dropout mask of bits for n elements, counted with the activations. */
static uint32_t *alloc_mask(sdp_tf *m, size_t n) {
    return m->be->alloc(m->be, SDP_MEM_ACTS, sdp_dropout_words(n) * sizeof(uint32_t));
}

/* Training keeps every layer's activations: the backward reads them all. With dropout, also the
 * masks of the branches the layer has: the backward applies them again. */
static void alloc_layer_acts(sdp_tf *m, int i) {
    sdp_tf_layer_acts *a = &m->layers[i];
    alloc_acts_set(m, a, m->shape.n_head[i], (size_t)m->shape.n_head[i] * m->head_size,
                   (size_t)m->shape.d_ff[i]);
    a->out = tf_acts(m, (size_t)m->B * m->T * m->cfg.model.width);
    if (m->cfg.model.dropout <= 0.0f) return;
    const size_t NC = (size_t)m->B * m->T * m->cfg.model.width;
    if (m->shape.n_head[i] > 0) a->drop_attn = alloc_mask(m, NC);
    if (m->shape.d_ff[i] > 0) a->drop_mlp = alloc_mask(m, NC);
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
    int H;
    size_t D, F;
    widest_layer(m, &H, &D, &F);
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.model.width;
    const size_t fc = fc_width(m, F);
    /* The buffers, each once: shared_set owns them (the aliases stay NULL in it) */
    sdp_tf_layer_acts *own = &m->shared_set;
    memset(own, 0, sizeof *own);
    own->ln1 = tf_acts(m, N * (D > C ? D : C));
    own->ln1_mean = tf_acts(m, N);
    own->ln1_rstd = tf_acts(m, N);
    own->qkv = tf_acts(m, N * (3 * D > fc ? 3 * D : fc));
    own->lse = tf_acts(m, (size_t)m->B * H * m->T);
    own->mid = tf_acts(m, N * C);
    const bool swiglu = m->opts.mlp == SDP_TF_SWIGLU;
    if (swiglu) own->act = tf_acts(m, N * F);
    own->out = tf_acts(m, N * C);
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

/* Activation recomputation (cfg.model.recompute): a layer's backward reads its input and the
 * activations of its own forward, so training keeps only each layer's output (the next layer's
 * input; the embeddings are layer 0's, and the top layer's is the head's) and one set of the rest,
 * sized for the widest layer, with the masks of its dropped branches: the forward writes it layer
 * after layer, and the backward recomputes it for each layer before that layer's gradients
 * (tf_stack_backward). So training holds L + 1 residual streams and one layer's activations,
 * about (L + 16) B*T*C floats for GPT instead of about (16 L + 1) B*T*C. */
static void alloc_recompute_acts(sdp_tf *m) {
    int H;
    size_t D, F;
    widest_layer(m, &H, &D, &F);
    sdp_tf_layer_acts *own = &m->shared_set; /* owns the buffers; its out stays NULL */
    memset(own, 0, sizeof *own);
    alloc_acts_set(m, own, H, D, F);
    const size_t NC = (size_t)m->B * m->T * m->cfg.model.width;
    if (m->cfg.model.dropout > 0.0f) {
        if (H > 0) own->drop_attn = alloc_mask(m, NC);
        if (F > 0) own->drop_mlp = alloc_mask(m, NC);
    }
    for (int i = 0; i < m->shape.n_layer; i++) {
        m->layers[i] = *own;
        m->layers[i].out = tf_acts(m, NC);
    }
    m->shared_acts = m->recompute = true;
    m->acts_layer = -1;
}

/* Backward work buffers are shared by all layers, so they are sized for the widest one. */
static void alloc_backward_buffers(sdp_tf *m) {
    const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.model.width;
    int H;
    size_t D, F;
    widest_layer(m, &H, &D, &F);
    m->d_res = tf_acts(m, N * C);
    m->d_branch = tf_acts(m, N * C);
    m->d_norm = tf_acts(m, N * C);
    m->d_att = tf_acts(m, N * D);
    m->d_qkv = tf_acts(m, N * 3 * D);
    m->d_fc = tf_acts(m, N * fc_width(m, F));
    m->d_act = tf_acts(m, N * F);
}

void tf_stack_alloc(sdp_tf *m, sdp_model_mode mode) {
    const size_t NC = (size_t)m->B * m->T * m->cfg.model.width;
    m->embed = tf_acts(m, NC);
    if (mode != SDP_MODEL_INFER && m->cfg.model.dropout > 0.0f) m->drop_embed = alloc_mask(m, NC);
    m->layers = sdp_xcalloc((size_t)m->shape.n_layer + 1, sizeof *m->layers, "the layers' state");
    if (mode == SDP_MODEL_INFER)
        alloc_infer_acts(m);
    else if (m->cfg.model.recompute)
        alloc_recompute_acts(m);
    else
        for (int i = 0; i < m->shape.n_layer; i++) alloc_layer_acts(m, i);
}

void tf_stack_alloc_backward(sdp_tf *m, sdp_model_mode mode) {
    const sdp_backend *be = m->be;
    if (mode != SDP_MODEL_INFER) alloc_backward_buffers(m);
    int max_heads;
    size_t D, F;
    widest_layer(m, &max_heads, &D, &F);
    const size_t attn_scratch =
        sdp_attention_scratch_bytes(be, m->B, m->T, max_heads, m->head_size);
    if (attn_scratch) m->attn_scratch = be->alloc(be, SDP_MEM_SCRATCH, attn_scratch);
}

void tf_stack_free(sdp_tf *m) {
    const sdp_backend *be = m->be;
    /* an inference model's layers share one set (alloc_infer_acts), freed once; so do a
     * recomputing model's, but for their outputs (alloc_recompute_acts) */
    const int nsets = m->shared_acts ? 1 : m->shape.n_layer;
    for (int i = 0; i < nsets; i++) {
        sdp_tf_layer_acts *a = m->shared_acts ? &m->shared_set : &m->layers[i];
        float *bufs[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->att, a->lse, a->mid,
                         a->ln2, a->ln2_mean, a->ln2_rstd, a->fc,  a->act, a->out};
        for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++) be->free(be, bufs[j]);
        be->free(be, a->drop_attn);
        be->free(be, a->drop_mlp);
    }
    for (int i = 0; m->recompute && i < m->shape.n_layer; i++) be->free(be, m->layers[i].out);
    float *bufs[] = {m->embed, m->d_res, m->d_branch, m->d_norm,      m->d_att,
                     m->d_qkv, m->d_fc,  m->d_act,    m->attn_scratch};
    for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++) be->free(be, bufs[j]);
    be->free(be, m->drop_embed);
    free(m->layers);
    m->layers = NULL;
}

/* ---- dropout ------------------------------------------------------------------------------- */

/* Where a layer drops (nanoGPT's places): attention's probabilities, and each branch's output
 * before the residual. */
enum { SITE_ATTN_PROBS, SITE_ATTN_OUT, SITE_MLP_OUT, SITES_PER_LAYER };

/* The dropout of one site of the last forward: stream `site` of its key, the stem's being 0 and
 * global layer g's 1 + SITES_PER_LAYER * g + its place, so that no two sites of a forward share a
 * stream, whatever subnetwork the layers are part of. */
static sdp_dropout site_dropout(const sdp_tf *m, uint64_t site) {
    if (!m->dropped) return SDP_NO_DROPOUT;
    return (sdp_dropout){(float)m->cfg.model.dropout, sdp_rng_make(m->dropped_key, site).state};
}

static sdp_dropout layer_dropout(const sdp_tf *m, int i, int place) {
    return site_dropout(m, 1 + (uint64_t)SITES_PER_LAYER * m->shape.layer_id[i] + (uint64_t)place);
}

void sdp_tf_set_dropout(sdp_tf *m, bool on, uint64_t key) {
    m->dropping = on && m->drop_embed; /* masks exist: cfg.model.dropout > 0, a training mode */
    m->dropout_key = key;
}

void tf_stack_begin_forward(sdp_tf *m, bool may_drop) {
    m->dropped = may_drop && m->dropping;
    m->dropped_key = m->dropout_key;
    m->acts_layer = -1;
}

/* x = dropout(x), with a new mask drawn into `mask` from `d` */
static void drop(const sdp_tf *m, float *x, uint32_t *mask, sdp_dropout d, size_t n) {
    sdp_dropout_mask(m->be, mask, n, d);
    sdp_dropout_fwd(m->be, x, x, mask, sdp_dropout_scale(d.p), n);
}

void tf_stack_drop_stem(sdp_tf *m, int B, int T) {
    if (m->dropped)
        drop(m, m->embed, m->drop_embed, site_dropout(m, 0), (size_t)B * T * m->cfg.model.width);
}

const float *tf_stack_stem_grad(sdp_tf *m, int B, int T) {
    if (!m->dropped) return m->d_res;
    const size_t NC = (size_t)B * T * m->cfg.model.width;
    m->be->zero(m->be, m->d_branch, NC * sizeof(float));
    sdp_dropout_bwd(m->be, m->d_branch, m->d_res, m->drop_embed,
                    sdp_dropout_scale((float)m->cfg.model.dropout), NC);
    return m->d_branch;
}

/* ---- forward ------------------------------------------------------------------------------- */

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
                sdp_gemm(m->be, true, false, (int)s->len[i], ic, n, 1.0f, dout + row0 + s->start[i],
                         oc, inp, ic, 1.0f, m->grads + s->dst[i], (int)s->ld[i]);
            else /* dW[:, cols] += dout^T inp[:, cols] */
                sdp_gemm(m->be, true, false, oc, (int)s->len[i], n, 1.0f, dout, oc,
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
            sdp_bias_slice_bwd(m->be, m->grads + s->dst[i], dout, n, oc,
                               (int)(off - b + s->start[i]), (int)s->len[i]);
    }
}

/* A linear layer's backward, honouring whole, absent (-1) and sliced gradients. */
static void linear_bwd(const sdp_tf *m, float *dinp, const float *dout, const float *inp, long w,
                       long gw, long b, long gb, int n, int ic, int oc) {
    sdp_linear_bwd(m->be, dinp, G(m, gw), G(m, gb), dout, inp, P(m, w), n, ic, oc);
    if (gw == SDP_GRAD_SLICED) sliced_weight_grads(m, w, dout, inp, n, ic, oc);
    if (gb == SDP_GRAD_SLICED) sliced_bias_grads(m, b, dout, n, oc);
}

/* A layer's sizes for a batch of B sequences of T tokens: its heads and MLP width are its own. */
typedef struct {
    int N, C, H, hs, D, F, fc; /* N = B * T rows; D = H * hs; fc: the first MLP linear's width */
    size_t NC;
    float s; /* the branch scale */
} layer_dims;

static layer_dims dims_of(const sdp_tf *m, int i, int B, int T) {
    layer_dims d = {
        .N = B * T, .C = m->cfg.model.width, .H = m->shape.n_head[i], .hs = m->head_size};
    d.D = d.H * d.hs;
    d.F = m->shape.d_ff[i];
    d.fc = (int)fc_width(m, (size_t)d.F);
    d.NC = (size_t)d.N * d.C;
    d.s = m->shape.branch_scale[i];
    return d;
}

/* Each branch's projection is written into `out` first (and dropped there, in place) and then
 * folded into the residual, so no extra [N, C] buffer is needed per layer.
 * again: the backward's recomputation (cfg.model.recompute) of what layer i's backward reads, from
 * its kept input x: the forward's kernels on the same values, so bitwise the forward's activations,
 * with the same dropout masks drawn again from their streams (attention's from their indices, as
 * always). It stops before the MLP's output projection, which the backward does not read (its
 * mask alone is drawn), and projects attention into d_branch, free until that layer's backward
 * starts, so the layer's output, the layer above's kept input, is not written. */
static void layer_forward(sdp_tf *m, int i, const float *x, int B, int T, bool again) {
    const sdp_tf_layer_offsets *o = &m->off.layers[i];
    sdp_tf_layer_acts *a = &m->layers[i];
    const sdp_tf_layer_opts *op = &m->opts;
    const bool swiglu = op->mlp == SDP_TF_SWIGLU;
    const sdp_backend *be = m->be;
    const layer_dims d = dims_of(m, i, B, T);
    float *proj = again ? m->d_branch : a->out;
    m->acts_layer = i;

    if (d.H > 0) {
        tf_norm_fwd(m, op->norm, a->ln1, a->ln1_mean, a->ln1_rstd, x, o->ln1_w, o->ln1_b, d.N);
        sdp_linear_fwd(be, a->qkv, a->ln1, P(m, o->w_qkv), P(m, o->b_qkv), d.N, d.C, 3 * d.D);
        if (op->rope) sdp_rope_fwd(be, a->qkv, B, T, d.H, d.hs, op->rope_theta);
        sdp_attention_fwd(be, a->att, a->lse, a->qkv, B, T, d.H, d.hs, op->causal,
                          layer_dropout(m, i, SITE_ATTN_PROBS), m->attn_scratch);
        sdp_linear_fwd(be, proj, a->att, P(m, o->w_o), P(m, o->b_o), d.N, d.D, d.C);
        if (m->dropped) drop(m, proj, a->drop_attn, layer_dropout(m, i, SITE_ATTN_OUT), d.NC);
        sdp_residual_fwd(be, a->mid, x, proj, d.s, d.NC);
    } else {
        sdp_copy_rows(be, a->mid, 0, x, 0, 1, d.NC);
    }
    if (d.F > 0) {
        tf_norm_fwd(m, op->norm, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, o->ln2_w, o->ln2_b, d.N);
        sdp_linear_fwd(be, a->fc, a->ln2, P(m, o->w_fc), P(m, o->b_fc), d.N, d.C, d.fc);
        if (swiglu)
            sdp_swiglu_fwd(be, a->act, a->fc, d.N, d.F);
        else
            sdp_gelu_fwd(be, a->act, a->fc, (size_t)d.N * d.F);
        if (again) {
            if (m->dropped)
                sdp_dropout_mask(be, a->drop_mlp, d.NC, layer_dropout(m, i, SITE_MLP_OUT));
            return;
        }
        sdp_linear_fwd(be, a->out, a->act, P(m, o->w_proj), P(m, o->b_proj), d.N, d.F, d.C);
        if (m->dropped) drop(m, a->out, a->drop_mlp, layer_dropout(m, i, SITE_MLP_OUT), d.NC);
        sdp_residual_fwd(be, a->out, a->mid, a->out, d.s, d.NC);
    } else if (!again) {
        sdp_copy_rows(be, a->out, 0, a->mid, 0, 1, d.NC);
    }
}

const float *tf_stack_forward(sdp_tf *m, const float *x, int B, int T) {
    for (int i = 0; i < m->shape.n_layer; i++) {
        layer_forward(m, i, x, B, T, false);
        x = m->layers[i].out;
    }
    return x;
}

void sdp_tf_layer_forward(sdp_tf *m, int i, float *x, int B, int T) {
    SDP_ASSERT(i >= 0 && i < m->shape.n_layer && B <= m->B && T <= m->T);
    tf_stack_begin_forward(m, false); /* the stages evaluate */
    layer_forward(m, i, x, B, T, false);
    const size_t NC = (size_t)B * T * m->cfg.model.width;
    sdp_copy_rows(m->be, x, 0, m->layers[i].out, 0, 1, NC);
}

const float *tf_stack_top(const sdp_tf *m) {
    const int L = m->shape.n_layer;
    return L > 0 ? m->layers[L - 1].out : m->embed;
}

/* ---- backward ------------------------------------------------------------------------------ */

static void zero(const sdp_tf *m, float *x, size_t n) {
    m->be->zero(m->be, x, n * sizeof(float));
}

/* On entry d_res holds dL/d(layer output); on exit dL/d(layer input). */
static void layer_backward(sdp_tf *m, int i, const float *x, int B, int T) {
    const sdp_tf_layer_offsets *o = &m->off.layers[i], *go = &m->goff.layers[i];
    const sdp_tf_layer_acts *a = &m->layers[i];
    const sdp_tf_layer_opts *op = &m->opts;
    const bool swiglu = op->mlp == SDP_TF_SWIGLU;
    const sdp_backend *be = m->be;
    const layer_dims d = dims_of(m, i, B, T);

    /* With dropout, a branch's gradient is s / (1-p) * M d_res, one op instead of the residual's
     * backward (s d_res) and then dropout's. */
    const float s_drop = d.s * sdp_dropout_scale((float)m->cfg.model.dropout);
    if (d.F > 0) { /* out = mid + s * drop(proj(act(fc(norm2(mid))))) */
        zero(m, m->d_branch, d.NC);
        if (m->dropped)
            sdp_dropout_bwd(be, m->d_branch, m->d_res, a->drop_mlp, s_drop, d.NC);
        else
            sdp_residual_bwd(be, NULL, m->d_branch, m->d_res, d.s, d.NC);
        zero(m, m->d_act, (size_t)d.N * d.F);
        linear_bwd(m, m->d_act, m->d_branch, a->act, o->w_proj, go->w_proj, o->b_proj, go->b_proj,
                   d.N, d.F, d.C);
        zero(m, m->d_fc, (size_t)d.N * d.fc);
        if (swiglu)
            sdp_swiglu_bwd(be, m->d_fc, m->d_act, a->fc, d.N, d.F);
        else
            sdp_gelu_bwd(be, m->d_fc, m->d_act, a->fc, (size_t)d.N * d.F);
        zero(m, m->d_norm, d.NC);
        linear_bwd(m, m->d_norm, m->d_fc, a->ln2, o->w_fc, go->w_fc, o->b_fc, go->b_fc, d.N, d.C,
                   d.fc);
        tf_norm_bwd(m, op->norm, m->d_res, m->d_norm, a->mid, a->ln2_mean, a->ln2_rstd, o->ln2_w,
                    go->ln2_w, go->ln2_b, d.N);
    }
    if (d.H > 0) { /* mid = x + s * drop(o_proj(attention(qkv(norm1(x))))) */
        zero(m, m->d_branch, d.NC);
        if (m->dropped)
            sdp_dropout_bwd(be, m->d_branch, m->d_res, a->drop_attn, s_drop, d.NC);
        else
            sdp_residual_bwd(be, NULL, m->d_branch, m->d_res, d.s, d.NC);
        zero(m, m->d_att, (size_t)d.N * d.D);
        linear_bwd(m, m->d_att, m->d_branch, a->att, o->w_o, go->w_o, o->b_o, go->b_o, d.N, d.D,
                   d.C);
        zero(m, m->d_qkv, (size_t)d.N * 3 * d.D);
        sdp_attention_bwd(be, m->d_qkv, m->d_att, a->qkv, a->att, a->lse, B, T, d.H, d.hs,
                          op->causal, layer_dropout(m, i, SITE_ATTN_PROBS), m->attn_scratch);
        if (op->rope) sdp_rope_bwd(be, m->d_qkv, B, T, d.H, d.hs, op->rope_theta);
        zero(m, m->d_norm, d.NC);
        linear_bwd(m, m->d_norm, m->d_qkv, a->ln1, o->w_qkv, go->w_qkv, o->b_qkv, go->b_qkv, d.N,
                   d.C, 3 * d.D);
        tf_norm_bwd(m, op->norm, m->d_res, m->d_norm, x, a->ln1_mean, a->ln1_rstd, o->ln1_w,
                    go->ln1_w, go->ln1_b, d.N);
    }
}

/* Under recomputation the shared activations hold the top layer's after the forward: every other
 * layer's are recomputed from its kept input just before its backward. */
void tf_stack_backward(sdp_tf *m, int B, int T) {
    const int floor = m->backward_floor > 0 ? m->backward_floor : 0;
    for (int i = m->shape.n_layer - 1; i >= floor; i--) {
        const float *x = i > 0 ? m->layers[i - 1].out : m->embed;
        if (m->recompute && m->acts_layer != i) layer_forward(m, i, x, B, T, true);
        layer_backward(m, i, x, B, T);
        if (m->layer_done) m->layer_done(m->layer_done_ctx, i);
    }
}

void tf_stack_flops(const sdp_tf *m, int T, double *layers, double *attn) {
    const double C = m->cfg.model.width, hs = m->head_size;
    *layers = *attn = 0;
    for (int i = 0; i < m->shape.n_layer; i++) {
        const double D = m->shape.n_head[i] * hs, F = m->shape.d_ff[i];
        *layers += 3 * D * C + D * C + (m->opts.mlp == SDP_TF_SWIGLU ? 3 : 2) * F * C;
        *attn += 2.0 * T * D; /* q.k and p.v per token, counted over the full T as PaLM does */
    }
}
