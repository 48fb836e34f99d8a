/* Optimizer lifetime and steps: defaults, validation of the configuration, state allocation
 * (accounted as SDP_MEM_OPTIM), and the step counter shared by all kinds, from which each step's
 * scalars are derived for the kernels of sdp/ops.h. */
#include "sdp/optim.h"

#include "sdp/check.h"

#include <math.h>
#include <string.h>

sdp_opt_cfg sdp_opt_defaults(sdp_opt_kind kind) {
    sdp_opt_cfg c = {.kind = kind};
    if (kind == SDP_OPT_ADAMW) {
        c.beta1 = 0.9f;
        c.beta2 = 0.95f;
        c.eps = 1e-8f;
        c.weight_decay = 0.1f;
    } else {
        c.momentum = 0.9f;
        c.nesterov = false;
        c.weight_decay = 5e-4f;
    }
    return c;
}

static bool sgd_has_buffer(const sdp_opt_cfg *cfg) {
    return cfg->momentum != 0.0f;
}

void sdp_opt_cfg_check(const sdp_opt_cfg *cfg) {
    SDP_CHECK(cfg->kind == SDP_OPT_ADAMW || cfg->kind == SDP_OPT_SGD,
              "unknown optimizer kind %d: use adamw or sgd", (int)cfg->kind);
    SDP_CHECK(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay),
              "weight decay %g is invalid: use a finite value >= 0", (double)cfg->weight_decay);
    if (cfg->kind == SDP_OPT_ADAMW) {
        SDP_CHECK(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f,
                  "adamw beta1 %g is outside [0, 1): use e.g. 0.9", (double)cfg->beta1);
        SDP_CHECK(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f,
                  "adamw beta2 %g is outside [0, 1): use e.g. 0.95", (double)cfg->beta2);
        SDP_CHECK(cfg->eps > 0.0f && isfinite(cfg->eps),
                  "adamw eps %g is invalid: use a small positive value such as 1e-8",
                  (double)cfg->eps);
    } else {
        SDP_CHECK(cfg->momentum >= 0.0f && cfg->momentum < 1.0f,
                  "sgd momentum %g is outside [0, 1): use e.g. 0.9", (double)cfg->momentum);
        SDP_CHECK(!cfg->nesterov || sgd_has_buffer(cfg),
                  "sgd nesterov needs momentum > 0: set a momentum or turn nesterov off");
    }
}

size_t sdp_optim_state_bytes_per_param(const sdp_opt_cfg *cfg) {
    if (cfg->kind == SDP_OPT_ADAMW) return 2 * sizeof(float);
    return sgd_has_buffer(cfg) ? sizeof(float) : 0;
}

void sdp_optim_init(sdp_optim *o, const sdp_opt_cfg *cfg, size_t n, sdp_mem *mem) {
    sdp_opt_cfg_check(cfg);
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->n = n;
    if (cfg->kind == SDP_OPT_ADAMW) {
        o->m = sdp_alloc(mem, SDP_MEM_OPTIM, n * sizeof(float));
        o->v = sdp_alloc(mem, SDP_MEM_OPTIM, n * sizeof(float));
    } else if (sgd_has_buffer(cfg)) {
        o->m = sdp_alloc(mem, SDP_MEM_OPTIM, n * sizeof(float));
    }
}

void sdp_optim_free(sdp_optim *o, sdp_mem *mem) {
    sdp_free(mem, o->m);
    sdp_free(mem, o->v);
    memset(o, 0, sizeof *o);
}

/* Checks the step's arguments and advances the count: t is then the 1-based number of the step
 * being taken. */
static void step_begin(sdp_optim *o, const sdp_opt_segment *segs, int nseg, float lr) {
    SDP_ASSERT(nseg >= 0 && (nseg == 0 || segs));
    for (int s = 0; s < nseg; s++)
        SDP_ASSERT(segs[s].state_offset <= o->n && segs[s].count <= o->n - segs[s].state_offset);
    SDP_CHECK(isfinite(lr) && lr >= 0.0f, "learning rate %g is invalid: use a finite value >= 0",
              (double)lr);
    o->t++;
}

void sdp_optim_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                    int nseg, float lr) {
    step_begin(o, segs, nseg, lr);
    if (o->cfg.kind == SDP_OPT_ADAMW) {
        const sdp_adamw_scalars k = sdp_adamw_scalars_at(&o->cfg, o->t, lr);
        sdp_cpu_adamw_update(&k, o->m, o->v, params, grads, segs, nseg);
    } else {
        const sdp_sgd_scalars k = sdp_sgd_scalars_at(&o->cfg, o->t, lr);
        sdp_cpu_sgd_update(&k, o->m, params, grads, segs, nseg);
    }
}

void sdp_optim_step_on(const sdp_backend *be, sdp_optim *o, float *params, const float *grads,
                       const sdp_opt_segment *segs, int nseg, float lr) {
    step_begin(o, segs, nseg, lr);
    if (o->cfg.kind == SDP_OPT_ADAMW) {
        const sdp_adamw_scalars k = sdp_adamw_scalars_at(&o->cfg, o->t, lr);
        sdp_adamw_update(be, &k, o->m, o->v, params, grads, segs, nseg);
    } else {
        const sdp_sgd_scalars k = sdp_sgd_scalars_at(&o->cfg, o->t, lr);
        sdp_sgd_update(be, &k, o->m, params, grads, segs, nseg);
    }
}
