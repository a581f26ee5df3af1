/* Unit tests: config validation (gateway/config/config.c); every error names the key and the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config.h"
#include "trace_conf.h"

#define BACKEND "{\"name\":\"ex\",\"plugin\":\"example\"}"

static int parse(const char *json, sg_config_t *cfg, char *err)
{
    return sg_config_parse(cfg, json, strlen(json), "/etc/sg", err, 512);
}

static void test_minimal_defaults(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(parse("{\"backends\":[" BACKEND "]}", &cfg, err), 0);
    assert_int_equal(cfg.n_listen, 1);
    assert_string_equal(cfg.listen[0].host, "127.0.0.1");
    assert_int_equal(cfg.listen[0].port, 8000);
    assert_null(cfg.listen[0].unix_path);
    assert_null(cfg.listen[0].address_file);
    assert_int_equal(cfg.shutdown_drain_ms, 0);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.n_backends, 1);
    assert_int_equal(cfg.default_backend, 0);
    assert_int_equal(cfg.backends[0].topk, 3);
    assert_string_equal(cfg.backends[0].config_json, "{}");
    assert_null(cfg.backends[0].plugin_path);
    assert_int_equal(cfg.limits.max_topk, 1000);
    assert_true(cfg.cache.l1_bytes > 0);
    assert_false(cfg.cache.redis.enabled);
    assert_null(cfg.cache.redis.node.host);
    assert_int_equal(cfg.clients.defaults.weight, 1);
    assert_true(cfg.mcp.enabled);
    assert_int_equal(cfg.mcp.max_sessions, 10000);
    assert_int_equal(cfg.mcp.session_idle_s, 300);
    assert_int_equal(cfg.mcp.sse_keepalive_s, 15);
    assert_false(cfg.mcp.require_session);
    assert_int_equal(cfg.mcp.text_format, SG_MCP_TEXT_SEARCH_R1);
    sg_config_free(&cfg);
}

static void test_mcp(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(parse("{\"backends\":[" BACKEND "],\"mcp\":{\"enabled\":false,\"max_sessions\":5,\"session_idle_s\":9,"
                           "\"sse_keepalive_s\":2,\"require_session\":true,\"text_format\":\"results-json\"}}",
                           &cfg, err),
                     0);
    assert_false(cfg.mcp.enabled);
    assert_int_equal(cfg.mcp.max_sessions, 5);
    assert_int_equal(cfg.mcp.session_idle_s, 9);
    assert_int_equal(cfg.mcp.sse_keepalive_s, 2);
    assert_true(cfg.mcp.require_session);
    assert_int_equal(cfg.mcp.text_format, SG_MCP_TEXT_RESULTS_JSON);
    sg_config_free(&cfg);
}

/* listen: the object form (TCP, a Unix socket, or both) and the array form */
static void test_listen_sockets(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(
        parse("{\"backends\":[" BACKEND "],\"listen\":{\"unix\":\"run/sg.sock\"},\"shutdown_drain_ms\":1500}", &cfg, err), 0);
    assert_int_equal(cfg.n_listen, 1); /* unix alone: no TCP listener */
    assert_null(cfg.listen[0].host);
    assert_string_equal(cfg.listen[0].unix_path, "/etc/sg/run/sg.sock");
    assert_int_equal(cfg.listen[0].unix_mode, 0660);
    assert_int_equal(cfg.shutdown_drain_ms, 1500);
    /* the command line's --port adds a TCP listener to a Unix-only config */
    sg_listen_conf_t *l = sg_config_tcp_listener(&cfg);
    assert_int_equal(cfg.n_listen, 2);
    assert_string_equal(l->host, "127.0.0.1");
    assert_int_equal(l->port, 8000);
    sg_config_free(&cfg);

    assert_int_equal(parse("{\"backends\":[" BACKEND "],\"listen\":{\"port\":0,\"unix\":\"/run/s\",\"unix_mode\":\"600\","
                           "\"address_file\":\"addr\"}}",
                           &cfg, err),
                     0);
    assert_int_equal(cfg.n_listen, 2); /* beside TCP */
    assert_string_equal(cfg.listen[0].host, "127.0.0.1");
    assert_int_equal(cfg.listen[0].port, 0);
    assert_string_equal(cfg.listen[0].address_file, "/etc/sg/addr");
    assert_string_equal(cfg.listen[1].unix_path, "/run/s");
    assert_int_equal(cfg.listen[1].unix_mode, 0600);
    assert_ptr_equal(sg_config_tcp_listener(&cfg), &cfg.listen[0]);
    sg_config_free(&cfg);

    assert_int_equal(parse("{\"backends\":[" BACKEND "],\"listen\":[{\"host\":\"127.0.0.1\",\"port\":8000},"
                           "{\"host\":\"10.0.0.5\",\"port\":9100},{\"unix\":\"/run/x\"}]}",
                           &cfg, err),
                     0);
    assert_int_equal(cfg.n_listen, 3);
    assert_string_equal(cfg.listen[1].host, "10.0.0.5");
    assert_int_equal(cfg.listen[1].port, 9100);
    assert_string_equal(cfg.listen[1].where, "listen[1]");
    assert_string_equal(cfg.listen[2].unix_path, "/run/x");
    sg_config_free(&cfg);
}

