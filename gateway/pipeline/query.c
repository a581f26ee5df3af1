/*
 * query.c -- one batch of queries for one route and one client, from admission to answer
 * (query.h). No HTTP here: the entry points (retrieve.c for /retrieve and /access) parse and
 * identify, then hand over; the answer goes back through the caller's done() callback.
 *
 *   rate limit (wait or refuse) -> distinct queries -> cache (one sg_cache_lookup(): the keys, L1,
 *   then one MGET to Redis; it answers once through a callback) -> dispatch the misses (dispatch.c:
 *   singleflight, admission, plugin; a failure may move to the route's fallback) -> done()
 *
 * Its end -- the record in the meters, the ring, the log and the traces, the error handed to done()
 * -- is outcome.c's, handed this file's query_type (what a query is, how its work stops); a fusion
 * route's request ends through the same steps.
 *
 * Everything here runs on the query's loop thread. The query holds one reference on itself until
 * it has answered (or was cancelled); an outstanding Redis round trip (cache lookup, shared rate
 * limit) holds another, so the callback finds it alive and sees it has already answered. A
 * deadline timer answers 504 and abandons the backend work when the deadline passes.
 */
#include "query.h"
#include "query_impl.h"
#include "dispatch.h"
#include "clients.h"
#include "gen.h"
#include "budget.h"
#include "hmap.h"
#include "rate.h"
#include "outcome.h"
#include "respond.h"
#include "../../cache/cache.h"

#include <stdio.h>
#include <stdlib.h>

static void query_free(sg_query_t *q)
{
    for (uint32_t i = 0; i < q->n_uniq; ++i) {
        sg_blob_release(q->uniq[i].blob);
        sg_l1_miss_release(q->uniq[i].miss);
    }
    sg_respond_release(q->loop->server, q->held); /* its blobs are gone now */
    sg_clients_release(q->client);
    sg_gen_release(q->gen);
    free(q->slot_uniq);
    free(q->uniq);
    free(q->arena);
    free(q->params);
    sg_buf_free(&q->keys);
    free(q);
}

static void query_ref(sg_query_t *q)
{
    ++q->refs;
}

void sg__query_unref(sg_query_t *q)
{
    if (--q->refs == 0)
        query_free(q);
}

/* For the steps that answer later (budget.h, rate.h): whether the query was answered meanwhile,
 * and the reference that keeps it alive across a Redis round trip. */
static int query_gone(void *ctx)
{
    return ((sg_query_t *)ctx)->responded;
}

static void query_hold(void *ctx)
{
    query_ref(ctx);
}

static void query_release(void *ctx)
{
    sg__query_unref(ctx);
}

static void trace_item(const void *ctx, uint32_t d, sg_trace_item_t *out)
{
    const sg_query_t *q = ctx;
    const sg_uq_t *u = &q->uniq[d];
    *out = (sg_trace_item_t){u->text, u->len, u->blob, u->fallback_tried && u->blob != NULL ? SG_SRC_FALLBACK : u->source};
}

/* ---- the end of a query (outcome.h): what it is, and its own work to stop ---- */

static void outcome_of(sg_query_t *q, sg_outcome_t *o)
{
    sg_route_t *b = q->backend;
    const char *fallback = q->fallback_used ? q->serving->conf->name : NULL;
    o->request_id = q->request_id;
    o->what = q->is_access ? "POST /access" : "POST /retrieve";
    o->client = q->client;
    o->n_queries = q->n_queries;
    o->start_us = q->start_us;
    o->admitted = q->admitted;
    o->meters = &b->meters;
    o->cache_misses = q->is_access ? NULL : b->cache_misses;
    o->hits_l1 = q->hits_l1;
    o->hits_redis = q->hits_redis;
    o->misses = q->misses;
    o->route_trace = b->conf->trace;
    o->ev = (sg_trace_event_t){.route = b->conf->name,
                               .fallback = fallback,
                               .is_access = q->is_access,
                               .topk = q->topk,
                               .params = q->params,
                               .n = q->n_queries,
                               .slot = q->slot_uniq,
                               .n_distinct = q->n_uniq,
                               .item = trace_item,
                               .ctx = q};
    if (!sg_log_enabled(SG_LL_DEBUG))
        return;
    char cache[96] = "";
    if (!q->is_access)
        snprintf(cache, sizeof(cache), " distinct=%u l1=%u redis=%u misses=%u", q->n_uniq, q->hits_l1, q->hits_redis, q->misses);
    snprintf(o->log_more, sizeof(o->log_more), "%s%s%s", cache, fallback != NULL ? " fallback=" : "",
             fallback != NULL ? fallback : "");
}

