/* llm.c token shards: a round trip through files this test writes in llm.c's exact format,
 * glob expansion sorted by name, the vocab scan, and the one-line errors for bad shards. */
#include "testutil.h"

#include "sdp/data.h"

#include <sys/stat.h>

typedef tu_tmpdir fixture;

/* What llm.c's write_datafile does: header[0] magic, [1] version, [2] token count, the rest of
 * the 256 int32 zero, then the tokens as uint16. The header fields are parameters so that the
 * tests can write broken shards too; `ntok` tokens are written whatever the header says. */
static void write_shard(const char *dir, const char *name, int32_t magic, int32_t version,
                        int32_t count, const uint16_t *tok, size_t ntok) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(header, sizeof header, 1, f), 1);
    if (ntok) assert_int_equal(fwrite(tok, sizeof *tok, ntok, f), ntok);
    assert_int_equal(fclose(f), 0);
}

static void write_good_shard(const char *dir, const char *name, const uint16_t *tok, size_t n) {
    write_shard(dir, name, 20240520, 1, (int32_t)n, tok, n);
}

static uint16_t *random_tokens(size_t n, uint64_t seed, uint32_t below) {
    uint16_t *t = malloc((n ? n : 1) * sizeof *t);
    sdp_rng r = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)sdp_rng_below(&r, below);
    return t;
}

/* Shards are written out of name order, with an empty one and a file the pattern must not
 * match; the load must return them in name order with their exact tokens. */
static void test_round_trip_sorted(void **state) {
    fixture *fx = *state;
    enum { NSHARDS = 4 };
    const char *names[NSHARDS] = {"tok_000.bin", "tok_001.bin", "tok_002.bin", "tok_010.bin"};
    const size_t sizes[NSHARDS] = {1000, 0, 4321, 77};
    const int write_order[NSHARDS] = {3, 0, 2, 1};
    uint16_t *tok[NSHARDS];
    uint16_t max = 0;
    for (int i = 0; i < NSHARDS; i++) {
        tok[i] = random_tokens(sizes[i], 100 + (uint64_t)i, 50257);
        for (size_t j = 0; j < sizes[i]; j++)
            if (tok[i][j] > max) max = tok[i][j];
    }
    for (int w = 0; w < NSHARDS; w++) {
        int i = write_order[w];
        write_good_shard(fx->dir, names[i], tok[i], sizes[i]);
    }
    uint16_t decoy[3] = {60000, 60001, 60002};
    write_good_shard(fx->dir, "other_000.bin", decoy, 3);

    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/tok_*.bin", fx->dir);
    sdp_mem mem = {0};
    sdp_tokens t;
    sdp_tokens_load_shards(&t, pattern, &mem);
    assert_int_equal(t.nspans, NSHARDS);
    size_t total = 0;
    for (int i = 0; i < NSHARDS; i++) {
        assert_int_equal(t.spans[i].n, sizes[i]);
        if (sizes[i]) assert_memory_equal(t.spans[i].tok, tok[i], sizes[i] * sizeof(uint16_t));
        assert_non_null(t.maps[i]);
        assert_int_equal(t.map_bytes[i], 1024 + 2 * sizes[i]);
        total += sizes[i];
    }
    assert_int_equal(t.ntokens, total);
    assert_int_equal(t.vocab, max + 1);
    assert_null(t.owned);
    /* Mapped files are not counted as allocations; only the small bookkeeping arrays are. */
    assert_true(mem.cur[SDP_MEM_DATA] > 0);
    assert_true(mem.cur[SDP_MEM_DATA] < 1024);
    sdp_tokens_free(&t, &mem);
    assert_int_equal(mem.total_cur, 0);
    assert_int_equal(mem.nallocs, 0);
    for (int i = 0; i < NSHARDS; i++) free(tok[i]);
}

/* The vocab is 1 + the largest id anywhere, here planted in the last shard only. */
static void test_vocab_from_largest_id(void **state) {
    fixture *fx = *state;
    uint16_t a[4] = {1, 2, 3, 4}, b[3] = {0, 65535, 7};
    write_good_shard(fx->dir, "s0.bin", a, 4);
    write_good_shard(fx->dir, "s1.bin", b, 3);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/s?.bin", fx->dir);
    sdp_mem mem = {0};
    sdp_tokens t;
    sdp_tokens_load_shards(&t, pattern, &mem);
    assert_int_equal(t.vocab, 65536);
    assert_int_equal(t.ntokens, 7);
    sdp_tokens_free(&t, &mem);

    snprintf(pattern, sizeof pattern, "%s/s0.bin", fx->dir);
    sdp_tokens_load_shards(&t, pattern, &mem);
    assert_int_equal(t.nspans, 1);
    assert_int_equal(t.vocab, 5);
    sdp_tokens_free(&t, &mem);
    assert_int_equal(mem.total_cur, 0);
}

static void load_shards(void *ctx) {
    sdp_mem mem = {0};
    sdp_tokens t;
    sdp_tokens_load_shards(&t, ctx, &mem);
}

static void expect_load_fails(const char *dir, const char *name, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_expect_fatal(load_shards, path, needle);
}

static void test_errors(void **state) {
    fixture *fx = *state;
    uint16_t tok[100] = {0};
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", fx->dir);
    tu_expect_fatal(load_shards, pattern, "no files match");
    tu_expect_fatal(load_shards, pattern, "nothing_*.bin");

    char path[600];
    snprintf(path, sizeof path, "%s/short.bin", fx->dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t partial[25] = {20240520, 1, 0};
    assert_int_equal(fwrite(partial, sizeof partial, 1, f), 1);
    fclose(f);
    expect_load_fails(fx->dir, "short.bin", "short.bin' is truncated: it holds 100 bytes");

    write_shard(fx->dir, "magic.bin", 12345, 1, 100, tok, 100);
    expect_load_fails(fx->dir, "magic.bin",
                      "has magic number 12345, expected 20240520: it is not an llm.c token shard");

    write_shard(fx->dir, "version.bin", 20240520, 2, 100, tok, 100);
    expect_load_fails(fx->dir, "version.bin", "has version 2, expected 1");

    write_shard(fx->dir, "size.bin", 20240520, 1, 100, tok, 90);
    expect_load_fails(fx->dir, "size.bin",
                      "truncated or corrupt: header says 100 tokens, file holds 90");
    write_shard(fx->dir, "long.bin", 20240520, 1, 10, tok, 11);
    expect_load_fails(fx->dir, "long.bin", "header says 10 tokens, file holds 11");

    /* A bad shard after good ones still fails, naming the bad file. */
    write_good_shard(fx->dir, "mix_0.bin", tok, 100);
    write_shard(fx->dir, "mix_1.bin", 20240520, 1, 50, tok, 49);
    snprintf(pattern, sizeof pattern, "%s/mix_*.bin", fx->dir);
    tu_expect_fatal(load_shards, pattern, "mix_1.bin' is truncated or corrupt");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_sorted, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_vocab_from_largest_id, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_errors, tu_tmpdir_setup, tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
