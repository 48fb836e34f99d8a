/* sdp train: the training loop, its progress output, checkpoints, resume, and final summary. */
#include "commands.h"
#include "run.h"

#include "sdp/check.h"
#include "sdp/ckpt.h"
#include "sdp/optim.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct {
    train_opts o;
    sdp_world world;
    sdp_mem mem;
    sdp_tokens train_data, val_data;
    sdp_loader train_loader, val_loader;
    bool has_val;
    sdp_tf model;
    sdp_optim opt;
    sdp_opt_segment *segs;
    int nsegs;
    int *inputs, *targets;
    long step; /* optimizer steps completed */
    double tokens_seen, flops_done;
    FILE *metrics;
} trainer;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool is_rank0(const trainer *t) {
    return t->world.rank == 0;
}

/* ---- set-up ------------------------------------------------------------------------------- */

static void make_dir(const char *dir) {
    char tmp[OPT_STR_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    SDP_CHECK(mkdir(tmp, 0755) == 0 || errno == EEXIST,
              "cannot create the run directory '%s' (%s): pick another --out", dir,
              strerror(errno));
}

static void choose_run_dir(trainer *t) {
    if (t->o.resume[0]) {
        strcpy(t->o.out, t->o.resume);
        return;
    }
    if (!t->o.out[0]) {
        char stamp[32];
        time_t now = time(NULL);
        /* All ranks must agree on the name, so rank 0's clock decides. */
        long long s = (long long)now;
        MPI_Bcast(&s, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        now = (time_t)s;
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        char dir[OPT_STR_MAX + 64];
        snprintf(dir, sizeof dir, "runs/%s-%s", t->o.model, stamp);
        SDP_CHECK(strlen(dir) < sizeof t->o.out, "run directory name too long");
        strcpy(t->o.out, dir);
    }
    if (is_rank0(t)) make_dir(t->o.out);
    MPI_Barrier(MPI_COMM_WORLD);
}

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
        memcpy((char *)&t->o + s->offset, (char *)&cli + s->offset,
               s->type == OPT_STR    ? OPT_STR_MAX
               : s->type == OPT_INT  ? sizeof(int)
               : s->type == OPT_FLAG ? sizeof(bool)
                                     : sizeof(double));
    }
    strcpy(t->o.resume, cli.resume);
    /* Stopping early is about one invocation, not the run: it never carries over. */
    if (!opts_given(argc, argv, "stop-after")) t->o.stop_after = 0;
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
    c.weight_decay = (float)o->weight_decay;
    SDP_CHECK(o->beta1 < 1 && o->beta2 < 1, "--beta1 and --beta2 must be below 1");
    return c;
}

/* One segment per tensor, so weight decay follows each tensor's metadata. */
static void build_segments(trainer *t) {
    const sdp_layout *L = &t->model.layout;
    t->segs = calloc((size_t)L->nparams, sizeof *t->segs);
    SDP_CHECK(t->segs, "out of memory");
    for (int i = 0; i < L->nparams; i++)
        t->segs[i] = (sdp_opt_segment){L->params[i].offset, L->params[i].numel,
                                       t->o.decay_all || L->params[i].decay, L->params[i].offset,
                                       L->params[i].offset};
    t->nsegs = L->nparams;
}

static void validate_options(train_opts *o) {
    if (o->warmup < 0) o->warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    SDP_CHECK(o->warmup <= o->steps, "--warmup %d exceeds --steps %d", o->warmup, o->steps);
    SDP_CHECK(o->lr_min <= o->lr, "--lr-min %g exceeds --lr %g", o->lr_min, o->lr);
}

static void setup(trainer *t, int argc, char **argv) {
    if (t->o.resume[0]) apply_resume_config(t, argc, argv);
    validate_options(&t->o);
    sdp_world_init(&t->world, &argc, &argv, t->o.threads);
    choose_run_dir(t);
    run_load_data(&t->o, &t->train_data, &t->val_data, &t->mem);
    t->has_val = t->val_data.ntokens > 0;
    /* Loaders first: they reject data too small for the batch before the model is allocated. */
    sdp_loader_init(&t->train_loader, &t->train_data, t->o.batch, t->o.seq_len, t->world.rank,
                    t->world.size, (uint64_t)t->o.seed, true, &t->mem);
    if (t->has_val)
        sdp_loader_init(&t->val_loader, &t->val_data, t->o.batch, t->o.seq_len, t->world.rank,
                        t->world.size, (uint64_t)t->o.seed, false, &t->mem);
    sdp_tf_config cfg = run_model_config(&t->o, t->train_data.vocab);
    sdp_tf_create(&t->model, &cfg, NULL, t->o.batch, t->o.seq_len, true, run_gemm(&t->o), &t->mem);
    sdp_layout_init_values(&t->model.layout, t->model.params, (uint64_t)t->o.seed);
    sdp_opt_cfg oc = optimizer_config(&t->o);
    sdp_optim_init(&t->opt, &oc, t->model.layout.numel, &t->mem);
    build_segments(t);
    size_t N = (size_t)t->o.batch * t->o.seq_len;
    t->inputs = sdp_alloc(&t->mem, SDP_MEM_DATA, N * sizeof(int));
    t->targets = sdp_alloc(&t->mem, SDP_MEM_DATA, N * sizeof(int));
}