/* listen's policy: who may talk to it (allowed_hosts, allowed_origins), h2c, the read timeout */
static void test_listen_policy(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(parse("{\"backends\":[" BACKEND "]}", &cfg, err), 0);
    assert_int_equal(cfg.listen[0].n_allowed_hosts, 0);
    assert_int_equal(cfg.listen[0].n_allowed_origins, 0);
    assert_true(cfg.listen[0].h2c);
    assert_int_equal(cfg.listen_common.read_timeout_ms, 10000);
    sg_config_free(&cfg);
    /* h2c follows require_key unless set; lists are kept in lower case */
    setenv("SG_UNIT_LISTEN_KEY", "k", 1);
    const char *keyed = "\"clients\":{\"require_key\":true,\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_UNIT_LISTEN_KEY\"}]}";
    char json[1024];
    snprintf(json, sizeof(json), "{\"backends\":[" BACKEND "],%s}", keyed);
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_false(cfg.listen[0].h2c);
    sg_config_free(&cfg);
    snprintf(json, sizeof(json),
             "{\"backends\":[" BACKEND
             "],%s,\"listen\":{\"h2c\":true,\"read_timeout_ms\":2500,\"allowed_hosts\":[\"GW.Example.org\","
             "\"*.lab.example\",\"[FD00::5]\",\"*\"],\"allowed_origins\":[\"HTTP://LocalHost:6274\",\"null\",\"*\"]}}",
             keyed);
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_true(cfg.listen[0].h2c);
    assert_int_equal(cfg.listen_common.read_timeout_ms, 2500);
    assert_int_equal(cfg.listen[0].n_allowed_hosts, 4);
    assert_string_equal(cfg.listen[0].allowed_hosts[0], "gw.example.org");
    assert_string_equal(cfg.listen[0].allowed_hosts[2], "[fd00::5]");
    assert_int_equal(cfg.listen[0].n_allowed_origins, 3);
    assert_string_equal(cfg.listen[0].allowed_origins[0], "http://localhost:6274");
    sg_config_free(&cfg);
    static const char *const bad[][2] = {
        {"\"allowed_hosts\":[\"gw.example.org:80\"]", "listen.allowed_hosts: expected host names"},
        {"\"allowed_hosts\":[\"\"]", "listen.allowed_hosts: expected host names"},
        {"\"allowed_hosts\":[\"*example.org\"]", "listen.allowed_hosts: expected host names"},
        {"\"allowed_hosts\":[\"[::1]:80\"]", "listen.allowed_hosts: expected host names"},
        {"\"allowed_hosts\":[\"a b\"]", "listen.allowed_hosts: expected host names"},
        {"\"allowed_hosts\":[7]", "listen.allowed_hosts: expected an array of strings"},
        {"\"allowed_origins\":[\"localhost:6274\"]", "listen.allowed_origins: expected origins"},
        {"\"allowed_origins\":[\"http://x/\"]", "listen.allowed_origins: expected origins"},
        {"\"allowed_origins\":[\"ftp://x\"]", "listen.allowed_origins: expected origins"},
        {"\"read_timeout_ms\":99", "listen.read_timeout_ms: expected an integer in [100, 600000], got 99"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        snprintf(json, sizeof(json), "{\"backends\":[" BACKEND "],\"listen\":{%s}}", bad[i][0]);
        assert_int_equal(parse(json, &cfg, err), -1);
        if (strstr(err, bad[i][1]) == NULL)
            fail_msg("%s: got \"%s\"", bad[i][0], err);
        sg_config_free(&cfg);
    }
}

/* listen entries each have their own policy; read_timeout_ms and h2c_max_body_bytes are shared:
 * the entries that set them must agree */
static void test_listen_entries(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(parse("{\"backends\":[" BACKEND "],\"listen\":[{\"port\":8000,\"allowed_hosts\":[\"gw.lab\"],\"h2c\":false},"
                           "{\"host\":\"10.0.0.5\",\"port\":9100,\"read_timeout_ms\":2500,\"allowed_origins\":[\"http://x\"]},"
                           "{\"unix\":\"/run/x\",\"port\":8001,\"allowed_hosts\":[\"a\",\"b\"],\"read_timeout_ms\":2500}]}",
                           &cfg, err),
                     0);
    assert_int_equal(cfg.n_listen, 4); /* the third entry is a TCP and a Unix listener */
    assert_int_equal(cfg.listen[0].n_allowed_hosts, 1);
    assert_string_equal(cfg.listen[0].allowed_hosts[0], "gw.lab");
    assert_int_equal(cfg.listen[0].n_allowed_origins, 0);
    assert_false(cfg.listen[0].h2c);
    assert_int_equal(cfg.listen[1].n_allowed_hosts, 0);
    assert_int_equal(cfg.listen[1].n_allowed_origins, 1);
    assert_true(cfg.listen[1].h2c); /* the default: no keys required */
    for (int i = 2; i < 4; ++i) {   /* both listeners of one entry share its policy (copies) */
        assert_string_equal(cfg.listen[i].where, "listen[2]");
        assert_int_equal(cfg.listen[i].n_allowed_hosts, 2);
        assert_string_equal(cfg.listen[i].allowed_hosts[1], "b");
    }
    assert_ptr_not_equal(cfg.listen[2].allowed_hosts, cfg.listen[3].allowed_hosts);
    assert_int_equal(cfg.listen[2].port, 8001);
    assert_string_equal(cfg.listen[3].unix_path, "/run/x");
    assert_true(cfg.listen_common.any_h2c);
    assert_int_equal(cfg.listen_common.read_timeout_ms, 2500);               /* set by two entries, alike */
    assert_int_equal(cfg.listen_common.h2c_max_body_bytes, (size_t)1 << 20); /* set by none */
    sg_config_free(&cfg);

    assert_int_equal(
        parse("{\"backends\":[" BACKEND "],\"listen\":[{\"port\":1,\"h2c\":false},{\"port\":2,\"h2c\":false}]}", &cfg, err), 0);
    assert_false(cfg.listen_common.any_h2c);
    sg_config_free(&cfg);

    static const char *const bad[][2] = {
        {"[{\"port\":1,\"read_timeout_ms\":2000},{\"port\":2,\"read_timeout_ms\":3000}]",
         "listen[1].read_timeout_ms: differs from listen[0].read_timeout_ms (2000): it applies to every listener"},
        {"[{\"port\":1},{\"port\":2,\"h2c_max_body_bytes\":4096},{\"unix\":\"/run/y\",\"h2c_max_body_bytes\":8192}]",
         "listen[2].h2c_max_body_bytes: differs from listen[1].h2c_max_body_bytes (4096)"},
        {"[{\"port\":1},{\"port\":2,\"allowed_hosts\":[\"a:1\"]}]", "listen[1].allowed_hosts: expected host names"},
        {"[{\"port\":1},{\"unix\":\"/run/z\",\"h2c\":1}]", "listen[1].h2c: expected"},
        {"[{\"port\":1},{\"port\":2,\"read_timeout_ms\":50}]", "listen[1].read_timeout_ms: expected an integer in [100, 600000]"},
        {"[{\"port\":1},{\"prot\":2}]", "listen[1].prot: unknown key (allowed: host, port, unix, unix_mode, address_file, "
                                        "allowed_hosts, allowed_origins, h2c, h2c_max_body_bytes, read_timeout_ms)"},
        {"[{\"port\":1},7]", "listen[1]: expected a JSON object"},
        {"[]", "listen: expected an object, or an array of 1 to 16 listener objects"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        char json[1024];
        snprintf(json, sizeof(json), "{\"backends\":[" BACKEND "],\"listen\":%s}", bad[i][0]);
        assert_int_equal(parse(json, &cfg, err), -1);
        if (strstr(err, bad[i][1]) == NULL)
            fail_msg("%s: got \"%s\"", bad[i][0], err);
        sg_config_free(&cfg);
    }
}

static void test_full(void **state)
{
    (void)state;
    setenv("SG_TEST_KEY_A", "secret-a", 1);
    sg_config_t cfg;
    char err[512];
    const char *json = "{\"listen\":{\"host\":\"0.0.0.0\",\"port\":9000},\"threads\":4,\"limits\":{\"max_queries\":100},"
                       "\"cache\":{\"l1_bytes\":1048576,\"redis\":{\"port\":6390},\"ttl_s\":60},"
                       "\"clients\":{\"require_key\":true,\"default\":{\"rate\":10,\"burst\":20},"
                       "\"keys\":[{\"id\":\"job-a\",\"key_env\":\"SG_TEST_KEY_A\",\"rate\":100,\"weight\":2,\"mode\":\"reject\"}]},"
                       "\"default_backend\":\"b\",\"backends\":[" BACKEND
                       ",{\"name\":\"b\",\"plugin\":\"./x/sg_b.so\",\"config\":{\"k\":[1]},\"topk\":5,\"fallback\":\"ex\","
                       "\"cache\":false}]}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_int_equal(cfg.n_listen, 1);
    assert_string_equal(cfg.listen[0].host, "0.0.0.0");
    assert_int_equal(cfg.listen[0].port, 9000);
    assert_int_equal(cfg.default_backend, 1);
    assert_string_equal(cfg.backends[1].plugin_path, "/etc/sg/./x/sg_b.so");
    assert_string_equal(cfg.backends[1].config_json, "{\"k\":[1]}");
    assert_int_equal(cfg.backends[1].fallback, 0);
    assert_int_equal(cfg.backends[1].cache, 0);
    assert_int_equal(cfg.backends[0].cache_ttl_s, 60);
    assert_true(cfg.cache.redis.enabled);
    assert_string_equal(cfg.cache.redis.node.host, "127.0.0.1");
    assert_int_equal(cfg.cache.redis.node.port, 6390);
    assert_int_equal(cfg.cache.redis.timeout_ms, 50);
    assert_int_equal(cfg.cache.redis.db, 0);
    assert_null(cfg.cache.redis.password);
    assert_int_equal(cfg.cache.redis.n_sentinels, 0);
    assert_string_equal(cfg.cache.redis_prefix, "sg:");
    assert_int_equal(cfg.clients.n_keyed, 1);
    assert_string_equal(cfg.clients.keyed[0].key, "secret-a");
    assert_int_equal(cfg.clients.keyed[0].weight, 2);
    assert_int_equal(cfg.clients.keyed[0].mode, SG_RL_REJECT);
    assert_true(cfg.clients.keyed[0].burst == 100); /* burst defaults to one second of the client's own rate */
    assert_true(cfg.clients.defaults.burst == 20);
    assert_int_equal(cfg.clients.defaults.reject_status, 429); /* the default */
    assert_int_equal(cfg.clients.keyed[0].reject_status, 429);
    assert_int_equal(cfg.backends[0].retries, -1); /* absent: the plugin's own */
    sg_config_free(&cfg);
    /* reject_status 503 in clients.default is the default of keyed clients, which may set their own */
    setenv("SG_TEST_KEY_B", "secret-b", 1);
    json = "{\"clients\":{\"default\":{\"reject_status\":503},\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\"},"
           "{\"id\":\"b\",\"key_env\":\"SG_TEST_KEY_B\",\"reject_status\":429}]},"
           "\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"retries\":0}]}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_int_equal(cfg.clients.defaults.reject_status, 503);
    assert_int_equal(cfg.clients.keyed[0].reject_status, 503);
    assert_int_equal(cfg.clients.keyed[1].reject_status, 429);
    assert_int_equal(cfg.backends[0].retries, 0);
    sg_config_free(&cfg);
}

/* A backend's defaults (topk 3, timeout_ms 30000) never exceed the limits that bound them: a
 * config with limits.max_topk 2 and max_deadline_ms 5000 gets topk 2 and timeout 5000, not a
 * route that answers 3 hits and waits 30 s. Found by the config fuzz target (tests/fuzz). */
static void test_defaults_within_limits(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_equal(parse("{\"limits\":{\"max_topk\":2,\"max_deadline_ms\":5000},\"backends\":[" BACKEND "]}", &cfg, err), 0);
    assert_int_equal(cfg.backends[0].topk, 2);
    assert_int_equal(cfg.backends[0].timeout_ms, 5000);
    sg_config_free(&cfg);
    /* larger limits keep the usual defaults */
    assert_int_equal(parse("{\"limits\":{\"max_topk\":50,\"max_deadline_ms\":60000},\"backends\":[" BACKEND "]}", &cfg, err), 0);
    assert_int_equal(cfg.backends[0].topk, 3);
    assert_int_equal(cfg.backends[0].timeout_ms, 30000);
    sg_config_free(&cfg);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {"{", "not valid JSON"},
        {"[]", "expected a JSON object"},
        {"{\"backends\":[" BACKEND "],\"bogus\":1}", "bogus: unknown key"},
        {"{}", "backends: expected a non-empty array"},
        {"{\"backends\":[]}", "backends: expected a non-empty array"},
        {"{\"backends\":[{\"name\":\"ex\"}]}", "backends[0].plugin: required key is missing"},
        {"{\"backends\":[{\"name\":\"a b\",\"plugin\":\"x\"}]}", "backends[0].name: may only contain"},
        {"{\"backends\":[" BACKEND "," BACKEND "]}", "backends[1].name: duplicate backend name, got \"ex\""},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"topk\":0}]}",
         "backends[0].topk: expected an integer in [1, 1000], got 0"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"timeout_ms\":\"5\"}]}", "backends[0].timeout_ms: expected an integer"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"config\":[]}]}", "backends[0].config: expected a JSON object"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"fallback\":\"ex\"}]}",
         "backends[0].fallback: expected the name of another"},
        {"{\"backends\":[" BACKEND "],\"default_backend\":\"nope\"}",
         "default_backend: expected the name of a configured backend, got \"nope\""},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"port\":70000}}", "listen.port: expected an integer in [0, 65535], got 70000"},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"addr\":\"x\"}}", "listen.addr: unknown key"},
        {"{\"backends\":[" BACKEND "],\"listen\":[]}", "listen: expected an object, or an array of 1 to 16 listener objects"},
        {"{\"backends\":[" BACKEND "],\"listen\":[{\"port\":1},7]}", "listen[1]: expected a JSON object, got 7"},
        {"{\"backends\":[" BACKEND "],\"listen\":[{\"port\":1},{\"port\":-1}]}",
         "listen[1].port: expected an integer in [0, 65535]"},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"unix\":\"/s\",\"unix_mode\":\"0800\"}}",
         "listen.unix_mode: expected permission bits as an octal string, like \"0660\", got \"0800\""},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"unix\":\"/s\",\"unix_mode\":660}}",
         "listen.unix_mode: expected permission bits"},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"port\":1,\"unix_mode\":\"0600\"}}",
         "listen.unix_mode: only applies with \"unix\""},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"unix\":\"/s\",\"address_file\":\"/a\"}}",
         "listen.address_file: is written for a TCP listener"},
        {"{\"backends\":[" BACKEND "],\"listen\":[{\"unix\":\"/s\"},{\"unix\":\"/s\"}]}",
         "listen[1].unix: is already the socket of listen[0]"},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"unix\":\"\"}}", "listen.unix: expected"},
        {"{\"backends\":[" BACKEND "],\"listen\":{\"host\":\"\"}}", "listen.host: expected a non-empty string"},
        {"{\"backends\":[" BACKEND "],\"shutdown_drain_ms\":-1}", "shutdown_drain_ms: expected an integer in [0, 600000]"},
        {"{\"backends\":[" BACKEND "],\"limits\":{\"max_queries\":0}}",
         "limits.max_queries: expected an integer in [1, 1000000], got 0"},
        {"{\"backends\":[" BACKEND "],\"log_level\":\"loud\"}", "log_level: expected one of"},
        {"{\"backends\":[" BACKEND "],\"cache\":{\"redis\":{\"port\":0}}}",
         "cache.redis.port: expected an integer in [1, 65535], got 0"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_UNSET_VAR\"}]}}",
         "clients.keys[0].key_env: environment variable SG_TEST_UNSET_VAR (named here) is not set or empty"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"require_key\":true}}", "clients.require_key: needs at least one entry"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"mode\":\"drop\"}}}", "clients.default.mode: expected one of"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"rate\":-1}}}", "clients.default.rate: expected a number"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"key_env\":\"X\"}}}", "clients.default.key_env: unknown key"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"rate\":5,\"global\":true}}}",
         "clients.default.global: needs cache.redis (the shared rate limit is kept in Redis), got true"},
        {"{\"backends\":[" BACKEND
         "],\"cache\":{\"redis\":null},\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\","
         "\"global\":true}]}}",
         "clients.keys[0].global: needs cache.redis"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"admin_key_env\":\"SG_TEST_UNSET_VAR\"}}",
         "clients.admin_key_env: environment variable SG_TEST_UNSET_VAR (named here) is not set or empty"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"admin_key_env\":\"SG_TEST_KEY_A\",\"keys\":[{\"id\":\"a\","
         "\"key_env\":\"SG_TEST_KEY_A\"}]}}",
         "clients.admin_key_env: the admin key must differ from every client key (it is the key of clients.keys[0])"},
        {"{\"backends\":[" BACKEND "],\"mcp\":{\"sessions\":1}}", "mcp.sessions: unknown key"},
        {"{\"backends\":[" BACKEND "],\"mcp\":{\"max_sessions\":0}}",
         "mcp.max_sessions: expected an integer in [1, 10000000], got 0"},
        {"{\"backends\":[" BACKEND "],\"mcp\":{\"enabled\":\"yes\"}}", "mcp.enabled: expected true or false"},
        {"{\"backends\":[" BACKEND "],\"mcp\":{\"text_format\":\"html\"}}", "mcp.text_format: expected one of"},
        {"{\"backends\":[" BACKEND "],\"mcp\":[]}", "mcp: expected a JSON object"},
        /* retries: 0 to 10 when given; -1 (the internal "unset") is not a value a config may write */
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"retries\":-1}]}",
         "backends[0].retries: expected an integer in [0, 10], got -1"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"retries\":11}]}",
         "backends[0].retries: expected an integer in [0, 10]"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"reject_status\":500}}}",
         "clients.default.reject_status: expected 429 or 503, got 500"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"reject_status\":\"503\"}}}",
         "clients.default.reject_status: expected 429 or 503"},
    };
    unsetenv("SG_TEST_UNSET_VAR");
    setenv("SG_TEST_KEY_A", "secret-a", 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        sg_config_t cfg;
        char err[512] = "";
        int r = parse(cases[i].json, &cfg, err);
        sg_config_free(&cfg);
        if (r == 0 || strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want an error containing \"%s\"", i, cases[i].json, r, err, cases[i].needle);
    }
}

