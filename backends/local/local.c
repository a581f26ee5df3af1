/*
 * local.c -- the local dense backend: the Search-R1 retriever (e5 query encoder, FAISS index,
 * wiki-18 style corpus) as a searchgate plugin, plus POST /access over a pages file.
 *
 * Threading. search() and access() only queue work (a mutex held for a few pointer moves) and
 * return; a pool of worker threads does everything else. The dynamic batcher: search calls wait
 * in one FIFO; a free worker takes queries from the calls at its head -- across calls, and
 * splitting a large call -- up to `max_batch`, waiting at most `max_wait_ms` (counted from the
 * oldest queued query) for a batch to fill while fewer are queued. It then encodes the batch,
 * searches FAISS once for the whole batch and stores each query's labels and distances in its
 * call; whichever worker finishes a call's last query builds its DOCs and calls done().
 *
 * Teams (team.h, "teams": true, the CPU default): the worker that takes a batch (up to max_batch
 * queries) leads it and opens it to the whole pool: its steps (the encoder's column slices and
 * attention heads, a flat index's row slices) are cut for every worker, and a worker that finds
 * nothing queued joins the running batch with the fewest helpers -- idle when it started, or free
 * later when its own batch ended -- and takes tasks until that batch ends. One client (c=1) so gets
 * every core, and under load several batches run at once, each split over the workers sharing it.
 * A free worker waits up to max_wait_ms for a full batch, except for a lone query (the only one
 * queued, arrived into an empty backend while fewer than 1.5 are in it on average: one client at a
 * time), which starts at once. With "teams": false (and on the GPU path) each worker runs its own
 * batch alone and takes its share of the queue (queued / idle workers), waking another worker for
 * the rest. BLAS/OpenMP pools are kept at one thread each either way. The queue is bounded in queued queries: past
 * `max_queue` search() returns SG_EOVERLOAD (503 + Retry-After).
 *
 * cancel() marks the call; its queued queries are dropped and done(SG_ECANCELED) is called by a
 * worker once no batch of it is running. destroy() stops the workers and completes what is left
 * with SG_ECANCELED.
 *
 * DOCs are the corpus line's bytes, spliced as they are, with ,"url":"" added before the closing
 * brace when the row has no top-level "url". FAISS label i is row i; label -1 is dropped.
 *
 * Device ("device": auto | cpu | cuda, gpu.c): on the GPU path each worker encodes on a GPU
 * (fp16, its own workspace and stream) and a Flat index is searched on the GPUs; everything else
 * (batching, DOCs, cancellation) is the same code. "cpu", and "auto" without a usable GPU, run
 * exactly the CPU path.
 */
#include "local.h"
#include "blas.h"
#include "cfg.h"
#include "e5.h"
#include "e5_internal.h"
#include "faissidx.h"
#include "flatscan.h"
#include "gpu.h"
#include "indexmeta.h"
#include "jsonl.h"
#include "kern.h"
#include "team.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct st_job_t job_t;
struct st_job_t {
    job_t *next;                /* search or access FIFO, or the finished list */
    job_t *all_prev, *all_next; /* every live job, for cancel() and destroy() */
    const sg_search *s;
    sg_done_fn done;
    void *cb_data;
    int is_access, in_fifo;
    int alone;                 /* queued into an empty backend (nothing queued or running): fill_target */
    size_t n, taken, finished; /* queries; taken by batches; finished by batches */
    uint64_t enq_ms;
    sg_status fail;
    char fail_msg[200];
    float *dist;           /* n * topk */
    int64_t *labels;       /* n * topk */
    int nprobe, ef_search; /* the request's search parameters (sg_search.params); 0 = the route's */
};

typedef struct st_item_t {
    job_t *job;
    size_t q;
} item_t;

typedef struct st_worker_t {
    struct sg_backend *self;
    unsigned idx; /* position in the pool */
    pthread_t thread;
    int started;
    sg_e5_workspace *ws;
    item_t *items;
    const char **texts;
    size_t *lens;
    float *vecs, *dist;
    int64_t *labels;
    size_t cap_k;
    sg_local_gpu_worker_t gpu; /* the GPU path only */
} worker_t;

