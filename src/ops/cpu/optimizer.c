/* The optimizer entries on the CPU: the optimizers of src/optim, run on the given state. */
#include "ops/cpu/cpu_ops.h"

/* sdp_optim_step over state the caller holds, t being the step's count after the increment
 * (sdp_optim_step increments it itself). */
static void run_optim(const sdp_opt_cfg *cfg, long t, float *m, float *v, float *params,
                      const float *grads, const sdp_opt_segment *segs, int nseg, float lr) {
    size_t n = 0; /* the state the segments reach: all the update may touch */
    for (int i = 0; i < nseg; i++)
        if (segs[i].state_offset + segs[i].count > n) n = segs[i].state_offset + segs[i].count;
    sdp_optim o = {.cfg = *cfg, .n = n, .m = m, .v = v, .t = t - 1};
    sdp_optim_step(&o, params, grads, segs, nseg, lr);
}

static void adamw_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *m, float *v,
                         float *params, const float *grads, const sdp_opt_segment *segs, int nseg,
                         float lr) {
    (void)be;
    run_optim(cfg, t, m, v, params, grads, segs, nseg, lr);
}

static void sgd_update(const sdp_backend *be, const sdp_opt_cfg *cfg, long t, float *buf,
                       float *params, const float *grads, const sdp_opt_segment *segs, int nseg,
                       float lr) {
    (void)be;
    run_optim(cfg, t, buf, NULL, params, grads, segs, nseg, lr);
}

void cpu_ops_optim(sdp_backend *t) {
    t->adamw_update = adamw_update;
    t->sgd_update = sgd_update;
}
