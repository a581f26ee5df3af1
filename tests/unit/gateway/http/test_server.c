/*
 * Unit tests: the HTTP server (gateway/http/server.c): the h2o configuration sg_server_start()
 * makes, one handler per path, driven by requests without a socket (h2o_loopback.h) on a loop of
 * the test's own that serves that configuration (http_gateway.h), while the server's one loop
 * thread idles. Each path reaches its handler and only its own path (an unknown one is a JSON
 * 404, a wrong method a JSON 405 with Allow), the operations routes answer (/, /health, /metrics,
 * /stats, /dashboard), guarded ones want the admin key, HEAD has no body, /admin/reload goes to
 * the hook the assembly lent, MCP's paths exist only with mcp.enabled, and the connection gate's
 * check runs before any route.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include "http_gateway.h"

#define DOCS "[{\"id\":\"0\",\"contents\":\"\\\"Alpha\\\"\\nalpha beta\"}]"

/* Group "open": MCP on, an admin key guards /, /metrics and /stats, no key required. */
static const char config_open[] = "{\"listen\":{\"host\":\"127.0.0.1\",\"port\":0},\"threads\":1,"
                                  "\"clients\":{\"admin_key_env\":\"SG_TEST_SERVER_ADMIN\"},"
                                  "\"backends\":[{\"name\":\"t\",\"plugin\":\"example\",\"config\":{\"documents\":" DOCS "}}]}";
/* Group "keyed": MCP off, every request needs a client key, no hooks. */
static const char config_keyed[] =
    "{\"listen\":{\"host\":\"127.0.0.1\",\"port\":0},\"threads\":1,\"mcp\":{\"enabled\":false},"
    "\"clients\":{\"require_key\":true,\"keys\":[{\"id\":\"k\",\"key_env\":\"SG_TEST_SERVER_KEY\"}]},"
    "\"backends\":[{\"name\":\"t\",\"plugin\":\"example\",\"config\":{\"documents\":" DOCS "}}]}";

static int reloads, loop_inits, loop_disposes;

static void admin_reload(sg_loop_t *loop, h2o_req_t *req)
{
    (void)loop;
    ++reloads;
    sg_send_json(req, 200, "{\"reloaded\":true}", 17);
}
static void loop_init(sg_loop_t *loop)
{
    (void)loop;
    ++loop_inits;
}
static void loop_dispose(sg_loop_t *loop)
{
    (void)loop;
    ++loop_disposes;
}

static const sg_server_hooks_t hooks = {admin_reload, loop_init, loop_dispose};

static int start(const char *config, const sg_server_hooks_t *h)
{
    char err[1024];
    setenv("SG_TEST_SERVER_ADMIN", "admin-key", 1);
    setenv("SG_TEST_SERVER_KEY", "client-key", 1);
    if (hg_build(config, 1, err, sizeof(err)) != 0)
        fail_msg("gateway: %s", err);
    loop_inits = loop_disposes = 0;
    if (sg_server_start(&hg_server, h, err, sizeof(err)) != 0)
        fail_msg("server: %s", err);
    hg_loop_start(&hg_server.h2o);
    return 0;
}

static int setup_open(void **state)
{
    (void)state;
    return start(config_open, &hooks);
}

static int setup_keyed(void **state)
{
    (void)state;
    return start(config_keyed, NULL);
}

static int teardown(void **state)
{
    (void)state;
    int with_hooks = hg_server.hooks != NULL;
    hg_dispose();
    if (with_hooks)
        assert_int_equal(loop_disposes, 1); /* on the server's one loop thread */
    return 0;
}

static const char *const admin[] = {"authorization", "Bearer admin-key", NULL};

static void expect_error(lb_conn_t *c, int status, const char *type, const char *msg)
{
    hg_expect_error(c, status, type, msg, 0);
}

/* ---- group "open" ---- */

