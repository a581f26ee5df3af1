/*
 * rerank.c -- the rerank stage (rerank.h, docs/rerank.md): a decorator behind the plugin ABI that
 * asks the route's plugin for `candidates` hits, scores every (query, passage) pair with a BERT
 * cross-encoder on a bounded pool of worker threads, and answers with the `topk` best.
 *
 * A stage call (job) goes through three states:
 *
 *   FIRST    the plugin's search() is running; cancel() is forwarded to the plugin
 *   WAITING  the plugin answered; the candidates (copied) wait for a worker in a FIFO queue
 *   SCORING  a worker scores them in passes of `batch` pairs, checking the deadline and the
 *            cancel flag between passes, then completes the call
 *
 * Admission: a call reserves (queries x candidates) pairs when it arrives and gives them back when
 * it completes; a call that would take the reservations over `max_queue` is answered
 * SG_EOVERLOAD (HTTP 503 + Retry-After) at once, unless nothing is reserved (a call larger than the
 * bound then runs alone). So memory and queueing delay are bounded before the first stage spends
 * anything.
 *
 * Locks: `mu` guards the job list, the queue and the counters; it is never held while calling the
 * plugin or a completion callback.
 */
#include "rerank.h"
#include "runtime.h"
#include "route.h"
#include "rerank_xenc.h"
#include "hmap.h"

#include <dlfcn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the cross-encoder module (rerank_xenc.h) ---- */

static const sg_xenc_api *xenc_api;

int sg_rerank_open_module(const sg_config_t *cfg, const char *plugin_dir, char *err, size_t err_size)
{
    int wanted = 0;
    for (size_t i = 0; i < cfg->n_backends; ++i)
        wanted |= cfg->backends[i].rerank != NULL;
    if (!wanted || xenc_api != NULL)
        return 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/rerank_xenc.so", plugin_dir);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        snprintf(err, err_size, "rerank: cannot load the cross-encoder module %s: %s", path, dlerror());
        return -1;
    }
    sg_xenc_api_fn entry;
    void *sym = dlsym(dl, SG_XENC_API_ENTRY);
    memcpy(&entry, &sym, sizeof(entry));
    const sg_xenc_api *api = sym != NULL ? entry() : NULL;
    if (api == NULL || api->version != SG_XENC_API_VERSION || api->struct_size < sizeof(sg_xenc_api)) {
        snprintf(err, err_size, "rerank: %s is not a cross-encoder module of this gateway (%s)", path,
                 api == NULL ? "no " SG_XENC_API_ENTRY "()" : "another version");
        dlclose(dl);
        return -1;
    }
    xenc_api = api; /* stays loaded until the process exits */
    return 0;
}

/* ---- passages ---- */

size_t sg_rerank_passage(const char *doc, size_t doc_len, sg_buf_t *out)
{
    size_t start = out->len;
    cJSON *root = cJSON_ParseWithLength(doc, doc_len);
    const cJSON *contents = cJSON_GetObjectItemCaseSensitive(root, "contents");
    const char *title = "", *text = "";
    size_t tlen = 0, xlen = 0;
    if (cJSON_IsString(contents)) {
        /* Search-R1: title = contents.split("\n")[0]; text = "\n".join(contents.split("\n")[1:]) */
        const char *s = contents->valuestring;
        const char *nl = strchr(s, '\n');
        title = s;
        tlen = nl != NULL ? (size_t)(nl - s) : strlen(s);
        text = nl != NULL ? nl + 1 : "";
        xlen = strlen(text);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "title");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "text");
        if (cJSON_IsString(t)) {
            title = t->valuestring;
            tlen = strlen(title);
        }
        if (cJSON_IsString(x)) {
            text = x->valuestring;
            xlen = strlen(text);
        }
    }
    sg_buf_appends(out, "(Title: ");
    sg_buf_append(out, title, tlen);
    sg_buf_appends(out, ") ");
    sg_buf_append(out, text, xlen);
    cJSON_Delete(root);
    return out->len - start;
}

/* ---- the stage ---- */

enum { JOB_FIRST, JOB_WAITING, JOB_SCORING };

