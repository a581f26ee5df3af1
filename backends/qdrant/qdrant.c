/*
 * qdrant.c -- the "qdrant" backend: dense retrieval against a Qdrant collection in RLinf's layout
 * (docs/protocols.md, "Qdrant": one unnamed e5 vector per corpus row, payload = the row), queried the way
 * RLinf's local_retrieval_server.py does, but batched.
 *
 * search() copies the queries and queues the call for the encoder threads (the e5 encoder of
 * backends/encoder, shared as the sg_e5 library). An encoder thread takes queued calls up
 * to `max_batch` queries at once, encodes them with the "query: " prefix (mean pooling, L2
 * normalisation), and hands each call's single POST /collections/{c}/points/query/batch
 * (`limit` = topk, `with_payload`: true, optional hnsw_ef/exact/score_threshold/using) to this
 * instance's HTTP engine. The engine thread parses the reply (qdrant_parse.c) and completes the
 * call; Qdrant's error bodies become clear gateway errors, transient failures are retried.
 * create() checks that the collection exists and that its vector size matches the encoder.
 */
#include "sg_backend.h"
#include "cfg.h"
#include "e5.h"
#include "http.h"
#include "qdrant_parse.h"
#include "remote.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_job_t job_t;
struct st_job_t {
    sg_http_job_t base; /* first: the registry links jobs through it */
    job_t *qnext;       /* encoder queue */
    struct sg_backend *self;
    uint64_t deadline_ms;
    uint64_t start_by_ms;             /* no new attempt starts after it (sg_search.start_by_ms) */
    uint32_t topk, attempts, retries; /* retries: the gateway's budget for this call */
    void *admission;                  /* the call's, for retry_at() (sg_remote_retry_at) */
    size_t n;
    char **texts;
    size_t *lens;
    float *vecs;
    char *body;
    size_t body_len;
    char request_id[40];
};

struct sg_backend {
    const sg_host_api *host;
    char *name;
    char *base, *collection, *vector, *query_url, *info_url;
    char *key, *key_header, *key_env;
    const char *headers[4];
    char *prefix;
    uint32_t max_length, max_batch, max_pending, max_topk, retries, backoff_ms;
    char *url, *model_dir, *data_version; /* config, for create() */
    int check;                            /* check_collection */
    sg_qdrant_params_t params;
    sg_e5_model *model;
    int dim;
    sg_http_conf_t conf;
    sg_http_t *http;
    sg_http_jobs_t jobs;
    char identity[96];
    /* encoder queue */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    job_t *qhead, **qtail;
    size_t queued;
    int stopping;
    pthread_t *workers;
    size_t n_workers;
    sg_remote_health_t health;
    /* counters */
    atomic_uint_fast64_t searches, queries, encoded, encode_batches, encode_us, retries_done;
    sg_remote_outcomes_t outcomes;
};

static void job_free(job_t *j)
{
    for (size_t i = 0; i < j->n; ++i)
        free(j->texts[i]);
    free(j->texts);
    free(j->lens);
    free(j->vecs);
    free(j->body);
    free(j);
}

/* The job is over (done() was called): unregister and free it. */
static void job_end(job_t *j)
{
    sg_http_jobs_remove(&j->self->jobs, &j->base);
    job_free(j);
}

static void fail(job_t *j, sg_status st, uint32_t retry_after, const char *msg)
{
    sg_remote_job_fail(&j->base, &j->self->outcomes, st, retry_after, msg);
}

static void on_response(void *ud, const sg_http_resp_t *r);

static int submit_attempt(job_t *j, uint64_t not_before)
{
    sg_backend *self = j->self;
    sg_http_req_t req = {.method = "POST",
                         .url = self->query_url,
                         .headers = self->headers,
                         .body = j->body,
                         .body_len = j->body_len,
                         .deadline_ms = j->deadline_ms,
                         .start_by_ms = j->start_by_ms,
                         .not_before_ms = not_before,
                         .tag = j->base.tag,
                         .cb = on_response,
                         .ud = j};
    ++j->attempts;
    return sg_http_submit_copy(self->http, &req);
}

