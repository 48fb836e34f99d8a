/* Normalization, augmentation and the image batch loader, checked against references written
 * here from the definitions: statistics in double over p/255, the crop built by padding a
 * double image with zeros and cutting a window out of it, the flip by reading columns
 * backwards, the epoch order by Fisher-Yates seeded with (seed, epoch), and batch s of rank r
 * taking positions [(s*world + r)*B, ... + B). Test images carry their index in their first
 * three pixels, so an un-augmented row names the image it came from. */
#include "testutil.h"

#include "sdp/image_loader.h"

/* ---- test data and references -------------------------------------------------------------- */

/* Random images whose channel c draws from [40c, 40c + 160), so channels differ in mean; the
 * first three pixels of channel 0 spell the image's index. Buffers are the test's own. */
static sdp_images make_images(size_t n, int C, int H, int W, int nclasses, uint64_t seed) {
    assert_true(n < (1u << 24) && H * W >= 3 && C <= 3);
    size_t size = (size_t)C * H * W;
    sdp_images d = {n, C, H, W, nclasses, malloc(n * size), malloc(n)};
    sdp_rng r = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = d.pixels + i * size;
        for (int c = 0; c < C; c++)
            for (int k = 0; k < H * W; k++)
                p[c * H * W + k] = (uint8_t)(40 * c + (int)sdp_rng_below(&r, 160));
        p[0] = (uint8_t)i;
        p[1] = (uint8_t)(i >> 8);
        p[2] = (uint8_t)(i >> 16);
        d.labels[i] = (uint8_t)sdp_rng_below(&r, (uint64_t)nclasses);
    }
    return d;
}

static void free_images(sdp_images *d) {
    free(d->pixels);
    free(d->labels);
}

static size_t image_size(const sdp_images *d) {
    return (size_t)d->C * d->H * d->W;
}

static sdp_image_norm make_norm(int C, const float *mean, const float *std) {
    sdp_image_norm n = {.C = C};
    for (int c = 0; c < C; c++) {
        n.mean[c] = mean[c];
        n.std[c] = std[c];
    }
    return n;
}

static const float MEAN3[3] = {0.31f, 0.47f, 0.62f}, STD3[3] = {0.21f, 0.18f, 0.26f};
static const float ZERO3[3] = {0, 0, 0}, ONE3[3] = {1, 1, 1};

static double ref_normalize(uint8_t p, int c, const sdp_image_norm *norm) {
    return (p / 255.0 - (double)norm->mean[c]) / (double)norm->std[c];
}

/* The augmentation spelled out: normalize, pad with zeros into a larger image, cut the H x W
 * window at (dy, dx), then mirror it left-right if asked. */
static void ref_augment(const sdp_images *d, size_t idx, const sdp_image_norm *norm, int pad,
                        sdp_augment_draw draw, double *out) {
    int C = d->C, H = d->H, W = d->W, PH = H + 2 * pad, PW = W + 2 * pad;
    const uint8_t *src = d->pixels + idx * image_size(d);
    double *padded = calloc((size_t)C * PH * PW, sizeof *padded);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                padded[((size_t)c * PH + y + pad) * PW + x + pad] =
                    ref_normalize(src[(c * H + y) * W + x], c, norm);
    double *crop = malloc((size_t)C * H * W * sizeof *crop);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                crop[(c * H + y) * W + x] =
                    padded[((size_t)c * PH + y + draw.dy) * PW + x + draw.dx];
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                out[(c * H + y) * W + x] = crop[(c * H + y) * W + (draw.flip ? W - 1 - x : x)];
    free(padded);
    free(crop);
}

/* Float output against the double reference: a multiply-add in float of values up to ~5. */
static const double ATOL = 2e-6, RTOL = 1e-6;

/* The image a row came from, read back from its first three pixels through the normalization
 * (valid only for rows that were not cropped or flipped). */
