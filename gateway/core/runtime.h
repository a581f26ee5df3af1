/*
 * runtime.h -- the gateway's runtime state: the event-loop threads and the server that owns them
 * (routes, clients, the h2o configuration). The loops are run by http/server.c (server.h), the
 * HTTP answers every route writes are in http/http.h; this header is only the state every room
 * shares, so it includes nothing above core/.
 *
 * Threads. N loop threads each own an h2o context, a descriptor of every listener (a SO_REUSEPORT
 * socket of their own for TCP) and a timer heap.
 * Everything attached to a query (query.h) is touched only by its loop thread. Plugin threads
 * complete calls; completions travel back to loops through h2o_multithread messages. Objects that
 * cross threads (blobs, flights, calls) are either immutable after publication, reference-counted
 * atomically, or guarded by the lock named beside them. One header per concept: route.h (a
 * configured backend), clients.h, query.h (the pipeline), dispatch.h, retrieve.h; lib/ has
 * blobs, timers, metrics.
 */
#ifndef SG_GATEWAY_RUNTIME_H
#define SG_GATEWAY_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <h2o.h>
#include "common.h"
#include "config.h"
#include "metrics.h"
#include "timer.h"
#include "route.h"

#define SG_VERSION "0.1.0"

/* The operations routes (/, /health, /metrics, /stats, /dashboard, /admin/reload) and every other
 * path: what sg_server_t.http_requests counts apart (http/http_common.h's SG_OPS_*) */
#define SG_HTTP_ROUTES 7

typedef struct st_sg_server_t sg_server_t;
typedef struct st_sg_loop_t sg_loop_t;
typedef struct st_sg_mcp_loop_t sg_mcp_loop_t;
typedef struct st_sg_gate_loop_t sg_gate_loop_t;

/* ---- loops ---- */

struct st_sg_loop_t {
    int id;
    sg_server_t *server;
    pthread_t tid;
    h2o_evloop_t *loop;
    h2o_context_t ctx; /* HTTP/1 */
    h2o_accept_ctx_t accept_ctx;
    int has_h2c;                           /* some listener serves h2c: HTTP/2 connections run on a context of their own */
    h2o_context_t h2c_ctx;                 /* (server.c, configure_h2o) */
    h2o_accept_ctx_t h2c_accept_ctx;       /* what the gate hands them to (gate.c) */
    int *listen_fds;                       /* this loop's descriptor of each of the server's listeners */
    h2o_socket_t **listeners;              /* their h2o sockets (NULL once closed) */
    _Atomic uint64_t alive_ms;             /* when the loop last went round (sg_server_loops_alive) */
    h2o_multithread_receiver_t deliveries; /* sg_waiter_t: results for requests of this loop */
    h2o_multithread_receiver_t finished;   /* sg_call_t: calls started by this loop that completed */
    sg_timers_t timers;                    /* deadlines of any length (timer.h) */
    sg_timer_t admit_timer;                /* wakes the admission when a qps token is due (dispatch.c) */
    int abandoned;                         /* the loop exited with connections still open (shutdown grace expired) */
    h2o_linklist_t active;                 /* sg_query_t not yet answered (for shutdown) */
    /* per-loop Redis connection (lib/redis/redis.c: the cache, budgets, global limits); NULL when Redis is off */
    struct st_sg_redis_t *redis;
    /* its Redis cache writes (cache.h: stored on any thread, sent on this loop); NULL when Redis is off */
    struct st_sg_cache_writer_t *cache_writer;
    sg_mcp_loop_t *mcp;   /* MCP SSE streams of this loop (mcp.c); NULL when mcp is off */
    sg_gate_loop_t *gate; /* accepting and the connections not yet handed to h2o (gate.c) */
    /* the configuration generation this loop serves new requests with (gen.h): a reference, taken
     * again by sg_loop_refresh_gen() when a newer one was published. Loop thread only. */
    struct st_sg_gen_t *gen;
    h2o_multithread_receiver_t reloaded; /* answers of POST /admin/reload from the reload thread (reload.c) */
};

/*
 * The process's budget of response memory (respond.h): bytes of result blobs pinned by queries
 * and answers in progress, plus the answers' output windows, against
 * limits.max_response_bytes_inflight. Shared by every loop (atomic).
 */
typedef struct st_sg_response_budget_t {
    _Atomic uint64_t held;  /* bytes */
    _Atomic uint64_t limit; /* limits.max_response_bytes_inflight (a reload may change it) */
    sg_gauge_t *m_held;
    sg_counter_t *m_refused, *m_waited, *m_too_large_estimate, *m_too_large_exact, *m_write_timeouts, *m_write_slow, *m_streamed;
} sg_response_budget_t;

struct st_sg_server_t {
    /* the start-up config: what only a restart changes (listen, threads, cache, mcp,
     * limits.max_body_bytes) is read here; everything else from the current generation (gen.h) */
    sg_config_t *cfg;
    h2o_globalconf_t h2o;     /* HTTP/1 */
    h2o_globalconf_t h2o_h2c; /* HTTP/2 connections (listen h2c): their own body limit */
    h2o_hostconf_t *hostconf; /* of `h2o` */
    sg_loop_t *loops;
    int n_loops;
    struct st_sg_listener_t *listeners; /* every listen entry (listen.h) */
    size_t n_listeners;
    pthread_barrier_t barrier; /* the loops and the main thread meet at start-up and shutdown */
    atomic_int stopping;
    atomic_int draining; /* shutting down: /health answers 503 "draining" so load balancers stop sending */
    uint64_t started_ms;
    /* generations (gen.h): the current one (a reference) and every one still referenced, under gen_mutex */
    pthread_mutex_t gen_mutex;
    struct st_sg_gen_t *gen;
    _Atomic(struct st_sg_gen_t *) gen_now; /* == gen; loops compare it without the mutex */
    struct st_sg_gen_t *live;              /* the live list (newest first) */
    _Atomic uint32_t n_live;
    int log_level_override;                                    /* --log-level, which a reload does not change; -1 = none */
    sg_counter_t *http_requests[SG_HTTP_ROUTES][SG_NUM_CODES]; /* by operations route (http/server.c), status */
    const struct st_sg_blas_choice_t *blas; /* the BLAS kernels the plugins run (lib/blas.h), NULL before start-up chose */
    sg_response_budget_t responses;         /* response memory held by the process (respond.h) */
    sg_counter_t *body_bytes_parsed;        /* request bodies handed to the JSON parser */
    /* one per listener, in s->listeners order: who may talk to it (gate.c); set by sg_gate_init(),
     * read-only afterwards */
    struct st_sg_gate_listener_t *gate;
    /* what the assembly lends the HTTP server (http/server.h: POST /admin/reload, reload.c), or NULL */
    const struct st_sg_server_hooks_t *hooks;
};

/* There is no global server: main() owns the one instance. A request reaches it through the loop
 * that owns its connection (sg_loop_of), a loop through `server`. */

/** The loop whose h2o context serves `req`: entry 0 of each context's storage (server.c). */
static inline sg_loop_t *sg_loop_of(h2o_req_t *req)
{
    return req->conn->ctx->storage.entries[0].data;
}

#endif