static void on_response(void *ud, const sg_http_resp_t *r)
{
    job_t *j = ud;
    sg_backend *self = j->self;
    uint64_t now = sg_http_now_ms(self->http);
    char msg[600], what[300];
    if (r->err == SG_HTTP_ECANCELED) {
        fail(j, SG_ECANCELED, 0, r->message);
        job_end(j);
        return;
    }
    if (r->err == SG_HTTP_OK && r->status == 200) {
        sg_qd_list_t *lists = calloc(j->n, sizeof(*lists));
        if (lists == NULL)
            abort();
        if (sg_qdrant_parse_batch(r->body, r->body_len, j->n, j->topk, lists, what, sizeof(what)) == 0) {
            sg_remote_health_note(&self->health, SG_OK, 0, "");
            sg_remote_job_finish_docs(&j->base, &self->outcomes, lists, j->n);
        } else {
            char excerpt[96];
            sg_http_excerpt(r->body, r->body_len, self->key, excerpt, sizeof(excerpt), 80);
            snprintf(msg, sizeof(msg), "Qdrant returned an unusable reply: %s (body starts: %s)", what, excerpt);
            sg_remote_health_note(&self->health, SG_EUPSTREAM, 0, msg);
            fail(j, SG_EUPSTREAM, 0, msg);
        }
        sg_qdrant_lists_free(lists, j->n);
        free(lists);
        job_end(j);
        return;
    }
    if (sg_remote_transient(r) && j->attempts <= j->retries && !atomic_load(&j->base.canceled)) {
        uint64_t delay = sg_remote_retry_after_ms(r, sg_remote_backoff_ms(self->backoff_ms, j->attempts, 60000));
        if (sg_remote_in_time(now, delay, j->deadline_ms)) {
            int ok = 0;
            pthread_mutex_lock(&self->jobs.mu); /* ordered with cancel(), see http.h */
            if (!atomic_load(&j->base.canceled))
                ok = submit_attempt(j, sg_remote_retry_at(self->host, j->admission, now + delay)) == 0;
            pthread_mutex_unlock(&self->jobs.mu);
            if (ok) {
                atomic_fetch_add(&self->retries_done, 1);
                return;
            }
        }
    }
    sg_status st;
    int at_once = 0;
    uint32_t retry_after = 0;
    const char *tries = j->attempts > 1 ? " (after retries)" : "";
    if (r->err != SG_HTTP_OK) {
        st = sg_http_err_status(r->err);
        if (r->err == SG_HTTP_ECONNECT || r->err == SG_HTTP_ETLS)
            snprintf(msg, sizeof(msg), "cannot reach Qdrant at %s%s: %s", self->base, tries, r->message);
        else if (r->err == SG_HTTP_ETIMEDOUT)
            snprintf(msg, sizeof(msg), "Qdrant did not answer in time%s: %s", tries, r->message);
        else
            snprintf(msg, sizeof(msg), "Qdrant request failed%s: %s", tries, r->message);
    } else {
        sg_qdrant_error_message(r->body, r->body_len, what, sizeof(what));
        switch (r->status) {
        case 401:
        case 403:
            st = SG_EUNAVAIL;
            at_once = 1;
            snprintf(msg, sizeof(msg), "Qdrant rejected the API key%s%s (HTTP %ld): %s", self->key_env != NULL ? " from $" : "",
                     self->key_env != NULL ? self->key_env : "", r->status, what);
            break;
        case 404:
            st = SG_EUNAVAIL;
            at_once = 1;
            snprintf(msg, sizeof(msg), "Qdrant collection %s is not there (HTTP 404): %s", self->collection, what);
            break;
        case 408:
        case 504:
            st = SG_ETIMEDOUT;
            snprintf(msg, sizeof(msg), "Qdrant timed out (HTTP %ld)%s: %s", r->status, tries, what);
            break;
        case 429:
            st = SG_EOVERLOAD;
            retry_after = r->retry_after_s > 0 ? (uint32_t)r->retry_after_s : 1;
            snprintf(msg, sizeof(msg), "Qdrant rate limit (HTTP 429)%s: %s", tries, what);
            break;
        case 503:
            st = SG_EUNAVAIL;
            retry_after = r->retry_after_s > 0 ? (uint32_t)r->retry_after_s : 1;
            snprintf(msg, sizeof(msg), "Qdrant unavailable (HTTP 503)%s: %s", tries, what);
            break;
        default:
            st = SG_EUPSTREAM;
            snprintf(msg, sizeof(msg), "Qdrant %s (HTTP %ld)%s: %s", r->status < 500 ? "rejected the query" : "failed", r->status,
                     tries, what);
            break;
        }
    }
    self->host->log(SG_LOG_WARN, self->name, "%s: %s", j->request_id, msg);
    sg_remote_health_note(&self->health, st, at_once, msg);
    fail(j, st, retry_after, msg);
    job_end(j);
}

