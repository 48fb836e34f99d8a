/* The transformer's layer stack (tf_stack.c): pre-norm attention and MLP blocks over the residual
 * stream, each layer of its own width (SDP's kept heads and neurons), computed as m->opts says.
 * Not part of the public interface. */
#ifndef SDP_TF_STACK_H
#define SDP_TF_STACK_H

#include "models/transformer_internal.h"

/* The stream entering layer 0 (m->embed) and every layer's activations: all of them for
 * training, one shared set for SDP_MODEL_INFER. */
void tf_stack_alloc(sdp_tf *m, sdp_model_mode mode);
/* The backward's work buffers (none for SDP_MODEL_INFER) and the attention's scratch. */
void tf_stack_alloc_backward(sdp_tf *m, sdp_model_mode mode);
void tf_stack_free(sdp_tf *m);

/* Dropout (sdp_tf_set_dropout): a family's forward calls tf_stack_begin_forward first, with
 * may_drop false where it evaluates; that decides whether this forward and its backward drop.
 * Once the stem has written m->embed, tf_stack_drop_stem drops it (where the forward drops); and
 * with dL/d(embed) in d_res after the layers' backward, tf_stack_stem_grad returns the gradient of
 * the stem's output before dropout: d_res itself, or its masked copy in d_branch. */
void tf_stack_begin_forward(sdp_tf *m, bool may_drop);
void tf_stack_drop_stem(sdp_tf *m, int B, int T);
const float *tf_stack_stem_grad(sdp_tf *m, int B, int T);

/* Every layer over the residual stream x [B*T, C]; returns the top layer's output. */
const float *tf_stack_forward(sdp_tf *m, const float *x, int B, int T);
/* The top layer's output of the last forward (the stem's output when there is no layer). */
const float *tf_stack_top(const sdp_tf *m);
/* With d_res holding dL/d(top output), runs the layers' backward down to the backward floor,
 * leaving dL/d(input of the lowest layer run) in d_res. */
void tf_stack_backward(sdp_tf *m, int B, int T);

/* Per token of a sequence of T: the layers' matmul parameters and attention products, as
 * sdp_tf_train_flops_per_token counts them. */
void tf_stack_flops(const sdp_tf *m, int T, double *layers, double *attn);

#endif
