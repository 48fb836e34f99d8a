/* The token stem and LM head that gpt and llama share (tf_tokens.c). Not part of the public
 * interface. */
#ifndef SDP_TF_TOKENS_H
#define SDP_TF_TOKENS_H

#include "models/transformer_internal.h"

/* Once the family has described the layout: the parameters, the token inputs, the head's targets
 * and buffers and the stack's, in the order every token model allocates them. */
void tf_tokens_build(sdp_tf *m, sdp_model_mode mode);
/* Frees the token inputs (the rest is the stack's and tf_free_common's). */
void tf_tokens_free(sdp_tf *m);

/* Token embeddings (wte) plus learned positions where the model has them (wpe), into m->embed. */
void tf_tokens_stem(sdp_tf *m, const int *inputs, int B, int T);
/* The embeddings' gradients from d_res. */
void tf_tokens_stem_backward(sdp_tf *m, int B, int T);

/* The final norm of kind `norm` and the LM head: logits over the padded vocabulary, and with
 * targets the summed loss (probabilities left for the backward). */
double tf_lm_head(sdp_tf *m, sdp_tf_norm norm, const float *x, const int *targets, int B, int T);
/* The head's backward of the last forward, leaving dL/d(top layer output) in d_res. */
void tf_lm_head_backward(sdp_tf *m, sdp_tf_norm norm, float dloss);

/* A token model's FLOPs per token, as sdp_tf_train_flops_per_token. */
double tf_tokens_train_flops(const sdp_tf *m, int T);

#endif
