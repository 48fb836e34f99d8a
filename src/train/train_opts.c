#include "train_opts.h"

#include "sdp/check.h"

#include <string.h>

#define F(field) offsetof(train_opts, field)

const opt_spec TRAIN_OPTS[] = {
    {"model", OPT_STR, F(model), "gpt", "model: gpt or llama (text), resnet or vit (images)", 0},
    {"layers", OPT_INT, F(arch.layers), "6", "transformer layers", 1},
    {"heads", OPT_INT, F(arch.heads), "6", "attention heads per layer", 1},
    {"width", OPT_INT, F(arch.width), "384", "model width (residual stream)", 1},
    {"d-ff", OPT_INT, F(arch.d_ff), "0",
     "MLP hidden width; 0 = 4*width (gpt) or ~8/3*width (llama)", 0},
    {"seq-len", OPT_INT, F(arch.seq_len), "256", "tokens per sequence", 1},
    {"vocab", OPT_INT, F(arch.vocab), "0", "vocabulary size; 0 = from the data", 0},
    {"rope-theta", OPT_FLOAT, F(arch.rope_theta), "10000", "RoPE base (llama)", 1},
    {"depth", OPT_INT, F(arch.depth), "20", "resnet depth: 20 (3 stages, CIFAR style) or 18", 1},
    {"channels", OPT_INT, F(arch.channels), "0", "resnet base channels; 0 = 16 (depth 20), 64 (18)",
     0},
    {"patch", OPT_INT, F(arch.patch), "4", "vit patch size in pixels (must divide the image size)",
     1},
    {"dropout", OPT_FLOAT, F(arch.dropout), "0",
     "dropout probability in [0, 1) of gpt, llama and vit while training, where nanoGPT applies "
     "it (embeddings, attention probabilities, attention and MLP outputs); off at evaluation",
     0},
    {"recompute", OPT_STR, F(recompute), "none",
     "activations while training: none (keep every layer's for the backward) or layer (keep each "
     "layer's or resnet block's input, recompute the rest in the backward: about one layer's "
     "activations, for a second forward of each layer in the backward (13-22% more step time "
     "in docs/performance.md); results bitwise the same)",
     0},
    {"data", OPT_STR, F(data), "",
     "text file or llm.c shard glob (token models); dataset directory (image models)", 0},
    {"dataset", OPT_STR, F(dataset), "fashion-mnist",
     "image models: fashion-mnist, mnist, cifar10 or cifar100", 0},
    {"crop-pad", OPT_INT, F(crop_pad), "-1",
     "image models: random-crop padding; -1 = image size / 8, 0 = off", -1},
    {"flip", OPT_FLAG, F(flip), "false", "image models: random horizontal flips", 0},
    {"bn-recal-batches", OPT_INT, F(bn_recal_batches), "50",
     "forward masking: training batches that re-estimate the assembled model's batch-norm "
     "statistics before evaluation and checkpoints; 0: keep the statistics averaged over the "
     "subnetworks' owners",
     0},
    {"val-data", OPT_STR, F(val_data), "", "validation shards (glob); text uses --val-frac", 0},
    {"val-frac", OPT_FLOAT, F(val_frac), "0.1", "fraction of a text file held out for validation",
     0},
    {"batch", OPT_INT, F(batch), "8", "sequences per micro-batch per worker", 1},
    {"grad-accum", OPT_INT, F(grad_accum), "1", "micro-batches accumulated per step", 1},
    {"steps", OPT_INT, F(steps), "1000", "optimizer steps in the whole run", 1},
    {"schedule-steps", OPT_INT, F(schedule_steps), "0",
     "steps of the warmup-and-cosine schedule; 0 = --steps (a resumed run keeps its own unless "
     "--reschedule)",
     0},
    {"reschedule", OPT_FLAG, F(reschedule), "false",
     "on resume with another --steps: stretch the schedule to the new --steps (default: keep "
     "the run's schedule)",
     0},
    {"warmup", OPT_INT, F(warmup), "-1", "linear warmup steps; -1 = 10% of --steps, at most 100",
     -1},
    {"lr", OPT_FLOAT, F(lr), "1e-3", "peak learning rate", 0},
    {"lr-min", OPT_FLOAT, F(lr_min), "1e-4", "final learning rate of the cosine decay", 0},
    {"optimizer", OPT_STR, F(optimizer), "adamw", "adamw or sgd", 0},
    {"weight-decay", OPT_FLOAT, F(weight_decay), "-1",
     "weight decay (matrices only); -1 = the optimizer's default: 0.1 AdamW, 5e-4 SGD", -1},
    {"decay-all", OPT_FLAG, F(decay_all), "false", "also decay norms, biases and embeddings", 0},
    {"beta1", OPT_FLOAT, F(beta1), "0.9", "AdamW beta1", 0},
    {"beta2", OPT_FLOAT, F(beta2), "0.95", "AdamW beta2", 0},
    {"eps", OPT_FLOAT, F(eps), "1e-8", "AdamW epsilon", 0},
    {"momentum", OPT_FLOAT, F(momentum), "0.9", "SGD momentum", 0},
    {"nesterov", OPT_FLAG, F(nesterov), "false", "SGD with Nesterov momentum", 0},
    {"clip", OPT_FLOAT, F(clip), "1.0", "clip gradients to this global norm; 0 = off", 0},
    {"sdp-mask", OPT_STR, F(sdp_mask), "none",
     "none (data parallelism), forward (compact subnetworks) or backward (masked gradients)", 0},
    {"sdp-unit", OPT_STR, F(sdp_unit), "neuron",
     "neuron (chunks of heads, MLP neurons or channels) or block (whole layers); neuron is the "
     "default because it trained better in every workload of docs/results.md",
     0},
    {"sdp-owners", OPT_INT, F(sdp_owners), "0", "owners k of each unit; 0 = from --sdp-coverage",
     0},
    {"sdp-coverage", OPT_FLOAT, F(sdp_coverage), "0.5",
     "fraction C = k/N of workers owning each unit (masked modes)", 0},
    {"sdp-assign", OPT_STR, F(sdp_assign), "cyclic", "cyclic or random (seeded, balanced)", 0},
    {"sdp-chunks", OPT_INT, F(sdp_chunks), "0",
     "neuron units per heads/MLP group; 0 = one per worker, or the next count that splits every "
     "group",
     0},
    {"sdp-seed", OPT_INT, F(sdp_seed), "0", "seed of the random assignment", 0},
    {"branch-scale", OPT_STR, F(branch_scale), "auto",
     "forward masking: none, inverse (scale kept branches by 1/C), or auto: inverse for neuron "
     "units on models without batch norm, else none (the choice docs/results.md supports)",
     0},
    {"zero", OPT_INT, F(zero), "0",
     "ZeRO stage: 0; 1 (optimizer state sharded over each unit's owners: each keeps about 1/k "
     "of it; gradients are reduce-scattered and updated parameters all-gathered, the same bytes "
     "as the all-reduce; on a device too); or 2 (gradients sharded too: "
     "each layer's are reduce-scattered as its backward ends, and the buffer keeps two layers and "
     "the shards; with --grad-accum A, every micro-batch reduce-scatters its layers: up to "
     "1 + (A - 1) / 2 times the bytes)",
     0},
    {"check-replicas", OPT_INT, F(check_replicas), "0",
     "every S steps, check that all owners of a unit hold identical state; 0 = never", 0},
    {"log-every", OPT_INT, F(log_every), "10", "steps between progress lines", 1},
    {"val-every", OPT_INT, F(val_every), "100", "steps between validations; 0 = only at the end",
     0},
    {"val-batches", OPT_INT, F(val_batches), "20", "batches per validation (per worker)", 1},
    {"ckpt-every", OPT_INT, F(ckpt_every), "0", "steps between checkpoints; 0 = only at the end",
     0},
    {"stop-after", OPT_INT, F(stop_after), "0",
     "stop (with a checkpoint) after this many steps of this invocation; resume later", 0},
    {"stall-timeout", OPT_FLOAT, F(stall_timeout), "0",
     "end the job when a rank makes no progress for this many seconds (a rank stopped or dead, a "
     "host or link down; jobs of 2 or more ranks); 0 = 10 times the slowest step, at least 60 s; "
     "-1 = never",
     -1},
    {"seed", OPT_INT, F(seed), "1337", "seed for initialisation and data order", 0},
    {"threads", OPT_INT, F(threads), "0", "threads per worker; 0 = cores / workers on the node", 0},
    {"gemm", OPT_STR, F(gemm), "dnnl", "GEMM provider: dnnl or openblas", 0},
    {"out", OPT_STR, F(out), "", "run directory; default runs/<model>-<date>-<time>", 0},
    {"resume", OPT_STR, F(resume), "", "continue the run in this directory", 0},
    {"overwrite", OPT_FLAG, F(overwrite), "false",
     "start a new run in an --out directory that holds an earlier run, replacing its files", 0},
    {"device", OPT_STR, F(device), "cpu",
     "cpu, or cuda (one GPU per rank; sdp-cuda trains there, sdp plan predicts for it); in sdp "
     "train only, emulated and emulated-shared run the device code on the CPU, for tests",
     0},
    {"precision", OPT_STR, F(precision), "fp32",
     "--device cuda: fp32 (exact GEMMs) or bf16 (GEMMs on tensor cores; weights, optimizer "
     "state and activations stay fp32)",
     0},
    {"sim-world", OPT_INT, F(sim_world), "0",
     "one process runs worker --sim-rank of an N-worker job alone, with no communication and "
     "no checkpoints (to measure its memory and speed); 0 = off",
     0},
    {"sim-rank", OPT_INT, F(sim_rank), "0", "the worker that --sim-world runs, in [0, N)", 0},
    {NULL, 0, 0, NULL, NULL, 0},
};

