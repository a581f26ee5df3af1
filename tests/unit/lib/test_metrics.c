/*
 * Unit tests: the metric registry (lib/metrics.c): series found or created once per name and label
 * set, the Prometheus text exposition (HELP/TYPE once per family, cumulative histogram buckets,
 * the sum in seconds, integers without a fraction, NaN and infinities), the JSON form /stats
 * serves, collectors appended to /metrics, and the reset at exit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include "buf.h"
#include "json.h"
#include "metrics.h"

static void expect_in(const char *text, const char *line)
{
    if (strstr(text, line) == NULL)
        fail_msg("expected \"%s\" in:\n%s", line, text);
}

static void test_series_and_text(void **state)
{
    (void)state;
    sg_counter_t *a = sg_metrics_counter("t_requests_total", "Requests.", "code=\"200\"");
    sg_counter_t *b = sg_metrics_counter("t_requests_total", "ignored: the first help stays", "code=\"503\"");
    assert_ptr_equal(sg_metrics_counter("t_requests_total", "Requests.", "code=\"200\""), a); /* found again */
    assert_ptr_not_equal(a, b);
    sg_counter_add(a, 3);
    sg_counter_add(a, 2);
    sg_counter_add(b, 1);
    sg_gauge_t *g = sg_metrics_gauge("t_inflight", "In flight.", "");
    sg_gauge_add(g, 5);
    sg_gauge_add(g, -7);
    sg_hist_t *h = sg_metrics_hist("t_latency_seconds", "Latency.", "route=\"r\"");
    sg_hist_observe_us(h, 400);      /* 0.0004 s: the first bucket (0.0005) */
    sg_hist_observe_us(h, 3000);     /* 0.003 s: the 0.005 bucket */
    sg_hist_observe_us(h, 90000000); /* 90 s: beyond the last finite bound */
    sg_buf_t out = {0};
    sg_metrics_render(&out);
    const char *t = out.base;
    expect_in(t, "# HELP t_requests_total Requests.\n# TYPE t_requests_total counter\n"
                 "t_requests_total{code=\"200\"} 5\nt_requests_total{code=\"503\"} 1\n");
    assert_null(strstr(t, "ignored"));
    expect_in(t, "# TYPE t_inflight gauge\nt_inflight -2\n");
    expect_in(t, "# TYPE t_latency_seconds histogram\n");
    expect_in(t, "t_latency_seconds_bucket{route=\"r\",le=\"0.0005\"} 1\n");
    expect_in(t, "t_latency_seconds_bucket{route=\"r\",le=\"0.0025\"} 1\n"); /* cumulative */
    expect_in(t, "t_latency_seconds_bucket{route=\"r\",le=\"0.005\"} 2\n");
    expect_in(t, "t_latency_seconds_bucket{route=\"r\",le=\"60\"} 2\n");
    expect_in(t, "t_latency_seconds_bucket{route=\"r\",le=\"+Inf\"} 3\n");
    expect_in(t, "t_latency_seconds_sum{route=\"r\"} 90.00"); /* seconds */
    expect_in(t, "t_latency_seconds_count{route=\"r\"} 3\n");
    /* each family's HELP once */
    const char *first = strstr(t, "# HELP t_requests_total");
    assert_null(strstr(first + 1, "# HELP t_requests_total"));
    sg_buf_free(&out);

    sg_buf_t v = {0};
    sg_metrics_render_value(&v, 42);
    sg_buf_appendc(&v, ' ');
    sg_metrics_render_value(&v, 0.25);
    sg_buf_appendc(&v, ' ');
    sg_metrics_render_value(&v, NAN);
    sg_buf_appendc(&v, ' ');
    sg_metrics_render_value(&v, INFINITY);
    sg_buf_appendc(&v, ' ');
    sg_metrics_render_value(&v, -INFINITY);
    assert_string_equal(v.base, "42 0.25 NaN +Inf -Inf");
    sg_buf_free(&v);
}

static void collector(sg_buf_t *out, void *arg)
{
    sg_buf_appendf(out, "t_collected %d\n", *(int *)arg);
}

static void test_json_collectors_reset(void **state)
{
    (void)state;
    sg_metrics_reset();
    sg_counter_add(sg_metrics_counter("t_a_total", "A.", ""), 7);
    sg_gauge_set(sg_metrics_gauge("t_b", "B.", "k=\"v\""), -3);
    sg_hist_observe_us(sg_metrics_hist("t_c_seconds", "C.", ""), 1500000);
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_metrics_render_json(&w);
    cJSON *o = cJSON_Parse(b.base);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "t_a_total")->valuedouble, 7);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "t_b{k=\"v\"}")->valuedouble, -3);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "t_c_seconds");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(c, "count")->valuedouble, 1);
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(c, "sum")->valuedouble - 1.5) < 1e-9);
    assert_int_equal(cJSON_GetArraySize(o), 3); /* the reset left nothing of the first test */
    cJSON_Delete(o);
    sg_buf_free(&b);

    static int n = 11;
    sg_metrics_add_collector(collector, &n);
    sg_buf_t out = {0};
    sg_metrics_render(&out);
    expect_in(out.base, "t_a_total 7\n");
    const char *end = out.base + out.len - strlen("t_collected 11\n");
    assert_string_equal(end, "t_collected 11\n"); /* collectors write after the registry's families */
    sg_buf_free(&out);

    sg_metrics_reset(); /* families and collectors gone */
    sg_buf_t empty = {0};
    sg_metrics_render(&empty);
    assert_true(empty.len == 0);
    sg_buf_free(&empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_series_and_text), cmocka_unit_test(test_json_collectors_reset)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sg_metrics_reset();
    return rc;
}