struct sg_backend {
    const sg_host_api *host;
    char *name;
    /* data */
    sg_e5_model *model;
    sg_fidx_t index;
    sg_jsonl_t corpus, pages;
    int have_pages;
    char *prefix;
    uint32_t max_length, max_topk;
    size_t max_batch, max_queue;
    uint32_t max_wait_ms;
    int omp_threads;
    sg_local_gpu_t *gpu; /* NULL: everything on the CPU */
    sg_flatscan_t flat;  /* the index's vectors, when it is a flat IP/L2 index on the CPU */
    int have_flat;
    int teams;            /* "teams": idle workers help the batches that run (team.h) */
    int encoder_onednn;   /* "encoder_blas": the float32 products run through oneDNN */
    char encoder_why[32]; /* what decided the encoder's kernels (local_encoder_info's label "why") */
    sg_team_t *team;      /* one session board per worker: its batch's, when it leads one */
    _Atomic int no_leave; /* helpers stay until their session ends (never set) */
    /* search parameters: IVF nprobe / HNSW efSearch (0 when the index has none), their per-request
     * bounds ("search_params"), the re-ranking factor, and what convert recorded */
    int nprobe, ef_search, max_nprobe, max_ef_search, rerank;
    sg_imeta_t meta;
    char identity[512];
    /* queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *fifo_head, **fifo_tail; /* search calls with queries not yet taken */
    job_t *acc_head, **acc_tail;   /* access calls */
    job_t *fin_head;               /* calls to complete (cancelled, timed out) */
    job_t *all;
    size_t queued;        /* queries waiting in the search FIFO */
    size_t n_workers_cfg; /* the "workers" key (0: default) */
    size_t busy;          /* workers running a batch */
    size_t running;       /* queries in the batches that run */
    double in_system;     /* queries queued or running, averaged over time (fill_target) */
    uint64_t in_system_us;
    size_t in_system_level; /* queued + running since in_system_us */
    int stopping;
    worker_t *workers;
    size_t n_workers;
    /* stats */
    _Atomic uint64_t calls, queries, batches, batch_queries, rejected, canceled, timed_out, access_calls, access_hits, errors;
    _Atomic uint64_t encode_us, search_us;
    _Atomic uint64_t team_batches;
    _Atomic uint64_t tokens, padded_tokens; /* tokens the encoder computed; padding among them (GPU) */
    _Atomic uint64_t sorted_batches;        /* GPU batches encoded in length order */
    _Atomic uint64_t step_ns[SG_E5_STEPS];  /* the encoder's steps, summed over batches (sg_e5_workspace_step_ns) */
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ---- job list helpers (mu held) ---- */

static void all_link(struct sg_backend *self, job_t *j)
{
    j->all_prev = NULL;
    j->all_next = self->all;
    if (self->all != NULL)
        self->all->all_prev = j;
    self->all = j;
}

static void all_unlink(struct sg_backend *self, job_t *j)
{
    if (j->all_prev != NULL)
        j->all_prev->all_next = j->all_next;
    else
        self->all = j->all_next;
    if (j->all_next != NULL)
        j->all_next->all_prev = j->all_prev;
    j->all_prev = j->all_next = NULL;
}

static void fifo_remove(struct sg_backend *self, job_t *j)
{
    job_t **pp = &self->fifo_head;
    job_t *prev = NULL;
    while (*pp != NULL && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL)
        return;
    *pp = j->next;
    if (self->fifo_tail == &j->next)
        self->fifo_tail = prev != NULL ? &prev->next : &self->fifo_head;
    j->next = NULL;
    j->in_fifo = 0;
    self->queued -= j->n - j->taken;
}

/* The job will get no more batches: when none is running, hand it to the finished list. */
static void retire_if_idle(struct sg_backend *self, job_t *j)
{
    if (j->in_fifo)
        fifo_remove(self, j);
    if (j->finished == j->taken) {
        all_unlink(self, j);
        j->next = self->fin_head;
        self->fin_head = j;
    }
}

static void job_free(job_t *j)
{
    free(j->dist);
    free(j->labels);
    free(j);
}

/* ---- completion (no lock held) ---- */

static int has_key_url(const char *row, size_t len)
{
    const char *v;
    size_t vl;
    return sg_json_find_key(row, len, "url", &v, &vl);
}

static void complete_search(struct sg_backend *self, job_t *j)
{
    const sg_search *s = j->s;
    if (j->fail != SG_OK) {
        sg_result r = {j->fail, j->fail_msg, NULL, 0, j->fail == SG_EOVERLOAD ? 1 : 0};
        j->done(j->cb_data, &r);
        job_free(j);
        return;
    }
    size_t k = s->topk;
    sg_hits *per = calloc(j->n + 1, sizeof(*per));
    sg_hit *hits = calloc(j->n * k + 1, sizeof(*hits));
    /* first pass: how many bytes the rows lacking "url" need */
    size_t extra = 0;
    for (size_t i = 0; i < j->n * k; ++i) {
        int64_t l = j->labels[i];
        if (l < 0 || (uint64_t)l >= self->corpus.n_rows)
            continue;
        const char *row;
        size_t len;
        sg_jsonl_row(&self->corpus, (uint64_t)l, &row, &len);
        if (!has_key_url(row, len))
            extra += len + 16;
    }
    char *arena = extra > 0 ? malloc(extra) : NULL;
    if (per == NULL || hits == NULL || (extra > 0 && arena == NULL)) {
        free(per);
        free(hits);
        free(arena);
        sg_result r = {SG_ENOMEM, "out of memory building the results", NULL, 0, 0};
        j->done(j->cb_data, &r);
        job_free(j);
        return;
    }
    size_t used = 0;
    sg_hit *h = hits;
    for (size_t q = 0; q < j->n; ++q) {
        per[q].hits = h;
        for (size_t i = 0; i < k; ++i) {
            int64_t l = j->labels[q * k + i];
            if (l < 0 || (uint64_t)l >= self->corpus.n_rows)
                continue; /* FAISS found fewer than k (ANN indexes): drop -1 */
            const char *row;
            size_t len;
            sg_jsonl_row(&self->corpus, (uint64_t)l, &row, &len);
            if (has_key_url(row, len)) {
                h->doc = row;
                h->doc_len = len;
            } else {
                /* {...} -> {...,"url":""}; the closing brace is the last byte of a checked row */
                char *d = arena + used;
                size_t body = len - 1;
                memcpy(d, row, body);
                size_t m = body;
                size_t b = 1;
                while (b < body && (row[b] == ' ' || row[b] == '\t' || row[b] == '\n' || row[b] == '\r'))
                    ++b;
                if (b < body)
                    d[m++] = ',';
                memcpy(d + m, "\"url\":\"\"}", 9);
                m += 9;
                h->doc = d;
                h->doc_len = m;
                used += m;
            }
            h->score = (double)j->dist[q * k + i];
            ++h;
            ++per[q].n_hits;
        }
    }
    sg_result r = {SG_OK, NULL, per, j->n, 0};
    j->done(j->cb_data, &r);
    free(arena);
    free(hits);
    free(per);
    job_free(j);
}

static void run_access(struct sg_backend *self, job_t *j)
{
    if (j->fail != SG_OK) {
        sg_result r = {j->fail, j->fail_msg, NULL, 0, 0};
        j->done(j->cb_data, &r);
        return;
    }
    const sg_search *s = j->s;
    sg_hits *per = calloc(s->n_queries + 1, sizeof(*per));
    sg_hit *hits = calloc(s->n_queries + 1, sizeof(*hits));
    if (per == NULL || hits == NULL) {
        free(per);
        free(hits);
        sg_result r = {SG_ENOMEM, "out of memory", NULL, 0, 0};
        j->done(j->cb_data, &r);
        return;
    }
    for (size_t q = 0; q < s->n_queries; ++q) {
        per[q].hits = &hits[q];
        int64_t row = sg_jsonl_find_url(&self->pages, s->queries[q].text, s->queries[q].len);
        if (row < 0)
            continue;
        sg_jsonl_row(&self->pages, (uint64_t)row, &hits[q].doc, &hits[q].doc_len);
        hits[q].score = 1.0;
        per[q].n_hits = 1;
        atomic_fetch_add(&self->access_hits, 1);
    }
    sg_result r = {SG_OK, NULL, per, s->n_queries, 0};
    j->done(j->cb_data, &r);
    free(hits);
    free(per);
}

/* ---- batches ---- */

/* Takes up to `limit` queries from the head of the FIFO into w->items (mu held). */
static size_t take_batch(struct sg_backend *self, worker_t *w, uint64_t now, size_t limit)
{
    size_t n = 0;
    while (self->fifo_head != NULL && n < limit) {
        job_t *j = self->fifo_head;
        uint64_t start_by = SG_SEARCH_START_BY(j->s); /* the deadline less the route's floor */
        if (start_by != 0 && now >= start_by && j->fail == SG_OK) {
            j->fail = SG_ETIMEDOUT;
            snprintf(j->fail_msg, sizeof(j->fail_msg), "%s while %zu queries waited in the local backend's queue",
                     now >= j->s->deadline_ms ? "the deadline passed" : "too little of the deadline was left", j->n - j->taken);
            atomic_fetch_add(&self->timed_out, 1);
            retire_if_idle(self, j);
            continue;
        }
        size_t take = j->n - j->taken;
        if (take > limit - n)
            take = limit - n;
        for (size_t i = 0; i < take; ++i) {
            w->items[n].job = j;
            w->items[n].q = j->taken + i;
            ++n;
        }
        j->taken += take;
        self->queued -= take;
        if (j->taken == j->n) {
            self->fifo_head = j->next;
            if (self->fifo_head == NULL)
                self->fifo_tail = &self->fifo_head;
            j->next = NULL;
            j->in_fifo = 0;
        }
    }
    return n;
}

/* The batch's FAISS search: one search per run of consecutive queries sharing their search
 * parameters (the queries of one call are contiguous in a batch; calls without "search_params"
 * all share the route's). */
static int search_batch(struct sg_backend *self, worker_t *w, size_t n, int k, char *err, size_t err_size)
{
    size_t dim = (size_t)self->index.dim;
    for (size_t i = 0; i < n;) {
        const job_t *j = w->items[i].job;
        sg_fidx_sp_t sp = {j->nprobe != 0 ? j->nprobe : self->nprobe, j->ef_search != 0 ? j->ef_search : self->ef_search,
                           self->rerank, 0};
        size_t e = i + 1;
        while (e < n) {
            const job_t *o = w->items[e].job;
            if ((o->nprobe != 0 ? o->nprobe : self->nprobe) != sp.nprobe ||
                (o->ef_search != 0 ? o->ef_search : self->ef_search) != sp.ef_search)
                break;
            ++e;
        }
        if (sg_fidx_search_sp(&self->index, e - i, w->vecs + i * dim, k, &sp, w->dist + i * (size_t)k, w->labels + i * (size_t)k,
                              err, err_size) != 0)
            return -1;
        i = e;
    }
    return 0;
}

/* Encodes and searches one batch (no lock held); fills the jobs' result slots. `par` (NULL: this
 * thread alone) lends it the idle workers. Returns 0, or -1 with `err` set. */
static int run_batch(struct sg_backend *self, worker_t *w, size_t n, sg_par_t *par, char *err, size_t err_size)
{
    uint32_t k = 1;
    for (size_t i = 0; i < n; ++i) {
        const sg_query *q = &w->items[i].job->s->queries[w->items[i].q];
        w->texts[i] = q->text;
        w->lens[i] = q->len;
        if (w->items[i].job->s->topk > k)
            k = w->items[i].job->s->topk;
    }
    if (k > w->cap_k) {
        free(w->dist);
        free(w->labels);
        w->dist = malloc(self->max_batch * k * sizeof(float));
        w->labels = malloc(self->max_batch * k * sizeof(int64_t));
        if (w->dist == NULL || w->labels == NULL)
            abort();
        w->cap_k = k;
    }
    uint64_t t0 = now_us(), tok0 = sg_e5_workspace_tokens(w->ws), gtok0 = w->gpu.tokens, gpad0 = w->gpu.padded;
    uint64_t sorted0 = w->gpu.sorted_batches, st0[SG_E5_STEPS], st1[SG_E5_STEPS];
    sg_e5_workspace_step_ns(w->ws, st0);
    sg_e5_workspace_set_par(w->ws, par);
    int rc = self->gpu != NULL
                 ? sg_local_gpu_encode(self->gpu, &w->gpu, self->model, self->prefix, w->texts, w->lens, n, w->vecs, err, err_size)
                 : sg_e5_encode(self->model, w->ws, self->prefix, w->texts, w->lens, n, self->max_length, w->vecs, err, err_size);
    uint64_t t1 = now_us();
    if (rc == 0) {
        if (self->gpu != NULL && self->gpu->flat != NULL)
            rc = sg_local_gpu_search(self->gpu, &w->gpu, n, w->vecs, (int)k, w->dist, w->labels, err, err_size);
        else if (self->have_flat && (par != NULL || self->omp_threads == 1)) /* FAISS only where OpenMP may split it */
            rc = sg_flatscan_search(&self->flat, par, n, w->vecs, (int)k, w->dist, w->labels, err, err_size);
        else if ((rc = search_batch(self, w, n, (int)k, err, err_size)) == 0 && self->index.metric != SG_FIDX_OTHER)
            sg_flatscan_canonical(self->index.metric, n, (int)k, w->dist, w->labels); /* the order flatscan gives */
    }
    sg_e5_workspace_set_par(w->ws, NULL);
    uint64_t t2 = now_us();
    atomic_fetch_add(&self->encode_us, t1 - t0);
    atomic_fetch_add(&self->search_us, t2 - t1);
    atomic_fetch_add(&self->tokens, sg_e5_workspace_tokens(w->ws) - tok0 + (w->gpu.tokens - gtok0));
    atomic_fetch_add(&self->padded_tokens, w->gpu.padded - gpad0);
    atomic_fetch_add(&self->sorted_batches, w->gpu.sorted_batches - sorted0);
    sg_e5_workspace_step_ns(w->ws, st1);
    for (int i = 0; i < SG_E5_STEPS; ++i)
        if (st1[i] != st0[i])
            atomic_fetch_add_explicit(&self->step_ns[i], st1[i] - st0[i], memory_order_relaxed);
    atomic_fetch_add(&self->batches, 1);
    atomic_fetch_add(&self->batch_queries, n);
    if (rc != 0) {
        atomic_fetch_add(&self->errors, 1);
        self->host->log(SG_LOG_ERROR, self->name, "batch of %zu queries failed: %s", n, err);
        return -1;
    }
    /* each (job, query) slot belongs to exactly one batch: no lock needed to fill it */
    for (size_t i = 0; i < n; ++i) {
        job_t *j = w->items[i].job;
        size_t tk = j->s->topk;
        memcpy(j->dist + w->items[i].q * tk, w->dist + i * k, tk * sizeof(float));
        memcpy(j->labels + w->items[i].q * tk, w->labels + i * k, tk * sizeof(int64_t));
    }
    return 0;
}

/* The queries in the backend (queued or running), averaged over the last ~100 ms: Little's law's
 * count of the clients that keep it busy. Called after each change of either (mu held). */
static void observe_load(struct sg_backend *self)
{
    uint64_t now = now_us();
    double w = (double)(now - self->in_system_us) / 100000.0; /* the level since the last change, for that long */
    self->in_system += (w < 1.0 ? w : 1.0) * ((double)self->in_system_level - self->in_system);
    self->in_system_us = now;
    self->in_system_level = self->queued + self->running;
}

/* How many queued queries a free worker waits for (at most max_wait_ms, from the oldest): a full
 * batch, unless the one query queued came into an empty backend while a single client keeps it
 * busy (fewer than 1.5 queries in it on average): nobody else is coming, and that query starts at
 * once instead of waiting out max_wait_ms. A query that arrived while another was queued or
 * running has company and waits as before. (A target that follows the mean load instead measured
 * worse: it splits closed-loop clients, whose answers leave together, into ever smaller batches;
 * see docs/backends/local.md.) (mu held) */
static size_t fill_target(const struct sg_backend *self)
{
    return self->queued == 1 && self->fifo_head->alone && self->in_system < 1.5 ? 1 : self->max_batch;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    struct sg_backend *self = w->self;
    omp_set_num_threads(self->omp_threads);
    pthread_mutex_lock(&self->mu);
    for (;;) {
        if (self->fin_head != NULL) {
            job_t *j = self->fin_head;
            self->fin_head = j->next;
            pthread_mutex_unlock(&self->mu);
            complete_search(self, j);
            pthread_mutex_lock(&self->mu);
            continue;
        }
        if (self->acc_head != NULL) {
            job_t *j = self->acc_head;
            self->acc_head = j->next;
            if (self->acc_head == NULL)
                self->acc_tail = &self->acc_head;
            all_unlink(self, j);
            pthread_mutex_unlock(&self->mu);
            run_access(self, j);
            job_free(j);
            pthread_mutex_lock(&self->mu);
            continue;
        }
        if (self->stopping)
            break;
        if (self->fifo_head == NULL && self->teams) {
            /* nothing queued: lend this core to a running batch, the one with the fewest helpers */
            sg_team_t *t = NULL;
            unsigned fewest = ~0u;
            for (size_t i = 0; i < self->n_workers; ++i) {
                unsigned m = atomic_load_explicit(&self->team[i].members, memory_order_relaxed);
                if (i != w->idx && sg_team_is_open(&self->team[i]) && m < fewest) {
                    t = &self->team[i];
                    fewest = m;
                }
            }
            if (t != NULL) {
                pthread_mutex_unlock(&self->mu);
                sg_team_help(t, w->idx, &self->no_leave);
                pthread_mutex_lock(&self->mu);
                continue;
            }
        }
        if (self->fifo_head == NULL) {
            pthread_cond_wait(&self->cv, &self->mu);
            continue;
        }
        uint64_t now = self->host->now_ms();
        if (self->queued < fill_target(self) && self->max_wait_ms > 0) {
            uint64_t due = self->fifo_head->enq_ms + self->max_wait_ms;
            if (now < due) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                uint64_t wait = due - now;
                ts.tv_sec += (time_t)(wait / 1000);
                ts.tv_nsec += (long)(wait % 1000) * 1000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec += 1;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&self->cv, &self->mu, &ts);
                continue;
            }
        }
        /* Teams: up to max_batch queries, the batch open to every worker (its steps cut for the
         * whole pool, so that helpers who come free later can join it; more rows per product per
         * core than many small batches). Without teams: this worker's share of the queue (queued /
         * free workers), so that in a closed loop (N clients each waiting for its answer) every
         * core gets a batch. */
        size_t limit = self->max_batch;
        if (!self->teams) {
            size_t idle = self->n_workers - self->busy; /* this one included */
            limit = (self->queued + idle - 1) / idle;
            if (limit > self->max_batch)
                limit = self->max_batch;
        }
        size_t n = take_batch(self, w, now, limit != 0 ? limit : 1);
        if (n == 0)
            continue;
        self->running += n;
        int team = self->teams && self->n_workers > 1;
        self->busy++;
        if (team) {
            sg_team_open(&self->team[w->idx], w->idx, (unsigned)self->n_workers);
            pthread_cond_broadcast(&self->cv);
        } else if (self->fifo_head != NULL) {
            pthread_cond_signal(&self->cv); /* the rest is for another worker */
        }
        pthread_mutex_unlock(&self->mu);
        char err[256];
        int failed = run_batch(self, w, n, team ? &self->team[w->idx].par : NULL, err, sizeof(err)) != 0;
        if (team) {
            sg_team_close(&self->team[w->idx]);
            atomic_fetch_add(&self->team_batches, 1);
        }
        pthread_mutex_lock(&self->mu);
        self->busy--;
        self->running -= n;
        observe_load(self);
        /* account per job; items of one job are contiguous */
        for (size_t i = 0; i < n;) {
            job_t *j = w->items[i].job;
            size_t c = 0;
            while (i < n && w->items[i].job == j) {
                ++c;
                ++i;
            }
            j->finished += c;
            if (failed && j->fail == SG_OK) {
                j->fail = SG_EINTERNAL;
                snprintf(j->fail_msg, sizeof(j->fail_msg), "local backend: %.180s", err);
                if (j->in_fifo)
                    fifo_remove(self, j);
            }
            if (j->finished == j->taken && (j->taken == j->n || j->fail != SG_OK)) {
                if (j->in_fifo)
                    fifo_remove(self, j);
                all_unlink(self, j);
                j->next = self->fin_head;
                self->fin_head = j;
            }
        }
        if (self->fin_head != NULL && self->fin_head->next != NULL)
            pthread_cond_signal(&self->cv); /* let an idle worker share the completions */
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

/* ---- vtable ---- */

/* "nprobe=32" / "efSearch=64" (comma-separated), as local_check_params writes them */
static void parse_params(const char *p, int *nprobe, int *ef_search)
{
    while (*p != '\0') {
        const char *eq = strchr(p, '=');
        if (eq == NULL)
            return;
        char *end;
        long v = strtol(eq + 1, &end, 10);
        if (v > 0 && v <= (1L << 24)) {
            if ((size_t)(eq - p) == 6 && memcmp(p, "nprobe", 6) == 0)
                *nprobe = (int)v;
            else if ((size_t)(eq - p) == 8 && memcmp(p, "efSearch", 8) == 0)
                *ef_search = (int)v;
        }
        p = *end == ',' ? end + 1 : end;
        if (*end != ',')
            return;
    }
}

static sg_status enqueue(struct sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data, int is_access)
{
    if (!is_access && s->topk > self->max_topk)
        return SG_ETOOBIG;
    job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return SG_ENOMEM;
    j->s = s;
    j->done = done;
    j->cb_data = cb_data;
    j->is_access = is_access;
    j->n = s->n_queries;
    j->enq_ms = self->host->now_ms();
    if (is_access && !self->have_pages) {
        j->fail = SG_EUNAVAIL;
        snprintf(j->fail_msg, sizeof(j->fail_msg), "this local backend has no pages file (config key \"pages\")");
    }
    if (!is_access && SG_SEARCH_HAS_PARAMS(s) && s->params != NULL)
        parse_params(s->params, &j->nprobe, &j->ef_search); /* the canonical text of local_check_params */
    if (!is_access) {
        j->dist = malloc(j->n * s->topk * sizeof(float) + 1);
        j->labels = malloc(j->n * s->topk * sizeof(int64_t) + 1);
        if (j->dist == NULL || j->labels == NULL) {
            job_free(j);
            return SG_ENOMEM;
        }
    }
    pthread_mutex_lock(&self->mu);
    if (self->stopping) {
        pthread_mutex_unlock(&self->mu);
        job_free(j);
        return SG_EUNAVAIL;
    }
    if (!is_access && self->queued > 0 && self->queued + j->n > self->max_queue) {
        pthread_mutex_unlock(&self->mu);
        job_free(j);
        atomic_fetch_add(&self->rejected, 1);
        return SG_EOVERLOAD;
    }
    all_link(self, j);
    if (is_access) {
        *self->acc_tail = j;
        self->acc_tail = &j->next;
        pthread_cond_signal(&self->cv);
    } else if (j->n == 0) {
        all_unlink(self, j);
        j->next = self->fin_head;
        self->fin_head = j;
        pthread_cond_signal(&self->cv);
    } else {
        j->alone = self->queued + self->running == 0;
        *self->fifo_tail = j;
        self->fifo_tail = &j->next;
        j->in_fifo = 1;
        size_t before = self->queued;
        self->queued += j->n;
        /* wake a worker when the queue was empty or a batch just filled up */
        if (before == 0 || (before < self->max_batch && self->queued >= self->max_batch))
            pthread_cond_broadcast(&self->cv);
        else
            pthread_cond_signal(&self->cv);
    }
    observe_load(self);
    pthread_mutex_unlock(&self->mu);
    atomic_fetch_add(is_access ? &self->access_calls : &self->calls, 1);
    atomic_fetch_add(&self->queries, s->n_queries);
    return SG_OK;
}

static sg_status local_search(struct sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 0);
}