/* ---- checkpoints -------------------------------------------------------------------------- */

static int optimizer_buffers(trainer *t, sdp_ckpt_buffer *b) {
    if (t->opt.cfg.kind == SDP_OPT_ADAMW) {
        b[0] = (sdp_ckpt_buffer){t->opt.m, ".exp_avg"};
        b[1] = (sdp_ckpt_buffer){t->opt.v, ".exp_avg_sq"};
        return 2;
    }
    if (!t->opt.m) return 0; /* SGD without momentum keeps no state */
    b[0] = (sdp_ckpt_buffer){t->opt.m, ".momentum_buffer"};
    return 1;
}

/* The model file is the full model, readable by any safetensors reader; the optimizer file holds
 * what resume needs to continue bit for bit. Both carry the step, and resume checks they agree.
 * The optimizer file is written first, so a model file always has a matching optimizer file. */
static void save_checkpoint(trainer *t) {
    if (!is_rank0(t)) return;
    char step[32], opt_t[32], ep[32], es[32], tok[64], fl[64], vocab[32], path[1024];
    snprintf(vocab, sizeof vocab, "%d", t->model.cfg.vocab);
    snprintf(step, sizeof step, "%ld", t->step);
    snprintf(opt_t, sizeof opt_t, "%ld", t->opt.t);
    snprintf(ep, sizeof ep, "%llu", (unsigned long long)t->train_loader.pos.epoch);
    snprintf(es, sizeof es, "%llu", (unsigned long long)t->train_loader.pos.step);
    snprintf(tok, sizeof tok, "%.17g", t->tokens_seen);
    snprintf(fl, sizeof fl, "%.17g", t->flops_done);
    const char *meta[] = {"format",           "pt", "sdp.step",        step,  "sdp.opt_t",  opt_t,
                          "sdp.loader_epoch", ep,   "sdp.loader_step", es,    "sdp.tokens", tok,
                          "sdp.flops",        fl,   "sdp.vocab",       vocab, NULL};
    sdp_ckpt_buffer ob[2];
    int nob = optimizer_buffers(t, ob);
    run_path(path, sizeof path, t->o.out, "optim.safetensors");
    sdp_ckpt_save(path, &t->model.layout, ob, nob, meta);
    sdp_ckpt_buffer pb = {t->model.params, ""};
    run_path(path, sizeof path, t->o.out, "model.safetensors");
    sdp_ckpt_save(path, &t->model.layout, &pb, 1, meta);
}

static long meta_long(const sdp_st_file *f, const char *key, const char *path) {
    const char *v = sdp_st_meta(f, key);
    SDP_CHECK(v, "%s has no '%s' metadata: it was not written by sdp train", path, key);
    return strtol(v, NULL, 10);
}

static void load_checkpoint(trainer *t) {
    char mpath[1024], opath[1024];
    run_path(mpath, sizeof mpath, t->o.out, "model.safetensors");
    run_path(opath, sizeof opath, t->o.out, "optim.safetensors");
    sdp_st_file mf, of;
    sdp_ckpt_buffer pb = {t->model.params, ""}, ob[2];
    int nob = optimizer_buffers(t, ob);
    sdp_ckpt_load(&mf, mpath, &t->model.layout, &pb, 1, &t->mem);
    sdp_ckpt_load(&of, opath, &t->model.layout, ob, nob, &t->mem);
    long step = meta_long(&mf, "sdp.step", mpath);
    SDP_CHECK(step == meta_long(&of, "sdp.step", opath),
              "%s and %s are from different steps: the checkpoint is inconsistent", mpath, opath);
    t->step = step;
    t->opt.t = meta_long(&of, "sdp.opt_t", opath);
    sdp_loader_pos pos = {(uint64_t)meta_long(&of, "sdp.loader_epoch", opath),
                          (uint64_t)meta_long(&of, "sdp.loader_step", opath)};
    sdp_loader_seek(&t->train_loader, pos);
    t->tokens_seen = strtod(sdp_st_meta(&of, "sdp.tokens"), NULL);
    t->flops_done = strtod(sdp_st_meta(&of, "sdp.flops"), NULL);
    sdp_st_close(&mf, &t->mem);
    sdp_st_close(&of, &t->mem);
}

