/*
 * upstream.c -- the "upstream" backend: forwards /retrieve (and /access) to one or more
 * Search-R1-compatible servers a lab already runs (the Python retrieval_server.py and its
 * copies, docs/protocols.md, "The `/retrieve` contract"), so the gateway can put its cache, singleflight, limits and metrics in
 * front of them.
 *
 * One search() = one POST {server}{path} with {"queries": [...], "topk": k, "return_scores":
 * true} -- always true upstream, because the SR1/VERL server crashes on false (docs/protocols.md, "Server quirks the clients
 * adapted to") and the gateway needs the scores to serve both shapes itself; items of either shape are accepted back
 * (upstream_parse.c). Servers are chosen round robin or least-in-flight among the healthy ones; a connection failure marks a server
 * down until an active health probe (or, without probes, `revive_ms`) brings it back; a failed attempt is retried on another
 * server.
 */
#include "sg_backend.h"
#include "cfg.h"
#include "http.h"
#include "remote.h"
#include "upstream_parse.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BAL_LEAST_INFLIGHT, BAL_ROUND_ROBIN };

typedef struct st_server_t {
    char *base, *url, *access_url, *health_url;
    atomic_int up;
    atomic_uint inflight;
    atomic_uint_fast64_t down_since_ms, requests, failures;
    struct sg_backend *self;
} server_t;

typedef struct st_job_t {
    sg_http_job_t base;
    struct sg_backend *self;
    int is_access;
    uint64_t deadline_ms;
    uint64_t start_by_ms;             /* no new attempt starts after it (sg_search.start_by_ms) */
    uint32_t topk, attempts, retries; /* retries: the gateway's budget for this call */
    void *admission;                  /* the call's, for retry_at() (sg_remote_retry_at) */
    size_t n;
    char *body;
    size_t body_len;
    server_t *server; /* of the running attempt */
    unsigned char *tried;
    char request_id[40];
} job_t;

struct sg_backend {
    const sg_host_api *host;
    char *name;
    server_t *servers;
    size_t n_servers;
    char *path, *access_path, *health_method, *health_body;
    char *health_path, *data_version; /* config, for create() */
    int balance, add_url, send_scores, method;
    uint32_t retries, backoff_ms, health_interval_ms, health_timeout_ms, revive_ms;
    sg_http_conf_t conf;
    sg_http_t *http;
    sg_http_jobs_t jobs;
    atomic_uint rr;
    char identity[64];
    pthread_mutex_t err_mu;
    char last_error[256];
    atomic_uint_fast64_t searches, queries, retries_done;
    sg_remote_outcomes_t outcomes;
};

static const char *const json_headers[] = {"Content-Type: application/json", "Accept: application/json", NULL};

static void note_error(sg_backend *self, const char *msg)
{
    pthread_mutex_lock(&self->err_mu);
    size_t n = strlen(msg);
    if (n >= sizeof(self->last_error))
        n = sizeof(self->last_error) - 1;
    memcpy(self->last_error, msg, n);
    self->last_error[n] = '\0';
    pthread_mutex_unlock(&self->err_mu);
}

static int server_usable(sg_backend *self, server_t *s, uint64_t now)
{
    if (atomic_load(&s->up))
        return 1;
    /* without active probes a down server gets another chance after revive_ms */
    return self->health_interval_ms == 0 && now >= atomic_load(&s->down_since_ms) + self->revive_ms;
}

static void mark(server_t *s, int up, uint64_t now)
{
    if (!up)
        atomic_store(&s->down_since_ms, now); /* restarts the revive_ms wait */
    atomic_store(&s->up, up);
}

/* Picks the next server for a job: healthy and untried first, then untried, then anything. */
static server_t *pick(sg_backend *self, const unsigned char *tried, uint64_t now)
{
    size_t n = self->n_servers;
    unsigned start = atomic_fetch_add(&self->rr, 1);
    for (int pass = 0; pass < 3; ++pass) {
        server_t *best = NULL;
        for (size_t k = 0; k < n; ++k) {
            server_t *s = &self->servers[(start + k) % n];
            size_t idx = (size_t)(s - self->servers);
            if (pass == 0 && (!server_usable(self, s, now) || (tried != NULL && tried[idx])))
                continue;
            if (pass == 1 && tried != NULL && tried[idx])
                continue;
            if (self->balance == BAL_ROUND_ROBIN)
                return s;
            if (best == NULL || atomic_load(&s->inflight) < atomic_load(&best->inflight))
                best = s;
        }
        if (best != NULL)
            return best;
    }
    return &self->servers[start % n];
}

