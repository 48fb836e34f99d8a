/* Where a worker's trainable state lives: host memory (--device cpu: sdp_backend_cpu over
 * t->mem) or a device (--device cuda: the model on sdp_backend_cuda, gradients and AdamW
 * state in device memory, the update by the backend's adamw_update or sgd_update; each rank on a
 * device of its own where the node has enough; --device emulated: the same paths over
 * sdp_backend_emulated, on the CPU). The rest of the trainer reaches that state only
 * through these functions and t->be; sdp/sync.h reaches it through the backend
 * (sdp_sync_use_backend). */
#include "trainer.h"

#include "sdp/check.h"

#include <math.h>
#include <string.h>

void train_device_check(const train_opts *o) {
    const char *d = o->device;
    if (!strcmp(d, "cpu") || !strcmp(d, "emulated") || !strcmp(d, "emulated-shared")) return;
    SDP_CHECK(strcmp(d, "cuda") == 0,
              "unknown --device '%s': use cpu or cuda (or emulated, emulated-shared: the device "
              "code paths on the CPU, for tests)",
              d);
    SDP_CHECK(sdp_backend_cuda_built(), SDP_CUDA_ABSENT);
}

void train_device_open(trainer *t) {
    train_device_check(&t->o);
    if (strcmp(t->o.device, "cpu") == 0) {
        /* Host memory, counted with the rest of training in t->mem. */
        t->be = sdp_backend_cpu(train_run_gemm(&t->o), &t->mem);
        return;
    }
    const bool emulated = strcmp(t->o.device, "emulated") == 0;
    if (emulated || strcmp(t->o.device, "emulated-shared") == 0) {
        t->be = sdp_backend_emulated(train_run_gemm(&t->o), !emulated);
        return;
    }
    /* One device per rank of a node when there are enough; ranks beyond that share them (and
     * then reduce through host memory, see sdp_sync_use_backend). Without CUDA, or without a
     * device, sdp_backend_cuda fails with its own message. */
    const int devices = sdp_backend_cuda_devices();
    t->be = sdp_backend_cuda(devices > 0 ? t->world.local_rank % devices : 0,
                             train_opts_precision(&t->o));
    if (t->cuda_attention_gemm) sdp_backend_cuda_set_fused_attention(t->be, false);
}

void train_device_close(trainer *t) {
    sdp_backend_destroy(t->be);
    t->be = NULL;
}

float *train_device_alloc(trainer *t, sdp_memcat cat, size_t n) {
    return t->be->alloc(t->be, cat, n * sizeof(float));
}

void train_device_free(trainer *t, float *x) {
    t->be->free(t->be, x);
}

void train_device_zero(trainer *t, float *x, size_t n) {
    t->be->zero(t->be, x, n * sizeof(float));
}

/* Host memory is read and written in place: no copy, and nothing counted in io_mem. */
float *train_host_copy(trainer *t, const float *x, size_t n) {
    if (t->be->host_memory) return (float *)x;
    float *h = sdp_alloc(&t->io_mem, SDP_MEM_SCRATCH, n * sizeof(float));
    t->be->download(t->be, h, x, n * sizeof(float));
    return h;
}

void train_host_copy_done(trainer *t, float *h, float *x, size_t n, bool changed) {
    if (t->be->host_memory) return;
    if (changed) t->be->upload(t->be, x, h, n * sizeof(float));
    sdp_free(&t->io_mem, h);
}

void train_device_optim_init(trainer *t, const sdp_opt_cfg *cfg, size_t n) {
    sdp_mem dry = {.dry = true}; /* checks cfg and sets the rest, allocating nothing */
    sdp_optim_init(&t->opt, cfg, n, &dry);
    /* The state sdp_optim_init would hold (AdamW: m and v; SGD: a momentum buffer unless the
     * momentum is 0), zero-filled in the backend's memory, in the order and categories
     * sdp_optim_init allocates them. */
    const size_t buffers = sdp_optim_state_bytes_per_param(cfg) / sizeof(float);
    t->opt.m = buffers > 0 ? train_device_alloc(t, SDP_MEM_OPTIM, n) : NULL;
    t->opt.v = buffers > 1 ? train_device_alloc(t, SDP_MEM_OPTIM, n) : NULL;
}

void train_device_optim_free(trainer *t) {
    train_device_free(t, t->opt.m);
    train_device_free(t, t->opt.v);
    memset(&t->opt, 0, sizeof t->opt);
}

void train_device_optim_step(trainer *t, float lr) {
    sdp_optim_step_on(t->be, &t->opt, t->model.params, t->grads, t->segs, t->nsegs, lr);
}

double train_device_sumsq(trainer *t, const float *x, size_t n) {
    return sdp_sumsq(t->be, x, n);
}

void train_device_scale(trainer *t, float *x, size_t n, float s) {
    sdp_scale(t->be, x, n, s);
}

static bool has_buffers(const sdp_layout *L) {
    for (int i = 0; i < L->nparams; i++)
        if (L->params[i].buffer) return true;
    return false;
}

void train_device_average_buffers(trainer *t) {
    if (!has_buffers(t->model.layout)) return;
    const size_t n = t->model.layout->numel;
    float *h = train_host_copy(t, t->model.params, n);
    sdp_sync_average_buffers(&t->sync, h);
    train_host_copy_done(t, h, t->model.params, n, true);
}

void train_device_check_replicas(trainer *t) {
    const size_t n = t->model.layout->numel;
    float *p = train_host_copy(t, t->model.params, n);
    float *m = t->opt.m ? train_host_copy(t, t->opt.m, t->opt.n) : NULL;
    float *v = t->opt.v ? train_host_copy(t, t->opt.v, t->opt.n) : NULL;
    sdp_sync_check_replicas(&t->sync, p, m, v, t->step);
    if (v) train_host_copy_done(t, v, t->opt.v, t->opt.n, false);
    if (m) train_host_copy_done(t, m, t->opt.m, t->opt.n, false);
    train_host_copy_done(t, p, t->model.params, n, false);
}

const sdp_mem *train_device_mem(const trainer *t) {
    return t->be->mem;
}

void train_device_sample_peak(trainer *t) {
    const size_t used = t->be->bytes_in_use(t->be);
    if (used > t->device_peak) t->device_peak = used;
}
