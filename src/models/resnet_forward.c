/* The forward pass, whole or in stages (stem, one block, head: block-streamed evaluation), and a
 * block's recomputation for the backward. */
#include "resnet_internal.h"

#include "sdp/check.h"

/* ---- forward ------------------------------------------------------------------------------ */

/* u->conv = conv(x) */
static void conv_fwd(sdp_resnet *r, conv_bn *u, const float *x) {
    const sdp_backend *be = r->be;
    if (u->plan)
        sdp_conv2d_fwd(be, u->plan, u->conv, x, resnet_param(r, u->t.w), NULL, r->conv_scratch);
    else /* conv2 of a block that keeps no inner channel */
        be->zero(be, u->conv, resnet_act_size(r, u->C, u->size) * sizeof(float));
}

/* y = bn(u->conv) on the batch's statistics, saved in u->mean and u->rstd, and the running
 * statistics updated when `update` (not when recomputing: they move once per forward). */
static void bn_fwd_train(sdp_resnet *r, conv_bn *u, float *y, int B, bool update) {
    const int bn = u->t.bn;
    sdp_batchnorm_fwd_train(r->be, y, u->mean, u->rstd, update ? resnet_param(r, bn + 2) : NULL,
                            update ? resnet_param(r, bn + 3) : NULL, u->conv, resnet_param(r, bn),
                            resnet_param(r, bn + 1), B, u->C, u->size, u->size);
}

/* y = bn(conv(x)); the convolution's output stays in u->conv. */
static void conv_bn_fwd(sdp_resnet *r, conv_bn *u, const float *x, float *y, int B, bool training) {
    const sdp_backend *be = r->be;
    conv_fwd(r, u, x);
    const int bn = u->t.bn;
    if (training)
        bn_fwd_train(r, u, y, B, true);
    else
        sdp_batchnorm_fwd_eval(be, y, u->conv, resnet_param(r, bn + 2), resnet_param(r, bn + 3),
                               resnet_param(r, bn), resnet_param(r, bn + 1), B, u->C, u->size,
                               u->size);
}

static void block_fwd(sdp_resnet *r, block *b, const float *x, int B, bool training) {
    const sdp_backend *be = r->be;
    const sdp_resnet_block_arch *a = &b->k.arch;
    const size_t n = (size_t)B * a->cout * a->out_size * a->out_size;
    if (b->k.mid > 0) {
        conv_bn_fwd(r, &b->c1, x, b->a1, B, training);
        sdp_relu_fwd(be, b->a1, b->a1, (size_t)B * b->k.mid * a->out_size * a->out_size);
    }
    conv_bn_fwd(r, &b->c2, b->a1, r->tmp, B, training);
    const float *shortcut = x;
    if (a->downsample) {
        conv_bn_fwd(r, &b->sc, x, b->out, B, training);
        shortcut = b->out;
    }
    sdp_residual_fwd(be, b->out, shortcut, r->tmp, b->k.scale, n);
    sdp_relu_fwd(be, b->out, b->out, n);
    r->acts_block = (int)(b - r->blocks);
}

void resnet_block_recompute(sdp_resnet *r, block *b, const float *x, int B) {
    const sdp_resnet_block_arch *a = &b->k.arch;
    if (b->k.mid > 0) {
        conv_fwd(r, &b->c1, x);
        bn_fwd_train(r, &b->c1, b->a1, B, false);
        sdp_relu_fwd(r->be, b->a1, b->a1, (size_t)B * b->k.mid * a->out_size * a->out_size);
    }
    conv_fwd(r, &b->c2, b->a1);
    if (a->downsample) conv_fwd(r, &b->sc, x);
    r->acts_block = (int)(b - r->blocks);
}

static const float *top_activation(const sdp_resnet *r) {
    return r->nblocks ? r->blocks[r->nblocks - 1].out : r->stem_out;
}

static void check_batch(const sdp_resnet *r, int B) {
    SDP_CHECK(B >= 1 && B <= r->B,
              "resnet: a batch of %d images does not fit the model, built for at most %d", B, r->B);
}