/* Stops the query's work: its deadline or budget timer, its flights still out. */
static void stop(sg_query_t *q)
{
    if (h2o_linklist_is_linked(&q->link))
        h2o_linklist_unlink(&q->link);
    sg_timer_stop(&q->loop->timers, &q->timer);
    for (uint32_t i = 0; i < q->n_uniq; ++i)
        if (q->uniq[i].waiter != NULL) { /* an early answer: detach from the flights still out */
            sg__dispatch_abandon(q);
            break;
        }
}

static void end(void *ctx, sg_outcome_t *o)
{
    stop(ctx);
    outcome_of(ctx, o);
}

static void answer_failure(void *ctx, const sg_query_result_t *res)
{
    sg_query_t *q = ctx;
    q->done(q->ctx, res);
}

static const sg_outcome_type_t query_type = {end, answer_failure, query_release};

/* Ends the query's work and records it. The caller then answers (or not: cancelled). */
static void finish(sg_query_t *q, int status, const char *type)
{
    sg_outcome_finish(&query_type, q, &q->responded, &q->rate, status, type);
}

static void fail(sg_query_t *q, int status, const char *type, const char *msg, uint32_t retry_after)
{
    sg_outcome_fail(&query_type, q, &q->responded, &q->rate, status, type, msg, retry_after);
}

static int check_bounds(sg_query_t *q);

static void answer(sg_query_t *q)
{
    if (check_bounds(q) != 0)
        return;
    finish(q, 200, NULL);
    sg_blob_t *one, **blobs = q->n_queries == 1 ? &one : sg_mem_alloc(q->n_queries * sizeof(*blobs));
    for (uint32_t i = 0; i < q->n_queries; ++i)
        blobs[i] = q->uniq[q->slot_uniq[i]].blob;
    sg_query_result_t res = {.status = 200,
                             .n = q->n_queries,
                             .blobs = blobs,
                             .request_id = q->request_id,
                             .n_distinct = q->n_uniq,
                             .n_cached = q->hits_l1 + q->hits_redis,
                             .cache_on = q->backend->conf->cache && !q->is_access,
                             .params = q->params,
                             .fallback = q->fallback_used ? q->serving : NULL};
    q->done(q->ctx, &res);
    if (blobs != &one)
        free(blobs);
    sg__query_unref(q);
}

/* ---- the bounds of the answer (respond.h) ---- */

static void took_blob(sg_query_t *q, sg_uq_t *u)
{
    q->result_bytes += (uint64_t)u->mult * sg_blob_shape_len(u->blob, q->shape);
    q->blob_bytes += sg_blob_footprint(u->blob);
}

/* Whose answer the query's is, and its bound (respond.h). */
static sg_respond_bound_t bound(const sg_query_t *q)
{
    return (sg_respond_bound_t){"backend", q->backend->conf->name, q->max_response_bytes, q->envelope_bytes};
}

/* The answer so far fits limits.max_response_bytes, and the blobs the query holds are charged
 * to the process's response budget (503 when a bounded query outgrows it). 0, or -1: answered. */
static int check_bounds(sg_query_t *q)
{
    sg_server_t *s = q->loop->server;
    sg_respond_bound_t b = bound(q);
    char msg[400];
    if (sg_respond_check_exact(s, &b, q->envelope_bytes + q->result_bytes, q->n_pending, q->n_uniq, msg, sizeof(msg)) != 0) {
        fail(q, 413, "too_large", msg, 0);
        return -1;
    }
    if (q->blob_bytes <= q->held)
        return 0;
    uint64_t more = q->blob_bytes - q->held;
    if (q->max_response_bytes == 0) {
        sg_respond_grow(s, more);
    } else if (sg_respond_reserve(s, q->held, more) != 0) {
        sg_counter_add(s->responses.m_refused, 1);
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "the gateway holds %llu bytes of answers, its limit (limits.max_response_bytes_inflight) is %llu: retry shortly",
                 (unsigned long long)atomic_load(&s->responses.held), (unsigned long long)s->responses.limit);
        fail(q, 503, "overloaded", msg, 1);
        return -1;
    }
    q->held += more;
    return 0;
}

