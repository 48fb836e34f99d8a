/* AdamW with the formula of src/optim/adamw.c (torch.optim.AdamW): decoupled weight decay
 * shrinks the old parameter, then the bias-corrected Adam step is applied. The coefficients are
 * computed on the host in double exactly as on the CPU; the element math is the same float math.
 * One launch per segment: segments are few (one per tensor). */
#include "ops/cuda/common.cuh"

#include <math.h>

typedef struct {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float step_size;    /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* 1 / sqrt(1 - beta2^t) */
} adamw_coeffs;

static adamw_coeffs adamw_coeffs_at(const sdp_opt_cfg *cfg, long t, float lr) {
    double bc1 = 1.0 - pow((double)cfg->beta1, (double)t);
    double bc2 = 1.0 - pow((double)cfg->beta2, (double)t);
    adamw_coeffs c;
    c.beta1 = cfg->beta1;
    c.one_minus_beta1 = 1.0f - cfg->beta1;
    c.beta2 = cfg->beta2;
    c.one_minus_beta2 = 1.0f - cfg->beta2;
    c.eps = cfg->eps;
    c.step_size = (float)((double)lr / bc1);
    c.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    return c;
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t count,
                             float decay_multiplier, adamw_coeffs k) {
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

/* One AdamW step with the formula of src/optim/adamw.c (torch.optim.AdamW). The state is what
 * sdp_optim holds, passed apart because it lives on the device: cfg, t (the 1-based number of
 * this step, as o->t after sdp_optim_step has advanced it) and the moments m and v (device).
 * params, grads, m and v are device pointers; segs is a host array, offsets as in sdp_optim_step.
 */
static void cuda_adamw_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *m,
                              float *v, float *params, const float *grads,
                              const sdp_opt_segment *segs, int nseg, float lr) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(cfg && cfg->kind == SDP_OPT_ADAMW && t >= 1 && (nseg == 0 || segs));
    const adamw_coeffs c = adamw_coeffs_at(cfg, t, lr);
    float decay = (float)(1.0 - (double)lr * (double)cfg->weight_decay);
    for (int s = 0; s < nseg; s++) {
        if (segs[s].count == 0) continue;
        adamw_kernel<<<elementwise_blocks(segs[s].count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
            params + segs[s].offset, grads + segs[s].grad_offset, m + segs[s].state_offset,
            v + segs[s].state_offset, segs[s].count, segs[s].decay ? decay : 1.0f, c);
        LAUNCH_CHECK();
    }
}

void cuda_ops_adamw(sdp_backend *t) {
    t->adamw_update = cuda_adamw_update;
}
