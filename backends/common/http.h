/*
 * http.h -- the outbound HTTP engine shared by the remote backends (serper, qdrant, upstream).
 *
 * One engine = one thread running a libcurl multi handle with curl_multi_poll(); other threads
 * hand it transfers through a mutex-protected inbox and wake it with curl_multi_wakeup(), so a
 * gateway loop thread never blocks on the network. The engine keeps connections alive (one
 * connection cache per engine), speaks HTTP/1.1 over plain TCP and negotiates HTTP/2 by ALPN
 * over TLS only (Debian's libcurl 7.88 breaks h2c), verifies TLS peers by
 * default, caps the response size, and applies per-transfer connect and total timeouts bounded
 * by the caller's deadline.
 *
 * It admits every transfer it is given: the limits that protect a paid upstream key
 * (`max_inflight`, `qps`/`burst`, `max_queue`) are read with the other common keys but enforced
 * by the gateway before it calls the plugin (sg_remote_limits() hands them over through the ABI
 * 1.2 limits()). A retry waiting for its backoff whose deadline passes fails with
 * SG_HTTP_ETIMEDOUT without ever being sent.
 *
 * Completion callbacks run on the engine thread, one at a time, with no engine lock held: they
 * may submit new transfers (retries) and cancel others. They must not block.
 *
 * The file also holds what the three plugins share around the engine: the common config keys
 * (SG_HTTP_CONF_KEYS), a registry of running jobs so cancel() can find a job by its cb_data
 * (sg_http_jobs_t), and small JSON/UTF-8 helpers and the DOC lists of the reply parsers (the fuzz
 * targets compile http.c alone with a parser, so what a parser calls lives here). The rest of
 * the plugin scaffolding they share (health state, retry policy, config opening) is remote.h.
 */
#ifndef SG_BACKENDS_COMMON_HTTP_H
#define SG_BACKENDS_COMMON_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "sg_backend.h"
#include "buf.h"

/* ---- engine ---- */

typedef struct st_sg_http_t sg_http_t;

/** Engine settings; a plugin's config table fills them from the common keys (SG_HTTP_CONF_KEYS). */
typedef struct st_sg_http_conf_t {
    uint32_t connect_timeout_ms; /* TCP + TLS handshake bound for new connections */
    uint32_t timeout_ms;         /* default total bound of one transfer (a deadline may shorten it) */
    size_t max_response_bytes;   /* larger bodies fail with SG_HTTP_ETOOBIG */
    char *ca_file;               /* PEM bundle to verify TLS peers with; NULL = the system store */
    int tls_verify;              /* verify the peer certificate and host name (default 1) */
    char *proxy;                 /* proxy URL; NULL = none (proxy environment variables are ignored) */
    int http2;                   /* offer HTTP/2 by ALPN on https:// URLs (never h2c) */
    /* admission keys: not enforced by the engine; the gateway enforces them (sg_remote_limits) */
    uint32_t max_inflight;    /* requests running at once; 0 = unlimited */
    double qps;               /* request starts per second; 0 = unlimited */
    double burst;             /* token bucket depth for qps (>= 1) */
    uint32_t max_queue;       /* requests waiting for an in-flight/qps slot before the gateway answers 503; 0 = no bound */
    uint32_t max_connections; /* per-host connection cap (CURLMOPT_MAX_HOST_CONNECTIONS); 0 = none */
    int on_cancel;            /* SG_HTTP_DRAIN (read a running transfer to its end) or SG_HTTP_CLOSE */
    uint64_t (*now_ms)(void); /* the clock deadlines are expressed in (host->now_ms) */
    const char *name;         /* for the thread name */
} sg_http_conf_t;

/**
 * What sg_http_cancel() does to a transfer already sent (config key "on_cancel"). A caller that
 * gave up on its answer (deadline passed, clients gone) does not stop an upstream that keeps
 * working after the client hangs up -- the Search-R1 Python servers do -- so by default the
 * transfer is read to its end (bounded by timeout_ms) and completes as usual: the plugin calls
 * done() only then, and the gateway's in-flight slot for the call stays taken while the
 * upstream really works. SG_HTTP_CLOSE closes the connection at once (for upstreams that stop
 * on a hang-up). Transfers not yet sent are canceled either way.
 */
enum { SG_HTTP_DRAIN = 0, SG_HTTP_CLOSE = 1 };
extern const char *const sg_http_on_cancel_names[]; /* "drain", "close" */