/* Before any work: the estimate of the answer (the route's mean DOC size, halved to stay on the
 * safe side, for every query and its topk) must fit limits.max_response_bytes; the memory its
 * distinct results will take is what the query reserves in the budget. 0, or -1: answered. */
static int check_estimate(sg_query_t *q)
{
    uint32_t doc = sg_route_doc_bytes(q->backend, q->is_access);
    uint64_t per = q->is_access ? 1 : q->topk;
    sg_respond_bound_t b = bound(q);
    char msg[400];
    if (sg_respond_check_estimate(q->loop->server, &b, q->n_queries, q->is_access ? "pages" : "topk", per, doc,
                                  ", half the route's mean", msg, sizeof(msg)) != 0) {
        fail(q, 413, "too_large", msg, 0);
        return -1;
    }
    if (q->max_response_bytes == 0 || doc == 0)
        return 0;
    uint64_t mem = (uint64_t)q->n_uniq * per * ((uint64_t)doc + 32);
    q->reserve = mem < q->max_response_bytes ? mem : q->max_response_bytes;
    return 0;
}

/* The misses must fit what the serving route can ever admit at once (413 otherwise: retrying
 * would meet the same bound). 0, or -1: answered. */
static int check_admissible(sg_query_t *q)
{
    if (q->n_pending <= q->serving->admits[q->is_access ? 1 : 0])
        return 0; /* within what the route was found to admit when it was set up */
    char msg[400];
    if (sg_dispatch_describe_capacity(q->serving, q->is_access, q->n_pending, msg, sizeof(msg)) == 0)
        return 0;
    fail(q, 413, "too_large", msg, 0);
    return -1;
}

/* ---- spend budgets (budget.h), then dispatch (dispatch.h) ---- */

/* The budgets decided: dispatch the misses with the reservation, or answer the refusal. */
static void on_budget(void *ctx, const sg_budget_decision_t *d)
{
    sg_query_t *q = ctx;
    if (!d->admitted) {
        fail(q, d->status, d->type, d->message, d->retry_after_s);
        return;
    }
    sg_budget_charge_t reservation = d->charge;
    q->budget = reservation.n != 0 ? &reservation : NULL;
    sg__dispatch_misses(q); /* gives back what its calls did not take, and clears q->budget */
}

static const sg_budget_next_t budget_next = {on_budget, query_gone, query_hold, query_release};

/* The misses spend the budgets that apply to the serving route: the budget step decides, then
 * on_budget() dispatches them. */
static void spend(sg_query_t *q)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < q->n_uniq; ++i)
        if (q->uniq[i].blob == NULL && q->uniq[i].waiter == NULL)
            ++n;
    sg_budget_admit(q->gen->budgets, q->loop, q->serving, q->client, n, &budget_next, q);
}

void sg__query_after_cache(sg_query_t *q)
{
    if (q->responded || check_bounds(q) != 0)
        return;
    q->misses = q->n_pending;
    if (q->n_pending == 0) {
        answer(q);
        return;
    }
    if (check_admissible(q) != 0)
        return;
    spend(q);
}

static void finish_if_complete(sg_query_t *q)
{
    if (!q->responded && q->n_pending == 0)
        answer(q);
}

/* The cache answered: note each open entry's key (the misses' flights store under it) and, for a
 * miss, L1's watch on it; take the blobs it found, then go on. */
