/* Image classification data: IDX (MNIST, Fashion-MNIST) and CIFAR-10/100 binaries held in
 * memory as uint8, per-channel normalization with random crop and flip, and a deterministic,
 * seeded batch loader with a disjoint stream per rank (the image twin of sdp/data.h). */
#ifndef SDP_IMAGES_H
#define SDP_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/data.h"
#include "sdp/mem.h"

/* Where the Debian package dataset-fashion-mnist installs Fashion-MNIST. */
#define SDP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define SDP_IMAGES_MAX_C      4

/* n images of C x H x W uint8 pixels (channel planes, rows top to bottom) and their labels. */
typedef struct {
    size_t n;
    int C, H, W;
    int nclasses;
    uint8_t *pixels; /* [n, C, H, W] (SDP_MEM_DATA) */
    uint8_t *labels; /* [n], each < nclasses (SDP_MEM_DATA) */
} sdp_images;

/* Loads split "train" or "test" of an IDX dataset (MNIST layout: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz, t10k-...). Each file may be gzipped (name.gz) or plain (name).
 * dir NULL means SDP_FASHION_MNIST_DIR. 10 classes, C = 1. */
void sdp_images_load_idx(sdp_images *out, const char *dir, const char *split, sdp_mem *mem);
/* CIFAR-10 binary version (cifar-10-batches-bin): train is data_batch_1..5.bin, test is
 * test_batch.bin; records of 1 label byte + 3072 pixel bytes (R, G, B planes of 32x32). */
void sdp_images_load_cifar10(sdp_images *out, const char *dir, const char *split, sdp_mem *mem);
/* CIFAR-100 binary version (cifar-100-binary): train.bin or test.bin; records of a coarse and a
 * fine label byte + 3072 pixel bytes. The fine label (100 classes) is the label. */
void sdp_images_load_cifar100(sdp_images *out, const char *dir, const char *split, sdp_mem *mem);
void sdp_images_free(sdp_images *d, sdp_mem *mem);

/* ---- normalization and augmentation ------------------------------------------------------ */

/* A pixel p of channel c becomes (p/255 - mean[c]) / std[c]. */
typedef struct {
    int C;
    float mean[SDP_IMAGES_MAX_C];
    float std[SDP_IMAGES_MAX_C];
} sdp_image_norm;

/* Mean and (population) standard deviation of p/255 per channel over the whole dataset:
 * compute them on the training set and use them for both splits. */
sdp_image_norm sdp_images_norm_stats(const sdp_images *d);

typedef struct {
    int pad;   /* random crop: pad by this many zeros on each side, crop back to H x W; 0 = off */
    bool flip; /* random horizontal flip with probability 1/2 */
} sdp_augment;

/* The random choices for one sample: the crop window starts at (dy, dx) of the padded image,
 * each in [0, 2*pad], and the crop is mirrored left-right when flip is set. */
typedef struct {
    int dy, dx;
    bool flip;
} sdp_augment_draw;

/* The draws depend only on (seed, epoch, dataset index of the sample), never on rank count or
 * batch position, so any world size sees the same augmented image and a resume repeats it. */
sdp_augment_draw sdp_augment_draw_for(const sdp_augment *aug, uint64_t seed, uint64_t epoch,
                                      uint64_t index);
/* Writes one normalized, cropped and flipped image [C, H, W] to dst. Padding is zero in the
 * normalized output (the dataset's mean colour), as in the ResNet paper's CIFAR recipe. */
void sdp_augment_apply(const uint8_t *src, int C, int H, int W, const sdp_image_norm *norm, int pad,
                       sdp_augment_draw draw, float *dst);

/* ---- training stream: shuffled, augmented, disjoint per rank ------------------------------- */

/* Each epoch shuffles the image order with a permutation seeded by (seed, epoch) (or keeps it
 * when shuffle is false); batch s of rank r takes images perm[(s*world + r)*B + b], b < B. The
 * last n mod (world*B) images of each epoch's order are left out of that epoch. */
typedef struct {
    const sdp_images *src;
    int B, rank, world;
    uint64_t seed;
    bool shuffle;
    sdp_augment aug;
    sdp_image_norm norm;
    uint32_t *perm; /* this epoch's order (SDP_MEM_DATA) */
    sdp_loader_pos pos;
} sdp_image_loader;

void sdp_image_loader_init(sdp_image_loader *L, const sdp_images *src, int B, int rank, int world,
                           uint64_t seed, bool shuffle, sdp_augment aug, const sdp_image_norm *norm,
                           sdp_mem *mem);
void sdp_image_loader_free(sdp_image_loader *L, sdp_mem *mem);
/* Batches per epoch for each rank (the same on every rank). */
uint64_t sdp_image_loader_steps_per_epoch(const sdp_image_loader *L);
/* Fills x[B, C, H, W] and labels[B], then advances (rolling over into the next epoch). */
void sdp_image_loader_next(sdp_image_loader *L, float *x, int *labels);
void sdp_image_loader_seek(sdp_image_loader *L, sdp_loader_pos pos);

/* ---- evaluation: every sample once, in order, no augmentation ------------------------------- */

/* Rank r reads the contiguous share [first, first + count) of the n samples, where the shares
 * of ranks 0..world-1 partition [0, n) in order and differ in size by at most one. */
typedef struct {
    const sdp_images *src;
    int B, rank, world;
    sdp_image_norm norm;
    size_t first, count; /* this rank's share */
    size_t done;         /* samples of the share already returned */
} sdp_image_eval;

/* Needs no memory of its own: call it again to start another pass. */
void sdp_image_eval_init(sdp_image_eval *E, const sdp_images *src, int B, int rank, int world,
                         const sdp_image_norm *norm);
/* Samples in the whole split: what the per-rank counts of a full pass add up to. */
size_t sdp_image_eval_total(const sdp_image_eval *E);
/* Batches that cover the largest share: the same on every rank, so ranks that meet in a
 * collective after each batch stay in step (smaller shares end with an empty batch). */
uint64_t sdp_image_eval_steps(const sdp_image_eval *E);
/* Fills up to B images of the share and returns how many are valid (0 once the share is done);
 * rows past that count are zero with label -1, which sdp_softmax_xent_fwd ignores. */
int sdp_image_eval_next(sdp_image_eval *E, float *x, int *labels);

#endif