static void job_free(job_t *j)
{
    free(j->body);
    free(j->tried);
    free(j);
}

static void on_response(void *ud, const sg_http_resp_t *r);

static int submit_attempt(job_t *j, server_t *s, uint64_t not_before)
{
    sg_backend *self = j->self;
    sg_http_req_t req = {.method = "POST",
                         .url = j->is_access ? s->access_url : s->url,
                         .headers = json_headers,
                         .body = j->body,
                         .body_len = j->body_len,
                         .deadline_ms = j->deadline_ms,
                         .start_by_ms = j->start_by_ms,
                         .not_before_ms = not_before,
                         .tag = j->base.tag,
                         .cb = on_response,
                         .ud = j};
    j->server = s;
    j->tried[s - self->servers] = 1;
    ++j->attempts;
    atomic_fetch_add(&s->inflight, 1);
    atomic_fetch_add(&s->requests, 1);
    if (sg_http_submit_copy(self->http, &req) != 0) {
        atomic_fetch_sub(&s->inflight, 1);
        return -1;
    }
    return 0;
}

static void on_response(void *ud, const sg_http_resp_t *r)
{
    job_t *j = ud;
    sg_backend *self = j->self;
    server_t *s = j->server;
    uint64_t now = sg_http_now_ms(self->http);
    atomic_fetch_sub(&s->inflight, 1);
    char msg[600], err[160];
    if (r->err == SG_HTTP_ECANCELED) {
        sg_remote_job_fail(&j->base, &self->outcomes, SG_ECANCELED, 0, r->message);
        goto out;
    }
    if (r->err == SG_HTTP_OK)
        mark(s, 1, now);
    else if (r->err == SG_HTTP_ECONNECT || r->err == SG_HTTP_EPROTO || r->err == SG_HTTP_ETLS)
        mark(s, 0, now);
    if (r->err == SG_HTTP_OK && r->status == 200) {
        sg_up_list_t *lists = calloc(j->n, sizeof(*lists));
        if (lists == NULL)
            abort();
        int rc = j->is_access
                     ? sg_upstream_parse_access(r->body, r->body_len, j->n, lists, err, sizeof(err))
                     : sg_upstream_parse_reply(r->body, r->body_len, j->n, j->topk, self->add_url, lists, err, sizeof(err));
        if (rc == 0) {
            sg_remote_job_finish_docs(&j->base, &self->outcomes, lists, j->n);
        } else {
            char excerpt[96];
            sg_http_excerpt(r->body, r->body_len, NULL, excerpt, sizeof(excerpt), 80);
            snprintf(msg, sizeof(msg), "upstream %s returned an unusable reply: %s (body starts: %s)", s->base, err, excerpt);
            atomic_fetch_add(&s->failures, 1);
            note_error(self, msg);
            sg_remote_job_fail(&j->base, &self->outcomes, SG_EUPSTREAM, 0, msg);
        }
        sg_upstream_lists_free(lists, j->n);
        free(lists);
        goto out;
    }
    atomic_fetch_add(&s->failures, 1);
    if (sg_remote_transient(r) && j->attempts <= j->retries && !atomic_load(&j->base.canceled)) {
        server_t *next = pick(self, j->tried, now);
        uint64_t delay = 0;
        if (next == s) /* nowhere else to go: back off before asking the same server again */
            delay = sg_remote_retry_after_ms(r, sg_remote_backoff_ms(self->backoff_ms, j->attempts, 60000));
        if (sg_remote_in_time(now, delay, j->deadline_ms)) {
            int ok = 0;
            pthread_mutex_lock(&self->jobs.mu); /* ordered with cancel(), see http.h */
            if (!atomic_load(&j->base.canceled))
                ok = submit_attempt(j, next, sg_remote_retry_at(self->host, j->admission, now + delay)) == 0;
            pthread_mutex_unlock(&self->jobs.mu);
            if (ok) {
                atomic_fetch_add(&self->retries_done, 1);
                return;
            }
        }
    }
    /* final failure */
    sg_status st;
    uint32_t retry_after = 0;
    const char *tries = j->attempts > 1 ? " (after retries)" : "";
    if (r->err != SG_HTTP_OK) {
        st = sg_http_err_status(r->err);
        if (r->err == SG_HTTP_ECONNECT)
            snprintf(msg, sizeof(msg), "cannot reach upstream %s%s: %s", s->base, tries, r->message);
        else if (r->err == SG_HTTP_ETIMEDOUT)
            snprintf(msg, sizeof(msg), "upstream %s did not answer in time%s: %s", s->base, tries, r->message);
        else
            snprintf(msg, sizeof(msg), "upstream %s failed%s: %s", s->base, tries, r->message);
    } else {
        sg_upstream_error_message(r->body, r->body_len, err, sizeof(err));
        if (r->status == 429 || r->status == 503) {
            st = SG_EOVERLOAD;
            retry_after = r->retry_after_s > 0 ? (uint32_t)r->retry_after_s : 1;
        } else if (r->status == 504) {
            st = SG_ETIMEDOUT;
        } else {
            st = SG_EUPSTREAM;
        }
        snprintf(msg, sizeof(msg), "upstream %s answered HTTP %ld%s: %s", s->base, r->status, tries, err);
    }
    note_error(self, msg);
    self->host->log(SG_LOG_WARN, self->name, "%s: %s", j->request_id, msg);
    sg_remote_job_fail(&j->base, &self->outcomes, st, retry_after, msg);
out:
    sg_http_jobs_remove(&self->jobs, &j->base);
    job_free(j);
}

