/*
 * dispatch.h -- how a query's misses reach a backend (dispatch.c): singleflight across loops,
 * calls of at most `chunk` queries, fair admission, and the result blobs built from plugin hits.
 */
#ifndef SG_GATEWAY_DISPATCH_H
#define SG_GATEWAY_DISPATCH_H

#include <stddef.h>
#include "sg_backend.h"
#include "blob.h"
#include "runtime.h"

typedef struct st_sg_query_t sg_query_t;
typedef struct st_sg_uq_t sg_uq_t;

/*
 * How dispatch continues a query: query.c's steps, handed over in the query itself
 * (sg_query_t.next, query_impl.h), so dispatch only calls forward and never names query.c.
 * Loop thread of the query.
 */
typedef struct st_sg_dispatch_next_t {
    /** Distinct query `u` of `q` took a blob (a late L1 hit): count it in the answer's bounds. */
    void (*took_blob)(sg_query_t *q, sg_uq_t *u);
    /** A waiter of `q` finished for distinct query `uniq_index`: a result, or a failure. */
    void (*on_result)(sg_query_t *q, uint32_t uniq_index, sg_blob_t *blob, sg_status status, const char *detail,
                      uint32_t retry_after_s);
    /** Answers `q` when every distinct query has its answer (dispatch found the last ones in L1). */
    void (*finish_if_complete)(sg_query_t *q);
} sg_dispatch_next_t;

/** Builds a result blob from a plugin's hits (copies everything; refs = 1). Any thread. */
sg_blob_t *sg_blob_from_hits(const sg_hits *hits);
/** Registers the per-loop receivers. */
void sg_dispatch_init_loop(sg_loop_t *loop);
void sg_dispatch_init(void);
void sg_dispatch_dispose(void);
/**
 * Sets up the admission limits of route `b` (main or reload thread, b->core created; `vt` and
 * `inst` are the plugin's own, behind any rerank stage): its own qps/burst, the limits its plugin's
 * config asks for (ABI 1.2 `limits`), the chunk per operation and the retry budget passed in
 * sg_search.max_attempts. A new core's counters start empty with full buckets; a core that an
 * earlier generation's route already set up keeps them.
 */
void sg_dispatch_setup_route(sg_route_t *b, const sg_backend_vtable *vt, sg_backend *inst);
/**
 * host->retry_at (ABI 1.2): a running call's plugin sends one more upstream request not before
 * `earliest_ms`; takes a token of the call's plugin cap and returns when the request may start.
 * `admission` is the call (sg_search.admission). Any thread; never blocks (a short mutex hold).
 */
uint64_t sg_dispatch_retry_at(void *admission, uint64_t earliest_ms);
/**
 * host->hold and host->release (ABI 1.4): between them the call `admission` keeps its admission
 * slot although its plugin already called done() (its requests are answered): the plugin's
 * upstream is still working for it. Any thread.
 */
void sg_dispatch_hold(void *admission);
void sg_dispatch_release(void *admission);
/**
 * The most queries of one request route `b` could ever admit at once for search (is_access 0)
 * or access: on an idle route, its calls of `chunk` queries start while the in-flight caps allow
 * and the rest must fit the queues (max_queue of the route and of its plugin's caps). At most
 * `max`. After sg_dispatch_setup_route(); any thread (reads configuration only).
 */
uint32_t sg_dispatch_capacity(sg_route_t *b, int is_access, uint32_t max);
/** 0 when `n` queries fit sg_dispatch_capacity(), else -1 with a message naming the bounds, the
 * capacity and the change that would make them fit. */
int sg_dispatch_describe_capacity(sg_route_t *b, int is_access, uint32_t n, char *msg, size_t size);
/** Number of flights in the table (for tests and /stats). */
size_t sg_dispatch_flights(void);

/* ---- steps of the query pipeline (query.c, budget.c): internal ---- */

/**
 * Sends the unanswered distinct queries of `q` to its serving backend: joins identical in-flight
 * queries (singleflight), groups the rest into calls of at most `chunk` queries and admits them.
 */
void sg__dispatch_misses(sg_query_t *q);
/** Detaches `q` from every flight it waits on (query finished or went away). Loop thread. */
void sg__dispatch_abandon(sg_query_t *q);

#endif
