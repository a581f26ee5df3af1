/*
 * Unit tests: a route's provenance (gateway/core/provenance.c): the data fingerprint (the first 8
 * bytes of SHA-256 over "<kind>/<version>|<identity>[|leg_data=<legs>]", the route's name left
 * out), the X-Searchgate-Provenance header's fixed part, what a header value cannot carry, the
 * searchgate_route_info series and the GET / member.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "provenance.h"
#include "json.h"
#include "metrics.h"

/* The fingerprint as docs/api.md defines it, computed here independently of provenance.c. */
static void fingerprint(const char *text, char out[17])
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)text, strlen(text), d);
    for (int i = 0; i < 8; ++i)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_plugin_route(void **state)
{
    (void)state;
    sg_provenance_t p;
    sg_provenance_init(&p, "wiki", "plugin", "bm25", "1.2.0", "index=abc corpus=def k1=0.9", NULL);
    char want[17], header[200];
    fingerprint("bm25/1.2.0|index=abc corpus=def k1=0.9", want);
    assert_string_equal(p.route, "wiki");
    assert_string_equal(p.type, "plugin");
    assert_string_equal(p.plugin, "bm25/1.2.0");
    assert_string_equal(p.identity, "bm25/1.2.0|index=abc corpus=def k1=0.9");
    assert_string_equal(p.data, want);
    snprintf(header, sizeof(header), "route=wiki; type=plugin; plugin=bm25/1.2.0; data=%s", want);
    assert_string_equal(p.header, header);
    assert_int_equal(p.header_len, strlen(header));
    sg_provenance_dispose(&p);
    assert_null(p.route);
    assert_null(p.header);
    assert_int_equal(p.header_len, 0);
}

/* The same data under another name has the same fingerprint; other data (identity, version,
 * kind) another; a plugin without identity() fingerprints its kind and version alone. */
static void test_fingerprint_covers_the_data_not_the_name(void **state)
{
    (void)state;
    sg_provenance_t a, b, c, d, e;
    sg_provenance_init(&a, "wiki", "plugin", "e5", "2.0.0", "model=e5-base fp16 nprobe=32", NULL);
    sg_provenance_init(&b, "other_name", "rerank", "e5", "2.0.0", "model=e5-base fp16 nprobe=32", NULL);
    sg_provenance_init(&c, "wiki", "plugin", "e5", "2.0.0", "model=e5-base fp16 nprobe=64", NULL);
    sg_provenance_init(&d, "wiki", "plugin", "e5", "2.0.1", "model=e5-base fp16 nprobe=32", NULL);
    sg_provenance_init(&e, "wiki", "plugin", "e5", "2.0.0", NULL, NULL);
    assert_string_equal(a.data, b.data);
    assert_string_equal(b.type, "rerank");
    assert_string_not_equal(a.data, c.data);
    assert_string_not_equal(a.data, d.data);
    char want[17];
    fingerprint("e5/2.0.0|", want);
    assert_string_equal(e.identity, "e5/2.0.0|");
    assert_string_equal(e.data, want);
    sg_provenance_dispose(&a);
    sg_provenance_dispose(&b);
    sg_provenance_dispose(&c);
    sg_provenance_dispose(&d);
    sg_provenance_dispose(&e);
}

/* A fusion route: its legs' "<route>:<data>" list is in the identity (so in the fingerprint) and
 * ends the header. */
static void test_fusion_legs(void **state)
{
    (void)state;
    sg_provenance_t p, q;
    const char *legs = "bm:0123456789abcdef,dense:fedcba9876543210";
    sg_provenance_init(&p, "hybrid", "fusion", "fusion", "0.1.0", "rrf k=60 w=1,1", legs);
    sg_provenance_init(&q, "hybrid", "fusion", "fusion", "0.1.0", "rrf k=60 w=1,1", "bm:0123456789abcdef,dense:0000000000000000");
    char want[17], header[300];
    fingerprint("fusion/0.1.0|rrf k=60 w=1,1|leg_data=bm:0123456789abcdef,dense:fedcba9876543210", want);
    assert_string_equal(p.identity, "fusion/0.1.0|rrf k=60 w=1,1|leg_data=bm:0123456789abcdef,dense:fedcba9876543210");
    assert_string_equal(p.data, want);
    snprintf(header, sizeof(header), "route=hybrid; type=fusion; plugin=fusion/0.1.0; data=%s; legs=%s", want, legs);
    assert_string_equal(p.header, header);
    assert_int_equal(p.header_len, strlen(header));
    assert_string_not_equal(p.data, q.data); /* a leg's data changed: so did the route's */
    sg_provenance_dispose(&p);
    sg_provenance_dispose(&q);
}

