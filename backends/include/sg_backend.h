/*
 * sg_backend.h -- the ABI between the searchgate gateway and its backend plugins.
 *
 * A backend is a shared object that exports one function, sg_backend_entry(), returning a
 * pointer to a constant sg_backend_vtable. The gateway dlopen()s it with RTLD_NOW|RTLD_LOCAL,
 * checks the header of the table and refuses to start on any mismatch.
 *
 * This is the only project header a plugin includes. It uses fixed-width C types only: no
 * libh2o, cJSON or libcurl type crosses the boundary, so a plugin may use any JSON or HTTP
 * library it likes.
 *
 * Compatibility: the gateway loads a plugin when
 *     plugin.abi_major == SG_BACKEND_ABI_MAJOR && plugin.abi_minor <= SG_BACKEND_ABI_MINOR
 * Every struct and enum here is append-only: new members go at the end and are guarded by
 * struct_size; enum values are never renumbered or reused.
 *
 * ABI history
 *   1.0  create/destroy/search/cancel/health/stats, optional access and identity.
 *   1.1  optional has_access: an instance that implements access() may still have no page store;
 *        per-request search parameters: optional vtable.check_params, and sg_search.params (the
 *        canonical text check_params returned). A 1.0 plugin never sees parameters: the gateway
 *        answers 422 to requests that carry them for its routes.
 *   1.2  admission and retries are the gateway's: optional vtable.limits hands the plugin's configured
 *        upstream limits (max_inflight, qps/burst, max_queue, retries) to the gateway, which enforces
 *        them in its dispatch; sg_search.max_attempts is the number of attempts per upstream request
 *        the gateway allows the call (0 from an older host: the plugin's own setting), and
 *        host->retry_at() charges each retry to the route's qps caps (sg_search.admission).
 *   1.3  bounds: sg_search.start_by_ms, the last moment to start upstream work for the call (its
 *        deadline less the route's floor); sg_limits.doc_bytes, the typical size of one DOC, from
 *        which the gateway estimates a response before any backend work. The gateway keeps a
 *        call's admission slot until done(): done() says the upstream work has really ended.
 *   1.4  host->hold() and host->release(): a call that failed while upstream work it started still
 *        runs (one query of several failed, the others are being read to their end) is answered
 *        at once with done() and keeps its admission slot until the plugin calls release().
 *
 * Threading contract (see docs/plugins.md for the long form)
 *   - create() and destroy() run on the main thread, before the loops start / after they stop.
 *   - search(), access(), cancel(), health(), stats() and identity() run on any gateway event-loop
 *     thread, concurrently. They must never block: no disk I/O, no network round trip, no
 *     waiting on a lock that is held while doing either.
 *   - search() returns SG_OK and then calls done() EXACTLY ONCE, from any thread (possibly from
 *     inside search() itself), or it returns an error and never calls done().
 *   - The sg_search passed to search() and every byte it points to stay valid until done() has
 *     returned. The sg_result passed to done() is borrowed: it only has to stay valid until
 *     done() returns; the gateway copies what it keeps.
 *   - cancel() asks the plugin to finish a search early (the deadline passed or every client
 *     waiting for it went away). It is only a hint: done() must still be called exactly once,
 *     with results or with SG_ECANCELED. The call keeps its admission slot (max_inflight) until
 *     done(), so a plugin calls done() only once the work it started has really ended: a batch
 *     being computed has finished, an upstream request has been answered (or its connection
 *     closed, for an upstream that stops working when its client hangs up). A plugin that wants
 *     to answer earlier (a failure already decided while the rest still runs) calls
 *     host->hold(admission) before done() and host->release(admission) once the work ended
 *     (ABI 1.4).
 *   - destroy() completes every pending search with SG_ECANCELED before it returns.
 */
#ifndef SG_BACKEND_H
#define SG_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SG_BACKEND_ABI_MAJOR 1
#define SG_BACKEND_ABI_MINOR 4
#define SG_BACKEND_ENTRY_NAME "sg_backend_entry"

