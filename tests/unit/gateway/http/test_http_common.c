/*
 * Unit tests: the HTTP helpers every handler shares (gateway/http/http_common.c), each called from
 * a handler of the test on a request without a socket (h2o_loopback.h): answers with a body and
 * their reason phrases, the JSON error and Retry-After, the early answer (401's
 * WWW-Authenticate, the route's provenance), X-Searchgate-Provenance with a query's outcome, the
 * operations routes' index and counters, query parameters and request headers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include "http_gateway.h"
#include "query.h"
#include "route.h"

static const char config[] =
    "{\"listen\":{\"host\":\"127.0.0.1\",\"port\":0},\"threads\":1,\"backends\":["
    "{\"name\":\"t\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"id\":\"0\",\"contents\":\"a\"}]}},"
    "{\"name\":\"u\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"id\":\"1\",\"contents\":\"b\"}]}}]}";

/* What the test's handler does with the request: set by each test. */
static void (*act)(h2o_req_t *req);

static int on_req(void *data, h2o_req_t *req)
{
    (void)data;
    act(req);
    return 0;
}

static h2o_globalconf_t conf;

static int setup(void **state)
{
    (void)state;
    char err[1024];
    if (hg_build(config, 0, err, sizeof(err)) != 0)
        fail_msg("gateway: %s", err);
    h2o_config_init(&conf);
    h2o_hostconf_t *hc = h2o_config_register_host(&conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    lb_register(hc, "/", on_req, NULL);
    hg_loop_start(&conf);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hg_dispose();
    h2o_config_dispose(&conf);
    return 0;
}

/* Runs `a` as the handler of GET `path` with `headers` (pairs, NULL-terminated). */
static lb_conn_t *run(void (*a)(h2o_req_t *), const char *path, const char *const *headers)
{
    act = a;
    return hg_request("GET", path, NULL, headers);
}

static const sg_route_t *route(const char *name)
{
    const sg_route_t *r = sg_gen_route(hg_server.gen, name, strlen(name));
    assert_non_null(r);
    return r;
}

/* ---- answers ---- */

static void send_text(h2o_req_t *req)
{
    sg_send_body(req, 200, "text/plain", "hello", 5);
}
static void send_no_ctype(h2o_req_t *req)
{
    sg_send_body(req, 404, NULL, "gone", 4);
}
static void send_empty(h2o_req_t *req)
{
    sg_send_body(req, 413, "text/plain", NULL, 0);
}
static void send_odd_status(h2o_req_t *req)
{
    sg_send_json(req, 299, "{}", 2);
}

static void test_send_body(void **state)
{
    (void)state;
    lb_conn_t *c = run(send_text, "/", NULL);
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->req.res.reason, "OK");
    assert_string_equal(lb_res_header(c, "content-type"), "text/plain");
    assert_int_equal(c->req.res.content_length, 5);
    assert_string_equal(c->body, "hello");
    lb_destroy(c);
    c = run(send_no_ctype, "/", NULL);
    assert_int_equal(c->req.res.status, 404);
    assert_string_equal(c->req.res.reason, "Not Found");
    assert_null(lb_res_header(c, "content-type"));
    assert_string_equal(c->body, "gone");
    lb_destroy(c);
    c = run(send_empty, "/", NULL); /* no body: an empty one */
    assert_int_equal(c->req.res.status, 413);
    assert_string_equal(c->req.res.reason, "Payload Too Large");
    assert_int_equal(c->req.res.content_length, 0);
    assert_int_equal(c->body_len, 0);
    lb_destroy(c);
    c = run(send_odd_status, "/", NULL); /* JSON; a status the gateway never sends has the reason "Error" */
    assert_int_equal(c->req.res.status, 299);
    assert_string_equal(c->req.res.reason, "Error");
    assert_string_equal(lb_res_header(c, "content-type"), "application/json");
    assert_string_equal(c->body, "{}");
    lb_destroy(c);
}

static void expect_error(lb_conn_t *c, int status, const char *type, const char *msg)
{
    hg_expect_error(c, status, type, msg, 1);
}

static void error_retry(h2o_req_t *req)
{
    sg_send_error(req, 429, "rate_limited", "slow down, \"client\"\n", 7);
}
static void error_plain(h2o_req_t *req)
{
    sg_send_error(req, 503, "unavailable", "no", 0);
}

static void test_send_error(void **state)
{
    (void)state;
    lb_conn_t *c = run(error_retry, "/", NULL);
    expect_error(c, 429, "rate_limited", "slow down, \"client\"\n"); /* escaped in the body, whole in the message */
    assert_string_equal(lb_res_header(c, "retry-after"), "7");
    lb_destroy(c);
    c = run(error_plain, "/", NULL);
    expect_error(c, 503, "unavailable", "no");
    assert_null(lb_res_header(c, "retry-after"));
    lb_destroy(c);
}

