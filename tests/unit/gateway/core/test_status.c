/*
 * Unit tests: the HTTP statuses the gateway answers (gateway/core/status.c): the per-status
 * metrics' index and its table, the reason phrases, and a route's per-status metrics (registered
 * for every status, counted by status with the queries and the latency).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "status.h"
#include "buf.h"
#include "common.h"

static void test_code_index(void **state)
{
    (void)state;
    static const int counted[] = {200, 400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 502, 503, 504};
    assert_int_equal(sizeof(counted) / sizeof(counted[0]), SG_NUM_CODES - 1);
    for (int i = 0; i < SG_NUM_CODES - 1; ++i) {
        assert_int_equal(sg_code_values[i], counted[i]);
        assert_int_equal(sg_code_index(counted[i]), i);
    }
    assert_int_equal(sg_code_index(200), SG_CODE_200);
    assert_int_equal(sg_code_index(413), SG_CODE_413);
    assert_int_equal(sg_code_index(504), SG_CODE_504);
    assert_int_equal(sg_code_values[SG_CODE_OTHER], 0);
    static const int others[] = {0, 1, 199, 201, 202, 304, 402, 406, 415, 418, 499, 501, 505, 599, -1, 1000};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); ++i)
        assert_int_equal(sg_code_index(others[i]), SG_CODE_OTHER);
}

static void test_reasons(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *reason;
    } cases[] = {{200, "OK"},
                 {202, "Accepted"},
                 {400, "Bad Request"},
                 {401, "Unauthorized"},
                 {403, "Forbidden"},
                 {404, "Not Found"},
                 {405, "Method Not Allowed"},
                 {406, "Not Acceptable"},
                 {408, "Request Timeout"},
                 {413, "Payload Too Large"},
                 {415, "Unsupported Media Type"},
                 {422, "Unprocessable Entity"},
                 {429, "Too Many Requests"},
                 {500, "Internal Server Error"},
                 {502, "Bad Gateway"},
                 {503, "Service Unavailable"},
                 {504, "Gateway Timeout"},
                 {0, "Error"},
                 {201, "Error"},
                 {418, "Error"},
                 {499, "Error"},
                 {-1, "Error"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
        assert_string_equal(sg_http_reason(cases[i].status), cases[i].reason);
    /* every status counted apart has a phrase of its own */
    for (int i = 0; i < SG_NUM_CODES - 1; ++i)
        assert_string_not_equal(sg_http_reason(sg_code_values[i]), "Error");
}

static void test_metrics(void **state)
{
    (void)state;
    sg_route_meters_t m, again, other;
    sg_route_meters_register(&m, "r1");
    sg_counter_t **requests = m.requests, **queries = m.queries;
    assert_non_null(m.latency);
    assert_non_null(m.inflight);
    for (int c = 0; c < SG_NUM_CODES; ++c) {
        assert_non_null(requests[c]);
        assert_non_null(queries[c]);
        assert_ptr_not_equal(requests[c], queries[c]);
        for (int d = 0; d < c; ++d)
            assert_ptr_not_equal(requests[c], requests[d]);
    }
    /* the same series when registered again (a reload keeps a route's counts) */
    sg_route_meters_register(&again, "r1");
    assert_memory_equal(again.requests, requests, sizeof(again.requests));
    /* another route: series of its own */
    sg_route_meters_register(&other, "r2");
    assert_ptr_not_equal(other.requests[SG_CODE_200], requests[SG_CODE_200]);

    uint64_t start = sg_now_us() - 20000; /* 20 ms ago */
    uint64_t l = sg_route_meters_count(&m, 200, 3, start);
    assert_true(l >= 20000 && l < 20000 + 10 * 1000000ull);
    sg_route_meters_count(&m, 429, 2, sg_now_us());
    sg_route_meters_count(&m, 499, 5, sg_now_us()); /* a client gone: "other" */
    assert_int_equal(atomic_load(&requests[SG_CODE_200]->v), 1);
    assert_int_equal(atomic_load(&queries[SG_CODE_200]->v), 3);
    assert_int_equal(atomic_load(&requests[SG_CODE_429]->v), 1);
    assert_int_equal(atomic_load(&queries[SG_CODE_429]->v), 2);
    assert_int_equal(atomic_load(&requests[SG_CODE_OTHER]->v), 1);
    assert_int_equal(atomic_load(&queries[SG_CODE_OTHER]->v), 5);
    assert_int_equal(atomic_load(&requests[SG_CODE_504]->v), 0);
    assert_int_equal(atomic_load(&other.requests[SG_CODE_200]->v), 0);

    /* the labels: backend and code, "other" for SG_CODE_OTHER */
    sg_buf_t b = {0};
    sg_metrics_render(&b);
    sg_buf_appendc(&b, '\0');
    assert_non_null(strstr(b.base, "searchgate_requests_total{backend=\"r1\",code=\"200\"} 1\n"));
    assert_non_null(strstr(b.base, "searchgate_queries_total{backend=\"r1\",code=\"429\"} 2\n"));
    assert_non_null(strstr(b.base, "searchgate_requests_total{backend=\"r1\",code=\"other\"} 1\n"));
    assert_non_null(strstr(b.base, "searchgate_queries_total{backend=\"r1\",code=\"other\"} 5\n"));
    assert_non_null(strstr(b.base, "searchgate_requests_total{backend=\"r2\",code=\"504\"} 0\n"));
    assert_non_null(strstr(b.base, "searchgate_request_duration_seconds_count{backend=\"r1\"} 3\n"));
    sg_buf_free(&b);
    sg_metrics_reset();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_code_index), cmocka_unit_test(test_reasons),
                                       cmocka_unit_test(test_metrics)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
