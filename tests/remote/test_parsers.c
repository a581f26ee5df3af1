/*
 * test_parsers.c -- unit tests of the pure parts of the remote backends: slime's snippet
 * formatting, the serper and upstream reply parsers, the page reader's request URL and reply
 * parser (Jina Reader's two reply forms), and the JSON/UTF-8 helpers of http.c.
 * Expected strings come from running slime's Python code on the same inputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "reader_parse.h"
#include "serper_parse.h"
#include "upstream_parse.h"

static char *context_of(const char *s)
{
    sg_buf_t b = {0};
    sg_buf_append(&b, "", 0);
    sg_serper_context(s, strlen(s), &b);
    return b.base;
}

static void check_context(const char *in, const char *want)
{
    char *got = context_of(in);
    assert_string_equal(got, want);
    free(got);
}

static void test_snippet_fragments(void **state)
{
    (void)state;
    check_context("one two three four five six", "one two three four five six");
    check_context("one two three four five", "");
    check_context("  lead and trail spaces six words here   ", "lead and trail spaces six words here");
    check_context("a b c d e f ... g h i ... j k l m n o p", "a b c d e f j k l m n o p");
    check_context(".....one two three four five six seven", "..one two three four five six seven");
    /* NBSP separates words for Python's split() but is kept inside the fragment */
    check_context("x\xc2\xa0y\xc2\xa0z\xc2\xa0w\xc2\xa0v\xc2\xa0u", "x\xc2\xa0y\xc2\xa0z\xc2\xa0w\xc2\xa0v\xc2\xa0u");
    /* U+200B is not whitespace: "x\u200by" is one word, so there are exactly six */
    check_context("x\xe2\x80\x8by z w v u t", "x\xe2\x80\x8by z w v u t");
    check_context("tab\tseparated\twords\tare\tsix\there", "tab\tseparated\twords\tare\tsix\there");
    check_context("", "");
    check_context("...", "");
    check_context("ends with dots one two three four five six ...", "ends with dots one two three four five six");
    /* U+3000 ideographic space is stripped at both ends */
    check_context("\xe3\x80\x80 a b c d e f \xe3\x80\x80", "a b c d e f");
    /* invalid UTF-8 is a non-space byte, never a crash */
    check_context("\xff one two three four five", "\xff one two three four five");
}

static void test_py_isspace(void **state)
{
    (void)state;
    static const uint32_t spaces[] = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                                      0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                      0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
    size_t n = 0;
    for (uint32_t c = 0; c < 0x110000; ++c)
        n += sg_serper_py_isspace(c) != 0;
    assert_int_equal(n, sizeof(spaces) / sizeof(spaces[0]));
    for (size_t i = 0; i < sizeof(spaces) / sizeof(spaces[0]); ++i)
        assert_true(sg_serper_py_isspace(spaces[i]));
    assert_false(sg_serper_py_isspace(0x200b));
    assert_false(sg_serper_py_isspace(0xfeff));
}

static cJSON *doc_json(const sg_serper_docs_t *d, size_t i)
{
    cJSON *o = cJSON_ParseWithLength(d->docs[i].json, d->docs[i].len);
    assert_non_null(o);
    return o;
}

static const char *field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static void test_serper_reply(void **state)
{
    (void)state;
    const char *body = "{\"searchParameters\":{\"q\":\"x\"},\"organic\":["
                       "{\"title\":\"Hamlet\",\"link\":\"https://w/H\",\"snippet\":\"Hamlet is a tragedy by William "
                       "Shakespeare ... short\",\"position\":1},"
                       "{\"title\":\"Short\",\"snippet\":\"too short\",\"position\":2},"
                       "{\"snippet\":\"no title but a long enough snippet text\",\"position\":3},"
                       "{\"title\":\"\",\"snippet\":\"tiny\"},"
                       "42,"
                       "{\"title\":\"Quote \\\" and \\\\ and \\u00e9\",\"snippet\":null,\"link\":7,\"position\":9}"
                       "]}";
    sg_serper_docs_t d;
    char err[128];
    assert_int_equal(sg_serper_parse_reply(body, strlen(body), 10, &d, err, sizeof(err)), 0);
    assert_int_equal(d.n, 4);
    cJSON *o = doc_json(&d, 0);
    assert_string_equal(field(o, "contents"), "\"Hamlet\"\nHamlet is a tragedy by William Shakespeare");
    assert_string_equal(field(o, "url"), "https://w/H");
    assert_string_equal(field(o, "id"), "1");
    cJSON_Delete(o);
    o = doc_json(&d, 1);
    assert_string_equal(field(o, "contents"), "\"Short\"\nNo snippet available.");
    assert_string_equal(field(o, "url"), "");
    cJSON_Delete(o);
    o = doc_json(&d, 2);
    assert_string_equal(field(o, "contents"), "\"No title.\"\nno title but a long enough snippet text");
    assert_string_equal(field(o, "id"), "3");
    cJSON_Delete(o);
    o = doc_json(&d, 3);
    assert_string_equal(field(o, "contents"), "\"Quote \" and \\ and \xc3\xa9\"\nNo snippet available.");
    assert_string_equal(field(o, "url"), ""); /* a non-string link is no link */
    assert_string_equal(field(o, "id"), "9");
    cJSON_Delete(o);
    assert_true(d.docs[0].score == 1.0 && d.docs[1].score == 0.5);
    assert_true(d.docs[3].score == 0.25);
    sg_serper_docs_free(&d);

    /* topk truncates the emitted documents */
    assert_int_equal(sg_serper_parse_reply(body, strlen(body), 2, &d, err, sizeof(err)), 0);
    assert_int_equal(d.n, 2);
    sg_serper_docs_free(&d);
}

