/* CIFAR ResNets (sdp/resnet.h): description, construction, forward and backward.
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
#include "sdp/resnet.h"

#include "models/describe.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architecture ------------------------------------------------------------------------- */

static bool four_stages(int depth) {
    return depth == 18 || depth == 34;
}

int sdp_resnet_stages(const sdp_resnet_config *c) {
    return four_stages(c->depth) ? 4 : 3;
}

static int blocks_in_stage(const sdp_resnet_config *c, int s) {
    static const int RESNET34[4] = {3, 4, 6, 3};
    if (c->depth == 18) return 2;
    if (c->depth == 34) return RESNET34[s];
    return (c->depth - 2) / 6;
}

bool sdp_resnet_depth_ok(int depth) {
    return four_stages(depth) || (depth >= 8 && depth % 6 == 2);
}

int sdp_resnet_max_width(int depth) {
    return 65536 >> ((four_stages(depth) ? 4 : 3) - 1);
}

void sdp_resnet_config_finish(sdp_resnet_config *c) {
    SDP_CHECK(sdp_resnet_depth_ok(c->depth),
              "--depth %d is not a CIFAR ResNet depth: use 18 or 34 (four stages) or 6n+2 such as "
              "20, 32, 44, 56 or 110 (three stages)",
              c->depth);
    SDP_CHECK(c->width >= 0, "--width %d is negative: use a positive width, or 0 for the default",
              c->width);
    if (c->width == 0) c->width = four_stages(c->depth) ? 64 : 16;
    SDP_CHECK(c->in_channels >= 1,
              "resnet: %d input channels: the data must give at least 1 (1 for Fashion-MNIST, 3 "
              "for CIFAR)",
              c->in_channels);
    SDP_CHECK(c->classes >= 2,
              "resnet: %d classes: a classifier needs at least 2 (10 for CIFAR-10)", c->classes);
    const int stages = sdp_resnet_stages(c), min = 1 << (stages - 1);
    SDP_CHECK(c->image_size >= min,
              "resnet: %dx%d images are too small for %d stages that each halve the image: use "
              "images of at least %dx%d, or a 6n+2 depth (three stages)",
              c->image_size, c->image_size, stages, min, min);
    const long widest = (long)c->width << (stages - 1);
    SDP_CHECK(c->width <= sdp_resnet_max_width(c->depth),
              "resnet: --width %d makes the last stage %ld channels wide: use a "
              "width of at most %d",
              c->width, widest, sdp_resnet_max_width(c->depth));
}

int sdp_resnet_nblocks(const sdp_resnet_config *c) {
    int n = 0;
    for (int s = 0; s < sdp_resnet_stages(c); s++) n += blocks_in_stage(c, s);
    return n;
}

sdp_resnet_block_arch sdp_resnet_block(const sdp_resnet_config *c, int b) {
    SDP_ASSERT(b >= 0 && b < sdp_resnet_nblocks(c));
    int size = c->image_size, cin = c->width;
    for (int s = 0;; s++) {
        const int cout = c->width << s;
        for (int i = 0; i < blocks_in_stage(c, s); i++, b--) {
            const int stride = s > 0 && i == 0 ? 2 : 1;
            const int out_size = (size + stride - 1) / stride;
            if (b == 0)
                return (sdp_resnet_block_arch){s + 1,  i,    cin,      cout,
                                               stride, size, out_size, stride != 1 || cin != cout};
            size = out_size;
            cin = cout;
        }
    }
}

/* ---- what a (sub)network keeps -------------------------------------------------------------- */

typedef struct {
    sdp_resnet_block_arch arch;
    int global; /* index in the full model */
    int mid;    /* inner channels kept */
    float scale;
} kept_block;

/* The blocks a spec keeps (all, at full width and scale 1, when spec is NULL); returns how many.
 * Downsampling blocks are always whole and unscaled: SDP shares them. */
static int kept_blocks(const sdp_resnet_config *c, const sdp_subnet_spec *spec, kept_block *out) {
    const int nb = sdp_resnet_nblocks(c);
    SDP_ASSERT(!spec || spec->nblocks == nb);
    int n = 0;
    for (int b = 0; b < nb; b++) {
        sdp_resnet_block_arch a = sdp_resnet_block(c, b);
        kept_block k = {a, b, a.cout, 1.0f};
        if (spec && !a.downsample) {
            if (!spec->keep[b]) continue;
            k.mid = spec->kept[b][0];
            k.scale = spec->scale[b];
        }
        SDP_ASSERT(!spec || spec->keep[b]);
        SDP_ASSERT(k.mid >= 0 && k.mid <= a.cout);
        out[n++] = k;
    }
    return n;
}

