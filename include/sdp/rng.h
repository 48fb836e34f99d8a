/* Seeded random numbers with explicit state (no globals), so runs and resumes are reproducible. */
#ifndef SDP_RNG_H
#define SDP_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
} sdp_rng;

/* Streams with different (seed, stream) pairs are independent, e.g. one per rank. */
sdp_rng sdp_rng_make(uint64_t seed, uint64_t stream);
uint32_t sdp_rng_u32(sdp_rng *r);
uint64_t sdp_rng_u64(sdp_rng *r);
/* Uniform in [0, n). */
uint64_t sdp_rng_below(sdp_rng *r, uint64_t n);
/* Uniform in [0, 1). */
float sdp_rng_uniform(sdp_rng *r);
/* Standard normal (Box-Muller). */
float sdp_rng_normal(sdp_rng *r);

#endif
