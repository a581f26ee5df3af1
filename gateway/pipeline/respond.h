/*
 * respond.h -- the bounds of answers and the writer of large ones.
 *
 *   - bytes per answer: limits.max_response_bytes, checked by the query pipeline before any
 *     backend work (an estimate from the route's mean DOC size, route.h) and exactly as results
 *     arrive;
 *   - response memory held by the process: limits.max_response_bytes_inflight, a budget every
 *     query and answer in progress charges with the bytes of the result blobs it pins and its
 *     output window (sg_response_budget_t in server.h);
 *   - the writer: a 200 answer {"result":[...]} spliced from result blobs and handed to h2o one
 *     window at a time as h2o asks for more, so an answer in progress holds its blobs and one
 *     window, never a copy of its body; or a body built whole (MCP), handed over the same way and
 *     charged to the budget until its last byte is written;
 *   - the write timeout: a reader that takes no bytes for limits.write_timeout_ms is
 *     disconnected -- for these answers and for event streams (MCP's GET /sse), through
 *     sg_write_watch_t; and the reader of an answer that takes it slower than
 *     limits.min_write_bytes_per_s on average (after a grace of write_timeout_ms) too.
 *
 * Loop thread, except where a function says "any thread".
 */
#ifndef SG_GATEWAY_RESPOND_H
#define SG_GATEWAY_RESPOND_H

#include <stdatomic.h>
#include <stdint.h>
#include "buf.h"
#include "runtime.h"
#include "route.h"
#include "blob.h"

/** Bytes of an answer's output window (the most a streamed answer holds beside its blobs). */
#define SG_RESPOND_WINDOW (64 * 1024)

/** Sets the budget's limit and registers its metrics. Main thread, before the loops start. */
void sg_respond_init(sg_server_t *s);
/** A new limits.max_response_bytes_inflight (a reload): holders above it keep what they have. Any thread. */
void sg_respond_set_limit(sg_server_t *s, uint64_t limit);

/*
 * The budget's counter (sg_response_budget_t, runtime.h): what queries and answers hold of it.
 * A counter, not a step: the holders take and give back their bytes in place (like
 * sg_clients_ref()), and the gauge searchgate_response_bytes_held follows it. Any thread.
 */

/** Takes `bytes` more of the process's response budget for a holder that has `own` bytes of it
 * already, if they fit or when nobody else holds any (one answer larger than the budget still
 * runs alone). Returns 0, or -1 without taking anything. */
static inline int sg_respond_reserve(sg_server_t *s, uint64_t own, uint64_t bytes)
{
    sg_response_budget_t *rb = &s->responses;
    uint64_t cur = atomic_load_explicit(&rb->held, memory_order_relaxed);
    do {
        if (cur > own && cur + bytes > atomic_load_explicit(&rb->limit, memory_order_relaxed))
            return -1;
    } while (!atomic_compare_exchange_weak_explicit(&rb->held, &cur, cur + bytes, memory_order_relaxed, memory_order_relaxed));
    if (rb->m_held != NULL) /* NULL in unit tests that build a server by hand */
        sg_gauge_add(rb->m_held, (int64_t)bytes);
    return 0;
}

/** Charges `bytes` whether they fit or not (memory already in use). */
static inline void sg_respond_grow(sg_server_t *s, uint64_t bytes)
{
    atomic_fetch_add_explicit(&s->responses.held, bytes, memory_order_relaxed);
    if (s->responses.m_held != NULL)
        sg_gauge_add(s->responses.m_held, (int64_t)bytes);
}

/** Gives back `bytes` taken by sg_respond_reserve() or sg_respond_grow(). */
static inline void sg_respond_release(sg_server_t *s, uint64_t bytes)
{
    if (bytes == 0)
        return;
    atomic_fetch_sub_explicit(&s->responses.held, bytes, memory_order_relaxed);
    if (s->responses.m_held != NULL)
        sg_gauge_add(s->responses.m_held, -(int64_t)bytes);
}

/** Bytes around the pieces of an answer of `n` queries: {"result":[ ]} and n - 1 commas. */
static inline uint64_t sg_respond_envelope(uint32_t n)
{
    return 13 + (n > 0 ? (uint64_t)n - 1 : 0);
}
/** Whose answer is bounded, and by how much (limits.max_response_bytes), for the two 413 checks
 * below: the same for a query's answer and a route type's (a fusion route's fused answer). */
typedef struct st_sg_respond_bound_t {
    const char *kind;  /* the message's subject: "backend", "fusion route" */
    const char *name;  /* the route's name */
    uint64_t max;      /* the most bytes of the whole answer; 0 = no bound */
    uint64_t envelope; /* what the entry point writes around the results */
} sg_respond_bound_t;

/* The 413s of the checks below, once they found the answer over its bound (respond.c): counted by
 * stage, the client's message written into `msg`. Out of line: an answer within bounds never
 * leaves the caller's file. */
void sg__respond_over_estimate(sg_server_t *s, const sg_respond_bound_t *b, uint64_t low, uint32_t n, const char *unit,
                               uint64_t per, uint32_t doc, const char *note, char *msg, size_t msg_size);
void sg__respond_over_exact(sg_server_t *s, const sg_respond_bound_t *b, uint64_t bytes, uint32_t pending, uint32_t distinct,
                            char *msg, size_t msg_size);

