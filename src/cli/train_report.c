/* What `sdp train` shows and writes: the run directory's config.json, plan.json and
 * metrics.jsonl, the start-up banner and ownership table, progress lines, and the final summary
 * of memory per worker next to data parallelism's, and of bytes communicated. */
#include "train/eval_progress.h"
#include "train/io_memplan.h"
#include "train/run_dir.h"
#include "train/run_history.h"
#include "train/worker_count.h"
#include "train_report.h"

#include "sdp/check.h"
#include "sdp/atomic_file.h"
#include "sdp/cuda_scratch.h"
#include "sdp/safetensors.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void check_metrics_log(const trainer *t) {
    if (!is_rank0(t) || !t->o.resume[0]) return;
    char path[1024];
    train_run_path(path, sizeof path, t->o.out, "metrics.jsonl");
    if (access(path, F_OK) == 0) close(sdp_open_input(path, "metrics log", NULL));
}

void write_run_files(trainer *t, int argc, char **argv) {
    if (!is_rank0(t)) return;
    char path[1024];
    /* config.json describes what the run trains from here on (a further resume continues it),
     * and keeps every earlier invocation's setting in "invocations". */
    train_run_path(path, sizeof path, t->o.out, "config.json");
    char *previous = t->o.resume[0] ? train_run_read_text(path) : NULL;
    const run_resolved resolved = train_run_resolved_of(&t->plan);
    char *json =
        train_run_history_config_json(&t->o, &resolved, previous, path, t->step, argc, argv);
    sdp_write_file_atomic(path, json, strlen(json));
    free(json);
    free(previous);
    char *plan = sdp_plan_to_json(&t->plan, &t->full);
    train_run_path(path, sizeof path, t->o.out, "plan.json");
    sdp_write_file_atomic(path, plan, strlen(plan));
    free(plan);
}

/* Keeps metrics lines up to the resumed step, so the log reads as one uninterrupted run, and
 * returns the wall-clock seconds they had logged (0 for a new run): elapsed_s counts the whole
 * run's time, every invocation's. */
double open_metrics(trainer *t) {
    double elapsed = 0;
    if (!is_rank0(t)) return 0;
    char path[1024];
    train_run_path(path, sizeof path, t->o.out, "metrics.jsonl");
    if (t->o.resume[0]) {
        FILE *in = access(path, F_OK) == 0 ? sdp_fopen_input(path, "metrics log", NULL) : NULL;
        char *kept = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&kept, &len);
        char line[4096];
        while (in && fgets(line, sizeof line, in)) {
            const char *s = strstr(line, "\"step\":");
            if (!s || strtol(s + 7, NULL, 10) > t->step) continue;
            fputs(line, mem);
            const char *e = strstr(line, "\"elapsed_s\":");
            const double x = e ? strtod(e + 12, NULL) : 0;
            if (isfinite(x) && x > elapsed) elapsed = x;
        }
        if (in) fclose(in);
        fclose(mem);
        sdp_write_file_atomic(path, kept, len);
        free(kept);
    }
    t->metrics = sdp_fopen(path, "ab");
    return elapsed;
}

/* A line the disk did not take (full, or the file gone) is a hole in the run's record: end the run
 * with the file and the cause, its last checkpoint standing, rather than train on without one. */
static void metrics_check(const trainer *t, int failed) {
    if (!failed && !ferror(t->metrics)) return;
    const int err = errno ? errno : EIO;
    sdp_fatal("cannot write %s/metrics.jsonl (%s): the run stops; free space on its disk, then "
              "continue from its last checkpoint with sdp train --resume %s",
              t->o.out, strerror(err), t->o.out);
}

void close_metrics(trainer *t) {
    if (!t->metrics) return;
    errno = 0;
    const int failed = ferror(t->metrics) || fclose(t->metrics) != 0;
    if (failed) metrics_check(t, failed); /* fclose has released the file; the message reads t */
    t->metrics = NULL;
}

