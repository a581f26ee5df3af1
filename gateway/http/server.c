/*
 * server.c -- event-loop threads, listeners, timers and the HTTP routes other than /retrieve.
 *
 * Each loop thread owns an h2o context, its own SO_REUSEPORT listener (the kernel spreads
 * connections across them) and a timer heap. h2o 2.2.5 only has fixed-duration timeout lists,
 * so deadlines of any length live in the heap and the loop passes the time to the next one as
 * h2o_evloop_run()'s max_wait.
 */
#include "server.h"
#include "http_common.h"
#include "respond.h"
#include "stats_ring.h"
#include "fusion_route.h"
#include "clients.h"
#include "gen.h"
#include "budget.h"
#include "blas.h"
#include "json.h"
#include "listen.h"
#include "gate.h"
#include "mcp.h"
#include "provenance.h"
#include "query.h"
#include "dispatch.h"
#include "retrieve.h"
#include "../../cache/cache.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* 1 when at least one loop has a live Redis connection, 0 when none, 2 when the circuit breaker is
 * open (Redis stopped answering and is skipped), 3 when none is up because Redis (or a sentinel)
 * refuses the connection set-up (credentials, ACL, db), -1 when Redis is off. */
static int redis_state(const sg_server_t *s)
{
    if (!s->cfg->cache.redis.enabled)
        return -1;
    if (sg_redis_breaker_open())
        return 2;
    for (int i = 0; i < s->n_loops; ++i)
        if (sg_redis_is_up(s->loops[i].redis))
            return 1;
    return sg_redis_refused() ? 3 : 0;
}

/* ---- small routes ---- */

static void on_root(h2o_req_t *req)
{
    const sg_gen_t *g = sg_loop_of(req)->gen;
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "name", "searchgate");
    sg_jw_kstr(&w, "version", SG_VERSION);
    sg_jw_kstr(&w, "default_backend", g->routes[g->cfg->default_backend].conf->name);
    sg_jw_ku64(&w, "generation", g->id);
    sg_jw_key(&w, "backends");
    sg_jw_arr(&w);
    for (size_t i = 0; i < g->n_routes; ++i) {
        const sg_route_t *be = &g->routes[i];
        char path[512];
        snprintf(path, sizeof(path), "/retrieve/%s", be->conf->name);
        sg_jw_obj(&w);
        sg_jw_kstr(&w, "name", be->conf->name);
        sg_jw_kstr(&w, "plugin", be->core->plugin.vt->name);
        sg_jw_kstr(&w, "version", be->core->plugin.vt->version);
        sg_jw_ku64(&w, "topk", be->conf->topk);
        sg_jw_kstr(&w, "retrieve", path);
        sg_jw_kbool(&w, "access", be->core->serves_access);
        sg_provenance_json(&w, &be->prov);
        sg_jw_end(&w);
    }
    sg_fusion_append_root(g, &w); /* fusion routes (fusion_route.c) */
    sg_jw_end(&w);
    sg_jw_key(&w, "links");
    sg_jw_obj(&w);
    static const char *const links[][2] = {{"retrieve", "/retrieve"}, {"access", "/access"}, {"health", "/health"},
                                           {"metrics", "/metrics"},   {"stats", "/stats"},   {"dashboard", "/dashboard"},
                                           {"mcp", "/mcp"},           {"sse", "/sse"}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); ++i)
        if (g->server->cfg->mcp.enabled || i < 6)
            sg_jw_kstr(&w, links[i][0], links[i][1]);
    sg_jw_end(&w);
    sg_jw_end(&w);
    sg_ops_count_route(req, SG_OPS_ROOT, 200);
    sg_send_json(req, 200, b.base, b.len);
    sg_buf_free(&b);
}

static void on_health(h2o_req_t *req)
{
    const sg_server_t *s = sg_loop_of(req)->server;
    const sg_gen_t *g = sg_loop_of(req)->gen;
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    int ok = 1;
    sg_jw_obj(&w);
    sg_jw_key(&w, "backends");
    sg_jw_obj(&w);
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_route_t *be = &g->routes[i];
        char detail[256] = "";
        sg_status st = be->core->plugin.vt->health(be->core->inst, detail, sizeof(detail));
        if (st != SG_OK)
            ok = 0;
        sg_jw_key(&w, be->conf->name);
        sg_jw_obj(&w);
        sg_jw_kstr(&w, "status", st == SG_OK ? "ok" : "unhealthy");
        if (st != SG_OK)
            sg_jw_kstr(&w, "error", detail[0] != '\0' ? detail : sg_plugin_status_name(st));
        sg_jw_end(&w);
    }
    sg_jw_end(&w);
    int redis = redis_state(s);
    sg_jw_key(&w, "cache");
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "redis",
               redis < 0    ? "off"
               : redis == 3 ? "set-up refused (bypassed)"
               : redis == 2 ? "not answering (bypassed)"
               : redis == 1 ? "up"
                            : "down (bypassed)");
    sg_jw_end(&w);
    sg_jw_kfixed(&w, "uptime_s", (double)(sg_now_ms() - s->started_ms) / 1000.0, 3);
    /* shutting down: a load balancer's health check takes this replica out while it still serves */
    int draining = atomic_load(&s->draining) || atomic_load(&s->stopping);
    sg_jw_kstr(&w, "status", draining ? "draining" : ok ? "ok" : "degraded");
    sg_jw_end(&w);
    int status = ok && !draining ? 200 : 503;
    sg_ops_count_route(req, SG_OPS_HEALTH, status);
    sg_send_json(req, status, b.base, b.len);
    sg_buf_free(&b);
}