static void on_cache(void *ctx, const sg_cache_answer_t *a)
{
    sg_query_t *q = ctx;
    uint32_t k = 0;
    for (uint32_t i = 0; i < q->n_uniq && k < a->n; ++i) {
        sg_uq_t *u = &q->uniq[i];
        if (u->blob != NULL)
            continue;
        u->key_off = a->key_off[k];
        u->key_len = a->key_len[k];
        sg_blob_t *b = a->blobs[k];
        uint8_t t = a->tier[k];
        u->miss = a->misses[k++]; /* a miss: dispatch reads it (or its flight's store fills it) */
        if (b == NULL)
            continue;
        if (q->responded) {
            sg_blob_release(b);
            continue;
        }
        u->blob = b;
        u->source = t == SG_CACHE_L1 ? SG_SRC_L1 : SG_SRC_REDIS;
        --q->n_pending;
        took_blob(q, u);
        if (t == SG_CACHE_L1) {
            ++q->hits_l1;
            sg_counter_add(q->serving->cache_hits_l1, 1);
        } else {
            ++q->hits_redis;
            sg_counter_add(q->serving->cache_hits_redis, 1);
        }
    }
    for (; k < a->n; ++k) { /* the query answered (and was changed) meanwhile */
        sg_blob_release(a->blobs[k]);
        sg_l1_miss_release(a->misses[k]);
    }
    sg__query_after_cache(q);
    sg__query_unref(q); /* the lookup's reference */
}

void sg__query_lookup(sg_query_t *q)
{
    sg_route_t *b = q->serving;
    if (!b->conf->cache || q->is_access) {
        sg__query_after_cache(q);
        return;
    }
    /* the open entries; the lookup makes their keys into the query's buffer, for the misses'
     * flights (sg__query_key_of) */
    const char **texts = sg_mem_alloc(q->n_pending * sizeof(*texts));
    uint32_t *lens = sg_mem_alloc(q->n_pending * sizeof(*lens));
    uint32_t n = 0;
    for (uint32_t i = 0; i < q->n_uniq && n < q->n_pending; ++i) {
        sg_uq_t *u = &q->uniq[i];
        u->key_len = 0;
        if (u->blob != NULL)
            continue;
        texts[n] = u->text;
        lens[n++] = u->len;
    }
    q->keys.len = 0;
    q->keys_of = b;
    sg_cache_lookup_t req = {.identity = b->core->identity,
                             .topk = q->topk,
                             .params = sg__query_params(q),
                             .n = n,
                             .texts = texts,
                             .lens = lens,
                             .ttl_s = b->conf->cache_ttl_s,
                             .keys = &q->keys};
    query_ref(q);
    sg_cache_lookup(q->loop->redis, &req, on_cache, q);
    free(texts);
    free(lens);
}

static void on_timer(sg_timer_t *t);
static void on_deadline(sg_query_t *q);

/* Room in the process's response budget for the query's estimate: taken at once, or waited for
 * (polling; limits.response_wait_ms, within the deadline), else 503. 0: go on; -1: waiting or
 * answered. */
static int reserve_response(sg_query_t *q)
{
    sg_server_t *s = q->loop->server;
    if (q->reserve == 0 || q->held != 0)
        return 0;
    if (sg_respond_reserve(s, 0, q->reserve) == 0) {
        q->held = q->reserve;
        return 0;
    }
    uint64_t now = sg_now_ms();
    if (q->budget_wait_end_ms == 0) {
        uint64_t end = now + q->gen->cfg->limits.response_wait_ms;
        q->budget_wait_end_ms = end < q->deadline_ms ? end : q->deadline_ms;
        sg_counter_add(s->responses.m_waited, 1);
    }
    if (now >= q->budget_wait_end_ms) {
        if (now >= q->deadline_ms) {
            on_deadline(q);
            return -1;
        }
        sg_counter_add(s->responses.m_refused, 1);
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "the gateway holds %llu bytes of answers and this one needs about %llu more, over its limit "
                 "(limits.max_response_bytes_inflight %llu): retry shortly",
                 (unsigned long long)atomic_load(&s->responses.held), (unsigned long long)q->reserve,
                 (unsigned long long)s->responses.limit);
        fail(q, 503, "overloaded", msg, 1);
        return -1;
    }
    uint64_t at = now + 20 < q->budget_wait_end_ms ? now + 20 : q->budget_wait_end_ms;
    q->timer_kind = SG__QT_BUDGET;
    sg_timer_start(&q->loop->timers, &q->timer, at, on_timer);
    return -1;
}

