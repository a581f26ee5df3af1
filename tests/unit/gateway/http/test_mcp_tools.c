/*
 * Unit tests: the MCP tools (gateway/http/mcp_tools.c) -- the two text formats of search results,
 * the tool table and its tools/list schemas, tools/call's argument checks, and the tool results built from the pipeline's answers
 * (plain routes through sg_query_start(), a fusion route through sg_fusion_start()). The gateway
 * is fusion_gateway.h's: routes a (the default) and b (with a page store) over a fake plugin the
 * test completes, and the fusion route f over them. mcp_tools.c answers through mcp.c's
 * sg__mcp_item_result/_error/_done, which need a POST of the transport: this binary is linked with
 * -Wl,--wrap for those three (tests/unit/CMakeLists.txt), so the test sees exactly what the tools
 * answer. The transport: test_mcp.c; over HTTP: tests/mcp.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include "mcp.h"
#include "mcp_impl.h"
#include "../routes/fusion_gateway.h"

/* ---- what mcp_tools.c hands the transport (mcp.c), recorded ---- */

typedef struct {
    int results, errors, done; /* calls of each */
    int code;                  /* of the last error */
    char message[400];         /* of the last error */
} item_log_t;

static item_log_t item_log;

/* The tool's result object, kept in item->out as the transport would (inside its envelope). */
void __wrap_sg__mcp_item_result(sg_mcp_item_t *item, const char *result, size_t len);
void __wrap_sg__mcp_item_result(sg_mcp_item_t *item, const char *result, size_t len)
{
    ++item_log.results;
    item->out.len = 0;
    sg_buf_append(&item->out, result, len);
}

void __wrap_sg__mcp_item_error(sg_mcp_item_t *item, int code, const char *message);
void __wrap_sg__mcp_item_error(sg_mcp_item_t *item, int code, const char *message)
{
    ++item_log.errors;
    item->out.len = 0;
    item_log.code = code;
    snprintf(item_log.message, sizeof(item_log.message), "%s", message);
}

void __wrap_sg__mcp_item_done(sg_mcp_item_t *item);
void __wrap_sg__mcp_item_done(sg_mcp_item_t *item)
{
    ++item_log.done;
    item->call = NULL;
}

/* ---- fixture ---- */

static int setup(void **state)
{
    (void)state;
    fg_setup();
    fg_cfg.default_backend = 0;
    fg_cfg.mcp.text_format = SG_MCP_TEXT_SEARCH_R1;
    fg_gen.mcp = sg_mcp_tools_build(&fg_gen);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sg_mcp_tools_free(fg_gen.mcp);
    fg_teardown();
    return 0;
}

static sg_mcp_item_t item;

/* tools/call with `params` (JSON text); returns sg__mcp_tools_call()'s 0 (answered) or 1 (started). */
static int call(const char *params)
{
    sg_buf_free(&item.out);
    memset(&item, 0, sizeof(item));
    memset(&item_log, 0, sizeof(item_log));
    item.id = "7";
    cJSON *p = cJSON_Parse(params);
    assert_non_null(p);
    int rc = sg__mcp_tools_call(&item, &fg_loop, &fg_gen, &fg_client, p);
    cJSON_Delete(p);
    return rc;
}

/* tools/call with `params` is refused at once with -32602 and `message`, nothing searched. */
static void expect_invalid(const char *params, const char *message)
{
    size_t calls = fg_n_calls;
    assert_int_equal(call(params), 0);
    assert_int_equal(item_log.errors, 1);
    assert_int_equal(item_log.results + item_log.done, 0);
    assert_int_equal(item_log.code, SG_MCP_INVALID_PARAMS);
    assert_string_equal(item_log.message, message);
    assert_null(item.call);
    assert_int_equal(fg_n_calls, calls);
}

/* The result object of the last answered call (parsed; the caller deletes it). */
static cJSON *result(void)
{
    assert_int_equal(item_log.results, 1);
    assert_int_equal(item_log.done, 1);
    cJSON *r = cJSON_ParseWithLength(item.out.base, item.out.len);
    assert_true(cJSON_IsObject(r));
    return r;
}

