/*
 * serper.c -- the "serper" backend: Google results through serper.dev, formatted as slime's
 * search_backend "google" does (docs/protocols.md, "serper.dev"), so RL clients get the same observations as
 * with their own google_search_server.py while the gateway adds caching, limits and metrics.
 *
 * One search() = one job; each query of it is one POST {base_url}/search with
 * {"q","num","gl","hl"} and the X-API-KEY header, all submitted at once to this instance's HTTP
 * engine. The caps that protect the paid key (max_inflight, qps/burst, max_queue: one unit per
 * query) are enforced by the gateway before search() is called (sp_limits, ABI 1.2), and so is
 * the retry budget (sg_search.max_attempts). The engine thread runs the completions: a 200 is parsed (serper_parse.c); 429, 5xx,
 * timeouts and connection failures are retried with exponential backoff while the retry budget and the deadline allow; the first
 * final failure completes the whole job (and cancels its other queries), mapped so the gateway answers 503/502/504 and never a 4xx
 * for a transient fault: 401/403 bad key -> SG_EUNAVAIL, 429 -> SG_EOVERLOAD (+Retry-After), 5xx/garbage/too big -> SG_EUPSTREAM,
 * timeout -> SG_ETIMEDOUT, refused/unreachable/TLS -> SG_EUNAVAIL.
 *
 * The key variable may hold several keys ("KEY1|KEY2", keyring.h), used round robin, one per
 * attempt. With two or more, a key answered 401, 402, 403 or 429 rests for key_rest_s and the
 * query is sent again at once with the next key; when every key rests the search fails with 503 +
 * Retry-After (SG_EOVERLOAD after a 429, SG_EUNAVAIL otherwise) without calling serper.dev. With
 * one key nothing rests and the mapping above applies as it is.
 *
 * access() (POST /access, online page reading through a Jina-Reader-compatible service) lives in
 * reader.c and is enabled by the "reader" object of the config.
 */
#include "sg_backend.h"
#include "cfg.h"
#include "http.h"
#include "keyring.h"
#include "reader.h"
#include "remote.h"
#include "serper_parse.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_job_t job_t;

typedef struct st_query_t {
    job_t *job;
    char *body; /* the request body, kept for retries */
    size_t body_len;
    uint32_t attempts, switches; /* every attempt; those that only changed the key */
    int key;                     /* the key of the current attempt */
    int ok;
} query_t;

struct st_job_t {
    sg_http_job_t base; /* first: the registry links jobs through it */
    sg_backend *self;
    uint64_t deadline_ms;
    uint64_t start_by_ms;   /* no new attempt starts after it (sg_search.start_by_ms) */
    uint32_t topk, retries; /* retries: the gateway's budget for this call */
    void *admission;        /* the call's, for retry_at() (sg_remote_retry_at) */
    size_t n, n_ok, outstanding;
    char request_id[40];
    sg_serper_docs_t *docs; /* the parsed reply of each query, in query order */
    query_t q[];
};

struct sg_backend {
    const sg_host_api *host;
    char *name;
    char *endpoint;    /* {base_url}/search */
    sg_keyring_t keys; /* never logged, never in a message */
    char *gl, *hl;
    char *params_json; /* extra body fields, "" or ",\"k\":v..." */
    uint32_t retries, backoff_ms, backoff_max_ms, max_topk, key_rest_s;
    char *base_url, *data_version; /* config, for create() */
    sg_http_conf_t conf;
    sg_http_t *http;
    sg_http_jobs_t jobs;
    char identity[96];
    sg_remote_health_t health; /* the last final outcome */
    sg_reader_t *reader;       /* POST /access; NULL without config.reader */
    /* counters */
    atomic_uint_fast64_t searches, queries, retries_done, results_ok, fails[7];
};