static void test_started(void **state)
{
    (void)state;
    assert_int_equal(hg_server.n_loops, 1);
    assert_int_equal(loop_inits, 1); /* the hook ran on the loop thread before start returned */
    assert_true(sg_server_loops_alive(&hg_server, 60000));
    /* a loop that has not gone round for longer than asked is not alive (the loop idles 500 ms
     * between rounds, so the stale mark is seen before it writes a new one) */
    int seen_stale = 0;
    for (int i = 0; i < 5 && !seen_stale; ++i) {
        atomic_store(&hg_server.loops[0].alive_ms, sg_now_ms() - 10000);
        seen_stale = !sg_server_loops_alive(&hg_server, 5000);
    }
    assert_true(seen_stale);
    assert_true(sg_server_loops_alive(&hg_server, 20000));
}

static void test_root(void **state)
{
    (void)state;
    lb_conn_t *c = hg_request("GET", "/", NULL, NULL); /* guarded: the admin key */
    expect_error(c, 401, "unauthorized", "");
    assert_string_equal(lb_res_header(c, "www-authenticate"), "Bearer realm=\"searchgate\"");
    lb_destroy(c);
    uint64_t before = hg_ops_count(SG_OPS_ROOT, 200);
    c = hg_request("GET", "/", NULL, admin);
    assert_int_equal(c->req.res.status, 200);
    cJSON *j = hg_json(c);
    assert_string_equal(cJSON_GetObjectItem(j, "name")->valuestring, "searchgate");
    assert_string_equal(cJSON_GetObjectItem(j, "default_backend")->valuestring, "t");
    cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "backends"), 0);
    assert_string_equal(cJSON_GetObjectItem(b, "retrieve")->valuestring, "/retrieve/t");
    assert_string_equal(cJSON_GetObjectItem(b, "plugin")->valuestring, "example");
    cJSON *links = cJSON_GetObjectItem(j, "links");
    assert_string_equal(cJSON_GetObjectItem(links, "mcp")->valuestring, "/mcp"); /* MCP is on */
    assert_string_equal(cJSON_GetObjectItem(links, "health")->valuestring, "/health");
    cJSON_Delete(j);
    assert_int_equal(hg_ops_count(SG_OPS_ROOT, 200), before + 1);
    lb_destroy(c);
}

static void test_health(void **state)
{
    (void)state;
    uint64_t before = hg_ops_count(SG_OPS_HEALTH, 200);
    lb_conn_t *c = hg_request("GET", "/health", NULL, NULL); /* open to probes */
    assert_int_equal(c->req.res.status, 200);
    cJSON *j = hg_json(c);
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "ok");
    cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "backends"), "t");
    assert_string_equal(cJSON_GetObjectItem(t, "status")->valuestring, "ok");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "cache"), "redis")->valuestring, "off");
    cJSON_Delete(j);
    assert_int_equal(hg_ops_count(SG_OPS_HEALTH, 200), before + 1);
    lb_destroy(c);
    /* draining: 503 while everything else is still served */
    atomic_store(&hg_server.draining, 1);
    c = hg_request("GET", "/health", NULL, NULL);
    assert_int_equal(c->req.res.status, 503);
    j = hg_json(c);
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "draining");
    cJSON_Delete(j);
    lb_destroy(c);
    atomic_store(&hg_server.draining, 0);
}

static void test_metrics_stats_dashboard(void **state)
{
    (void)state;
    lb_conn_t *c = hg_request("GET", "/metrics", NULL, NULL);
    assert_int_equal(c->req.res.status, 401);
    lb_destroy(c);
    c = hg_request("GET", "/metrics", NULL, admin);
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(lb_res_header(c, "content-type"), "text/plain; version=0.0.4; charset=utf-8");
    assert_non_null(strstr(c->body, "searchgate_http_requests_total{route=\"metrics\",code=\"401\"} 1\n"));
    assert_non_null(strstr(c->body, "searchgate_flights ")); /* the server's collector */
    lb_destroy(c);
    c = hg_request("GET", "/stats?window=60", NULL, admin);
    assert_int_equal(c->req.res.status, 200);
    cJSON *j = hg_json(c);
    assert_int_equal(cJSON_GetObjectItem(j, "window_s")->valueint, 60);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "backends"), "t"));
    cJSON_Delete(j);
    lb_destroy(c);
    static const char *const bad[] = {"/stats?window=abc", "/stats?window=5", "/stats?window=900x",
                                      "/stats?window=-1",  "/stats?window=",  "/stats?window=1000000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        uint64_t before = hg_ops_count(SG_OPS_STATS, 400);
        c = hg_request("GET", bad[i], NULL, admin);
        expect_error(c, 400, "bad_request", "query parameter window must be a whole number of seconds");
        assert_int_equal(hg_ops_count(SG_OPS_STATS, 400), before + 1);
        lb_destroy(c);
    }
    c = hg_request("GET", "/dashboard", NULL, NULL); /* a page without data: open */
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(lb_res_header(c, "content-type"), "text/html; charset=utf-8");
    assert_non_null(strstr(c->body, "<html"));
    lb_destroy(c);
}

