/*
 * l1.c -- the in-process result cache: a hash table plus an LRU list, bounded in bytes, behind
 * one mutex. Values are reference-counted blobs, so a hit costs a lookup and an atomic increment
 * and the bytes are never copied; an entry evicted while a response still uses it stays alive
 * until that response lets go.
 */
#include "cache.h"
#include "metrics.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct st_entry_t {
    struct st_entry_t *hash_next;
    struct st_entry_t *prev, *next; /* LRU: head is the most recent */
    uint64_t hash;
    uint64_t expire_ms;
    size_t size;
    sg_blob_t *blob;
    size_t key_len;
    char key[];
} entry_t;

struct st_sg_l1_t {
    pthread_mutex_t mu;
    size_t max_bytes, bytes, n;
    entry_t **buckets;
    size_t n_buckets;
    sg_counter_t *evictions;
    sg_gauge_t *g_bytes, *g_entries;
    entry_t head; /* LRU sentinel; last: entry_t ends in a flexible array member */
};

sg_l1_t *sg_l1_create(size_t max_bytes)
{
    sg_l1_t *c = sg_mem_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    c->n_buckets = 1024;
    c->buckets = sg_mem_calloc(c->n_buckets, sizeof(*c->buckets));
    c->head.next = c->head.prev = &c->head;
    c->evictions =
        sg_metrics_counter("searchgate_cache_l1_evictions_total", "L1 entries evicted to stay within cache.l1_bytes.", "");
    c->g_bytes = sg_metrics_gauge("searchgate_cache_l1_bytes", "Bytes held by the L1 cache.", "");
    c->g_entries = sg_metrics_gauge("searchgate_cache_l1_entries", "Entries in the L1 cache.", "");
    return c;
}

static void lru_unlink(entry_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_front(sg_l1_t *c, entry_t *e)
{
    e->next = c->head.next;
    e->prev = &c->head;
    e->next->prev = e;
    c->head.next = e;
}

static entry_t **slot_of(sg_l1_t *c, uint64_t h, const char *key, size_t len)
{
    entry_t **p = &c->buckets[h & (c->n_buckets - 1)];
    while (*p != NULL && !((*p)->hash == h && (*p)->key_len == len && memcmp((*p)->key, key, len) == 0))
        p = &(*p)->hash_next;
    return p;
}

static void drop(sg_l1_t *c, entry_t **slot)
{
    entry_t *e = *slot;
    *slot = e->hash_next;
    lru_unlink(e);
    c->bytes -= e->size;
    --c->n;
    sg_blob_release(e->blob);
    free(e);
}

static void grow(sg_l1_t *c)
{
    size_t nb = c->n_buckets * 2;
    entry_t **b = sg_mem_calloc(nb, sizeof(*b));
    for (size_t i = 0; i < c->n_buckets; ++i) {
        for (entry_t *e = c->buckets[i], *next; e != NULL; e = next) {
            next = e->hash_next;
            e->hash_next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = nb;
}

sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms)
{
    uint64_t h = sg_hash64(key, key_len, 11);
    sg_blob_t *b = NULL;
    pthread_mutex_lock(&c->mu);
    entry_t **slot = slot_of(c, h, key, key_len);
    if (*slot != NULL) {
        if ((*slot)->expire_ms <= now_ms) {
            drop(c, slot);
        } else {
            lru_unlink(*slot);
            lru_front(c, *slot);
            b = sg_blob_ref((*slot)->blob);
        }
    }
    sg_gauge_set(c->g_bytes, (int64_t)c->bytes);
    sg_gauge_set(c->g_entries, (int64_t)c->n);
    pthread_mutex_unlock(&c->mu);
    return b;
}

void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms)
{
    size_t size = sizeof(entry_t) + key_len + sg_blob_footprint(blob);
    if (size > c->max_bytes / 4)
        return; /* one huge entry must not flush the whole cache */
    uint64_t h = sg_hash64(key, key_len, 11);
    entry_t *e = sg_mem_alloc(sizeof(*e) + key_len);
    e->hash = h;
    e->expire_ms = expire_ms;
    e->size = size;
    e->blob = sg_blob_ref(blob);
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    pthread_mutex_lock(&c->mu);
    entry_t **slot = slot_of(c, h, key, key_len);
    if (*slot != NULL)
        drop(c, slot);
    if (c->n + 1 > c->n_buckets)
        grow(c);
    slot = &c->buckets[h & (c->n_buckets - 1)];
    e->hash_next = *slot;
    *slot = e;
    lru_front(c, e);
    c->bytes += size;
    ++c->n;
    while (c->bytes > c->max_bytes && c->head.prev != &c->head) {
        entry_t *old = c->head.prev;
        drop(c, slot_of(c, old->hash, old->key, old->key_len));
        sg_counter_add(c->evictions, 1);
    }
    sg_gauge_set(c->g_bytes, (int64_t)c->bytes);
    sg_gauge_set(c->g_entries, (int64_t)c->n);
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries)
{
    pthread_mutex_lock(&c->mu);
    *bytes = c->bytes;
    *entries = c->n;
    pthread_mutex_unlock(&c->mu);
}

void sg_l1_destroy(sg_l1_t *c)
{
    if (c == NULL)
        return;
    while (c->head.next != &c->head) {
        entry_t *e = c->head.next;
        drop(c, slot_of(c, e->hash, e->key, e->key_len));
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
