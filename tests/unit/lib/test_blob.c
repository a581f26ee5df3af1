/* Unit tests: result blobs (lib/blob.c): the constructor, references, and both reply shapes spliced
 * from the bytes gateway/pipeline/dispatch.c builds (sg_blob_from_hits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "blob.h"
#include "json.h"
#include "server.h"
#include "dispatch.h"
#include "../cache/cache.h" /* the shapes survive the Redis value format */

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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_blob_shapes), cmocka_unit_test(test_blob_new)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
