/* CIFAR-10 and CIFAR-100 binary files: round trips through files this test writes record by
 * record in the official layout (label byte(s), then the R, G and B planes of 32x32 rows), and
 * the one-line errors for missing files, partial records and labels out of range. */
#include "testutil.h"

#include "sdp/image_loader.h"

#include <sys/stat.h>

enum { SIDE = 32, PLANE = SIDE * SIDE, RECORD_PIXELS = 3 * PLANE };

typedef tu_tmpdir fixture;

/* Records as the test means them: rgb[i][c][y][x] and the label bytes of record i. */
typedef struct {
    size_t n;
    uint8_t (*rgb)[3][SIDE][SIDE];
    uint8_t (*label)[2]; /* CIFAR-10 uses [0]; CIFAR-100 is {coarse, fine} */
} records;

/* Each channel draws from its own third of the byte range, so a mixed-up plane order could not
 * go unnoticed even where the exact comparison is not looked at. */
static records random_records(size_t n, int label_bytes, uint64_t seed) {
    records r = {n, malloc(n * sizeof *r.rgb), malloc(n * sizeof *r.label)};
    sdp_rng g = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++)
                    r.rgb[i][c][y][x] = (uint8_t)(85 * c + (int)sdp_rng_below(&g, 85));
        if (label_bytes == 1) {
            r.label[i][0] = (uint8_t)sdp_rng_below(&g, 10);
            r.label[i][1] = 0;
        } else {
            r.label[i][0] = (uint8_t)sdp_rng_below(&g, 20);
            r.label[i][1] = (uint8_t)sdp_rng_below(&g, 100);
        }
    }
    return r;
}

static void free_records(records *r) {
    free(r->rgb);
    free(r->label);
}

/* Writes records [first, first + n) one byte at a time in the order the format lists them. */
static void write_records(const char *dir, const char *name, const records *r, size_t first,
                          size_t n, int label_bytes) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = first; i < first + n; i++) {
        for (int k = 0; k < label_bytes; k++) fputc(r->label[i][k], f);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++) fputc(r->rgb[i][c][y][x], f);
    }
    assert_int_equal(fclose(f), 0);
}

static void write_bytes(const char *dir, const char *name, size_t n) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

static void expect_loaded(const sdp_images *im, const records *r, size_t first, int label_used,
                          int nclasses) {
    assert_int_equal(im->C, 3);
    assert_int_equal(im->H, SIDE);
    assert_int_equal(im->W, SIDE);
    assert_int_equal(im->nclasses, nclasses);
    for (size_t i = 0; i < im->n; i++) {
        assert_int_equal(im->labels[i], r->label[first + i][label_used]);
        const uint8_t *p = im->pixels + i * RECORD_PIXELS;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++)
                    assert_int_equal(p[(c * SIDE + y) * SIDE + x], r->rgb[first + i][c][y][x]);
    }
}

static const char *BATCHES[5] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                 "data_batch_4.bin", "data_batch_5.bin"};

/* Writes a CIFAR-10 directory with train batches of `sizes` records and a test batch of
 * `ntest`; the train records come first in r, in batch order. */
static void write_cifar10(const char *dir, const records *r, const size_t sizes[5], size_t ntest) {
    size_t first = 0;
    for (int k = 0; k < 5; k++) {
        write_records(dir, BATCHES[k], r, first, sizes[k], 1);
        first += sizes[k];
    }
    write_records(dir, "test_batch.bin", r, first, ntest, 1);
}

/* Train batches of different sizes are concatenated in batch order 1..5. */
static void test_cifar10_round_trip(void **state) {
    fixture *fx = *state;
    const size_t sizes[5] = {3, 1, 4, 2, 5};
    records r = random_records(15 + 6, 1, 10);
    write_cifar10(fx->dir, &r, sizes, 6);
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_cifar10(&im, fx->dir, "train", &mem);
    assert_int_equal(im.n, 15);
    expect_loaded(&im, &r, 0, 0, 10);
    assert_int_equal(mem.cur[SDP_MEM_DATA], 15 * (RECORD_PIXELS + 1));
    sdp_images_free(&im, &mem);
    sdp_images_load_cifar10(&im, fx->dir, "test", &mem);
    assert_int_equal(im.n, 6);
    expect_loaded(&im, &r, 15, 0, 10);
    sdp_images_free(&im, &mem);
    assert_int_equal(mem.total_cur, 0);
    assert_int_equal(mem.nallocs, 0);
    free_records(&r);
}

/* The fine label (second byte) is the label, not the coarse one. */
static void test_cifar100_round_trip(void **state) {
    fixture *fx = *state;
    records r = random_records(7 + 3, 2, 11);
    write_records(fx->dir, "train.bin", &r, 0, 7, 2);
    write_records(fx->dir, "test.bin", &r, 7, 3, 2);
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_cifar100(&im, fx->dir, "train", &mem);
    assert_int_equal(im.n, 7);
    expect_loaded(&im, &r, 0, 1, 100);
    sdp_images_free(&im, &mem);
    sdp_images_load_cifar100(&im, fx->dir, "test", &mem);
    assert_int_equal(im.n, 3);
    expect_loaded(&im, &r, 7, 1, 100);
    sdp_images_free(&im, &mem);
    assert_int_equal(mem.total_cur, 0);
    free_records(&r);
}