static void test_serper_reply_edges(void **state)
{
    (void)state;
    sg_serper_docs_t d;
    char err[128];
    static const char *const bad[] = {"", "not json", "[1,2]", "{\"organic\":{}}", "{\"organic\":\"x\"}", "{\"organic\":[", NULL};
    for (size_t i = 0; bad[i] != NULL; ++i) {
        assert_int_equal(sg_serper_parse_reply(bad[i], strlen(bad[i]), 3, &d, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        sg_serper_docs_free(&d);
    }
    static const char *const empty[] = {"{}", "{\"organic\":null}", "{\"organic\":[]}", "{\"answerBox\":{\"answer\":\"x\"}}", NULL};
    for (size_t i = 0; empty[i] != NULL; ++i) {
        assert_int_equal(sg_serper_parse_reply(empty[i], strlen(empty[i]), 3, &d, err, sizeof(err)), 0);
        assert_int_equal(d.n, 0);
        sg_serper_docs_free(&d);
    }
    /* invalid UTF-8 and control characters still give valid JSON */
    const char *raw = "{\"organic\":[{\"title\":\"bad \xff\xfe byte\",\"snippet\":\"a b c d e f\\u0001 g\"}]}";
    assert_int_equal(sg_serper_parse_reply(raw, strlen(raw), 3, &d, err, sizeof(err)), 0);
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.docs[0].json, "\xef\xbf\xbd"));
    assert_non_null(strstr(d.docs[0].json, "\\u0001"));
    cJSON *o = doc_json(&d, 0);
    cJSON_Delete(o);
    sg_serper_docs_free(&d);
}

static void test_serper_error_message(void **state)
{
    (void)state;
    char out[128];
    const char *b = "{\"message\":\"Unauthorized.\",\"statusCode\":403}";
    sg_serper_error_message(b, strlen(b), "k", out, sizeof(out));
    assert_string_equal(out, "Unauthorized.");
    const char *raw = "<html>\n<body>bad gateway with secret-key-123 inside</body></html>";
    sg_serper_error_message(raw, strlen(raw), "secret-key-123", out, sizeof(out));
    assert_null(strstr(out, "secret-key-123"));
    assert_non_null(strstr(out, "***"));
    assert_null(strchr(out, '\n'));
    sg_serper_error_message("", 0, NULL, out, sizeof(out));
    assert_string_equal(out, "(empty body)");
}

