/* Checkpoints of `sdp train`. model.safetensors is the full assembled model (HF-style names);
 * optim.safetensors holds the full optimizer state and where the run stands. Both are written by
 * rank 0 from values gathered from each unit's publisher, so a run resumes on any number of
 * workers and any plan: every worker re-slices what it owns from the full tensors.
 *
 * Neither side holds a whole model or a whole state buffer to do it: rank 0 streams each file
 * window by window (the file's data section is the full layout's flat buffers in order, so
 * window after window of the flat buffer is the file's data in order), and on resume every worker
 * reads only its own runs from the file. See docs/design.md, "Evaluation and checkpoints". */
#include "io_memplan.h"
#include "run_dir.h"
#include "trainer.h"

#include "sdp/check.h"
#include "sdp/checkpoint.h"
#include "sdp/sync.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Optimizer state buffers as the checkpoint names them (PyTorch's state keys). */
static int state_names(const trainer *t, const char **names) {
    if (t->opt.cfg.kind == SDP_OPT_ADAMW) {
        names[0] = ".exp_avg";
        names[1] = ".exp_avg_sq";
        return 2;
    }
    if (!t->opt.m) return 0; /* SGD without momentum keeps no state */
    names[0] = ".momentum_buffer";
    return 1;
}

static float *state_buffer(const trainer *t, int i) {
    return i == 0 ? t->opt.m : t->opt.v;
}

/* Under forward masking with image models and k < N, the saved running statistics are those
 * re-estimated on the assembled model (train_eval_recalibrate), not any worker's: they are copied
 * into each window. Everything else is gathered window by window. */
static void copy_recalibrated_stats(trainer *t, size_t lo, size_t hi, float *win) {
    const sdp_layout *L = &t->full;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        const size_t a = p->offset > lo ? p->offset : lo;
        const size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (p->buffer && b > a)
            memcpy(win + (a - lo), train_eval_recalibrated(t, p->name) + (a - p->offset),
                   (b - a) * sizeof(float));
    }
}

/* One flat buffer of the full layout into w (rank 0's; NULL elsewhere), gathered window by
 * window from every worker's `local` buffer (collective). */
static void stream_gathered(trainer *t, sdp_st_writer *w, const float *local, bool state_compact,
                            bool recalibrated_stats) {
    const size_t numel = t->full.numel, window = train_ckpt_window_floats(numel);
    float *win =
        is_rank0(t) ? sdp_alloc(&t->io_mem, SDP_MEM_SCRATCH, window * sizeof(float)) : NULL;
    for (size_t lo = 0; lo < numel; lo += window) {
        const size_t hi = numel - lo < window ? numel : lo + window;
        sdp_sync_gather_range(&t->sync, local, state_compact, lo, hi, win, &t->io_mem);
        sdp_watchdog_beat(t->watchdog);
        if (!is_rank0(t)) continue;
        if (recalibrated_stats) copy_recalibrated_stats(t, lo, hi, win);
        sdp_st_writer_append(w, win, (hi - lo) * sizeof(float));
    }
    if (win) sdp_free(&t->io_mem, win);
}

/* The model's parameters into w. Where rank 0 holds the whole current model in host memory
 * (data parallelism and backward masking, on the CPU), it writes it as it is, gathering nothing. */
static void stream_params(trainer *t, sdp_st_writer *w) {
    const bool whole_on_rank0 = t->plan.cfg.mask != SDP_MASK_FORWARD && t->be->host_memory;
    if (whole_on_rank0) {
        if (is_rank0(t)) sdp_st_writer_append(w, t->model.params, t->full.numel * sizeof(float));
        return;
    }
    const size_t nlocal = t->model.layout->numel;
    float *local = train_host_copy(t, t->model.params, nlocal);
    stream_gathered(t, w, local, false, train_eval_recalibrates(t));
    train_host_copy_done(t, local, t->model.params, nlocal, false);
}

/* A save cut off between its two files, as a kill or a full disk would cut it, on demand:
 * SDP_TEST_CKPT_CUT=S ends the process after the optimizer file of step S is in place
 * (tests/test_ckpt_cut.sh). */
