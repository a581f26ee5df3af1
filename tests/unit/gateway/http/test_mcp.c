/* Unit tests: the pure parts of the MCP endpoint (gateway/http/mcp.c, gateway/http/mcp_tools.c): Accept
 * negotiation, protocol versions, and the two text formats of search results. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "mcp.h"

static int acc(const char *s)
{
    return sg_mcp_accept(s, s != NULL ? strlen(s) : 0);
}

static void test_accept(void **state)
{
    (void)state;
    assert_int_equal(acc(NULL), 1);
    assert_int_equal(acc(""), 1);
    assert_int_equal(acc("application/json, text/event-stream"), 1); /* what the SDKs send: a tie, JSON wins */
    assert_int_equal(acc("text/event-stream, application/json"), 1);
    assert_int_equal(acc("text/event-stream"), 2);
    assert_int_equal(acc("TEXT/Event-Stream ; charset=utf-8"), 2);
    assert_int_equal(acc("application/json;q=0.5, text/event-stream"), 2);
    assert_int_equal(acc("application/json; q=0.9 ,text/event-stream;q=0.8"), 1);
    assert_int_equal(acc("*/*"), 1);
    assert_int_equal(acc("application/*"), 1);
    assert_int_equal(acc("text/*"), 2);
    assert_int_equal(acc("*/*;q=0.1, application/json;q=0"), 2); /* the exact range decides for JSON */
    assert_int_equal(acc("text/html"), 0);
    assert_int_equal(acc("application/json;q=0, text/event-stream;q=0"), 0);
    assert_int_equal(acc("application/json;q=abc"), 0);
    assert_int_equal(acc("application/jsonx, image/*"), 0);
}

static void test_versions(void **state)
{
    (void)state;
    assert_string_equal(sg_mcp_negotiate("2025-06-18"), "2025-06-18");
    assert_string_equal(sg_mcp_negotiate("2025-03-26"), "2025-03-26");
    assert_string_equal(sg_mcp_negotiate("2024-11-05"), "2024-11-05");
    assert_string_equal(sg_mcp_negotiate("2025-11-25"), "2025-06-18");
    assert_string_equal(sg_mcp_negotiate("garbage"), "2025-06-18");
    assert_string_equal(sg_mcp_negotiate(NULL), "2025-06-18");
    assert_true(sg_mcp_version_supported("2025-03-26", 10));
    assert_false(sg_mcp_version_supported("2025-03-2", 9));
    assert_false(sg_mcp_version_supported("2025-11-25", 10));
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accept), cmocka_unit_test(test_versions),
                                       cmocka_unit_test(test_search_r1_text), cmocka_unit_test(test_results_json_text)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