typedef struct st_job_t job_t;
struct st_job_t {
    job_t *next;                /* in the waiting queue */
    job_t *all_next, *all_prev; /* in the stage's list of calls (for cancel) */
    _Atomic uint32_t refs;      /* the call itself + a canceller's temporary reference */
    struct sg_backend *st;
    const sg_search *outer; /* the gateway's call: valid until `done` returns */
    sg_done_fn done;
    void *cb_data;
    sg_search inner; /* the plugin's call: the gateway's, with topk = candidates */
    uint64_t reserved;
    int state;          /* under st->mu */
    _Atomic int cancel; /* cancel() was called */
    /* the candidates (copied from the plugin's result): query q has hits [first[q], first[q+1]) */
    size_t *first;
    char **docs;
    size_t *doc_lens;
    double *inner_scores;
    size_t n_pairs;
    uint64_t answered_us; /* when the first stage answered */
};

struct sg_backend {
    sg_backend_vtable vt; /* the stage's table: the plugin's name and version, the stage's functions */
    const sg_backend_vtable *inner_vt;
    sg_backend *inner;
    const sg_backend_vtable **vt_slot; /* where the gateway keeps the route's vtable: restored at destroy */
    sg_backend **inst_slot;
    const sg_rerank_conf_t *conf; /* = &own: the stage outlives the config it was made of (reloads) */
    sg_rerank_conf_t own;
    char *route;
    sg_xenc_model *model;
    uint32_t max_length;
    char *identity;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *all;              /* every call not yet completed */
    job_t *head, **tail;     /* waiting for a worker */
    uint64_t reserved_pairs; /* pairs of the calls in `all` */
    uint64_t waiting_pairs;  /* pairs of the calls in the queue */
    int stopping;
    pthread_t *threads;
    uint32_t n_threads;
    /* metrics */
    sg_counter_t *m_pairs, *m_queries, *m_calls, *m_shed, *m_deadline, *m_canceled, *m_errors;
    sg_hist_t *m_latency, *m_score_latency;
    sg_gauge_t *m_pending, *m_waiting;
};

static void job_release(job_t *j)
{
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < j->n_pairs; ++i)
        free(j->docs[i]);
    free(j->docs);
    free(j->doc_lens);
    free(j->inner_scores);
    free(j->first);
    free(j);
}

/* Takes the call out of the stage's books (caller holds mu). */
static void job_unlink_locked(struct sg_backend *st, job_t *j)
{
    if (j->all_prev != NULL)
        j->all_prev->all_next = j->all_next;
    else
        st->all = j->all_next;
    if (j->all_next != NULL)
        j->all_next->all_prev = j->all_prev;
    j->all_next = j->all_prev = NULL;
    st->reserved_pairs -= j->reserved;
    sg_gauge_set(st->m_pending, (int64_t)st->reserved_pairs);
}

/* Completes a call that produced no result (any thread, mu not held). */
static void job_fail(job_t *j, sg_status status, const char *detail, uint32_t retry_after)
{
    struct sg_backend *st = j->st;
    pthread_mutex_lock(&st->mu);
    job_unlink_locked(st, j);
    pthread_mutex_unlock(&st->mu);
    sg_result res = {status, detail, NULL, 0, retry_after};
    j->done(j->cb_data, &res);
    job_release(j);
}

typedef struct st_ranked_t {
    float score;
    uint32_t rank; /* first-stage rank */
} ranked_t;

static int cmp_ranked(const void *pa, const void *pb)
{
    const ranked_t *a = pa, *b = pb;
    float sa = isnan(a->score) ? -INFINITY : a->score, sb = isnan(b->score) ? -INFINITY : b->score;
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* What scoring one call needs besides the call: sized for its longest candidate list and reused
 * query after query, so a call allocates once however many queries it has. */
typedef struct st_scratch_t {
    sg_buf_t text; /* the distinct passages of one query, back to back */
    const char **passages;
    size_t *plens, *poffs;
    sg_hmap_t distinct; /* items: &poffs[u] */
    size_t *rep;        /* candidate -> index of its distinct passage */
    float *uscores;     /* per distinct passage */
    char err[256];      /* the cross-encoder's message: lives until the call is failed */
} scratch_t;

/* whether the distinct passage at `item` (&sc->poffs[u]) is the key */
static int passage_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const scratch_t *sc = ud;
    size_t u = (size_t)((const size_t *)item - sc->poffs);
    return sc->plens[u] == key_len && memcmp(sc->text.base + sc->poffs[u], key, key_len) == 0;
}

