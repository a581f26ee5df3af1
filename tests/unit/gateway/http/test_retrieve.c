/*
 * Unit tests: POST /retrieve and POST /access, the HTTP adapter over the query pipeline
 * (gateway/http/retrieve.c), driven through h2o without a socket (h2o_loopback.h) on the gateway
 * of a config with the example plugin (http_gateway.h): what is answered before a query (the
 * client, the route from the path or the "backend" field, the body's 400/413/422, search_params,
 * X-Timeout-Ms, an empty batch, /access without pages), a query answered in each shape, a fusion
 * route's answer, and a client that goes away while its query runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include "http_gateway.h"
#include "retrieve.h"
#include "route.h"

#define DOCS_T                                                                                                                     \
    "[{\"id\":\"0\",\"contents\":\"\\\"Alpha\\\"\\nalpha beta\"},{\"id\":\"1\",\"contents\":\"\\\"Gamma\\\"\\ngamma delta\"}]"
#define DOCS_P "[{\"id\":\"9\",\"contents\":\"\\\"Paged\\\"\\npage text\"}]"

static const char config[] = "{\"listen\":{\"host\":\"127.0.0.1\",\"port\":0},\"threads\":1,"
                             "\"limits\":{\"max_body_bytes\":2048,\"max_queries\":4},"
                             "\"clients\":{\"keys\":[{\"id\":\"k\",\"key_env\":\"SG_TEST_RETRIEVE_KEY\"}]},"
                             "\"backends\":["
                             "{\"name\":\"t\",\"plugin\":\"example\",\"topk\":2,\"config\":{\"documents\":" DOCS_T "}},"
                             "{\"name\":\"p\",\"plugin\":\"example\",\"topk\":2,\"config\":{\"documents\":" DOCS_P ","
                             "\"pages\":[{\"url\":\"https://a.example/x\",\"contents\":\"page x\"}]}},"
                             "{\"name\":\"hang\",\"plugin\":\"example\",\"config\":{\"documents\":" DOCS_P ",\"hang\":true}},"
                             "{\"name\":\"down\",\"plugin\":\"example\",\"config\":{\"documents\":" DOCS_P ","
                             "\"error\":{\"status\":\"unavailable\",\"message\":\"the test says so\"}}},"
                             "{\"name\":\"f\",\"fusion\":{\"routes\":[\"t\",\"p\"]}},"
                             "{\"name\":\"fd\",\"fusion\":{\"routes\":[\"t\",\"down\"]}}"
                             "]}";

static int on_retrieve(void *data, h2o_req_t *req)
{
    (void)data;
    const char *name = NULL;
    size_t len = 0;
    h2o_iovec_t p = req->path_normalized;
    int is_access = h2o_memis(p.base, p.len > 7 ? 7 : p.len, H2O_STRLIT("/access"));
    size_t prefix = is_access ? 7 : 9;
    if (p.len > prefix + 1) {
        name = p.base + prefix + 1;
        len = p.len - prefix - 1;
    }
    return sg_retrieve_handle(sg_loop_of(req), req, is_access, name, len);
}

static h2o_globalconf_t conf;

static int setup(void **state)
{
    (void)state;
    char err[1024];
    setenv("SG_TEST_RETRIEVE_KEY", "sekrit-key", 1);
    if (hg_build(config, 0, err, sizeof(err)) != 0)
        fail_msg("gateway: %s", err);
    sg_retrieve_init(NULL, hg_server.gen);
    h2o_config_init(&conf);
    h2o_hostconf_t *hc = h2o_config_register_host(&conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    lb_register(hc, "/retrieve", on_retrieve, NULL);
    lb_register(hc, "/access", on_retrieve, NULL);
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

static lb_conn_t *post(const char *path, const char *body)
{
    return hg_request("POST", path, body, NULL);
}

/* searchgate_requests_total of route `name` with `status`. */
static uint64_t route_count(const char *name, int status)
{
    const sg_route_t *r = sg_gen_route(hg_server.gen, name, strlen(name));
    assert_non_null(r);
    return atomic_load(&r->meters.requests[sg_code_index(status)]->v);
}

static void expect_error(lb_conn_t *c, int status, const char *type, const char *msg)
{
    hg_expect_error(c, status, type, msg, 0);
}

/* ---- answered before a query ---- */

static void test_bad_json(void **state)
{
    (void)state;
    uint64_t before = route_count("t", 400);
    lb_conn_t *c = post("/retrieve", "{\"queries\": [\"a\"");
    expect_error(c, 400, "invalid_json", "");
    assert_int_equal(route_count("t", 400), before + 1); /* counted on the default route */
    lb_destroy(c);
}

