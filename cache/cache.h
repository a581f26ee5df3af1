/*
 * cache.h -- the result cache: an in-process LRU (L1) bounded in bytes, shared by all loop
 * threads, in front of Redis (L2, one async hiredis connection per loop thread).
 *
 * Key = (backend identity: plugin kind, backend name and the plugin's data version -- model,
 * index, corpus --, topk, the request's canonical search parameters when it has any, query text
 * as the backend sees it). The value is the query's result:
 * its scored JSON fragment plus where each DOC sits inside it, so one entry answers both
 * return_scores shapes with byte-identical output. Errors are never cached.
 */
#ifndef SG_CACHE_CACHE_H
#define SG_CACHE_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "../gateway/server.h"

typedef struct st_sg_l1_t sg_l1_t;

sg_l1_t *sg_l1_create(size_t max_bytes);
void sg_l1_destroy(sg_l1_t *c);
/** Returns a referenced blob, or NULL on a miss or an expired entry. Thread-safe. */
sg_blob_t *sg_l1_get(sg_l1_t *c, const char *key, size_t key_len, uint64_t now_ms);
/** Stores (or replaces) an entry; evicts least recently used entries beyond the byte budget. */
void sg_l1_put(sg_l1_t *c, const char *key, size_t key_len, sg_blob_t *blob, uint64_t expire_ms);
/** Current bytes and entries (for /stats and tests). */
void sg_l1_usage(sg_l1_t *c, size_t *bytes, size_t *entries);

/** Builds the binary cache key of one query into `out` (cleared first). */
void sg_cache_key(sg_buf_t *out, const sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len);
/** Serialises a blob for Redis: "SG1 <n> <off> <len>...\n" + the scored fragment. */
void sg_cache_encode(sg_buf_t *out, const sg_blob_t *blob);
/** Parses what sg_cache_encode wrote (NULL when malformed: treated as a miss). */
sg_blob_t *sg_cache_decode(const char *p, size_t len);

/** Creates the shared L1 and metrics; per-loop Redis connections are made by sg_cache_init_loop. */
void sg_cache_init(sg_server_t *s);
void sg_cache_init_loop(sg_loop_t *loop);
void sg_cache_dispose_loop(sg_loop_t *loop);
void sg_cache_dispose(sg_server_t *s);

/**
 * Looks the request's distinct queries up: L1 synchronously, then one pipelined MGET to Redis
 * for the rest. Calls sg_rreq_after_cache(r) when done -- possibly before returning.
 */
void sg_cache_lookup(sg_rreq_t *r);
/**
 * Stores one result in L1. Any thread: a call's completion stores its results here before it
 * takes their flights out of the singleflight table, so a duplicate that no longer finds the
 * flight finds the result (sg_cache_peek_l1). `params` is the canonical search_params text (or NULL).
 */
void sg_cache_store_l1(sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len, sg_blob_t *blob);
/** Stores one result in Redis (asynchronously, fire-and-forget). Loop thread (`loop`'s connection). */
void sg_cache_store_redis(sg_loop_t *loop, sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len,
                          sg_blob_t *blob);
/** The L1 entry of one query (a referenced blob), or NULL. Any thread. */
sg_blob_t *sg_cache_peek_l1(sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len);
/**
 * The shared (cross-replica) rate limit of a client whose config says "global": one atomic Lua
 * GCRA in Redis. Returns 0 and later calls `cb(r, decision, wait_us)` (decision SG_RL_*, or -1
 * when Redis did not answer: fail open), or -1 at once when Redis is not connected (fail open).
 */
typedef void (*sg_global_limit_cb)(sg_rreq_t *r, int decision, uint64_t wait_us);
int sg_cache_global_limit(sg_rreq_t *r, const sg_client_t *c, uint64_t n, uint64_t max_wait_us, sg_global_limit_cb cb);
/** Appends cache state as JSON members ("l1":{...},"redis":{...}) for /stats. */
void sg_cache_stats_json(sg_buf_t *out);
/** 1 when at least one loop has a live Redis connection, 0 when none, 2 when the circuit breaker is
 * open (Redis stopped answering and is skipped), -1 when Redis is off. */
int sg_cache_redis_state(void);

#endif
