/* Unit tests: parsing and validating /retrieve and /access bodies (gateway/http/request.c). */
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

/* RFC 8259, strictly: what Python's json refuses (or RFC 8259 forbids) is a 400, not a silently
 * different query. Bodies carry raw bytes, so lengths are explicit. */
static void test_strict_json(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        size_t len;
        const char *needle;
    } bad[] = {
#define B(s, needle) {s, sizeof(s) - 1, needle}
        B("{\"queries\":[\"ham\0let\"]}", "raw NUL byte in a string at byte 16"),
        B("{\"queries\":[\"ham\nlet\"]}", "raw control character in a string at byte 16"),
        B("{\"queries\":[\"a\x01\"]}", "raw control character"),
        B("{\"queries\":[\"a\x1f\"]}", "raw control character"),
        B("{\"queries\":[\"\xff\xfe\"]}", "invalid UTF-8 at byte 13"),
        B("{\"queries\":[\"\xc0\xaf\"]}", "invalid UTF-8"),         /* overlong '/' */
        B("{\"queries\":[\"\xe0\x80\xaf\"]}", "invalid UTF-8"),     /* overlong, 3 bytes */
        B("{\"queries\":[\"\xed\xa0\x80\"]}", "invalid UTF-8"),     /* a UTF-16 surrogate in UTF-8 */
        B("{\"queries\":[\"\xf4\x90\x80\x80\"]}", "invalid UTF-8"), /* past U+10FFFF */
        B("{\"queries\":[\"\xe6\x9d\"]}", "invalid UTF-8"),         /* truncated sequence */
        B("{\"queries\":[\"\x80\"]}", "invalid UTF-8"),             /* stray continuation byte */
        B("{\"queries\":[\"hamlet\"]} xyz", "unexpected data after the JSON value at byte 23"),
        B("{\"queries\":[\"hamlet\"]}{}", "unexpected data after the JSON value"),
        B("{\"queries\":[\"a\"],\"topk\":01}", "bad number"),
        B("{\"queries\":[\"a\"],\"topk\":1.}", "bad number"),
        B("{\"queries\":[\"a\"],\"topk\":.5}", "unexpected character"),
        B("{\"queries\":[\"a\"],\"topk\":+1}", "unexpected character"),
        B("{\"queries\":[\"a\"],\"topk\":-}", "bad number"),
        B("{\"queries\":[\"a\"],\"topk\":1e}", "bad number"),
        B("{\"queries\":[\"a\"],\"topk\":NaN}", "unexpected character"),
        B("{\"queries\":[\"a\"],\"x\":Infinity}", "unexpected character"),
        B("{\"queries\":[\"a\\x\"]}", "bad escape"),
        B("{\"queries\":[\"a\\u12\"]}", "bad \\u escape"),
        B("{\"queries\":[\"a\",]}", "unexpected character"),
        B("{\"queries\":[\"a\"],}", "object key (a string) expected"),
        B("{'queries':['a']}", "object key (a string) expected"),
        B("{\"queries\":[\"a\"]", "',' or '}' expected"),
        B("{\"queries\":[\"a\"],\"x\":tru}", "unexpected character"),
        B("\xef\xbb\xbf", "unexpected end of the body"),
#undef B
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_parsed_t p;
        char err[256] = "";
        int st = sg_request_parse(bad[i].body, bad[i].len, &lim, 0, &p, err, sizeof(err));
        if (st != 400 || strstr(err, bad[i].needle) == NULL)
            fail_msg("case %zu: got %d \"%s\", want 400 containing \"%s\"", i, st, err, bad[i].needle);
    }
    /* nesting: 1000 containers (the object + 999 arrays) are accepted, as by cJSON; 1001 are not */
    for (int extra = 0; extra < 2; ++extra) {
        static char deep[2 * 1000 + 64];
        size_t n = (size_t)snprintf(deep, sizeof(deep), "{\"queries\":[\"a\"],\"x\":");
        for (int i = 0; i < 999 + extra; ++i)
            deep[n++] = '[';
        for (int i = 0; i < 999 + extra; ++i)
            deep[n++] = ']';
        deep[n++] = '}';
        sg_parsed_t p;
        char err[256] = "";
        static const sg_request_limits_t big = {1 << 20, 8, 64, 100};
        int st = sg_request_parse(deep, n, &big, 0, &p, err, sizeof(err));
        if (extra == 0) {
            assert_int_equal(st, 0);
            sg_parsed_free(&p);
        } else {
            assert_int_equal(st, 400);
            assert_non_null(strstr(err, "nested too deeply"));
        }
    }
}

static void test_strict_json_accepts(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    /* a UTF-8 byte order mark, whitespace around the value, 4-byte UTF-8, every escape, numbers */
    static const char ok[] =
        "\xef\xbb\xbf \r\n\t{\"queries\" : [ \"\xf0\x9f\x98\x80 \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9\" ] ,"
        " \"topk\" : 2 , \"x\" : [-0, 0.5, 1e3, 2E-2, -1.5e+7, true, false, null, {}, []]}\n ";
    assert_int_equal(sg_request_parse(ok, sizeof(ok) - 1, &lim, 0, &p, err, sizeof(err)), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.topk, 2);
    assert_memory_equal(p.arena, "\xf0\x9f\x98\x80 \" \\ / \b \f \n \r \t \xc3\xa9", p.len[0]);
    sg_parsed_free(&p);
}

/* A key given twice keeps its last value, as Python's json (every peer server) does. */
static void test_duplicate_keys_last_wins(void **state)
{
    (void)state;
    sg_parsed_t p;
    char err[256];
    assert_int_equal(
        parse("{\"queries\":[\"first\"],\"topk\":1,\"return_scores\":true,\"queries\":[\"second\",\"third\"],\"topk\":5,"
              "\"return_scores\":false}",
              &p, err),
        0);
    assert_int_equal(p.n, 2);
    assert_memory_equal(p.arena + p.off[0], "second", 6);
    assert_int_equal(p.topk, 5);
    assert_int_equal(p.return_scores, 0);
    sg_parsed_free(&p);
    /* the last value decides validation too */
    assert_int_equal(parse("{\"queries\":[\"a\"],\"topk\":3,\"topk\":\"x\"}", &p, err), 422);
    assert_int_equal(parse("{\"queries\":[1],\"queries\":[\"a\"]}", &p, err), 0);
    sg_parsed_free(&p);
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
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_skyrl_query),
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_body_limit_and_access),
        cmocka_unit_test(test_backend_field),
        cmocka_unit_test(test_strict_json),
        cmocka_unit_test(test_strict_json_accepts),
        cmocka_unit_test(test_duplicate_keys_last_wins),
        cmocka_unit_test(test_search_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
