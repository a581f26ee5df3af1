/*
 * reader.c -- POST /access for the serper backend: each page URL of a call is one
 * `GET {reader.base_url}/{page URL}` to a Jina-Reader-compatible service (`Authorization: Bearer
 * <key>`, `Accept: application/json` or `text/plain`), all submitted at once to the reader's own
 * instance of the plugin's HTTP engine (its own response-size bounds, and its own max_inflight/qps/
 * max_queue that the gateway enforces for access calls, one unit per URL: the reader is another
 * upstream with other limits than serper.dev). The engine thread runs the completions:
 *
 *   200                      -> the PAGE {"url","title","contents"} (reader_parse.c)
 *   a page it cannot read    -> null for that URL, the others go on: a 4xx other than 401, 402,
 *                               408 and 429 (422 "failed to goto", 451, 403 blocked domain...), a
 *                               reply over max_response_bytes, or a URL that is not http(s)
 *   401 / 402 / 429 with several keys -> the key rests (key_rest_s) and the URL is asked again at
 *                               once with the next key; when every key rests the call fails with
 *                               503 + Retry-After (SG_EOVERLOAD for 429, SG_EUNAVAIL otherwise)
 *   429 (one key), 5xx, 408, timeouts, connection failures -> retried with backoff while the retry
 *                               budget and the deadline allow, then the whole call fails
 *                               (429 SG_EOVERLOAD, 5xx SG_EUPSTREAM, timeout SG_ETIMEDOUT,
 *                               unreachable SG_EUNAVAIL); 401/402 with one key: SG_EUNAVAIL.
 * Transient trouble fails the call (the client retries it, as for search); a page that cannot be
 * read is a null (no client retry would help, and one dead link must not fail an agent's batch).
 */
#include "reader.h"
#include "cfg.h"
#include "http.h"
#include "keyring.h"
#include "reader_parse.h"
#include "remote.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_EXTRA_HEADERS 16

typedef struct st_rjob_t rjob_t;

typedef struct st_rpage_t {
    rjob_t *job;
    char *target;    /* the request URL; NULL for a page URL that is not http(s) (answered null) */
    const char *url; /* the page URL as asked (borrowed from the sg_search, valid until done()) */
    size_t url_len;
    uint32_t attempts, switches;
    int key; /* the key of the current attempt, -1 = none */
} rpage_t;

struct st_rjob_t {
    sg_http_job_t base; /* first: the registry links jobs through it */
    sg_reader_t *rd;
    uint64_t deadline_ms;
    uint64_t start_by_ms; /* no new attempt starts after it (sg_search.start_by_ms) */
    uint32_t retries;     /* the gateway's budget for this call */
    void *admission;      /* the call's, for retry_at() (sg_remote_retry_at) */
    size_t n, n_left, outstanding;
    char request_id[40];
    sg_http_docs_t *pages; /* per URL: no DOC (null) or the PAGE */
    rpage_t p[];
};

enum { PAGE_OK, PAGE_UNREADABLE, PAGE_TOO_BIG, PAGE_INVALID_URL, PAGE_N };
enum { OUT_AUTH, OUT_RATE, OUT_UPSTREAM, OUT_TIMEOUT, OUT_UNAVAIL, OUT_CANCELED, OUT_RESTING, OUT_N };

struct st_sg_reader_t {
    const sg_host_api *host;
    char *name;
    char *base;     /* base_url without a trailing '/' */
    char *base_url; /* as configured */
    int format;
    const char *accept;
    char *extra[MAX_EXTRA_HEADERS];
    size_t n_extra;
    sg_keyring_t keys;
    uint32_t retries, backoff_ms, backoff_max_ms;
    sg_http_conf_t conf;
    sg_http_t *http;
    sg_http_jobs_t jobs;
    char describe[160];
    atomic_uint_fast64_t calls, urls, retries_done, pages[PAGE_N], results_ok, fails[OUT_N];
};

static uint64_t jitter(uint64_t s)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

static void job_free(rjob_t *j)
{
    free(j->base.fail_detail); /* a failure recorded but never delivered: only on the paths that deliver otherwise */
    for (size_t i = 0; i < j->n; ++i)
        free(j->p[i].target);
    if (j->pages != NULL)
        sg_http_docs_free(j->pages, j->n);
    free(j->pages);
    free(j);
}