static uint64_t tool_count(const char *tool, const char *outcome)
{
    char l[128];
    snprintf(l, sizeof(l), "tool=\"%s\",outcome=\"%s\"", tool, outcome);
    return atomic_load(
        &sg_metrics_counter("searchgate_mcp_tool_calls_total", "MCP tools/call by tool and outcome (error: isError results).", l)
             ->v);
}

static const char *text_of(const cJSON *r, int i)
{
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "content"), i), "text");
    assert_true(cJSON_IsString(t));
    return t->valuestring;
}

/* ---- the two text formats of search results (mcp.text_format) ---- */

static char *format(int results_json, const char *query, const char *hits_json)
{
    cJSON *hits = cJSON_Parse(hits_json);
    sg_buf_t b = {0};
    sg_buf_append(&b, "", 0);
    int r = results_json ? sg_mcp_format_results_json(&b, query, hits) : sg_mcp_format_search_r1(&b, hits);
    cJSON_Delete(hits);
    if (r != 0) {
        sg_buf_free(&b);
        return NULL;
    }
    return b.base;
}

static void test_search_r1_text(void **state)
{
    (void)state;
    /* scored hits, flat hits, a document with only title/text, one without a newline, none at all */
    char *t =
        format(0, NULL,
               "[{\"document\":{\"id\":\"0\",\"contents\":\"\\\"Evan Morris\\\"\\nEvan L. Morris was a lobbyist.\\nSecond "
               "line.\"},\"score\":0.9},{\"id\":\"1\",\"contents\":\"\\\"Flat\\\"\\nflat text\"},{\"document\":{\"title\":\"T\","
               "\"text\":\"body\"},\"score\":0.1},{\"document\":{\"contents\":\"one line\"}},{\"document\":{}}]");
    assert_non_null(t);
    assert_string_equal(t, "Doc 1(Title: \"Evan Morris\") Evan L. Morris was a lobbyist.\nSecond line.\n"
                           "Doc 2(Title: \"Flat\") flat text\n"
                           "Doc 3(Title: T) body\n"
                           "Doc 4(Title: one line) \n"
                           "Doc 5(Title: ) \n");
    free(t);
    t = format(0, NULL, "[]");
    assert_string_equal(t, "");
    free(t);
    assert_null(format(0, NULL, "{\"a\":1}"));
}

static void test_results_json_text(void **state)
{
    (void)state;
    char *t =
        format(1, "it's [x]",
               "[{\"document\":{\"id\":\"0\",\"contents\":\"\\\"It's [1]\\\"\\nA ] b 'c'\",\"url\":\"https://e/1\"},\"score\":0.5},"
               "{\"document\":{\"contents\":\"\\\"X\\\"\\ny\",\"title\":\"Own title\",\"text\":\"own text\"},\"score\":1}]");
    assert_non_null(t);
    assert_string_equal(
        t, "{\"query\":\"it\\u0027s [x\\u005d\",\"results\":["
           "{\"title\":\"It\\u0027s [1\\u005d\",\"url\":\"https://e/1\",\"content\":\"A \\u005d b \\u0027c\\u0027\",\"score\":0.5},"
           "{\"title\":\"Own title\",\"url\":\"\",\"content\":\"own text\",\"score\":1.0}]}");
    /* still plain JSON */
    cJSON *j = cJSON_Parse(t);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "results"), 0), "content")->valuestring,
                        "A ] b 'c'");
    cJSON_Delete(j);
    free(t);
}

/* ---- the tool table ---- */

static const cJSON *tool_named(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        if (strcmp(cJSON_GetObjectItem(t, "name")->valuestring, name) == 0)
            return t;
    }
    fail_msg("no tool %s", name);
    return NULL;
}

static const cJSON *path(const cJSON *o, const char *a, const char *b, const char *c)
{
    o = cJSON_GetObjectItem(o, a);
    if (b != NULL)
        o = cJSON_GetObjectItem(o, b);
    if (c != NULL)
        o = cJSON_GetObjectItem(o, c);
    assert_non_null(o);
    return o;
}

