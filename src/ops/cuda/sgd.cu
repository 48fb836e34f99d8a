/* SGD with the formula of the CPU's kernel (src/ops/cpu/optimizer.c, torch.optim.SGD, dampening
 * 0), from the same step scalars (sdp_sgd_scalars_at): weight decay is L2 added to the gradient,
 * the momentum buffer starts as the first gradient (k->first_step), and Nesterov looks one buffer
 * step ahead. Each product and sum is rounded on its own (__fmul_rn, __fadd_rn) as the CPU's C
 * computes them, where nvcc would fuse them into FMAs, so the two give the same bits. One launch
 * per segment: segments are few (one per tensor). */
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

/* One SGD step with the scalars k of sdp_sgd_update: buf is the momentum buffer (NULL when
 * k->momentum is 0) at the segments' state offsets. Pointers as in adamw_update (adamw.cu). */
static void cuda_sgd_update(const sdp_backend *be, const sdp_sgd_scalars *k, float *buf,
                            float *params, const float *grads, const sdp_opt_segment *segs,
                            int nseg) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    SDP_ASSERT(k && (nseg == 0 || segs));
    SDP_ASSERT(!buf == (k->momentum == 0.0f)); /* sdp_optim_init's state */
    for (int s = 0; s < nseg; s++) {
        const size_t count = segs[s].count;
        if (count == 0) continue;
        /* Adding 0 * p leaves the gradient unchanged (up to the sign of a zero gradient). */
        const float wd = segs[s].decay ? k->weight_decay : 0.0f;
        float *p = params + segs[s].offset;
        const float *g = grads + segs[s].grad_offset;
        if (buf)
            sgd_momentum_kernel<<<elementwise_blocks(count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
                p, g, buf + segs[s].state_offset, count, k->lr, wd, k->momentum, k->nesterov,
                k->first_step);
        else
            sgd_plain_kernel<<<elementwise_blocks(count), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
                p, g, count, k->lr, wd);
        LAUNCH_CHECK();
    }
}

void cuda_ops_sgd(sdp_backend *t) {
    t->sgd_update = cuda_sgd_update;
}
