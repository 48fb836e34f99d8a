/* What the files of sdp_resnet share (resnet.c, resnet_arch.c, resnet_describe.c,
 * resnet_forward.c, resnet_backward.c): the blocks a (sub)network keeps, where their tensors lie in
 * the layout, the model's buffers, and the few functions one file defines for another. Not part of
 * the public interface (include/sdp/resnet.h). Calls run one way: resnet.c -> resnet_describe.c
 * -> resnet_arch.c; resnet_backward.c -> resnet_forward.c -> resnet_arch.c.
 *
 * Every convolution is followed by a batch norm, so the two are one unit here (conv_bn): the conv
 * writes its output (the batch norm's input, kept for the backward) and the batch norm writes
 * where the caller says. A block is
 *     out = relu(shortcut(x) + scale * bn2(conv2(relu(bn1(conv1(x))))))
 * with shortcut = identity, or bn(conv1x1(x)) when the block downsamples.
 *
 * Convolutions run on the whole batch capacity B the plans were made for (oneDNN primitives and
 * cuDNN algorithm choices are shape-specific); a smaller batch only leaves the rows past it unused.
 * Backward keeps those rows' gradients zero, so they add nothing to the weight gradients.
 *
 * Every buffer lives in the backend's memory and every kernel runs through its table
 * (sdp/backend.h), so the same code runs on the CPU and on CUDA; host arrays cross only through
 * upload and download. */
#ifndef SDP_RESNET_INTERNAL_H
#define SDP_RESNET_INTERNAL_H

#include "sdp/resnet.h"

/* ---- what a (sub)network keeps (resnet_arch.c) ------------------------------------------- */

typedef struct {
    sdp_resnet_block_arch arch;
    int global; /* index in the full model */
    int mid;    /* inner channels kept */
    float scale;
} kept_block;

/* The blocks a spec keeps (all, at full width and scale 1, when spec is NULL); returns how many.
 * Downsampling blocks are always whole and unscaled: SDP shares them. */
int resnet_kept_blocks(const sdp_resnet_config *c, const sdp_subnet_spec *spec, kept_block *out);

/* ---- parameter description (resnet_describe.c) ------------------------------------------- */

/* Indices in the layout of one convolution's weight and its batch norm's four tensors (weight,
 * bias, running_mean, running_var, consecutive); -1 when absent. */
typedef struct {
    int w, bn;
} conv_bn_tensors;

typedef struct {
    conv_bn_tensors c1, c2, sc;
} block_tensors;

typedef struct {
    conv_bn_tensors stem;
    block_tensors *blocks;
    int fc_w, fc_b;
} net_tensors;

/* The layout of the n kept blocks kb, for sdp_resnet_describe and for sdp_resnet_create_on, which
 * also needs each tensor's index (t->blocks, when not NULL, gets one entry per kept block). */
void resnet_describe(sdp_layout *L, const sdp_resnet_config *c, const kept_block *kb, int n,
                     net_tensors *t);

/* ---- the model (resnet.c) ---------------------------------------------------------------- */

/* A convolution and its batch norm, with what the forward keeps for the backward. */
typedef struct {
    conv_bn_tensors t;
    const void *plan;   /* the backend's; NULL: a convolution over no input channels (zero) */
    int C, size;        /* output channels and spatial size */
    float *conv;        /* the convolution's output [B, C, size, size] */
    float *mean, *rstd; /* batch statistics [C] */
} conv_bn;

typedef struct {
    kept_block k;
    conv_bn c1, c2, sc; /* c1 absent when mid = 0; sc absent for an identity shortcut */
    float *a1;          /* relu(bn1(conv1(x))) [B, mid, out, out] */
    float *out;         /* [B, cout, out, out] */
} block;

/* A backend's convolution plan and the shape it was made for. */
typedef struct {
    sdp_conv_shape shape;
    void *impl;
} conv_plan;

struct sdp_resnet {
    sdp_resnet_config cfg;
    sdp_model_mode mode;
    sdp_layout layout;
    const sdp_backend *be;
    sdp_backend *own_be; /* the CPU backend sdp_resnet_create made, or NULL (the caller's) */
    sdp_conv_algo algo;  /* the CPU convolution implementation */
    int B;               /* capacity */
    float *params, *grads;
    bool own_grads;
    long *goff;                    /* per tensor: gradient offset, -1 or SDP_GRAD_SLICED */
    const sdp_grad_slices *slices; /* per tensor, for SDP_GRAD_SLICED */
    float *gscratch;               /* whole gradient of one sliced tensor */
    size_t gscratch_floats;
    conv_plan *plans; /* one per distinct convolution shape */
    int nplans, cap_plans;
    float *conv_scratch;
    size_t conv_scratch_bytes;
    double flops; /* forward multiply-adds per image */

    float *input; /* [B, in, S, S] */
    int *labels;
    conv_bn stem;
    float *stem_out;
    int nblocks;
    block *blocks;
    int fc_w, fc_b;
    float *tmp;    /* a block's bn2 output */
    float *pooled; /* [B, C] */
    float *probs;  /* [B, classes]: logits, then probabilities, then their gradient */
    float *losses;
    /* backward work buffers, each as large as the largest activation */
    float *g, *s, *t1, *t2, *dpooled;
    size_t max_act;
    /* SDP_MODEL_INFER: a forward-only pass needs one block's activations at a time, so every
     * block's buffers are views of these (see share_infer_acts), sized for the largest use */
    float *pool_conv, *pool_mean, *pool_rstd, *pool_a1, *pool_out[2];
    size_t max_conv, max_channels, max_a1, max_out;
    /* Recomputation (cfg.recompute in a training mode): every block's convolution outputs and a1
     * are views of these (share_recompute_acts), pool_a1 for a1, sized for the largest block; they
     * hold the activations of block acts_block (-1: none). Each block keeps its output (the next
     * block's input) and its batch norms' statistics. */
    bool recompute;
    float *rc_c1, *rc_c2, *rc_sc;
    size_t max_c2, max_sc; /* conv1's outputs are as large as a1 */
    int acts_block;
    int last_B;
    bool has_loss;      /* probs hold the probabilities of a training forward with labels */
    int backward_floor; /* lowest block the backward reaches; -1: down to the stem */
    bool has_logits;    /* probs hold the logits of a forward without labels */
};

static inline float *resnet_param(const sdp_resnet *r, int t) {
    return r->params + r->layout.params[t].offset;
}

static inline size_t resnet_act_size(const sdp_resnet *r, int C, int size) {
    return (size_t)r->B * C * size * size;
}

static inline int resnet_last_channels(const sdp_resnet *r) {
    return r->cfg.width << (sdp_resnet_stages(&r->cfg) - 1);
}

static inline int resnet_last_size(const sdp_resnet *r) {
    return sdp_resnet_block(&r->cfg, sdp_resnet_nblocks(&r->cfg) - 1).out_size;
}

/* ---- defined in resnet_forward.c --------------------------------------------------------- */

/* What block b's backward reads, recomputed from its kept input x (recomputation): conv1, bn1 and
 * its ReLU into a1, and the outputs of conv2 and of the shortcut's convolution, by the forward's
 * kernels on the same values, so bitwise what the forward wrote. bn1 runs on the batch's
 * statistics again, which the same kernel on the same values makes the forward's, without moving
 * the running statistics a second time; bn2's and the shortcut's statistics are the ones the
 * forward saved. Their outputs, the residual sum and its ReLU (the block's kept output) are not
 * read by the backward, and are not recomputed. */
void resnet_block_recompute(sdp_resnet *r, block *b, const float *x, int B);

#endif