static size_t decode_index(const float *row, const sdp_image_norm *norm) {
    size_t idx = 0;
    for (int k = 0; k < 3; k++) {
        double p = ((double)row[k] * norm->std[0] + norm->mean[0]) * 255.0;
        long v = lround(p);
        assert_true(fabs(p - (double)v) < 1e-3 && v >= 0 && v < 256);
        idx |= (size_t)v << (8 * k);
    }
    return idx;
}

/* The order the loader promises, written out independently. */
static void reference_order(size_t *order, size_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    sdp_rng r = sdp_rng_make(seed, epoch);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)sdp_rng_below(&r, i + 1);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* ---- normalization and augmentation -------------------------------------------------------- */

static void test_norm_stats(void **state) {
    (void)state;
    const int shapes[][4] = {{50, 3, 9, 7}, {31, 1, 28, 28}, {5, 2, 3, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        sdp_images d =
            make_images((size_t)shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 10, 20 + s);
        sdp_image_norm norm = sdp_images_norm_stats(&d);
        assert_int_equal(norm.C, d.C);
        size_t plane = (size_t)d.H * d.W;
        for (int c = 0; c < d.C; c++) {
            /* Two passes in double straight over the pixels. */
            double sum = 0, sq = 0, count = (double)(d.n * plane);
            for (size_t i = 0; i < d.n; i++)
                for (size_t k = 0; k < plane; k++)
                    sum += d.pixels[(i * d.C + c) * plane + k] / 255.0;
            double mean = sum / count;
            for (size_t i = 0; i < d.n; i++)
                for (size_t k = 0; k < plane; k++) {
                    double v = d.pixels[(i * d.C + c) * plane + k] / 255.0 - mean;
                    sq += v * v;
                }
            double std = sqrt(sq / count);
            assert_true(tu_err_ratio(&norm.mean[c], &mean, 1, 0, 1e-6) <= 1);
            assert_true(tu_err_ratio(&norm.std[c], &std, 1, 0, 1e-6) <= 1);
        }
        free_images(&d);
    }
}

/* Every crop window of every padding and both flips, on square, MNIST-like, odd and tiny
 * images (the last with padding larger than the image, where some windows see only zeros). */
static void test_crop_flip_reference(void **state) {
    (void)state;
    const int shapes[][4] = {{3, 32, 32, 4}, {1, 28, 28, 2}, {2, 5, 7, 3}, {1, 4, 3, 6}};
    double worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int C = shapes[s][0], pad = shapes[s][3];
        sdp_images d = make_images(2, C, shapes[s][1], shapes[s][2], 10, 30 + s);
        sdp_image_norm norm = make_norm(C, MEAN3, STD3);
        size_t size = image_size(&d);
        float *out = malloc(size * sizeof *out);
        double *ref = malloc(size * sizeof *ref);
        for (int dy = 0; dy <= 2 * pad; dy++)
            for (int dx = 0; dx <= 2 * pad; dx++)
                for (int flip = 0; flip < 2; flip++) {
                    sdp_augment_draw draw = {dy, dx, flip};
                    sdp_augment_apply(d.pixels + size, C, d.H, d.W, &norm, pad, draw, out);
                    ref_augment(&d, 1, &norm, pad, draw, ref);
                    double e = tu_err_ratio(out, ref, size, ATOL, RTOL);
                    if (e > worst) worst = e;
                    assert_true(e <= 1);
                }
        free(out);
        free(ref);
        free_images(&d);
    }
    print_message("crop/flip worst error ratio %.3f\n", worst);
}

/* Draws cover their ranges about evenly, depend only on (seed, epoch, index), and the options
 * only switch things off. */
