/*
 * mock.c -- the mock backend (docs/backends/mock.md): answers every query from its text alone,
 * deterministically, with no corpus and no model, so a training framework's CI can test its search
 * tool end to end through the real gateway (its cache, limits, deadlines, provenance and traces
 * included).
 *
 * The made-up corpus: document n (0 <= n < corpus_size) of a seed always has the id "mock-<n>" and
 * the same title, text and url, whatever query finds it. A query's hits are consecutive documents
 * from a start that a hash of (seed, query text) picks, with scores that decrease with the rank; a
 * larger topk extends the same list. Nothing depends on time, thread or build: the same config
 * gives the same answers across restarts and machines (the hash is spelled out here, not borrowed).
 *
 * Optional behaviours for testing a client: a fixed number of hits, a share of queries with no
 * hits or with blank documents (both chosen by the text, so stable too), an answer delay with
 * jitter, and a share of calls failing with a chosen status (random per call).
 */
#include "sg_backend.h"
#include "buf.h"
#include "cfg.h"

#include <cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOCK_VERSION "1.0.0"

typedef struct st_job_t {
    struct st_job_t *next;
    const sg_search *search;
    sg_done_fn done;
    void *cb_data;
    uint64_t due_ms;
    sg_status fail; /* SG_OK, or the status to fail with */
    int is_access;
} job_t;

struct sg_backend {
    const sg_host_api *host;
    /* config */
    int64_t seed, corpus_size;
    uint32_t hits, latency_ms, jitter_ms, n_workers, max_pending;
    double empty_rate, blank_rate, error_rate;
    int error_status; /* index into error_statuses */
    int pages;
    char identity[160];
    /* the queue: jobs, earliest due first picked by the workers */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *jobs;
    size_t n_jobs;
    int stopping;
    pthread_t *workers;
    uint64_t rng; /* under mu: the random draws of jitter and error injection */
    _Atomic uint64_t calls, queries, errors, cancels;
};

static const char *const error_names[] = {"unavailable", "timeout", "upstream", "internal", "overload", NULL};
static const sg_status error_statuses[] = {SG_EUNAVAIL, SG_ETIMEDOUT, SG_EUPSTREAM, SG_EINTERNAL, SG_EOVERLOAD};

static const char *const words[] = {
    "river",  "mountain", "city",    "empire", "music",  "science",  "ocean",   "island",   "forest",  "king",   "queen",
    "war",    "peace",    "bridge",  "planet", "star",   "moon",     "volcano", "desert",   "harbor",  "castle", "library",
    "engine", "garden",   "market",  "temple", "valley", "glacier",  "canyon",  "festival", "novel",   "poem",   "painter",
    "bird",   "wolf",     "horse",   "whale",  "storm",  "winter",   "summer",  "railway",  "tower",   "school", "museum",
    "treaty", "republic", "village", "lake",   "coast",  "language", "theory",  "machine",  "harvest", "saint",  "scholar",
    "voyage", "kingdom",  "opera",   "meadow", "bay",    "plateau",  "comet",   "archive",  "lantern"};

_Static_assert(sizeof(words) / sizeof(words[0]) == 64, "the word list has 64 entries (6 bits of a hash pick one)");

/* ---- the deterministic part: FNV-1a 64 and a splitmix64 finaliser ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash_text(uint64_t seed, uint64_t salt, const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ mix(seed) ^ mix(salt + 0x51);
    for (size_t i = 0; i < n; ++i)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return mix(h);
}

/* A share in [0, 1) drawn from `h`. */
static double unit(uint64_t h)
{
    return (double)(h >> 11) * 0x1.0p-53;
}

