/* The allocator's accounting: bytes per category and peaks; arenas, whose size a counting run of
 * the same allocations gives exactly, and whose blocks come back zero-filled; and pools, whose
 * bytes are pure data that a borrower may overwrite without breaking the blocks' frees. */
#include "testutil.h"

#include "sdp/mem.h"

#include <stdlib.h>
#include <string.h>

static void test_counts(void **state) {
    (void)state;
    sdp_mem m = {0};
    float *a = sdp_alloc(&m, SDP_MEM_ACTS, 1000);
    void *b = sdp_alloc(&m, SDP_MEM_PARAMS, 24);
    assert_int_equal(m.cur[SDP_MEM_ACTS], 1000);
    assert_int_equal(m.total_cur, 1024);
    assert_true(((uintptr_t)a % 64) == 0);
    sdp_free(&m, a);
    assert_int_equal(m.cur[SDP_MEM_ACTS], 0);
    assert_int_equal(m.peak[SDP_MEM_ACTS], 1000);
    sdp_free(&m, b);
    assert_int_equal(m.total_cur, 0);
    assert_int_equal(m.total_peak, 1024);
}

/* The allocations a model of some shape makes: sizes that are not multiples of 64 included. */
static void allocate_some(sdp_mem *m, void **p) {
    p[0] = sdp_alloc(m, SDP_MEM_PARAMS, 1000);
    p[1] = sdp_alloc(m, SDP_MEM_ACTS, 1);
    p[2] = sdp_alloc(m, SDP_MEM_SCRATCH, 0);
    p[3] = sdp_alloc(m, SDP_MEM_ACTS, 4096);
}

static void test_arena(void **state) {
    (void)state;
    sdp_mem dry = {.dry = true};
    void *p[4];
    allocate_some(&dry, p);
    const size_t need = dry.carved;
    assert_int_equal(need, sdp_mem_block_bytes(1000) + sdp_mem_block_bytes(1) +
                               sdp_mem_block_bytes(0) + sdp_mem_block_bytes(4096));
    sdp_mem heap = {0};
    char *region = sdp_alloc(&heap, SDP_MEM_ACTS, need);
    memset(region, 0xab, need); /* what a previous model left */
    sdp_mem arena;
    sdp_mem_use_arena(&arena, region, need);
    for (int round = 0; round < 2; round++) {
        allocate_some(&arena, p);
        assert_int_equal(arena.carved, need); /* exactly the region: no more, no less */
        for (int i = 0; i < 4; i++) {
            assert_true((char *)p[i] >= region && (char *)p[i] < region + need);
            assert_true(((uintptr_t)p[i] % 64) == 0);
        }
        for (int i = 0; i < 1000; i++) assert_int_equal(((unsigned char *)p[0])[i], 0);
        for (int i = 0; i < 4096; i++) assert_int_equal(((unsigned char *)p[3])[i], 0);
        assert_int_equal(arena.cur[SDP_MEM_ACTS], 4097);
        memset(p[3], 0xcd, 4096);
        for (int i = 0; i < 4; i++) sdp_free(&arena, p[i]);
        assert_int_equal(arena.total_cur, 0);
        sdp_mem_arena_reset(&arena);
    }
    assert_int_equal(heap.total_cur, need); /* the heap counts the region once */
    sdp_free(&heap, region);
}

static void test_pool(void **state) {
    (void)state;
    sdp_mem dry = {.dry = true};
    void *p[4];
    allocate_some(&dry, p);
    const size_t need = dry.pooled_by[SDP_MEM_ACTS];
    assert_int_equal(need, 64 + 4096); /* the activations only, each rounded up to 64 bytes */
    /* An empty allocation still takes a block of its own: the last block of a pool must lie
     * inside it, and no two blocks may share an address. */
    sdp_mem empty = {.dry = true};
    sdp_alloc(&empty, SDP_MEM_ACTS, 100);
    sdp_alloc(&empty, SDP_MEM_ACTS, 0);
    assert_int_equal(empty.pooled_by[SDP_MEM_ACTS], 128 + 64);
    char *small = NULL;
    assert_int_equal(posix_memalign((void **)&small, 64, 192), 0);
    sdp_mem e = {0};
    sdp_mem_pool_open(&e, SDP_MEM_ACTS, small, 192);
    void *x = sdp_alloc(&e, SDP_MEM_ACTS, 100), *none = sdp_alloc(&e, SDP_MEM_ACTS, 0);
    sdp_mem_pool_close(&e);
    assert_ptr_equal(none, small + 128);
    sdp_free(&e, none);
    sdp_free(&e, x);
    assert_int_equal(e.total_cur, 0);
    sdp_mem_pool_drop(&e);
    free(small);
    char *region = NULL;
    assert_int_equal(posix_memalign((void **)&region, 64, need), 0);
    memset(region, 0xab, need);
    sdp_mem m = {0};
    sdp_mem_pool_open(&m, SDP_MEM_ACTS, region, need);
    allocate_some(&m, p);
    sdp_mem_pool_close(&m);
    void *later = sdp_alloc(&m, SDP_MEM_ACTS, 100); /* closed: from the heap */
    assert_ptr_equal(p[1], region);
    assert_ptr_equal(p[3], region + 64);
    assert_true((char *)later < region || (char *)later >= region + need);
    assert_true((char *)p[0] < region || (char *)p[0] >= region + need);
    for (int i = 0; i < 4096; i++) assert_int_equal(((unsigned char *)p[3])[i], 0);
    assert_int_equal(m.cur[SDP_MEM_ACTS], 4197); /* counted as any allocation */
    assert_int_equal(m.total_cur, 5197);
    memset(region, 0xcd, need); /* a borrower's data over every byte of the pool */
    for (int i = 0; i < 4; i++) sdp_free(&m, p[i]);
    sdp_free(&m, later);
    assert_int_equal(m.total_cur, 0);
    assert_int_equal(m.peak[SDP_MEM_ACTS], 4197);
    sdp_mem_pool_drop(&m);
    free(region);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