static sg_status start(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data, int is_access)
{
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    j->self = self;
    j->is_access = is_access;
    j->deadline_ms = s->deadline_ms;
    j->start_by_ms = SG_SEARCH_START_BY(s);
    j->retries = sg_remote_call_retries(s, self->retries);
    j->admission = sg_remote_call_admission(s);
    j->topk = s->topk;
    j->n = s->n_queries;
    j->tried = calloc(self->n_servers, 1);
    if (j->tried == NULL)
        abort();
    snprintf(j->request_id, sizeof(j->request_id), "%s", s->request_id != NULL ? s->request_id : "-");
    sg_buf_t b = {0};
    sg_buf_appends(&b, is_access ? "{\"urls\":[" : "{\"queries\":[");
    for (size_t i = 0; i < s->n_queries; ++i) {
        if (i != 0)
            sg_buf_append(&b, ",", 1);
        sg_buf_append_json_string(&b, s->queries[i].text, s->queries[i].len);
    }
    if (is_access)
        sg_buf_appends(&b, "]}");
    else
        sg_buf_appendf(&b, "],\"topk\":%u,\"return_scores\":%s}", s->topk, self->send_scores ? "true" : "false");
    j->body = b.base;
    j->body_len = b.len;
    size_t n = j->n;
    pthread_mutex_lock(&self->jobs.mu);
    sg_http_jobs_add_locked(&self->jobs, &j->base, done, cb_data);
    int rc = submit_attempt(j, pick(self, NULL, self->host->now_ms()), 0);
    pthread_mutex_unlock(&self->jobs.mu);
    if (rc != 0) {
        sg_http_jobs_remove(&self->jobs, &j->base);
        sg_http_job_fail(&j->base, SG_EOVERLOAD, 1, "upstream: too many requests waiting (max_queue)");
        job_free(j);
        return SG_OK;
    }
    atomic_fetch_add(&self->searches, 1);
    atomic_fetch_add(&self->queries, n);
    return SG_OK;
}

static sg_status up_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return start(self, s, done, cb_data, 0);
}

static sg_status up_access(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    if (self->access_path == NULL) /* not reached through the gateway: has_access() is 0 */
        return SG_EINVAL;
    return start(self, s, done, cb_data, 1);
}