static void early_ok(h2o_req_t *req)
{
    sg_http_answer_early(req, 200, NULL, "{\"result\":[]}", &route("t")->prov);
}
static void early_401(h2o_req_t *req)
{
    sg_http_answer_early(req, 401, "unauthorized", "a key is required", NULL);
}
static void early_422(h2o_req_t *req)
{
    sg_http_answer_early(req, 422, "validation_error", "bad field", &route("u")->prov);
}

static void test_answer_early(void **state)
{
    (void)state;
    lb_conn_t *c = run(early_ok, "/", NULL);
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"result\":[]}"); /* 200: the message is the body */
    assert_null(lb_res_header(c, "www-authenticate"));
    /* before a query ran: only the route's fixed part */
    assert_string_equal(lb_res_header(c, "x-searchgate-provenance"), route("t")->prov.header);
    lb_destroy(c);
    c = run(early_401, "/", NULL);
    expect_error(c, 401, "unauthorized", "a key is required");
    assert_string_equal(lb_res_header(c, "www-authenticate"), "Bearer realm=\"searchgate\"");
    assert_null(lb_res_header(c, "x-searchgate-provenance"));
    lb_destroy(c);
    c = run(early_422, "/", NULL);
    expect_error(c, 422, "validation_error", "bad field");
    assert_null(lb_res_header(c, "www-authenticate"));
    assert_string_equal(lb_res_header(c, "x-searchgate-provenance"), route("u")->prov.header);
    lb_destroy(c);
}

/* ---- X-Searchgate-Provenance ---- */

static sg_query_result_t res;
static const sg_provenance_t *prov;

static void prov_answer(h2o_req_t *req)
{
    sg_provenance_add_header(req, prov, &res);
    sg_send_json(req, 200, "{}", 2);
}

/* The header's value for `r` on route t, past its fixed part. */
static void expect_tail(const sg_query_result_t *r, const char *tail)
{
    res = *r;
    prov = &route("t")->prov;
    lb_conn_t *c = run(prov_answer, "/", NULL);
    const char *v = lb_res_header(c, "x-searchgate-provenance");
    assert_non_null(v);
    size_t n = prov->header_len;
    assert_true(strlen(v) >= n);
    assert_memory_equal(v, prov->header, n);
    assert_string_equal(v + n, tail);
    lb_destroy(c);
}

static void test_provenance_header(void **state)
{
    (void)state;
    assert_non_null(strstr(route("t")->prov.header, "route=t; type=plugin; plugin=example/"));
    expect_tail(&(sg_query_result_t){.status = 200, .n_distinct = 2}, "; cache=off");
    expect_tail(&(sg_query_result_t){.status = 200, .cache_on = 1, .n_distinct = 2}, "; cache=none; cached=0/2");
    expect_tail(&(sg_query_result_t){.status = 200, .cache_on = 1, .n_cached = 1, .n_distinct = 2}, "; cache=partial; cached=1/2");
    expect_tail(&(sg_query_result_t){.status = 200, .cache_on = 1, .n_cached = 12, .n_distinct = 12}, "; cache=all; cached=12/12");
    expect_tail(&(sg_query_result_t){.status = 504, .cache_on = 1}, ""); /* no cache outcome on an error */
    /* the parameters, with what a header cannot carry replaced (',' kept) */
    expect_tail(&(sg_query_result_t){.status = 504, .params = "{\"k\":1,\"m\":\"a;b\"}"}, "; params={_k_:1,_m_:_a_b_}");
    /* at most 256 bytes of them */
    char long_params[400], want[300];
    memset(long_params, 'x', sizeof(long_params) - 1);
    long_params[sizeof(long_params) - 1] = '\0';
    snprintf(want, sizeof(want), "; params=%.256s", long_params);
    expect_tail(&(sg_query_result_t){.status = 504, .params = long_params}, want);
    /* the fallback that answered */
    const sg_route_t *u = route("u");
    char fb[128];
    snprintf(fb, sizeof(fb), "; cache=all; cached=1/1; fallback=u:%s", u->prov.data);
    expect_tail(&(sg_query_result_t){.status = 200, .cache_on = 1, .n_cached = 1, .n_distinct = 1, .fallback = u}, fb);
    /* no provenance: no header */
    res = (sg_query_result_t){.status = 200};
    prov = NULL;
    lb_conn_t *c = run(prov_answer, "/", NULL);
    assert_null(lb_res_header(c, "x-searchgate-provenance"));
    lb_destroy(c);
}

/* ---- the operations routes ---- */

