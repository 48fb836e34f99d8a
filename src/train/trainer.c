/* The trainer: a worker's subnetwork built from a run's options, one optimizer step (gradient
 * accumulation, the overlapped gradient sync, clipping, the optimizer, publishing), validation of
 * the full model, and stopping on a signal. `sdp train` is a loop over these (src/cli/train.c),
 * and the SDP invariant tests drive the same functions (tests/mpi_invariants.c). */
#include "run_plan.h"
#include "trainer.h"
#include "worker_count.h"

#include "sdp/check.h"
#include "sdp/interrupt.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every rank must run the same configuration: compare a hash of it across ranks. */
static void check_same_config(const trainer *t) {
    char *json = train_opts_to_json(TRAIN_OPTS, &t->o);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = json; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    free(json);
    uint64_t *all =
        sdp_xmalloc(sizeof(uint64_t) * (size_t)t->world.size, "every rank's configuration");
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < t->world.size; r++)
        SDP_CHECK_ALL(all[r] == all[0],
                      "rank %d was started with options that differ from rank 0's: launch every "
                      "rank with the same command line",
                      r);
    free(all);
}

/* ---- set-up ---------------------------------------------------------------------------- */

static void load_data(trainer *t) {
    if (t->next_batch) {
        train_batches_fed(&t->data, &t->o, train_run_images(&t->o));
        return;
    }
    train_batches_open(&t->data, &t->o, train_run_images(&t->o), job_rank(t), job_workers(t),
                       &t->mem);
    train_batches_check_same(&t->data, MPI_COMM_WORLD);
}

/* Block-streamed evaluation borrows the training activations between steps (eval_stream.c): the
 * model's activations are carved from one pool, sized by building the model in counting mode. */
static void open_acts_pool(trainer *t) {
    const size_t bytes = train_worker_count_one(&t->cfg, &t->plan, &t->full, job_rank(t), t->data.B,
                                                t->data.T, train_worker_count_cpu, &t->gemm)
                             .acts_pool;
    if (bytes == 0) return;
    if (posix_memalign(&t->acts_pool, 64, bytes) != 0)
        sdp_fatal("out of memory allocating %zu bytes for activations: use a smaller model or "
                  "batch",
                  bytes);
    sdp_mem_pool_open(&t->mem, SDP_MEM_ACTS, t->acts_pool, bytes);
}

/* The worker's subnetwork: its shape from the plan, its map onto the full model, the
 * owner-group communicators, and gradients and optimizer state for what it owns (the state, under
 * --zero 1, for its shard of each owner group's gradients only). */
static void build_worker(trainer *t) {
    run_data_shape shape = {.vocab = train_batches_vocab(&t->data)};
    train_batches_image_shape(&t->data, &shape.channels, &shape.image_size, &shape.classes);
    t->cfg = train_run_model_config(&t->o, shape);
    train_run_full_layout(&t->full, &t->cfg);
    if (t->o.resume[0]) train_checkpoint_check_layout(t);
    sdp_plan_cfg pc = train_run_plan_config(&t->o, job_workers(t), &t->full);
    sdp_plan_build(&t->plan, &pc, &t->full);
    const bool forward = pc.mask == SDP_MASK_FORWARD;
    t->gemm = train_run_gemm(&t->o);
    sdp_model_config on_device = t->cfg; /* only the worker's model runs on t->be */
    on_device.backend = t->be;
    if (train_eval_borrows_activations(t)) open_acts_pool(t);
    train_run_create_worker_model(&t->model, &on_device, &t->plan, &t->full, job_rank(t), t->data.B,
                                  t->data.T, SDP_MODEL_TRAIN_BARE);
    sdp_mem_pool_close(&t->mem);
    sdp_subnet_map_build(&t->map, &t->full, t->model.layout, &t->plan, job_rank(t), forward);
    const size_t nlocal = t->model.layout->numel;
    float *init = train_host_copy(t, t->model.params, nlocal);
    sdp_subnet_init_values(&t->map, &t->full, t->model.layout, init, (uint64_t)t->o.seed);
    train_host_copy_done(t, init, t->model.params, nlocal, true);
    int *layer_of =
        sdp_xmalloc(sizeof(int) * (size_t)(t->model.layout->nparams + 1), "the tensors' layers");
    for (int i = 0; i < t->model.layout->nparams; i++)
        layer_of[i] = t->model.layout->params[i].block;
    if (simulating(t))
        sdp_sync_init_simulated(&t->sync, &t->plan, &t->map, layer_of, job_rank(t), job_workers(t),
                                &t->mem);
    else
        sdp_sync_init(&t->sync, &t->plan, &t->map, layer_of, t->world.rank, t->world.size, &t->mem);
    free(layer_of);
    if (!simulating(t)) sdp_sync_use_backend(&t->sync, t->be);

    /* Gradients only for what the worker owns: whole tensors, or owned slices of tensors it
     * owns in part (neuron units under backward masking), computed as GEMMs on those slices. */
    sdp_sync_grad_layout(&t->sync, t->model.layout, &t->grad_offset, &t->grad_slices);
    t->ngrads = t->sync.grad_elems; /* under --zero 2 less than it owns */
    t->grads = train_device_alloc(t, SDP_MEM_GRADS, t->ngrads);
    t->model.ops->use_grads(&t->model, t->grads, t->grad_offset, t->grad_slices);
    sdp_opt_cfg oc = train_run_optimizer_config(&t->o);
    train_device_optim_init(t, &oc, t->sync.state); /* under --zero 1, its shards only */
    t->nsegs = sdp_sync_segments(&t->sync, t->model.layout, t->o.decay_all, &t->segs);
}

