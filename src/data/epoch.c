#include "sdp/data.h"

#include "sdp/rng.h"

void sdp_epoch_order(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
    for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    if (!shuffle || n < 2) return;
    sdp_rng rng = sdp_rng_make(seed, epoch);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)sdp_rng_below(&rng, i + 1);
        uint32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

sdp_loader_pos sdp_loader_pos_normalize(sdp_loader_pos pos, uint64_t steps_per_epoch) {
    pos.epoch += pos.step / steps_per_epoch;
    pos.step %= steps_per_epoch;
    return pos;
}

bool sdp_loader_pos_advance(sdp_loader_pos *pos, uint64_t steps_per_epoch) {
    if (++pos->step < steps_per_epoch) return false;
    pos->epoch++;
    pos->step = 0;
    return true;
}

sdp_loader_pos sdp_loader_pos_rescale(sdp_loader_pos pos, int old_world, int new_world,
                                      uint64_t new_steps_per_epoch) {
    if (old_world == new_world) return pos;
    /* Batches of old_world workers taken, in batches of new_world, rounded up: every worker's
     * batch of a step is B items, so both count items in the same unit. */
    const uint64_t taken = pos.step * (uint64_t)old_world;
    pos.step = (taken + (uint64_t)new_world - 1) / (uint64_t)new_world;
    if (pos.step >= new_steps_per_epoch) {
        pos.epoch++;
        pos.step = 0;
    }
    return pos;
}
