/* The CIFAR ResNet behind the generic model interface (sdp/model.h): arch "resnet", images, on
 * the configuration's backend (CPU or CUDA). */
#include "sdp/check.h"
#include "sdp/model.h"
#include "sdp/resnet.h"

#include <stdlib.h>
#include <string.h>

/* oneDNN's primitives: docs/vision_kernels.md has the measurements against im2col + GEMM. */
static const sdp_conv_algo CONV_ALGO = SDP_CONV_DNNL;

static sdp_resnet *net(const sdp_model *m) {
    return m->impl;
}

static void destroy(sdp_model *m) {
    sdp_resnet_destroy(net(m));
    memset(m, 0, sizeof *m);
}

static void forward(sdp_model *m, const sdp_batch *b, bool training, sdp_metrics *out) {
    SDP_CHECK(b->images, "resnet: the batch has no images: feed an image dataset "
                         "(Fashion-MNIST or CIFAR)");
    sdp_resnet_forward(net(m), b->images, b->labels, b->B, training, out);
}

static void backward(sdp_model *m, float dloss) {
    sdp_resnet_backward(net(m), dloss, m->layer_done, m->layer_done_ctx);
}

static void use_grads(sdp_model *m, float *grads, const long *grad_offset,
                      const sdp_grad_slices *slices) {
    sdp_resnet_use_grads(net(m), grads, grad_offset, slices);
}

static double train_flops_per_example(const sdp_model *m) {
    return sdp_resnet_train_flops_per_image(net(m));
}

static size_t stream_floats(const sdp_model *m) {
    return sdp_resnet_stream_floats(net(m));
}

static void forward_stem(sdp_model *m, const sdp_batch *b, bool training, float *x) {
    SDP_CHECK(b->images, "resnet: the batch has no images: feed an image dataset "
                         "(Fashion-MNIST or CIFAR)");
    sdp_resnet_forward_stem(net(m), b->images, b->B, training, x);
}

static void forward_block(sdp_model *m, int i, const sdp_batch *b, bool training, float *x) {
    sdp_resnet_forward_block(net(m), i, b->B, training, x);
}

static void forward_head(sdp_model *m, const sdp_batch *b, bool training, const float *x,
                         sdp_metrics *out) {
    sdp_resnet_forward_head(net(m), x, b->labels, b->B, training, out);
}

static const sdp_model_ops OPS = {
    destroy,       forward,      backward,      use_grads,   train_flops_per_example,
    stream_floats, forward_stem, forward_block, forward_head};

static sdp_resnet_config resnet_config(const sdp_model_config *c) {
    return (sdp_resnet_config){.depth = c->depth,
                               .width = c->channels,
                               .in_channels = c->in_channels,
                               .image_size = c->image_size,
                               .classes = c->classes,
                               .recompute = c->recompute};
}

static void finish_config(sdp_model_config *c) {
    const float dropout = (float)c->dropout; /* as a transformer would take it */
    SDP_CHECK(dropout == 0.0f,
              "--dropout %g: the resnet has no dropout (it is the transformers', gpt, llama and "
              "vit): drop --dropout",
              (double)dropout);
    sdp_resnet_config r = resnet_config(c);
    sdp_resnet_config_finish(&r);
    c->channels = r.width;
}

static void describe_full(sdp_layout *full, const sdp_model_config *c) {
    sdp_resnet_config r = resnet_config(c);
    sdp_resnet_describe(full, &r, NULL);
}

/* On the configuration's backend, which the caller made (and destroys after the model). */
static void create(sdp_model *m, const sdp_model_config *c, const sdp_subnet_spec *spec, int B,
                   int T, sdp_model_mode mode) {
    SDP_CHECK(c->backend, "resnet: no backend in the model configuration: the caller creates one "
                          "(sdp_backend_cpu on the CPU)");
    SDP_CHECK(T <= 1, "resnet: images have no sequence length (got T = %d): use T = 1", T);
    sdp_resnet_config r = resnet_config(c);
    sdp_resnet *impl = sdp_resnet_create_on(&r, spec, B, mode, c->backend, CONV_ALGO);
    memset(m, 0, sizeof *m);
    m->ops = &OPS;
    m->impl = impl;
    m->layout = sdp_resnet_layout(impl);
    m->params = sdp_resnet_params(impl);
}

const sdp_model_family SDP_FAMILY_RESNET = {"resnet", true, finish_config, describe_full, create};
