#include "sdp/image_loader.h"

#include "sdp/check.h"
#include "sdp/rng.h"

#include <math.h>
#include <string.h>

static void check_rank(int rank, int world) {
    SDP_CHECK_ALL(world >= 1 && rank >= 0 && rank < world,
                  "rank %d is outside a world of %d ranks: launch with a consistent world size",
                  rank, world);
}

static void check_norm(const sdp_images *src, const sdp_image_norm *norm) {
    SDP_CHECK_ALL(norm->C == src->C,
                  "normalization statistics are for %d channels but the images have %d: compute "
                  "them on the training split of the same dataset",
                  norm->C, src->C);
    for (int c = 0; c < norm->C; c++)
        SDP_CHECK_ALL(
            isfinite(norm->mean[c]) && isfinite(norm->std[c]) && norm->std[c] > 0,
            "normalization of channel %d has mean %g and std %g: the std must be positive "
            "and both finite (a constant channel has std 0; give a std yourself)",
            c, norm->mean[c], norm->std[c]);
}

/* The permutation depends only on (seed, epoch), so any rank can rebuild any epoch's order
 * on its own: that is what makes the streams disjoint without communication and resumable. */
static void build_permutation(sdp_image_loader *L) {
    sdp_epoch_order(L->perm, L->src->n, L->seed, L->pos.epoch, L->shuffle);
}

void sdp_image_loader_init(sdp_image_loader *L, const sdp_images *src, int B, int rank, int world,
                           uint64_t seed, bool shuffle, sdp_augment aug, const sdp_image_norm *norm,
                           sdp_mem *mem) {
    SDP_CHECK_ALL(B >= 1, "batch size %d must be at least 1: fix the batch size", B);
    check_rank(rank, world);
    check_norm(src, norm);
    SDP_CHECK_ALL(aug.pad >= 0, "crop padding %d is negative: use 0 to turn cropping off", aug.pad);
    size_t need = (size_t)world * (size_t)B;
    SDP_CHECK_ALL(
        src->n >= need,
        "dataset has %zu images; need at least world*B = %d*%d = %zu: use a smaller batch "
        "or fewer ranks",
        src->n, world, B, need);
    /* Indices are stored as uint32 and name the augmentation stream of each sample. */
    SDP_CHECK_ALL(src->n <= UINT32_MAX,
                  "dataset has %zu images, more than 2^32: split it into smaller datasets", src->n);
    memset(L, 0, sizeof *L);
    L->src = src;
    L->B = B;
    L->rank = rank;
    L->world = world;
    L->seed = seed;
    L->shuffle = shuffle;
    L->aug = aug;
    L->norm = *norm;
    L->perm = sdp_alloc(mem, SDP_MEM_DATA, src->n * sizeof *L->perm);
    build_permutation(L);
}

void sdp_image_loader_free(sdp_image_loader *L, sdp_mem *mem) {
    sdp_free(mem, L->perm);
    memset(L, 0, sizeof *L);
}

uint64_t sdp_image_loader_steps_per_epoch(const sdp_image_loader *L) {
    return L->src->n / ((uint64_t)L->world * (uint64_t)L->B);
}

static size_t image_size(const sdp_images *d) {
    return (size_t)d->C * (size_t)d->H * (size_t)d->W;
}

void sdp_image_loader_next(sdp_image_loader *L, float *x, int *labels) {
    const sdp_images *d = L->src;
    size_t size = image_size(d);
    size_t first = ((size_t)L->pos.step * (size_t)L->world + (size_t)L->rank) * (size_t)L->B;
    for (int b = 0; b < L->B; b++) {
        uint32_t idx = L->perm[first + (size_t)b];
        sdp_augment_draw draw = sdp_augment_draw_for(&L->aug, L->seed, L->pos.epoch, idx);
        sdp_augment_apply(d->pixels + idx * size, d->C, d->H, d->W, &L->norm, L->aug.pad, draw,
                          x + (size_t)b * size);
        labels[b] = d->labels[idx];
    }
    if (sdp_loader_pos_advance(&L->pos, sdp_image_loader_steps_per_epoch(L))) build_permutation(L);
}

void sdp_image_loader_seek(sdp_image_loader *L, sdp_loader_pos pos) {
    pos = sdp_loader_pos_normalize(pos, sdp_image_loader_steps_per_epoch(L));
    bool same_epoch = pos.epoch == L->pos.epoch;
    L->pos = pos;
    if (!same_epoch) build_permutation(L);
}

void sdp_image_eval_init(sdp_image_eval *E, const sdp_images *src, int B, int rank, int world,
                         const sdp_image_norm *norm) {
    SDP_CHECK_ALL(B >= 1, "batch size %d must be at least 1: fix the batch size", B);
    check_rank(rank, world);
    check_norm(src, norm);
    memset(E, 0, sizeof *E);
    E->src = src;
    E->B = B;
    E->rank = rank;
    E->world = world;
    E->norm = *norm;
    /* floor(n*r/world) as the boundaries gives shares in order whose sizes differ by one at
     * most; n*world stays far inside 64 bits for any dataset that fits in memory. */
    size_t n = src->n, w = (size_t)world, r = (size_t)rank;
    E->first = n * r / w;
    E->count = n * (r + 1) / w - E->first;
}

size_t sdp_image_eval_total(const sdp_image_eval *E) {
    return E->src->n;
}

uint64_t sdp_image_eval_steps(const sdp_image_eval *E) {
    uint64_t largest = (E->src->n + (uint64_t)E->world - 1) / (uint64_t)E->world;
    return (largest + (uint64_t)E->B - 1) / (uint64_t)E->B;
}

int sdp_image_eval_next(sdp_image_eval *E, float *x, int *labels) {
    const sdp_images *d = E->src;
    size_t size = image_size(d), left = E->count - E->done;
    int valid = left < (size_t)E->B ? (int)left : E->B;
    const sdp_augment_draw none = {0, 0, false};
    for (int b = 0; b < valid; b++) {
        size_t idx = E->first + E->done + (size_t)b;
        sdp_augment_apply(d->pixels + idx * size, d->C, d->H, d->W, &E->norm, 0, none,
                          x + (size_t)b * size);
        labels[b] = d->labels[idx];
    }
    memset(x + (size_t)valid * size, 0, (size_t)(E->B - valid) * size * sizeof *x);
    for (int b = valid; b < E->B; b++) labels[b] = -1;
    E->done += (size_t)valid;
    return valid;
}