static void backend_stats_collector(sg_buf_t *out, void *arg)
{
    sg_gen_t *g = sg_gen_acquire(arg); /* any thread: the current generation, held while used */
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_route_t *be = &g->routes[i];
        if (be->core->plugin.vt->stats == NULL)
            continue;
        sg_metrics_sink_t sink = {out, be->conf->name, "", NULL};
        be->core->plugin.vt->stats(be->core->inst, &sink);
    }
    double hr = sg_ring_hit_ratio(60), hr5 = sg_ring_hit_ratio(300);
    sg_buf_appends(out,
                   "# HELP searchgate_cache_hit_ratio Share of queries answered by the cache (L1 or Redis) over a rolling window.\n"
                   "# TYPE searchgate_cache_hit_ratio gauge\n");
    sg_buf_appendf(out, "searchgate_cache_hit_ratio{window=\"60s\"} %s\n", isnan(hr) ? "NaN" : "");
    if (!isnan(hr)) {
        out->len -= 1;
        sg_buf_appendf(out, "%.6f\n", hr);
    }
    sg_buf_appendf(out, "searchgate_cache_hit_ratio{window=\"300s\"} %s\n", isnan(hr5) ? "NaN" : "");
    if (!isnan(hr5)) {
        out->len -= 1;
        sg_buf_appendf(out, "%.6f\n", hr5);
    }
    sg_buf_appendf(out,
                   "# HELP searchgate_flights In-flight distinct queries (singleflight table size).\n# TYPE searchgate_flights "
                   "gauge\nsearchgate_flights %zu\n",
                   sg_dispatch_flights());
    sg_buf_appendf(out,
                   "# HELP searchgate_clients_tracked Anonymous clients tracked for rate limiting.\n# TYPE "
                   "searchgate_clients_tracked gauge\nsearchgate_clients_tracked %zu\n",
                   sg_clients_tracked(g->clients));
    sg_gen_release(g);
}

static void on_metrics(h2o_req_t *req)
{
    sg_buf_t b = {0};
    sg_metrics_render(&b);
    sg_ops_count_route(req, SG_OPS_METRICS, 200); /* after the rendering: an answer does not count itself */
    sg_send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.base, b.len);
    sg_buf_free(&b);
}

/* /stats: "backends":{NAME:{requests, queries, cache and call counters}, ...} */
static void stats_backends(const sg_gen_t *g, sg_jw_t *w)
{
    sg_jw_key(w, "backends");
    sg_jw_obj(w);
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_route_t *be = &g->routes[i];
        uint64_t req_total = 0, q_total = 0;
        for (int c = 0; c < SG_NUM_CODES; ++c) {
            req_total += atomic_load(&be->meters.requests[c]->v);
            q_total += atomic_load(&be->meters.queries[c]->v);
        }
        sg_jw_key(w, be->conf->name);
        sg_jw_obj(w);
        sg_jw_ku64(w, "requests", req_total);
        sg_jw_ku64(w, "queries", q_total);
        sg_jw_ku64(w, "cache_hits_l1", atomic_load(&be->cache_hits_l1->v));
        sg_jw_ku64(w, "cache_hits_redis", atomic_load(&be->cache_hits_redis->v));
        sg_jw_ku64(w, "cache_misses", atomic_load(&be->cache_misses->v));
        sg_jw_ku64(w, "coalesced", atomic_load(&be->coalesced->v));
        sg_jw_ku64(w, "calls", atomic_load(&be->calls->v));
        sg_jw_ki64(w, "inflight_queries", atomic_load(&be->inflight_queries->v));
        sg_jw_ki64(w, "queued_queries", atomic_load(&be->queued_queries->v));
        sg_jw_ku64(w, "shed", atomic_load(&be->shed->v));
        sg_jw_ku64(w, "expired", atomic_load(&be->expired->v));
        sg_jw_ku64(w, "fallbacks", atomic_load(&be->fallbacks->v));
        if (be->core->plugin.vt->stats != NULL) { /* the plugin's own samples, as /metrics has them */
            sg_jw_key(w, "plugin");
            sg_jw_obj(w);
            sg_metrics_sink_t sink = {NULL, be->conf->name, "", w};
            be->core->plugin.vt->stats(be->core->inst, &sink);
            sg_jw_end(w);
        }
        sg_jw_end(w);
    }
    sg_jw_end(w);
}

