/* The per-kind update rules that sdp_optim_step dispatches to (private to src/optim). Each one
 * runs after o->t has been advanced, so o->t is the 1-based number of the step being taken. */
#ifndef SDP_OPTIM_KERNELS_H
#define SDP_OPTIM_KERNELS_H

#include "sdp/optim.h"

/* Segments shorter than this are updated by one thread: a parallel region costs more than the
 * loop itself for biases and norms. The result does not depend on it (updates are elementwise). */
enum { SDP_OPTIM_PARALLEL_MIN = 1 << 14 };

void optim_adamw_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                      int nseg, float lr);
void optim_sgd_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                    int nseg, float lr);

#endif
