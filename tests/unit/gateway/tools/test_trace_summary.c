/*
 * Unit tests: gateway/tools/trace_summary.c, `searchgate-trace summary` (sg__tool_summary) on small
 * traces the test writes: the exact text and --json output per client and route and over all
 * (queries, requests, distinct queries and repeat rate, zero hits, empty observations, errors by
 * type, latency percentiles, cache outcomes, top queries), malformed lines counted, --top, the
 * comparison of a second trace with the first (identical top-k, recall@k, top-1 changes), and the
 * bad arguments' messages and exit codes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include "tool_test.h"
#include "trace_tool.h"

/* alice on wiki: a request of two queries (one with no hit), the first again from the cache
 * (with an empty observation); bob on news: one refused (by its hash: no text in the trace), one
 * failed without an error type, an /access line; a line cut short, a JSON array, a blank line */
#define T1                                                                                                                         \
    "{\"request\":\"r1\",\"i\":0,\"n\":2,\"client\":\"alice\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":2,"                  \
    "\"query\":\"q one\",\"hits\":2,\"ids\":[\"d1\",\"d2\"],\"status\":200,\"ms\":4,\"cache\":\"miss\"}\n"                         \
    "{\"request\":\"r1\",\"i\":1,\"n\":2,\"client\":\"alice\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":2,"                  \
    "\"query\":\"q two\",\"hits\":0,\"ids\":[],\"status\":200,\"ms\":4,\"cache\":\"miss\"}\n"                                      \
    "{\"request\":\"r2\",\"i\":0,\"n\":1,\"client\":\"alice\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":2,"                  \
    "\"query\":\"q one\",\"hits\":2,\"ids\":[\"d1\",\"d2\"],\"status\":200,\"ms\":1,\"cache\":\"hit\",\"empty\":true}\n"           \
    "{\"request\":\"r3\",\"i\":0,\"n\":1,\"client\":\"bob\",\"route\":\"news\",\"op\":\"retrieve\",\"query_hash\":\"ab12\","       \
    "\"status\":429,\"error\":\"rate_limited\",\"ms\":0.5}\n"                                                                      \
    "{\"request\":\"r4\",\"i\":0,\"n\":1,\"client\":\"bob\",\"route\":\"news\",\"op\":\"retrieve\",\"query\":\"q three\","         \
    "\"status\":503,\"ms\":10}\n"                                                                                                  \
    "{\"request\":\"r5\",\"client\":\"bob\",\"route\":\"news\",\"op\":\"access\",\"status\":200,\"ms\":2}\n"                       \
    "{\"request\":\"r6\",\"i\":0,\"n\":1,\"client\":\"al\n"                                                                        \
    "[1,2]\n"                                                                                                                      \
    "\r\n"

/* the same queries against another index: q one's top-1 changed (the same two ids, swapped), q two
 * still nothing, q four only here */
#define T2                                                                                                                         \
    "{\"request\":\"x1\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"query\":\"q one\","                            \
    "\"ids\":[\"d2\",\"d1\"],\"status\":200,\"ms\":3}\n"                                                                           \
    "{\"request\":\"x2\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"query\":\"q two\",\"ids\":[],"                 \
    "\"status\":200,\"ms\":3}\n"                                                                                                   \
    "{\"request\":\"x3\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"query\":\"q four\",\"ids\":[\"d9\"],"          \
    "\"status\":200,\"ms\":5}\n"

