/*
 * server.h -- the gateway's runtime state: event-loop threads, loaded backends, per-loop timers,
 * and the objects a /retrieve request moves through (request, flight, call, blob).
 *
 * Threads. N loop threads each own an h2o context, a SO_REUSEPORT listener and a timer heap.
 * Everything attached to a query (sg_query_t) is touched only by its loop thread. Plugin
 * threads complete calls; completions travel back to loops through h2o_multithread messages.
 * Objects that cross threads (blobs, flights, calls) are either immutable after publication,
 * reference-counted atomically, or guarded by the lock named beside them.
 */
#ifndef SG_GATEWAY_SERVER_H
#define SG_GATEWAY_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <h2o.h>
#include "sg_backend.h"
#include "common.h"
#include "config.h"
#include "metrics.h"
#include "plugin.h"
#include "blas.h"

#define SG_VERSION "0.1.0"

typedef struct st_sg_server_t sg_server_t;
typedef struct st_sg_loop_t sg_loop_t;
typedef struct st_sg_backend_t sg_backend_t;
typedef struct st_sg_client_t sg_client_t;
typedef struct st_sg_query_t sg_query_t;
struct st_sg_query_result_t;
typedef struct st_sg_call_t sg_call_t;
typedef struct st_sg_flight_t sg_flight_t;
typedef struct st_sg_waiter_t sg_waiter_t;

/* ---- timers: a binary heap per loop, fired between h2o_evloop_run() rounds ---- */

typedef struct st_sg_timer_t sg_timer_t;
typedef void (*sg_timer_cb)(sg_timer_t *t);
struct st_sg_timer_t {
    uint64_t at_ms;
    size_t _heap_index; /* 0 = not armed, else 1-based position */
    sg_timer_cb cb;
};

/** Arms (or re-arms) `t` on `loop` to fire at `at_ms` (sg_now_ms() clock). Loop thread only. */
void sg_timer_start(sg_loop_t *loop, sg_timer_t *t, uint64_t at_ms, sg_timer_cb cb);
void sg_timer_stop(sg_loop_t *loop, sg_timer_t *t);
static inline int sg_timer_is_armed(const sg_timer_t *t)
{
    return t->_heap_index != 0;
}

/* ---- results ---- */

enum { SG_SHAPE_BOTH = 0, SG_SHAPE_SCORED = 1, SG_SHAPE_FLAT = 2 };

/**
 * The result of one query, shared read-only between threads once published (refcount is atomic).
 * SG_SHAPE_BOTH blobs come from a backend: `json` is the scored fragment
 * `[{"document":DOC,"score":S},...]` and `docs` locates each DOC inside it, so the flat fragment
 * `[DOC,...]` can be spliced too. SCORED/FLAT blobs come from the cache and hold one final fragment.
 */
typedef struct st_sg_blob_t {
    _Atomic uint32_t refs;
    uint8_t shape;
    uint32_t n_hits;
    size_t json_len;
    struct {
        uint32_t off, len;
    } * docs; /* n_hits entries for SG_SHAPE_BOTH, else NULL */
    char *json;
} sg_blob_t;

/** Builds a SG_SHAPE_BOTH blob from a plugin's hits (copies everything; refs = 1). */
sg_blob_t *sg_blob_from_hits(const sg_hits *hits);
/** Wraps a final fragment (copied; refs = 1). */
sg_blob_t *sg_blob_from_fragment(int shape, const char *json, size_t len);
static inline sg_blob_t *sg_blob_ref(sg_blob_t *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}
void sg_blob_release(sg_blob_t *b);
/** Size in bytes of the fragment for the given return_scores flag. */
size_t sg_blob_fragment_len(const sg_blob_t *b, int return_scores);
/** Writes the fragment to `dst` (sg_blob_fragment_len bytes); returns the end. */
char *sg_blob_write_fragment(const sg_blob_t *b, int return_scores, char *dst);
/** Appends the fragment for the given return_scores flag. */
void sg_blob_append_fragment(const sg_blob_t *b, int return_scores, sg_buf_t *out);
/** Approximate memory held by the blob (for the L1 byte budget). */
size_t sg_blob_footprint(const sg_blob_t *b);

/* ---- backends ---- */

enum {
    SG_CODE_200,
    SG_CODE_400,
    SG_CODE_401,
    SG_CODE_404,
    SG_CODE_405,
    SG_CODE_413,
    SG_CODE_422,
    SG_CODE_429,
    SG_CODE_500,
    SG_CODE_502,
    SG_CODE_503,
    SG_CODE_504,
    SG_CODE_OTHER,
    SG_NUM_CODES
};
int sg_code_index(int status);
extern const int sg_code_values[SG_NUM_CODES];

