/*
 * Unit tests: lib/buf.c, the growable byte buffer under every JSON writer: growth (capacity
 * doubling from 256, the NUL kept after every append), sg_buf_appendf past its first guess,
 * embedded NULs, sg_buf_append_json_string's escapes (the two-letter ones, \u00XX for the other
 * control characters, UTF-8 passed through, U+FFFD for each byte that is not UTF-8) and
 * sg_utf8_seq_len's decisions (1-4 byte sequences, truncated, overlong, surrogates, > U+10FFFF).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>
#include "buf.h"

#define FFFD "\xef\xbf\xbd"

/* the JSON literal of n bytes at s, compared with the expected literal (quotes included) */
static void check_json(const char *s, size_t n, const char *want, size_t want_len)
{
    sg_buf_t b = {0};
    sg_buf_append_json_string(&b, s, n);
    assert_int_equal(b.len, want_len);
    assert_memory_equal(b.base, want, want_len);
    assert_int_equal(b.base[b.len], '\0');
    sg_buf_free(&b);
}
#define CHECK_JSON(lit, want) check_json(lit, sizeof(lit) - 1, want, sizeof(want) - 1)

static void test_reserve_growth(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_buf_reserve(&b, 0);
    assert_non_null(b.base);
    assert_int_equal(b.cap, 256); /* the first allocation */
    assert_int_equal(b.len, 0);
    sg_buf_reserve(&b, 255); /* 255 + the NUL fit */
    assert_int_equal(b.cap, 256);
    sg_buf_reserve(&b, 256); /* one more does not: doubled */
    assert_int_equal(b.cap, 512);
    sg_buf_reserve(&b, 5000); /* doubled until it fits: 8192 >= 5001 */
    assert_int_equal(b.cap, 8192);
    sg_buf_free(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    sg_buf_free(&b); /* twice is harmless */
}

static void test_append_many(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    size_t last_cap = 0, grows = 0;
    for (unsigned i = 0; i < 10000; ++i) {
        char c = (char)('a' + i % 26);
        sg_buf_appendc(&b, c);
        assert_int_equal(b.len, i + 1);
        assert_int_equal(b.base[b.len], '\0');
        assert_true(b.cap > b.len);
        if (b.cap != last_cap) {
            ++grows;
            last_cap = b.cap;
        }
    }
    assert_int_equal(b.cap, 16384);
    assert_int_equal(grows, 7); /* 256, 512, ..., 16384: amortised, not one realloc per byte */
    for (unsigned i = 0; i < 10000; ++i)
        assert_int_equal(b.base[i], (char)('a' + i % 26));
    sg_buf_appends(&b, "xyz");
    assert_int_equal(b.len, 10003);
    assert_string_equal(b.base + 10000, "xyz");
    sg_buf_append(&b, "ignored", 0); /* an empty append keeps the NUL, changes nothing */
    assert_int_equal(b.len, 10003);
    assert_string_equal(b.base + 10000, "xyz");
    sg_buf_free(&b);

    sg_buf_t e = {0};
    sg_buf_append(&e, NULL, 0); /* an empty append on an empty buffer still gives a string */
    assert_non_null(e.base);
    assert_string_equal(e.base, "");
    sg_buf_free(&e);
}

static void test_embedded_nul(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_buf_append(&b, "a\0b", 3);
    sg_buf_appendc(&b, '\0');
    sg_buf_append(&b, "c", 1);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.base, "a\0b\0c", 6); /* and the NUL after */
    sg_buf_appendf(&b, "%c%s", 0, "d");
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.base, "a\0b\0c\0d", 8);
    sg_buf_free(&b);
}

