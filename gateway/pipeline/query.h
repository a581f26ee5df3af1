/*
 * query.h -- the gateway's internal pipeline: one batch of queries for one route on behalf of one
 * identified client, from admission to answer, with no HTTP in it.
 *
 *   rate limit (the client's GCRA, local or shared through Redis: wait or refuse) -> distinct
 *   queries -> cache (L1, then one MGET to Redis) -> dispatch the misses (singleflight, fair
 *   admission, the plugin, the route's fallback) -> store the results -> done()
 *
 * Every entry point (POST /retrieve and /access, MCP tools/call, composite routes) runs its
 * queries through sg_query_start(), so quotas, concurrency caps, fairness, singleflight, the
 * cache, deadlines and the per-route and per-client metrics behave the same for all of them. The
 * caller does what is specific to its protocol: parse, identify the client, answer the errors
 * that precede a query (unknown route, bad input, unauthorised), and write the result out.
 *
 * Threads: a query belongs to the loop thread that started it. sg_query_start(), sg_query_cancel()
 * and the done() callback all run on that thread; nothing here may be called from another one.
 */
#ifndef SG_GATEWAY_QUERY_H
#define SG_GATEWAY_QUERY_H

#include <stdint.h>
#include "runtime.h"
#include "route.h"
#include "clients.h"
#include "blob.h"
#include "outcome.h"

/** A running query (opaque). Valid from sg_query_start() until done() ran or sg_query_cancel(). */
typedef struct st_sg_query_t sg_query_t;

/**
 * What to run. Everything is borrowed for the duration of sg_query_start(): the query copies the
 * texts and the parameters, and takes its own reference on `client`.
 */
typedef struct st_sg_query_spec_t {
    sg_route_t *route;        /* the route (a configured backend); required */
    sg_client_t *client;      /* who asks (sg_clients_identify()); required */
    const char *const *texts; /* n query texts (URLs for is_access); not NUL-terminated */
    const uint32_t *lens;     /* n lengths */
    uint32_t n;               /* at least 1: an empty batch is the caller's to answer */
    uint32_t topk;            /* 0 = the route's default; ignored (1) for is_access */
    int is_access;            /* fetch pages (the plugin's access()): no cache, no flights */
    const char *params;       /* the route's canonical search parameters (check_params()), or NULL */
    uint64_t start_us;        /* arrival (sg_now_us() clock), for latency and the deadline; 0 = now */
    uint64_t deadline_us;     /* absolute (sg_now_us() clock); 0 = start + the route's timeout_ms.
                               * Never later than that: a caller may only shorten it. */
    int admitted;             /* the caller admitted and counts the request itself: it split one
                               * request into several queries (a route type such as fusion) and
                               * charged the client's rate limit once for all of them (rate.h), so
                               * this query is not charged, counted or traced as a client request */
    /* the bounds of the answer (respond.h): the entry point writes each result blob in `shape`
     * (SG_SHAPE_*) plus `envelope_bytes` around them, and that may not exceed
     * `max_response_bytes` (0 = no bound, no share of the response budget reserved: the
     * caller bounds the whole). Refused with 413 before any backend work when the route's mean DOC size says it
     * would not fit, else as soon as the results that arrived exceed it. */
    int shape;
    uint64_t max_response_bytes;
    uint64_t envelope_bytes;
} sg_query_spec_t;

/* The outcome passed to done(), sg_query_result_t, is outcome.h's: a fusion route's requests end
 * the same way. */

/** Called exactly once per query that was not cancelled, on the query's loop thread. */
typedef void (*sg_query_done_fn)(void *ctx, const sg_query_result_t *res);

/** The deadline (sg_now_us() clock) of a request that arrived at `start_us` on a route whose
 * timeout is `timeout_ms`: that timeout, or `asked_us` (0: none) when the caller asks for an
 * earlier one -- never before the arrival. A fusion route's request takes its own the same way. */
static inline uint64_t sg_query_deadline_us(uint64_t start_us, uint32_t timeout_ms, uint64_t asked_us)
{
    uint64_t deadline_us = start_us + (uint64_t)timeout_ms * 1000;
    if (asked_us != 0 && asked_us < deadline_us)
        deadline_us = asked_us > start_us ? asked_us : start_us;
    return deadline_us;
}

/**
 * Starts a query on `loop` (the calling loop thread's). Returns the query, or NULL when it
 * finished before returning (a rate-limit refusal, every answer in L1): done() has then already
 * run. The caller keeps the returned handle to cancel it, and forgets it when done() runs.
 */
sg_query_t *sg_query_start(sg_loop_t *loop, const sg_query_spec_t *spec, sg_query_done_fn done, void *ctx);

/**
 * The caller went away (the HTTP client disconnected, an MCP session closed): done() is not
 * called, the query leaves its flights (a backend call no other request waits for is cancelled),
 * and it is counted as status 499 "client_gone". Loop thread; only before done() ran.
 */
void sg_query_cancel(sg_query_t *q);

/** Fails every query of `loop` still running with 503 (the gateway is shutting down). */
void sg_query_fail_all(sg_loop_t *loop, const char *why);

#endif
