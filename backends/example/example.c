/*
 * example.c -- the example backend: a complete, small plugin that answers from documents in its
 * own config. It is the model for plugin authors (docs/plugins.md walks through it) and the
 * workhorse of the gateway's tests, so its behaviour is scriptable from the config:
 *
 *   "documents":  [ {"id": "0", "contents": "\"Title\"\nText"}, ... ]   (required, non-empty)
 *   "delay_ms":   answer after this long (default 0)
 *   "delay_per_query_ms": plus this much per query of the call, like a real encoder (default 0)
 *   "hang":       never answer until cancelled or destroyed (default false)
 *   "error":      {"status": "unavailable"|"timeout"|"upstream"|"internal"|"invalid"|"overload",
 *                  "message": "..."} -- fail every search with that status
 *   "workers":    worker threads (default 1)
 *   "max_pending": searches queued before search() returns SG_EOVERLOAD (default 10000)
 *   "directives": when true, a query may start with "@delay=MS ", "@hang " or "@error=STATUS "
 *                 to script one request (default false)
 *   "pages":      [ {"url": "...", "contents": "..."} ] for POST /access (optional; without it the
 *                 backend does not serve /access: has_access() says so and the gateway answers 404)
 *
 * Scoring: the share of the query's distinct words found in the document (lower-cased ASCII
 * words), ties broken by document order; every search returns min(topk, documents) hits.
 */
#include "sg_backend.h"
#include "cfg.h"

#include <cJSON.h>
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct st_doc_t {
    char *json; /* the document as spliced into responses (with "url" added when missing) */
    size_t json_len;
    char *text; /* lower-cased contents for scoring */
} doc_t;

typedef struct st_job_t {
    struct st_job_t *next;
    const sg_search *search;
    sg_done_fn done;
    void *cb_data;
    uint64_t due_ms; /* UINT64_MAX = hang */
    sg_status fail;  /* SG_OK, or the status to fail with */
    char fail_msg[128];
    int is_access;
} job_t;

struct sg_backend {
    const sg_host_api *host;
    char *name;
    doc_t *docs;
    size_t n_docs;
    doc_t *pages;
    size_t n_pages;
    uint32_t delay_ms, delay_per_query_ms;
    int hang, directives;
    sg_status error;
    char *error_msg;
    size_t max_pending;
    char identity[64];
    /* queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *jobs; /* unsorted; workers pick the earliest due */
    size_t n_jobs;
    int stopping;
    pthread_t *workers;
    size_t n_workers;
    /* stats */
    _Atomic uint64_t calls, queries, cancels;
};

static char *lower_dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d == NULL)
        abort();
    for (size_t i = 0; i <= n; ++i)
        d[i] = (char)tolower((unsigned char)s[i]);
    return d;
}

static int load_docs(const cJSON *arr, const char *key, doc_t **out, size_t *n_out, int need_contents, sg_cfg_t *c)
{
    if (!cJSON_IsArray(arr))
        return sg_cfg_fail(c, key, arr, "expected an array of JSON objects");
    size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
    doc_t *docs = calloc(n != 0 ? n : 1, sizeof(*docs));
    *out = docs;
    *n_out = 0;
    for (const cJSON *it = arr->child; it != NULL; it = it->next, ++i) {
        const cJSON *contents = cJSON_GetObjectItemCaseSensitive(it, "contents");
        if (!cJSON_IsObject(it) || (need_contents && !cJSON_IsString(contents))) {
            char k[64];
            snprintf(k, sizeof(k), "%s[%zu]", key, i);
            return sg_cfg_fail(c, k, it, "expected an object with a string \"contents\"");
        }
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(copy, "url")))
            cJSON_AddStringToObject(copy, "url", "");
        docs[i].json = cJSON_PrintUnformatted(copy);
        docs[i].json_len = strlen(docs[i].json);
        cJSON_Delete(copy);
        docs[i].text = lower_dup(cJSON_IsString(contents) ? contents->valuestring : "");
        *n_out = i + 1;
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static sg_status status_of(const char *s)
{
    static const struct {
        const char *name;
        sg_status st;
    } map[] = {{"unavailable", SG_EUNAVAIL}, {"timeout", SG_ETIMEDOUT},  {"upstream", SG_EUPSTREAM}, {"internal", SG_EINTERNAL},
               {"invalid", SG_EINVAL},       {"overload", SG_EOVERLOAD}, {"too_big", SG_ETOOBIG}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i)
        if (strcmp(s, map[i].name) == 0)
            return map[i].st;
    return SG_OK;
}

/* ---- scoring ---- */

