/*
 * server.h -- the gateway's runtime state: the event-loop threads and the server that owns them
 * (routes, clients, the h2o configuration), and the HTTP responses every route writes.
 *
 * Threads. N loop threads each own an h2o context, a SO_REUSEPORT listener and a timer heap.
 * Everything attached to a query (query.h) is touched only by its loop thread. Plugin threads
 * complete calls; completions travel back to loops through h2o_multithread messages. Objects that
 * cross threads (blobs, flights, calls) are either immutable after publication, reference-counted
 * atomically, or guarded by the lock named beside them. One header per concept: route.h (a
 * configured backend), clients.h, query.h (the pipeline), dispatch.h, retrieve.h; lib/ has
 * blobs, timers, metrics.
 */
#ifndef SG_GATEWAY_SERVER_H
#define SG_GATEWAY_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <h2o.h>
#include "common.h"
#include "config.h"
#include "metrics.h"
#include "timer.h"
#include "blas.h"
#include "route.h"

#define SG_VERSION "0.1.0"

typedef struct st_sg_server_t sg_server_t;
typedef struct st_sg_loop_t sg_loop_t;
typedef struct st_sg_mcp_loop_t sg_mcp_loop_t;

/* ---- loops ---- */

struct st_sg_loop_t {
    int id;
    sg_server_t *server;
    pthread_t tid;
    h2o_evloop_t *loop;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    int *listen_fds;                       /* this loop's descriptor of each of the server's listeners */
    h2o_socket_t **listeners;              /* their h2o sockets (NULL once closed) */
    _Atomic uint64_t alive_ms;             /* when the loop last went round (sg_server_loops_alive) */
    h2o_multithread_receiver_t deliveries; /* sg_waiter_t: results for requests of this loop */
    h2o_multithread_receiver_t finished;   /* sg_call_t: calls started by this loop that completed */
    sg_timers_t timers;                    /* deadlines of any length (timer.h) */
    sg_timer_t admit_timer;                /* wakes the admission when a qps token is due (dispatch.c) */
    int abandoned;                         /* the loop exited with connections still open (shutdown grace expired) */
    h2o_linklist_t active;                 /* sg_query_t not yet answered (for shutdown) */
    /* per-loop Redis cache connection (cache/redis.c); NULL when Redis is off */
    struct st_sg_redis_t *redis;
    sg_mcp_loop_t *mcp; /* MCP SSE streams of this loop (mcp.c); NULL when mcp is off */
};

struct st_sg_server_t {
    sg_config_t *cfg;
    sg_route_t *routes;
    size_t n_routes;
    h2o_globalconf_t h2o;
    h2o_hostconf_t *hostconf;
    sg_loop_t *loops;
    int n_loops;
    struct st_sg_listener_t *listeners; /* every listen entry (listen.h) */
    size_t n_listeners;
    pthread_barrier_t barrier; /* the loops and the main thread meet at start-up and shutdown */
    atomic_int stopping;
    atomic_int draining; /* shutting down: /health answers 503 "draining" so load balancers stop sending */
    uint64_t started_ms;
    struct st_sg_clients_t *clients;
    sg_counter_t *http_requests[8][SG_NUM_CODES]; /* by non-retrieve route */
    sg_blas_choice_t blas;                        /* the BLAS kernels the plugins run (blas.h) */
};

/* There is no global server: main() owns the one instance. A request reaches it through the loop
 * that owns its connection (sg_loop_of), a loop through `server`. */

/** The loop whose h2o context serves `req`. */
static inline sg_loop_t *sg_loop_of(h2o_req_t *req)
{
    return H2O_STRUCT_FROM_MEMBER(sg_loop_t, ctx, req->conn->ctx);
}

/** Whether every loop went round within the last `max_age_ms` (for the systemd watchdog). */
int sg_server_loops_alive(const sg_server_t *s, uint64_t max_age_ms);

/** Sends a JSON error and records metrics; `retry_after_s` > 0 adds a Retry-After header. */
void sg_send_error(h2o_req_t *req, int status, const char *type, const char *msg, uint32_t retry_after_s);
/** Sends a 200 JSON body (copied into the request pool). */
void sg_send_json(h2o_req_t *req, int status, const char *body, size_t len);

#endif