static void test_draws(void **state) {
    (void)state;
    enum { N = 9000 };
    sdp_augment both = {4, true}, crop = {4, false}, none = {0, false};
    size_t dy_count[9] = {0}, dx_count[9] = {0}, flips = 0, moved_by_epoch = 0;
    size_t flip_kept = 0, dy_kept = 0; /* from epoch 3 to epoch 4 */
    for (uint64_t i = 0; i < N; i++) {
        sdp_augment_draw a = sdp_augment_draw_for(&both, 7, 3, i);
        sdp_augment_draw again = sdp_augment_draw_for(&both, 7, 3, i);
        assert_memory_equal(&a, &again, sizeof a);
        assert_true(a.dy >= 0 && a.dy <= 8 && a.dx >= 0 && a.dx <= 8);
        dy_count[a.dy]++;
        dx_count[a.dx]++;
        flips += a.flip;
        sdp_augment_draw c = sdp_augment_draw_for(&crop, 7, 3, i);
        assert_int_equal(c.dy, a.dy);
        assert_int_equal(c.dx, a.dx);
        assert_false(c.flip);
        sdp_augment_draw z = sdp_augment_draw_for(&none, 7, 3, i);
        assert_true(z.dy == 0 && z.dx == 0 && !z.flip);
        sdp_augment_draw e = sdp_augment_draw_for(&both, 7, 4, i);
        moved_by_epoch += e.dy != a.dy || e.dx != a.dx || e.flip != a.flip;
        flip_kept += e.flip == a.flip;
        dy_kept += e.dy == a.dy;
    }
    /* 1000 expected per value; a binomial with sd ~31 stays well inside +-150. */
    for (int v = 0; v < 9; v++) {
        assert_true(dy_count[v] > 850 && dy_count[v] < 1150);
        assert_true(dx_count[v] > 850 && dx_count[v] < 1150);
    }
    assert_true(flips > N / 2 - 250 && flips < N / 2 + 250);
    /* Another epoch repeats all three draws with probability 1/162, each flip with 1/2 and
     * each dy with 1/9: an image's draws are fresh every epoch. */
    assert_true(moved_by_epoch > N * 95 / 100);
    assert_true(flip_kept > N / 2 - 250 && flip_kept < N / 2 + 250);
    assert_true(dy_kept > 850 && dy_kept < 1150);
}

/* ---- the training stream ------------------------------------------------------------------- */

/* Every batch of every rank over three epochs equals the reference: the reference order, each
 * image augmented with the draws of (seed, epoch, its index). Running the same check with one
 * and with three ranks shows that an image's augmentation does not depend on the world size. */
static void check_against_reference(const sdp_images *d, int world, int B, uint64_t seed,
                                    bool shuffle, sdp_augment aug) {
    sdp_image_norm norm = make_norm(d->C, MEAN3, STD3);
    size_t size = image_size(d);
    size_t *order = malloc(d->n * sizeof *order);
    float *x = malloc((size_t)B * size * sizeof *x);
    double *ref = malloc(size * sizeof *ref);
    int *labels = malloc((size_t)B * sizeof *labels);
    for (int r = 0; r < world; r++) {
        sdp_mem mem = {0};
        sdp_image_loader L;
        sdp_image_loader_init(&L, d, B, r, world, seed, shuffle, aug, &norm, &mem);
        assert_int_equal(mem.cur[SDP_MEM_DATA], d->n * sizeof(uint32_t));
        uint64_t steps = sdp_image_loader_steps_per_epoch(&L);
        assert_int_equal(steps, d->n / (size_t)(world * B));
        for (uint64_t e = 0; e < 3; e++) {
            reference_order(order, d->n, seed, e, shuffle);
            for (uint64_t s = 0; s < steps; s++) {
                assert_int_equal(L.pos.epoch, e);
                assert_int_equal(L.pos.step, s);
                sdp_image_loader_next(&L, x, labels);
                for (int b = 0; b < B; b++) {
                    size_t idx = order[(s * (uint64_t)world + (uint64_t)r) * (uint64_t)B + b];
                    sdp_augment_draw draw = sdp_augment_draw_for(&aug, seed, e, idx);
                    ref_augment(d, idx, &norm, aug.pad, draw, ref);
                    assert_true(tu_err_ratio(x + (size_t)b * size, ref, size, ATOL, RTOL) <= 1);
                    assert_int_equal(labels[b], d->labels[idx]);
                }
            }
        }
        assert_int_equal(L.pos.epoch, 3);
        assert_int_equal(L.pos.step, 0);
        sdp_image_loader_free(&L, &mem);
        assert_int_equal(mem.total_cur, 0);
    }
    free(order);
    free(x);
    free(ref);
    free(labels);
}

