/*
 * hmap.c -- the one hash table (hmap.h): linear probing, backward-shift deletion, at most half full
 * (a miss then probes 2.5 slots on average, 4 to a cache line).
 */
#include "hmap.h"

#include <stdlib.h>

#define MIN_CAP 16

static size_t cap_for(size_t n)
{
    size_t cap = MIN_CAP;
    while (cap / 2 < n)
        cap *= 2;
    return cap;
}

void sg_hmap_init(sg_hmap_t *m, sg_hmap_eq_fn eq, const void *ud, size_t expect)
{
    m->slots = NULL;
    m->cap = expect != 0 ? cap_for(expect) : 0;
    m->n = 0;
    m->eq = eq;
    m->ud = ud;
}

void sg_hmap_dispose(sg_hmap_t *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

void sg_hmap_clear(sg_hmap_t *m)
{
    if (m->slots != NULL)
        memset(m->slots, 0, m->cap * sizeof(*m->slots));
    m->n = 0;
}

/* Places an item known to be absent into the first free slot of its probe sequence. */
static inline void place(sg_hmap_slot_t *slots, size_t mask, uint64_t hash, void *item)
{
    size_t i = (size_t)hash & mask;
    while (slots[i].item != NULL)
        i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].item = item;
}

/* Allocates the first slots, or doubles the table. */
static __attribute__((noinline)) void grow(sg_hmap_t *m)
{
    size_t cap = m->slots == NULL ? (m->cap != 0 ? m->cap : MIN_CAP) : m->cap * 2;
    sg_hmap_slot_t *slots = sg_mem_calloc(cap, sizeof(*slots));
    for (size_t i = 0; m->slots != NULL && i < m->cap; ++i)
        if (m->slots[i].item != NULL)
            place(slots, cap - 1, m->slots[i].hash, m->slots[i].item);
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
}

/* Makes room for one more item: past half full, the table doubles. */
static inline void reserve_one(sg_hmap_t *m)
{
    if (m->slots == NULL || m->n + 1 > m->cap / 2)
        grow(m);
}

void *sg__hmap_find_from(const sg_hmap_t *m, size_t i, uint64_t hash, const void *key, size_t key_len)
{
    size_t mask = m->cap - 1;
    for (;; i = (i + 1) & mask) {
        const sg_hmap_slot_t *s = &m->slots[i];
        if (s->item == NULL)
            return NULL;
        if (s->hash == hash && m->eq(s->item, key, key_len, m->ud))
            return s->item;
    }
}

void sg_hmap_insert(sg_hmap_t *m, uint64_t hash, void *item)
{
    reserve_one(m);
    place(m->slots, m->cap - 1, hash, item);
    ++m->n;
}

/* The slot holding an item equal to `key`, or the free slot that ends its probe sequence. */
static inline sg_hmap_slot_t *probe(sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len)
{
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash & mask;
    while (m->slots[i].item != NULL && !(m->slots[i].hash == hash && m->eq(m->slots[i].item, key, key_len, m->ud)))
        i = (i + 1) & mask;
    return &m->slots[i];
}

void *sg_hmap_find_or_insert(sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len, void *item)
{
    reserve_one(m);
    sg_hmap_slot_t *s = probe(m, hash, key, key_len);
    if (s->item != NULL)
        return s->item;
    s->hash = hash;
    s->item = item;
    ++m->n;
    return item;
}

void *sg_hmap_put(sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len, void *item)
{
    reserve_one(m);
    sg_hmap_slot_t *s = probe(m, hash, key, key_len);
    void *old = s->item;
    if (old == NULL) {
        s->hash = hash;
        ++m->n;
    }
    s->item = item;
    return old;
}

int sg_hmap_remove(sg_hmap_t *m, uint64_t hash, const void *item)
{
    sg_hmap_slot_t *slots = m->slots;
    if (slots == NULL)
        return 0;
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash & mask;
    for (; slots[i].item != item; i = (i + 1) & mask)
        if (slots[i].item == NULL)
            return 0;
    /* backward shift: pull each later member of the cluster into the hole unless that would put
     * it before its home slot */
    for (size_t j = (i + 1) & mask; slots[j].item != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            slots[i] = slots[j];
            i = j;
        }
    }
    slots[i].item = NULL;
    slots[i].hash = 0;
    --m->n;
    return 1;
}

void *sg_hmap_next(const sg_hmap_t *m, size_t *pos)
{
    for (size_t i = *pos; m->slots != NULL && i < m->cap; ++i)
        if (m->slots[i].item != NULL) {
            *pos = i + 1;
            return m->slots[i].item;
        }
    *pos = m->cap;
    return NULL;
}
