/* The transformer's families, each a stem, the layer stack and a head (gpt.c, llama.c, vit.c):
 * what transformer.c picks from the configuration's style. Not part of the public interface. */
#ifndef SDP_TF_FAMILIES_H
#define SDP_TF_FAMILIES_H

#include "sdp/transformer.h"

/* Describes the (sub)network's tensors in the family's names; o->layers may be NULL. */
void tf_gpt_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o);
void tf_llama_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                       sdp_tf_offsets *o);
void tf_vit_describe(sdp_layout *L, const sdp_tf_config *c, const sdp_tf_shape *s,
                     sdp_tf_offsets *o);

/* Builds the family's model (cfg finished), as sdp_tf_create. */
void tf_gpt_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be);
void tf_llama_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                     sdp_model_mode mode, const sdp_backend *be);
void tf_vit_create(sdp_tf *m, const sdp_tf_config *cfg, const sdp_tf_shape *shape, int B, int T,
                   sdp_model_mode mode, const sdp_backend *be);

#endif