/* The images through the stem convolution into r->stem_out. */
static void stem_fwd(sdp_resnet *r, const float *images, int B, bool training) {
    const sdp_resnet_config *c = &r->cfg;
    const sdp_backend *be = r->be;
    const int S = c->image_size;
    check_batch(r, B);
    be->upload(be, r->input, images, (size_t)B * c->in_channels * S * S * sizeof(float));
    conv_bn_fwd(r, &r->stem, r->input, r->stem_out, B, training);
    sdp_relu_fwd(be, r->stem_out, r->stem_out, (size_t)B * c->width * S * S);
}

/* Pooling, the classifier and the loss over the last block's output top. */
static void head_fwd(sdp_resnet *r, const float *top, const int *labels, int B, bool training,
                     sdp_metrics *out) {
    const sdp_backend *be = r->be;
    const int K = r->cfg.classes, C = resnet_last_channels(r);
    sdp_global_avgpool_fwd(be, r->pooled, top, B, C, resnet_last_size(r), resnet_last_size(r));
    sdp_linear_fwd(be, r->probs, r->pooled, resnet_param(r, r->fc_w), resnet_param(r, r->fc_b), B,
                   C, K);
    r->last_B = B;
    r->has_loss = false;
    r->has_logits = !labels;
    *out = (sdp_metrics){0};
    if (!labels) return;
    for (int i = 0; i < B; i++) {
        SDP_CHECK(labels[i] < K,
                  "label %d is outside the model's %d classes: the data does not "
                  "match the model (check the dataset and --classes)",
                  labels[i], K);
        out->count += labels[i] >= 0;
    }
    be->upload(be, r->labels, labels, (size_t)B * sizeof(int));
    out->loss = sdp_softmax_xent_fwd(be, r->losses, r->probs, r->probs, r->labels, B, K, K);
    /* On the probabilities, as before the backend table: their argmax is the logits' but for
     * ties that rounding creates, which the first maximum wins. */
    out->correct = sdp_count_correct(be, r->probs, r->labels, B, K, K);
    r->has_loss = training;
}

void sdp_resnet_forward(sdp_resnet *r, const float *images, const int *labels, int B, bool training,
                        sdp_metrics *out) {
    stem_fwd(r, images, B, training);
    for (int i = 0; i < r->nblocks; i++)
        block_fwd(r, &r->blocks[i], i ? r->blocks[i - 1].out : r->stem_out, B, training);
    head_fwd(r, top_activation(r), labels, B, training, out);
}

/* ---- the forward in stages (block-streamed evaluation) ------------------------------------- */

size_t sdp_resnet_stream_floats(const sdp_resnet *r) {
    const sdp_resnet_config *c = &r->cfg;
    size_t n = resnet_act_size(r, c->width, c->image_size);
    for (int b = 0; b < sdp_resnet_nblocks(c); b++) {
        const sdp_resnet_block_arch a = sdp_resnet_block(c, b);
        const size_t out = resnet_act_size(r, a.cout, a.out_size);
        if (out > n) n = out;
    }
    return n;
}

void sdp_resnet_forward_stem(sdp_resnet *r, const float *images, int B, bool training, float *x) {
    stem_fwd(r, images, B, training);
    sdp_copy_rows(r->be, x, 0, r->stem_out, 0, 1,
                  (size_t)B * r->cfg.width * r->cfg.image_size * r->cfg.image_size);
}

void sdp_resnet_forward_block(sdp_resnet *r, int i, int B, bool training, float *x) {
    SDP_ASSERT(i >= 0 && i < r->nblocks);
    check_batch(r, B);
    block *b = &r->blocks[i];
    block_fwd(r, b, x, B, training);
    const sdp_resnet_block_arch *a = &b->k.arch;
    sdp_copy_rows(r->be, x, 0, b->out, 0, 1, (size_t)B * a->cout * a->out_size * a->out_size);
}

void sdp_resnet_forward_head(sdp_resnet *r, const float *x, const int *labels, int B, bool training,
                             sdp_metrics *out) {
    check_batch(r, B);
    head_fwd(r, x, labels, B, training, out);
}

const float *sdp_resnet_logits(const sdp_resnet *r, int i) {
    SDP_ASSERT(r->has_logits && i >= 0 && i < r->last_B);
    return r->probs + (size_t)i * r->cfg.classes;
}
