/*
 * retrieve.c -- one POST /retrieve (or /access) from arrival to response.
 *
 *   parse + validate -> identify the client -> rate limit (wait or refuse) -> cache (L1, then
 *   one MGET to Redis) -> dispatch the misses (singleflight, admission, plugin) -> splice the
 *   per-query fragments into {"result": [...]} -> respond.
 *
 * Everything here runs on the request's loop thread. The request holds one reference on itself
 * until it has answered (or the client went away); an outstanding Redis lookup holds another.
 * A deadline timer answers 504 and abandons the backend work when the route's timeout (or the
 * client's shorter X-Timeout-Ms) passes.
 */
#include "server.h"
#include "clients.h"
#include "budget.h"
#include "json.h"
#include "request.h"
#include "../cache/cache.h"

#include <stdio.h>
#include <stdlib.h>

static void rreq_free(sg_rreq_t *r)
{
    if (r->dispose_slot != NULL)
        *r->dispose_slot = NULL;
    for (uint32_t i = 0; i < r->n_uniq; ++i)
        sg_blob_release(r->uniq[i].blob);
    sg_clients_release(r->client);
    free(r->slot_uniq);
    free(r->uniq);
    free(r->arena);
    free(r->params);
    free(r);
}

void sg_rreq_unref(sg_rreq_t *r)
{
    if (--r->refs == 0)
        rreq_free(r);
}

/* log_level debug: one line per /retrieve or /access request, whatever its outcome. */
static void log_request(const char *id, int is_access, const sg_backend_t *b, const sg_client_t *client, int status,
                        const char *type, uint32_t n_queries, const sg_rreq_t *r, uint64_t start_us)
{
    char cache[96] = "";
    if (r != NULL && !r->is_access)
        snprintf(cache, sizeof(cache), " distinct=%u l1=%u redis=%u misses=%u", r->n_uniq, r->hits_l1, r->hits_redis, r->misses);
    SG_LOG(SG_LL_DEBUG, "request", "%s POST %s backend=%s client=%s status=%d%s%s queries=%u%s%s%s ms=%.3f", id,
           is_access ? "/access" : "/retrieve", b != NULL ? b->conf->name : "-", client != NULL ? client->id : "-", status,
           type != NULL ? " error=" : "", type != NULL ? type : "", n_queries, cache,
           r != NULL && r->fallback_used ? " fallback=" : "", r != NULL && r->fallback_used ? r->serving->conf->name : "",
           (double)(sg_now_us() - start_us) / 1000.0);
}

/* Records the outcome in every metric; called exactly once per request. */
static void record(sg_rreq_t *r, int status, const char *type)
{
    if (sg_log_level >= SG_LL_DEBUG)
        log_request(r->request_id, r->is_access, r->backend, r->client, status, type, r->n_queries, r, r->start_us);
    sg_backend_t *b = r->backend;
    int ci = sg_code_index(status);
    uint64_t lat = sg_now_us() - r->start_us;
    sg_counter_add(b->requests[ci], 1);
    sg_counter_add(b->queries[ci], r->n_queries);
    sg_hist_observe_us(b->latency, lat);
    sg_gauge_add(b->inflight_requests, -1);
    if (r->client != NULL) {
        sg_counter_add(r->client->m_requests, 1);
        sg_counter_add(r->client->m_queries, r->n_queries);
        sg_counter_add(r->client->m_hits_l1, r->hits_l1);
        sg_counter_add(r->client->m_hits_redis, r->hits_redis);
        sg_counter_add(r->client->m_misses, r->misses);
        if (status == 504)
            sg_counter_add(r->client->m_timeouts, 1);
    }
    if (!r->is_access)
        sg_counter_add(b->cache_misses, r->misses);
    sg_ring_record_request(r->n_queries, r->hits_l1 + r->hits_redis, r->misses, status >= 400, lat);
}

/* Ends the request's work: timers, flights. The caller sends (or cannot send) the response. */
static void finish(sg_rreq_t *r, int status, const char *type)
{
    r->responded = 1;
    if (h2o_linklist_is_linked(&r->link))
        h2o_linklist_unlink(&r->link);
    sg_timer_stop(r->loop, &r->timer);
    sg_dispatch_abandon(r);
    record(r, status, type);
}

static void fail_request(sg_rreq_t *r, int status, const char *type, const char *msg, uint32_t retry_after)
{
    if (r->responded)
        return;
    finish(r, status, type);
    if (r->req != NULL)
        sg_send_error(r->req, status, type, msg, retry_after);
    sg_rreq_unref(r);
}

