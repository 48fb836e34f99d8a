/* IDX files (MNIST, Fashion-MNIST): round trips through gzipped and plain files this test writes
 * in the format's exact byte layout, the real Fashion-MNIST when installed, and the one-line
 * errors for missing, foreign, truncated and inconsistent files. */
#include "testutil.h"

#include "sdp/image_loader.h"

#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

typedef tu_tmpdir fixture;

/* ---- writing IDX files byte by byte ------------------------------------------------------- */

typedef struct {
    unsigned char *bytes;
    size_t len;
} blob;

static void put_be32(blob *b, uint32_t v) {
    b->bytes[b->len++] = (unsigned char)(v >> 24);
    b->bytes[b->len++] = (unsigned char)(v >> 16);
    b->bytes[b->len++] = (unsigned char)(v >> 8);
    b->bytes[b->len++] = (unsigned char)v;
}

/* An IDX file: magic, then each dimension, then the bytes `data` (of any length, so broken
 * files can be written too). */
static blob idx_blob(uint32_t magic, const uint32_t *dims, int ndims, const uint8_t *data,
                     size_t len) {
    blob b = {malloc(4 + 4 * (size_t)ndims + len + 1), 0};
    put_be32(&b, magic);
    for (int i = 0; i < ndims; i++) put_be32(&b, dims[i]);
    if (len) memcpy(b.bytes + b.len, data, len);
    b.len += len;
    return b;
}

static void write_blob(const char *dir, const char *name, blob b, bool gz) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (b.len) assert_int_equal(gzwrite(f, b.bytes, (unsigned)b.len), (int)b.len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (b.len) assert_int_equal(fwrite(b.bytes, 1, b.len, f), b.len);
        assert_int_equal(fclose(f), 0);
    }
    free(b.bytes);
}

typedef struct {
    uint32_t n, rows, cols;
    uint8_t *pixels, *labels;
} idx_data;

static idx_data random_data(uint32_t n, uint32_t rows, uint32_t cols, uint64_t seed) {
    idx_data d = {n, rows, cols, malloc((size_t)n * rows * cols), malloc(n)};
    sdp_rng r = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < (size_t)n * rows * cols; i++) d.pixels[i] = (uint8_t)sdp_rng_u32(&r);
    for (size_t i = 0; i < n; i++) d.labels[i] = (uint8_t)sdp_rng_below(&r, 10);
    return d;
}

static void free_data(idx_data *d) {
    free(d->pixels);
    free(d->labels);
}

static void write_images(const char *dir, const char *name, const idx_data *d, bool gz) {
    uint32_t dims[3] = {d->n, d->rows, d->cols};
    write_blob(dir, name, idx_blob(0x803, dims, 3, d->pixels, (size_t)d->n * d->rows * d->cols),
               gz);
}

static void write_labels(const char *dir, const char *name, const idx_data *d, bool gz) {
    write_blob(dir, name, idx_blob(0x801, &d->n, 1, d->labels, d->n), gz);
}

static void write_split(const char *dir, const char *prefix, const idx_data *d, bool gz) {
    char images[64], labels[64];
    snprintf(images, sizeof images, "%s-images-idx3-ubyte", prefix);
    snprintf(labels, sizeof labels, "%s-labels-idx1-ubyte", prefix);
    write_images(dir, images, d, gz);
    write_labels(dir, labels, d, gz);
}

static void expect_loaded(const sdp_images *im, const idx_data *d) {
    assert_int_equal(im->n, d->n);
    assert_int_equal(im->C, 1);
    assert_int_equal(im->H, d->rows);
    assert_int_equal(im->W, d->cols);
    assert_int_equal(im->nclasses, 10);
    assert_memory_equal(im->pixels, d->pixels, (size_t)d->n * d->rows * d->cols);
    assert_memory_equal(im->labels, d->labels, d->n);
}

/* ---- round trips ------------------------------------------------------------------------- */

/* A gzipped train split and a plain test split of different sizes and non-square images. */
static void test_round_trip(void **state) {
    fixture *fx = *state;
    idx_data train = random_data(37, 5, 7, 1), test = random_data(11, 5, 7, 2);
    write_split(fx->dir, "train", &train, true);
    write_split(fx->dir, "t10k", &test, false);
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_idx(&im, fx->dir, "train", &mem);
    expect_loaded(&im, &train);
    assert_int_equal(mem.cur[SDP_MEM_DATA], 37 * 5 * 7 + 37);
    sdp_images_free(&im, &mem);
    sdp_images_load_idx(&im, fx->dir, "test", &mem);
    expect_loaded(&im, &test);
    sdp_images_free(&im, &mem);
    assert_int_equal(mem.total_cur, 0);
    assert_int_equal(mem.nallocs, 0);
    free_data(&train);
    free_data(&test);
}

