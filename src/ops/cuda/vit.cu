/* The ViT's stem on the GPU: the patch gather that turns the strided patch conv into a linear
 * layer, and the class token and positions added to the patch embeddings (and their backward).
 * Every output element has one thread; the batch sums of the backward run in batch order, so
 * results are the same on every run. */
#include "ops/cuda/common.cuh"

/* One thread per element of rows [B * PH * PW, C*p*p]: reads its pixel. */
__global__ void patch_gather_kernel(float *rows, const float *images, int C, int H, int W, int p,
                                    size_t total) {
    const int PW = W / p, PH = H / p, cols = C * p * p;
    FOR_EACH_INDEX(e, total) {
        size_t row = e / cols;
        int col = (int)(e % cols);
        int c = col / (p * p), i = (col / p) % p, j = col % p;
        int px = (int)(row % PW), py = (int)((row / PW) % PH);
        size_t b = row / ((size_t)PW * PH);
        rows[e] = images[((b * C + c) * H + (size_t)py * p + i) * W + (size_t)px * p + j];
    }
}

__global__ void vit_embed_fwd_kernel(float *embed, const float *patches, const float *cls,
                                     const float *pos, int T, int C, size_t total) {
    FOR_EACH_INDEX(e, total) {
        size_t row = e / C;
        int c = (int)(e % C), t = (int)(row % T);
        size_t b = row / T;
        float x = t == 0 ? cls[c] : patches[(b * (T - 1) + t - 1) * C + c];
        embed[e] = x + pos[(size_t)t * C + c];
    }
}

/* dpatches: a copy of rows 1.. of each image. */
__global__ void vit_dpatches_kernel(float *dpatches, const float *dembed, int T, int C,
                                    size_t total) {
    FOR_EACH_INDEX(e, total) {
        size_t row = e / C; /* patch row b * (T - 1) + t - 1 */
        size_t b = row / (T - 1), t = row % (T - 1) + 1;
        dpatches[e] = dembed[(b * T + t) * C + e % C];
    }
}

/* One thread per (t, c): dpos[t, c] += sum over b, and the class token's column at t = 0. */
__global__ void vit_dpos_dcls_kernel(float *dcls, float *dpos, const float *dembed, int B, int T,
                                     int C) {
    const size_t TC = (size_t)T * C;
    FOR_EACH_INDEX(e, TC) {
        if (!dpos && e >= (size_t)C) return; /* only the class token's columns are wanted */
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dembed[b * TC + e];
        if (dpos) dpos[e] += s;
        if (dcls && e < (size_t)C) dcls[e] += s;
    }
}

/* As sdp_patch_gather: rows [B * (H/p) * (W/p), C*p*p] = the p x p patches of images
 * [B, C, H, W], each row in the order (c, i, j) of a conv weight. */
static void cuda_patch_gather(const sdp_backend *be, float *rows, const float *images, int B, int C,
                              int H, int W, int p) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const size_t total = (size_t)B * C * H * W; /* patches tile the image exactly */
    patch_gather_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        rows, images, C, H, W, p, total);
    LAUNCH_CHECK();
}

/* embed[b, 0] = cls + pos[0]; embed[b, t] = patches[b, t - 1] + pos[t] for 0 < t < T. */
static void cuda_vit_embed_fwd(const sdp_backend *be, float *embed, const float *patches,
                               const float *cls, const float *pos, int B, int T, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const size_t total = (size_t)B * T * C;
    if (total == 0) return;
    vit_embed_fwd_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        embed, patches, cls, pos, T, C, total);
    LAUNCH_CHECK();
}

/* Its backward: dcls and dpos accumulate the batch's rows in order (NULL: skipped); dpatches
 * [B, T - 1, C] is overwritten with rows 1.. of each image's dembed. */
static void cuda_vit_embed_bwd(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                               const float *dembed, int B, int T, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(B >= 1 && T >= 2 && C >= 1);
    const size_t patches = (size_t)B * (T - 1) * C;
    vit_dpatches_kernel<<<elementwise_blocks(patches), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dpatches, dembed, T, C, patches);
    LAUNCH_CHECK();
    if (!dcls && !dpos) return;
    const size_t TC = (size_t)T * C;
    vit_dpos_dcls_kernel<<<elementwise_blocks(TC), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dcls, dpos, dembed, B, T, C);
    LAUNCH_CHECK();
}

void cuda_ops_vit(sdp_backend *t) {
    t->patch_gather = cuda_patch_gather;
    t->vit_embed_fwd = cuda_vit_embed_fwd;
    t->vit_embed_bwd = cuda_vit_embed_bwd;
}