/* --zero 2: what the gradient buffer holds instead of every owned gradient; with few layers per
 * worker, two layers' slots and the shards can hold more than all of them. */
static void print_zero_grads(const trainer *t) {
    const double have = (double)t->sync.grad_elems / 1e6, owned = (double)t->sync.owned / 1e6;
    if (t->sync.grad_elems > t->sync.owned) {
        printf("  --zero 2 holds more gradient memory here than --zero 1: worker %d's gradient "
               "buffer (its shards, two slots of its largest layer, stem and head) is %.2fM "
               "elements against the %.2fM it owns; use --zero 1, or stage 2 with more layers per "
               "worker\n",
               job_rank(t), have, owned);
        return;
    }
    printf("  --zero 2: gradients kept for the shards and two layers at a time: worker %d's "
           "gradient buffer is %.2fM elements, against %.2fM owned\n",
           job_rank(t), have, owned);
}

/* --zero 1 or 2: how much of its owned elements' optimizer state (and under stage 2 gradients) a
 * worker keeps, or that nothing is shared with anyone (one worker: every bucket has one member). */
static void print_zero(const trainer *t) {
    const int stage = t->plan.cfg.zero;
    bool shared = false;
    for (int b = 0; b < t->sync.nbuckets; b++)
        shared |= t->sync.buckets[b].nmembers > 1 && t->sync.buckets[b].count > 0;
    if (!shared) {
        printf("  --zero %d changes nothing here: no worker shares an owner group with another, so "
               "each keeps all of its optimizer state\n",
               stage);
        if (stage == 2) print_zero_grads(t);
        return;
    }
    printf("  --zero %d: optimizer state sharded over each owner group's members: worker %d keeps "
           "the state of %.2fM of its %.2fM owned elements; gradients reduce-scattered, updates "
           "all-gathered\n",
           stage, job_rank(t), (double)t->sync.state / 1e6, (double)t->sync.owned / 1e6);
    if (stage == 2) print_zero_grads(t);
}

/* The step a resume began at, and, on another number of workers, where the data goes on: the
 * saved loader position counts the old workers' steps. */
static void print_resume(const trainer *t) {
    const trainer_resume *r = &t->resumed_from;
    printf("  resumed at step %ld", t->step);
    if (r->world != t->world.size)
        printf("; data: %d workers stopped at step %llu of epoch %llu, so %d go on at step %llu of "
               "epoch %llu",
               r->world, (unsigned long long)r->saved.step, (unsigned long long)r->saved.epoch,
               t->world.size, (unsigned long long)r->taken.step,
               (unsigned long long)r->taken.epoch);
    printf("\n");
}

