/* Unit tests: the declarative config reader (lib/cfg.h): a table of keys read into a struct, with
 * the messages of the single-key readers, string keys that may be empty, fragments into a nested
 * struct, and "not set" defaults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cfg.h"

typedef struct {
    uint32_t timeout_ms;
    double qps;
} inner_t;

typedef struct {
    uint8_t small;
    uint16_t mid;
    size_t big;
    int flag, mode;
    char *name, *lang, *prefix, *file;
    double ratio;
    inner_t http;
} conf_t;

static const char *const modes[] = {"fast", "exact", NULL};

#define INNER_KEYS(T, f, timeout_def)                                                                                              \
    SG_CFG_INT(T, f.timeout_ms, "timeout_ms", 1, 600000, timeout_def), SG_CFG_DOUBLE(T, f.qps, "qps", 0, 1e6, 0)

static const sg_cfg_key_t table[] = {
    SG_CFG_INT(conf_t, small, "small", 0, 255, 7),
    SG_CFG_INT(conf_t, mid, "mid", 0, 60000, 1000),
    SG_CFG_INT(conf_t, big, "big", 1024, (int64_t)1 << 32, 1 << 20),
    SG_CFG_BOOL(conf_t, flag, "flag", 1),
    SG_CFG_ENUM(conf_t, mode, "mode", modes, 1),
    SG_CFG_STRING(conf_t, name, "name", 1, NULL),
    SG_CFG_TEXT(conf_t, lang, "lang", "en", 32, "expected a short string (\"\" leaves it out)"),
    SG_CFG_TEXT(conf_t, prefix, "prefix", "query: ", 0, NULL),
    SG_CFG_PATH(conf_t, file, "file", 0),
    SG_CFG_DOUBLE(conf_t, ratio, "ratio", -1, 1, NAN),
    SG_CFG_CUSTOM_KEY("list"),
    INNER_KEYS(conf_t, http, 2000),
};

static int read_conf(const char *json, conf_t *out, char *err, size_t size)
{
    sg_cfg_t c = {"config", err, size};
    cJSON *root = cJSON_Parse(json);
    memset(out, 0xa5, sizeof(*out)); /* every field is written, whatever was there */
    out->name = out->lang = out->prefix = out->file = NULL;
    int rc = sg_cfg_read(&c, root, table, SG_CFG_N(table), "/etc/sg", out);
    cJSON_Delete(root);
    return rc;
}

static void conf_free(conf_t *cf)
{
    free(cf->name);
    free(cf->lang);
    free(cf->prefix);
    free(cf->file);
}

static void test_defaults(void **state)
{
    (void)state;
    conf_t cf;
    char err[512] = "";
    assert_int_equal(read_conf("{\"name\":\"n\"}", &cf, err, sizeof(err)), 0);
    assert_int_equal(cf.small, 7);
    assert_int_equal(cf.mid, 1000);
    assert_int_equal(cf.big, 1 << 20);
    assert_int_equal(cf.flag, 1);
    assert_int_equal(cf.mode, 1);
    assert_string_equal(cf.name, "n");
    assert_string_equal(cf.lang, "en");
    assert_string_equal(cf.prefix, "query: ");
    assert_null(cf.file);
    assert_true(isnan(cf.ratio)); /* a default outside the bounds: "not set" */
    assert_int_equal(cf.http.timeout_ms, 2000);
    assert_true(cf.http.qps == 0);
    conf_free(&cf);
}

static void test_values(void **state)
{
    (void)state;
    conf_t cf;
    char err[512] = "";
    assert_int_equal(read_conf("{\"name\":\"n\",\"small\":255,\"mid\":60000,\"big\":4294967296,\"flag\":false,\"mode\":\"fast\","
                               "\"lang\":\"\",\"prefix\":\"\",\"file\":\"x.pem\",\"ratio\":-0.5,\"list\":[1],\"timeout_ms\":5,"
                               "\"qps\":2.5}",
                               &cf, err, sizeof(err)),
                     0);
    assert_int_equal(cf.small, 255);
    assert_int_equal(cf.mid, 60000);
    assert_int_equal(cf.big, (size_t)1 << 32);
    assert_int_equal(cf.flag, 0);
    assert_int_equal(cf.mode, 0);
    assert_string_equal(cf.lang, ""); /* a TEXT key may be empty */
    assert_string_equal(cf.prefix, "");
    assert_string_equal(cf.file, "/etc/sg/x.pem");
    assert_true(cf.ratio == -0.5);
    assert_int_equal(cf.http.timeout_ms, 5);
    assert_true(cf.http.qps == 2.5);
    conf_free(&cf);
    /* null is absent */
    assert_int_equal(read_conf("{\"name\":\"n\",\"lang\":null,\"small\":null}", &cf, err, sizeof(err)), 0);
    assert_string_equal(cf.lang, "en");
    assert_int_equal(cf.small, 7);
    conf_free(&cf);
}