static sg_status local_access(struct sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return enqueue(self, s, done, cb_data, 1);
}

/* The request field "search_params": {"nprobe": N} (IVF) or {"efSearch": N} (HNSW), each at most
 * the route's max_nprobe / max_ef_search. Canonical text: "nprobe=N"; "" when equal to the route's. */
static sg_status local_check_params(struct sg_backend *self, const char *json, size_t json_len, char *canon, size_t canon_size,
                                    char *detail, size_t detail_size)
{
    const sg_fext_info_t *info = &self->index.info;
    const char *takes = info->kind == SG_FEXT_IVF ? "nprobe" : info->kind == SG_FEXT_HNSW ? "efSearch" : NULL;
    cJSON *o = cJSON_ParseWithLength(json, json_len);
    sg_status st = SG_OK;
    int nprobe = 0, ef = 0;
    if (canon_size > 0)
        canon[0] = '\0';
    if (!cJSON_IsObject(o)) {
        snprintf(detail, detail_size, "field \"search_params\" must be an object, e.g. {\"%s\": 32}",
                 takes != NULL ? takes : "nprobe");
        st = SG_EINVAL;
        goto out;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, o)
    {
        const char *key = it->string != NULL ? it->string : "";
        if (cJSON_IsNull(it))
            continue;
        if (takes == NULL || strcmp(key, takes) != 0) {
            if (takes == NULL && info->kind == SG_FEXT_FLAT)
                snprintf(detail, detail_size,
                         "search_params.%.40s: the index of this route is exact (Flat) and takes no search parameters", key);
            else if (takes == NULL)
                snprintf(detail, detail_size, "search_params.%.40s: the index of this route (%s) takes no search parameters", key,
                         self->index.fourcc);
            else
                snprintf(detail, detail_size, "search_params.%.40s is not a search parameter of this route (it takes \"%s\")", key,
                         takes);
            st = SG_EINVAL;
            goto out;
        }
        int max = info->kind == SG_FEXT_IVF ? self->max_nprobe : self->max_ef_search;
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1) {
            snprintf(detail, detail_size, "search_params.%s must be a positive integer", key);
            st = SG_EINVAL;
            goto out;
        }
        if (it->valuedouble > max) {
            snprintf(detail, detail_size, "search_params.%s %.0f exceeds this route's limit of %d (config \"%s\")", key,
                     it->valuedouble, max, info->kind == SG_FEXT_IVF ? "max_nprobe" : "max_ef_search");
            st = SG_ETOOBIG;
            goto out;
        }
        if (info->kind == SG_FEXT_IVF)
            nprobe = (int)it->valuedouble;
        else
            ef = (int)it->valuedouble;
    }
    if (nprobe != 0 && nprobe != self->nprobe)
        snprintf(canon, canon_size, "nprobe=%d", nprobe);
    else if (ef != 0 && ef != self->ef_search)
        snprintf(canon, canon_size, "efSearch=%d", ef);