static void scratch_init(scratch_t *sc, size_t most)
{
    memset(sc, 0, sizeof(*sc));
    sc->uscores = sg_mem_calloc(most, sizeof(*sc->uscores));
    sc->passages = sg_mem_calloc(most, sizeof(*sc->passages));
    sc->plens = sg_mem_calloc(most, sizeof(*sc->plens));
    sc->poffs = sg_mem_calloc(most, sizeof(*sc->poffs));
    sg_hmap_init(&sc->distinct, passage_eq, sc, most);
    sc->rep = sg_mem_calloc(most, sizeof(*sc->rep));
}

static void scratch_free(scratch_t *sc)
{
    sg_buf_free(&sc->text);
    free(sc->passages);
    free(sc->plens);
    free(sc->poffs);
    sg_hmap_dispose(&sc->distinct);
    free(sc->rep);
    free(sc->uscores);
}

/* The passages of candidates [base, base + n) of the call, each distinct one once (sc->passages,
 * sc->plens) and every candidate mapped to its own (sc->rep); returns how many are distinct. */
static size_t distinct_passages(scratch_t *sc, const job_t *j, size_t base, size_t n)
{
    size_t nu = 0;
    sc->text.len = 0;
    sg_hmap_clear(&sc->distinct);
    for (size_t k = 0; k < n; ++k) {
        size_t off = sc->text.len;
        size_t len = sg_rerank_passage(j->docs[base + k], j->doc_lens[base + k], &sc->text);
        sc->poffs[nu] = off; /* filled in advance: kept only when the passage is new */
        sc->plens[nu] = len;
        const char *p = sc->text.base + off;
        size_t *got = sg_hmap_find_or_insert(&sc->distinct, sg_hmap_hash(p, len), p, len, &sc->poffs[nu]);
        size_t u = (size_t)(got - sc->poffs);
        if (u == nu)
            ++nu;
        else
            sc->text.len = off; /* a duplicate: drop the copy */
        sc->rep[k] = u;
    }
    for (size_t u = 0; u < nu; ++u) /* the buffer has stopped moving */
        sc->passages[u] = sc->text.base + sc->poffs[u];
    return nu;
}

/* Scores query `q` against its `nu` distinct passages into sc->uscores, in passes of `batch` pairs;
 * between passes it stops for a cancel or the deadline, so a long call neither outlives its
 * waiters nor holds a worker past its deadline. Returns SG_OK, or the failure and *why. */
static sg_status score_passes(struct sg_backend *st, sg_xenc_workspace *ws, job_t *j, size_t q, scratch_t *sc, size_t nu,
                              const char **why)
{
    const sg_search *s = j->outer;
    for (size_t at = 0; at < nu;) {
        if (atomic_load(&j->cancel)) {
            *why = "every waiting request went away";
            sg_counter_add(st->m_canceled, 1);
            return SG_ECANCELED;
        }
        if (s->deadline_ms != 0 && sg_now_ms() >= s->deadline_ms) {
            *why = "deadline passed while reranking";
            sg_counter_add(st->m_deadline, 1);
            return SG_ETIMEDOUT;
        }
        size_t m = nu - at < st->conf->batch ? nu - at : st->conf->batch;
        if (xenc_api->score(st->model, ws, s->queries[q].text, s->queries[q].len, sc->passages + at, sc->plens + at, m,
                            st->max_length, sc->uscores + at, sc->err, sizeof(sc->err)) != 0) {
            *why = sc->err;
            sg_counter_add(st->m_errors, 1);
            return SG_EINTERNAL;
        }
        sg_counter_add(st->m_pairs, m); /* per pass: the rate is live while a long call is scored */
        at += m;
    }
    return SG_OK;
}