/* A transfer of the job reported back for good; after the last one -- the reader works on none of
 * the job's URLs any more -- ends a failed job's hold on its admission slot and frees the job.
 * Engine thread. */
static void job_release(rjob_t *j)
{
    if (--j->outstanding != 0)
        return;
    sg_http_jobs_remove(&j->rd->jobs, &j->base);
    sg_http_job_settle(&j->base);
    if (!atomic_load(&j->base.finished)) /* cannot happen: every path finishes or fails first */
        sg_http_job_fail(&j->base, SG_EINTERNAL, 0, "reader: an access ended without a result");
    job_free(j);
}

/* Fails the job (first failure wins, answered at once) and cancels its other transfers; the call
 * keeps its admission slot until job_release() sees the last of them end (serper.c). */
static void job_fail(rjob_t *j, sg_status st, uint32_t retry_after, int outcome, const char *detail)
{
    sg_reader_t *rd = j->rd;
    if (sg_http_job_over(&j->base))
        return;
    atomic_fetch_add(&rd->fails[outcome], 1);
    if (!sg_http_job_fail_later(&j->base, rd->host, j->admission, st, retry_after, "%s", detail))
        return;
    if (j->n > 1 && j->base.tag != 0 && rd->http != NULL)
        sg_http_cancel(rd->http, j->base.tag);
}

/* One URL is answered: with `page` (a PAGE JSON) or null. The job succeeds after the last URL. */
static void page_done(rjob_t *j, rpage_t *p, const sg_buf_t *page, int outcome)
{
    sg_reader_t *rd = j->rd;
    atomic_fetch_add(&rd->pages[outcome], 1);
    if (page != NULL) {
        sg_http_docs_t *l = &j->pages[p - j->p];
        sg_http_docs_reserve(l, 1, 1);
        sg_http_docs_push(l, page, 1.0);
    }
    if (--j->n_left == 0 && !sg_http_job_over(&j->base)) {
        atomic_fetch_add(&rd->results_ok, 1);
        sg_http_job_finish_docs(&j->base, j->pages, j->n);
    }
}

static void on_response(void *ud, const sg_http_resp_t *r);

/* The headers of one attempt: the key (when one is configured), Accept, the configured extras. */
static void attempt_headers(sg_reader_t *rd, int key, const char **h)
{
    size_t n = 0;
    if (key >= 0)
        h[n++] = rd->keys.keys[key].header;
    h[n++] = rd->accept;
    for (size_t i = 0; i < rd->n_extra; ++i)
        h[n++] = rd->extra[i];
    h[n] = NULL;
}

/* Submits another attempt for `p` with key `key`, starting at `not_before`; under jobs.mu. */
static int resubmit_locked(rpage_t *p, int key, uint64_t not_before)
{
    rjob_t *j = p->job;
    sg_reader_t *rd = j->rd;
    if (atomic_load(&j->base.canceled))
        return -1;
    const char *headers[MAX_EXTRA_HEADERS + 3];
    attempt_headers(rd, key, headers);
    sg_http_req_t req = {.method = "GET",
                         .url = p->target,
                         .headers = headers,
                         .deadline_ms = j->deadline_ms,
                         .start_by_ms = j->start_by_ms,
                         .not_before_ms = not_before,
                         .tag = j->base.tag,
                         .cb = on_response,
                         .ud = p};
    if (sg_http_submit(rd->http, &req, 1, NULL) != 0)
        return -1;
    p->key = key;
    ++p->attempts;
    sg_keyring_note_call(&rd->keys, key);
    return 0;
}

static int resubmit(rpage_t *p, int key, uint64_t not_before)
{
    sg_reader_t *rd = p->job->rd;
    pthread_mutex_lock(&rd->jobs.mu); /* ordered with cancel(), see http.h */
    int rc = resubmit_locked(p, key, not_before);
    pthread_mutex_unlock(&rd->jobs.mu);
    return rc;
}

/* The delay before another attempt after a transient failure, or -1. */
static long retry_delay(sg_reader_t *rd, rpage_t *p, const sg_http_resp_t *r, long status, uint64_t now)
{
    rjob_t *j = p->job;
    if (p->attempts - p->switches > j->retries || atomic_load(&j->base.canceled) || sg_http_job_over(&j->base))
        return -1;
    int transient = r->err != SG_HTTP_OK ? sg_remote_transient(r) : status == 429 || status == 408 || status >= 500;
    if (!transient)
        return -1;
    uint64_t delay = sg_remote_backoff_ms(rd->backoff_ms, p->attempts - p->switches, rd->backoff_max_ms);
    if (delay > rd->backoff_max_ms)
        delay = rd->backoff_max_ms;
    uint64_t seed = now ^ (uint64_t)(uintptr_t)p;
    delay = delay / 2 + jitter(seed) % (delay / 2 + 1);
    delay = sg_remote_retry_after_ms(r, delay);
    if (!sg_remote_in_time(now, delay, j->deadline_ms))
        return -1;
    return (long)delay;
}