void print_start(const trainer *t) {
    if (!is_rank0(t)) return;
    const sdp_model_config *c = &t->cfg;
    char p[32];
    if (t->data.images && strcmp(c->arch, "resnet"))
        printf("sdp train: %s, %d layers, %d heads, width %d, d_ff %d, patch %d, %dx%dx%d images, "
               "%d classes",
               c->arch, c->layers, c->heads, c->width, c->d_ff, c->patch, c->in_channels,
               c->image_size, c->image_size, c->classes);
    else if (t->data.images)
        printf("sdp train: %s, depth %d, base channels %d, %dx%dx%d images, %d classes", c->arch,
               c->depth, c->channels, c->in_channels, c->image_size, c->image_size, c->classes);
    else
        printf("sdp train: %s, %d layers, %d heads, width %d, d_ff %d, vocab %d, seq %d", c->arch,
               c->layers, c->heads, c->width, c->d_ff, c->vocab, c->seq_len);
    if (c->dropout > 0) printf(", dropout %g", (double)c->dropout);
    if (c->recompute) { /* --recompute layer */
        const char *unit = strcmp(c->arch, "resnet") ? "layer" : "block";
        printf(", activations recomputed %s by %s in the backward", unit, unit);
    }
    printf("\n");
    printf("  full model %.2fM parameters (%s) | workers %d | threads/worker %d (cores %d) | "
           "gemm %s\n",
           (double)t->full.numel / 1e6, sdp_fmt_bytes(p, sizeof p, (double)t->full.numel * 4),
           job_workers(t), t->world.threads, t->world.cores, sdp_gemm_provider_name(t->gemm));
    const sdp_plan_cfg *pc = &t->plan.cfg;
    if (pc->mask == SDP_MASK_NONE)
        printf("  data parallelism: every worker holds and trains the whole model\n");
    else
        printf("  SDP: %s masking, %s units, k = %d of N = %d (C = %.3g), %s assignment, branch "
               "scale %s\n",
               sdp_mask_mode_name(pc->mask), sdp_unit_kind_name(pc->unit), pc->owners, pc->world,
               sdp_plan_coverage(&t->plan), sdp_assign_kind_name(pc->assign),
               sdp_branch_scale_name(pc->scale));
    if (pc->mask != SDP_MASK_NONE) sdp_plan_print(&t->plan, &t->full, stdout);
    if (pc->zero) print_zero(t);
    if (simulating(t))
        printf("  simulating rank %d of %d (no communication): its own data stream, gradient "
               "norm and (sub)network's validation loss; no checkpoint is written\n",
               job_rank(t), job_workers(t));
    const char *unit = t->data.images ? "images" : "tokens";
    printf("  worker %d holds %.2fM parameters, owns %.2fM | data %s: %zu train %s, %zu val %s | "
           "batch %d x %d x %d accum per worker | run dir %s\n",
           job_rank(t), (double)t->model.layout->numel / 1e6, (double)t->sync.owned / 1e6,
           t->data.images ? t->o.dataset : t->o.data, train_batches_train_examples(&t->data), unit,
           train_batches_val_examples(&t->data), unit, t->data.B, t->data.T, t->o.grad_accum,
           t->o.out);
    if (t->o.resume[0]) print_resume(t);
    fflush(stdout);
}

/* Validations still to come after this step, the final one included. */
static long validations_left(const trainer *t) {
    const long left = t->o.steps - t->step;
    if (left <= 0) return 0;
    long n = t->o.val_every > 0 ? t->o.steps / t->o.val_every - t->step / t->o.val_every : 0;
    if (t->o.val_every <= 0 || t->o.steps % t->o.val_every != 0) n++; /* the last step's */
    return n;
}

void log_progress(trainer *t, double loss, double lr, double norm, int nsteps,
                  const progress_timing *pt, const trainer_step_result *sum) {
    if (!is_rank0(t)) return;
    const double dt = pt->window_s > 0 ? pt->window_s : 1e-9;
    const double tokens = (double)t->data.B * t->data.T * t->o.grad_accum * nsteps;
    const double tok_s = tokens / dt, ms = 1000.0 * dt / nsteps;
    char mem[32], eta[48];
    sdp_fmt_bytes(mem, sizeof mem, (double)train_device_mem(t)->total_cur);
    const long vals = validations_left(t);
    const double train_left = (double)(t->o.steps - t->step) * dt / nsteps;
    train_progress_fmt_duration(eta, sizeof eta,
                                train_left + (isnan(pt->val_s_each) ? 0 : vals * pt->val_s_each));
    if (vals > 0 && isnan(pt->val_s_each)) strcat(eta, " + validation");
    printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %7.0f %s/s/worker | %7.1f ms/step | "
           "mem %s | eta %s\n",
           t->step, t->o.steps, loss, lr, norm, tok_s, t->data.images ? "img" : "tok", ms, mem,
           eta);
    fflush(stdout);
    fprintf(t->metrics,
            "{\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens_per_s\":%.6g,"
            "\"ms_per_step\":%.6g,\"tokens\":%.17g,\"flops\":%.17g,\"mem_bytes\":%zu,"
            "\"elapsed_s\":%.3f,\"ms_forward\":%.4g,\"ms_backward\":%.4g,\"ms_sync\":%.4g,"
            "\"ms_update\":%.4g}\n",
            t->step, loss, lr, norm, tok_s, ms, t->examples_seen, t->flops_done,
            train_device_mem(t)->total_cur, pt->elapsed_s, sum->ms_forward / nsteps,
            sum->ms_backward / nsteps, sum->ms_sync / nsteps, sum->ms_update / nsteps);
    errno = 0;
    metrics_check(t, fflush(t->metrics));
}

