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