static uint64_t jitter_state(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void set_health(sg_backend *self, sg_status st, int bad_key, const char *detail)
{
    /* a rejected key is unhealthy at once; transport trouble after a few failures in a row; other
     * failures (a rate limit, an internal error) leave the health as it is */
    if (st == SG_OK || st == SG_EUNAVAIL || st == SG_ETIMEDOUT || st == SG_EUPSTREAM)
        sg_remote_health_note(&self->health, st, bad_key, detail);
}

static void job_free(job_t *j)
{
    free(j->base.fail_detail); /* a failure recorded but never delivered: only on the paths that deliver otherwise */
    for (size_t i = 0; i < j->n; ++i)
        free(j->q[i].body);
    if (j->docs != NULL)
        sg_http_docs_free(j->docs, j->n);
    free(j->docs);
    free(j);
}

/* A transfer of the job reported back for good; after the last one -- serper.dev works on none of
 * the job's queries any more -- ends a failed job's hold on its admission slot (or, from a host
 * without hold, delivers its failure only now) and frees the job. Engine thread. */
static void job_release(job_t *j)
{
    if (--j->outstanding != 0)
        return;
    sg_http_jobs_remove(&j->self->jobs, &j->base);
    sg_http_job_settle(&j->base);
    if (!atomic_load(&j->base.finished)) /* cannot happen: every path finishes or fails first */
        sg_http_job_fail(&j->base, SG_EINTERNAL, 0, "serper: a search ended without a result");
    job_free(j);
}

enum { OUT_AUTH, OUT_RATE, OUT_UPSTREAM, OUT_TIMEOUT, OUT_UNAVAIL, OUT_CANCELED, OUT_RESTING };

/* Fails the job (first failure wins) and cancels its other queries: those not sent yet end at
 * once, those running are read to their end (on_cancel "drain") or closed. The client gets the
 * failure at once, but the call keeps its admission slot (max_inflight) while serper.dev still
 * works on any of its queries: held (ABI 1.4) until job_release() sees the last one end. */
static void job_fail(job_t *j, sg_status st, uint32_t retry_after, int outcome, const char *detail)
{
    sg_backend *self = j->self;
    /* Jobs are failed and finished on the engine thread only, so neither can change under us:
     * record health and counters before done() runs, so a client that asks /health right after
     * its answer already sees them. */
    if (sg_http_job_over(&j->base))
        return;
    atomic_fetch_add(&self->fails[outcome], 1);
    if (outcome != OUT_CANCELED)
        set_health(self, st, outcome == OUT_AUTH || (outcome == OUT_RESTING && st == SG_EUNAVAIL), detail);
    if (!sg_http_job_fail_later(&j->base, self->host, j->admission, st, retry_after, "%s", detail))
        return;
    if (j->n > 1 && j->base.tag != 0)
        sg_http_cancel(self->http, j->base.tag); /* the job's other queries are moot now */
}

static void job_succeed(job_t *j)
{
    sg_backend *self = j->self;
    atomic_fetch_add(&self->results_ok, 1);
    set_health(self, SG_OK, 0, "");
    sg_http_job_finish_docs(&j->base, j->docs, j->n);
}

static void on_response(void *ud, const sg_http_resp_t *r);

/* The request headers of an attempt with key `key`. */
static void attempt_headers(sg_backend *self, int key, const char **h)
{
    h[0] = self->keys.keys[key].header;
    h[1] = "Content-Type: application/json";
    h[2] = "Accept: application/json";
    h[3] = NULL;
}

static int submit_attempt(query_t *q, int key, uint64_t not_before)
{
    job_t *j = q->job;
    sg_backend *self = j->self;
    const char *headers[4];
    attempt_headers(self, key, headers);
    sg_http_req_t req = {.method = "POST",
                         .url = self->endpoint,
                         .headers = headers,
                         .body = q->body,
                         .body_len = q->body_len,
                         .deadline_ms = j->deadline_ms,
                         .start_by_ms = j->start_by_ms,
                         .not_before_ms = not_before,
                         .tag = j->base.tag,
                         .cb = on_response,
                         .ud = q};
    if (sg_http_submit_copy(self->http, &req) != 0)
        return -1;
    ++q->attempts;
    q->key = key;
    sg_keyring_note_call(&self->keys, key);
    return 0;
}

/* Submits another attempt of `q` unless its search was cancelled; ordered with cancel(). */
static int resubmit(query_t *q, int key, uint64_t not_before)
{
    sg_backend *self = q->job->self;
    int rc = -1;
    pthread_mutex_lock(&self->jobs.mu); /* ordered with cancel(), see http.h */
    if (!atomic_load(&q->job->base.canceled))
        rc = submit_attempt(q, key, not_before);
    pthread_mutex_unlock(&self->jobs.mu);
    return rc;
}

/* Every key rests: fails the job with 503 + Retry-After until the first key wakes up. */
static void fail_resting(job_t *j, uint64_t now, uint64_t wake, const char *last)
{
    sg_backend *self = j->self;
    long why = sg_keyring_first_rest_status(&self->keys, now);
    uint32_t retry_after = wake > now ? (uint32_t)((wake - now + 999) / 1000) : 1;
    char msg[600];
    snprintf(msg, sizeof(msg), "every serper.dev key from $%s is resting after refusals (the first wakes in %u s; last: %s)",
             self->keys.env, retry_after, last);
    sg_keyring_scrub(&self->keys, msg, sizeof(msg));
    self->host->log(SG_LOG_WARN, self->name, "%s: %s", j->request_id, msg);
    job_fail(j, why == 429 ? SG_EOVERLOAD : SG_EUNAVAIL, retry_after, OUT_RESTING, msg);
}

/* Decides whether a failed attempt is worth another try; returns the delay in ms or -1. */
static long retry_delay(sg_backend *self, query_t *q, const sg_http_resp_t *r, uint64_t now)
{
    job_t *j = q->job;
    uint32_t tries = q->attempts - q->switches; /* key changes do not use up the retry budget */
    if (tries > j->retries || atomic_load(&j->base.canceled) || sg_http_job_over(&j->base))
        return -1;
    if (!sg_remote_transient(r))
        return -1;
    uint64_t delay = sg_remote_backoff_ms(self->backoff_ms, tries, self->backoff_max_ms);
    if (delay > self->backoff_max_ms)
        delay = self->backoff_max_ms;
    uint64_t seed = now ^ (uint64_t)(uintptr_t)q;
    delay = delay / 2 + jitter_state(&seed) % (delay / 2 + 1); /* "equal jitter" */
    delay = sg_remote_retry_after_ms(r, delay);
    if (!sg_remote_in_time(now, delay, j->deadline_ms))
        return -1; /* no time left for another attempt */
    return (long)delay;
}

static void on_response(void *ud, const sg_http_resp_t *r)
{
    query_t *q = ud;
    job_t *j = q->job;
    sg_backend *self = j->self;
    uint64_t now = sg_http_now_ms(self->http);
    char msg[512];
    if (r->err == SG_HTTP_ECANCELED) {
        job_fail(j, SG_ECANCELED, 0, OUT_CANCELED, r->message[0] != '\0' ? r->message : "canceled");
        job_release(j);
        return;
    }
    if (sg_http_job_over(&j->base)) { /* another query already failed the job */
        job_release(j);
        return;
    }
    if (r->err == SG_HTTP_OK && r->status == 200) {
        char err[128];
        if (sg_serper_parse_reply(r->body, r->body_len, j->topk, &j->docs[q - j->q], err, sizeof(err)) != 0) {
            char excerpt[96];
            sg_http_excerpt(r->body, r->body_len, self->keys.keys[q->key].secret, excerpt, sizeof(excerpt), 80);
            snprintf(msg, sizeof(msg), "serper.dev returned an unusable reply: %s (body starts: %s)", err, excerpt);
            sg_keyring_scrub(&self->keys, msg, sizeof(msg));
            sg_keyring_note_failure(&self->keys, q->key);
            job_fail(j, SG_EUPSTREAM, 0, OUT_UPSTREAM, msg);
        } else {
            q->ok = 1;
            if (++j->n_ok == j->n)
                job_succeed(j);
        }
        job_release(j);
        return;
    }
    sg_keyring_note_failure(&self->keys, q->key);
    char what[300] = "";
    if (r->err == SG_HTTP_OK) {
        sg_serper_error_message(r->body, r->body_len, self->keys.keys[q->key].secret, what, sizeof(what));
        sg_keyring_scrub(&self->keys, what, sizeof(what));
    }
    long status = r->err == SG_HTTP_OK ? r->status : 0;
    if ((status == 401 || status == 402 || status == 403 || status == 429) && self->keys.n >= 2) {
        /* a refused key: rest it and send the query again at once with another one */
        uint64_t min_ms = status == 429 && r->retry_after_s > 0 ? (uint64_t)r->retry_after_s * 1000 : 0;
        if (sg_keyring_rest(&self->keys, q->key, now, min_ms, status))
            self->host->log(SG_LOG_WARN, self->name, "serper.dev key %d of %zu from $%s rests for %llu s: HTTP %ld: %s", q->key + 1,
                            self->keys.n, self->keys.env,
                            (unsigned long long)((min_ms > self->keys.rest_ms ? min_ms : self->keys.rest_ms) / 1000), status, what);
        uint64_t wake = 0;
        int k = sg_keyring_pick(&self->keys, now, &wake);
        if (k < 0) {
            snprintf(msg, sizeof(msg), "HTTP %ld: %s", status, what);
            fail_resting(j, now, wake, msg);
            job_release(j);
            return;
        }
        if (q->switches < self->keys.n && sg_remote_in_time(now, 0, j->deadline_ms) && !sg_http_job_over(&j->base)) {
            ++q->switches;
            if (resubmit(q, k, sg_remote_retry_at(self->host, j->admission, now)) == 0)
                return; /* the new attempt carries this transfer's share of `outstanding` */
            --q->switches;
        }
    } else {
        long delay = retry_delay(self, q, r, now);
        if (delay >= 0) {
            uint64_t wake = 0;
            int k = sg_keyring_pick(&self->keys, now, &wake);
            if (k < 0) {
                snprintf(msg, sizeof(msg), "HTTP %ld: %s", status, what);
                fail_resting(j, now, wake, msg);
                job_release(j);
                return;
            }
            if (resubmit(q, k, sg_remote_retry_at(self->host, j->admission, now + (uint64_t)delay)) == 0) {
                atomic_fetch_add(&self->retries_done, 1);
                return; /* the new attempt carries this transfer's share of `outstanding` */
            }
        }
    }
    /* final failure */
    sg_status st;
    int outcome;
    uint32_t retry_after = 0;
    const char *attempts = q->attempts > 1 ? " after retries" : "";
    if (r->err != SG_HTTP_OK) {
        st = sg_http_err_status(r->err);
        outcome = st == SG_ETIMEDOUT ? OUT_TIMEOUT : st == SG_EUNAVAIL ? OUT_UNAVAIL : OUT_UPSTREAM;
        if (r->err == SG_HTTP_ETIMEDOUT)
            snprintf(msg, sizeof(msg), "serper.dev did not answer in time%s: %s", attempts, r->message);
        else if (r->err == SG_HTTP_ECONNECT || r->err == SG_HTTP_ETLS)
            snprintf(msg, sizeof(msg), "cannot reach serper.dev at %s%s: %s", self->endpoint, attempts, r->message);
        else
            snprintf(msg, sizeof(msg), "serper.dev request failed%s: %s", attempts, r->message);
    } else {
        if (r->status == 401 || r->status == 403) {
            st = SG_EUNAVAIL;
            outcome = OUT_AUTH;
            snprintf(msg, sizeof(msg), "serper.dev rejected the API key from $%s (HTTP %ld): %s", self->keys.env, r->status, what);
        } else if (r->status == 429) {
            st = SG_EOVERLOAD;
            outcome = OUT_RATE;
            retry_after = r->retry_after_s > 0 ? (uint32_t)r->retry_after_s : 1;
            snprintf(msg, sizeof(msg), "serper.dev rate limit (HTTP 429)%s: %s", attempts, what);
        } else if (r->status >= 500) {
            st = SG_EUPSTREAM;
            outcome = OUT_UPSTREAM;
            snprintf(msg, sizeof(msg), "serper.dev failed (HTTP %ld)%s: %s", r->status, attempts, what);
        } else {
            st = SG_EUPSTREAM;
            outcome = OUT_UPSTREAM;
            snprintf(msg, sizeof(msg), "serper.dev refused the request (HTTP %ld): %s", r->status, what);
        }
    }
    sg_keyring_scrub(&self->keys, msg, sizeof(msg));
    self->host->log(SG_LOG_WARN, self->name, "%s: %s", j->request_id, msg);
    job_fail(j, st, retry_after, outcome, msg);
    job_release(j);
}

static sg_status sp_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    if (s->topk > self->max_topk)
        return SG_ETOOBIG;
    job_t *j = calloc(1, sizeof(*j) + s->n_queries * sizeof(query_t));
    if (j == NULL)
        return SG_ENOMEM;
    j->self = self;
    j->deadline_ms = s->deadline_ms;
    j->start_by_ms = SG_SEARCH_START_BY(s);
    j->retries = sg_remote_call_retries(s, self->retries);
    j->admission = sg_remote_call_admission(s);
    j->topk = s->topk;
    j->n = s->n_queries;
    snprintf(j->request_id, sizeof(j->request_id), "%s", s->request_id != NULL ? s->request_id : "-");
    j->docs = calloc(j->n, sizeof(*j->docs));
    if (j->docs == NULL)
        abort();
    uint64_t now = self->host->now_ms(), wake = 0;
    if (sg_keyring_all_resting(&self->keys, now, &wake)) { /* fail without calling serper.dev */
        j->base.done = done;
        j->base.cb_data = cb_data;
        atomic_fetch_add(&self->searches, 1);
        fail_resting(j, now, wake, "no request sent");
        sg_http_job_settle(&j->base); /* nothing was sent: done() at once */
        job_free(j);
        return SG_OK;
    }
    sg_http_req_t *reqs = calloc(j->n, sizeof(*reqs));
    const char *(*headers)[4] = calloc(j->n, sizeof(*headers));
    int *used = calloc(j->n, sizeof(*used));
    if (reqs == NULL || headers == NULL || used == NULL)
        abort();
    sg_buf_t b = {0};
    for (size_t i = 0; i < j->n; ++i) {
        query_t *q = &j->q[i];
        q->job = j;
        b.len = 0;
        sg_buf_appends(&b, "{\"q\":");
        sg_buf_append_json_string(&b, s->queries[i].text, s->queries[i].len);
        sg_buf_appendf(&b, ",\"num\":%u", s->topk);
        if (self->gl[0] != '\0') {
            sg_buf_appends(&b, ",\"gl\":");
            sg_buf_append_json_string(&b, self->gl, strlen(self->gl));
        }
        if (self->hl[0] != '\0') {
            sg_buf_appends(&b, ",\"hl\":");
            sg_buf_append_json_string(&b, self->hl, strlen(self->hl));
        }
        sg_buf_appends(&b, self->params_json);
        sg_buf_append(&b, "}", 1);
        q->body = malloc(b.len + 1);
        char *copy = malloc(b.len + 1);
        if (q->body == NULL || copy == NULL)
            abort();
        memcpy(q->body, b.base, b.len + 1);
        memcpy(copy, b.base, b.len + 1);
        q->body_len = b.len;
        q->attempts = 1;
        q->key = sg_keyring_pick(&self->keys, now, NULL); /* one key per query: a batch spreads over the keys */
        if (q->key < 0)
            q->key = 0; /* the keys fell asleep since the check above: let serper.dev say it again */
        used[i] = q->key;
        attempt_headers(self, q->key, headers[i]);
        reqs[i] = (sg_http_req_t){.method = "POST",
                                  .url = self->endpoint,
                                  .headers = headers[i],
                                  .body = copy,
                                  .body_len = b.len,
                                  .deadline_ms = s->deadline_ms,
                                  .start_by_ms = SG_SEARCH_START_BY(s),
                                  .cb = on_response,
                                  .ud = q};
    }
    sg_buf_free(&b);
    j->outstanding = j->n;
    size_t n_queries = j->n;
    const char *why = NULL;
    pthread_mutex_lock(&self->jobs.mu);
    sg_http_jobs_add_locked(&self->jobs, &j->base, done, cb_data);
    for (size_t i = 0; i < j->n; ++i)
        reqs[i].tag = j->base.tag;
    int rc = sg_http_submit(self->http, reqs, j->n, &why);
    pthread_mutex_unlock(&self->jobs.mu);
    free(headers);
    if (rc != 0) {
        for (size_t i = 0; i < j->n; ++i)
            free(reqs[i].body);
        free(reqs);
        free(used);
        sg_http_jobs_remove(&self->jobs, &j->base);
        atomic_fetch_add(&self->fails[OUT_RATE], 1);
        sg_http_job_fail(&j->base, SG_EOVERLOAD, 1, "serper: %s", why);
        job_free(j);
        return SG_OK;
    }
    free(reqs);
    for (size_t i = 0; i < n_queries; ++i) /* j may be gone already: count from the local copy */
        sg_keyring_note_call(&self->keys, used[i]);
    free(used);
    atomic_fetch_add(&self->searches, 1);
    atomic_fetch_add(&self->queries, n_queries);
    return SG_OK;
}

