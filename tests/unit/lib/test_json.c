/* Unit tests: the JSON writer, error bodies and the strict RFC 8259 check (lib/json.c). Built twice:
 * unit_json (the SSE2 string scan) and unit_json_portable (8 bytes at a time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "buf.h"

static void test_escape(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    const char s[] = "a\"b\\c\nd\te\x01 \xe6\x9d\xb1 \xf0\x9f\x98\x80";
    sg_buf_append_json_string(&b, s, sizeof(s) - 1);
    assert_string_equal(b.base, "\"a\\\"b\\\\c\\nd\\te\\u0001 \xe6\x9d\xb1 \xf0\x9f\x98\x80\"");
    /* bytes that are not UTF-8 (a stray continuation byte, a truncated sequence, a surrogate) become U+FFFD */
    b.len = 0;
    const char bad[] = "x\x80y\xe6\x9dz\xed\xa0\x80";
    sg_buf_append_json_string(&b, bad, sizeof(bad) - 1);
    assert_string_equal(b.base, "\"x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    sg_buf_free(&b);
}

static void test_double(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *want;
    } cases[] = {{1.0, "1.0"},
                 {0.0, "0.0"},
                 {0.5, "0.5"},
                 {-2.0, "-2.0"},
                 {0.1, "0.1"},
                 {1e300, "1e+300"},
                 {0.8731234073638916, "0.8731234073638916"},
                 {(double)0.8731f, "0.8730999827384949"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        sg_buf_t b = {0};
        sg_json_append_double(&b, cases[i].v);
        assert_string_equal(b.base, cases[i].want);
        assert_true(strtod(b.base, NULL) == cases[i].v); /* round-trips */
        sg_buf_free(&b);
    }
    sg_buf_t b = {0};
    sg_json_append_double(&b, 0.0 / 0.0);
    assert_string_equal(b.base, "null");
    sg_buf_free(&b);
}

/* The writer: commas, nesting, escaped keys and strings, each number form, raw values. */
static void test_writer(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "a\"b", "x\ny");
    sg_jw_key(&w, "list");
    sg_jw_arr(&w);
    sg_jw_u64(&w, UINT64_MAX);
    sg_jw_i64(&w, INT64_MIN);
    sg_jw_double(&w, 0.1);
    sg_jw_double(&w, 2.0);
    sg_jw_fixed(&w, 1.23456, 3);
    sg_jw_fixed(&w, 0.0 / 0.0, 3);
    sg_jw_bool(&w, 1);
    sg_jw_null(&w);
    sg_jw_arr(&w);
    sg_jw_end(&w);
    sg_jw_obj(&w);
    sg_jw_end(&w);
    sg_jw_raw(&w, "{\"k\":[1,2]}", 11);
    sg_jw_end(&w);
    sg_jw_key(&w, "nested");
    sg_jw_obj(&w);
    sg_jw_key(&w, "deeper");
    sg_jw_obj(&w);
    sg_jw_kbool(&w, "f", 0);
    sg_jw_end(&w);
    sg_jw_kdouble(&w, "nan", 0.0 / 0.0);
    sg_jw_end(&w);
    sg_jw_ku64(&w, "after", 7);
    sg_jw_end(&w);
    assert_int_equal(w.depth, 0);
    assert_string_equal(b.base, "{\"a\\\"b\":\"x\\ny\",\"list\":[18446744073709551615,-9223372036854775808,0.1,2.0,1.235,null,"
                                "true,null,[],{},{\"k\":[1,2]}],\"nested\":{\"deeper\":{\"f\":false},\"nan\":null},\"after\":7}");
    size_t bad;
    const char *why;
    assert_int_equal(sg_json_validate(b.base, b.len, &bad, &why), 0);
    /* a top-level scalar, and a second document appended after the first */
    b.len = 0;
    sg_jw_init(&w, &b);
    sg_jw_str(&w, "solo");
    sg_jw_init(&w, &b);
    sg_jw_arr(&w);
    sg_jw_end(&w);
    assert_string_equal(b.base, "\"solo\"[]");
    sg_buf_free(&b);
}

static void test_error_body(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_json_error_body(&b, 429, "rate_limited", "slow \"down\"");
    assert_string_equal(b.base, "{\"error\":{\"code\":429,\"type\":\"rate_limited\",\"message\":\"slow \\\"down\\\"\"},"
                                "\"detail\":\"slow \\\"down\\\"\"}\n");
    sg_buf_free(&b);
}

/* Strings are scanned 16 bytes at a time (8 without SSE2): a byte that needs a look of its own
 * must be found wherever it falls in a chunk, near the end of the text included, with the same
 * verdict and offset as the byte-by-byte walk. One special byte at every position of strings of
 * every length up to 70. */
static void test_validate_string_chunks(void **state)
{
    (void)state;
    static const struct {
        unsigned char b;
        int ok;
    } special[] = {{'"', 0},  {'\\', 0}, {0x00, 0}, {0x1f, 0}, {'\n', 0}, {0x20, 1},
                   {0x7f, 1}, {0x80, 0}, {0xc3, 0}, {0xff, 0}, {'a', 1}};
    char buf[80];
    for (size_t len = 0; len <= 70; ++len) {
        for (size_t at = 0; at < len; ++at) {
            for (size_t k = 0; k < sizeof(special) / sizeof(special[0]); ++k) {
                buf[0] = '"';
                memset(buf + 1, 'x', len);
                buf[1 + at] = (char)special[k].b;
                buf[1 + len] = '"';
                size_t bad_at = 0;
                const char *why = NULL;
                long r = sg_json_validate(buf, len + 2, &bad_at, &why);
                if (special[k].ok ? r != 0 : r != -1)
                    fail_msg("byte 0x%02x at %zu of %zu: %ld (%s)", special[k].b, at, len, r, why != NULL ? why : "");
                /* a quote ends the string early (the offender is what follows it); a backslash
                 * escapes the next byte (a bad escape, or the closing quote: unterminated) */
                size_t want = 1 + at;
                if (special[k].b == '"')
                    want = 2 + at;
                else if (special[k].b == '\\' && at + 1 == len)
                    want = len + 2;
                if (!special[k].ok && bad_at != want)
                    fail_msg("byte 0x%02x at %zu of %zu: reported at %zu, not %zu (%s)", special[k].b, at, len, bad_at, want, why);
            }
        }
        /* valid UTF-8 straddling every chunk boundary */
        if (len >= 3) {
            for (size_t at = 0; at + 3 <= len; ++at) {
                buf[0] = '"';
                memset(buf + 1, 'x', len);
                memcpy(buf + 1 + at, "\xe6\x9d\xb1", 3);
                buf[1 + len] = '"';
                size_t bad_at;
                const char *why;
                if (sg_json_validate(buf, len + 2, &bad_at, &why) != 0)
                    fail_msg("U+6771 at %zu of %zu refused: %s", at, len, why);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_escape), cmocka_unit_test(test_double), cmocka_unit_test(test_writer),
                                       cmocka_unit_test(test_error_body), cmocka_unit_test(test_validate_string_chunks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
