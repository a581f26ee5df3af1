/*
 * remote.c -- the plugin scaffolding shared by the remote backends (see remote.h): one copy of
 * the config opening, URL/header helpers, identity hash, retry policy and health state that
 * serper.c, qdrant.c and upstream.c used to carry each.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- create() helpers ---- */

cJSON *sg_remote_conf_read(sg_cfg_t *c, const char *json, size_t len, const sg_cfg_key_t *table, size_t n, const char *base_dir,
                           void *dst, sg_http_conf_t *conf)
{
    cJSON *root = sg_cfg_parse(c, json, len); /* strict: no duplicate key */
    if (root == NULL)
        return NULL;
    if (sg_cfg_read(c, root, table, n, base_dir, dst) != 0 || sg_http_conf_check(c, root, conf) != 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int sg_remote_url_ok(const char *url)
{
    return strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
}

char *sg_remote_concat(const char *a, const char *b, const char *c)
{
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *d = malloc(na + nb + nc + 1);
    if (d == NULL)
        abort();
    memcpy(d, a, na);
    memcpy(d + na, b, nb);
    memcpy(d + na + nb, c, nc + 1);
    return d;
}

char *sg_remote_header(const char *name, const char *value)
{
    return sg_remote_concat(name, ": ", value);
}

void sg_remote_secret_free(char *s)
{
    if (s != NULL)
        memset(s, 0, strlen(s));
    free(s);
}

uint64_t sg_remote_fnv(uint64_t h, const char *s)
{
    for (; s != NULL && *s != '\0'; ++s)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (h ^ 0xff) * 1099511628211ull;
}

/* ---- retry policy ---- */

int sg_remote_transient(const sg_http_resp_t *r)
{
    if (r->err == SG_HTTP_OK)
        return r->status == 429 || r->status >= 500;
    return r->err == SG_HTTP_ECONNECT || r->err == SG_HTTP_EPROTO || (r->err == SG_HTTP_ETIMEDOUT && !r->deadline);
}

uint64_t sg_remote_backoff_ms(uint32_t base_ms, uint32_t attempts, uint64_t limit_ms)
{
    uint64_t delay = base_ms;
    for (uint32_t a = 1; a < attempts && delay < limit_ms; ++a)
        delay *= 2;
    return delay;
}

uint64_t sg_remote_retry_after_ms(const sg_http_resp_t *r, uint64_t delay_ms)
{
    if (r->err == SG_HTTP_OK && r->retry_after_s > 0 && (uint64_t)r->retry_after_s * 1000 > delay_ms)
        return (uint64_t)r->retry_after_s * 1000;
    return delay_ms;
}

int sg_remote_in_time(uint64_t now_ms, uint64_t delay_ms, uint64_t deadline_ms)
{
    return deadline_ms == 0 || now_ms + delay_ms + 1 < deadline_ms;
}

/* ---- admission and the retry budget: the gateway's (ABI 1.2) ---- */

void sg_remote_limits(const sg_http_conf_t *conf, int per_call, uint32_t retries, const char *prefix, sg_limits *out)
{
    out->per_call = per_call ? 1 : 0;
    out->max_inflight = conf->max_inflight;
    out->max_queue = conf->max_queue;
    out->qps = conf->qps;
    out->burst = conf->burst;
    out->retries = (int32_t)retries;
    out->metric_prefix = prefix;
}

uint32_t sg_remote_call_retries(const sg_search *s, uint32_t own_retries)
{
    uint32_t attempts = SG_SEARCH_MAX_ATTEMPTS(s, own_retries + 1);
    return attempts > 0 ? attempts - 1 : 0;
}

void *sg_remote_call_admission(const sg_search *s)
{
    return s->struct_size >= offsetof(sg_search, admission) + sizeof(void *) ? s->admission : NULL;
}

uint64_t sg_remote_retry_at(const sg_host_api *host, void *admission, uint64_t earliest_ms)
{
    if (admission == NULL || !SG_HOST_HAS_RETRY_AT(host))
        return earliest_ms;
    uint64_t at = host->retry_at(admission, earliest_ms);
    return at > earliest_ms ? at : earliest_ms;
}

/* ---- outcomes ---- */

int sg_remote_job_finish_docs(sg_http_job_t *j, sg_remote_outcomes_t *o, const sg_http_docs_t *lists, size_t n)
{
    if (!sg_http_job_finish_docs(j, lists, n))
        return 0;
    atomic_fetch_add(&o->ok, 1);
    return 1;
}

int sg_remote_job_fail(sg_http_job_t *j, sg_remote_outcomes_t *o, sg_status st, uint32_t retry_after_s, const char *detail)
{
    if (!sg_http_job_fail(j, st, retry_after_s, "%s", detail))
        return 0;
    atomic_fetch_add(st == SG_ECANCELED ? &o->canceled : &o->failed, 1);
    return 1;
}

void sg_remote_outcomes_report(sg_remote_outcomes_t *o, const sg_host_api *host, void *sink, const char *name, const char *help)
{
    host->metric(sink, name, help, SG_METRIC_COUNTER, "outcome=\"ok\"", (double)atomic_load(&o->ok));
    host->metric(sink, name, help, SG_METRIC_COUNTER, "outcome=\"error\"", (double)atomic_load(&o->failed));
    host->metric(sink, name, help, SG_METRIC_COUNTER, "outcome=\"canceled\"", (double)atomic_load(&o->canceled));
}

/* ---- health ---- */

void sg_remote_health_init(sg_remote_health_t *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
    h->status = SG_OK;
}

void sg_remote_health_dispose(sg_remote_health_t *h)
{
    pthread_mutex_destroy(&h->mu);
}

void sg_remote_health_note(sg_remote_health_t *h, sg_status st, int at_once, const char *detail)
{
    pthread_mutex_lock(&h->mu);
    if (st == SG_OK) {
        h->consecutive_failures = 0;
        h->status = SG_OK;
        h->detail[0] = '\0';
    } else if (++h->consecutive_failures >= 3 || at_once) {
        h->status = st;
        snprintf(h->detail, sizeof(h->detail), "%s", detail);
    }
    pthread_mutex_unlock(&h->mu);
}

sg_status sg_remote_health_get(sg_remote_health_t *h, char *detail, size_t detail_size)
{
    pthread_mutex_lock(&h->mu);
    sg_status st = h->status;
    if (st != SG_OK)
        snprintf(detail, detail_size, "%s", h->detail);
    pthread_mutex_unlock(&h->mu);
    return st;
}