/* ---- encoder threads ---- */

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Encodes the queries of `jobs` (linked by qnext) into each job's vecs, in chunks of max_batch. */
static int encode_jobs(sg_backend *self, sg_e5_workspace *ws, job_t *jobs, size_t total, char *err, size_t err_size)
{
    const char **texts = malloc(total * sizeof(*texts));
    size_t *lens = malloc(total * sizeof(*lens));
    float *out = malloc(total * (size_t)self->dim * sizeof(float));
    if (texts == NULL || lens == NULL || out == NULL)
        abort();
    size_t k = 0;
    for (job_t *j = jobs; j != NULL; j = j->qnext)
        for (size_t i = 0; i < j->n; ++i, ++k) {
            texts[k] = j->texts[i];
            lens[k] = j->lens[i];
        }
    uint64_t t0 = mono_us();
    int rc = 0;
    for (size_t off = 0; off < total && rc == 0; off += self->max_batch) {
        size_t m = total - off < self->max_batch ? total - off : self->max_batch;
        rc = sg_e5_encode(self->model, ws, self->prefix, texts + off, lens + off, m, self->max_length,
                          out + off * (size_t)self->dim, err, err_size);
        atomic_fetch_add(&self->encode_batches, 1);
    }
    atomic_fetch_add(&self->encode_us, mono_us() - t0);
    atomic_fetch_add(&self->encoded, total);
    k = 0;
    for (job_t *j = jobs; j != NULL && rc == 0; j = j->qnext) {
        j->vecs = malloc(j->n * (size_t)self->dim * sizeof(float));
        if (j->vecs == NULL)
            abort();
        memcpy(j->vecs, out + k * (size_t)self->dim, j->n * (size_t)self->dim * sizeof(float));
        k += j->n;
    }
    free(texts);
    free(lens);
    free(out);
    return rc;
}