static void on_stats(h2o_req_t *req)
{
    const sg_server_t *s = sg_loop_of(req)->server;
    int window = 300;
    h2o_iovec_t w = sg_http_query_param(req, "window");
    if (w.base != NULL) {
        /* whole seconds in range, digits only: "abc", "5", "900x" or "-1" is an error, not a clamp */
        long v = -1;
        if (w.len > 0 && w.len <= 6) {
            char tmp[8];
            memcpy(tmp, w.base, w.len);
            tmp[w.len] = '\0';
            char *end;
            if (tmp[0] >= '0' && tmp[0] <= '9')
                v = strtol(tmp, &end, 10);
            if (v >= 0 && *end != '\0')
                v = -1;
        }
        if (v < SG_STATS_WINDOW_MIN || v > SG_STATS_WINDOW_MAX) {
            char msg[200];
            snprintf(msg, sizeof(msg), "query parameter window must be a whole number of seconds in [%d, %d], got \"%.*s\"",
                     SG_STATS_WINDOW_MIN, SG_STATS_WINDOW_MAX, (int)(w.len > 32 ? 32 : w.len), w.base);
            sg_ops_count_route(req, SG_OPS_STATS, 400);
            sg_send_error(req, 400, "bad_request", msg, 0);
            return;
        }
        window = (int)v;
    }
    sg_buf_t b = {0};
    sg_jw_t jw;
    sg_jw_init(&jw, &b);
    sg_jw_obj(&jw);
    sg_jw_kstr(&jw, "version", SG_VERSION);
    sg_jw_kfixed(&jw, "uptime_s", (double)(sg_now_ms() - s->started_ms) / 1000.0, 3);
    sg_jw_ki64(&jw, "window_s", window);
    sg_jw_kdouble(&jw, "hit_ratio_60s", sg_ring_hit_ratio(60));
    static const sg_blas_choice_t none; /* before start-up chose (tests): empty strings */
    const sg_blas_choice_t *bl = s->blas != NULL ? s->blas : &none;
    sg_jw_key(&jw, "blas");
    sg_jw_obj(&jw);
    sg_jw_kstr(&jw, "library", bl->library);
    sg_jw_kstr(&jw, "core", bl->core);
    sg_jw_kstr(&jw, "default_core", bl->default_core);
    sg_jw_kstr(&jw, "source", bl->source);
    sg_jw_kstr(&jw, "reason", bl->reason);
    sg_jw_end(&jw);
    stats_backends(sg_loop_of(req)->gen, &jw);
    sg_jw_key(&jw, "cache");
    sg_jw_obj(&jw);
    sg_cache_stats_json(&jw, redis_state(s));
    sg_jw_end(&jw);
    sg_budget_stats_json(&jw);
    sg_jw_key(&jw, "metrics");
    sg_metrics_render_json(&jw);
    sg_ring_render_json(&jw, window);
    sg_jw_end(&jw);
    sg_ops_count_route(req, SG_OPS_STATS, 200);
    sg_send_json(req, 200, b.base, b.len);
    sg_buf_free(&b);
}

extern const char sg_dashboard_html[];
extern const size_t sg_dashboard_html_len;

static void on_dashboard(h2o_req_t *req)
{
    sg_ops_count_route(req, SG_OPS_DASHBOARD, 200);
    sg_send_body(req, 200, "text/html; charset=utf-8", sg_dashboard_html, sg_dashboard_html_len);
}

static void method_not_allowed(h2o_req_t *req, const char *allow)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, allow, strlen(allow));
    char msg[96];
    snprintf(msg, sizeof(msg), "method %.*s is not allowed here; use %s", (int)(req->method.len > 16 ? 16 : req->method.len),
             req->method.base, allow);
    sg_ops_count_route(req, SG_OPS_OTHER, 405);
    sg_send_error(req, 405, "method_not_allowed", msg, 0);
}

static int path_is(h2o_iovec_t p, const char *s)
{
    size_t n = strlen(s);
    return p.len == n && memcmp(p.base, s, n) == 0;
}

/* "/retrieve/<name>" -> name */
static int path_sub(h2o_iovec_t p, const char *prefix, const char **name, size_t *len)
{
    size_t n = strlen(prefix);
    if (p.len <= n + 1 || memcmp(p.base, prefix, n) != 0 || p.base[n] != '/')
        return 0;
    *name = p.base + n + 1;
    *len = p.len - n - 1;
    return memchr(*name, '/', *len) == NULL;
}

static int admin_allowed(h2o_req_t *req, const char **why)
{
    h2o_iovec_t key;
    if (sg_clients_presented_key(req, &key, why) != 0)
        return 0;
    return sg_clients_admin_allowed(sg_loop_of(req)->gen->clients, key.base, key.len, why);
}

static void unauthorized(h2o_req_t *req, int route, const char *why)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
    sg_ops_count_route(req, route, 401);
    sg_send_error(req, 401, "unauthorized", why, 0);
}

/* log_level debug: the routes other than /retrieve and /access answer synchronously, so their
 * status is known right after the handler ran. */
