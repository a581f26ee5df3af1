/*
 * test_stats_ring.c -- the dashboard's per-second ring (gateway/core/stats_ring.c): what one second
 * counts, the p50/p99 of its coarse latency histogram, the window's clamping, the current second
 * left out of the series (it is still filling) and the hit ratio over a window.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "json.h"
#include "stats_ring.h"

/* The series of the last `seconds` as /stats writes it, parsed. */
static cJSON *series(int seconds)
{
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_ring_render_json(&w, seconds);
    sg_jw_end(&w);
    cJSON *root = cJSON_Parse(b.base);
    sg_buf_free(&b);
    assert_non_null(root);
    cJSON *s = cJSON_DetachItemFromObject(root, "series");
    cJSON_Delete(root);
    assert_true(cJSON_IsArray(s));
    return s;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_empty(void **state)
{
    (void)state;
    assert_true(isnan(sg_ring_hit_ratio(60)));
    cJSON *s = series(SG_STATS_WINDOW_MIN);
    assert_int_equal(cJSON_GetArraySize(s), SG_STATS_WINDOW_MIN);
    const cJSON *e;
    double prev_t = 0;
    cJSON_ArrayForEach(e, s)
    {
        assert_true(num(e, "t") > prev_t); /* one entry per second, oldest first */
        prev_t = num(e, "t");
        assert_int_equal(num(e, "requests"), 0);
        assert_int_equal(num(e, "errors"), 0);
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "p50_ms"))); /* no request: no quantile */
    }
    cJSON_Delete(s);
    /* out-of-range windows are clamped: at least one second, at most the ring's 900 */
    s = series(0);
    assert_int_equal(cJSON_GetArraySize(s), 1);
    cJSON_Delete(s);
    s = series(100000);
    assert_int_equal(cJSON_GetArraySize(s), SG_RING_SECONDS - 1);
    cJSON_Delete(s);
}

static void test_one_second(void **state)
{
    (void)state;
    /* start early in a second, so that all four land in the same one */
    while (sg_now_ms() % 1000 > 500)
        sleep_ms(20);
    uint64_t sec = sg_now_ms() / 1000;
    sg_ring_record_request(2, 2, 0, 0, 1000); /* 1 ms: the bucket up to 1.024 ms */
    sg_ring_record_request(3, 1, 2, 0, 1000);
    sg_ring_record_request(1, 0, 1, 0, 1000);
    sg_ring_record_request(4, 0, 0, 1, 100000); /* 100 ms: the bucket up to 131.072 ms */
    assert_int_equal(sg_now_ms() / 1000, sec);
    /* the hit ratio counts the current second too */
    assert_true(fabs(sg_ring_hit_ratio(60) - 3.0 / 6.0) < 1e-9);

    /* the current second is not in the series yet */
    cJSON *s = series(SG_STATS_WINDOW_MIN);
    const cJSON *e;
    cJSON_ArrayForEach(e, s) assert_int_equal(num(e, "requests"), 0);
    cJSON_Delete(s);

    sleep_ms(1000 - sg_now_ms() % 1000 + 20); /* into the next second: the one recorded is whole */
    s = series(SG_STATS_WINDOW_MIN);
    assert_int_equal(cJSON_GetArraySize(s), SG_STATS_WINDOW_MIN);
    const cJSON *last = cJSON_GetArrayItem(s, SG_STATS_WINDOW_MIN - 1);
    assert_int_equal(num(last, "requests"), 4);
    assert_int_equal(num(last, "queries"), 10);
    assert_int_equal(num(last, "hits"), 3);
    assert_int_equal(num(last, "misses"), 3);
    assert_int_equal(num(last, "errors"), 1);
    assert_true(fabs(num(last, "p50_ms") - 1.024) < 1e-9);
    assert_true(fabs(num(last, "p99_ms") - 131.072) < 1e-9);
    for (int i = 0; i < SG_STATS_WINDOW_MIN - 1; ++i)
        assert_int_equal(num(cJSON_GetArrayItem(s, i), "requests"), 0);
    cJSON_Delete(s);
    assert_true(fabs(sg_ring_hit_ratio(60) - 0.5) < 1e-9); /* still inside the window */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_empty), cmocka_unit_test(test_one_second)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
