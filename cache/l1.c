/*
 * l1.c -- the in-process result cache: an LRU list of entries indexed by the shared hash table
 * (lib/hmap.h), bounded in bytes, behind one mutex. Values are reference-counted blobs, so a hit
 * costs a lookup and an atomic increment and the bytes are never copied; an entry evicted while
 * a response still uses it stays alive until that response lets go.
 */
#include "l1.h"
#include "hmap.h"
#include "metrics.h"

#include <h2o/linklist.h>
#include <h2o/memory.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct st_entry_t {
    h2o_linklist_t lru_link; /* in the cache's lru: most recent first */
    uint64_t hash;
    uint64_t expire_ms;
    size_t size;
    sg_blob_t *blob;
    size_t key_len;
    char key[];
} entry_t;

struct st_sg_l1_t {
    pthread_mutex_t mu;
    size_t max_bytes, bytes;
    sg_hmap_t index; /* key -> entry */
    sg_counter_t *evictions;
    sg_gauge_t *g_bytes, *g_entries;
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

sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms)
{
    uint64_t h = sg_hmap_hash(key, key_len);
    sg_blob_t *b = NULL;
    pthread_mutex_lock(&c->mu);
    entry_t *e = sg_hmap_find(&c->index, h, key, key_len);
    if (e != NULL) {
        if (e->expire_ms <= now_ms) {
            drop(c, e);
        } else {
            h2o_linklist_unlink(&e->lru_link);
            lru_front(c, e);
            b = sg_blob_ref(e->blob);
        }
    }
    sg_gauge_set(c->g_bytes, (int64_t)c->bytes);
    sg_gauge_set(c->g_entries, (int64_t)sg_hmap_size(&c->index));
    pthread_mutex_unlock(&c->mu);
    return b;
}

void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms)
{
    size_t size = sizeof(entry_t) + key_len + sg_blob_footprint(blob);
    if (size > c->max_bytes / 4)
        return; /* one huge entry must not flush the whole cache */
    uint64_t h = sg_hmap_hash(key, key_len);
    entry_t *e = sg_mem_alloc(sizeof(*e) + key_len);
    e->lru_link = (h2o_linklist_t){NULL, NULL}; /* h2o: a node is zeroed until linked */
    e->hash = h;
    e->expire_ms = expire_ms;
    e->size = size;
    e->blob = sg_blob_ref(blob);
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    pthread_mutex_lock(&c->mu);
    entry_t *old = sg_hmap_put(&c->index, h, key, key_len, e);
    if (old != NULL) /* replaced: the new entry took the old one's place */
        release(c, old);
    lru_front(c, e);
    c->bytes += size;
    while (c->bytes > c->max_bytes && !h2o_linklist_is_empty(&c->lru)) {
        drop(c, entry_of(c->lru.prev));
        sg_counter_add(c->evictions, 1);
    }
    sg_gauge_set(c->g_bytes, (int64_t)c->bytes);
    sg_gauge_set(c->g_entries, (int64_t)sg_hmap_size(&c->index));
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries)
{
    pthread_mutex_lock(&c->mu);
    *bytes = c->bytes;
    *entries = sg_hmap_size(&c->index);
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_destroy(sg_l1_t *c)
{
    if (c == NULL)
        return;
    while (!h2o_linklist_is_empty(&c->lru))
        drop(c, entry_of(c->lru.next));
    sg_hmap_dispose(&c->index);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