void log_validation(trainer *t, sdp_metrics val, double elapsed) {
    if (!is_rank0(t) || !(val.count > 0)) return;
    const double v = val.loss / val.count;
    /* A simulated worker evaluates its own (sub)network, not the job's model: say so. */
    const char *what = simulating(t) ? "sim " : "", *key = simulating(t) ? "sim_" : "";
    const char *whose = simulating(t) ? " (this worker's subnetwork)" : "";
    if (t->data.images) {
        const double acc = val.correct / val.count;
        printf("step %5ld/%d | %stest loss %.4f | %stest accuracy %.2f%% (%.0f images)%s\n",
               t->step, t->o.steps, what, v, what, 100 * acc, val.count, whose);
        fprintf(t->metrics,
                "{\"step\":%ld,\"%sval_loss\":%.9g,\"%sval_accuracy\":%.9g,\"tokens\":%.17g,"
                "\"flops\":%.17g,\"elapsed_s\":%.3f}\n",
                t->step, key, v, key, acc, t->examples_seen, t->flops_done, elapsed);
    } else {
        printf("step %5ld/%d | %sval loss %.4f (%.4f bits/token)%s\n", t->step, t->o.steps, what, v,
               v / log(2.0), whose);
        fprintf(t->metrics,
                "{\"step\":%ld,\"%sval_loss\":%.9g,\"tokens\":%.17g,\"flops\":%.17g,"
                "\"elapsed_s\":%.3f}\n",
                t->step, key, v, t->examples_seen, t->flops_done, elapsed);
    }
    errno = 0;
    metrics_check(t, fflush(t->metrics));
}

/* ---- summary -------------------------------------------------------------------------------- */

/* Evaluation and checkpoint bytes are a column of their own: they are held beside the training
 * state, so they count in the worker's total, but training never touches them. */
enum { COL_EVAL_CKPT = SDP_MEM_NCAT, COL_RSS, COL_TOTAL, NCOLS };

/* What rank 0 of a data-parallel run of sdp holds to evaluate and checkpoint (it evaluates its
 * own model, and gathers only the optimizer state), as `sdp plan` predicts it. */
/* The evaluation and checkpoint bytes that worker `rank` holds under `plan`, as sdp plan counts
 * them (the tests check that count against the measured one). */
static double eval_ckpt_bytes(const trainer *t, const sdp_plan *plan, int rank) {
    const io_memplan_run run = {
        .cfg = &t->cfg,
        .full = &t->full,
        .plan = plan,
        .B = t->data.B,
        .T = t->data.T,
        .val_batches = train_batches_val_count(&t->data, t->o.val_batches),
        .recal_batches = (uint64_t)t->o.bn_recal_batches,
        .state_buffers = (int)(sdp_optim_state_bytes_per_param(&t->opt.cfg) / sizeof(float)),
        .images = t->data.images,
        .on_device = !t->be->host_memory,
        .gemm = t->gemm,
    };
    double *out = sdp_xcalloc((size_t)plan->cfg.world, sizeof(double), "the workers' predictions");
    train_io_memplan_predict(&run, out);
    const double bytes = out[rank];
    free(out);
    return bytes;
}