static int setup(void **state)
{
    (void)state;
    tool_dir_make();
    tool_write("t1.jsonl", T1);
    tool_write("t2.jsonl", T2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tool_dir_remove();
    return 0;
}

static int summary(const char *const *args, char **out, char **err)
{
    return tool_run(sg__tool_summary, args, out, err);
}

static void test_text(void **state)
{
    (void)state;
    char *out, *err, t1[128];
    snprintf(t1, sizeof(t1), "%s", tool_path("t1.jsonl"));
    const char *args[] = {"summary", t1, NULL};
    assert_int_equal(summary(args, &out, &err), 0);
    char want[4096];
    snprintf(want, sizeof(want),
             "trace %s: 6 lines, 2 malformed\n"
             "client alice, route wiki\n"
             "  queries 3  requests 2  distinct 2  repeat rate 33.3%%\n"
             "  zero hits 33.3%%  empty observations 33.3%%  errors 0.0%%\n"
             "  latency ms  p50 1.000  p90 4.000  p99 4.000  max 4.000\n"
             "  cache:  miss 66.7%%  hit 33.3%%\n"
             "  top queries:      2  \"q one\"\n"
             "                    1  \"q two\"\n"
             "client bob, route news\n"
             "  queries 3  requests 3  distinct 2  repeat rate 33.3%%\n"
             "  zero hits 0.0%%  empty observations 0.0%%  errors 66.7%%\n"
             "  latency ms  p50 2.000  p90 10.000  p99 10.000  max 10.000\n"
             "  errors by type:  http_503 50.0%%  rate_limited 50.0%%\n"
             "  top queries:      1  \"#ab12\"\n"
             "                    1  \"q three\"\n"
             "all clients and routes\n"
             "  queries 6  requests 5  distinct 4  repeat rate 33.3%%\n"
             "  zero hits 25.0%%  empty observations 25.0%%  errors 33.3%%\n"
             "  latency ms  p50 2.000  p90 10.000  p99 10.000  max 10.000\n"
             "  errors by type:  http_503 50.0%%  rate_limited 50.0%%\n"
             "  cache:  miss 33.3%%  hit 16.7%%\n"
             "  top queries:      2  \"q one\"\n"
             "                    1  \"#ab12\"\n"
             "                    1  \"q three\"\n"
             "                    1  \"q two\"\n",
             t1);
    assert_string_equal(out, want);
    assert_string_equal(err, "");
    free(out);
    free(err);
}

/* a second trace is compared with the first, after both traces' own summaries */
static void test_compare_text(void **state)
{
    (void)state;
    char *out, *err, t1[128], t2[128], want[1024];
    snprintf(t1, sizeof(t1), "%s", tool_path("t1.jsonl"));
    snprintf(t2, sizeof(t2), "%s", tool_path("t2.jsonl"));
    const char *args[] = {"summary", t1, t2, NULL};
    assert_int_equal(summary(args, &out, &err), 0);
    snprintf(want, sizeof(want), "trace %s: 3 lines, 0 malformed\nclient replay, route wiki\n", t2);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want),
             "%s against %s: 2 distinct queries answered in both (0 only in the first, 1 only in the second)\n"
             "  identical top-k 50.0%%  recall@k 1.000  top-1 changed 50.0%% (1)\n"
             "  \"q one\": top-1 \"d1\" -> \"d2\"\n",
             t2, t1);
    size_t n = strlen(out), m = strlen(want);
    assert_true(n > m);
    assert_string_equal(out + n - m, want); /* the last thing printed */
    assert_string_equal(err, "");
    free(out);
    free(err);
}