out:
    cJSON_Delete(o);
    return st;
}

static void local_cancel(struct sg_backend *self, void *cb_data)
{
    pthread_mutex_lock(&self->mu);
    for (job_t *j = self->all; j != NULL; j = j->all_next) {
        if (j->cb_data != cb_data || j->is_access)
            continue;
        if (j->fail == SG_OK) {
            j->fail = SG_ECANCELED;
            snprintf(j->fail_msg, sizeof(j->fail_msg), "cancelled");
            atomic_fetch_add(&self->canceled, 1);
        }
        retire_if_idle(self, j);
        pthread_cond_signal(&self->cv);
        break;
    }
    pthread_mutex_unlock(&self->mu);
}

static sg_status local_health(struct sg_backend *self, char *detail, size_t n)
{
    if (n > 0)
        detail[0] = '\0';
    /* the CPU path has no state that can break; a GPU can (a sticky CUDA error) */
    return self->gpu != NULL ? sg_local_gpu_health(self->gpu, detail, n) : SG_OK;
}

/* local_encoder_info's labels: precision, engine, kernel, weight bits, and what decided them */
static void encoder_labels(const struct sg_backend *self, char *out, size_t size)
{
    const sg_e5_model *m = self->model;
    int prec = sg_e5_precision(m), kern = sg_e5_kernel(m);
    const char *precision = prec == SG_E5_INT8 ? "int8" : prec == SG_E5_BF16 ? "bf16" : "fp32";
    const char *engine = kern == SG_E5_INT8_ONEDNN || prec == SG_E5_BF16 || self->encoder_onednn ? "onednn"
                         : kern == SG_KERN_NONE                                                  ? "openblas"
                                                                                                 : "own";
    const char *kname = kern == SG_E5_INT8_ONEDNN ? "onednn" : sg_kern_name(kern);
    int bits = prec == SG_E5_INT8 ? (strstr(sg_e5_identity(m), ".int8w7") != NULL ? 7 : 8) : prec == SG_E5_BF16 ? 16 : 32;
    snprintf(out, size, "precision=\"%s\",engine=\"%s\",kernel=\"%s\",weight_bits=\"%d\",why=\"%s\"", precision, engine, kname,
             bits, self->encoder_why[0] != '\0' ? self->encoder_why : "default");
}

