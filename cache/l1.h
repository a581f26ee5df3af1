/*
 * l1.h -- the in-process result cache (L1, l1.c): an LRU of result blobs bounded in bytes, shared by
 * every loop thread behind one mutex. cache.h builds the cache's lookups on it; tests use it alone.
 */
#ifndef SG_CACHE_L1_H
#define SG_CACHE_L1_H

#include <stddef.h>
#include <stdint.h>
#include "blob.h"

typedef struct st_sg_l1_t sg_l1_t;

sg_l1_t *sg_l1_create(size_t max_bytes);
void sg_l1_destroy(sg_l1_t *c);
/** Returns a referenced blob, or NULL on a miss or an expired entry. Thread-safe. */
sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms);
/** Stores (or replaces) an entry; evicts least recently used entries beyond the byte budget. */
void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms);
/** Current bytes and entries (for /stats and tests). */
void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries);

#endif
