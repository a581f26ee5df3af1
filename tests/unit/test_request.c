/* Unit tests: parsing and validating /retrieve and /access bodies (gateway/request.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "request.h"

static const sg_request_limits_t lim = {4096, 8, 64, 100};

static int parse(const char *body, sg_parsed_t *p, char *err)
{
    return sg_request_parse(body, strlen(body), &lim, 0, p, err, 256);
}

static void test_basic(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    assert_int_equal(parse("{\"queries\":[\"who wrote hamlet\",\"capital of france\"],\"topk\":3,\"return_scores\":true}", &p, err),
                     0);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.topk, 3);
    assert_int_equal(p.return_scores, 1);
    assert_int_equal(p.len[0], 16);
    assert_memory_equal(p.arena + p.off[1], "capital of france", 17);
    sg_parsed_free(&p);
}

static void test_defaults(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    /* topk null, 0 and absent all mean "the default" (Search-R1's `if not request.topk`) */
    const char *bodies[] = {"{\"queries\":[\"a\"]}", "{\"queries\":[\"a\"],\"topk\":null}", "{\"queries\":[\"a\"],\"topk\":0}",
                            "{\"queries\":[\"a\"],\"topk\":3.0,\"unknown\":{\"x\":[1,2]}}"};
    for (size_t i = 0; i < 4; ++i) {
        assert_int_equal(parse(bodies[i], &p, err), 0);
        assert_int_equal(p.topk, i == 3 ? 3 : 0);
        assert_int_equal(p.return_scores, 0);
        sg_parsed_free(&p);
    }
    assert_int_equal(parse("{\"queries\":[],\"topk\":3}", &p, err), 0);
    assert_int_equal(p.n, 0);
    sg_parsed_free(&p);
}

static void test_skyrl_query(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    assert_int_equal(parse("{\"query\":\"single\",\"topk\":2,\"return_scores\":true}", &p, err), 0);
    assert_int_equal(p.n, 1);
    assert_memory_equal(p.arena, "single", 6);
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"query\":\"a\",\"queries\":[\"b\"]}", &p, err), 422);
    assert_non_null(strstr(err, "not both"));
    assert_int_equal(parse("{\"query\":5}", &p, err), 422);
}

static void test_unicode(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    /* \u escapes (what json.dumps sends), a surrogate pair, and raw UTF-8 */
    assert_int_equal(parse("{\"queries\":[\"\\u6771\\u4eac \\ud83d\\ude00\",\"Z\xc3\xbcrich\"]}", &p, err), 0);
    assert_int_equal(p.len[0], 6 + 1 + 4);
    assert_memory_equal(p.arena + p.off[0], "\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80", 11);
    assert_memory_equal(p.arena + p.off[1], "Z\xc3\xbcrich", 7);
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"queries\":[\"a\\u0000b\"]}", &p, err), 422);
    /* an escaped backslash followed by u0000 is plain text, not NUL */
    assert_int_equal(parse("{\"queries\":[\"a\\\\u0000b\"]}", &p, err), 0);
    assert_int_equal(p.len[0], 8);
    sg_parsed_free(&p);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int status;
        const char *needle;
    } cases[] = {
        {"not json", 400, "not valid JSON"},
        {"{\"queries\":[\"a\"]", 400, "not valid JSON"},
        {"[1,2]", 422, "JSON object"},
        {"{}", 422, "\"queries\" is required"},
        {"{\"queries\":\"a\"}", 422, "list of strings"},
        {"{\"queries\":[\"a\",3]}", 422, "queries[1] must be a string"},
        {"{\"queries\":[\"a\",null]}", 422, "queries[1]"},
        {"{\"queries\":[\"a\"],\"topk\":-1}", 422, "negative"},
        {"{\"queries\":[\"a\"],\"topk\":2.5}", 422, "integer"},
        {"{\"queries\":[\"a\"],\"topk\":\"3\"}", 422, "integer"},
        {"{\"queries\":[\"a\"],\"topk\":101}", 413, "max_topk"},
        {"{\"queries\":[\"a\"],\"return_scores\":\"yes\"}", 422, "return_scores"},
        {"{\"queries\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", 413, "max_queries"},
        {"{\"queries\":[\"0123456789012345678901234567890123456789012345678901234567890123456789\"]}", 413, "max_query_bytes"},
        {"{\"queries\":[\"a\"],\"backend\":7}", 422, "backend"},
        {"", 422, "body is required"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        sg_parsed_t p;
        char err[256] = "";
        int st = parse(cases[i].body, &p, err);
        if (st != cases[i].status || strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu (%s): got %d \"%s\", want %d containing \"%s\"", i, cases[i].body, st, err, cases[i].status,
                     cases[i].needle);
    }
}

static void test_body_limit_and_access(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    char big[5000];
    memset(big, ' ', sizeof(big));
    assert_int_equal(sg_request_parse(big, sizeof(big), &lim, 0, &p, err, sizeof(err)), 413);
    const char *acc = "{\"urls\":[\"https://en.wikipedia.org/wiki/Hamlet\"]}";
    assert_int_equal(sg_request_parse(acc, strlen(acc), &lim, 1, &p, err, sizeof(err)), 0);
    assert_int_equal(p.n, 1);
    sg_parsed_free(&p);
    assert_int_equal(sg_request_parse("{\"queries\":[\"a\"]}", 17, &lim, 1, &p, err, sizeof(err)), 422);
    assert_non_null(strstr(err, "urls"));
}

static void test_backend_field(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    assert_int_equal(parse("{\"queries\":[\"a\"],\"backend\":\"google\"}", &p, err), 0);
    assert_string_equal(p.backend, "google");
    sg_parsed_free(&p);
}

/* searchgate's optional "search_params": an object, kept as compact JSON for the route's backend
 * to validate; null means absent; anything else is a 422; /access bodies ignore it. */
static void test_search_params(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    assert_int_equal(parse("{\"queries\":[\"a\"]}", &p, err), 0);
    assert_null(p.search_params);
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"queries\":[\"a\"], \"search_params\": { \"nprobe\" : 32 }}", &p, err), 0);
    assert_string_equal(p.search_params, "{\"nprobe\":32}");
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"queries\":[\"a\"],\"search_params\":null}", &p, err), 0);
    assert_null(p.search_params);
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"queries\":[\"a\"],\"search_params\":{}}", &p, err), 0);
    assert_string_equal(p.search_params, "{}");
    sg_parsed_free(&p);
    assert_int_equal(parse("{\"queries\":[\"a\"],\"search_params\":[1]}", &p, err), 422);
    assert_non_null(strstr(err, "search_params"));
    assert_int_equal(parse("{\"queries\":[\"a\"],\"search_params\":\"nprobe=3\"}", &p, err), 422);
    const char *acc = "{\"urls\":[\"u\"],\"search_params\":7}";
    assert_int_equal(sg_request_parse(acc, strlen(acc), &lim, 1, &p, err, sizeof(err)), 0);
    assert_null(p.search_params);
    sg_parsed_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),         cmocka_unit_test(test_defaults),      cmocka_unit_test(test_skyrl_query),
        cmocka_unit_test(test_unicode),       cmocka_unit_test(test_errors),        cmocka_unit_test(test_body_limit_and_access),
        cmocka_unit_test(test_backend_field), cmocka_unit_test(test_search_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