/* search for the default route, search_<route> for the others and the fusion route, access_<route>
 * for the routes with a page store (a fusion route's through its first such leg), with their
 * input schemas bounded by the limits and their output schemas. */
static void test_tools_list(void **state)
{
    (void)state;
    size_t len;
    const char *list = sg__mcp_tools_list(&fg_gen, &len);
    cJSON *l = cJSON_ParseWithLength(list, len);
    const cJSON *tools = cJSON_GetObjectItem(l, "tools");
    assert_int_equal(cJSON_GetArraySize(tools), 5);
    const char *names[] = {"search", "search_b", "search_f", "access_b", "access_f"};
    for (int i = 0; i < 5; ++i)
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, i), "name")->valuestring, names[i]);

    const cJSON *s = tool_named(tools, "search");
    assert_string_equal(path(s, "title", NULL, NULL)->valuestring, "Search a");
    assert_non_null(strstr(path(s, "description", NULL, NULL)->valuestring, "Search the a route (fake backend)."));
    assert_string_equal(path(s, "inputSchema", "type", NULL)->valuestring, "object");
    assert_string_equal(path(path(s, "inputSchema", "properties", "query"), "type", NULL, NULL)->valuestring, "string");
    const cJSON *queries = path(s, "inputSchema", "properties", "queries");
    assert_int_equal(path(queries, "minItems", NULL, NULL)->valueint, 1);
    assert_int_equal(path(queries, "maxItems", NULL, NULL)->valueint, 4); /* limits.max_queries */
    assert_string_equal(path(queries, "items", "type", NULL)->valuestring, "string");
    const cJSON *topk = path(s, "inputSchema", "properties", "topk");
    assert_string_equal(cJSON_GetArrayItem(path(topk, "type", NULL, NULL), 0)->valuestring, "integer");
    assert_string_equal(cJSON_GetArrayItem(path(topk, "type", NULL, NULL), 1)->valuestring, "null");
    assert_int_equal(path(topk, "minimum", NULL, NULL)->valueint, 0);
    assert_int_equal(path(topk, "maximum", NULL, NULL)->valueint, 20); /* limits.max_topk */
    assert_string_equal(path(topk, "description", NULL, NULL)->valuestring, "Documents per query (0 or absent: the default, 3).");
    assert_null(cJSON_GetObjectItem(path(s, "inputSchema", "properties", NULL), "url"));
    assert_string_equal(path(path(s, "outputSchema", "properties", "result"), "type", NULL, NULL)->valuestring, "array");
    assert_string_equal(path(path(s, "outputSchema", "properties", "result"), "items", "type", NULL)->valuestring, "array");
    assert_string_equal(cJSON_GetArrayItem(path(s, "outputSchema", "required", NULL), 0)->valuestring, "result");
    assert_true(cJSON_IsTrue(path(s, "annotations", "readOnlyHint", NULL)));
    assert_true(cJSON_IsTrue(path(s, "annotations", "idempotentHint", NULL)));

    const cJSON *f = tool_named(tools, "search_f");
    assert_string_equal(path(f, "title", NULL, NULL)->valuestring, "Search f");
    assert_non_null(strstr(path(f, "description", NULL, NULL)->valuestring, "Search the f route (a fusion of other routes)."));

    const cJSON *a = tool_named(tools, "access_f");
    assert_string_equal(path(a, "title", NULL, NULL)->valuestring, "Access pages of f");
    assert_non_null(path(a, "inputSchema", "properties", "url"));
    assert_int_equal(path(path(a, "inputSchema", "properties", "urls"), "maxItems", NULL, NULL)->valueint, 4);
    assert_null(cJSON_GetObjectItem(path(a, "inputSchema", "properties", NULL), "topk"));
    const cJSON *items_type = path(path(a, "outputSchema", "properties", "result"), "items", "type", NULL);
    assert_string_equal(cJSON_GetArrayItem(items_type, 0)->valuestring, "object"); /* a page, or null */
    assert_string_equal(cJSON_GetArrayItem(items_type, 1)->valuestring, "null");
    cJSON_Delete(l);

    /* without a page store anywhere: no access tools; another default route */
    fg_cores[1].serves_access = 0;
    fg_cfg.default_backend = 1;
    sg_mcp_tools_t *other = sg_mcp_tools_build(&fg_gen);
    sg_mcp_tools_t *kept = fg_gen.mcp;
    fg_gen.mcp = other;
    list = sg__mcp_tools_list(&fg_gen, &len);
    l = cJSON_ParseWithLength(list, len);
    tools = cJSON_GetObjectItem(l, "tools");
    assert_int_equal(cJSON_GetArraySize(tools), 3);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "name")->valuestring, "search_a");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 1), "name")->valuestring, "search");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 2), "name")->valuestring, "search_f");
    cJSON_Delete(l);
    fg_gen.mcp = kept;
    sg_mcp_tools_free(other);
    fg_cores[1].serves_access = 1;
    fg_cfg.default_backend = 0;
}

