/*
 * retrieve.c -- POST /retrieve and POST /access: the HTTP adapter over the query pipeline
 * (query.h).
 *
 *   identify the client (headers only) -> route (path, "backend" field, default) -> parse +
 *   validate the body -> search_params (the route's check_params) -> X-Timeout-Ms -> sg_query_start() ->
 *   stream {"result": [...]} spliced from the per-query fragments (respond.h)
 *
 * What precedes a query (unknown route, malformed body, unauthorised, an empty batch) is answered
 * here. Everything after it -- rate limits, cache, singleflight, admission, deadline, metrics --
 * happens in the query. A fusion route's /retrieve goes through the same steps to
 * sg_fusion_start() (fusion_route.h), a route type whose legs are queries. Loop thread only. The HTTP request's pool holds a slot
 * that cancels the query when the client goes away first, so done() always finds its request alive.
 */
#include "retrieve.h"
#include "http_common.h"
#include "runtime.h"
#include "clients.h"
#include "fusion_route.h"
#include "gen.h"
#include "json.h"
#include "outcome.h"
#include "provenance.h"
#include "query.h"
#include "request.h"
#include "respond.h"

#include <stdio.h>
#include <stdlib.h>

/* Lives in the HTTP request's pool: the link between the request and its query -- a route's, or
 * a fusion route's. */
typedef struct st_http_query_t {
    h2o_req_t *req;
    sg_query_t *q;               /* NULL once answered */
    sg_fusion_query_t *fq;       /* a fusion route's: NULL once answered */
    int shape;                   /* SG_SHAPE_*: how each result appears in the answer */
    const sg_provenance_t *prov; /* the route's, for X-Searchgate-Provenance */
} http_query_t;

/* log_level debug: one line per /retrieve or /access answered before it became a query. */
static void log_early(int is_access, const sg_route_t *b, const sg_client_t *client, int status, const char *type,
                      uint32_t n_queries, uint64_t start_us)
{
    SG_LOG(SG_LL_DEBUG, "request", "- POST %s backend=%s client=%s status=%d%s%s queries=%u ms=%.3f",
           is_access ? "/access" : "/retrieve", b != NULL ? b->conf->name : "-", client != NULL ? client->id : "-", status,
           type != NULL ? " error=" : "", type != NULL ? type : "", n_queries, (double)(sg_now_us() - start_us) / 1000.0);
}

static void on_query_done(void *ctx, const sg_query_result_t *res)
{
    http_query_t *hq = ctx;
    hq->q = NULL;
    sg_provenance_add_header(hq->req, hq->prov, res);
    if (res->status == 200) { /* streamed from the blobs, window by window (respond.h) */
        sg_respond_blobs(hq->req, res->blobs, res->n, hq->shape);
    } else {
        sg_send_error(hq->req, res->status, res->type, res->message, res->retry_after_s);
    }
}

/* A fusion query answered: as a route's, with the legs that failed in X-Searchgate-Fusion-Partial. */
static void on_fusion_done(void *ctx, const sg_query_result_t *res, const char *partial)
{
    http_query_t *hq = ctx;
    hq->fq = NULL;
    h2o_req_t *req = hq->req;
    sg_provenance_add_header(req, hq->prov, res);
    if (res->status != 200) {
        sg_send_error(req, res->status, res->type, res->message, res->retry_after_s);
        return;
    }
    if (partial != NULL) {
        size_t n = strlen(partial);
        char *v = h2o_mem_alloc_pool(&req->pool, n);
        memcpy(v, partial, n);
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-searchgate-fusion-partial"), 0, NULL, v, n);
    }
    sg_respond_blobs(req, res->blobs, res->n, hq->shape);
}

/* The HTTP request is being freed: if its query still runs, the client went away first. */
static void on_req_dispose(void *p)
{
    http_query_t *hq = p;
    sg_query_t *q = hq->q;
    sg_fusion_query_t *fq = hq->fq;
    hq->q = NULL;
    hq->fq = NULL;
    if (q != NULL)
        sg_query_cancel(q);
    if (fq != NULL)
        sg_fusion_cancel(fq);
}