static const cJSON *at(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL)
        fail_msg("no \"%s\"", key);
    return v;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = at(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void test_json(void **state)
{
    (void)state;
    char *out, *err, t1[128], t2[128];
    snprintf(t1, sizeof(t1), "%s", tool_path("t1.jsonl"));
    snprintf(t2, sizeof(t2), "%s", tool_path("t2.jsonl"));
    const char *args[] = {"summary", "--json", "--top", "1", t1, t2, NULL};
    assert_int_equal(summary(args, &out, &err), 0);
    assert_string_equal(err, "");
    cJSON *doc = cJSON_Parse(out);
    assert_non_null(doc);
    const cJSON *traces = at(doc, "traces"), *t = cJSON_GetArrayItem(traces, 0);
    assert_int_equal(cJSON_GetArraySize(traces), 2);
    assert_string_equal(at(t, "file")->valuestring, t1);
    assert_true(num(t, "lines") == 6 && num(t, "malformed") == 2);
    const cJSON *bob = cJSON_GetArrayItem(at(t, "groups"), 1);
    assert_string_equal(at(bob, "client")->valuestring, "bob");
    assert_string_equal(at(bob, "route")->valuestring, "news");
    assert_true(num(bob, "queries") == 3 && num(bob, "requests") == 3 && num(bob, "answered") == 1);
    assert_true(num(bob, "errors") == 2 && num(bob, "zero_hits") == 0);
    char *ebt = cJSON_PrintUnformatted(at(bob, "errors_by_type"));
    assert_string_equal(ebt, "{\"http_503\":1,\"rate_limited\":1}");
    free(ebt);
    char *tq = cJSON_PrintUnformatted(at(bob, "top_queries")); /* --top 1 */
    assert_string_equal(tq, "[{\"query\":\"#ab12\",\"count\":1}]");
    free(tq);
    const cJSON *all = at(t, "all");
    assert_null(cJSON_GetObjectItemCaseSensitive(all, "client"));
    assert_true(num(all, "distinct") == 4 && num(all, "zero_hits") == 1 && num(all, "empty") == 1);
    assert_true(fabs(num(all, "repeat_rate") - 1.0 / 3.0) < 1e-9);
    char *lat = cJSON_PrintUnformatted(at(all, "latency_ms"));
    assert_string_equal(lat, "{\"p50\":2,\"p90\":10,\"p99\":10,\"max\":10}");
    free(lat);
    char *cache = cJSON_PrintUnformatted(at(all, "cache"));
    assert_string_equal(cache, "{\"miss\":2,\"hit\":1}");
    free(cache);
    const cJSON *c = cJSON_GetArrayItem(at(doc, "comparisons"), 0);
    assert_int_equal(cJSON_GetArraySize(at(doc, "comparisons")), 1);
    assert_true(num(c, "compared") == 2 && num(c, "only_old") == 0 && num(c, "only_new") == 1);
    assert_true(num(c, "identical") == 1 && num(c, "identical_share") == 0.5 && num(c, "recall_at_k") == 1);
    assert_true(num(c, "top1_changed") == 1 && num(c, "top1_changed_share") == 0.5);
    char *ex = cJSON_PrintUnformatted(at(c, "examples"));
    assert_string_equal(ex, "[{\"query\":\"q one\",\"old_top1\":\"d1\",\"new_top1\":\"d2\"}]");
    free(ex);
    cJSON_Delete(doc);
    free(out);
    free(err);
}

/* recall@k counts the old top-k found in the new list's first k; --top 0 keeps no examples */
static void test_recall(void **state)
{
    (void)state;
    tool_write("old.jsonl", "{\"query\":\"a\",\"ids\":[1,2,3,4]}\n{\"query\":\"b\",\"ids\":[\"x\",null]}\n"
                            "{\"query\":\"a\",\"ids\":[9]}\n{\"query\":\"c\",\"ids\":[1],\"status\":500}\n");
    tool_write("new.jsonl", "{\"query\":\"a\",\"ids\":[4,1,7,8,2]}\n{\"query\":\"b\",\"ids\":[\"x\",null]}\n"
                            "{\"query\":\"c\",\"ids\":[1]}\n{\"query\":\"d\",\"op\":\"access\",\"ids\":[1]}\n");
    char *out, *err, o[128], n[128];
    snprintf(o, sizeof(o), "%s", tool_path("old.jsonl"));
    snprintf(n, sizeof(n), "%s", tool_path("new.jsonl"));
    const char *args[] = {"summary", "--json", "--top", "0", o, n, NULL};
    assert_int_equal(summary(args, &out, &err), 0);
    cJSON *doc = cJSON_Parse(out);
    assert_non_null(doc);
    const cJSON *c = cJSON_GetArrayItem(at(doc, "comparisons"), 0);
    /* a: the first answer counts ([1,2,3,4]); 1 and 4 in the new first 4 -> 0.5; b: identical,
     * null ids equal each other but never count as found -> 0.5; c failed in the old trace, d is
     * no /retrieve answer */
    assert_true(num(c, "compared") == 2 && num(c, "only_old") == 0 && num(c, "only_new") == 1);
    assert_true(num(c, "identical") == 1 && num(c, "recall_at_k") == 0.5 && num(c, "top1_changed") == 1);
    assert_int_equal(cJSON_GetArraySize(at(c, "examples")), 0);
    assert_int_equal(cJSON_GetArraySize(at(at(cJSON_GetArrayItem(at(doc, "traces"), 0), "all"), "top_queries")), 0);
    cJSON_Delete(doc);
    free(out);
    free(err);
}

/* "-" reads standard input */
static void test_stdin(void **state)
{
    (void)state;
    int saved = dup(0), f = open(tool_path("t1.jsonl"), O_RDONLY);
    assert_true(saved >= 0 && f >= 0);
    dup2(f, 0);
    close(f);
    clearerr(stdin);
    char *out, *err;
    const char *args[] = {"summary", "-", NULL};
    int rc = summary(args, &out, &err);
    dup2(saved, 0);
    close(saved);
    clearerr(stdin);
    assert_int_equal(rc, 0);
    assert_int_equal(strncmp(out, "trace -: 6 lines, 2 malformed\nclient alice, route wiki\n", 55), 0);
    free(out);
    free(err);
}

static void check_fails(const char *const *args, int rc, const char *want_err)
{
    tool_check_fails(sg__tool_summary, args, rc, want_err);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    const char *usage = "usage: searchgate-trace summary [--top N] [--json] TRACE [TRACE...]\n";
    check_fails((const char *const[]){"summary", NULL}, 2, usage);
    check_fails((const char *const[]){"summary", "--json", NULL}, 2, usage);
    check_fails((const char *const[]){"summary", "--bogus", "t", NULL}, 2,
                "searchgate-trace summary: bad option --bogus (see --help)\n");
    check_fails((const char *const[]){"summary", "--top", "x", "t", NULL}, 2,
                "searchgate-trace summary: bad option --top (see --help)\n");
    check_fails((const char *const[]){"summary", "--top", "-1", "t", NULL}, 2,
                "searchgate-trace summary: bad option --top (see --help)\n");
    check_fails((const char *const[]){"summary", "t", "--top", NULL}, 1, /* options come first: a file */
                "searchgate-trace: cannot open t: No such file or directory\n");
    char t1[128], missing[128], want[300];
    snprintf(t1, sizeof(t1), "%s", tool_path("t1.jsonl"));
    snprintf(missing, sizeof(missing), "%s", tool_path("missing.jsonl"));
    snprintf(want, sizeof(want), "searchgate-trace: cannot open %s: No such file or directory\n", missing);
    check_fails((const char *const[]){"summary", t1, missing, NULL}, 1, want); /* nothing printed */
    snprintf(want, sizeof(want), "searchgate-trace: cannot read %s: Is a directory\n", tool_dir);
    check_fails((const char *const[]){"summary", tool_dir, NULL}, 1, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),   cmocka_unit_test(test_compare_text), cmocka_unit_test(test_json),
        cmocka_unit_test(test_recall), cmocka_unit_test(test_stdin),        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
