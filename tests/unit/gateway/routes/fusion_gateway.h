/*
 * fusion_gateway.h -- the gateway of one_route.h (pipeline/) grown to two plugin routes "a" and
 * "b" over a fake plugin whose calls the test completes, and the fusion route "f" (RRF, k 60,
 * topk 3) over them, with one loop run by hand on this thread, the real cache (L1), dispatch,
 * admission and client rate limits. For the unit tests of routes/fusion_route.c and
 * http/mcp_tools.c (both call the pipeline the way an entry point does). Route "b" serves
 * POST /access, so "f" reads its pages. The fixture is set up once per test group: tests use
 * distinct query texts (L1 keeps what an earlier test stored).
 */
#ifndef SG_TEST_FUSION_GATEWAY_H
#define SG_TEST_FUSION_GATEWAY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server.h"
#include "gen.h"
#include "clients.h"
#include "dispatch.h"
#include "fusion_route.h"
#include "provenance.h"
#include "../cache/cache.h"
#include "../pipeline/one_route.h"

/* ---- a plugin whose calls the test completes ---- */

typedef struct {
    int route; /* 0: "a", 1: "b" */
    const sg_search *s;
    sg_done_fn done;
    void *cb_data;
    int cancelled;
    int completed;
} fg_call_t;

static fg_call_t fg_calls[32];
static size_t fg_n_calls;
static char fg_tags[2]; /* the plugin instances of routes a and b (their addresses) */

static sg_status fg_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    assert_true(fg_n_calls < sizeof(fg_calls) / sizeof(fg_calls[0]));
    fg_calls[fg_n_calls++] = (fg_call_t){(char *)self - fg_tags, s, done, cb_data, 0, 0};
    return SG_OK;
}

static void fg_cancel(sg_backend *self, void *cb_data)
{
    (void)self;
    for (size_t i = 0; i < fg_n_calls; ++i)
        if (fg_calls[i].cb_data == cb_data)
            fg_calls[i].cancelled = 1;
}

static sg_status fg_health(sg_backend *self, char *detail, size_t n)
{
    (void)self, (void)detail, (void)n;
    return SG_OK;
}

static const sg_backend_vtable fg_vt = {SG_BACKEND_HEADER("fake", "1"), .search = fg_search, .cancel = fg_cancel,
                                        .health = fg_health};

/* The call of route `route` made after the first `from` calls (its index), failing if there is none. */
static size_t fg_call_of(int route, size_t from)
{
    for (size_t i = from; i < fg_n_calls; ++i)
        if (fg_calls[i].route == route)
            return i;
    fail_msg("no call of route %d after call %zu", route, from);
    return 0;
}

/* Completes call `i`: every query of it gets the documents named by the comma-separated `ids`,
 * best first, each {"id":"ID","contents":"ID\nbody of ID"} with the score 1/(rank+1). */
static void fg_complete(size_t i, const char *ids)
{
    static char docs[8][8][64];
    sg_hit hits[8][8];
    sg_hits per[8];
    const sg_search *s = fg_calls[i].s;
    assert_true(s->n_queries <= 8);
    assert_false(fg_calls[i].completed);
    fg_calls[i].completed = 1;
    for (size_t q = 0; q < s->n_queries; ++q) {
        size_t n = 0;
        for (const char *p = ids; *p != '\0' && n < 8;) {
            size_t l = strcspn(p, ",");
            int len = snprintf(docs[q][n], sizeof(docs[q][n]), "{\"id\":\"%.*s\",\"contents\":\"%.*s\\nbody of %.*s\"}", (int)l, p,
                               (int)l, p, (int)l, p);
            hits[q][n] = (sg_hit){docs[q][n], (size_t)len, 1.0 / (double)(n + 1)};
            ++n;
            p += l + (p[l] == ',');
        }
        per[q] = (sg_hits){hits[q], n};
    }
    sg_result res = {SG_OK, NULL, per, s->n_queries, 0};
    fg_calls[i].done(fg_calls[i].cb_data, &res);
}

/* Fails call `i` with `status` (detail `detail`). */
static void fg_fail(size_t i, sg_status status, const char *detail, uint32_t retry_after_s)
{
    assert_false(fg_calls[i].completed);
    fg_calls[i].completed = 1;
    sg_result res = {status, detail, NULL, 0, retry_after_s};
    fg_calls[i].done(fg_calls[i].cb_data, &res);
}

/* ---- the gateway around it ---- */

static sg_config_t fg_cfg;
static sg_backend_conf_t fg_bconf[2];
static sg_route_t fg_routes[2];
static sg_route_core_t fg_cores[2];
static sg_fusion_conf_t fg_fconf;
static char *fg_leg_names[2] = {"a", "b"};
static int fg_legs[2] = {0, 1};
static double fg_weights[2] = {1, 1};
static int fg_normalize[2] = {SG_NORM_MINMAX, SG_NORM_MINMAX};
static sg_gen_t fg_gen;
static sg_server_t fg_server;
static sg_loop_t fg_loop;
static sg_client_conf_t fg_client_conf;
static sg_client_t fg_client;
static sg_client_state_t fg_client_st;
static sg_counter_t fg_dummy_c, fg_too_large_estimate, fg_too_large_exact;
static sg_gauge_t fg_dummy_g;
static sg_hist_t fg_dummy_h;

