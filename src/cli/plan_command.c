/* sdp plan: what each worker of an N-worker job will hold and send, predicted without
 * allocating, next to data parallelism. Uses the trainer's own allocation code in counting mode,
 * so the prediction equals what `sdp train` allocates. */
#include "commands.h"
#include "plan_fit.h"
#include "plan_measure.h"
#include "plan_steptime.h"
#include "train/io_memplan.h"
#include "train/run.h"
#include "train/run_plan.h"
#include "train/worker_count.h"

#include "sdp/backend.h"
#include "sdp/check.h"
#include "sdp/comm.h"
#include "sdp/cuda_scratch.h"
#include "sdp/memplan.h"
#include "sdp/ops.h"
#include "sdp/optim.h"
#include "sdp/steptime.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    train_opts t; /* first, so TRAIN_OPTS offsets apply */
    int world, show, threads;
    char dtype[OPT_STR_MAX];
    bool json;
    plan_steptime_opts st;
    char fit[OPT_STR_MAX], fit_by[OPT_STR_MAX]; /* sdp plan --fit (plan_fit.h) */
} plan_opts;

static const char *SHARED_OPTS[] = {"model",
                                    "layers",
                                    "heads",
                                    "width",
                                    "d-ff",
                                    "seq-len",
                                    "vocab",
                                    "batch",
                                    "optimizer",
                                    "sdp-mask",
                                    "sdp-unit",
                                    "sdp-owners",
                                    "sdp-coverage",
                                    "sdp-assign",
                                    "sdp-chunks",
                                    "sdp-seed",
                                    "branch-scale",
                                    "seed",
                                    "depth",
                                    "channels",
                                    "patch",
                                    "dropout",
                                    "dataset",
                                    "device",
                                    "precision",
                                    "val-batches",
                                    "bn-recal-batches",
                                    "threads",
                                    "recompute",
                                    "zero",
                                    "grad-accum",
                                    NULL};

static opt_spec *plan_specs(void) {
    static const opt_spec extra[] = {
        {"world", OPT_INT, offsetof(plan_opts, world), "8", "number of workers N", 1},
        {"dtype", OPT_STR, offsetof(plan_opts, dtype), "fp32",
         "fp32, or bf16: a projection of bf16 weights, grads and activations with fp32 master "
         "weights (sdp train stores fp32 today, --precision bf16 included)",
         0},
        {"json", OPT_FLAG, offsetof(plan_opts, json), "false", "print JSON instead of a table", 0},
        {"show", OPT_INT, offsetof(plan_opts, show), "8", "workers listed in the table", 1},
        {"fit", OPT_STR, offsetof(plan_opts, fit), "",
         "BYTES (24GiB, 512MiB, 1.5e9): print, for DDP and each SDP mode, the largest model whose "
         "largest worker fits",
         0},
        {"fit-by", OPT_STR, offsetof(plan_opts, fit_by), "width",
         "what --fit varies: width (resnet: --channels) or layers (resnet: --depth)", 0},
    };
    size_t n = 0, ne = sizeof extra / sizeof *extra;
    opt_spec *s = sdp_xcalloc(64, sizeof *s, "sdp plan's options");
    for (const opt_spec *o = TRAIN_OPTS; o->name; o++)
        for (const char **k = SHARED_OPTS; *k; k++)
            if (strcmp(*k, o->name) == 0) s[n++] = *o;
    /* The plan reads no data: a vocabulary of 0 is byte-level text's. */
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, "vocab"))
            s[i].help = "vocabulary size; 0 = 256, byte-level text (sdp plan reads no data: give "
                        "token data's, e.g. 50257 for GPT-2 shards)";
    for (size_t i = 0; i < ne; i++) s[n++] = extra[i];
    plan_steptime_specs(s + n, offsetof(plan_opts, st));
    return s; /* zero-terminated by calloc */
}

