/* Building and freeing a ResNet: its convolution plans and its buffers (each block's own, or views
 * of buffers every block shares under inference or recomputation), the gradients' offsets, and the
 * accessors. */
#include "resnet_internal.h"

#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

static float *acts(sdp_resnet *r, size_t n) {
    return r->be->alloc(r->be, SDP_MEM_ACTS, n * sizeof(float));
}

static void note_act(sdp_resnet *r, int C, int size) {
    if (resnet_act_size(r, C, size) > r->max_act) r->max_act = resnet_act_size(r, C, size);
}

/* Plans depend only on the shape, so blocks of one stage share them. They are made in dry mode
 * too (they allocate nothing through the backend's mem): oneDNN's scratch size is known only from
 * its primitives, and the dry count must equal the real one. */
static const void *plan_for(sdp_resnet *r, int ic, int size, int oc, int k, int stride) {
    if (ic == 0 || oc == 0) return NULL;
    const sdp_conv_shape s = {r->B, ic, size, size, oc, k, k, stride, stride, k / 2, k / 2};
    for (int i = 0; i < r->nplans; i++)
        if (memcmp(&r->plans[i].shape, &s, sizeof s) == 0) return r->plans[i].impl;
    SDP_ASSERT(r->nplans < r->cap_plans);
    conv_plan *p = &r->plans[r->nplans++];
    p->shape = s;
    p->impl = sdp_conv_plan_create(r->be, &s, r->algo);
    const size_t scratch = sdp_conv_scratch_bytes(r->be, p->impl);
    if (scratch > r->conv_scratch_bytes) r->conv_scratch_bytes = scratch;
    return p->impl;
}

/* shared: NULL, the convolution's output is the unit's own; else it becomes a view of a buffer of
 * every block (recomputation), whose size *shared grows to fit it. */
static conv_bn make_conv_bn(sdp_resnet *r, conv_bn_tensors t, int ic, int in_size, int oc, int k,
                            int stride, size_t *shared) {
    conv_bn u = {.t = t,
                 .plan = plan_for(r, ic, in_size, oc, k, stride),
                 .C = oc,
                 .size = (in_size + stride - 1) / stride};
    r->flops += (double)oc * ic * k * k * u.size * u.size;
    if (oc == 0) return u;
    if (r->mode == SDP_MODEL_INFER) { /* a view of the pools, set by share_infer_acts */
        if (resnet_act_size(r, oc, u.size) > r->max_conv)
            r->max_conv = resnet_act_size(r, oc, u.size);
        if ((size_t)oc > r->max_channels) r->max_channels = (size_t)oc;
        return u;
    }
    if (!shared)
        u.conv = acts(r, resnet_act_size(r, oc, u.size));
    else if (resnet_act_size(r, oc, u.size) > *shared)
        *shared = resnet_act_size(r, oc, u.size);
    u.mean = acts(r, (size_t)oc);
    u.rstd = acts(r, (size_t)oc);
    note_act(r, oc, u.size);
    return u;
}

static void free_conv_bn(sdp_resnet *r, conv_bn *u) {
    r->be->free(r->be, u->conv);
    r->be->free(r->be, u->mean);
    r->be->free(r->be, u->rstd);
}

static void make_block(sdp_resnet *r, block *b, const kept_block *k, const block_tensors *t) {
    const sdp_resnet_block_arch *a = &k->arch;
    b->k = *k;
    const bool rc = r->recompute;
    b->c1 =
        make_conv_bn(r, t->c1, a->cin, a->in_size, k->mid, 3, a->stride, rc ? &r->max_a1 : NULL);
    b->c2 = make_conv_bn(r, t->c2, k->mid, a->out_size, a->cout, 3, 1, rc ? &r->max_c2 : NULL);
    if (a->downsample)
        b->sc = make_conv_bn(r, t->sc, a->cin, a->in_size, a->cout, 1, a->stride,
                             rc ? &r->max_sc : NULL);
    else
        b->sc.t = (conv_bn_tensors){-1, -1};
    note_act(r, a->cin, a->in_size);
    if (r->mode == SDP_MODEL_INFER) { /* views of the pools, set by share_infer_acts */
        if (resnet_act_size(r, k->mid, a->out_size) > r->max_a1)
            r->max_a1 = resnet_act_size(r, k->mid, a->out_size);
        if (resnet_act_size(r, a->cout, a->out_size) > r->max_out)
            r->max_out = resnet_act_size(r, a->cout, a->out_size);
        return;
    }
    /* recomputation: a1 is a view of pool_a1, as large as conv1's output (share_recompute_acts) */
    b->a1 = k->mid && !rc ? acts(r, resnet_act_size(r, k->mid, a->out_size)) : NULL;
    b->out = acts(r, resnet_act_size(r, a->cout, a->out_size));
}