/* Each path answers only itself: anything below it, and every path no handler has, is a JSON
 * 404 from "/" counted as "other". */
static void test_not_found(void **state)
{
    (void)state;
    static const char *const paths[] = {"/nope", "/health/x", "/statsx", "/retrieve/t/x", "/mcp/x", "/admin", "/admin/reload/x"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); ++i) {
        uint64_t before = hg_ops_count(SG_OPS_OTHER, 404);
        lb_conn_t *c = hg_request("GET", paths[i], NULL, admin);
        char want[128];
        snprintf(want, sizeof(want), "no route for %s; see GET / for the routes", paths[i]);
        expect_error(c, 404, "not_found", want);
        assert_int_equal(hg_ops_count(SG_OPS_OTHER, 404), before + 1);
        lb_destroy(c);
    }
}

static void test_method_not_allowed(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {{"POST", "/health", "GET"},     {"DELETE", "/stats", "GET"},    {"PUT", "/", "GET"},
                 {"GET", "/retrieve", "POST"},   {"GET", "/access/t", "POST"},   {"GET", "/admin/reload", "POST"},
                 {"PATCH", "/dashboard", "GET"}, {"HEAD", "/retrieve/t", "POST"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        uint64_t before = hg_ops_count(SG_OPS_OTHER, 405);
        lb_conn_t *c = hg_request(cases[i].method, cases[i].path, NULL, admin);
        assert_int_equal(c->req.res.status, 405);
        assert_string_equal(lb_res_header(c, "allow"), cases[i].allow);
        if (strcmp(cases[i].method, "HEAD") != 0) {
            char want[96];
            snprintf(want, sizeof(want), "method %s is not allowed here; use %s", cases[i].method, cases[i].allow);
            expect_error(c, 405, "method_not_allowed", want);
        }
        assert_int_equal(hg_ops_count(SG_OPS_OTHER, 405), before + 1);
        lb_destroy(c);
    }
}

/* HEAD: the GET's status and headers, Content-Length included, and no body. */
static void test_head(void **state)
{
    (void)state;
    lb_conn_t *g = hg_request("GET", "/dashboard", NULL, NULL);
    lb_conn_t *h = hg_request("HEAD", "/dashboard", NULL, NULL);
    assert_int_equal(h->req.res.status, 200);
    assert_int_equal(h->req.res.content_length, g->req.res.content_length);
    assert_true(g->body_len > 0);
    assert_int_equal(h->body_len, 0);
    assert_string_equal(lb_res_header(h, "content-type"), "text/html; charset=utf-8");
    lb_destroy(g);
    lb_destroy(h);
}

static void test_retrieve_paths(void **state)
{
    (void)state;
    lb_conn_t *c = hg_request("POST", "/retrieve", "{\"queries\":[\"alpha\"]", NULL);
    expect_error(c, 400, "invalid_json", "");
    lb_destroy(c);
    c = hg_request("POST", "/retrieve/t", "{\"queries\":[\"alpha\"]}", NULL);
    assert_int_equal(c->req.res.status, 200);
    assert_non_null(strstr(c->body, "\"id\":\"0\""));
    lb_destroy(c);
    c = hg_request("POST", "/retrieve/zz", "{\"queries\":[\"alpha\"]}", NULL);
    expect_error(c, 404, "not_found", "no backend named \"zz\"");
    lb_destroy(c);
    c = hg_request("POST", "/access/t", "{\"urls\":[\"https://x.example/\"]}", NULL); /* /access: t has no pages */
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"result\":[null]}");
    lb_destroy(c);
}