static double ddp_eval_ckpt_bytes(const trainer *t) {
    sdp_plan_cfg dc = t->plan.cfg;
    dc.mask = SDP_MASK_NONE;
    dc.owners = dc.world;
    dc.chunks = 0;
    sdp_plan ddp;
    sdp_plan_build(&ddp, &dc, &t->full);
    const double bytes = eval_ckpt_bytes(t, &ddp, 0);
    sdp_plan_free(&ddp);
    return bytes;
}

/* What the largest data-parallel worker (rank 0) holds for the same model and batch: the same
 * allocation code run in counting mode, plus gradients, optimizer state, one bucket of the whole
 * model, and its checkpoint buffers. On the CUDA device it is counted as the worker rows are, in
 * device bytes: CUDA's scratch sizes and the context's own, and no data (it stays on the host). */
static void ddp_reference(const trainer *t, double *row) {
    const bool cuda = strcmp(t->be->name, "cuda") == 0;
    sdp_mem dry = {.dry = true};
    sdp_model_config counted = t->cfg;
    counted.backend = train_counting_backend(cuda, train_opts_precision(&t->o), t->gemm, &dry);
    sdp_model m;
    train_run_family(&counted)->create(&m, &counted, NULL, t->data.B, t->data.T,
                                       SDP_MODEL_TRAIN_BARE);
    m.ops->destroy(&m);
    sdp_backend_destroy(counted.backend);
    for (int c = 0; c < SDP_MEM_NCAT; c++) row[c] = (double)dry.peak[c];
    const double n = (double)t->full.numel;
    row[SDP_MEM_GRADS] = n * 4;
    row[SDP_MEM_OPTIM] = n * (double)sdp_optim_state_bytes_per_param(&t->opt.cfg);
    row[SDP_MEM_BUFFERS] = 0; /* buckets reduce in place */
    if (cuda) row[SDP_MEM_SCRATCH] += (double)sdp_cuda_context_scratch_bytes();
    row[SDP_MEM_DATA] = (double)train_device_mem(t)->peak[SDP_MEM_DATA];
    row[COL_EVAL_CKPT] = ddp_eval_ckpt_bytes(t);
    row[COL_TOTAL] = row[COL_EVAL_CKPT];
    for (int c = 0; c < SDP_MEM_NCAT; c++) row[COL_TOTAL] += row[c];
    row[COL_RSS] = NAN;
}

static void print_row(const char *name, const double *row) {
    char b[32];
    printf("  %-10s", name);
    for (int c = 0; c < NCOLS; c++)
        printf(" %10s", isnan(row[c]) ? "-" : sdp_fmt_bytes(b, sizeof b, row[c]));
    printf("\n");
}

