/* Options of `sdp train` (also read back from a run's config.json by eval, sample and resume). */
#ifndef SDP_TRAIN_TRAIN_OPTS_H
#define SDP_TRAIN_TRAIN_OPTS_H

#include "options.h"

#include "sdp/backend.h"
#include "sdp/model.h"

typedef struct {
    /* model */
    char model[OPT_STR_MAX]; /* the family: train_run_model_config makes it arch.arch */
    /* Every architecture option, written by its row of TRAIN_OPTS straight into its field of the
     * model configuration; train_run_model_config adds the family and what the data decides. A new
     * knob is a field of sdp_model_config, a row, and its use in the family. */
    sdp_model_config arch;
    char recompute[OPT_STR_MAX]; /* none or layer: activation recomputation while training */
    /* data */
    char data[OPT_STR_MAX], val_data[OPT_STR_MAX], dataset[OPT_STR_MAX];
    double val_frac;
    int crop_pad, bn_recal_batches;
    bool flip;
    /* optimisation */
    int batch, grad_accum, steps, warmup;
    int schedule_steps; /* the cosine's length: --steps of the run's first invocation by default */
    bool reschedule;
    double lr, lr_min, weight_decay, beta1, beta2, eps, momentum, clip;
    char optimizer[OPT_STR_MAX];
    bool nesterov, decay_all;
    /* subnetwork data parallelism */
    char sdp_mask[OPT_STR_MAX], sdp_unit[OPT_STR_MAX], sdp_assign[OPT_STR_MAX];
    char branch_scale[OPT_STR_MAX];
    int sdp_owners, sdp_chunks, sdp_seed, check_replicas;
    int zero; /* ZeRO stage: 0, or 1 (optimizer state sharded over each bucket's members) */
    double sdp_coverage;
    /* run */
    int log_every, val_every, val_batches, ckpt_every, stop_after, seed, threads;
    double stall_timeout;
    char out[OPT_STR_MAX], resume[OPT_STR_MAX], gemm[OPT_STR_MAX];
    bool overwrite;
    /* device and simulation */
    char device[OPT_STR_MAX], precision[OPT_STR_MAX];
    int sim_world, sim_rank;
    /* not an option: the config.json these options were read from (train_run_load_config), for
     * messages about its values; empty when they came from the command line */
    char config_file[1024];
} train_opts;

extern const opt_spec TRAIN_OPTS[];

/* --precision as the CUDA backend's precision; fails with one line on an unknown name. */
sdp_precision train_opts_precision(const train_opts *o);
/* Fails with one line when --precision is unknown, or is bf16 without --device cuda. */
void train_opts_check_precision(const train_opts *o);

/* --recompute: whether training recomputes each layer's (block's) activations in the backward;
 * fails with one line on an unknown name. */
bool train_opts_recompute(const train_opts *o);

/* --zero as a ZeRO stage (0 or 1); fails with one line on 2 (not implemented) or anything else. */
int train_opts_zero(const train_opts *o);
/* Fails with one line where --zero 1 cannot run: off host memory (--device other than cpu), or a
 * --sim-world worker, which has no owners to all-gather with. */
void train_opts_check_zero(const train_opts *o);

/* Options that a resumed run may change; every other one comes from the run's config.json. */
bool train_opt_may_change_on_resume(const char *name);
/* A warning for each option argv gives that --model ignores (--width for a resnet, --depth for a
 * transformer): a typo or a copied command line should not pass for a setting. */
void train_opts_warn_unused(const train_opts *o, int argc, char **argv);

#endif
