/*
 * route.h -- a route: one configured backend as the gateway serves it (its config, the loaded
 * plugin instance, the cache identity, per-route metrics and admission state). Not to be confused
 * with `sg_backend`, the plugin's own instance behind the ABI (sg_backend.h), which a route holds
 * in `inst`.
 *
 * Routes are created at start-up (main.c) and live until exit; loops and plugin threads share
 * them. Admission state is guarded by `admit_mutex`, metrics are atomic, the rest is read-only.
 */
#ifndef SG_GATEWAY_ROUTE_H
#define SG_GATEWAY_ROUTE_H

#include <pthread.h>
#include <stdint.h>
#include "sg_backend.h"
#include "config.h"
#include "metrics.h"
#include "plugin.h"
#include "provenance.h"

typedef struct st_sg_route_t sg_route_t;
typedef struct st_sg_admit_queue_t sg_admit_queue_t;

/*
 * One admission limit of a route (dispatch.c): a cap on units in flight and waiting, and a token
 * bucket on unit starts. A unit is a query, or a whole call when `per_call` is set (a plugin that
 * sends one upstream request per batch). Zero bounds mean none.
 */
typedef struct st_sg_admit_cap_t {
    uint32_t max_inflight, max_queue;
    double qps, burst;
    int per_call;
    uint64_t inflight, queued; /* units, under the route's admit_mutex */
    double tokens;             /* the bucket, refilled at qps up to burst */
    uint64_t tokens_at_ms;
    sg_counter_t *qps_delayed; /* units that had to wait for a token */
} sg_admit_cap_t;

/* The caps of a route: its own rate (route keys qps/burst, in queries) and the limits its plugin's
 * config asks for (ABI 1.2 limits(), in the plugin's units), one set for search(), one for access(). */
enum { SG_CAP_ROUTE, SG_CAP_SEARCH, SG_CAP_ACCESS, SG_NUM_CAPS };

/* HTTP statuses the per-route and per-endpoint metrics count separately */
enum {
    SG_CODE_200,
    SG_CODE_400,
    SG_CODE_401,
    SG_CODE_403,
    SG_CODE_404,
    SG_CODE_405,
    SG_CODE_408,
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

struct st_sg_route_t {
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
    sg_counter_t *floor_refused; /* calls not started: less than the route's floor of their deadline was left */
    sg_gauge_t *floor_ms;        /* the floor in force (min_remaining_ms, or the observed quantile) */
    /* the mean bytes of one DOC for search and access (respond.h): the plugin's figure
     * (sg_limits.doc_bytes) until calls measured it; 0 = unknown. Any thread, relaxed. */
    _Atomic uint32_t doc_bytes[2];
    /* the floor (min_remaining_quantile): durations of the last SG_FLOOR_WINDOW successful calls,
     * under admit_mutex, and the quantile of them last computed (ms; any thread, relaxed) */
    uint32_t floor_ring[64];
    uint32_t floor_n, floor_at;
    _Atomic uint32_t floor_observed_ms;
    /* admission: guarded by admit_mutex */
    pthread_mutex_t admit_mutex;
    uint64_t admit_inflight;        /* queries */
    uint64_t admit_queued;          /* queries */
    sg_admit_queue_t *admit_queues; /* circular list of per-client queues with work (DRR) */
    sg_admit_cap_t caps[SG_NUM_CAPS];
    int access_shares_search; /* access() calls draw on the SG_CAP_SEARCH cap (sg_limits.share_search) */
    /* set up once at start-up (sg_dispatch_setup_route), read-only afterwards */
    uint32_t chunk[2];        /* queries per call for search and access: the route's chunk within the caps' bursts */
    uint32_t max_attempts[2]; /* sg_search.max_attempts for search and access; 0 = the plugin decides */
    sg_provenance_t prov;     /* what produced its answers (provenance.h); built at start-up, read-only */
};

#endif