bool train_opt_may_change_on_resume(const char *name) {
    /* The checkpoint holds the full model and optimizer state, so the plan may change too: every
     * worker re-slices what it owns. */
    static const char *ok[] = {"steps",         "stop-after",     "log-every",  "val-every",
                               "val-batches",   "ckpt-every",     "threads",    "gemm",
                               "resume",        "check-replicas", "sdp-mask",   "sdp-unit",
                               "sdp-owners",    "sdp-coverage",   "sdp-assign", "sdp-chunks",
                               "sdp-seed",      "branch-scale",   "device",     "precision",
                               "stall-timeout", "reschedule",     "recompute",  "zero"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strcmp(ok[i], name) == 0) return true;
    return false;
}

bool train_opts_recompute(const train_opts *o) {
    if (strcmp(o->recompute, "none") == 0) return false;
    SDP_CHECK(strcmp(o->recompute, "layer") == 0, "unknown --recompute '%s': use none or layer",
              o->recompute);
    return true;
}

int train_opts_zero(const train_opts *o) {
    SDP_CHECK(o->zero >= 0 && o->zero <= 2, "unknown --zero %d: use 0, 1 or 2", o->zero);
    return o->zero;
}

void train_opts_check_zero(const train_opts *o) {
    const int stage = train_opts_zero(o);
    if (stage == 0) return;
    SDP_CHECK(o->sim_world == 0,
              "--zero %d needs the other owners to all-gather each update, which a --sim-world run "
              "does not have: use --zero 0",
              stage);
}