/* Without a reader the route has no page store: has_access() says so and the gateway answers
 * POST /access with 404 before it gets here (GET / lists "access": false). */
static int sp_has_access(sg_backend *self)
{
    return self->reader != NULL;
}

static sg_status sp_access(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    if (self->reader == NULL) { /* not reached through the gateway: has_access() is 0 */
        sg_result res = {SG_EINVAL, "this backend has no page reader (docs/backends/serper.md)", NULL, 0, 0};
        done(cb_data, &res);
        return SG_OK;
    }
    return sg_reader_access(self->reader, s, done, cb_data);
}

static void sp_cancel(sg_backend *self, void *cb_data)
{
    if (!sg_http_jobs_cancel(&self->jobs, self->http, cb_data) && self->reader != NULL)
        sg_reader_cancel(self->reader, cb_data);
}

static sg_status sp_health(sg_backend *self, char *detail, size_t n)
{
    return sg_remote_health_get(&self->health, detail, n);
}

static void sp_stats(sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
    h->metric(sink, "serper_searches_total", "search() calls received by the serper backend.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->searches));
    h->metric(sink, "serper_queries_total", "Queries sent to serper.dev (first attempts).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->queries));
    h->metric(sink, "serper_retries_total", "Retried serper.dev requests (429, 5xx, timeouts, connection failures).",
              SG_METRIC_COUNTER, NULL, (double)atomic_load(&self->retries_done));
    static const char help[] = "Completed serper searches by outcome.";
    h->metric(sink, "serper_results_total", help, SG_METRIC_COUNTER, "outcome=\"ok\"", (double)atomic_load(&self->results_ok));
    static const char *const outcomes[] = {"outcome=\"bad_key\"",     "outcome=\"rate_limited\"", "outcome=\"upstream_error\"",
                                           "outcome=\"timeout\"",     "outcome=\"unavailable\"",  "outcome=\"canceled\"",
                                           "outcome=\"keys_resting\""};
    for (size_t i = 0; i < 7; ++i)
        h->metric(sink, "serper_results_total", help, SG_METRIC_COUNTER, outcomes[i], (double)atomic_load(&self->fails[i]));
    sg_keyring_report(&self->keys, h, sink, "serper", h->now_ms());
    sg_http_report(self->http, h, sink, "serper");
    if (self->reader != NULL)
        sg_reader_stats(self->reader, sink);
}

/* Each query of a search is one POST /search, each URL of an access one reader request: the
 * gateway counts the config's max_inflight, qps and max_queue (and the reader's) per query (ABI 1.2). */
static void sp_limits(sg_backend *self, int op, sg_limits *out)
{
    if (op == SG_OP_ACCESS) {
        if (self->reader != NULL)
            sg_reader_limits(self->reader, out);
        return;
    }
    sg_remote_limits(&self->conf, 0, self->retries, "serper", out);
}

static const char *sp_identity(sg_backend *self)
{
    return self->identity;
}

static void sp_destroy(sg_backend *self)
{
    sg_reader_free(self->reader); /* completes every pending access with SG_ECANCELED */
    sg_http_free(self->http);     /* completes every pending search with SG_ECANCELED */
    sg_http_jobs_dispose(&self->jobs);
    sg_http_conf_free(&self->conf);
    sg_remote_health_dispose(&self->health);
    sg_keyring_free(&self->keys);
    free(self->endpoint);
    free(self->gl);
    free(self->hl);
    free(self->params_json);
    free(self->base_url);
    free(self->data_version);
    free(self->name);
    free(self);
}

/* ---- the config (docs/backends/serper.md; checked by tests/lint/test_config_docs.py) ---- */

#define SP_LANG_EXPECT "expected a short string (\"\" leaves it out of the request)"

static const sg_cfg_key_t sp_config[] = {
    SG_CFG_STRING(sg_backend, base_url, "base_url", 0, "https://google.serper.dev"),
    SG_CFG_CUSTOM_KEY("api_key_env"),
    SG_CFG_TEXT(sg_backend, gl, "gl", "us", 32, SP_LANG_EXPECT), /* "" = leave the field out of the request */
    SG_CFG_TEXT(sg_backend, hl, "hl", "en", 32, SP_LANG_EXPECT),
    SG_CFG_CUSTOM_KEY("params"),
    SG_REMOTE_RETRY_KEYS(sg_backend, retries, backoff_ms, 2, 200),
    SG_CFG_CUSTOM_KEY("backoff_max_ms"),
    SG_CFG_STRING(sg_backend, data_version, "data_version", 0, ""),
    SG_CFG_INT(sg_backend, max_topk, "max_topk", 1, 1000, 100),
    SG_CFG_INT(sg_backend, key_rest_s, "key_rest_s", 1, 86400, 60),
    SG_CFG_CUSTOM_KEY("reader"),
    SG_HTTP_CONF_KEYS(sg_backend, conf, 5000, 20000, 4194304, 1, 16, 10, 10000, 0),
};

/* "params": extra body fields sent with every query, as the JSON text ",\"k\":v..." */
static int read_params(sg_backend *self, sg_cfg_t *c, const cJSON *root)
{
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
    sg_buf_t pj = {0};
    sg_buf_append(&pj, "", 0);
    self->params_json = pj.base;
    if (params == NULL || cJSON_IsNull(params))
        return 0;
    if (!cJSON_IsObject(params))
        return sg_cfg_fail(c, "params", params, "expected an object of extra request fields (e.g. {\"tbs\": \"qdr:y\"})");
    for (const cJSON *it = params->child; it != NULL; it = it->next) {
        if (strcmp(it->string, "q") == 0 || strcmp(it->string, "num") == 0 || strcmp(it->string, "gl") == 0 ||
            strcmp(it->string, "hl") == 0) {
            sg_cfg_t cp = {"config.params", c->err, c->err_size};
            return sg_cfg_fail(&cp, it->string, it, "is set by the backend itself (use the gl/hl keys)");
        }
        char *val = cJSON_PrintUnformatted(it);
        sg_buf_append(&pj, ",", 1);
        sg_buf_append_json_string(&pj, it->string, strlen(it->string));
        sg_buf_append(&pj, ":", 1);
        sg_buf_appends(&pj, val);
        free(val);
        self->params_json = pj.base;
    }
    return 0;
}

static sg_status sp_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                           size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL)
        return SG_ENOMEM;
    self->host = host;
    self->name = strdup(instance);
    sg_remote_health_init(&self->health);
    sg_http_jobs_init(&self->jobs);
    self->conf.now_ms = host->now_ms;
    self->conf.name = "serper";
    int64_t v;
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = sg_remote_conf_read(&c, config_json, config_len, sp_config, SG_CFG_N(sp_config), base_dir, self, &self->conf);
    if (root == NULL)
        goto fail;
    if (!sg_remote_url_ok(self->base_url)) {
        sg_cfg_fail(&c, "base_url", cJSON_GetObjectItem(root, "base_url"), "expected an http:// or https:// URL");
        goto fail;
    }
    char *trimmed = sg_http_trim_url(self->base_url);
    self->endpoint = sg_remote_concat(trimmed, "/search", "");
    free(trimmed);
    if (sg_keyring_init(&self->keys, &c, root, "api_key_env", 1, "X-API-KEY: ", (uint64_t)self->key_rest_s * 1000) != 0 ||
        read_params(self, &c, root) != 0)
        goto fail;
    if (sg_cfg_int(&c, root, "backoff_max_ms", self->backoff_ms, 600000, self->backoff_ms > 5000 ? self->backoff_ms : 5000, &v) !=
        0)
        goto fail;
    self->backoff_max_ms = (uint32_t)v;
    uint64_t h = SG_REMOTE_FNV_INIT;
    h = sg_remote_fnv(h, self->endpoint);
    h = sg_remote_fnv(h, self->gl);
    h = sg_remote_fnv(h, self->hl);
    h = sg_remote_fnv(h, self->params_json);
    h = sg_remote_fnv(h, self->data_version);
    snprintf(self->identity, sizeof(self->identity), "serper:%016llx", (unsigned long long)h);
    self->http = sg_http_new(&self->conf, err, err_size);
    if (self->http == NULL)
        goto fail;
    const cJSON *reader = cJSON_GetObjectItemCaseSensitive(root, "reader");
    if (reader != NULL && !cJSON_IsNull(reader) &&
        sg_reader_create(host, instance, base_dir, reader, self->key_rest_s, &self->reader, err, err_size) != 0)
        goto fail;
    host->log(SG_LOG_INFO, instance,
              "serper backend ready: %s, gl=%s hl=%s, qps %g (burst %g), max_inflight %u, retries %u, %zu key%s; /access: %s",
              self->endpoint, self->gl[0] ? self->gl : "(none)", self->hl[0] ? self->hl : "(none)", self->conf.qps,
              self->conf.burst, self->conf.max_inflight, self->retries, self->keys.n, self->keys.n == 1 ? "" : "s",
              self->reader != NULL ? sg_reader_describe(self->reader) : "off (no config.reader)");
    cJSON_Delete(root);
    *out = self;
    return SG_OK;
fail:
    cJSON_Delete(root);
    sp_destroy(self);
    return SG_EINVAL;
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("serper", "1.0.0"),
    .create = sp_create,
    .destroy = sp_destroy,
    .search = sp_search,
    .cancel = sp_cancel,
    .health = sp_health,
    .stats = sp_stats,
    .identity = sp_identity,
    .access = sp_access,
    .has_access = sp_has_access,
    .limits = sp_limits,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