static void test_validation(void **state)
{
    (void)state;
    static const char *const bodies[][2] = {
        {"{}", "queries"},
        {"{\"queries\":\"not a list\"}", "queries"},
        {"{\"queries\":[1,2]}", "queries"},
        {"{\"queries\":[\"a\"],\"topk\":-1}", "topk"},
        {"{\"queries\":[\"a\"],\"return_scores\":\"yes\"}", "return_scores"},
        {"[\"a\"]", ""},
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); ++i) {
        uint64_t before = route_count("t", 422);
        lb_conn_t *c = post("/retrieve", bodies[i][0]);
        expect_error(c, 422, "validation_error", bodies[i][1]);
        assert_int_equal(route_count("t", 422), before + 1);
        lb_destroy(c);
    }
}

static void test_too_large(void **state)
{
    (void)state;
    /* over limits.max_queries (4) */
    lb_conn_t *c = post("/retrieve", "{\"queries\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}");
    expect_error(c, 413, "too_large", "");
    lb_destroy(c);
    /* over limits.max_body_bytes (2048): h2o lets up to twice it through, the adapter refuses it */
    char body[3000];
    int n = snprintf(body, sizeof(body), "{\"queries\":[\"%0*d\"]}", 2100, 0);
    assert_true(n > 2048 && (size_t)n < sizeof(body));
    c = post("/retrieve", body);
    expect_error(c, 413, "too_large", "2048");
    lb_destroy(c);
}

static void test_no_body(void **state)
{
    (void)state;
    lb_conn_t *c = post("/retrieve", NULL); /* req->entity.base NULL */
    expect_error(c, 422, "validation_error", "a JSON body is required, e.g. {\"queries\"");
    lb_destroy(c);
    c = post("/access", NULL);
    expect_error(c, 422, "validation_error", "a JSON body is required, e.g. {\"urls\"");
    lb_destroy(c);
}

static void test_unknown_route(void **state)
{
    (void)state;
    uint64_t before = hg_ops_count(SG_OPS_OTHER, 404);
    lb_conn_t *c = post("/retrieve/nope", "{\"queries\":[\"alpha\"]}");
    expect_error(c, 404, "not_found", "no backend named \"nope\"");
    assert_int_equal(hg_ops_count(SG_OPS_OTHER, 404), before + 1);
    lb_destroy(c);
    /* the "backend" field, when the path names none */
    c = post("/retrieve", "{\"queries\":[\"alpha\"],\"backend\":\"missing\"}");
    expect_error(c, 404, "not_found", "no backend named \"missing\"");
    assert_int_equal(hg_ops_count(SG_OPS_OTHER, 404), before + 2);
    lb_destroy(c);
}

static void test_search_params_refused(void **state)
{
    (void)state;
    /* the example plugin has no check_params: any search_params is the client's error */
    lb_conn_t *c = post("/retrieve/t", "{\"queries\":[\"alpha\"],\"search_params\":{\"x\":1}}");
    expect_error(c, 422, "validation_error", "backend t takes no search_params");
    lb_destroy(c);
    c = post("/retrieve/f", "{\"queries\":[\"alpha\"],\"search_params\":{\"x\":1}}");
    expect_error(c, 422, "validation_error", "fusion route f takes no search_params");
    lb_destroy(c);
}

static void test_timeout_header(void **state)
{
    (void)state;
    static const char *const bad[] = {"abc", "0", "-5", "+5", " 5", "5x", "", "123456789012345678901234567890"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        static const char *const routes[] = {"/retrieve/t", "/retrieve/f"};
        for (size_t r = 0; r < 2; ++r) {
            const char *h[] = {"X-Timeout-Ms", bad[i], NULL};
            lb_conn_t *c = hg_request("POST", routes[r], "{\"queries\":[\"alpha\"]}", h);
            expect_error(c, 422, "validation_error", "X-Timeout-Ms must be a positive integer");
            lb_destroy(c);
        }
    }
    /* a valid one shorter than the route's timeout ends a hanging query with 504 in time */
    const char *h[] = {"x-timeout-ms", "150", NULL};
    uint64_t t0 = sg_now_ms();
    lb_conn_t *c = hg_request("POST", "/retrieve/hang", "{\"queries\":[\"alpha\"]}", h);
    assert_int_equal(c->req.res.status, 504);
    assert_true(sg_now_ms() - t0 < 3000);
    lb_destroy(c);
}

