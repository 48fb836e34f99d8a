/* Private interface between the conv2d front end (conv2d.c: the plan, the table entries and the
 * bias) and its two implementations: oneDNN primitives (conv2d_dnnl.c) and im2col + GEMM
 * (conv2d_im2col.c, with the layout transforms in im2col.c). */
#ifndef SDP_OPS_CPU_CONV2D_H
#define SDP_OPS_CPU_CONV2D_H

#include "ops/cpu/cpu_ops.h"

typedef struct sdp_conv_dnnl sdp_conv_dnnl; /* oneDNN objects, private to conv2d_dnnl.c */

/* Everything that depends only on the shape, made once per layer: output size, scratch size and,
 * for SDP_CONV_DNNL, the primitives. A plan is made for the OpenMP thread count current at its
 * creation (sdp_set_threads), and the kernels refuse to run under another count. */
typedef struct {
    sdp_conv_shape shape;
    int OH, OW;
    sdp_conv_algo algo;
    sdp_gemm_provider gemm; /* SDP_CONV_IM2COL only */
    int threads;
    size_t scratch_floats; /* enough for the forward and for any backward */
    sdp_conv_dnnl *dnnl;   /* SDP_CONV_DNNL only */
} cpu_conv_plan;

/* ---- oneDNN -------------------------------------------------------------------------------- */

/* Creates the primitives for plan->shape and stores in *scratch_floats what they need. */
sdp_conv_dnnl *sdp_conv_dnnl_create(const cpu_conv_plan *plan, size_t *scratch_floats);
void sdp_conv_dnnl_destroy(sdp_conv_dnnl *d);
void sdp_conv_dnnl_fwd(const sdp_conv_dnnl *d, float *out, const float *inp, const float *w,
                       float *scratch);
void sdp_conv_dnnl_bwd(const sdp_conv_dnnl *d, float *dinp, float *dw, const float *dout,
                       const float *inp, const float *w, float *scratch);

/* ---- im2col + GEMM ------------------------------------------------------------------------- */

size_t sdp_conv_im2col_scratch_floats(const cpu_conv_plan *plan);
void sdp_conv_im2col_fwd(const cpu_conv_plan *plan, float *out, const float *inp, const float *w,
                         float *scratch);
void sdp_conv_im2col_bwd(const cpu_conv_plan *plan, float *dinp, float *dw, const float *dout,
                         const float *inp, const float *w, float *scratch);

/* One image: col [IC*KH*KW, OH*OW] gets the input values each output pixel sees (0 in the padding),
 * rows in weight order (c, i, j). */
void sdp_im2col(float *col, const float *img, const cpu_conv_plan *plan);
/* The transpose: img [IC, H, W] += each col entry at the input pixel it came from. */
void sdp_col2im_add(float *img, const float *col, const cpu_conv_plan *plan);
/* True when the conv is a plain matrix product per image (1x1, stride 1, no padding): then the
 * image itself is its col matrix. */
bool sdp_conv_is_pointwise(const cpu_conv_plan *plan);

#endif