typedef struct {
    double params, grads, optim, acts, scratch, buffers, eval_ckpt, sent;
    double flops;       /* forward and backward per step, as the worker's model counts them */
    double owned_grads; /* what its gradients would take whole: more than grads but for --zero 2 */
} worker_bytes;

static bool on_cuda(const plan_opts *o) {
    return strcmp(o->t.device, "cuda") == 0;
}

/* The storage the plan counts, as the header names it. */
static const char *dtype_name(const plan_opts *o) {
    if (strcmp(o->dtype, "bf16") == 0) return "bf16 (projected)";
    return train_opts_precision(&o->t) == SDP_PRECISION_BF16 ? "fp32, bf16 products" : "fp32";
}

/* A backend that allocates nothing and counts what the model would allocate on the device the
 * plan is for. */
static sdp_backend *counting_backend(const plan_opts *o, sdp_mem *dry) {
    return train_counting_backend(on_cuda(o), train_opts_precision(&o->t), SDP_GEMM_DNNL, dry);
}

static sdp_opt_cfg opt_cfg_of(const plan_opts *o) {
    return sdp_opt_defaults(strcmp(o->t.optimizer, "sgd") == 0 ? SDP_OPT_SGD : SDP_OPT_ADAMW);
}

/* Every rank's evaluation and checkpoint bytes (out[world]), for a validation set of at least
 * --val-batches batches per worker (text) or the dataset's test split (images). */
static void predict_eval_ckpt(const sdp_plan *p, const sdp_layout *full,
                              const sdp_model_config *cfg, const plan_opts *o, double *out) {
    const bool images = train_run_images(&o->t);
    const sdp_opt_cfg oc = opt_cfg_of(o);
    const io_memplan_run run = {
        .cfg = cfg,
        .full = full,
        .plan = p,
        .B = o->t.batch,
        .T = images ? 1 : o->t.arch.seq_len,
        .val_batches = images ? UINT64_MAX : (uint64_t)o->t.val_batches,
        .recal_batches = (uint64_t)o->t.bn_recal_batches,
        .state_buffers = (int)(sdp_optim_state_bytes_per_param(&oc) / sizeof(float)),
        .images = images,
        .on_device = on_cuda(o),
        .gemm = SDP_GEMM_DNNL,
    };
    train_io_memplan_predict(&run, out);
}

/* counting_backend as train_worker_count_all takes it. */
static sdp_backend *counting_backend_of(const void *o, sdp_mem *dry) {
    return counting_backend(o, dry);
}

/* A worker's bytes, from its model as counted (c) and its share of the plan (w). */
static worker_bytes bytes_of(const worker_count *c, const sdp_worker_plan *wp, const plan_opts *o) {
    const int T = train_run_images(&o->t) ? 1 : o->t.arch.seq_len; /* images have no sequence */
    const sdp_worker_plan w = *wp;
    const bool bf16 = strcmp(o->dtype, "bf16") == 0;
    const double wbytes = bf16 ? 2 : 4;
    const sdp_opt_cfg oc = opt_cfg_of(o);
    worker_bytes b = {0};
    b.params = (double)c->numel * wbytes;
    b.grads = (double)w.grad_elems * wbytes;
    b.owned_grads = (double)w.owned * wbytes;
    b.optim =
        (double)w.state_elems * ((double)sdp_optim_state_bytes_per_param(&oc) + (bf16 ? 4 : 0));
    b.acts = (double)c->peak[SDP_MEM_ACTS] * (bf16 ? 0.5 : 1.0);
    b.scratch =
        (double)c->peak[SDP_MEM_SCRATCH] + (on_cuda(o) ? sdp_cuda_context_scratch_bytes() : 0);
    /* The trainer has no bf16 path: the buffer is sized by the weight dtype, as the halved bytes
     * sent assume bf16 weights are what is published through it. */
    b.buffers = (double)w.bucket_elems * wbytes;
    b.sent = (double)w.sent_per_step * (bf16 ? 0.5 : 1.0);
    b.flops = (double)o->t.batch * T * c->flops_per_example;
    return b;
}