static void test_appendf(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_buf_appendf(&b, "%d-%s-%zu", -12, "ab", (size_t)7);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.base, "-12-ab-7");
    assert_int_equal(b.cap, 256);
    /* 1000 characters: far past the room there was (and past vsnprintf's first look), one growth
     * to fit all of it: 8 + 1002 + the NUL -> 1024 */
    char big[1001];
    memset(big, 'q', 1000);
    big[1000] = '\0';
    sg_buf_appendf(&b, "[%s]", big);
    assert_int_equal(b.len, 8 + 1002);
    assert_int_equal(b.cap, 1024);
    assert_memory_equal(b.base, "-12-ab-7[", 9);
    assert_memory_equal(b.base + 9, big, 1000);
    assert_int_equal(b.base[b.len - 1], ']');
    assert_int_equal(b.base[b.len], '\0');
    /* exactly to the end of the capacity: len + n + 1 == cap, no growth */
    size_t room = b.cap - b.len - 1;
    assert_int_equal(room, 13);
    sg_buf_appendf(&b, "%*s", (int)room, "z");
    assert_int_equal(b.len, 1023);
    assert_int_equal(b.cap, 1024);
    assert_memory_equal(b.base + 1010, "            z", 14); /* and the NUL */
    sg_buf_appendf(&b, "%s", "");                            /* nothing to add */
    assert_int_equal(b.len, 1023);
    assert_int_equal(b.cap, 1024);
    sg_buf_appendf(&b, "!");
    assert_int_equal(b.len, 1024);
    assert_int_equal(b.cap, 2048);
    assert_string_equal(b.base + 1022, "z!");
    sg_buf_free(&b);
}