typedef struct st_sg_admit_queue_t sg_admit_queue_t;

struct st_sg_backend_t {
    int index;
    const sg_backend_conf_t *conf;
    sg_plugin_t plugin;
    sg_backend *inst;
    char *identity;    /* cache identity: plugin kind + name + plugin identity() */
    int serves_access; /* POST /access is answered (the plugin has access() and a page store) */
    /* metrics */
    sg_counter_t *requests[SG_NUM_CODES];
    sg_counter_t *queries[SG_NUM_CODES];
    sg_hist_t *latency;
    sg_gauge_t *inflight_requests;
    sg_gauge_t *inflight_queries; /* handed to the plugin */
    sg_gauge_t *queued_queries;   /* waiting for admission */
    sg_counter_t *calls;          /* plugin search() calls */
    sg_counter_t *call_errors;
    sg_hist_t *call_latency;
    sg_counter_t *batch_queries; /* queries per call: sum; with calls gives the mean batch size */
    sg_counter_t *shed;          /* calls refused because the admission queue was full */
    sg_counter_t *expired;       /* queued calls dropped at their deadline */
    sg_counter_t *coalesced;     /* queries that joined an identical in-flight query */
    sg_counter_t *fallbacks;     /* requests answered by the fallback backend */
    sg_counter_t *cache_hits_l1, *cache_hits_redis, *cache_misses;
    /* admission: guarded by admit_mutex */
    pthread_mutex_t admit_mutex;
    uint64_t admit_inflight;        /* queries */
    uint64_t admit_queued;          /* queries */
    sg_admit_queue_t *admit_queues; /* circular list of per-client queues with work (DRR) */
};

/* ---- clients (identity, quotas) ---- */

struct st_sg_client_t {
    char *id;
    const sg_client_conf_t *conf;
    int keyed;
    /* GCRA state, guarded by the client table mutex */
    uint64_t tat_us;
    /* queries in flight for this client (all backends); atomic */
    _Atomic uint64_t inflight;
    /* LRU links for anonymous clients */
    sg_client_t *lru_prev, *lru_next;
    sg_client_t *hash_next;
    _Atomic uint32_t refs;
    /* metrics; label value is the id, or "other" beyond the cardinality cap */
    sg_counter_t *m_requests, *m_queries, *m_rate_limited, *m_queued, *m_shed, *m_timeouts, *m_hits_l1, *m_hits_redis, *m_misses;
    sg_hist_t *m_wait;
};

/* ---- loops ---- */

struct st_sg_loop_t {
    int id;
    sg_server_t *server;
    pthread_t tid;
    h2o_evloop_t *loop;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    int listen_fd;
    h2o_socket_t *listener;
    h2o_multithread_receiver_t deliveries; /* sg_waiter_t: results for requests of this loop */
    h2o_multithread_receiver_t finished;   /* sg_call_t: calls started by this loop that completed */
    /* timer heap */
    sg_timer_t **heap;
    size_t heap_len, heap_cap;
    int abandoned;         /* the loop exited with connections still open (shutdown grace expired) */
    h2o_linklist_t active; /* sg_query_t not yet answered (for shutdown) */
    /* per-loop Redis cache connection (cache/redis.c); NULL when Redis is off */
    struct st_sg_redis_t *redis;
};

struct st_sg_server_t {
    sg_config_t *cfg;
    sg_backend_t *backends;
    size_t n_backends;
    h2o_globalconf_t h2o;
    h2o_hostconf_t *hostconf;
    sg_loop_t *loops;
    int n_loops;
    uint16_t bound_port;
    pthread_barrier_t barrier; /* the loops and the main thread meet at start-up and shutdown */
    atomic_int stopping;
    uint64_t started_ms;
    struct st_sg_clients_t *clients;
    sg_counter_t *http_requests[8][SG_NUM_CODES]; /* by non-retrieve route */
    sg_blas_choice_t blas;                        /* the BLAS kernels the plugins run (blas.h) */
};

extern sg_server_t sg_server;

/* ---- a query (query.h: the pipeline every entry point runs; the fields are for query.c and
 * dispatch.c) ---- */

typedef struct st_sg_uq_t {
    const char *text; /* points into the query's arena */
    uint32_t len;
    uint64_t hash;
    sg_blob_t *blob;     /* set once answered */
    sg_waiter_t *waiter; /* while waiting on a flight */
    uint8_t fallback_tried;
} sg_uq_t;