static void cut_for_tests(const trainer *t) {
    const char *env = getenv("SDP_TEST_CKPT_CUT");
    if (!env || atol(env) != t->step) return;
    fprintf(stderr, "sdp: SDP_TEST_CKPT_CUT: stopping after the optimizer file of step %ld\n",
            t->step);
    _exit(3);
}

void train_save_checkpoint(trainer *t) {
    train_device_average_buffers(t); /* statistics agree */
    train_eval_recalibrate(t);
    const char *names[2];
    int ns = state_names(t, names);
    char step[32], opt_t[32], ep[32], es[32], tok[64], fl[64], vocab[32], world[16], shape[64],
        path[1024], prev[1024], examples[64];
    snprintf(step, sizeof step, "%ld", t->step);
    snprintf(opt_t, sizeof opt_t, "%ld", t->opt.t);
    const sdp_loader_pos pos = train_batches_pos(&t->data);
    snprintf(ep, sizeof ep, "%llu", (unsigned long long)pos.epoch);
    snprintf(es, sizeof es, "%llu", (unsigned long long)pos.step);
    snprintf(tok, sizeof tok, "%.17g", t->examples_seen);
    snprintf(shape, sizeof shape, "%d %d %d", t->cfg.in_channels, t->cfg.image_size,
             t->cfg.classes);
    snprintf(fl, sizeof fl, "%.17g", t->flops_done);
    snprintf(vocab, sizeof vocab, "%d", t->cfg.vocab);
    snprintf(world, sizeof world, "%d", t->world.size);
    snprintf(examples, sizeof examples, "%zu %zu", train_batches_train_examples(&t->data),
             train_batches_val_examples(&t->data));
    const char *meta[] = {
        "format",           "pt",  "sdp.step",          step,     "sdp.opt_t",  opt_t,
        "sdp.loader_epoch", ep,    "sdp.loader_step",   es,       "sdp.tokens", tok,
        "sdp.flops",        fl,    "sdp.vocab",         vocab,    "sdp.world",  world,
        "sdp.image_shape",  shape, "sdp.data_examples", examples, NULL};
    /* Each file is replaced atomically, but the pair is not: a rank killed between the two
     * renames would leave a model of the last step beside the optimizer of this one. So the
     * optimizer file that matches the model on disk is kept as optim.prev until the new model is
     * in place, and a load takes whichever of the two matches the model's step. After a save cut
     * off between the files, that is optim.prev already, and optim.safetensors is of a step no
     * model has: renaming it over optim.prev would lose the run's only matching state. */
    sdp_st_writer w;
    train_run_path(path, sizeof path, t->o.out, "optim.safetensors");
    train_run_path(prev, sizeof prev, t->o.out, "optim.prev.safetensors");
    if (is_rank0(t)) {
        train_run_dir_check_held(t->o.out, t->run_lock);
        SDP_CHECK(t->optim_prev_matches || rename(path, prev) == 0 || errno == ENOENT,
                  "cannot rename %s to %s (%s): check the run directory's permissions", path, prev,
                  strerror(errno));
        sdp_ckpt_writer_open(&w, path, &t->full, names, ns, meta);
    }
    for (int i = 0; i < ns; i++) {
        float *state = train_host_copy(t, state_buffer(t, i), t->opt.n);
        stream_gathered(t, &w, state, true, false);
        train_host_copy_done(t, state, state_buffer(t, i), t->opt.n, false);
    }
    if (is_rank0(t)) sdp_st_writer_commit(&w);
    cut_for_tests(t);

    const char *param_suffix[] = {""};
    train_run_path(path, sizeof path, t->o.out, "model.safetensors");
    if (is_rank0(t)) sdp_ckpt_writer_open(&w, path, &t->full, param_suffix, 1, meta);
    stream_params(t, &w);
    if (is_rank0(t)) {
        sdp_st_writer_commit(&w);
        unlink(prev);
    }
    t->optim_prev_matches = false;
}

