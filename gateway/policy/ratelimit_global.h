/*
 * ratelimit_global.h -- the cross-replica rate limit of "global" clients (one Lua GCRA in Redis).
 */
#ifndef SG_GATEWAY_RATELIMIT_GLOBAL_H
#define SG_GATEWAY_RATELIMIT_GLOBAL_H

#include <stdint.h>
#include "clients.h"
#include "redis.h"

/** Registers the metrics and keeps `prefix` (cache.redis.prefix), which starts every key the limit
 * writes. Main thread, start-up. The fallback's divisor is clients.global_replicas of the client
 * table's configuration. */
void sg_ratelimit_global_init(const char *prefix);

/** The decision (SG_RL_*) and the wait it implies. */
typedef void (*sg_ratelimit_global_cb)(void *ctx, int decision, uint64_t wait_us);

/**
 * Whether global client `c` (of table `t`) may run `n` queries now, waiting at most `max_wait_us`.
 * Redis decides when it can: returns 1 and calls `cb` exactly once later, on this loop thread.
 * When Redis is off, down or the command cannot be sent, this replica's fallback bucket (the
 * client's rate and burst / clients.global_replicas) decides at once: returns 0 with the decision
 * in `*rl` and the wait in `*wait_us`, and never calls `cb`. A round trip that fails (no reply in
 * time, a disconnection, an unexpected reply) is decided by the fallback too, in `cb`. Either way
 * the limit holds: nothing is admitted without a decision. Loop thread of `redis`.
 */
int sg_ratelimit_global(sg_redis_t *redis, sg_clients_t *t, sg_client_t *c, uint64_t n, uint64_t max_wait_us,
                        sg_ratelimit_global_cb cb, void *ctx, int *rl, uint64_t *wait_us);

#endif