/* ---- parameter description ---------------------------------------------------------------- */

/* Indices in the layout of one convolution's weight and its batch norm's four tensors (weight,
 * bias, running_mean, running_var, consecutive); -1 when absent. */
typedef struct {
    int w, bn;
} conv_bn_tensors;

typedef struct {
    conv_bn_tensors c1, c2, sc;
} block_tensors;

typedef struct {
    sdp_layout *L;
    int block;
    char prefix[32]; /* "layer3.1." */
} adder;

/* A block's one group, as a tensor names it (tensor_desc.group, counted from 1): its inner
 * channels, conv1's outputs and conv2's inputs. */
enum { GROUP_CH = 1 };

/* Adds the tensor, its name after the adder's prefix, and returns its index. */
static int add(adder *a, tensor_desc d) {
    char name[SDP_NAME_MAX];
    snprintf(name, sizeof name, "%s%s", a->prefix, d.name);
    d.name = name;
    return tensor_desc_add(a->L, a->block, &d);
}

/* A convolution's weight, d.shape = {out, in, k, k}; ndim, decay and std are set here. Kaiming
 * normal: std sqrt(2 / fan_in), fan_in from the FULL model's input channels, so that a compact
 * model initialises as a slice of the full one. */
static int add_conv(adder *a, tensor_desc d, int full_ic) {
    const int64_t k = d.shape[2];
    d.ndim = 4;
    d.decay = true;
    d.std = sqrtf(2.0f / (float)(full_ic * k * k));
    return add(a, d);
}

static int add_bn(adder *a, const char *name, int C, int group) {
    char s[48];
#define SUFFIX(x) (snprintf(s, sizeof s, "%s.%s", name, x), s)
    const int w = add(a, (tensor_desc){.name = SUFFIX("weight"),
                                       .ndim = 1,
                                       .shape = {C},
                                       .group = group,
                                       .init = SDP_INIT_ONES});
    add(a, (tensor_desc){.name = SUFFIX("bias"),
                         .ndim = 1,
                         .shape = {C},
                         .group = group,
                         .init = SDP_INIT_ZEROS});
    const int mean = add(a, (tensor_desc){.name = SUFFIX("running_mean"),
                                          .ndim = 1,
                                          .shape = {C},
                                          .group = group,
                                          .init = SDP_INIT_ZEROS});
    const int var = add(a, (tensor_desc){.name = SUFFIX("running_var"),
                                         .ndim = 1,
                                         .shape = {C},
                                         .group = group,
                                         .init = SDP_INIT_ONES});
#undef SUFFIX
    a->L->params[mean].buffer = a->L->params[var].buffer = true;
    return w;
}

static block_tensors describe_block(adder *a, const kept_block *k) {
    const sdp_resnet_block_arch *r = &k->arch;
    const int group = r->downsample ? 0 : GROUP_CH;
    block_tensors t = {{-1, -1}, {-1, -1}, {-1, -1}};
    t.c1.w = add_conv(
        a, (tensor_desc){.name = "conv1.weight", .shape = {k->mid, r->cin, 3, 3}, .group = group},
        r->cin);
    t.c1.bn = add_bn(a, "bn1", k->mid, group);
    t.c2.w = add_conv(
        a,
        (tensor_desc){
            .name = "conv2.weight", .shape = {r->cout, k->mid, 3, 3}, .group = group, .axis = 1},
        r->cout);
    t.c2.bn = add_bn(a, "bn2", r->cout, 0);
    if (r->downsample) {
        t.sc.w = add_conv(
            a, (tensor_desc){.name = "shortcut.0.weight", .shape = {r->cout, r->cin, 1, 1}},
            r->cin);
        t.sc.bn = add_bn(a, "shortcut.1", r->cout, 0);
    }
    return t;
}

typedef struct {
    conv_bn_tensors stem;
    block_tensors *blocks;
    int fc_w, fc_b;
} net_tensors;