static void local_stats(struct sg_backend *self, void *sink)
{
    const sg_host_api *h = self->host;
#define C(name, help, v) h->metric(sink, name, help, SG_METRIC_COUNTER, NULL, (double)atomic_load(&self->v))
    C("local_calls_total", "search() calls received by the local backend.", calls);
    C("local_queries_total", "Queries received by the local backend (search and access).", queries);
    C("local_batches_total", "Encoder + FAISS batches run.", batches);
    C("local_batch_queries_total", "Queries in those batches (divide by local_batches_total for the mean batch size).",
      batch_queries);
    C("local_rejected_total", "search() calls refused because the queue was full (503).", rejected);
    C("local_canceled_total", "Searches cancelled by the gateway.", canceled);
    C("local_timed_out_total", "Searches whose deadline passed while queued.", timed_out);
    C("local_errors_total", "Batches that failed.", errors);
    C("local_access_calls_total", "access() calls received.", access_calls);
    C("local_access_hits_total", "URLs found by access().", access_hits);
    C("local_team_batches_total", "Batches run with idle workers helping (\"teams\").", team_batches);
#undef C
    double helped = 0;
    for (size_t i = 0; i < self->n_workers && self->team != NULL; ++i)
        helped += (double)atomic_load(&self->team[i].helped_tasks);
    h->metric(sink, "local_team_helped_tasks_total", "Tasks of team batches that helping workers ran.", SG_METRIC_COUNTER, NULL,
              helped);
    double helper_ns = 0;
    for (size_t i = 0; i < self->n_workers && self->team != NULL; ++i)
        helper_ns += (double)atomic_load(&self->team[i].helper_ns);
    h->metric(sink, "local_team_helper_seconds_total", "Time helping workers spent taking and running tasks of team batches.",
              SG_METRIC_COUNTER, NULL, helper_ns / 1e9);
    for (int i = 0; i < SG_E5_STEPS; ++i) {
        char l[32];
        snprintf(l, sizeof(l), "step=\"%s\"", sg_e5_step_name(i));
        h->metric(sink, "local_encode_step_seconds_total",
                  "Time the encoder spent in each step, on the thread running the batch, summed over batches.", SG_METRIC_COUNTER,
                  l, (double)atomic_load(&self->step_ns[i]) / 1e9);
    }
    h->metric(sink, "local_encode_seconds_total", "Time spent encoding queries, summed over workers.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->encode_us) / 1e6);
    h->metric(sink, "local_search_seconds_total", "Time spent in FAISS searches, summed over workers.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->search_us) / 1e6);
    pthread_mutex_lock(&self->mu);
    double queued = (double)self->queued;
    pthread_mutex_unlock(&self->mu);
    h->metric(sink, "local_queued_queries", "Queries waiting for a batch.", SG_METRIC_GAUGE, NULL, queued);
    h->metric(sink, "local_workers", "Worker threads.", SG_METRIC_GAUGE, NULL, (double)self->n_workers);
    if (self->have_flat) {
        char l[48];
        snprintf(l, sizeof(l), "kernel=\"%s\"", sg_flatscan_kernel_name(self->flat.kernel));
        h->metric(sink, "local_flat_scan_kernel", "1, labelled with the kernel that scans a flat index (avx2 or sgemm).",
                  SG_METRIC_GAUGE, l, 1.0);
    }
    h->metric(sink, "local_encoder_onednn", "1 when the CPU encoder's float32 products run through oneDNN (\"encoder_blas\").",
              SG_METRIC_GAUGE, NULL, self->encoder_onednn ? 1.0 : 0.0);
    h->metric(sink, "local_bf16", "1 when the CPU encoder runs its linear layers in bf16 (\"precision\").", SG_METRIC_GAUGE, NULL,
              sg_e5_precision(self->model) == SG_E5_BF16 ? 1.0 : 0.0);
    h->metric(sink, "local_int8", "1 when the CPU encoder runs its linear layers in int8 (\"precision\").", SG_METRIC_GAUGE, NULL,
              self->gpu == NULL && sg_e5_precision(self->model) == SG_E5_INT8 ? 1.0 : 0.0);
    if (self->gpu == NULL) {
        char l[200];
        encoder_labels(self, l, sizeof(l));
        h->metric(sink, "local_encoder_info",
                  "1, labelled with what runs the CPU encoder's linear layers: precision, engine, kernel set, weight bits and the "
                  "CPU feature or setting that decided it.",
                  SG_METRIC_GAUGE, l, 1.0);
    }
    h->metric(sink, "local_tokens_total",
              "Tokens the encoder computed (padding included; divide by local_batches_total per batch).", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->tokens));
    h->metric(sink, "local_padded_tokens_total",
              "Padding among local_tokens_total: 0 on the CPU (sequences are packed), the padding of each GPU pass.",
              SG_METRIC_COUNTER, NULL, (double)atomic_load(&self->padded_tokens));
    h->metric(sink, "local_length_sorted_batches_total",
              "GPU batches encoded in length order, because their passes then padded fewer tokens.", SG_METRIC_COUNTER, NULL,
              (double)atomic_load(&self->sorted_batches));
    h->metric(sink, "local_gpus", "GPUs the encoder runs on (0: the CPU).", SG_METRIC_GAUGE, NULL,
              self->gpu != NULL ? (double)self->gpu->n : 0.0);
    h->metric(sink, "local_gpu_index", "1 when the index is searched on the GPUs.", SG_METRIC_GAUGE, NULL,
              self->gpu != NULL && self->gpu->flat != NULL ? 1.0 : 0.0);
    h->metric(sink, "local_index_vectors", "Vectors in the FAISS index.", SG_METRIC_GAUGE, NULL, (double)self->index.ntotal);
    h->metric(sink, "local_corpus_rows", "Rows of the corpus.", SG_METRIC_GAUGE, NULL, (double)self->corpus.n_rows);
}

static const char *local_identity(struct sg_backend *self)
{
    return self->identity;
}

static void local_destroy(struct sg_backend *self)
{
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    for (size_t i = 0; i < self->n_workers && self->workers != NULL; ++i) {
        worker_t *w = &self->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        sg_e5_workspace_free(w->ws);
        free(w->items);
        free(w->texts);
        free(w->lens);
        free(w->vecs);
        free(w->dist);
        free(w->labels);
        if (self->gpu != NULL)
            sg_local_gpu_worker_free(self->gpu, &w->gpu);
    }
    free(self->workers);
    free(self->team);
    /* whatever is left completes with SG_ECANCELED (no worker runs any more) */
    while (self->fin_head != NULL) {
        job_t *j = self->fin_head;
        self->fin_head = j->next;
        complete_search(self, j);
    }
    while (self->all != NULL) {
        job_t *j = self->all;
        all_unlink(self, j);
        if (j->fail == SG_OK || j->fail == SG_ECANCELED) {
            j->fail = SG_ECANCELED;
            snprintf(j->fail_msg, sizeof(j->fail_msg), "the backend is shutting down");
        }
        if (j->is_access) {
            run_access(self, j);
            job_free(j);
        } else {
            complete_search(self, j);
        }
    }
    sg_fidx_close(&self->index);
    sg_imeta_free(&self->meta);
    sg_local_gpu_close(self->gpu);
    sg_jsonl_close(&self->corpus);
    if (self->have_pages)
        sg_jsonl_close(&self->pages);
    sg_e5_free(self->model);
    free(self->prefix);
    free(self->name);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    free(self);
}

static void log_store(struct sg_backend *self, const char *what, const sg_jsonl_t *j)
{
    if (j->side_note[0] != '\0')
        self->host->log(SG_LOG_WARN, self->name, "%s: row offsets kept in memory only (%s); they are rebuilt at every start", what,
                        j->side_note);
    self->host->log(SG_LOG_INFO, self->name, "%s %s: %llu rows, offsets %s %s", what, j->path, (unsigned long long)j->n_rows,
                    j->side_reused ? "reused from" : (j->side_malloced ? "built (in memory)" : "built into"),
                    j->side_malloced ? "" : j->side_path);
}

/* The CPU as this backend's decisions see it: its features, restricted by SG_CPU_FEATURES (an
 * invalid list was refused at start-up, blas.h, so here it only ever restricts). */
static void cpu_seen(sg_cpu_t *cpu)
{
    sg_cpu_read(cpu);
    const char *mask = getenv("SG_CPU_FEATURES");
    char why[512];
    if (mask != NULL)
        sg_cpu_restrict(cpu, mask, why, sizeof(why));
}

/* "precision": "bf16" or "auto" (docs/backends/local.md, "bf16"). Returns -1 with `err` set only
 * when bf16 was asked for and cannot run. */
static int set_precision(struct sg_backend *self, int precision, char *err, size_t err_size)
{
    const char *want = precision == 1 ? "bf16" : "auto";
    if (self->gpu != NULL) {
        self->host->log(SG_LOG_INFO, self->name, "precision %s: not used, the encoder runs on the GPUs (fp16)", want);
        return 0;
    }
    sg_cpu_t cpu;
    cpu_seen(&cpu);
    char why[600];
    int ok = 0;
    if (!sg_cpu_has_bf16(&cpu)) {
        char feats[200];
        sg_cpu_describe(cpu.features, feats, sizeof(feats));
        snprintf(why, sizeof(why), "this CPU (%s family %u model %u) has neither AVX512_BF16 nor AMX-BF16 (features: %s)",
                 cpu.vendor, cpu.family, cpu.model, feats);
    } else if (sg_e5_set_precision(self->model, SG_E5_BF16, why, sizeof(why)) == 0) {
        ok = 1;
    }
    if (ok) {
        snprintf(self->encoder_why, sizeof(self->encoder_why), "%s", sg_cpu_has_bf16(&cpu) ? "bf16_cpu" : "precision");
        self->host->log(SG_LOG_INFO, self->name,
                        "precision %s: the encoder's linear layers run in bf16 through oneDNN (float32 accumulation)", want);
        return 0;
    }
    if (precision == 1) {
        snprintf(err, err_size,
                 "config.precision: \"bf16\" cannot run here: %s (use \"fp32\", or \"auto\" for bf16 only where it runs)", why);
        return -1;
    }
    self->host->log(SG_LOG_INFO, self->name, "precision auto: float32, because %s", why);
    return 0;
}

/* The bytes the linear layers' weights take at `bytes` a weight. */
static double weight_mib(const sg_e5_model *m, double bytes)
{
    const sg_e5_config *c = sg_e5_get_config(m);
    double per_layer = 4.0 * c->hidden * c->hidden + 2.0 * c->hidden * c->intermediate;
    return per_layer * c->layers * bytes / (1024.0 * 1024.0);
}

enum { ENGINE_AUTO = 0, ENGINE_OPENBLAS = 1, ENGINE_ONEDNN = 2, ENGINE_OWN = 3 };

/* "precision": "int8" (docs/backends/local.md, "int8"): the own kernels (AVX512-VNNI, AVX2 with 7-bit
 * weights, or C), also on AMX-INT8 CPUs, where they served 1.3-1.8x the queries/s of oneDNN's int8 GEMM
 * in the gateway (16-vCPU Xeon, run_bench.sh --int8-blas auto,own); oneDNN's only for "encoder_blas":
 * "onednn". Returns -1 with `err` set when int8 cannot run as configured. */
static int set_int8(struct sg_backend *self, int engine, char *err, size_t err_size)
{
    if (self->gpu != NULL) {
        self->host->log(SG_LOG_INFO, self->name, "precision int8: not used, the encoder runs on the GPUs (fp16)");
        return 0;
    }
    if (engine == ENGINE_OPENBLAS) {
        snprintf(err, err_size,
                 "config.encoder_blas: \"openblas\" has no int8 products; with \"precision\": \"int8\" use "
                 "\"auto\", \"own\" or \"onednn\"");
        return -1;
    }
    sg_cpu_t cpu;
    cpu_seen(&cpu);
    char why[600], feats[200], reason[400];
    sg_cpu_describe(cpu.features, feats, sizeof(feats));
    if (sg_e5_set_calibration_prefix(self->model, self->prefix) != 0) { /* the centres see what every query starts with */
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    if (engine == ENGINE_ONEDNN) {
        if (sg_e5_set_int8(self->model, SG_E5_INT8_ONEDNN, 8, why, sizeof(why)) != 0) {
            snprintf(err, err_size, "config.encoder_blas: \"onednn\" cannot run int8 here: %s", why);
            return -1;
        }
        snprintf(reason, sizeof(reason), "\"encoder_blas\": \"onednn\" asks for oneDNN's int8 GEMM");
        snprintf(self->encoder_why, sizeof(self->encoder_why), "encoder_blas");
        goto done;
    }
    int kern = sg_kern_q8_best(cpu.features), bits = kern == SG_KERN_AVX2 ? 7 : 8;
    if (kern == SG_KERN_VNNI)
        snprintf(reason, sizeof(reason), "the CPU has AVX512-VNNI: own kernels, vpdpbusd on 64-byte vectors, 8-bit weights%s",
                 (cpu.features & (SG_CPU_AMX_TILE | SG_CPU_AMX_INT8)) == (SG_CPU_AMX_TILE | SG_CPU_AMX_INT8)
                     ? " (also on this AMX-INT8 CPU: in the gateway they beat oneDNN's AMX int8 GEMM, which \"encoder_blas\": "
                       "\"onednn\" selects)"
                     : "");
    else if (kern == SG_KERN_AVX2)
        snprintf(reason, sizeof(reason),
                 "the CPU has AVX2 but not AVX512-VNNI: own kernels with 7-bit weights (|q| <= 63), so vpmaddubsw's 16-bit pair "
                 "sums never saturate (2 x 255 x 63 = 32130 < 32767)");
    else
        snprintf(reason, sizeof(reason), "the CPU has no AVX2: plain C kernels, slower than float32 through OpenBLAS here");
    snprintf(self->encoder_why, sizeof(self->encoder_why), "%s",
             kern == SG_KERN_VNNI   ? "avx512_vnni"
             : kern == SG_KERN_AVX2 ? "avx2_no_vnni"
                                    : "no_avx2");
    if (sg_e5_set_int8(self->model, kern, bits, why, sizeof(why)) != 0) {
        snprintf(err, err_size, "config.precision: \"int8\": %s", why);
        return -1;
    }
done:;
    char desc[200];
    self->host->log(SG_LOG_INFO, self->name,
                    "precision int8: the encoder's linear layers run in %s (per-channel weights, %.0f MiB; per-token 8-bit "
                    "activations, int32 sums, float32 elsewhere), because %s (features: %s); cache identity suffix %s",
                    sg_e5_engine(self->model, desc, sizeof(desc)), weight_mib(self->model, 1.0), reason, feats,
                    strrchr(sg_e5_identity(self->model), '.'));
    if (sg_e5_kernel(self->model) == SG_KERN_SCALAR)
        self->host->log(SG_LOG_WARN, self->name, "precision int8 on a CPU without AVX2 is slower than \"fp32\"");
    return 0;
}

/* The flat scan's kernel (flatscan.h) from the CPU's features, SG_CPU_FEATURES applied. */
static void pick_scan_kernel(struct sg_backend *self)
{
    sg_cpu_t cpu;
    cpu_seen(&cpu);
    self->flat.kernel = sg_flatscan_pick(cpu.features, self->flat.dim);
    self->host->log(SG_LOG_INFO, self->name, "flat scan: %s",
                    self->flat.kernel == SG_FLATSCAN_AVX512 ? "AVX-512 kernel in place (the CPU has AVX-512 F and DQ)"
                    : self->flat.kernel == SG_FLATSCAN_AVX2
                        ? "AVX2 kernel in place (the CPU has AVX2 and FMA)"
                        : "sgemm blocks (no AVX2 and FMA, or the dimension is not a multiple of 8)");
}

/* "encoder_blas": what runs the float32 encoder's products. "auto": the own kernels over weights
 * packed at start-up on CPUs with AVX2 + FMA (AVX-512 where present), OpenBLAS elsewhere. */
static int set_encoder_blas(struct sg_backend *self, int engine, char *err, size_t err_size)
{
    char why[512], feats[200];
    if (engine == ENGINE_OPENBLAS) {
        snprintf(self->encoder_why, sizeof(self->encoder_why), "encoder_blas");
        self->host->log(SG_LOG_INFO, self->name, "encoder_blas openblas: the encoder's float32 products run through OpenBLAS");
        return 0;
    }
    if (engine == ENGINE_ONEDNN) {
        if (sg_e5_use_onednn(self->model, why, sizeof(why)) != 0) {
            snprintf(err, err_size, "config.encoder_blas: \"onednn\": %s", why);
            return -1;
        }
        self->encoder_onednn = 1;
        snprintf(self->encoder_why, sizeof(self->encoder_why), "encoder_blas");
        self->host->log(SG_LOG_INFO, self->name, "encoder_blas onednn: the encoder's float32 products run through oneDNN");
        return 0;
    }
    uint32_t f = sg_e5_features(self->model);
    sg_cpu_describe(f, feats, sizeof(feats));
    int kern = sg_kern_f32_best(f);
    if (kern == SG_KERN_NONE) {
        if (engine == ENGINE_OWN) {
            snprintf(err, err_size, "config.encoder_blas: \"own\": the own kernels need AVX2 and FMA (features: %s)", feats);
            return -1;
        }
        snprintf(self->encoder_why, sizeof(self->encoder_why), "no_avx2");
        self->host->log(SG_LOG_INFO, self->name, "encoder_blas auto: OpenBLAS, because the CPU has no AVX2 + FMA (features: %s)",
                        feats);
        return 0;
    }
    if (sg_e5_use_kernels(self->model, kern, why, sizeof(why)) != 0) {
        snprintf(err, err_size, "config.encoder_blas: %s", why);
        return -1;
    }
    snprintf(self->encoder_why, sizeof(self->encoder_why), "%s",
             engine == ENGINE_OWN     ? "encoder_blas"
             : kern == SG_KERN_AVX512 ? "avx512"
                                      : "avx2_fma");
    self->host->log(SG_LOG_INFO, self->name,
                    "encoder_blas %s: the encoder's float32 products run on the own %s kernels over weights packed at start-up "
                    "(%.0f MiB; bias, GELU and LayerNorm fused; one copy shared by every worker) (features: %s)",
                    engine == ENGINE_OWN ? "own" : "auto", sg_kern_name(kern), weight_mib(self->model, 4.0), feats);
    return 0;
}

/* Resident memory of this process from /proc/self/status, in bytes (0 when unknown). */
typedef struct st_mem_t {
    uint64_t anon, file, peak;
} mem_t;

static mem_t mem_now(void)
{
    mem_t m = {0, 0, 0};
    FILE *fp = fopen("/proc/self/status", "r");
    if (fp == NULL)
        return m;
    char line[256];
    while (fgets(line, sizeof(line), fp) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
            m.anon = kb * 1024;
        else if (sscanf(line, "RssFile: %llu kB", &kb) == 1)
            m.file = kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            m.peak = kb * 1024;
    }
    fclose(fp);
    return m;
}

static const char *mib(uint64_t b, char *buf, size_t size)
{
    return sg_gpu_fmt_bytes(b, buf, size);
}

/* ---- the config (docs/backends/local.md, "config keys"; checked by tests/lint/test_config_docs.py) ---- */

typedef struct st_local_conf_t {
    char *model, *index, *corpus, *pages, *cache_dir, *prefix, *params, *rerank_index;
    uint32_t max_length, max_topk, max_wait_ms;
    size_t workers, max_batch, max_queue;
    int blas_threshold, omp_threads, teams, precision, engine;
    int nprobe, max_nprobe, ef_search, max_ef_search, rerank; /* -1: not set (the index or convert decides) */
    int max_batch_set, max_topk_set;                          /* given: the GPU defaults do not apply */
    sg_local_gpu_cfg_t gpu;
} local_conf_t;

static const char *const local_precisions[] = {"fp32", "bf16", "auto", "int8", NULL};
static const char *const local_engines[] = {"auto", "openblas", "onednn", "own", NULL};

static const sg_cfg_key_t local_config[] = {
    SG_CFG_PATH(local_conf_t, model, "model", 1),
    SG_CFG_PATH(local_conf_t, index, "index", 1),
    SG_CFG_PATH(local_conf_t, corpus, "corpus", 1),
    SG_CFG_PATH(local_conf_t, pages, "pages", 0),
    SG_CFG_PATH(local_conf_t, cache_dir, "cache_dir", 0),
    SG_CFG_STRING(local_conf_t, prefix, "query_prefix", 0, "query: "),
    SG_CFG_INT(local_conf_t, max_length, "max_length", 2, 8192, 256),
    SG_CFG_INT(local_conf_t, max_topk, "max_topk", 1, 100000, 1000),
    SG_CFG_INT(local_conf_t, workers, "workers", 0, 256, 0),
    SG_CFG_INT(local_conf_t, max_batch, "max_batch", 1, 4096, 32),
    SG_CFG_INT(local_conf_t, max_wait_ms, "max_wait_ms", 0, 10000, 2),
    SG_CFG_INT(local_conf_t, max_queue, "max_queue", 1, 100000000, 8192),
    SG_CFG_STRING(local_conf_t, params, "faiss_params", 0, ""),
    SG_CFG_INT(local_conf_t, blas_threshold, "blas_threshold", 1, 1000000, 1),
    SG_CFG_INT(local_conf_t, omp_threads, "omp_threads", 1, 256, 1),
    SG_LOCAL_GPU_KEYS(local_conf_t, gpu),
    SG_CFG_BOOL(local_conf_t, teams, "teams", 1),
    SG_CFG_ENUM(local_conf_t, precision, "precision", local_precisions, 0),
    SG_CFG_ENUM(local_conf_t, engine, "encoder_blas", local_engines, 0),
    SG_CFG_INT(local_conf_t, nprobe, "nprobe", 1, 16777216, -1),
    SG_CFG_INT(local_conf_t, max_nprobe, "max_nprobe", 1, 16777216, -1),
    SG_CFG_INT(local_conf_t, ef_search, "ef_search", 1, 16777216, -1),
    SG_CFG_INT(local_conf_t, max_ef_search, "max_ef_search", 1, 16777216, -1),
    SG_CFG_INT(local_conf_t, rerank, "rerank", 0, 64, -1),
    SG_CFG_PATH(local_conf_t, rerank_index, "rerank_index", 0),
};

/* The table, then what it cannot say: the GPU list, whether the GPU defaults apply, cache_dir. */
static int read_config(sg_cfg_t *c, const cJSON *root, const char *base_dir, local_conf_t *cf)
{
    if (sg_cfg_read(c, root, local_config, SG_CFG_N(local_config), base_dir, cf) != 0 ||
        sg_local_gpu_read_ids(c, root, &cf->gpu) != 0)
        return -1;
    cf->max_batch_set = sg_cfg_present(root, "max_batch");
    cf->max_topk_set = sg_cfg_present(root, "max_topk");
    if (cf->cache_dir != NULL && mkdir(cf->cache_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(c->err, c->err_size, "config.cache_dir: cannot create %s: %s", cf->cache_dir, strerror(errno));
        return -1;
    }
    return 0;
}

static void local_conf_free(local_conf_t *cf)
{
    free(cf->model);
    free(cf->index);
    free(cf->corpus);
    free(cf->pages);
    free(cf->cache_dir);
    free(cf->prefix);
    free(cf->params);
    free(cf->rerank_index);
    sg_local_gpu_cfg_free(&cf->gpu);
}

/* nprobe / ef_search / max_* / rerank / rerank_index, once the index is open: the config, else
 * faiss_params, else what convert recommended (INDEX.sgmeta), else the index file's own. */
static int setup_search(struct sg_backend *self, const local_conf_t *cf, char *err, size_t err_size)
{
    const sg_fext_info_t *info = &self->index.info;
    const char *index = cf->index, *params = cf->params;
    const char *inst = self->name;
    char why[600];
    int mr = sg_imeta_load(index, self->index.file_size, self->index.file_hash, &self->meta, why, sizeof(why));
    if (mr < 0)
        self->host->log(SG_LOG_WARN, inst, "%s", why);
    int v = cf->nprobe, vmax = cf->max_nprobe;
    if (info->kind != SG_FEXT_IVF && (v > 0 || vmax > 0)) {
        snprintf(err, err_size, "config.%s: %s is not an IVF index (it has no nprobe)", v > 0 ? "nprobe" : "max_nprobe", index);
        return -1;
    }
    const char *src = NULL;
    if (info->kind == SG_FEXT_IVF) {
        if (v > 0) {
            self->nprobe = v, src = "config";
        } else if (params != NULL && strstr(params, "nprobe") != NULL) {
            self->nprobe = info->nprobe, src = "faiss_params";
        } else if (self->meta.present && strcmp(self->meta.param, "nprobe") == 0 && self->meta.rec_value > 0) {
            self->nprobe = self->meta.rec_value, src = "recommended by searchgate-index convert";
        } else {
            self->nprobe = info->nprobe > 0 ? info->nprobe : 1, src = "the index file's own";
        }
        if (self->nprobe > info->nlist) {
            snprintf(err, err_size, "config.nprobe: %d exceeds the %lld inverted lists of %s", self->nprobe, (long long)info->nlist,
                     index);
            return -1;
        }
        self->max_nprobe = vmax > 0 ? vmax : self->nprobe;
        if (self->max_nprobe < self->nprobe) {
            snprintf(err, err_size, "config.max_nprobe: %d is below the route's nprobe %d", self->max_nprobe, self->nprobe);
            return -1;
        }
    }
    v = cf->ef_search, vmax = cf->max_ef_search;
    if (info->kind != SG_FEXT_HNSW && (v > 0 || vmax > 0)) {
        snprintf(err, err_size, "config.%s: %s is not an HNSW index (it has no efSearch)", v > 0 ? "ef_search" : "max_ef_search",
                 index);
        return -1;
    }
    if (info->kind == SG_FEXT_HNSW) {
        if (v > 0) {
            self->ef_search = v, src = "config";
        } else if (params != NULL && strstr(params, "efSearch") != NULL) {
            self->ef_search = info->ef_search, src = "faiss_params";
        } else if (self->meta.present && strcmp(self->meta.param, "efSearch") == 0 && self->meta.rec_value > 0) {
            self->ef_search = self->meta.rec_value, src = "recommended by searchgate-index convert";
        } else {
            self->ef_search = info->ef_search > 0 ? info->ef_search : 16, src = "the index file's own";
        }
        self->max_ef_search = vmax > 0 ? vmax : self->ef_search;
        if (self->max_ef_search < self->ef_search) {
            snprintf(err, err_size, "config.max_ef_search: %d is below the route's ef_search %d", self->max_ef_search,
                     self->ef_search);
            return -1;
        }
        /* FAISS 1.7.3 sizes the candidate queue from the index's own efSearch (faiss_ext.h) */
        sg_fext_set_ef_search(self->index.index, self->max_ef_search);
    }
    /* re-ranking */
    int rr_from_meta = cf->rerank < 0 && self->meta.present && self->meta.rerank > 0;
    self->rerank = rr_from_meta ? self->meta.rerank : cf->rerank > 0 ? cf->rerank : 0;
    char *rpath = cf->rerank_index != NULL ? strdup(cf->rerank_index) : NULL;
    if (self->rerank > 0 && info->kind == SG_FEXT_FLAT) {
        snprintf(err, err_size, "config.rerank: %s is a Flat index: its scores are exact already", index);
        free(rpath);
        return -1;
    }
    if (self->rerank == 0 && rpath != NULL) {
        snprintf(err, err_size, "config.rerank_index: set without \"rerank\" (the number of candidates per hit to re-score)");
        free(rpath);
        return -1;
    }
    if (self->rerank > 0) {
        if (rpath == NULL && self->meta.source[0] != '\0')
            rpath = strdup(self->meta.source);
        if (rpath == NULL) {
            snprintf(err, err_size, "config.rerank: needs \"rerank_index\", the Flat index whose vectors re-score the candidates");
            return -1;
        }
        char e2[600];
        if (sg_fidx_open_rerank(&self->index, rpath, e2, sizeof(e2)) != 0) {
            snprintf(err, err_size, "config.rerank_index: %s%s", e2,
                     rr_from_meta ? " (re-ranking x%d comes from the convert side file; set \"rerank\": 0 to serve without it)"
                                  : "");
            if (rr_from_meta) {
                size_t l = strlen(err);
                snprintf(err + l, err_size - l, " [%s]", self->meta.path);
            }
            free(rpath);
            return -1;
        }
    }
    /* the log */
    char line[1400];
    if (info->kind == SG_FEXT_IVF)
        snprintf(line, sizeof(line),
                 "search: nprobe %d (%s) of %lld lists; per request (\"search_params\": {\"nprobe\": N}) up to %d", self->nprobe,
                 src, (long long)info->nlist, self->max_nprobe);
    else if (info->kind == SG_FEXT_HNSW)
        snprintf(line, sizeof(line), "search: efSearch %d (%s); per request (\"search_params\": {\"efSearch\": N}) up to %d",
                 self->ef_search, src, self->max_ef_search);
    else
        snprintf(line, sizeof(line), "search: %s", info->kind == SG_FEXT_FLAT ? "exact (Flat)" : "the index's own parameters");
    if (self->rerank > 0) {
        size_t l = strlen(line);
        snprintf(line + l, sizeof(line) - l, "; re-ranking: topk x %d candidates re-scored exactly from %s (mapped)%s",
                 self->rerank, rpath, rr_from_meta ? " as convert planned" : "");
    }
    self->host->log(SG_LOG_INFO, inst, "%s", line);
    free(rpath);
    if (info->kind == SG_FEXT_FLAT && self->rerank == 0) {
        /* exact: nothing to expect */
    } else if (self->meta.present) {
        sg_imeta_expected(&self->meta, info->kind == SG_FEXT_IVF ? self->nprobe : self->ef_search, self->rerank, line,
                          sizeof(line));
        self->host->log(SG_LOG_INFO, inst, "expected recall against exact search: %s (%s)", line, self->meta.path);
    } else {
        self->host->log(SG_LOG_INFO, inst,
                        "expected recall: unknown (no %s.sgmeta; `searchgate-index convert` measures it when it builds an index)",
                        index);
    }
    return 0;
}

/* The model and the device: the encoder on the CPU or the GPUs and, on GPUs, a Flat index
 * (*gpu_index set). The GPU path has its own defaults for workers, max_batch and max_topk. */
static int load_model(struct sg_backend *self, const local_conf_t *cf, const void *anchor, int *gpu_index, char *err,
                      size_t err_size)
{
    const sg_host_api *host = self->host;
    char e2[768];
    if (sg_e5_load(cf->model, &self->model, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.model: %s", e2);
        return -1;
    }
    uint32_t capped = sg_e5_max_length(self->model, self->max_length);
    if (capped != self->max_length) {
        host->log(SG_LOG_WARN, self->name, "max_length %u exceeds the model's max_position_embeddings; using %u", self->max_length,
                  capped);
        self->max_length = capped;
    }
    /* the device (gpu.c): NULL means the CPU, and then nothing below differs from a CPU-only build */
    if (sg_local_gpu_open(&cf->gpu, host, self->name, anchor, &self->gpu, err, err_size) != 0)
        return -1;
    if (cf->precision == 3 ? set_int8(self, cf->engine, err, err_size) != 0
                           : cf->precision != 0 && set_precision(self, cf->precision, err, err_size) != 0)
        return -1;
    if (self->gpu == NULL && sg_e5_precision(self->model) == SG_E5_FP32 && set_encoder_blas(self, cf->engine, err, err_size) != 0)
        return -1;
    *gpu_index = 0;
    if (self->gpu == NULL)
        return 0;
    if (self->n_workers_cfg == 0)
        self->n_workers = (size_t)(2 * self->gpu->n); /* two per GPU: one encodes while the other does host work */
    if (!cf->max_batch_set)
        self->max_batch = 512;
    if (!cf->max_topk_set)
        self->max_topk = 100; /* a GPU index's candidate buffers grow with it (gpu.md) */
    if (sg_local_gpu_load_encoder(self->gpu, self->model, self->max_length, cf->gpu.max_tokens, (uint32_t)self->max_batch, err,
                                  err_size) != 0)
        return -1;
    if ((*gpu_index = sg_local_gpu_load_index(self->gpu, cf->gpu.flat, cf->index, cf->params, (uint32_t)self->max_batch,
                                              self->max_topk, &self->index, err, err_size)) < 0)
        return -1;
    uint32_t gk = sg_local_gpu_max_topk(self->gpu);
    if (*gpu_index && gk < self->max_topk) {
        host->log(SG_LOG_WARN, self->name, "max_topk %u is more than a GPU search returns; using %u", self->max_topk, gk);
        self->max_topk = gk;
    }
    return 0;
}

/* The index (unless on the GPUs already) and its search parameters. */
static int open_index(struct sg_backend *self, const local_conf_t *cf, int gpu_index, char *err, size_t err_size)
{
    const sg_host_api *host = self->host;
    const char *index = cf->index, *params = cf->params;
    char e2[768];
    mem_t m0 = mem_now();
    uint64_t ti = host->now_ms();
    if (!gpu_index && sg_fidx_open(index, params, &self->index, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.index: %s", e2);
        return -1;
    }
    ti = host->now_ms() - ti;
    mem_t m1 = mem_now();
    if (self->index.dim != sg_e5_dim(self->model)) {
        snprintf(err, err_size, "config.index: %s has dimension %d but the model %s encodes %d", index, self->index.dim, cf->model,
                 sg_e5_dim(self->model));
        return -1;
    }
    sg_fidx_set_blas_threshold(cf->blas_threshold);
    if (!gpu_index)
        self->have_flat = sg_flatscan_init(&self->flat, &self->index) == 0;
    if (self->have_flat)
        pick_scan_kernel(self);
    char desc[160], b1[32], b2[32];
    host->log(SG_LOG_INFO, self->name,
              "index %s: %s, %lld vectors of dimension %d, metric %s%s%s; read in %llu ms, memory +%s resident, +%s of "
              "files mapped "
              "in",
              index, gpu_index ? "Flat on the GPUs" : sg_fidx_describe(&self->index, desc, sizeof(desc)),
              (long long)self->index.ntotal, self->index.dim, sg_fidx_metric_name(&self->index), params[0] ? ", params " : "",
              params, (unsigned long long)ti, mib(m1.anon > m0.anon ? m1.anon - m0.anon : 0, b1, sizeof(b1)),
              mib(m1.file > m0.file ? m1.file - m0.file : 0, b2, sizeof(b2)));
    return setup_search(self, cf, err, err_size);
}

/* The corpus (and pages); *tc is the time the corpus took to open. */
static int open_corpus(struct sg_backend *self, const local_conf_t *cf, uint64_t *tc, char *err, size_t err_size)
{
    const sg_host_api *host = self->host;
    const char *instance = self->name;
    char e2[768];
    *tc = host->now_ms();
    sg_jsonl_opts_t o = {0, cf->cache_dir};
    if (sg_jsonl_open(cf->corpus, &o, &self->corpus, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.corpus: %s", e2);
        return -1;
    }
    *tc = host->now_ms() - *tc;
    if ((uint64_t)self->index.ntotal > self->corpus.n_rows) {
        snprintf(err, err_size, "config.corpus: %s has %llu rows but the index %s has %lld vectors (FAISS label i is row i)",
                 cf->corpus, (unsigned long long)self->corpus.n_rows, cf->index, (long long)self->index.ntotal);
        return -1;
    }
    if ((uint64_t)self->index.ntotal < self->corpus.n_rows)
        host->log(SG_LOG_WARN, instance, "the corpus has %llu rows but the index only %lld vectors: rows past %lld are never found",
                  (unsigned long long)self->corpus.n_rows, (long long)self->index.ntotal, (long long)self->index.ntotal);
    if (cf->pages != NULL) {
        sg_jsonl_opts_t po = {1, cf->cache_dir};
        if (sg_jsonl_open(cf->pages, &po, &self->pages, e2, sizeof(e2)) != 0) {
            snprintf(err, err_size, "config.pages: %s", e2);
            return -1;
        }
        self->have_pages = 1;
        if (self->pages.n_urls == 0)
            host->log(SG_LOG_WARN, instance,
                      "config.pages: no row of %s has a \"url\" field, so POST /access will answer null for every URL (pages "
                      "are looked up by their \"url\"; a Search-R1 wiki-18.jsonl has none: use a pages file such as "
                      "wiki_webpages.jsonl, see docs/clients.md)",
                      cf->pages);
    }
    return 0;
}

/* What makes results differ: model, index, corpus, pages, prefix, length, search parameters, device. */
static void make_identity(struct sg_backend *self, const char *params)
{
    snprintf(self->identity, sizeof(self->identity),
             "local:%s|ix:%s-%llu-%016llx|co:%llu-%016llx|pg:%016llx|p:%016llx|ml%u|fp:%016llx", sg_e5_identity(self->model),
             self->index.fourcc, (unsigned long long)self->index.file_size, (unsigned long long)self->index.file_hash,
             (unsigned long long)self->corpus.n_rows, (unsigned long long)self->corpus.content_hash,
             self->have_pages ? (unsigned long long)self->pages.content_hash : 0ull,
             (unsigned long long)sg__e5_hash(0, self->prefix, strlen(self->prefix)), self->max_length,
             (unsigned long long)sg__e5_hash(0, params, strlen(params)));
    if (self->nprobe != 0 || self->ef_search != 0 || self->rerank != 0) { /* the route's search parameters change results */
        size_t il = strlen(self->identity);
        snprintf(self->identity + il, sizeof(self->identity) - il, "|np%d|ef%d|rr%d", self->nprobe, self->ef_search, self->rerank);
    }
#ifdef SG_FAISS_AVX2
    { /* the AVX2 build of FAISS sums distances in another order: near-ties may differ */
        size_t il = strlen(self->identity);
        snprintf(self->identity + il, sizeof(self->identity) - il, "|faiss-avx2");
    }
#endif
    if (self->gpu != NULL) { /* fp16 results differ slightly from the CPU's: another cache identity */
        size_t il = strlen(self->identity);
        snprintf(self->identity + il, sizeof(self->identity) - il, "|%s", sg_local_gpu_identity(self->gpu));
    }
}

static sg_status start_workers(struct sg_backend *self, char *err, size_t err_size)
{
    self->workers = calloc(self->n_workers, sizeof(*self->workers));
    if (self->workers == NULL)
        return SG_ENOMEM;
    size_t dim = (size_t)sg_e5_dim(self->model);
    self->team = calloc(self->n_workers, sizeof(*self->team));
    if (self->team == NULL)
        return SG_ENOMEM;
    for (size_t i = 0; i < self->n_workers; ++i)
        sg_team_init(&self->team[i], (unsigned)self->n_workers);
    if (self->gpu != NULL || self->n_workers < 2)
        self->teams = 0; /* GPU workers each drive their own stream: nothing to lend */
    for (size_t i = 0; i < self->n_workers; ++i) {
        worker_t *w = &self->workers[i];
        w->self = self;
        w->idx = (unsigned)i;
        w->ws = sg_e5_workspace_new(self->model);
        w->items = calloc(self->max_batch + 1, sizeof(*w->items));
        w->texts = calloc(self->max_batch, sizeof(*w->texts));
        w->lens = calloc(self->max_batch, sizeof(*w->lens));
        w->vecs = malloc(self->max_batch * dim * sizeof(float));
        if (w->ws == NULL || w->items == NULL || w->texts == NULL || w->lens == NULL || w->vecs == NULL) {
            snprintf(err, err_size, "out of memory for worker %zu", i);
            return SG_ENOMEM;
        }
        if (self->gpu != NULL &&
            sg_local_gpu_worker_init(self->gpu, i, self->max_batch, self->max_length, &w->gpu, err, err_size) != 0)
            return SG_ENOMEM;
    }
    for (size_t i = 0; i < self->n_workers; ++i) {
        if (pthread_create(&self->workers[i].thread, NULL, worker_main, &self->workers[i]) != 0) {
            snprintf(err, err_size, "cannot start worker thread %zu", i);
            return SG_EINTERNAL;
        }
        self->workers[i].started = 1;
    }
    return SG_OK;
}

static void log_ready(struct sg_backend *self, const char *model, uint64_t t0, uint64_t tc)
{
    const sg_host_api *host = self->host;
    const char *instance = self->name;
    const sg_e5_config *mc = sg_e5_get_config(self->model);
    host->log(SG_LOG_INFO, instance, "model %s: BERT hidden %d, %d layers, %d heads; prefix \"%s\", max_length %u", model,
              mc->hidden, mc->layers, mc->heads, self->prefix, self->max_length);
    if (self->gpu != NULL)
        sg_local_gpu_log(self->gpu, host, instance);
    log_store(self, "corpus", &self->corpus);
    host->log(SG_LOG_INFO, instance, "corpus opened in %llu ms", (unsigned long long)tc);
    if (self->have_pages)
        log_store(self, "pages", &self->pages);
    mem_t m2 = mem_now();
    char b1[32], b2[32], b3[32];
    host->log(SG_LOG_INFO, instance,
              "ready in %llu ms: %zu workers, max_batch %zu, max_wait_ms %u, max_queue %zu; resident %s private + %s of mapped "
              "files, peak %s",
              (unsigned long long)(host->now_ms() - t0), self->n_workers, self->max_batch, self->max_wait_ms, self->max_queue,
              mib(m2.anon, b1, sizeof(b1)), mib(m2.file, b2, sizeof(b2)), mib(m2.peak, b3, sizeof(b3)));
}

static sg_status local_create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                              size_t config_len, struct sg_backend **out, char *err, size_t err_size)
{
    static const char anchor = 0; /* an address inside this plugin: the CUDA module is looked for beside it */
    sg_cfg_t c = {"config", err, err_size};
    local_conf_t cf = {0};
    cJSON *root = sg_cfg_parse(&c, config_json, config_len); /* strict: no duplicate key */
    struct sg_backend *self = calloc(1, sizeof(*self));
    if (self == NULL) {
        cJSON_Delete(root);
        return SG_ENOMEM;
    }
    self->host = host;
    self->name = strdup(instance);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    self->fifo_tail = &self->fifo_head;
    self->acc_tail = &self->acc_head;
    sg_status st = SG_EINVAL;
    uint64_t t0 = host->now_ms(), tc = 0;
    int gpu_index = 0;
    if (root == NULL) /* sg_cfg_parse() said why */
        goto fail;
    if (read_config(&c, root, base_dir, &cf) != 0)
        goto fail;
    self->prefix = cf.prefix;
    cf.prefix = NULL;
    self->max_length = cf.max_length;
    self->max_topk = cf.max_topk;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    self->n_workers = cf.workers != 0 ? cf.workers : (size_t)(ncpu > 0 ? ncpu : 1);
    self->n_workers_cfg = cf.workers;
    self->max_batch = cf.max_batch;
    self->max_wait_ms = cf.max_wait_ms;
    self->max_queue = cf.max_queue;
    self->omp_threads = cf.omp_threads;
    self->teams = cf.teams;
    self->in_system_us = now_us();
    if (load_model(self, &cf, &anchor, &gpu_index, err, err_size) != 0 || open_index(self, &cf, gpu_index, err, err_size) != 0 ||
        open_corpus(self, &cf, &tc, err, err_size) != 0)
        goto fail;
    make_identity(self, cf.params);
    if ((st = start_workers(self, err, err_size)) != SG_OK)
        goto fail;
    log_ready(self, cf.model, t0, tc);
    local_conf_free(&cf);
    cJSON_Delete(root);
    *out = self;
    return SG_OK;
fail:
    local_conf_free(&cf);
    cJSON_Delete(root);
    local_destroy(self);
    return st;
}

/* No admission limits of its own (the gateway's route keys and max_queue here bound it); the mean
 * DOC size of the corpus and of the pages (ABI 1.3), from which the gateway estimates answers. */
static void local_limits(struct sg_backend *self, int op, sg_limits *out)
{
    const sg_jsonl_t *j = op == SG_OP_SEARCH ? &self->corpus : self->have_pages ? &self->pages : NULL;
    if (j == NULL || j->n_rows == 0 || !SG_LIMITS_HAS_DOC_BYTES(out))
        return;
    uint64_t mean = (uint64_t)j->size / j->n_rows;
    out->doc_bytes = mean > UINT32_MAX ? UINT32_MAX : (uint32_t)mean;
}

/* Without a pages file /access is a 404 (a client error: RLinf and ASearcher retry a 503 for
 * minutes), as on a backend without access() at all. */
static int local_has_access(struct sg_backend *self)
{
    return self->have_pages;
}

static const sg_backend_vtable vtable = {
    SG_BACKEND_HEADER("local", "1.0.0"),
    .create = local_create,
    .destroy = local_destroy,
    .search = local_search,
    .cancel = local_cancel,
    .health = local_health,
    .stats = local_stats,
    .identity = local_identity,
    .access = local_access,
    .has_access = local_has_access,
    .check_params = local_check_params,
    .limits = local_limits,
};

const sg_backend_vtable *sg__local_vtable(void)
{
    return &vtable;
}
