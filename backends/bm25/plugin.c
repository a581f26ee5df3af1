/*
 * plugin.c -- the bm25 backend plugin (build/plugins/sg_bm25.so): lexical BM25 search over an
 * index made by searchgate-index-bm25, with no model and no GPU.
 *
 * Config (docs/backends/bm25.md has types, defaults and bounds):
 *   "index":       the index directory (required; relative to the gateway config's directory)
 *   "k1", "b":     BM25 parameters (default: the ones recorded in the index, 0.9 / 0.4 unless the
 *                  index was built with others)
 *   "workers":     search threads (default: one per CPU)
 *   "max_pending": search() calls queued before SG_EOVERLOAD (default 4096)
 *   "max_topk":    largest topk served; more is SG_ETOOBIG (default 1000)
 *   "verify":      "full" (check every checksum at start-up) or "header" (structure only)
 *   "preload":     pre-fault the index into memory at start-up (default true)
 *
 * search() only enqueues: the workers analyze and score, and call done() with hits that point
 * straight into the mmapped docs.bin. Each worker owns a searcher (analyzer + accumulators).
 */
#include "sg_backend.h"
#include "cfg.h"
#include "index.h"

#include <cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct st_job_t {
    struct st_job_t *next;
    const sg_search *search;
    sg_done_fn done;
    void *cb_data;
    _Atomic int cancelled;
} job_t;

typedef struct st_worker_t {
    struct sg_backend *self;
    pthread_t thread;
    int started;
    sg_bm25_searcher_t *searcher;
    sg_bm25_hit_t *hits; /* max_topk */
    sg_hit *out;
    size_t out_cap;
    sg_hits *per;
    size_t per_cap;
    job_t *running; /* guarded by the backend mutex */
} worker_t;

struct sg_backend {
    const sg_host_api *host;
    char *name;
    sg_bm25_index_t ix;
    int ix_open;
    float *norms;
    double k1, b;
    uint32_t max_topk;
    size_t max_pending;
    char identity[128];
    /* queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *head, *tail;
    size_t n_pending;
    int stopping;
    worker_t *workers;
    size_t n_workers;
    /* stats */
    _Atomic uint64_t calls, queries, empty_queries, hits, postings, overloads, cancels, timeouts, corrupt;
    _Atomic uint64_t busy_us;
};

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void finish(job_t *j, sg_status st, const char *detail)
{
    sg_result res = {st, detail, NULL, 0, 0};
    j->done(j->cb_data, &res);
}

