/* The parameter layout of a (sub)network: every tensor's name, shape, group and initialisation,
 * as sdp_resnet_describe gives it and sdp_resnet_create_on lays out its parameters. */
#include "resnet_internal.h"

#include "models/describe.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

void resnet_describe(sdp_layout *L, const sdp_resnet_config *c, const kept_block *kb, int n,
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
    resnet_describe(L, &c, kb, resnet_kept_blocks(&c, spec, kb), &t);
    free(kb);
}
