/*
 * ratelimit_global.h -- the cross-replica rate limit of "global" clients (one Lua GCRA in Redis).
 */
#ifndef SG_GATEWAY_RATELIMIT_GLOBAL_H
#define SG_GATEWAY_RATELIMIT_GLOBAL_H

#include <stdint.h>
#include "server.h"
#include "../cache/redis.h"

/** Registers the metric. Main thread, once. */
void sg_ratelimit_global_init(void);

/** The decision (SG_RL_*, or -1 when Redis did not answer: fail open) and the wait it implies. */
typedef void (*sg_ratelimit_global_cb)(void *ctx, int decision, uint64_t wait_us);

/**
 * Asks Redis whether client `c` may run `n` queries now. Returns 0 and later calls `cb` exactly
 * once on this loop thread, or -1 without calling it when Redis is off or not connected (the
 * caller goes on: fail open). Loop thread of `redis`.
 */
int sg_ratelimit_global(sg_redis_t *redis, const sg_client_t *c, uint64_t n, uint64_t max_wait_us, sg_ratelimit_global_cb cb,
                        void *ctx);

#endif