/* A request answered before it became a query (malformed, unknown backend, unauthorised,
 * empty): counted on its backend when known, logged at debug, and answered. */
static void answer_early(h2o_req_t *req, int is_access, sg_route_t *b, const sg_client_t *client, int status, const char *type,
                         const char *msg, uint32_t n_queries, uint64_t start_us)
{
    if (sg_log_enabled(SG_LL_DEBUG))
        log_early(is_access, b, client, status, type, n_queries, start_us);
    if (b != NULL)
        sg_outcome_count_early(&b->meters, status, n_queries, start_us);
    if (status == 401) /* and the connection ends: its next request meets the connection gate again */
        req->http1_is_persistent = 0;
    sg_http_answer_early(req, status, type, msg, b != NULL ? &b->prov : NULL);
}

/* A bad X-Timeout-Ms header: found after the client was identified, so counted as one of its
 * requests too (the pipeline used to refuse it once the request had started). */
static void answer_invalid_timeout(h2o_req_t *req, int is_access, sg_route_t *b, sg_client_t *client, uint32_t n_queries,
                                   uint64_t start_us)
{
    sg_counter_add(client->m_requests, 1);
    sg_counter_add(client->m_queries, n_queries);
    answer_early(req, is_access, b, client, 422, "validation_error",
                 "header X-Timeout-Ms must be a positive integer (milliseconds)", n_queries, start_us);
}

/* A /retrieve or /access request on its way to becoming a query. */
typedef struct st_incoming_t {
    sg_loop_t *loop;
    sg_gen_t *gen; /* the loop's generation: everything below is of it (the query references it) */
    h2o_req_t *req;
    int is_access;
    uint64_t start_us;
    sg_route_t *route;
    sg_parsed_t pr;
    char *params; /* the route's canonical search parameters, or NULL */
    sg_client_t *client;
    int fusion;           /* the fusion route named (fusion_route.c), or -1 */
    const char *no_pages; /* /access on a route without a page store: the route's name */
} incoming_t;

static void incoming_free(incoming_t *in)
{
    free(in->params);
    sg_parsed_free(&in->pr);
    sg_clients_release(in->client);
}

/* The route named by the path (NULL: the default), or -1 after a 404. */
static int route_from_path(incoming_t *in, const char *bname, size_t blen)
{
    const sg_config_t *cfg = in->gen->cfg;
    in->route = &in->gen->routes[cfg->default_backend];
    if (bname == NULL)
        return 0;
    int bi = sg_config_find_backend(cfg, bname, blen);
    if (bi < 0 && (in->fusion = sg_fusion_conf_find(cfg, bname, blen)) >= 0) {
        in->route = NULL;
        return 0;
    }
    if (bi < 0) {
        char msg[200];
        snprintf(msg, sizeof(msg), "no backend named \"%.*s\" is configured", (int)(blen > 64 ? 64 : blen), bname);
        sg_ops_count_route(in->req, SG_OPS_OTHER, 404); /* no route's series: a job on a wrong URL shows here */
        answer_early(in->req, in->is_access, NULL, NULL, 404, "not_found", msg, 0, in->start_us);
        return -1;
    }
    in->route = &in->gen->routes[bi];
    return 0;
}