/* ---- tools/call ---- */

/* Malformed calls are JSON-RPC errors (-32602) with what is wrong, before any search. */
static void test_invalid_calls(void **state)
{
    (void)state;
    fg_n_calls = 0;
    expect_invalid("{}", "tools/call: params.name (a string) is required");
    expect_invalid("{\"name\":3}", "tools/call: params.name (a string) is required");
    expect_invalid("{\"name\":\"search_x\"}", "unknown tool: search_x (tools/list names them)");
    expect_invalid("{\"name\":\"search\",\"arguments\":[1]}", "tools/call: params.arguments must be an object");
    const char *topk_msg = "arguments.topk must be an integer in [0, 20] (limits.max_topk; 0 or null: the route's topk)";
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":\"q\",\"topk\":-1}}", topk_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":\"q\",\"topk\":1.5}}", topk_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":\"q\",\"topk\":21}}", topk_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":\"q\",\"topk\":\"3\"}}", topk_msg);
    const char *one_msg = "arguments: give exactly one of query (a string) and queries (an array of strings)";
    expect_invalid("{\"name\":\"search\"}", one_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":null}", one_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":null,\"queries\":null}}", one_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":\"q\",\"queries\":[\"r\"]}}", one_msg);
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"query\":5}}", "arguments.query must be a string");
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"queries\":[]}}",
                   "arguments.queries must be a non-empty array of strings");
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"queries\":\"q\"}}",
                   "arguments.queries must be a non-empty array of strings");
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"queries\":[\"1\",\"2\",\"3\",\"4\",\"5\"]}}",
                   "arguments.queries has 5 entries, over limits.max_queries (4)");
    expect_invalid("{\"name\":\"search\",\"arguments\":{\"queries\":[\"1\",2]}}", "arguments.queries[1] must be a string");
    char params[256], msg[160];
    snprintf(params, sizeof(params), "{\"name\":\"search\",\"arguments\":{\"query\":\"%065d\"}}", 0);
    expect_invalid(params, "arguments.query is 65 bytes, over limits.max_query_bytes (64)");
    snprintf(params, sizeof(params), "{\"name\":\"search_f\",\"arguments\":{\"queries\":[\"ok\",\"%065d\"]}}", 0);
    expect_invalid(params, "arguments.queries[] is 65 bytes, over limits.max_query_bytes (64)");
    snprintf(msg, sizeof(msg), "arguments: give exactly one of url (a string) and urls (an array of strings)");
    expect_invalid("{\"name\":\"access_b\",\"arguments\":{\"query\":\"q\"}}", msg);
    expect_invalid("{\"name\":\"access_f\",\"arguments\":{\"urls\":[7]}}", "arguments.urls[0] must be a string");
    /* a query of exactly the limit is searched */
    snprintf(params, sizeof(params), "{\"name\":\"search\",\"arguments\":{\"query\":\"%064d\",\"topk\":0}}", 0);
    assert_int_equal(call(params), 1);
    assert_int_equal(fg_n_calls, 1);
    assert_int_equal(fg_calls[0].s->topk, 3); /* 0: the route's default */
    fg_complete(0, "A");
    fg_run_loop();
    cJSON_Delete(result());
}

