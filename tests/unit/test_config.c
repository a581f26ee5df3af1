/* Unit tests: config validation (gateway/config.c); every error names the key and the value. */
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
    assert_null(cfg.cache.redis_host);
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
static void test_listen(void **state)
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
    assert_string_equal(cfg.cache.redis_host, "127.0.0.1");
    assert_int_equal(cfg.cache.redis_port, 6390);
    assert_int_equal(cfg.clients.n_keyed, 1);
    assert_string_equal(cfg.clients.keyed[0].key, "secret-a");
    assert_int_equal(cfg.clients.keyed[0].weight, 2);
    assert_int_equal(cfg.clients.keyed[0].mode, SG_RL_REJECT);
    assert_true(cfg.clients.keyed[0].burst == 100); /* burst defaults to one second of the client's own rate */
    assert_true(cfg.clients.defaults.burst == 20);
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

/* Spend budgets: keyed clients inherit clients.default's budget as their own, null removes it, a
 * route budget makes the route metered; and the errors name the key. */
static void test_budgets(void **state)
{
    (void)state;
    setenv("SG_TEST_KEY_A", "secret-a", 1);
    setenv("SG_TEST_KEY_B", "secret-b", 1);
    sg_config_t cfg;
    char err[512];
    const char *json = "{\"clients\":{\"default\":{\"budget\":{\"queries\":100,\"period\":\"week\",\"fail\":\"open\"}},"
                       "\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_KEY_A\"},{\"id\":\"b\",\"key_env\":\"SG_TEST_KEY_B\","
                       "\"budget\":null},{\"id\":\"c\",\"key_env\":\"SG_TEST_KEY_B\",\"budget\":{\"queries\":0}}]},"
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_minimal_defaults),
                                       cmocka_unit_test(test_full),
                                       cmocka_unit_test(test_defaults_within_limits),
                                       cmocka_unit_test(test_errors),
                                       cmocka_unit_test(test_budgets),
                                       cmocka_unit_test(test_load_file),
                                       cmocka_unit_test(test_mcp),
                                       cmocka_unit_test(test_listen)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
