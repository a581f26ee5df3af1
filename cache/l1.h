/*
 * l1.h -- the in-process result cache (L1, l1.c): an LRU of result blobs bounded in bytes, shared by
 * every loop thread behind one mutex. cache.h builds the cache's lookups on it; tests use it alone.
 *
 * A lookup that misses can leave a watch on the key (sg_l1_miss_t): the next store of the key
 * fills it with its result. A request holds the watch from its cache lookup until it knows
 * whether it needs the backend, and reads it then instead of looking in the cache again.
 */
#ifndef SG_CACHE_L1_H
#define SG_CACHE_L1_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "blob.h"

typedef struct st_sg_l1_t sg_l1_t;

/**
 * A watch on a key that a lookup missed (sg_l1_lookup()). The first store of the key after the
 * miss fills it (sg_l1_put()), so its holder sees a result stored since its lookup even when the
 * entry was replaced or evicted since. Until it is filled, the cache keeps the key's place for it
 * (not an entry: no bytes, not in the LRU, not counted); a later lookup of the key that misses
 * shares it. Reference-counted; any thread. The fields are read by the inline functions below.
 */
typedef struct st_sg_l1_miss_t {
    _Atomic uint32_t refs;     /* its holders, + 1 while the cache keeps the key's place for it */
    _Atomic(sg_blob_t *) blob; /* the result of the store that filled it (a reference); NULL: not yet */
    uint64_t expire_ms;        /* that store's entry's, set before `blob` */
    sg_l1_t *_cache;           /* l1.c's: the cache and the key's place in it while unfilled */
    void *_entry;
} sg_l1_miss_t;

sg_l1_t *sg_l1_create(size_t max_bytes);
/** Frees the cache. No other thread may use it by then; watches still held outlive it (their
 * last release frees them without it). */
void sg_l1_destroy(sg_l1_t *c);
/** Returns a referenced blob, or NULL on a miss or an expired entry. Thread-safe. */
sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms);
/** sg_l1_get(), and on a miss `*miss` is a watch on the key (one reference, the caller's); NULL on
 * a hit. Thread-safe. */
sg_blob_t *sg_l1_lookup(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms, sg_l1_miss_t **miss);
/** Stores (or replaces) an entry, filling the watch on its key if there is one; evicts least
 * recently used entries beyond the byte budget. An entry over a quarter of the budget is not
 * stored (and fills nothing). */
void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms);
/** Current bytes and entries (for /stats and tests). */
void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries);

/** The result a store left in watch `m` while it is fresh at `now_ms` (a referenced blob), or
 * NULL. Any thread. */
static inline sg_blob_t *sg_l1_miss_result(sg_l1_miss_t *m, uint64_t now_ms)
{
    sg_blob_t *b = atomic_load_explicit(&m->blob, memory_order_acquire);
    return b != NULL && now_ms < m->expire_ms ? sg_blob_ref(b) : NULL;
}

/** Whether a store filled watch `m` (its result may have expired since). Any thread. */
static inline int sg_l1_miss_filled(sg_l1_miss_t *m)
{
    return atomic_load_explicit(&m->blob, memory_order_acquire) != NULL;
}

/** Drops one reference on watch `m`; the last frees it with the result it holds. For a watch the
 * cache no longer holds (filled, or the cache gone) and for l1.c. */
static inline void sg__l1_miss_unref(sg_l1_miss_t *m)
{
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
        sg_blob_release(atomic_load_explicit(&m->blob, memory_order_relaxed));
        free(m);
    }
}

/** l1.c: drops a reference on a watch not filled yet (the last holder gives up the key's place). */
void sg__l1_miss_release_unfilled(sg_l1_miss_t *m);

/** Drops a reference on watch `m` (NULL: none). A counter, like sg_blob_release(): only a watch
 * that no store filled goes back to the cache, which may have to give up the key's place. Any
 * thread. */
static inline void sg_l1_miss_release(sg_l1_miss_t *m)
{
    if (m == NULL)
        return;
    if (!sg_l1_miss_filled(m))
        sg__l1_miss_release_unfilled(m);
    else
        sg__l1_miss_unref(m); /* filled: the cache let it go */
}

#endif