static void respond_ok(sg_rreq_t *r)
{
    finish(r, 200, NULL);
    h2o_req_t *req = r->req;
    if (req != NULL) {
        size_t total = sizeof("{\"result\":[]}") - 1 + (r->n_queries > 0 ? r->n_queries - 1 : 0);
        for (uint32_t i = 0; i < r->n_queries; ++i) {
            const sg_blob_t *b = r->uniq[r->slot_uniq[i]].blob;
            if (r->is_access)
                total += b->n_hits > 0 ? b->docs[0].len : 4;
            else
                total += sg_blob_fragment_len(b, r->return_scores);
        }
        char *body = h2o_mem_alloc_pool(&req->pool, total), *p = body;
        memcpy(p, "{\"result\":[", 11);
        p += 11;
        for (uint32_t i = 0; i < r->n_queries; ++i) {
            const sg_blob_t *b = r->uniq[r->slot_uniq[i]].blob;
            if (i != 0)
                *p++ = ',';
            if (!r->is_access) {
                p = sg_blob_write_fragment(b, r->return_scores, p);
            } else if (b->n_hits > 0) {
                memcpy(p, b->json + b->docs[0].off, b->docs[0].len);
                p += b->docs[0].len;
            } else {
                memcpy(p, "null", 4);
                p += 4;
            }
        }
        memcpy(p, "]}", 2);
        p += 2;
        static h2o_generator_t generator = {NULL, NULL};
        req->res.status = 200;
        req->res.reason = "OK";
        req->res.content_length = (size_t)(p - body);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
        h2o_iovec_t buf = h2o_iovec_init(body, (size_t)(p - body));
        h2o_start_response(req, &generator);
        h2o_send(req, &buf, 1, H2O_SEND_STATE_FINAL);
    }
    sg_rreq_unref(r);
}

static void on_timer(sg_timer_t *t);

static void on_deadline(sg_rreq_t *r)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "deadline of %llu ms exceeded waiting for backend %s",
             (unsigned long long)(r->deadline_ms - r->start_us / 1000), r->serving->conf->name);
    fail_request(r, 504, "timeout", msg, 0);
}

void sg_rreq_after_cache(sg_rreq_t *r)
{
    if (r->responded)
        return;
    r->misses = r->n_pending;
    if (r->n_pending == 0) {
        respond_ok(r);
        return;
    }
    sg_budget_dispatch(r, fail_request); /* spend budgets, then sg_dispatch_misses() */
}

void sg_rreq_finish_if_complete(sg_rreq_t *r)
{
    if (!r->responded && r->n_pending == 0)
        respond_ok(r);
}

static void start_lookup(sg_rreq_t *r)
{
    sg_timer_start(r->loop, &r->timer, r->deadline_ms, on_timer);
    r->timer_is_ratelimit = 0;
    sg_cache_lookup(r);
}

static void on_timer(sg_timer_t *t)
{
    sg_rreq_t *r = H2O_STRUCT_FROM_MEMBER(sg_rreq_t, timer, t);
    if (r->timer_is_ratelimit) {
        start_lookup(r);
        return;
    }
    on_deadline(r);
}

void sg_rreq_on_result(sg_rreq_t *r, uint32_t ui, sg_blob_t *blob, sg_status status, const char *detail, uint32_t retry_after_s)
{
    if (r->responded)
        return;
    sg_uq_t *u = &r->uniq[ui];
    if (status == SG_OK) {
        if (u->blob == NULL) {
            u->blob = sg_blob_ref(blob);
            if (--r->n_pending == 0)
                respond_ok(r);
        }
        return;
    }
    /* a failed query: try the route's fallback backend once, else fail the whole request */
    const sg_backend_conf_t *rc = r->backend->conf;
    if (rc->fallback >= 0 && !u->fallback_tried && status != SG_EINVAL && status != SG_ETOOBIG && status != SG_ECANCELED) {
        u->fallback_tried = 1;
        if (!r->fallback_used) {
            r->fallback_used = 1;
            sg_counter_add(r->backend->fallbacks, 1);
            SG_LOG(SG_LL_INFO, "retrieve", "%s: backend %s failed (%s); using fallback %s", r->request_id, rc->name,
                   detail != NULL ? detail : sg_plugin_status_name(status), sg_server.backends[rc->fallback].conf->name);
        }
        r->serving = &sg_server.backends[rc->fallback];
        sg_budget_dispatch(r, fail_request);
        return;
    }
    int http = sg_plugin_status_http(status);
    char msg[600];
    snprintf(msg, sizeof(msg), "backend %s: %s", r->serving->conf->name, detail != NULL ? detail : sg_plugin_status_name(status));
    fail_request(r, http, sg_plugin_status_name(status), msg, http == 503 && retry_after_s == 0 ? 1 : retry_after_s);
}

