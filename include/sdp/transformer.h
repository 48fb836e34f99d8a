/* GPT-2-style and LLaMA-style decoder-only transformers and the ViT encoder: each a stem, one
 * shared layer stack and a head.
 *   gpt:   token + learned position embedding; LayerNorm, GELU MLP, biases; final LayerNorm and
 *          the LM head tied to the token embedding (src/models/gpt.c).
 *   llama: token embedding; RoPE, RMSNorm, SwiGLU MLP, no biases; final RMSNorm and an untied LM
 *          head (src/models/llama.c).
 *   vit:   images cut into patches (a strided conv), a class token, learned positions; gpt's
 *          layers with bidirectional attention; a final LayerNorm and a classifier on the class
 *          token's output (HF ViTForImageClassification names; src/models/vit.c).
 * The layers (src/models/tf_stack.c) know only the options of sdp_tf_layer_opts, fixed when the
 * model is built; the style picks the family, and so the stem, the head and those options, once.
 * A model may be a subnetwork of a larger one: fewer layers (each keeps its global index, so
 * tensor names match the full model) and fewer heads or MLP neurons per layer. */
#ifndef SDP_TRANSFORMER_H
#define SDP_TRANSFORMER_H

#include <stdbool.h>

#include "sdp/backend.h"
#include "sdp/mem.h"
#include "sdp/model.h"

typedef enum { SDP_STYLE_GPT, SDP_STYLE_LLAMA, SDP_STYLE_VIT } sdp_tf_style;

/* What a layer computes, beyond its shape: chosen by the family when the model is built. */
typedef enum { SDP_TF_LAYERNORM, SDP_TF_RMSNORM } sdp_tf_norm;
typedef enum { SDP_TF_GELU, SDP_TF_SWIGLU } sdp_tf_mlp;
typedef struct {
    sdp_tf_norm norm; /* both norms of every layer */
    sdp_tf_mlp mlp;   /* swiglu: fc holds gate then up, 2F wide */
    bool rope;        /* rotary positions on q and k, of base rope_theta */
    float rope_theta;
    bool causal; /* attention to earlier positions only */
} sdp_tf_layer_opts;

typedef struct {
    /* The knobs, as sdp/model.h has them: arch names the style; layers, heads, width, d_ff (0:
     * the style's default), seq_len (maximum T; gpt: rows of the position table), vocab,
     * rope_theta (llama), and dropout: the probability in [0, 1) of training forwards, where
     * nanoGPT applies it (the stem's output, every attention's probabilities, and each branch's
     * output projection before it joins the residual stream; 0: none, and no mask is allocated).
     * vit: images of in_channels x image_size x image_size, square patches of `patch` pixels,
     * `classes` outputs; seq_len becomes patches + 1. backend is not read (sdp_tf_create takes
     * the backend). */
    sdp_model_config model;
    /* Derived by sdp_tf_config_finish: */
    sdp_tf_style style; /* from model.arch */
    int vocab_padded;   /* rows of the output head: vocab rounded up to 64 (vit: classes) */
} sdp_tf_config;

/* Per-layer shape of a (sub)network: which global layers it has, and how many heads and MLP
 * neurons each keeps, with the scale applied to each residual branch. */
typedef struct {
    int n_layer;
    int *layer_id; /* global index of each local layer */
    int *n_head;
    int *d_ff;
    float *branch_scale;
} sdp_tf_shape;

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N, C], [N], [N] */
    float *qkv;                       /* [N, 3D] (q and k after RoPE) */
    float *att, *lse;                 /* [N, D], [B, H, T] */
    float *mid;                       /* residual after the attention branch [N, C] */
    float *ln2, *ln2_mean, *ln2_rstd; /* [N, C], [N], [N] */
    float *fc;                        /* [N, F] (gpt) or [N, 2F] (llama: gate then up) */
    float *act;                       /* [N, F] */
    float *out;                       /* residual after the MLP branch [N, C] */
    /* dropout's masks of the attention and MLP branches' outputs, bits of [N, C] (sdp/ops.h);
     * NULL without dropout */
    uint32_t *drop_attn, *drop_mlp;
} sdp_tf_layer_acts;

/* Offsets (in elements) of tensors in the flat buffers; -1 when the family has none. llama's
 * q/k/v and gate/up projections are declared back to back, so each group is one contiguous
 * matrix and runs as one GEMM. */
typedef struct {
    long ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj;
} sdp_tf_layer_offsets;

/* vit: wte is the patch projection's weight, wpe the position table, lm_head the classifier
 * (its other tensors are in its own part, src/models/vit.c). */
