/*
 * budget.h -- spend budgets: how many backend queries a client (on metered routes) and a route (over
 * every client) may send per calendar period in UTC, shared by the replicas through Redis.
 *
 * What counts is what reaches the backend: a distinct query a request sends to a plugin (a search,
 * or one page of POST /access). Cache hits, duplicates inside a request and queries that join an
 * identical query already in flight (singleflight) are free. A request is admitted when what is
 * left of every budget that applies covers its cache misses; it then holds a reservation of that
 * many queries, and what dispatch does not send (joins, late cache hits, calls that never reach the
 * plugin) is given back. docs/configuration.md ("Spend budgets") is the user's description.
 */
#ifndef SG_GATEWAY_BUDGET_H
#define SG_GATEWAY_BUDGET_H

#include <stdint.h>
#include "json.h"
#include "runtime.h"
#include "clients.h"

typedef struct st_sg_budget_t sg_budget_t;

/** A reservation moved onto one call: the budgets it is charged to and in which period. */
typedef struct st_sg_budget_charge_t {
    sg_budget_t *b[2]; /* the client's and the route's budget; either may be NULL */
    uint64_t period[2];
    uint32_t n;     /* queries reserved */
    uint8_t shared; /* reserved in Redis (else counted by this replica only) */
} sg_budget_charge_t;

/** The calendar period (UTC) that holds `now_s` (Unix seconds): [*start_s, *end_s). Weeks start on Monday. */
void sg_budget_period(int period, uint64_t now_s, uint64_t *start_s, uint64_t *end_s);

/** `shared`: Redis is configured, so budgets are shared by the replicas, their counters' keys
 * starting with `prefix` (cache.redis.prefix). Main thread, start-up. */
void sg_budget_init(int shared, const char *prefix);
void sg_budget_dispose(void);

/** The budgets one configuration generation uses (gen.h). */
typedef struct st_sg_budget_set_t sg_budget_set_t;
/**
 * The budgets of `cfg`'s clients and of `routes` (its routes, n_routes): each the budget an
 * earlier generation already counts with (same client id / anonymous / route name, same period),
 * else a new one. Nothing changes for the running generation. Main or reload thread.
 */
sg_budget_set_t *sg_budget_set_create(const sg_config_t *cfg, const struct st_sg_route_t *routes, size_t n_routes);
/** The generation of `set` is published: its budgets take its limits and failure modes, and are
 * the ones /metrics and /stats show. */
void sg_budget_set_publish(sg_budget_set_t *set);
/** Releases the set's budgets (a budget no set uses any more is freed). */
void sg_budget_set_free(sg_budget_set_t *set);
/** Appends `"budgets":{"clients":{...},"routes":{...}}` for /stats (the current generation's). */
void sg_budget_stats_json(sg_jw_t *w);

/* ---- the budget step of the query pipeline (query.c, dispatch.c) ---- */

/** What the budget step decided: admitted (with the reservation in `charge`, n 0 when no budget
 * applies), or refused with the answer for the client. Borrowed for the callback. */
typedef struct st_sg_budget_decision_t {
    int admitted;
    sg_budget_charge_t charge;
    int status;             /* refused: 429 / 503 budget_exhausted, 503 budget_unavailable */
    const char *type;       /* refused: the error type */
    const char *message;    /* refused: the error message */
    uint32_t retry_after_s; /* refused: seconds to the end of the period, or 1 */
} sg_budget_decision_t;

/** The caller's next step, handed to sg_budget_admit(): the budget step only calls forward. */
typedef struct st_sg_budget_next_t {
    /** The decision; called exactly once (at once, or when Redis answered), unless `gone`. */
    void (*decided)(void *ctx, const sg_budget_decision_t *d);
    /** Whether the caller was answered meanwhile (its deadline): then nothing is reserved. */
    int (*gone)(void *ctx);
    /** Around a Redis round trip (optional): the caller keeps `ctx` alive between the two. */
    void (*round_trip)(void *ctx);
    void (*round_trip_done)(void *ctx);
} sg_budget_next_t;

/**
 * Decides whether `n` backend queries that `client` sends to route `serving` fit the budgets of
 * `set` that apply: at once when none applies or Redis is off, after one Redis script (on
 * `loop`'s connection) otherwise. When a budget is exhausted the decision is budget_exhausted with
 * the client's reject_status (429, or 503; Retry-After: seconds to the end of the period); when
 * Redis does not answer and a budget fails closed, 503 budget_unavailable. Loop thread.
 */
void sg_budget_admit(const sg_budget_set_t *set, sg_loop_t *loop, const struct st_sg_route_t *serving, const sg_client_t *client,
                     uint32_t n, const sg_budget_next_t *next, void *ctx);

/** Moves `n` queries of a reservation onto a call that is about to be submitted. Loop thread. */
void sg_budget_take(sg_budget_charge_t *reservation, sg_budget_charge_t *call, uint32_t n);
/** The call reached the plugin: its queries are spent. Any thread. */
void sg_budget_started(sg_budget_charge_t *ch);
/** What a reservation or call did not use (joins, late L1 hits; a call shed, expired or cancelled
 * in the queue) is given back. Loop thread of `loop` (its Redis connection). */
void sg_budget_unused(sg_loop_t *loop, sg_budget_charge_t *ch);

#endif