/* The file is one strict JSON document: cJSON alone accepted trailing garbage, a second document
 * after the first (only the first was read) and a key given twice in an object (the first won,
 * the opposite of the request rule); each is refused, naming where. Two clients holding the same
 * key are refused too: the key identified only one of them, whose limits then applied to both. */
static void test_strict_document(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {"{\"backends\":[" BACKEND "]} x", "not valid JSON at line 1, column 49 (byte 48): data after the end of the document"},
        {"{\"backends\":[" BACKEND "]}\n{\"backends\":[]}", "line 2, column 1 (byte 48): data after the end of the document"},
        {"{\"backends\":[" BACKEND "]}}", "data after the end of the document"},
        {"{\"threads\":1,\"backends\":[" BACKEND "],\"threads\":2}", "threads: duplicate key"},
        {"{\"backends\":[" BACKEND "],\"limits\":{\"max_topk\":5,\"max_topk\":500}}", "limits.max_topk: duplicate key"},
        {"{\"backends\":[" BACKEND ",{\"name\":\"b\",\"plugin\":\"x\",\"config\":{\"docs\":[{\"id\":1,\"id\":2}]}}]}",
         "backends[1].config.docs[0].id: duplicate key"},
        {"{\"backends\":[{\"name\":\"a\",\"name\":\"b\",\"plugin\":\"x\"}]}", "backends[0].name: duplicate key"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\"},{\"id\":\"b\","
         "\"key_env\":\"SG_TEST_KEY_A2\"}]}}",
         "clients.keys[1].key_env: holds the same key as clients.keys[0] (\"a\"): every client needs a key of its own, got "
         "\"SG_TEST_KEY_A2\""},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\"},{\"id\":\"b\","
         "\"key_env\":\"SG_TEST_KEY_A\"}]}}",
         "clients.keys[1].key_env: holds the same key as clients.keys[0]"},
        {"{\"backends\":[" BACKEND "],\"x\":\"\xff\"}", "invalid UTF-8"},
    };
    setenv("SG_TEST_KEY_A", "secret-a", 1);
    setenv("SG_TEST_KEY_A2", "secret-a", 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        sg_config_t cfg;
        char err[512] = "";
        int r = parse(cases[i].json, &cfg, err);
        sg_config_free(&cfg);
        if (r == 0 || strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want an error containing \"%s\"", i, cases[i].json, r, err, cases[i].needle);
        if (strstr(err, "secret-a") != NULL)
            fail_msg("case %zu: the error shows a key: %s", i, err);
    }
    /* whitespace around the document, a byte order mark and the same key in different objects are fine */
    sg_config_t cfg;
    char err[512];
    const char *ok = "\xEF\xBB\xBF \n{\"backends\":[{\"name\":\"a\",\"plugin\":\"x\",\"config\":{\"name\":1}},"
                     "{\"name\":\"b\",\"plugin\":\"x\"}]}\n\n";
    if (parse(ok, &cfg, err) != 0)
        fail_msg("refused: %s", err);
    assert_int_equal(cfg.n_backends, 2);
    sg_config_free(&cfg);
}

