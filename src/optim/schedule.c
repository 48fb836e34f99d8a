/* Learning-rate schedule: linear warmup to lr_max, then half a cosine down to lr_min. */
#include "sdp/optim.h"

#include "sdp/check.h"

#include <math.h>

float sdp_lr_at(long step, long warmup, long total, float lr_max, float lr_min) {
    SDP_ASSERT(step >= 0 && warmup >= 0);
    /* (step + 1) so that the first step already learns and the last warmup step hits lr_max. */
    if (step < warmup) return (float)((double)lr_max * (double)(step + 1) / (double)warmup);
    long span = total - warmup > 1 ? total - warmup : 1;
    double progress = (double)(step - warmup) / (double)span;
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + cos(M_PI * progress));
    return (float)((double)lr_min + ((double)lr_max - (double)lr_min) * cosine);
}
