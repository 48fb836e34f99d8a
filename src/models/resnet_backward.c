/* The backward pass: parameter gradients into the caller's buffer (or, for sliced tensors,
 * through gradient scratch into the owned slices), block by block from the head down. */
#include "resnet_internal.h"

#include "sdp/check.h"

static void zero(const sdp_resnet *r, float *x, size_t n) {
    r->be->zero(r->be, x, n * sizeof(float));
}

/* Adds the owned slices of a whole gradient g of tensor p into the caller's buffer. The tensor
 * is seen as [shape[0], numel / shape[0]]: along axis 0 a slice is rows, along axis 1 columns. */
static void add_slices(const sdp_resnet *r, const sdp_grad_slices *s, const float *g,
                       const sdp_param *p) {
    const size_t rows = (size_t)p->shape[0], cols = p->numel / rows;
    for (int i = 0; i < s->n; i++) {
        const size_t start = (size_t)s->start[i], len = (size_t)s->len[i], ld = (size_t)s->ld[i];
        float *dst = r->grads + s->dst[i];
        if (s->axis == 0)
            sdp_add_rows(r->be, dst, ld, g + start * cols, cols, len, cols);
        else
            sdp_add_rows(r->be, dst, ld, g + start, cols, rows, len);
    }
}

/* Where tensor t's gradient accumulates: nowhere (NULL), the caller's buffer, or, when sliced, a
 * zeroed region of gradient scratch (from float `at` on) that grad_end adds into the owned
 * slices. */
static float *grad_begin(const sdp_resnet *r, int t, size_t at) {
    const long g = r->goff[t];
    if (g == -1) return NULL;
    if (g != SDP_GRAD_SLICED) return r->grads + g;
    SDP_ASSERT(at + r->layout.params[t].numel <= r->gscratch_floats);
    zero(r, r->gscratch + at, r->layout.params[t].numel);
    return r->gscratch + at;
}

static void grad_end(const sdp_resnet *r, int t, size_t at) {
    if (r->goff[t] == SDP_GRAD_SLICED)
        add_slices(r, &r->slices[t], r->gscratch + at, &r->layout.params[t]);
}

/* Given dy = dL/d(bn output): the batch norm's parameter gradients, and dx += dL/dx through the
 * convolution (dx may be NULL). `work` (as large as the conv output) must not alias dy or dx. */
static void conv_bn_bwd(sdp_resnet *r, const conv_bn *u, const float *dy, const float *x, float *dx,
                        float *work, int B) {
    const sdp_backend *be = r->be;
    const int bn = u->t.bn, C = u->C;
    float *dgamma = grad_begin(r, bn, 0);
    float *dbeta = grad_begin(r, bn + 1, (size_t)C);
    float *dconv = u->plan ? work : NULL;
    if (dconv) zero(r, dconv, resnet_act_size(r, C, u->size));
    sdp_batchnorm_bwd(be, dconv, dgamma, dbeta, dy, u->conv, resnet_param(r, bn), u->mean, u->rstd,
                      B, C, u->size, u->size);
    grad_end(r, bn, 0);
    grad_end(r, bn + 1, (size_t)C);
    if (!u->plan) return;
    float *dw = grad_begin(r, u->t.w, 0);
    if (dx || dw)
        sdp_conv2d_bwd(be, u->plan, dx, dw, NULL, dconv, x, resnet_param(r, u->t.w),
                       r->conv_scratch);
    grad_end(r, u->t.w, 0);
}