/* Where a run stands, as its checkpoint's metadata records it. */
typedef struct {
    long step, opt_t;
    sdp_loader_pos pos;
    int world; /* of the run that saved it: pos counts its steps */
    double tokens, flops;
    double vocab, image[3]; /* the data's: image channels, size and classes */
    double examples[2];     /* the data's training and validation tokens or images; -1: unknown */
} run_state;

/* Integers beyond 2^53 are not exact in a double, and no run counts that far. */
#define MAX_COUNT 9007199254740992.0

/* Every field sdp train writes, each in its range: a checkpoint short of one, or with one out of
 * range, is damaged or not sdp's. --steps is an int, so no run writes a later step. */
static run_state read_run_state(const sdp_st_file *f) {
    run_state s;
    s.step = (long)sdp_st_meta_number(f, "sdp.step", 0, INT_MAX, true);
    s.opt_t = (long)sdp_st_meta_number(f, "sdp.opt_t", 0, INT_MAX, true);
    s.pos.epoch = (uint64_t)sdp_st_meta_number(f, "sdp.loader_epoch", 0, MAX_COUNT, true);
    s.pos.step = (uint64_t)sdp_st_meta_number(f, "sdp.loader_step", 0, MAX_COUNT, true);
    s.tokens = sdp_st_meta_number(f, "sdp.tokens", 0, DBL_MAX, false);
    s.flops = sdp_st_meta_number(f, "sdp.flops", 0, DBL_MAX, false);
    s.vocab = sdp_st_meta_number(f, "sdp.vocab", 0, INT_MAX, true);
    s.world = (int)sdp_st_meta_number(f, "sdp.world", 1, INT_MAX, true);
    sdp_st_meta_numbers(f, "sdp.image_shape", 3, s.image, 0, INT_MAX, true);
    train_checkpoint_data_examples(f, s.examples);
    return s;
}

void train_checkpoint_data_examples(const sdp_st_file *f, double examples[2]) {
    examples[0] = examples[1] = -1; /* checkpoints written before the field: not checked */
    if (sdp_st_meta(f, "sdp.data_examples"))
        sdp_st_meta_numbers(f, "sdp.data_examples", 2, examples, 0, MAX_COUNT, true);
}

void train_checkpoint_check_meta(const sdp_st_file *f) {
    (void)read_run_state(f);
}

/* Tensor shapes alone can miss a change of data: the embedding is padded to 64 rows, so a run
 * on a vocabulary of 200 would load a checkpoint of 256 and train on tokens it never had. */
static void check_same_data(const trainer *t, const run_state *s, const char *path) {
    const sdp_model_config *c = &t->cfg;
    SDP_CHECK_ALL(
        s->vocab == c->vocab && s->image[0] == c->in_channels && s->image[1] == c->image_size &&
            s->image[2] == c->classes,
        "'%s' was written for a vocabulary of %.0f and images of %.0f %.0f %.0f (channels, "
        "size, classes), but this run's data gives %d and %d %d %d: resume with the data "
        "the run was trained on",
        path, s->vocab, s->image[0], s->image[1], s->image[2], c->vocab, c->in_channels,
        c->image_size, c->classes);
    /* Data cut or extended at the same path: the same vocabulary, other examples. */
    const double train = (double)train_batches_train_examples(&t->data),
                 val = (double)train_batches_val_examples(&t->data);
    const char *what = t->data.images ? "images" : "tokens";
    SDP_CHECK_ALL(s->examples[0] < 0 || (s->examples[0] == train && s->examples[1] == val),
                  "'%s' was written for data of %.0f training and %.0f validation %s, but the data "
                  "now gives %.0f and %.0f: it changed since; resume with the data the run was "
                  "trained on, or start a new run",
                  path, s->examples[0], s->examples[1], what, train, val);
}

/* A run already at (or past) --steps: it says so and how to go on, and every rank ends without
 * writing anything, as a finished make target would. */
static _Noreturn void nothing_left_to_train(const trainer *t, long step) {
    if (is_rank0(t))
        printf("sdp train: run '%s' is at step %ld and --steps is %d: nothing left to train; "
               "pass a larger --steps to train further\n",
               t->o.out, step, t->o.steps);
    fflush(stdout);
    sdp_world_finalize();
    exit(0);
}

