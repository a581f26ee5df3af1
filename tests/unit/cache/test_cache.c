/* Unit tests: the result cache's keys and its Redis value format (cache/cache.c): a key with search
 * parameters, and values read back only when they are exactly what the writer makes. Built twice,
 * like lib/test_json.c: unit_cache and unit_cache_portable (lib/json.c's portable string scan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "json.h"
#include "server.h"
#include "dispatch.h"
#include "../cache/cache.h"

/* The key of a request with search parameters differs from the plain one (and from other
 * parameters); without parameters ("" or NULL) it is the key every earlier release wrote. */
static void test_key_params(void **state)
{
    (void)state;
    sg_route_core_t b; /* the route's half that holds its cache identity */
    memset(&b, 0, sizeof(b));
    b.identity = "local|local|1.0.0|x";
    sg_buf_t k0 = {0}, k1 = {0}, k2 = {0}, k3 = {0}, k4 = {0};
    sg_cache_key(&k0, b.identity, 3, NULL, "who wrote hamlet", 16);
    sg_cache_key(&k1, b.identity, 3, "", "who wrote hamlet", 16);
    sg_cache_key(&k2, b.identity, 3, "nprobe=8", "who wrote hamlet", 16);
    sg_cache_key(&k3, b.identity, 3, "nprobe=16", "who wrote hamlet", 16);
    sg_cache_key(&k4, b.identity, 3, "nprobe=8", "who wrote hamlet", 16);
    const char plain[] = "local|local|1.0.0|x\x1f"
                         "3\x1fwho wrote hamlet";
    assert_int_equal(k0.len, sizeof(plain) - 1);
    assert_memory_equal(k0.base, plain, k0.len);
    assert_true(k1.len == k0.len && memcmp(k1.base, k0.base, k0.len) == 0);
    assert_false(k2.len == k0.len && memcmp(k2.base, k0.base, k0.len) == 0);
    assert_false(k2.len == k3.len && memcmp(k2.base, k3.base, k2.len) == 0);
    assert_true(k2.len == k4.len && memcmp(k2.base, k4.base, k2.len) == 0);
    sg_buf_free(&k0);
    sg_buf_free(&k1);
    sg_buf_free(&k2);
    sg_buf_free(&k3);
    sg_buf_free(&k4);
}

/* What the lookup answers (before returning: no Redis). */
typedef struct {
    int calls;
    uint32_t n;
    sg_blob_t *blobs[4];
    uint8_t tier[4];
    sg_l1_miss_t *misses[4];
    uint32_t key_off[4], key_len[4];
} answered_t;

static void on_answer(void *ctx, const sg_cache_answer_t *a)
{
    answered_t *got = ctx;
    ++got->calls;
    got->n = a->n;
    for (uint32_t i = 0; i < a->n && i < 4; ++i) {
        got->blobs[i] = a->blobs[i];
        got->tier[i] = a->tier[i];
        got->misses[i] = a->misses[i];
        got->key_off[i] = a->key_off[i];
        got->key_len[i] = a->key_len[i];
    }
}

/* The lookup makes each text's key once (sg_cache_key's bytes), appends it to the caller's buffer
 * and says where, so that the caller stores the misses' answers under the same bytes; it finds
 * what was stored under them, and leaves L1's watch on a key it missed, which the store fills. */
static void test_lookup_makes_the_keys(void **state)
{
    (void)state;
    sg_cache_init(1 << 20, "");
    const char *identity = "local|local|1.0.0|x";
    sg_buf_t want = {0}, keys = {0};
    sg_cache_key(&want, identity, 5, "nprobe=8", "beta", 4);
    sg_hit hit = {"{\"id\":\"b\"}", 10, 1.0};
    sg_hits hits = {&hit, 1};
    sg_blob_t *stored = sg_blob_from_hits(&hits);
    sg_cache_put_l1(want.base, want.len, stored, 60);
    sg_buf_appends(&keys, "earlier"); /* the lookup appends */
    const char *texts[] = {"alpha", "beta"};
    const uint32_t lens[] = {5, 4};
    answered_t got = {0};
    sg_cache_lookup_t req = {identity, 5, "nprobe=8", 2, texts, lens, 60, &keys};
    sg_cache_lookup(NULL, &req, on_answer, &got);
    assert_int_equal(got.calls, 1);
    assert_int_equal(got.n, 2);
    assert_null(got.blobs[0]);
    assert_ptr_equal(got.blobs[1], stored);
    assert_int_equal(got.tier[1], SG_CACHE_L1);
    assert_null(got.misses[1]);
    assert_non_null(got.misses[0]);
    assert_null(sg_l1_miss_result(got.misses[0], 0));
    assert_int_equal(got.key_off[0], 7);
    assert_int_equal(got.key_off[1], 7 + got.key_len[0]);
    assert_int_equal(keys.len, 7 + got.key_len[0] + got.key_len[1]);
    assert_int_equal(got.key_len[1], want.len);
    assert_memory_equal(keys.base + got.key_off[1], want.base, want.len);
    sg_cache_key(&want, identity, 5, "nprobe=8", "alpha", 5);
    assert_int_equal(got.key_len[0], want.len);
    assert_memory_equal(keys.base + got.key_off[0], want.base, want.len);
    sg_cache_put_l1(keys.base + got.key_off[0], got.key_len[0], stored, 60); /* the miss's answer */
    sg_blob_t *late = sg_l1_miss_result(got.misses[0], sg_now_ms());
    assert_ptr_equal(late, stored);
    sg_blob_release(late);
    sg_l1_miss_release(got.misses[0]);
    sg_blob_release(got.blobs[1]);
    sg_blob_release(stored);
    sg_buf_free(&want);
    sg_buf_free(&keys);
    sg_cache_dispose();
}

/* A cached value's documents must lie inside its fragment's brackets, in order, without
 * overlapping: the flat reply is spliced from them, so a value that lists the same span many
 * times (a foreign or damaged Redis entry) would make a reply many times its size -- 4,000 copies
 * of a 1 kB fragment, a 4 MB reply from a 50 kB value, and with 100,000 copies of a large
 * fragment an allocation the gateway dies on. Found by the cache value fuzz target (tests/fuzz). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_key_params), cmocka_unit_test(test_lookup_makes_the_keys),
                                       cmocka_unit_test(test_cache_value_docs_bounded), cmocka_unit_test(test_cache_value_content)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
