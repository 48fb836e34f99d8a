/* sdp train: set-up of a worker's subnetwork and the training loop. One code path serves data
 * parallelism (--sdp-mask none) and both SDP masking regimes. */
#include "commands.h"
#include "trainer.h"
#include "run_dir.h"

#include "sdp/check.h"
#include "sdp/interrupt.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- options ------------------------------------------------------------------------------ */

/* On resume the run's own config.json decides everything but the options a user may change. */
static void apply_resume_config(trainer *t, int argc, char **argv) {
    train_opts cli = t->o;
    run_load_config(&t->o, cli.resume);
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++) {
        if (!opts_given(argc, argv, s->name)) continue;
        SDP_CHECK(train_opt_may_change_on_resume(s->name),
                  "--%s cannot change when resuming (the run was configured with its own "
                  "value): drop it, or start a new run",
                  s->name);
        size_t size = s->type == OPT_STR    ? OPT_STR_MAX
                      : s->type == OPT_INT  ? sizeof(int)
                      : s->type == OPT_FLAG ? sizeof(bool)
                                            : sizeof(double);
        memcpy((char *)&t->o + s->offset, (char *)&cli + s->offset, size);
    }
    strcpy(t->o.resume, cli.resume);
    /* Stopping early and replacing a run are about one invocation, not the run: they never
     * carry over. */
    if (!opts_given(argc, argv, "stop-after")) t->o.stop_after = 0;
    t->o.overwrite = false;
}

static void validate_options(train_opts *o) {
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    SDP_CHECK(o->warmup <= o->steps, "--warmup %d exceeds --steps %d", o->warmup, o->steps);
    SDP_CHECK(o->lr_min <= o->lr, "--lr-min %g exceeds --lr %g", o->lr_min, o->lr);
    train_opts_check_precision(o);
    if (o->sim_world == 0) {
        SDP_CHECK(o->sim_rank == 0, "--sim-rank %d needs --sim-world N (the simulated job's size)",
                  o->sim_rank);
        return;
    }
    SDP_CHECK(o->sim_rank >= 0 && o->sim_rank < o->sim_world,
              "--sim-rank %d is not a worker of --sim-world %d: use a rank in [0, %d)", o->sim_rank,
              o->sim_world, o->sim_world);
    SDP_CHECK(!o->resume[0],
              "--sim-world runs write no checkpoints, so none can be resumed: start a new run");
    SDP_CHECK(o->check_replicas == 0,
              "--check-replicas compares owners across ranks, which a --sim-world run does not "
              "have: drop it");
}

/* A simulated worker stands for one rank of a job that is not running: it must be alone. */
static void check_simulation_world(const trainer *t) {
    SDP_CHECK(!simulating(t) || t->world.size == 1,
              "--sim-world runs one worker alone, but %d MPI ranks were started: run it without "
              "mpirun (or with -n 1)",
              t->world.size);
}

static sdp_opt_cfg optimizer_config(const train_opts *o) {
    sdp_opt_kind kind;
    if (strcmp(o->optimizer, "adamw") == 0)
        kind = SDP_OPT_ADAMW;
    else if (strcmp(o->optimizer, "sgd") == 0)
        kind = SDP_OPT_SGD;
    else
        sdp_fatal("unknown --optimizer '%s': use adamw or sgd", o->optimizer);
    sdp_opt_cfg c = sdp_opt_defaults(kind);
    c.beta1 = (float)o->beta1;
    c.beta2 = (float)o->beta2;
    c.eps = (float)o->eps;
    c.momentum = (float)o->momentum;
    c.nesterov = o->nesterov;
    if (o->weight_decay >= 0) c.weight_decay = (float)o->weight_decay;
    SDP_CHECK(o->beta1 < 1 && o->beta2 < 1, "--beta1 and --beta2 must be below 1");
    return c;
}

/* Every rank must run the same configuration: compare a hash of it across ranks. */
static void check_same_config(const trainer *t) {
    char *json = opts_to_json(TRAIN_OPTS, &t->o);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = json; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    free(json);
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)t->world.size);
    SDP_CHECK(all, "out of memory");
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < t->world.size; r++)
        SDP_CHECK(all[r] == all[0],
                  "rank %d was started with options that differ from rank 0's: launch every "
                  "rank with the same command line",
                  r);
    free(all);
}