static void test_loader_matches_reference(void **state) {
    (void)state;
    sdp_images d = make_images(103, 3, 6, 5, 10, 40);
    check_against_reference(&d, 1, 4, 11, true, (sdp_augment){2, true});
    check_against_reference(&d, 3, 5, 11, true, (sdp_augment){2, true});
    check_against_reference(&d, 2, 7, 12, false, (sdp_augment){1, false});
    check_against_reference(&d, 4, 1, 13, true, (sdp_augment){0, true});
    free_images(&d);
}

/* With no augmentation a batch is the normalized images in loader order, nothing else. */
static void test_identity_without_augmentation(void **state) {
    (void)state;
    sdp_images d = make_images(40, 3, 4, 4, 10, 41);
    sdp_image_norm norm = make_norm(3, MEAN3, STD3);
    const int B = 3, world = 2;
    size_t size = image_size(&d);
    float *x = malloc((size_t)B * size * sizeof *x);
    double *ref = malloc(size * sizeof *ref);
    int labels[3];
    for (int r = 0; r < world; r++) {
        sdp_mem mem = {0};
        sdp_image_loader L;
        sdp_image_loader_init(&L, &d, B, r, world, 5, false, (sdp_augment){0, false}, &norm, &mem);
        for (uint64_t s = 0; s < sdp_image_loader_steps_per_epoch(&L); s++) {
            sdp_image_loader_next(&L, x, labels);
            for (int b = 0; b < B; b++) {
                size_t idx = (s * (size_t)world + (size_t)r) * (size_t)B + (size_t)b;
                const uint8_t *p = d.pixels + idx * size;
                for (size_t k = 0; k < size; k++)
                    ref[k] = ref_normalize(p[k], (int)(k / (size_t)(d.H * d.W)), &norm);
                assert_true(tu_err_ratio(x + (size_t)b * size, ref, size, ATOL, RTOL) <= 1);
                assert_int_equal(decode_index(x + (size_t)b * size, &norm), idx);
            }
        }
        sdp_image_loader_free(&L, &mem);
    }
    free(x);
    free(ref);
    free_images(&d);
}

/* Reads one epoch of every rank, decoding the image of each row; rows are returned rank by
 * rank, step by step. */
static size_t *epoch_ids(const sdp_images *d, int world, int B, uint64_t seed, uint64_t epoch,
                         size_t *count) {
    sdp_image_norm norm = make_norm(d->C, ZERO3, ONE3);
    size_t size = image_size(d);
    float *x = malloc((size_t)B * size * sizeof *x);
    int *labels = malloc((size_t)B * sizeof *labels);
    size_t steps = d->n / (size_t)(world * B), n = 0;
    *count = steps * (size_t)(world * B);
    size_t *ids = malloc(*count * sizeof *ids);
    for (int r = 0; r < world; r++) {
        sdp_mem mem = {0};
        sdp_image_loader L;
        sdp_image_loader_init(&L, d, B, r, world, seed, true, (sdp_augment){0, false}, &norm, &mem);
        sdp_image_loader_seek(&L, (sdp_loader_pos){epoch, 0});
        for (size_t s = 0; s < steps; s++) {
            sdp_image_loader_next(&L, x, labels);
            for (int b = 0; b < B; b++, n++) {
                ids[n] = decode_index(x + (size_t)b * size, &norm);
                assert_true(ids[n] < d->n);
                assert_int_equal(labels[b], d->labels[ids[n]]);
            }
        }
        sdp_image_loader_free(&L, &mem);
    }
    free(x);
    free(labels);
    return ids;
}