/* Completes a scored call: per query, best first, ties by first-stage rank, the topk best. */
static void job_answer(struct sg_backend *st, job_t *j, const float *scores, uint64_t now)
{
    const sg_search *s = j->outer;
    size_t nq = s->n_queries;
    sg_hits *qs = sg_mem_calloc(nq, sizeof(*qs));
    sg_hit *hits = sg_mem_calloc(j->n_pairs != 0 ? j->n_pairs : 1, sizeof(*hits));
    ranked_t *order = sg_mem_calloc(j->n_pairs != 0 ? j->n_pairs : 1, sizeof(*order));
    for (size_t q = 0; q < nq; ++q) {
        size_t base = j->first[q], n = j->first[q + 1] - base;
        for (size_t k = 0; k < n; ++k) {
            order[base + k].score = scores[base + k];
            order[base + k].rank = (uint32_t)k;
        }
        qsort(order + base, n, sizeof(*order), cmp_ranked);
        size_t keep = n < s->topk ? n : s->topk;
        for (size_t k = 0; k < keep; ++k) {
            size_t src = base + order[base + k].rank;
            hits[base + k].doc = j->docs[src];
            hits[base + k].doc_len = j->doc_lens[src];
            hits[base + k].score = (double)order[base + k].score;
        }
        qs[q].hits = hits + base;
        qs[q].n_hits = keep;
    }
    sg_counter_add(st->m_queries, nq);
    sg_hist_observe_us(st->m_latency, now - j->answered_us);
    pthread_mutex_lock(&st->mu);
    job_unlink_locked(st, j);
    pthread_mutex_unlock(&st->mu);
    sg_result res = {SG_OK, NULL, qs, nq, 0};
    j->done(j->cb_data, &res);
    free(order);
    free(hits);
    free(qs);
}

/* Scores the call on a worker and completes it. The passages of one query are scored once each:
 * identical passages (the same page twice, syndicated snippets) share one score, so they tie
 * exactly and keep their first-stage order. */
static void job_score(struct sg_backend *st, sg_xenc_workspace *ws, job_t *j)
{
    size_t nq = j->outer->n_queries;
    uint64_t t0 = sg_now_us();
    size_t most = 1;
    for (size_t q = 0; q < nq; ++q)
        if (j->first[q + 1] - j->first[q] > most)
            most = j->first[q + 1] - j->first[q];
    float *scores = sg_mem_calloc(j->n_pairs != 0 ? j->n_pairs : 1, sizeof(float));
    scratch_t sc;
    scratch_init(&sc, most);
    sg_status fail = SG_OK;
    const char *why = NULL;
    for (size_t q = 0; q < nq && fail == SG_OK; ++q) {
        size_t base = j->first[q], n = j->first[q + 1] - base;
        size_t nu = distinct_passages(&sc, j, base, n);
        fail = score_passes(st, ws, j, q, &sc, nu, &why);
        for (size_t k = 0; k < n && fail == SG_OK; ++k)
            scores[base + k] = sc.uscores[sc.rep[k]];
    }
    scratch_free(&sc);
    uint64_t now = sg_now_us();
    sg_hist_observe_us(st->m_score_latency, now - t0);
    if (fail != SG_OK) {
        free(scores);
        job_fail(j, fail, why, 0);
        return;
    }
    job_answer(st, j, scores, now);
    free(scores);
    job_release(j);
}

static void *worker_main(void *arg)
{
    struct sg_backend *st = arg;
    sg_xenc_workspace *ws = xenc_api->workspace_new(st->model);
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (st->head == NULL && !st->stopping)
            pthread_cond_wait(&st->cv, &st->mu);
        if (st->head == NULL)
            break; /* stopping, nothing left */
        job_t *j = st->head;
        st->head = j->next;
        if (st->head == NULL)
            st->tail = &st->head;
        j->next = NULL;
        st->waiting_pairs -= j->n_pairs;
        sg_gauge_set(st->m_waiting, (int64_t)st->waiting_pairs);
        j->state = JOB_SCORING;
        int stopping = st->stopping;
        pthread_mutex_unlock(&st->mu);
        if (ws == NULL)
            job_fail(j, SG_ENOMEM, "out of memory for the reranker's workspace", 0);
        else if (stopping)
            job_fail(j, SG_ECANCELED, "the gateway is shutting down", 0);
        else
            job_score(st, ws, j);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    xenc_api->workspace_free(ws);
    return NULL;
}

