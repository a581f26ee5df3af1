/*
 * outcome.h -- how a client request the pipeline ran ends (outcome.c), the same for a query
 * (query.c) and for a route type's request whose parts are queries it admitted itself (a fusion
 * route's, routes/fusion_route.c): the result its caller's done() gets, and the steps that end it.
 *
 *   finish  the request is marked answered, its own work stopped, its rate-limit step stopped,
 *           and its outcome recorded once: the route's requests, queries and latency by status
 *           and its in-flight gauge, the client's requests, queries, cache outcome and timeouts,
 *           the dashboard's ring, the debug log line, the route's and the client's traces;
 *   fail    finish, then done() gets the error (status, type, message, Retry-After), which the
 *           entry point writes as its JSON error answer (or MCP as a tool error);
 *   cancel  the caller went away: finish as 499 "client_gone", done() not called.
 *
 * A request type hands these steps what is its own in a table (sg_outcome_type_t): how its work
 * stops and what it is (one call, end(), so a request's end enters its file once more, not
 * twice), how its done() is called and its reference dropped. The steps only call forward into
 * that table. Loop thread of the request.
 */
#ifndef SG_GATEWAY_OUTCOME_H
#define SG_GATEWAY_OUTCOME_H

#include <stdint.h>
#include "clients.h"
#include "rate.h"
#include "status.h"
#include "trace.h"
#include "blob.h"

struct st_sg_route_t;

/** The outcome, passed to done(). Every pointer is borrowed for the duration of the callback. */
typedef struct st_sg_query_result_t {
    int status;              /* 200, or the HTTP status of the failure (429, 503, 504, 502, ...) */
    const char *type;        /* error type for the client ("timeout", "rate_limited", ...); NULL on 200 */
    const char *message;     /* error message for the client; NULL on 200 */
    uint32_t retry_after_s;  /* > 0: the client may retry after this many seconds */
    uint32_t n;              /* on 200: spec.n, else 0 */
    sg_blob_t *const *blobs; /* on 200: one result per spec text, in spec order (repeated texts
                              * share a blob); sg_blob_ref() one to keep it */
    const char *request_id;  /* the id the query logs under */
    /* on 200, where the answers came from (X-Searchgate-Provenance, provenance.h): */
    uint32_t n_distinct;                  /* distinct texts of the batch (on a fusion route: summed over the legs that answered) */
    uint32_t n_cached;                    /* of them answered by the cache (L1 or Redis) */
    int cache_on;                         /* the answers went through the cache (the route caches; never /access) */
    const char *params;                   /* the canonical search parameters the route's backend was given, or NULL */
    const struct st_sg_route_t *fallback; /* the route's fallback answered some of the queries, or NULL */
} sg_query_result_t;

/** A request as its end records it: filled by its type's end(), borrowed by the step. */
typedef struct st_sg_outcome_t {
    const char *request_id;
    const char *what;   /* the debug log line's word for it: "POST /retrieve", "POST /access", "fusion" */
    char log_more[192]; /* more for that line (the cache, a fallback), or ""; filled only when it is logged */
    sg_client_t *client;
    uint32_t n_queries;
    uint64_t start_us;
    int admitted;                    /* a part of a request its caller counts and traces (sg_query_spec_t.admitted) */
    const sg_route_meters_t *meters; /* where the request is counted: its route's (status.h) */
    sg_counter_t *cache_misses;      /* the route's, or NULL (no cache step: /access, a fusion) */
    uint32_t hits_l1, hits_redis, misses;
    /* the route's trace (or NULL; the client's is its conf's), and the record a trace takes, but
     * for what the step fills in: request_id, client, status, error, start_us, latency_us */
    const sg_trace_conf_t *route_trace;
    sg_trace_event_t ev;
} sg_outcome_t;

/** What a request type does at its end, handed to the steps below with the request (`req`). */
typedef struct st_sg_outcome_type_t {
    /** Stops its own work (timers, flights, its parts) and fills in what it is (the log line's
     * extra only when sg_log_enabled(SG_LL_DEBUG)). */
    void (*end)(void *req, sg_outcome_t *out);
    /** Hands its done() the failure `res`. */
    void (*answer)(void *req, const sg_query_result_t *res);
    /** Drops the request's own reference, the one its done() or its cancel ends. */
    void (*release)(void *req);
} sg_outcome_type_t;

/**
 * Ends request `req` of type `t`: sets `*answered`, stops its work and `rate`, records the outcome
 * as `status` (`type`: the error type, or NULL). The caller then answers, or not (cancelled).
 * Returns the latency recorded (us).
 */
uint64_t sg_outcome_finish(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate, int status, const char *type);
/** Unless already answered: finishes `req` and hands its done() the error, then drops its reference. */
void sg_outcome_fail(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate, int status, const char *type,
                     const char *msg, uint32_t retry_after_s);
/** Unless already answered: the caller went away; finishes `req` as 499 "client_gone" and drops its
 * reference, done() not called. */
void sg_outcome_cancel(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate);

/**
 * Counts a request that ended before it became one (malformed, empty, unauthorised once the route
 * is known) on its route's meters, by status, and in the dashboard's ring; returns its latency.
 */
uint64_t sg_outcome_count_early(const sg_route_meters_t *m, int status, uint32_t n_queries, uint64_t start_us);

#endif
