/* sdp eval: the validation loss of a trained run, on its own data or another. */
#include "commands.h"
#include "train/batches.h"
#include "train/eval_progress.h"
#include "train/trainer.h"
#include "load_run.h"

#include "sdp/check.h"
#include "sdp/ops.h"
#include "sdp/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char run[OPT_STR_MAX], data[OPT_STR_MAX];
    int batches, threads;
    double progress_every;
} eval_opts;

static const opt_spec EVAL_OPTS[] = {
    {"run", OPT_STR, offsetof(eval_opts, run), "", "run directory written by sdp train", 0},
    {"data", OPT_STR, offsetof(eval_opts, data), "",
     "evaluate on this text file or shard glob (every whole batch of it on every rank: the "
     "result line gives the tokens); default: the run's validation split",
     0},
    {"batches", OPT_INT, offsetof(eval_opts, batches), "1000000",
     "at most this many batches of text per worker, as sdp train's --val-batches (under mpiexec -n "
     "N, N times as many in all); an image run evaluates its whole test split",
     1},
    {"threads", OPT_INT, offsetof(eval_opts, threads), "0", "threads; 0 = all cores", 0},
    {"progress-every", OPT_FLOAT, offsetof(eval_opts, progress_every), "2",
     "seconds between progress lines on stderr (tokens or images done, rate, time left); 0 = "
     "after every batch, -1 = none",
     -1},
    {NULL, 0, 0, NULL, NULL, 0},
};

/* The images must be those the model was trained on: another dataset (a config.json edited, or
 * files replaced) would be read into buffers of another size. */
static void check_image_shape(const batch_source *data, run_data_shape trained, const char *run) {
    if (!data->images) return;
    int c, s, k;
    train_batches_image_shape(data, &c, &s, &k);
    SDP_CHECK_ALL(
        c == trained.channels && s == trained.image_size && k == trained.classes,
        "%s/model.safetensors was trained on %dx%dx%d images of %d classes, but its dataset "
        "gives %dx%dx%d images of %d classes: evaluate it on the data it was trained on",
        run, trained.channels, trained.image_size, trained.image_size, trained.classes, c, s, s, k);
}

/* The run's own split must be the one it was trained beside: data cut or extended at the same
 * path since would give another split, evaluated as if it were the run's. The checkpoint records
 * the example counts its data gave (sdp.data_examples; absent from older checkpoints). Text
 * evaluation loads no training split (0 here), so only the validation count is compared then. */
static void check_same_examples(const batch_source *data, const char *run, sdp_mem *mem) {
    char path[1024];
    train_run_path(path, sizeof path, run, "model.safetensors");
    sdp_st_file f;
    sdp_st_open_header(&f, path, mem); /* load_run_model has verified the file */
    double ex[2];
    train_checkpoint_data_examples(&f, ex);
    sdp_st_close(&f, mem);
    const double train = (double)train_batches_train_examples(data),
                 val = (double)train_batches_val_examples(data);
    const char *what = data->images ? "images" : "tokens";
    SDP_CHECK_ALL(ex[0] < 0 || (ex[1] == val && (train == 0 || ex[0] == train)),
                  "%s was trained beside %.0f validation %s, but its data now gives %.0f: the data "
                  "changed since; restore it, or pass --data FILE to evaluate on a file whole",
                  path, ex[1], what, val);
}

/* Progress lines on rank 0 for the pass over this worker's share of the data: a batch of every
 * worker is B x T tokens or B images each; the last image batches of a share are padded, so the
 * test split is the true total. */
static void start_progress(eval_progress *p, const eval_opts *e, const batch_source *data, int rank,
                           int world) {
    const uint64_t n = train_batches_val_count(data, e->batches);
    const double per_batch = (double)data->B * data->T * world;
    double total = per_batch * (double)n;
    if (data->images && (double)train_batches_val_examples(data) < total)
        total = (double)train_batches_val_examples(data);
    train_eval_progress_init(p, rank == 0 ? e->progress_every : -1, n, per_batch, total,
                             data->images);
}

