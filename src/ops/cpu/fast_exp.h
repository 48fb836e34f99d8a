/* A vectorisable e^x for the kernels whose loops are dominated by exponentials (softmax in
 * attention and cross-entropy, GELU): libm's expf is a scalar call, so a loop around it runs one
 * element at a time and costs more than the matrix products next to it. Private to src/ops/cpu. */
#ifndef SDP_OPS_CPU_FAST_EXP_H
#define SDP_OPS_CPU_FAST_EXP_H

#include <math.h>
#include <stdint.h>

/* e^x to about 1 ulp for x in [-87, 88] (clamped outside, which for softmax arguments x <= 0
 * only turns values below 1.6e-38 into 1.6e-38). Branch-free so the loops that call it vectorise.
 */
static inline float exp_clamped(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer n. */
    float n = fmaf(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
    float r = fmaf(-n, 0.693145751953125f, x); /* ln 2 split so that n * hi is exact */
    r = fmaf(-n, 1.428606765330187e-06f, r);
    float e = 1.0f / 5040; /* Taylor series of e^r, |r| <= ln2 / 2 */
    e = fmaf(e, r, 1.0f / 720);
    e = fmaf(e, r, 1.0f / 120);
    e = fmaf(e, r, 1.0f / 24);
    e = fmaf(e, r, 1.0f / 6);
    e = fmaf(e, r, 0.5f);
    e = fmaf(e, r, 1.0f);
    e = fmaf(e, r, 1.0f);
    union {
        int32_t i;
        float f;
    } two_n = {.i = ((int32_t)n + 127) << 23};
    return e * two_n.f;
}

#endif
