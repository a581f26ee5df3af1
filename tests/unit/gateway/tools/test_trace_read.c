/*
 * Unit tests: gateway/tools/trace_read.c, what searchgate-trace's commands share: sg__tool_read
 * (every JSON object line handed over in order, CRLF and blank lines, malformed lines counted and
 * skipped, a callback that stops, files that cannot be read), sg__tool_str, sg__tool_num and
 * sg__tool_id_text (the JSON text of an id, NULL for null).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "tool_test.h"
#include "trace_tool.h"

static int setup(void **state)
{
    (void)state;
    tool_dir_make();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tool_dir_remove();
    return 0;
}

typedef struct {
    sg_buf_t seen; /* each line's "q", one per line */
    int stop_after;
} seen_t;

static int on_line(void *ctx, const cJSON *l)
{
    seen_t *s = ctx;
    const char *q = sg__tool_str(l, "q");
    sg_buf_appendf(&s->seen, "%s|", q != NULL ? q : "?");
    return --s->stop_after == 0;
}

static seen_t *cur;
static uint64_t cur_malformed;

/* sg__tool_read as a command (argv[1]: the path), for tool_run's capture of stderr */
static int read_cmd(int argc, char **argv)
{
    assert_int_equal(argc, 2);
    return sg__tool_read(argv[1], on_line, cur, &cur_malformed);
}

static int read_path(const char *path, seen_t *s, char **err)
{
    char *out, p[128];
    snprintf(p, sizeof(p), "%s", path);
    cur = s;
    cur_malformed = 0;
    const char *args[] = {"read", p, NULL};
    int rc = tool_run(read_cmd, args, &out, err);
    assert_string_equal(out, "");
    free(out);
    return rc;
}

static void test_read_lines(void **state)
{
    (void)state;
    tool_write("t.jsonl", "{\"q\":\"a\"}\n"
                          "\n"
                          "{\"q\":\"b\"}\r\n"
                          "not json\n"
                          "{\"q\":\"c\",\"cut\n"
                          "\"a string\"\n"
                          "[{\"q\":\"in an array\"}]\n"
                          "\r\n"
                          "{\"x\":1}\n"
                          "{\"q\":\"last, no newline\"}");
    seen_t s = {{0}, -1};
    char *err;
    assert_int_equal(read_path(tool_path("t.jsonl"), &s, &err), 0);
    assert_string_equal(s.seen.base, "a|b|?|last, no newline|");
    assert_int_equal(cur_malformed, 4); /* not json, the cut line, the string, the array */
    assert_string_equal(err, "");
    free(err);
    sg_buf_free(&s.seen);
    /* a long line (past any first buffer) */
    sg_buf_t big = {0};
    sg_buf_appends(&big, "{\"q\":\"");
    for (int i = 0; i < 100000; ++i)
        sg_buf_appendc(&big, (char)('a' + i % 26));
    sg_buf_appends(&big, "\"}\n{\"q\":\"z\"}\n");
    tool_write("big.jsonl", big.base);
    sg_buf_free(&big);
    seen_t b = {{0}, -1};
    assert_int_equal(read_path(tool_path("big.jsonl"), &b, &err), 0);
    assert_int_equal(b.seen.len, 100000 + 1 + 2);
    assert_string_equal(b.seen.base + 100001, "z|");
    assert_int_equal(cur_malformed, 0);
    free(err);
    sg_buf_free(&b.seen);
}

/* a callback that returns non-zero stops the reading: -1, and no line after it */
static void test_read_stop(void **state)
{
    (void)state;
    tool_write("s.jsonl", "{\"q\":\"a\"}\n{\"q\":\"b\"}\nbad\n{\"q\":\"c\"}\n");
    seen_t s = {{0}, 2};
    char *err;
    assert_int_equal(read_path(tool_path("s.jsonl"), &s, &err), -1);
    assert_string_equal(s.seen.base, "a|b|");
    assert_int_equal(cur_malformed, 0);
    assert_string_equal(err, ""); /* the callback says why, not the reader */
    free(err);
    sg_buf_free(&s.seen);
}

static void test_read_errors(void **state)
{
    (void)state;
    seen_t s = {{0}, -1};
    char *err, want[300], missing[128];
    snprintf(missing, sizeof(missing), "%s", tool_path("missing.jsonl"));
    assert_int_equal(read_path(missing, &s, &err), -1);
    snprintf(want, sizeof(want), "searchgate-trace: cannot open %s: No such file or directory\n", missing);
    assert_string_equal(err, want);
    free(err);
    assert_int_equal(read_path(tool_dir, &s, &err), -1);
    snprintf(want, sizeof(want), "searchgate-trace: cannot read %s: Is a directory\n", tool_dir);
    assert_string_equal(err, want);
    free(err);
    assert_null(s.seen.base);
    tool_write("empty.jsonl", "");
    assert_int_equal(read_path(tool_path("empty.jsonl"), &s, &err), 0);
    assert_null(s.seen.base);
    assert_int_equal(cur_malformed, 0);
    free(err);
}

static void test_members(void **state)
{
    (void)state;
    cJSON *o = cJSON_Parse("{\"s\":\"text\",\"e\":\"\",\"n\":2.5,\"z\":0,\"t\":true,\"nul\":null,\"S\":\"case\","
                           "\"ns\":\"7\",\"arr\":[1]}");
    assert_non_null(o);
    assert_string_equal(sg__tool_str(o, "s"), "text");
    assert_string_equal(sg__tool_str(o, "e"), "");
    assert_null(sg__tool_str(o, "n")); /* not a string */
    assert_null(sg__tool_str(o, "nul"));
    assert_null(sg__tool_str(o, "none"));
    assert_string_equal(sg__tool_str(o, "S"), "case"); /* names are case-sensitive */
    assert_null(sg__tool_str(o, "NS"));
    assert_null(sg__tool_str(NULL, "s"));
    assert_true(sg__tool_num(o, "n", -1) == 2.5);
    assert_true(sg__tool_num(o, "z", -1) == 0);
    assert_true(sg__tool_num(o, "ns", -1) == -1); /* a string of digits is no number */
    assert_true(sg__tool_num(o, "t", -1) == -1);
    assert_true(sg__tool_num(o, "nul", 42) == 42);
    assert_true(sg__tool_num(o, "none", 7) == 7);
    assert_true(sg__tool_num(NULL, "n", 3) == 3);
    cJSON_Delete(o);
}

static void test_id_text(void **state)
{
    (void)state;
    const char *ids[][2] = {{"\"doc-1\"", "\"doc-1\""},   {"17", "17"},     {"1.5", "1.5"},
                            {"\"a\\\"b\"", "\"a\\\"b\""}, {"true", "true"}, {"{\"k\": [1, 2]}", "{\"k\":[1,2]}"}};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); ++i) {
        cJSON *v = cJSON_Parse(ids[i][0]);
        assert_non_null(v);
        char *t = sg__tool_id_text(v);
        assert_string_equal(t, ids[i][1]);
        free(t);
        cJSON_Delete(v);
    }
    cJSON *n = cJSON_CreateNull();
    assert_null(sg__tool_id_text(n));
    cJSON_Delete(n);
    assert_null(sg__tool_id_text(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_lines), cmocka_unit_test(test_read_stop), cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_members),    cmocka_unit_test(test_id_text),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
