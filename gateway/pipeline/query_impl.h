/*
 * query_impl.h -- the inside of a query (query.h): the struct, for the files that run it: query.c
 * (its life) and dispatch.c (flights and calls, which continue it through the steps query.c hands
 * over in `next`, dispatch.h). Everything here runs on the query's loop thread. Entry points use
 * query.h; the unit tests drive the steps declared at the end.
 *
 * It includes neither query.h nor dispatch.h: dispatch.c reads the struct, query.c calls
 * dispatch, and nothing calls back up but through `next`.
 */
#ifndef SG_GATEWAY_QUERY_IMPL_H
#define SG_GATEWAY_QUERY_IMPL_H

#include "runtime.h"
#include "route.h"
#include "clients.h"
#include "rate.h"
#include "trace.h"
#include "blob.h"
#include "../../cache/cache.h"

typedef struct st_sg_query_t sg_query_t;
struct st_sg_query_result_t;
struct st_sg_dispatch_next_t;
typedef struct st_sg_waiter_t sg_waiter_t;

typedef struct st_sg_uq_t {
    const char *text; /* points into the query's arena */
    uint32_t len;
    sg_blob_t *blob;     /* set once answered */
    sg_waiter_t *waiter; /* while waiting on a flight */
    uint32_t mult;       /* queries of the batch with this text: the answer repeats its blob this often */
    uint8_t fallback_tried;
    uint8_t source;            /* where its answer came from: SG_SRC_* (trace.h) */
    uint32_t key_off, key_len; /* its cache key in the query's `keys` (key_len 0: none made) */
    sg_l1_miss_t *miss;        /* L1's watch on that key since the cache step missed it (l1.h), until
                                * dispatch reads it or hands it to the flight that stores the answer */
} sg_uq_t;

struct st_sg_query_t {
    h2o_linklist_t link; /* in loop->active until answered */
    int refs;            /* loop thread only: the query itself + an outstanding Redis round trip */
    void (*done)(void *ctx, const struct st_sg_query_result_t *res); /* sg_query_done_fn (query.h) */
    const struct st_sg_dispatch_next_t *next;                        /* query.c's steps that dispatch continues it with */
    void *ctx;
    sg_loop_t *loop;
    struct st_sg_gen_t *gen; /* the configuration generation of its route and client (referenced) */
    sg_route_t *backend;     /* the route's backend */
    sg_route_t *serving;     /* the backend answering now (differs after a fallback) */
    sg_client_t *client;
    uint32_t topk;
    int return_scores;
    int is_access; /* POST /access: no cache, no flights */
    uint64_t start_us;
    uint64_t deadline_ms;
    sg_timer_t timer; /* deadline, the rate-limit wake-up, or the response-budget wait */
    int timer_kind;   /* SG__QT_* */
    sg_rate_t rate;   /* the client's rate limit (rate.h), while it decides or waits */
    uint32_t n_queries, n_uniq;
    uint32_t *slot_uniq;
    sg_uq_t *uniq;
    uint32_t n_pending; /* uniq entries without a blob */
    char *arena;
    uint32_t hits_l1, hits_redis, misses;
    int responded;
    char request_id[24];
    int fallback_used;
    int admitted;              /* the caller admitted and counts the request (sg_query_spec_t.admitted) */
    char *params;              /* the route backend's canonical "search_params" (check_params), or NULL */
    sg_buf_t keys;             /* the cache keys the cache step made, back to back (sg_uq_t.key_off) */
    const sg_route_t *keys_of; /* the backend they were made for: a fallback's keys differ */

    /* budget.c: the reservation dispatch draws from, while sg__dispatch_misses() runs */
    struct st_sg_budget_charge_t *budget;

    /* the bounds of the answer (respond.h); max_response_bytes 0 = none (the caller bounds it) */
    int shape;                   /* SG_SHAPE_* the blobs appear in */
    uint64_t max_response_bytes; /* the whole answer, envelope_bytes included */
    uint64_t envelope_bytes;     /* what the entry point adds around the pieces */
    uint64_t result_bytes;       /* pieces of the answered queries (repeats included) */
    uint64_t blob_bytes;         /* the distinct blobs it holds */
    uint64_t held;               /* charged to the process's response budget */
    uint64_t reserve;            /* to reserve before the cache step (the estimate) */
    uint64_t budget_wait_end_ms; /* while waiting for room in the budget */
};

enum { SG__QT_DEADLINE = 0, SG__QT_BUDGET = 2 };

/** The search parameters of the backend answering now: the route's request parameters apply to
 * the route's own backend only, never to its fallback. */
static inline const char *sg__query_params(const sg_query_t *q)
{
    return q->serving == q->backend ? q->params : NULL;
}

/** The cache key of one query text for backend `b` (its identity, topk and parameters). */
static inline void sg__query_cache_key(sg_buf_t *out, const sg_route_t *b, uint32_t topk, const char *params, const char *text,
                                       size_t len)
{
    sg_cache_key(out, b->core->identity, topk, params, text, len);
}

/** The cache key of distinct query `u` of `q` for the backend serving it now, into `out` (emptied
 * first): a copy of the one the cache step made when it was made for that backend, else made anew
 * (a fallback's identity differs). */
static inline void sg__query_key_of(sg_buf_t *out, const sg_query_t *q, const sg_uq_t *u)
{
    out->len = 0;
    if (u->key_len != 0 && q->keys_of == q->serving)
        sg_buf_append(out, q->keys.base + u->key_off, u->key_len);
    else
        sg__query_cache_key(out, q->serving, q->topk, sg__query_params(q), u->text, u->len);
}

/* query.c's steps, declared for the unit tests that drive a query step by step */
/** The cache step: looks the open distinct queries up (sg_cache_lookup), then continues. */
void sg__query_lookup(sg_query_t *q);
/** Continues a query after its cache lookup: answers it, or dispatches the misses. */
void sg__query_after_cache(sg_query_t *q);
/** Drops a reference; frees the query when none is left. */
void sg__query_unref(sg_query_t *q);
/** The steps every query hands dispatch (its `next`), for a test that builds a query by hand. */
extern const struct st_sg_dispatch_next_t sg__query_next;

#endif
