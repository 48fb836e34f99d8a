#include "batches.h"
#include "eval_progress.h"

#include "run.h"
#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- opening ------------------------------------------------------------------------------ */

static void open_images(batch_source *s, const train_opts *o, int rank, int world, sdp_mem *mem) {
    const char *dir = o->data[0] ? o->data : NULL;
    if (!strcmp(o->dataset, "fashion-mnist") || !strcmp(o->dataset, "mnist")) {
        /* Only Fashion-MNIST has a packaged default: MNIST would read it under the wrong name. */
        SDP_CHECK_ALL(dir || strcmp(o->dataset, "mnist") != 0,
                      "--dataset mnist needs --data DIR, the directory of MNIST's IDX files "
                      "({train,t10k}-{images-idx3,labels-idx1}-ubyte(.gz)); without --data only "
                      "fashion-mnist has a default (%s)",
                      SDP_FASHION_MNIST_DIR);
        sdp_images_load_idx(&s->train_img, dir, "train", mem);
        sdp_images_load_idx(&s->test_img, dir, "test", mem);
    } else if (!strcmp(o->dataset, "cifar10") || !strcmp(o->dataset, "cifar100")) {
        SDP_CHECK_ALL(dir, "--dataset %s needs --data DIR, the directory of its binary version",
                      o->dataset);
        void (*load)(sdp_images *, const char *, const char *, sdp_mem *) =
            !strcmp(o->dataset, "cifar10") ? sdp_images_load_cifar10 : sdp_images_load_cifar100;
        load(&s->train_img, dir, "train", mem);
        load(&s->test_img, dir, "test", mem);
    } else {
        sdp_fatal("unknown --dataset '%s' for an image model: use fashion-mnist, mnist, cifar10 "
                  "or cifar100",
                  o->dataset);
    }
    s->norm = sdp_images_norm_stats(&s->train_img); /* the test split reuses them */
    const int pad = o->crop_pad >= 0 ? o->crop_pad : s->train_img.H / 8;
    /* Past the image's side, most crops would be padding alone. */
    SDP_CHECK_ALL(pad <= s->train_img.H,
                  "--crop-pad %d exceeds the %d-pixel side of the images: use at most %d (the "
                  "default is %d, an eighth of the side; 0 turns cropping off)",
                  pad, s->train_img.H, s->train_img.H, s->train_img.H / 8);
    sdp_augment aug = {pad, o->flip};
    sdp_image_loader_init(&s->train_il, &s->train_img, s->B, rank, world, (uint64_t)o->seed, true,
                          aug, &s->norm, mem);
    sdp_image_loader_init(&s->calib_il, &s->train_img, s->B, 0, 1, (uint64_t)o->seed + 1, true,
                          (sdp_augment){0, false}, &s->norm, mem);
    const size_t px = (size_t)s->B * s->train_img.C * s->train_img.H * s->train_img.W;
    s->pixels = sdp_alloc(mem, SDP_MEM_DATA, px * sizeof(float));
    s->labels = sdp_alloc(mem, SDP_MEM_DATA, (size_t)s->B * sizeof(int));
    s->has_val = s->test_img.n > 0;
}

/* Every worker takes B sequences per batch: fewer than world * B in a split is an error that names
 * the data (`what`) and what would fix it: under sdp train the options that set the sizes, or the
 * run's config.json they were read from (which may have been edited); under sdp eval (whose sizes
 * are the run's own) fewer ranks or more data. Every rank reads the same data, so every rank
 * refuses alike. */