static void test_ops_route_index(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        int route;
        const char *name;
    } cases[] = {{"/", SG_OPS_ROOT, "root"},
                 {"/health", SG_OPS_HEALTH, "health"},
                 {"/metrics", SG_OPS_METRICS, "metrics"},
                 {"/stats", SG_OPS_STATS, "stats"},
                 {"/dashboard", SG_OPS_DASHBOARD, "dashboard"},
                 {"/admin/reload", SG_OPS_ADMIN, "admin"},
                 {"/healthz", SG_OPS_OTHER, "other"},
                 {"/health/", SG_OPS_OTHER, "other"},
                 {"", SG_OPS_OTHER, "other"},
                 {"/retrieve", SG_OPS_OTHER, "other"},
                 {"/Stats", SG_OPS_OTHER, "other"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        int r = sg_ops_route_index(h2o_iovec_init(cases[i].path, strlen(cases[i].path)));
        assert_int_equal(r, cases[i].route);
        assert_string_equal(sg_ops_route_names[r], cases[i].name);
    }
}

static void count_stats_429(h2o_req_t *req)
{
    sg_ops_count_route(req, SG_OPS_STATS, 429);
    sg_ops_count_route(req, SG_OPS_OTHER, 418); /* a status not counted apart: "other" */
    sg_send_json(req, 200, "{}", 2);
}

static void test_ops_count_route(void **state)
{
    (void)state;
    uint64_t s429 = hg_ops_count(SG_OPS_STATS, 429), o418 = hg_ops_count(SG_OPS_OTHER, 418);
    uint64_t h429 = hg_ops_count(SG_OPS_HEALTH, 429);
    lb_conn_t *c = run(count_stats_429, "/", NULL);
    assert_int_equal(hg_ops_count(SG_OPS_STATS, 429), s429 + 1);
    assert_int_equal(hg_ops_count(SG_OPS_OTHER, 418), o418 + 1);
    assert_int_equal(hg_ops_count(SG_OPS_HEALTH, 429), h429);
    assert_ptr_equal(hg_server.http_requests[SG_OPS_OTHER][SG_CODE_OTHER],
                     hg_server.http_requests[SG_OPS_OTHER][sg_code_index(418)]);
    lb_destroy(c);
}

/* ---- the request: query parameters and headers ---- */

static char got[8][64]; /* what the handler found, "(null)" for a NULL base */

static void keep(int i, h2o_iovec_t v)
{
    if (v.base == NULL)
        snprintf(got[i], sizeof(got[i]), "(null)");
    else
        snprintf(got[i], sizeof(got[i]), "[%.*s]", (int)v.len, v.base);
}

static void find_params(h2o_req_t *req)
{
    keep(0, sg_http_query_param(req, "window"));
    keep(1, sg_http_query_param(req, "a"));
    keep(2, sg_http_query_param(req, "b"));
    keep(3, sg_http_query_param(req, "win"));
    keep(4, sg_http_query_param(req, "c"));
    sg_send_json(req, 200, "{}", 2);
}

static void expect_params(const char *path, const char *window, const char *a, const char *b, const char *win, const char *cc)
{
    lb_conn_t *c = run(find_params, path, NULL);
    assert_string_equal(got[0], window);
    assert_string_equal(got[1], a);
    assert_string_equal(got[2], b);
    assert_string_equal(got[3], win);
    assert_string_equal(got[4], cc);
    lb_destroy(c);
}

static void test_query_param(void **state)
{
    (void)state;
    expect_params("/stats", "(null)", "(null)", "(null)", "(null)", "(null)");
    expect_params("/stats?window=60", "[60]", "(null)", "(null)", "(null)", "(null)");
    /* the last of repeated ones; a name without '=' has an empty value; prefixes are other names */
    expect_params("/stats?window=1&a=x&window=300&b&windowx=7&c=", "[300]", "[x]", "[]", "(null)", "[]");
    expect_params("/stats?&&a=1=2", "(null)", "[1=2]", "(null)", "(null)", "(null)");
}

static void find_headers(h2o_req_t *req)
{
    keep(0, sg_http_header(req, H2O_STRLIT("x-client-id")));
    keep(1, sg_http_header(req, H2O_STRLIT("x-timeout-ms")));
    keep(2, sg_http_header(req, H2O_STRLIT("content-type")));
    keep(3, sg_http_header(req, H2O_STRLIT("x-client")));
    sg_send_json(req, 200, "{}", 2);
}

static void test_header(void **state)
{
    (void)state;
    const char *h[] = {"X-Client-Id", "job-7", "Content-Type", "application/json", "x-timeout-ms", "", NULL};
    lb_conn_t *c = run(find_headers, "/", h);
    assert_string_equal(got[0], "[job-7]");
    assert_string_equal(got[1], "[]"); /* present and empty */
    assert_string_equal(got[2], "[application/json]");
    assert_string_equal(got[3], "(null)");
    lb_destroy(c);
    c = run(find_headers, "/", NULL);
    assert_string_equal(got[0], "(null)");
    assert_string_equal(got[1], "(null)");
    lb_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_body),         cmocka_unit_test(test_send_error),      cmocka_unit_test(test_answer_early),
        cmocka_unit_test(test_provenance_header), cmocka_unit_test(test_ops_route_index), cmocka_unit_test(test_ops_count_route),
        cmocka_unit_test(test_query_param),       cmocka_unit_test(test_header),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