/* "access_path": null turns POST /access off on the route: saying so here is what makes the
 * gateway answer 404 not_found, show "access": false in GET / and leave the route out of a fusion
 * route's access legs and the MCP access tools, as for a plugin without access(). */
static int up_has_access(sg_backend *self)
{
    return self->access_path != NULL;
}

static void up_cancel(sg_backend *self, void *cb_data)
{
    sg_http_jobs_cancel(&self->jobs, self->http, cb_data);
}

/* ---- active health checks: a probe per server, rescheduled from its own completion ---- */

static void on_probe(void *ud, const sg_http_resp_t *r);

static void probe(server_t *s, uint64_t not_before)
{
    sg_backend *self = s->self;
    int post = strcmp(self->health_method, "POST") == 0;
    char *body = post ? strdup(self->health_body) : NULL;
    if (post && body == NULL)
        abort();
    sg_http_req_t req = {.method = self->health_method,
                         .url = s->health_url,
                         .headers = json_headers,
                         .body = body,
                         .body_len = body != NULL ? strlen(body) : 0,
                         .timeout_ms = self->health_timeout_ms,
                         .not_before_ms = not_before,
                         .cb = on_probe,
                         .ud = s};
    if (sg_http_submit(self->http, &req, 1, NULL) != 0)
        free(body); /* shutting down */
}

static void on_probe(void *ud, const sg_http_resp_t *r)
{
    server_t *s = ud;
    sg_backend *self = s->self;
    if (r->err == SG_HTTP_ECANCELED)
        return; /* shutdown */
    uint64_t now = sg_http_now_ms(self->http);
    int ok = r->err == SG_HTTP_OK && r->status >= 200 && r->status < 300;
    int was_up = atomic_load(&s->up);
    mark(s, ok, now);
    if (ok != was_up) {
        char msg[300];
        if (ok)
            snprintf(msg, sizeof(msg), "upstream %s is up again", s->base);
        else if (r->err != SG_HTTP_OK)
            snprintf(msg, sizeof(msg), "upstream %s failed its health check: %s", s->base, r->message);
        else
            snprintf(msg, sizeof(msg), "upstream %s failed its health check: HTTP %ld", s->base, r->status);
        self->host->log(ok ? SG_LOG_INFO : SG_LOG_WARN, self->name, "%s", msg);
        if (!ok)
            note_error(self, msg);
    }
    probe(s, now + self->health_interval_ms);
}

static sg_status up_health(sg_backend *self, char *detail, size_t n)
{
    uint64_t now = self->host->now_ms();
    size_t up = 0;
    for (size_t i = 0; i < self->n_servers; ++i)
        if (server_usable(self, &self->servers[i], now))
            ++up;
    if (up > 0)
        return SG_OK;
    pthread_mutex_lock(&self->err_mu);
    snprintf(detail, n, "all %zu upstream servers are down; last error: %s", self->n_servers, self->last_error);
    pthread_mutex_unlock(&self->err_mu);
    return SG_EUNAVAIL;
}

static void label(char *out, size_t n, const char *base)
{
    size_t o = 0;
    o += (size_t)snprintf(out, n, "server=\"");
    for (const char *p = base; *p != '\0' && o + 3 < n; ++p) {
        if (*p == '"' || *p == '\\')
            out[o++] = '\\';
        out[o++] = *p;
    }
    if (o + 2 <= n) {
        out[o++] = '"';
        out[o] = '\0';
    } else {
        out[n - 1] = '\0';
    }
}