static void log_small(h2o_req_t *req)
{
    SG_LOG(SG_LL_DEBUG, "http", "%.*s %.*s %d", (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base,
           (int)(req->path.len > 200 ? 200 : req->path.len), req->path.base, req->res.status);
}

/* ---- one h2o handler per path ----
 *
 * h2o picks a request's path by prefix, first registered first ("/stats" also takes "/stats/x"),
 * so each handler answers its own path exactly and anything below it 404, as "/" does for every
 * path no other handler took. Every handler starts the same way: the request runs on the
 * generation current when it arrives (gen.h), held through the handler, and the connection gate
 * judges its Host, Origin and key before the route is even looked at. */

typedef struct st_path_handler_t path_handler_t;
struct st_path_handler_t {
    h2o_handler_t super;
    const char *path;
    int (*serve)(const path_handler_t *h, sg_loop_t *loop, h2o_req_t *req);
    /* the GET routes: */
    int route;   /* R_* */
    int guarded; /* shows backends, upstreams or client ids: the admin key when keys are in use */
    void (*get)(h2o_req_t *);
    int is_access;                        /* /access, else /retrieve */
    int (*mcp)(sg_loop_t *, h2o_req_t *); /* the MCP routes: mcp.h's handler of this path */
};

static int is_method(h2o_req_t *req, const char *m, size_t len)
{
    return h2o_memis(req->method.base, req->method.len, m, len);
}

static int not_found(h2o_req_t *req)
{
    h2o_iovec_t p = req->path_normalized;
    char msg[160];
    snprintf(msg, sizeof(msg), "no route for %.*s; see GET / for the routes", (int)(p.len > 80 ? 80 : p.len), p.base);
    sg_ops_count_route(req, SG_OPS_OTHER, 404);
    sg_send_error(req, 404, "not_found", msg, 0);
    log_small(req);
    return 0;
}

/* POST /retrieve, /access and /retrieve/<route>, /access/<route> */
static int serve_retrieve(const path_handler_t *h, sg_loop_t *loop, h2o_req_t *req)
{
    h2o_iovec_t p = req->path_normalized;
    const char *name = NULL;
    size_t nlen = 0;
    if (!path_is(p, h->path) && !path_sub(p, h->path, &name, &nlen))
        return not_found(req);
    if (!is_method(req, H2O_STRLIT("POST"))) {
        method_not_allowed(req, "POST");
        log_small(req);
        return 0;
    }
    return sg_retrieve_handle(loop, req, h->is_access, name, nlen);
}

/* /mcp, /sse, /messages (registered when mcp.enabled), each exactly: h2o matches a prefix */
static int serve_mcp(const path_handler_t *h, sg_loop_t *loop, h2o_req_t *req)
{
    if (!path_is(req->path_normalized, h->path) || !h->mcp(loop, req))
        return not_found(req);
    log_small(req);
    return 0;
}

/* POST /admin/reload: re-reads the config (reload.c), for the admin key only */
static int serve_admin(const path_handler_t *h, sg_loop_t *loop, h2o_req_t *req)
{
    const sg_server_hooks_t *hooks = loop->server->hooks;
    if (!path_is(req->path_normalized, h->path) || hooks == NULL || hooks->admin_reload == NULL)
        return not_found(req);
    if (!is_method(req, H2O_STRLIT("POST")))
        method_not_allowed(req, "POST");
    else
        hooks->admin_reload(loop, req);
    log_small(req);
    return 0;
}

/* The GET routes. Those that show backends, upstreams and client ids are guarded when keys are in
 * use (sg_clients_admin_allowed); /health stays open for probes; /dashboard is a static page
 * without data that asks for the key and reads /stats with it. "/" also takes every path no
 * other handler did. */
static int serve_get(const path_handler_t *h, sg_loop_t *loop, h2o_req_t *req)
{
    (void)loop;
    if (!path_is(req->path_normalized, h->path))
        return not_found(req);
    const char *why = NULL;
    if (!is_method(req, H2O_STRLIT("GET")) && !is_method(req, H2O_STRLIT("HEAD")))
        method_not_allowed(req, "GET");
    else if (h->guarded && !admin_allowed(req, &why))
        unauthorized(req, h->route, why);
    else
        h->get(req);
    log_small(req);
    return 0;
}

static int on_path(h2o_handler_t *self, h2o_req_t *req)
{
    const path_handler_t *h = (const path_handler_t *)self;
    sg_loop_t *loop = sg_loop_of(req);
    sg_loop_refresh_gen(loop);           /* a request runs on the generation current when it arrives (gen.h) */
    sg_gen_t *g = sg_gen_ref(loop->gen); /* held through the handler, whatever it calls */
    int r = 0;
    if (sg_gate_check_request(loop, req) != 0) /* Host, Origin, the key: before the route is even looked up */
        log_small(req);
    else
        r = h->serve(h, loop, req);
    sg_gen_release(g);
    return r;
}

static void on_setup_response(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot);

/* Registers `path` with its handler, and the filter every route's answer goes through. */
static void register_path(h2o_hostconf_t *hostconf, const path_handler_t *proto)
{
    h2o_pathconf_t *pc = h2o_config_register_path(hostconf, proto->path, 0);
    path_handler_t *h = (path_handler_t *)h2o_create_handler(pc, sizeof(*h));
    h2o_handler_t super = h->super;
    *h = *proto;
    h->super = super;
    h->super.on_req = on_path;
    h2o_filter_t *rf = h2o_create_filter(pc, sizeof(*rf));
    rf->on_setup_ostream = on_setup_response;
}

/* Every path the gateway answers, in h2o's order of matching ("/" last: it takes the rest). */
static void register_paths(h2o_hostconf_t *hostconf, const sg_config_t *cfg)
{
    static const path_handler_t paths[] = {
        {.path = "/retrieve", .serve = serve_retrieve},
        {.path = "/access", .serve = serve_retrieve, .is_access = 1},
        {.path = "/mcp", .serve = serve_mcp, .mcp = sg_mcp_serve_mcp},
        {.path = "/sse", .serve = serve_mcp, .mcp = sg_mcp_serve_sse},
        {.path = "/messages", .serve = serve_mcp, .mcp = sg_mcp_serve_messages},
        {.path = "/admin/reload", .serve = serve_admin},
        {.path = "/health", .serve = serve_get, .route = SG_OPS_HEALTH, .get = on_health},
        {.path = "/metrics", .serve = serve_get, .route = SG_OPS_METRICS, .guarded = 1, .get = on_metrics},
        {.path = "/stats", .serve = serve_get, .route = SG_OPS_STATS, .guarded = 1, .get = on_stats},
        {.path = "/dashboard", .serve = serve_get, .route = SG_OPS_DASHBOARD, .get = on_dashboard},
        {.path = "/", .serve = serve_get, .route = SG_OPS_ROOT, .guarded = 1, .get = on_root},
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); ++i)
        if (paths[i].serve != serve_mcp || cfg->mcp.enabled)
            register_path(hostconf, &paths[i]);
}