/* Keeps metrics lines up to the resumed step, so the log reads as one uninterrupted run. */
static void open_metrics(trainer *t) {
    if (!is_rank0(t)) return;
    char path[1024];
    run_path(path, sizeof path, t->o.out, "metrics.jsonl");
    if (t->o.resume[0]) {
        FILE *in = fopen(path, "rb");
        char *kept = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&kept, &len);
        char line[4096];
        while (in && fgets(line, sizeof line, in)) {
            const char *s = strstr(line, "\"step\":");
            if (s && strtol(s + 7, NULL, 10) <= t->step) fputs(line, mem);
        }
        if (in) fclose(in);
        fclose(mem);
        sdp_write_file_atomic(path, kept, len);
        free(kept);
    }
    t->metrics = sdp_fopen(path, "ab");
}

static void write_config(trainer *t) {
    if (!is_rank0(t) || t->o.resume[0]) return;
    char *json = opts_to_json(TRAIN_OPTS, &t->o);
    char path[1024];
    run_path(path, sizeof path, t->o.out, "config.json");
    sdp_write_file_atomic(path, json, strlen(json));
    free(json);
}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct {
    double loss, grad_norm;
    float lr;
} step_result;

static step_result train_step(trainer *t) {
    sdp_tf *m = &t->model;
    const int B = t->o.batch, T = t->o.seq_len, A = t->o.grad_accum;
    memset(m->grads, 0, m->layout.numel * sizeof(float));
    double loss_sum = 0, count = 0;
    for (int a = 0; a < A; a++) {
        sdp_loader_next(&t->train_loader, t->inputs, t->targets);
        loss_sum += sdp_tf_forward(m, t->inputs, t->targets, B, T);
        count += m->n_targets;
        sdp_tf_backward(m, 1.0f / (float)(B * T * A));
    }
    /* Plain data parallelism: every worker holds everything, so gradients average over all. */
    if (t->world.size > 1) {
        MPI_Allreduce(MPI_IN_PLACE, m->grads, (int)m->layout.numel, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        sdp_scale(m->grads, m->layout.numel, 1.0f / (float)t->world.size);
    }
    double local[2] = {loss_sum, count}, global[2];
    MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    step_result r;
    r.loss = global[0] / global[1];
    r.grad_norm = sqrt(sdp_sumsq(m->grads, m->layout.numel));
    SDP_CHECK(isfinite(r.grad_norm),
              "the gradient became %g at step %ld: training diverged; lower --lr or raise "
              "--warmup",
              r.grad_norm, t->step + 1);
    sdp_scale(m->grads, m->layout.numel, sdp_clip_scale(r.grad_norm, (float)t->o.clip));
    r.lr = sdp_lr_at(t->step, t->o.warmup, t->o.steps, (float)t->o.lr, (float)t->o.lr_min);
    sdp_optim_step(&t->opt, m->params, m->grads, t->segs, t->nsegs, r.lr);
    t->step++;
    double tokens = (double)B * T * A * t->world.size;
    t->tokens_seen += tokens;
    t->flops_done += tokens * sdp_tf_train_flops_per_token(m, T);
    return r;
}

/* ---- output --------------------------------------------------------------------------------- */

static void fmt_duration(char *buf, size_t n, double s) {
    if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void log_progress(trainer *t, const step_result *r, double loss_avg, double dt, int nsteps,
                         double elapsed) {
    if (!is_rank0(t)) return;
    const double tokens = (double)t->o.batch * t->o.seq_len * t->o.grad_accum * nsteps;
    const double tok_s = tokens / dt, ms = 1000.0 * dt / nsteps;
    char mem[32], eta[32];
    sdp_fmt_bytes(mem, sizeof mem, (double)t->mem.total_cur);
    fmt_duration(eta, sizeof eta, (double)(t->o.steps - t->step) * dt / nsteps);
    printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s/worker | %7.1f ms/step | "
           "mem %s | eta %s\n",
           t->step, t->o.steps, loss_avg, r->lr, r->grad_norm, tok_s, ms, mem, eta);
    fflush(stdout);
    fprintf(t->metrics,
            "{\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens_per_s\":%.6g,"
            "\"ms_per_step\":%.6g,\"tokens\":%.17g,\"flops\":%.17g,\"mem_bytes\":%zu,"
            "\"elapsed_s\":%.3f}\n",
            t->step, loss_avg, r->lr, r->grad_norm, tok_s, ms, t->tokens_seen, t->flops_done,
            t->mem.total_cur, elapsed);
    fflush(t->metrics);
}

static double validate(trainer *t, double elapsed) {
    if (!t->has_val) return NAN;
    double v = run_eval_loss(&t->model, &t->val_loader, t->o.val_batches, t->inputs, t->targets);
    if (is_rank0(t)) {
        printf("step %5ld/%d | val loss %.4f (%.4f bits/token)\n", t->step, t->o.steps, v,
               v / log(2.0));
        fprintf(t->metrics,
                "{\"step\":%ld,\"val_loss\":%.9g,\"tokens\":%.17g,\"flops\":%.17g,"
                "\"elapsed_s\":%.3f}\n",
                t->step, v, t->tokens_seen, t->flops_done, elapsed);
        fflush(t->metrics);
    }
    return v;
}

static void print_start(const trainer *t) {
    if (!is_rank0(t)) return;
    const sdp_tf *m = &t->model;
    char p[32];
    printf("sdp train: %s, %d layers, %d heads, width %d, d_ff %d, vocab %d (padded %d), "
           "seq %d\n",
           sdp_tf_style_name(m->cfg.style), m->cfg.n_layer, m->cfg.n_head, m->cfg.d_model,
           m->cfg.d_ff, m->cfg.vocab, m->cfg.vocab_padded, m->cfg.seq_len);
    printf("  parameters %.2fM (%s) | workers %d | threads/worker %d (cores %d) | gemm %s\n",
           (double)m->layout.numel / 1e6, sdp_fmt_bytes(p, sizeof p, (double)m->layout.numel * 4),
           t->world.size, t->world.threads, t->world.cores, sdp_gemm_provider_name(m->gemm));
    printf("  data %s: %zu train tokens, %zu val tokens | batch %d x %d x %d accum | run dir %s\n",
           t->o.data, t->train_data.ntokens, t->val_data.ntokens, t->o.batch, t->o.seq_len,
           t->o.grad_accum, t->o.out);
    if (t->o.resume[0]) printf("  resumed at step %ld\n", t->step);
    fflush(stdout);
}

static void print_summary(const trainer *t, double final_val, double wall) {
    if (!is_rank0(t)) return;
    char b[32];
    printf("\nsummary: %ld steps in %.1f s | final train loss see metrics.jsonl | val loss %.4f\n",
           t->step, wall, final_val);
    printf("  memory of worker 0 by category (peak):\n");
    for (int c = 0; c < SDP_MEM_NCAT; c++)
        printf("    %-12s %12s\n", sdp_memcat_name((sdp_memcat)c),
               sdp_fmt_bytes(b, sizeof b, (double)t->mem.peak[c]));
    printf("    %-12s %12s\n", "total", sdp_fmt_bytes(b, sizeof b, (double)t->mem.total_peak));
    printf("    %-12s %12s\n", "peak RSS", sdp_fmt_bytes(b, sizeof b, (double)sdp_peak_rss()));
    printf("  run directory: %s (config.json, metrics.jsonl, model.safetensors)\n", t->o.out);
}

/* ---- entry point ---------------------------------------------------------------------------- */

int cmd_train(int argc, char **argv) {
    trainer t;
    memset(&t, 0, sizeof t);
    opts_parse(TRAIN_OPTS, &t.o, argc, argv,
               "usage: sdp train --data FILE [options]\n"
               "Trains a byte-level (text) or token-level (llm.c shards) transformer.");
    setup(&t, argc, argv);
    if (t.o.resume[0]) load_checkpoint(&t);
    write_config(&t);
    open_metrics(&t);
    print_start(&t);

    const double t0 = now_s();
    double window_t = t0, window_loss = 0, final_val = NAN;
    int window_steps = 0;
    const long first = t.step;
    while (t.step < t.o.steps) {
        step_result r = train_step(&t);
        window_loss += r.loss;
        window_steps++;
        const bool last = t.step == t.o.steps;
        const bool stop = t.o.stop_after > 0 && t.step - first >= t.o.stop_after;
        if (t.step % t.o.log_every == 0 || last || stop) {
            double now = now_s();
            log_progress(&t, &r, window_loss / window_steps, now - window_t, window_steps,
                         now - t0);
            window_t = now;
            window_loss = 0;
            window_steps = 0;
        }
        if ((t.o.val_every > 0 && t.step % t.o.val_every == 0) || last)
            final_val = validate(&t, now_s() - t0);
        if ((t.o.ckpt_every > 0 && t.step % t.o.ckpt_every == 0) || last || stop)
            save_checkpoint(&t);
        if (stop) break;
    }
    print_summary(&t, final_val, now_s() - t0);
    if (t.metrics) fclose(t.metrics);
    sdp_world_finalize();
    return 0;
}
