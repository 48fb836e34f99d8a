/* What every transformer family shares: the styles' names, shapes, the helpers that describe a
 * layout, the buffers built the same way for every family, and the norms. Calls nothing above
 * it. */
#include "models/transformer_internal.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the configuration ----------------------------------------------------------------------- */

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

int tf_outputs(const sdp_tf_config *c) {
    sdp_tf_style s;
    const bool vit = sdp_tf_style_parse(c->model.arch, &s) && s == SDP_STYLE_VIT;
    return vit ? c->model.classes : c->model.vocab;
}

/* ---- shapes -------------------------------------------------------------------------------- */

void sdp_tf_shape_full(sdp_tf_shape *s, const sdp_tf_config *cfg) {
    int L = cfg->model.layers;
    s->n_layer = L;
    s->layer_id = sdp_xcalloc((size_t)L, sizeof(int), "a transformer's shape");
    s->n_head = sdp_xcalloc((size_t)L, sizeof(int), "a transformer's shape");
    s->d_ff = sdp_xcalloc((size_t)L, sizeof(int), "a transformer's shape");
    s->branch_scale = sdp_xcalloc((size_t)L, sizeof(float), "a transformer's shape");
    for (int i = 0; i < L; i++) {
        s->layer_id[i] = i;
        s->n_head[i] = cfg->model.heads;
        s->d_ff[i] = cfg->model.d_ff;
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
    SDP_ASSERT(nblocks == cfg->model.layers);
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
    sdp_tf_config tmp = {.model.layers = src->n_layer};
    sdp_tf_shape_full(dst, &tmp);
    for (int i = 0; i < src->n_layer; i++) {
        dst->layer_id[i] = src->layer_id[i];
        dst->n_head[i] = src->n_head[i];
        dst->d_ff[i] = src->d_ff[i];
        dst->branch_scale[i] = src->branch_scale[i];
    }
}

/* ---- describing the parameters ------------------------------------------------------------- */

long tf_add(tf_adder *a, tensor_desc d) {
    const int i = tensor_desc_add(a->L, a->block, &d); /* before reading params: it may move */
    return (long)a->L->params[i].offset;
}

tf_adder tf_describe_begin(sdp_layout *L, const sdp_tf_shape *s, sdp_tf_offsets *o) {
    sdp_layout_init(L, s->n_layer);
    o->wte = o->wpe = o->lnf_w = o->lnf_b = o->lm_head = -1;
    return (tf_adder){L, -1};
}

void tf_describe_block(tf_adder *a, const sdp_tf_config *c, const sdp_tf_shape *s, int i,
                       const char *prefix) {
    sdp_block *b = &a->L->blocks[i];
    snprintf(b->name, sizeof b->name, "%s.%d", prefix, s->layer_id[i]);
    b->global_index = s->layer_id[i];
    b->droppable = true;
    b->ngroups = 2;
    b->groups[TF_GROUP_ATTN - 1] =
        (sdp_group){"attn", s->n_head[i], c->model.width / c->model.heads};
    b->groups[TF_GROUP_MLP - 1] = (sdp_group){"mlp", s->d_ff[i], 1};
    a->block = i;
}

/* ---- building ------------------------------------------------------------------------------ */

bool sdp_tf_batch_fits(const sdp_tf_config *c, int B, int T) {
    const double vocab = c->vocab_padded ? c->vocab_padded : 64 * ceil(tf_outputs(c) / 64.0);
    return (double)B * T * (c->model.width > vocab ? c->model.width : vocab) < 0x1p31;
}

void tf_begin(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
              bool whole_sequence, const sdp_backend *be) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    SDP_CHECK(B >= 1 && T >= 1, "batch size and sequence length must be positive (got %d, %d)", B,
              T);
    if (whole_sequence) T = m->cfg.model.seq_len;
    SDP_CHECK(T <= m->cfg.model.seq_len, "sequence length %d exceeds the model's maximum %d", T,
              m->cfg.model.seq_len);
    if (shape)
        shape_copy(&m->shape, shape);
    else
        sdp_tf_shape_full(&m->shape, &m->cfg);
    m->head_size = m->cfg.model.width / m->cfg.model.heads;
    m->be = be;
    SDP_CHECK(sdp_tf_batch_fits(&m->cfg, B, T),
              "a batch of %d x %d is too large for this model's activations: lower --batch or "
              "--seq-len",
              B, T);
    m->B = B;
    m->T = T;
    m->off.layers =
        sdp_xcalloc((size_t)m->shape.n_layer + 1, sizeof *m->off.layers, "the layers' offsets");
}