/* Where both name.gz and name exist, the .gz (the distributed form) is the one read. */
static void test_prefers_gz(void **state) {
    fixture *fx = *state;
    idx_data a = random_data(4, 3, 3, 3), b = random_data(4, 3, 3, 4);
    write_split(fx->dir, "train", &a, true);
    write_split(fx->dir, "train", &b, false);
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_idx(&im, fx->dir, "train", &mem);
    expect_loaded(&im, &a);
    sdp_images_free(&im, &mem);
    free_data(&a);
    free_data(&b);
}

/* The installed Fashion-MNIST: sizes, labels, the 6000/1000 images per class the dataset is
 * published with, and its widely quoted mean 0.2860 and std 0.3530 (training split). */
static void test_real_fashion_mnist(void **state) {
    (void)state;
    if (access(SDP_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        print_message("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)\n");
        skip();
    }
    const char *splits[2] = {"train", "test"};
    const size_t sizes[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        sdp_mem mem = {0};
        sdp_images im;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        sdp_images_load_idx(&im, NULL, splits[s], &mem);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        print_message("Fashion-MNIST %s: %zu images loaded in %.3f s\n", splits[s], im.n,
                      (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        assert_int_equal(im.n, sizes[s]);
        assert_int_equal(im.C, 1);
        assert_int_equal(im.H, 28);
        assert_int_equal(im.W, 28);
        assert_int_equal(im.nclasses, 10);
        size_t per_class[10] = {0};
        for (size_t i = 0; i < im.n; i++) {
            assert_true(im.labels[i] < 10);
            per_class[im.labels[i]]++;
        }
        for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], sizes[s] / 10);
        if (s == 0) {
            sdp_image_norm norm = sdp_images_norm_stats(&im);
            print_message("Fashion-MNIST train mean %.4f std %.4f\n", norm.mean[0], norm.std[0]);
            assert_true(fabs(norm.mean[0] - 0.2860) < 5e-4);
            assert_true(fabs(norm.std[0] - 0.3530) < 5e-4);
        }
        sdp_images_free(&im, &mem);
        assert_int_equal(mem.total_cur, 0);
    }
}

/* ---- errors -------------------------------------------------------------------------------- */

typedef struct {
    const char *dir, *split;
} load_args;

static void load_idx(void *ctx) {
    load_args *a = ctx;
    sdp_mem mem = {0};
    sdp_images im;
    sdp_images_load_idx(&im, a->dir, a->split, &mem);
}

static void expect_fails(const char *dir, const char *split, const char *needle) {
    load_args a = {dir, split};
    tu_expect_fatal(load_idx, &a, needle);
}

/* A fresh subdirectory per case, so each case sees only the files it wrote. */
static const char *case_dir(const fixture *fx, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s/%s", fx->dir, name);
    assert_int_equal(mkdir(buf, 0755), 0);
    return buf;
}

static void test_missing(void **state) {
    fixture *fx = *state;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no_such_dir", fx->dir);
    expect_fails(missing, "train", "no_such_dir' does not exist");
    expect_fails(missing, "train", "MNIST-layout files");

    char buf[600];
    const char *dir = case_dir(fx, "labels_missing", buf, sizeof buf);
    idx_data d = random_data(6, 4, 4, 5);
    write_images(dir, "t10k-images-idx3-ubyte", &d, true);
    expect_fails(dir, "test", "holds neither t10k-labels-idx1-ubyte.gz nor t10k-labels-idx1-ubyte");
    expect_fails(dir, "train", "holds neither train-images-idx3-ubyte.gz");
    expect_fails(dir, "validation", "unknown split 'validation'");
    free_data(&d);
}

static void test_wrong_magic(void **state) {
    fixture *fx = *state;
    char buf[600];
    idx_data d = random_data(6, 4, 4, 6);
    uint32_t dims[3] = {6, 4, 4};

    /* The magic written little-endian, a common mistake in hand-made files. */
    const char *dir = case_dir(fx, "little_endian", buf, sizeof buf);
    write_blob(dir, "train-images-idx3-ubyte", idx_blob(0x03080000, dims, 3, d.pixels, 96), true);
    write_labels(dir, "train-labels-idx1-ubyte", &d, true);
    expect_fails(dir, "train", "is not an IDX images file: its magic number is 0x03080000");

    /* Images and labels swapped. */
    dir = case_dir(fx, "swapped", buf, sizeof buf);
    write_labels(dir, "train-images-idx3-ubyte", &d, false);
    expect_fails(dir, "train", "is not an IDX images file: its magic number is 0x00000801");
    dir = case_dir(fx, "swapped_labels", buf, sizeof buf);
    write_images(dir, "train-images-idx3-ubyte", &d, false);
    write_images(dir, "train-labels-idx1-ubyte", &d, false);
    expect_fails(dir, "train", "is not an IDX labels file: its magic number is 0x00000803");

    /* A file of some other kind, shorter than an IDX header. */
    dir = case_dir(fx, "text", buf, sizeof buf);
    write_blob(dir, "train-images-idx3-ubyte", (blob){(unsigned char *)strdup("hello"), 5}, false);
    expect_fails(dir, "train", "is not an IDX images file");
    free_data(&d);
}

static void test_truncated(void **state) {
    fixture *fx = *state;
    char buf[600], path[700];
    idx_data d = random_data(50, 8, 8, 7);
    uint32_t dims[3] = {50, 8, 8};

    /* Plain: the size check catches it before anything is allocated. */
    const char *dir = case_dir(fx, "plain", buf, sizeof buf);
    write_blob(dir, "train-images-idx3-ubyte", idx_blob(0x803, dims, 3, d.pixels, 3000), false);
    write_labels(dir, "train-labels-idx1-ubyte", &d, false);
    expect_fails(dir, "train", "is truncated or corrupt: its header promises 3200 bytes of data");

    /* Gzipped, cut in the middle of the compressed stream: caught while reading. */
    dir = case_dir(fx, "gz", buf, sizeof buf);
    write_images(dir, "train-images-idx3-ubyte", &d, true);
    write_labels(dir, "train-labels-idx1-ubyte", &d, true);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size / 2), 0);
    expect_fails(dir, "train",
                 "train-images-idx3-ubyte.gz' is truncated or corrupt: it ends after");

    /* Labels cut short, and a header cut short. */
    dir = case_dir(fx, "labels", buf, sizeof buf);
    write_images(dir, "train-images-idx3-ubyte", &d, true);
    write_blob(dir, "train-labels-idx1-ubyte", idx_blob(0x801, &d.n, 1, d.labels, 49), true);
    expect_fails(dir, "train", "ends after 49 of the 50 bytes of its labels");
    dir = case_dir(fx, "header", buf, sizeof buf);
    write_blob(dir, "train-images-idx3-ubyte", idx_blob(0x803, dims, 2, NULL, 0), true);
    expect_fails(dir, "train", "ends after 8 of the 12 bytes of its header");

    /* More data than the header describes. */
    dir = case_dir(fx, "long", buf, sizeof buf);
    dims[0] = 49;
    write_blob(dir, "train-images-idx3-ubyte", idx_blob(0x803, dims, 3, d.pixels, 3200), true);
    expect_fails(dir, "train", "holds more bytes than its header's 49 images of 8 x 8");
    free_data(&d);
}