/* The plugin answered (any thread): copy the candidates and queue them for a worker. */
static void on_inner_done(void *cb_data, const sg_result *res)
{
    job_t *j = cb_data;
    struct sg_backend *st = j->st;
    size_t nq = j->outer->n_queries;
    if (res->status != SG_OK) {
        job_fail(j, res->status, res->detail, res->retry_after_s);
        return;
    }
    if (res->n_queries != nq || res->queries == NULL) {
        job_fail(j, SG_EINTERNAL, "the backend returned a result for the wrong number of queries", 0);
        return;
    }
    size_t total = 0;
    for (size_t q = 0; q < nq; ++q)
        total += res->queries[q].n_hits < j->inner.topk ? res->queries[q].n_hits : j->inner.topk;
    j->first = sg_mem_calloc(nq + 1, sizeof(*j->first));
    j->docs = sg_mem_calloc(total != 0 ? total : 1, sizeof(*j->docs));
    j->doc_lens = sg_mem_calloc(total != 0 ? total : 1, sizeof(*j->doc_lens));
    j->inner_scores = sg_mem_calloc(total != 0 ? total : 1, sizeof(*j->inner_scores));
    size_t at = 0;
    for (size_t q = 0; q < nq; ++q) {
        const sg_hits *h = &res->queries[q];
        size_t n = h->n_hits < j->inner.topk ? h->n_hits : j->inner.topk;
        j->first[q] = at;
        for (size_t k = 0; k < n; ++k, ++at) {
            j->docs[at] = sg_strndup(h->hits[k].doc, h->hits[k].doc_len);
            j->doc_lens[at] = h->hits[k].doc_len;
            j->inner_scores[at] = h->hits[k].score;
        }
    }
    j->first[nq] = at;
    j->n_pairs = total;
    j->answered_us = sg_now_us();
    pthread_mutex_lock(&st->mu);
    if (st->stopping || atomic_load(&j->cancel)) {
        int stopping = st->stopping;
        pthread_mutex_unlock(&st->mu);
        if (!stopping)
            sg_counter_add(st->m_canceled, 1);
        job_fail(j, SG_ECANCELED, stopping ? "the gateway is shutting down" : "every waiting request went away", 0);
        return;
    }
    j->state = JOB_WAITING;
    *st->tail = j;
    st->tail = &j->next;
    st->waiting_pairs += j->n_pairs;
    sg_gauge_set(st->m_waiting, (int64_t)st->waiting_pairs);
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static sg_status rr_search(sg_backend *st, const sg_search *s, sg_done_fn done, void *cb_data)
{
    uint32_t want = s->topk > st->conf->candidates ? s->topk : st->conf->candidates;
    uint64_t pairs = (uint64_t)want * s->n_queries;
    job_t *j = sg_mem_calloc(1, sizeof(*j));
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, 0);
    j->st = st;
    j->outer = s;
    j->done = done;
    j->cb_data = cb_data;
    j->inner = *s;
    j->inner.struct_size = s->struct_size < sizeof(j->inner) ? s->struct_size : (uint32_t)sizeof(j->inner);
    j->inner.topk = want;
    j->reserved = pairs;
    j->state = JOB_FIRST;
    sg_counter_add(st->m_calls, 1);
    pthread_mutex_lock(&st->mu);
    if (st->stopping) {
        pthread_mutex_unlock(&st->mu);
        free(j);
        return SG_EUNAVAIL;
    }
    if (st->reserved_pairs != 0 && st->reserved_pairs + pairs > st->conf->max_queue) {
        uint64_t cur = st->reserved_pairs;
        pthread_mutex_unlock(&st->mu);
        sg_counter_add(st->m_shed, 1);
        char msg[200];
        snprintf(msg, sizeof(msg), "the reranker of route %s is saturated: %llu pairs pending (max_queue %u)", st->route,
                 (unsigned long long)cur, st->conf->max_queue);
        sg_result res = {SG_EOVERLOAD, msg, NULL, 0, 1};
        done(cb_data, &res);
        free(j);
        return SG_OK;
    }
    st->reserved_pairs += pairs;
    sg_gauge_set(st->m_pending, (int64_t)st->reserved_pairs);
    j->all_next = st->all;
    if (st->all != NULL)
        st->all->all_prev = j;
    st->all = j;
    pthread_mutex_unlock(&st->mu);
    sg_status rc = st->inner_vt->search(st->inner, &j->inner, on_inner_done, j);
    if (rc != SG_OK) {
        pthread_mutex_lock(&st->mu);
        job_unlink_locked(st, j);
        pthread_mutex_unlock(&st->mu);
        job_release(j);
    }
    return rc;
}