/* Within an epoch the ranks together read steps*world*B distinct images; with world*B
 * dividing n that is every image exactly once. */
static void test_ranks_disjoint(void **state) {
    (void)state;
    sdp_images d = make_images(120, 1, 3, 3, 10, 42);
    const int shapes[][2] = {{3, 4}, {2, 7}, {1, 1}, {4, 30}, {5, 6}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int world = shapes[i][0], B = shapes[i][1];
        for (uint64_t epoch = 0; epoch < 2; epoch++) {
            size_t n;
            size_t *ids = epoch_ids(&d, world, B, 5, epoch, &n);
            assert_int_equal(n, d.n / (size_t)(world * B) * (size_t)(world * B));
            char *seen = calloc(d.n, 1);
            for (size_t j = 0; j < n; j++) {
                assert_int_equal(seen[ids[j]], 0);
                seen[ids[j]] = 1;
            }
            free(seen);
            free(ids);
        }
    }
    free_images(&d);
}

/* Same seed, same stream (images and augmentation); another seed, another stream. */
static void read_batches(const sdp_images *d, uint64_t seed, size_t nbatches, float *x,
                         int *labels) {
    sdp_image_norm norm = make_norm(d->C, MEAN3, STD3);
    const int B = 4;
    size_t size = image_size(d);
    sdp_mem mem = {0};
    sdp_image_loader L;
    sdp_image_loader_init(&L, d, B, 1, 2, seed, true, (sdp_augment){3, true}, &norm, &mem);
    for (size_t i = 0; i < nbatches; i++)
        sdp_image_loader_next(&L, x + i * B * size, labels + i * B);
    sdp_image_loader_free(&L, &mem);
}

static void test_determinism(void **state) {
    (void)state;
    sdp_images d = make_images(37, 3, 8, 8, 10, 43);
    const size_t nb = 10, rows = nb * 4, floats = rows * image_size(&d); /* 2+ epochs */
    float *a = malloc(floats * sizeof *a), *b = malloc(floats * sizeof *b);
    float *c = malloc(floats * sizeof *c);
    int *la = malloc(rows * sizeof *la), *lb = malloc(rows * sizeof *lb);
    int *lc = malloc(rows * sizeof *lc);
    read_batches(&d, 99, nb, a, la);
    read_batches(&d, 99, nb, b, lb);
    read_batches(&d, 100, nb, c, lc);
    assert_memory_equal(a, b, floats * sizeof *a);
    assert_memory_equal(la, lb, rows * sizeof *la);
    /* A row repeats only if the same image gets the same draws (odds about 1/3600). */
    size_t size = image_size(&d), same = 0;
    for (size_t i = 0; i < rows; i++)
        same += memcmp(a + i * size, c + i * size, size * sizeof *a) == 0;
    assert_true(same <= 1);
    free(a);
    free(b);
    free(c);
    free(la);
    free(lb);
    free(lc);
    free_images(&d);
}

/* Resuming from any saved position, including the last batch of an epoch, gives exactly the
 * batches the uninterrupted loader gave next, augmentation included. */