/* Spend budgets: keyed clients inherit clients.default's budget as their own, null removes it, a
 * route budget makes the route metered; and the errors name the key. */
static void test_budgets(void **state)
{
    (void)state;
    setenv("SG_TEST_KEY_A", "secret-a", 1);
    setenv("SG_TEST_KEY_B", "secret-b", 1);
    setenv("SG_TEST_KEY_C", "secret-c", 1);
    sg_config_t cfg;
    char err[512];
    const char *json = "{\"clients\":{\"default\":{\"budget\":{\"queries\":100,\"period\":\"week\",\"fail\":\"open\"}},"
                       "\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\"},{\"id\":\"b\",\"key_env\":\"SG_TEST_KEY_B\","
                       "\"budget\":null},{\"id\":\"c\",\"key_env\":\"SG_TEST_KEY_C\",\"budget\":{\"queries\":0}}]},"
                       "\"backends\":[" BACKEND ",{\"name\":\"g\",\"plugin\":\"x\",\"budget\":{\"queries\":5000,"
                       "\"period\":\"month\"}},{\"name\":\"h\",\"plugin\":\"x\",\"metered\":true}]}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_true(cfg.clients.defaults.budget.enabled);
    assert_int_equal(cfg.clients.defaults.budget.queries, 100);
    assert_int_equal(cfg.clients.defaults.budget.period, SG_PERIOD_WEEK);
    assert_int_equal(cfg.clients.defaults.budget.fail, SG_BUDGET_FAIL_OPEN);
    assert_true(cfg.clients.keyed[0].budget.enabled); /* inherited */
    assert_int_equal(cfg.clients.keyed[0].budget.queries, 100);
    assert_false(cfg.clients.keyed[1].budget.enabled); /* null: none */
    assert_true(cfg.clients.keyed[2].budget.enabled);  /* its own: 0 queries, the default period and fail mode */
    assert_int_equal(cfg.clients.keyed[2].budget.queries, 0);
    assert_int_equal(cfg.clients.keyed[2].budget.period, SG_PERIOD_DAY);
    assert_int_equal(cfg.clients.keyed[2].budget.fail, SG_BUDGET_FAIL_CLOSED);
    assert_false(cfg.backends[0].metered);
    assert_false(cfg.backends[0].budget.enabled);
    assert_true(cfg.backends[1].metered); /* a route budget meters the route */
    assert_int_equal(cfg.backends[1].budget.queries, 5000);
    assert_int_equal(cfg.backends[1].budget.period, SG_PERIOD_MONTH);
    assert_true(cfg.backends[2].metered);
    assert_false(cfg.backends[2].budget.enabled);
    sg_config_free(&cfg);

    static const struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":-1}}]}",
         "backends[0].budget.queries: expected an integer in [0, 1000000000000000], got -1"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":1.5}}]}", "backends[0].budget.queries"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":1,\"period\":\"year\"}}]}",
         "backends[0].budget.period: expected one of"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":1,\"period\":7}}]}",
         "backends[0].budget.period"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"period\":\"day\"}}]}",
         "backends[0].budget.queries: is required"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":1,\"fail\":\"half\"}}]}",
         "backends[0].budget.fail: expected one of"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":{\"queries\":1,\"per\":\"day\"}}]}",
         "backends[0].budget.per: unknown key"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"budget\":[1]}]}", "backends[0].budget: expected an object"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"metered\":false,\"budget\":{\"queries\":1}}]}",
         "backends[0].metered: cannot be false on a route with a budget"},
        {"{\"backends\":[{\"name\":\"ex\",\"plugin\":\"x\",\"metered\":1}]}", "backends[0].metered"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"budget\":{\"queries\":5}}}}",
         "clients.default.budget: counts backend calls on metered routes, and no route is metered"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\","
         "\"budget\":{\"queries\":5}}]}}",
         "clients.keys[0].budget: counts backend calls on metered routes"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\","
         "\"budget\":{\"queries\":5,\"period\":\"Day\"}}]}}",
         "clients.keys[0].budget.period: expected one of"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        char e[512] = "";
        int r = parse(cases[i].json, &cfg, e);
        sg_config_free(&cfg);
        if (r == 0 || strstr(e, cases[i].needle) == NULL)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want an error containing \"%s\"", i, cases[i].json, r, e, cases[i].needle);
    }
}