static void describe(sdp_layout *L, const sdp_resnet_config *c, const kept_block *kb, int n,
                     net_tensors *t) {
    sdp_layout_init(L, n);
    adder a = {L, -1, ""};
    t->stem.w = add_conv(
        &a, (tensor_desc){.name = "conv1.weight", .shape = {c->width, c->in_channels, 3, 3}},
        c->in_channels);
    t->stem.bn = add_bn(&a, "bn1", c->width, 0);
    for (int i = 0; i < n; i++) {
        const kept_block *k = &kb[i];
        sdp_block *b = &L->blocks[i];
        snprintf(b->name, sizeof b->name, "layer%d.%d", k->arch.stage, k->arch.index);
        b->global_index = k->global;
        b->droppable = !k->arch.downsample;
        b->ngroups = k->arch.downsample ? 0 : 1;
        if (b->ngroups) b->groups[GROUP_CH - 1] = (sdp_group){"ch", k->mid, 1};
        a.block = i;
        snprintf(a.prefix, sizeof a.prefix, "layer%d.%d.", k->arch.stage, k->arch.index);
        block_tensors bt = describe_block(&a, k);
        if (t->blocks) t->blocks[i] = bt;
    }
    a.block = -1;
    a.prefix[0] = 0;
    const int C = c->width << (sdp_resnet_stages(c) - 1);
    t->fc_w = add(&a, (tensor_desc){.name = "fc.weight",
                                    .ndim = 2,
                                    .shape = {c->classes, C},
                                    .decay = true,
                                    .std = sqrtf(1.0f / (float)C)});
    t->fc_b = add(
        &a,
        (tensor_desc){.name = "fc.bias", .ndim = 1, .shape = {c->classes}, .init = SDP_INIT_ZEROS});
}

void sdp_resnet_describe(sdp_layout *L, const sdp_resnet_config *cfg, const sdp_subnet_spec *spec) {
    sdp_resnet_config c = *cfg;
    sdp_resnet_config_finish(&c);
    kept_block *kb = sdp_xcalloc((size_t)sdp_resnet_nblocks(&c), sizeof *kb, "the kept blocks");
    net_tensors t = {0};
    describe(L, &c, kb, kept_blocks(&c, spec, kb), &t);
    free(kb);
}

/* ---- the model ---------------------------------------------------------------------------- */

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

static float *P(const sdp_resnet *r, int t) {
    return r->params + r->layout.params[t].offset;
}

static float *acts(sdp_resnet *r, size_t n) {
    return r->be->alloc(r->be, SDP_MEM_ACTS, n * sizeof(float));
}

static size_t act_size(const sdp_resnet *r, int C, int size) {
    return (size_t)r->B * C * size * size;
}

