/* SGD with the formula of src/optim/sgd.c (torch.optim.SGD, dampening 0): weight decay is L2
 * added to the gradient, the momentum buffer starts as the first gradient (t == 1), and Nesterov
 * looks one buffer step ahead. Each product and sum is rounded on its own (__fmul_rn, __fadd_rn)
 * as the CPU's C computes them, where nvcc would fuse them into FMAs, so the two give the same
 * bits. One launch per segment: segments are few (one per tensor). */
#include "ops/cuda/common.cuh"

#include <math.h>

__global__ void sgd_plain_kernel(float *p, const float *g, size_t count, float lr, float wd) {
    FOR_EACH_INDEX(i, count) {
        const float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, gi));
    }
}

__global__ void sgd_momentum_kernel(float *p, const float *g, float *buf, size_t count, float lr,
                                    float wd, float momentum, bool nesterov, bool first_step) {
    FOR_EACH_INDEX(i, count) {
        const float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        const float b = first_step ? gi : __fadd_rn(__fmul_rn(momentum, buf[i]), gi);
        buf[i] = b;
        const float update = nesterov ? __fadd_rn(gi, __fmul_rn(momentum, b)) : b;
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, update));
    }
}

/* One SGD step with the formula of src/optim/sgd.c (torch.optim.SGD, dampening 0), arguments as
 * adamw_update's (adamw.cu): buf is the momentum buffer (NULL when cfg->momentum is 0) at the
 * segments' state offsets, and t == 1 makes it start as the gradient. */
static void cuda_sgd_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *buf,
                            float *params, const float *grads, const sdp_opt_segment *segs,
                            int nseg, float lr) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(cfg && cfg->kind == SDP_OPT_SGD && t >= 1 && (nseg == 0 || segs));
    SDP_ASSERT(!buf == (cfg->momentum == 0.0f)); /* sdp_optim_init's state */
    for (int s = 0; s < nseg; s++) {
        const size_t count = segs[s].count;
        if (count == 0) continue;
        /* Adding 0 * p leaves the gradient unchanged (up to the sign of a zero gradient). */
        const float wd = segs[s].decay ? cfg->weight_decay : 0.0f;
        float *p = params + segs[s].offset;
        const float *g = grads + segs[s].grad_offset;
        if (buf)
            sgd_momentum_kernel<<<elementwise_blocks(count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
                p, g, buf + segs[s].state_offset, count, lr, wd, cfg->momentum, cfg->nesterov,
                t == 1);
        else
            sgd_plain_kernel<<<elementwise_blocks(count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
                p, g, count, lr, wd);
        LAUNCH_CHECK();
    }
}

void cuda_ops_sgd(sdp_backend *t) {
    t->sgd_update = cuda_sgd_update;
}
