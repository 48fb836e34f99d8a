/* What a model tells the rest of sdp about itself: a flat parameter buffer described as named
 * tensors (HF/PyTorch names), grouped into blocks and, inside blocks, into inner groups whose
 * width can be split into neuron units. The SDP engine (src/sdp/) needs nothing else. */
#ifndef SDP_MODEL_H
#define SDP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/backend.h"
#include "sdp/mem.h"

#define SDP_NAME_MAX   96
#define SDP_MAX_GROUPS 4

typedef enum { SDP_INIT_NORMAL, SDP_INIT_ONES, SDP_INIT_ZEROS } sdp_init_kind;

typedef struct {
    char name[SDP_NAME_MAX];
    int ndim;
    int64_t shape[4];
    size_t offset, numel; /* elements, in the model's flat buffers */
    int block;            /* -1: shared by every worker (stem, head); else a block index */
    int group;            /* -1: whole-block tensor; else the inner group whose width it spans */
    int axis;             /* the axis along which the group's width runs (group >= 0) */
    int segments;         /* that axis holds `segments` consecutive copies of the group width */
    bool decay;           /* weight decay applies */
    bool buffer;          /* state, not trained (batch-norm running statistics): no gradient or
                           * optimizer state; mapped, published and checkpointed like a parameter,
                           * averaged among its owners before evaluation and checkpoints
                           * (sdp_layout_add leaves it false; a model sets it afterwards) */
    sdp_init_kind init;
    float init_std;
} sdp_param;

/* A block's inner dimension that neuron units split: attention heads, MLP hidden neurons,
 * conv inner channels. `width` atoms of `atom` elements each along the tensors' axis. */
typedef struct {
    char name[16];
    int width;
    int atom;
} sdp_group;

typedef struct {
    char name[SDP_NAME_MAX]; /* e.g. "transformer.h.3" */
    int global_index;        /* index of this block in the full model */
    bool droppable;          /* has an identity shortcut, so block units may drop it */
    int ngroups;
    sdp_group groups[SDP_MAX_GROUPS];
} sdp_block;

typedef struct {
    int nparams, cap_params;
    sdp_param *params;
    int nblocks;
    sdp_block *blocks;
    size_t numel;
} sdp_layout;

/* The owned slices of a tensor that a worker owns only in part (neuron units under backward
 * masking), and where their gradients live in its compact gradient buffer. Slice i spans
 * [start[i], start[i] + len[i]) along `axis`, and its gradient begins at dst[i] with rows ld[i]
 * apart: along axis 0 a slice is len[i] whole rows; along axis 1 it is len[i] columns of every
 * row. A model computes these gradients as one GEMM per slice. */
typedef struct {
    int n, axis;
    long *start, *len, *dst, *ld;
} sdp_grad_slices;

/* Marks a tensor whose gradient is sliced (see sdp_grad_slices) in a gradient-offset table. */
#define SDP_GRAD_SLICED (-2L)

/* What a worker instantiates of a model, per block of the full model: whether the block is kept,
 * how many atoms of each inner group, and the scale of its residual branch. Made by SDP
 * (src/sdp/subnet.c); every model turns it into its own shape. */
typedef struct {
    int nblocks;
    bool *keep;
    int (*kept)[SDP_MAX_GROUPS];
    float *scale;
} sdp_subnet_spec;

/* Builders used by models. */
void sdp_layout_init(sdp_layout *L, int nblocks);
void sdp_layout_free(sdp_layout *L);
/* Appends a tensor at the end of the flat buffer and returns its index. */
int sdp_layout_add(sdp_layout *L, const char *name, int ndim, const int64_t *shape, int block,
                   int group, int axis, int segments, bool decay, sdp_init_kind init,
                   float init_std);
const sdp_param *sdp_layout_find(const sdp_layout *L, const char *name);

/* A stem tensor: shared (block -1) and declared before every block's tensors, i.e. consumed
 * below all blocks (embeddings, a ResNet's first conv). */
bool sdp_param_is_stem(const sdp_layout *L, int i);
/* The lowest local block a backward pass must reach for the tensors that have gradients
 * (grad_offset[i] != -1): -1 when a stem tensor has one (the whole pass), else the lowest block
 * with one, else nblocks (the head alone). */
int sdp_layout_backward_floor(const sdp_layout *L, const long *grad_offset);

/* Deterministic initial value of element `index` of the full-model tensor `name`: the same on
 * every rank and for every subnetwork, so a compact model initialises as a slice of the full. */
float sdp_param_init_value(const sdp_param *p, uint64_t seed, uint64_t index);
/* Initialises every tensor of a full (unsliced) model. */
void sdp_layout_init_values(const sdp_layout *L, float *params, uint64_t seed);

/* ---- the interface every model implements ------------------------------------------------ */

#include "sdp/ops.h"

/* A batch: token models read tokens and targets [B*T]; image models read images [B, C, H, W]
 * and labels [B] (T is 1). Targets and labels < 0 are ignored. */
