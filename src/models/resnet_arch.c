/* A CIFAR ResNet's architecture: which depths and widths make one, its stages and blocks, and
 * which blocks (at what width and scale) a subnetwork keeps. */
#include "resnet_internal.h"

#include "sdp/check.h"

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
    return four_stages(depth) || (depth >= 8 && depth <= SDP_RESNET_MAX_DEPTH && depth % 6 == 2);
}

int sdp_resnet_max_width(int depth) {
    return 65536 >> ((four_stages(depth) ? 4 : 3) - 1);
}

void sdp_resnet_config_finish(sdp_resnet_config *c) {
    SDP_CHECK(sdp_resnet_depth_ok(c->depth),
              "--depth %d is not a CIFAR ResNet depth: use 18 or 34 (four stages) or 6n+2 such as "
              "20, 32, 44, 56 or 110 (three stages), at most %d",
              c->depth, SDP_RESNET_MAX_DEPTH);
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
              "resnet: --channels %d makes the last stage %ld channels wide: use at most "
              "--channels %d",
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

int resnet_kept_blocks(const sdp_resnet_config *c, const sdp_subnet_spec *spec, kept_block *out) {
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
