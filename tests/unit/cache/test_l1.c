/* Unit tests: the in-process LRU (cache/l1.c): byte budget, LRU order, expiry, replacement, and
 * the watches a lookup that misses leaves on its key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "server.h"
#include "metrics.h"
#include "../cache/cache.h"

/* A blob holding `frag` (no documents located in it: L1 only counts and returns it). */
static sg_blob_t *blob_of(const char *frag)
{
    sg_blob_t *b = sg_blob_new(0);
    b->json = sg_strdup(frag);
    b->json_len = strlen(frag);
    return b;
}

/* The value of the gauge searchgate_cache_l1_pending in /metrics. */
static long pending_gauge(void)
{
    sg_buf_t out = {0};
    sg_metrics_render(&out);
    sg_buf_append(&out, "", 1);
    const char *line = strstr(out.base, "\nsearchgate_cache_l1_pending ");
    assert_non_null(line);
    long v = strtol(line + strlen("\nsearchgate_cache_l1_pending "), NULL, 10);
    sg_buf_free(&out);
    return v;
}

/* Stores an entry of about 1 KB under "key<i>", never expiring. */
static void put_filler(sg_l1_t *c, int i)
{
    char frag[1000], key[16];
    memset(frag, 'x', sizeof(frag));
    frag[0] = '[';
    frag[sizeof(frag) - 1] = '\0';
    int n = snprintf(key, sizeof(key), "key%d", i);
    sg_blob_t *b = blob_of(frag);
    sg_l1_put(c, key, (size_t)n, b, UINT64_MAX);
    sg_blob_release(b);
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
    sg_l1_t *c = sg_l1_create(16 * 1024);
    for (int i = 0; i < 100; ++i) {
        put_filler(c, i);
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

/* A lookup that misses leaves a watch on the key, which a later miss of the same key shares and
 * the next store fills -- with that store's expiry; the pending key is no entry (no bytes, not
 * counted) and a hit leaves no watch. */
static void test_watch_filled_by_the_store(void **state)
{
    (void)state;
    sg_l1_t *c = sg_l1_create(1 << 20);
    sg_l1_miss_t *m1, *m2, *m3;
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m1));
    assert_non_null(m1);
    assert_null(sg_l1_miss_result(m1, 0)); /* nothing stored yet */
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m2));
    assert_ptr_equal(m2, m1); /* one watch per key */
    assert_null(sg_l1_get(c, "k", 1, 0));
    size_t bytes, entries;
    sg_l1_usage(c, &bytes, &entries);
    assert_int_equal(entries, 0);
    assert_int_equal(bytes, 0);
    sg_blob_t *b = blob_of("[1]");
    sg_l1_put(c, "k", 1, b, 1000);
    sg_blob_t *got = sg_l1_miss_result(m1, 999);
    assert_ptr_equal(got, b);
    sg_blob_release(got);
    assert_null(sg_l1_miss_result(m1, 1000)); /* expired with the entry it was filled from */
    sg_l1_usage(c, &bytes, &entries);
    assert_int_equal(entries, 1);
    sg_l1_miss_release(m1);
    sg_l1_miss_release(m2);
    got = sg_l1_lookup(c, "k", 1, 0, &m3); /* a hit: nothing to watch */
    assert_ptr_equal(got, b);
    assert_null(m3);
    sg_blob_release(got);
    sg_blob_release(b);
    sg_l1_destroy(c);
}

/* The watch keeps the result its store left even once the entry is replaced or evicted -- the
 * holder (a request between its cache lookup and its dispatch) must see that a result arrived;
 * an entry too large to be cached fills nothing. */
static void test_watch_outlives_its_entry(void **state)
{
    (void)state;
    sg_l1_t *c = sg_l1_create(16 * 1024);
    sg_l1_miss_t *m, *big_m;
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m));
    sg_blob_t *b = blob_of("[\"k\"]");
    sg_l1_put(c, "k", 1, b, UINT64_MAX);
    for (int i = 0; i < 40; ++i) /* evicts "k" */
        put_filler(c, i);
    assert_null(sg_l1_get(c, "k", 1, 0));
    sg_blob_t *got = sg_l1_miss_result(m, 0);
    assert_ptr_equal(got, b);
    sg_blob_release(got);
    sg_l1_miss_release(m);
    char huge[5000];
    memset(huge, 'y', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    sg_blob_t *g = blob_of(huge);
    assert_null(sg_l1_lookup(c, "big", 3, 0, &big_m));
    sg_l1_put(c, "big", 3, g, UINT64_MAX);
    assert_null(sg_l1_miss_result(big_m, 0)); /* not cached: not filled */
    sg_l1_miss_release(big_m);
    sg_blob_release(g);
    sg_blob_release(b);
    sg_l1_destroy(c);
}