typedef struct {
    long wte, wpe, lnf_w, lnf_b, lm_head;
    sdp_tf_layer_offsets *layers;
} sdp_tf_offsets;

/* The family's stem and head (src/models/transformer_internal.h), and the ViT's own part. */
struct sdp_tf_family;
struct sdp_tf_vit;

/* Every buffer below (parameters, gradients, activations) is memory of the model's backend: host
 * memory on the CPU backend, device memory on CUDA; read it from the host with be->download. */
typedef struct {
    sdp_tf_config cfg;                  /* of the full model */
    const struct sdp_tf_family *family; /* set once, when the model is built */
    sdp_tf_layer_opts opts;             /* of every layer */
    sdp_tf_offsets off;                 /* of parameters */
    sdp_tf_offsets goff;            /* of gradients (-1: this worker computes no gradient there) */
    bool own_grads;                 /* grads was allocated by the model */
    const sdp_grad_slices *gslices; /* per tensor, for SDP_GRAD_SLICED gradients */
    int backward_floor; /* lowest layer the backward reaches; -1: down to the embeddings */
    /* Called after each layer's backward (local layer index), e.g. to start gradient
     * all-reduces while the layers below are still running. NULL: no call. */
    void (*layer_done)(void *ctx, int layer);
    void *layer_done_ctx;
    sdp_tf_shape shape;
    int head_size;
    sdp_layout layout;
    const sdp_backend *be; /* runs every kernel and holds every buffer (the caller's) */
    int B, T;              /* activation capacity */
    float *params, *grads;
    /* activations */
    int *inputs, *targets; /* the last forward's, uploaded */
    float *embed;          /* [N, C] residual stream entering layer 0 */
    uint32_t *drop_embed;  /* dropout's mask of embed (bits of [N, C]); NULL without dropout */
    sdp_tf_layer_acts *layers;
    /* SDP_MODEL_INFER: every layer's buffers are views of shared_set's, which owns each buffer
     * once (see alloc_infer_acts in tf_stack.c); the outputs alternate between shared_set.out
     * (even layers) and embed (odd layers). recompute (cfg.recompute in a training mode): every
     * layer's buffers but its own output are views of shared_set's (alloc_recompute_acts), which
     * hold the activations of local layer acts_layer (-1: none) */
    bool shared_acts, recompute;
    sdp_tf_layer_acts shared_set;
    int acts_layer;
    float *lnf, *lnf_mean, *lnf_rstd;
    float *probs;  /* [N, Vp]: logits, then probabilities, then dlogits */
    float *losses; /* [N] */
    /* gradient work buffers, reused across layers */
    float *d_res, *d_branch, *d_norm, *d_att, *d_qkv, *d_fc, *d_act;
    float *attn_scratch;    /* NULL where the backend keeps its own */
    struct sdp_tf_vit *vit; /* vit's tensors and buffers (src/models/vit.c); NULL otherwise */
    int n_correct;          /* argmax hits of the last forward with labels (a classifier head) */
    int n_targets;          /* non-ignored targets in the last forward */
    int last_B, last_T;
    bool has_targets; /* probs hold probabilities of a forward with targets */
    /* Dropout (sdp_tf_set_dropout): whether the next forwards apply it, drawing their masks from
     * dropout_key; and whether the last forward did (the backward then does too), from which key.
     */
    bool dropping, dropped;
    uint64_t dropout_key, dropped_key;
} sdp_tf;

/* Checks a configuration, fills the knobs' defaults and derives style and vocab_padded; fails with
 * a clear message when it is impossible. */
void sdp_tf_config_finish(sdp_tf_config *cfg);
/* The sizes sdp_tf_config_finish accepts: larger ones would overflow the int and size_t
 * arithmetic of the layout and kernels. */
enum {
    SDP_TF_MAX_LAYERS = 65536,
    SDP_TF_MAX_WIDTH = 65536,
    SDP_TF_MAX_D_FF = 1 << 20,
    SDP_TF_MAX_SEQ = 1 << 20,
    SDP_TF_MAX_VOCAB = 1 << 24,
};
#define SDP_TF_MAX_PARAMS 0x1p40
/* About the parameters of a configuration, finished or not (d_ff 0 counted as 4 x width):
 * sdp_tf_config_finish refuses SDP_TF_MAX_PARAMS or more. */
double sdp_tf_params_estimate(const sdp_tf_config *c);
/* Whether batches of B x T fit the activations' arithmetic (below 2^31 values of the widest
 * tensor), as a model is built for them (vocab_padded 0, not finished: the vocabulary, or vit's
 * classes, rounded up to 64). */