static void start_lookup(sg_query_t *q)
{
    if (reserve_response(q) != 0)
        return;
    sg_timer_start(&q->loop->timers, &q->timer, q->deadline_ms, on_timer);
    q->timer_kind = SG__QT_DEADLINE;
    sg__query_lookup(q);
}

static void on_deadline(sg_query_t *q)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "deadline of %llu ms exceeded waiting for backend %s",
             (unsigned long long)(q->deadline_ms - q->start_us / 1000), q->serving->conf->name);
    fail(q, 504, "timeout", msg, 0);
}

static void on_timer(sg_timer_t *t)
{
    sg_query_t *q = H2O_STRUCT_FROM_MEMBER(sg_query_t, timer, t);
    if (q->timer_kind != SG__QT_DEADLINE) { /* the response budget: try again */
        start_lookup(q);
        return;
    }
    on_deadline(q);
}

static void on_result(sg_query_t *q, uint32_t ui, sg_blob_t *blob, sg_status status, const char *detail, uint32_t retry_after_s)
{
    if (q->responded)
        return;
    sg_uq_t *u = &q->uniq[ui];
    if (status == SG_OK) {
        if (u->blob == NULL) {
            u->blob = sg_blob_ref(blob);
            --q->n_pending;
            took_blob(q, u);
            if (check_bounds(q) == 0 && q->n_pending == 0)
                answer(q);
        }
        return;
    }
    /* a failed query: try the route's fallback backend once, else fail the whole query */
    const sg_backend_conf_t *rc = q->backend->conf;
    if (rc->fallback >= 0 && !u->fallback_tried && status != SG_EINVAL && status != SG_ETOOBIG && status != SG_ECANCELED) {
        u->fallback_tried = 1;
        if (!q->fallback_used) {
            q->fallback_used = 1;
            sg_counter_add(q->backend->fallbacks, 1);
            SG_LOG(SG_LL_INFO, "retrieve", "%s: backend %s failed (%s); using fallback %s", q->request_id, rc->name,
                   detail != NULL ? detail : sg_plugin_status_name(status), q->gen->routes[rc->fallback].conf->name);
        }
        q->serving = &q->gen->routes[rc->fallback];
        if (check_admissible(q) == 0)
            spend(q);
        return;
    }
    int http = sg_plugin_status_http(status);
    char msg[600];
    snprintf(msg, sizeof(msg), "backend %s: %s", q->serving->conf->name, detail != NULL ? detail : sg_plugin_status_name(status));
    fail(q, http, sg_plugin_status_name(status), msg, http == 503 && retry_after_s == 0 ? 1 : retry_after_s);
}

/* ---- the client's rate limit (rate.h) ---- */

static void rate_admitted(void *ctx, int waited)
{
    (void)waited;
    start_lookup(ctx);
}

static void rate_refused(void *ctx, int status, const char *type, const char *msg, uint32_t retry_after_s)
{
    fail(ctx, status, type, msg, retry_after_s);
}

static const sg_rate_next_t rate_next = {rate_admitted, rate_refused, query_gone, query_hold, query_release};

void sg_query_fail_all(sg_loop_t *loop, const char *why)
{
    while (!h2o_linklist_is_empty(&loop->active)) {
        sg_query_t *q = H2O_STRUCT_FROM_MEMBER(sg_query_t, link, loop->active.next);
        fail(q, 503, "unavailable", why, 1); /* unlinks it */
    }
}

void sg_query_cancel(sg_query_t *q)
{
    if (q != NULL)
        sg_outcome_cancel(&query_type, q, &q->responded, &q->rate);
}

static int uq_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const sg_uq_t *u = item;
    (void)ud;
    return u->len == key_len && memcmp(u->text, key, key_len) == 0;
}