static void check_sequences(const batch_source *s, const sdp_tokens *src, const char *what,
                            int world, const train_opts *o) {
    const int B = s->B, T = s->T;
    const size_t n = sdp_loader_count(src, T), need = (size_t)world * (size_t)B;
    if (n >= need) return;
    if (o->config_file[0] && s->evaluating)
        sdp_fatal_all(
            "%s holds %zu sequences of %d tokens (\"seq-len\" %d plus the next token), and %d "
            "worker(s) x \"batch\" %d need %zu, with \"batch\" and \"seq-len\" from %s: evaluate "
            "on fewer ranks, or on more data (--data FILE); if that file was damaged or edited, "
            "restore it",
            what, n, T + 1, T, world, B, need, o->config_file);
    if (o->config_file[0])
        sdp_fatal_all(
            "%s holds %zu sequences of %d tokens (\"seq-len\" %d plus the next token), and %d "
            "worker(s) x \"batch\" %d need %zu, with \"batch\" and \"seq-len\" from %s: give "
            "more data or, if that file was damaged or edited, restore it or start a new run",
            what, n, T + 1, T, world, B, need, o->config_file);
    if (s->evaluating)
        sdp_fatal_all("%s holds %zu sequences of %d tokens (the run's --seq-len %d plus the next "
                      "token), and %d rank(s) x the run's --batch %d need %zu: evaluate on fewer "
                      "ranks, or on more data (--data FILE)",
                      what, n, T + 1, T, world, B, need);
    sdp_fatal_all("%s holds %zu sequences of %d tokens (--seq-len %d plus the next token), and %d "
                  "worker(s) x --batch %d need %zu: use a smaller --batch or --seq-len, or more "
                  "data",
                  what, n, T + 1, T, world, B, need);
}

/* What the validation split is, for errors. */
static void describe_val(char *out, size_t n, const train_opts *o, bool whole_file) {
    if (whole_file)
        snprintf(out, n, "--data '%s'", o->data);
    else if (o->val_data[0])
        snprintf(out, n, "--val-data '%s'", o->val_data);
    else
        snprintf(out, n, "the validation split (--val-frac %g) of --data '%s'", o->val_frac,
                 o->data);
}

/* The validation loader over s->val_tok (when it has tokens) and the batch buffers. */
static void open_token_batches(batch_source *s, const train_opts *o, bool whole_file,
                               sdp_mem *mem) {
    s->has_val = s->val_tok.ntokens > 0;
    if (s->has_val) {
        char what[2 * OPT_STR_MAX];
        describe_val(what, sizeof what, o, whole_file);
        check_sequences(s, &s->val_tok, what, s->world, o);
    }
    if (s->has_val)
        sdp_loader_init(&s->val_tl, &s->val_tok, s->B, s->T, s->rank, s->world, (uint64_t)o->seed,
                        false, mem);
    const size_t n = (size_t)s->B * s->T;
    s->tokens = sdp_alloc(mem, SDP_MEM_DATA, n * sizeof(int));
    s->targets = sdp_alloc(mem, SDP_MEM_DATA, n * sizeof(int));
}

static void open_tokens(batch_source *s, const train_opts *o, int rank, int world, sdp_mem *mem) {
    train_run_load_data(o, &s->train_tok, &s->val_tok, mem);
    /* Loaders first: they reject data too small for the batch before any model exists. */
    char what[OPT_STR_MAX + 64];
    snprintf(what, sizeof what, "the training split of --data '%s'", o->data);
    check_sequences(s, &s->train_tok, what, world, o);
    sdp_loader_init(&s->train_tl, &s->train_tok, s->B, s->T, rank, world, (uint64_t)o->seed, true,
                    mem);
    open_token_batches(s, o, false, mem);
}

static void open_source(batch_source *s, const train_opts *o, bool images, int rank, int world,
                        bool evaluating, sdp_mem *mem) {
    memset(s, 0, sizeof *s);
    s->evaluating = evaluating;
    s->images = images;
    s->B = o->batch;
    s->T = images ? 1 : o->arch.seq_len;
    s->rank = rank;
    s->world = world;
    if (images)
        open_images(s, o, rank, world, mem);
    else
        open_tokens(s, o, rank, world, mem);
}

void train_batches_open(batch_source *s, const train_opts *o, bool images, int rank, int world,
                        sdp_mem *mem) {
    open_source(s, o, images, rank, world, false, mem);
}

void train_batches_open_eval(batch_source *s, const train_opts *o, bool images, int rank, int world,
                             sdp_mem *mem) {
    open_source(s, o, images, rank, world, true, mem);
}

void train_batches_open_file(batch_source *s, const train_opts *o, int rank, int world,
                             sdp_mem *mem) {
    memset(s, 0, sizeof *s);
    s->evaluating = true;
    s->B = o->batch;
    s->T = o->arch.seq_len;
    s->rank = rank;
    s->world = world;
    /* Without a validation split to fill, all of o->data is read as one (training) split. */
    train_run_load_data(o, &s->val_tok, NULL, mem);
    open_token_batches(s, o, true, mem);
}

/* ---- training batches ----------------------------------------------------------------------- */