typedef struct {
    int B, T;
    const int *tokens, *targets;
    const float *images;
    const int *labels;
} sdp_batch;

/* Summed over the counted targets of a forward. */
typedef struct {
    double loss, count, correct; /* correct: argmax hits (classifiers only) */
} sdp_metrics;

typedef enum {
    SDP_MODEL_INFER,      /* forward only */
    SDP_MODEL_TRAIN,      /* forward and backward, with a gradient buffer of its own */
    SDP_MODEL_TRAIN_BARE, /* forward and backward; the caller supplies gradients (use_grads) */
} sdp_model_mode;

/* Everything any model family needs to be built; each family reads its own fields. */
typedef struct {
    char arch[16];                  /* gpt, llama, resnet, vit */
    int layers, heads, width, d_ff; /* transformers (and ViT) */
    int seq_len, vocab;             /* token models */
    float rope_theta;
    int depth;                                   /* resnet: 20, 18, ... */
    int in_channels, image_size, classes, patch; /* image models */
    float dropout; /* transformers: dropout probability of training forwards (0: none) */
    /* Training models keep each layer's (transformers) or block's (resnet) input and recompute its
     * other activations in the backward (sdp_tf_config, sdp_resnet_config): bitwise the same
     * results, about one layer's activations instead of every layer's. */
    bool recompute;
    /* The backend to build on, the caller's (it must outlive the model); required: a CPU run
     * passes sdp_backend_cpu over its GEMM provider and memory tally (a dry sdp_mem to count
     * without allocating). Families without kernels for it fail. */
    sdp_backend *backend;
} sdp_model_config;

typedef struct sdp_model sdp_model;

typedef struct {
    void (*destroy)(sdp_model *m);
    /* training: batch statistics where a model has them (batch norm) */
    void (*forward)(sdp_model *m, const sdp_batch *b, bool training, sdp_metrics *out);
    /* gradients of the last training forward, accumulated, scaled by dloss */
    void (*backward)(sdp_model *m, float dloss);
    /* as sdp_tf_use_grads */
    void (*use_grads)(sdp_model *m, float *grads, const long *grad_offset,
                      const sdp_grad_slices *slices);
    /* model FLOPs of one training step (forward + backward) per token or image */
    double (*train_flops_per_example)(const sdp_model *m);
    /* The forward in stages, so that a model too large to hold whole on one worker can be
     * evaluated one block at a time (docs/design.md, "Block-streamed evaluation"). Each stage
     * runs the kernels of the whole forward: the results are bitwise forward's. The residual
     * stream x between blocks takes at most stream_floats(m) floats of the model's backend memory
     * at any block boundary of the full model, for a batch of the model's B. training: as in
     * forward (batch statistics, whose running statistics the stage updates).
     *   forward_stem:  the batch's inputs to the stream entering the first block;
     *   forward_block: local block i from x to x (only b->B and b->T are read);
     *   forward_head:  the stream leaving the last block of the full model to *out. */
    size_t (*stream_floats)(const sdp_model *m);
    void (*forward_stem)(sdp_model *m, const sdp_batch *b, bool training, float *x);
    void (*forward_block)(sdp_model *m, int i, const sdp_batch *b, bool training, float *x);
    void (*forward_head)(sdp_model *m, const sdp_batch *b, bool training, const float *x,
                         sdp_metrics *out);
} sdp_model_ops;

struct sdp_model {
    const sdp_model_ops *ops;
    const sdp_layout *layout; /* this (sub)network's tensors */
    float *params;
    /* Called after each local layer's backward, if set (starts gradient reductions early). */
    void (*layer_done)(void *ctx, int layer);
    void *layer_done_ctx;
    /* The random stream (an sdp_rng state) of the next training forward's dropout masks: the
     * caller sets a new one per forward (the trainer: from the seed, the worker and the
     * micro-batch). Models without dropout ignore it; forwards with training false never drop. */
    uint64_t dropout_key;
    void *impl;
};

typedef struct {
    const char *arch;
    bool images; /* reads images and labels rather than tokens */
    /* Checks the configuration (failing with a clear message) and fills its defaults. */
    void (*finish_config)(sdp_model_config *cfg);
    /* Describes the full model's tensors without allocating them. */
    void (*describe_full)(sdp_layout *full, const sdp_model_config *cfg);
    /* Builds a (sub)network for batches of B examples (of T tokens) on cfg->backend, which must
     * be set; spec NULL: the full model. */
    void (*create)(sdp_model *m, const sdp_model_config *cfg, const sdp_subnet_spec *spec, int B,
                   int T, sdp_model_mode mode);
} sdp_model_family;

/* The family of an architecture name, or NULL. */
const sdp_model_family *sdp_model_family_find(const char *arch);
/* The names, for messages ("gpt, llama, ..."), written into buf and returned. */
const char *sdp_model_family_names(char *buf, size_t n);

#endif
