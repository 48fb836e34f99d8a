/* The allocator's accounting: bytes per category, peaks, and blocks kept for reuse (sdp_mem.keep),
 * which stay counted until released and come back zero-filled. */
#include "testutil.h"

#include "sdp/mem.h"

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

static void test_keep(void **state) {
    (void)state;
    sdp_mem m = {0};
    m.keep = true;
    float *a = sdp_alloc(&m, SDP_MEM_ACTS, 64 * sizeof(float));
    for (int i = 0; i < 64; i++) a[i] = 1.0f + (float)i;
    sdp_free(&m, a);
    /* still held, so still counted */
    assert_int_equal(m.cur[SDP_MEM_ACTS], 64 * sizeof(float));
    /* another category, or a larger size, does not take it */
    void *other = sdp_alloc(&m, SDP_MEM_SCRATCH, 64 * sizeof(float));
    void *bigger = sdp_alloc(&m, SDP_MEM_ACTS, 65 * sizeof(float));
    assert_ptr_not_equal(other, a);
    assert_ptr_not_equal(bigger, a);
    /* a smaller one does, zero-filled, still counted at the block's own size */
    float *again = sdp_alloc(&m, SDP_MEM_ACTS, 60 * sizeof(float));
    assert_ptr_equal(again, a);
    for (int i = 0; i < 64; i++) assert_true(again[i] == 0.0f);
    assert_int_equal(m.cur[SDP_MEM_ACTS], 129 * sizeof(float));
    /* the smallest block that fits is taken */
    sdp_free(&m, bigger);
    sdp_free(&m, again);
    assert_ptr_equal(sdp_alloc(&m, SDP_MEM_ACTS, 10), a);
    again = a;
    bigger = sdp_alloc(&m, SDP_MEM_ACTS, 10);
    assert_ptr_not_equal(bigger, a);
    assert_int_equal(m.cur[SDP_MEM_ACTS], 129 * sizeof(float));
    sdp_free(&m, again);
    sdp_free(&m, other);
    sdp_free(&m, bigger);
    assert_int_equal(m.total_cur, 193 * sizeof(float));
    sdp_mem_release(&m);
    assert_false(m.keep);
    assert_null(m.kept);
    assert_int_equal(m.total_cur, 0);
    assert_int_equal(m.nallocs, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_keep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
