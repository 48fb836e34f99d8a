/* Byte-level text loading: the train/val split sizes and contents against the file's bytes,
 * the real tinyshakespeare file when available, and the one-line errors for bad input. */
#include "testutil.h"

#include "sdp/data.h"

#include <sys/stat.h>

typedef tu_tmpdir fixture;

static void write_bytes(const char *path, const unsigned char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Every byte value, including 0 and >= 128, so that a sign-extension bug would show. */
static unsigned char *random_bytes(size_t n, uint64_t seed) {
    unsigned char *b = malloc(n ? n : 1);
    sdp_rng r = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(sdp_rng_u32(&r) >> 24);
    return b;
}

static void assert_split(const sdp_tokens *t, const unsigned char *bytes, size_t n) {
    assert_int_equal(t->nspans, 1);
    assert_int_equal(t->vocab, 256);
    assert_int_equal(t->ntokens, n);
    assert_int_equal(t->spans[0].n, n);
    for (size_t i = 0; i < n; i++) {
        if (t->spans[0].tok[i] != bytes[i]) {
            print_error("token %zu is %u, file byte is %u\n", i, t->spans[0].tok[i], bytes[i]);
            fail();
        }
    }
}

/* Splits at sizes computed here from the definition: val = floor(val_frac * n), train the rest.
 * 200 000 bytes is larger than the loader's read chunk, so chunk boundaries are crossed. */
static void test_split_sizes_and_contents(void **state) {
    fixture *fx = *state;
    const size_t sizes[] = {1, 7, 1000, 200000};
    const double fracs[] = {0.0, 0.1, 0.5, 0.99};
    char path[600];
    snprintf(path, sizeof path, "%s/data.txt", fx->dir);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        unsigned char *bytes = random_bytes(n, 11 + si);
        write_bytes(path, bytes, n);
        for (size_t fi = 0; fi < sizeof fracs / sizeof *fracs; fi++) {
            size_t nval = (size_t)floor(fracs[fi] * (double)n);
            sdp_mem mem = {0};
            sdp_tokens train, val;
            sdp_tokens_load_text(&train, &val, path, fracs[fi], &mem);
            assert_split(&train, bytes, n - nval);
            assert_split(&val, bytes + (n - nval), nval);
            /* Each byte is held once, as a uint16 token, and counted as data. */
            assert_true(mem.cur[SDP_MEM_DATA] >= 2 * n);
            assert_true(mem.cur[SDP_MEM_DATA] < 2 * n + 256);
            sdp_tokens_free(&train, &mem);
            sdp_tokens_free(&val, &mem);
            assert_int_equal(mem.total_cur, 0);
            assert_int_equal(mem.nallocs, 0);
        }
        free(bytes);
    }
}

/* Without a val split the whole file is training data, whatever val_frac says. */
static void test_no_val_split(void **state) {
    fixture *fx = *state;
    char path[600];
    snprintf(path, sizeof path, "%s/data.txt", fx->dir);
    const size_t n = 333;
    unsigned char *bytes = random_bytes(n, 5);
    write_bytes(path, bytes, n);
    sdp_mem mem = {0};
    sdp_tokens train;
    sdp_tokens_load_text(&train, NULL, path, 0.5, &mem);
    assert_split(&train, bytes, n);
    sdp_tokens_free(&train, &mem);
    assert_int_equal(mem.total_cur, 0);
    free(bytes);
}

/* The real corpus, compared byte for byte with an independent read of the file. */
static void test_tinyshakespeare(void **state) {
    (void)state;
    const char *path = getenv("SDP_TEST_TEXT");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        print_message("SDP_TEST_TEXT is not set or does not exist; skipping\n");
        skip();
    }
    size_t n = (size_t)st.st_size;
    unsigned char *bytes = malloc(n);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(bytes, 1, n, f), n);
    fclose(f);
    /* The corpus opens with the first speaker's name. */
    assert_memory_equal(bytes, "First Citizen:", 14);

    sdp_mem mem = {0};
    sdp_tokens train, val;
    sdp_tokens_load_text(&train, &val, path, 0.1, &mem);
    size_t nval = (size_t)floor(0.1 * (double)n);
    assert_split(&train, bytes, n - nval);
    assert_split(&val, bytes + (n - nval), nval);
    assert_int_equal(train.ntokens + val.ntokens, n);
    sdp_tokens_free(&train, &mem);
    sdp_tokens_free(&val, &mem);
    assert_int_equal(mem.total_cur, 0);
    free(bytes);
}

typedef struct {
    const char *path;
    double val_frac;
} load_args;

static void load_text(void *ctx) {
    load_args *a = ctx;
    sdp_mem mem = {0};
    sdp_tokens train, val;
    sdp_tokens_load_text(&train, &val, a->path, a->val_frac, &mem);
}

static void test_errors(void **state) {
    fixture *fx = *state;
    char missing[600], empty[600], good[600];
    snprintf(missing, sizeof missing, "%s/no_such_file.txt", fx->dir);
    snprintf(empty, sizeof empty, "%s/empty.txt", fx->dir);
    snprintf(good, sizeof good, "%s/good.txt", fx->dir);
    write_bytes(empty, (const unsigned char *)"", 0);
    write_bytes(good, (const unsigned char *)"hello world", 11);

    load_args a = {missing, 0.1};
    tu_expect_fatal(load_text, &a, "no_such_file.txt' does not exist");
    a = (load_args){empty, 0.1};
    tu_expect_fatal(load_text, &a, "empty.txt' is empty");
    a = (load_args){fx->dir, 0.1};
    tu_expect_fatal(load_text, &a, "is not a regular file");
    /* A FIFO would block open() until a writer came: it fails at once instead. */
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo.txt", fx->dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    a = (load_args){fifo, 0.1};
    tu_expect_fatal_quick(load_text, &a, "fifo.txt' is not a regular file (it is a named pipe)", 2);
    a = (load_args){good, 1.0};
    tu_expect_fatal(load_text, &a, "validation fraction 1 for");
    a = (load_args){good, -0.25};
    tu_expect_fatal(load_text, &a, "out of range: use a value in [0, 1)");
    a = (load_args){good, NAN};
    tu_expect_fatal(load_text, &a, "out of range");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_split_sizes_and_contents, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_no_val_split, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test(test_tinyshakespeare),
        cmocka_unit_test_setup_teardown(test_errors, tu_tmpdir_setup, tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