/** Outcome class of a transfer. SG_HTTP_OK means an HTTP response arrived (any status). */
typedef enum sg_http_err {
    SG_HTTP_OK = 0,
    SG_HTTP_ECONNECT,  /* could not resolve or connect (refused, unreachable, connect timeout) */
    SG_HTTP_ETIMEDOUT, /* the total timeout or the deadline passed */
    SG_HTTP_ETOOBIG,   /* the response exceeded max_response_bytes */
    SG_HTTP_ETLS,      /* TLS handshake or certificate verification failed */
    SG_HTTP_EPROTO,    /* the connection broke mid-exchange, empty or malformed HTTP reply */
    SG_HTTP_ECANCELED, /* sg_http_cancel() or engine shutdown */
    SG_HTTP_EINTERNAL  /* anything else (out of memory, libcurl refused an option) */
} sg_http_err;

/** What a completion callback sees; valid only during the callback. */
typedef struct st_sg_http_resp_t {
    sg_http_err err;
    long status;      /* HTTP status when err == SG_HTTP_OK, else 0 */
    const char *body; /* NUL-terminated (the NUL is not counted); never NULL */
    size_t body_len;
    const char *content_type; /* "" when absent */
    int32_t retry_after_s;    /* Retry-After in seconds; -1 when absent */
    const char *message;      /* why it failed (libcurl's words), "" on SG_HTTP_OK */
    uint32_t elapsed_ms;      /* from start to completion (0 when never started) */
    int deadline;             /* SG_HTTP_ETIMEDOUT because the caller's deadline (not timeout_ms) ran out */
} sg_http_resp_t;

typedef void (*sg_http_cb)(void *ud, const sg_http_resp_t *resp);

/** One transfer to submit. Strings are copied; `body` is taken over on success (freed with free()). */
typedef struct st_sg_http_req_t {
    const char *method; /* "GET" or "POST" */
    const char *url;
    const char *const *headers; /* NULL or NULL-terminated "Name: value" lines */
    char *body;                 /* POST body (malloc'ed) or NULL */
    size_t body_len;
    uint64_t deadline_ms;   /* absolute, in conf.now_ms() time; 0 = none */
    uint32_t timeout_ms;    /* 0 = conf.timeout_ms */
    uint64_t not_before_ms; /* do not start before this time (retry backoff); 0 = at once */
    uint64_t start_by_ms;   /* not started by then (waiting for not_before_ms): SG_HTTP_ETIMEDOUT; 0 = deadline_ms */
    uint64_t tag;           /* sg_http_cancel() cancels every transfer with this tag */
    sg_http_cb cb;
    void *ud;
} sg_http_req_t;

/** Snapshot of the engine counters (monotonic totals and current gauges). */
typedef struct st_sg_http_stats_t {
    uint64_t started, completed, failed, canceled;
    uint64_t connections; /* new connections opened (the rest reused a kept-alive one) */
    uint64_t bytes_in;
    uint64_t err[8];           /* by sg_http_err */
    uint64_t inflight, queued; /* running; waiting for a retry time */
    uint64_t drained;          /* canceled while running and read to their end (SG_HTTP_DRAIN) */
} sg_http_stats_t;

/** Calls curl_global_init() once per process image; main thread, before any engine starts. */
void sg_http_global_init(void);

/** Starts an engine thread. Main thread (create()). Returns NULL with `err` set on failure. */
sg_http_t *sg_http_new(const sg_http_conf_t *conf, char *err, size_t err_size);

/**
 * Stops the engine: every queued or running transfer completes with SG_HTTP_ECANCELED (its
 * callback runs on the engine thread before this returns), then the thread is joined and
 * everything freed. Main thread (destroy()).
 */
void sg_http_free(sg_http_t *h);

/**
 * Submits `n` transfers, all or none: returns 0 when every one was accepted (each callback will
 * run exactly once), or -1 without taking anything when the engine is stopping (`*why` then
 * says so). Any thread, including a completion callback.
 */
int sg_http_submit(sg_http_t *h, sg_http_req_t *reqs, size_t n, const char **why);

/**
 * Submits one transfer with a malloc'ed copy of req->body (body_len bytes and the NUL that must
 * follow them); the caller keeps req->body, e.g. for a retry. Returns 0 or -1 like sg_http_submit().
 */
int sg_http_submit_copy(sg_http_t *h, const sg_http_req_t *req);

/** Cancels every queued transfer carrying `tag`, and every running one too under SG_HTTP_CLOSE;
 * under SG_HTTP_DRAIN a running one completes when its answer arrives (asynchronously). Any thread. */
void sg_http_cancel(sg_http_t *h, uint64_t tag);

void sg_http_stats(sg_http_t *h, sg_http_stats_t *out);

/**
 * Emits the engine counters through host->metric() inside a plugin's stats(): names start with
 * `prefix` (e.g. "serper"), followed by _http_started_total, _http_responses_total,
 * _http_errors_total{kind=...}, _http_canceled_total, _http_connections_total,
 * _http_bytes_in_total, _http_drained_total, _http_inflight and _http_queued (the gateway adds _http_qps_delayed_total:
 * sg_limits.metric_prefix).
 */