/* A search: the documents as Search-R1 text (one content item per query) and as the scored
 * lists of /retrieve in structuredContent.result, isError false; topk reaches the backend. */
static void test_search_result(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t ok = tool_count("search", "ok");
    assert_int_equal(call("{\"name\":\"search\",\"arguments\":{\"queries\":[\"sr x\",\"sr y\"],\"topk\":2}}"), 1);
    assert_non_null(item.call);
    assert_int_equal(item_log.results + item_log.errors + item_log.done, 0);
    assert_int_equal(fg_n_calls, 1);
    assert_int_equal(fg_calls[0].route, 0);
    assert_int_equal(fg_calls[0].s->topk, 2);
    assert_int_equal(fg_calls[0].s->n_queries, 2);
    fg_complete(0, "A,B");
    fg_run_loop();
    cJSON *r = result();
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "content")), 2);
    assert_string_equal(text_of(r, 0), "Doc 1(Title: A) body of A\nDoc 2(Title: B) body of B\n");
    assert_string_equal(text_of(r, 1), "Doc 1(Title: A) body of A\nDoc 2(Title: B) body of B\n");
    const cJSON *lists = path(r, "structuredContent", "result", NULL);
    assert_int_equal(cJSON_GetArraySize(lists), 2);
    const cJSON *hit = cJSON_GetArrayItem(cJSON_GetArrayItem(lists, 1), 1);
    assert_string_equal(path(hit, "document", "id", NULL)->valuestring, "B");
    assert_true(path(hit, "score", NULL, NULL)->valuedouble == 0.5);
    assert_int_equal(tool_count("search", "ok"), ok + 1);
    cJSON_Delete(r);

    /* mcp.text_format "results_json": the text is the query and its results as JSON */
    fg_cfg.mcp.text_format = SG_MCP_TEXT_RESULTS_JSON;
    sg_mcp_tools_t *kept = fg_gen.mcp;
    fg_gen.mcp = sg_mcp_tools_build(&fg_gen);
    assert_int_equal(call("{\"name\":\"search\",\"arguments\":{\"query\":\"sr z\"}}"), 1);
    fg_complete(fg_call_of(0, 1), "A");
    fg_run_loop();
    r = result();
    cJSON *text = cJSON_Parse(text_of(r, 0));
    assert_string_equal(path(text, "query", NULL, NULL)->valuestring, "sr z");
    assert_true(cJSON_IsArray(path(text, "results", NULL, NULL)));
    cJSON_Delete(text);
    cJSON_Delete(r);
    sg_mcp_tools_free(fg_gen.mcp);
    fg_gen.mcp = kept;
    fg_cfg.mcp.text_format = SG_MCP_TEXT_SEARCH_R1;
}

/* A failed search is a tool result with isError true (what an agent reads), not a JSON-RPC error. */
static void test_search_failure_is_a_tool_error(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t failed = tool_count("search_b", "error");
    assert_int_equal(call("{\"name\":\"search_b\",\"arguments\":{\"query\":\"sf x\"}}"), 1);
    assert_int_equal(fg_calls[0].route, 1);
    fg_fail(0, SG_EUNAVAIL, "down", 5);
    fg_run_loop();
    cJSON *r = result();
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")));
    assert_string_equal(text_of(r, 0), "search_b failed (503 unavailable): backend b: down; retry after 5 s");
    assert_null(cJSON_GetObjectItem(r, "structuredContent"));
    assert_int_equal(tool_count("search_b", "error"), failed + 1);
    cJSON_Delete(r);
}