/**
 * Before any work: the least the answer would be -- `n` queries of `per` documents each (`unit`:
 * "topk" or "pages"), at half the mean DOC size `doc` (the safe side of a mean; `note` says whose,
 * e.g. ", half the route's mean", or "") plus the envelope -- fits b->max. Returns 0 when it does
 * or nothing bounds or is known (b->max or `doc` 0); else that estimate, counted as a 413
 * (searchgate_response_too_large_total{stage="estimate"}) with the client's message in `msg`.
 */
static inline uint64_t sg_respond_check_estimate(sg_server_t *s, const sg_respond_bound_t *b, uint32_t n, const char *unit,
                                                 uint64_t per, uint32_t doc, const char *note, char *msg, size_t msg_size)
{
    if (b->max == 0 || doc == 0)
        return 0;
    uint64_t low = b->envelope + (uint64_t)n * per * (doc / 2);
    if (low <= b->max)
        return 0;
    sg__respond_over_estimate(s, b, low, n, unit, per, doc, note, msg, msg_size);
    return low;
}

/**
 * On the results: `bytes` of the answer so far (the envelope included), with `pending` of
 * `distinct` queries still to come (0: all in), fit b->max. Returns 0, or -1: a 413 counted
 * (stage="exact") with the client's message in `msg`.
 */
static inline int sg_respond_check_exact(sg_server_t *s, const sg_respond_bound_t *b, uint64_t bytes, uint32_t pending,
                                         uint32_t distinct, char *msg, size_t msg_size)
{
    if (b->max == 0 || bytes <= b->max)
        return 0;
    sg__respond_over_exact(s, b, bytes, pending, distinct, msg, msg_size);
    return -1;
}

/** The exact size of the answer {"result":[P0,...]} where Pi is blobs[i] in `shape` (blob.h). */
uint64_t sg_respond_size(sg_blob_t *const *blobs, uint32_t n, int shape);
/** The bytes of the distinct blobs among `blobs` (a repeated query shares its blob). */
uint64_t sg_respond_blob_bytes(sg_blob_t *const *blobs, uint32_t n);

/**
 * Answers 200 with {"result":[P0,P1,...]}, Pi being blobs[i] in `shape`, with the exact
 * Content-Length, written window by window as h2o asks for more (HTTP/1.1 and HTTP/2 alike).
 * The writer takes its own references on the blobs and charges them and its window to the
 * process's budget until it has written their last byte; the caller keeps its own references.
 * A reader that takes no bytes for limits.write_timeout_ms, or that is behind
 * limits.min_write_bytes_per_s after that grace, is disconnected and everything freed.
 * The caller may add headers (req->res.headers) before the call. Loop thread.
 */
void sg_respond_blobs(h2o_req_t *req, sg_blob_t *const *blobs, uint32_t n, int shape);

/**
 * Answers `status` with `body` (Content-Type `content_type`, a static string), taking the buffer
 * over (`*body` is left empty): its memory is charged to the process's budget until the request
 * is disposed, and it is handed to h2o one window at a time, under the same write timeout as
 * sg_respond_blobs(). The caller may add headers before the call. Loop thread.
 */
void sg_respond_buffer(h2o_req_t *req, int status, const char *content_type, sg_buf_t *body);

/**
 * The write timeout of a response in progress. h2o 2.2.5 has none while a response is being
 * written (HTTP/1 clears its request timer once the request is read; HTTP/2 arms its idle timer
 * only without open streams). While bytes wait to be written, the watch checks four times per
 * limits.write_timeout_ms whether the reader took any -- a proceed (progress()) or the socket's
 * send queue shrinking -- and, for a watch with a `total` (an answer, not an event stream),
 * whether it is behind limits.min_write_bytes_per_s: rate x (time since the first byte - the
 * timeout as a grace). When nothing moved for the whole timeout, or the reader is behind, it
 * counts it (searchgate_response_write_timeouts_total{reason="idle"|"slow"}), logs it (one line
 * per 10 s for each reason) and shuts the connection's socket down; h2o's own error path then
 * closes the connection and disposes the request. Loop thread.
 */
typedef struct st_sg_write_watch_t {
    sg_timer_t timer;
    sg_loop_t *loop;
    h2o_req_t *req;
    const char *what;     /* for the log line: "an answer", "an SSE stream" */
    uint64_t sent, total; /* bytes handed to h2o, of `total` (0: an open-ended stream), for the log */
    uint64_t start_ms;    /* the first progress: the answer's first byte (the minimum rate's clock) */
    uint64_t progress_ms; /* the last time the reader took bytes */
    int64_t outq;         /* the socket's send queue at the last check; -1 = unknown */
    int timed_out;
} sg_write_watch_t;

/** Sets up a watch for `req` (not checking yet); `what` is a static string. */
void sg_respond_watch_init(sg_write_watch_t *w, h2o_req_t *req, const char *what);
/** Bytes were handed to h2o, or h2o took the previous ones (proceed): progress, and the clock
 * runs until the next progress or idle(). */
void sg_respond_watch_progress(sg_write_watch_t *w);
/** Nothing waits to be written (an idle event stream) or the request ends: stops checking. */
void sg_respond_watch_idle(sg_write_watch_t *w);

#endif