/* Acts on a rate-limit decision: -1 (no answer: fail open) and SG_RL_ALLOW go on at once. */
static void on_rate_decision(sg_rreq_t *r, int rl, uint64_t wait_us)
{
    sg_client_t *client = r->client;
    const sg_client_conf_t *cc = client->conf;
    if (rl == SG_RL_DENY) {
        sg_counter_add(client->m_rate_limited, 1);
        uint32_t retry = (uint32_t)((wait_us + 999999) / 1000000);
        if (retry == 0)
            retry = 1;
        char msg[240];
        if (cc->mode == SG_RL_REJECT) {
            snprintf(msg, sizeof(msg), "rate limit of client %s exceeded (%.6g queries/s, burst %.6g); retry in %u s", client->id,
                     cc->rate, cc->burst, retry);
            fail_request(r, 429, "rate_limited", msg, retry);
        } else {
            snprintf(msg, sizeof(msg),
                     "rate limit of client %s: the wait (%.0f ms) would exceed the allowed %llu ms; retry in %u s", client->id,
                     (double)wait_us / 1000, (unsigned long long)(r->max_wait_us / 1000), retry);
            fail_request(r, 503, "rate_limited", msg, retry);
        }
        return;
    }
    if (rl == SG_RL_WAIT) {
        sg_counter_add(client->m_queued, 1);
        sg_hist_observe_us(client->m_wait, wait_us);
        r->timer_is_ratelimit = 1;
        sg_timer_start(r->loop, &r->timer, sg_now_ms() + (wait_us + 999) / 1000, on_timer);
        return;
    }
    start_lookup(r);
}

void sg_retrieve_fail_all(sg_loop_t *loop, const char *why)
{
    while (!h2o_linklist_is_empty(&loop->active)) {
        sg_rreq_t *r = H2O_STRUCT_FROM_MEMBER(sg_rreq_t, link, loop->active.next);
        fail_request(r, 503, "unavailable", why, 1); /* unlinks it */
    }
}

static void on_req_dispose(void *p)
{
    sg_rreq_t **slot = p;
    sg_rreq_t *r = *slot;
    if (r == NULL)
        return;
    r->req = NULL;
    r->dispose_slot = NULL;
    if (!r->responded) { /* the client went away before the answer */
        finish(r, 499, "client_gone");
        sg_rreq_unref(r);
    }
}

static h2o_iovec_t find_header(h2o_req_t *req, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
    return i >= 0 ? req->headers.entries[i].value : h2o_iovec_init(NULL, 0);
}

static sg_client_t *identify(sg_loop_t *loop, h2o_req_t *req, const char **why)
{
    h2o_iovec_t key;
    if (sg_clients_presented_key(req, &key, why) != 0)
        return NULL;
    h2o_iovec_t cid = find_header(req, H2O_STRLIT("x-client-id"));
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername != NULL ? req->conn->callbacks->get_peername(req->conn, (void *)&ss) : 0;
    return sg_clients_identify(loop->server->clients, key.base, key.len, cid.base, cid.len, sl > 0 ? (struct sockaddr *)&ss : NULL,
                               why);
}

/* A request answered before it became an sg_rreq_t (malformed, unknown backend, unauthorised,
 * empty): counted on its backend when known, logged at debug, and answered. */
static void answer_early(h2o_req_t *req, int is_access, sg_backend_t *b, const sg_client_t *client, int status, const char *type,
                         const char *msg, uint32_t n_queries, uint64_t start_us)
{
    if (sg_log_level >= SG_LL_DEBUG)
        log_request("-", is_access, b, client, status, type, n_queries, NULL, start_us);
    if (b != NULL) {
        int ci = sg_code_index(status);
        uint64_t lat = sg_now_us() - start_us;
        sg_counter_add(b->requests[ci], 1);
        sg_counter_add(b->queries[ci], n_queries);
        sg_hist_observe_us(b->latency, lat);
        sg_ring_record_request(n_queries, 0, 0, status >= 400, lat);
    }
    if (status == 401)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
    if (status == 200)
        sg_send_json(req, 200, msg, strlen(msg));
    else
        sg_send_error(req, status, type, msg, 0);
}