/* ---- one step ------------------------------------------------------------------------------ */

/* The model calls this after each layer's backward: buckets that are complete start reducing
 * while the layers below run. */
static void on_layer_done(void *ctx, int layer) {
    trainer *t = ctx;
    sdp_sync_layer_done(&t->sync, t->grads, layer);
}

/* The stream of this worker's dropout masks for micro-batch a of the current step: one of its own
 * per (--seed, worker, step, micro-batch), so that a run draws the same masks again (a resumed
 * one those of the uninterrupted run), and every worker drops its own batch's activations
 * independently of the others, as data-parallel workers with dropout do. */
static uint64_t dropout_key(const trainer *t, int a) {
    const uint64_t salt = 0x64726f706f7574ull; /* "dropout": apart from the seed's other streams */
    const sdp_rng worker = sdp_rng_make((uint64_t)t->o.seed ^ salt, (uint64_t)job_rank(t));
    const uint64_t draw = (uint64_t)t->step * (uint64_t)t->o.grad_accum + (uint64_t)a;
    return sdp_rng_make(worker.state, draw).state;
}

/* Whether this worker exchanges anything: not under --sim-world. */
static bool communicates(const trainer *t) {
    return !simulating(t);
}

/* Gradients, loss and norm of this step: averaged over the owners, or the worker's own when it
 * communicates nothing. */
