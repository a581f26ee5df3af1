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
#include "blob.h"
#include "buf.h"
#include "json.h"
#include "l1.h"
#include "redis.h"

/**
 * Builds the binary cache key of one query into `out` (cleared first): the route's cache
 * `identity` (plugin kind, route name, plugin version and identity()), topk, the canonical
 * search parameters (NULL or "" when none) and the query text.
 */
void sg_cache_key(sg_buf_t *out, const char *identity, uint32_t topk, const char *params, const char *text, size_t len);
/** Serialises a blob for Redis: "SG1 <n> <off> <len>...\n" + the scored fragment. */
void sg_cache_encode(sg_buf_t *out, const sg_blob_t *blob);
/**
 * Parses what sg_cache_encode wrote. Returns a blob (one reference) only when the value is exactly
 * such an entry: the header's documents lie at their offsets, one after another, inside a fragment
 * `[{"document":DOC,"score":S},...]` where each DOC is a valid JSON object (RFC 8259: strings of
 * valid UTF-8, no raw control characters) and each S a number or null, so both reply shapes
 * spliced from it are valid JSON no larger than the value. Otherwise NULL (a miss), with a static
 * reason in `*why` when `why` is not NULL. Thread-safe.
 */
sg_blob_t *sg_cache_decode(const char *p, size_t len, const char **why);

/** Creates the shared L1 (none when `l1_bytes` is 0) and the cache's metrics. Main thread, once. */
void sg_cache_init(size_t l1_bytes, const char *redis_prefix);
void sg_cache_dispose(void);

enum { SG_CACHE_MISS = 0, SG_CACHE_L1 = 1, SG_CACHE_REDIS = 2 };

/**
 * What one lookup asks for: the results of `n` query texts of one route, under the keys
 * sg_cache_key() makes of the route's cache `identity`, `topk`, `params` and each text. The
 * lookup makes the keys once and appends them, back to back, to `keys` (the caller's buffer, left
 * as it is until the callback ran): the caller stores the answers of the misses under them.
 */
typedef struct st_sg_cache_lookup_t {
    const char *identity;
    uint32_t topk;
    const char *params; /* the canonical search parameters, or NULL */
    uint32_t n;
    const char *const *texts; /* not NUL-terminated; borrowed for the call */
    const uint32_t *lens;
    uint32_t ttl_s; /* of the values promoted from Redis into L1 */
    sg_buf_t *keys;
} sg_cache_lookup_t;

/**
 * The answer of sg_cache_lookup(), borrowed for the duration of the callback: `blobs[i]` is the
 * result stored under key i (a reference the callee takes over) or NULL on a miss, `tier[i]` says
 * where it was found (SG_CACHE_*), and key i is `key_len[i]` bytes at `key_off[i]` in the
 * request's `keys`. For a miss, `misses[i]` is L1's watch on the key (l1.h; a reference the
 * callee takes over, NULL without L1): a result stored under the key after the lookup -- by the
 * flight that was computing it -- fills it, so the callee reads it instead of looking again.
 */
typedef struct st_sg_cache_answer_t {
    uint32_t n;
    sg_blob_t **blobs;
    const uint8_t *tier;
    sg_l1_miss_t **misses;
    const uint32_t *key_off, *key_len;
} sg_cache_answer_t;

typedef void (*sg_cache_lookup_cb)(void *ctx, const sg_cache_answer_t *answer);

/**
 * Looks the texts of `req` up: makes their keys, looks in L1 at once (leaving a watch on each key
 * it misses), then sends one pipelined MGET on `redis` (NULL: no Redis) for the rest; values
 * found in Redis are promoted into L1 for `ttl_s` seconds. A Redis that is down, slow or answering garbage turns into misses. Calls
 * `cb` exactly once, on this loop thread -- before returning when no Redis round trip is needed.
 */
void sg_cache_lookup(sg_redis_t *redis, const sg_cache_lookup_t *req, sg_cache_lookup_cb cb, void *ctx);
/**
 * The Redis writes of one loop thread: a bounded write-behind queue. A store on any thread (the
 * plugin's) queues the result's Redis SET; the loop that owns `redis` sends it (a loop's hiredis
 * connection is used on that loop only), woken by an h2o_multithread message on its queue. At most
 * `max_writes` writes holding at most `max_bytes` bytes of results wait: beyond that a store keeps
 * its L1 copy and drops the Redis write, counted in searchgate_cache_redis_write_queue_dropped_total.
 */
typedef struct st_sg_cache_writer_t sg_cache_writer_t;

/* The gateway's bounds of one loop's queue: as many writes as lib/redis lets wait on a connection */
#define SG_CACHE_WRITE_QUEUE_WRITES 10000
#define SG_CACHE_WRITE_QUEUE_BYTES ((size_t)64 << 20)

/** Creates the writer of the loop that runs `queue` and owns `redis` (not NULL). That loop thread. */
sg_cache_writer_t *sg_cache_writer_create(h2o_multithread_queue_t *queue, sg_redis_t *redis, size_t max_writes, size_t max_bytes);
/**
 * Ends the writer (NULL: nothing), on its loop thread, once no thread stores through it any more
 * and before its Redis connection is destroyed: the writes still queued are dropped (counted) and
 * their results released; none is sent.
 */
void sg_cache_writer_destroy(sg_cache_writer_t *w);
/**
 * Stores one result for `ttl_s` seconds: in L1 at once (no-op without L1; the store fills L1's
 * watches on the key), and in Redis through `w` (NULL: no Redis), fire-and-forget, under the same
 * key and value format as the lookup reads. Any thread; takes its own references on `blob`.
 */
void sg_cache_store(sg_cache_writer_t *w, const char *key, size_t key_len, sg_blob_t *blob, uint32_t ttl_s);
/** The L1 entry under `key` (a referenced blob), or NULL. Any thread. (A key the cache step looked
 * up is watched instead: sg_cache_answer_t.misses.) */
sg_blob_t *sg_cache_get_l1(const char *key, size_t key_len);
/** Appends cache state as JSON members ("l1":{...},"redis":{...}) for /stats; `redis_state` is 1
 * (a connection is up), 0 (none), 2 (the circuit breaker is open), 3 (Redis refuses the
 * connection set-up) or -1 (Redis is off). With sentinels, "redis" names the current master. */
void sg_cache_stats_json(sg_jw_t *w, int redis_state);

#endif
