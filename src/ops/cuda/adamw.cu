/* AdamW with the formula of the CPU's kernel (src/ops/cpu/optimizer.c, torch.optim.AdamW):
 * decoupled weight decay shrinks the old parameter, then the bias-corrected Adam step is applied.
 * The step's scalars are the ones src/optim computed for it on the host, in double
 * (sdp_adamw_scalars_at), the very values the CPU takes; the element math is the same float math.
 * One launch per segment: segments are few (one per tensor). */
#include "ops/cuda/common.cuh"

#include <math.h>

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t count,
                             float decay_multiplier, sdp_adamw_scalars k) {
    FOR_EACH_INDEX(i, count) {
        float gi = g[i];
        float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
        float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * k.inv_sqrt_bc2 + k.eps;
        p[i] = p[i] * decay_multiplier - k.step_size * mi / denom;
    }
}

/* One AdamW step with the scalars k of sdp_adamw_update. params, grads, m and v are device
 * pointers; segs is a host array. */
static void cuda_adamw_update(const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v,
                              float *params, const float *grads, const sdp_opt_segment *segs,
                              int nseg) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(k && (nseg == 0 || segs));
    for (int s = 0; s < nseg; s++) {
        if (segs[s].count == 0) continue;
        adamw_kernel<<<elementwise_blocks(segs[s].count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
            params + segs[s].offset, grads + segs[s].grad_offset, m + segs[s].state_offset,
            v + segs[s].state_offset, segs[s].count, segs[s].decay ? k->decay_multiplier : 1.0f,
            *k);
        LAUNCH_CHECK();
    }
}

void cuda_ops_adamw(sdp_backend *t) {
    t->adamw_update = cuda_adamw_update;
}