static void expect_error(const char *json, const char *msg)
{
    conf_t cf;
    char err[512] = "";
    assert_int_equal(read_conf(json, &cf, err, sizeof(err)), -1);
    if (strstr(err, msg) == NULL)
        fail_msg("expected \"%s\" in \"%s\"", msg, err);
    conf_free(&cf);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("[1]", "config: expected a JSON object, got [1]");
    expect_error("{\"name\":\"n\",\"nope\":1}", "config.nope: unknown key (allowed: small, mid, big, flag, mode, name, lang, "
                                                "prefix, file, ratio, list, timeout_ms, qps)");
    expect_error("{}", "config.name: required key is missing");
    expect_error("{\"name\":\"n\",\"small\":256}", "config.small: expected an integer in [0, 255], got 256");
    expect_error("{\"name\":\"n\",\"timeout_ms\":0}", "config.timeout_ms: expected an integer in [1, 600000], got 0");
    expect_error("{\"name\":\"n\",\"qps\":-1}", "config.qps: expected a number in [0, 1e+06], got -1");
    expect_error("{\"name\":\"n\",\"mode\":\"slow\"}", "config.mode: expected one of \"fast\", \"exact\", got \"slow\"");
    expect_error("{\"name\":\"n\",\"flag\":1}", "config.flag: expected true or false, got 1");
    expect_error("{\"name\":\"\"}", "config.name: expected a non-empty string, got \"\"");
    expect_error("{\"name\":\"n\",\"lang\":\"0123456789012345678901234567890123\"}",
                 "config.lang: expected a short string (\"\" leaves it out), got \"0123456789");
    expect_error("{\"name\":\"n\",\"lang\":3}", "config.lang: expected a short string (\"\" leaves it out), got 3");
    expect_error("{\"name\":\"n\",\"prefix\":3}", "config.prefix: expected a string, got 3");
}

/* A NULL object (the key holding it is absent) is read as all defaults; a required key fails. */
static void test_absent_object(void **state)
{
    (void)state;
    static const sg_cfg_key_t opt[] = {SG_CFG_INT(conf_t, mid, "mid", 0, 60000, 1000), SG_CFG_BOOL(conf_t, flag, "flag", 1),
                                       SG_CFG_TEXT(conf_t, lang, "lang", "en", 32, NULL)};
    conf_t cf;
    memset(&cf, 0, sizeof(cf));
    char err[512] = "";
    sg_cfg_t c = {"config", err, sizeof(err)};
    assert_int_equal(sg_cfg_read(&c, NULL, opt, SG_CFG_N(opt), "/", &cf), 0);
    assert_int_equal(cf.mid, 1000);
    assert_int_equal(cf.flag, 1);
    assert_string_equal(cf.lang, "en");
    free(cf.lang);
    cf.lang = NULL;
    assert_int_equal(sg_cfg_read(&c, NULL, table, SG_CFG_N(table), "/", &cf), -1);
    assert_string_equal(err, "config.name: required key is missing");
    conf_free(&cf);
}

/* sg_cfg_read_ex: an overlay keeps the inherited values of absent (or null) keys and still
 * requires required ones; with the keys checked by the caller, an object may hold the keys of two
 * tables (sg_cfg_table_keys lists them), each read on its own. */
static void test_read_ex(void **state)
{
    (void)state;
    static const sg_cfg_key_t quota[] = {SG_CFG_INT(conf_t, mid, "mid", 0, 60000, 1000), SG_CFG_BOOL(conf_t, flag, "flag", 1),
                                         SG_CFG_ENUM(conf_t, mode, "mode", modes, 1)};
    static const sg_cfg_key_t ident[] = {SG_CFG_STRING(conf_t, name, "name", 1, NULL), SG_CFG_CUSTOM_KEY("secret")};
    char err[512] = "";
    sg_cfg_t c = {"config", err, sizeof(err)};
    conf_t cf;
    memset(&cf, 0, sizeof(cf));
    cf.mid = 7; /* inherited */
    cf.flag = 0;
    cf.mode = 0;
    cJSON *o = cJSON_Parse("{\"flag\":true,\"mode\":null}");
    assert_int_equal(sg_cfg_read_ex(&c, o, quota, SG_CFG_N(quota), "/", &cf, SG_CFG_OVERLAY), 0);
    assert_int_equal(cf.mid, 7);  /* absent: kept */
    assert_int_equal(cf.flag, 1); /* present: read */
    assert_int_equal(cf.mode, 0); /* null is absent: kept */
    assert_int_equal(sg_cfg_read_ex(&c, o, ident, SG_CFG_N(ident), "/", &cf, SG_CFG_OVERLAY | SG_CFG_KEYS_CHECKED), -1);
    assert_string_equal(err, "config.name: required key is missing"); /* required even in an overlay */
    cJSON_Delete(o);

    const char *allowed[8];
    size_t n = sg_cfg_table_keys(ident, SG_CFG_N(ident), allowed, 0, 8);
    n = sg_cfg_table_keys(quota, SG_CFG_N(quota), allowed, n, 8);
    assert_int_equal(n, 5);
    assert_null(allowed[5]);
    assert_int_equal(sg_cfg_table_keys(quota, SG_CFG_N(quota), allowed, n, 7), 6); /* cut short, still terminated */
    assert_null(allowed[6]);
    n = sg_cfg_table_keys(quota, SG_CFG_N(quota), allowed, sg_cfg_table_keys(ident, SG_CFG_N(ident), allowed, 0, 8), 8);
    o = cJSON_Parse("{\"name\":\"n\",\"secret\":\"S\",\"mid\":9,\"bad\":1}");
    assert_int_equal(sg_cfg_check_keys(&c, o, allowed), -1);
    assert_string_equal(err, "config.bad: unknown key (allowed: name, secret, mid, flag, mode)");
    cJSON_DeleteItemFromObject(o, "bad");
    assert_int_equal(sg_cfg_check_keys(&c, o, allowed), 0);
    memset(&cf, 0, sizeof(cf));
    assert_int_equal(sg_cfg_read_ex(&c, o, ident, SG_CFG_N(ident), "/", &cf, SG_CFG_KEYS_CHECKED), 0);
    assert_string_equal(cf.name, "n");
    assert_int_equal(sg_cfg_read_ex(&c, o, quota, SG_CFG_N(quota), "/", &cf, SG_CFG_KEYS_CHECKED), 0);
    assert_int_equal(cf.mid, 9);
    assert_int_equal(cf.flag, 1); /* not an overlay: the table's defaults */
    assert_int_equal(cf.mode, 1);
    /* without SG_CFG_KEYS_CHECKED the other table's keys are unknown */
    assert_int_equal(sg_cfg_read_ex(&c, o, quota, SG_CFG_N(quota), "/", &cf, 0), -1);
    assert_string_equal(err, "config.name: unknown key (allowed: mid, flag, mode)");
    cJSON_Delete(o);
    conf_free(&cf);
}

