/* Unit tests: fusion routes' settings (gateway/config/config_fusion.c, fusion_conf.h), read through
 * the whole config parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "fusion_conf.h"

#define PLUG(n) "{\"name\":\"" n "\",\"plugin\":\"example\"}"

static int parse(const char *json, sg_config_t *cfg, char *err)
{
    return sg_config_parse(cfg, json, strlen(json), "/etc/sg", err, 512);
}

static void test_conf_rrf(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    const char *json =
        "{\"backends\":[" PLUG("bm") ",{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]},\"topk\":5}," PLUG("e5") "]}";
    assert_int_equal(parse(json, &cfg, err), 0);
    assert_int_equal(cfg.n_backends, 2);
    assert_string_equal(cfg.backends[1].name, "e5");
    assert_int_equal(cfg.n_fusions, 1);
    sg_fusion_conf_t *fc = &cfg.fusions[0];
    assert_string_equal(fc->name, "hy");
    assert_int_equal(fc->method, SG_FUSION_RRF);
    assert_true(fc->k == 60);
    assert_int_equal(fc->n_legs, 2);
    assert_int_equal(fc->legs[0], 0);
    assert_int_equal(fc->legs[1], 1);
    assert_int_equal(fc->topk, 5);
    assert_int_equal(fc->timeout_ms, 30000);
    assert_int_equal(sg_fusion_depth(fc, 3), 10);
    assert_int_equal(sg_fusion_depth(fc, 50), 50);
    assert_int_equal(sg_fusion_conf_find(&cfg, "hy", 2), 0);
    assert_int_equal(sg_config_find_backend(&cfg, "hy", 2), -1);
    assert_int_equal(cfg.default_backend, 0);
    assert_string_equal(fc->identity, "rrf k=60 depth=0 legs=bm:w=1,e5:w=1");
    sg_config_free(&cfg);
}

static void test_conf_weighted(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    const char *json = "{\"backends\":[" PLUG("bm") "," PLUG(
        "e5") ",{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],"
              "\"method\":\"weighted\",\"weights\":{\"e5\":0.7,\"bm\":0.3},\"normalize\":{\"bm\":\"zscore\"},"
              "\"depth\":20}},{\"name\":\"hy2\",\"fusion\":{\"routes\":[\"e5\",\"bm\"],\"method\":\"weighted\","
              "\"normalize\":\"none\"}}]}";
    assert_int_equal(parse(json, &cfg, err), 0);
    sg_fusion_conf_t *fc = &cfg.fusions[0];
    assert_int_equal(fc->method, SG_FUSION_WEIGHTED);
    assert_true(fc->weights[0] == 0.3 && fc->weights[1] == 0.7);
    assert_int_equal(fc->normalize[0], SG_NORM_ZSCORE);
    assert_int_equal(fc->normalize[1], SG_NORM_MINMAX);
    assert_int_equal(sg_fusion_depth(fc, 3), 20);
    assert_int_equal(cfg.fusions[1].normalize[0], SG_NORM_NONE);
    assert_int_equal(cfg.fusions[1].normalize[1], SG_NORM_NONE);
    assert_int_equal(cfg.fusions[1].legs[0], 1);
    sg_config_free(&cfg);
}

static void expect_error(const char *fusion_entry, const char *extra, const char *needle)
{
    char json[2048], err[512];
    snprintf(json, sizeof(json), "{%s\"backends\":[" PLUG("bm") "," PLUG("e5") ",%s]}", extra, fusion_entry);
    sg_config_t cfg;
    int rc = parse(json, &cfg, err);
    if (rc == 0 || strstr(err, needle) == NULL)
        fail_msg("config %s: expected an error containing \"%s\", got rc=%d \"%s\"", json, needle, rc, rc != 0 ? err : "");
    sg_config_free(&cfg);
}

static void test_conf_errors(void **state)
{
    (void)state;
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"nope\"]}}", "",
                 "backends[2].fusion.routes[1]: no route named nope is configured, got \"nope\"");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"hy\"]}}", "", "routes[1]: names the fusion route itself");
    expect_error(
        "{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"h2\"]}},{\"name\":\"h2\",\"fusion\":{\"routes\":[\"bm\",\"hy\"]}}", "",
        "backends[2].fusion.routes[1]: names fusion route h2; the legs of a fusion must be plugin routes");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\"]}}", "", "routes: expected 2 to 8 route names");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"bm\"]}}", "", "routes[1]: names the same route twice");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"k\":-1}}", "", "fusion.k");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"k\":\"60\"}}", "", "fusion.k");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"weighted\",\"k\":60}}", "",
                 "fusion.k: applies to method \"rrf\" only");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"normalize\":\"minmax\"}}", "",
                 "fusion.normalize: applies to method \"weighted\" only");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"weighted\",\"normalize\":\"l2\"}}", "",
                 "fusion.normalize: expected \"minmax\", \"zscore\" or \"none\", got \"l2\"");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"weighted\",\"normalize\":{\"x\":\"none\"}}}",
                 "", "fusion.normalize.x: is not one of this fusion's routes");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"weights\":{\"bm\":-1}}}", "",
                 "fusion.weights.bm: expected a number in [0, 1000000], got -1");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"weights\":{\"zz\":1}}}", "",
                 "fusion.weights.zz: is not one of this fusion's routes");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"weights\":{\"bm\":0,\"e5\":0}}}", "",
                 "fusion.weights: at least one route needs a weight above 0");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"weights\":[1,2]}}", "",
                 "fusion.weights: expected an object");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"max\"}}", "", "fusion.method");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"depth\":0}}", "", "fusion.depth");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"extra\":1}}", "", "fusion.extra: unknown key");
    expect_error("{\"name\":\"hy\",\"plugin\":\"example\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "",
                 "backends[2].plugin: not allowed on a fusion route");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]},\"fallback\":\"bm\"}", "",
                 "backends[2].fallback: not allowed on a fusion route");
    expect_error("{\"name\":\"hy\",\"fusion\":[\"bm\",\"e5\"]}", "", "backends[2].fusion: expected an object");
    expect_error("{\"name\":\"bm\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "", "backends[2].name: duplicate backend name");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "\"default_backend\":\"hy\",",
                 "default_backend: names a fusion route");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]}},{\"name\":\"x\",\"plugin\":\"p\",\"fallback\":\"hy\"}",
                 "", "backends[3].fallback: names a fusion route");
}

/* the whole messages of the keys the tables read (config_fusion.c), and which one a config with
 * several wrong keys gets: the order in which they are read */
