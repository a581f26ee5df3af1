/*
 * redis.h -- one asynchronous hiredis connection per loop thread, driven by the h2o event loop
 * through a small adapter (h2o 2.2.5 ships none). Each connection is set up the way cache.redis
 * says (AUTH, SELECT) and, with sentinels, goes to the master they name and follows it through
 * failovers. Commands carry a deadline; a slow, dead, refusing or demoted Redis turns into "no
 * answer" quickly and the connection is rebuilt with back-off, so its users can always go on
 * without Redis instead of stalling a request.
 *
 * The gateway's one Redis client (lib/redis/, library sg_redis): the result cache's L2, the spend
 * budgets and the global rate limits all send their commands through the loop's connection. It
 * knows no key, value or script of theirs; its metrics keep their historical names
 * (searchgate_cache_redis_*) so dashboards and alerts stay valid.
 */
#ifndef SG_LIB_REDIS_H
#define SG_LIB_REDIS_H

#include <hiredis.h>
#include <h2o.h>
#include "timer.h"
#include "redis_conf.h"

typedef struct st_sg_redis_t sg_redis_t;

/** Callback for a command: `reply` is NULL when Redis is down, slow (past the timeout) or answered an error. */
typedef void (*sg_redis_cb)(void *arg, redisReply *reply);

/**
 * Connects (and keeps reconnecting, with back-off) to the Redis `conf` describes, for the loop
 * thread that runs `loop`, arming its deadlines on `timers` (that loop's). `conf` is borrowed and
 * must outlive the connection. `loop_id` names it in the log. Every later call on the connection
 * happens on that thread.
 */
sg_redis_t *sg_redis_create(h2o_evloop_t *loop, sg_timers_t *timers, int loop_id, const sg_redis_conf_t *conf);
void sg_redis_destroy(sg_redis_t *r);
/**
 * Start-up: waits until the first connection attempt of each of the `n_loops` connections ended
 * (set up, refused or failed), at most max(timeout_ms, 1 s) (twice that with sentinels: the
 * master's address is asked first), so the first requests find Redis set up. Main thread.
 */
void sg_redis_wait_started(const sg_redis_conf_t *conf, int n_loops);
/** 1 when connected, set up, and the circuit breaker is closed: lookups may use Redis. */
int sg_redis_is_up(const sg_redis_t *r);
/** 1 while the circuit breaker is open (Redis stopped answering; every command is skipped). */
int sg_redis_breaker_open(void);
/** 1 while Redis (or a sentinel) refuses the connection set-up: credentials, permissions or database. Any thread. */
int sg_redis_refused(void);
/** The master's "host:port" the connections last confirmed (Sentinel mode); "" when none yet or without sentinels. Any thread. */
void sg_redis_master(char *out, size_t size);
/**
 * Sends a command (argv form). Returns 0 and calls `cb` exactly once later (on this loop), or
 * returns -1 without calling it when Redis is not connected or the circuit breaker is open. `cb` may be NULL (fire-and-forget);
 * fire-and-forget commands are dropped while too many are outstanding, so a stalled Redis can
 * never grow memory without bound.
 */
int sg_redis_command(sg_redis_t *r, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen);

#endif