/* Every key rests: fails the job with 503 + Retry-After until the first key wakes up. */
static void fail_resting(rjob_t *j, uint64_t now, uint64_t wake, const char *last)
{
    sg_reader_t *rd = j->rd;
    long why = sg_keyring_first_rest_status(&rd->keys, now);
    uint32_t retry_after = wake > now ? (uint32_t)((wake - now + 999) / 1000) : 1;
    char msg[600];
    snprintf(msg, sizeof(msg), "every reader key from $%s is resting after refusals (the first wakes in %u s; last: %s)",
             rd->keys.env, retry_after, last);
    sg_keyring_scrub(&rd->keys, msg, sizeof(msg));
    rd->host->log(SG_LOG_WARN, rd->name, "%s: %s", j->request_id, msg);
    job_fail(j, why == 429 ? SG_EOVERLOAD : SG_EUNAVAIL, retry_after, OUT_RESTING, msg);
}

static void on_response(void *ud, const sg_http_resp_t *r)
{
    rpage_t *p = ud;
    rjob_t *j = p->job;
    sg_reader_t *rd = j->rd;
    uint64_t now = sg_http_now_ms(rd->http);
    char msg[600], what[320] = "";
    if (r->err == SG_HTTP_ECANCELED) {
        job_fail(j, SG_ECANCELED, 0, OUT_CANCELED, r->message[0] != '\0' ? r->message : "canceled");
        job_release(j);
        return;
    }
    if (sg_http_job_over(&j->base)) { /* another URL already failed the job */
        job_release(j);
        return;
    }
    long status = r->err == SG_HTTP_OK ? r->status : 0;
    if (status == 200) {
        sg_buf_t page = {0};
        long code = 0;
        int rc = sg_reader_parse_page(r->body, r->body_len, rd->format, p->url, p->url_len, &page, &code, what, sizeof(what));
        if (rc == 0) {
            page_done(j, p, &page, PAGE_OK);
            sg_buf_free(&page);
            job_release(j);
            return;
        }
        sg_buf_free(&page);
        if (rc < 0) {
            char excerpt[96];
            sg_http_excerpt(r->body, r->body_len, NULL, excerpt, sizeof(excerpt), 80);
            snprintf(msg, sizeof(msg), "the reader returned an unusable reply: %s (body starts: %s)", what, excerpt);
            sg_keyring_scrub(&rd->keys, msg, sizeof(msg));
            sg_keyring_note_failure(&rd->keys, p->key);
            job_fail(j, SG_EUPSTREAM, 0, OUT_UPSTREAM, msg);
            job_release(j);
            return;
        }
        status = code; /* a refusal in the envelope of a 200: treated as that status */
    } else if (status != 0) {
        sg_reader_error_message(r->body, r->body_len, what, sizeof(what));
    }
    sg_keyring_scrub(&rd->keys, what, sizeof(what));
    sg_keyring_note_failure(&rd->keys, p->key);

    /* pages the reader cannot read: null for this URL */
    if ((status >= 400 && status < 500 && status != 401 && status != 402 && status != 408 && status != 429) ||
        r->err == SG_HTTP_ETOOBIG) {
        int too_big = r->err == SG_HTTP_ETOOBIG;
        /* the URL as sent (percent-encoded, so a client's URL cannot forge log lines) */
        rd->host->log(too_big ? SG_LOG_WARN : SG_LOG_INFO, rd->name, "%s: page %.300s answered null: %s%s", j->request_id,
                      p->target + strlen(rd->base) + 1,
                      too_big ? "" : "the reader could not read it: ", too_big ? r->message : what);
        page_done(j, p, NULL, too_big ? PAGE_TOO_BIG : PAGE_UNREADABLE);
        job_release(j);
        return;
    }

    /* a refused key: rest it and ask again at once with another one */
    if ((status == 401 || status == 402 || status == 429) && rd->keys.n >= 2) {
        uint64_t min_ms = status == 429 && r->retry_after_s > 0 ? (uint64_t)r->retry_after_s * 1000 : 0;
        if (sg_keyring_rest(&rd->keys, p->key, now, min_ms, status))
            rd->host->log(SG_LOG_WARN, rd->name, "reader key %d of %zu from $%s rests for %llu s: HTTP %ld: %s", p->key + 1,
                          rd->keys.n, rd->keys.env,
                          (unsigned long long)((min_ms > rd->keys.rest_ms ? min_ms : rd->keys.rest_ms) / 1000), status, what);
        uint64_t wake = 0;
        int k = sg_keyring_pick(&rd->keys, now, &wake);
        if (k < 0) {
            snprintf(msg, sizeof(msg), "HTTP %ld: %s", status, what);
            fail_resting(j, now, wake, msg);
            job_release(j);
            return;
        }
        if (p->switches < rd->keys.n && sg_remote_in_time(now, 0, j->deadline_ms) && !sg_http_job_over(&j->base)) {
            ++p->switches;
            if (resubmit(p, k, sg_remote_retry_at(rd->host, j->admission, now)) == 0)
                return; /* the new attempt carries this transfer's share of `outstanding` */
            --p->switches;
        }
    } else {
        long delay = retry_delay(rd, p, r, status, now);
        if (delay >= 0) {
            uint64_t wake = 0;
            int k = rd->keys.n != 0 ? sg_keyring_pick(&rd->keys, now, &wake) : -1;
            if (rd->keys.n != 0 && k < 0) {
                snprintf(msg, sizeof(msg), "HTTP %ld: %s", status, what);
                fail_resting(j, now, wake, msg);
                job_release(j);
                return;
            }
            if (resubmit(p, k, sg_remote_retry_at(rd->host, j->admission, now + (uint64_t)delay)) == 0) {
                atomic_fetch_add(&rd->retries_done, 1);
                return;
            }
        }
    }

    /* final failure of the call */
    sg_status st;
    int outcome;
    uint32_t retry_after = 0;
    const char *attempts = p->attempts > 1 ? " after retries" : "";
    if (r->err != SG_HTTP_OK) {
        st = sg_http_err_status(r->err);
        outcome = st == SG_ETIMEDOUT ? OUT_TIMEOUT : st == SG_EUNAVAIL ? OUT_UNAVAIL : OUT_UPSTREAM;
        if (r->err == SG_HTTP_ETIMEDOUT)
            snprintf(msg, sizeof(msg), "the reader did not answer in time%s: %s", attempts, r->message);
        else if (r->err == SG_HTTP_ECONNECT || r->err == SG_HTTP_ETLS)
            snprintf(msg, sizeof(msg), "cannot reach the reader at %s%s: %s", rd->base, attempts, r->message);
        else
            snprintf(msg, sizeof(msg), "reader request failed%s: %s", attempts, r->message);
    } else if (status == 401 || status == 402) {
        st = SG_EUNAVAIL;
        outcome = OUT_AUTH;
        if (rd->keys.n == 0)
            snprintf(msg, sizeof(msg), "the reader wants an API key (HTTP %ld; set config.reader.api_key_env): %s", status, what);
        else
            snprintf(msg, sizeof(msg), "the reader refused the API key from $%s (HTTP %ld): %s", rd->keys.env, status, what);
    } else if (status == 429) {
        st = SG_EOVERLOAD;
        outcome = OUT_RATE;
        retry_after = r->retry_after_s > 0 ? (uint32_t)r->retry_after_s : 1;
        snprintf(msg, sizeof(msg), "reader rate limit (HTTP 429)%s: %s", attempts, what);
    } else if (status >= 500) {
        st = SG_EUPSTREAM;
        outcome = OUT_UPSTREAM;
        snprintf(msg, sizeof(msg), "the reader failed (HTTP %ld)%s: %s", status, attempts, what);
    } else {
        st = status == 408 ? SG_ETIMEDOUT : SG_EUPSTREAM;
        outcome = status == 408 ? OUT_TIMEOUT : OUT_UPSTREAM;
        snprintf(msg, sizeof(msg), "the reader answered HTTP %ld%s: %s", status, attempts, what);
    }
    sg_keyring_scrub(&rd->keys, msg, sizeof(msg));
    rd->host->log(SG_LOG_WARN, rd->name, "%s: %s", j->request_id, msg);
    job_fail(j, st, retry_after, outcome, msg);
    job_release(j);
}

