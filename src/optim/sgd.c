/* SGD as in torch.optim.SGD with dampening 0: weight decay is L2 added to the gradient, the
 * momentum buffer starts as the first gradient, and Nesterov looks one buffer step ahead. */
#include "optim/kernels.h"

#include <stdbool.h>
#include <stddef.h>

static void sgd_plain_segment(float *restrict p, const float *restrict g, size_t count, float lr,
                              float wd) {
#pragma omp parallel for schedule(static) if (count >= SDP_OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < count; i++) p[i] -= lr * (g[i] + wd * p[i]);
}

/* first_step: torch creates the buffer from the gradient, so whatever buf holds is ignored. */
static void sgd_momentum_segment(float *restrict p, const float *restrict g, float *restrict buf,
                                 size_t count, float lr, float wd, float momentum, bool nesterov,
                                 bool first_step) {
#pragma omp parallel for schedule(static) if (count >= SDP_OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < count; i++) {
        float gi = g[i] + wd * p[i];
        float b = first_step ? gi : momentum * buf[i] + gi;
        buf[i] = b;
        float update = nesterov ? gi + momentum * b : b;
        p[i] -= lr * update;
    }
}

void optim_sgd_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                    int nseg, float lr) {
    const sdp_opt_cfg *cfg = &o->cfg;
    for (int s = 0; s < nseg; s++) {
        size_t off = segs[s].offset;
        /* Adding 0 * p leaves the gradient unchanged (up to the sign of a zero gradient). */
        float wd = segs[s].decay ? cfg->weight_decay : 0.0f;
        if (o->m)
            sgd_momentum_segment(params + off, grads + segs[s].grad_offset,
                                 o->m + segs[s].state_offset, segs[s].count, lr, wd, cfg->momentum,
                                 cfg->nesterov, o->t == 1);
        else
            sgd_plain_segment(params + off, grads + segs[s].grad_offset, segs[s].count, lr, wd);
    }
}