/* Document `n` of the corpus, as a JSON object; `blank` gives it no text (contents "\"\"\n"). */
static void append_doc(const sg_backend *self, sg_buf_t *b, uint64_t n, int blank)
{
    uint64_t h = mix((uint64_t)self->seed * 0x2545f4914f6cdd1dull + n);
    char title[96];
    snprintf(title, sizeof(title), "%c%s %s %llu", words[h & 63][0] - 32, words[h & 63] + 1, words[(h >> 6) & 63],
             (unsigned long long)n);
    sg_buf_t text = {0};
    size_t count = 12 + (size_t)((h >> 12) % 19);
    for (size_t i = 0; !blank && i < count; ++i) {
        uint64_t w = mix(h + i);
        sg_buf_appendf(&text, "%s%s", i != 0 ? " " : "", words[w & 63]);
    }
    if (!blank)
        sg_buf_appendc(&text, '.');
    sg_buf_t contents = {0};
    sg_buf_appendf(&contents, "\"%s\"\n%s", blank ? "" : title, text.base != NULL ? text.base : "");
    sg_buf_appendf(b, "{\"id\":\"mock-%llu\",\"contents\":", (unsigned long long)n);
    sg_buf_append_json_string(b, contents.base, contents.len);
    sg_buf_appendf(b, ",\"title\":\"%s\",\"text\":", blank ? "" : title);
    sg_buf_append_json_string(b, text.base != NULL ? text.base : "", text.len);
    sg_buf_appendf(b, ",\"url\":\"https://mock.searchgate.invalid/doc/%llu\"}", (unsigned long long)n);
    sg_buf_free(&text);
    sg_buf_free(&contents);
}

/* The hits of one query, appended to `docs` (one document after another) with their lengths. */
static size_t answer_query(const sg_backend *self, const sg_query *q, uint32_t topk, sg_buf_t *docs, size_t *lens, double *scores)
{
    uint64_t corpus = (uint64_t)self->corpus_size;
    if (unit(hash_text((uint64_t)self->seed, 1, q->text, q->len)) < self->empty_rate)
        return 0;
    int blank = unit(hash_text((uint64_t)self->seed, 2, q->text, q->len)) < self->blank_rate;
    size_t k = self->hits != 0 && self->hits < topk ? self->hits : topk;
    if (k > corpus)
        k = (size_t)corpus;
    uint64_t start = hash_text((uint64_t)self->seed, 0, q->text, q->len);
    double top = 0.5 + 0.5 * unit(mix(start));
    for (size_t r = 0; r < k; ++r) {
        size_t before = docs->len;
        append_doc(self, docs, (start + r) % corpus, blank);
        lens[r] = docs->len - before;
        scores[r] = top / (double)(r + 1);
    }
    return k;
}

/* A page for POST /access: any URL has one, made from the URL. */
static void append_page(sg_buf_t *b, const sg_query *q)
{
    uint64_t h = hash_text(0, 3, q->text, q->len);
    sg_buf_appends(b, "{\"url\":");
    sg_buf_append_json_string(b, q->text, q->len);
    sg_buf_appendf(b, ",\"title\":\"Mock page %016llx\",\"contents\":\"Mock page %016llx: %s %s %s.\"}", (unsigned long long)h,
                   (unsigned long long)h, words[h & 63], words[(h >> 6) & 63], words[(h >> 12) & 63]);
}

