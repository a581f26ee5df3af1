/*
 * test_keyring.c -- unit tests of the round-robin API keys (backends/common/keyring.c): splitting
 * the variable, config errors that name the variable but never a key, the round robin, rests that
 * only extend and are counted once, waking up, scrubbing keys out of messages, and the metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyring.h"

static int init_from(sg_keyring_t *r, const char *value, char *err, size_t err_size)
{
    setenv("SG_TEST_KEYRING", value, 1);
    cJSON *obj = cJSON_Parse("{\"api_key_env\": \"SG_TEST_KEYRING\"}");
    sg_cfg_t c = {"config", err, err_size};
    int rc = sg_keyring_init(r, &c, obj, "api_key_env", 1, "X-API-KEY: ", 60000);
    cJSON_Delete(obj);
    return rc;
}

static void test_split(void **state)
{
    (void)state;
    sg_keyring_t r;
    char err[256] = "";
    assert_int_equal(init_from(&r, " alpha | beta|gamma ", err, sizeof(err)), 0);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.env, "SG_TEST_KEYRING");
    assert_string_equal(r.keys[0].secret, "alpha");
    assert_string_equal(r.keys[1].header, "X-API-KEY: beta");
    assert_string_equal(r.keys[2].secret, "gamma");
    sg_keyring_free(&r);
    assert_int_equal(init_from(&r, "single", err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    sg_keyring_free(&r);
    /* an optional key that is absent leaves the ring empty; picking from it gives -1 */
    cJSON *obj = cJSON_Parse("{}");
    sg_cfg_t c = {"config", err, sizeof(err)};
    assert_int_equal(sg_keyring_init(&r, &c, obj, "api_key_env", 0, "X: ", 1000), 0);
    uint64_t wake = 7;
    assert_int_equal(r.n, 0);
    assert_int_equal(sg_keyring_pick(&r, 0, &wake), -1);
    assert_int_equal(wake, 0);
    sg_keyring_free(&r);
    cJSON_Delete(obj);
}

static void expect_error(const char *value, const char *needle)
{
    sg_keyring_t r;
    char err[256] = "";
    assert_int_equal(init_from(&r, value, err, sizeof(err)), -1);
    if (strstr(err, needle) == NULL || strstr(err, "SG_TEST_KEYRING") == NULL)
        fail_msg("error \"%s\" does not say \"%s\" and name the variable", err, needle);
    if (strstr(err, "sekrit") != NULL)
        fail_msg("error \"%s\" shows a key", err);
    assert_int_equal(r.n, 0);
}

static void test_config_errors(void **state)
{
    (void)state;
    expect_error("sekrit1||sekrit2", "key 2 of the 3");
    expect_error("sekrit1|", "is empty");
    expect_error("sekrit1| |sekrit2", "is empty");
    expect_error("sekrit1|sekrit1", "are the same key");
    expect_error("sekrit1|sek rit2", "character an HTTP header cannot carry");
    char many[SG_KEYRING_MAX * 8 + 16] = "";
    size_t off = 0;
    for (int i = 0; i <= SG_KEYRING_MAX; ++i)
        off += (size_t)snprintf(many + off, sizeof(many) - off, "%sk%d", i ? "|" : "", i);
    expect_error(many, "at most 64");
    expect_error("", "not set or empty");
}

