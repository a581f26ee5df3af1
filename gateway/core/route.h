/*
 * route.h -- a route: one configured backend as the gateway serves it. Not to be confused with
 * `sg_backend`, the plugin's own instance behind the ABI (sg_backend.h).
 *
 * A route has two halves, because a configuration reload (gen.h) must not reload an index that
 * did not change:
 *
 *   - sg_route_core_t: what outlives a reload -- the loaded plugin and its instance, the cache
 *     identity, the mean DOC size, and the admission state (calls in flight and queued, the caps'
 *     counters and token buckets, the floor's window). Reference-counted: every generation whose
 *     route kept the same plugin config shares it; the last one to go destroys the instance.
 *   - sg_route_t: the route as one generation configures it -- its settings (`conf`, in that
 *     generation's config), the limits its admission applies, the metrics, the provenance.
 *     Created with its generation, read-only afterwards, freed with it.
 *
 * Admission state is guarded by the core's admit_mutex, metrics are atomic, the rest is read-only.
 */
#ifndef SG_GATEWAY_ROUTE_H
#define SG_GATEWAY_ROUTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "sg_backend.h"
#include "config.h"
#include "metrics.h"
#include "plugin.h"
#include "provenance.h"
#include "status.h"

typedef struct st_sg_route_t sg_route_t;
typedef struct st_sg_admit_queue_t sg_admit_queue_t;

/*
 * One admission limit of a route (dispatch.c): a cap on units in flight and waiting, and a token
 * bucket on unit starts. A unit is a query, or a whole call when `per_call` is set (a plugin that
 * sends one upstream request per batch). Zero bounds mean none. The limits are the generation's
 * (sg_route_t.caps); what they count is the core's (sg_route_core_t.cap_state).
 */
typedef struct st_sg_admit_cap_t {
    uint32_t max_inflight, max_queue;
    double qps, burst;
    int per_call;
    sg_counter_t *qps_delayed; /* units that had to wait for a token */
} sg_admit_cap_t;

/** What a cap counts, under the core's admit_mutex. */
typedef struct st_sg_cap_state_t {
    uint64_t inflight, queued; /* units */
    double tokens;             /* the bucket, refilled at the cap's qps up to its burst */
    uint64_t tokens_at_ms;
} sg_cap_state_t;

/* The caps of a route: its own rate (route keys qps/burst, in queries) and the limits its plugin's
 * config asks for (ABI 1.2 limits(), in the plugin's units), one set for search(), one for access(). */
enum { SG_CAP_ROUTE, SG_CAP_SEARCH, SG_CAP_ACCESS, SG_NUM_CAPS };

typedef struct st_sg_route_core_t sg_route_core_t;
struct st_sg_gen_t;

/* What a route keeps across reloads (see the top of this file). Created by gen.c on the main
 * thread or the reload thread, destroyed there too (never on a loop or a plugin thread). */
struct st_sg_route_core_t {
    _Atomic uint32_t refs;             /* the generations whose route shares it */
    uint32_t id;                       /* unique in the process: the singleflight key's route part */
    char *key;                         /* what it was created from: plugin, config, rerank, file identities */
    char *name;                        /* the route's name when it was created */
    sg_plugin_t plugin;                /* the loaded .so; plugin.vt is the rerank stage's table when it has one */
    sg_backend *inst;                  /* the plugin's instance (or the rerank stage in front of it) */
    const sg_backend_vtable *inner_vt; /* the plugin's own table and instance, behind any rerank stage */
    sg_backend *inner_inst;
    char *identity;         /* cache identity: plugin kind + name + plugin identity() */
    int serves_access;      /* POST /access is answered (the plugin has access() and a page store) */
    int destroyed;          /* inst was destroyed (shutdown) */
    _Atomic int in_current; /* the current generation has a route on this core (dispatch pumps it) */
    /* the mean bytes of one DOC for search and access (sg_route_doc_bytes() below): the plugin's
     * figure (sg_limits.doc_bytes) until calls measured it; 0 = unknown. Any thread, relaxed. */
    _Atomic uint32_t doc_bytes[2];
    /* admission: guarded by admit_mutex (set up with the core's first route: admit_ready) */
    int admit_ready;
    pthread_mutex_t admit_mutex;
    uint64_t admit_inflight;        /* queries */
    uint64_t admit_queued;          /* queries */
    sg_admit_queue_t *admit_queues; /* circular list of per-client queues with work (DRR) */
    sg_cap_state_t cap_state[SG_NUM_CAPS];
    /* the floor (min_remaining_quantile): durations of the last SG_FLOOR_WINDOW successful calls,
     * under admit_mutex, and the quantile of them last computed (ms; any thread, relaxed) */
    uint32_t floor_ring[64];
    uint32_t floor_n, floor_at;
    _Atomic uint32_t floor_observed_ms;
};

struct st_sg_route_t {
    int index;                     /* in its generation's routes[] */
    struct st_sg_gen_t *gen;       /* the generation it belongs to */
    const sg_backend_conf_t *conf; /* in gen->cfg */
    sg_route_core_t *core;         /* the plugin instance and the admission state (shared across reloads) */
    /* metrics */
    sg_route_meters_t meters;     /* its requests by status, their latency, in flight (status.h) */
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
    /* set up with the generation (sg_dispatch_setup_route), read-only afterwards */
    sg_admit_cap_t caps[SG_NUM_CAPS];
    int access_shares_search; /* access() calls draw on the SG_CAP_SEARCH cap (sg_limits.share_search) */
    uint32_t chunk[2];        /* queries per call for search and access: the route's chunk within the caps' bursts */
    uint32_t max_attempts[2]; /* sg_search.max_attempts for search and access; 0 = the plugin decides */
    uint32_t admits[2];       /* the most queries of one request it can ever admit for search and access, up to
                                 limits.max_queries (sg_dispatch_capacity): the pipeline's check asks dispatch
                                 only beyond it (0: always asks) */
    sg_provenance_t prov;     /* what produced its answers (provenance.h); built with the generation, read-only */
};

/*
 * The route's mean DOC size, which the query pipeline estimates an answer's size from before any
 * backend work (respond.h, limits.max_response_bytes). It is the core's counter, kept across
 * reloads: these read and update it in place, any thread (relaxed atomics).
 */

/** The mean size of one DOC of route `b` for `op` (SG_OP_SEARCH or SG_OP_ACCESS); 0 = unknown. */
static inline uint32_t sg_route_doc_bytes(const sg_route_t *b, int op)
{
    return atomic_load_explicit(&b->core->doc_bytes[op != 0], memory_order_relaxed);
}

/** Folds `n_docs` DOCs of `doc_bytes` bytes in all, as one call of route `b` returned them, into
 * the mean: a moving mean, 1/8 per call. Racing updates lose one sample, which is harmless. */
static inline void sg_route_observe_docs(sg_route_t *b, int op, uint64_t doc_bytes, uint64_t n_docs)
{
    if (n_docs == 0)
        return;
    uint64_t x = doc_bytes / n_docs;
    x = x > UINT32_MAX ? UINT32_MAX : x != 0 ? x : 1;
    _Atomic uint32_t *mean = &b->core->doc_bytes[op != 0];
    uint64_t old = atomic_load_explicit(mean, memory_order_relaxed);
    uint64_t next = old == 0 ? x : (old * 7 + x + 4) / 8;
    atomic_store_explicit(mean, (uint32_t)(next != 0 ? next : 1), memory_order_relaxed);
}

#endif
