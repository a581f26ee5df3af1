/*
 * test_store.c -- the jsonl row store: offsets, CRLF, a last line without newline, trailing blank
 * lines, broken lines and empty lines failing with file:line messages, sidecar reuse and
 * invalidation, the cache_dir location, the URL table of /access (normalisation, duplicates) and
 * the strict JSON checker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "jsonl.h"
#include "testutil.h"

#include <time.h>

static char *tmpdir;

static int setup(void **state)
{
    (void)state;
    tmpdir = tu_mkdtemp();
    return tmpdir == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(tmpdir);
    free(tmpdir);
    return 0;
}

static char *write_tmp(const char *name, const char *text)
{
    char *p = tu_path(tmpdir, name);
    assert_int_equal(tu_write_file(p, text, strlen(text)), 0);
    return p;
}

static void expect_row(const sg_jsonl_t *j, uint64_t r, const char *want)
{
    const char *p;
    size_t n;
    sg_jsonl_row(j, r, &p, &n);
    if (n != strlen(want) || memcmp(p, want, n) != 0)
        fprintf(stderr, "row %llu: got \"%.*s\", want \"%s\"\n", (unsigned long long)r, (int)n, p, want);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
}

static void test_rows(void **state)
{
    (void)state;
    /* CRLF, spaces around, a last line without '\n' */
    char *p = write_tmp("a.jsonl", "{\"id\": \"0\", \"contents\": \"zero\"}\r\n"
                                   "  {\"id\": \"1\", \"contents\": \"one\\nline\"}  \n"
                                   "{\"id\": \"2\", \"contents\": \"Zürich 東京\"}\n"
                                   "{}\n"
                                   "{\"id\": \"4\"}");
    sg_jsonl_t j;
    char err[512];
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.n_rows, 5);
    assert_int_equal(j.side_reused, 0);
    expect_row(&j, 0, "{\"id\": \"0\", \"contents\": \"zero\"}");
    expect_row(&j, 1, "{\"id\": \"1\", \"contents\": \"one\\nline\"}");
    expect_row(&j, 2, "{\"id\": \"2\", \"contents\": \"Zürich 東京\"}");
    expect_row(&j, 3, "{}");
    expect_row(&j, 4, "{\"id\": \"4\"}");
    uint64_t hash = j.content_hash;
    sg_jsonl_close(&j);
    /* the sidecar beside the file is reused */
    char *side = tu_path(tmpdir, "a.jsonl.sgrows");
    assert_int_equal(access(side, F_OK), 0);
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_reused, 1);
    assert_int_equal(j.n_rows, 5);
    assert_true(j.content_hash == hash);
    expect_row(&j, 4, "{\"id\": \"4\"}");
    sg_jsonl_close(&j);
    /* a changed file invalidates it (size and mtime differ) */
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    free(write_tmp("a.jsonl", "{\"id\": \"x\"}\n{\"id\": \"y\"}\n\n\n"));
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_reused, 0);
    assert_int_equal(j.n_rows, 2); /* trailing blank lines are not rows */
    expect_row(&j, 1, "{\"id\": \"y\"}");
    assert_true(j.content_hash != hash);
    sg_jsonl_close(&j);
    /* a damaged sidecar is rebuilt, not trusted */
    assert_int_equal(tu_write_file(side, "garbage", 7), 0);
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_reused, 0);
    assert_int_equal(j.n_rows, 2);
    sg_jsonl_close(&j);
    /* an empty file has no rows */
    char *e = write_tmp("empty.jsonl", "");
    assert_int_equal(sg_jsonl_open(e, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.n_rows, 0);
    sg_jsonl_close(&j);
    free(e);
    free(side);
    free(p);
}

static void test_cache_dir(void **state)
{
    (void)state;
    char *p = write_tmp("c.jsonl", "{\"id\": \"0\"}\n{\"id\": \"1\"}\n");
    char *cd = tu_path(tmpdir, "cache");
    sg_jsonl_opts_t o = {0, cd};
    sg_jsonl_t j;
    char err[512];
    assert_int_equal(sg_jsonl_open(p, &o, &j, err, sizeof(err)), 0);
    assert_non_null(strstr(j.side_path, "/cache/c.jsonl-"));
    assert_int_equal(access(j.side_path, F_OK), 0);
    sg_jsonl_close(&j);
    char *beside = tu_path(tmpdir, "c.jsonl.sgrows");
    assert_int_equal(access(beside, F_OK), -1);
    assert_int_equal(sg_jsonl_open(p, &o, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_reused, 1);
    sg_jsonl_close(&j);
    /* an unwritable location: the offsets stay in memory and a note says why */
    sg_jsonl_opts_t bad = {0, "/proc/sglocal-no-such-dir"};
    assert_int_equal(sg_jsonl_open(p, &bad, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_malloced, 1);
    assert_non_null(strstr(j.side_note, "cannot write"));
    expect_row(&j, 1, "{\"id\": \"1\"}");
    sg_jsonl_close(&j);
    free(beside);
    free(cd);
    free(p);
}

static void expect_open_error(const char *name, const char *text, const char *want)
{
    char *p = write_tmp(name, text);
    sg_jsonl_t j;
    char err[512] = "";
    int rc = sg_jsonl_open(p, NULL, &j, err, sizeof(err));
    if (rc == 0 || strstr(err, want) == NULL)
        fprintf(stderr, "%s: rc %d, err \"%s\", want \"%s\"\n", name, rc, err, want);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, name));
    free(p);
}