struct st_sg_query_t {
    h2o_linklist_t link; /* in loop->active until answered */
    int refs;            /* loop thread only: the query itself + an outstanding Redis round trip */
    void (*done)(void *ctx, const struct st_sg_query_result_t *res);
    void *ctx;
    sg_loop_t *loop;
    sg_backend_t *backend; /* the route's backend */
    sg_backend_t *serving; /* the backend answering now (differs after a fallback) */
    sg_client_t *client;
    uint32_t topk;
    int return_scores;
    int is_access; /* POST /access: no cache, no flights */
    uint64_t start_us;
    uint64_t deadline_ms;
    sg_timer_t timer; /* deadline, or the rate-limit wake-up */
    int timer_is_ratelimit;
    uint64_t max_wait_us; /* longest rate-limit wait this query accepts */
    uint32_t n_queries, n_uniq;
    uint32_t *slot_uniq;
    sg_uq_t *uniq;
    uint32_t n_pending; /* uniq entries without a blob */
    char *arena;
    uint32_t hits_l1, hits_redis, misses;
    int responded;
    char request_id[24];
    int fallback_used;
    int leg;      /* a fusion route's leg (query.h) */
    char *params; /* the route backend's canonical "search_params" (check_params), or NULL */

    /* budget.c: the reservation dispatch draws from, while sg_dispatch_misses() runs */
    struct st_sg_budget_charge_t *budget;
};

/** The search parameters of the backend answering now: the route's request parameters apply to
 * the route's own backend only, never to its fallback. */
static inline const char *sg__query_params(const sg_query_t *q)
{
    return q->serving == q->backend ? q->params : NULL;
}

/** Sends a JSON error and records metrics; `retry_after_s` > 0 adds a Retry-After header. */
void sg_send_error(h2o_req_t *req, int status, const char *type, const char *msg, uint32_t retry_after_s);
/** Sends a 200 JSON body (copied into the request pool). */
void sg_send_json(h2o_req_t *req, int status, const char *body, size_t len);
/** Runs the timers of `loop` that are due. Loop thread. */
void sg__timers_run(sg_loop_t *loop);
/** 1 when at least one loop has a live Redis connection, 0 when none, 2 when the circuit breaker is
 * open (Redis stopped answering and is skipped), -1 when Redis is off. */
int sg_server_redis_state(void);

/* retrieve.c: POST /retrieve and /access, an HTTP adapter over query.h */
/** Handles POST /retrieve[/<backend>] and POST /access. Returns 0 (always handled). */
int sg_retrieve_handle(sg_loop_t *loop, h2o_req_t *req, int is_access, const char *backend_name, size_t backend_name_len);

/* query.c: internal steps dispatch.c continues a query with (loop thread) */
/** A waiter finished (result or failure) for `q`; continues the query. */
void sg__query_on_result(sg_query_t *q, uint32_t uniq_index, sg_blob_t *blob, sg_status status, const char *detail,
                         uint32_t retry_after_s);
/** The cache step: looks the open distinct queries up (sg_cache_lookup), then continues. */
void sg__query_lookup(sg_query_t *q);
/** Continues a query after its cache lookup: answers it, or dispatches the misses. */
void sg__query_after_cache(sg_query_t *q);
/** Answers when every distinct query has its answer (dispatch found the last ones in L1). */
void sg__query_finish_if_complete(sg_query_t *q);
static inline void sg__query_ref(sg_query_t *q)
{
    ++q->refs;
}
/** Drops a reference; frees the query when none is left. */
void sg__query_unref(sg_query_t *q);
/** The cache key of one query text for backend `b` (its identity, topk and parameters). */
void sg__query_cache_key(sg_buf_t *out, const sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len);

/* dispatch.c: flights, calls, admission */
/**
 * Sends the unanswered distinct queries of `q` to its serving backend: joins identical in-flight
 * queries (singleflight), groups the rest into calls of at most `chunk` queries and admits them.
 */
void sg_dispatch_misses(sg_query_t *q);
/** Detaches `q` from every flight it waits on (query finished or went away). Loop thread. */
void sg_dispatch_abandon(sg_query_t *q);
/** Registers the per-loop receivers. */
void sg_dispatch_init_loop(sg_loop_t *loop);
void sg_dispatch_init(void);
void sg_dispatch_dispose(void);
/** Number of flights in the table (for tests and /stats). */
size_t sg_dispatch_flights(void);

#endif