static worker_bytes predict(const sdp_plan *p, const sdp_layout *full, const sdp_model_config *cfg,
                            const plan_opts *o, int rank) {
    const int T = train_run_images(&o->t) ? 1 : o->t.arch.seq_len;
    const worker_count c =
        train_worker_count_one(cfg, p, full, rank, o->t.batch, T, counting_backend_of, o);
    sdp_worker_plan w;
    sdp_memplan_worker(p, full, rank, &w);
    return bytes_of(&c, &w, o);
}

/* Every worker's bytes (rows[world]), with their evaluation and checkpoint bytes io[world]; each
 * distinct subnetwork's model is counted once. */
static void predict_workers(const sdp_plan *p, const sdp_layout *full, const sdp_model_config *cfg,
                            const plan_opts *o, const double *io, worker_bytes *rows) {
    const int T = train_run_images(&o->t) ? 1 : o->t.arch.seq_len;
    worker_count *c = sdp_xmalloc(sizeof *c * (size_t)o->world, "the workers' model sizes");
    sdp_worker_plan *w = sdp_xmalloc(sizeof *w * (size_t)o->world, "the workers' model sizes");
    train_worker_count_all(cfg, p, full, o->t.batch, T, counting_backend_of, o, c);
    sdp_memplan_workers(p, full, w);
    for (int r = 0; r < o->world; r++) {
        rows[r] = bytes_of(&c[r], &w[r], o);
        rows[r].eval_ckpt = io[r];
    }
    free(c);
    free(w);
}

static double total_of(const worker_bytes *b) {
    return b->params + b->grads + b->optim + b->acts + b->scratch + b->buffers + b->eval_ckpt;
}

static void print_row(const char *name, const worker_bytes *b) {
    char s[9][32];
    const double v[9] = {b->params,  b->grads,     b->optim,    b->acts, b->scratch,
                         b->buffers, b->eval_ckpt, total_of(b), b->sent};
    for (int i = 0; i < 9; i++) sdp_fmt_bytes(s[i], sizeof s[i], v[i]);
    printf("  %-8s %10s %10s %10s %12s %10s %10s %10s %10s %12s\n", name, s[0], s[1], s[2], s[3],
           s[4], s[5], s[6], s[7], s[8]);
}

/* st: the worker's predicted step, or NULL without the step-time model. */
static void print_json_row(const worker_bytes *b, int rank, const sdp_step_times *st, bool last) {
    printf("    {\"rank\": %d, \"params\": %.0f, \"grads\": %.0f, \"optimizer\": %.0f, "
           "\"activations\": %.0f, \"scratch\": %.0f, \"buffers\": %.0f, \"eval_ckpt\": %.0f, "
           "\"total\": %.0f, \"sent_per_step\": %.0f",
           rank, b->params, b->grads, b->optim, b->acts, b->scratch, b->buffers, b->eval_ckpt,
           total_of(b), b->sent);
    if (st) plan_steptime_json_fields(st, b->flops);
    printf("}%s\n", last ? "" : ",");
}

/* The model in its family's own terms: a ResNet has a depth and base channels, not layers. */
static void describe_shape(char *buf, size_t len, const sdp_model_config *c) {
    if (!strcmp(c->arch, "resnet"))
        snprintf(buf, len, "resnet, depth %d, %d base channels", c->depth, c->channels);
    else if (!strcmp(c->arch, "vit"))
        snprintf(buf, len, "vit, %d layers, width %d, %d heads, patch %d", c->layers, c->width,
                 c->heads, c->patch);
    else
        snprintf(buf, len, "%s, %d layers, width %d, vocabulary %d", c->arch, c->layers, c->width,
                 c->vocab);
}