void sg_http_report(sg_http_t *h, const sg_host_api *host, void *sink, const char *prefix);

/** The engine's current clock (conf.now_ms). */
uint64_t sg_http_now_ms(const sg_http_t *h);

/**
 * A blocking transfer with the same settings, for create()-time checks only (never on a loop
 * thread). Fills `resp` like a callback would see it; `*body_out` (malloc'ed) keeps the body.
 */
void sg_http_fetch_sync(const sg_http_conf_t *conf, const char *method, const char *url, const char *const *headers,
                        const char *body, size_t body_len, sg_http_resp_t *resp, char **body_out, char *msg, size_t msg_size);

/**
 * The common keys of every remote backend, for the plugin's config table (lib/cfg.h), read into
 * its sg_http_conf_t member `f` of T, with the plugin's defaults in this order; the keys come in
 * the order of the plugin's "allowed" list. burst (its default is qps) is read by
 * sg_http_conf_check(), which runs after the table.
 */
#define SG_HTTP_CONF_KEYS(T, f, connect_def, timeout_def, bytes_def, http2_def, inflight_def, qps_def, queue_def, conns_def)       \
    SG_CFG_INT(T, f.connect_timeout_ms, "connect_timeout_ms", 1, 600000, connect_def),                                             \
        SG_CFG_INT(T, f.timeout_ms, "timeout_ms", 1, 3600000, timeout_def),                                                        \
        SG_CFG_INT(T, f.max_response_bytes, "max_response_bytes", 1024, 4294967296, bytes_def),                                    \
        SG_CFG_PATH(T, f.ca_file, "ca_file", 0), SG_CFG_BOOL(T, f.tls_verify, "tls_verify", 1),                                    \
        SG_CFG_STRING(T, f.proxy, "proxy", 0, NULL), SG_CFG_BOOL(T, f.http2, "http2", http2_def),                                  \
        SG_CFG_INT(T, f.max_inflight, "max_inflight", 0, 1000000, inflight_def), SG_CFG_DOUBLE(T, f.qps, "qps", 0, 1e6, qps_def),  \
        SG_CFG_CUSTOM_KEY("burst"), SG_CFG_INT(T, f.max_queue, "max_queue", 0, 10000000, queue_def),                               \
        SG_CFG_INT(T, f.max_connections, "max_connections", 0, 100000, conns_def),                                                 \
        SG_CFG_ENUM(T, f.on_cancel, "on_cancel", sg_http_on_cancel_names, SG_HTTP_DRAIN)

/**
 * What the table of SG_HTTP_CONF_KEYS cannot say, once it was read into `conf`: burst (default:
 * qps, at least 1), a proxy that is a URL, a ca_file that can be opened. 0, or -1 with `c->err`.
 */
int sg_http_conf_check(sg_cfg_t *c, const cJSON *obj, sg_http_conf_t *conf);
void sg_http_conf_free(sg_http_conf_t *conf);

/** "connection refused"-style name of an error class, for messages and metrics labels. */
const char *sg_http_err_name(sg_http_err e);
/** Maps a transport failure (err != SG_HTTP_OK) to the ABI status the gateway answers with. */
sg_status sg_http_err_status(sg_http_err e);

/* ---- registry of running jobs (cancel by cb_data) ---- */

typedef struct st_sg_http_job_t {
    struct st_sg_http_job_t *next, **pprev;
    uint64_t tag; /* the engine tag of the job's transfers; never reused */
    void *cb_data;
    sg_done_fn done;
    atomic_int canceled; /* cancel() was asked for */
    atomic_int finished; /* done() was called */
    /* A job of several transfers that failed while others may still run (sg_http_job_fail_later):
     * the failure, until it is delivered, and the hold on the call's admission slot, until
     * sg_http_job_settle() at the end of the last transfer. Engine thread. */
    int failed;
    sg_status fail_status;
    uint32_t fail_retry_after_s;
    char *fail_detail; /* malloc'ed; NULL once delivered */
    const sg_host_api *held_host;
    void *held; /* the call's sg_search.admission while held (ABI 1.4 hold), else NULL */
} sg_http_job_t;

typedef struct st_sg_http_jobs_t {
    pthread_mutex_t mu;
    sg_http_job_t *head;
    uint64_t next_tag;
    size_t n;
} sg_http_jobs_t;