void train_batches_next(batch_source *s, sdp_batch *b) {
    memset(b, 0, sizeof *b);
    b->B = s->B;
    b->T = s->T;
    if (s->images) {
        sdp_image_loader_next(&s->train_il, s->pixels, s->labels);
        b->images = s->pixels;
        b->labels = s->labels;
    } else {
        sdp_loader_next(&s->train_tl, s->tokens, s->targets);
        b->tokens = s->tokens;
        b->targets = s->targets;
    }
}

void train_batches_calibration(batch_source *s, int i, sdp_batch *b) {
    SDP_ASSERT(s->images);
    if (i == 0) sdp_image_loader_seek(&s->calib_il, (sdp_loader_pos){0, 0});
    sdp_image_loader_next(&s->calib_il, s->pixels, s->labels);
    *b = (sdp_batch){.B = s->B, .T = 1, .images = s->pixels, .labels = s->labels};
}

sdp_loader_pos train_batches_pos(const batch_source *s) {
    return s->images ? s->train_il.pos : s->train_tl.pos;
}

sdp_loader_pos train_batches_seek(batch_source *s, sdp_loader_pos pos, int saved_world) {
    if (s->images) {
        sdp_image_loader *L = &s->train_il;
        pos =
            sdp_loader_pos_rescale(pos, saved_world, L->world, sdp_image_loader_steps_per_epoch(L));
        sdp_image_loader_seek(L, pos);
    } else {
        sdp_loader *L = &s->train_tl;
        pos = sdp_loader_pos_rescale(pos, saved_world, L->world, sdp_loader_steps_per_epoch(L));
        sdp_loader_seek(L, pos);
    }
    return pos;
}

void train_batches_fed(batch_source *s, const train_opts *o, bool images) {
    memset(s, 0, sizeof *s);
    s->images = images;
    s->B = o->batch;
    s->T = images ? 1 : o->arch.seq_len;
    const run_data_shape shape = train_run_dataset_shape(o);
    SDP_CHECK(images || o->arch.vocab > 0,
              "a trainer fed its batches by the caller has no data to take the vocabulary from: "
              "set --vocab");
    s->fed_vocab = shape.vocab;
    s->train_img.C = shape.channels;
    s->train_img.H = s->train_img.W = shape.image_size;
    s->train_img.nclasses = shape.classes;
}

/* The vocabulary covers the validation tokens too: a validation id past the training ones would
 * otherwise stop the run at its first evaluation, after the steps before it were spent. */
int train_batches_vocab(const batch_source *s) {
    if (s->images) return 0;
    if (s->fed_vocab) return s->fed_vocab;
    return s->val_tok.vocab > s->train_tok.vocab ? s->val_tok.vocab : s->train_tok.vocab;
}

void train_batches_image_shape(const batch_source *s, int *channels, int *size, int *classes) {
    *channels = s->images ? s->train_img.C : 0;
    *size = s->images ? s->train_img.H : 0;
    *classes = s->images ? s->train_img.nclasses : 0;
}

size_t train_batches_train_examples(const batch_source *s) {
    return s->images ? s->train_img.n : s->train_tok.ntokens;
}

size_t train_batches_val_examples(const batch_source *s) {
    return s->images ? s->test_img.n : s->val_tok.ntokens;
}

enum { DATA_FIELDS = 6 };

/* What the fields of train_batches_check_same say, in words. */
static const char *describe_data(char *out, size_t n, const uint64_t *f, bool images) {
    if (images)
        snprintf(out, n, "%llux%llux%llu images of %llu classes, %llu to train on and %llu to test",
                 (unsigned long long)f[1], (unsigned long long)f[2], (unsigned long long)f[2],
                 (unsigned long long)f[3], (unsigned long long)f[4], (unsigned long long)f[5]);
    else
        snprintf(out, n, "%llu training and %llu validation tokens of a %llu-token vocabulary",
                 (unsigned long long)f[4], (unsigned long long)f[5], (unsigned long long)f[0]);
    return out;
}

