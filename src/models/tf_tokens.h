/* The stem, head and passes that gpt and llama share (tf_tokens.c): the two differ only in their
 * layout and layer options. Not part of the public interface. */
#ifndef SDP_TF_TOKENS_H
#define SDP_TF_TOKENS_H

#include "models/transformer_internal.h"

/* Once the family has described the layout: the parameters, the token inputs, the head's targets
 * and buffers and the stack's, in the order every token model allocates them. */
void tf_tokens_build(sdp_tf *m, sdp_model_mode mode);
/* The stem, head, forward and backward of a token model: token embeddings (plus learned positions
 * where the family declared wpe), the stack, then the final norm of the layers' kind
 * (m->opts.norm) and the LM head over the padded vocabulary. */
extern const struct sdp_tf_family TF_TOKEN_FAMILY;

#endif
