/* The ViT stem's ops. The patch embedding is a conv with kernel = stride = p, which is a linear
 * layer on the flattened patches: patch_gather lays the patches out as rows [B*P, C*p*p] (columns
 * in weight order c, i, j) for sdp_linear_fwd. Patches do not overlap, so the gather splits over
 * rows of patches. The class token and the positions are added by vit_embed_fwd. */
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>
#include <string.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C,
                         int H, int W, int p) {
    (void)be;
    int PH = H / p, PW = W / p, cols = C * p * p;
#pragma omp parallel for schedule(static) if ((size_t)B * C * H * W >= PARALLEL_MIN_ELEMS)
    for (int bpy = 0; bpy < B * PH; bpy++) {
        int b = bpy / PH, py = bpy % PH;
        for (int px = 0; px < PW; px++) {
            float *row = rows + ((size_t)bpy * PW + px) * cols;
            for (int c = 0; c < C; c++)
                for (int i = 0; i < p; i++) {
                    const float *pix = images + (((size_t)b * C + c) * H + py * p + i) * W + px * p;
                    float *r = row + (c * p + i) * p;
                    for (int j = 0; j < p; j++) r[j] = pix[j];
                }
        }
    }
}

static void vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches,
                          const float *cls, const float *pos, int B, int T, int C) {
    (void)be;
    const int P = T - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *src = t == 0 ? cls : patches + ((size_t)b * P + t - 1) * C;
            float *dst = embed + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dst[c] = src[c] + pos[(size_t)t * C + c];
        }
}

static void vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                          const float *dembed, int B, int T, int C) {
    (void)be;
    const int P = T - 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dembed + ((size_t)b * T + t) * C;
            if (dpos)
                for (int k = 0; k < C; k++) dpos[(size_t)t * C + k] += d[k];
            if (t == 0 && dcls)
                for (int k = 0; k < C; k++) dcls[k] += d[k];
            if (t > 0) memcpy(dpatches + ((size_t)b * P + t - 1) * C, d, (size_t)C * sizeof(float));
        }
}

void cpu_ops_vit_stem(sdp_backend *t) {
    t->patch_gather = patch_gather;
    t->vit_embed_fwd = vit_embed_fwd;
    t->vit_embed_bwd = vit_embed_bwd;
}