/* Every worker's step and DDP's under the step-time model. */
static void predict_steps(const plan_opts *o, const sdp_plan *plan, const sdp_plan *ddp_plan,
                          const sdp_layout *full, const worker_bytes *rows, const worker_bytes *ddp,
                          sdp_steptime_cfg *sc, plan_calibration *cal, sdp_step_times *st,
                          sdp_step_times *ddp_st, sdp_mem *mem) {
    const sdp_opt_cfg oc = opt_cfg_of(o);
    plan_steptime_config(&o->st, o->world, on_cuda(o), strcmp(o->dtype, "bf16") == 0,
                         (double)sdp_optim_state_bytes_per_param(&oc), sc, cal);
    sc->recompute = train_opts_recompute(&o->t);
    sc->micro_batches = o->t.grad_accum;
    double *flops = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)o->world * sizeof(double));
    sdp_step_times *d = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)o->world * sizeof *d);
    const size_t nt = (size_t)o->world + 1; /* every worker, then a DDP worker */
    double *fwd = NULL, *bwd = NULL;
    if (o->st.measure_steps > 0) {
        const plan_measure_request req = {&o->t, SHARED_OPTS, o->world, o->st.measure_steps,
                                          o->threads};
        fwd = sdp_alloc(mem, SDP_MEM_SCRATCH, nt * sizeof(double));
        bwd = sdp_alloc(mem, SDP_MEM_SCRATCH, nt * sizeof(double));
        plan_measure_compute(&req, fwd, bwd);
        sc->forward_s = fwd, sc->backward_s = bwd;
    }
    for (int r = 0; r < o->world; r++) flops[r] = rows[r].flops;
    sdp_steptime_predict(plan, full, flops, sc, st);
    for (int r = 0; r < o->world; r++) flops[r] = ddp->flops; /* every DDP worker is alike */
    for (int r = 0; fwd && r < o->world; r++) fwd[r] = fwd[o->world], bwd[r] = bwd[o->world];
    sdp_steptime_predict(ddp_plan, full, flops, sc, d);
    *ddp_st = d[0];
    for (int r = 0; r <= o->world; r++)
        SDP_CHECK(isfinite(r < o->world ? st[r].step : ddp_st->step),
                  "the step-time model's rates give %s a step longer than any number: give "
                  "realistic --link-gbps, --gflops, --host-gbps, --host-bcast-gbps and --mem-gbs",
                  r < o->world ? "a worker" : "DDP");
    sc->forward_s = sc->backward_s = NULL; /* the timing marks the output through cal */
    sdp_free(mem, fwd);
    sdp_free(mem, bwd);
    sdp_free(mem, flops);
    sdp_free(mem, d);
}

/* sc and st are NULL without the step-time model. */
static void print_json(const plan_opts *o, const sdp_layout *full, const worker_bytes *rows,
                       const worker_bytes *ddp, const sdp_steptime_cfg *sc,
                       const plan_calibration *cal, const sdp_step_times *st,
                       const sdp_step_times *ddp_st) {
    printf("{\n  \"parameters\": %zu,\n  \"world\": %d,\n  \"workers\": [\n", full->numel,
           o->world);
    for (int r = 0; r < o->world; r++)
        print_json_row(&rows[r], r, st ? &st[r] : NULL, r == o->world - 1);
    printf("  ],\n  \"ddp\": ");
    print_json_row(ddp, 0, st ? ddp_st : NULL, !st);
    if (st) plan_steptime_json_summary(sc, cal, st, o->world, ddp_st);
    printf("}\n");
}

