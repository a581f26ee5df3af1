/* Unit tests: a route's rerank settings (gateway/config/rerank_conf.c), alone and through the
 * whole config parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>
#include "config.h"
#include "cfg.h"
#include "rerank_conf.h"
#include "xenc.h"

static int parse(const char *rerank, uint32_t topk, sg_rerank_conf_t **out, char *err)
{
    cJSON *o = cJSON_Parse(rerank);
    sg_cfg_t c = {"backends[0]", err, 512};
    err[0] = '\0';
    int r = sg_rerank_conf_parse(&c, o, "/etc/sg", topk, out);
    cJSON_Delete(o);
    return r;
}

static void test_conf(void **state)
{
    (void)state;
    sg_rerank_conf_t *rc;
    char err[512];
    assert_int_equal(parse("null", 3, &rc, err), 0);
    assert_null(rc);
    assert_int_equal(parse("{\"model\":\"models/ce\"}", 3, &rc, err), 0);
    assert_non_null(rc);
    assert_string_equal(rc->model, "/etc/sg/models/ce");
    assert_int_equal(rc->candidates, 30);
    assert_int_equal(rc->max_length, 0); /* the model's own default */
    assert_int_equal(rc->workers, 1);
    assert_int_equal(rc->max_queue, 10000);
    assert_int_equal(rc->batch, 32);
    assert_int_equal(rc->activation, -1);
    assert_int_equal(rc->score_label, -1);
    assert_int_equal(rc->truncation, -1);
    sg_rerank_conf_free(rc);
    assert_int_equal(parse("{\"model\":\"/m\",\"candidates\":5,\"max_length\":128,\"workers\":2,\"max_queue\":50,\"batch\":4,"
                           "\"activation\":\"sigmoid\",\"score_label\":0,\"truncation\":\"slow\"}",
                           5, &rc, err),
                     0);
    assert_string_equal(rc->model, "/m");
    assert_int_equal(rc->candidates, 5);
    assert_int_equal(rc->max_length, 128);
    assert_int_equal(rc->workers, 2);
    assert_int_equal(rc->max_queue, 50);
    assert_int_equal(rc->batch, 4);
    assert_int_equal(rc->activation, SG_XENC_SIGMOID);
    assert_int_equal(rc->score_label, 0);
    assert_int_equal(rc->truncation, SG_XENC_TRUNC_SLOW);
    sg_rerank_conf_free(rc);

    static const struct {
        const char *json;
        uint32_t topk;
        const char *needle;
    } bad[] = {
        {"{}", 3, "backends[0].rerank.model"},
        {"{\"model\":\"/m\",\"candidates\":2}", 3, "backends[0].rerank.candidates"},
        {"{\"model\":\"/m\",\"candidates\":0}", 1, "backends[0].rerank.candidates"},
        {"{\"model\":\"/m\",\"candidates\":10001}", 1, "backends[0].rerank.candidates"},
        {"{\"model\":\"/m\",\"max_length\":2}", 3, "backends[0].rerank.max_length"},
        {"{\"model\":\"/m\",\"workers\":0}", 3, "backends[0].rerank.workers"},
        {"{\"model\":\"/m\",\"candidates\":40,\"max_queue\":39}", 3, "backends[0].rerank.max_queue"},
        {"{\"model\":\"/m\",\"batch\":0}", 3, "backends[0].rerank.batch"},
        {"{\"model\":\"/m\",\"activation\":\"relu\"}", 3, "backends[0].rerank.activation"},
        {"{\"model\":\"/m\",\"truncation\":\"middle\"}", 3, "backends[0].rerank.truncation"},
        {"{\"model\":\"/m\",\"score_label\":-2}", 3, "backends[0].rerank.score_label"},
        {"{\"model\":\"/m\",\"candidate\":5}", 3, "candidate"},
        {"[1]", 3, "backends[0].rerank"},
        {"\"/m\"", 3, "backends[0].rerank"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        rc = (sg_rerank_conf_t *)1;
        assert_int_equal(parse(bad[i].json, bad[i].topk, &rc, err), -1);
        assert_null(rc);
        if (strstr(err, bad[i].needle) == NULL)
            fail_msg("%s: error \"%s\" does not name %s", bad[i].json, err, bad[i].needle);
    }
}

