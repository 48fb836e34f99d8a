/* What the transformer's families (gpt.c, llama.c, vit.c), its layer stack (tf_stack.c) and its
 * public entry points (transformer.c) share: the helpers of tf_common.c, and the table through
 * which transformer.c reaches a family's stem and head. Not part of the public interface.
 * Calls run downward only: transformer.c -> families -> tf_tokens.c -> tf_stack.c ->
 * tf_common.c. */
#ifndef SDP_TRANSFORMER_INTERNAL_H
#define SDP_TRANSFORMER_INTERNAL_H

#include "models/describe.h"
#include "sdp/transformer.h"

static inline const float *tf_param(const sdp_tf *m, long off) {
    return off < 0 ? NULL : m->params + off;
}

/* NULL where this worker computes no gradient (-1), and for sliced ones (handled apart). */
static inline float *tf_grad(const sdp_tf *m, long off) {
    return off < 0 ? NULL : m->grads + off;
}

/* A family's stem and head, composed with the stack into the whole forward and backward. A family
 * reads either tokens or images: the other kind's entries are NULL. */
struct sdp_tf_family {
    void (*stem_tokens)(sdp_tf *m, const int *inputs, int B, int T);
    double (*head_tokens)(sdp_tf *m, const float *x, const int *targets, int B, int T);
    double (*forward_tokens)(sdp_tf *m, const int *inputs, const int *targets, int B, int T);
    void (*stem_images)(sdp_tf *m, const float *images, int B);
    double (*head_images)(sdp_tf *m, const float *x, const int *labels, int B);
    double (*forward_images)(sdp_tf *m, const float *images, const int *labels, int B);
    void (*backward)(sdp_tf *m, float dloss);              /* head, stack, then stem */
    void (*use_grads)(sdp_tf *m, const long *grad_offset); /* its own part's; may be NULL */
    void (*destroy)(sdp_tf *m);                            /* its own part; may be NULL */
    double (*train_flops)(const sdp_tf *m, int T);
};

/* The outputs of the head: the vocabulary, or a vit's classes (read from model.arch, so the
 * configuration need not be finished). */
int tf_outputs(const sdp_tf_config *c);

/* ---- describing the parameters ------------------------------------------------------------- */

/* A block's groups, as a tensor names them (tensor_desc.group, counted from 1): its attention
 * heads and its MLP's hidden neurons. */
enum { TF_GROUP_ATTN = 1, TF_GROUP_MLP = 2 };

typedef struct {
    sdp_layout *L;
    int block; /* -1: the stem or the head */
} tf_adder;

/* Adds the tensor to the adder's block and returns its offset. */
long tf_add(tf_adder *a, tensor_desc d);
/* Starts a layout of the shape's layers; every offset of o is -1 until described. */
tf_adder tf_describe_begin(sdp_layout *L, const sdp_tf_shape *s, sdp_tf_offsets *o);
/* Local layer i becomes block i, named prefix.<global index>, with its heads and neurons; the
 * tensors added next are the layer's. */
void tf_describe_block(tf_adder *a, const sdp_tf_config *c, const sdp_tf_shape *s, int i,
                       const char *prefix);

/* ---- building ------------------------------------------------------------------------------ */

/* The parts every family shares, in the order they are allocated. cfg is already finished.
 * whole_sequence: every example is the model's seq_len rows (vit), whatever T says. */
void tf_begin(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
              bool whole_sequence, const sdp_backend *be);
/* Once the layout is described: the parameters and, in training mode, the gradients. */
void tf_alloc_params(sdp_tf *m, sdp_model_mode mode);
float *tf_acts(sdp_tf *m, size_t n);
int *tf_ints(sdp_tf *m, size_t n);
/* The head's buffers for `rows` rows of the residual stream: norm and logits. */
void tf_head_alloc(sdp_tf *m, size_t rows);
/* Frees what tf_begin, tf_alloc_params and tf_head_alloc made, and the head's targets (the
 * family's part and the stack are freed before). */
void tf_free_common(sdp_tf *m);

/* The gradient offset of the tensor at param_off (-1 for -1). */
long tf_grad_offset_of(const sdp_layout *L, long param_off, const long *grad_offset);

/* ---- norms --------------------------------------------------------------------------------- */

/* LayerNorm (weight w, bias b) or RMSNorm (weight w) over n rows of the residual width. */
void tf_norm_fwd(const sdp_tf *m, sdp_tf_norm kind, float *out, float *mean, float *rstd,
                 const float *x, long w, long b, int n);
void tf_norm_bwd(const sdp_tf *m, sdp_tf_norm kind, float *dx, const float *dout, const float *x,
                 const float *mean, const float *rstd, long w, long gw, long gb, int n);

#endif
