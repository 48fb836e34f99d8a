/* One worker of a training job, as `sdp train` runs it: its state, and the trainer's functions
 * (trainer.c: build, step, validate, free; device.c: the state on the host or a device;
 * trainer_checkpoint.c: checkpoints and resume; eval_stream.c: block-streamed evaluation). */
#ifndef SDP_TRAIN_TRAINER_H
#define SDP_TRAIN_TRAINER_H

#include "batches.h"
#include "run.h"

#include "sdp/optim.h"
#include "sdp/plan.h"
#include "sdp/safetensors.h"
#include "sdp/subnet.h"
#include "sdp/sync.h"

#include <stdio.h>

/* Where a resumed run's data goes on: the loader position its checkpoint saved, counted in steps
 * of `world` workers, and the one taken for this run's workers (the same when N is). */
typedef struct {
    int world;
    sdp_loader_pos saved, taken;
} trainer_resume;

typedef struct {
    train_opts o;
    sdp_world world;
    sdp_mem mem;        /* what training holds: the figures compared with data parallelism */
    sdp_mem io_mem;     /* evaluation copies and checkpoint buffers, reported apart */
    sdp_backend *be;    /* the worker's backend (--device): the CPU's over mem, or a device's */
    size_t device_peak; /* most bytes in use on the backend (on a device: cudaMemGetInfo) */
    batch_source data;
    /* the full model and the plan over it */
    sdp_model_config cfg;
    sdp_gemm_provider gemm;
    sdp_layout full;
    sdp_plan plan;
    /* this worker's subnetwork */
    sdp_model model;
    void *acts_pool; /* its activations, as one pool of mem when evaluation borrows them */
    sdp_subnet_map map;
    sdp_sync sync;
    /* Gradients are kept for owned elements only, bucket after bucket (see sync.h). */
    long *grad_offset; /* per local tensor, where its gradient lives (see sdp_tf_use_grads) */
    sdp_grad_slices *grad_slices;
    float *grads;
    size_t ngrads;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    /* Forward masking, image models, k < N: the assembled model's running statistics, re-estimated
     * at step recal_step (eval_stream.c), for evaluation and the checkpoint. NULL until then. */
    float *recal;
    long recal_step;
    long step;
    long first_step; /* where this invocation began: 0, or the resumed checkpoint's step */
    trainer_resume resumed_from; /* set by a resume */
    /* The resume loaded optim.prev.safetensors: a save was cut off after its optimizer file, so
     * the next save must keep optim.prev, the only optimizer file that matches the model. */
    bool optim_prev_matches;
    double examples_seen, flops_done;          /* tokens or images, over all workers */
    uint64_t step_bytes_sent, step_bytes_recv; /* by gradient sync and publishing, cumulative */
    FILE *metrics;
    int run_lock; /* rank 0: the run directory's lock (train_run_dir_claim), held to the end */
    sdp_watchdog *watchdog; /* --stall-timeout: beaten at every micro-batch, batch and window */
    /* Where training batches come from: NULL, the data's loader; else this function, set before
     * trainer_build, which then reads no data (tests and benchmarks feed batches of their own;
     * there is no validation data). */
    void (*next_batch)(void *ctx, sdp_batch *b);
    void *next_batch_ctx;
    /* --device cuda with bf16: attention by cuBLAS GEMMs over score matrices instead of the fused
     * kernels, for benchmarks that compare the two. Set before trainer_build, which sizes the
     * attention's scratch for the path (sdp plan assumes the fused one). */
    bool cuda_attention_gemm;
} trainer;

/* A step's loss (over all workers), gradient norm and learning rate, and where its time went, in
 * wall-clock milliseconds: forward and backward passes (the gradient sync runs under the last
 * backward), the wait for the sync to finish with the loss and norm reductions (the exposed
 * communication), and clipping, the optimizer and publishing. On a device the parts are host
 * times of asynchronous work; the total ends after the norm has come back, so it is the device's.
 */
typedef struct {
    double loss, grad_norm;
    float lr;
    double ms_forward, ms_backward, ms_sync, ms_update, ms_total;
} trainer_step_result;

/* trainer.c: the worker's life. t->o holds the run's options and t->world the job (after
 * sdp_world_init). All collective. */