static void test_conf_messages(void **state)
{
    (void)state;
    expect_error("{\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "", "backends[2].name: required key is missing");
    expect_error("{\"name\":\"\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "",
                 "backends[2].name: expected a non-empty string, got \"\"");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"]},\"topk\":3,\"extra\":1}", "",
                 "backends[2].extra: unknown key (allowed: name, fusion, topk, timeout_ms, trace)");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"extra\":1}}", "",
                 "backends[2].fusion.extra: unknown key (allowed: routes, method, k, weights, normalize, depth)");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"max\"}}", "",
                 "backends[2].fusion.method: expected one of \"rrf\", \"weighted\", got \"max\"");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"k\":1000001}}", "",
                 "backends[2].fusion.k: expected a number in [0, 1e+06], got 1000001");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"depth\":1001}}", "",
                 "backends[2].fusion.depth: expected an integer in [1, 1000], got 1001");
    /* several wrong keys */
    expect_error("{\"name\":\"h y\",\"topk\":0,\"fusion\":{\"routes\":[\"bm\",\"e5\"]}}", "",
                 "backends[2].name: may only contain letters, digits, '-' and '_'");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\"],\"method\":\"max\"}}", "",
                 "backends[2].fusion.routes: expected 2 to 8");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"max\",\"k\":-1}}", "",
                 "backends[2].fusion.method: expected one of");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"method\":\"weighted\",\"k\":-1}}", "",
                 "backends[2].fusion.k: applies to method \"rrf\" only");
    expect_error("{\"name\":\"hy\",\"fusion\":{\"routes\":[\"bm\",\"e5\"],\"k\":-1,\"weights\":[1]}}", "",
                 "backends[2].fusion.k: expected a number in [0, 1e+06], got -1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conf_rrf),
        cmocka_unit_test(test_conf_weighted),
        cmocka_unit_test(test_conf_errors),
        cmocka_unit_test(test_conf_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
