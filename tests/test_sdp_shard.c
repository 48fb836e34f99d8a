/* --zero 1's shards (sdp_sync_shard): member j of k keeps [j * count / k, (j + 1) * count / k) of
 * a bucket, so the shards tile the bucket in member order, differ by at most one element, and one
 * member keeps the whole bucket (which is why --zero 1 on one worker is bitwise --zero 0). */
#include "testutil.h"

#include "sdp/sync.h"

static void test_shards_tile_the_bucket(void **state) {
    (void)state;
    static const size_t COUNTS[] = {0, 1, 2, 3, 7, 64, 1000, 12345, ((size_t)1 << 33) + 5};
    for (size_t c = 0; c < sizeof COUNTS / sizeof *COUNTS; c++)
        for (int k = 1; k <= 9; k++) {
            const size_t count = COUNTS[c];
            size_t next = 0, least = SIZE_MAX, most = 0;
            for (int j = 0; j < k; j++) {
                size_t lo, hi;
                sdp_sync_shard(count, k, j, &lo, &hi);
                assert_int_equal(lo, next); /* no gap, no overlap, in member order */
                assert_true(hi >= lo);
                if (hi - lo < least) least = hi - lo;
                if (hi - lo > most) most = hi - lo;
                next = hi;
            }
            assert_int_equal(next, count);
            assert_true(most - least <= 1);
        }
}

static void test_one_member_keeps_everything(void **state) {
    (void)state;
    size_t lo, hi;
    sdp_sync_shard(1000, 1, 0, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 1000);
}

static void test_floor_split(void **state) {
    (void)state;
    /* 10 over 4: floor(j * 10 / 4) = 0, 2, 5, 7, 10 */
    static const size_t BOUNDS[] = {0, 2, 5, 7, 10};
    for (int j = 0; j < 4; j++) {
        size_t lo, hi;
        sdp_sync_shard(10, 4, j, &lo, &hi);
        assert_int_equal(lo, BOUNDS[j]);
        assert_int_equal(hi, BOUNDS[j + 1]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_tile_the_bucket),
        cmocka_unit_test(test_one_member_keeps_everything),
        cmocka_unit_test(test_floor_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