static void test_load_file(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    assert_int_not_equal(sg_config_load(&cfg, "/nonexistent/sg.json", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "cannot open /nonexistent/sg.json"));
    char path[] = "/tmp/sgcfgXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    fputs("{\"backends\":[{\"name\":\"ex\",\"plugin\":\"rel/sg_x.so\"}]}", fp);
    fclose(fp);
    assert_int_equal(sg_config_load(&cfg, path, err, sizeof(err)), 0);
    assert_string_equal(cfg.backends[0].plugin_path, "/tmp/rel/sg_x.so"); /* relative to the config's directory */
    assert_int_equal(sg_config_find_backend(&cfg, "ex", 2), 0);
    assert_int_equal(sg_config_find_backend(&cfg, "e", 1), -1);
    sg_config_free(&cfg);
    unlink(path);
}

/* cache.redis: an ACL user with its password from the environment, a database, Sentinel mode; the
 * password appears in no error message and nowhere in the description the log prints. */
static void test_redis(void **state)
{
    (void)state;
    setenv("SG_TEST_REDIS_PW", "hunter2-redis", 1);
    setenv("SG_TEST_SENTINEL_PW", "hunter2-sentinel", 1);
    unsetenv("SG_TEST_UNSET_VAR");
    sg_config_t cfg;
    char err[512], desc[512];
    const char *json = "{\"backends\":[" BACKEND "],\"cache\":{\"redis\":{\"host\":\"10.0.0.5\",\"port\":6380,\"db\":3,"
                       "\"username\":\"sg\",\"password_env\":\"SG_TEST_REDIS_PW\",\"prefix\":\"lab:\"}}}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_string_equal(cfg.cache.redis.node.host, "10.0.0.5");
    assert_int_equal(cfg.cache.redis.node.port, 6380);
    assert_int_equal(cfg.cache.redis.db, 3);
    assert_string_equal(cfg.cache.redis.username, "sg");
    assert_string_equal(cfg.cache.redis.password, "hunter2-redis");
    assert_string_equal(cfg.cache.redis.password_env, "SG_TEST_REDIS_PW");
    assert_string_equal(cfg.cache.redis_prefix, "lab:");
    sg_redis_conf_describe(&cfg.cache.redis, desc, sizeof(desc));
    assert_string_equal(desc, "Redis 10.0.0.5:6380");
    sg_redis_conf_describe_setup(&cfg.cache.redis, desc, sizeof(desc));
    assert_string_equal(desc, "db 3, user \"sg\", password from $SG_TEST_REDIS_PW");
    sg_config_free(&cfg);

    json = "{\"backends\":[" BACKEND "],\"cache\":{\"redis\":{\"sentinels\":[\"127.0.0.1:26379\",\"sentinel-b\",\"[::1]:26381\"],"
           "\"master\":\"mymaster\",\"password_env\":\"SG_TEST_REDIS_PW\",\"sentinel_password_env\":\"SG_TEST_SENTINEL_PW\","
           "\"timeout_ms\":200}},\"clients\":{\"default\":{\"rate\":5,\"global\":true}}}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_true(cfg.cache.redis.enabled);
    assert_null(cfg.cache.redis.node.host);
    assert_int_equal(cfg.cache.redis.n_sentinels, 3);
    assert_string_equal(cfg.cache.redis.sentinels[0].host, "127.0.0.1");
    assert_int_equal(cfg.cache.redis.sentinels[0].port, 26379);
    assert_string_equal(cfg.cache.redis.sentinels[1].host, "sentinel-b");
    assert_int_equal(cfg.cache.redis.sentinels[1].port, 26379);
    assert_string_equal(cfg.cache.redis.sentinels[2].host, "::1");
    assert_int_equal(cfg.cache.redis.sentinels[2].port, 26381);
    assert_string_equal(cfg.cache.redis.master, "mymaster");
    assert_null(cfg.cache.redis.username);
    assert_string_equal(cfg.cache.redis.sentinel_password, "hunter2-sentinel");
    assert_int_equal(cfg.cache.redis.timeout_ms, 200);
    sg_redis_conf_describe(&cfg.cache.redis, desc, sizeof(desc));
    assert_string_equal(desc, "Redis master \"mymaster\" via sentinels 127.0.0.1:26379,sentinel-b:26379,[::1]:26381");
    sg_redis_conf_describe_setup(&cfg.cache.redis, desc, sizeof(desc));
    assert_string_equal(desc, "db 0, user \"default\", password from $SG_TEST_REDIS_PW; sentinels: user \"default\", password "
                              "from $SG_TEST_SENTINEL_PW");
    sg_config_free(&cfg);

#define R(body) "{\"backends\":[" BACKEND "],\"cache\":{\"redis\":" body "}}"
    static const struct {
        const char *json;
        const char *needle;
    } cases[] = {
        {R("{\"password\":\"x\"}"), "cache.redis.password: unknown key (allowed: host, port, timeout_ms, prefix, username, "
                                    "password_env, db, sentinels, master, sentinel_username, sentinel_password_env)"},
        {R("{\"port\":65536}"), "cache.redis.port: expected an integer in [1, 65535], got 65536"},
        {R("{\"port\":\"6379\"}"), "cache.redis.port: expected an integer in [1, 65535], got \"6379\""},
        {R("{\"host\":7}"), "cache.redis.host: expected a non-empty string, got 7"},
        {R("{\"timeout_ms\":0}"), "cache.redis.timeout_ms: expected an integer in [1, 60000], got 0"},
        {R("{\"timeout_ms\":60001}"), "cache.redis.timeout_ms: expected an integer in [1, 60000], got 60001"},
        {R("{\"db\":2147483648}"), "cache.redis.db: expected an integer in [0, 2147483647], got 2147483648"},
        /* several wrong keys: the mode's keys, then timeout_ms, db, and the user last */
        {R("{\"port\":0,\"master\":\"m\"}"), "cache.redis.master: needs sentinels"},
        {R("{\"db\":-1,\"timeout_ms\":0,\"port\":0}"), "cache.redis.port: expected an integer in [1, 65535], got 0"},
        {R("{\"db\":-1,\"timeout_ms\":0}"), "cache.redis.timeout_ms: expected an integer in [1, 60000], got 0"},
        {R("{\"db\":-1,\"username\":\"a b\",\"password_env\":\"SG_TEST_REDIS_PW\"}"), "cache.redis.db: expected an integer"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"m\",\"timeout_ms\":0,\"sentinel_username\":\"u\"}"),
         "cache.redis.sentinel_username: needs sentinel_password_env"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"m\",\"timeout_ms\":0,\"username\":\"u\"}"),
         "cache.redis.timeout_ms: expected an integer in [1, 60000], got 0"},
        {R("{\"password_env\":\"SG_TEST_UNSET_VAR\"}"),
         "cache.redis.password_env: environment variable SG_TEST_UNSET_VAR (named here) is not set or empty"},
        {R("{\"username\":\"sg\"}"), "cache.redis.username: needs password_env"},
        {R("{\"username\":\"a b\",\"password_env\":\"SG_TEST_REDIS_PW\"}"), "cache.redis.username: expected an ACL user name"},
        {R("{\"db\":-1}"), "cache.redis.db: expected an integer in [0, 2147483647], got -1"},
        {R("{\"host\":\"\"}"), "cache.redis.host: expected a non-empty string"},
        {R("{\"master\":\"m\"}"), "cache.redis.master: needs sentinels"},
        {R("{\"sentinel_password_env\":\"SG_TEST_SENTINEL_PW\"}"), "cache.redis.sentinel_password_env: needs sentinels"},
        {R("{\"sentinels\":[\"a:1\"]}"), "cache.redis.master: required key is missing"},
        {R("{\"sentinels\":[],\"master\":\"m\"}"), "cache.redis.sentinels: expected an array of 1 to 16"},
        {R("{\"sentinels\":\"a:1\",\"master\":\"m\"}"), "cache.redis.sentinels: expected an array of 1 to 16"},
        {R("{\"sentinels\":[\"a:1\",\"b:0\"],\"master\":\"m\"}"),
         "cache.redis.sentinels[1]: expected \"host:port\" with a port in [1, 65535], got \"b:0\""},
        {R("{\"sentinels\":[\"::1:26379\"],\"master\":\"m\"}"), "cache.redis.sentinels[0]: an IPv6 address goes in brackets"},
        {R("{\"sentinels\":[\":26379\"],\"master\":\"m\"}"), "cache.redis.sentinels[0]: expected \"host:port\" with a host"},
        {R("{\"sentinels\":[5],\"master\":\"m\"}"), "cache.redis.sentinels[0]: expected a \"host:port\" string, got 5"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"m\",\"host\":\"x\"}"), "cache.redis.host: not with sentinels"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"m\",\"port\":6379}"), "cache.redis.port: not with sentinels"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"my master\"}"), "cache.redis.master: expected the master's name"},
        {R("{\"sentinels\":[\"a:1\"],\"master\":\"m\",\"sentinel_username\":\"u\"}"),
         "cache.redis.sentinel_username: needs sentinel_password_env"},
    };