/* ---- set-up ------------------------------------------------------------------------------- */

static void choose_run_dir(trainer *t) {
    /* Every rank has loaded its data and built its worker: one that failed has ended the job
     * (MPI_Abort) before rank 0 passes here, so a run that cannot start creates no directory. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (t->o.resume[0]) {
        strcpy(t->o.out, t->o.resume); /* and it is locked like any other run's */
    } else if (!t->o.out[0]) {
        /* All ranks must agree on the name, so rank 0's clock decides. */
        long long s = (long long)time(NULL);
        MPI_Bcast(&s, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        time_t now = (time_t)s;
        char stamp[32], dir[OPT_STR_MAX + 64];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(dir, sizeof dir, "runs/%s-%s", t->o.model, stamp);
        SDP_CHECK(strlen(dir) < sizeof t->o.out, "run directory name too long");
        strcpy(t->o.out, dir);
    }
    if (is_rank0(t)) t->run_lock = run_dir_claim(t->o.out, t->o.resume[0] != 0, t->o.overwrite);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void load_data(trainer *t) {
    batches_open(&t->data, &t->o, run_images(&t->o), job_rank(t), job_workers(t), &t->mem);
}

/* The worker's subnetwork: its shape from the plan, its map onto the full model, the
 * owner-group communicators, and gradients and optimizer state for what it owns. */
static void build_worker(trainer *t) {
    run_data_shape shape = {.vocab = batches_vocab(&t->data)};
    batches_image_shape(&t->data, &shape.channels, &shape.image_size, &shape.classes);
    t->cfg = run_model_config(&t->o, shape);
    run_full_layout(&t->full, &t->cfg);
    sdp_plan_cfg pc = run_plan_config(&t->o, job_workers(t), &t->full);
    sdp_plan_build(&t->plan, &pc, &t->full);
    const bool forward = pc.mask == SDP_MASK_FORWARD;
    t->gemm = run_gemm(&t->o);
    sdp_model_config on_device = t->cfg; /* only the worker's model runs on t->be */
    on_device.backend = t->be;
    run_create_worker_model(&t->model, &on_device, &t->plan, &t->full, job_rank(t), t->data.B,
                            t->data.T, SDP_MODEL_TRAIN_BARE, t->gemm, &t->mem);
    sdp_subnet_map_build(&t->map, &t->full, t->model.layout, &t->plan, job_rank(t), forward);
    const size_t nlocal = t->model.layout->numel;
    float *init = host_copy(t, t->model.params, nlocal);
    sdp_subnet_init_values(&t->map, &t->full, t->model.layout, init, (uint64_t)t->o.seed);
    host_copy_done(t, init, t->model.params, nlocal, true);
    int *layer_of = malloc(sizeof(int) * (size_t)(t->model.layout->nparams + 1));
    SDP_CHECK(layer_of, "out of memory");
    for (int i = 0; i < t->model.layout->nparams; i++)
        layer_of[i] = t->model.layout->params[i].block;
    if (simulating(t))
        sdp_sync_init_simulated(&t->sync, &t->plan, &t->map, layer_of, job_rank(t), job_workers(t),
                                &t->mem);
    else
        sdp_sync_init(&t->sync, &t->plan, &t->map, layer_of, t->world.rank, t->world.size, &t->mem);
    free(layer_of);
    if (t->be && !simulating(t)) sdp_sync_use_backend(&t->sync, t->be);

    /* Gradients only for what the worker owns: whole tensors, or owned slices of tensors it
     * owns in part (neuron units under backward masking), computed as GEMMs on those slices. */
    sdp_sync_grad_layout(&t->sync, t->model.layout, &t->grad_offset, &t->grad_slices);
    t->ngrads = t->sync.owned;
    t->grads = device_alloc(t, SDP_MEM_GRADS, t->ngrads);
    t->model.ops->use_grads(&t->model, t->grads, t->grad_offset, t->grad_slices);
    sdp_opt_cfg oc = optimizer_config(&t->o);
    device_optim_init(t, &oc, t->sync.owned);
    t->nsegs = sdp_sync_segments(&t->sync, t->model.layout, t->o.decay_all, &t->segs);
}

static void setup(trainer *t, int argc, char **argv) {
    SDP_CHECK(!(t->o.overwrite && t->o.resume[0]),
              "--overwrite starts a new run and --resume continues one: pass one of them");
    if (t->o.resume[0]) apply_resume_config(t, argc, argv);
    validate_options(&t->o);
    sdp_world_init(&t->world, &argc, &argv, t->o.threads);
    sdp_interrupt_install(); /* a signal from now on stops the run after a step */
    check_simulation_world(t);
    device_open(t);
    check_same_config(t);
    load_data(t);
    build_worker(t);
    choose_run_dir(t); /* only once the data and the model are known to be good */
}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct {
    double loss, grad_norm;
    float lr;
} step_result;

/* The model calls this after each layer's backward: buckets that are complete start reducing
 * while the layers below run. */
static void on_layer_done(void *ctx, int layer) {
    trainer *t = ctx;
    sdp_sync_layer_done(&t->sync, t->grads, layer);
}

/* Whether this worker exchanges anything: not under --sim-world. */
static bool communicates(const trainer *t) {
    return !simulating(t);
}

/* Gradients, loss and norm of this step: averaged over the owners, or the worker's own when it
 * communicates nothing. */
static void finish_gradients(trainer *t, const double local[2], step_result *r) {
    if (!communicates(t)) {
        r->loss = local[0] / local[1];
        r->grad_norm = sqrt(device_sumsq(t, t->grads, t->ngrads));
        return;
    }
    sdp_sync_grads_end(&t->sync, t->grads);
    double global[2];
    MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    r->loss = global[0] / global[1];
    r->grad_norm = sdp_sync_grad_norm(&t->sync, t->grads);
}

static step_result train_step(trainer *t) {
    sdp_model *m = &t->model;
    const bool sync = communicates(t);
    const int B = t->data.B, T = t->data.T, A = t->o.grad_accum;
    device_zero(t, t->grads, t->ngrads);
    const sdp_comm_bytes before = t->sync.bytes;
    double local[2] = {0, 0};
    for (int a = 0; a < A; a++) {
        sdp_batch b;
        batches_next(&t->data, &b);
        sdp_metrics mt;
        m->ops->forward(m, &b, true, &mt);
        local[0] += mt.loss;
        local[1] += mt.count;
        const bool last = a == A - 1; /* only the last micro-batch completes the gradients */
        if (last && sync) sdp_sync_grads_begin(&t->sync);
        m->layer_done = last && sync ? on_layer_done : NULL;
        m->layer_done_ctx = t;
        m->ops->backward(m, 1.0f / (float)(B * T * A));
    }
    m->layer_done = NULL;
    step_result r;
    finish_gradients(t, local, &r);
    SDP_CHECK(isfinite(r.grad_norm),
              "the gradient norm became %g at step %ld: training diverged; lower --lr or raise "
              "--warmup",
              r.grad_norm, t->step + 1);
    device_scale(t, t->grads, t->ngrads, sdp_clip_scale(r.grad_norm, (float)t->o.clip));
    r.lr = sdp_lr_at(t->step, t->o.warmup, t->o.steps, (float)t->o.lr, (float)t->o.lr_min);
    device_optim_step(t, r.lr);
    device_sample_peak(t);
    if (t->plan.cfg.mask == SDP_MASK_BACKWARD && sync) sdp_sync_publish(&t->sync, m->params);
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
static sdp_metrics validate(trainer *t) {
    if (!t->data.has_val) return (sdp_metrics){NAN, 0, NAN};
    /* A simulated worker has only its own (sub)network: that is what it evaluates, on its share. */
    if (simulating(t))
        return batches_evaluate(&t->data, &t->model, t->o.val_batches, MPI_COMM_SELF);
    device_average_buffers(t); /* running statistics agree */
    const bool whole =
        t->plan.cfg.mask != SDP_MASK_FORWARD || t->plan.cfg.owners == t->plan.cfg.world;
    if (whole) return batches_evaluate(&t->data, &t->model, t->o.val_batches, MPI_COMM_WORLD);
    return eval_streamed(t);
}

/* ---- stopping on a signal ------------------------------------------------------------------- */

/* The signal any worker received (0: none), the same on every rank: ranks see a signal at
 * different moments, or some not at all, and must all stop after the same step. */
static int agreed_interrupt(const trainer *t) {
    int sig = sdp_interrupt_signal();
    if (!communicates(t)) return sig;
    int any = 0;
    MPI_Allreduce(&sig, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* One line saying where the run stopped and how to go on. */
static void report_interrupt(const trainer *t, int sig) {
    if (!is_rank0(t)) return;
    const char *name = sdp_interrupt_name(sig);
    if (simulating(t)) {
        fprintf(stderr,
                "sdp: stopped by %s after step %ld of %d (--sim-world writes no "
                "checkpoint)\n",
                name, t->step, t->o.steps);
        return;
    }
    char launch[64] = "";
    if (t->world.size > 1) snprintf(launch, sizeof launch, "mpirun -np %d ", t->world.size);
    fprintf(stderr,
            "sdp: stopped by %s after step %ld of %d; checkpoint saved in %s; resume with: "
            "%ssdp train --resume %s\n",
            name, t->step, t->o.steps, t->o.out, launch, t->o.out);
}

/* ---- entry point ---------------------------------------------------------------------------- */

int cmd_train(int argc, char **argv) {
    sdp_interrupt_defer(); /* before any thread starts: see interrupt.h */
    trainer t;
    memset(&t, 0, sizeof t);
    opts_parse(TRAIN_OPTS, &t.o, argc, argv,
               "usage: [mpirun -np N] sdp train --data FILE [options]\n"
               "Trains a byte-level (text) or token-level (llm.c shards) transformer on N "
               "workers,\nwith data parallelism or subnetwork data parallelism (--sdp-mask).\n"
               "--sim-world N --sim-rank r runs worker r of an N-worker job alone (one process, "
               "no\ncommunication, no checkpoints), to measure one worker's memory and speed.\n"
               "--device cuda trains on GPUs, one per rank (sdp-cuda only).");
    setup(&t, argc, argv);
    if (t.o.resume[0]) load_checkpoint(&t);
    write_run_files(&t);
    open_metrics(&t);
    print_start(&t);

    const double t0 = now_s();
    double window_t = t0, window_loss = 0;
    sdp_metrics final_val = {NAN, 0, NAN};
    int window_steps = 0;
    const long first = t.step;
    int interrupted = 0;
    while (t.step < t.o.steps) {
        step_result r = train_step(&t);
        window_loss += r.loss;
        window_steps++;
        const bool last = t.step == t.o.steps;
        interrupted = agreed_interrupt(&t);
        const bool stop =
            (t.o.stop_after > 0 && t.step - first >= t.o.stop_after) || interrupted != 0;
        if (t.step % t.o.log_every == 0 || last || stop) {
            double now = now_s();
            log_progress(&t, window_loss / window_steps, r.lr, r.grad_norm, now - window_t,
                         window_steps, now - t0);
            window_t = now;
            window_loss = 0;
            window_steps = 0;
        }
        if (t.o.check_replicas > 0 && t.step % t.o.check_replicas == 0) device_check_replicas(&t);
        if ((t.o.val_every > 0 && t.step % t.o.val_every == 0) || last) {
            final_val = validate(&t);
            log_validation(&t, final_val, now_s() - t0);
        }
        const bool ckpt_due = (t.o.ckpt_every > 0 && t.step % t.o.ckpt_every == 0) || last || stop;
        if (ckpt_due && !simulating(&t)) save_checkpoint(&t);
        if (stop) break;
    }
    if (interrupted) {
        report_interrupt(&t, interrupted);
        if (t.metrics) fclose(t.metrics);
        sdp_world_finalize();
        return 128 + interrupted;
    }
    print_summary(&t, final_val, now_s() - t0);
    if (t.metrics) fclose(t.metrics);
    sdp_world_finalize();
    return 0;
}
