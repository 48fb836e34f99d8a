/* Seeded random numbers with explicit state (no globals), so runs and resumes are reproducible. */
#ifndef SDP_RNG_H
#define SDP_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
} sdp_rng;

/* The inline functions below are also compiled for CUDA devices (the dropout kernels of
 * src/ops/cuda/ draw the same bits as the CPU's). */
#ifdef __CUDACC__
#define SDP_HOST_DEVICE __host__ __device__
#else
#define SDP_HOST_DEVICE
#endif

/* splitmix64's step and output function: draw n (from 0) of a stream whose state is s is
 * sdp_rng_mix(s + (n + 1) * SDP_RNG_GAMMA). */
#define SDP_RNG_GAMMA 0x9e3779b97f4a7c15ull
static inline SDP_HOST_DEVICE uint64_t sdp_rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Streams with different (seed, stream) pairs are independent, e.g. one per rank. */
sdp_rng sdp_rng_make(uint64_t seed, uint64_t stream);
uint32_t sdp_rng_u32(sdp_rng *r);
uint64_t sdp_rng_u64(sdp_rng *r);
/* Draw n (from 0) of r's stream, without advancing r: what the (n+1)-th call of sdp_rng_u64(r)
 * would return. Counter-based, so any draw of a long stream is computed on its own: in parallel,
 * in any order, on a device (dropout masks, src/ops/cpu/dropout.c and its CUDA twin). */
static inline SDP_HOST_DEVICE uint64_t sdp_rng_at(sdp_rng r, uint64_t n) {
    return sdp_rng_mix(r.state + (n + 1) * SDP_RNG_GAMMA);
}
/* Uniform in [0, n). */
uint64_t sdp_rng_below(sdp_rng *r, uint64_t n);
/* Uniform in [0, 1). */
float sdp_rng_uniform(sdp_rng *r);
/* Standard normal (Box-Muller). */
float sdp_rng_normal(sdp_rng *r);

#endif