/* ---- h2o's own error responses ----
 *
 * h2o answers a few malformed requests itself, before any handler runs: broken chunked encoding,
 * an unknown Transfer-Encoding, a bad Content-Length, a body over twice limits.max_body_bytes,
 * an unknown Expect. It does so through h2o_send_error_generic() on the host's fallback path with
 * a plain-text body; this filter, registered on that path, rewrites them into the gateway's JSON
 * error shape so clients that parse every error body keep working. What h2o writes straight to
 * the socket -- a request line or headers it cannot parse, more than 100 headers, a request head
 * over its size limit -- cannot be intercepted and stays a plain-text "400 Bad Request" (and the
 * connection is closed). */

static void json_error_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt, h2o_send_state_t state)
{
    const sg_server_t *s = sg_loop_of(req)->server;
    if (h2o_send_state_is_in_progress(state) || bufcnt == 0) { /* h2o sends these in one piece; HEAD has no body */
        h2o_ostream_send_next(self, req, bufs, bufcnt, state);
        return;
    }
    int status = req->res.status;
    sg_buf_t msg = {0}, body = {0};
    if (status == 413) {
        sg_buf_appendf(&msg, "request body over twice limits.max_body_bytes (%zu bytes)", s->cfg->limits.max_body_bytes);
    } else {
        for (size_t i = 0; i < bufcnt; ++i)
            sg_buf_append(&msg, bufs[i].base, bufs[i].len);
        while (msg.len > 0 && (msg.base[msg.len - 1] == '\n' || msg.base[msg.len - 1] == '\r'))
            --msg.len;
    }
    sg_buf_appendc(&msg, '\0');
    const char *type = status == 400 ? "bad_request" : status == 413 ? "too_large" : status == 417 ? "expectation_failed" : "error";
    sg_json_error_body(&body, status, type, msg.base);
    ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct >= 0)
        req->res.headers.entries[ct].value = h2o_iovec_init(H2O_STRLIT("application/json"));
    else
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    req->res.content_length = body.len;
    h2o_iovec_t out = h2o_strdup(&req->pool, body.base, body.len);
    sg_buf_free(&msg);
    sg_buf_free(&body);
    sg_ops_count_route(req, SG_OPS_OTHER, status);
    h2o_ostream_send_next(self, req, &out, 1, state);
}

static void on_setup_json_errors(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    (void)self;
    if (req->conn->ctx->shutdown_requested)
        req->http1_is_persistent = 0;
    if (req->res.status >= 400) {
        h2o_ostream_t *o = h2o_add_ostream(req, sizeof(*o), slot);
        o->do_send = json_error_send;
        slot = &o->next;
    }
    h2o_setup_next_ostream(req, slot);
}

/* ---- every response of the routes: HEAD has no body, and Connection: close while stopping ----
 *
 * h2o 2.2.5 sends whatever a handler writes, also for HEAD (h2o_send_inline() and its error pages
 * are the exception), and marks a connection non-persistent only for requests it reads after the
 * shutdown began: an answer to a request in progress said "keep-alive" and the connection then
 * closed. This filter on the routes' path fixes both for every handler at once; the headers of a
 * HEAD answer (Content-Length included) are those of the GET. */

static void head_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt, h2o_send_state_t state)
{
    (void)bufs;
    (void)bufcnt;
    if (h2o_send_state_is_in_progress(state)) {
        /* a streamed body (no route streams to HEAD today): nothing of it goes out; on to the rest */
        h2o_proceed_response(req);
        return;
    }
    h2o_ostream_send_next(self, req, NULL, 0, state);
}

static void on_setup_response(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    (void)self;
    if (req->conn->ctx->shutdown_requested)
        req->http1_is_persistent = 0;
    if (h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
        h2o_ostream_t *o = h2o_add_ostream(req, sizeof(*o), slot);
        o->do_send = head_send;
        slot = &o->next;
    }
    h2o_setup_next_ostream(req, slot);
}