/* the route key through the whole config parser */
static void test_config_key(void **state)
{
    (void)state;
    sg_config_t cfg;
    char err[512];
    const char *ok =
        "{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"topk\":5,\"rerank\":{\"model\":\"ce\",\"candidates\":5}},"
        "{\"name\":\"b\",\"plugin\":\"example\"}]}";
    assert_int_equal(sg_config_parse(&cfg, ok, strlen(ok), "/etc/sg", err, sizeof(err)), 0);
    assert_non_null(cfg.backends[0].rerank);
    assert_string_equal(cfg.backends[0].rerank->model, "/etc/sg/ce");
    assert_null(cfg.backends[1].rerank);
    sg_config_free(&cfg);
    const char *bad =
        "{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"topk\":5,\"rerank\":{\"model\":\"ce\",\"candidates\":4}}]}";
    assert_int_equal(sg_config_parse(&cfg, bad, strlen(bad), "/etc/sg", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "backends[0].rerank.candidates"));
    assert_non_null(strstr(err, "topk (5)"));
    sg_config_free(&cfg);
}

/* the whole messages (rerank_conf.c's table and its cross-checks), and which one a config with
 * several wrong keys gets: the first in the table's order, then the bounds one key sets another */
static void test_messages(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        uint32_t topk;
        const char *want;
    } cases[] = {
        {"{}", 3, "backends[0].rerank.model: required key is missing"},
        {"{\"model\":\"/m\",\"candidate\":5}", 3,
         "backends[0].rerank.candidate: unknown key (allowed: model, candidates, max_length, workers, max_queue, batch, "
         "activation, "
         "score_label, truncation)"},
        {"{\"model\":\"/m\",\"candidates\":0}", 1, "backends[0].rerank.candidates: expected an integer in [1, 10000], got 0"},
        {"{\"model\":\"/m\",\"max_length\":1048577}", 3,
         "backends[0].rerank.max_length: expected an integer in [3, 1048576], got 1048577"},
        {"{\"model\":\"/m\",\"workers\":257}", 3, "backends[0].rerank.workers: expected an integer in [1, 256], got 257"},
        {"{\"model\":\"/m\",\"max_queue\":0}", 3, "backends[0].rerank.max_queue: expected an integer in [1, 100000000], got 0"},
        {"{\"model\":\"/m\",\"batch\":100001}", 3, "backends[0].rerank.batch: expected an integer in [1, 100000], got 100001"},
        {"{\"model\":\"/m\",\"activation\":\"relu\"}", 3,
         "backends[0].rerank.activation: expected one of \"identity\", \"sigmoid\", \"tanh\", got \"relu\""},
        {"{\"model\":\"/m\",\"score_label\":100001}", 3,
         "backends[0].rerank.score_label: expected an integer in [0, 100000], got 100001"},
        {"{\"model\":\"/m\",\"truncation\":\"middle\"}", 3,
         "backends[0].rerank.truncation: expected one of \"fast\", \"slow\", got \"middle\""},
        {"{\"model\":\"/m\",\"candidates\":2}", 3,
         "backends[0].rerank.candidates: must be at least the route's topk (3): the stage returns the topk best of the candidates, "
         "got 2"},
        {"{\"model\":\"/m\",\"candidates\":40,\"max_queue\":39}", 3,
         "backends[0].rerank.max_queue: must be at least candidates (40): it counts (query, passage) pairs, got 39"},
        {"{\"model\":\"/m\",\"batch\":0,\"workers\":0}", 3, "backends[0].rerank.workers: expected an integer in [1, 256], got 0"},
        {"[1]", 3, "backends[0].rerank: expected an object {\"model\": DIR, \"candidates\": N, ...}, got [1]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        sg_rerank_conf_t *rc = NULL;
        char err[512] = "";
        int r = parse(cases[i].json, cases[i].topk, &rc, err);
        if (r != -1 || rc != NULL || strcmp(err, cases[i].want) != 0)
            fail_msg("case %zu: %s\n  got %d \"%s\"\n  want \"%s\"", i, cases[i].json, r, err, cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_conf), cmocka_unit_test(test_config_key),
                                       cmocka_unit_test(test_messages)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