static void note_act(sdp_resnet *r, int C, int size) {
    if (act_size(r, C, size) > r->max_act) r->max_act = act_size(r, C, size);
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
        if (act_size(r, oc, u.size) > r->max_conv) r->max_conv = act_size(r, oc, u.size);
        if ((size_t)oc > r->max_channels) r->max_channels = (size_t)oc;
        return u;
    }
    if (!shared)
        u.conv = acts(r, act_size(r, oc, u.size));
    else if (act_size(r, oc, u.size) > *shared)
        *shared = act_size(r, oc, u.size);
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
        if (act_size(r, k->mid, a->out_size) > r->max_a1)
            r->max_a1 = act_size(r, k->mid, a->out_size);
        if (act_size(r, a->cout, a->out_size) > r->max_out)
            r->max_out = act_size(r, a->cout, a->out_size);
        return;
    }
    /* recomputation: a1 is a view of pool_a1, as large as conv1's output (share_recompute_acts) */
    b->a1 = k->mid && !rc ? acts(r, act_size(r, k->mid, a->out_size)) : NULL;
    b->out = acts(r, act_size(r, a->cout, a->out_size));
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
    const size_t stem = act_size(r, c->width, c->image_size);
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
 * the backward recomputes them block by block (block_recompute). Only the block outputs (each the
 * next block's input), the stem's and the batch statistics stay for every block. */
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
    r->nblocks = kept_blocks(c, spec, kb);
    describe(&r->layout, c, kb, r->nblocks, &t);
    r->params = be->alloc(be, SDP_MEM_PARAMS, r->layout.numel * sizeof(float));
    init_grads(r);

    const int S = c->image_size, C = c->width << (sdp_resnet_stages(c) - 1), K = c->classes;
    r->input = acts(r, act_size(r, c->in_channels, S));
    r->labels = be->alloc(be, SDP_MEM_ACTS, (size_t)B * sizeof(int));
    r->stem = make_conv_bn(r, t.stem, c->in_channels, S, c->width, 3, 1, NULL);
    if (mode != SDP_MODEL_INFER) r->stem_out = acts(r, act_size(r, c->width, S));
    for (int i = 0; i < r->nblocks; i++) make_block(r, &r->blocks[i], &kb[i], &t.blocks[i]);
    if (mode == SDP_MODEL_INFER) share_infer_acts(r);
    if (r->recompute) share_recompute_acts(r);
    r->fc_w = t.fc_w;
    r->fc_b = t.fc_b;
    r->flops += (double)C * K;
    size_t widest_out = 0;
    for (int i = 0; i < r->nblocks; i++) {
        size_t n = act_size(r, kb[i].arch.cout, kb[i].arch.out_size);
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

/* ---- forward ------------------------------------------------------------------------------ */

/* u->conv = conv(x) */
static void conv_fwd(sdp_resnet *r, conv_bn *u, const float *x) {
    const sdp_backend *be = r->be;
    if (u->plan)
        sdp_conv2d_fwd(be, u->plan, u->conv, x, P(r, u->t.w), NULL, r->conv_scratch);
    else /* conv2 of a block that keeps no inner channel */
        be->zero(be, u->conv, act_size(r, u->C, u->size) * sizeof(float));
}

/* y = bn(u->conv) on the batch's statistics, saved in u->mean and u->rstd, and the running
 * statistics updated when `update` (not when recomputing: they move once per forward). */
static void bn_fwd_train(sdp_resnet *r, conv_bn *u, float *y, int B, bool update) {
    const int bn = u->t.bn;
    sdp_batchnorm_fwd_train(r->be, y, u->mean, u->rstd, update ? P(r, bn + 2) : NULL,
                            update ? P(r, bn + 3) : NULL, u->conv, P(r, bn), P(r, bn + 1), B, u->C,
                            u->size, u->size);
}

/* y = bn(conv(x)); the convolution's output stays in u->conv. */
static void conv_bn_fwd(sdp_resnet *r, conv_bn *u, const float *x, float *y, int B, bool training) {
    const sdp_backend *be = r->be;
    conv_fwd(r, u, x);
    const int bn = u->t.bn;
    if (training)
        bn_fwd_train(r, u, y, B, true);
    else
        sdp_batchnorm_fwd_eval(be, y, u->conv, P(r, bn + 2), P(r, bn + 3), P(r, bn), P(r, bn + 1),
                               B, u->C, u->size, u->size);
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

/* What block b's backward reads, recomputed from its kept input x (recomputation): conv1, bn1 and
 * its ReLU into a1, and the outputs of conv2 and of the shortcut's convolution, by the forward's
 * kernels on the same values, so bitwise what the forward wrote. bn1 runs on the batch's
 * statistics again, which the same kernel on the same values makes the forward's, without moving
 * the running statistics a second time; bn2's and the shortcut's statistics are the ones the
 * forward saved. Their outputs, the residual sum and its ReLU (the block's kept output) are not
 * read by the backward, and are not recomputed. */
static void block_recompute(sdp_resnet *r, block *b, const float *x, int B) {
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

static int last_channels(const sdp_resnet *r) {
    return r->cfg.width << (sdp_resnet_stages(&r->cfg) - 1);
}

static int last_size(const sdp_resnet *r) {
    return sdp_resnet_block(&r->cfg, sdp_resnet_nblocks(&r->cfg) - 1).out_size;
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
    const int K = r->cfg.classes, C = last_channels(r);
    sdp_global_avgpool_fwd(be, r->pooled, top, B, C, last_size(r), last_size(r));
    sdp_linear_fwd(be, r->probs, r->pooled, P(r, r->fc_w), P(r, r->fc_b), B, C, K);
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
    size_t n = act_size(r, c->width, c->image_size);
    for (int b = 0; b < sdp_resnet_nblocks(c); b++) {
        const sdp_resnet_block_arch a = sdp_resnet_block(c, b);
        const size_t out = act_size(r, a.cout, a.out_size);
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

/* ---- backward ----------------------------------------------------------------------------- */

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
    if (dconv) zero(r, dconv, act_size(r, C, u->size));
    sdp_batchnorm_bwd(be, dconv, dgamma, dbeta, dy, u->conv, P(r, bn), u->mean, u->rstd, B, C,
                      u->size, u->size);
    grad_end(r, bn, 0);
    grad_end(r, bn + 1, (size_t)C);
    if (!u->plan) return;
    float *dw = grad_begin(r, u->t.w, 0);
    if (dx || dw)
        sdp_conv2d_bwd(be, u->plan, dx, dw, NULL, dconv, x, P(r, u->t.w), r->conv_scratch);
    grad_end(r, u->t.w, 0);
}

/* On entry r->g holds dL/d(block output); on exit dL/d(block input). */
static void block_bwd(sdp_resnet *r, const block *b, const float *x, int B) {
    const sdp_backend *be = r->be;
    const sdp_resnet_block_arch *a = &b->k.arch;
    const size_t out_pixels = (size_t)a->out_size * a->out_size;
    const size_t n_out = (size_t)B * a->cout * out_pixels;
    zero(r, r->s, act_size(r, a->cout, a->out_size));
    sdp_relu_bwd(be, r->s, r->g, b->out, n_out); /* s: gradient of the sum */
    const float *d_branch = r->s;
    if (b->k.scale != 1.0f) { /* g is free now: it holds the scaled copy */
        zero(r, r->g, act_size(r, a->cout, a->out_size));
        sdp_residual_bwd(be, NULL, r->g, r->s, b->k.scale, n_out);
        d_branch = r->g;
    }
    if (b->k.mid > 0) {
        zero(r, r->t2, act_size(r, b->k.mid, a->out_size));
        conv_bn_bwd(r, &b->c2, d_branch, b->a1, r->t2, r->t1, B);
        zero(r, r->t1, act_size(r, b->k.mid, a->out_size));
        sdp_relu_bwd(be, r->t1, r->t2, b->a1, (size_t)B * b->k.mid * out_pixels);
        zero(r, r->g, act_size(r, a->cin, a->in_size));
        conv_bn_bwd(r, &b->c1, r->t1, x, r->g, r->t2, B);
    } else {
        conv_bn_bwd(r, &b->c2, d_branch, NULL, NULL, NULL, B);
        zero(r, r->g, act_size(r, a->cin, a->in_size));
    }
    if (a->downsample)
        conv_bn_bwd(r, &b->sc, r->s, x, r->g, r->t1, B);
    else
        sdp_residual_bwd(be, r->g, NULL, r->s, 1.0f, n_out);
}

static void head_bwd(sdp_resnet *r, float dloss, int B) {
    const sdp_backend *be = r->be;
    const int K = r->cfg.classes, C = last_channels(r), size = last_size(r);
    sdp_softmax_xent_bwd(be, r->probs, r->probs, r->labels, dloss, B, K, K);
    zero(r, r->dpooled, (size_t)r->B * C);
    const size_t fc_b_at = r->layout.params[r->fc_w].numel;
    float *dw = grad_begin(r, r->fc_w, 0), *db = grad_begin(r, r->fc_b, fc_b_at);
    sdp_linear_bwd(be, r->dpooled, dw, db, r->probs, r->pooled, P(r, r->fc_w), B, C, K);
    grad_end(r, r->fc_w, 0);
    grad_end(r, r->fc_b, fc_b_at);
    zero(r, r->g, act_size(r, C, size));
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
        if (r->recompute && r->acts_block != i) block_recompute(r, b, x, B);
        block_bwd(r, b, x, B);
        if (layer_done) layer_done(ctx, i);
    }
    if (r->backward_floor >= 0) {
        r->has_loss = false;
        return;
    }
    zero(r, r->s, act_size(r, r->cfg.width, S));
    sdp_relu_bwd(r->be, r->s, r->g, r->stem_out, (size_t)B * r->cfg.width * S * S);
    conv_bn_bwd(r, &r->stem, r->s, r->input, NULL, r->t1, B);
    r->has_loss = false; /* probs now hold gradients */
}