static void test_seek_resumes_exactly(void **state) {
    (void)state;
    sdp_images d = make_images(61, 3, 6, 6, 10, 44);
    sdp_image_norm norm = make_norm(3, MEAN3, STD3);
    const sdp_augment aug = {2, true};
    const int B = 4, world = 3, rank = 2;
    const size_t batch = (size_t)B * image_size(&d);
    sdp_mem mem = {0};
    sdp_image_loader L;
    sdp_image_loader_init(&L, &d, B, rank, world, 77, true, aug, &norm, &mem);
    uint64_t steps = sdp_image_loader_steps_per_epoch(&L);
    size_t total = (size_t)(3 * steps);
    float *x = malloc(total * batch * sizeof *x);
    int *labels = malloc(total * (size_t)B * sizeof *labels);
    sdp_loader_pos *pos = malloc(total * sizeof *pos);
    for (size_t i = 0; i < total; i++) {
        pos[i] = L.pos;
        sdp_image_loader_next(&L, x + i * batch, labels + i * (size_t)B);
    }
    sdp_image_loader_free(&L, &mem);

    const size_t starts[] = {
        0, 1, (size_t)steps - 1, (size_t)steps, (size_t)steps + 2, (size_t)(2 * steps) - 1};
    float *x2 = malloc(batch * sizeof *x2);
    int labels2[4];
    for (size_t si = 0; si < sizeof starts / sizeof *starts; si++) {
        sdp_image_loader_init(&L, &d, B, rank, world, 77, true, aug, &norm, &mem);
        sdp_image_loader_seek(&L, (sdp_loader_pos){5, 1}); /* from anywhere */
        sdp_image_loader_seek(&L, pos[starts[si]]);
        for (size_t i = starts[si]; i < total && i < starts[si] + (size_t)steps + 2; i++) {
            assert_int_equal(L.pos.epoch, pos[i].epoch);
            assert_int_equal(L.pos.step, pos[i].step);
            sdp_image_loader_next(&L, x2, labels2);
            assert_memory_equal(x2, x + i * batch, batch * sizeof *x2);
            assert_memory_equal(labels2, labels + i * (size_t)B, (size_t)B * sizeof *labels2);
        }
        sdp_image_loader_free(&L, &mem);
    }
    /* The end of an epoch is the start of the next. */
    sdp_image_loader_init(&L, &d, B, rank, world, 77, true, aug, &norm, &mem);
    sdp_image_loader_seek(&L, (sdp_loader_pos){0, steps});
    assert_int_equal(L.pos.epoch, 1);
    assert_int_equal(L.pos.step, 0);
    sdp_image_loader_next(&L, x2, labels2);
    assert_memory_equal(x2, x + steps * batch, batch * sizeof *x2);
    sdp_image_loader_free(&L, &mem);
    assert_int_equal(mem.total_cur, 0);
    free(x);
    free(x2);
    free(labels);
    free(pos);
    free_images(&d);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/* Over all ranks every sample comes back exactly once, normalized and unaugmented, in order;
 * every rank takes the same number of steps, the last batches may be partial or empty, and
 * rows past the valid count are zero with label -1. */
static void check_eval(const sdp_images *d, int world, int B) {
    sdp_image_norm norm = make_norm(d->C, MEAN3, STD3);
    size_t size = image_size(d);
    float *x = malloc((size_t)B * size * sizeof *x);
    int *labels = malloc((size_t)B * sizeof *labels);
    double *ref = malloc(size * sizeof *ref);
    size_t next_expected = 0, shares_min = SIZE_MAX, shares_max = 0;
    uint64_t steps = 0;
    for (int r = 0; r < world; r++) {
        sdp_image_eval E;
        sdp_image_eval_init(&E, d, B, r, world, &norm);
        assert_int_equal(sdp_image_eval_total(&E), d->n);
        if (r == 0) steps = sdp_image_eval_steps(&E);
        assert_int_equal(sdp_image_eval_steps(&E), steps);
        size_t share = 0;
        for (uint64_t s = 0; s < steps + 1; s++) {
            int valid = sdp_image_eval_next(&E, x, labels);
            assert_true(valid >= 0 && valid <= B);
            if (s == steps) assert_int_equal(valid, 0); /* the share is exhausted */
            for (int b = 0; b < B; b++) {
                float *row = x + (size_t)b * size;
                if (b >= valid) {
                    assert_int_equal(labels[b], -1);
                    for (size_t k = 0; k < size; k++) assert_true(row[k] == 0.0f);
                    continue;
                }
                /* Samples come in order, rank after rank. */
                size_t idx = decode_index(row, &norm);
                assert_int_equal(idx, next_expected);
                next_expected++;
                share++;
                const uint8_t *p = d->pixels + idx * size;
                for (size_t k = 0; k < size; k++)
                    ref[k] = ref_normalize(p[k], (int)(k / (size_t)(d->H * d->W)), &norm);
                assert_true(tu_err_ratio(row, ref, size, ATOL, RTOL) <= 1);
                assert_int_equal(labels[b], d->labels[idx]);
            }
        }
        if (share < shares_min) shares_min = share;
        if (share > shares_max) shares_max = share;
    }
    assert_int_equal(next_expected, d->n);
    assert_true(shares_max - shares_min <= 1);
    /* Enough steps for the largest share, and no more than needed. */
    assert_true(steps * (uint64_t)B >= shares_max && (steps - 1) * (uint64_t)B < shares_max);
    free(x);
    free(labels);
    free(ref);
}

static void test_eval_covers_every_sample_once(void **state) {
    (void)state;
    sdp_images d = make_images(103, 3, 4, 5, 10, 45);
    const int shapes[][2] = {{1, 10}, {3, 10}, {4, 7}, {2, 103}, {1, 200}, {5, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        check_eval(&d, shapes[i][0], shapes[i][1]);
    free_images(&d);
    /* More ranks than samples: some ranks have nothing to read but still take the steps. */
    sdp_images tiny = make_images(5, 1, 2, 2, 10, 46);
    check_eval(&tiny, 8, 2);
    free_images(&tiny);
}

/* ---- errors -------------------------------------------------------------------------------- */

typedef struct {
    const sdp_images *d;
    int B, rank, world;
    sdp_augment aug;
    sdp_image_norm norm;
    bool eval;
} init_args;

static void init_loader(void *ctx) {
    init_args *a = ctx;
    sdp_mem mem = {0};
    if (a->eval) {
        sdp_image_eval E;
        sdp_image_eval_init(&E, a->d, a->B, a->rank, a->world, &a->norm);
    } else {
        sdp_image_loader L;
        sdp_image_loader_init(&L, a->d, a->B, a->rank, a->world, 1, true, a->aug, &a->norm, &mem);
    }
}

static void test_errors(void **state) {
    (void)state;
    sdp_images d = make_images(10, 3, 4, 4, 10, 47);
    sdp_image_norm good = make_norm(3, MEAN3, STD3);
    init_args a = {&d, 4, 0, 3, {4, true}, good, false};
    tu_expect_fatal(init_loader, &a, "dataset has 10 images; need at least world*B = 3*4 = 12");
    a.B = 0;
    tu_expect_fatal(init_loader, &a, "batch size 0 must be at least 1");
    a = (init_args){&d, 2, 3, 3, {4, true}, good, false};
    tu_expect_fatal(init_loader, &a, "rank 3 is outside a world of 3 ranks");
    a.eval = true;
    tu_expect_fatal(init_loader, &a, "rank 3 is outside a world of 3 ranks");
    a = (init_args){&d, 2, 0, 1, {-1, true}, good, false};
    tu_expect_fatal(init_loader, &a, "crop padding -1 is negative");
    a.aug.pad = 4;
    a.norm = make_norm(1, MEAN3, STD3);
    tu_expect_fatal(init_loader, &a,
                    "normalization statistics are for 1 channels but the images have 3");
    a.norm = good;
    a.norm.std[2] = 0;
    tu_expect_fatal(init_loader, &a, "normalization of channel 2 has mean 0.62 and std 0");
    a.eval = true;
    tu_expect_fatal(init_loader, &a, "the std must be positive");
    free_images(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_stats),
        cmocka_unit_test(test_crop_flip_reference),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_loader_matches_reference),
        cmocka_unit_test(test_identity_without_augmentation),
        cmocka_unit_test(test_ranks_disjoint),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_seek_resumes_exactly),
        cmocka_unit_test(test_eval_covers_every_sample_once),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