#undef R
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        char e[512] = "";
        int r = parse(cases[i].json, &cfg, e);
        sg_config_free(&cfg);
        if (r == 0 || strstr(e, cases[i].needle) == NULL || strstr(e, "hunter2") != NULL)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want an error containing \"%s\"", i, cases[i].json, r, e, cases[i].needle);
    }
    /* a host of 255 bytes is one, of 256 is not */
    for (size_t n = 255; n <= 256; ++n) {
        char host[300], json[512];
        memset(host, 'h', n);
        host[n] = '\0';
        snprintf(json, sizeof(json), "{\"backends\":[" BACKEND "],\"cache\":{\"redis\":{\"host\":\"%s\"}}}", host);
        char e[512] = "";
        int r = parse(json, &cfg, e);
        if (n == 255 && r == 0)
            assert_int_equal(strlen(cfg.cache.redis.node.host), 255);
        sg_config_free(&cfg);
        if (n == 255 ? r != 0
                     : (r == 0 || strstr(e, "cache.redis.host: expected a host name or address of 1 to 255 bytes") == NULL))
            fail_msg("host of %zu bytes: got %d \"%s\"", n, r, e);
    }
}

/* a route's or client's "trace" (trace_conf.c's table): defaults, values, and the messages of bad
 * values, which name the key in the table's order */
