/* Progress of a long evaluation pass (sdp eval over a whole file): on rank 0, one line on stderr
 * every few seconds with the tokens or images done of the total, the rate and the time left, so
 * that stdout keeps only the result line. A pass shorter than the interval prints nothing. */
#ifndef SDP_TRAIN_EVAL_PROGRESS_H
#define SDP_TRAIN_EVAL_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct eval_progress {
    double every_s; /* seconds between lines; 0: after every batch; < 0: never */
    double start_s, last_s;
    uint64_t batches; /* of the pass, on each worker */
    double per_batch; /* tokens or images a batch of every worker adds */
    double total;     /* tokens or images of the pass, all workers together */
    const char *unit; /* "tok" or "img", as sdp train's progress lines say */
    int lines;        /* printed so far */
} eval_progress;

/* A pass of `batches` batches per worker, each batch of all workers `per_batch` tokens or images
 * (`images`), `total` in all; `every_s` as above (pass a negative one on every rank but 0). */
void train_eval_progress_init(eval_progress *p, double every_s, uint64_t batches, double per_batch,
                              double total, bool images);
/* After `done` batches of the pass: a line when the interval has passed since the last one, and
 * a closing one at the end of a pass that printed any. */
void train_eval_progress_update(eval_progress *p, uint64_t done);
/* "42s", "3m07s", "2h05m": how these lines and sdp train's progress lines give a duration. */
const char *train_progress_fmt_duration(char *buf, size_t n, double s);

#endif