/* Parses the body, and takes the route from its "backend" field when the path named none. */
static int parse_body(incoming_t *in, int path_named_route)
{
    const sg_config_t *cfg = in->gen->cfg;
    /* max_body_bytes is the start-up config's (h2o reads bodies up to twice it) */
    sg_request_limits_t lim = {in->loop->server->cfg->limits.max_body_bytes, cfg->limits.max_queries, cfg->limits.max_query_bytes,
                               cfg->limits.max_topk};
    char err[512];
    h2o_req_t *req = in->req;
    sg_counter_add(in->loop->server->body_bytes_parsed, req->entity.base != NULL ? req->entity.len : 0);
    int st = sg_request_parse(req->entity.base, req->entity.base != NULL ? req->entity.len : 0, &lim, in->is_access, &in->pr, err,
                              sizeof(err));
    if (st != 0) {
        answer_early(req, in->is_access, in->route, NULL, st,
                     st == 400   ? "invalid_json"
                     : st == 413 ? "too_large"
                                 : "validation_error",
                     err, 0, in->start_us);
        return -1;
    }
    if (in->pr.backend != NULL && !path_named_route) {
        int bi = sg_config_find_backend(cfg, in->pr.backend, strlen(in->pr.backend));
        if (bi < 0 && (in->fusion = sg_fusion_conf_find(cfg, in->pr.backend, strlen(in->pr.backend))) >= 0)
            return 0;
        if (bi < 0) {
            snprintf(err, sizeof(err), "no backend named \"%.64s\" is configured", in->pr.backend);
            sg_ops_count_route(req, SG_OPS_OTHER, 404);
            answer_early(req, in->is_access, NULL, NULL, 404, "not_found", err, 0, in->start_us);
            return -1;
        }
        in->route = &in->gen->routes[bi];
    }
    /* a fusion route: /retrieve is its own; /access goes to its first leg with a page store */
    if (in->fusion >= 0 && !in->is_access)
        return 0;
    if (in->fusion >= 0 && (in->route = sg_fusion_access_backend(in->gen, in->fusion)) == NULL)
        in->no_pages = cfg->fusions[in->fusion].name; /* none of its legs has a page store */
    else if (in->is_access && !in->route->core->serves_access)
        in->no_pages = in->route->conf->name;
    return 0;
}

/* /access on a route without a page store: a null page per URL, with 200, as RLinf's and
 * ASearcher's own servers answer a page they do not have. Their clients retry any error (a 404
 * included) ten times ten seconds apart; a null is shown at once as an empty page. The header and
 * searchgate_access_no_page_store_total say why the pages are missing. */
static void answer_no_pages(incoming_t *in)
{
    h2o_req_t *req = in->req;
    char name[200];
    snprintf(name, sizeof(name), "backend=\"%s\"", in->no_pages);
    sg_counter_add(sg_metrics_counter("searchgate_access_no_page_store_total", SG_ACCESS_NO_PAGES_HELP, name), 1);
    size_t n = in->pr.n, len = sizeof("{\"result\":[]}") - 1 + (n > 0 ? 5 * n - 1 : 0);
    char *body = h2o_mem_alloc_pool(&req->pool, len + 1), *p = body;
    memcpy(p, "{\"result\":[", 11);
    p += 11;
    for (size_t i = 0; i < n; ++i) {
        memcpy(p, i == 0 ? "null" : ",null", i == 0 ? 4 : 5);
        p += i == 0 ? 4 : 5;
    }
    memcpy(p, "]}", 3); /* with its NUL: answer_early takes a C string */
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-searchgate-no-page-store"), 0, NULL, in->no_pages,
                          strlen(in->no_pages));
    answer_early(req, 1, in->route, in->client, 200, NULL, body, in->pr.n, in->start_us);
}

/* "search_params": validated and canonicalised by the route's backend (ABI 1.1 check_params). */
static int check_search_params(incoming_t *in)
{
    if (in->pr.search_params == NULL)
        return 0;
    sg_route_t *b = in->route;
    sg_check_params_fn check = sg_plugin_check_params(b->core->plugin.vt);
    char canon[256], detail[400];
    sg_status pst = SG_EINVAL;
    if (check == NULL)
        snprintf(detail, sizeof(detail), "backend %s takes no search_params", b->conf->name);
    else
        pst =
            check(b->core->inst, in->pr.search_params, strlen(in->pr.search_params), canon, sizeof(canon), detail, sizeof(detail));
    if (pst != SG_OK) {
        int http = sg_plugin_status_http(pst);
        answer_early(in->req, in->is_access, b, NULL, http,
                     http == 413   ? "too_large"
                     : http == 422 ? "validation_error"
                                   : sg_plugin_status_name(pst),
                     detail, 0, in->start_us);
        return -1;
    }
    canon[sizeof(canon) - 1] = '\0';
    if (canon[0] != '\0')
        in->params = sg_strdup(canon);
    return 0;
}

/* X-Timeout-Ms shortens (never lengthens) a route's timeout: writes the absolute deadline it asks
 * for (0 when the header is absent or not shorter than `route_timeout_ms`), or returns -1 when the
 * header is not a positive integer (422). */
