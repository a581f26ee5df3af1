/*
 * l1.c -- the in-process result cache: an LRU list of entries indexed by the shared hash table
 * (lib/hmap.h), bounded in bytes, behind one mutex. Values are reference-counted blobs, so a hit
 * costs a lookup and an atomic increment and the bytes are never copied; an entry evicted while
 * a response still uses it stays alive until that response lets go.
 *
 * Watches (l1.h): a lookup that misses and asks for one finds the key's place in the index taken
 * by a *pending* entry -- no blob, no bytes, outside the LRU -- that holds the watch, or puts one
 * there. A store of the key replaces the pending entry and fills its watch (under the mutex, so
 * a store either precedes a lookup, which then hits, or fills the watch that lookup took). The
 * last holder of an unfilled watch removes its pending entry, so pending entries are bounded by
 * the misses in progress. Why: the gateway's singleflight (gateway/pipeline/dispatch.c) must see
 * a result stored between a request's cache lookup and its dispatch, and the watch carries it
 * there without a second look.
 */
#include "l1.h"
#include "hmap.h"
#include "metrics.h"

#include <h2o/linklist.h>
#include <h2o/memory.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct st_entry_t {
    h2o_linklist_t lru_link; /* in the cache's lru: most recent first (not linked while pending) */
    uint64_t hash;
    uint64_t expire_ms;
    size_t size;
    sg_blob_t *blob;    /* NULL while pending */
    sg_l1_miss_t *miss; /* a pending entry's watch (the index's reference); NULL for a stored one */
    size_t key_len;
    char key[];
} entry_t;

struct st_sg_l1_t {
    pthread_mutex_t mu;
    size_t max_bytes, bytes;
    sg_hmap_t index;  /* key -> entry, stored or pending */
    size_t n_pending; /* pending entries in the index */
    sg_counter_t *evictions;
    sg_gauge_t *g_bytes, *g_entries, *g_pending;
    h2o_linklist_t lru; /* anchor: lru.next is the most recent entry, lru.prev the coldest */
};

static entry_t *entry_of(h2o_linklist_t *link)
{
    return H2O_STRUCT_FROM_MEMBER(entry_t, lru_link, link);
}

static int entry_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const entry_t *e = item;
    (void)ud;
    return e->key_len == key_len && memcmp(e->key, key, key_len) == 0;
}

sg_l1_t *sg_l1_create(size_t max_bytes)
{
    sg_l1_t *c = sg_mem_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    sg_hmap_init(&c->index, entry_eq, NULL, 1024);
    h2o_linklist_init_anchor(&c->lru);
    c->evictions =
        sg_metrics_counter("searchgate_cache_l1_evictions_total", "L1 entries evicted to stay within cache.l1_bytes.", "");
    c->g_bytes = sg_metrics_gauge("searchgate_cache_l1_bytes", "Bytes held by the L1 cache.", "");
    c->g_entries = sg_metrics_gauge("searchgate_cache_l1_entries", "Entries in the L1 cache.", "");
    c->g_pending = sg_metrics_gauge("searchgate_cache_l1_pending",
                                    "Keys L1 keeps a place for: misses in progress that hold a watch on them.", "");
    return c;
}

static void lru_front(sg_l1_t *c, entry_t *e)
{
    h2o_linklist_insert(c->lru.next, &e->lru_link);
}

/* Frees an entry the index no longer holds. */
static void release(sg_l1_t *c, entry_t *e)
{
    h2o_linklist_unlink(&e->lru_link);
    c->bytes -= e->size;
    sg_blob_release(e->blob);
    free(e);
}

static void drop(sg_l1_t *c, entry_t *e)
{
    sg_hmap_remove(&c->index, e->hash, e);
    release(c, e);
}

static void gauges_locked(sg_l1_t *c)
{
    sg_gauge_set(c->g_bytes, (int64_t)c->bytes);
    sg_gauge_set(c->g_entries, (int64_t)(sg_hmap_size(&c->index) - c->n_pending));
    sg_gauge_set(c->g_pending, (int64_t)c->n_pending);
}

/* A pending entry for `key` with a new watch: one reference for the index, one for the caller. */
static sg_l1_miss_t *watch_locked(sg_l1_t *c, uint64_t h, const char *key, size_t key_len)
{
    entry_t *e = sg_mem_calloc(1, sizeof(*e) + key_len);
    sg_l1_miss_t *m = sg_mem_calloc(1, sizeof(*m));
    atomic_init(&m->refs, 2);
    atomic_init(&m->blob, NULL);
    m->_cache = c;
    m->_entry = e;
    e->hash = h;
    e->miss = m;
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    sg_hmap_insert(&c->index, h, e);
    ++c->n_pending;
    return m;
}

