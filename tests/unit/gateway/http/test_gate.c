/*
 * Unit tests: the door of every connection (gateway/http/gate.c).
 *
 * Group "handler": sg_gate_check_request(), the handler's first step, on requests without a
 * socket (h2o_loopback.h) judged by the rules of one listener at a time -- a loopback listener
 * with allowed_hosts and allowed_origins, a wildcard one, one on an interface's address -- with
 * keys required: which Host, Origin and key pass, the 403/401 answers (JSON, or JSON-RPC's shape
 * on the MCP paths), the refusal counters, and which answers end the connection.
 *
 * Group "socket": the first request of a connection, which the gate reads itself, through a
 * server started on a loopback port (sg_server_start()) and a plain client socket: refused on its
 * head (403, 401, 413 by Content-Length, HEAD without a body) with Connection: close and without
 * its body being read, a body that stops short answered 408 after listen.read_timeout_ms, and a
 * request that passes handed to h2o.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "http_gateway.h"
#include "gate.h"
#include "listen.h"

#define BACKENDS                                                                                                                   \
    "\"backends\":[{\"name\":\"t\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"id\":\"0\",\"contents\":\"a\"}]}}]"
#define KEYS                                                                                                                       \
    "\"clients\":{\"require_key\":true,\"keys\":[{\"id\":\"k\",\"key_env\":\"SG_TEST_GATE_KEY\"},{\"id\":\"k2\",\"key_env\":\"SG_" \
    "TEST_GATE_KEY2\"}]}"

/* Three listen entries: the group's listener is one of them at a time. */
static const char config_rules[] = "{\"threads\":1,\"listen\":["
                                   "{\"host\":\"127.0.0.1\",\"port\":0,\"allowed_hosts\":[\"api.example.org\",\"*.corp.example\"],"
                                   "\"allowed_origins\":[\"https://app.example\"]},"
                                   "{\"host\":\"0.0.0.0\",\"port\":0},"
                                   "{\"host\":\"10.1.2.3\",\"port\":0}]," KEYS "," BACKENDS "}";

static const char config_socket[] = "{\"threads\":1,\"listen\":{\"host\":\"127.0.0.1\",\"port\":0,\"read_timeout_ms\":300},"
                                    "\"limits\":{\"max_body_bytes\":1024}," KEYS "," BACKENDS "}";

static const char *const KEY = "gate-key-1";

/* ---- group "handler" ---- */

static sg_listener_t listener; /* the one listener the gate judges by */

static int on_req(void *data, h2o_req_t *req)
{
    (void)data;
    if (sg_gate_check_request(sg_loop_of(req), req) == 0)
        sg_send_json(req, 200, "{\"passed\":true}", 15);
    return 0;
}

/* The gate's rules are those of listen entry `i`, as a listener of `kind`. */
static void use_listener(size_t i, int kind)
{
    sg_gate_dispose(&hg_server);
    memset(&listener, 0, sizeof(listener));
    listener.conf = &hg_cfg.listen[i];
    listener.kind = kind;
    hg_server.listeners = &listener;
    hg_server.n_listeners = 1;
    sg_gate_init(&hg_server);
}

