/* Global-norm gradient clipping: the scale. The norm's sum of squares and the scaling are the
 * backend's sumsq and scale (src/ops/cpu/reduce.c on the CPU). */
#include "sdp/optim.h"

float sdp_clip_scale(double norm, float max_norm) {
    if (max_norm > 0.0f && norm > (double)max_norm)
        return (float)((double)max_norm / (norm + 1e-6));
    return 1.0f;
}
