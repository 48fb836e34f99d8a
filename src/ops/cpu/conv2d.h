/* Private interface between the conv2d front end (conv2d.c, which checks arguments and handles the
 * bias) and its two implementations: oneDNN primitives (conv2d_dnnl.c) and im2col + GEMM
 * (conv2d_im2col.c, with the layout transforms in im2col.c). */
#ifndef SDP_OPS_CPU_CONV2D_H
#define SDP_OPS_CPU_CONV2D_H

#include "sdp/ops_vision.h"

/* ---- oneDNN -------------------------------------------------------------------------------- */

/* Creates the primitives for plan->shape and stores in *scratch_floats what they need. */
sdp_conv_dnnl *sdp_conv_dnnl_create(const sdp_conv_plan *plan, size_t *scratch_floats);
void sdp_conv_dnnl_destroy(sdp_conv_dnnl *d);
void sdp_conv_dnnl_fwd(const sdp_conv_dnnl *d, float *out, const float *inp, const float *w,
                       float *scratch);
void sdp_conv_dnnl_bwd(const sdp_conv_dnnl *d, float *dinp, float *dw, const float *dout,
                       const float *inp, const float *w, float *scratch);

/* ---- im2col + GEMM ------------------------------------------------------------------------- */

size_t sdp_conv_im2col_scratch_floats(const sdp_conv_plan *plan);
void sdp_conv_im2col_fwd(const sdp_conv_plan *plan, float *out, const float *inp, const float *w,
                         float *scratch);
void sdp_conv_im2col_bwd(const sdp_conv_plan *plan, float *dinp, float *dw, const float *dout,
                         const float *inp, const float *w, float *scratch);

/* One image: col [IC*KH*KW, OH*OW] gets the input values each output pixel sees (0 in the padding),
 * rows in weight order (c, i, j). */
void sdp_im2col(float *col, const float *img, const sdp_conv_plan *plan);
/* The transpose: img [IC, H, W] += each col entry at the input pixel it came from. */
void sdp_col2im_add(float *img, const float *col, const sdp_conv_plan *plan);
/* True when the conv is a plain matrix product per image (1x1, stride 1, no padding): then the
 * image itself is its col matrix. */
bool sdp_conv_is_pointwise(const sdp_conv_plan *plan);

#endif
