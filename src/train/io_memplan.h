/* What sdp train holds for evaluation and checkpoints (its io_mem), sized from the model's shape
 * and the plan alone. The trainer sizes its buffers with these functions, and `sdp plan` predicts
 * each rank's peak with them, so the prediction is the allocation (tests/test_sdp_memplan.sh). */
#ifndef SDP_TRAIN_IO_MEMPLAN_H
#define SDP_TRAIN_IO_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/model.h"
#include "sdp/ops.h"
#include "sdp/plan.h"

/* Floats per window of a streamed checkpoint or of a block sent for evaluation
 * (trainer_checkpoint.c): SDP_CKPT_WINDOW or 1M, and no more than a model of numel elements needs.
 */
size_t train_ckpt_window_floats(size_t numel);

/* One pass of block-streamed evaluation (eval_stream.c) over `batches` batches of B: examples
 * per stage call, batches per chunk, the stream's floats per example, and the bytes of the block
 * models' arena (the largest block's model) and of the chunk's streams. */
typedef struct {
    int rows, chunk;
    size_t row_floats, arena_bytes, stream_bytes;
} eval_pass_size;
eval_pass_size train_eval_pass_size_of(const sdp_model_config *cfg, const sdp_layout *full, int B,
                                       int T, uint64_t batches, bool training,
                                       sdp_gemm_provider gemm);
/* The same, building every block's model rather than one per kind of block: the reference
 * train_eval_pass_size_of equals (tests/test_plan_fast.c). */
eval_pass_size train_eval_pass_size_each_block(const sdp_model_config *cfg, const sdp_layout *full,
                                               int B, int T, uint64_t batches, bool training,
                                               sdp_gemm_provider gemm);
/* Which of a pass's buffers lie in the training activations, when a worker lends `lent` bytes of
 * them (its activations' pool: 0 on a device, whose activations are not host memory). Both when
 * they fit together, the arena first; else the larger one that fits alone; else the other. */
typedef struct {
    bool arena, stream;
} eval_pass_lent;
eval_pass_lent train_eval_pass_lent(const eval_pass_size *z, size_t lent);
/* Floats of the full layout's running statistics, which re-estimation keeps for checkpoints. */
size_t train_eval_recal_floats(const sdp_layout *full);

/* A run as train_io_memplan_predict sees it. */
typedef struct {
    const sdp_model_config *cfg; /* the full model's, on the host */
    const sdp_layout *full;
    const sdp_plan *plan;
    int B, T;
    uint64_t val_batches;   /* validation batches each worker evaluates */
    uint64_t recal_batches; /* --bn-recal-batches */
    int state_buffers;      /* optimizer state per parameter, in floats */
    bool images;            /* image models re-estimate running statistics */
    bool on_device;         /* host copies of device buffers are made to gather */
    sdp_gemm_provider gemm;
} io_memplan_run;

/* The peak bytes of every rank's io_mem (out[world]) over a run that evaluates and checkpoints.
 * The gathers are counted from the plan alone, in one pass over the full model (seconds at
 * N = 1024 with neuron units). */
void train_io_memplan_predict(const io_memplan_run *run, double *out);
/* The same, from every rank's own model and subnet map as the trainer builds them: O(N) models
 * and maps (minutes at N = 1024 with neuron units). The reference train_io_memplan_predict equals
 * (tests/test_plan_fast.c). */
void train_io_memplan_predict_reference(const io_memplan_run *run, double *out);

#endif