/* What a header value cannot carry (controls, spaces, non-ASCII, the grammar's ';' ',' '"' '\')
 * becomes '_' in the plugin field; the fingerprint is taken of the text as the plugin gave it. */
static void test_header_safe_plugin(void **state)
{
    (void)state;
    sg_provenance_t p;
    sg_provenance_init(&p, "r", "plugin", "my kind;x", "1,0\"\\\x01\xc3\xa9", "id", NULL);
    assert_string_equal(p.plugin, "my_kind_x/1_0_____");
    assert_string_equal(p.identity, "my kind;x/1,0\"\\\x01\xc3\xa9|id");
    char want[17];
    fingerprint("my kind;x/1,0\"\\\x01\xc3\xa9|id", want);
    assert_string_equal(p.data, want);
    assert_non_null(strstr(p.header, "; plugin=my_kind_x/1_0_____; "));
    sg_provenance_dispose(&p);
}

/* searchgate_route_info{route,type,plugin,version,data,identity} = 1, label values escaped. */
static void test_info_metric(void **state)
{
    (void)state;
    sg_provenance_t p;
    sg_provenance_init(&p, "wiki", "plugin", "bm25", "1.2.0", "path=\"C:\\idx\"\nk1=0.9", NULL);
    sg_provenance_register_metric(&p, "bm25", "1.2.0");
    assert_non_null(p.info);
    assert_int_equal(atomic_load(&p.info->v), 1);
    char labels[400];
    snprintf(labels, sizeof(labels),
             "route=\"wiki\",type=\"plugin\",plugin=\"bm25\",version=\"1.2.0\",data=\"%s\","
             "identity=\"bm25/1.2.0|path=\\\"C:\\\\idx\\\"\\nk1=0.9\"",
             p.data);
    assert_ptr_equal(sg_metrics_gauge("searchgate_route_info", "", labels), p.info); /* the very series */
    sg_buf_t out = {0};
    sg_metrics_render(&out);
    sg_buf_appendc(&out, '\0');
    char line[500];
    snprintf(line, sizeof(line), "searchgate_route_info{%s} 1\n", labels);
    if (strstr(out.base, line) == NULL)
        fail_msg("no line %s in\n%s", line, out.base);
    sg_buf_free(&out);
    sg_provenance_dispose(&p);
    sg_metrics_reset();
}

/* GET /'s member: "provenance": {"type", "plugin", "data", "identity"}, JSON-escaped. */
static void test_json(void **state)
{
    (void)state;
    sg_provenance_t p;
    sg_provenance_init(&p, "wiki", "rerank", "e5", "2.0.0", "model=\"e5\"", NULL);
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "name", "wiki");
    sg_provenance_json(&w, &p);
    sg_jw_end(&w);
    sg_buf_appendc(&b, '\0');
    char want[300];
    snprintf(want, sizeof(want),
             "{\"name\":\"wiki\",\"provenance\":{\"type\":\"rerank\",\"plugin\":\"e5/2.0.0\",\"data\":\"%s\","
             "\"identity\":\"e5/2.0.0|model=\\\"e5\\\"\"}}",
             p.data);
    assert_string_equal(b.base, want);
    sg_buf_free(&b);
    sg_provenance_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_route), cmocka_unit_test(test_fingerprint_covers_the_data_not_the_name),
        cmocka_unit_test(test_fusion_legs),  cmocka_unit_test(test_header_safe_plugin),
        cmocka_unit_test(test_info_metric),  cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
