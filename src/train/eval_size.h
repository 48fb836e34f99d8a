/* The one-block models of block-streamed evaluation (src/train/eval_size.c; the pass's sizes are
 * declared in io_memplan.h beside the other predictions). */
#ifndef SDP_TRAIN_EVAL_SIZE_H
#define SDP_TRAIN_EVAL_SIZE_H

#include "sdp/model.h"

/* The spec of a model that keeps block g whole, and the blocks no subnetwork drops (a ResNet's
 * downsampling ones). */
sdp_subnet_spec eval_block_spec(const sdp_layout *full, int g);
void eval_block_spec_free(sdp_subnet_spec *spec);

#endif
