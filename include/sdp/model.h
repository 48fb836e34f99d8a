/* The interface every model implements (gpt, llama, vit, resnet): its families, configuration,
 * batches and the forward and backward passes over a backend. What a model tells the SDP engine
 * about its tensors is its layout (sdp/layout.h). */
#ifndef SDP_MODEL_H
#define SDP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/layout.h"

/* A model runs on a backend (sdp/backend.h) and only points to it here. */
typedef struct sdp_backend sdp_backend;

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

/* Everything any model family needs to be built, and the one place an architecture knob lives:
 * `sdp train` writes its options straight into these fields (train_opts.arch, whose rows in
 * src/train/train_opts.c name them), the run adds what the data decides (vocab, image shape,
 * classes), and each family reads its own fields and fills their defaults (finish_config). Real
 * knobs are doubles, as the options are; the models compute with them as floats. */
typedef struct {
    char arch[16];                  /* gpt, llama, resnet, vit */
    int layers, heads, width, d_ff; /* transformers (and ViT); d_ff 0: the family's default */
    int seq_len, vocab;             /* token models (vit: seq_len becomes patches + 1) */
    double rope_theta;              /* llama: RoPE base; 0: 10000 */
    int depth, channels;            /* resnet: 20, 18, ...; base channels (0: the default) */
    int in_channels, image_size, classes, patch; /* image models */
    double dropout; /* transformers: dropout probability of training forwards (0: none) */
    /* Training models keep each layer's (transformers) or block's (resnet) input and recompute its
     * other activations in the backward: bitwise the same results, about one layer's activations
     * instead of every layer's. */
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