static void up_stats(sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
    h->metric(sink, "upstream_searches_total", "Calls forwarded to the upstream servers.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->searches));
    h->metric(sink, "upstream_queries_total", "Queries forwarded to the upstream servers.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->queries));
    h->metric(sink, "upstream_retries_total", "Attempts retried (on another server when there is one).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->retries_done));
    sg_remote_outcomes_report(&self->outcomes, h, sink, "upstream_results_total", "Completed upstream calls by outcome.");
    uint64_t now = h->now_ms();
    for (size_t i = 0; i < self->n_servers; ++i) {
        server_t *s = &self->servers[i];
        char l[300];
        label(l, sizeof(l), s->base);
        h->metric(sink, "upstream_server_up", "1 when the server is considered healthy.", SG_METRIC_GAUGE, l,
                  server_usable(self, s, now) ? 1.0 : 0.0);
        h->metric(sink, "upstream_server_inflight", "Requests running on the server.", SG_METRIC_GAUGE, l,
                  (double)atomic_load(&s->inflight));
        h->metric(sink, "upstream_server_requests_total", "Attempts sent to the server.", SG_METRIC_COUNTER, l,
                  (double)atomic_load(&s->requests));
        h->metric(sink, "upstream_server_failures_total", "Attempts that failed on the server.", SG_METRIC_COUNTER, l,
                  (double)atomic_load(&s->failures));
    }
    sg_http_report(self->http, h, sink, "upstream");
}

static const char *up_identity(sg_backend *self)
{
    return self->identity;
}

static void up_destroy(sg_backend *self)
{
    sg_http_free(self->http); /* completes every pending search with SG_ECANCELED */
    sg_http_jobs_dispose(&self->jobs);
    sg_http_conf_free(&self->conf);
    for (size_t i = 0; i < self->n_servers; ++i) {
        free(self->servers[i].base);
        free(self->servers[i].url);
        free(self->servers[i].access_url);
        free(self->servers[i].health_url);
    }
    free(self->servers);
    free(self->path);
    free(self->access_path);
    free(self->health_method);
    free(self->health_body);
    free(self->health_path);
    free(self->data_version);
    free(self->name);
    pthread_mutex_destroy(&self->err_mu);
    free(self);
}

static int read_path(sg_cfg_t *c, const cJSON *root, const char *key, const char *def, int nullable, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (nullable && v != NULL && cJSON_IsNull(v)) {
        *out = NULL;
        return 0;
    }
    if (sg_cfg_string(c, root, key, 0, def, out) != 0)
        return -1;
    if ((*out)[0] != '/')
        return sg_cfg_fail(c, key, v, "expected a path starting with '/'");
    return 0;
}

/* ---- the config (docs/backends/upstream.md; checked by tests/lint/test_config_docs.py) ---- */

static const char *const up_balances[] = {"least_inflight", "round_robin", NULL};
static const char *const up_methods[] = {"POST", "GET", NULL};

static const sg_cfg_key_t up_config[] = {
    SG_CFG_CUSTOM_KEY("servers"),
    SG_CFG_CUSTOM_KEY("path"),
    SG_CFG_CUSTOM_KEY("access_path"),
    SG_CFG_ENUM(sg_backend, balance, "balance", up_balances, BAL_LEAST_INFLIGHT),
    SG_CFG_BOOL(sg_backend, send_scores, "return_scores", 1),
    SG_CFG_BOOL(sg_backend, add_url, "add_url", 1),
    SG_REMOTE_RETRY_KEYS(sg_backend, retries, backoff_ms, 1, 100),
    SG_CFG_ENUM(sg_backend, method, "health_method", up_methods, 0),
    SG_CFG_CUSTOM_KEY("health_path"),
    SG_CFG_STRING(sg_backend, health_body, "health_body", 0, "{\"queries\":[],\"topk\":1,\"return_scores\":true}"),
    SG_CFG_INT(sg_backend, health_interval_ms, "health_interval_ms", 0, 3600000, 2000),
    SG_CFG_INT(sg_backend, health_timeout_ms, "health_timeout_ms", 1, 600000, 2000),
    SG_CFG_INT(sg_backend, revive_ms, "revive_ms", 0, 3600000, 5000),
    SG_CFG_STRING(sg_backend, data_version, "data_version", 0, ""),
    SG_HTTP_CONF_KEYS(sg_backend, conf, 2000, 60000, 67108864, 0, 0, 0, 100000, 0),
};

/* "servers": the URLs of each server, and the identity over them and the keys that shape results. */
static int read_servers(sg_backend *self, sg_cfg_t *c, const cJSON *root)
{
    const cJSON *servers = cJSON_GetObjectItemCaseSensitive(root, "servers");
    if (!cJSON_IsArray(servers) || cJSON_GetArraySize(servers) == 0 || cJSON_GetArraySize(servers) > 1024)
        return sg_cfg_fail(c, "servers", servers, "expected a non-empty array of base URLs such as \"http://10.0.0.5:8000\"");
    if (read_path(c, root, "path", "/retrieve", 0, &self->path) != 0 ||
        read_path(c, root, "access_path", "/access", 1, &self->access_path) != 0 ||
        read_path(c, root, "health_path", self->path, 0, &self->health_path) != 0)
        return -1;
    self->n_servers = (size_t)cJSON_GetArraySize(servers);
    self->servers = calloc(self->n_servers, sizeof(*self->servers));
    if (self->servers == NULL)
        abort();
    uint64_t h = SG_REMOTE_FNV_INIT;
    size_t i = 0;
    for (const cJSON *it = servers->child; it != NULL; it = it->next, ++i) {
        if (!cJSON_IsString(it) || !sg_remote_url_ok(it->valuestring)) {
            char k[32];
            snprintf(k, sizeof(k), "servers[%zu]", i);
            self->n_servers = i;
            return sg_cfg_fail(c, k, it, "expected an http:// or https:// base URL");
        }
        server_t *s = &self->servers[i];
        s->self = self;
        s->base = sg_http_trim_url(it->valuestring);
        s->url = sg_remote_concat(s->base, self->path, "");
        s->access_url = sg_remote_concat(s->base, self->access_path != NULL ? self->access_path : "/access", "");
        s->health_url = sg_remote_concat(s->base, self->health_path, "");
        atomic_init(&s->up, 1);
        h = sg_remote_fnv(h, s->url);
    }
    h = sg_remote_fnv(h, self->send_scores ? "s1" : "s0");
    h = sg_remote_fnv(h, self->add_url ? "u1" : "u0");
    h = sg_remote_fnv(h, self->data_version);
    snprintf(self->identity, sizeof(self->identity), "upstream:%016llx", (unsigned long long)h);
    return 0;
}

static sg_status up_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                           size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL)
        return SG_ENOMEM;
    self->host = host;
    self->name = strdup(instance);
    pthread_mutex_init(&self->err_mu, NULL);
    sg_http_jobs_init(&self->jobs);
    self->conf.now_ms = host->now_ms;
    self->conf.name = "upstream";
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = sg_remote_conf_read(&c, config_json, config_len, up_config, SG_CFG_N(up_config), base_dir, self, &self->conf);
    if (root == NULL || read_servers(self, &c, root) != 0)
        goto fail;
    self->health_method = strdup(up_methods[self->method]);
    self->http = sg_http_new(&self->conf, err, err_size);
    if (self->http == NULL)
        goto fail;
    if (self->health_interval_ms != 0)
        for (size_t k = 0; k < self->n_servers; ++k)
            probe(&self->servers[k], 0);
    host->log(SG_LOG_INFO, instance, "upstream backend ready: %zu server(s), first %s, %s, health probes every %u ms",
              self->n_servers, self->servers[0].url, self->balance == BAL_ROUND_ROBIN ? "round robin" : "least in flight",
              self->health_interval_ms);
    cJSON_Delete(root);
    *out = self;
    return SG_OK;
fail:
    cJSON_Delete(root);
    up_destroy(self);
    return SG_EINVAL;
}

/* One call (search or access) is one POST to one server: the gateway counts the config's
 * max_inflight, qps and max_queue in calls (ABI 1.2), for both operations together, as they go
 * to the same servers. Health probes are not calls: they are not counted. */
static void up_limits(sg_backend *self, int op, sg_limits *out)
{
    sg_remote_limits(&self->conf, 1, self->retries, "upstream", out);
    if (op == SG_OP_ACCESS)
        out->share_search = 1;
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("upstream", "1.0.0"),
    .create = up_create,
    .destroy = up_destroy,
    .search = up_search,
    .cancel = up_cancel,
    .health = up_health,
    .stats = up_stats,
    .identity = up_identity,
    .access = up_access,
    .has_access = up_has_access,
    .limits = up_limits,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