/* A fusion route's search fans out through sg_fusion_start(): the fused lists come back. */
static void test_fusion_search(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t ok = tool_count("search_f", "ok"), f200 = fg_requests(200);
    assert_int_equal(call("{\"name\":\"search_f\",\"arguments\":{\"query\":\"fs x\",\"topk\":null}}"), 1);
    assert_int_equal(fg_n_calls, 2);
    fg_complete(fg_call_of(0, 0), "A,B,D");
    fg_complete(fg_call_of(1, 0), "B,C");
    fg_run_loop();
    cJSON *r = result();
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(r, "isError")));
    const cJSON *list = cJSON_GetArrayItem(path(r, "structuredContent", "result", NULL), 0);
    assert_int_equal(cJSON_GetArraySize(list), 3);
    assert_string_equal(path(cJSON_GetArrayItem(list, 0), "document", "id", NULL)->valuestring, "B");
    assert_string_equal(path(cJSON_GetArrayItem(list, 1), "document", "id", NULL)->valuestring, "A");
    assert_string_equal(path(cJSON_GetArrayItem(list, 2), "document", "id", NULL)->valuestring, "C");
    assert_string_equal(text_of(r, 0), "Doc 1(Title: B) body of B\nDoc 2(Title: A) body of A\nDoc 3(Title: C) body of C\n");
    assert_int_equal(tool_count("search_f", "ok"), ok + 1);
    assert_int_equal(fg_requests(200), f200 + 1); /* counted on the fusion route like a /retrieve */
    cJSON_Delete(r);
}

/* A tool result over limits.max_response_bytes is a too_large tool error, counted as one. */
static void test_result_too_large(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t exact = atomic_load(&fg_too_large_exact.v), failed = tool_count("search", "error");
    fg_cfg.limits.max_response_bytes = 150; /* the scored list fits; with its text and envelope it does not */
    assert_int_equal(call("{\"name\":\"search\",\"arguments\":{\"query\":\"tl x\"}}"), 1);
    fg_complete(0, "A");
    fg_run_loop();
    fg_cfg.limits.max_response_bytes = 0;
    cJSON *r = result();
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "isError")));
    unsigned long long size = 0;
    assert_int_equal(sscanf(text_of(r, 0), "too_large: the result is %llu bytes", &size), 1);
    assert_true(size > 150);
    assert_non_null(strstr(text_of(r, 0), "over limits.max_response_bytes (150): ask for fewer queries or a smaller topk"));
    assert_int_equal(atomic_load(&fg_too_large_exact.v), exact + 1);
    assert_int_equal(tool_count("search", "error"), failed + 1);
    cJSON_Delete(r);
}

/* The caller went away: the call's searches are cancelled and nothing is answered. */
static void test_cancel(void **state)
{
    (void)state;
    fg_n_calls = 0;
    assert_int_equal(call("{\"name\":\"search\",\"arguments\":{\"query\":\"cn x\"}}"), 1);
    sg__mcp_tools_cancel(&item);
    assert_null(item.call);
    assert_true(fg_calls[0].cancelled);
    fg_complete(0, "A");
    fg_run_loop();
    assert_int_equal(item_log.results + item_log.errors + item_log.done, 0);

    assert_int_equal(call("{\"name\":\"search_f\",\"arguments\":{\"queries\":[\"cn y\"]}}"), 1);
    assert_int_equal(fg_n_calls, 3);
    sg__mcp_tools_cancel(&item);
    assert_true(fg_calls[1].cancelled);
    assert_true(fg_calls[2].cancelled);
    fg_complete(1, "A");
    fg_complete(2, "B");
    fg_run_loop();
    assert_int_equal(item_log.results + item_log.errors + item_log.done, 0);
    sg__mcp_tools_cancel(&item); /* nothing pending: a no-op */
    sg_buf_free(&item.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_r1_text), cmocka_unit_test(test_results_json_text),
        cmocka_unit_test(test_tools_list),     cmocka_unit_test(test_invalid_calls),
        cmocka_unit_test(test_search_result),  cmocka_unit_test(test_search_failure_is_a_tool_error),
        cmocka_unit_test(test_fusion_search),  cmocka_unit_test(test_result_too_large),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