static void *worker_main(void *arg)
{
    sg_backend *self = arg;
    sg_e5_workspace *ws = sg_e5_workspace_new(self->model);
    for (;;) {
        pthread_mutex_lock(&self->qmu);
        while (self->qhead == NULL && !self->stopping)
            pthread_cond_wait(&self->qcv, &self->qmu);
        if (self->stopping) {
            pthread_mutex_unlock(&self->qmu);
            break;
        }
        /* take whole calls while they fit in max_batch queries (at least one) */
        job_t *batch = NULL, **tail = &batch;
        size_t total = 0;
        while (self->qhead != NULL && (batch == NULL || total + self->qhead->n <= self->max_batch)) {
            job_t *j = self->qhead;
            self->qhead = j->qnext;
            if (self->qhead == NULL)
                self->qtail = &self->qhead;
            --self->queued;
            j->qnext = NULL;
            *tail = j;
            tail = &j->qnext;
            total += j->n;
        }
        pthread_mutex_unlock(&self->qmu);
        /* drop calls that were canceled or ran out of time while queued */
        uint64_t now = self->host->now_ms();
        job_t *live = NULL, **ltail = &live;
        total = 0;
        for (job_t *j = batch, *next; j != NULL; j = next) {
            next = j->qnext;
            j->qnext = NULL;
            if (atomic_load(&j->base.canceled)) {
                fail(j, SG_ECANCELED, 0, "canceled before encoding");
                job_end(j);
            } else if (j->start_by_ms != 0 && now >= j->start_by_ms) {
                fail(j, SG_ETIMEDOUT, 0,
                     now >= j->deadline_ms ? "deadline passed while waiting for the query encoder"
                                           : "too little of the deadline left after waiting for the query encoder");
                job_end(j);
            } else {
                *ltail = j;
                ltail = &j->qnext;
                total += j->n;
            }
        }
        if (live == NULL)
            continue;
        char err[256] = "";
        if (ws == NULL || encode_jobs(self, ws, live, total, err, sizeof(err)) != 0) {
            for (job_t *j = live, *next; j != NULL; j = next) {
                next = j->qnext;
                char msg[320];
                snprintf(msg, sizeof(msg), "query encoder failed: %s", ws == NULL ? "no workspace" : err);
                fail(j, SG_EINTERNAL, 0, msg);
                job_end(j);
            }
            continue;
        }
        for (job_t *j = live, *next; j != NULL; j = next) {
            next = j->qnext;
            sg_buf_t b = {0};
            sg_qdrant_build_batch(&b, j->vecs, j->n, self->dim, j->topk, &self->params);
            j->body = b.base;
            j->body_len = b.len;
            int rc = -1, canceled = 0;
            pthread_mutex_lock(&self->jobs.mu); /* ordered with cancel(), see http.h */
            if (atomic_load(&j->base.canceled))
                canceled = 1;
            else
                rc = submit_attempt(j, 0);
            pthread_mutex_unlock(&self->jobs.mu);
            if (rc != 0) {
                fail(j, canceled ? SG_ECANCELED : SG_EOVERLOAD, canceled ? 0 : 1,
                     canceled ? "canceled" : "qdrant: too many requests waiting for the upstream (max_queue)");
                job_end(j);
            }
        }
    }
    sg_e5_workspace_free(ws);
    return NULL;
}

static sg_status qd_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    if (s->topk > self->max_topk)
        return SG_ETOOBIG;
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    j->self = self;
    j->deadline_ms = s->deadline_ms;
    j->start_by_ms = SG_SEARCH_START_BY(s);
    j->retries = sg_remote_call_retries(s, self->retries);
    j->admission = sg_remote_call_admission(s);
    j->topk = s->topk;
    j->n = s->n_queries;
    j->texts = calloc(j->n, sizeof(*j->texts));
    j->lens = calloc(j->n, sizeof(*j->lens));
    if (j->texts == NULL || j->lens == NULL)
        abort();
    for (size_t i = 0; i < j->n; ++i) {
        j->texts[i] = malloc(s->queries[i].len + 1);
        if (j->texts[i] == NULL)
            abort();
        memcpy(j->texts[i], s->queries[i].text, s->queries[i].len);
        j->texts[i][s->queries[i].len] = '\0';
        j->lens[i] = s->queries[i].len;
    }
    snprintf(j->request_id, sizeof(j->request_id), "%s", s->request_id != NULL ? s->request_id : "-");
    size_t n = j->n;
    pthread_mutex_lock(&self->jobs.mu);
    sg_http_jobs_add_locked(&self->jobs, &j->base, done, cb_data);
    pthread_mutex_unlock(&self->jobs.mu);
    pthread_mutex_lock(&self->qmu);
    int full = self->queued >= self->max_pending || self->stopping;
    if (!full) {
        *self->qtail = j;
        self->qtail = &j->qnext;
        ++self->queued;
        pthread_cond_signal(&self->qcv);
    }
    pthread_mutex_unlock(&self->qmu);
    if (full) {
        fail(j, SG_EOVERLOAD, 1, "qdrant: the query encoder queue is full (max_pending)");
        job_end(j);
        return SG_OK;
    }
    atomic_fetch_add(&self->searches, 1);
    atomic_fetch_add(&self->queries, n);
    return SG_OK;
}

static void qd_cancel(sg_backend *self, void *cb_data)
{
    sg_http_jobs_cancel(&self->jobs, self->http, cb_data);
}

static sg_status qd_health(sg_backend *self, char *detail, size_t n)
{
    return sg_remote_health_get(&self->health, detail, n);
}