/* The distinct texts of the batch: the same text twice is searched once. */
static void index_distinct(sg_query_t *q, const uint32_t *off, const uint32_t *len)
{
    uint32_t n = q->n_queries;
    q->slot_uniq = sg_mem_alloc(n * sizeof(uint32_t));
    q->uniq = sg_mem_calloc(n, sizeof(sg_uq_t));
    sg_hmap_t distinct;
    sg_hmap_init(&distinct, uq_eq, NULL, n);
    for (uint32_t i = 0; i < n; ++i) {
        sg_uq_t *u = &q->uniq[q->n_uniq]; /* filled in advance: kept only when the text is new */
        u->text = q->arena + off[i];
        u->len = len[i];
        sg_uq_t *got = sg_hmap_find_or_insert(&distinct, sg_hmap_hash(u->text, u->len), u->text, u->len, u);
        if (got == u)
            ++q->n_uniq;
        else
            *u = (sg_uq_t){0};
        ++got->mult;
        q->slot_uniq[i] = (uint32_t)(got - q->uniq);
    }
    sg_hmap_dispose(&distinct);
    q->n_pending = q->n_uniq;
}

/* The steps dispatch continues a query with (dispatch.h) */
const sg_dispatch_next_t sg__query_next = {took_blob, on_result, finish_if_complete};

/* A new query with copies of the spec's texts and parameters; linked into the loop's active list. */
static sg_query_t *query_new(sg_loop_t *loop, const sg_query_spec_t *spec, sg_query_done_fn done, void *ctx)
{
    sg_query_t *q = sg_mem_calloc(1, sizeof(*q));
    static __thread uint64_t seq;
    snprintf(q->request_id, sizeof(q->request_id), "%d-%llu", loop->id, (unsigned long long)++seq);
    q->refs = 1;
    h2o_linklist_insert(&loop->active, &q->link);
    q->done = done;
    q->next = &sg__query_next;
    q->ctx = ctx;
    q->loop = loop;
    q->backend = q->serving = spec->route;
    q->gen = sg_gen_ref(spec->route->gen); /* the route, its fallback and the client live as long as it */
    q->client = sg_clients_ref(spec->client);
    q->is_access = spec->is_access;
    q->admitted = spec->admitted;
    q->topk = spec->is_access ? 1 : spec->topk != 0 ? spec->topk : spec->route->conf->topk;
    q->params = spec->params != NULL && spec->params[0] != '\0' ? sg_strdup(spec->params) : NULL;
    q->shape = spec->shape;
    q->max_response_bytes = spec->max_response_bytes;
    q->envelope_bytes = spec->envelope_bytes;
    q->start_us = spec->start_us != 0 ? spec->start_us : sg_now_us();
    q->n_queries = spec->n;
    size_t total = 0;
    for (uint32_t i = 0; i < spec->n; ++i)
        total += spec->lens[i];
    uint32_t *off = sg_mem_alloc(spec->n * sizeof(*off));
    q->arena = sg_mem_alloc(total != 0 ? total : 1);
    for (uint32_t i = 0, at = 0; i < spec->n; at += spec->lens[i++]) {
        off[i] = at;
        memcpy(q->arena + at, spec->texts[i], spec->lens[i]);
    }
    index_distinct(q, off, spec->lens);
    free(off);
    sg_gauge_add(spec->route->meters.inflight, 1);
    return q;
}

sg_query_t *sg_query_start(sg_loop_t *loop, const sg_query_spec_t *spec, sg_query_done_fn done, void *ctx)
{
    sg_query_t *q = query_new(loop, spec, done, ctx);
    /* deadline: the route's timeout from arrival, which the caller may only shorten */
    uint64_t deadline_us = sg_query_deadline_us(q->start_us, spec->route->conf->timeout_ms, spec->deadline_us);
    q->deadline_ms = deadline_us / 1000;

    query_ref(q); /* the caller's handle stays valid through what follows */
    if (check_estimate(q) != 0)
        goto started;     /* 413 before any work, the rate limit not charged */
    if (spec->admitted) { /* the caller charged the client's rate limit for the whole request */
        start_lookup(q);
        goto started;
    }
    /* the client's rate limit, counted in queries; it may wait at most until the deadline */
    sg_rate_charge(&q->rate, loop, q->gen->clients, q->client, q->n_queries, q->start_us, deadline_us, &rate_next, q);
started:;
    int answered = q->responded;
    sg__query_unref(q);
    return answered ? NULL : q;
}