static void test_empty_batch(void **state)
{
    (void)state;
    uint64_t before = route_count("t", 200);
    lb_conn_t *c = post("/retrieve", "{\"queries\":[]}");
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"result\":[]}");
    assert_non_null(lb_res_header(c, "x-searchgate-provenance"));
    assert_int_equal(route_count("t", 200), before + 1);
    lb_destroy(c);
    c = post("/retrieve/f", "{\"queries\":[]}");
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"result\":[]}");
    lb_destroy(c);
}

static void test_unauthorized(void **state)
{
    (void)state;
    const char *h[] = {"x-api-key", "wrong-key", NULL};
    lb_conn_t *c = hg_request("POST", "/retrieve", "{\"queries\":[\"alpha\"]}", h);
    expect_error(c, 401, "unauthorized", "");
    assert_string_equal(lb_res_header(c, "www-authenticate"), "Bearer realm=\"searchgate\"");
    assert_int_equal(c->req.http1_is_persistent, 0); /* the next request meets the gate again */
    lb_destroy(c);
    /* the right key is served */
    const char *ok[] = {"authorization", "Bearer sekrit-key", NULL};
    c = hg_request("POST", "/retrieve", "{\"queries\":[\"alpha\"]}", ok);
    assert_int_equal(c->req.res.status, 200);
    lb_destroy(c);
}

/* ---- queries ---- */

/* The ids of the documents of each query's list, "0,1|9". */
static void ids_of(const char *body, int scored, char *out, size_t size)
{
    cJSON *j = cJSON_Parse(body);
    assert_non_null(j);
    cJSON *res = cJSON_GetObjectItem(j, "result");
    assert_true(cJSON_IsArray(res));
    out[0] = '\0';
    size_t at = 0;
    for (int q = 0; q < cJSON_GetArraySize(res); ++q) {
        cJSON *list = cJSON_GetArrayItem(res, q);
        for (int i = 0; i < cJSON_GetArraySize(list); ++i) {
            cJSON *hit = cJSON_GetArrayItem(list, i);
            cJSON *doc = scored ? cJSON_GetObjectItem(hit, "document") : hit;
            if (scored)
                assert_true(cJSON_IsNumber(cJSON_GetObjectItem(hit, "score")));
            else
                assert_null(cJSON_GetObjectItem(hit, "score"));
            at += (size_t)snprintf(out + at, size - at, "%s%s", i != 0 ? "," : "", cJSON_GetObjectItem(doc, "id")->valuestring);
        }
        if (q + 1 < cJSON_GetArraySize(res))
            at += (size_t)snprintf(out + at, size - at, "|");
    }
    cJSON_Delete(j);
}

static void test_answered(void **state)
{
    (void)state;
    char ids[64];
    uint64_t before = route_count("t", 200);
    lb_conn_t *c = post("/retrieve", "{\"queries\":[\"gamma\",\"alpha\"],\"topk\":1}");
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(lb_res_header(c, "content-type"), "application/json");
    assert_int_equal(c->req.res.content_length, c->body_len);
    ids_of(c->body, 0, ids, sizeof(ids));
    assert_string_equal(ids, "1|0");
    const char *prov = lb_res_header(c, "x-searchgate-provenance");
    assert_non_null(prov);
    assert_non_null(strstr(prov, "route=t"));
    assert_int_equal(route_count("t", 200), before + 1);
    lb_destroy(c);
    /* return_scores: {"document":..., "score":...} */
    c = post("/retrieve/t", "{\"queries\":[\"alpha\"],\"return_scores\":true}");
    assert_int_equal(c->req.res.status, 200);
    ids_of(c->body, 1, ids, sizeof(ids));
    assert_string_equal(ids, "0,1");
    lb_destroy(c);
}

static void test_route_choice(void **state)
{
    (void)state;
    char ids[64];
    /* the "backend" field picks the route when the path names none */
    lb_conn_t *c = post("/retrieve", "{\"queries\":[\"page\"],\"backend\":\"p\"}");
    assert_int_equal(c->req.res.status, 200);
    ids_of(c->body, 0, ids, sizeof(ids));
    assert_string_equal(ids, "9");
    lb_destroy(c);
    /* the path's route wins over the field */
    c = post("/retrieve/t", "{\"queries\":[\"alpha\"],\"backend\":\"p\"}");
    assert_int_equal(c->req.res.status, 200);
    ids_of(c->body, 0, ids, sizeof(ids));
    assert_string_equal(ids, "0,1");
    lb_destroy(c);
}

static void test_backend_error(void **state)
{
    (void)state;
    lb_conn_t *c = post("/retrieve/down", "{\"queries\":[\"alpha\"]}");
    expect_error(c, 503, "unavailable", "the test says so");
    lb_destroy(c);
}