/* Runs one search() call on a worker and completes it. */
static void run_job(worker_t *w, job_t *j)
{
    sg_backend *self = w->self;
    const sg_search *s = j->search;
    if (atomic_load(&j->cancelled)) {
        atomic_fetch_add(&self->cancels, 1);
        finish(j, SG_ECANCELED, "cancelled");
        return;
    }
    uint64_t start_by = SG_SEARCH_START_BY(s);
    if (start_by != 0 && self->host->now_ms() >= start_by) { /* waited too long in the queue to be of use */
        atomic_fetch_add(&self->timeouts, 1);
        finish(j, SG_ETIMEDOUT, "too little of the deadline left when a worker took the search");
        return;
    }
    uint64_t t0 = mono_us();
    size_t need = s->n_queries * (size_t)s->topk;
    if (need > w->out_cap) {
        free(w->out);
        w->out = malloc(need * sizeof(*w->out));
        w->out_cap = need;
    }
    if (s->n_queries > w->per_cap) {
        free(w->per);
        w->per = malloc(s->n_queries * sizeof(*w->per));
        w->per_cap = s->n_queries;
    }
    if (w->out == NULL || w->per == NULL) {
        w->out_cap = w->per_cap = 0;
        finish(j, SG_ENOMEM, "out of memory");
        return;
    }
    sg_bm25_qstats_t qs = {0};
    size_t total = 0;
    uint64_t empty = 0;
    for (size_t q = 0; q < s->n_queries; ++q) {
        if (atomic_load(&j->cancelled)) {
            atomic_fetch_add(&self->cancels, 1);
            finish(j, SG_ECANCELED, "cancelled");
            return;
        }
        if (s->deadline_ms != 0 && self->host->now_ms() > s->deadline_ms) {
            atomic_fetch_add(&self->timeouts, 1);
            finish(j, SG_ETIMEDOUT, "deadline passed during the BM25 search");
            return;
        }
        size_t n = sg_bm25_search(w->searcher, s->queries[q].text, s->queries[q].len, s->topk, w->hits, &qs);
        sg_hit *h = w->out + total;
        for (size_t i = 0; i < n; ++i) {
            const sg_bm25_docent_t *e = &self->ix.docent[w->hits[i].doc];
            h[i].doc = self->ix.docs + e->off;
            h[i].doc_len = e->len;
            h[i].score = (double)w->hits[i].score;
        }
        w->per[q].hits = h;
        w->per[q].n_hits = n;
        total += n;
        empty += n == 0;
    }
    atomic_fetch_add(&self->queries, s->n_queries);
    atomic_fetch_add(&self->empty_queries, empty);
    atomic_fetch_add(&self->hits, total);
    atomic_fetch_add(&self->postings, qs.postings);
    if (qs.corrupt > 0) {
        atomic_fetch_add(&self->corrupt, qs.corrupt);
        self->host->log(SG_LOG_ERROR, self->name, "%s: %llu posting lists failed to decode: the index is corrupt", self->ix.dir,
                        (unsigned long long)qs.corrupt);
    }
    atomic_fetch_add(&self->busy_us, mono_us() - t0);
    sg_result res = {SG_OK, NULL, w->per, s->n_queries, 0};
    j->done(j->cb_data, &res);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    sg_backend *self = w->self;
    pthread_mutex_lock(&self->mu);
    for (;;) {
        while (self->head == NULL && !self->stopping)
            pthread_cond_wait(&self->cv, &self->mu);
        job_t *j = self->head;
        if (j == NULL)
            break; /* stopping and drained */
        self->head = j->next;
        if (self->head == NULL)
            self->tail = NULL;
        --self->n_pending;
        w->running = j;
        pthread_mutex_unlock(&self->mu);
        run_job(w, j); /* no lock held while calling back into the host */
        pthread_mutex_lock(&self->mu);
        w->running = NULL;
        free(j);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

static sg_status bm_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    if (s->topk > self->max_topk)
        return SG_ETOOBIG;
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    j->search = s;
    j->done = done;
    j->cb_data = cb_data;
    pthread_mutex_lock(&self->mu);
    if (self->stopping) {
        pthread_mutex_unlock(&self->mu);
        free(j);
        return SG_EUNAVAIL;
    }
    if (self->n_pending >= self->max_pending) {
        pthread_mutex_unlock(&self->mu);
        free(j);
        atomic_fetch_add(&self->overloads, 1);
        return SG_EOVERLOAD;
    }
    if (self->tail != NULL)
        self->tail->next = j;
    else
        self->head = j;
    self->tail = j;
    ++self->n_pending;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    atomic_fetch_add(&self->calls, 1);
    return SG_OK;
}

static void bm_cancel(sg_backend *self, void *cb_data)
{
    pthread_mutex_lock(&self->mu);
    int found = 0;
    for (job_t *j = self->head; j != NULL && !found; j = j->next)
        if (j->cb_data == cb_data) {
            atomic_store(&j->cancelled, 1);
            found = 1;
        }
    for (size_t i = 0; i < self->n_workers && !found; ++i)
        if (self->workers[i].running != NULL && self->workers[i].running->cb_data == cb_data) {
            atomic_store(&self->workers[i].running->cancelled, 1);
            found = 1;
        }
    if (found && self->head != NULL && atomic_load(&self->head->cancelled) == 0) {
        /* move queued cancelled jobs to the front so they complete promptly */
        job_t *keep = NULL, **kt = &keep, *gone = NULL, **gt = &gone;
        for (job_t *j = self->head; j != NULL;) {
            job_t *next = j->next;
            j->next = NULL;
            if (atomic_load(&j->cancelled)) {
                *gt = j;
                gt = &j->next;
            } else {
                *kt = j;
                kt = &j->next;
            }
            j = next;
        }
        *gt = keep;
        self->head = gone != NULL ? gone : keep;
        self->tail = NULL;
        for (job_t *j = self->head; j != NULL; j = j->next)
            self->tail = j;
    }
    pthread_mutex_unlock(&self->mu);
}

static sg_status bm_health(sg_backend *self, char *detail, size_t n)
{
    if (self->stopping) {
        snprintf(detail, n, "shutting down");
        return SG_EUNAVAIL;
    }
    return SG_OK;
}

static void bm_stats(sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
    h->metric(sink, "bm25_calls_total", "search() calls accepted by the bm25 plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->calls));
    h->metric(sink, "bm25_queries_total", "Queries scored by the bm25 plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->queries));
    h->metric(sink, "bm25_empty_queries_total", "Queries that matched no document (no indexed term after analysis).",
              SG_METRIC_COUNTER, NULL, (double)atomic_load(&self->empty_queries));
    h->metric(sink, "bm25_hits_total", "Hits returned by the bm25 plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->hits));
    h->metric(sink, "bm25_postings_scored_total", "Postings scored (the work of a BM25 search).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->postings));
    h->metric(sink, "bm25_search_seconds_total", "Worker time spent scoring.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->busy_us) / 1e6);
    h->metric(sink, "bm25_overload_total", "search() calls refused because the queue was full.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->overloads));
    h->metric(sink, "bm25_cancelled_total", "Searches finished early by cancel() or shutdown.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->cancels));
    h->metric(sink, "bm25_timeouts_total", "Searches whose deadline passed inside the plugin.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->timeouts));
    h->metric(sink, "bm25_corrupt_postings_total", "Posting lists that failed to decode (corrupt index).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->corrupt));
    pthread_mutex_lock(&self->mu);
    double pending = (double)self->n_pending, running = 0;
    for (size_t i = 0; i < self->n_workers; ++i)
        running += self->workers[i].running != NULL;
    pthread_mutex_unlock(&self->mu);
    h->metric(sink, "bm25_pending", "search() calls waiting for a worker.", SG_METRIC_GAUGE, NULL, pending);
    h->metric(sink, "bm25_running", "search() calls being scored.", SG_METRIC_GAUGE, NULL, running);
    h->metric(sink, "bm25_workers", "Search threads.", SG_METRIC_GAUGE, NULL, (double)self->n_workers);
    h->metric(sink, "bm25_index_documents", "Documents in the index.", SG_METRIC_GAUGE, NULL, (double)self->ix.meta.n_docs);
    h->metric(sink, "bm25_index_terms", "Terms in the index dictionary.", SG_METRIC_GAUGE, NULL, (double)self->ix.meta.n_terms);
    h->metric(sink, "bm25_index_bytes", "Size of the index files (mapped read-only).", SG_METRIC_GAUGE, NULL,
              (double)self->ix.total_bytes);
}

static const char *bm_identity(sg_backend *self)
{
    return self->identity;
}

static void bm_destroy(sg_backend *self)
{
    if (self->workers == NULL)
        self->n_workers = 0; /* create() failed before allocating them */
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    for (job_t *j = self->head; j != NULL; j = j->next)
        atomic_store(&j->cancelled, 1); /* workers complete them with SG_ECANCELED */
    for (size_t i = 0; i < self->n_workers; ++i)
        if (self->workers[i].running != NULL)
            atomic_store(&self->workers[i].running->cancelled, 1);
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    for (size_t i = 0; i < self->n_workers; ++i) {
        worker_t *w = &self->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        sg_bm25_searcher_free(w->searcher);
        free(w->hits);
        free(w->out);
        free(w->per);
    }
    /* never started: complete anything still queued */
    while (self->head != NULL) {
        job_t *j = self->head;
        self->head = j->next;
        finish(j, SG_ECANCELED, "backend shutting down");
        free(j);
    }
    free(self->workers);
    free(self->norms);
    if (self->ix_open)
        sg_bm25_index_close(&self->ix);
    free(self->name);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    free(self);
}

/* The config keys (docs/backends/bm25.md, "Configuration"), in the order an unknown key's error
 * lists them. workers (its default is the CPU count), k1 and b (theirs come from the index) are
 * read by bm_create itself. */
typedef struct st_bm_conf_t {
    char *dir;
    int verify, preload;
    size_t max_pending;
    uint32_t max_topk;
} bm_conf_t;
static const char *const verify_modes[] = {"header", "full", NULL};
static const sg_cfg_key_t bm_config[] = {
    SG_CFG_PATH(bm_conf_t, dir, "index", 1),
    SG_CFG_CUSTOM_KEY("k1"),
    SG_CFG_CUSTOM_KEY("b"),
    SG_CFG_CUSTOM_KEY("workers"),
    SG_CFG_INT(bm_conf_t, max_pending, "max_pending", 1, 10000000, 4096),
    SG_CFG_INT(bm_conf_t, max_topk, "max_topk", 1, 100000, 1000),
    SG_CFG_ENUM(bm_conf_t, verify, "verify", verify_modes, SG_BM25_VERIFY_FULL),
    SG_CFG_BOOL(bm_conf_t, preload, "preload", 1),
};

/* The length norms of k1 and b, and the search workers with their searchers. */
static sg_status start_workers(sg_backend *self, char *err, size_t err_size)
{
    self->norms = sg_bm25_norms(&self->ix, self->k1, self->b);
    self->workers = calloc(self->n_workers, sizeof(*self->workers));
    if (self->norms == NULL || self->workers == NULL) {
        snprintf(err, err_size, "out of memory for %llu documents", (unsigned long long)self->ix.meta.n_docs);
        return SG_ENOMEM;
    }
    for (size_t i = 0; i < self->n_workers; ++i) {
        worker_t *w = &self->workers[i];
        w->self = self;
        w->searcher = sg_bm25_searcher_new(&self->ix, self->norms);
        w->hits = malloc(self->max_topk * sizeof(*w->hits));
        if (w->searcher == NULL || w->hits == NULL) {
            snprintf(err, err_size, "out of memory for %zu search workers", self->n_workers);
            return SG_ENOMEM;
        }
    }
    for (size_t i = 0; i < self->n_workers; ++i) {
        if (pthread_create(&self->workers[i].thread, NULL, worker_main, &self->workers[i]) != 0) {
            snprintf(err, err_size, "cannot start search worker %zu", i);
            return SG_EINTERNAL;
        }
        self->workers[i].started = 1;
    }
    return SG_OK;
}

static sg_status bm_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                           size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    sg_cfg_t c = {"config", err, err_size};
    cJSON *root = sg_cfg_parse(&c, config_json, config_len); /* strict: no duplicate key */
    sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL) {
        cJSON_Delete(root);
        return SG_ENOMEM;
    }
    self->host = host;
    self->name = strdup(instance);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    bm_conf_t conf = {0};
    int64_t v;
    sg_status st = SG_EINVAL;
    if (root == NULL) /* sg_cfg_parse() said why */
        goto fail;
    if (sg_cfg_read(&c, root, bm_config, SG_CFG_N(bm_config), base_dir, &conf) != 0)
        goto fail;
    const char *dir = conf.dir;
    int verify = conf.verify, preload = conf.preload;
    self->max_pending = conf.max_pending;
    self->max_topk = conf.max_topk;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (sg_cfg_int(&c, root, "workers", 1, 256, ncpu < 1 ? 1 : ncpu > 64 ? 64 : ncpu, &v) != 0)
        goto fail;
    self->n_workers = (size_t)v;
    uint64_t t0 = mono_us();
    if (sg_bm25_index_open(&self->ix, dir, verify, preload, err, err_size) != 0) {
        st = SG_EUNAVAIL;
        goto fail;
    }
    self->ix_open = 1;
    double load_ms = (double)(mono_us() - t0) / 1000.0;
    if (sg_cfg_double(&c, root, "k1", 0, 1000, self->ix.meta.k1, &self->k1) != 0 ||
        sg_cfg_double(&c, root, "b", 0, 1, self->ix.meta.b, &self->b) != 0)
        goto fail;
    snprintf(self->identity, sizeof(self->identity), "bm25v%d:%016llx:k1=%.17g:b=%.17g", SG_BM25_FORMAT_VERSION,
             (unsigned long long)self->ix.build_id, self->k1, self->b);
    if ((st = start_workers(self, err, err_size)) != SG_OK)
        goto fail;
    host->log(SG_LOG_INFO, instance,
              "bm25 index %s: %llu documents, %llu terms, %.1f MB, build %016llx, %s stemmer, %s stop words; k1=%g b=%g; "
              "%s check in %.0f ms; %zu workers",
              dir, (unsigned long long)self->ix.meta.n_docs, (unsigned long long)self->ix.meta.n_terms,
              (double)self->ix.total_bytes / 1048576.0, (unsigned long long)self->ix.build_id,
              sg_bm25_stemmer_name((sg_bm25_stemmer_t)self->ix.meta.stemmer),
              sg_bm25_stopset_name((sg_bm25_stopset_t)self->ix.meta.stopset), self->k1, self->b,
              verify == SG_BM25_VERIFY_FULL ? "full" : "header", load_ms, self->n_workers);
    free(conf.dir);
    cJSON_Delete(root);
    *out = self;
    return SG_OK;
fail:
    free(conf.dir);
    cJSON_Delete(root);
    bm_destroy(self);
    return st;
}

/* No admission limits of its own; the mean DOC size of the corpus (ABI 1.3), from which the
 * gateway estimates an answer's size before searching. */
static void bm_limits(sg_backend *self, int op, sg_limits *out)
{
    if (op == SG_OP_SEARCH && SG_LIMITS_HAS_DOC_BYTES(out) && self->ix.meta.n_docs != 0) {
        uint64_t mean = self->ix.docs_len / self->ix.meta.n_docs;
        out->doc_bytes = mean > UINT32_MAX ? UINT32_MAX : (uint32_t)mean;
    }
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("bm25", "1.0.0"),
    .create = bm_create,
    .destroy = bm_destroy,
    .search = bm_search,
    .cancel = bm_cancel,
    .health = bm_health,
    .stats = bm_stats,
    .identity = bm_identity,
    .limits = bm_limits,
};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vtable;
}