static void test_broken(void **state)
{
    (void)state;
    expect_open_error("b1.jsonl", "{\"id\": \"0\"}\n{\"id\": \"1\", \"contents\": \"unterminated}\n{\"id\": \"2\"}\n",
                      "b1.jsonl:2: row 1 is not one JSON object: unterminated string");
    expect_open_error("b2.jsonl", "{\"id\": \"0\"}\n\n{\"id\": \"2\"}\n", "b2.jsonl:2: empty line (row 1) before the end");
    expect_open_error("b3.jsonl", "[1, 2]\n", "b3.jsonl:1: row 0 is not one JSON object: not a JSON object");
    expect_open_error("b4.jsonl", "{\"a\": 1} {\"b\": 2}\n", "b4.jsonl:1: row 0 is not one JSON object: text after the object");
    expect_open_error("b5.jsonl", "{\"a\": 1,}\n", "expected a string key");
    expect_open_error("b6.jsonl", "{\"a\": NaN}\n", "unexpected character");
    expect_open_error("b7.jsonl", "{\"a\": \"\xff\"}\n", "invalid UTF-8");
    expect_open_error("b8.jsonl", "{\"a\": \"tab\there\"}\n", "control character in a string");
    expect_open_error("b9.jsonl", "{\"a\": \"\\x\"}\n", "bad escape");
    expect_open_error("b10.jsonl", "{\"a\": 01}\n", "expected ',' or '}'");
    sg_jsonl_t j;
    char err[256];
    assert_int_equal(sg_jsonl_open("/nonexistent/x.jsonl", NULL, &j, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot open"));
}

static void test_json_helpers(void **state)
{
    (void)state;
    const char *why;
    size_t at;
    static const char *const good[] = {
        "{}",
        " { } ",
        "{\"a\": [1, -2.5e+3, true, false, null, {\"b\": [[]]}]}",
        "{\"s\": \"\\u00e9\\ud83d\\ude00 \\\" \\\\ \\/\"}",
        "{\"utf8\": \"\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x98\x80\"}",
        "{\"n\": 0.5, \"m\": -0, \"e\": 1E9}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); ++i) {
        int rc = sg_json_check_object(good[i], strlen(good[i]), &why, &at);
        if (rc != 0)
            fprintf(stderr, "good[%zu]: %s at %zu\n", i, why, at);
        assert_int_equal(rc, 0);
    }
    static const char *const bad[] = {
        "",
        "{",
        "{\"a\"}",
        "{\"a\": }",
        "{\"a\": 1.}",
        "{\"a\": -}",
        "{\"a\": tru}",
        "{\"a\": \"\\u12g4\"}",
        "{\"a\": \"\xc0\xaf\"}",
        "{\"a\": \"\xed\xa0\x80\"}",
        "{\"a\": [1 2]}",
        "{'a': 1}",
        "{\"a\": Infinity}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        if (sg_json_check_object(bad[i], strlen(bad[i]), &why, &at) == 0)
            fprintf(stderr, "bad[%zu] accepted\n", i);
        assert_int_equal(sg_json_check_object(bad[i], strlen(bad[i]), &why, &at), -1);
    }
    /* nesting is bounded, not a stack overflow */
    char deep[2000];
    size_t n = 0;
    deep[n++] = '{';
    memcpy(deep + n, "\"a\":", 4);
    n += 4;
    for (int i = 0; i < 600; ++i)
        deep[n++] = '[';
    for (int i = 0; i < 600; ++i)
        deep[n++] = ']';
    deep[n++] = '}';
    assert_int_equal(sg_json_check_object(deep, n, &why, &at), -1);
    assert_string_equal(why, "nested too deeply");
    /* top-level keys only; escaped key names match */
    const char *o = "{\"x\": {\"url\": \"inner\"}, \"u\\u0072l\": \"https://a/b\", \"id\": \"7\"}";
    const char *v;
    size_t vl;
    assert_int_equal(sg_json_find_key(o, strlen(o), "url", &v, &vl), 1);
    assert_int_equal(vl, strlen("\"https://a/b\""));
    assert_memory_equal(v, "\"https://a/b\"", vl);
    assert_int_equal(sg_json_find_key(o, strlen(o), "contents", &v, &vl), 0);
    const char *o2 = "{\"x\": {\"url\": \"inner\"}}";
    assert_int_equal(sg_json_find_key(o2, strlen(o2), "url", &v, &vl), 0);
    size_t dl;
    const char *lit = "\"a\\nb\\u00e9\\ud83d\\ude00\\u0000z\"";
    char *d = sg_json_decode_string(lit, strlen(lit), &dl);
    assert_int_equal(dl, 1 + 1 + 1 + 2 + 4 + 1 + 1);
    assert_memory_equal(d, "a\nb\xc3\xa9\xf0\x9f\x98\x80\0z", dl);
    free(d);
    assert_int_equal(sg_json_check_string(" \"ok\" ", 6), 0);
    assert_int_equal(sg_json_check_string("\"a\" x", 5), -1);
    assert_int_equal(sg_json_check_string("42", 2), -1);
    char out[64];
    size_t ol = sg_jsonl_normalize_url("https://w/index.php/A_b/index.php/C", 35, out);
    assert_string_equal(out, "https://w/index.php?title=A_b/index.php?title=C");
    assert_int_equal(ol, strlen(out));
}

static void test_url_table(void **state)
{
    (void)state;
    char *p = write_tmp("pages.jsonl", "{\"url\": \"https://en.wikipedia.org/wiki/Hamlet\", \"contents\": \"old\"}\n"
                                       "{\"contents\": \"no url here\"}\n"
                                       "{\"url\": \"https://w.org/index.php?title=Paris\", \"contents\": \"paris\"}\n"
                                       "{\"title\": \"T\", \"url\": \"https:\\/\\/x.org\\/\\u00e9\", \"contents\": \"escaped\"}\n"
                                       "{\"url\": \"https://en.wikipedia.org/wiki/Hamlet\", \"contents\": \"new\"}\n");
    sg_jsonl_opts_t o = {1, NULL};
    sg_jsonl_t j;
    char err[512];
    for (int pass = 0; pass < 2; ++pass) { /* built, then reused from the sidecar */
        assert_int_equal(sg_jsonl_open(p, &o, &j, err, sizeof(err)), 0);
        assert_int_equal(j.side_reused, pass);
        assert_int_equal(j.n_rows, 5);
        const char *u = "https://en.wikipedia.org/wiki/Hamlet";
        assert_int_equal(sg_jsonl_find_url(&j, u, strlen(u)), 4); /* the later duplicate wins */
        u = "https://w.org/index.php/Paris";                      /* normalised to ?title= */
        assert_int_equal(sg_jsonl_find_url(&j, u, strlen(u)), 2);
        u = "https://w.org/index.php?title=Paris";
        assert_int_equal(sg_jsonl_find_url(&j, u, strlen(u)), 2);
        u = "https://x.org/\xc3\xa9";
        assert_int_equal(sg_jsonl_find_url(&j, u, strlen(u)), 3);
        u = "https://en.wikipedia.org/wiki/Nope";
        assert_int_equal(sg_jsonl_find_url(&j, u, strlen(u)), -1);
        assert_int_equal(sg_jsonl_find_url(&j, "", 0), -1);
        sg_jsonl_close(&j);
    }
    /* a sidecar without the table is not reused when the table is wanted */
    char *q = write_tmp("pages2.jsonl", "{\"url\": \"a\"}\n");
    sg_jsonl_opts_t plain = {0, NULL};
    assert_int_equal(sg_jsonl_open(q, &plain, &j, err, sizeof(err)), 0);
    assert_null(j.table);
    sg_jsonl_close(&j);
    assert_int_equal(sg_jsonl_open(q, &o, &j, err, sizeof(err)), 0);
    assert_int_equal(j.side_reused, 0);
    assert_int_equal(sg_jsonl_find_url(&j, "a", 1), 0);
    sg_jsonl_close(&j);
    free(q);
    free(p);
}

/* A key written twice in a row means its last value, as in Python's json.loads (what the
 * RLinf/ASearcher page servers read the corpus with): /access finds such a row by its last "url"
 * only, and the "contents" indexed is the last one. Found by the JSONL fuzz target, whose oracle
 * reads each row as Python would: the first value was used. */
static void test_duplicate_keys_last_wins(void **state)
{
    (void)state;
    const char *o = "{\"url\": \"https://a/first\", \"contents\": \"c1\", \"u\\u0072l\": \"https://a/last\", \"contents\": \"c2\"}";
    const char *v;
    size_t vl;
    assert_int_equal(sg_json_find_key(o, strlen(o), "url", &v, &vl), 1);
    assert_int_equal(vl, strlen("\"https://a/last\""));
    assert_memory_equal(v, "\"https://a/last\"", vl);
    assert_int_equal(sg_json_find_key(o, strlen(o), "contents", &v, &vl), 1);
    assert_memory_equal(v, "\"c2\"", vl);
    char *p = write_tmp("dups.jsonl", "{\"url\": \"https://a/first\", \"url\": \"https://a/last\"}\n{\"url\": \"https://b\"}\n");
    sg_jsonl_opts_t opts = {1, NULL};
    sg_jsonl_t j;
    char err[512];
    assert_int_equal(sg_jsonl_open(p, &opts, &j, err, sizeof(err)), 0);
    assert_int_equal(sg_jsonl_find_url(&j, "https://a/last", strlen("https://a/last")), 0);
    assert_int_equal(sg_jsonl_find_url(&j, "https://a/first", strlen("https://a/first")), -1);
    assert_int_equal(sg_jsonl_find_url(&j, "https://b", strlen("https://b")), 1);
    sg_jsonl_close(&j);
    free(p);
}

static void test_many_rows(void **state)
{
    (void)state;
    /* 200k rows: offsets are exact, and the sidecar is 8 bytes a row */
    enum { N = 200000 };
    char *p = tu_path(tmpdir, "many.jsonl");
    FILE *fp = fopen(p, "w");
    for (int i = 0; i < N; ++i)
        fprintf(fp, "{\"id\": \"%d\", \"contents\": \"row %d\"}%s", i, i, i % 3 == 0 ? "\r\n" : "\n");
    fclose(fp);
    sg_jsonl_t j;
    char err[256];
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    assert_int_equal(j.n_rows, N);
    for (int i = 0; i < N; i += 7919) {
        char want[80];
        snprintf(want, sizeof(want), "{\"id\": \"%d\", \"contents\": \"row %d\"}", i, i);
        expect_row(&j, (uint64_t)i, want);
    }
    expect_row(&j, N - 1, "{\"id\": \"199999\", \"contents\": \"row 199999\"}");
    sg_jsonl_close(&j);
    char *side = tu_path(tmpdir, "many.jsonl.sgrows");
    struct stat st;
    assert_int_equal(stat(side, &st), 0);
    assert_int_equal(st.st_size, 96 + 8 * (N + 1));
    free(side);
    free(p);
}

static uint64_t rss_file_kb(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL)
        if (sscanf(line, "RssFile: %llu kB", &kb) == 1)
            break;
    if (fp != NULL)
        fclose(fp);
    return kb;
}

static void test_scan_drops_pages(void **state)
{
    (void)state;
    /* the first open scans the whole file; what it scanned must not stay in the resident set (a
     * 14 GB wiki-18 would otherwise count 14 GB of RSS at the first start) */
    char *p = tu_path(tmpdir, "big.jsonl");
    FILE *fp = fopen(p, "w");
    char body[201];
    memset(body, 'x', 200);
    body[200] = '\0';
    size_t bytes = 0;
    for (int i = 0; bytes < ((size_t)150 << 20); ++i)
        bytes += (size_t)fprintf(fp, "{\"id\": \"%d\", \"contents\": \"%s\"}\n", i, body);
    fclose(fp);
    uint64_t before = rss_file_kb();
    sg_jsonl_t j;
    char err[256];
    assert_int_equal(sg_jsonl_open(p, NULL, &j, err, sizeof(err)), 0);
    uint64_t after = rss_file_kb();
    fprintf(stderr, "scanned %zu MiB; RssFile %llu -> %llu kB\n", bytes >> 20, (unsigned long long)before,
            (unsigned long long)after);
    assert_true(after < before + 100 * 1024);
    char want[300];
    snprintf(want, sizeof(want), "{\"id\": \"0\", \"contents\": \"%s\"}", body);
    expect_row(&j, 0, want);
    sg_jsonl_close(&j);
    unlink(p);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),      cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_broken),    cmocka_unit_test(test_json_helpers),
        cmocka_unit_test(test_url_table), cmocka_unit_test(test_duplicate_keys_last_wins),
        cmocka_unit_test(test_many_rows), cmocka_unit_test(test_scan_drops_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