#if defined(__GNUC__)
#define SG_BACKEND_EXPORT __attribute__((visibility("default")))
#define SG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SG_BACKEND_EXPORT
#define SG_PRINTF(f, a)
#endif

/**
 * Outcome of a plugin operation. Append new codes at the end; never renumber or reuse.
 * The gateway maps each to an HTTP status (docs/plugins.md has the table):
 *   SG_EINVAL 422, SG_ETOOBIG 413, SG_ETIMEDOUT 504, SG_EUPSTREAM 502, SG_EINTERNAL 500,
 *   SG_ENOMEM / SG_EUNAVAIL / SG_EOVERLOAD / SG_ECANCELED 503.
 */
typedef enum sg_status {
    SG_OK = 0,
    SG_EINVAL = 1,    /* the request is malformed for this backend (e.g. a query it cannot take) */
    SG_ENOMEM = 2,    /* out of memory inside the plugin */
    SG_ETIMEDOUT = 3, /* the deadline passed inside the plugin or upstream */
    SG_EUNAVAIL = 4,  /* not ready, or the upstream could not be reached */
    SG_EUPSTREAM = 5, /* the upstream answered with an error or garbage */
    SG_EOVERLOAD = 6, /* the plugin's own bounded queue is full: try again later */
    SG_ECANCELED = 7, /* finished early because of cancel() or destroy() */
    SG_EINTERNAL = 8, /* a bug or an unexpected failure */
    SG_ETOOBIG = 9    /* the request exceeds a limit of the plugin (e.g. topk) */
} sg_status;

enum { SG_LOG_ERROR = 0, SG_LOG_WARN = 1, SG_LOG_INFO = 2, SG_LOG_DEBUG = 3 };
enum { SG_METRIC_COUNTER = 0, SG_METRIC_GAUGE = 1 };

/**
 * Services the gateway lends to a plugin; valid from create() until destroy() returns. All of
 * them are thread-safe.
 */
typedef struct sg_host_api {
    uint32_t struct_size; /* sizeof(sg_host_api) as compiled by the host: check before using members added after 1.0 */
    uint32_t abi_minor;
    /** Writes one log line, prefixed with the level, time and the backend name. */
    void (*log)(int level, const char *backend, const char *fmt, ...) SG_PRINTF(3, 4);
    /** Monotonic clock in milliseconds; the same clock as sg_search.deadline_ms. */
    uint64_t (*now_ms)(void);
    /**
     * Reports one sample while inside stats(). `sink` is the opaque argument stats() received.
     * `name` is a Prometheus metric name without the "searchgate_backend_" prefix the host adds;
     * `labels` is NULL or extra label pairs in exposition syntax, e.g. `shard="0"`; the host adds
     * the backend label itself. `type` is SG_METRIC_COUNTER or SG_METRIC_GAUGE.
     */
    void (*metric)(void *sink, const char *name, const char *help, int type, const char *labels, double value);
    /* --- 1.2: check struct_size first (SG_HOST_HAS_RETRY_AT) --- */
    /**
     * The plugin is about to send one more upstream request for a running call -- a retry, or the
     * same request with another key -- not before `earliest_ms`. Returns when it may start
     * (>= `earliest_ms`, host->now_ms() time): the request takes a token of the route's qps caps
     * (sg_limits), so retries count against `qps` like first attempts. `admission` is the call's
     * sg_search.admission; NULL returns `earliest_ms`. Any thread; never blocks.
     */
    uint64_t (*retry_at)(void *admission, uint64_t earliest_ms);
    /* --- 1.4: check struct_size first (SG_HOST_HAS_HOLD) --- */
    /**
     * Separates a call's answer from the end of its upstream work. Called before done() for the
     * call whose sg_search.admission is `admission`: done() then answers the call's requests at
     * once, but the call keeps its admission slot (max_inflight) -- and `admission` stays valid
     * -- until the plugin calls release(admission), exactly once, when the upstream work the
     * call started has really ended. For a call that failed while some of its upstream
     * requests are still being read to their end. Any thread; never blocks.
     */
    void (*hold)(void *admission);
    /** Ends a hold(): the call's slot is free again. Any thread, after done() was called. */
    void (*release)(void *admission);
} sg_host_api;

