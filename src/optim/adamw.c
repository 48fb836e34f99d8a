/* AdamW as in torch.optim.AdamW: decoupled weight decay shrinks the old parameter, then the
 * bias-corrected Adam step is applied. Element math is in float; the bias-correction factors,
 * which involve beta^t for large t, are computed in double. */
#include "optim/kernels.h"

#include <math.h>
#include <stddef.h>

typedef struct {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float step_size;        /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2;     /* 1 / sqrt(1 - beta2^t) */
    float decay_multiplier; /* 1 - lr * weight_decay, applied only to decaying segments */
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
    c.decay_multiplier = (float)(1.0 - (double)lr * (double)cfg->weight_decay);
    return c;
}

/* GCC vectorizes this loop only under -fno-math-errno (sqrtf's errno side effect blocks it);
 * v is never negative, so the flag changes no result and makes the step about 8x faster. */
static void adamw_segment(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t count, float decay_multiplier,
                          const adamw_coeffs *c) {
    const adamw_coeffs k = *c;
#pragma omp parallel for schedule(static) if (count >= SDP_OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < count; i++) {
        float gi = g[i];
        float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
        float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * k.inv_sqrt_bc2 + k.eps;
        p[i] = p[i] * decay_multiplier - k.step_size * mi / denom;
    }
}

void optim_adamw_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                      int nseg, float lr) {
    const adamw_coeffs c = adamw_coeffs_at(&o->cfg, o->t, lr);
    for (int s = 0; s < nseg; s++) {
        size_t off = segs[s].offset;
        float decay_multiplier = segs[s].decay ? c.decay_multiplier : 1.0f;
        adamw_segment(params + off, grads + segs[s].grad_offset, o->m + segs[s].state_offset,
                      o->v + segs[s].state_offset, segs[s].count, decay_multiplier, &c);
    }
}
