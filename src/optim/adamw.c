/* AdamW's step scalars (torch.optim.AdamW). Element math is in float, in the backends' kernels
 * (sdp_adamw_update); the bias-correction factors, which involve beta^t for large t, are computed
 * here in double, once per step, and every backend takes them as they are. */
#include "sdp/optim.h"

#include <math.h>

sdp_adamw_scalars sdp_adamw_scalars_at(const sdp_opt_cfg *cfg, long t, float lr) {
    double bc1 = 1.0 - pow((double)cfg->beta1, (double)t);
    double bc2 = 1.0 - pow((double)cfg->beta2, (double)t);
    sdp_adamw_scalars c;
    c.beta1 = cfg->beta1;
    c.one_minus_beta1 = 1.0f - cfg->beta1;
    c.beta2 = cfg->beta2;
    c.one_minus_beta2 = 1.0f - cfg->beta2;
    c.eps = cfg->eps;
    c.step_size = (float)((double)lr / bc1);
    c.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    c.decay_multiplier = (float)(1.0 - (double)lr * (double)cfg->weight_decay);
    return c;
}
