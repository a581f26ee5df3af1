/* Unit tests: JSON output helpers and result splicing (gateway/json.c, gateway/dispatch.c blobs,
 * cache/cache.c value format). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "server.h"
#include "dispatch.h"
#include "../cache/cache.h"

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

/* Appends a blob's fragment in the shape return_scores asks for. */
static void append_fragment(const sg_blob_t *b, int return_scores, sg_buf_t *out)
{
    sg_buf_reserve(out, sg_blob_fragment_len(b, return_scores));
    out->len = (size_t)(sg_blob_write_fragment(b, return_scores, out->base + out->len) - out->base);
    out->base[out->len] = '\0';
}

static void test_blob_shapes(void **state)
{
    (void)state;
    sg_hit hits[2] = {{"{\"id\":\"1\",\"contents\":\"\\\"A\\\"\\nx\"}", 32, 0.75}, {"{\"id\":\"2\"}", 10, 0.5}};
    sg_hits h = {hits, 2};
    sg_blob_t *b = sg_blob_from_hits(&h);
    sg_buf_t out = {0};
    append_fragment(b, 1, &out);
    const char *scored =
        "[{\"document\":{\"id\":\"1\",\"contents\":\"\\\"A\\\"\\nx\"},\"score\":0.75},{\"document\":{\"id\":\"2\"},\"score\":0.5}]";
    assert_string_equal(out.base, scored);
    assert_int_equal(sg_blob_fragment_len(b, 1), strlen(scored));
    out.len = 0;
    append_fragment(b, 0, &out);
    const char *flat = "[{\"id\":\"1\",\"contents\":\"\\\"A\\\"\\nx\"},{\"id\":\"2\"}]";
    assert_string_equal(out.base, flat);
    assert_int_equal(sg_blob_fragment_len(b, 0), strlen(flat));
    char raw[256];
    char *end = sg_blob_write_fragment(b, 0, raw);
    assert_int_equal((size_t)(end - raw), strlen(flat));
    assert_memory_equal(raw, flat, strlen(flat));

    /* the Redis value format round-trips to byte-identical fragments in both shapes */
    sg_buf_t enc = {0};
    sg_cache_encode(&enc, b);
    sg_blob_t *d = sg_cache_decode(enc.base, enc.len, NULL);
    assert_non_null(d);
    out.len = 0;
    append_fragment(d, 1, &out);
    assert_string_equal(out.base, scored);
    out.len = 0;
    append_fragment(d, 0, &out);
    assert_string_equal(out.base, flat);
    sg_blob_release(d);

    /* an empty result */
    sg_hits none = {NULL, 0};
    sg_blob_t *e = sg_blob_from_hits(&none);
    out.len = 0;
    append_fragment(e, 0, &out);
    assert_string_equal(out.base, "[]");
    assert_int_equal(sg_blob_fragment_len(e, 0), 2);
    sg_blob_release(e);

    /* malformed cache values are misses, never crashes */
    const char *bad[] = {
        "", "SG1", "SG2 0\n[]", "SG1 1 0 99\n[{}]", "SG1 1 0\n[]", "SG1 0\nxx", "SG1 99999999999\n[]", "SG1 2 0 1\n[]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i)
        assert_null(sg_cache_decode(bad[i], strlen(bad[i]), NULL));
    sg_buf_free(&enc);
    sg_buf_free(&out);
    sg_blob_release(b);
}

/* A cached value's documents must lie inside its fragment's brackets, in order, without
 * overlapping: the flat reply is spliced from them, so a value that lists the same span many
 * times (a foreign or damaged Redis entry) would make a reply many times its size -- 4,000 copies
 * of a 1 kB fragment, a 4 MB reply from a 50 kB value, and with 100,000 copies of a large
 * fragment an allocation the gateway dies on. Found by the cache value fuzz target (tests/fuzz). */
/* sg_blob_new(): one reference, room for the documents, nothing else; a blob given up half-built
 * is released like a published one (ASan checks that nothing leaks). */
static void test_blob_new(void **state)
{
    (void)state;
    sg_blob_t *none = sg_blob_new(0);
    assert_int_equal(atomic_load(&none->refs), 1);
    assert_int_equal(none->n_hits, 0);
    assert_null(none->docs);
    assert_null(none->json);
    assert_int_equal(none->json_len, 0);
    sg_blob_release(none);

    sg_blob_t *b = sg_blob_new(3);
    assert_int_equal(b->n_hits, 3);
    assert_non_null(b->docs);
    b->docs[2].off = 7; /* all three slots are writable */
    b->docs[2].len = 9;
    assert_null(b->json);
    sg_blob_release(b); /* never published: freed as it is */

    sg_blob_t *p = sg_blob_new(1);
    p->json = sg_strdup("[{\"document\":{\"id\":\"1\"},\"score\":1}]");
    p->json_len = strlen(p->json);
    p->docs[0].off = 13;
    p->docs[0].len = 10;
    assert_ptr_equal(sg_blob_ref(p), p);
    assert_int_equal(atomic_load(&p->refs), 2);
    char flat[64];
    char *end = sg_blob_write_fragment(p, 0, flat);
    assert_int_equal(end - flat, sg_blob_fragment_len(p, 0));
    assert_memory_equal(flat, "[{\"id\":\"1\"}]", 12);
    sg_blob_release(p);
    assert_int_equal(atomic_load(&p->refs), 1);
    sg_blob_release(p);
}

static void test_cache_value_docs_bounded(void **state)
{
    (void)state;
    const char *bad[] = {
        "SG1 2 1 2 1 2\n[{},{}]", /* the same document twice */
        "SG1 2 4 2 1 2\n[{},{}]", /* out of order */
        "SG1 1 1 3\n[{}]",        /* takes the closing bracket */
        "SG1 1 0 3\n[{}]",        /* takes the opening bracket */
        "SG1 2 1 2 2 2\n[{},{}]", /* overlapping */
        "SG1 1 1 0\n[{}]",        /* empty */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_blob_t *b = sg_cache_decode(bad[i], strlen(bad[i]), NULL);
        if (b != NULL)
            fail_msg("accepted %s", bad[i]);
    }
    /* the amplification itself: n copies of the whole document */
    sg_buf_t v = {0};
    const size_t n = 4000, doc = 1000;
    sg_buf_appendf(&v, "SG1 %zu", n);
    for (size_t i = 0; i < n; ++i)
        sg_buf_appendf(&v, " 1 %zu", doc);
    sg_buf_appendc(&v, '\n');
    sg_buf_appendc(&v, '[');
    sg_buf_appendc(&v, '{');
    for (size_t i = 0; i < doc - 2; ++i)
        sg_buf_appendc(&v, ' ');
    sg_buf_appends(&v, "}]");
    sg_blob_t *b = sg_cache_decode(v.base, v.len, NULL);
    if (b != NULL) {
        size_t flat = sg_blob_fragment_len(b, 0);
        sg_blob_release(b);
        fail_msg("a %zu-byte value decoded into a %zu-byte reply", v.len, flat);
    }
    sg_buf_free(&v);
    /* documents back to back (no separator) keep the bound but are not the writer's shape: since
     * values are validated in full (test_cache_value_content) they are refused too */
    assert_null(sg_cache_decode("SG1 2 1 2 3 2\n[{}{}]", strlen("SG1 2 1 2 3 2\n[{}{}]"), NULL));
}

/* A value whose frame is right but whose content is not what the writer makes: served, its
 * fragment would splice invalid JSON into the reply ({"result":[[xxxxx]]}). Each is a miss with
 * a reason; the writer's own values, with every kind of score it writes, still decode. */
static void test_cache_value_content(void **state)
{
    (void)state;
    static const struct {
        const char *value, *what;
    } bad[] = {
        {"SG1 1 13 5\n[{\"document\":xxxxx,\"score\":1}]", "the issue's {\"result\":[[xxxxx]]}"},
        {"SG1 1 13 9\n[{\"document\":{\"a\":\"\x80\"},\"score\":1}]", "invalid UTF-8"},
        {"SG1 1 13 9\n[{\"document\":{\"a\":\"\x01\"},\"score\":1}]", "a raw control character"},
        {"SG1 1 13 8\n[{\"document\":{\"a\":01},\"score\":1}]", "a number outside the grammar"},
        {"SG1 1 13 3\n[{\"document\":{}x,\"score\":1}]", "a document with junk after it"},
        {"SG1 1 13 5\n[{\"document\":[1,2],\"score\":1}]", "a document that is not an object"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1.}]", "a bad score (the flat shape alone would be valid)"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":\"1\"}]", "a score that is a string"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1,\"x\":2}]", "a member beyond document and score"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1}", "no closing bracket"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1}x]", "junk after the last hit"},
        {"SG1 2 13 2 38 2\n[{\"document\":{},\"score\":1}{\"document\":{},\"score\":1}]", "a missing comma"},
        {"SG1 1 14 2\n[{\"document\": {},\"score\":1}]", "whitespace the writer never makes"},
        {"SG1 1 13 2\n[{\"score\":1,\"document\":{}}]", "members in another order"},
        {"SG1 0\n[{\"document\":{},\"score\":1}]", "a hit the header does not list"},
        {"SG1 50000 13 2\n[]", "more hits than the value can hold"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        const char *why = NULL;
        sg_blob_t *b = sg_cache_decode(bad[i].value, strlen(bad[i].value), &why);
        if (b != NULL)
            fail_msg("accepted a value with %s", bad[i].what);
        assert_non_null(why);
    }
    static const char *const good[] = {
        "SG1 0\n[]",
        "SG1 1 13 2\n[{\"document\":{},\"score\":null}]",
        "SG1 2 13 10 53 8\n[{\"document\":{\"id\":\"1\"},\"score\":-1.5e-7},{\"document\":{\"b\":[]},\"score\":0}]",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); ++i) {
        sg_blob_t *b = sg_cache_decode(good[i], strlen(good[i]), NULL);
        if (b == NULL)
            fail_msg("refused %s", good[i]);
        sg_blob_release(b);
    }
    /* a document nested deeper than any parser a client uses would read */
    sg_buf_t deep = {0}, v = {0};
    for (int i = 0; i < 600; ++i)
        sg_buf_appends(&deep, "{\"a\":");
    sg_buf_appends(&deep, "1");
    for (int i = 0; i < 600; ++i)
        sg_buf_appendc(&deep, '}');
    sg_buf_appendf(&v, "SG1 1 13 %zu\n[{\"document\":", deep.len);
    sg_buf_append(&v, deep.base, deep.len);
    sg_buf_appends(&v, ",\"score\":1}]");
    assert_null(sg_cache_decode(v.base, v.len, NULL));
    sg_buf_free(&deep);
    sg_buf_free(&v);
    /* what the writer makes from a plugin's documents (escapes, UTF-8, NaN scores) round-trips */
    sg_hit hits[3] = {{"{\"t\":\"\\u00e9 \xc3\xa9 \\\"\"}", 20, 0.25}, {"{\"n\":[1,{\"x\":null}]}", 20, NAN}, {"{}", 2, -3}};
    sg_hits h = {hits, 3};
    sg_blob_t *b = sg_blob_from_hits(&h);
    sg_buf_t enc = {0};
    sg_cache_encode(&enc, b);
    sg_blob_t *d = sg_cache_decode(enc.base, enc.len, NULL);
    assert_non_null(d);
    assert_int_equal(d->json_len, b->json_len);
    assert_memory_equal(d->json, b->json, b->json_len);
    sg_blob_release(d);
    sg_blob_release(b);
    sg_buf_free(&enc);
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_escape),
                                       cmocka_unit_test(test_double),
                                       cmocka_unit_test(test_writer),
                                       cmocka_unit_test(test_error_body),
                                       cmocka_unit_test(test_blob_shapes),
                                       cmocka_unit_test(test_blob_new),
                                       cmocka_unit_test(test_cache_value_docs_bounded),
                                       cmocka_unit_test(test_cache_value_content),
                                       cmocka_unit_test(test_validate_string_chunks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