/* The device, the data and the worker's subnetwork: its shape from the plan, its map onto the
 * full model, the owner-group communicators, gradients and optimizer state for what it owns. */
void trainer_build(trainer *t);
/* One optimizer step: --grad-accum micro-batches, the gradient sync overlapped with the last
 * backward pass, the global norm and clipping, the optimizer, and publishing under backward
 * masking. */
trainer_step_result trainer_step(trainer *t);
/* The full model's loss on the validation batches data parallelism evaluates. */
sdp_metrics trainer_validate(trainer *t);
/* The signal any rank has received since the run began (0: none), the same on every rank. */
int trainer_agreed_interrupt(const trainer *t);
/* Frees everything trainer_build made. */
void trainer_free(trainer *t);

static inline bool is_rank0(const trainer *t) {
    return t->world.rank == 0;
}

/* --sim-world: this one process runs worker --sim-rank of an N-worker job, communicating
 * nothing. The job's size and this worker's rank in it, simulated or real: */
static inline bool simulating(const trainer *t) {
    return t->o.sim_world > 0;
}
static inline int job_workers(const trainer *t) {
    return simulating(t) ? t->o.sim_world : t->world.size;
}
static inline int job_rank(const trainer *t) {
    return simulating(t) ? t->o.sim_rank : t->world.rank;
}

/* device.c: the trainable state on the host or on the device of t->be */
/* Fails with one line unless --device names a device this program can run on (before MPI_Init, so
 * that the job reports it once). */
void train_device_check(const train_opts *o);
void train_device_open(trainer *t);
void train_device_close(trainer *t);
float *train_device_alloc(trainer *t, sdp_memcat cat, size_t n); /* zero-filled floats */
void train_device_free(trainer *t, float *x);
void train_device_zero(trainer *t, float *x, size_t n);
/* x itself where the backend's memory is host memory; else a host copy (io_mem) that
 * train_host_copy_done frees, uploading it back first when changed. */
float *train_host_copy(trainer *t, const float *x, size_t n);
void train_host_copy_done(trainer *t, float *h, float *x, size_t n, bool changed);
void train_device_optim_init(trainer *t, const sdp_opt_cfg *cfg, size_t n);
void train_device_optim_step(trainer *t, float lr);
void train_device_optim_free(trainer *t);
/* Sum of squares and scaling of an array in the worker's memory. */
double train_device_sumsq(trainer *t, const float *x, size_t n);
void train_device_scale(trainer *t, float *x, size_t n, float s);
/* sdp_sync_average_buffers and sdp_sync_check_replicas on the worker's state, through host copies
 * on a device. */
void train_device_average_buffers(trainer *t);
void train_device_check_replicas(trainer *t);
/* Where the training bytes by category are counted: the backend's tally (t->mem on the CPU). */
const sdp_mem *train_device_mem(const trainer *t);
void train_device_sample_peak(trainer *t);

/* trainer_checkpoint.c */
void train_save_checkpoint(trainer *t);
void train_load_checkpoint(trainer *t);
/* The resumed run's model.safetensors holds t->full's tensors and no others; checked from the
 * header alone, before the worker's model is allocated, so that an edited config.json (a layer
 * count of thousands, say) is refused at once rather than after building that model. */
void train_checkpoint_check_layout(trainer *t);
/* Checks each metadata field sdp train writes (presence, form and range), as a resume does:
 * sdp eval and sdp sample load the same file. */
void train_checkpoint_check_meta(const sdp_st_file *f);
/* The training and validation examples the run's data gave when f was saved (sdp.data_examples),
 * or -1 and -1 for a checkpoint written before the field. */
void train_checkpoint_data_examples(const sdp_st_file *f, double examples[2]);

/* eval_stream.c: the assembled model under forward masking, evaluated block by block (no worker
 * holds it whole). All collective. */
sdp_metrics train_eval_streamed(trainer *t);
/* Whether the assembled model's running statistics must be re-estimated (image models under
 * forward masking with k < N), doing so for the current step if not done yet; and the values of
 * the full layout's buffer tensor `name`. */
bool train_eval_recalibrates(const trainer *t);
/* Whether this worker evaluates block by block, and lends that its training activations. */
bool train_eval_borrows_activations(const trainer *t);
void train_eval_recalibrate(trainer *t);
const float *train_eval_recalibrated(trainer *t, const char *name);

#endif