sg_status sg_reader_access(sg_reader_t *rd, const sg_search *s, sg_done_fn done, void *cb_data)
{
    rjob_t *j = calloc(1, sizeof(*j) + s->n_queries * sizeof(rpage_t));
    if (j == NULL)
        return SG_ENOMEM;
    j->rd = rd;
    j->deadline_ms = s->deadline_ms;
    j->start_by_ms = SG_SEARCH_START_BY(s);
    j->retries = sg_remote_call_retries(s, rd->retries);
    j->admission = sg_remote_call_admission(s);
    j->n = s->n_queries;
    j->pages = calloc(j->n, sizeof(*j->pages));
    if (j->pages == NULL)
        abort();
    snprintf(j->request_id, sizeof(j->request_id), "%s", s->request_id != NULL ? s->request_id : "-");
    atomic_fetch_add(&rd->calls, 1);
    atomic_fetch_add(&rd->urls, j->n);
    sg_buf_t b = {0};
    for (size_t i = 0; i < j->n; ++i) {
        rpage_t *p = &j->p[i];
        p->job = j;
        p->url = s->queries[i].text;
        p->url_len = s->queries[i].len;
        p->key = -1;
        b.len = 0;
        if (sg_reader_target(rd->base, p->url, p->url_len, &b) == 0) {
            p->target = strdup(b.base);
            if (p->target == NULL)
                abort();
            ++j->n_left;
        } else {
            atomic_fetch_add(&rd->pages[PAGE_INVALID_URL], 1);
        }
    }
    sg_buf_free(&b);
    uint64_t now = sg_http_now_ms(rd->http), wake = 0;
    if (j->n_left == 0) { /* nothing to fetch: every URL is null */
        j->base.done = done;
        j->base.cb_data = cb_data;
        atomic_fetch_add(&rd->results_ok, 1);
        sg_http_job_finish_docs(&j->base, j->pages, j->n);
        job_free(j);
        return SG_OK;
    }
    if (sg_keyring_all_resting(&rd->keys, now, &wake)) { /* no request at all */
        j->base.done = done;
        j->base.cb_data = cb_data;
        fail_resting(j, now, wake, "no request sent");
        sg_http_job_settle(&j->base); /* nothing was sent: done() at once */
        job_free(j);
        return SG_OK;
    }
    /* all URLs in one submit (all or none), each with its own key */
    sg_http_req_t *reqs = calloc(j->n_left, sizeof(*reqs));
    const char *(*headers)[MAX_EXTRA_HEADERS + 3] = calloc(j->n_left, sizeof(*headers));
    int *used = calloc(j->n_left, sizeof(*used));
    if (reqs == NULL || headers == NULL || used == NULL)
        abort();
    size_t m = 0;
    for (size_t i = 0; i < j->n; ++i) {
        rpage_t *p = &j->p[i];
        if (p->target == NULL)
            continue;
        int k = rd->keys.n != 0 ? sg_keyring_pick(&rd->keys, now, &wake) : -1;
        if (rd->keys.n != 0 && k < 0)
            k = 0; /* the keys fell asleep since the check above: let the upstream say it again */
        p->key = k;
        p->attempts = 1;
        used[m] = k;
        attempt_headers(rd, k, headers[m]);
        reqs[m] = (sg_http_req_t){.method = "GET",
                                  .url = p->target,
                                  .headers = headers[m],
                                  .deadline_ms = j->deadline_ms,
                                  .start_by_ms = j->start_by_ms,
                                  .cb = on_response,
                                  .ud = p};
        ++m;
    }
    j->outstanding = j->n_left;
    const char *why = NULL;
    pthread_mutex_lock(&rd->jobs.mu);
    sg_http_jobs_add_locked(&rd->jobs, &j->base, done, cb_data);
    for (size_t i = 0; i < m; ++i)
        reqs[i].tag = j->base.tag;
    int rc = sg_http_submit(rd->http, reqs, m, &why);
    pthread_mutex_unlock(&rd->jobs.mu);
    free(reqs);
    free(headers);
    if (rc != 0) {
        free(used);
        sg_http_jobs_remove(&rd->jobs, &j->base);
        atomic_fetch_add(&rd->fails[OUT_RATE], 1);
        sg_http_job_fail(&j->base, SG_EOVERLOAD, 1, "reader: %s", why);
        job_free(j);
        return SG_OK;
    }
    for (size_t i = 0; i < m; ++i) /* j may be gone already: count from the local copy */
        sg_keyring_note_call(&rd->keys, used[i]);
    free(used);
    return SG_OK;
}

