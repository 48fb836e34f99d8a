/* Rotary position embedding, rotate-half convention (HF LLaMA): within each head of q and k,
 * position t rotates the pair (x[i], x[i + hs/2]) by the angle t * theta^(-2i/hs).
 * The backward applies the transposed rotation, which is the inverse one.
 *
 * Angles are computed in double once per position and shared by every batch row and head, so
 * positions far into the sequence lose no precision to a float t * frequency product.
 */
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <stddef.h>

/* The per-position cos/sin tables are on the stack: src/ops/ops.c bounds hs. */

/* (x1, x2) <- (x1 c - x2 s, x2 c + x1 s) for each pair; sign = -1 rotates the other way. */
static void rotate_head(float *x, const float *c, const float *s, int half, float sign) {
    for (int i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half], si = sign * s[i];
        x[i] = x1 * c[i] - x2 * si;
        x[i + half] = x2 * c[i] + x1 * si;
    }
}

/* Rotates the q and k parts of every row, by +angle (sign 1) or -angle (sign -1). */
static void rope_apply(float *qkv, int B, int T, int H, int hs, float theta, float sign) {
    int half = hs / 2;
    ptrdiff_t D = (ptrdiff_t)H * hs;
    double freq[half];
    for (int i = 0; i < half; i++) freq[i] = pow(theta, -2.0 * i / hs);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float c[half], s[half];
        for (int i = 0; i < half; i++) {
            c[i] = (float)cos(t * freq[i]);
            s[i] = (float)sin(t * freq[i]);
        }
        /* The q heads and then the k heads fill the first 2 * H head slots of each row. */
        for (int b = 0; b < B; b++) {
            float *row = qkv + ((size_t)b * T + t) * 3 * D;
            for (int h = 0; h < 2 * H; h++) rotate_head(row + h * hs, c, s, half, sign);
        }
    }
}

static void rope_fwd(const sdp_backend *be, float *qkv, int B, int T, int H, int hs, float theta) {
    (void)be;
    rope_apply(qkv, B, T, H, hs, theta, 1.0f);
}

static void rope_bwd(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs, float theta) {
    (void)be;
    rope_apply(dqkv, B, T, H, hs, theta, -1.0f);
}

void cpu_ops_rope(sdp_backend *t) {
    t->rope_fwd = rope_fwd;
    t->rope_bwd = rope_bwd;
}