static void test_trace(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
#define T(body) "{\"backends\":[{\"name\":\"ex\",\"plugin\":\"example\",\"trace\":" body "}]}"
    assert_int_equal(parse(T("{\"path\":\"traces/\"}"), &cfg, err), 0);
    const sg_trace_conf_t *t = cfg.backends[0].trace;
    assert_non_null(t);
    assert_string_equal(t->path, "/etc/sg/traces/ex.jsonl");
    assert_string_equal(t->where, "backends[0].trace");
    assert_true(t->sample == 1.0);
    assert_int_equal(t->fields, SG_TRACE_F_DEFAULT);
    assert_int_equal(t->rotate_bytes, 268435456);
    assert_int_equal(t->rotate_s, 0);
    assert_int_equal(t->keep, 0);
    assert_int_equal(t->buffer_bytes, 16 << 20);
    sg_config_free(&cfg);
    assert_int_equal(parse(T("{\"path\":\"/t/run.jsonl\",\"sample\":0.25,\"fields\":[\"query_hash\",\"ms\"],"
                             "\"rotate_bytes\":1125899906842624,\"rotate_s\":3600,\"keep\":7,\"buffer_bytes\":4096}"),
                           &cfg, err),
                     0);
    t = cfg.backends[0].trace;
    assert_string_equal(t->path, "/t/run.jsonl");
    assert_true(t->sample == 0.25);
    assert_int_equal(t->fields, SG_TRACE_F_QUERY_HASH | SG_TRACE_F_MS);
    assert_true(t->rotate_bytes == (uint64_t)1 << 50);
    assert_int_equal(t->rotate_s, 3600);
    assert_int_equal(t->keep, 7);
    assert_int_equal(t->buffer_bytes, 4096);
    sg_config_free(&cfg);
    assert_int_equal(parse(T("null"), &cfg, err), 0);
    assert_null(cfg.backends[0].trace);
    sg_config_free(&cfg);

    static const struct {
        const char *json, *want;
    } cases[] = {
        {T("{}"), "backends[0].trace.path: required key is missing"},
        {T("{\"path\":\"\"}"), "backends[0].trace.path: expected a non-empty string, got \"\""},
        {T("{\"path\":\"/t\",\"rotate\":5}"),
         "backends[0].trace.rotate: unknown key (allowed: path, sample, fields, rotate_bytes, rotate_s, keep, buffer_bytes)"},
        {T("{\"path\":\"/t\",\"sample\":1.5}"), "backends[0].trace.sample: expected a number in [0, 1], got 1.5"},
        {T("{\"path\":\"/t\",\"fields\":[]}"), "backends[0].trace.fields: expected a non-empty array of field names"},
        {T("{\"path\":\"/t\",\"fields\":[\"nope\"]}"), "backends[0].trace.fields: unknown field (expected time, request,"},
        {T("{\"path\":\"/t\",\"rotate_bytes\":-1}"),
         "backends[0].trace.rotate_bytes: expected an integer in [0, 1125899906842624], got -1"},
        {T("{\"path\":\"/t\",\"rotate_s\":31536001}"),
         "backends[0].trace.rotate_s: expected an integer in [0, 31536000], got 31536001"},
        {T("{\"path\":\"/t\",\"keep\":1.5}"), "backends[0].trace.keep: expected an integer in [0, 1000000], got 1.5"},
        {T("{\"path\":\"/t\",\"buffer_bytes\":4095}"),
         "backends[0].trace.buffer_bytes: expected an integer in [4096, 68719476736], got 4095"},
        /* several wrong keys: the first in the table's order is named */
        {T("{\"keep\":-1,\"sample\":2}"), "backends[0].trace.path: required key is missing"},
        {T("{\"path\":\"/t\",\"keep\":-1,\"fields\":7,\"sample\":2}"), "backends[0].trace.sample: expected a number in [0, 1]"},
        {T("{\"path\":\"/t\",\"keep\":-1,\"fields\":7}"), "backends[0].trace.fields: expected a non-empty array"},
        {T("[]"), "backends[0].trace: expected an object"},
        {"{\"backends\":[" BACKEND "],\"clients\":{\"default\":{\"trace\":{\"path\":\"/t\",\"keep\":-2}}}}",
         "clients.default.trace.keep: expected an integer in [0, 1000000], got -2"},
    };
#undef T
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        char e[512] = "";
        int r = parse(cases[i].json, &cfg, e);
        sg_config_free(&cfg);
        if (r == 0 || strstr(e, cases[i].want) == NULL)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want an error containing \"%s\"", i, cases[i].json, r, e, cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_minimal_defaults),
                                       cmocka_unit_test(test_full),
                                       cmocka_unit_test(test_defaults_within_limits),
                                       cmocka_unit_test(test_errors),
                                       cmocka_unit_test(test_budgets),
                                       cmocka_unit_test(test_strict_document),
                                       cmocka_unit_test(test_load_file),
                                       cmocka_unit_test(test_mcp),
                                       cmocka_unit_test(test_listen_sockets),
                                       cmocka_unit_test(test_listen_policy),
                                       cmocka_unit_test(test_listen_entries),
                                       cmocka_unit_test(test_redis),
                                       cmocka_unit_test(test_trace)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