int sg_reader_cancel(sg_reader_t *rd, void *cb_data)
{
    return sg_http_jobs_cancel(&rd->jobs, rd->http, cb_data);
}

void sg_reader_stats(sg_reader_t *rd, void *sink)
{
    const sg_host_api *h = rd->host;
    h->metric(sink, "serper_access_calls_total", "access() calls received by the serper backend (POST /access).", SG_METRIC_COUNTER,
              NULL, (double)atomic_load(&rd->calls));
    h->metric(sink, "serper_access_urls_total", "Page URLs asked for through access().", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&rd->urls));
    h->metric(sink, "serper_access_retries_total",
              "Retried reader requests (429 with one key, 5xx, 408, timeouts, connection failures).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&rd->retries_done));
    static const char page_help[] = "Page URLs answered, by outcome (ok: the page; the others: null).";
    static const char *const page_labels[PAGE_N] = {"outcome=\"ok\"", "outcome=\"unreadable\"", "outcome=\"too_big\"",
                                                    "outcome=\"invalid_url\""};
    for (size_t i = 0; i < PAGE_N; ++i)
        h->metric(sink, "serper_access_pages_total", page_help, SG_METRIC_COUNTER, page_labels[i],
                  (double)atomic_load(&rd->pages[i]));
    static const char res_help[] = "Completed access() calls by outcome.";
    h->metric(sink, "serper_access_results_total", res_help, SG_METRIC_COUNTER, "outcome=\"ok\"",
              (double)atomic_load(&rd->results_ok));
    static const char *const outcomes[OUT_N] = {"outcome=\"bad_key\"",     "outcome=\"rate_limited\"", "outcome=\"upstream_error\"",
                                                "outcome=\"timeout\"",     "outcome=\"unavailable\"",  "outcome=\"canceled\"",
                                                "outcome=\"keys_resting\""};
    for (size_t i = 0; i < OUT_N; ++i)
        h->metric(sink, "serper_access_results_total", res_help, SG_METRIC_COUNTER, outcomes[i],
                  (double)atomic_load(&rd->fails[i]));
    sg_keyring_report(&rd->keys, h, sink, "serper_reader", h->now_ms());
    sg_http_report(rd->http, h, sink, "serper_reader");
}