/* ---- errors -------------------------------------------------------------------------------- */

typedef struct {
    const char *dir, *split;
    bool hundred;
} load_args;

static void load_cifar(void *ctx) {
    load_args *a = ctx;
    sdp_mem mem = {0};
    sdp_images im;
    if (a->hundred)
        sdp_images_load_cifar100(&im, a->dir, a->split, &mem);
    else
        sdp_images_load_cifar10(&im, a->dir, a->split, &mem);
}

static void expect_fails(const char *dir, const char *split, bool hundred, const char *needle) {
    load_args a = {dir, split, hundred};
    tu_expect_fatal(load_cifar, &a, needle);
}

static const char *case_dir(const fixture *fx, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", fx->dir, name);
    assert_int_equal(mkdir(buf, 0755), 0);
    return buf;
}

static void test_missing(void **state) {
    fixture *fx = *state;
    char buf[600], missing[600];
    snprintf(missing, sizeof missing, "%s/cifar-10-batches-bin", fx->dir);
    expect_fails(missing, "train", false, "CIFAR-10 directory");
    expect_fails(missing, "train", false, "cifar-10-batches-bin' does not exist");
    expect_fails(missing, "train", false, "cifar-10-binary.tar.gz");
    expect_fails(missing, "test", true, "cifar-100-binary.tar.gz");

    /* Batch 3 of 5 absent. */
    const char *dir = case_dir(fx, "no_batch3", buf, sizeof buf);
    const size_t sizes[5] = {1, 1, 1, 1, 1};
    records r = random_records(6, 1, 12);
    write_cifar10(dir, &r, sizes, 1);
    char path[700];
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    assert_int_equal(unlink(path), 0);
    expect_fails(dir, "train", false, "data_batch_3.bin' is missing");
    /* The test split does not need the train batches. */
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_cifar10(&im, dir, "test", &mem);
    assert_int_equal(im.n, 1);
    sdp_images_free(&im, &mem);
    expect_fails(dir, "test", true, "CIFAR-100 file");
    expect_fails(dir, "test", true, "test.bin' is missing");
    expect_fails(dir, "val", false, "unknown split 'val' for CIFAR-10");
    free_records(&r);
}

static void test_bad_sizes(void **state) {
    fixture *fx = *state;
    char buf[600];
    const size_t sizes[5] = {2, 2, 2, 2, 2};
    records r = random_records(11, 1, 13);

    const char *dir = case_dir(fx, "partial", buf, sizeof buf);
    write_cifar10(dir, &r, sizes, 1);
    write_bytes(dir, "data_batch_2.bin", 2 * 3073 + 10);
    expect_fails(dir, "train", false,
                 "data_batch_2.bin' holds 6156 bytes, not a whole number of 3073-byte records");

    dir = case_dir(fx, "empty", buf, sizeof buf);
    write_bytes(dir, "test_batch.bin", 0);
    expect_fails(dir, "test", false, "test_batch.bin' holds 0 bytes");

    /* CIFAR-10 records where CIFAR-100 ones are expected. */
    dir = case_dir(fx, "wrong_kind", buf, sizeof buf);
    write_records(dir, "train.bin", &r, 0, 2, 1);
    expect_fails(dir, "train", true,
                 "train.bin' holds 6146 bytes, not a whole number of 3074-byte records");
    free_records(&r);
}

static void test_label_range(void **state) {
    fixture *fx = *state;
    char buf[600];
    records r10 = random_records(4, 1, 14), r = random_records(4, 2, 15);

    const char *dir = case_dir(fx, "c10", buf, sizeof buf);
    r10.label[2][0] = 10;
    write_records(dir, "test_batch.bin", &r10, 0, 4, 1);
    expect_fails(dir, "test", false, "record 2 label byte 0 the value 10, outside 0..9");
    free_records(&r10);

    dir = case_dir(fx, "coarse", buf, sizeof buf);
    r.label[2][0] = 20;
    write_records(dir, "test.bin", &r, 0, 4, 2);
    expect_fails(dir, "test", true, "record 2 label byte 0 the value 20, outside 0..19");

    dir = case_dir(fx, "fine", buf, sizeof buf);
    r.label[2][0] = 19;
    r.label[3][1] = 100;
    write_records(dir, "test.bin", &r, 0, 4, 2);
    expect_fails(dir, "test", true, "record 3 label byte 1 the value 100, outside 0..99");
    free_records(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cifar10_round_trip, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cifar100_round_trip, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_missing, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_sizes, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_label_range, tu_tmpdir_setup, tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