static int timeout_header(h2o_req_t *req, uint32_t route_timeout_ms, uint64_t start_us, uint64_t *deadline_us)
{
    *deadline_us = 0;
    h2o_iovec_t th = sg_http_header(req, H2O_STRLIT("x-timeout-ms"));
    if (th.base == NULL)
        return 0;
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
    if (!digits || *end != '\0' || v == 0)
        return -1;
    if (v < route_timeout_ms)
        *deadline_us = start_us + v * 1000;
    return 0;
}

static void start_query(incoming_t *in, uint64_t deadline_us)
{
    sg_parsed_t *pr = &in->pr;
    const char **texts = sg_mem_alloc(pr->n * sizeof(*texts));
    for (uint32_t i = 0; i < pr->n; ++i)
        texts[i] = pr->arena + pr->off[i];
    sg_query_spec_t spec = {.route = in->route,
                            .client = in->client,
                            .texts = texts,
                            .lens = pr->len,
                            .n = pr->n,
                            .topk = pr->topk,
                            .is_access = in->is_access,
                            .params = in->params,
                            .start_us = in->start_us,
                            .deadline_us = deadline_us,
                            .shape = in->is_access       ? SG_SHAPE_PAGE
                                     : pr->return_scores ? SG_SHAPE_SCORED
                                                         : SG_SHAPE_FLAT,
                            .max_response_bytes = in->gen->cfg->limits.max_response_bytes,
                            .envelope_bytes = sg_respond_envelope(pr->n)};
    http_query_t *hq = h2o_mem_alloc_shared(&in->req->pool, sizeof(*hq), on_req_dispose);
    *hq = (http_query_t){in->req, NULL, NULL, spec.shape, &in->route->prov};
    sg_query_t *q = sg_query_start(in->loop, &spec, on_query_done, hq);
    if (q != NULL) /* else done() already ran, and the request may be gone */
        hq->q = q;
    free(texts);
}

/* ---- POST /retrieve on a fusion route: the same adapter over sg_fusion_start() ---- */

/* Answered before the fan-out: counted on the fusion route (and on the client once known). */
static void answer_fusion_early(incoming_t *in, sg_client_t *client, int status, const char *type, const char *msg,
                                uint32_t n_queries)
{
    sg_fusion_count_early(in->gen, in->fusion, status, n_queries, in->start_us);
    if (client != NULL && status != 200) {
        sg_counter_add(client->m_requests, 1);
        sg_counter_add(client->m_queries, n_queries);
    }
    sg_http_answer_early(in->req, status, type, msg, sg_fusion_prov(in->gen->fusion, (size_t)in->fusion));
}

static void start_fusion(incoming_t *in)
{
    const sg_fusion_conf_t *fc = &in->gen->cfg->fusions[in->fusion];
    sg_parsed_t *pr = &in->pr;
    if (pr->search_params != NULL) {
        char err[300];
        snprintf(err, sizeof(err),
                 "fusion route %s takes no search_params (its legs are searched with their own settings; send them to a leg's "
                 "route)",
                 fc->name);
        answer_fusion_early(in, NULL, 422, "validation_error", err, 0);
        return;
    }
    if (pr->n == 0) {
        answer_fusion_early(in, in->client, 200, NULL, "{\"result\":[]}", 0);
        return;
    }
    /* deadline: the route's timeout, shortened (never lengthened) by X-Timeout-Ms; shared by the legs */
    uint64_t deadline_us;
    if (timeout_header(in->req, fc->timeout_ms, in->start_us, &deadline_us) != 0) {
        answer_fusion_early(in, in->client, 422, "validation_error",
                            "header X-Timeout-Ms must be a positive integer (milliseconds)", pr->n);
        return;
    }
    const char **texts = sg_mem_alloc(pr->n * sizeof(*texts));
    for (uint32_t i = 0; i < pr->n; ++i)
        texts[i] = pr->arena + pr->off[i];
    sg_fusion_spec_t spec = {.gen = in->gen,
                             .route = in->fusion,
                             .client = in->client,
                             .texts = texts,
                             .lens = pr->len,
                             .n = pr->n,
                             .topk = pr->topk,
                             .start_us = in->start_us,
                             .deadline_us = deadline_us,
                             .shape = pr->return_scores ? SG_SHAPE_SCORED : SG_SHAPE_FLAT,
                             .max_response_bytes = in->gen->cfg->limits.max_response_bytes,
                             .envelope_bytes = sg_respond_envelope(pr->n)};
    http_query_t *hq = h2o_mem_alloc_shared(&in->req->pool, sizeof(*hq), on_req_dispose);
    *hq = (http_query_t){in->req, NULL, NULL, spec.shape, sg_fusion_prov(in->gen->fusion, (size_t)in->fusion)};
    sg_fusion_query_t *fq = sg_fusion_start(in->loop, &spec, on_fusion_done, hq);
    if (fq != NULL) /* else done() already ran, and the request may be gone */
        hq->fq = fq;
    free(texts);
}