typedef struct st_scored_t {
    double score;
    size_t idx;
} scored_t;

static int cmp_scored(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Is `w` (length n, lower-case) a whole word of `text`? */
static int has_word(const char *text, const char *w, size_t n)
{
    for (const char *p = text; (p = strstr(p, w)) != NULL; ++p) {
        int left = p == text || !isalnum((unsigned char)p[-1]);
        int right = !isalnum((unsigned char)p[n]);
        if (left && right)
            return 1;
    }
    return 0;
}

static double score_doc(const char *q, size_t qlen, const char *text)
{
    char word[128];
    size_t words = 0, found = 0;
    size_t i = 0;
    while (i < qlen) {
        while (i < qlen && !isalnum((unsigned char)q[i]))
            ++i;
        size_t n = 0;
        while (i < qlen && isalnum((unsigned char)q[i])) {
            if (n + 1 < sizeof(word))
                word[n++] = (char)tolower((unsigned char)q[i]);
            ++i;
        }
        if (n == 0)
            continue;
        word[n] = '\0';
        ++words;
        if (has_word(text, word, n))
            ++found;
    }
    return words == 0 ? 0.0 : (double)found / (double)words;
}

/* Runs one job on a worker thread and completes it. */
static void run_job(sg_backend *self, job_t *j)
{
    const sg_search *s = j->search;
    if (j->fail != SG_OK) {
        sg_result res = {j->fail, j->fail_msg, NULL, 0, j->fail == SG_EOVERLOAD ? 2 : 0};
        j->done(j->cb_data, &res);
        return;
    }
    sg_hits *per = calloc(s->n_queries, sizeof(*per));
    sg_hit *hits = calloc(s->n_queries * (size_t)(j->is_access ? 1 : s->topk) + 1, sizeof(*hits));
    scored_t *sc = calloc(self->n_docs + 1, sizeof(*sc));
    if (per == NULL || hits == NULL || sc == NULL)
        abort();
    sg_hit *h = hits;
    for (size_t q = 0; q < s->n_queries; ++q) {
        per[q].hits = h;
        if (j->is_access) {
            for (size_t p = 0; p < self->n_pages; ++p) {
                cJSON *page = cJSON_ParseWithLength(self->pages[p].json, self->pages[p].json_len);
                const cJSON *url = cJSON_GetObjectItemCaseSensitive(page, "url");
                int match = cJSON_IsString(url) && strlen(url->valuestring) == s->queries[q].len &&
                            memcmp(url->valuestring, s->queries[q].text, s->queries[q].len) == 0;
                cJSON_Delete(page);
                if (match) {
                    h->doc = self->pages[p].json;
                    h->doc_len = self->pages[p].json_len;
                    h->score = 1.0;
                    ++h;
                    per[q].n_hits = 1;
                    break;
                }
            }
            continue;
        }
        for (size_t d = 0; d < self->n_docs; ++d) {
            sc[d].score = score_doc(s->queries[q].text, s->queries[q].len, self->docs[d].text);
            sc[d].idx = d;
        }
        qsort(sc, self->n_docs, sizeof(*sc), cmp_scored);
        size_t k = s->topk < self->n_docs ? s->topk : self->n_docs;
        for (size_t i = 0; i < k; ++i, ++h) {
            h->doc = self->docs[sc[i].idx].json;
            h->doc_len = self->docs[sc[i].idx].json_len;
            h->score = sc[i].score;
        }
        per[q].n_hits = k;
    }
    sg_result res = {SG_OK, NULL, per, s->n_queries, 0};
    j->done(j->cb_data, &res);
    free(sc);
    free(hits);
    free(per);
}

static void *worker_main(void *arg)
{
    sg_backend *self = arg;
    pthread_mutex_lock(&self->mu);
    for (;;) {
        job_t **best = NULL;
        for (job_t **p = &self->jobs; *p != NULL; p = &(*p)->next)
            if (best == NULL || (*p)->due_ms < (*best)->due_ms)
                best = p;
        if (self->stopping && best == NULL)
            break;
        uint64_t now = now_ms();
        if (best == NULL || (*best)->due_ms > now) {
            if (best == NULL || (*best)->due_ms == UINT64_MAX) {
                pthread_cond_wait(&self->cv, &self->mu);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                uint64_t wait = (*best)->due_ms - now;
                ts.tv_sec += (time_t)(wait / 1000);
                ts.tv_nsec += (long)(wait % 1000) * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec += 1;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&self->cv, &self->mu, &ts);
            }
            continue;
        }
        job_t *j = *best;
        *best = j->next;
        --self->n_jobs;
        pthread_mutex_unlock(&self->mu);
        run_job(self, j); /* no lock held while calling back into the host */
        free(j);
        pthread_mutex_lock(&self->mu);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

static sg_status enqueue(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data, int is_access)
{
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    j->search = s;
    j->done = done;
    j->cb_data = cb_data;
    j->is_access = is_access;
    uint64_t delay = self->delay_ms + (uint64_t)self->delay_per_query_ms * s->n_queries;
    int hang = self->hang;
    j->fail = self->error;
    if (self->error_msg != NULL)
        snprintf(j->fail_msg, sizeof(j->fail_msg), "%s", self->error_msg);
    if (self->directives && s->n_queries > 0) {
        /* a directive on the first query scripts the whole call */
        const char *t = s->queries[0].text;
        size_t n = s->queries[0].len;
        char tmp[64];
        size_t m = n < sizeof(tmp) - 1 ? n : sizeof(tmp) - 1;
        memcpy(tmp, t, m);
        tmp[m] = '\0';
        if (strncmp(tmp, "@delay=", 7) == 0)
            delay = strtoull(tmp + 7, NULL, 10);
        else if (strncmp(tmp, "@hang", 5) == 0)
            hang = 1;
        else if (strncmp(tmp, "@error=", 7) == 0) {
            char st[32];
            size_t k = 0;
            for (const char *p = tmp + 7; *p != '\0' && *p != ' ' && k + 1 < sizeof(st); ++p)
                st[k++] = *p;
            st[k] = '\0';
            j->fail = status_of(st);
            if (j->fail == SG_OK)
                j->fail = SG_EINTERNAL;
            snprintf(j->fail_msg, sizeof(j->fail_msg), "scripted failure: %s", st);
        }
    }
    j->due_ms = hang ? UINT64_MAX : now_ms() + delay;
    size_t n_queries = s->n_queries; /* once the job is queued a worker may complete it, and `s` goes */
    pthread_mutex_lock(&self->mu);
    if (self->n_jobs >= self->max_pending || self->stopping) {
        pthread_mutex_unlock(&self->mu);
        free(j);
        return SG_EOVERLOAD;
    }
    j->next = self->jobs;
    self->jobs = j;
    ++self->n_jobs;
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    atomic_fetch_add(&self->calls, 1);
    atomic_fetch_add(&self->queries, n_queries);
    return SG_OK;
}

static sg_status ex_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 0);
}