static void test_inconsistent(void **state) {
    fixture *fx = *state;
    char buf[600];
    idx_data d = random_data(9, 3, 5, 8), e = random_data(8, 3, 5, 9);

    const char *dir = case_dir(fx, "counts", buf, sizeof buf);
    write_images(dir, "t10k-images-idx3-ubyte", &d, true);
    write_labels(dir, "t10k-labels-idx1-ubyte", &e, true);
    expect_fails(dir, "test", "t10k-labels-idx1-ubyte.gz' holds 8 labels but");
    expect_fails(dir, "test", "t10k-images-idx3-ubyte.gz' holds 9 images");

    dir = case_dir(fx, "label_range", buf, sizeof buf);
    d.labels[4] = 10;
    write_split(dir, "train", &d, false);
    expect_fails(dir, "train", "gives sample 4 the label 10, outside 0..9");

    dir = case_dir(fx, "empty", buf, sizeof buf);
    uint32_t dims[3] = {0, 28, 28};
    write_blob(dir, "train-images-idx3-ubyte", idx_blob(0x803, dims, 3, NULL, 0), true);
    expect_fails(dir, "train", "declares 0 images of 28 x 28 pixels");
    free_data(&d);
    free_data(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_prefers_gz, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test_setup_teardown(test_missing, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_magic, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_truncated, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_inconsistent, tu_tmpdir_setup, tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
