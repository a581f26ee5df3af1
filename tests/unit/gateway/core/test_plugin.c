/* Unit tests: the plugin loader (gateway/core/plugin.c) and the example plugin through the ABI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "plugin.h"

static void expect_load_error(const char *file, const char *needle)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof(path), "%s/%s", SG_TEST_PLUGIN_DIR, file);
    sg_plugin_t p;
    assert_int_equal(sg_plugin_load(&p, path, err, sizeof(err)), -1);
    if (strstr(err, needle) == NULL || strstr(err, path) == NULL)
        fail_msg("loading %s: \"%s\" lacks \"%s\" or the path", file, err, needle);
    assert_null(p.dl);
}

static void test_bad_plugins(void **state)
{
    (void)state;
    char want[96];
    snprintf(want, sizeof(want), "built for plugin ABI 2.0, this gateway speaks %d.%d", SG_BACKEND_ABI_MAJOR, SG_BACKEND_ABI_MINOR);
    expect_load_error("sg_test_bad_abi.so", want);
    expect_load_error("sg_test_no_entry.so", "no sg_backend_entry() exported");
    expect_load_error("sg_test_no_search.so", "lacks one of create/destroy/search/health");
    expect_load_error("does_not_exist.so", "cannot load");
}

static sg_status fake_check(sg_backend *self, const char *json, size_t len, char *canon, size_t cs, char *detail, size_t ds)
{
    (void)self, (void)json, (void)len, (void)canon, (void)cs, (void)detail, (void)ds;
    return SG_OK;
}

/* ABI 1.1's check_params is only read when the plugin's table is long enough to hold it: a 1.0
 * plugin (shorter struct_size) has none, whatever bytes follow its table. */
static void test_check_params_by_struct_size(void **state)
{
    (void)state;
    sg_backend_vtable vt;
    memset(&vt, 0, sizeof(vt));
    vt.abi_major = SG_BACKEND_ABI_MAJOR;
    vt.check_params = fake_check;
    vt.struct_size = (uint32_t)sizeof(vt);
    assert_true(sg_plugin_check_params(&vt) == fake_check);
    vt.struct_size = (uint32_t)offsetof(sg_backend_vtable, check_params); /* a 1.0 table */
    assert_null(sg_plugin_check_params(&vt));
    vt.struct_size = (uint32_t)sizeof(vt);
    vt.check_params = NULL;
    assert_null(sg_plugin_check_params(&vt));
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    sg_status status;
    size_t n_queries, n_hits0;
    char first_doc[256];
    double first_score;
} waiter_t;

static void on_done(void *arg, const sg_result *res)
{
    waiter_t *w = arg;
    pthread_mutex_lock(&w->mu);
    ++w->calls;
    w->status = res->status;
    w->n_queries = res->n_queries;
    if (res->status == SG_OK && res->n_queries > 0 && res->queries[0].n_hits > 0) {
        w->n_hits0 = res->queries[0].n_hits;
        snprintf(w->first_doc, sizeof(w->first_doc), "%.*s", (int)res->queries[0].hits[0].doc_len, res->queries[0].hits[0].doc);
        w->first_score = res->queries[0].hits[0].score;
    }
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wait_done(waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->calls == 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void test_example_plugin(void **state)
{
    (void)state;
    sg_plugin_t p;
    char err[512];
    assert_int_equal(sg_plugin_load(&p, SG_PLUGIN_DIR "/sg_example.so", err, sizeof(err)), 0);
    assert_string_equal(p.vt->name, "example");
    const sg_backend_vtable *vt = p.vt;
    sg_backend *b = NULL;
    /* a bad config names the key and the value */
    const char *bad = "{\"documents\":[{\"contents\":\"x\"}],\"delay_ms\":-5}";
    assert_int_not_equal(vt->create(sg_plugin_host_api(), "t", ".", bad, strlen(bad), &b, err, sizeof(err)), SG_OK);
    assert_non_null(strstr(err, "config.delay_ms: expected an integer in [0, 3600000], got -5"));
    const char *cfg = "{\"documents\":[{\"id\":\"0\",\"contents\":\"\\\"Paris\\\"\\nParis is the capital of France.\"},"
                      "{\"id\":\"1\",\"contents\":\"\\\"Oslo\\\"\\nOslo is in Norway.\"}]}";
    assert_int_equal(vt->create(sg_plugin_host_api(), "t", ".", cfg, strlen(cfg), &b, err, sizeof(err)), SG_OK);
    char detail[64];
    assert_int_equal(vt->health(b, detail, sizeof(detail)), SG_OK);
    sg_query q[2] = {{"capital of france", 17}, {"norway", 6}};
    sg_search s = {sizeof(sg_search), 1, q, 2, 0, "test-1", NULL, 0, NULL, 0};
    waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, "", 0};
    assert_int_equal(vt->search(b, &s, on_done, &w), SG_OK);
    wait_done(&w);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, SG_OK);
    assert_int_equal(w.n_queries, 2);
    assert_int_equal(w.n_hits0, 1);
    assert_string_equal(w.first_doc,
                        "{\"id\":\"0\",\"contents\":\"\\\"Paris\\\"\\nParis is the capital of France.\",\"url\":\"\"}");
    assert_true(w.first_score > 0.99);
    vt->destroy(b);
    sg_plugin_unload(&p);
}

