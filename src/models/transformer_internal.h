/* What the transformer's core (transformer.c) shares with the ViT's image stem and classifier head
 * (vit.c). Not part of the public interface. */
#ifndef SDP_TRANSFORMER_INTERNAL_H
#define SDP_TRANSFORMER_INTERNAL_H

#include "sdp/transformer.h"

static inline const float *tf_param(const sdp_tf *m, long off) {
    return off < 0 ? NULL : m->params + off;
}

/* NULL where this worker computes no gradient (-1), and for sliced ones (handled apart). */
static inline float *tf_grad(const sdp_tf *m, long off) {
    return off < 0 ? NULL : m->grads + off;
}

/* The style's norm (LayerNorm, or RMSNorm for llama) over n rows of the residual width. */
void tf_norm_fwd(const sdp_tf *m, float *out, float *mean, float *rstd, const float *x, long w,
                 long b, int n);
void tf_norm_bwd(const sdp_tf *m, float *dx, const float *dout, const float *x, const float *mean,
                 const float *rstd, long w, long gw, long gb, int n);

/* Every layer over the residual stream x [B*T, C]; returns the top layer's output. */
const float *tf_layers_forward(sdp_tf *m, const float *x, int B, int T);
/* With d_res holding dL/d(top output), runs the layers' backward down to the backward floor,
 * leaving dL/d(input of the lowest layer run) in d_res. */
void tf_layers_backward(sdp_tf *m, int B, int T);

/* vit.c: its buffers (in create and destroy), and the gradients of its stem from d_res. */
void tf_vit_alloc(sdp_tf *m);
void tf_vit_free(sdp_tf *m);
void tf_vit_backward(sdp_tf *m, float dloss);

#endif