/* Every worker's measured bytes, for comparison with `sdp plan --json`. */
static void write_memory_json(const trainer *t, const double *all, const uint64_t *sent,
                              const double *device_peak, long steps) {
    char *txt = NULL, path[1024];
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    /* A run stopped by a signal (or --stop-after) writes its record too: "finished" tells it
     * from one that reached --steps, for scripts that record finished runs. */
    fprintf(f, "{\n  \"step\": %ld, \"steps\": %d, \"finished\": %s,\n  \"workers\": [\n", t->step,
            t->o.steps, t->step >= t->o.steps ? "true" : "false");
    for (int r = 0; r < t->world.size; r++) {
        const double *row = all + (size_t)r * NCOLS;
        fprintf(f, "    {\"rank\": %d", simulating(t) ? job_rank(t) : r);
        for (int c = 0; c < SDP_MEM_NCAT; c++)
            fprintf(f, ", \"%s\": %.0f", sdp_memcat_name((sdp_memcat)c), row[c]);
        fprintf(f, ", \"eval_ckpt\": %.0f, \"total\": %.0f, \"peak_rss\": %.0f", row[COL_EVAL_CKPT],
                row[COL_TOTAL], row[COL_RSS]);
        fprintf(f, ", \"sent_per_step\": %.0f", (double)sent[r] / (double)steps);
        if (!t->be->host_memory) fprintf(f, ", \"device_peak_in_use\": %.0f", device_peak[r]);
        fprintf(f, "}%s\n", r == t->world.size - 1 ? "" : ",");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    train_run_path(path, sizeof path, t->o.out, "memory.json");
    train_run_dir_check_held(t->o.out, t->run_lock);
    sdp_write_file_atomic(path, txt, len);
    free(txt);
}

/* "12.3% smaller" or "4.5% larger": a worker can hold more than DDP's (rank 0's checkpoint
 * buffers, say), and the summary must not print that as a negative saving. */
static const char *fmt_change(char *buf, size_t n, double x, double ref) {
    const double pct = 100.0 * (x / ref - 1);
    snprintf(buf, n, "%.1f%% %s", fabs(pct), pct > 0 ? "larger" : "smaller");
    return buf;
}

/* "summary: 30 steps in 1.0 s, final val loss 2.3": this invocation's steps and time, where the
 * run stands when it was resumed or stopped early, and the last validation's figures or, when
 * none ran in this invocation, how to get one. */
static void print_summary_line(const trainer *t, sdp_metrics val, double wall) {
    const long done = t->step - t->first_step;
    char span[160] = "";
    if (t->first_step > 0 || t->step < t->o.steps)
        snprintf(span, sizeof span, " (steps %ld to %ld of %d%s)", t->first_step + 1, t->step,
                 t->o.steps, t->step < t->o.steps ? "; stopped early" : "");
    printf("\nsummary: %ld step%s in %.1f s%s, ", done, done == 1 ? "" : "s", wall, span);
    const char *what = simulating(t) ? "simulated worker's own " : "";
    if (!(val.count > 0)) {
        if (t->data.has_val)
            printf("no validation in this invocation: sdp eval --run %s measures the "
                   "checkpoint\n",
                   t->o.out);
        else
            printf("no validation: the run has no validation data (--val-data, or --val-frac "
                   "above 0 for text); sdp eval --run %s --data FILE measures the checkpoint on "
                   "FILE\n",
                   t->o.out);
        return;
    }
    const double v = val.loss / val.count;
    if (t->data.images)
        printf("%stest loss %.4f, test accuracy %.2f%%\n", what, v, 100 * val.correct / val.count);
    else
        printf("%sfinal val loss %.4f\n", what, v);
}

void print_summary(trainer *t, sdp_metrics val, double wall, bool print) {
    const int N = t->world.size;
    double mine[NCOLS];
    const sdp_mem *mem = train_device_mem(t); /* on a device: its tally, as the plan predicts it */
    for (int c = 0; c < SDP_MEM_NCAT; c++) mine[c] = (double)mem->peak[c];
    mine[COL_EVAL_CKPT] = (double)t->io_mem.total_peak;
    mine[COL_TOTAL] = (double)mem->total_peak + mine[COL_EVAL_CKPT];
    mine[COL_RSS] = (double)sdp_peak_rss();
    double *all =
        is_rank0(t) ? sdp_xmalloc(sizeof(double) * NCOLS * (size_t)N, "the summary") : NULL;
    MPI_Gather(mine, NCOLS, MPI_DOUBLE, all, NCOLS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    uint64_t sent = t->step_bytes_sent, max_sent = 0;
    MPI_Reduce(&sent, &max_sent, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    uint64_t *sent_all =
        is_rank0(t) ? sdp_xmalloc(sizeof(uint64_t) * (size_t)N, "the summary") : NULL;
    MPI_Gather(&sent, 1, MPI_UINT64_T, sent_all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    double device_peak = (double)t->device_peak, *device_all = NULL;
    if (is_rank0(t)) device_all = sdp_xmalloc(sizeof(double) * (size_t)N, "the summary");
    MPI_Gather(&device_peak, 1, MPI_DOUBLE, device_all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (!is_rank0(t)) return;
    /* The bytes were counted over this invocation's steps only: a rate per step of it. */
    const long steps = t->step - t->first_step > 0 ? t->step - t->first_step : 1;
    write_memory_json(t, all, sent_all, device_all, steps);
    free(sent_all);
    free(device_all);
    if (!print) {
        free(all);
        return;
    }
    print_summary_line(t, val, wall);
    if (simulating(t)) {
        /* A simulated worker writes no checkpoint, so it never holds the buffers it would hold in
         * the real job; the DDP row counts them. So its row takes sdp plan's count of them (the
         * tests check that count against real jobs); memory.json keeps what was measured. */
        const double predicted = eval_ckpt_bytes(t, &t->plan, job_rank(t));
        all[COL_TOTAL] += predicted - all[COL_EVAL_CKPT];
        all[COL_EVAL_CKPT] = predicted;
        printf("  simulated rank %d of %d: the row below is what that worker holds in the real "
               "job (its eval+ckpt as sdp plan counts it: a --sim-world run writes no "
               "checkpoint)\n",
               job_rank(t), job_workers(t));
    }
    if (!t->be->host_memory) {
        char b[32];
        printf("  on the %s device: the worker row is device memory by category; %s in use at "
               "the peak, as the device reports it\n",
               t->be->name, sdp_fmt_bytes(b, sizeof b, (double)t->device_peak));
    }
    printf("  memory per worker, peak bytes by category (eval+ckpt: evaluation copies and "
           "checkpoint buffers; the DDP row is data parallelism's largest worker for the same "
           "model and batch):\n");
    printf("  %-10s", "worker");
    for (int c = 0; c < SDP_MEM_NCAT; c++) printf(" %10s", sdp_memcat_name((sdp_memcat)c));
    printf(" %10s %10s %10s\n", "eval+ckpt", "peak RSS", "total");
    double worst[NCOLS] = {0};
    for (int r = 0; r < N; r++) {
        char name[16];
        snprintf(name, sizeof name, "%d", simulating(t) ? job_rank(t) : r);
        const double *row = all + (size_t)r * NCOLS;
        if (r < 8 || r == N - 1)
            print_row(name, row);
        else if (r == 8)
            printf("  ...\n");
        for (int c = 0; c < NCOLS; c++)
            if (row[c] > worst[c]) worst[c] = row[c];
    }
    double ddp[NCOLS];
    ddp_reference(t, ddp);
    print_row("DDP", ddp);
    char b_state[32], b_total[32];
    const double state = worst[SDP_MEM_PARAMS] + worst[SDP_MEM_GRADS] + worst[SDP_MEM_OPTIM];
    const double ddp_state = ddp[SDP_MEM_PARAMS] + ddp[SDP_MEM_GRADS] + ddp[SDP_MEM_OPTIM];
    printf("  largest worker (all ranks) vs DDP's: params+grads+optimizer %s, total %s\n",
           fmt_change(b_state, sizeof b_state, state, ddp_state),
           fmt_change(b_total, sizeof b_total, worst[COL_TOTAL], ddp[COL_TOTAL]));
    const int J = job_workers(t);
    const double ring = J > 1 ? 2.0 * (J - 1) / J * (double)t->full.numel * 4 : 0;
    char b1[32], b2[32];
    if (simulating(t))
        printf("  communication: none (simulated; sdp plan --world %d predicts what it sends)\n",
               J);
    else
        printf("  communication per step, most any worker sent: %s (a ring all-reduce of the "
               "full model sends %s)\n",
               sdp_fmt_bytes(b1, sizeof b1, (double)max_sent / (double)steps),
               sdp_fmt_bytes(b2, sizeof b2, ring));
    printf("  run directory: %s (config.json, plan.json, metrics.jsonl, memory.json%s)\n", t->o.out,
           simulating(t) ? "; no checkpoint" : ", model.safetensors, optim.safetensors");
    fflush(stdout);
    free(all);
}
