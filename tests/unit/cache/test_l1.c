/* Unit tests: the in-process LRU (cache/l1.c): byte budget, LRU order, expiry, replacement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "server.h"
#include "../cache/cache.h"

/* A blob holding `frag` (no documents located in it: L1 only counts and returns it). */
static sg_blob_t *blob_of(const char *frag)
{
    sg_blob_t *b = sg_blob_new(0);
    b->json = sg_strdup(frag);
    b->json_len = strlen(frag);
    return b;
}

static void test_hit_miss_expiry(void **state)
{
    (void)state;
    sg_l1_t *c = sg_l1_create(1 << 20);
    sg_blob_t *b = blob_of("[1]");
    sg_l1_put(c, "k1", 2, b, 1000);
    sg_blob_release(b);
    sg_blob_t *got = sg_l1_get(c, "k1", 2, 999);
    assert_non_null(got);
    assert_memory_equal(got->json, "[1]", 3);
    sg_blob_release(got);
    assert_null(sg_l1_get(c, "k2", 2, 999));
    assert_null(sg_l1_get(c, "k1", 2, 1000)); /* expired at its deadline */
    size_t bytes, entries;
    sg_l1_usage(c, &bytes, &entries);
    assert_int_equal(entries, 0);
    assert_int_equal(bytes, 0);
    sg_l1_destroy(c);
}

static void test_byte_budget_lru(void **state)
{
    (void)state;
    char frag[1000];
    memset(frag, 'x', sizeof(frag));
    frag[0] = '[';
    frag[sizeof(frag) - 1] = '\0';
    sg_l1_t *c = sg_l1_create(16 * 1024);
    for (int i = 0; i < 100; ++i) {
        char key[16];
        int n = snprintf(key, sizeof(key), "key%d", i);
        sg_blob_t *b = blob_of(frag);
        sg_l1_put(c, key, (size_t)n, b, UINT64_MAX);
        sg_blob_release(b);
        /* keep key0 hot: it must survive every eviction */
        sg_blob_t *hot = sg_l1_get(c, "key0", 4, 0);
        assert_non_null(hot);
        sg_blob_release(hot);
        size_t bytes, entries;
        sg_l1_usage(c, &bytes, &entries);
        assert_true(bytes <= 16 * 1024);
    }
    assert_null(sg_l1_get(c, "key1", 4, 0));
    sg_blob_t *last = sg_l1_get(c, "key99", 5, 0);
    assert_non_null(last);
    sg_blob_release(last);
    sg_l1_destroy(c);
}

static void test_replace_and_oversize(void **state)
{
    (void)state;
    sg_l1_t *c = sg_l1_create(4096);
    sg_blob_t *a = blob_of("[\"a\"]"), *b = blob_of("[\"b\"]");
    sg_l1_put(c, "k", 1, a, UINT64_MAX);
    sg_l1_put(c, "k", 1, b, UINT64_MAX);
    sg_blob_t *got = sg_l1_get(c, "k", 1, 0);
    assert_memory_equal(got->json, "[\"b\"]", 5);
    sg_blob_release(got);
    /* an entry over a quarter of the budget is not cached */
    char big[2000];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sg_blob_t *g = blob_of(big);
    sg_l1_put(c, "big", 3, g, UINT64_MAX);
    assert_null(sg_l1_get(c, "big", 3, 0));
    /* a blob evicted while still referenced stays valid for its holder */
    sg_blob_t *held = sg_l1_get(c, "k", 1, 0);
    sg_l1_destroy(c);
    assert_memory_equal(held->json, "[\"b\"]", 5);
    sg_blob_release(held);
    sg_blob_release(a);
    sg_blob_release(b);
    sg_blob_release(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hit_miss_expiry), cmocka_unit_test(test_byte_budget_lru),
                                       cmocka_unit_test(test_replace_and_oversize)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
