/* Unit tests: the one hash table (lib/hmap.c), against a plain array as the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hmap.h"

#define N_KEYS 700

typedef struct {
    char key[16];
    size_t len;
    int in; /* the reference: whether the table should hold it */
} item_t;

static item_t items[N_KEYS];

static int item_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const item_t *it = item;
    assert_ptr_equal(ud, items); /* the table's own argument reaches the callback */
    return it->len == key_len && memcmp(it->key, key, key_len) == 0;
}

/* A hash with few distinct values puts long clusters across the end of the slot array, which is
 * where backward-shift deletion can go wrong; the real hash checks the ordinary case. */
static uint64_t weak_hash(const item_t *it)
{
    return sg_hmap_hash(it->key, it->len) % 5 * 0x0f0f0f0full + 13;
}

static uint64_t hash_of(const item_t *it, int weak)
{
    return weak ? weak_hash(it) : sg_hmap_hash(it->key, it->len);
}

static void check_against_reference(const sg_hmap_t *m, int weak)
{
    size_t n = 0;
    for (size_t k = 0; k < N_KEYS; ++k) {
        void *got = sg_hmap_find(m, hash_of(&items[k], weak), items[k].key, items[k].len);
        assert_ptr_equal(got, items[k].in ? &items[k] : NULL);
        n += items[k].in != 0;
    }
    assert_int_equal(sg_hmap_size(m), n);
    /* iteration visits each member once */
    static unsigned char seen[N_KEYS];
    memset(seen, 0, sizeof(seen));
    size_t pos = 0, visited = 0;
    item_t *it;
    while ((it = sg_hmap_next(m, &pos)) != NULL) {
        size_t k = (size_t)(it - items);
        assert_true(k < N_KEYS && it->in && !seen[k]);
        seen[k] = 1;
        ++visited;
    }
    assert_int_equal(visited, n);
}

static void randomized(int weak, unsigned seed, size_t expect)
{
    srand(seed);
    for (size_t k = 0; k < N_KEYS; ++k) {
        items[k].len = (size_t)snprintf(items[k].key, sizeof(items[k].key), "key-%zu", k * 7919 % 100003);
        items[k].in = 0;
    }
    sg_hmap_t m;
    sg_hmap_init(&m, item_eq, items, expect);
    for (int round = 0; round < 20000; ++round) {
        item_t *it = &items[(size_t)rand() % N_KEYS];
        uint64_t h = hash_of(it, weak);
        switch (rand() % 6) {
        case 0: /* insert when absent */
            if (!it->in) {
                sg_hmap_insert(&m, h, it);
                it->in = 1;
            }
            break;
        case 1: { /* find or insert */
            void *got = sg_hmap_find_or_insert(&m, h, it->key, it->len, it);
            assert_ptr_equal(got, it);
            it->in = 1;
            break;
        }
        case 2:
        case 3: /* remove */
            assert_int_equal(sg_hmap_remove(&m, h, it), it->in);
            it->in = 0;
            break;
        case 4: /* put: the item itself comes back when it was there */
            assert_ptr_equal(sg_hmap_put(&m, h, it->key, it->len, it), it->in ? it : NULL);
            it->in = 1;
            break;
        default: /* look up an equal key held elsewhere: compared by bytes, not by address */
        {
            char copy[16];
            memcpy(copy, it->key, it->len);
            assert_ptr_equal(sg_hmap_find(&m, h, copy, it->len), it->in ? it : NULL);
        }
        }
        if (round % 997 == 0)
            check_against_reference(&m, weak);
    }
    check_against_reference(&m, weak);
    /* fill it completely, then empty it by removal: the table grows and ends empty */
    for (size_t k = 0; k < N_KEYS; ++k)
        if (!items[k].in) {
            sg_hmap_insert(&m, hash_of(&items[k], weak), &items[k]);
            items[k].in = 1;
        }
    check_against_reference(&m, weak);
    assert_true(m.n * 2 <= m.cap);
    for (size_t k = N_KEYS; k-- > 0;) {
        assert_int_equal(sg_hmap_remove(&m, hash_of(&items[k], weak), &items[k]), 1);
        items[k].in = 0;
    }
    check_against_reference(&m, weak);
    sg_hmap_dispose(&m);
}

static void test_randomized_real_hash(void **state)
{
    (void)state;
    randomized(0, 1, 0);
    randomized(0, 2, 1000);
}

static void test_randomized_colliding_hash(void **state)
{
    (void)state;
    randomized(1, 3, 0);
    randomized(1, 4, 5);
}

static void test_empty_and_clear(void **state)
{
    (void)state;
    sg_hmap_t m;
    sg_hmap_init(&m, item_eq, items, 0);
    assert_null(sg_hmap_find(&m, 1, "x", 1)); /* nothing allocated yet */
    assert_int_equal(sg_hmap_remove(&m, 1, &items[0]), 0);
    size_t pos = 0;
    assert_null(sg_hmap_next(&m, &pos));
    items[0].len = (size_t)snprintf(items[0].key, sizeof(items[0].key), "a");
    sg_hmap_insert(&m, sg_hmap_hash("a", 1), &items[0]);
    assert_ptr_equal(sg_hmap_find(&m, sg_hmap_hash("a", 1), "a", 1), &items[0]);
    assert_int_equal(sg_hmap_remove(&m, sg_hmap_hash("a", 1), &items[1]), 0); /* another item: not there */
    size_t cap = m.cap;
    sg_hmap_clear(&m);
    assert_int_equal(sg_hmap_size(&m), 0);
    assert_int_equal(m.cap, cap);
    assert_null(sg_hmap_find(&m, sg_hmap_hash("a", 1), "a", 1));
    sg_hmap_dispose(&m);
}

/* put replaces the item of an equal key (another object), and the old one is no longer found */
static void test_put_replaces(void **state)
{
    (void)state;
    item_t a = {"same", 4, 0}, b = {"same", 4, 0};
    sg_hmap_t m;
    sg_hmap_init(&m, item_eq, items, 0);
    uint64_t h = sg_hmap_hash("same", 4);
    assert_null(sg_hmap_put(&m, h, "same", 4, &a));
    assert_ptr_equal(sg_hmap_put(&m, h, "same", 4, &b), &a);
    assert_int_equal(sg_hmap_size(&m), 1);
    assert_ptr_equal(sg_hmap_find(&m, h, "same", 4), &b);
    assert_int_equal(sg_hmap_remove(&m, h, &a), 0);
    assert_int_equal(sg_hmap_remove(&m, h, &b), 1);
    assert_int_equal(sg_hmap_size(&m), 0);
    sg_hmap_dispose(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_randomized_real_hash),
                                       cmocka_unit_test(test_randomized_colliding_hash), cmocka_unit_test(test_empty_and_clear),
                                       cmocka_unit_test(test_put_replaces)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