static void print_title(const plan_opts *o, const sdp_plan_cfg *pc, const sdp_plan *plan,
                        const sdp_model_config *cfg, int threads, size_t numel) {
    char shape[128];
    describe_shape(shape, sizeof shape, cfg);
    printf("sdp plan: %s, %.2fM parameters | N = %d workers | ", shape, (double)numel / 1e6,
           o->world);
    if (pc->mask == SDP_MASK_NONE)
        printf("data parallelism");
    else
        printf("%s masking, %s units, k = %d (C = %.3g)", sdp_mask_mode_name(pc->mask),
               sdp_unit_kind_name(pc->unit), plan->cfg.owners, sdp_plan_coverage(plan));
    if (pc->mask == SDP_MASK_FORWARD) printf(", branch scale %s", sdp_branch_scale_name(pc->scale));
    const char *dtype = dtype_name(o);
    if (train_run_images(&o->t))
        printf(" | batch %d images", o->t.batch);
    else
        printf(" | batch %d x %d", o->t.batch, o->t.arch.seq_len);
    if (cfg->recompute) printf(", recompute layer");
    if (pc->zero) printf(", zero %d", pc->zero);
    printf(" | %s, %s, %d thread%s per worker\n", o->t.device, dtype, threads,
           threads == 1 ? "" : "s");
}

/* "36.4% smaller", "1.7% larger" or "the same" (at the printed precision). */
static const char *vs_ddp(char *buf, size_t n, double bytes, double ddp) {
    const double pct = 100 * (bytes / ddp - 1);
    if (fabs(pct) < 0.05)
        snprintf(buf, n, "the same");
    else
        snprintf(buf, n, "%.1f%% %s", fabs(pct), pct < 0 ? "smaller" : "larger");
    return buf;
}

static void print_table(const plan_opts *o, const sdp_plan_cfg *pc, const sdp_plan *plan,
                        const sdp_model_config *cfg, int threads, size_t numel,
                        const worker_bytes *rows, const worker_bytes *ddp) {
    print_title(o, pc, plan, cfg, threads, numel);
    printf("  %-8s %10s %10s %10s %12s %10s %10s %10s %10s %12s\n", "worker", "params", "grads",
           "optimizer", "activations", "scratch", "buffers", "eval+ckpt", "total", "sent/step");
    worker_bytes worst = {0};
    double worst_state = 0, worst_total = 0;
    for (int r = 0; r < o->world; r++) {
        const worker_bytes *b = &rows[r];
        const double state = b->params + b->grads + b->optim, total = total_of(b);
        if (state > worst_state) worst_state = state;
        if (total > worst_total) worst_total = total, worst = *b;
        if (r < o->show) {
            char name[16];
            snprintf(name, sizeof name, "%d", r);
            print_row(name, b);
        } else if (r == o->show)
            printf("  ... (%d more worker%s; --show N lists more)\n", o->world - o->show,
                   o->world - o->show == 1 ? "" : "s");
    }
    print_row("largest", &worst);
    print_row("DDP", ddp);
    char state_cmp[32], total_cmp[32];
    printf("  largest worker vs DDP: params+grads+optimizer %s, total %s\n",
           vs_ddp(state_cmp, sizeof state_cmp, worst_state, ddp->params + ddp->grads + ddp->optim),
           vs_ddp(total_cmp, sizeof total_cmp, worst_total, total_of(ddp)));
    printf("  eval+ckpt: evaluation and checkpoint buffers at their peak, beyond the activations "
           "that evaluation borrows under forward masking on the host (docs/design.md); not "
           "counted: the dataset\n");
    int more = 0;
    for (int r = 0; r < o->world; r++) more += rows[r].grads > rows[r].owned_grads;
    if (more)
        printf("  --zero 2 holds more gradient memory than --zero 1 on %d of %d workers: two slots "
               "of the largest layer, the stem and head outweigh the shards' saving; use --zero "
               "1\n",
               more, o->world);
    if (on_cuda(o))
        printf("  scratch on cuda: the model's attention scratch (%s) and %.0f MiB of cuBLAS "
               "and kernel workspaces%s\n",
               train_opts_precision(&o->t) == SDP_PRECISION_BF16
                   ? "bf16: the fused kernels keep the scores on chip at head sizes 16, 32, 64 "
                     "and 128, on sm_80 or newer"
                   : "fp32: the score matrices of one sequence",
               (double)sdp_cuda_context_scratch_bytes() / (1 << 20),
               train_run_images(&o->t) && !strcmp(cfg->arch, "resnet")
                   ? "; cuDNN may grow the workspace at run time for its convolutions"
                   : "");
}

