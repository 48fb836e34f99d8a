/* Rotary position embedding, rotate-half convention (HF LLaMA), in place on the q and k parts of
 * qkv [B, T, 3*D]: position t rotates the pair (x[i], x[i + hs/2]) of every q and k head by
 * t * theta^(-2i/hs). The backward rotates by the opposite angle (the transpose).
 *
 * As on the CPU, the angles are computed in double, once per (position, pair), into a cos/sin
 * table in the workspace that every batch row and head then reads. */
#include "ops/cuda/common.cuh"

#include <math.h>

__global__ void rope_table_kernel(float *cos_t, float *sin_t, int T, int half, int hs,
                                  double theta) {
    size_t n = (size_t)T * half;
    FOR_EACH_INDEX(j, n) {
        int t = (int)(j / half), i = (int)(j % half);
        double angle = t * pow(theta, -2.0 * i / hs);
        cos_t[j] = (float)cos(angle);
        sin_t[j] = (float)sin(angle);
    }
}

/* One thread per pair: (row, head slot among the 2H q and k heads, i < half). sign is +1 for the
 * forward rotation and -1 for its inverse. */
__global__ void rope_rotate_kernel(float *qkv, const float *cos_t, const float *sin_t, int T, int H,
                                   int hs, float sign, size_t total) {
    int half = hs / 2;
    size_t D = (size_t)H * hs;
    FOR_EACH_INDEX(j, total) {
        int i = (int)(j % half);
        size_t rest = j / half;
        int h = (int)(rest % (2 * H));
        size_t row = rest / (2 * H);
        size_t t = row % T;
        float *x = qkv + row * 3 * D + (size_t)h * hs;
        float c = cos_t[t * half + i], s = sign * sin_t[t * half + i];
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

static void rope_apply(sdp_cuda_ctx *ctx, float *qkv, int B, int T, int H, int hs, float theta,
                       float sign) {
    int half = hs / 2;
    size_t table = (size_t)T * half;
    float *cos_t = (float *)sdp_cuda_workspace(ctx, 2 * table * sizeof(float));
    float *sin_t = cos_t + table;
    rope_table_kernel<<<elementwise_blocks(table), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        cos_t, sin_t, T, half, hs, (double)theta);
    LAUNCH_CHECK();
    size_t total = (size_t)B * T * 2 * H * half;
    rope_rotate_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        qkv, cos_t, sin_t, T, H, hs, sign, total);
    LAUNCH_CHECK();
}

static void cuda_rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs,
                          float theta) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    rope_apply(ctx, qkv, B, T, H, hs, theta, 1.0f);
}

static void cuda_rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs,
                          float theta) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    rope_apply(ctx, dqkv, B, T, H, hs, theta, -1.0f);
}

void cuda_ops_rope(sdp_backend *t) {
    t->rope_fwd = cuda_rope_fwd;
    t->rope_bwd = cuda_rope_bwd;
}
