#include "sdp/rng.h"

#include <math.h>

/* splitmix64: tiny state, passes BigCrush, and trivially serialisable for checkpoints. */
static uint64_t splitmix64(uint64_t *s) {
    return sdp_rng_mix(*s += SDP_RNG_GAMMA);
}

sdp_rng sdp_rng_make(uint64_t seed, uint64_t stream) {
    uint64_t s = seed ^ (stream * 0xd1b54a32d192ed03ull);
    sdp_rng r = {splitmix64(&s)};
    return r;
}

uint64_t sdp_rng_u64(sdp_rng *r) {
    return splitmix64(&r->state);
}

uint32_t sdp_rng_u32(sdp_rng *r) {
    return (uint32_t)(sdp_rng_u64(r) >> 32);
}

uint64_t sdp_rng_below(sdp_rng *r, uint64_t n) {
    /* Rejection sampling removes modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = sdp_rng_u64(r);
    while (x >= limit);
    return x % n;
}

float sdp_rng_uniform(sdp_rng *r) {
    return (float)(sdp_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float sdp_rng_normal(sdp_rng *r) {
    double u1 = ((double)(sdp_rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(sdp_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