void sg_http_jobs_init(sg_http_jobs_t *r);
void sg_http_jobs_dispose(sg_http_jobs_t *r);
/** Registers `j` (assigns j->tag). Hold r->mu around this and the first submit (see qdrant.c). */
void sg_http_jobs_add_locked(sg_http_jobs_t *r, sg_http_job_t *j, sg_done_fn done, void *cb_data);
void sg_http_jobs_remove(sg_http_jobs_t *r, sg_http_job_t *j);
/** Marks the job of `cb_data` canceled and cancels its transfers on `h`. Returns 1 when found. */
int sg_http_jobs_cancel(sg_http_jobs_t *r, sg_http_t *h, void *cb_data);
/** Calls done() unless it was already called; returns 1 when this call delivered the result. */
int sg_http_job_finish(sg_http_job_t *j, const sg_result *res);
/** Convenience: finishes with an error status and a formatted detail. */
int sg_http_job_fail(sg_http_job_t *j, sg_status st, uint32_t retry_after_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/**
 * A job of several transfers failed for good while others may still run: returns 1 when this
 * call failed it, 0 when the job had already failed or finished (the first failure wins). The
 * gateway keeps a call's admission slot (max_inflight) until the upstream work really ended, and
 * under on_cancel "drain" the job's other transfers keep the upstream busy until they end. So:
 * with a host that lends hold/release (ABI 1.4) and the call's `admission`, the slot is held and
 * done() answers the failure at once; otherwise the failure waits, and done() is called by
 * sg_http_job_settle(), which the plugin calls once its last transfer reported back (and which
 * also ends the hold). Engine thread (or search() before any transfer was submitted).
 */
int sg_http_job_fail_later(sg_http_job_t *j, const sg_host_api *host, void *admission, sg_status st, uint32_t retry_after_s,
                           const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/** Whether the job failed (sg_http_job_fail_later) or finished: nothing more is to be done for it. */
int sg_http_job_over(sg_http_job_t *j);
/** The job's last transfer ended: delivers a failure sg_http_job_fail_later() kept back and
 * releases its hold on the call's slot. Returns 1 when this call delivered a failure. */
int sg_http_job_settle(sg_http_job_t *j);

/* ---- small helpers for the reply parsers ---- */

/* Buffers are the shared sg_buf_t (buf.h). */

/* A cJSON value as JSON text: sg_json_append_value() (json.h). */

/**
 * A short, printable excerpt of an upstream error body for a client-facing message: at most
 * `max` bytes, control characters replaced by spaces, invalid UTF-8 dropped, and every
 * occurrence of `secret` (when non-NULL and non-empty) replaced by "***".
 */
void sg_http_excerpt(const char *body, size_t len, const char *secret, char *out, size_t out_size, size_t max);

/** Splits "http://host:port/prefix" style base URLs: returns a malloc'ed copy without trailing '/'. */
char *sg_http_trim_url(const char *url);

/**
 * The message of an upstream error reply for a client-facing error: an excerpt (at most `max`
 * bytes, `secret` masked, see sg_http_excerpt) of `v` when it is a non-empty JSON string, else of
 * the raw body; "(empty body)" when nothing printable is left.
 */
void sg_http_error_excerpt(const cJSON *v, const char *body, size_t len, const char *secret, size_t max, char *out,
                           size_t out_size);

/* ---- DOC lists: what the reply parsers produce, one list per query ---- */

/** One DOC: a compact JSON object (valid UTF-8, NUL-terminated, malloc'ed), and its score. */
typedef struct st_sg_http_doc_t {
    char *json;
    size_t len;
    double score;
} sg_http_doc_t;

/** The DOCs of one query, best first. */
typedef struct st_sg_http_docs_t {
    sg_http_doc_t *docs;
    size_t n;
} sg_http_docs_t;

/**
 * Allocates room in the empty list `l` for min(`items`, `topk`) DOCs and returns that number;
 * aborts on out-of-memory.
 */
size_t sg_http_docs_reserve(sg_http_docs_t *l, size_t items, size_t topk);
/** Appends a copy of the JSON text in `b` with `score` to `l` (room must have been reserved). */
void sg_http_docs_push(sg_http_docs_t *l, const sg_buf_t *b, double score);
/** Frees the DOCs of `n` lists and leaves them empty (the array itself is the caller's). */
void sg_http_docs_free(sg_http_docs_t *lists, size_t n);

/**
 * Finishes the job with SG_OK and the hits of `lists` (one list per query, `n` >= 1, in query
 * order; the DOC bytes are only borrowed by done()). Returns what sg_http_job_finish() returns.
 */
int sg_http_job_finish_docs(sg_http_job_t *j, const sg_http_docs_t *lists, size_t n);

/**
 * Parses a reply that must be a JSON object whose "result" is an array of exactly `n` entries.
 * Returns the parsed root (free with cJSON_Delete) and sets `*result`, or returns NULL with a
 * reason in `err`: "malformed JSON in the reply", "the reply has no "result" array", or
 * "the reply has <k> <what> for <n> queries".
 */
cJSON *sg_http_parse_result(const char *body, size_t len, size_t n, const char *what, const cJSON **result, char *err,
                            size_t err_size);

#endif