static void test_fusion(void **state)
{
    (void)state;
    char ids[64];
    lb_conn_t *c = post("/retrieve/f", "{\"queries\":[\"alpha page\"]}");
    assert_int_equal(c->req.res.status, 200);
    ids_of(c->body, 0, ids, sizeof(ids));
    assert_non_null(strstr(ids, "9")); /* from leg p */
    assert_non_null(strstr(ids, "0")); /* from leg t */
    assert_null(lb_res_header(c, "x-searchgate-fusion-partial"));
    assert_non_null(lb_res_header(c, "x-searchgate-provenance"));
    lb_destroy(c);
    /* a failed leg: answered by the others, and the header says which */
    c = post("/retrieve", "{\"queries\":[\"alpha\"],\"backend\":\"fd\"}");
    assert_int_equal(c->req.res.status, 200);
    const char *partial = lb_res_header(c, "x-searchgate-fusion-partial");
    assert_non_null(partial);
    assert_non_null(strstr(partial, "down"));
    lb_destroy(c);
}

static void test_access(void **state)
{
    (void)state;
    lb_conn_t *c = post("/access/p", "{\"urls\":[\"https://a.example/x\"]}");
    assert_int_equal(c->req.res.status, 200);
    assert_null(lb_res_header(c, "x-searchgate-no-page-store"));
    assert_non_null(strstr(c->body, "page x"));
    lb_destroy(c);
    /* a route without a page store: a null page per URL, and why */
    sg_counter_t *m = sg_metrics_counter("searchgate_access_no_page_store_total", SG_ACCESS_NO_PAGES_HELP, "backend=\"t\"");
    uint64_t before = atomic_load(&m->v);
    c = post("/access", "{\"urls\":[\"https://a.example/x\",\"https://b.example/y\"]}");
    assert_int_equal(c->req.res.status, 200);
    assert_string_equal(c->body, "{\"result\":[null,null]}");
    assert_string_equal(lb_res_header(c, "x-searchgate-no-page-store"), "t");
    assert_int_equal(atomic_load(&m->v), before + 1);
    lb_destroy(c);
    /* a fusion route's /access goes to its first leg with pages */
    c = post("/access/f", "{\"urls\":[\"https://a.example/x\"]}");
    assert_int_equal(c->req.res.status, 200);
    assert_non_null(strstr(c->body, "page x"));
    lb_destroy(c);
    /* the body of /access is {"urls": [...]} */
    c = post("/access/p", "{\"queries\":[\"x\"]}");
    expect_error(c, 422, "validation_error", "urls");
    lb_destroy(c);
}

/* The client goes away while its query runs: the request is disposed, the query cancelled and
 * counted (499: "other"), nothing leaks and nothing is sent to the gone request. */
static void test_client_gone(void **state)
{
    (void)state;
    uint64_t before = route_count("hang", 499);
    lb_conn_t *c = lb_create(&hg_loop.ctx, hg_loop.ctx.globalconf->hosts);
    lb_request(c, "POST", "/retrieve/hang");
    lb_body(c, H2O_STRLIT("{\"queries\":[\"alpha\"]}"));
    assert_int_equal(lb_run(c, hg_tick, NULL, 200), -1); /* still waiting */
    assert_int_equal(c->sends, 0);
    lb_destroy(c);
    hg_run_loop();
    assert_int_equal(route_count("hang", 499), before + 1);
}

/* sg_retrieve_init(): searchgate_access_no_page_store_total at 0 for each route without pages. */
static void test_init_metrics(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_metrics_render(&b);
    sg_buf_appendc(&b, '\0');
    assert_non_null(strstr(b.base, "searchgate_access_no_page_store_total{backend=\"hang\"} 0"));
    assert_non_null(strstr(b.base, "searchgate_access_no_page_store_total{backend=\"fd\"}"));
    assert_null(strstr(b.base, "searchgate_access_no_page_store_total{backend=\"p\"}"));
    assert_null(strstr(b.base, "searchgate_access_no_page_store_total{backend=\"f\"}")); /* its leg p has pages */
    sg_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_metrics),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_no_body),
        cmocka_unit_test(test_unknown_route),
        cmocka_unit_test(test_search_params_refused),
        cmocka_unit_test(test_timeout_header),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_unauthorized),
        cmocka_unit_test(test_answered),
        cmocka_unit_test(test_route_choice),
        cmocka_unit_test(test_backend_error),
        cmocka_unit_test(test_fusion),
        cmocka_unit_test(test_access),
        cmocka_unit_test(test_client_gone),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
