/* sdp_xmalloc and its kin: they return usable memory (calloc's zero-filled, never NULL, even for
 * zero bytes), and when the system refuses they fail with the project's one line, naming what
 * the bytes were for. */
#include "testutil.h"

#include "sdp/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_success(void **state) {
    (void)state;
    char *a = sdp_xmalloc(16, "a test");
    memset(a, 1, 16);
    int *z = sdp_xcalloc(8, sizeof *z, "a test");
    for (int i = 0; i < 8; i++) assert_int_equal(z[i], 0);
    z = sdp_xrealloc(z, 1024 * sizeof *z, "a test");
    assert_int_equal(z[7], 0); /* realloc keeps the old bytes */
    char *s = sdp_xstrdup("copied", "a test");
    assert_string_equal(s, "copied");
    void *none[] = {sdp_xmalloc(0, "a test"), sdp_xcalloc(0, 4, "a test"),
                    sdp_xrealloc(NULL, 0, "a test")};
    for (int i = 0; i < 3; i++) assert_non_null(none[i]);
    for (int i = 0; i < 3; i++) free(none[i]);
    free(a), free(z), free(s);
}

static void too_large_malloc(void *ctx) {
    (void)ctx;
    free(sdp_xmalloc(SIZE_MAX, "the test's table"));
}

static void overflowing_calloc(void *ctx) {
    (void)ctx;
    free(sdp_xcalloc(SIZE_MAX / 2, 4, "the test's table"));
}

static void too_large_realloc(void *ctx) {
    (void)ctx;
    free(sdp_xrealloc(malloc(1), SIZE_MAX, "the test's table"));
}

static void test_failure(void **state) {
    (void)state;
    tu_expect_fatal(too_large_malloc, NULL, "out of memory allocating ");
    tu_expect_fatal(too_large_malloc, NULL, " bytes for the test's table: close other programs");
    tu_expect_fatal(overflowing_calloc, NULL, " x 4 bytes for the test's table");
    tu_expect_fatal(too_large_realloc, NULL, " bytes for the test's table");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_success),
        cmocka_unit_test(test_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