static int setup_handler(void **state)
{
    (void)state;
    char err[1024];
    setenv("SG_TEST_GATE_KEY", KEY, 1);
    setenv("SG_TEST_GATE_KEY2", "gate-key-2", 1);
    if (hg_build(config_rules, 0, err, sizeof(err)) != 0)
        fail_msg("gateway: %s", err);
    /* the server's configuration is the test's: one handler that runs the check */
    h2o_config_init(&hg_server.h2o);
    h2o_hostconf_t *hc = h2o_config_register_host(&hg_server.h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    lb_register(hc, "/", on_req, NULL);
    use_listener(0, SG_LISTEN_LOOPBACK);
    hg_loop_start(&hg_server.h2o);
    return 0;
}

static int teardown_handler(void **state)
{
    (void)state;
    sg_gate_dispose(&hg_server);
    hg_server.listeners = NULL; /* the test's */
    hg_dispose();
    h2o_config_dispose(&hg_server.h2o);
    return 0;
}

/* A request: `method` `path`, Host `host` (NULL: none), then header pairs (NULL-terminated). */
static lb_conn_t *ask(const char *method, const char *path, const char *host, const char *const *headers)
{
    lb_conn_t *c = lb_create(&hg_loop.ctx, hg_loop.ctx.globalconf->hosts);
    lb_request(c, method, path);
    if (host != NULL)
        lb_authority(c, host);
    for (size_t i = 0; headers != NULL && headers[i] != NULL; i += 2)
        lb_header(c, headers[i], headers[i + 1]);
    if (lb_run(c, hg_tick, NULL, 5000) != 0)
        fail_msg("%s %s: no answer", method, path);
    return c;
}

static uint64_t refused(const char *reason)
{
    char l[48];
    snprintf(l, sizeof(l), "reason=\"%s\"", reason);
    return atomic_load(&sg_metrics_counter("searchgate_http_refused_total", "", l)->v);
}

/* Passes (with the key) when `pass`, else a 403 of `reason` ("host", "origin") whose message
 * quotes `quoted`. */
static void expect_host_origin(const char *host, const char *origin, int pass, const char *reason, const char *quoted)
{
    const char *h[] = {"x-api-key", KEY, origin != NULL ? "origin" : NULL, origin, NULL};
    uint64_t before = reason != NULL ? refused(reason) : 0;
    lb_conn_t *c = ask("POST", "/retrieve", host, h);
    if (pass) {
        if (c->req.res.status != 200)
            fail_msg("Host %s Origin %s: %d %s", host, origin, c->req.res.status, c->body);
        assert_int_equal(c->req.http1_is_persistent, 1);
    } else {
        if (c->req.res.status != 403)
            fail_msg("Host %s Origin %s: %d, not 403", host, origin, c->req.res.status);
        cJSON *j = cJSON_Parse(c->body);
        cJSON *e = cJSON_GetObjectItem(j, "error");
        assert_string_equal(cJSON_GetObjectItem(e, "type")->valuestring, "forbidden");
        const char *msg = cJSON_GetObjectItem(e, "message")->valuestring;
        char want[160];
        snprintf(want, sizeof(want), "%s \"%s\"", strcmp(reason, "host") == 0 ? "Host" : "Origin", quoted);
        if (strstr(msg, want) == NULL)
            fail_msg("\"%s\" does not say %s", msg, want);
        cJSON_Delete(j);
        assert_int_equal(refused(reason), before + 1);
        assert_int_equal(c->req.http1_is_persistent, 0);
    }
    lb_destroy(c);
}

static void test_host_loopback(void **state)
{
    (void)state;
    static const char *const pass[] = {
        "localhost",           "localhost:8000", "LocalHost.",        "127.0.0.1",          "127.0.0.1:8000",
        "127.200.3.4",         "[::1]",          "[::1]:8000",        "[::ffff:127.0.0.1]", "api.example.org",
        "API.example.org:443", "x.corp.example", "a.b.corp.example:1"};
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); ++i)
        expect_host_origin(pass[i], NULL, 1, NULL, NULL);
    expect_host_origin(NULL, NULL, 1, NULL, NULL); /* no Host: h2o's default authority, not judged */
    static const char *const refuse[] = {"evil.example",
                                         "evil.example:8000",
                                         "corp.example",
                                         "xcorp.example",
                                         "evilcorp.example",
                                         "127.0.0.1.evil.example",
                                         "128.0.0.1",
                                         "[::2]",
                                         "api.example.org.evil",
                                         "localhostx",
                                         "10.1.2.3"};
    for (size_t i = 0; i < sizeof(refuse) / sizeof(refuse[0]); ++i)
        expect_host_origin(refuse[i], NULL, 0, "host", refuse[i]);
}