/* ---- the worker threads ---- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void run_job(sg_backend *self, job_t *j)
{
    const sg_search *s = j->search;
    if (j->fail != SG_OK) {
        sg_result res = {j->fail, j->fail == SG_ECANCELED ? "cancelled" : "injected failure (mock error_rate)", NULL, 0,
                         j->fail == SG_EOVERLOAD || j->fail == SG_EUNAVAIL ? 1 : 0};
        j->done(j->cb_data, &res);
        return;
    }
    size_t per_query = j->is_access ? 1 : s->topk;
    sg_hits *per = calloc(s->n_queries, sizeof(*per));
    sg_hit *hits = calloc(s->n_queries * per_query + 1, sizeof(*hits));
    size_t *lens = calloc(s->n_queries * per_query + 1, sizeof(*lens));
    double *scores = calloc(s->n_queries * per_query + 1, sizeof(*scores));
    if (per == NULL || hits == NULL || lens == NULL || scores == NULL)
        abort();
    sg_buf_t docs = {0};
    size_t at = 0;
    for (size_t q = 0; q < s->n_queries; ++q) {
        size_t before = docs.len;
        if (j->is_access && self->pages) {
            append_page(&docs, &s->queries[q]);
            lens[at] = docs.len - before;
            scores[at] = 1.0;
            per[q].n_hits = 1;
        } else if (!j->is_access) {
            per[q].n_hits = answer_query(self, &s->queries[q], s->topk, &docs, lens + at, scores + at);
        }
        at += per[q].n_hits;
    }
    size_t off = 0, h = 0; /* docs only grew: point into it now that it has its final address */
    for (size_t q = 0; q < s->n_queries; ++q) {
        per[q].hits = hits + h;
        for (size_t i = 0; i < per[q].n_hits; ++i, ++h) {
            hits[h] = (sg_hit){docs.base + off, lens[h], scores[h]};
            off += lens[h];
        }
    }
    sg_result res = {SG_OK, NULL, per, s->n_queries, 0};
    j->done(j->cb_data, &res);
    sg_buf_free(&docs);
    free(scores);
    free(lens);
    free(hits);
    free(per);
}