/* Drops the index's reference on pending entry `e`'s watch and frees `e` (out of the index). */
static void pending_free_locked(sg_l1_t *c, entry_t *e)
{
    sg_l1_miss_t *m = e->miss;
    m->_entry = NULL;
    --c->n_pending;
    free(e);
    sg__l1_miss_unref(m);
}

sg_blob_t *sg_l1_lookup(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms, sg_l1_miss_t **miss)
{
    uint64_t h = sg_hmap_hash(key, key_len);
    sg_blob_t *b = NULL;
    if (miss != NULL)
        *miss = NULL;
    pthread_mutex_lock(&c->mu);
    entry_t *e = sg_hmap_find(&c->index, h, key, key_len);
    if (e != NULL && e->miss != NULL) { /* a miss in progress: share its watch */
        if (miss != NULL) {
            atomic_fetch_add_explicit(&e->miss->refs, 1, memory_order_relaxed);
            *miss = e->miss;
        }
        e = NULL;
    } else if (e != NULL && e->expire_ms <= now_ms) {
        drop(c, e);
        e = NULL;
    } else if (e != NULL) {
        h2o_linklist_unlink(&e->lru_link);
        lru_front(c, e);
        b = sg_blob_ref(e->blob);
    }
    if (b == NULL && miss != NULL && *miss == NULL)
        *miss = watch_locked(c, h, key, key_len);
    gauges_locked(c);
    pthread_mutex_unlock(&c->mu);
    return b;
}

sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms)
{
    return sg_l1_lookup(c, key, key_len, now_ms, NULL);
}

void sg__l1_miss_release_unfilled(sg_l1_miss_t *m)
{
    sg_l1_t *c = m->_cache;
    if (c == NULL) { /* the cache was destroyed (shutdown) */
        sg__l1_miss_unref(m);
        return;
    }
    pthread_mutex_lock(&c->mu);
    /* under the mutex nobody fills it or takes a reference meanwhile */
    uint32_t left = atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) - 1;
    if (left == 1 && m->_entry != NULL) { /* only the index holds it: give the key's place up */
        entry_t *e = m->_entry;
        sg_hmap_remove(&c->index, e->hash, e);
        pending_free_locked(c, e); /* frees the watch too */
        left = 0;
        m = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (left == 0 && m != NULL) {
        sg_blob_release(atomic_load_explicit(&m->blob, memory_order_relaxed));
        free(m);
    }
}

void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms)
{
    size_t size = sizeof(entry_t) + key_len + sg_blob_footprint(blob);
    if (size > c->max_bytes / 4)
        return; /* one huge entry must not flush the whole cache */
    uint64_t h = sg_hmap_hash(key, key_len);
    entry_t *e = sg_mem_calloc(1, sizeof(*e) + key_len); /* h2o: a list node is zeroed until linked */
    e->hash = h;
    e->expire_ms = expire_ms;
    e->size = size;
    e->blob = sg_blob_ref(blob);
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    pthread_mutex_lock(&c->mu);
    entry_t *old = sg_hmap_put(&c->index, h, key, key_len, e);
    if (old != NULL && old->miss != NULL) { /* a miss in progress: its watch gets the result */
        old->miss->expire_ms = expire_ms;
        atomic_store_explicit(&old->miss->blob, sg_blob_ref(blob), memory_order_release);
        pending_free_locked(c, old);
    } else if (old != NULL) { /* replaced: the new entry took the old one's place */
        release(c, old);
    }
    lru_front(c, e);
    c->bytes += size;
    while (c->bytes > c->max_bytes && !h2o_linklist_is_empty(&c->lru)) {
        drop(c, entry_of(c->lru.prev));
        sg_counter_add(c->evictions, 1);
    }
    gauges_locked(c);
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries)
{
    pthread_mutex_lock(&c->mu);
    *bytes = c->bytes;
    *entries = sg_hmap_size(&c->index) - c->n_pending;
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_destroy(sg_l1_t *c)
{
    if (c == NULL)
        return;
    while (!h2o_linklist_is_empty(&c->lru))
        drop(c, entry_of(c->lru.next));
    /* what is left is pending: their watches outlive the cache with their holders (shutdown) */
    entry_t *e;
    size_t pos = 0;
    while ((e = sg_hmap_next(&c->index, &pos)) != NULL) {
        e->miss->_cache = NULL;
        pending_free_locked(c, e);
    }
    sg_hmap_dispose(&c->index);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