void sg_retrieve_init(const sg_gen_t *prev, const sg_gen_t *g)
{
    const sg_config_t *cfg = g->cfg;
    char l[200];
    for (size_t i = 0; i < g->n_routes + cfg->n_fusions; ++i) {
        int plugin_route = i < g->n_routes;
        const char *name = plugin_route ? cfg->backends[i].name : cfg->fusions[i - g->n_routes].name;
        if (plugin_route ? g->routes[i].core->serves_access : sg_fusion_access_backend(g, (int)(i - g->n_routes)) != NULL)
            continue;
        snprintf(l, sizeof(l), "backend=\"%s\"", name);
        sg_metrics_counter("searchgate_access_no_page_store_total", SG_ACCESS_NO_PAGES_HELP, l);
    }
    const sg_route_t *def = &g->routes[cfg->default_backend];
    const sg_route_t *was = prev != NULL ? &prev->routes[prev->cfg->default_backend] : NULL;
    /* said once: at start-up, and when a reload gives the default route's role to a route without pages */
    if (!def->core->serves_access && (was == NULL || was->core->serves_access || strcmp(was->conf->name, def->conf->name) != 0))
        SG_LOG(SG_LL_WARN, "main",
               "default route %s has no page store: POST /access answers a null page per URL (header "
               "X-Searchgate-No-Page-Store), which RLinf WideSeek and ASearcher show as an empty page; give it pages "
               "(docs/clients.md) if a client browses",
               def->conf->name);
}

int sg_retrieve_handle(sg_loop_t *loop, h2o_req_t *req, int is_access, const char *bname, size_t blen)
{
    incoming_t in = {.loop = loop, .gen = loop->gen, .req = req, .is_access = is_access, .start_us = sg_now_us(), .fusion = -1};
    uint64_t deadline_us;
    /* the client first, from the headers alone: a request that cannot be served learns nothing of
     * the routes, the limits or what its body holds, and its body is never parsed */
    const char *why = NULL;
    if ((in.client = sg_clients_identify_request(in.gen->clients, req, &why)) == NULL) {
        answer_early(req, is_access, NULL, NULL, 401, "unauthorized", why, 0, in.start_us);
        goto out;
    }
    if (route_from_path(&in, bname, blen) != 0 || parse_body(&in, bname != NULL) != 0)
        goto out;
    if (in.fusion >= 0 && !is_access) {
        start_fusion(&in);
        goto out;
    }
    if (in.no_pages == NULL && check_search_params(&in) != 0)
        goto out;
    if (in.no_pages != NULL) {
        answer_no_pages(&in);
        goto out;
    }
    if (in.pr.n == 0) { /* the Search-R1 loop may post an empty batch */
        answer_early(req, is_access, in.route, in.client, 200, NULL, "{\"result\":[]}", 0, in.start_us);
        goto out;
    }
    if (timeout_header(in.req, in.route->conf->timeout_ms, in.start_us, &deadline_us) != 0) {
        answer_invalid_timeout(req, is_access, in.route, in.client, in.pr.n, in.start_us);
        goto out;
    }
    start_query(&in, deadline_us);
out:
    incoming_free(&in);
    return 0;
}
