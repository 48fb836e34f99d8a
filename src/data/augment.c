#include "sdp/image_loader.h"

#include "sdp/check.h"
#include "sdp/rng.h"

#include <math.h>
#include <string.h>

/* Separates the augmentation streams from the shuffling streams, which use sdp_rng_make(seed,
 * epoch): without it sample 3 of epoch 0 would draw from the stream that shuffles epoch 3. */
static const uint64_t AUGMENT_SALT = 0x61756731d2b4c5e7ull;

/* Pixels are counted per value first, so the sums are exact integers and the statistics cost
 * one pass over the data however large it is. */
sdp_image_norm sdp_images_norm_stats(const sdp_images *d) {
    SDP_CHECK_ALL(d->C >= 1 && d->C <= SDP_IMAGES_MAX_C && d->n >= 1,
                  "cannot compute normalization statistics of %zu images with %d channels: load a "
                  "dataset with 1 to %d channels first",
                  d->n, d->C, SDP_IMAGES_MAX_C);
    sdp_image_norm norm = {.C = d->C};
    size_t plane = (size_t)d->H * (size_t)d->W;
    for (int c = 0; c < d->C; c++) {
        uint64_t count[256] = {0};
        for (size_t i = 0; i < d->n; i++) {
            const uint8_t *p = d->pixels + (i * (size_t)d->C + (size_t)c) * plane;
            for (size_t k = 0; k < plane; k++) count[p[k]]++;
        }
        double total = (double)d->n * (double)plane, mean = 0, var = 0;
        for (int v = 0; v < 256; v++) mean += (double)count[v] * (v / 255.0);
        mean /= total;
        for (int v = 0; v < 256; v++)
            var += (double)count[v] * (v / 255.0 - mean) * (v / 255.0 - mean);
        norm.mean[c] = (float)mean;
        norm.std[c] = (float)sqrt(var / total);
    }
    return norm;
}

/* The stream is (epoch, index) packed into 64 bits, distinct for every pair with
 * index < 2^32 (which the loaders ensure). All three draws are made whatever the options, so
 * turning flipping on or off leaves the crops unchanged. */
sdp_augment_draw sdp_augment_draw_for(const sdp_augment *aug, uint64_t seed, uint64_t epoch,
                                      uint64_t index) {
    SDP_ASSERT(aug->pad >= 0 && index <= UINT32_MAX);
    sdp_rng rng = sdp_rng_make(seed ^ AUGMENT_SALT, epoch << 32 | index);
    uint64_t window = 2 * (uint64_t)aug->pad + 1;
    sdp_augment_draw d;
    d.dy = (int)sdp_rng_below(&rng, window);
    d.dx = (int)sdp_rng_below(&rng, window);
    d.flip = aug->flip && (sdp_rng_u64(&rng) >> 63);
    return d;
}

/* Output pixel (y, x) is pixel (y + dy, x' + dx) of the zero-padded image, where x' = W-1-x
 * when flipped and x otherwise; in source coordinates that is (y + dy - pad, x' + dx - pad). */
void sdp_augment_apply(const uint8_t *src, int C, int H, int W, const sdp_image_norm *norm, int pad,
                       sdp_augment_draw draw, float *dst) {
    SDP_ASSERT(draw.dy >= 0 && draw.dy <= 2 * pad && draw.dx >= 0 && draw.dx <= 2 * pad);
    SDP_ASSERT(norm->C == C);
    int oy = draw.dy - pad, ox = draw.dx - pad;
    /* Source columns x' + ox that fall inside the image. */
    int lo = ox < 0 ? -ox : 0, hi = ox > 0 ? W - ox : W;
    for (int c = 0; c < C; c++) {
        /* (p/255 - mean)/std as one multiply-add, with the constants formed in double. */
        float scale = (float)(1.0 / (255.0 * norm->std[c]));
        float shift = (float)(-(double)norm->mean[c] / norm->std[c]);
        for (int y = 0; y < H; y++) {
            float *row = dst + ((size_t)c * H + y) * W;
            memset(row, 0, (size_t)W * sizeof *row);
            int sy = y + oy;
            if (sy < 0 || sy >= H) continue;
            const uint8_t *s = src + ((size_t)c * H + sy) * W;
            for (int xp = lo; xp < hi; xp++)
                row[draw.flip ? W - 1 - xp : xp] = (float)s[xp + ox] * scale + shift;
        }
    }
}
