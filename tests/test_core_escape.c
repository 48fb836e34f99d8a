/* sdp_escape, which every error message goes through: control characters and bytes that are not
 * UTF-8 become visible escapes, printable UTF-8 stays as it is, and truncation never splits an
 * escape or a character. */
#include "testutil.h"

#include "sdp/check.h"

static void expect_escaped(const char *in, const char *want) {
    char out[256];
    assert_string_equal(sdp_escape(out, sizeof out, in), want);
}

static void test_controls(void **state) {
    (void)state;
    expect_escaped("plain ascii ~!", "plain ascii ~!");
    expect_escaped("a\nb\rc\td", "a\\nb\\rc\\td");
    expect_escaped("\x1b[2J\x07\x7f\x01", "\\x1b[2J\\x07\\x7f\\x01");
    expect_escaped("back\\slash", "back\\slash");
    expect_escaped("", "");
}

static void test_utf8(void **state) {
    (void)state;
    expect_escaped("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9d\x84\x9e",
                   "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9d\x84\x9e");
    expect_escaped("\xc2\x9b"
                   "31m",
                   "\\xc2\\x9b31m");        /* C1 CSI, which some terminals obey */
    expect_escaped("\xc2\xa0", "\xc2\xa0"); /* U+00A0, the first after C1 */
    expect_escaped("\xff\xfe", "\\xff\\xfe");
    expect_escaped("\xc0\xaf", "\\xc0\\xaf");                   /* overlong '/' */
    expect_escaped("\xed\xa0\x80", "\\xed\\xa0\\x80");          /* a surrogate */
    expect_escaped("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* past U+10FFFF */
    expect_escaped("\xe2\x9c", "\\xe2\\x9c");                   /* cut short */
}

static void test_truncation(void **state) {
    (void)state;
    char out[6];
    assert_string_equal(sdp_escape(out, sizeof out, "abcdefgh"), "abcde");
    /* an escape that does not fit whole is left out */
    assert_string_equal(sdp_escape(out, sizeof out, "abcd\n"), "abcd");
    assert_string_equal(sdp_escape(out, sizeof out, "ab\x1b"), "ab");
    assert_string_equal(sdp_escape(out, sizeof out, "abcd\xc3\xa9"), "abcd");
    char one[1];
    assert_string_equal(sdp_escape(one, sizeof one, "x"), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_truncation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
