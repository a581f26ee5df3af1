/*
 * rate.h -- the client's rate limit as one step of a request (rate.c): charged once for a batch of
 * n queries, on this replica (clients.c's GCRA) or across replicas (ratelimit_global.c); the
 * request then goes on at once, after a wait on the loop's timer heap (clients in queue mode), or
 * is refused. Every entry point that charges a client (the query pipeline, a fusion route for its
 * whole batch) runs this one step, handing it what comes next; it only calls forward.
 */
#ifndef SG_GATEWAY_RATE_H
#define SG_GATEWAY_RATE_H

#include <stdint.h>
#include "runtime.h"
#include "clients.h"
#include "timer.h"

/** What the caller does with the decision. Loop thread of the request. */
typedef struct st_sg_rate_next_t {
    /** Admitted: go on. `waited`: after a wait on the timer heap, else at once (within sg_rate_charge). */
    void (*admitted)(void *ctx, int waited);
    /** Refused: 429, or 503 (a wait over what the client allows, or a client that wants 5xx). */
    void (*refused)(void *ctx, int status, const char *type, const char *msg, uint32_t retry_after_s);
    /** Whether the request was answered meanwhile (deadline, cancel): then the decision is dropped. */
    int (*gone)(void *ctx);
    /** Around a Redis round trip: the caller keeps `ctx` alive between the two. */
    void (*hold)(void *ctx);
    void (*release)(void *ctx);
} sg_rate_next_t;

/** One request's rate-limit step: lives in the request (a wait's timer runs there). */
typedef struct st_sg_rate_t {
    sg_timer_t timer;
    const sg_rate_next_t *next;
    void *ctx;
    sg_loop_t *loop;
    sg_client_t *client;
    uint64_t max_wait_us; /* the longest wait the client accepts (queue mode), at most until the deadline */
} sg_rate_t;

/**
 * Charges `client` (of `table`) for `n` queries of a request that arrived at `start_us` and ends at
 * `deadline_us`: calls next->admitted or next->refused exactly once, at once or later on this loop
 * (a Redis round trip, a wait), unless next->gone says the request was answered by then.
 */
void sg_rate_charge(sg_rate_t *r, sg_loop_t *loop, sg_clients_t *table, sg_client_t *client, uint32_t n, uint64_t start_us,
                    uint64_t deadline_us, const sg_rate_next_t *next, void *ctx);
/** The request was answered: a wait still running ends without a decision. */
void sg_rate_stop(sg_rate_t *r);

#endif
