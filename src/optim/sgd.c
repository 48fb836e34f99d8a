/* SGD's step scalars (torch.optim.SGD with dampening 0): the element math is the backends'
 * (sdp_sgd_update). torch creates the momentum buffer from the first gradient, so the first step
 * ignores whatever the buffer holds. */
#include "sdp/optim.h"

sdp_sgd_scalars sdp_sgd_scalars_at(const sdp_opt_cfg *cfg, long t, float lr) {
    return (sdp_sgd_scalars){.lr = lr,
                             .weight_decay = cfg->weight_decay,
                             .momentum = cfg->momentum,
                             .nesterov = cfg->nesterov,
                             .first_step = t == 1};
}