/* The last holder of a watch no store filled gives the key's place up: the next miss gets a
 * fresh watch, which the next store fills; and a watch may outlive the cache (shutdown). */
static void test_watch_given_up(void **state)
{
    (void)state;
    sg_l1_t *c = sg_l1_create(1 << 20);
    sg_l1_miss_t *m1, *m2, *m3;
    size_t bytes, entries;
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m1));
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m2));
    assert_int_equal(pending_gauge(), 1); /* two misses, one key's place */
    sg_l1_miss_release(m1);               /* m2 still holds it */
    assert_null(sg_l1_miss_result(m2, 0));
    sg_l1_miss_release(m2);           /* the last: the key's place goes */
    sg_l1_usage(c, &bytes, &entries); /* (the gauges follow each lookup and store) */
    assert_null(sg_l1_get(c, "k", 1, 0));
    assert_int_equal(pending_gauge(), 0);
    assert_null(sg_l1_lookup(c, "k", 1, 0, &m3));
    sg_blob_t *b = blob_of("[3]");
    sg_l1_put(c, "k", 1, b, UINT64_MAX);
    sg_blob_t *got = sg_l1_miss_result(m3, 0);
    assert_ptr_equal(got, b);
    sg_blob_release(got);
    sg_l1_miss_release(m3);
    sg_l1_usage(c, &bytes, &entries);
    assert_int_equal(entries, 1);
    assert_null(sg_l1_lookup(c, "other", 5, 0, &m1));
    sg_l1_destroy(c); /* m1 outlives it */
    assert_null(sg_l1_miss_result(m1, 0));
    sg_l1_miss_release(m1);
    sg_blob_release(b);
}

/* Threads that look keys up (leaving watches), store them, read and release their watches at
 * once or after the next store, all racing on a few keys: under ASan a watch freed twice or too
 * early, or one never freed, fails the test; at the end no key's place is left pending and every
 * filled watch saw the result of a store of its own key. */
enum { RACE_THREADS = 4, RACE_KEYS = 8, RACE_ROUNDS = 20000 };
static sg_l1_t *race_cache;
static sg_blob_t *race_blobs[RACE_KEYS];
static _Atomic unsigned race_wrong;

static void *race_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    sg_l1_miss_t *held[RACE_KEYS] = {0};
    for (int i = 0; i < RACE_ROUNDS; ++i) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % RACE_KEYS), op = (int)((seed >> 20) % 4);
        char key[8];
        int n = snprintf(key, sizeof(key), "r%d", k);
        if (op == 0) { /* store (a short TTL: entries expire and are dropped as the clock runs) */
            sg_l1_put(race_cache, key, (size_t)n, race_blobs[k], (uint64_t)i + 50);
        } else if (held[k] == NULL) { /* look up, keep the watch */
            sg_blob_t *b = sg_l1_lookup(race_cache, key, (size_t)n, (uint64_t)i, &held[k]);
            sg_blob_release(b);
        } else { /* read the watch, let it go */
            sg_blob_t *b = sg_l1_miss_result(held[k], 0);
            if (b != NULL && b != race_blobs[k])
                atomic_fetch_add(&race_wrong, 1);
            sg_blob_release(b);
            sg_l1_miss_release(held[k]);
            held[k] = NULL;
        }
    }
    for (int k = 0; k < RACE_KEYS; ++k)
        sg_l1_miss_release(held[k]);
    return NULL;
}

static void test_watch_races(void **state)
{
    (void)state;
    race_cache = sg_l1_create(1 << 20);
    for (int k = 0; k < RACE_KEYS; ++k) {
        char frag[16];
        snprintf(frag, sizeof(frag), "[%d]", k);
        race_blobs[k] = blob_of(frag);
    }
    pthread_t t[RACE_THREADS];
    for (uintptr_t i = 0; i < RACE_THREADS; ++i)
        assert_int_equal(pthread_create(&t[i], NULL, race_thread, (void *)i), 0);
    for (int i = 0; i < RACE_THREADS; ++i)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&race_wrong), 0);
    assert_null(sg_l1_get(race_cache, "r0", 2, UINT64_MAX - 1)); /* (refreshes the gauges) */
    assert_int_equal(pending_gauge(), 0);
    sg_l1_destroy(race_cache);
    for (int k = 0; k < RACE_KEYS; ++k)
        sg_blob_release(race_blobs[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hit_miss_expiry),
                                       cmocka_unit_test(test_byte_budget_lru),
                                       cmocka_unit_test(test_replace_and_oversize),
                                       cmocka_unit_test(test_watch_filled_by_the_store),
                                       cmocka_unit_test(test_watch_outlives_its_entry),
                                       cmocka_unit_test(test_watch_given_up),
                                       cmocka_unit_test(test_watch_races)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