static void test_upstream_shapes(void **state)
{
    (void)state;
    const char *body = "{\"result\":[[{\"document\":{\"id\":\"1\",\"contents\":\"\\\"A\\\"\\nx\"},\"score\":0.75},"
                       "{\"document\":{\"id\":\"2\",\"contents\":\"b\",\"url\":\"u\"}}],"
                       "[{\"id\":\"3\",\"contents\":\"flat\",\"url\":null},{\"id\":\"4\",\"contents\":\"c\"},{\"id\":\"5\"}],"
                       "[]]}";
    sg_up_list_t l[3];
    char err[160];
    assert_int_equal(sg_upstream_parse_reply(body, strlen(body), 3, 2, 1, l, err, sizeof(err)), 0);
    assert_int_equal(l[0].n, 2);
    assert_int_equal(l[1].n, 2); /* topk 2 */
    assert_int_equal(l[2].n, 0);
    assert_string_equal(l[0].docs[0].json, "{\"id\":\"1\",\"contents\":\"\\\"A\\\"\\nx\",\"url\":\"\"}");
    assert_true(l[0].docs[0].score == 0.75);
    assert_string_equal(l[0].docs[1].json, "{\"id\":\"2\",\"contents\":\"b\",\"url\":\"u\"}");
    assert_true(l[0].docs[1].score == 0.5); /* no score: 1/rank */
    assert_string_equal(l[1].docs[0].json, "{\"id\":\"3\",\"contents\":\"flat\",\"url\":\"\"}");
    assert_true(l[1].docs[0].score == 1.0);
    sg_upstream_lists_free(l, 3);
    /* add_url off keeps documents as they are */
    assert_int_equal(sg_upstream_parse_reply(body, strlen(body), 3, 5, 0, l, err, sizeof(err)), 0);
    assert_string_equal(l[1].docs[2].json, "{\"id\":\"5\"}");
    sg_upstream_lists_free(l, 3);
    /* numbers survive re-serialisation */
    const char *nums = "{\"result\":[[{\"id\":1,\"contents\":\"x\",\"n\":0.1,\"big\":12345678901,\"e\":1e300,\"t\":true}]]}";
    assert_int_equal(sg_upstream_parse_reply(nums, strlen(nums), 1, 3, 0, l, err, sizeof(err)), 0);
    assert_string_equal(l[0].docs[0].json, "{\"id\":1,\"contents\":\"x\",\"n\":0.1,\"big\":12345678901,\"e\":1e+300,\"t\":true}");
    sg_upstream_lists_free(l, 1);
}