/* ---- listeners and loops ---- */

static int ctx_has_connections(h2o_context_t *ctx)
{
    return !h2o_linklist_is_empty(&ctx->http1._conns) || !h2o_linklist_is_empty(&ctx->http2._conns);
}

static int has_connections(sg_loop_t *l)
{
    return ctx_has_connections(&l->ctx) || (l->has_h2c && ctx_has_connections(&l->h2c_ctx)) || sg_gate_busy(l);
}

/* The loop's h2o contexts (the HTTP/2 one when a listener has h2c), and which is whose: entry 0 of a
 * context's storage is its loop (sg_loop_of). Loop thread. */
static void contexts_init(sg_loop_t *l)
{
    sg_server_t *s = l->server;
    size_t key = 0;
    h2o_context_init(&l->ctx, l->loop, &s->h2o);
    *h2o_context_get_storage(&l->ctx, &key, NULL) = l;
    l->accept_ctx.ctx = &l->ctx;
    l->accept_ctx.hosts = s->h2o.hosts;
    l->has_h2c = s->cfg->listen_common.any_h2c;
    if (l->has_h2c) {
        h2o_context_init(&l->h2c_ctx, l->loop, &s->h2o_h2c);
        *h2o_context_get_storage(&l->h2c_ctx, &key, NULL) = l;
        l->h2c_accept_ctx.ctx = &l->h2c_ctx;
        l->h2c_accept_ctx.hosts = s->h2o_h2c.hosts;
    }
}

/* Shutdown of a context: no new requests, and idle connections close at once (h2o 2.2.5 closes
 * an HTTP/1 keep-alive connection only after its next request otherwise, or after the 10 s idle
 * timer; a connection with a request in progress has no such timer armed). */
static void context_shutdown(h2o_context_t *ctx)
{
    h2o_context_request_shutdown(ctx);
    ctx->http1.req_timeout.timeout = 0;
    ctx->http2.idle_timeout.timeout = 0;
}

/* h2o re-sends GOAWAY once a second while HTTP/2 connections remain; none do */
static void context_stop_goaway(h2o_context_t *ctx)
{
    if (h2o_timeout_is_linked(&ctx->http2._graceful_shutdown_timeout))
        h2o_timeout_unlink(&ctx->http2._graceful_shutdown_timeout);
}

/* Disposes a context; returns its queue, which h2o destroys but, with evloop, does not free: the
 * caller frees it once the loop let the queue's socket finish closing. */
static h2o_multithread_queue_t *context_dispose(h2o_context_t *ctx)
{
    h2o_multithread_queue_t *queue = ctx->queue;
    h2o_context_dispose(ctx);
    return queue;
}

static void drain(sg_loop_t *l)
{
    for (int i = 0; i < 3; ++i) {
        h2o_evloop_run(l->loop, 0);
        sg_timers_run(&l->timers);
    }
}

/* Everything h2o about a loop -- the evloop, the context and its queue, the listener sockets,
 * the Redis connection -- is created, run and disposed on the loop's own thread: h2o keeps
 * per-thread buffer free lists (__thread prototypes) that a socket created on one thread and
 * read on another would corrupt.
 *
 * Life of a loop: init, serve until shutdown is requested, then stop accepting, expire idle
 * keep-alive connections, serve the requests in progress (their deadlines bound that) or give up
 * after the grace period; wait while the main thread destroys the plugins (which completes their
 * pending searches), deliver those completions, and dispose. */
/* The loop's own h2o context, listener, receivers, Redis connection and generation. Loop thread. */
static void loop_init(sg_loop_t *l)
{
    sg_server_t *s = l->server;
    l->loop = h2o_evloop_create();
    contexts_init(l);
    l->listeners = sg_mem_calloc(s->n_listeners, sizeof(*l->listeners));
    for (size_t i = 0; i < s->n_listeners; ++i)
        l->listeners[i] = h2o_evloop_socket_create(l->loop, l->listen_fds[i], H2O_SOCKET_FLAG_DONT_READ);
    sg_gate_start_loop(l); /* accepting on every listener (gate.c) */
    h2o_linklist_init_anchor(&l->active);
    sg_dispatch_init_loop(l);
    l->gen = sg_gen_acquire(s); /* the loop's reference on the current generation (gen.h) */
    if (s->hooks != NULL && s->hooks->loop_init != NULL)
        s->hooks->loop_init(l);
    if (s->cfg->cache.redis.enabled) {
        l->redis = sg_redis_create(l->loop, &l->timers, l->id, &s->cfg->cache.redis);
        l->cache_writer = sg_cache_writer_create(l->ctx.queue, l->redis, SG_CACHE_WRITE_QUEUE_WRITES, SG_CACHE_WRITE_QUEUE_BYTES);
    }
    sg_mcp_init_loop(l);
}

/* Shutdown, on the loop's thread: no more accepts (connections with no request handed over yet
 * close), the listeners closed, h2o asked to end its connections, SSE streams ended. */