static void test_present(void **state)
{
    (void)state;
    cJSON *root = cJSON_Parse("{\"a\":0,\"b\":null}");
    assert_true(sg_cfg_present(root, "a"));
    assert_false(sg_cfg_present(root, "b"));
    assert_false(sg_cfg_present(root, "c"));
    cJSON_Delete(root);
}

/* sg_cfg_parse: what the gateway and every plugin read their config with. One strict document,
 * no key twice in any object (cJSON alone took the first of two), errors prefixed with the path
 * of the object being read. */
static void test_parse_strict(void **state)
{
    (void)state;
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"a\":1} x", "config: not valid JSON at line 1, column 9 (byte 8): data after the end of the document"},
        {"{\"a\":1}\n{\"a\":2}", "config: not valid JSON at line 2, column 1 (byte 8): data after the end"},
        {"{\"a\":1,\"a\":2}", "config.a: duplicate key"},
        {"{\"docs\":[{\"id\":1},{\"id\":1,\"id\":2}]}", "config.docs[1].id: duplicate key"},
        {"{\"a\":{\"b\":{\"c\":[[{\"x\":0,\"x\":0}]]}}}", "config.a.b.c[0][0].x: duplicate key"},
        {"{\"a\":\"\xc3\"}", "invalid UTF-8"},
        {"", "unexpected end"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_cfg_t c = {"config", err, sizeof(err)};
        err[0] = '\0';
        cJSON *root = sg_cfg_parse(&c, bad[i].json, strlen(bad[i].json));
        if (root != NULL || strstr(err, bad[i].want) == NULL)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, err, bad[i].want);
    }
    /* a large object (sorted, not pairwise): the duplicate is still found, and distinct keys pass */
    char big[4096];
    size_t n = 0;
    n += (size_t)snprintf(big + n, sizeof(big) - n, "{");
    for (int i = 0; i < 200; ++i)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"k%d\":%d", i != 0 ? "," : "", i, i);
    snprintf(big + n, sizeof(big) - n, "}");
    sg_cfg_t c = {"", err, sizeof(err)};
    cJSON *root = sg_cfg_parse(&c, big, strlen(big));
    assert_non_null(root);
    cJSON_Delete(root);
    snprintf(big + n, sizeof(big) - n, ",\"k117\":0}");
    assert_null(sg_cfg_parse(&c, big, strlen(big)));
    assert_string_equal(err, "k117: duplicate key: given more than once in the same object (each key may appear once)");
    /* the same key in different objects, whitespace and a byte order mark are fine */
    const char *ok = "\xEF\xBB\xBF {\"a\":{\"id\":1},\"b\":{\"id\":1},\"c\":[{\"id\":1},{\"id\":2}]}\n";
    root = sg_cfg_parse(&c, ok, strlen(ok));
    assert_non_null(root);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "b"), "id")->valueint, 1);
    cJSON_Delete(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_defaults),     cmocka_unit_test(test_values),
                                       cmocka_unit_test(test_errors),       cmocka_unit_test(test_present),
                                       cmocka_unit_test(test_parse_strict), cmocka_unit_test(test_absent_object),
                                       cmocka_unit_test(test_read_ex)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