/* The optimizer file of the model's step: optim.safetensors, or optim.prev.safetensors when a
 * checkpoint was cut off between its two files (see train_save_checkpoint). */
static void optim_path_of_step(trainer *t, long step, char *out, size_t n) {
    t->optim_prev_matches = false;
    char prev[1024];
    train_run_path(out, n, t->o.out, "optim.safetensors");
    train_run_path(prev, sizeof prev, t->o.out, "optim.prev.safetensors");
    if (access(prev, F_OK) != 0) return;
    sdp_st_file f;
    sdp_st_open(&f, prev, &t->io_mem);
    const bool prev_matches = read_run_state(&f).step == step;
    sdp_st_close(&f, &t->io_mem);
    if (prev_matches) snprintf(out, n, "%s", prev);
    t->optim_prev_matches = prev_matches;
}

typedef struct {
    const sdp_st_file *f;
    const sdp_layout *L;
    const sdp_ckpt_buffer *buf;
} run_reader;

static void read_run(void *ctx, size_t global, size_t len, float *dst) {
    const run_reader *r = ctx;
    sdp_ckpt_read_range(r->f, r->L, r->buf, global, len, dst);
}

/* This worker's runs of one flat buffer of the file, read into its own `local` buffer: no full
 * buffer is held (sdp_sync_for_each_run picks the runs as sdp_sync_scatter_full does). */
static void read_own_runs(trainer *t, const sdp_st_file *f, const char *suffix, float *x,
                          size_t nlocal, bool state_compact) {
    const sdp_ckpt_buffer buf = {NULL, suffix, strcmp(suffix, ".exp_avg_sq") == 0};
    run_reader r = {f, &t->full, &buf};
    float *local = train_host_copy(t, x, nlocal);
    sdp_sync_for_each_run(&t->sync, local, state_compact, read_run, &r);
    train_host_copy_done(t, local, x, nlocal, true);
}

void train_checkpoint_check_layout(trainer *t) {
    char path[1024];
    train_run_path(path, sizeof path, t->o.resume, "model.safetensors");
    sdp_st_file f;
    const char *param_suffix[] = {""};
    sdp_st_open_header(&f, path, &t->io_mem);
    sdp_ckpt_check_tensors(&f, path, &t->full, param_suffix, 1);
    sdp_st_close(&f, &t->io_mem);
}

void train_load_checkpoint(trainer *t) {
    char mpath[1024], opath[1024];
    train_run_path(mpath, sizeof mpath, t->o.out, "model.safetensors");
    sdp_st_file mf, of;
    const char *param_suffix[] = {""};
    sdp_ckpt_open(&mf, mpath, &t->full, param_suffix, 1, &t->io_mem);
    const run_state ms = read_run_state(&mf);
    const long step = ms.step;
    check_same_data(t, &ms, mpath);
    if (step >= t->o.steps) {
        sdp_st_close(&mf, &t->io_mem);
        nothing_left_to_train(t, step);
    }
    read_own_runs(t, &mf, "", t->model.params, t->model.layout->numel, false);
    sdp_st_close(&mf, &t->io_mem);
    optim_path_of_step(t, step, opath, sizeof opath);

    const char *names[2];
    int ns = state_names(t, names);
    sdp_ckpt_open(&of, opath, &t->full, names, ns, &t->io_mem);
    for (int i = 0; i < ns; i++)
        read_own_runs(t, &of, names[i], state_buffer(t, i), t->opt.n, true);
    const run_state s = read_run_state(&of);
    SDP_CHECK(step == s.step, "%s and %s are from different steps: the checkpoint is inconsistent",
              mpath, opath);
    t->step = step;
    t->first_step = step;
    t->opt.t = s.opt_t;
    t->resumed_from = (trainer_resume){
        .world = s.world, .saved = s.pos, .taken = train_batches_seek(&t->data, s.pos, s.world)};
    t->examples_seen = s.tokens;
    t->flops_done = s.flops;
    sdp_st_close(&of, &t->io_mem);
}
