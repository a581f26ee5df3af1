/*
 * http_gateway.h -- the whole gateway of a config, built as main.c builds it (sg_config_parse(),
 * sg_gen_build() with the example plugin, sg_gen_publish()), and one loop run by hand on the test's
 * thread, for the unit tests of the HTTP adapters (test_retrieve.c, test_server.c, test_gate.c,
 * test_http_common.c). Requests reach it through h2o_loopback.h: hg_loop_start() gives the loop an
 * h2o context on a configuration of the test's (its own handlers) or the server's (server.c's per
 * path handlers, after sg_server_start()). No listener is read: the test's requests have no socket.
 *
 * hg_build() does what sg_server_start() would do for the request path when a test does not
 * start the server (hg_build(.., 0)): the response budget, the per-route counters of the operations
 * routes and the body counter.
 */
#ifndef SG_TEST_HTTP_GATEWAY_H
#define SG_TEST_HTTP_GATEWAY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server.h"
#include "build.h"
#include "budget.h"
#include "dispatch.h"
#include "gen.h"
#include "http_common.h"
#include "listen.h"
#include "mcp.h"
#include "respond.h"
#include "status.h"
#include "../cache/cache.h"
#include "h2o_loopback.h"
#include <cJSON.h>

static sg_config_t hg_cfg;
static sg_server_t hg_server;
static sg_loop_t hg_loop;
static int hg_started; /* sg_server_start() ran */

static inline void hg_bury(sg_gen_t *g)
{
    sg__gen_dispose(g);
}

/* The loop's timers, after each round of the evloop (lb_run's tick). */
static inline void hg_tick(void *arg)
{
    (void)arg;
    sg_timers_run(&hg_loop.timers);
}

/* Builds and publishes the gateway of `json`; with `start`, the caller starts the server. Returns
 * 0, or -1 with the error in `err` (the config refused). */
static inline int hg_build(const char *json, int start, char *err, size_t err_size)
{
    memset(&hg_cfg, 0, sizeof(hg_cfg));
    memset(&hg_server, 0, sizeof(hg_server));
    memset(&hg_loop, 0, sizeof(hg_loop));
    hg_started = start;
    if (sg_config_parse(&hg_cfg, json, strlen(json), ".", err, err_size) != 0)
        return -1;
    hg_server.cfg = &hg_cfg;
    hg_server.started_ms = sg_now_ms();
    pthread_mutex_init(&hg_server.gen_mutex, NULL);
    sg_dispatch_init();
    sg_budget_init(0, "");
    sg_gen_opts_t o = {SG_PLUGIN_DIR, 0, NULL, hg_bury};
    sg_gen_t *g = sg_gen_build(&hg_server, &hg_cfg, 0, NULL, &o, err, err_size);
    if (g == NULL) {
        sg_budget_dispose();
        sg_dispatch_dispose();
        pthread_mutex_destroy(&hg_server.gen_mutex);
        sg_config_free(&hg_cfg);
        return -1;
    }
    sg_cache_init(hg_cfg.cache.l1_bytes, hg_cfg.cache.redis_prefix);
    sg_mcp_init(&hg_server);
    sg_gen_publish(&hg_server, g);
    if (start)
        return 0;
    sg_respond_init(&hg_server);
    for (int r = 0; r < SG_OPS_COUNT; ++r)
        for (int c = 0; c < SG_NUM_CODES; ++c) {
            char l[64];
            if (c == SG_CODE_OTHER)
                snprintf(l, sizeof(l), "route=\"%s\",code=\"other\"", sg_ops_route_names[r]);
            else
                snprintf(l, sizeof(l), "route=\"%s\",code=\"%d\"", sg_ops_route_names[r], sg_code_values[c]);
            hg_server.http_requests[r][c] = sg_metrics_counter("searchgate_http_requests_total", "test", l);
        }
    hg_server.body_bytes_parsed = sg_metrics_counter("searchgate_request_body_bytes_parsed_total", "test", "");
    return 0;
}

/* The test's loop, as server.c's loop_init() makes one but without listeners, serving `conf`. */
static inline void hg_loop_start(h2o_globalconf_t *conf)
{
    size_t key = 0;
    hg_loop.id = 99;
    hg_loop.server = &hg_server;
    hg_loop.loop = h2o_evloop_create();
    h2o_context_init(&hg_loop.ctx, hg_loop.loop, conf);
    *h2o_context_get_storage(&hg_loop.ctx, &key, NULL) = &hg_loop;
    h2o_linklist_init_anchor(&hg_loop.active);
    sg_dispatch_init_loop(&hg_loop);
    hg_loop.gen = sg_gen_acquire(&hg_server);
    sg_mcp_init_loop(&hg_loop);
}