static void finish_gradients(trainer *t, const double local[2], trainer_step_result *r) {
    if (!communicates(t)) {
        r->loss = local[0] / local[1];
        r->grad_norm = sqrt(train_device_sumsq(t, t->grads, t->ngrads));
        return;
    }
    sdp_sync_grads_end(&t->sync, t->grads);
    double global[2];
    MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    r->loss = global[0] / global[1];
    r->grad_norm = sdp_sync_grad_norm(&t->sync, t->grads);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

trainer_step_result trainer_step(trainer *t) {
    sdp_model *m = &t->model;
    const bool sync = communicates(t);
    const int B = t->data.B, T = t->data.T, A = t->o.grad_accum;
    trainer_step_result r = {0};
    const double start = now_ms();
    train_device_zero(t, t->grads, t->ngrads);
    const sdp_comm_bytes before = t->sync.bytes;
    double local[2] = {0, 0};
    for (int a = 0; a < A; a++) {
        sdp_batch b;
        if (t->next_batch)
            t->next_batch(t->next_batch_ctx, &b);
        else
            train_batches_next(&t->data, &b);
        sdp_watchdog_beat(t->watchdog);
        double t0 = now_ms();
        sdp_metrics mt;
        m->dropout_key = dropout_key(t, a);
        m->ops->forward(m, &b, true, &mt);
        local[0] += mt.loss;
        local[1] += mt.count;
        const bool last = a == A - 1; /* only the last micro-batch completes the gradients */
        /* --zero 2 keeps no room to accumulate a layer in: each micro-batch hands its over. */
        const bool early = !last && sync && sdp_sync_reduces_every_micro_batch(&t->sync);
        if (last && sync) sdp_sync_grads_begin(&t->sync);
        if (early) sdp_sync_micro_batch_begin(&t->sync);
        m->layer_done = (last || early) && sync ? on_layer_done : NULL;
        m->layer_done_ctx = t;
        double t1 = now_ms();
        m->ops->backward(m, 1.0f / (float)(B * T * A));
        if (early) sdp_sync_micro_batch_end(&t->sync, t->grads);
        r.ms_forward += t1 - t0;
        r.ms_backward += now_ms() - t1;
    }
    m->layer_done = NULL;
    double t2 = now_ms();
    sdp_watchdog_beat(t->watchdog);
    finish_gradients(t, local, &r);
    SDP_CHECK(isfinite(r.grad_norm),
              "the gradient norm became %g at step %ld: training diverged; lower --lr or raise "
              "--warmup",
              r.grad_norm, t->step + 1);
    double t3 = now_ms();
    train_device_scale(t, t->grads, t->ngrads, sdp_clip_scale(r.grad_norm, (float)t->o.clip));
    const int span = t->o.schedule_steps > 0 ? t->o.schedule_steps : t->o.steps;
    r.lr = sdp_lr_at(t->step, t->o.warmup, span, (float)t->o.lr, (float)t->o.lr_min);
    train_device_optim_step(t, r.lr);
    if (sync) sdp_sync_share_updates(&t->sync, m->params, t->grads); /* --zero 1 */
    train_device_sample_peak(t);
    if (t->plan.cfg.mask == SDP_MASK_BACKWARD && sync) sdp_sync_publish(&t->sync, m->params);
    sdp_watchdog_beat(t->watchdog);
    const double end = now_ms();
    r.ms_sync = t3 - t2;
    r.ms_update = end - t3;
    r.ms_total = end - start;
    t->step_bytes_sent += t->sync.bytes.sent - before.sent;
    t->step_bytes_recv += t->sync.bytes.recv - before.recv;
    t->step++;
    /* Every worker processes its own tokens; FLOPs are this worker's (its subnetwork's). */
    t->examples_seen += (double)B * T * A * job_workers(t);
    t->flops_done += (double)B * T * A * m->ops->train_flops_per_example(m);
    return r;
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/* Evaluation always runs the full model, on the batches data parallelism evaluates: each worker
 * its own share. Where every worker holds the whole current model (backward masking, data
 * parallelism, or every unit owned by every worker), each evaluates it; under forward masking the
 * assembled model is evaluated block by block (eval_stream.c). */
sdp_metrics trainer_validate(trainer *t) {
    if (!t->data.has_val) return (sdp_metrics){NAN, 0, NAN};
    /* A simulated worker has only its own (sub)network: that is what it evaluates, on its share. */
    if (simulating(t))
        return train_batches_evaluate(&t->data, &t->model, t->o.val_batches, MPI_COMM_SELF);
    train_device_average_buffers(t); /* running statistics agree */
    const bool whole =
        t->plan.cfg.mask != SDP_MASK_FORWARD || t->plan.cfg.owners == t->plan.cfg.world;
    if (whole) return train_batches_evaluate(&t->data, &t->model, t->o.val_batches, MPI_COMM_WORLD);
    return train_eval_streamed(t);
}

/* ---- stopping on a signal ------------------------------------------------------------------- */

/* The signal any worker received (0: none), the same on every rank: ranks see a signal at
 * different moments, or some not at all, and must all stop after the same step. */
int trainer_agreed_interrupt(const trainer *t) {
    int sig = sdp_interrupt_signal();
    if (!communicates(t)) return sig;
    int any = 0;
    MPI_Allreduce(&sig, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* ---- the whole worker ---------------------------------------------------------------------- */

void trainer_build(trainer *t) {
    train_device_open(t);
    check_same_config(t);
    load_data(t);
    build_worker(t);
}

void trainer_free(trainer *t) {
    free(t->segs);
    train_device_optim_free(t);
    train_device_free(t, t->grads);
    sdp_sync_grad_layout_free(t->grad_offset, t->grad_slices, t->model.layout->nparams);
    sdp_sync_free(&t->sync);
    sdp_subnet_map_free(&t->map);
    t->model.ops->destroy(&t->model);
    if (t->acts_pool) sdp_mem_pool_drop(&t->mem);
    free(t->acts_pool);
    sdp_plan_free(&t->plan);
    sdp_layout_free(&t->full);
    train_batches_close(&t->data, &t->mem);
    if (t->recal) sdp_free(&t->io_mem, t->recal);
    train_device_close(t);
}