/* sdp plan --fit's measure (plan_fit.h): the largest worker under t, as the table's "largest"
 * row, or under --sdp-mask none as its DDP row (rank 0, whose plan has one chunk per group). */
static plan_fit_point fit_measure(void *ctx, const train_opts *t) {
    plan_opts o = *(const plan_opts *)ctx;
    o.t = *t;
    sdp_model_config cfg = train_run_model_config(&o.t, train_run_dataset_shape(&o.t));
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    sdp_plan_cfg pc = train_run_plan_config(&o.t, o.world, &full);
    plan_check_worker_blocks(o.world, full.nblocks, pc.mask == SDP_MASK_FORWARD);
    const bool ddp = pc.mask == SDP_MASK_NONE;
    if (ddp) pc.owners = o.world, pc.chunks = 0;
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    double *io = sdp_xcalloc((size_t)o.world, sizeof(double), "the workers' predictions");
    worker_bytes *rows =
        sdp_xcalloc(ddp ? 1 : (size_t)o.world, sizeof *rows, "the workers' predictions");
    predict_eval_ckpt(&plan, &full, &cfg, &o, io);
    plan_fit_point pt = {.params = full.numel};
    if (ddp) {
        rows[0] = predict(&plan, &full, &cfg, &o, 0);
        rows[0].eval_ckpt = io[0];
        pt.bytes = total_of(&rows[0]);
    } else {
        predict_workers(&plan, &full, &cfg, &o, io, rows);
        for (int r = 0; r < o.world; r++)
            if (total_of(&rows[r]) > pt.bytes) pt.bytes = total_of(&rows[r]), pt.rank = r;
    }
    free(rows);
    free(io);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
    return pt;
}