static void stop_accepting(sg_loop_t *l)
{
    sg_gate_stop_loop(l);
    for (size_t i = 0; i < l->server->n_listeners; ++i) {
        h2o_socket_close(l->listeners[i]);
        l->listeners[i] = NULL;
    }
    context_shutdown(&l->ctx);
    if (l->has_h2c)
        context_shutdown(&l->h2c_ctx);
    sg_mcp_stop_loop(l); /* SSE streams end now, not at the grace's end */
}

static void *loop_main(void *arg)
{
    sg_loop_t *l = arg;
    sg_server_t *s = l->server;
    loop_init(l);
    pthread_barrier_wait(&s->barrier);

    uint64_t grace_end = 0;
    int failed_active = 0;
    for (;;) {
        sg_loop_refresh_gen(l); /* an idle loop lets go of a generation a reload replaced */
        if (atomic_load(&s->stopping) && grace_end == 0) {
            grace_end = sg_now_ms() + l->gen->cfg->shutdown_grace_ms;
            stop_accepting(l);
        }
        if (grace_end != 0 && !has_connections(l)) {
            context_stop_goaway(&l->ctx);
            if (l->has_h2c)
                context_stop_goaway(&l->h2c_ctx);
            break;
        }
        if (grace_end != 0 && sg_now_ms() >= grace_end) {
            if (!failed_active) {
                /* requests still waiting (a slow or hanging backend): answer them 503 now, which
                 * also cancels their backend work, and give the answers a moment to go out */
                failed_active = 1;
                sg_query_fail_all(l, "the gateway is shutting down");
                grace_end = sg_now_ms() + 1000;
            } else {
                SG_LOG(SG_LL_WARN, "main", "loop %d: connections still open after the shutdown grace; exiting anyway", l->id);
                l->abandoned = 1;
                break;
            }
        }
        h2o_evloop_run(l->loop, sg_timers_next_wait(&l->timers, grace_end != 0 ? 50 : 500));
        sg_timers_run(&l->timers);
        atomic_store_explicit(&l->alive_ms, sg_now_ms(), memory_order_relaxed);
    }
    sg_gate_dispose_loop(l);                  /* what the gate still holds (the grace ran out) */
    pthread_barrier_wait(&s->barrier);        /* every loop stopped serving */
    pthread_barrier_wait(&s->barrier);        /* the plugins are destroyed */
    drain(l);                                 /* their cancellations, and the cache writes they queued */
    sg_cache_writer_destroy(l->cache_writer); /* no more stores; before the connection it writes on */
    l->cache_writer = NULL;
    sg_redis_destroy(l->redis);
    l->redis = NULL;
    drain(l);
    if (!l->abandoned) { /* h2o cannot dispose a context with live connections: the process exits anyway */
        sg_mcp_dispose_loop(l);
        if (l->server->hooks != NULL && l->server->hooks->loop_dispose != NULL)
            l->server->hooks->loop_dispose(l);
        h2o_multithread_unregister_receiver(l->ctx.queue, &l->deliveries);
        h2o_multithread_unregister_receiver(l->ctx.queue, &l->finished);
        h2o_multithread_queue_t *queue = context_dispose(&l->ctx);
        h2o_multithread_queue_t *h2c_queue = l->has_h2c ? context_dispose(&l->h2c_ctx) : NULL;
        drain(l); /* lets the queues' sockets finish closing */
        free(queue);
        free(h2c_queue);
        h2o_evloop_destroy(l->loop);
    }
    sg_timers_dispose(&l->timers);
    sg_gen_release(l->gen);
    l->gen = NULL;
    free(l->listeners);
    l->listeners = NULL;
    return NULL;
}

int sg_server_loops_alive(const sg_server_t *s, uint64_t max_age_ms)
{
    uint64_t now = sg_now_ms();
    for (int i = 0; i < s->n_loops; ++i) {
        uint64_t seen = atomic_load_explicit(&s->loops[i].alive_ms, memory_order_relaxed);
        if (now > seen && now - seen > max_age_ms)
            return 0;
    }
    return 1;
}

/* searchgate_http_requests_total for every non-query route and status, at 0 from the start. */
static void register_http_metrics(sg_server_t *s)
{
    for (int r = 0; r < SG_OPS_COUNT; ++r)
        for (int c = 0; c < SG_NUM_CODES; ++c) {
            char labels[64];
            if (c == SG_CODE_OTHER)
                snprintf(labels, sizeof(labels), "route=\"%s\",code=\"other\"", sg_ops_route_names[r]);
            else
                snprintf(labels, sizeof(labels), "route=\"%s\",code=\"%d\"", sg_ops_route_names[r], sg_code_values[c]);
            s->http_requests[r][c] =
                sg_metrics_counter("searchgate_http_requests_total",
                                   "Requests to routes other than /retrieve, and requests refused before routing.", labels);
        }
    sg_metrics_add_collector(backend_stats_collector, s);
}

