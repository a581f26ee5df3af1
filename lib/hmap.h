/*
 * hmap.h -- the one hash table of the tree: an index from keys to the caller's items.
 *
 * Open addressing with linear probing and backward-shift deletion (no tombstones, so lookups stay
 * short however many removals happen); the capacity is a power of two and the table is kept at
 * most half full, growing by doubling. A slot holds an item's 64-bit hash and a pointer to the
 * item: the table owns no item, allocates only when it grows, never on a lookup, and compares
 * keys only when the full 64-bit hashes match.
 *
 * Keys live in the items. The table's `eq` callback says whether an item has a given key: most
 * tables key by bytes (hash them with sg_hmap_hash), a few by a composite the caller hashes itself
 * (sg_hash64 over its parts) and passes to `eq` as a struct. Not thread-safe: callers hold their
 * own lock around every call.
 */
#ifndef SG_LIB_HMAP_H
#define SG_LIB_HMAP_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

/** Whether `item` has the key `key` (`key_len` bytes, or whatever the caller passes); `ud` is the table's. */
typedef int (*sg_hmap_eq_fn)(const void *item, const void *key, size_t key_len, const void *ud);

typedef struct st_sg_hmap_slot_t {
    uint64_t hash;
    void *item; /* NULL: empty */
} sg_hmap_slot_t;

typedef struct st_sg_hmap_t {
    sg_hmap_slot_t *slots;
    size_t cap; /* 0 (nothing allocated yet) or a power of two */
    size_t n;
    sg_hmap_eq_fn eq;
    const void *ud;
} sg_hmap_t;

/** The hash of a byte-string key, for tables keyed by bytes. */
static inline uint64_t sg_hmap_hash(const void *key, size_t len)
{
    return sg_hash64(key, len, 0x4a5b6c7d8e9f0a1bull);
}

/** An empty table; room for `expect` items is allocated at the first insertion (0: a small table). */
void sg_hmap_init(sg_hmap_t *m, sg_hmap_eq_fn eq, const void *ud, size_t expect);
/** Frees the slots (not the items); the table can be initialised again. */
void sg_hmap_dispose(sg_hmap_t *m);
/** Forgets every item and keeps the capacity. */
void sg_hmap_clear(sg_hmap_t *m);

/* the rest of sg_hmap_find from slot `i`, whose hash matches (hmap.c) */
void *sg__hmap_find_from(const sg_hmap_t *m, size_t i, uint64_t hash, const void *key, size_t key_len);

/** The item with this key, or NULL. Inline up to the first slot with an equal hash: a probe that
 * meets none costs no call. */
static inline void *sg_hmap_find(const sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len)
{
    const sg_hmap_slot_t *slots = m->slots;
    if (slots == NULL)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        if (slots[i].item == NULL)
            return NULL;
        if (slots[i].hash == hash)
            return sg__hmap_find_from(m, i, hash, key, key_len);
    }
}
/** Adds `item` (not NULL) under `hash`; its key must not be in the table yet. */
void sg_hmap_insert(sg_hmap_t *m, uint64_t hash, void *item);
/** The item with this key if there is one, else inserts `item` and returns it: one probe for both. */
void *sg_hmap_find_or_insert(sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len, void *item);
/** Puts `item` under its key, in place of the item that had that key: returns that item (which
 * the table no longer holds), or NULL when the key was new. One probe for both. */
void *sg_hmap_put(sg_hmap_t *m, uint64_t hash, const void *key, size_t key_len, void *item);
/** Removes `item` itself (found by identity under its hash); returns 1, or 0 when it is not in the table. */
int sg_hmap_remove(sg_hmap_t *m, uint64_t hash, const void *item);

/** Iteration in no particular order: `size_t pos = 0; while ((it = sg_hmap_next(m, &pos)) != NULL)`.
 * The table must not change during it. */
void *sg_hmap_next(const sg_hmap_t *m, size_t *pos);

static inline size_t sg_hmap_size(const sg_hmap_t *m)
{
    return m->n;
}

/** Bytes the table itself holds (for memory budgets). */
static inline size_t sg_hmap_footprint(const sg_hmap_t *m)
{
    return m->cap * sizeof(sg_hmap_slot_t);
}

#endif