static void test_json_plain_and_escapes(void **state)
{
    (void)state;
    CHECK_JSON("", "\"\"");
    CHECK_JSON("hello world", "\"hello world\"");
    CHECK_JSON("say \"hi\"", "\"say \\\"hi\\\"\"");
    CHECK_JSON("a\\b", "\"a\\\\b\"");
    CHECK_JSON("/", "\"/\""); /* the solidus is not escaped */
    CHECK_JSON("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
    CHECK_JSON("\x01\x1f\x0b\x1b", "\"\\u0001\\u001f\\u000b\\u001b\"");
    CHECK_JSON("\x7f", "\"\x7f\"");      /* DEL is not a JSON control character: kept */
    CHECK_JSON("a\0b", "\"a\\u0000b\""); /* the length counts, not the NUL */
    /* every control character: the two-letter escape where JSON has one, \u00XX else */
    for (unsigned c = 0; c < 0x20; ++c) {
        char in = (char)c, want[9];
        const char *two = c == '\n' ? "n" : c == '\r' ? "r" : c == '\t' ? "t" : c == '\b' ? "b" : c == '\f' ? "f" : NULL;
        if (two != NULL)
            snprintf(want, sizeof(want), "\"\\%s\"", two);
        else
            snprintf(want, sizeof(want), "\"\\u%04x\"", c);
        check_json(&in, 1, want, strlen(want));
    }
}

static void test_json_utf8(void **state)
{
    (void)state;
    CHECK_JSON("caf\xc3\xa9", "\"caf\xc3\xa9\"");             /* 2 bytes kept raw */
    CHECK_JSON("\xe2\x82\xac 5", "\"\xe2\x82\xac 5\"");       /* 3 bytes */
    CHECK_JSON("\xf0\x9f\x98\x80!", "\"\xf0\x9f\x98\x80!\""); /* 4 bytes */
    CHECK_JSON("\xef\xbf\xbd", "\"\xef\xbf\xbd\"");           /* U+FFFD itself */
    CHECK_JSON("a\xff"
               "b",
               "\"a" FFFD "b\"");                                              /* never a UTF-8 byte */
    CHECK_JSON("\x80\x80", "\"" FFFD FFFD "\"");                               /* one per lone continuation */
    CHECK_JSON("\xc3", "\"" FFFD "\"");                                        /* truncated at the end */
    CHECK_JSON("\xe2\x82x", "\"" FFFD FFFD "x\"");                             /* cut short: per byte */
    CHECK_JSON("\xc0\xaf", "\"" FFFD FFFD "\"");                               /* overlong '/' */
    CHECK_JSON("\xed\xa0\x80", "\"" FFFD FFFD FFFD "\"");                      /* a surrogate, U+D800 */
    CHECK_JSON("\xf4\x90\x80\x80", "\"" FFFD FFFD FFFD FFFD "\"");             /* above U+10FFFF */
    CHECK_JSON("\xc3\"", "\"" FFFD "\\\"\"");                                  /* the quote after is escaped */
    CHECK_JSON("\xc3\xa9\x01\xe2\x82\xac", "\"\xc3\xa9\\u0001\xe2\x82\xac\""); /* mixed */
}

static void test_json_appends(void **state)
{
    (void)state;
    /* appended after what the buffer has, growing it across many literals */
    sg_buf_t b = {0};
    sg_buf_appends(&b, "{");
    for (int i = 0; i < 200; ++i) {
        if (i > 0)
            sg_buf_appendc(&b, ',');
        sg_buf_append_json_string(&b, "k\"\n\xc3\xa9", 5);
    }
    sg_buf_appendc(&b, '}');
    const char one[] = "\"k\\\"\\n\xc3\xa9\"";
    size_t n1 = sizeof(one) - 1;
    assert_int_equal(b.len, 2 + 200 * n1 + 199);
    assert_int_equal(b.base[0], '{');
    for (int i = 0; i < 200; ++i)
        assert_memory_equal(b.base + 1 + (size_t)i * (n1 + 1), one, n1);
    assert_int_equal(b.base[b.len - 1], '}');
    assert_int_equal(b.base[b.len], '\0');
    sg_buf_free(&b);
}

static size_t seq(const char *s, size_t n)
{
    return sg_utf8_seq_len((const unsigned char *)s, n);
}

static void test_utf8_seq_len(void **state)
{
    (void)state;
    assert_int_equal(seq("", 0), 0);
    assert_int_equal(seq("a", 0), 0); /* n counts, not the byte */
    assert_int_equal(seq("a", 1), 1);
    assert_int_equal(seq("\x00", 1), 1);
    assert_int_equal(seq("\x7f", 1), 1);
    /* 2 bytes: C2..DF then a continuation */
    assert_int_equal(seq("\xc2\x80", 2), 2); /* U+0080, the lowest */
    assert_int_equal(seq("\xdf\xbf", 2), 2); /* U+07FF */
    assert_int_equal(seq("\xc2\x80", 1), 0); /* truncated */
    assert_int_equal(seq("\xc2\x41", 2), 0); /* no continuation */
    assert_int_equal(seq("\xc0\x80", 2), 0); /* overlong (C0, C1 never start one) */
    assert_int_equal(seq("\xc1\xbf", 2), 0);
    assert_int_equal(seq("\x80", 1), 0); /* a continuation cannot start */
    assert_int_equal(seq("\xbf", 1), 0);
    /* 3 bytes */
    assert_int_equal(seq("\xe0\xa0\x80", 3), 3); /* U+0800 */
    assert_int_equal(seq("\xe0\x9f\xbf", 3), 0); /* overlong U+07FF */
    assert_int_equal(seq("\xe2\x82\xac", 3), 3); /* the euro sign */
    assert_int_equal(seq("\xe2\x82\xac", 2), 0); /* truncated */
    assert_int_equal(seq("\xe2\x82\x41", 3), 0);
    assert_int_equal(seq("\xe2\x41\xac", 3), 0);
    assert_int_equal(seq("\xed\x9f\xbf", 3), 3); /* U+D7FF, just below the surrogates */
    assert_int_equal(seq("\xed\xa0\x80", 3), 0); /* U+D800 */
    assert_int_equal(seq("\xed\xbf\xbf", 3), 0); /* U+DFFF */
    assert_int_equal(seq("\xee\x80\x80", 3), 3); /* U+E000 */
    assert_int_equal(seq("\xef\xbf\xbf", 3), 3); /* U+FFFF */
    /* 4 bytes */
    assert_int_equal(seq("\xf0\x90\x80\x80", 4), 4); /* U+10000 */
    assert_int_equal(seq("\xf0\x8f\xbf\xbf", 4), 0); /* overlong U+FFFF */
    assert_int_equal(seq("\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(seq("\xf0\x9f\x98\x80", 3), 0); /* truncated */
    assert_int_equal(seq("\xf0\x9f\x98\x41", 4), 0);
    assert_int_equal(seq("\xf0\x9f\x41\x80", 4), 0);
    assert_int_equal(seq("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF, the last */
    assert_int_equal(seq("\xf4\x90\x80\x80", 4), 0); /* U+110000 */
    assert_int_equal(seq("\xf5\x80\x80\x80", 4), 0); /* F5..FF never start one */
    assert_int_equal(seq("\xf8\x88\x80\x80\x80", 5), 0);
    assert_int_equal(seq("\xff", 1), 0);
    /* only the first sequence counts */
    assert_int_equal(seq("\xc3\xa9\xc3\xa9", 4), 2);
    assert_int_equal(seq("a\xc3\xa9", 3), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_growth),         cmocka_unit_test(test_append_many),
        cmocka_unit_test(test_embedded_nul),           cmocka_unit_test(test_appendf),
        cmocka_unit_test(test_json_plain_and_escapes), cmocka_unit_test(test_json_utf8),
        cmocka_unit_test(test_json_appends),           cmocka_unit_test(test_utf8_seq_len),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
