/*
 * remote.h -- what the remote backend plugins (serper, qdrant, upstream) share around the HTTP
 * engine of http.h: opening their config, building URLs and the API-key header, the identity
 * hash, the retry policy, and the health state that serper and qdrant report. Part of the static
 * library sg_http, which each plugin links (nothing here is exported from a plugin).
 */
#ifndef SG_BACKENDS_COMMON_REMOTE_H
#define SG_BACKENDS_COMMON_REMOTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "http.h"

/* ---- create() helpers (main thread) ---- */

/** The retry keys of every remote plugin, for its config table: retries and backoff_ms, into T.rf and T.bf. */
#define SG_REMOTE_RETRY_KEYS(T, rf, bf, retries_def, backoff_def)                                                                  \
    SG_CFG_INT(T, rf, "retries", 0, 10, retries_def), SG_CFG_INT(T, bf, "backoff_ms", 1, 60000, backoff_def)

/**
 * Parses a plugin's config text and reads it with the plugin's table into `dst` (sg_cfg_read),
 * then checks the HTTP keys read into `conf` (sg_http_conf_check). Returns the root (free it with
 * cJSON_Delete: the plugin reads its SG_CFG_CUSTOM keys from it), or NULL with the reason in
 * `c->err` ("config: not valid JSON", or the reader's message); what the table read into `dst` is
 * the caller's to free either way.
 */
cJSON *sg_remote_conf_read(sg_cfg_t *c, const char *json, size_t len, const sg_cfg_key_t *table, size_t n, const char *base_dir,
                           void *dst, sg_http_conf_t *conf);

/** 1 when `url` starts with "http://" or "https://". */
int sg_remote_url_ok(const char *url);

/** `a`, `b` and `c` joined in one malloc'ed string; aborts on out-of-memory. */
char *sg_remote_concat(const char *a, const char *b, const char *c);

/** The malloc'ed header line "`name`: `value`"; aborts on out-of-memory. */
char *sg_remote_header(const char *name, const char *value);

/** Overwrites the string `s` with zeros, then frees it (for API keys). NULL is fine. */
void sg_remote_secret_free(char *s);

/** The starting value of sg_remote_fnv(). */
#define SG_REMOTE_FNV_INIT 1469598103934665603ull

/**
 * Folds the string `s` (NULL counts as empty) and an end marker into the 64-bit FNV-1a hash `h`;
 * the plugins hash their settings with it into the identity() string.
 */
uint64_t sg_remote_fnv(uint64_t h, const char *s);

/* ---- retry policy (engine thread) ---- */

/**
 * 1 when a failed attempt is worth another one: an HTTP 429 or 5xx, a connection that could not
 * be made or broke, or a timeout other than the caller's deadline.
 */
int sg_remote_transient(const sg_http_resp_t *r);

/**
 * Exponential backoff before attempt `attempts` + 1: `base_ms` doubled once per attempt after
 * the first, as long as it is below `limit_ms` (one doubling may take it past `limit_ms`).
 */
uint64_t sg_remote_backoff_ms(uint32_t base_ms, uint32_t attempts, uint64_t limit_ms);

/** `delay_ms`, or the Retry-After of the HTTP answer `r` when that is longer. */
uint64_t sg_remote_retry_after_ms(const sg_http_resp_t *r, uint64_t delay_ms);

/** 1 when an attempt started `delay_ms` after `now_ms` is still before `deadline_ms` (0 = none). */
int sg_remote_in_time(uint64_t now_ms, uint64_t delay_ms, uint64_t deadline_ms);

/* ---- admission and the retry budget: the gateway's (ABI 1.2) ---- */

/**
 * Fills the ABI 1.2 limits() answer from the admission keys of `conf` (max_inflight, qps, burst,
 * max_queue): `per_call` 1 when one call is one upstream request, 0 when each query is one;
 * `retries` the config's retries; `prefix` the metric prefix of the plugin's HTTP engine.
 */
void sg_remote_limits(const sg_http_conf_t *conf, int per_call, uint32_t retries, const char *prefix, sg_limits *out);

/**
 * The retries a call may make: the gateway's budget (sg_search.max_attempts - 1, ABI 1.2) or,
 * from an older host, the plugin's own `retries`.
 */
uint32_t sg_remote_call_retries(const sg_search *s, uint32_t own_retries);

/** The call's sg_search.admission (ABI 1.2), or NULL from an older host. Keep it for sg_remote_retry_at(). */
void *sg_remote_call_admission(const sg_search *s);

/**
 * When another upstream request of a running call (a retry, a key change) may start, not before
 * `earliest_ms`: host->retry_at() charges it to the route's qps caps (ABI 1.2); an older host
 * answers `earliest_ms`. Call it before the call's done(). Any thread.
 */
uint64_t sg_remote_retry_at(const sg_host_api *host, void *admission, uint64_t earliest_ms);

/* ---- completed calls by outcome (qdrant, upstream) ---- */

typedef struct st_sg_remote_outcomes_t {
    atomic_uint_fast64_t ok, failed, canceled;
} sg_remote_outcomes_t;

/**
 * Finishes `j` with SG_OK and the DOCs of `lists` (sg_http_job_finish_docs) and, when this call
 * delivered the result, counts it as ok. Returns 1 then, else 0. Any thread.
 */
int sg_remote_job_finish_docs(sg_http_job_t *j, sg_remote_outcomes_t *o, const sg_http_docs_t *lists, size_t n);

/**
 * Finishes `j` with the error `st` and `detail` (sg_http_job_fail) and, when this call delivered
 * the result, counts it as canceled (SG_ECANCELED) or failed. Returns 1 then, else 0. Any thread.
 */
int sg_remote_job_fail(sg_http_job_t *j, sg_remote_outcomes_t *o, sg_status st, uint32_t retry_after_s, const char *detail);

/**
 * Emits the counters inside stats() as the counter `name` with the labels outcome="ok",
 * outcome="error" and outcome="canceled", in that order.
 */
void sg_remote_outcomes_report(sg_remote_outcomes_t *o, const sg_host_api *host, void *sink, const char *name, const char *help);

/* ---- health: the last final outcome, for the plugin's health() ---- */

typedef struct st_sg_remote_health_t {
    pthread_mutex_t mu;
    sg_status status;
    char detail[256];
    unsigned consecutive_failures;
} sg_remote_health_t;

/** Starts healthy. Main thread. */
void sg_remote_health_init(sg_remote_health_t *h);
void sg_remote_health_dispose(sg_remote_health_t *h);

/**
 * Records a final outcome. SG_OK makes the backend healthy again; any other status makes it
 * unhealthy with `detail` (truncated to 255 bytes) after three failures in a row, or at once
 * when `at_once` is set (e.g. a rejected API key). Any thread.
 */
void sg_remote_health_note(sg_remote_health_t *h, sg_status st, int at_once, const char *detail);

/** The health() answer: the status, and the detail copied into `detail` when not SG_OK. Any thread. */
sg_status sg_remote_health_get(sg_remote_health_t *h, char *detail, size_t detail_size);

#endif