static void view_conv_bn(sdp_resnet *r, conv_bn *u) {
    if (u->C == 0) return; /* absent, as make_conv_bn leaves it */
    u->conv = r->pool_conv;
    u->mean = r->pool_mean;
    u->rstd = r->pool_rstd;
}

/* Within a block the convolutions run one after another, each one's output consumed by its batch
 * norm (which writes a1, tmp or out) before the next starts, so they share one conv buffer and
 * one pair of statistics. Outputs alternate between two buffers: block i reads block i-1's (or
 * the stem's, which takes the odd blocks' buffer) while writing its own. The bytes are those of
 * the largest block, whatever the depth. */
static void share_infer_acts(sdp_resnet *r) {
    const sdp_resnet_config *c = &r->cfg;
    const size_t stem = resnet_act_size(r, c->width, c->image_size);
    r->pool_conv = acts(r, r->max_conv);
    r->pool_mean = acts(r, r->max_channels);
    r->pool_rstd = acts(r, r->max_channels);
    r->pool_a1 = r->max_a1 ? acts(r, r->max_a1) : NULL;
    r->pool_out[0] = acts(r, r->max_out > stem ? r->max_out : stem);
    r->pool_out[1] = acts(r, r->max_out > stem ? r->max_out : stem);
    view_conv_bn(r, &r->stem);
    r->stem_out = r->pool_out[1];
    for (int i = 0; i < r->nblocks; i++) {
        block *b = &r->blocks[i];
        view_conv_bn(r, &b->c1);
        view_conv_bn(r, &b->c2);
        view_conv_bn(r, &b->sc);
        b->a1 = b->k.mid ? r->pool_a1 : NULL;
        b->out = r->pool_out[i % 2];
    }
}

/* Under recomputation a block's backward reads its input and its own activations, each block's in
 * turn: the forward writes every block's convolution outputs and a1 into one set of buffers, and
 * the backward recomputes them block by block (resnet_block_recompute). Only the block outputs
 * (each the next block's input), the stem's and the batch statistics stay for every block. */
static void share_recompute_acts(sdp_resnet *r) {
    r->rc_c1 = r->max_a1 ? acts(r, r->max_a1) : NULL;
    r->pool_a1 = r->max_a1 ? acts(r, r->max_a1) : NULL;
    r->rc_c2 = r->max_c2 ? acts(r, r->max_c2) : NULL;
    r->rc_sc = r->max_sc ? acts(r, r->max_sc) : NULL;
    for (int i = 0; i < r->nblocks; i++) {
        block *b = &r->blocks[i];
        if (b->c1.C) b->c1.conv = r->rc_c1;
        if (b->c2.C) b->c2.conv = r->rc_c2;
        if (b->sc.C) b->sc.conv = r->rc_sc;
        b->a1 = b->k.mid ? r->pool_a1 : NULL;
    }
    r->acts_block = -1;
}

/* The largest tensor that may have a sliced gradient: those of inner groups (neuron units). */
static size_t largest_group_tensor(const sdp_layout *L) {
    size_t n = 0;
    for (int i = 0; i < L->nparams; i++)
        if (L->params[i].group >= 0 && L->params[i].numel > n) n = L->params[i].numel;
    return n;
}