static void test_origin_loopback(void **state)
{
    (void)state;
    expect_host_origin("localhost:8000", "http://localhost:8000", 1, NULL, NULL); /* same origin */
    expect_host_origin("127.0.0.1:8000", "https://127.0.0.1:8000", 1, NULL, NULL);
    expect_host_origin("localhost:8000", "https://app.example", 1, NULL, NULL); /* listed */
    expect_host_origin("localhost:8000", "HTTPS://APP.example", 1, NULL, NULL);
    expect_host_origin("localhost:8000", "http://localhost:9000", 0, "origin", "http://localhost:9000");
    expect_host_origin("localhost:8000", "https://evil.example", 0, "origin", "https://evil.example");
    expect_host_origin("localhost:8000", "null", 0, "origin", "null");
    expect_host_origin(NULL, "http://localhost", 0, "origin", "http://localhost"); /* no Host to be the same as */
    expect_host_origin("localhost:8000", "ftp://localhost:8000", 0, "origin", "ftp://localhost:8000");
    /* the Host check comes first */
    expect_host_origin("evil.example", "http://evil.example", 0, "host", "evil.example");
    /* two Origin headers that differ */
    const char *two[] = {"x-api-key", KEY, "origin", "https://app.example", "origin", "https://evil.example", NULL};
    lb_conn_t *c = ask("POST", "/retrieve", "localhost", two);
    assert_int_equal(c->req.res.status, 403);
    lb_destroy(c);
    const char *same[] = {"x-api-key", KEY, "origin", "https://app.example", "origin", "https://app.example", NULL};
    c = ask("POST", "/retrieve", "localhost", same);
    assert_int_equal(c->req.res.status, 200);
    lb_destroy(c);
    /* a quoted value is printable ASCII, without quotes */
    expect_host_origin("localhost", "https://e\"v\x01l", 0, "origin", "https://e?v?l");
}

/* A wildcard listener without allowed_hosts takes any Host; a same-origin Origin needs a Host the
 * listener answers to, which only loopback names are there. An interface's listener also answers
 * to its own address. */
static void test_other_listeners(void **state)
{
    (void)state;
    use_listener(1, SG_LISTEN_WILDCARD);
    expect_host_origin("evil.example", NULL, 1, NULL, NULL);
    expect_host_origin("10.1.2.3:8000", "http://10.1.2.3:8000", 0, "origin", "http://10.1.2.3:8000");
    expect_host_origin("localhost:8000", "http://localhost:8000", 1, NULL, NULL);
    use_listener(2, SG_LISTEN_OTHER);
    expect_host_origin("evil.example", NULL, 1, NULL, NULL);
    expect_host_origin("10.1.2.3:8000", "http://10.1.2.3:8000", 1, NULL, NULL);
    expect_host_origin("evil.example", "http://evil.example", 0, "origin", "http://evil.example");
    use_listener(0, SG_LISTEN_LOOPBACK);
}

static void expect_401(lb_conn_t *c)
{
    assert_int_equal(c->req.res.status, 401);
    assert_string_equal(lb_res_header(c, "www-authenticate"), "Bearer realm=\"searchgate\"");
    assert_int_equal(c->req.http1_is_persistent, 0);
    cJSON *j = cJSON_Parse(c->body);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "type")->valuestring, "unauthorized");
    cJSON_Delete(j);
}

static void test_key(void **state)
{
    (void)state;
    uint64_t keys = refused("key"), other401 = hg_ops_count(SG_OPS_OTHER, 401), stats401 = hg_ops_count(SG_OPS_STATS, 401);
    lb_conn_t *c = ask("POST", "/retrieve", "localhost", NULL);
    expect_401(c);
    lb_destroy(c);
    c = ask("GET", "/stats?window=60", "localhost", NULL); /* counted on its operations route */
    expect_401(c);
    lb_destroy(c);
    const char *wrong[] = {"authorization", "Bearer nope", NULL};
    c = ask("POST", "/retrieve", "localhost", wrong);
    expect_401(c);
    lb_destroy(c);
    /* two different keys, one of them valid: refused */
    const char *two[] = {"authorization", "Bearer gate-key-2", "x-api-key", KEY, NULL};
    c = ask("POST", "/retrieve", "localhost", two);
    expect_401(c);
    lb_destroy(c);
    assert_int_equal(refused("key"), keys + 4);
    assert_int_equal(hg_ops_count(SG_OPS_OTHER, 401), other401 + 3);
    assert_int_equal(hg_ops_count(SG_OPS_STATS, 401), stats401 + 1);
    /* a valid key in either header goes on, and the connection stays */
    const char *bearer[] = {"authorization", "Bearer gate-key-2", NULL};
    c = ask("POST", "/retrieve", "localhost", bearer);
    assert_int_equal(c->req.res.status, 200);
    assert_int_equal(c->req.http1_is_persistent, 1);
    lb_destroy(c);
    /* the open routes pass without a key, but end their connection; a POST to them does not pass */
    static const char *const open[][2] = {{"GET", "/health"}, {"HEAD", "/health"}, {"GET", "/dashboard"}, {"GET", "/health?x=1"}};
    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); ++i) {
        c = ask(open[i][0], open[i][1], "localhost", NULL);
        assert_int_equal(c->req.res.status, 200);
        assert_int_equal(c->req.http1_is_persistent, 0);
        lb_destroy(c);
    }
    c = ask("POST", "/health", "localhost", NULL);
    expect_401(c);
    lb_destroy(c);
    c = ask("GET", "/healthz", "localhost", NULL);
    expect_401(c);
    lb_destroy(c);
}