/* One round of the loop: deliveries, finished calls, due timers. */
static inline void hg_run_loop(void)
{
    for (int k = 0; k < 3; ++k) {
        h2o_evloop_run(hg_loop.loop, 0);
        sg_timers_run(&hg_loop.timers);
    }
}

static inline void hg_loop_stop(void)
{
    if (hg_loop.loop == NULL) /* the test ran none */
        return;
    hg_run_loop();
    sg_mcp_dispose_loop(&hg_loop);
    h2o_multithread_unregister_receiver(hg_loop.ctx.queue, &hg_loop.deliveries);
    h2o_multithread_unregister_receiver(hg_loop.ctx.queue, &hg_loop.finished);
    h2o_multithread_queue_t *q = hg_loop.ctx.queue;
    h2o_context_dispose(&hg_loop.ctx);
    hg_run_loop();
    free(q);
    h2o_evloop_destroy(hg_loop.loop);
    sg_timers_dispose(&hg_loop.timers);
    sg_gen_release(hg_loop.gen);
    hg_loop.gen = NULL;
    hg_loop.loop = NULL;
}

/* The plugins destroyed (what they still had completes as cancelled and is delivered), the loop
 * gone, everything the build made freed, as main.c exits. */
static inline void hg_dispose(void)
{
    if (hg_started)
        sg_server_stop(&hg_server);
    sg_gen_destroy_instances(&hg_server);
    hg_loop_stop();
    if (hg_started)
        sg_server_dispose(&hg_server);
    if (hg_server.listeners != NULL)
        sg_listen_dispose(hg_server.listeners, hg_server.n_listeners);
    sg_gen_unpublish(&hg_server);
    sg_cache_dispose();
    sg_budget_dispose();
    sg_mcp_dispose();
    sg_dispatch_dispose();
    sg_metrics_reset();
    pthread_mutex_destroy(&hg_server.gen_mutex);
    sg_config_free(&hg_cfg);
}

/* A request on the test's loop: `method` `path` with `body` (NULL: none) and `headers` (name,
 * value pairs, NULL-terminated), run until answered (5 s at most). */
static inline lb_conn_t *hg_request(const char *method, const char *path, const char *body, const char *const *headers)
{
    lb_conn_t *c = lb_create(&hg_loop.ctx, hg_loop.ctx.globalconf->hosts);
    lb_request(c, method, path);
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i += 2)
        lb_header(c, headers[i], headers[i + 1]);
    if (body != NULL)
        lb_body(c, body, strlen(body));
    if (lb_run(c, hg_tick, NULL, 5000) != 0)
        fail_msg("%s %s: no answer within 5 s", method, path);
    return c;
}

/* searchgate_http_requests_total{route, code}. */
static inline uint64_t hg_ops_count(int route, int status)
{
    return atomic_load(&hg_server.http_requests[route][sg_code_index(status)]->v);
}

/* ---- the answers' checks (cmocka.h is included before this header) ---- */

/* The answer's body as JSON, after its Content-Type (application/json) and its length. */
static inline cJSON *hg_json(lb_conn_t *c)
{
    assert_string_equal(lb_res_header(c, "content-type"), "application/json");
    assert_int_equal(c->req.res.content_length, c->body_len);
    cJSON *j = cJSON_Parse(c->body);
    if (j == NULL)
        fail_msg("not JSON: %s", c->body);
    return j;
}

/* A JSON error answer ({"error":{"code","type","message"},"detail"}): `status` with its reason
 * phrase, `type`, and a message that contains `msg` (`exact`: is `msg`), repeated as the detail. */
static inline void hg_expect_error(lb_conn_t *c, int status, const char *type, const char *msg, int exact)
{
    assert_int_equal(c->req.res.status, status);
    assert_string_equal(c->req.res.reason, sg_http_reason(status));
    cJSON *j = hg_json(c);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    assert_int_equal(cJSON_GetObjectItem(e, "code")->valueint, status);
    assert_string_equal(cJSON_GetObjectItem(e, "type")->valuestring, type);
    const char *m = cJSON_GetObjectItem(e, "message")->valuestring;
    if (exact)
        assert_string_equal(m, msg);
    else if (strstr(m, msg) == NULL)
        fail_msg("message \"%s\" does not say \"%s\"", m, msg);
    assert_string_equal(cJSON_GetObjectItem(j, "detail")->valuestring, m);
    cJSON_Delete(j);
}

#endif