static void fg_setup(void)
{
    one_route_init(&fg_cfg, &fg_bconf[0], &fg_routes[0], &fg_cores[0], &fg_gen, &fg_server, &fg_vt, &fg_dummy_c, &fg_dummy_g,
                   &fg_dummy_h);
    fg_bconf[0].name = "a";
    fg_cores[0].identity = "fake|a|1|";
    fg_bconf[1] = fg_bconf[0];
    fg_bconf[1].name = "b";
    fg_routes[1] = fg_routes[0];
    fg_routes[1].index = 1;
    fg_routes[1].conf = &fg_bconf[1];
    fg_routes[1].core = &fg_cores[1];
    fg_cores[1] = fg_cores[0];
    fg_cores[1].identity = "fake|b|1|";
    fg_cores[1].id = 2;
    fg_cores[1].serves_access = 1;
    pthread_mutex_init(&fg_cores[1].admit_mutex, NULL);
    for (int i = 0; i < 2; ++i) {
        fg_cores[i].inst = (sg_backend *)&fg_tags[i];
        sg_provenance_init(&fg_routes[i].prov, fg_bconf[i].name, "plugin", "fake", "1", fg_cores[i].identity, NULL);
    }
    fg_cfg.n_backends = 2;
    fg_gen.n_routes = 2;
    fg_cfg.limits.max_queries = 4;
    fg_cfg.limits.max_query_bytes = 64;
    fg_cfg.limits.max_topk = 20;
    fg_fconf = (sg_fusion_conf_t){.name = "f",
                                  .topk = 3,
                                  .timeout_ms = 10000,
                                  .method = SG_FUSION_RRF,
                                  .k = 60,
                                  .n_legs = 2,
                                  .leg_names = fg_leg_names,
                                  .legs = fg_legs,
                                  .weights = fg_weights,
                                  .normalize = fg_normalize,
                                  .identity = "rrf k=60 legs=a,b w=1,1"};
    fg_cfg.fusions = &fg_fconf;
    fg_cfg.n_fusions = 1;
    fg_client_conf.weight = 1;
    one_route_client(&fg_client, &fg_client_st, "test", &fg_client_conf, &fg_dummy_c, &fg_dummy_h);
    fg_server.responses.m_too_large_estimate = &fg_too_large_estimate;
    fg_server.responses.m_too_large_exact = &fg_too_large_exact;
    fg_server.loops = &fg_loop;
    fg_server.n_loops = 1;
    fg_gen.clients = sg_clients_create(&fg_cfg, NULL);
    fg_gen.fusion = sg_fusion_build(&fg_gen);
    fg_loop.server = &fg_server;
    fg_loop.gen = &fg_gen;
    fg_loop.loop = h2o_evloop_create();
    h2o_context_init(&fg_loop.ctx, fg_loop.loop, &fg_server.h2o);
    h2o_linklist_init_anchor(&fg_loop.active);
    sg_dispatch_init_loop(&fg_loop);
    sg_dispatch_init();
    sg_cache_init(fg_cfg.cache.l1_bytes, "");
}

/* One round of the loop: deliveries, finished calls, due timers. */
static void fg_run_loop(void)
{
    for (int k = 0; k < 3; ++k) {
        h2o_evloop_run(fg_loop.loop, 0);
        sg_timers_run(&fg_loop.timers);
    }
}

static void fg_teardown(void)
{
    fg_run_loop();
    h2o_multithread_unregister_receiver(fg_loop.ctx.queue, &fg_loop.deliveries);
    h2o_multithread_unregister_receiver(fg_loop.ctx.queue, &fg_loop.finished);
    h2o_multithread_queue_t *q = fg_loop.ctx.queue;
    h2o_context_dispose(&fg_loop.ctx);
    fg_run_loop();
    free(q);
    h2o_evloop_destroy(fg_loop.loop);
    sg_timers_dispose(&fg_loop.timers);
    sg_cache_dispose();
    sg_dispatch_dispose();
    sg_fusion_table_free(fg_gen.fusion);
    sg_clients_destroy(fg_gen.clients);
    for (int i = 0; i < 2; ++i) {
        sg_provenance_dispose(&fg_routes[i].prov);
        pthread_mutex_destroy(&fg_cores[i].admit_mutex);
    }
    h2o_config_dispose(&fg_server.h2o);
    sg_metrics_reset();
}

/* The value of fusion route f's searchgate_requests_total for `code`. */
static uint64_t fg_requests(int code)
{
    char l[64];
    snprintf(l, sizeof(l), "backend=\"f\",code=\"%d\"", code);
    return atomic_load(
        &sg_metrics_counter("searchgate_requests_total", "Retrieve/access requests by backend and HTTP status.", l)->v);
}

#endif