static void wait_until(sg_backend *self, uint64_t due_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wait = due_ms - now_ms();
    ts.tv_sec += (time_t)(wait / 1000);
    ts.tv_nsec += (long)(wait % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&self->cv, &self->mu, &ts);
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
        if (best == NULL && self->stopping)
            break;
        if (best == NULL) {
            pthread_cond_wait(&self->cv, &self->mu);
            continue;
        }
        if ((*best)->due_ms > now_ms()) {
            wait_until(self, (*best)->due_ms);
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

/* A draw in [0, 1) of the instance's generator (xorshift64*), under mu. */
static double draw(sg_backend *self)
{
    self->rng ^= self->rng >> 12;
    self->rng ^= self->rng << 25;
    self->rng ^= self->rng >> 27;
    return unit(self->rng * 0x2545f4914f6cdd1dull);
}

static sg_status enqueue(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data, int is_access)
{
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    *j = (job_t){NULL, s, done, cb_data, 0, SG_OK, is_access};
    size_t n_queries = s->n_queries; /* once queued, a worker may complete the job and `s` goes */
    pthread_mutex_lock(&self->mu);
    if (self->n_jobs >= self->max_pending || self->stopping) {
        pthread_mutex_unlock(&self->mu);
        free(j);
        return SG_EOVERLOAD;
    }
    j->due_ms = now_ms() + self->latency_ms + (uint64_t)(draw(self) * (self->jitter_ms + 1));
    if (self->error_rate > 0 && draw(self) < self->error_rate) {
        j->fail = error_statuses[self->error_status];
        atomic_fetch_add(&self->errors, 1);
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

/* ---- the vtable ---- */

static sg_status mock_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 0);
}

static sg_status mock_access(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 1);
}

static int mock_has_access(sg_backend *self)
{
    return self->pages;
}

static void mock_cancel(sg_backend *self, void *cb_data)
{
    pthread_mutex_lock(&self->mu);
    for (job_t *j = self->jobs; j != NULL; j = j->next)
        if (j->cb_data == cb_data) {
            j->due_ms = 0;
            j->fail = SG_ECANCELED;
            atomic_fetch_add(&self->cancels, 1);
            pthread_cond_broadcast(&self->cv);
            break;
        }
    pthread_mutex_unlock(&self->mu);
}

static sg_status mock_health(sg_backend *self, char *detail, size_t n)
{
    (void)self;
    (void)detail;
    (void)n;
    return SG_OK;
}

static void mock_stats(sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
    h->metric(sink, "mock_calls_total", "search() and access() calls received by the mock plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->calls));
    h->metric(sink, "mock_queries_total", "Queries received by the mock plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->queries));
    h->metric(sink, "mock_injected_errors_total", "Calls the mock plugin failed on purpose (error_rate).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->errors));
    h->metric(sink, "mock_cancels_total", "Searches cancelled by the gateway.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->cancels));
}

static const char *mock_identity(sg_backend *self)
{
    return self->identity;
}

static void mock_destroy(sg_backend *self)
{
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    for (job_t *j = self->jobs; j != NULL; j = j->next) { /* pending searches complete with SG_ECANCELED */
        j->due_ms = 0;
        j->fail = SG_ECANCELED;
    }
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    for (size_t i = 0; self->workers != NULL && i < self->n_workers; ++i)
        pthread_join(self->workers[i], NULL);
    free(self->workers);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    free(self);
}

/* The config keys (docs/backends/mock.md), in the order an unknown key's error lists them. */
static const sg_cfg_key_t mock_config[] = {
    SG_CFG_INT(sg_backend, seed, "seed", 0, 1000000000000, 0),
    SG_CFG_INT(sg_backend, corpus_size, "corpus_size", 1, 1000000000000, 1000000),
    SG_CFG_INT(sg_backend, hits, "hits", 0, 100000, 0),
    SG_CFG_DOUBLE(sg_backend, empty_rate, "empty_rate", 0, 1, 0),
    SG_CFG_DOUBLE(sg_backend, blank_rate, "blank_rate", 0, 1, 0),
    SG_CFG_INT(sg_backend, latency_ms, "latency_ms", 0, 600000, 0),
    SG_CFG_INT(sg_backend, jitter_ms, "jitter_ms", 0, 600000, 0),
    SG_CFG_DOUBLE(sg_backend, error_rate, "error_rate", 0, 1, 0),
    SG_CFG_ENUM(sg_backend, error_status, "error_status", error_names, 0),
    SG_CFG_BOOL(sg_backend, pages, "pages", 1),
    SG_CFG_INT(sg_backend, n_workers, "workers", 1, 64, 1),
    SG_CFG_INT(sg_backend, max_pending, "max_pending", 1, 10000000, 10000),
};

static sg_status mock_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                             size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = cJSON_ParseWithLength(config_json, config_len);
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL) {
        cJSON_Delete(root);
        return SG_ENOMEM;
    }
    self->host = host;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    if (root == NULL || sg_cfg_read(&c, root, mock_config, sizeof(mock_config) / sizeof(mock_config[0]), base_dir, self) != 0) {
        if (root == NULL)
            snprintf(err, err_size, "config: not valid JSON");
        cJSON_Delete(root);
        mock_destroy(self);
        return SG_EINVAL;
    }
    cJSON_Delete(root);
    /* what changes answers (not latency or errors): a new identity, so the cache never mixes them */
    snprintf(self->identity, sizeof(self->identity), "mock1:seed=%lld:corpus=%lld:hits=%u:empty=%.17g:blank=%.17g",
             (long long)self->seed, (long long)self->corpus_size, self->hits, self->empty_rate, self->blank_rate);
    self->rng = ((uint64_t)now_ms() ^ (uint64_t)(uintptr_t)self) | 1;
    self->workers = calloc(self->n_workers, sizeof(*self->workers));
    for (size_t i = 0; i < self->n_workers; ++i)
        pthread_create(&self->workers[i], NULL, worker_main, self);
    host->log(SG_LOG_INFO, instance, "mock backend ready: seed %lld, %lld documents, %u workers%s", (long long)self->seed,
              (long long)self->corpus_size, self->n_workers,
              self->error_rate > 0 || self->latency_ms > 0 ? " (with injected latency or errors)" : "");
    *out = self;
    return SG_OK;
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("mock", MOCK_VERSION),
    .create = mock_create,
    .destroy = mock_destroy,
    .search = mock_search,
    .cancel = mock_cancel,
    .health = mock_health,
    .stats = mock_stats,
    .identity = mock_identity,
    .access = mock_access,
    .has_access = mock_has_access,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
