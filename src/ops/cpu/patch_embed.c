/* ViT patch embedding: a conv with kernel = stride = p is a linear layer on the flattened patches.
 * The patches are gathered into scratch as rows [B*P, C*p*p] (columns in weight order c, i, j) and
 * the work is sdp_linear_fwd / sdp_linear_bwd; the input gradient is the patch-row gradient
 * scattered back. Patches do not overlap, so gather and scatter split over rows of patches without
 * races. */
#include "sdp/check.h"
#include "sdp/ops_vision.h"

#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void check_dims(const char *what, int B, int C, int H, int W, int p) {
    SDP_CHECK(B >= 1 && C >= 1 && H >= 1 && W >= 1 && p >= 1,
              "%s: sizes B=%d C=%d H=%d W=%d and patch size %d must all be >= 1", what, B, C, H, W,
              p);
    SDP_CHECK(H % p == 0 && W % p == 0,
              "%s: image %dx%d is not a multiple of the patch size %d: crop or resize the images, "
              "or use a patch size that divides both sides",
              what, H, W, p);
}

size_t sdp_patch_embed_scratch_floats(int B, int C, int H, int W, int p) {
    check_dims("sdp_patch_embed_scratch_floats", B, C, H, W, p);
    return (size_t)B * C * H * W;
}

/* Gathers (to_rows) or scatter-adds (!to_rows) between the image and the patch rows. */
static void move_patches(float *rows, float *img, bool to_rows, int B, int C, int H, int W, int p) {
    int PH = H / p, PW = W / p, cols = C * p * p;
#pragma omp parallel for schedule(static) if ((size_t)B * C * H * W >= PARALLEL_MIN_ELEMS)
    for (int bpy = 0; bpy < B * PH; bpy++) {
        int b = bpy / PH, py = bpy % PH;
        for (int px = 0; px < PW; px++) {
            float *row = rows + ((size_t)bpy * PW + px) * cols;
            for (int c = 0; c < C; c++)
                for (int i = 0; i < p; i++) {
                    float *pix = img + (((size_t)b * C + c) * H + py * p + i) * W + px * p;
                    float *r = row + (c * p + i) * p;
                    if (to_rows)
                        for (int j = 0; j < p; j++) r[j] = pix[j];
                    else
                        for (int j = 0; j < p; j++) pix[j] += r[j];
                }
        }
    }
}

void sdp_patch_gather(float *rows, const float *inp, int B, int C, int H, int W, int p) {
    check_dims("sdp_patch_gather", B, C, H, W, p);
    move_patches(rows, (float *)inp, true, B, C, H, W, p); /* gathering only reads inp */
}

void sdp_patch_embed_fwd(sdp_gemm_provider prov, float *out, const float *inp, const float *w,
                         const float *bias, int B, int C, int H, int W, int p, int D,
                         float *scratch) {
    check_dims("sdp_patch_embed_fwd", B, C, H, W, p);
    int n = B * (H / p) * (W / p), cols = C * p * p;
    move_patches(scratch, (float *)inp, true, B, C, H, W, p); /* gathering only reads inp */
    sdp_linear_fwd(prov, out, scratch, w, bias, n, cols, D);
}

void sdp_patch_embed_bwd(sdp_gemm_provider prov, float *dinp, float *dw, float *dbias,
                         const float *dout, const float *inp, const float *w, int B, int C, int H,
                         int W, int p, int D, float *scratch) {
    check_dims("sdp_patch_embed_bwd", B, C, H, W, p);
    SDP_CHECK(!dinp || w, "sdp_patch_embed_bwd: dinp needs the weights: pass w");
    SDP_CHECK(!dw || inp, "sdp_patch_embed_bwd: dw needs the input: pass inp");
    int n = B * (H / p) * (W / p), cols = C * p * p;
    if (dw) move_patches(scratch, (float *)inp, true, B, C, H, W, p);
    if (dw || dbias) sdp_linear_bwd(prov, NULL, dw, dbias, dout, scratch, w, n, cols, D);
    if (dinp) {
        /* patch-row gradient [n, cols] = dout [n, D] w [D, cols], then back to the image. */
        sdp_gemm(prov, false, false, n, cols, D, 1.0f, dout, D, w, cols, 0.0f, scratch, cols);
        move_patches(scratch, dinp, false, B, C, H, W, p);
    }
}