static void test_round_robin_and_rest(void **state)
{
    (void)state;
    sg_keyring_t r;
    char err[256];
    assert_int_equal(init_from(&r, "a|b|c", err, sizeof(err)), 0);
    int seen[3] = {0};
    for (int i = 0; i < 30; ++i)
        ++seen[sg_keyring_pick(&r, 1000, NULL)];
    assert_int_equal(seen[0], 10);
    assert_int_equal(seen[1], 10);
    assert_int_equal(seen[2], 10);
    /* asking whether all rest does not move the round robin */
    uint64_t w = 5;
    for (int i = 0; i < 4; ++i) {
        assert_int_equal(sg_keyring_all_resting(&r, 1000, &w), 0);
        assert_int_equal(sg_keyring_pick(&r, 1000, NULL), i % 3);
    }
    assert_int_equal(w, 5);
    sg_keyring_pick(&r, 1000, NULL);
    sg_keyring_pick(&r, 1000, NULL); /* back to key a */
    /* key b refused: it rests 60 s and the others carry the load */
    assert_int_equal(sg_keyring_rest(&r, 1, 1000, 0, 401), 1);
    assert_int_equal(sg_keyring_rest(&r, 1, 1500, 0, 401), 0); /* extended, not counted again */
    assert_int_equal(atomic_load(&r.keys[1].rests), 1);
    assert_int_equal(atomic_load(&r.keys[1].rest_until_ms), 61500);
    assert_int_equal(sg_keyring_resting(&r, 2000), 1);
    for (int i = 0; i < 20; ++i)
        assert_int_not_equal(sg_keyring_pick(&r, 2000, NULL), 1);
    /* a longer Retry-After wins; a shorter rest never shortens one */
    assert_int_equal(sg_keyring_rest(&r, 0, 2000, 120000, 429), 1);
    assert_int_equal(atomic_load(&r.keys[0].rest_until_ms), 122000);
    assert_int_equal(sg_keyring_rest(&r, 0, 3000, 0, 429), 0);
    assert_int_equal(atomic_load(&r.keys[0].rest_until_ms), 122000);
    for (int i = 0; i < 5; ++i)
        assert_int_equal(sg_keyring_pick(&r, 3000, NULL), 2);
    /* all resting: -1 and the earliest wake-up, with the status of that key */
    assert_int_equal(sg_keyring_rest(&r, 2, 3000, 0, 402), 1);
    uint64_t wake = 0;
    assert_int_equal(sg_keyring_pick(&r, 4000, &wake), -1);
    assert_int_equal(wake, 61500);
    wake = 0;
    assert_int_equal(sg_keyring_all_resting(&r, 4000, &wake), 1);
    assert_int_equal(wake, 61500);
    assert_int_equal(sg_keyring_first_rest_status(&r, 4000), 401);
    assert_int_equal(sg_keyring_resting(&r, 4000), 3);
    /* b wakes up first; after its rest it counts a new rest again */
    assert_int_equal(sg_keyring_pick(&r, 61500, NULL), 1);
    assert_int_equal(sg_keyring_resting(&r, 61500), 2);
    assert_int_equal(sg_keyring_first_rest_status(&r, 61500), 402);
    assert_int_equal(sg_keyring_rest(&r, 1, 70000, 0, 429), 1);
    assert_int_equal(atomic_load(&r.keys[1].rests), 2);
    sg_keyring_free(&r);
}

static void test_scrub(void **state)
{
    (void)state;
    sg_keyring_t r;
    char err[256];
    assert_int_equal(init_from(&r, "SECRETKEY|ab*|x", err, sizeof(err)), 0);
    char s[64] = "key SECRETKEY and SECRETKEYSECRETKEY, ab*ab* done";
    sg_keyring_scrub(&r, s, sizeof(s));
    assert_string_equal(s, "key *** and ******, ****** done");
    /* a key shorter than the stars may grow the text: it is cut at the buffer, still terminated */
    char t[8] = "x x x x";
    sg_keyring_scrub(&r, t, sizeof(t));
    assert_string_equal(t, "*** ***");
    sg_keyring_free(&r);
}

typedef struct {
    char text[2048];
} sink_t;

static void metric(void *sink, const char *name, const char *help, int type, const char *labels, double value)
{
    (void)help, (void)type;
    sink_t *s = sink;
    size_t l = strlen(s->text);
    snprintf(s->text + l, sizeof(s->text) - l, "%s{%s} %g\n", name, labels != NULL ? labels : "", value);
}

static void test_report(void **state)
{
    (void)state;
    sg_keyring_t r;
    char err[256];
    assert_int_equal(init_from(&r, "k1|k2", err, sizeof(err)), 0);
    sg_keyring_note_call(&r, 0);
    sg_keyring_note_call(&r, 0);
    sg_keyring_note_call(&r, 1);
    sg_keyring_note_failure(&r, 0);
    sg_keyring_note_call(&r, 5);  /* out of range: ignored */
    sg_keyring_note_call(&r, -1); /* "no key": ignored */
    sg_keyring_rest(&r, 0, 10, 0, 401);
    sg_host_api host = {.metric = metric};
    sink_t s = {""};
    sg_keyring_report(&r, &host, &s, "serper", 20);
    assert_string_equal(s.text, "serper_keys{} 2\n"
                                "serper_keys_resting{} 1\n"
                                "serper_key_calls_total{key=\"1\"} 2\n"
                                "serper_key_calls_total{key=\"2\"} 1\n"
                                "serper_key_failures_total{key=\"1\"} 1\n"
                                "serper_key_failures_total{key=\"2\"} 0\n"
                                "serper_key_rests_total{key=\"1\"} 1\n"
                                "serper_key_rests_total{key=\"2\"} 0\n");
    assert_null(strstr(s.text, "k1|"));
    sg_keyring_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split), cmocka_unit_test(test_config_errors), cmocka_unit_test(test_round_robin_and_rest),
        cmocka_unit_test(test_scrub), cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
