/*
 * one_route.h -- the gateway around a fake plugin for the pipeline's unit tests (test_dispatch.c,
 * test_query.c): one route "t" whose metrics all count into the given dummies (a test points the
 * ones it reads at its own counters afterwards), the generation that holds it, and a client.
 */
#ifndef SG_TEST_ONE_ROUTE_H
#define SG_TEST_ONE_ROUTE_H

#include <string.h>
#include "server.h"
#include "gen.h"
#include "clients.h"

static void one_route_init(sg_config_t *cfg, sg_backend_conf_t *bconf, sg_route_t *r, sg_route_core_t *core, sg_gen_t *gen,
                           sg_server_t *server, const sg_backend_vtable *vt, sg_counter_t *c, sg_gauge_t *g, sg_hist_t *h)
{
    memset(server, 0, sizeof(*server));
    cfg->cache.l1_bytes = 1 << 20;
    *bconf = (sg_backend_conf_t){
        .name = "t", .topk = 3, .timeout_ms = 10000, .max_queue = 1000, .chunk = 64, .cache = 1, .cache_ttl_s = 60, .fallback = -1};
    cfg->backends = bconf;
    cfg->n_backends = 1;
    r->conf = bconf;
    r->core = core;
    r->gen = gen;
    core->plugin.vt = vt;
    core->identity = "fake|t|1|";
    core->id = 1;
    pthread_mutex_init(&core->admit_mutex, NULL);
    atomic_init(&gen->refs, 1u << 30); /* never disposed: the test owns it */
    gen->cfg = cfg;
    gen->routes = r;
    gen->n_routes = 1;
    gen->server = server;
    for (int i = 0; i < SG_NUM_CODES; ++i)
        r->meters.requests[i] = r->meters.queries[i] = c;
    r->meters.latency = r->call_latency = h;
    r->meters.inflight = r->inflight_queries = r->queued_queries = r->floor_ms = g;
    r->call_errors = r->batch_queries = r->expired = r->fallbacks = r->shed = r->coalesced = c;
    r->cache_hits_l1 = r->cache_hits_redis = r->cache_misses = r->calls = r->floor_refused = c;
    server->cfg = cfg;
    server->gen = gen;
    h2o_config_init(&server->h2o);
    h2o_config_register_host(&server->h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
}

static void one_route_client(sg_client_t *cl, sg_client_state_t *st, const char *id, sg_client_conf_t *conf, sg_counter_t *c,
                             sg_hist_t *h)
{
    memset(cl, 0, sizeof(*cl));
    memset(st, 0, sizeof(*st));
    cl->id = (char *)id;
    cl->conf = conf;
    cl->st = st;
    atomic_init(&cl->refs, 1);
    cl->m_requests = cl->m_queries = cl->m_rate_limited = cl->m_queued = cl->m_shed = cl->m_timeouts = cl->m_hits_l1 =
        cl->m_hits_redis = cl->m_misses = c;
    cl->m_wait = h;
}

#endif