static void test_destroy_cancels_pending(void **state)
{
    (void)state;
    sg_plugin_t p;
    char err[512];
    assert_int_equal(sg_plugin_load(&p, SG_PLUGIN_DIR "/sg_example.so", err, sizeof(err)), 0);
    sg_backend *b = NULL;
    const char *cfg = "{\"documents\":[{\"contents\":\"x\"}],\"hang\":true}";
    assert_int_equal(p.vt->create(sg_plugin_host_api(), "t", ".", cfg, strlen(cfg), &b, err, sizeof(err)), SG_OK);
    sg_query q = {"x", 1};
    sg_search s = {sizeof(sg_search), 1, &q, 1, 0, "test-2", NULL, 0, NULL, 0};
    waiter_t w1 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, "", 0};
    waiter_t w2 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, "", 0};
    assert_int_equal(p.vt->search(b, &s, on_done, &w1), SG_OK);
    assert_int_equal(p.vt->search(b, &s, on_done, &w2), SG_OK);
    p.vt->cancel(b, &w1); /* a cancelled search still completes exactly once */
    wait_done(&w1);
    assert_int_equal(w1.status, SG_ECANCELED);
    p.vt->destroy(b); /* the hanging one completes on destroy */
    assert_int_equal(w2.calls, 1);
    assert_int_equal(w2.status, SG_ECANCELED);
    assert_int_equal(w1.calls, 1);
    sg_plugin_unload(&p);
}

static sg_status fake_access(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    (void)self, (void)s, (void)done, (void)cb_data;
    return SG_EUNAVAIL;
}

static int answer_no(sg_backend *self)
{
    (void)self;
    return 0;
}

static int must_not_be_called(sg_backend *self)
{
    (void)self;
    fail_msg("has_access read beyond a 1.0 vtable");
    return 0;
}

/* has_access (ABI 1.1) decides per instance; a 1.0 plugin's table is never read past its size. */
static void test_serves_access(void **state)
{
    (void)state;
    sg_backend_vtable vt = {SG_BACKEND_HEADER("t", "1"), .access = fake_access};
    sg_plugin_t p = {NULL, &vt, NULL};
    assert_int_equal(sg_plugin_serves_access(&p, NULL), 1); /* access, no has_access */
    vt.has_access = answer_no;
    assert_int_equal(sg_plugin_serves_access(&p, NULL), 0);
    vt.access = NULL;
    vt.has_access = NULL;
    assert_int_equal(sg_plugin_serves_access(&p, NULL), 0); /* no access() at all */
    vt.access = fake_access;
    vt.has_access = must_not_be_called;
    vt.abi_minor = 0;
    vt.struct_size = (uint32_t)offsetof(sg_backend_vtable, has_access);
    assert_int_equal(sg_plugin_serves_access(&p, NULL), 1);
}

static void test_status_mapping(void **state)
{
    (void)state;
    assert_int_equal(sg_plugin_status_http(SG_EINVAL), 422);
    assert_int_equal(sg_plugin_status_http(SG_ETOOBIG), 413);
    assert_int_equal(sg_plugin_status_http(SG_ETIMEDOUT), 504);
    assert_int_equal(sg_plugin_status_http(SG_EUPSTREAM), 502);
    assert_int_equal(sg_plugin_status_http(SG_EUNAVAIL), 503);
    assert_int_equal(sg_plugin_status_http(SG_EOVERLOAD), 503);
    assert_int_equal(sg_plugin_status_http(SG_EINTERNAL), 500);
    assert_string_equal(sg_plugin_status_name(SG_EUPSTREAM), "upstream_error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bad_plugins),    cmocka_unit_test(test_check_params_by_struct_size),
                                       cmocka_unit_test(test_example_plugin), cmocka_unit_test(test_destroy_cancels_pending),
                                       cmocka_unit_test(test_serves_access),  cmocka_unit_test(test_status_mapping)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