int cmd_plan(int argc, char **argv) {
    enum { PLAN_MAX_WORLD = 65536 };
    plan_opts o;
    memset(&o, 0, sizeof o);
    opt_spec *specs = plan_specs();
    train_opts_parse(specs, &o, argc, argv,
                     "usage: sdp plan --world N [model and SDP options]\n"
                     "Predicts each worker's memory by category and bytes sent per step, without "
                     "allocating.");
    /* Each worker's plan is built and printed: about 0.3 ms a worker for a small model, so this
     * bound keeps the worst case near 20 s (a typo of a few zeros would otherwise run for hours).
     */
    SDP_CHECK(o.world <= PLAN_MAX_WORLD,
              "--world %d is more workers than sdp plan models (at most %d): use a smaller N",
              o.world, PLAN_MAX_WORLD);
    SDP_CHECK(!strcmp(o.dtype, "fp32") || !strcmp(o.dtype, "bf16"),
              "unknown --dtype '%s': use fp32 or bf16", o.dtype);
    SDP_CHECK(!strcmp(o.t.device, "cpu") || on_cuda(&o), "unknown --device '%s': use cpu or cuda",
              o.t.device);
    SDP_CHECK(!strcmp(o.t.optimizer, "adamw") || !strcmp(o.t.optimizer, "sgd"),
              "unknown --optimizer '%s': use adamw or sgd", o.t.optimizer);
    train_opts_check_precision(&o.t);
    train_opts_warn_unused(&o.t, argc, argv);
    train_run_plan_check_options(&o.t, o.world, "--world"); /* what sdp train refuses, said alike */
    train_opts_check_zero(&o.t);
    const bool fitting =
        train_opts_given(argc, argv, "fit") || train_opts_given(argc, argv, "fit-by");
    if (!fitting) train_run_plan_warn_ignored(&o.t, argc, argv); /* --fit plans every mode */
    plan_steptime_warn_ignored(&o.st, fitting, argc, argv);
    /* CPU kernels keep scratch per thread: count it for the threads each worker will run, which
     * sdp train chooses the same way (all N workers on this machine). */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = o.t.threads > 0       ? o.t.threads
                        : cores / o.world > 1 ? (int)(cores / o.world)
                                              : 1;
    /* The count sizes scratch; only timing runs kernels (sdp_set_threads starts OpenBLAS's
     * pool, whose buffers at many threads can exhaust a virtual-memory limit). */
    omp_set_num_threads(threads);
    if (plan_steptime_on(&o.st) && (o.st.gflops <= 0 || o.st.measure_steps > 0))
        sdp_set_threads(threads);
    o.threads = threads;
    if (fitting) {
        const plan_fit_request fit = {
            .t = &o.t,
            .world = o.world,
            .fit = train_opts_given(argc, argv, "fit") ? o.fit : NULL,
            .fit_by = o.fit_by,
            .json = o.json,
            .mask_given = train_opts_given(argc, argv, "sdp-mask"),
            .unit_given = train_opts_given(argc, argv, "sdp-unit"),
            .device = o.t.device,
            .dtype = dtype_name(&o),
            .threads = threads,
            .measure = fit_measure,
            .ctx = &o,
        };
        free(specs);
        return plan_fit_run(&fit);
    }
    sdp_model_config cfg = train_run_model_config(&o.t, train_run_dataset_shape(&o.t));
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    sdp_plan_cfg pc = train_run_plan_config(&o.t, o.world, &full);
    plan_check_worker_blocks(o.world, full.nblocks, pc.mask == SDP_MASK_FORWARD);
    sdp_plan plan, ddp_plan;
    sdp_plan_build(&plan, &pc, &full);
    train_run_plan_check_owners(&plan);
    sdp_plan_cfg dc = pc;
    dc.mask = SDP_MASK_NONE;
    dc.owners = o.world;
    dc.chunks = 0;
    dc.zero = 0; /* the DDP row is plain data parallelism, as in sdp train's summary */
    sdp_plan_build(&ddp_plan, &dc, &full);
    worker_bytes ddp = predict(&ddp_plan, &full, &cfg, &o, 0);
    double *io = sdp_xcalloc((size_t)o.world, sizeof(double), "the workers' predictions");
    predict_eval_ckpt(&ddp_plan, &full, &cfg, &o, io);
    ddp.eval_ckpt = io[0]; /* rank 0, which writes the checkpoint, is DDP's largest */
    predict_eval_ckpt(&plan, &full, &cfg, &o, io);

    sdp_mem mem = {0};
    worker_bytes *rows = sdp_alloc(&mem, SDP_MEM_SCRATCH, (size_t)o.world * sizeof *rows);
    predict_workers(&plan, &full, &cfg, &o, io, rows);
    sdp_step_times *st = NULL, ddp_st;
    sdp_steptime_cfg sc;
    plan_calibration cal;
    if (plan_steptime_on(&o.st)) {
        st = sdp_alloc(&mem, SDP_MEM_SCRATCH, (size_t)o.world * sizeof *st);
        predict_steps(&o, &plan, &ddp_plan, &full, rows, &ddp, &sc, &cal, st, &ddp_st, &mem);
    }
    if (o.json)
        print_json(&o, &full, rows, &ddp, st ? &sc : NULL, &cal, st, &ddp_st);
    else {
        print_table(&o, &pc, &plan, &cfg, threads, full.numel, rows, &ddp);
        if (st) plan_steptime_print(&sc, &cal, st, o.world, o.show, &ddp_st);
    }
    sdp_free(&mem, rows);
    sdp_free(&mem, st);
    free(io);
    sdp_plan_free(&plan);
    sdp_plan_free(&ddp_plan);
    sdp_layout_free(&full);
    free(specs);
    if (st && o.st.measure_steps > 0) sdp_world_finalize(); /* the timing started MPI */
    return 0;
}