static void init_grads(sdp_resnet *r) {
    const sdp_layout *L = &r->layout;
    r->goff = sdp_xmalloc(sizeof(long) * (size_t)(L->nparams + 1), "the gradients' offsets");
    r->own_grads = r->mode == SDP_MODEL_TRAIN;
    r->backward_floor = -1;
    if (r->own_grads) r->grads = r->be->alloc(r->be, SDP_MEM_GRADS, L->numel * sizeof(float));
    for (int i = 0; i < L->nparams; i++)
        r->goff[i] = r->own_grads && !L->params[i].buffer ? (long)L->params[i].offset : -1;
    if (r->mode == SDP_MODEL_INFER) return;
    r->gscratch_floats = largest_group_tensor(L);
    r->gscratch = r->be->alloc(r->be, SDP_MEM_SCRATCH, r->gscratch_floats * sizeof(float));
}

sdp_resnet *sdp_resnet_create_on(const sdp_resnet_config *cfg, const sdp_subnet_spec *spec, int B,
                                 sdp_model_mode mode, const sdp_backend *be, sdp_conv_algo algo) {
    SDP_CHECK(B >= 1, "batch size must be positive (got %d)", B);
    sdp_resnet *r = sdp_xcalloc(1, sizeof *r, "a ResNet");
    r->cfg = *cfg;
    sdp_resnet_config_finish(&r->cfg);
    const sdp_resnet_config *c = &r->cfg;
    r->mode = mode;
    r->be = be;
    r->algo = algo;
    r->B = B;
    r->recompute = c->recompute && mode != SDP_MODEL_INFER;

    const int nfull = sdp_resnet_nblocks(c);
    kept_block *kb = sdp_xcalloc((size_t)nfull, sizeof *kb, "the kept blocks");
    net_tensors t = {.blocks =
                         sdp_xcalloc((size_t)nfull, sizeof(block_tensors), "a ResNet's blocks")};
    r->blocks = sdp_xcalloc((size_t)nfull, sizeof *r->blocks, "a ResNet's blocks");
    r->cap_plans = 1 + 3 * nfull;
    r->plans = sdp_xcalloc((size_t)r->cap_plans, sizeof *r->plans, "a ResNet's convolution plans");
    r->nblocks = resnet_kept_blocks(c, spec, kb);
    resnet_describe(&r->layout, c, kb, r->nblocks, &t);
    r->params = be->alloc(be, SDP_MEM_PARAMS, r->layout.numel * sizeof(float));
    init_grads(r);

    const int S = c->image_size, C = c->width << (sdp_resnet_stages(c) - 1), K = c->classes;
    r->input = acts(r, resnet_act_size(r, c->in_channels, S));
    r->labels = be->alloc(be, SDP_MEM_ACTS, (size_t)B * sizeof(int));
    r->stem = make_conv_bn(r, t.stem, c->in_channels, S, c->width, 3, 1, NULL);
    if (mode != SDP_MODEL_INFER) r->stem_out = acts(r, resnet_act_size(r, c->width, S));
    for (int i = 0; i < r->nblocks; i++) make_block(r, &r->blocks[i], &kb[i], &t.blocks[i]);
    if (mode == SDP_MODEL_INFER) share_infer_acts(r);
    if (r->recompute) share_recompute_acts(r);
    r->fc_w = t.fc_w;
    r->fc_b = t.fc_b;
    r->flops += (double)C * K;
    size_t widest_out = 0;
    for (int i = 0; i < r->nblocks; i++) {
        size_t n = resnet_act_size(r, kb[i].arch.cout, kb[i].arch.out_size);
        if (n > widest_out) widest_out = n;
    }
    r->tmp = acts(r, widest_out);
    r->pooled = acts(r, (size_t)B * C);
    r->probs = acts(r, (size_t)B * K);
    r->losses = acts(r, (size_t)B);
    if (mode != SDP_MODEL_INFER) {
        r->g = acts(r, r->max_act);
        r->s = acts(r, r->max_act);
        r->t1 = acts(r, r->max_act);
        r->t2 = acts(r, r->max_act);
        r->dpooled = acts(r, (size_t)B * C);
    }
    r->conv_scratch = be->alloc(be, SDP_MEM_SCRATCH, r->conv_scratch_bytes);
    free(kb);
    free(t.blocks);
    return r;
}