void tf_alloc_params(sdp_tf *m, sdp_model_mode mode) {
    const sdp_backend *be = m->be;
    m->params = be->alloc(be, SDP_MEM_PARAMS, m->layout.numel * sizeof(float));
    m->own_grads = mode == SDP_MODEL_TRAIN;
    m->backward_floor = -1;
    if (m->own_grads) m->grads = be->alloc(be, SDP_MEM_GRADS, m->layout.numel * sizeof(float));
    m->goff = m->off;
    m->goff.layers =
        sdp_xcalloc((size_t)m->shape.n_layer + 1, sizeof *m->goff.layers, "the layers' offsets");
    memcpy(m->goff.layers, m->off.layers, (size_t)m->shape.n_layer * sizeof *m->goff.layers);
}

float *tf_acts(sdp_tf *m, size_t n) {
    return m->be->alloc(m->be, SDP_MEM_ACTS, n * sizeof(float));
}

int *tf_ints(sdp_tf *m, size_t n) {
    return m->be->alloc(m->be, SDP_MEM_ACTS, n * sizeof(int));
}

void tf_head_alloc(sdp_tf *m, size_t rows) {
    const size_t C = (size_t)m->cfg.model.width, Vp = (size_t)m->cfg.vocab_padded;
    m->lnf = tf_acts(m, rows * C);
    m->lnf_mean = tf_acts(m, rows);
    m->lnf_rstd = tf_acts(m, rows);
    m->probs = tf_acts(m, rows * Vp);
    m->losses = tf_acts(m, rows);
}

void tf_free_common(sdp_tf *m) {
    const sdp_backend *be = m->be;
    if (!m->own_grads) m->grads = NULL; /* the caller's (sdp_tf_use_grads) */
    float *bufs[] = {m->params, m->grads, m->lnf, m->lnf_mean, m->lnf_rstd, m->probs, m->losses};
    for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++) be->free(be, bufs[j]);
    be->free(be, m->targets);
    free(m->off.layers);
    free(m->goff.layers);
    sdp_layout_free(&m->layout);
    sdp_tf_shape_free(&m->shape);
    memset(m, 0, sizeof *m);
}

long tf_grad_offset_of(const sdp_layout *L, long param_off, const long *grad_offset) {
    if (param_off < 0) return -1;
    /* Offsets grow with the index (sdp_layout_add), so the first tensor at param_off is found
     * by bisection: a scan per tensor cost n^2 for models of thousands of layers. */
    int lo = 0, hi = L->nparams;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((long)L->params[mid].offset < param_off)
            lo = mid + 1;
        else
            hi = mid;
    }
    SDP_ASSERT(lo < L->nparams && (long)L->params[lo].offset == param_off);
    return grad_offset[lo];
}

/* ---- norms --------------------------------------------------------------------------------- */

void tf_norm_fwd(const sdp_tf *m, sdp_tf_norm kind, float *out, float *mean, float *rstd,
                 const float *x, long w, long b, int N) {
    if (kind == SDP_TF_LAYERNORM)
        sdp_layernorm_fwd(m->be, out, mean, rstd, x, tf_param(m, w), tf_param(m, b), N,
                          m->cfg.model.width);
    else
        sdp_rmsnorm_fwd(m->be, out, rstd, x, tf_param(m, w), N, m->cfg.model.width);
}

void tf_norm_bwd(const sdp_tf *m, sdp_tf_norm kind, float *dx, const float *dout, const float *x,
                 const float *mean, const float *rstd, long w, long gw, long gb, int N) {
    if (kind == SDP_TF_LAYERNORM)
        sdp_layernorm_bwd(m->be, dx, tf_grad(m, gw), tf_grad(m, gb), dout, x, tf_param(m, w), mean,
                          rstd, N, m->cfg.model.width);
    else
        sdp_rmsnorm_bwd(m->be, dx, tf_grad(m, gw), dout, x, tf_param(m, w), rstd, N,
                        m->cfg.model.width);
}