/** True when the host lends the 1.2 member retry_at. */
#define SG_HOST_HAS_RETRY_AT(h)                                                                                                    \
    ((h)->struct_size >= offsetof(sg_host_api, retry_at) + sizeof((h)->retry_at) && (h)->retry_at != NULL)
/** True when the host lends the 1.4 members hold and release. */
#define SG_HOST_HAS_HOLD(h)                                                                                                        \
    ((h)->struct_size >= offsetof(sg_host_api, release) + sizeof((h)->release) && (h)->hold != NULL && (h)->release != NULL)

/** One query: UTF-8 text, not NUL-terminated. */
typedef struct sg_query {
    const char *text;
    size_t len;
} sg_query;

/** One search call: a batch of distinct queries that share topk and a deadline. */
typedef struct sg_search {
    uint32_t struct_size;    /* sizeof(sg_search) as compiled by the host */
    uint32_t topk;           /* >= 1; the number of hits wanted per query */
    const sg_query *queries; /* n_queries entries */
    size_t n_queries;        /* >= 1 */
    uint64_t deadline_ms;    /* absolute, in host->now_ms() time; 0 = none */
    const char *request_id;  /* NUL-terminated, for log correlation */
    /* --- 1.1: read only when struct_size covers it (SG_SEARCH_HAS_PARAMS) --- */
    /**
     * NULL, or the request's search parameters as this plugin's check_params() canonicalised them
     * (NUL-terminated, never empty). Every query of the call shares them.
     */
    const char *params;
    /* --- 1.2: read only when struct_size covers it (SG_SEARCH_MAX_ATTEMPTS) --- */
    /**
     * Attempts per upstream request the gateway allows this call: the first one plus retries of
     * transient failures (1 = no retry). Retries also stop at deadline_ms. The gateway decides it
     * from the route's `retries` and the plugin's own (sg_limits.retries); 0 only for a plugin
     * without limits(), which keeps its own setting.
     */
    uint32_t max_attempts;
    /** Opaque: the call's admission state, for host->retry_at() while the call runs (until done()),
     * and host->hold()/release() (1.4). */
    void *admission;
    /* --- 1.3: read only when struct_size covers it (SG_SEARCH_START_BY) --- */
    /**
     * Absolute (host->now_ms() time); 0 = none. No new upstream work for this call may start
     * after it -- a batch still queued in the plugin, a retry -- because too little of the
     * deadline would be left to use its answer: the deadline less the route's floor
     * (min_remaining_ms). Such a call ends with SG_ETIMEDOUT. Work already running is not
     * affected. Never later than deadline_ms.
     */
    uint64_t start_by_ms;
} sg_search;

/** True when the host's sg_search carries the 1.1 member `params`. */
#define SG_SEARCH_HAS_PARAMS(s) ((s)->struct_size >= offsetof(sg_search, params) + sizeof(const char *))
/** The 1.3 member start_by_ms, or deadline_ms from an older host (0 = none). */
#define SG_SEARCH_START_BY(s)                                                                                                      \
    ((s)->struct_size >= offsetof(sg_search, start_by_ms) + sizeof(uint64_t) && (s)->start_by_ms != 0 ? (s)->start_by_ms           \
                                                                                                      : (s)->deadline_ms)
/** The 1.2 member max_attempts, or `def` (the plugin's own retries + 1) from an older host. */
#define SG_SEARCH_MAX_ATTEMPTS(s, def)                                                                                             \
    ((s)->struct_size >= offsetof(sg_search, max_attempts) + sizeof(uint32_t) && (s)->max_attempts != 0 ? (s)->max_attempts : (def))

/**
 * One hit. `doc` is a complete JSON object (the DOC of protocols.md: at least "contents", and
 * "id"/"url" strings where the backend knows them). The gateway splices these bytes into the
 * response as they are, so they must be valid JSON; non-ASCII stays raw UTF-8.
 */
typedef struct sg_hit {
    const char *doc;
    size_t doc_len;
    double score;
} sg_hit;

