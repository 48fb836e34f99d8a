/* The optimizers' updates on the CPU, with the step's scalars that src/optim derived
 * (sdp_adamw_scalars_at, sdp_sgd_scalars_at): the CPU backend's entries and, for state on host
 * memory, sdp_optim_step. The CUDA kernels (src/ops/cuda/adamw.cu, sgd.cu) compute the same
 * element math from the same scalars. */
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

/* Segments shorter than this are updated by one thread: a parallel region costs more than the
 * loop itself for biases and norms. The result does not depend on it (updates are elementwise). */
enum { OPTIM_PARALLEL_MIN = 1 << 14 };

/* AdamW as in torch.optim.AdamW: decoupled weight decay shrinks the old parameter, then the
 * bias-corrected Adam step is applied. GCC vectorizes this loop only under -fno-math-errno
 * (sqrtf's errno side effect blocks it); v is never negative, so the flag changes no result and
 * makes the step about 8x faster. */
static void adamw_segment(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t count, float decay_multiplier,
                          const sdp_adamw_scalars *c) {
    const sdp_adamw_scalars k = *c;
#pragma omp parallel for schedule(static) if (count >= OPTIM_PARALLEL_MIN)
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

void sdp_cpu_adamw_update(const sdp_adamw_scalars *k, float *m, float *v, float *params,
                          const float *grads, const sdp_opt_segment *segs, int nseg) {
    for (int s = 0; s < nseg; s++) {
        float decay_multiplier = segs[s].decay ? k->decay_multiplier : 1.0f;
        adamw_segment(params + segs[s].offset, grads + segs[s].grad_offset,
                      m + segs[s].state_offset, v + segs[s].state_offset, segs[s].count,
                      decay_multiplier, k);
    }
}

/* SGD as in torch.optim.SGD with dampening 0: weight decay is L2 added to the gradient, the
 * momentum buffer starts as the first gradient, and Nesterov looks one buffer step ahead. */
static void sgd_plain_segment(float *restrict p, const float *restrict g, size_t count, float lr,
                              float wd) {
#pragma omp parallel for schedule(static) if (count >= OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < count; i++) p[i] -= lr * (g[i] + wd * p[i]);
}

/* first_step: torch creates the buffer from the gradient, so whatever buf holds is ignored. */
static void sgd_momentum_segment(float *restrict p, const float *restrict g, float *restrict buf,
                                 size_t count, float lr, float wd, float momentum, bool nesterov,
                                 bool first_step) {
#pragma omp parallel for schedule(static) if (count >= OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < count; i++) {
        float gi = g[i] + wd * p[i];
        float b = first_step ? gi : momentum * buf[i] + gi;
        buf[i] = b;
        float update = nesterov ? gi + momentum * b : b;
        p[i] -= lr * update;
    }
}

void sdp_cpu_sgd_update(const sdp_sgd_scalars *k, float *buf, float *params, const float *grads,
                        const sdp_opt_segment *segs, int nseg) {
    for (int s = 0; s < nseg; s++) {
        float *p = params + segs[s].offset;
        const float *g = grads + segs[s].grad_offset;
        /* Adding 0 * p leaves the gradient unchanged (up to the sign of a zero gradient). */
        float wd = segs[s].decay ? k->weight_decay : 0.0f;
        if (buf)
            sgd_momentum_segment(p, g, buf + segs[s].state_offset, segs[s].count, k->lr, wd,
                                 k->momentum, k->nesterov, k->first_step);
        else
            sgd_plain_segment(p, g, segs[s].count, k->lr, wd);
    }
}

static void adamw_update(const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v,
                         float *params, const float *grads, const sdp_opt_segment *segs, int nseg) {
    (void)be;
    sdp_cpu_adamw_update(k, m, v, params, grads, segs, nseg);
}

static void sgd_update(const sdp_backend *be, const sdp_sgd_scalars *k, float *buf, float *params,
                       const float *grads, const sdp_opt_segment *segs, int nseg) {
    (void)be;
    sdp_cpu_sgd_update(k, buf, params, grads, segs, nseg);
}

void cpu_ops_optim(sdp_backend *t) {
    t->adamw_update = adamw_update;
    t->sgd_update = sgd_update;
}