static sg_status ex_access(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 1);
}

static void ex_cancel(sg_backend *self, void *cb_data)
{
    pthread_mutex_lock(&self->mu);
    for (job_t *j = self->jobs; j != NULL; j = j->next) {
        if (j->cb_data == cb_data) {
            j->due_ms = 0; /* run now, as a cancellation */
            j->fail = SG_ECANCELED;
            snprintf(j->fail_msg, sizeof(j->fail_msg), "cancelled");
            atomic_fetch_add(&self->cancels, 1);
            pthread_cond_broadcast(&self->cv);
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
}

static sg_status ex_health(sg_backend *self, char *detail, size_t n)
{
    if (self->error != SG_OK) {
        snprintf(detail, n, "configured to fail: %s", self->error_msg != NULL ? self->error_msg : "error");
        return self->error;
    }
    return SG_OK;
}

static void ex_stats(sg_backend *self, void *sink)
{
    self->host->metric(sink, "example_calls_total", "search() calls received by the example plugin.", SG_METRIC_COUNTER, NULL,
                       (double)atomic_load(&self->calls));
    self->host->metric(sink, "example_queries_total", "Queries received by the example plugin.", SG_METRIC_COUNTER, NULL,
                       (double)atomic_load(&self->queries));
    self->host->metric(sink, "example_cancels_total", "Searches cancelled by the gateway.", SG_METRIC_COUNTER, NULL,
                       (double)atomic_load(&self->cancels));
    pthread_mutex_lock(&self->mu);
    double pending = (double)self->n_jobs;
    pthread_mutex_unlock(&self->mu);
    self->host->metric(sink, "example_pending", "Searches queued or hanging in the example plugin.", SG_METRIC_GAUGE, NULL,
                       pending);
}

static const char *ex_identity(sg_backend *self)
{
    return self->identity;
}

static void free_docs(doc_t *docs, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        free(docs[i].json);
        free(docs[i].text);
    }
    free(docs);
}

static void ex_destroy(sg_backend *self)
{
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    /* pending searches complete with SG_ECANCELED */
    for (job_t *j = self->jobs; j != NULL; j = j->next) {
        j->due_ms = 0;
        j->fail = SG_ECANCELED;
        snprintf(j->fail_msg, sizeof(j->fail_msg), "backend shutting down");
    }
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    for (size_t i = 0; i < self->n_workers; ++i)
        pthread_join(self->workers[i], NULL);
    free(self->workers);
    free_docs(self->docs, self->n_docs);
    free_docs(self->pages, self->n_pages);
    free(self->error_msg);
    free(self->name);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    free(self);
}

/* The config keys (docs/plugins.md, "The example plugin"), in the order an unknown key's error lists
 * them. */
static const sg_cfg_key_t example_config[] = {
    SG_CFG_CUSTOM_KEY("documents"),
    SG_CFG_INT(sg_backend, delay_ms, "delay_ms", 0, 3600000, 0),
    SG_CFG_INT(sg_backend, delay_per_query_ms, "delay_per_query_ms", 0, 60000, 0),
    SG_CFG_BOOL(sg_backend, hang, "hang", 0),
    SG_CFG_CUSTOM_KEY("error"),
    SG_CFG_INT(sg_backend, n_workers, "workers", 1, 64, 1),
    SG_CFG_INT(sg_backend, max_pending, "max_pending", 1, 10000000, 10000),
    SG_CFG_BOOL(sg_backend, directives, "directives", 0),
    SG_CFG_CUSTOM_KEY("pages"),
};

static sg_status ex_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                           size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    static const char *const ekeys[] = {"status", "message", NULL};
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = sg_cfg_parse(&c, config_json, config_len); /* strict: no duplicate key */
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL)
        return SG_ENOMEM;
    self->host = host;
    self->name = strdup(instance);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    sg_status st = SG_EINVAL;
    if (root == NULL) /* sg_cfg_parse() said why */
        goto fail;
    /* every key is checked and the plain ones read here; documents, pages and error below */
    if (sg_cfg_read(&c, root, example_config, sizeof(example_config) / sizeof(example_config[0]), base_dir, self) != 0)
        goto fail;
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(root, "documents");
    if (docs == NULL) {
        sg_cfg_fail(&c, "documents", NULL, "required key is missing");
        goto fail;
    }
    if (load_docs(docs, "documents", &self->docs, &self->n_docs, 1, &c) != 0)
        goto fail;
    if (self->n_docs == 0) {
        sg_cfg_fail(&c, "documents", docs, "needs at least one document");
        goto fail;
    }
    const cJSON *pages = cJSON_GetObjectItemCaseSensitive(root, "pages");
    if (pages != NULL && load_docs(pages, "pages", &self->pages, &self->n_pages, 0, &c) != 0)
        goto fail;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (e != NULL && !cJSON_IsNull(e)) {
        sg_cfg_t ce = {"config.error", err, err_size};
        char *status = NULL;
        if (sg_cfg_check_keys(&ce, e, ekeys) != 0 || sg_cfg_string(&ce, e, "status", 1, NULL, &status) != 0)
            goto fail;
        self->error = status_of(status);
        free(status);
        if (self->error == SG_OK) {
            sg_cfg_fail(&ce, "status", cJSON_GetObjectItem(e, "status"),
                        "expected unavailable, timeout, upstream, internal, invalid, overload or too_big");
            goto fail;
        }
        if (sg_cfg_string(&ce, e, "message", 0, "configured failure", &self->error_msg) != 0)
            goto fail;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the config: any change is a new cache identity */
    for (size_t i = 0; i < config_len; ++i)
        h = (h ^ (unsigned char)config_json[i]) * 1099511628211ull;
    snprintf(self->identity, sizeof(self->identity), "docs=%zu,cfg=%016llx", self->n_docs, (unsigned long long)h);
    self->workers = calloc(self->n_workers, sizeof(*self->workers));
    for (size_t i = 0; i < self->n_workers; ++i)
        pthread_create(&self->workers[i], NULL, worker_main, self);
    cJSON_Delete(root);
    host->log(SG_LOG_INFO, instance, "example backend ready: %zu documents, %zu pages, %zu workers", self->n_docs, self->n_pages,
              self->n_workers);
    *out = self;
    return SG_OK;
fail:
    cJSON_Delete(root);
    self->n_workers = 0;
    ex_destroy(self);
    return st;
}

static int ex_has_access(sg_backend *self)
{
    return self->pages != NULL;
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("example", "1.0.0"),
    .create = ex_create,
    .destroy = ex_destroy,
    .search = ex_search,
    .cancel = ex_cancel,
    .health = ex_health,
    .stats = ex_stats,
    .identity = ex_identity,
    .access = ex_access,
    .has_access = ex_has_access,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
