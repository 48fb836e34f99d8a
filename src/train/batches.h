/* Where a run's batches come from: token data (text or llm.c shards) for token models, or an
 * image dataset (Fashion-MNIST, CIFAR-10/100) for image models. The trainer and sdp eval see
 * only batches, a position to save and restore, and an evaluation pass. */
#ifndef SDP_TRAIN_BATCHES_H
#define SDP_TRAIN_BATCHES_H

#include <mpi.h>

#include "sdp/data.h"
#include "sdp/image_loader.h"
#include "sdp/model.h"
#include "sdp/watchdog.h"
#include "train_opts.h"

typedef struct {
    bool images;
    int B, T; /* T = 1 for images */
    /* token data */
    sdp_tokens train_tok, val_tok;
    sdp_loader train_tl, val_tl;
    /* image data */
    sdp_images train_img, test_img;
    sdp_image_norm norm;
    sdp_image_loader train_il;
    sdp_image_loader calib_il; /* training images for batch-norm recalibration, its own stream */
    /* the current batch */
    int *tokens, *targets, *labels;
    float *pixels;
    bool has_val;
    int rank, world;        /* this worker, whose share of the validation data is its own */
    int fed_vocab;          /* train_batches_fed: the vocabulary the options give */
    sdp_watchdog *watchdog; /* beaten at every batch (NULL: none) */
    bool evaluating;        /* opened by sdp eval: errors name eval's remedies, not --batch */
} batch_source;

/* Opens the run's data for worker rank of world: its training stream and its share of the
 * validation data, the share data parallelism's worker of that rank evaluates. */
void train_batches_open(batch_source *s, const train_opts *o, bool images, int rank, int world,
                        sdp_mem *mem);
/* train_batches_open for sdp eval, which cannot change the run's --batch or --seq-len: data too
 * small for them is refused with advice that eval can follow (fewer ranks, more data). */
void train_batches_open_eval(batch_source *s, const train_opts *o, bool images, int rank, int world,
                             sdp_mem *mem);
/* For evaluating token data alone (sdp eval --data): all of o->data, text or shards, is the
 * validation data of worker rank of world; there is no training stream. */
void train_batches_open_file(batch_source *s, const train_opts *o, int rank, int world,
                             sdp_mem *mem);
/* The next training batch of this worker. */
void train_batches_next(batch_source *s, sdp_batch *b);
/* No data, for a trainer whose caller feeds the batches (trainer.next_batch): the shapes only,
 * from the options (--vocab, or the dataset's images), and no validation data. */
void train_batches_fed(batch_source *s, const train_opts *o, bool images);
/* Frees what train_batches_open (or train_batches_open_file) took from mem. */
void train_batches_close(batch_source *s, sdp_mem *mem);
/* Batch i of the recalibration stream: training images without augmentation, the same sequence
 * every time it restarts at i = 0, independent of training's position. Image data only. */
void train_batches_calibration(batch_source *s, int i, sdp_batch *b);
sdp_loader_pos train_batches_pos(const batch_source *s);
/* Moves the training stream to pos, a position saved by saved_world workers: with another number
 * of workers, the one that goes on where they stopped (sdp_loader_pos_rescale). Returns the
 * position taken. */
sdp_loader_pos train_batches_seek(batch_source *s, sdp_loader_pos pos, int saved_world);
/* Token vocabulary of the data (0 for images), and image geometry (0 for tokens). */
int train_batches_vocab(const batch_source *s);
void train_batches_image_shape(const batch_source *s, int *channels, int *size, int *classes);
/* Every rank of comm must read the same data: the vocabulary or image shape (which size the
 * model) and the examples of both splits are compared with rank 0's, and a rank whose data
 * differs (another file at the same path on its host) ends the job with one line. Collective. */
void train_batches_check_same(const batch_source *s, MPI_Comm comm);
/* Training examples: tokens or images. */
size_t train_batches_train_examples(const batch_source *s);
size_t train_batches_val_examples(const batch_source *s);

/* This worker's share of the validation data, the share data parallelism's worker of the same
 * rank evaluates: how many batches (for tokens at most max_batches; the same on every rank), and
 * batch v of them, loaded into the source's batch buffers. Returns the examples it holds: an
 * image share shorter than the others ends with padding (labels -1, which losses ignore). */
uint64_t train_batches_val_count(const batch_source *s, int max_batches);
int train_batches_val_batch(batch_source *s, uint64_t v, sdp_batch *b);

/* Loss, count and correct predictions of model m over this worker's share of the validation data,
 * summed over the workers of comm. */
sdp_metrics train_batches_evaluate(batch_source *s, sdp_model *m, int max_batches, MPI_Comm comm);
/* The same, with progress lines from p (eval_progress.h; NULL: none). */
typedef struct eval_progress eval_progress;
sdp_metrics train_batches_evaluate_progress(batch_source *s, sdp_model *m, int max_batches,
                                            MPI_Comm comm, eval_progress *p);

#endif