/* On entry r->g holds dL/d(block output); on exit dL/d(block input). */
static void block_bwd(sdp_resnet *r, const block *b, const float *x, int B) {
    const sdp_backend *be = r->be;
    const sdp_resnet_block_arch *a = &b->k.arch;
    const size_t out_pixels = (size_t)a->out_size * a->out_size;
    const size_t n_out = (size_t)B * a->cout * out_pixels;
    zero(r, r->s, resnet_act_size(r, a->cout, a->out_size));
    sdp_relu_bwd(be, r->s, r->g, b->out, n_out); /* s: gradient of the sum */
    const float *d_branch = r->s;
    if (b->k.scale != 1.0f) { /* g is free now: it holds the scaled copy */
        zero(r, r->g, resnet_act_size(r, a->cout, a->out_size));
        sdp_residual_bwd(be, NULL, r->g, r->s, b->k.scale, n_out);
        d_branch = r->g;
    }
    if (b->k.mid > 0) {
        zero(r, r->t2, resnet_act_size(r, b->k.mid, a->out_size));
        conv_bn_bwd(r, &b->c2, d_branch, b->a1, r->t2, r->t1, B);
        zero(r, r->t1, resnet_act_size(r, b->k.mid, a->out_size));
        sdp_relu_bwd(be, r->t1, r->t2, b->a1, (size_t)B * b->k.mid * out_pixels);
        zero(r, r->g, resnet_act_size(r, a->cin, a->in_size));
        conv_bn_bwd(r, &b->c1, r->t1, x, r->g, r->t2, B);
    } else {
        conv_bn_bwd(r, &b->c2, d_branch, NULL, NULL, NULL, B);
        zero(r, r->g, resnet_act_size(r, a->cin, a->in_size));
    }
    if (a->downsample)
        conv_bn_bwd(r, &b->sc, r->s, x, r->g, r->t1, B);
    else
        sdp_residual_bwd(be, r->g, NULL, r->s, 1.0f, n_out);
}

static void head_bwd(sdp_resnet *r, float dloss, int B) {
    const sdp_backend *be = r->be;
    const int K = r->cfg.classes, C = resnet_last_channels(r), size = resnet_last_size(r);
    sdp_softmax_xent_bwd(be, r->probs, r->probs, r->labels, dloss, B, K, K);
    zero(r, r->dpooled, (size_t)r->B * C);
    const size_t fc_b_at = r->layout.params[r->fc_w].numel;
    float *dw = grad_begin(r, r->fc_w, 0), *db = grad_begin(r, r->fc_b, fc_b_at);
    sdp_linear_bwd(be, r->dpooled, dw, db, r->probs, r->pooled, resnet_param(r, r->fc_w), B, C, K);
    grad_end(r, r->fc_w, 0);
    grad_end(r, r->fc_b, fc_b_at);
    zero(r, r->g, resnet_act_size(r, C, size));
    sdp_global_avgpool_bwd(be, r->g, r->dpooled, B, C, size, size);
}

void sdp_resnet_backward(sdp_resnet *r, float dloss, void (*layer_done)(void *ctx, int block),
                         void *ctx) {
    SDP_CHECK(r->mode != SDP_MODEL_INFER,
              "resnet: backward on a model built for inference: build it in a training mode");
    SDP_CHECK(r->has_loss, "resnet: backward needs a training forward with labels just before it");
    SDP_ASSERT(r->grads || r->mode == SDP_MODEL_TRAIN_BARE);
    const int B = r->last_B, S = r->cfg.image_size;
    head_bwd(r, dloss, B);
    const int floor = r->backward_floor > 0 ? r->backward_floor : 0;
    for (int i = r->nblocks - 1; i >= floor; i--) {
        block *b = &r->blocks[i];
        const float *x = i ? r->blocks[i - 1].out : r->stem_out;
        /* after the forward, the shared buffers hold the last block's activations */
        if (r->recompute && r->acts_block != i) resnet_block_recompute(r, b, x, B);
        block_bwd(r, b, x, B);
        if (layer_done) layer_done(ctx, i);
    }
    if (r->backward_floor >= 0) {
        r->has_loss = false;
        return;
    }
    zero(r, r->s, resnet_act_size(r, r->cfg.width, S));
    sdp_relu_bwd(r->be, r->s, r->g, r->stem_out, (size_t)B * r->cfg.width * S * S);
    conv_bn_bwd(r, &r->stem, r->s, r->input, NULL, r->t1, B);
    r->has_loss = false; /* probs now hold gradients */
}