void train_batches_check_same(const batch_source *s, MPI_Comm comm) {
    int channels, size, classes, rank, world;
    train_batches_image_shape(s, &channels, &size, &classes);
    const uint64_t mine[DATA_FIELDS] = {(uint64_t)train_batches_vocab(s),
                                        (uint64_t)channels,
                                        (uint64_t)size,
                                        (uint64_t)classes,
                                        (uint64_t)train_batches_train_examples(s),
                                        (uint64_t)train_batches_val_examples(s)};
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    uint64_t *all =
        sdp_xmalloc(sizeof(uint64_t) * DATA_FIELDS * (size_t)world, "every rank's data");
    MPI_Allgather(mine, DATA_FIELDS, MPI_UINT64_T, all, DATA_FIELDS, MPI_UINT64_T, comm);
    for (int r = 1; r < world; r++) {
        const uint64_t *theirs = all + (size_t)r * DATA_FIELDS;
        if (memcmp(all, theirs, sizeof mine) == 0) continue;
        char a[160], b[160];
        sdp_fatal_all("rank %d reads other data than rank 0 (%s, against %s): every rank must "
                      "read the same data, so give each host the same files at the path "
                      "--data names",
                      r, describe_data(b, sizeof b, theirs, s->images),
                      describe_data(a, sizeof a, all, s->images));
    }
    free(all);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

uint64_t train_batches_val_count(const batch_source *s, int max_batches) {
    if (!s->has_val) return 0;
    if (s->images) {
        sdp_image_eval E;
        sdp_image_eval_init(&E, &s->test_img, s->B, s->rank, s->world, &s->norm);
        return sdp_image_eval_steps(&E);
    }
    const uint64_t steps = sdp_loader_steps_per_epoch(&s->val_tl);
    return (uint64_t)max_batches < steps ? (uint64_t)max_batches : steps;
}

int train_batches_val_batch(batch_source *s, uint64_t v, sdp_batch *b) {
    memset(b, 0, sizeof *b);
    b->B = s->B;
    b->T = s->T;
    if (!s->images) {
        sdp_loader_seek(&s->val_tl, (sdp_loader_pos){0, v});
        sdp_loader_next(&s->val_tl, s->tokens, s->targets);
        b->tokens = s->tokens;
        b->targets = s->targets;
        return s->B;
    }
    sdp_image_eval E;
    sdp_image_eval_init(&E, &s->test_img, s->B, s->rank, s->world, &s->norm);
    const size_t first = (size_t)v * (size_t)s->B;
    E.done = first < E.count ? first : E.count;
    b->images = s->pixels;
    b->labels = s->labels;
    return sdp_image_eval_next(&E, s->pixels, s->labels);
}

sdp_metrics train_batches_evaluate(batch_source *s, sdp_model *m, int max_batches, MPI_Comm comm) {
    return train_batches_evaluate_progress(s, m, max_batches, comm, NULL);
}

sdp_metrics train_batches_evaluate_progress(batch_source *s, sdp_model *m, int max_batches,
                                            MPI_Comm comm, eval_progress *p) {
    if (!s->has_val) return (sdp_metrics){NAN, 0, NAN};
    sdp_metrics total = {0, 0, 0};
    const uint64_t n = train_batches_val_count(s, max_batches);
    for (uint64_t v = 0; v < n; v++) {
        sdp_batch b;
        if (p) train_eval_progress_update(p, v);
        if (train_batches_val_batch(s, v, &b) == 0) continue; /* a share shorter than the others */
        sdp_metrics mt;
        m->ops->forward(m, &b, false, &mt);
        sdp_watchdog_beat(s->watchdog);
        total.loss += mt.loss, total.count += mt.count, total.correct += mt.correct;
    }
    if (p) train_eval_progress_update(p, n);
    double v[3] = {total.loss, total.count, total.correct};
    MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, comm);
    return (sdp_metrics){v[0], v[1], v[2]};
}

void train_batches_close(batch_source *s, sdp_mem *mem) {
    sdp_image_loader_free(&s->train_il, mem);
    sdp_image_loader_free(&s->calib_il, mem);
    sdp_images_free(&s->train_img, mem);
    sdp_images_free(&s->test_img, mem);
    sdp_loader_free(&s->train_tl, mem);
    sdp_loader_free(&s->val_tl, mem);
    sdp_tokens_free(&s->train_tok, mem);
    sdp_tokens_free(&s->val_tok, mem);
    sdp_free(mem, s->pixels);
    sdp_free(mem, s->labels);
    sdp_free(mem, s->tokens);
    sdp_free(mem, s->targets);
    memset(s, 0, sizeof *s);
}