int sg_retrieve_handle(sg_loop_t *loop, h2o_req_t *req, int is_access, const char *bname, size_t blen)
{
    sg_server_t *s = loop->server;
    const sg_config_t *cfg = s->cfg;
    uint64_t start_us = sg_now_us();
    sg_backend_t *b = &s->backends[cfg->default_backend];
    if (bname != NULL) {
        int bi = sg_config_find_backend(cfg, bname, blen);
        if (bi < 0) {
            char msg[200];
            snprintf(msg, sizeof(msg), "no backend named \"%.*s\" is configured", (int)(blen > 64 ? 64 : blen), bname);
            answer_early(req, is_access, NULL, NULL, 404, "not_found", msg, 0, start_us);
            return 0;
        }
        b = &s->backends[bi];
    }
    sg_request_limits_t lim = {cfg->limits.max_body_bytes, cfg->limits.max_queries, cfg->limits.max_query_bytes,
                               cfg->limits.max_topk};
    sg_parsed_t pr;
    char err[512];
    int st =
        sg_request_parse(req->entity.base, req->entity.base != NULL ? req->entity.len : 0, &lim, is_access, &pr, err, sizeof(err));
    if (st != 0) {
        answer_early(req, is_access, b, NULL, st,
                     st == 400   ? "invalid_json"
                     : st == 413 ? "too_large"
                                 : "validation_error",
                     err, 0, start_us);
        return 0;
    }
    if (pr.backend != NULL && bname == NULL) {
        int bi = sg_config_find_backend(cfg, pr.backend, strlen(pr.backend));
        if (bi < 0) {
            snprintf(err, sizeof(err), "no backend named \"%.64s\" is configured", pr.backend);
            sg_parsed_free(&pr);
            answer_early(req, is_access, NULL, NULL, 404, "not_found", err, 0, start_us);
            return 0;
        }
        b = &s->backends[bi];
    }
    if (is_access && !b->serves_access) {
        snprintf(err, sizeof(err), "backend %s has no page store: /access is not available on it", b->conf->name);
        sg_parsed_free(&pr);
        answer_early(req, is_access, b, NULL, 404, "not_found", err, 0, start_us);
        return 0;
    }
    /* "search_params": validated and canonicalised by the route's backend (ABI 1.1 check_params) */
    char *params = NULL;
    if (pr.search_params != NULL) {
        sg_check_params_fn check = sg_plugin_check_params(b->plugin.vt);
        char canon[256], detail[400];
        sg_status pst = SG_EINVAL;
        if (check == NULL)
            snprintf(detail, sizeof(detail), "backend %s takes no search_params", b->conf->name);
        else
            pst = check(b->inst, pr.search_params, strlen(pr.search_params), canon, sizeof(canon), detail, sizeof(detail));
        if (pst != SG_OK) {
            int http = sg_plugin_status_http(pst);
            sg_parsed_free(&pr);
            answer_early(req, is_access, b, NULL, http,
                         http == 413   ? "too_large"
                         : http == 422 ? "validation_error"
                                       : sg_plugin_status_name(pst),
                         detail, 0, start_us);
            return 0;
        }
        canon[sizeof(canon) - 1] = '\0';
        if (canon[0] != '\0')
            params = sg_strdup(canon);
    }
    const char *why = NULL;
    sg_client_t *client = identify(loop, req, &why);
    if (client == NULL) {
        free(params);
        sg_parsed_free(&pr);
        answer_early(req, is_access, b, NULL, 401, "unauthorized", why, 0, start_us);
        return 0;
    }
    if (pr.n == 0) { /* the Search-R1 loop may post an empty batch */
        free(params);
        sg_parsed_free(&pr);
        answer_early(req, is_access, b, client, 200, NULL, "{\"result\":[]}", 0, start_us);
        sg_clients_release(client);
        return 0;
    }

    sg_rreq_t *r = sg_mem_calloc(1, sizeof(*r));
    static __thread uint64_t seq;
    snprintf(r->request_id, sizeof(r->request_id), "%d-%llu", loop->id, (unsigned long long)++seq);
    r->refs = 1;
    h2o_linklist_insert(&loop->active, &r->link);
    r->req = req;
    r->loop = loop;
    r->backend = r->serving = b;
    r->client = client;
    r->is_access = is_access;
    r->topk = is_access ? 1 : pr.topk != 0 ? pr.topk : b->conf->topk;
    r->return_scores = pr.return_scores;
    r->params = params;
    r->start_us = start_us;
    r->n_queries = pr.n;
    r->arena = pr.arena;
    pr.arena = NULL;
    sg_gauge_add(b->inflight_requests, 1);

    /* distinct queries: the same text twice in one batch is searched once */
    r->slot_uniq = sg_mem_alloc(pr.n * sizeof(uint32_t));
    r->uniq = sg_mem_calloc(pr.n, sizeof(sg_uq_t));
    size_t cap = 16;
    while (cap < (size_t)pr.n * 2)
        cap *= 2;
    uint32_t *table = sg_mem_calloc(cap, sizeof(uint32_t));
    for (uint32_t i = 0; i < pr.n; ++i) {
        const char *t = r->arena + pr.off[i];
        uint32_t l = pr.len[i];
        uint64_t h = sg_hash64(t, l, 3);
        size_t pos = h & (cap - 1);
        for (;;) {
            uint32_t e = table[pos];
            if (e == 0) {
                sg_uq_t *u = &r->uniq[r->n_uniq];
                u->text = t;
                u->len = l;
                u->hash = h;
                table[pos] = ++r->n_uniq;
                r->slot_uniq[i] = r->n_uniq - 1;
                break;
            }
            sg_uq_t *u = &r->uniq[e - 1];
            if (u->hash == h && u->len == l && memcmp(u->text, t, l) == 0) {
                r->slot_uniq[i] = e - 1;
                break;
            }
            pos = (pos + 1) & (cap - 1);
        }
    }
    free(table);
    sg_parsed_free(&pr);
    r->n_pending = r->n_uniq;

    /* the client gone before the answer: drop our reference to req */
    sg_rreq_t **slot = h2o_mem_alloc_shared(&req->pool, sizeof(*slot), on_req_dispose);
    *slot = r;
    r->dispose_slot = slot;

    /* deadline: the route's timeout, shortened (never lengthened) by X-Timeout-Ms */
    uint64_t timeout = b->conf->timeout_ms;
    h2o_iovec_t th = find_header(req, H2O_STRLIT("x-timeout-ms"));
    if (th.base != NULL) {
        char tmp[24];
        size_t n = th.len < sizeof(tmp) - 1 ? th.len : sizeof(tmp) - 1;
        memcpy(tmp, th.base, n);
        tmp[n] = '\0';
        /* digits only: strtoull would take "-5" (as a huge value), "+5" and " 5" */
        int digits = th.len > 0 && th.len < sizeof(tmp) - 1;
        for (size_t i = 0; digits && i < n; ++i)
            digits = tmp[i] >= '0' && tmp[i] <= '9';
        char *end = tmp;
        unsigned long long v = digits ? strtoull(tmp, &end, 10) : 0;
        if (!digits || *end != '\0' || v == 0) {
            fail_request(r, 422, "validation_error", "header X-Timeout-Ms must be a positive integer (milliseconds)", 0);
            return 0;
        }
        if (v < timeout)
            timeout = v;
    }
    r->deadline_ms = start_us / 1000 + timeout;

    /* the client's rate limit, counted in queries */
    const sg_client_conf_t *cc = client->conf;
    uint64_t remaining_us = timeout * 1000;
    uint64_t max_wait_us = cc->mode == SG_RL_QUEUE ? (uint64_t)cc->max_wait_ms * 1000 : 0;
    if (max_wait_us > remaining_us)
        max_wait_us = remaining_us;
    r->max_wait_us = max_wait_us;
    if (cc->rate > 0 && cc->global && sg_cache_global_limit(r, client, r->n_queries, max_wait_us, on_rate_decision) == 0)
        return 0; /* Redis decides; when it cannot, the request goes on (fail open) */
    uint64_t wait_us = 0;
    int rl = cc->global ? SG_RL_ALLOW : sg_clients_ratelimit(s->clients, client, r->n_queries, start_us, max_wait_us, &wait_us);
    if (rl != SG_RL_ALLOW) {
        on_rate_decision(r, rl, wait_us);
        return 0;
    }
    start_lookup(r);
    return 0;
}