static void rr_cancel(sg_backend *st, void *cb_data)
{
    job_t *j = NULL, *dequeued = NULL;
    int state = -1;
    pthread_mutex_lock(&st->mu);
    for (job_t *it = st->all; it != NULL; it = it->all_next) {
        if (it->cb_data == cb_data && !atomic_load(&it->cancel)) {
            j = it;
            break;
        }
    }
    if (j != NULL) {
        atomic_store(&j->cancel, 1);
        state = j->state;
        if (state == JOB_WAITING) { /* not started: out of the queue, completed below */
            for (job_t **p = &st->head; *p != NULL; p = &(*p)->next) {
                if (*p == j) {
                    *p = j->next;
                    if (st->tail == &j->next)
                        st->tail = p;
                    j->next = NULL;
                    break;
                }
            }
            st->waiting_pairs -= j->n_pairs;
            sg_gauge_set(st->m_waiting, (int64_t)st->waiting_pairs);
            dequeued = j;
        } else if (state == JOB_FIRST) {
            atomic_fetch_add(&j->refs, 1); /* the plugin may complete it while we forward the cancel */
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (j == NULL) { /* not a stage call: an access() call, which goes to the plugin as it is */
        if (st->inner_vt->cancel != NULL)
            st->inner_vt->cancel(st->inner, cb_data);
        return;
    }
    if (dequeued != NULL) {
        sg_counter_add(st->m_canceled, 1);
        job_fail(dequeued, SG_ECANCELED, "every waiting request went away", 0);
    } else if (state == JOB_FIRST) {
        if (st->inner_vt->cancel != NULL)
            st->inner_vt->cancel(st->inner, j);
        job_release(j);
    }
    /* SCORING: the worker sees the flag between passes */
}

static sg_status rr_health(sg_backend *st, char *detail, size_t n)
{
    return st->inner_vt->health(st->inner, detail, n);
}

static void rr_stats(sg_backend *st, void *sink)
{
    if (st->inner_vt->stats != NULL)
        st->inner_vt->stats(st->inner, sink);
}

static const char *rr_identity(sg_backend *st)
{
    return st->identity;
}

static sg_status rr_access(sg_backend *st, const sg_search *s, sg_done_fn done, void *cb_data)
{
    return st->inner_vt->access(st->inner, s, done, cb_data);
}

static int rr_has_access(sg_backend *st)
{
    const sg_backend_vtable *vt = st->inner_vt;
    if (vt->abi_minor < 1 || vt->struct_size < offsetof(sg_backend_vtable, has_access) + sizeof(vt->has_access) ||
        vt->has_access == NULL)
        return 1;
    return vt->has_access(st->inner);
}

static sg_status rr_check_params(sg_backend *st, const char *json, size_t json_len, char *canon, size_t canon_size, char *detail,
                                 size_t detail_size)
{
    return sg_plugin_check_params(st->inner_vt)(st->inner, json, json_len, canon, canon_size, detail, detail_size);
}

/* Frees a stage whose threads have ended: the model, the locks and the stage's own memory. */
static void stage_free(sg_backend *st)
{
    xenc_api->free(st->model);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st->threads);
    free(st->identity);
    free(st->route);
    free(st->own.model);
    free(st);
}

static void rr_destroy(sg_backend *st)
{
    /* 1. no new calls; calls waiting for a worker end now, a call being scored at its next pass */
    pthread_mutex_lock(&st->mu);
    st->stopping = 1;
    job_t *waiting = st->head;
    st->head = NULL;
    st->tail = &st->head;
    st->waiting_pairs = 0;
    for (job_t *it = st->all; it != NULL; it = it->all_next)
        if (it->state == JOB_SCORING)
            atomic_store(&it->cancel, 1);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    while (waiting != NULL) {
        job_t *next = waiting->next;
        waiting->next = NULL;
        job_fail(waiting, SG_ECANCELED, "the gateway is shutting down", 0);
        waiting = next;
    }
    for (uint32_t i = 0; i < st->n_threads; ++i)
        pthread_join(st->threads[i], NULL);
    /* 2. the plugin completes its pending searches (on_inner_done passes them on as cancelled) */
    st->inner_vt->destroy(st->inner);
    *st->vt_slot = st->inner_vt;
    *st->inst_slot = NULL;
    stage_free(st);
}

/* Loads the route's cross-encoder and applies its settings; *max_length is the one the stage uses
 * (the configured one, else the model's default). On error the model is freed and `err` says why. */
static int load_model(const sg_rerank_conf_t *rc, sg_xenc_model **out, uint32_t *max_length_out, char *err, size_t err_size)
{
    char why[512];
    sg_xenc_model *m = NULL;
    if (xenc_api == NULL) {
        snprintf(err, err_size, "rerank: the cross-encoder module is not loaded");
        return -1;
    }
    if (xenc_api->load(rc->model, &m, why, sizeof(why)) != 0) {
        snprintf(err, err_size, "rerank.model %s: %s", rc->model, why);
        return -1;
    }
    uint32_t positions = xenc_api->max_length(m, UINT32_MAX);
    uint32_t max_length = rc->max_length != 0 ? rc->max_length : xenc_api->default_max_length(m);
    if (max_length > positions) {
        snprintf(err, err_size, "rerank.max_length %u exceeds the model's max_position_embeddings (%u) in %s", max_length,
                 positions, rc->model);
        xenc_api->free(m);
        return -1;
    }
    if (max_length < 3) {
        snprintf(err, err_size, "rerank.max_length: the model's default max_length %u is below 3 (%s); set rerank.max_length",
                 max_length, rc->model);
        xenc_api->free(m);
        return -1;
    }
    if ((rc->activation >= 0 && xenc_api->set_activation(m, rc->activation) != 0) ||
        (rc->truncation >= 0 && xenc_api->set_truncation(m, rc->truncation) != 0)) {
        snprintf(err, err_size, "rerank: the model %s refused the activation or truncation setting", rc->model);
        xenc_api->free(m);
        return -1;
    }
    if (rc->score_label >= 0 && xenc_api->set_score_label(m, rc->score_label) != 0) {
        snprintf(err, err_size, "rerank.score_label %d is not a label of %s (it has %d)", rc->score_label, rc->model,
                 xenc_api->num_labels(m));
        xenc_api->free(m);
        return -1;
    }
    *out = m;
    *max_length_out = max_length;
    return 0;
}

/* The stage in front of route `b`'s plugin: its table keeps the plugin's name and version and
 * forwards what the stage does not change. The identity (the route's cache key prefix) adds the
 * model and the stage's settings, so results cached with another model, candidates or max_length
 * are not served. No thread runs yet. */
static struct sg_backend *stage_new(sg_route_core_t *k, const sg_backend_conf_t *bc, sg_xenc_model *m, uint32_t max_length)
{
    const sg_rerank_conf_t *rc = bc->rerank;
    struct sg_backend *st = sg_mem_calloc(1, sizeof(*st));
    const sg_backend_vtable *ivt = k->plugin.vt;
    st->vt.abi_major = SG_BACKEND_ABI_MAJOR;
    st->vt.abi_minor = SG_BACKEND_ABI_MINOR;
    st->vt.struct_size = sizeof(st->vt);
    st->vt.name = ivt->name;
    st->vt.version = ivt->version;
    st->vt.create = ivt->create; /* never called through this table */
    st->vt.destroy = rr_destroy;
    st->vt.search = rr_search;
    st->vt.cancel = rr_cancel;
    st->vt.health = rr_health;
    st->vt.stats = rr_stats;
    st->vt.identity = rr_identity;
    st->vt.access = ivt->access != NULL ? rr_access : NULL;
    st->vt.has_access = ivt->access != NULL ? rr_has_access : NULL;
    st->vt.check_params = sg_plugin_check_params(ivt) != NULL ? rr_check_params : NULL;
    st->inner_vt = ivt;
    st->inner = k->inst;
    st->vt_slot = &k->plugin.vt;
    st->inst_slot = &k->inst;
    st->own = *rc;
    st->own.model = sg_strdup(rc->model);
    st->conf = &st->own;
    st->route = sg_strdup(bc->name);
    st->model = m;
    st->max_length = max_length;
    const char *inner_ident = ivt->identity != NULL ? ivt->identity(k->inst) : NULL;
    size_t n = (inner_ident != NULL ? strlen(inner_ident) : 0) + strlen(xenc_api->identity(m)) + 96;
    st->identity = sg_mem_alloc(n);
    snprintf(st->identity, n, "%s|rerank:%s,candidates=%u,max_length=%u", inner_ident != NULL ? inner_ident : "",
             xenc_api->identity(m), rc->candidates, max_length);
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    st->tail = &st->head;
    return st;
}

static void stage_metrics(struct sg_backend *st, const char *route)
{
    char l[160];
    snprintf(l, sizeof(l), "backend=\"%s\"", route);
    st->m_pairs =
        sg_metrics_counter("searchgate_rerank_pairs_total", "(query, passage) pairs scored by the route's cross-encoder.", l);
    st->m_queries = sg_metrics_counter("searchgate_rerank_queries_total", "Queries answered by the rerank stage.", l);
    st->m_calls = sg_metrics_counter("searchgate_rerank_calls_total", "Calls that reached the rerank stage.", l);
    st->m_shed = sg_metrics_counter("searchgate_rerank_shed_total",
                                    "Calls refused with 503 because the rerank stage had max_queue pairs pending.", l);
    st->m_errors = sg_metrics_counter("searchgate_rerank_errors_total", "Calls the cross-encoder failed to score.", l);
    st->m_latency = sg_metrics_hist("searchgate_rerank_duration_seconds",
                                    "Time the rerank stage adds to a call: from the first stage's answer to the reranked one.", l);
    st->m_score_latency = sg_metrics_hist("searchgate_rerank_score_duration_seconds", "Worker time spent scoring one call.", l);
    st->m_pending = sg_metrics_gauge("searchgate_rerank_pending_pairs",
                                     "Pairs accepted by the rerank stage and not yet answered (bounded by max_queue).", l);
    st->m_waiting = sg_metrics_gauge("searchgate_rerank_queued_pairs",
                                     "Pairs whose candidates arrived and wait for a rerank worker (the queue depth).", l);
    sg_gauge_set(sg_metrics_gauge("searchgate_rerank_queue_limit_pairs", "The route's rerank.max_queue (pairs).", l),
                 st->conf->max_queue);
    snprintf(l, sizeof(l), "backend=\"%s\",reason=\"deadline\"", route);
    st->m_deadline =
        sg_metrics_counter("searchgate_rerank_dropped_total", "Calls the rerank stage stopped before answering, by reason.", l);
    snprintf(l, sizeof(l), "backend=\"%s\",reason=\"canceled\"", route);
    st->m_canceled =
        sg_metrics_counter("searchgate_rerank_dropped_total", "Calls the rerank stage stopped before answering, by reason.", l);
}

/* Starts the stage's workers. When one cannot start, the ones started are stopped and the stage
 * (model included) is freed: the route then fails to start with `err`. */
static int start_workers(struct sg_backend *st, char *err, size_t err_size)
{
    uint32_t workers = st->conf->workers;
    st->threads = sg_mem_calloc(workers, sizeof(*st->threads));
    for (uint32_t i = 0; i < workers; ++i) {
        if (pthread_create(&st->threads[i], NULL, worker_main, st) != 0) {
            snprintf(err, err_size, "rerank: cannot start worker thread %u", i);
            pthread_mutex_lock(&st->mu);
            st->stopping = 1;
            pthread_cond_broadcast(&st->cv);
            pthread_mutex_unlock(&st->mu);
            for (uint32_t k = 0; k < i; ++k)
                pthread_join(st->threads[k], NULL);
            stage_free(st);
            return -1;
        }
        st->n_threads = i + 1;
    }
    return 0;
}

int sg_rerank_wrap(sg_route_core_t *k, const sg_backend_conf_t *bc, char *err, size_t err_size)
{
    const sg_rerank_conf_t *rc = bc->rerank;
    if (rc == NULL)
        return 0;
    sg_xenc_model *m;
    uint32_t max_length;
    if (load_model(rc, &m, &max_length, err, err_size) != 0)
        return -1;
    struct sg_backend *st = stage_new(k, bc, m, max_length);
    stage_metrics(st, bc->name);
    if (start_workers(st, err, err_size) != 0)
        return -1;
    k->plugin.vt = &st->vt;
    k->inst = st;
    SG_LOG(SG_LL_INFO, "rerank", "route %s: cross-encoder %s (%d label%s), %u candidates, max_length %u, %u worker%s", bc->name,
           rc->model, xenc_api->num_labels(m), xenc_api->num_labels(m) == 1 ? "" : "s", rc->candidates, max_length, rc->workers,
           rc->workers == 1 ? "" : "s");
    return 0;
}