bool sdp_tf_batch_fits(const sdp_tf_config *c, int B, int T);
const char *sdp_tf_style_name(sdp_tf_style s);
bool sdp_tf_style_parse(const char *s, sdp_tf_style *out);

/* The full model's shape (every layer, every head and neuron, scale 1). */
void sdp_tf_shape_full(sdp_tf_shape *s, const sdp_tf_config *cfg);
void sdp_tf_shape_free(sdp_tf_shape *s);

/* The shape of a subnetwork chosen by SDP (src/sdp/subnet.h): kept blocks become layers (with
 * their global index), kept atoms become heads and MLP neurons. */
void sdp_tf_shape_from_keep(sdp_tf_shape *s, const sdp_tf_config *cfg, int nblocks,
                            const bool *keep, const int (*kept)[SDP_MAX_GROUPS],
                            const float *scale);

/* Describes the parameter tensors of the (sub)network without allocating anything. */
void sdp_tf_describe(sdp_layout *L, const sdp_tf_config *cfg, const sdp_tf_shape *shape);

/* Builds a model with room for batches of B sequences of T tokens on backend be (which must
 * outlive it; a CPU backend over a dry mem only counts the bytes). shape may be NULL (full). */
void sdp_tf_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be);
void sdp_tf_destroy(sdp_tf *m);
/* Replaces the model's gradient buffer with a caller-owned one (backend memory), where tensor i of
 * the layout keeps its gradient at grad_offset[i]; or nowhere when it is -1 (backward masking: no
 * weight-gradient work is done for it); or, when it is SDP_GRAD_SLICED, in the slices given by
 * slices[i] (computed as one GEMM per slice). The arrays must outlive the model's use of them. */
void sdp_tf_use_grads(sdp_tf *m, float *grads, const long *grad_offset,
                      const sdp_grad_slices *slices);

/* Dropout in the forwards that follow: on, where the model has any (cfg.model.dropout > 0 and built
 * for training: SDP_MODEL_INFER holds no masks and never drops), every mask drawn from the stream
 * `key` (an sdp_rng state; the same key gives the same masks, so a gradient check holds them
 * fixed, and a new key per forward draws fresh ones); off, none (evaluation). Models start off.
 * The staged forward below never drops: it evaluates. */
void sdp_tf_set_dropout(sdp_tf *m, bool on, uint64_t key);

/* Forward over host arrays inputs [B*T] (checked against the vocabulary, then uploaded); with
 * targets (may be NULL) returns the summed loss over
 * non-ignored targets (in double) and leaves probabilities for backward. B <= capacity. */
double sdp_tf_forward(sdp_tf *m, const int *inputs, const int *targets, int B, int T);
/* Backward of the last forward; gradients accumulate into m->grads, scaled by dloss
 * (e.g. 1 / (tokens in the whole accumulated batch) for a mean loss). */
void sdp_tf_backward(sdp_tf *m, float dloss);
/* Logits of the last forward at row i (before softmax; valid only after a forward with
 * targets == NULL), in backend memory. */
const float *sdp_tf_logits_row(const sdp_tf *m, int row);

/* vit: forward over host images [B, in_channels, image_size, image_size] (uploaded); with labels
 * [B] (host, may be NULL; < 0 ignored) returns the summed loss and leaves n_targets and
 * n_correct. Backward is sdp_tf_backward. */
double sdp_tf_forward_images(sdp_tf *m, const float *images, const int *labels, int B);

/* The forward in three stages, for a model evaluated one layer at a time (block-streamed
 * evaluation, docs/design.md): each stage runs the kernels of the whole forward (without
 * dropout), so the results are bitwise the same. The residual stream x between stages is [B*T,
 * width] of backend memory (vit: T is the model's, patches + 1). stem:  inputs (tokens, or vit
 * images) to the stream entering the first layer, in m->embed; layer: local layer i from x to x;
 *   head:  the summed loss from the stream leaving the last layer (as sdp_tf_forward). */
void sdp_tf_stem_tokens(sdp_tf *m, const int *inputs, int B, int T);
void sdp_tf_stem_images(sdp_tf *m, const float *images, int B);
void sdp_tf_layer_forward(sdp_tf *m, int i, float *x, int B, int T);
double sdp_tf_head_tokens(sdp_tf *m, const float *x, const int *targets, int B, int T);
double sdp_tf_head_images(sdp_tf *m, const float *x, const int *labels, int B);

/* Model FLOPs of one training step (forward + backward) per token (vit: per image), for MFU:
 * 6 * (matmul parameters) + 6 * attention score and value products. */
double sdp_tf_train_flops_per_token(const sdp_tf *m, int T);

#endif