/* On the MCP paths a refusal has JSON-RPC's shape (id null), whatever the configuration. */
static void test_mcp_shape(void **state)
{
    (void)state;
    static const char *const paths[] = {"/mcp", "/sse?x=1", "/messages"};
    for (size_t i = 0; i < 3; ++i) {
        lb_conn_t *c = ask("POST", paths[i], "localhost", NULL);
        assert_int_equal(c->req.res.status, 401);
        cJSON *j = cJSON_Parse(c->body);
        assert_non_null(j);
        assert_string_equal(cJSON_GetObjectItem(j, "jsonrpc")->valuestring, "2.0");
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "id")));
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")->valueint, -32600);
        cJSON_Delete(j);
        lb_destroy(c);
    }
    lb_conn_t *c = ask("POST", "/mcpx", "localhost", NULL);
    cJSON *j = cJSON_Parse(c->body);
    assert_non_null(cJSON_GetObjectItem(j, "error"));
    assert_null(cJSON_GetObjectItem(j, "jsonrpc"));
    cJSON_Delete(j);
    lb_destroy(c);
}

/* ---- group "socket" ---- */

static int setup_socket(void **state)
{
    (void)state;
    char err[1024];
    setenv("SG_TEST_GATE_KEY", KEY, 1);
    setenv("SG_TEST_GATE_KEY2", "gate-key-2", 1);
    if (hg_build(config_socket, 1, err, sizeof(err)) != 0)
        fail_msg("gateway: %s", err);
    if (sg_server_start(&hg_server, NULL, err, sizeof(err)) != 0)
        fail_msg("server: %s", err);
    return 0;
}

static int teardown_socket(void **state)
{
    (void)state;
    hg_dispose();
    return 0;
}