static void test_admin_reload(void **state)
{
    (void)state;
    int before = reloads;
    lb_conn_t *c = hg_request("POST", "/admin/reload", "", admin);
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"reloaded\":true}");
    assert_int_equal(reloads, before + 1);
    lb_destroy(c);
}

static void test_mcp_paths(void **state)
{
    (void)state;
    const char *h[] = {"content-type", "application/json", "accept", "application/json, text/event-stream", NULL};
    lb_conn_t *c = hg_request("POST", "/mcp", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", h);
    assert_int_equal(c->req.res.status, 200);
    cJSON *j = cJSON_Parse(c->body);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "jsonrpc")->valuestring, "2.0");
    assert_non_null(cJSON_GetObjectItem(j, "result"));
    cJSON_Delete(j);
    lb_destroy(c);
}

/* While the server shuts down, every answer closes its connection. */
static void test_shutdown_closes(void **state)
{
    (void)state;
    lb_conn_t *c = hg_request("GET", "/health", NULL, NULL);
    assert_int_equal(c->req.http1_is_persistent, 1);
    lb_destroy(c);
    hg_loop.ctx.shutdown_requested = 1;
    c = hg_request("GET", "/health", NULL, NULL);
    assert_int_equal(c->req.res.status, 200);
    assert_int_equal(c->req.http1_is_persistent, 0);
    lb_destroy(c);
    hg_loop.ctx.shutdown_requested = 0;
}

/* ---- group "keyed" ---- */

/* The gate's check comes first on every path: without a key nothing is routed. */
static void test_gate_first(void **state)
{
    (void)state;
    static const char *const paths[] = {"/retrieve/t", "/retrieve/zz", "/nope", "/stats"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); ++i) {
        lb_conn_t *c = hg_request("POST", paths[i], "{\"queries\":[\"alpha\"]}", NULL);
        expect_error(c, 401, "unauthorized", "");
        assert_int_equal(c->req.http1_is_persistent, 0);
        lb_destroy(c);
    }
    const char *key[] = {"x-api-key", "client-key", NULL};
    lb_conn_t *c = hg_request("POST", "/retrieve/t", "{\"queries\":[\"alpha\"]}", key);
    assert_int_equal(c->req.res.status, 200);
    assert_int_equal(c->req.http1_is_persistent, 1);
    lb_destroy(c);
    /* /health stays open, but the connection ends after it */
    c = hg_request("GET", "/health", NULL, NULL);
    assert_int_equal(c->req.res.status, 200);
    assert_int_equal(c->req.http1_is_persistent, 0);
    lb_destroy(c);
    /* without an admin key, any client's key opens the guarded routes */
    c = hg_request("GET", "/stats", NULL, key);
    assert_int_equal(c->req.res.status, 200);
    lb_destroy(c);
}

/* Without mcp.enabled, MCP's paths are unknown; without the hook, so is /admin/reload. */
static void test_unregistered(void **state)
{
    (void)state;
    const char *key[] = {"x-api-key", "client-key", NULL};
    static const char *const paths[] = {"/mcp", "/sse", "/messages", "/admin/reload"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); ++i) {
        lb_conn_t *c = hg_request("POST", paths[i], "{}", key);
        char want[96];
        snprintf(want, sizeof(want), "no route for %s", paths[i]);
        expect_error(c, 404, "not_found", want);
        lb_destroy(c);
    }
    lb_conn_t *c = hg_request("GET", "/", NULL, key);
    cJSON *j = hg_json(c);
    assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "links"), "mcp"));
    cJSON_Delete(j);
    lb_destroy(c);
}

int main(void)
{
    const struct CMUnitTest open[] = {
        cmocka_unit_test(test_started),
        cmocka_unit_test(test_root),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_metrics_stats_dashboard),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_retrieve_paths),
        cmocka_unit_test(test_admin_reload),
        cmocka_unit_test(test_mcp_paths),
        cmocka_unit_test(test_shutdown_closes),
    };
    const struct CMUnitTest keyed[] = {cmocka_unit_test(test_gate_first), cmocka_unit_test(test_unregistered)};
    int failed = cmocka_run_group_tests_name("open", open, setup_open, teardown);
    failed += cmocka_run_group_tests_name("keyed", keyed, setup_keyed, teardown);
    return failed;
}