/** The hits of one query, best first, at most topk of them. */
typedef struct sg_hits {
    const sg_hit *hits;
    size_t n_hits;
} sg_hits;

/**
 * The outcome of a search() or access(). When status is SG_OK, `queries` has one entry per
 * query of the call, in order. Otherwise `detail` (NUL-terminated, may be NULL) says why; it
 * reaches the client in the JSON error body, so it must not contain secrets.
 */
typedef struct sg_result {
    sg_status status;
    const char *detail;
    const sg_hits *queries;
    size_t n_queries;
    uint32_t retry_after_s; /* for SG_EOVERLOAD/SG_EUNAVAIL: a hint for the Retry-After header; 0 = none */
} sg_result;

/**
 * Completion callback. Called exactly once per search()/access() that returned SG_OK, from any
 * thread. `result` and everything it points to are valid only until this call returns.
 */
typedef void (*sg_done_fn)(void *cb_data, const sg_result *result);

typedef struct sg_backend sg_backend; /* plugin-private instance */

/** Which calls an sg_limits describes (vtable.limits). */
enum { SG_OP_SEARCH = 0, SG_OP_ACCESS = 1 };

/**
 * 1.2: the admission limits a plugin's config asks for, handed to the gateway, which enforces
 * them (together with the route's own) before it calls search()/access(): the plugin itself
 * queues nothing. Limits count *units*: one upstream request. `per_call` says what one unit is.
 * Zero members mean "no limit of the plugin's own". The gateway zero-fills the struct, sets
 * struct_size and retries = -1 before it calls limits(); a plugin writes only members that
 * struct_size covers.
 */
typedef struct sg_limits {
    uint32_t struct_size;  /* sizeof(sg_limits) as compiled by the host */
    uint32_t per_call;     /* 1: a call is one upstream request (a batch); 0: one per query of the call */
    uint32_t max_inflight; /* units running at once; 0 = no cap */
    uint32_t max_queue;    /* units waiting for admission before the gateway answers 503; 0 = no cap */
    double qps;            /* unit starts per second (token bucket); 0 = no cap */
    double burst;          /* depth of the token bucket (>= 1 when qps > 0) */
    int32_t retries;       /* retries of a transient failure the config asks for; -1 = the plugin never retries */
    /** NULL, or the prefix of the plugin's HTTP metrics (e.g. "serper"): the gateway reports the
     * units that waited for a qps token as <prefix>_http_qps_delayed_total. Static storage or valid until destroy(). */
    const char *metric_prefix;
    /** SG_OP_ACCESS only: 1 = access() calls draw on the very caps of search() (one upstream behind
     * both); max_inflight, max_queue, qps and burst of this answer are then not read. */
    uint32_t share_search;
    /* --- 1.3: written only when struct_size covers it (SG_LIMITS_HAS_DOC_BYTES) --- */
    /**
     * The mean size in bytes of one DOC this operation returns (a corpus row, a page), when the
     * plugin knows it from its data; 0 = unknown. The gateway estimates a response from it
     * before any backend work (limits.max_response_bytes) until it has measured the route's
     * answers itself.
     */
    uint32_t doc_bytes;
} sg_limits;

/** True when the host's sg_limits has the 1.3 member doc_bytes. */
#define SG_LIMITS_HAS_DOC_BYTES(l) ((l)->struct_size >= offsetof(sg_limits, doc_bytes) + sizeof(uint32_t))

