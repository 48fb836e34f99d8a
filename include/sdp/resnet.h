/* ResNets for small images (the CIFAR variant), fp32: a 3x3 stem convolution with no max-pool,
 * basic blocks, global average pooling and a linear classifier. Tensor names follow PyTorch's
 * CIFAR ResNets (kuangliu/pytorch-cifar): conv1, bn1, layer{s}.{i}.{conv1,bn1,conv2,bn2},
 * layer{s}.{i}.shortcut.{0,1} (a 1x1 convolution and its batch norm), fc.
 *   depth 18, 34: four stages of [2,2,2,2] or [3,4,6,3] blocks, widths w, 2w, 4w, 8w (w = 64).
 *   depth 6n+2:   three stages of n blocks, widths w, 2w, 4w (w = 16): ResNet-20, 32, 44, 56, 110.
 * The first block of every stage after the first halves the image (stride 2).
 *
 * For SDP: a block with an identity shortcut is droppable (dropped, it is the identity) and its
 * inner channels (conv1's outputs = bn1 = conv2's inputs) form the group "ch" of 1-channel atoms.
 * A block that downsamples (stride 2 or a change of width) is shared, with no inner group. A
 * subnetwork keeps some blocks, under their global names, with some of their inner channels, and
 * scales each kept identity block's residual branch. Batch-norm running statistics are layout
 * tensors flagged `buffer`: they never get gradients. */
#ifndef SDP_RESNET_H
#define SDP_RESNET_H

#include <stdbool.h>

#include "sdp/backend.h"
#include "sdp/mem.h"
#include "sdp/model.h"
#include "sdp/ops.h"
#include "sdp/ops_vision.h"

typedef struct {
    int depth;       /* 18, 34, or 6n+2 */
    int width;       /* channels of the stem and the first stage; 0 = 64 (4 stages), 16 (3) */
    int in_channels; /* 1 for Fashion-MNIST, 3 for CIFAR */
    int image_size;  /* square images */
    int classes;
    /* Activation recomputation of training models: every block keeps only its input (the block
     * below's output, or the stem's) and its batch norms' statistics; one set of a block's
     * convolution outputs, shared by all blocks, serves the forward, and the backward recomputes
     * each block's from its input before its gradients, updating no running statistic again. The
     * same kernels on the same values, so every result is bitwise the same. */
    bool recompute;
} sdp_resnet_config;

/* One basic block of the full model. */
typedef struct {
    int stage, index;      /* named layer{stage}.{index}: stage from 1, index from 0 */
    int cin, cout, stride; /* cout is also the full inner width */
    int in_size, out_size; /* spatial: out_size = ceil(in_size / stride), as PyTorch's padding */
    bool downsample;       /* has the 1x1 convolution shortcut; not droppable */
} sdp_resnet_block_arch;

/* Checks a configuration (one-line message naming the problem and the fix) and fills defaults. */
void sdp_resnet_config_finish(sdp_resnet_config *c);
int sdp_resnet_stages(const sdp_resnet_config *c);
/* What sdp_resnet_config_finish accepts: a CIFAR ResNet depth (18 or 34, four stages; 6n+2 of at
 * least 8 and at most SDP_RESNET_MAX_DEPTH, three), and base widths up to this one (the last stage
 * at most 65536 channels). The depth bound keeps describing a model to a few milliseconds (the
 * cost grows with the square of the blocks), far past any depth trained. */
#define SDP_RESNET_MAX_DEPTH 8192
bool sdp_resnet_depth_ok(int depth);
int sdp_resnet_max_width(int depth);
int sdp_resnet_nblocks(const sdp_resnet_config *c);
sdp_resnet_block_arch sdp_resnet_block(const sdp_resnet_config *c, int b);

/* Describes the tensors of a (sub)network without allocating them; spec NULL: the full model. */
void sdp_resnet_describe(sdp_layout *L, const sdp_resnet_config *c, const sdp_subnet_spec *spec);

typedef struct sdp_resnet sdp_resnet;

/* Builds a (sub)network for batches of at most B images on backend be (the caller's, which must
 * outlive the model), with one conv plan per distinct conv shape (on the CPU made with algo for
 * the current thread count: call after sdp_set_threads; other backends ignore algo). Buffers are
 * backend memory; under a dry CPU mem nothing is allocated or written, and the byte counts are
 * those of a real create. */
sdp_resnet *sdp_resnet_create_on(const sdp_resnet_config *c, const sdp_subnet_spec *spec, int B,
                                 sdp_model_mode mode, const sdp_backend *be, sdp_conv_algo algo);
/* The same on a CPU backend of the model's own, over gemm and mem. */
sdp_resnet *sdp_resnet_create(const sdp_resnet_config *c, const sdp_subnet_spec *spec, int B,
                              sdp_model_mode mode, sdp_gemm_provider gemm, sdp_conv_algo algo,
                              sdp_mem *mem);
void sdp_resnet_destroy(sdp_resnet *r);
const sdp_layout *sdp_resnet_layout(const sdp_resnet *r);
/* Backend memory, as the gradients and logits below (host memory on the CPU): on a device, read
 * and write them with the backend's download and upload. */
float *sdp_resnet_params(sdp_resnet *r);
/* The model's own gradient buffer (mode SDP_MODEL_TRAIN), laid out as the parameters. */
float *sdp_resnet_grads(sdp_resnet *r);

/* As sdp_tf_use_grads (grads is backend memory): gradient of tensor i at grad_offset[i], nowhere
 * when -1 (its weight gradient is not computed), or in slices[i] when SDP_GRAD_SLICED (computed
 * whole into scratch and added into the owned slices). Buffers must be -1. The offsets are
 * copied; slices must outlive the model's use of them. */
void sdp_resnet_use_grads(sdp_resnet *r, float *grads, const long *grad_offset,
                          const sdp_grad_slices *slices);

/* images [B, C, S, S], labels [B] (host arrays; labels < 0 ignored; may be NULL: no loss),
 * uploaded into the model's own buffers. training: batch
 * statistics (and running-statistic updates); otherwise running statistics. */
void sdp_resnet_forward(sdp_resnet *r, const float *images, const int *labels, int B, bool training,
                        sdp_metrics *out);
/* Gradients of the last training forward, accumulated, scaled by dloss; layer_done (may be NULL)
 * is called with each local block index after its backward. */
void sdp_resnet_backward(sdp_resnet *r, float dloss, void (*layer_done)(void *ctx, int block),
                         void *ctx);
/* The forward in stages, for a model evaluated one block at a time (block-streamed evaluation,
 * docs/design.md): each runs the kernels of sdp_resnet_forward, so results are bitwise its. The
 * stream x (backend memory) between stages holds sdp_resnet_stream_floats: the largest of the
 * full model's stem and block outputs for the model's B. stem: images to the stem's output;
 * block: local block i from x to x; head: the full model's last block output to the loss. */
size_t sdp_resnet_stream_floats(const sdp_resnet *r);
void sdp_resnet_forward_stem(sdp_resnet *r, const float *images, int B, bool training, float *x);
void sdp_resnet_forward_block(sdp_resnet *r, int i, int B, bool training, float *x);
void sdp_resnet_forward_head(sdp_resnet *r, const float *x, const int *labels, int B, bool training,
                             sdp_metrics *out);

/* Logits of image i of the last forward without labels (backend memory). */
const float *sdp_resnet_logits(const sdp_resnet *r, int i);

/* 3 x forward FLOPs (2 per multiply-add of the convolutions and the classifier), per image. */
double sdp_resnet_train_flops_per_image(const sdp_resnet *r);

#endif
