/* The one-block models of block-streamed evaluation (src/train/eval_size.c; the pass's sizes are
 * declared in io_memplan.h beside the other predictions). */
#ifndef SDP_TRAIN_EVAL_SIZE_H
#define SDP_TRAIN_EVAL_SIZE_H

#include "sdp/model.h"

#include <stdbool.h>

/* The spec of a model that keeps block g whole, and the blocks no subnetwork drops (a ResNet's
 * downsampling ones). */
sdp_subnet_spec train_eval_block_spec(const sdp_layout *full, int g);
void train_eval_block_spec_free(sdp_subnet_spec *spec);
/* Every block's kind, kinds[g] (the first block alike with block g); returns how many kinds.
 * Alike blocks have the same tensors (shapes, groups, axes, initialisation) in the same order
 * and the same groups, so a model builds them the same way: a transformer's layers are all alike,
 * a ResNet's blocks alike within a stage. With by_position, blocks are alike only with as many
 * undroppable blocks before them (which a one-block model keeps too). */
int train_eval_block_kinds(const sdp_layout *full, bool by_position, int *kinds);

#endif