typedef struct sg_backend_vtable {
    /* --- header: layout frozen forever --- */
    uint32_t abi_major;
    uint32_t abi_minor;
    uint32_t struct_size; /* sizeof(sg_backend_vtable) as the plugin saw it */
    const char *name;     /* plugin kind, e.g. "local", "bm25", "qdrant", "serper", "upstream", "example" */
    const char *version;  /* the plugin's own release string */

    /* --- 1.0 --- */
    /**
     * Main thread, before serving. `config_json` is the backend's "config" object from the
     * gateway config, serialised (NUL-terminated, `config_len` bytes). `instance` is the
     * configured backend name (for logs). `base_dir` is the directory of the gateway config
     * file, against which relative paths in the config are resolved. On failure, write a
     * reason that names the offending key and value into `err` and return an error status.
     */
    sg_status (*create)(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                        size_t config_len, sg_backend **out, char *err, size_t err_size);
    /** Main thread, after the loops stopped: completes pending searches with SG_ECANCELED and frees everything. */
    void (*destroy)(sg_backend *self);
    /** Any loop thread; must not block. See the threading contract at the top of this file. */
    sg_status (*search)(sg_backend *self, const sg_search *search, sg_done_fn done, void *cb_data);
    /** Any loop thread; may be NULL. A hint to finish the search started with this cb_data early. */
    void (*cancel)(sg_backend *self, void *cb_data);
    /** Cheap, non-blocking: the last known state. Writes a short reason into `detail` when not SG_OK. */
    sg_status (*health)(sg_backend *self, char *detail, size_t detail_size);
    /** May be NULL. Emits backend-specific metrics through host->metric(sink, ...). */
    void (*stats)(sg_backend *self, void *sink);
    /**
     * May be NULL. A short string that changes whenever the data behind the backend changes
     * (model, index, corpus, upstream settings); the gateway puts it into result-cache keys.
     * Valid until destroy().
     */
    const char *(*identity)(sg_backend *self);
    /**
     * May be NULL. Page lookup for POST /access: each sg_query of `search` is a URL; the result
     * has one entry per URL with zero hits (unknown) or one hit whose doc is the page object.
     * Same completion contract as search().
     */
    sg_status (*access)(sg_backend *self, const sg_search *search, sg_done_fn done, void *cb_data);

    /* --- 1.1 (the host reads these only when struct_size covers them) --- */
    /**
     * May be NULL. Whether this instance serves access(): a plugin may implement access() and
     * still be configured without a page store. 0 = no: the gateway answers POST /access on the
     * backend with 404 and GET / shows "access": false, exactly as when access is NULL. When NULL,
     * every instance of a plugin with access() serves it. Main thread, once, after create().
     */
    int (*has_access)(sg_backend *self);
    /**
     * May be NULL: the backend takes no per-request search parameters. Any loop thread; must not
     * block. `json` is the request's "search_params" object (`json_len` bytes, serialised by the
     * gateway). Returns SG_OK and writes the canonical form into `canon` (NUL-terminated): equal
     * requests must give equal text, and the empty string means "the route's defaults" (the
     * request is then served and cached exactly like one without the field). Otherwise returns
     * SG_EINVAL (HTTP 422) or SG_ETOOBIG (413, over a bound of the config) with a reason for the
     * client in `detail`. The canonical text reaches search() as sg_search.params and is part of
     * the result-cache key and of the identity of identical in-flight queries.
     */
    sg_status (*check_params)(sg_backend *self, const char *json, size_t json_len, char *canon, size_t canon_size, char *detail,
                              size_t detail_size);
    /* --- 1.2 (the host reads these only when struct_size covers them) --- */
    /**
     * May be NULL: the plugin asks for no admission limits of its own. Main thread, once with
     * SG_OP_SEARCH and once with SG_OP_ACCESS, after create(). Fills `out` with the limits this
     * instance's config asks for (leaving it untouched = none); the gateway enforces them beside
     * the route's own, so the stricter of each holds, and passes the retry budget back in
     * sg_search.max_attempts.
     */
    void (*limits)(sg_backend *self, int op, sg_limits *out);
    /* --- 1.4+ members go below; the host checks struct_size first --- */
} sg_backend_vtable;

/** Fills the frozen header; use as the first initializer of the plugin's vtable. */
#define SG_BACKEND_HEADER(name_, version_)                                                                                         \
    .abi_major = SG_BACKEND_ABI_MAJOR, .abi_minor = SG_BACKEND_ABI_MINOR, .struct_size = sizeof(sg_backend_vtable),                \
    .name = (name_), .version = (version_)

typedef const sg_backend_vtable *(*sg_backend_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* SG_BACKEND_H */