static void test_upstream_errors(void **state)
{
    (void)state;
    sg_up_list_t l[2];
    char err[160];
    static const char *const bad[] = {"",
                                      "nope",
                                      "{}",
                                      "{\"result\":{}}",
                                      "{\"result\":[[]]}",
                                      "{\"result\":[[],[],[]]}",
                                      "{\"result\":[[], 5]}",
                                      "{\"result\":[[1], []]}",
                                      "{\"result\":[[{\"document\":\"str\"}], []]}",
                                      NULL};
    for (size_t i = 0; bad[i] != NULL; ++i) {
        assert_int_equal(sg_upstream_parse_reply(bad[i], strlen(bad[i]), 2, 3, 1, l, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        sg_upstream_lists_free(l, 2);
    }
    char out[200];
    const char *fastapi = "{\"detail\":[{\"loc\":[\"body\",\"queries\"],\"msg\":\"field required\"}]}";
    sg_upstream_error_message(fastapi, strlen(fastapi), out, sizeof(out));
    assert_non_null(strstr(out, "field required"));
    const char *ours = "{\"error\":{\"code\":503},\"message\":\"overloaded\",\"detail\":\"x\"}";
    sg_upstream_error_message(ours, strlen(ours), out, sizeof(out));
    assert_string_equal(out, "overloaded");
    sg_upstream_error_message("Internal Server Error", 21, out, sizeof(out));
    assert_string_equal(out, "Internal Server Error");
}

static void test_upstream_access(void **state)
{
    (void)state;
    sg_up_list_t l[3];
    char err[160];
    const char *b = "{\"result\":[{\"url\":\"u\",\"contents\":\"page\"},null,{\"url\":\"v\"}]}";
    assert_int_equal(sg_upstream_parse_access(b, strlen(b), 3, l, err, sizeof(err)), 0);
    assert_int_equal(l[0].n, 1);
    assert_int_equal(l[1].n, 0);
    assert_int_equal(l[2].n, 1);
    assert_string_equal(l[0].docs[0].json, "{\"url\":\"u\",\"contents\":\"page\"}");
    sg_upstream_lists_free(l, 3);
    const char *bad = "{\"result\":[1,null,null]}";
    assert_int_equal(sg_upstream_parse_access(bad, strlen(bad), 3, l, err, sizeof(err)), -1);
    sg_upstream_lists_free(l, 3);
}

static void test_json_helpers(void **state)
{
    (void)state;
    sg_buf_t b = {0};
    sg_buf_append_json_string(&b, "a\"b\\c\n\t\x01\x7f\xc3\xa9\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82", 20);
    assert_string_equal(b.base, "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    sg_buf_free(&b);
    const unsigned char ok4[] = {0xf0, 0x9f, 0x9a, 0x80};
    assert_int_equal(sg_utf8_seq_len(ok4, 4), 4);
    assert_int_equal(sg_utf8_seq_len(ok4, 3), 0);
    const unsigned char overlong[] = {0xc0, 0x80};
    assert_int_equal(sg_utf8_seq_len(overlong, 2), 0);
    const unsigned char e0[] = {0xe0, 0x9f, 0x80};
    assert_int_equal(sg_utf8_seq_len(e0, 3), 0);
    char out[64];
    sg_http_excerpt("  KEYKEY middle KEY end\r\n", 25, "KEY", out, sizeof(out), 60);
    assert_string_equal(out, "****** middle *** end");
    sg_http_excerpt("0123456789", 10, NULL, out, sizeof(out), 4);
    assert_string_equal(out, "0123");
    char *t = sg_http_trim_url("http://h:1/x//");
    assert_string_equal(t, "http://h:1/x");
    free(t);
}

static void check_target(const char *url, const char *want)
{
    sg_buf_t b = {0};
    int rc = sg_reader_target("https://r.jina.ai", url, strlen(url), &b);
    if (want == NULL) {
        assert_int_equal(rc, -1);
        assert_int_equal(b.len, 0);
    } else {
        assert_int_equal(rc, 0);
        assert_string_equal(b.base, want);
    }
    sg_buf_free(&b);
}

static void test_reader_target(void **state)
{
    (void)state;
    check_target("https://en.wikipedia.org/wiki/Hamlet", "https://r.jina.ai/https://en.wikipedia.org/wiki/Hamlet");
    /* the query string passes as it is, the fragment is dropped (never sent by a browser either) */
    check_target("http://example.org/a?b=c&d=%20e#part", "https://r.jina.ai/http://example.org/a?b=c&d=%20e");
    /* bytes a URL cannot carry raw are percent-encoded, UTF-8 byte by byte */
    check_target("https://example.org/a b/\xc3\xbc\"<>\\^`{|}\x01\x7f",
                 "https://r.jina.ai/https://example.org/a%20b/%C3%BC%22%3C%3E%5C%5E%60%7B%7C%7D%01%7F");
    check_target("HTTPS://Example.org", "https://r.jina.ai/HTTPS://Example.org");
    /* not an absolute http(s) URL with a host: no request at all */
    check_target("", NULL);
    check_target("en.wikipedia.org/wiki/Hamlet", NULL);
    check_target("ftp://example.org/x", NULL);
    check_target("https://", NULL);
    check_target("https:///path", NULL);
    check_target("http://#frag", NULL);
    check_target("javascript:alert(1)", NULL);
}

static char *parse_ok(const char *body, int format, const char *url)
{
    sg_buf_t page = {0};
    long code = 0;
    char err[256] = "";
    assert_int_equal(sg_reader_parse_page(body, strlen(body), format, url, strlen(url), &page, &code, err, sizeof(err)), 0);
    return page.base;
}

static void test_reader_parse_json(void **state)
{
    (void)state;
    /* the reply documented for Accept: application/json */
    const char *body =
        "{\"code\":200,\"status\":20000,\"data\":{\"title\":\"Hamlet\",\"description\":\"d\","
        "\"url\":\"https://en.wikipedia.org/wiki/Hamlet\",\"content\":\"# Hamlet\\n\\nA *tragedy* \\u00e9 \\ud83d\\ude80\","
        "\"usage\":{\"tokens\":12}}}";
    char *p = parse_ok(body, SG_READER_FORMAT_JSON, "https://en.wikipedia.org/wiki/Hamlet");
    assert_string_equal(p, "{\"url\":\"https://en.wikipedia.org/wiki/Hamlet\",\"title\":\"Hamlet\","
                           "\"contents\":\"# Hamlet\\n\\nA *tragedy* \xc3\xa9 \xf0\x9f\x9a\x80\"}");
    free(p);
    /* the PAGE keeps the URL as asked (the reader may report a redirect target in data.url) */
    p = parse_ok("{\"code\":200,\"data\":{\"url\":\"https://x/other\",\"content\":\"\"}}", SG_READER_FORMAT_JSON,
                 "https://x/\"q\"");
    assert_string_equal(p, "{\"url\":\"https://x/\\\"q\\\"\",\"title\":\"\",\"contents\":\"\"}");
    free(p);
    /* malformed replies */
    static const char *const bad[] = {"not json",
                                      "[1,2]",
                                      "{\"code\":200}",
                                      "{\"code\":200,\"data\":[]}",
                                      "{\"code\":200,\"data\":{\"title\":\"t\"}}",
                                      "{\"code\":200,\"data\":{\"content\":5}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_buf_t page = {0};
        long code = 0;
        char err[256] = "";
        assert_int_equal(
            sg_reader_parse_page(bad[i], strlen(bad[i]), SG_READER_FORMAT_JSON, "u", 1, &page, &code, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        sg_buf_free(&page);
    }
}

static void test_reader_parse_text(void **state)
{
    (void)state;
    /* the default (text) rendering: contents is the body as it is, the title its first line */
    const char *body = "Title: Hamlet \xe2\x80\x94 Wikipedia\r\n\r\nURL Source: https://en.wikipedia.org/wiki/Hamlet\n\n"
                       "Markdown Content:\nHamlet is a tragedy.\n";
    char *p = parse_ok(body, SG_READER_FORMAT_TEXT, "https://en.wikipedia.org/wiki/Hamlet");
    assert_string_equal(p, "{\"url\":\"https://en.wikipedia.org/wiki/Hamlet\",\"title\":\"Hamlet \xe2\x80\x94 Wikipedia\","
                           "\"contents\":\"Title: Hamlet \xe2\x80\x94 Wikipedia\\r\\n\\r\\nURL Source: "
                           "https://en.wikipedia.org/wiki/Hamlet\\n\\nMarkdown Content:\\nHamlet is a tragedy.\\n\"}");
    free(p);
    /* no title line; invalid UTF-8 is replaced so the PAGE stays valid JSON */
    p = parse_ok("plain \xff text", SG_READER_FORMAT_TEXT, "u");
    assert_string_equal(p, "{\"url\":\"u\",\"title\":\"\",\"contents\":\"plain \xef\xbf\xbd text\"}");
    free(p);
    /* a JSON page that is not an error envelope is text like any other */
    p = parse_ok("{\"code\":200,\"data\":{}}", SG_READER_FORMAT_TEXT, "u");
    assert_string_equal(p, "{\"url\":\"u\",\"title\":\"\",\"contents\":\"{\\\"code\\\":200,\\\"data\\\":{}}\"}");
    free(p);
}

static void test_reader_envelope(void **state)
{
    (void)state;
    /* refusals come as {"data":null,"code":N,"name":...,"status":...,"message":...}, sometimes with HTTP 200 */
    const char *body =
        "{\"data\":null,\"code\":402,\"name\":\"InsufficientBalanceError\",\"status\":40203,"
        "\"message\":\"Account balance not enough to run this query, please recharge.\","
        "\"readableMessage\":\"InsufficientBalanceError: Account balance not enough to run this query, please recharge.\"}";
    for (int format = 0; format < 2; ++format) {
        sg_buf_t page = {0};
        long code = 0;
        char err[256] = "";
        assert_int_equal(sg_reader_parse_page(body, strlen(body), format, "u", 1, &page, &code, err, sizeof(err)), 1);
        assert_int_equal(code, 402);
        assert_string_equal(err, "InsufficientBalanceError: Account balance not enough to run this query, please recharge.");
        sg_buf_free(&page);
    }
    char msg[256];
    const char *e422 = "{\"code\":422,\"message\":\"Failed to goto https://x: net::ERR_NAME_NOT_RESOLVED\"}";
    sg_reader_error_message(e422, strlen(e422), msg, sizeof(msg));
    assert_string_equal(msg, "Failed to goto https://x: net::ERR_NAME_NOT_RESOLVED");
    sg_reader_error_message("<html>bad gateway</html>", 24, msg, sizeof(msg));
    assert_string_equal(msg, "<html>bad gateway</html>");
    sg_reader_error_message("", 0, msg, sizeof(msg));
    assert_string_equal(msg, "(empty body)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snippet_fragments),    cmocka_unit_test(test_py_isspace),
        cmocka_unit_test(test_serper_reply),         cmocka_unit_test(test_serper_reply_edges),
        cmocka_unit_test(test_serper_error_message), cmocka_unit_test(test_upstream_shapes),
        cmocka_unit_test(test_upstream_errors),      cmocka_unit_test(test_upstream_access),
        cmocka_unit_test(test_json_helpers),         cmocka_unit_test(test_reader_target),
        cmocka_unit_test(test_reader_parse_json),    cmocka_unit_test(test_reader_parse_text),
        cmocka_unit_test(test_reader_envelope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
