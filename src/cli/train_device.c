/* Where a worker's trainable state lives: host memory (--device cpu, the model's own CPU
 * backend) or a CUDA device (--device cuda: the model on sdp_backend_cuda, gradients and AdamW
 * state in device memory, the update by sdp_cuda_adamw_update). The rest of the trainer reaches
 * that state only through these functions and t->be. */
#include "trainer.h"

#include "sdp/check.h"

#include <math.h>
#include <string.h>

void device_open(trainer *t) {
    if (strcmp(t->o.device, "cpu") == 0) return;
    SDP_CHECK(strcmp(t->o.device, "cuda") == 0, "unknown --device '%s': use cpu or cuda",
              t->o.device);
    SDP_CHECK(strcmp(t->o.model, "resnet") != 0,
              "resnet has no CUDA kernels yet: use --device cpu");
    SDP_CHECK(t->world.size == 1,
              "--device cuda runs one process only (%d MPI ranks were started): multi-rank CUDA "
              "training needs NCCL, which sdp does not use yet; run one worker or --sim-world",
              t->world.size);
    SDP_CHECK(strcmp(t->o.optimizer, "adamw") == 0,
              "--optimizer %s has no CUDA kernel yet: use --optimizer adamw or --device cpu",
              t->o.optimizer);
    SDP_CHECK(t->o.check_replicas == 0,
              "--check-replicas compares ranks, and --device cuda runs one: drop it");
    t->be = sdp_backend_cuda(0, train_opts_precision(&t->o)); /* without CUDA: fails */
}

float *device_alloc(trainer *t, sdp_memcat cat, size_t n) {
    if (!t->be) return sdp_alloc(&t->mem, cat, n * sizeof(float));
    return t->be->alloc(t->be, cat, n * sizeof(float));
}

void device_zero(trainer *t, float *x, size_t n) {
    if (t->be)
        t->be->zero(t->be, x, n * sizeof(float));
    else
        memset(x, 0, n * sizeof(float));
}

float *host_copy(trainer *t, const float *x, size_t n) {
    if (!t->be) return (float *)x;
    float *h = sdp_alloc(&t->io_mem, SDP_MEM_SCRATCH, n * sizeof(float));
    t->be->download(t->be, h, x, n * sizeof(float));
    return h;
}

void host_copy_done(trainer *t, float *h, float *x, size_t n, bool changed) {
    if (!t->be) return;
    if (changed) t->be->upload(t->be, x, h, n * sizeof(float));
    sdp_free(&t->io_mem, h);
}

void device_optim_init(trainer *t, const sdp_opt_cfg *cfg, size_t n) {
    if (!t->be) {
        sdp_optim_init(&t->opt, cfg, n, &t->mem);
        return;
    }
    memset(&t->opt, 0, sizeof t->opt);
    t->opt.cfg = *cfg;
    t->opt.n = n;
    t->opt.m = device_alloc(t, SDP_MEM_OPTIM, n); /* zero-filled, as sdp_optim_init's */
    t->opt.v = device_alloc(t, SDP_MEM_OPTIM, n);
}

void device_optim_step(trainer *t, float lr) {
    if (!t->be) {
        sdp_optim_step(&t->opt, t->model.params, t->grads, t->segs, t->nsegs, lr);
        return;
    }
    t->opt.t++;
    t->be->adamw_update(t->be, &t->opt.cfg, t->opt.t, t->opt.m, t->opt.v, t->model.params, t->grads,
                        t->segs, t->nsegs, lr);
}

/* The norm from a host copy of the gradients: one download per step (and an upload when
 * clipping scales them), a known cost until the device has a sum-of-squares reduction. On one
 * process (the only CUDA case) this is the worker's global norm. */
double device_clip_grads(trainer *t, float max_norm) {
    float *h = host_copy(t, t->grads, t->ngrads);
    const double norm = sqrt(sdp_sumsq(h, t->ngrads));
    const float s = sdp_clip_scale(norm, max_norm);
    if (isfinite(norm) && s != 1.0f) sdp_scale(h, t->ngrads, s);
    host_copy_done(t, h, t->grads, t->ngrads, isfinite(norm) && s != 1.0f);
    return norm;
}

const sdp_mem *device_mem(const trainer *t) {
    return t->be ? t->be->mem : &t->mem;
}

void device_sample_peak(trainer *t) {
    if (!t->be) return;
    const size_t used = t->be->bytes_in_use(t->be);
    if (used > t->device_peak) t->device_peak = used;
}
