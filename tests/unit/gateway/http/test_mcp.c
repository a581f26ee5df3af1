/* Unit tests: the pure parts of the MCP endpoint (gateway/http/mcp.c): Accept negotiation and
 * protocol versions. The tools and their text formats: test_mcp_tools.c. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accept), cmocka_unit_test(test_versions)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