sdp_resnet *sdp_resnet_create(const sdp_resnet_config *cfg, const sdp_subnet_spec *spec, int B,
                              sdp_model_mode mode, sdp_gemm_provider gemm, sdp_conv_algo algo,
                              sdp_mem *mem) {
    sdp_backend *be = sdp_backend_cpu(gemm, mem);
    sdp_resnet *r = sdp_resnet_create_on(cfg, spec, B, mode, be, algo);
    r->own_be = be;
    return r;
}

void sdp_resnet_destroy(sdp_resnet *r) {
    if (!r) return;
    const sdp_backend *be = r->be;
    if (r->mode == SDP_MODEL_INFER) { /* the activations are views of the pools */
        float *pools[] = {r->pool_conv, r->pool_mean,   r->pool_rstd,
                          r->pool_a1,   r->pool_out[0], r->pool_out[1]};
        for (size_t i = 0; i < sizeof pools / sizeof *pools; i++) be->free(be, pools[i]);
    } else {
        float *shared[] = {r->rc_c1, r->rc_c2, r->rc_sc, r->pool_a1};
        for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) be->free(be, shared[i]);
        for (int i = 0; i < r->nblocks; i++) {
            block *b = &r->blocks[i];
            if (r->recompute) /* views of the buffers just freed */
                b->c1.conv = b->c2.conv = b->sc.conv = b->a1 = NULL;
            free_conv_bn(r, &b->c1);
            free_conv_bn(r, &b->c2);
            free_conv_bn(r, &b->sc);
            be->free(be, b->a1);
            be->free(be, b->out);
        }
        free_conv_bn(r, &r->stem);
        be->free(be, r->stem_out);
    }
    if (!r->own_grads) r->grads = NULL; /* the caller's (sdp_resnet_use_grads) */
    float *bufs[] = {r->params, r->grads,  r->gscratch, r->conv_scratch, r->input,
                     r->tmp,    r->pooled, r->probs,    r->losses,       r->g,
                     r->s,      r->t1,     r->t2,       r->dpooled};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->free(be, bufs[i]);
    be->free(be, r->labels);
    for (int i = 0; i < r->nplans; i++) sdp_conv_plan_free(be, r->plans[i].impl);
    free(r->plans);
    free(r->blocks);
    free(r->goff);
    sdp_layout_free(&r->layout);
    sdp_backend_destroy(r->own_be);
    free(r);
}

const sdp_layout *sdp_resnet_layout(const sdp_resnet *r) {
    return &r->layout;
}

float *sdp_resnet_params(sdp_resnet *r) {
    return r->params;
}

float *sdp_resnet_grads(sdp_resnet *r) {
    return r->own_grads ? r->grads : NULL;
}

double sdp_resnet_train_flops_per_image(const sdp_resnet *r) {
    return 3.0 * 2.0 * r->flops;
}

void sdp_resnet_use_grads(sdp_resnet *r, float *grads, const long *grad_offset,
                          const sdp_grad_slices *slices) {
    SDP_ASSERT(r->mode != SDP_MODEL_INFER);
    if (r->own_grads) r->be->free(r->be, r->grads);
    r->own_grads = false;
    r->grads = grads;
    r->slices = slices;
    const sdp_layout *L = &r->layout;
    for (int i = 0; i < L->nparams; i++) {
        const long g = grad_offset[i];
        r->goff[i] = L->params[i].buffer ? -1 : g; /* buffers never get gradients */
        if (L->params[i].buffer) continue;
        SDP_ASSERT(g >= 0 || g == -1 || g == SDP_GRAD_SLICED);
        SDP_ASSERT(g != SDP_GRAD_SLICED || (slices && L->params[i].numel <= r->gscratch_floats));
    }
    /* Nothing below the lowest block with a gradient needs the backward pass. */
    r->backward_floor = sdp_layout_backward_floor(L, r->goff);
}