sdp_precision train_opts_precision(const train_opts *o) {
    if (strcmp(o->precision, "fp32") == 0) return SDP_PRECISION_FP32;
    SDP_CHECK(strcmp(o->precision, "bf16") == 0, "unknown --precision '%s': use fp32 or bf16",
              o->precision);
    return SDP_PRECISION_BF16;
}

void train_opts_check_precision(const train_opts *o) {
    SDP_CHECK(train_opts_precision(o) == SDP_PRECISION_FP32 || strcmp(o->device, "cuda") == 0,
              "--precision %s needs --device cuda (the CPU computes in fp32): use --precision "
              "fp32 or --device cuda",
              o->precision);
}

/* Which models an option applies to, for those that do not apply to all. */
enum { FOR_GPT = 1, FOR_LLAMA = 2, FOR_VIT = 4, FOR_RESNET = 8 };
enum { FOR_TOKENS = FOR_GPT | FOR_LLAMA, FOR_IMAGES = FOR_VIT | FOR_RESNET };

static const struct {
    const char *name;
    int models;
} MODEL_OPTS[] = {
    {"layers", FOR_TOKENS | FOR_VIT},
    {"heads", FOR_TOKENS | FOR_VIT},
    {"width", FOR_TOKENS | FOR_VIT},
    {"d-ff", FOR_TOKENS | FOR_VIT},
    {"seq-len", FOR_TOKENS},
    {"vocab", FOR_TOKENS},
    {"rope-theta", FOR_LLAMA},
    {"val-data", FOR_TOKENS},
    {"val-frac", FOR_TOKENS},
    {"depth", FOR_RESNET},
    {"channels", FOR_RESNET},
    {"patch", FOR_VIT},
    {"dataset", FOR_IMAGES},
    {"crop-pad", FOR_IMAGES},
    {"flip", FOR_IMAGES},
    {"bn-recal-batches", FOR_RESNET},
};

static int model_bit(const char *model) {
    return !strcmp(model, "gpt")      ? FOR_GPT
           : !strcmp(model, "llama")  ? FOR_LLAMA
           : !strcmp(model, "vit")    ? FOR_VIT
           : !strcmp(model, "resnet") ? FOR_RESNET
                                      : 0;
}

void train_opts_warn_unused(const train_opts *o, int argc, char **argv) {
    const int bit = model_bit(o->model);
    if (!bit) return; /* an unknown --model fails elsewhere */
    for (size_t i = 0; i < sizeof MODEL_OPTS / sizeof *MODEL_OPTS; i++)
        if (!(MODEL_OPTS[i].models & bit) && train_opts_given(argc, argv, MODEL_OPTS[i].name))
            sdp_warn("--%s does not apply to --model %s: it is ignored", MODEL_OPTS[i].name,
                     o->model);
}