void sg_reader_limits(sg_reader_t *rd, sg_limits *out)
{
    sg_remote_limits(&rd->conf, 0, rd->retries, "serper_reader", out);
}

const char *sg_reader_describe(sg_reader_t *rd)
{
    return rd->describe;
}

void sg_reader_free(sg_reader_t *rd)
{
    if (rd == NULL)
        return;
    sg_http_free(rd->http); /* completes every pending access with SG_ECANCELED */
    sg_http_jobs_dispose(&rd->jobs);
    sg_http_conf_free(&rd->conf);
    sg_keyring_free(&rd->keys);
    for (size_t i = 0; i < rd->n_extra; ++i)
        free(rd->extra[i]);
    free(rd->base);
    free(rd->base_url);
    free(rd->name);
    free(rd);
}

static int token_char(int ch)
{
    return isalnum(ch) || (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* "headers": {"X-Name": "value", ...}: extra request headers (the reader's options). */
static int read_headers(sg_reader_t *rd, sg_cfg_t *c, const cJSON *obj)
{
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(obj, "headers");
    if (hs == NULL || cJSON_IsNull(hs))
        return 0;
    if (!cJSON_IsObject(hs))
        return sg_cfg_fail(c, "headers", hs, "expected an object of extra request headers, e.g. {\"X-Retain-Images\": \"none\"}");
    static const char *const reserved[] = {"authorization",     "accept",     "host", "content-length", "content-type",
                                           "transfer-encoding", "connection", NULL};
    sg_cfg_t ch = {"config.reader.headers", c->err, c->err_size};
    for (const cJSON *it = hs->child; it != NULL; it = it->next) {
        const char *name = it->string;
        int ok = name[0] != '\0';
        for (const char *q = name; *q != '\0'; ++q)
            ok &= token_char((unsigned char)*q);
        if (!ok)
            return sg_cfg_fail(&ch, name, it, "is not a valid header name");
        for (size_t i = 0; reserved[i] != NULL; ++i)
            if (strcasecmp(name, reserved[i]) == 0)
                return sg_cfg_fail(&ch, name, it, "is set by the backend itself");
        if (!cJSON_IsString(it))
            return sg_cfg_fail(&ch, name, it, "expected a string");
        for (const char *q = it->valuestring; *q != '\0'; ++q)
            if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
                return sg_cfg_fail(&ch, name, it, "expected printable ASCII (no line breaks)");
        if (rd->n_extra == MAX_EXTRA_HEADERS)
            return sg_cfg_fail(c, "headers", hs, "at most %d headers", MAX_EXTRA_HEADERS);
        rd->extra[rd->n_extra++] = sg_remote_header(name, it->valuestring);
    }
    return 0;
}

/* ---- the config (docs/backends/serper.md, the reader's keys; checked by tests/lint/test_config_docs.py) ---- */

static const char *const reader_formats[] = {"json", "text", NULL};

static const sg_cfg_key_t reader_config[] = {
    SG_CFG_STRING(sg_reader_t, base_url, "base_url", 0, "https://r.jina.ai"),
    SG_CFG_CUSTOM_KEY("api_key_env"),
    SG_CFG_CUSTOM_KEY("key_rest_s"),
    SG_CFG_ENUM(sg_reader_t, format, "format", reader_formats, SG_READER_FORMAT_JSON),
    SG_CFG_CUSTOM_KEY("headers"),
    SG_REMOTE_RETRY_KEYS(sg_reader_t, retries, backoff_ms, 2, 500),
    SG_CFG_CUSTOM_KEY("backoff_max_ms"),
    SG_HTTP_CONF_KEYS(sg_reader_t, conf, 5000, 30000, 4194304, 1, 16, 0, 10000, 0),
};

int sg_reader_create(const sg_host_api *host, const char *instance, const char *base_dir, const cJSON *obj, uint32_t default_rest_s,
                     sg_reader_t **out, char *err, size_t err_size)
{
    sg_cfg_t c = {"config.reader", err, err_size};
    *out = NULL;
    if (!cJSON_IsObject(obj)) {
        snprintf(err, err_size, "config.reader: expected an object (the page reader's settings)");
        return -1;
    }
    sg_reader_t *rd = calloc(1, sizeof(*rd));
    if (rd == NULL)
        abort();
    rd->host = host;
    rd->name = strdup(instance);
    sg_http_jobs_init(&rd->jobs);
    rd->conf.now_ms = host->now_ms;
    rd->conf.name = "reader";
    int64_t v;
    if (sg_cfg_read(&c, obj, reader_config, SG_CFG_N(reader_config), base_dir, rd) != 0 ||
        sg_http_conf_check(&c, obj, &rd->conf) != 0)
        goto fail;
    if (!sg_remote_url_ok(rd->base_url)) {
        sg_cfg_fail(&c, "base_url", cJSON_GetObjectItemCaseSensitive(obj, "base_url"), "expected an http:// or https:// URL");
        goto fail;
    }
    rd->base = sg_http_trim_url(rd->base_url);
    if (sg_cfg_int(&c, obj, "key_rest_s", 1, 86400, default_rest_s, &v) != 0 ||
        sg_keyring_init(&rd->keys, &c, obj, "api_key_env", 0, "Authorization: Bearer ", (uint64_t)v * 1000) != 0)
        goto fail;
    rd->accept = rd->format == SG_READER_FORMAT_JSON ? "Accept: application/json" : "Accept: text/plain";
    if (read_headers(rd, &c, obj) != 0)
        goto fail;
    if (sg_cfg_int(&c, obj, "backoff_max_ms", rd->backoff_ms, 600000, rd->backoff_ms > 5000 ? rd->backoff_ms : 5000, &v) != 0)
        goto fail;
    rd->backoff_max_ms = (uint32_t)v;
    rd->http = sg_http_new(&rd->conf, err, err_size);
    if (rd->http == NULL)
        goto fail;
    snprintf(rd->describe, sizeof(rd->describe), "%s/{url} (%s, %zu key%s, max_inflight %u, max_response_bytes %zu)", rd->base,
             reader_formats[rd->format], rd->keys.n, rd->keys.n == 1 ? "" : "s", rd->conf.max_inflight,
             rd->conf.max_response_bytes);
    *out = rd;
    return 0;
fail:
    sg_reader_free(rd);
    return -1;
}