int cmd_eval(int argc, char **argv) {
    eval_opts e;
    train_opts_parse(EVAL_OPTS, &e, argc, argv, "usage: sdp eval --run DIR [--data FILE]");
    SDP_CHECK(e.run[0], "sdp eval needs --run DIR (a directory written by sdp train)");
    sdp_world w;
    sdp_world_init(&w, &argc, &argv, e.threads);
    sdp_set_threads(w.threads);
    sdp_mem mem = {0};
    train_opts o;
    sdp_model m;
    sdp_backend *be;
    const run_data_shape trained = load_run_model(&m, &be, &o, e.run, 0, 0, &mem);
    if (e.data[0] && !train_run_images(&o)) {
        /* Bytes scored as token ids (or ids as bytes) give a loss that means nothing. */
        const bool run_shards = train_run_data_is_shards(o.data),
                   data_shards = train_run_data_is_shards(e.data);
        SDP_CHECK_ALL(run_shards == data_shards,
                      "run %s was trained on %s, but --data %s is %s: evaluate it on data of the "
                      "kind it was trained on",
                      e.run, run_shards ? "llm.c token shards" : "byte-level text", e.data,
                      data_shards ? "llm.c token shards" : "byte-level text");
    }
    if (e.data[0]) strcpy(o.data, e.data);
    batch_source data;
    if (e.data[0] && !train_run_images(&o)) { /* another file: every whole batch of it */
        o.val_data[0] = 0;
        train_batches_open_file(&data, &o, w.rank, w.size, &mem);
    } else {
        train_batches_open_eval(&data, &o, train_run_images(&o), w.rank, w.size, &mem);
    }
    train_batches_check_same(&data, MPI_COMM_WORLD);
    SDP_CHECK_ALL(data.has_val,
                  "run %s has no validation data (it was trained without --val-data, or with "
                  "--val-frac 0): pass --data FILE to evaluate it on FILE",
                  e.run);
    SDP_CHECK_ALL(
        !data.images || !train_opts_given(argc, argv, "batches"),
        "%s is an image run, which sdp eval evaluates on its whole test split: drop --batches "
        "(it limits text evaluation)",
        e.run);
    check_image_shape(&data, trained, e.run);
    SDP_CHECK_ALL(data.images || train_batches_vocab(&data) <= trained.vocab,
                  "the data holds a vocabulary of %d tokens, more than the %d that %s/"
                  "model.safetensors was trained with (its 'sdp.vocab'): evaluate it on data "
                  "of its own vocabulary; if the file was edited, restore it",
                  train_batches_vocab(&data), trained.vocab, e.run);
    if (!e.data[0]) check_same_examples(&data, e.run, &mem); /* after the shape: the likelier */
    eval_progress progress;
    start_progress(&progress, &e, &data, w.rank, w.size);
    sdp_metrics v =
        train_batches_evaluate_progress(&data, &m, e.batches, MPI_COMM_WORLD, &progress);
    const double loss = v.loss / v.count;
    if (w.rank == 0) {
        if (data.images)
            printf("eval %s: test loss %.4f, test accuracy %.2f%% (%.0f images)\n", e.run, loss,
                   100 * v.correct / v.count, v.count);
        else { /* the tokens say how much of the data whole batches on every rank held */
            char ppl[48];
            if (loss < 700)
                snprintf(ppl, sizeof ppl, "%.3f", exp(loss));
            else
                snprintf(ppl, sizeof ppl, "beyond a double (loss over 700)");
            printf("eval %s: loss %.4f nats/token (%.4f bits/token), perplexity %s (%.0f tokens)\n",
                   e.run, loss, loss / log(2.0), ppl, v.count);
        }
    }
    m.ops->destroy(&m);
    sdp_backend_destroy(be);
    sdp_world_finalize();
    return 0;
}