/*
 * One h2o configuration: the routes' handler and filters on every path, bodies over `max_entity`
 * refused by h2o while it reads them. There are two when a listener has h2c on. h2o 2.2.5 reads the
 * whole body of every HTTP/2 stream before a handler runs, up to max_request_entity_size each and
 * 100 streams per connection (its fixed SETTINGS_MAX_CONCURRENT_STREAMS; the setting
 * http2.max_concurrent_requests_per_connection only bounds the requests it *runs* at once, not the
 * bodies it reads), so an HTTP/2 connection can make it hold 100 times that limit. HTTP/2
 * connections therefore run on a context of their own whose limit is listen's h2c_max_body_bytes,
 * and it alone upgrades HTTP/1 (`upgrade`); the gate hands it the connections that open with
 * the HTTP/2 preface or ask for Upgrade: h2c (gate.c). HTTP/1's own limit stays twice
 * limits.max_body_bytes: one request at a time per connection.
 */
static h2o_hostconf_t *configure_h2o(h2o_globalconf_t *conf, const sg_config_t *cfg, size_t max_entity, int upgrade)
{
    h2o_config_init(conf);
    conf->max_request_entity_size = max_entity;
    conf->server_name = h2o_iovec_init(H2O_STRLIT("searchgate/" SG_VERSION));
    /* the time to read a request (head and body) and the keep-alive idle time; the gate reads the
     * first request of a connection under the same limit (gate.c). It only covers reading a
     * request and idle keep-alive: a long backend call is bounded by the route's deadline instead
     * (checked: a 4 s call with a 2 s req_timeout completes). */
    conf->http1.req_timeout = cfg->listen_common.read_timeout_ms;
    conf->http1.upgrade_to_http2 = upgrade;
    h2o_hostconf_t *hostconf = h2o_config_register_host(conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    register_paths(hostconf, cfg);
    h2o_filter_t *f = h2o_create_filter(&hostconf->fallback_path, sizeof(*f));
    f->on_setup_ostream = on_setup_json_errors;
    return hostconf;
}

int sg_server_start(sg_server_t *s, const sg_server_hooks_t *hooks, char *err, size_t err_size)
{
    const sg_config_t *cfg = s->cfg;
    s->hooks = hooks;
    /* the listeners first: a port in use fails start-up before anything else is set up */
    int n_loops = cfg->threads > 0 ? cfg->threads : sg_num_cpus();
    int *fds;
    int n = sg_listen_open_all(cfg, n_loops, &s->listeners, &fds, err, err_size);
    if (n < 0)
        return -1;
    s->n_listeners = (size_t)n;
    s->n_loops = n_loops;
    sg_respond_init(s); /* the response budget, before any request */
    s->loops = sg_mem_calloc((size_t)n_loops, sizeof(*s->loops));
    for (int i = 0; i < n_loops; ++i) {
        s->loops[i].id = i;
        s->loops[i].server = s;
        s->loops[i].alive_ms = sg_now_ms();
        s->loops[i].listen_fds = sg_mem_alloc(s->n_listeners * sizeof(int));
        for (size_t k = 0; k < s->n_listeners; ++k)
            s->loops[i].listen_fds[k] = fds[k * (size_t)n_loops + (size_t)i];
    }
    free(fds);

    /* h2o refuses larger bodies itself, before reading them (made JSON by on_setup_json_errors);
     * up to twice the limit the handler answers with a JSON 413 that names limits.max_body_bytes */
    s->hostconf = configure_h2o(&s->h2o, cfg, cfg->limits.max_body_bytes * 2, 0);
    if (cfg->listen_common.any_h2c) /* HTTP/2 without TLS: its connections get their own bound (see configure_h2o) */
        configure_h2o(&s->h2o_h2c, cfg, cfg->listen_common.h2c_max_body_bytes, 1);
    sg_gate_init(s);
    s->body_bytes_parsed =
        sg_metrics_counter("searchgate_request_body_bytes_parsed_total",
                           "Bytes of request bodies handed to the JSON parser (/retrieve, /access, /mcp, /messages).", "");
    register_http_metrics(s);

    pthread_barrier_init(&s->barrier, NULL, (unsigned)s->n_loops + 1);
    for (int i = 0; i < s->n_loops; ++i)
        h2o_multithread_create_thread(&s->loops[i].tid, NULL, loop_main, &s->loops[i]);
    pthread_barrier_wait(&s->barrier); /* every loop is serving */
    if (cfg->cache.redis.enabled)      /* ready includes Redis: the first requests find it set up (a bounded wait) */
        sg_redis_wait_started(&cfg->cache.redis, s->n_loops);
    return 0;
}

void sg_server_stop(sg_server_t *s)
{
    atomic_store(&s->stopping, 1);
    for (int i = 0; i < s->n_loops; ++i)
        h2o_multithread_send_message(&s->loops[i].deliveries, NULL); /* wake it up */
    pthread_barrier_wait(&s->barrier);                               /* every loop stopped serving */
}

void sg_server_dispose(sg_server_t *s)
{
    if (s->loops == NULL)
        return;
    pthread_barrier_wait(&s->barrier); /* the plugins are destroyed: the loops deliver and dispose */
    for (int i = 0; i < s->n_loops; ++i) {
        pthread_join(s->loops[i].tid, NULL);
        free(s->loops[i].listen_fds);
    }
    pthread_barrier_destroy(&s->barrier);
    free(s->loops);
    s->loops = NULL;
    sg_gate_dispose(s);
    h2o_config_dispose(&s->h2o);
    if (s->cfg->listen_common.any_h2c)
        h2o_config_dispose(&s->h2o_h2c);
}