/* Connects to the server's listener; reads time out after 5 s. */
static int client(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(hg_server.listeners[0].port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_all(int fd, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads one answer: its head and Content-Length bytes of body, or until the server closes. */
static void read_answer(int fd, char *buf, size_t size)
{
    size_t have = 0;
    buf[0] = '\0';
    for (;;) {
        const char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\ncontent-length: ");
        if (end != NULL && cl != NULL && cl < end && strlen(end + 4) >= strtoul(cl + 18, NULL, 10))
            break;
        ssize_t r = recv(fd, buf + have, size - 1 - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
        buf[have] = '\0';
        if (have == size - 1)
            break;
    }
}

static void expect_refusal(const char *answer, const char *status_line, const char *type)
{
    if (strncmp(answer, status_line, strlen(status_line)) != 0)
        fail_msg("answer \"%.200s\" is not %s", answer, status_line);
    assert_non_null(strstr(answer, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(answer, "\r\nContent-Type: application/json\r\n"));
    if (type != NULL) {
        char want[64];
        snprintf(want, sizeof(want), "\"type\":\"%s\"", type);
        assert_non_null(strstr(answer, want));
    }
}

static void test_first_request_refused(void **state)
{
    (void)state;
    char buf[4096];
    uint64_t host = refused("host");
    int fd = client();
    send_all(fd, "GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n");
    read_answer(fd, buf, sizeof(buf));
    expect_refusal(buf, "HTTP/1.1 403 Forbidden\r\n", "forbidden");
    close(fd);
    assert_int_equal(refused("host"), host + 1);
    /* no key: 401, before the body (which the client sends anyway, and the gate drains) */
    fd = client();
    send_all(fd, "POST /retrieve HTTP/1.1\r\nHost: localhost\r\nContent-Length: 20\r\n\r\n{\"queries\":[\"abc\"]}");
    read_answer(fd, buf, sizeof(buf));
    expect_refusal(buf, "HTTP/1.1 401 Unauthorized\r\n", "unauthorized");
    assert_non_null(strstr(buf, "\r\nWWW-Authenticate: Bearer realm=\"searchgate\"\r\n"));
    close(fd);
    /* HEAD: the refusal's head alone */
    fd = client();
    send_all(fd, "HEAD /stats HTTP/1.1\r\nHost: localhost\r\n\r\n");
    read_answer(fd, buf, sizeof(buf));
    expect_refusal(buf, "HTTP/1.1 401 Unauthorized\r\n", NULL);
    assert_string_equal(strstr(buf, "\r\n\r\n"), "\r\n\r\n");
    close(fd);
}

static void test_first_request_too_large(void **state)
{
    (void)state;
    char buf[4096];
    uint64_t large = refused("too_large");
    int fd = client();
    /* over limits.max_body_bytes (1024) by Content-Length: answered without waiting for the body */
    send_all(fd, "POST /retrieve HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: gate-key-1\r\nContent-Length: 5000\r\n\r\n");
    read_answer(fd, buf, sizeof(buf));
    expect_refusal(buf, "HTTP/1.1 413 Payload Too Large\r\n", "too_large");
    assert_non_null(strstr(buf, "request body of 5000 bytes (Content-Length) is over limits.max_body_bytes (1024 bytes)"));
    close(fd);
    assert_int_equal(refused("too_large"), large + 1);
}

static void test_first_request_short_body(void **state)
{
    (void)state;
    char buf[4096];
    uint64_t timeouts = refused("read_timeout");
    int fd = client();
    uint64_t t0 = sg_now_ms();
    send_all(fd, "POST /retrieve HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: gate-key-1\r\nContent-Length: 100\r\n\r\n{\"queries\"");
    read_answer(fd, buf, sizeof(buf));
    uint64_t waited = sg_now_ms() - t0;
    expect_refusal(buf, "HTTP/1.1 408 Request Timeout\r\n", "request_timeout");
    assert_non_null(strstr(buf, "within listen.read_timeout_ms (300 ms)"));
    assert_true(waited >= 250 && waited < 4000);
    close(fd);
    assert_int_equal(refused("read_timeout"), timeouts + 1);
}

static void test_first_request_passes(void **state)
{
    (void)state;
    char buf[8192];
    int fd = client();
    /* the body arrives in two pieces: the gate reads it whole, then h2o has the request */
    send_all(fd, "POST /retrieve/t HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: gate-key-1\r\nContent-Length: 17\r\n\r\n{\"queries\"");
    usleep(50 * 1000);
    send_all(fd, ":[\"a\"]}");
    read_answer(fd, buf, sizeof(buf));
    if (strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) != 0)
        fail_msg("answer \"%.300s\"", buf);
    assert_non_null(strstr(buf, "\"id\":\"0\""));
    assert_null(strstr(buf, "Connection: close"));
    /* the same connection, a second request: read by h2o, judged by the handler's check */
    send_all(fd, "GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n");
    read_answer(fd, buf, sizeof(buf));
    if (strncmp(buf, "HTTP/1.1 401 Unauthorized\r\n", 27) != 0)
        fail_msg("answer \"%.300s\"", buf);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest handler[] = {cmocka_unit_test(test_host_loopback), cmocka_unit_test(test_origin_loopback),
                                         cmocka_unit_test(test_other_listeners), cmocka_unit_test(test_key),
                                         cmocka_unit_test(test_mcp_shape)};
    const struct CMUnitTest socket_tests[] = {
        cmocka_unit_test(test_first_request_refused), cmocka_unit_test(test_first_request_too_large),
        cmocka_unit_test(test_first_request_short_body), cmocka_unit_test(test_first_request_passes)};
    int failed = cmocka_run_group_tests_name("handler", handler, setup_handler, teardown_handler);
    failed += cmocka_run_group_tests_name("socket", socket_tests, setup_socket, teardown_socket);
    return failed;
}