static void qd_stats(sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
    h->metric(sink, "qdrant_searches_total", "Calls received by the qdrant backend.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->searches));
    h->metric(sink, "qdrant_queries_total", "Queries received by the qdrant backend.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->queries));
    h->metric(sink, "qdrant_encoded_total", "Queries encoded by the e5 encoder.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->encoded));
    h->metric(sink, "qdrant_encode_batches_total", "Encoder forward passes.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->encode_batches));
    h->metric(sink, "qdrant_encode_seconds_total", "Time spent encoding queries.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->encode_us) / 1e6);
    pthread_mutex_lock(&self->qmu);
    double queued = (double)self->queued;
    pthread_mutex_unlock(&self->qmu);
    h->metric(sink, "qdrant_encoder_queue", "Calls waiting for an encoder thread.", SG_METRIC_GAUGE, NULL, queued);
    h->metric(sink, "qdrant_retries_total", "Qdrant requests retried.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->retries_done));
    sg_remote_outcomes_report(&self->outcomes, h, sink, "qdrant_results_total", "Completed qdrant calls by outcome.");
    sg_http_report(self->http, h, sink, "qdrant");
}

static const char *qd_identity(sg_backend *self)
{
    return self->identity;
}

static void qd_destroy(sg_backend *self)
{
    pthread_mutex_lock(&self->qmu);
    self->stopping = 1;
    pthread_cond_broadcast(&self->qcv);
    pthread_mutex_unlock(&self->qmu);
    for (size_t i = 0; i < self->n_workers; ++i)
        pthread_join(self->workers[i], NULL);
    free(self->workers);
    /* calls still waiting for the encoder */
    while (self->qhead != NULL) {
        job_t *j = self->qhead;
        self->qhead = j->qnext;
        fail(j, SG_ECANCELED, 0, "backend shutting down");
        job_end(j);
    }
    sg_http_free(self->http); /* completes every running request with SG_ECANCELED */
    sg_http_jobs_dispose(&self->jobs);
    sg_http_conf_free(&self->conf);
    if (self->model != NULL)
        sg_e5_free(self->model);
    pthread_mutex_destroy(&self->qmu);
    pthread_cond_destroy(&self->qcv);
    sg_remote_health_dispose(&self->health);
    sg_remote_secret_free(self->key);
    sg_remote_secret_free(self->key_header);
    free(self->key_env);
    free(self->base);
    free(self->collection);
    free(self->vector);
    free(self->query_url);
    free(self->info_url);
    free(self->prefix);
    free(self->url);
    free(self->model_dir);
    free(self->data_version);
    free(self->name);
    free(self);
}

/* Percent-encodes a collection name for the URL path. */
static char *path_escape(const char *s)
{
    sg_buf_t b = {0};
    sg_buf_append(&b, "", 0);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; ++p) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
            *p == '.' || *p == '~')
            sg_buf_append(&b, p, 1);
        else
            sg_buf_appendf(&b, "%%%02X", *p);
    }
    return b.base;
}

/* GET /collections/{name}: the collection must exist and its vectors must fit the encoder. */
static int check_collection(sg_backend *self, char *err, size_t err_size)
{
    sg_http_resp_t r;
    char *body = NULL, msg[320];
    sg_http_fetch_sync(&self->conf, "GET", self->info_url, self->headers, NULL, 0, &r, &body, msg, sizeof(msg));
    int rc = -1;
    char what[300];
    if (r.err != SG_HTTP_OK) {
        snprintf(err, err_size, "config.url: cannot reach Qdrant at %s: %s", self->base, r.message);
    } else if (r.status == 401 || r.status == 403) {
        sg_qdrant_error_message(r.body, r.body_len, what, sizeof(what));
        snprintf(err, err_size, "config.api_key_env: Qdrant at %s rejected the %s (HTTP %ld): %s", self->base,
                 self->key != NULL ? "API key" : "request without an API key", r.status, what);
    } else if (r.status == 404) {
        sg_qdrant_error_message(r.body, r.body_len, what, sizeof(what));
        snprintf(err, err_size, "config.collection: Qdrant at %s has no collection \"%s\": %s", self->base, self->collection, what);
    } else if (r.status != 200) {
        sg_qdrant_error_message(r.body, r.body_len, what, sizeof(what));
        snprintf(err, err_size, "config.collection: GET %s answered HTTP %ld: %s", self->info_url, r.status, what);
    } else {
        sg_qdrant_collection_t c;
        if (sg_qdrant_parse_collection(r.body, r.body_len, self->vector, &c, what, sizeof(what)) != 0) {
            snprintf(err, err_size, "config.%s: collection \"%s\": %s", self->vector != NULL ? "vector" : "collection",
                     self->collection, what);
        } else if (c.size != self->dim) {
            snprintf(err, err_size,
                     "config.model: the encoder makes %d-dimensional vectors but collection \"%s\" holds %ld-dimensional ones",
                     self->dim, self->collection, c.size);
        } else {
            rc = 0;
            if (strcmp(c.distance, "Cosine") != 0 && strcmp(c.distance, "Dot") != 0)
                self->host->log(SG_LOG_WARN, self->name, "collection %s uses %s distance; e5 embeddings expect Cosine",
                                self->collection, c.distance[0] != '\0' ? c.distance : "an unknown");
            if (strcmp(c.status, "green") != 0)
                self->host->log(SG_LOG_WARN, self->name, "collection %s status is %s (not green)", self->collection,
                                c.status[0] != '\0' ? c.status : "unknown");
            self->host->log(SG_LOG_INFO, self->name, "collection %s: %ld points, %ld-d %s vectors, status %s", self->collection,
                            c.points, c.size, c.distance, c.status);
        }
    }
    free(body);
    return rc;
}

/* ---- the config (docs/backends/qdrant.md; checked by tests/lint/test_config_docs.py) ---- */

static const sg_cfg_key_t qd_config[] = {
    SG_CFG_STRING(sg_backend, url, "url", 0, "http://127.0.0.1:6333"),
    SG_CFG_STRING(sg_backend, collection, "collection", 0, "wiki_collection"),
    SG_CFG_STRING(sg_backend, vector, "vector", 0, NULL),
    SG_CFG_STRING(sg_backend, key_env, "api_key_env", 0, NULL),
    SG_CFG_PATH(sg_backend, model_dir, "model", 1),
    SG_CFG_TEXT(sg_backend, prefix, "prefix", "query: ", 0, NULL),
    SG_CFG_INT(sg_backend, max_length, "max_length", 2, 512, 256),
    SG_CFG_INT(sg_backend, params.hnsw_ef, "hnsw_ef", 1, 1000000, 0), /* these three: absent = Qdrant's own */
    SG_CFG_BOOL(sg_backend, params.exact, "exact", 0),
    SG_CFG_DOUBLE(sg_backend, params.score_threshold, "score_threshold", -1e9, 1e9, NAN),
    SG_CFG_INT(sg_backend, n_workers, "encoder_threads", 1, 64, 1),
    SG_CFG_INT(sg_backend, max_batch, "max_batch", 1, 4096, 64),
    SG_CFG_INT(sg_backend, max_pending, "max_pending", 1, 10000000, 4096),
    SG_CFG_BOOL(sg_backend, check, "check_collection", 1),
    SG_REMOTE_RETRY_KEYS(sg_backend, retries, backoff_ms, 1, 100),
    SG_CFG_INT(sg_backend, max_topk, "max_topk", 1, 100000, 1000),
    SG_CFG_STRING(sg_backend, data_version, "data_version", 0, ""),
    SG_HTTP_CONF_KEYS(sg_backend, conf, 2000, 30000, 67108864, 1, 0, 0, 100000, 0),
};

/* The URLs, the API key and the headers, and which search parameters were given. */
static int setup_requests(sg_backend *self, sg_cfg_t *c, const cJSON *root)
{
    if (!sg_remote_url_ok(self->url))
        return sg_cfg_fail(c, "url", cJSON_GetObjectItem(root, "url"), "expected an http:// or https:// URL (the REST port, 6333)");
    self->base = sg_http_trim_url(self->url);
    char *escaped = path_escape(self->collection);
    self->info_url = sg_remote_concat(self->base, "/collections/", escaped);
    self->query_url = sg_remote_concat(self->info_url, "/points/query/batch", "");
    free(escaped);
    if (sg_cfg_secret_env(c, root, "api_key_env", 0, &self->key) != 0)
        return -1;
    size_t nh = 0;
    if (self->key != NULL) {
        self->key_header = sg_remote_header("api-key", self->key);
        self->headers[nh++] = self->key_header;
    }
    self->headers[nh++] = "Content-Type: application/json";
    self->headers[nh++] = "Accept: application/json";
    self->headers[nh] = NULL;
    self->params.has_hnsw_ef = sg_cfg_present(root, "hnsw_ef");
    self->params.has_exact = sg_cfg_present(root, "exact");
    self->params.has_score_threshold = sg_cfg_present(root, "score_threshold");
    if (!self->params.has_score_threshold)
        self->params.score_threshold = 0;
    self->params.using_vector = self->vector;
    return 0;
}

static void make_identity(sg_backend *self)
{
    uint64_t h = SG_REMOTE_FNV_INIT;
    h = sg_remote_fnv(h, self->query_url);
    h = sg_remote_fnv(h, self->vector);
    h = sg_remote_fnv(h, sg_e5_identity(self->model));
    h = sg_remote_fnv(h, self->prefix);
    char num[96];
    snprintf(num, sizeof(num), "%u/%d%u/%d%d/%d%.9g", self->max_length, self->params.has_hnsw_ef, self->params.hnsw_ef,
             self->params.has_exact, self->params.exact, self->params.has_score_threshold, self->params.score_threshold);
    h = sg_remote_fnv(h, num);
    h = sg_remote_fnv(h, self->data_version);
    snprintf(self->identity, sizeof(self->identity), "qdrant:%016llx", (unsigned long long)h);
}

static sg_status qd_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                           size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL)
        return SG_ENOMEM;
    self->host = host;
    self->name = strdup(instance);
    pthread_mutex_init(&self->qmu, NULL);
    pthread_cond_init(&self->qcv, NULL);
    sg_remote_health_init(&self->health);
    self->qtail = &self->qhead;
    sg_http_jobs_init(&self->jobs);
    self->conf.now_ms = host->now_ms;
    self->conf.name = "qdrant";
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = sg_remote_conf_read(&c, config_json, config_len, qd_config, SG_CFG_N(qd_config), base_dir, self, &self->conf);
    if (root == NULL || setup_requests(self, &c, root) != 0)
        goto fail;
    char e5err[512];
    if (sg_e5_load(self->model_dir, &self->model, e5err, sizeof(e5err)) != 0) {
        snprintf(err, err_size, "config.model: cannot load the e5 encoder from %s: %s", self->model_dir, e5err);
        goto fail;
    }
    self->dim = sg_e5_dim(self->model);
    if (self->check && check_collection(self, err, err_size) != 0)
        goto fail;
    make_identity(self);
    self->http = sg_http_new(&self->conf, err, err_size);
    if (self->http == NULL)
        goto fail;
    self->workers = calloc(self->n_workers, sizeof(*self->workers));
    if (self->workers == NULL)
        abort();
    for (size_t i = 0; i < self->n_workers; ++i)
        pthread_create(&self->workers[i], NULL, worker_main, self);
    host->log(SG_LOG_INFO, instance, "qdrant backend ready: %s collection %s, %d-d e5 encoder, %zu encoder thread(s)", self->base,
              self->collection, self->dim, self->n_workers);
    cJSON_Delete(root);
    *out = self;
    return SG_OK;
fail:
    cJSON_Delete(root);
    self->n_workers = 0;
    qd_destroy(self);
    return SG_EINVAL;
}

/* One call is one POST .../points/query/batch: the gateway counts the config's max_inflight, qps
 * and max_queue in calls (ABI 1.2). */
static void qd_limits(sg_backend *self, int op, sg_limits *out)
{
    (void)op; /* search only: no access() */
    sg_remote_limits(&self->conf, 1, self->retries, "qdrant", out);
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("qdrant", "1.0.0"),
    .create = qd_create,
    .destroy = qd_destroy,
    .search = qd_search,
    .cancel = qd_cancel,
    .health = qd_health,
    .stats = qd_stats,
    .identity = qd_identity,
    .access = NULL,
    .limits = qd_limits,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
