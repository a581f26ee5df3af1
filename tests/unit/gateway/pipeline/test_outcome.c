/*
 * Unit tests: the end of a client request (gateway/pipeline/outcome.c), the steps a query and a
 * fusion route's request both end through, driven with a request type of the test's own: finish
 * records it once (the route's meters by status, the client's counters, admitted parts not as the
 * client's requests), fail hands done() the error with the request's id once and drops the
 * reference once, cancel records a 499 without calling done(), and an early answer is counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "outcome.h"
#include "status.h"

/* ---- a request type of the test's own ---- */

typedef struct {
    int answered;
    sg_rate_t rate;
    int stopped, released, answers;
    sg_query_result_t last; /* what answer() got (its strings copied below) */
    char type[32], message[128], request_id[24];
    int admitted;
    uint64_t start_us;
} fake_req_t;

static sg_counter_t requests[SG_NUM_CODES], queries[SG_NUM_CODES], c_requests, c_queries, c_timeouts, c_l1, c_redis, c_misses,
    route_misses, unused;
static sg_hist_t latency;
static sg_gauge_t inflight;
static sg_route_meters_t meters;
static sg_client_conf_t client_conf;
static sg_client_t client = {.id = "c1", .conf = &client_conf};

static void fake_end(void *req, sg_outcome_t *o)
{
    fake_req_t *r = req;
    assert_true(r->answered); /* marked answered before its work stops */
    ++r->stopped;
    o->request_id = "0-42";
    o->what = "test";
    o->client = &client;
    o->n_queries = 3;
    o->start_us = r->start_us;
    o->admitted = r->admitted;
    o->meters = &meters;
    o->cache_misses = &route_misses;
    o->hits_l1 = 1;
    o->hits_redis = 1;
    o->misses = 1;
    o->ev = (sg_trace_event_t){.route = "r"};
}

static void fake_answer(void *req, const sg_query_result_t *res)
{
    fake_req_t *r = req;
    ++r->answers;
    r->last = *res;
    snprintf(r->type, sizeof(r->type), "%s", res->type != NULL ? res->type : "");
    snprintf(r->message, sizeof(r->message), "%s", res->message != NULL ? res->message : "");
    snprintf(r->request_id, sizeof(r->request_id), "%s", res->request_id != NULL ? res->request_id : "");
}

static void fake_release(void *req)
{
    ++((fake_req_t *)req)->released;
}

static const sg_outcome_type_t fake_type = {fake_end, fake_answer, fake_release};

static uint64_t v(const sg_counter_t *c)
{
    return atomic_load(&c->v);
}

static int setup(void **state)
{
    (void)state;
    for (int c = 0; c < SG_NUM_CODES; ++c) {
        meters.requests[c] = &requests[c];
        meters.queries[c] = &queries[c];
    }
    meters.latency = &latency;
    meters.inflight = &inflight;
    client.m_requests = &c_requests;
    client.m_queries = &c_queries;
    client.m_timeouts = &c_timeouts;
    client.m_hits_l1 = &c_l1;
    client.m_hits_redis = &c_redis;
    client.m_misses = &c_misses;
    client.m_rate_limited = client.m_queued = client.m_shed = &unused;
    return 0;
}

/* A 200: counted once on the route (by status, queries, latency, in flight) and on the client. */
static void test_finish_records_once(void **state)
{
    (void)state;
    fake_req_t r = {.start_us = sg_now_us()};
    uint64_t r200 = v(&requests[SG_CODE_200]), q200 = v(&queries[SG_CODE_200]), creq = v(&c_requests), cq = v(&c_queries);
    uint64_t l1 = v(&c_l1), misses = v(&route_misses), lat0 = atomic_load(&latency.count);
    int64_t in0 = atomic_load(&inflight.v);
    sg_outcome_finish(&fake_type, &r, &r.answered, &r.rate, 200, NULL);
    assert_true(r.answered);
    assert_int_equal(r.stopped, 1);
    assert_int_equal(r.answers, 0); /* a 200 is answered by the caller */
    assert_int_equal(r.released, 0);
    assert_int_equal(v(&requests[SG_CODE_200]), r200 + 1);
    assert_int_equal(v(&queries[SG_CODE_200]), q200 + 3);
    assert_int_equal(atomic_load(&latency.count), lat0 + 1);
    assert_int_equal(atomic_load(&inflight.v), in0 - 1);
    assert_int_equal(v(&c_requests), creq + 1);
    assert_int_equal(v(&c_queries), cq + 3);
    assert_int_equal(v(&c_l1), l1 + 1);
    assert_int_equal(v(&route_misses), misses + 1);
}

/* A part its caller admitted (a fusion route's leg) is counted on its route, not as one of the
 * client's requests; a 504 counts as the client's timeout. */
static void test_admitted_part_and_timeout(void **state)
{
    (void)state;
    fake_req_t r = {.start_us = sg_now_us(), .admitted = 1};
    uint64_t r504 = v(&requests[SG_CODE_504]), creq = v(&c_requests), cq = v(&c_queries), tmo = v(&c_timeouts);
    sg_outcome_finish(&fake_type, &r, &r.answered, &r.rate, 504, "timeout");
    assert_int_equal(v(&requests[SG_CODE_504]), r504 + 1);
    assert_int_equal(v(&c_requests), creq);
    assert_int_equal(v(&c_queries), cq);
    assert_int_equal(v(&c_timeouts), tmo + 1);
}

/* fail: the error, with the request's id, handed to done() once; the reference dropped once; a
 * second failure of the same request (a late deadline) changes nothing. */
static void test_fail_answers_once(void **state)
{
    (void)state;
    fake_req_t r = {.start_us = sg_now_us()};
    uint64_t r429 = v(&requests[SG_CODE_429]);
    sg_outcome_fail(&fake_type, &r, &r.answered, &r.rate, 429, "rate_limited", "slow down", 2);
    assert_int_equal(r.answers, 1);
    assert_int_equal(r.released, 1);
    assert_int_equal(r.last.status, 429);
    assert_string_equal(r.type, "rate_limited");
    assert_string_equal(r.message, "slow down");
    assert_int_equal(r.last.retry_after_s, 2);
    assert_string_equal(r.request_id, "0-42");
    assert_int_equal(r.last.n, 0);
    assert_null(r.last.blobs);
    assert_int_equal(v(&requests[SG_CODE_429]), r429 + 1);
    sg_outcome_fail(&fake_type, &r, &r.answered, &r.rate, 504, "timeout", "late", 0);
    assert_int_equal(r.answers, 1);
    assert_int_equal(r.released, 1);
    assert_int_equal(r.stopped, 1);
    assert_int_equal(v(&requests[SG_CODE_429]), r429 + 1);
}

/* cancel: counted as 499 (the "other" status), done() not called, the reference dropped once;
 * nothing once answered. */
static void test_cancel(void **state)
{
    (void)state;
    fake_req_t r = {.start_us = sg_now_us()};
    uint64_t other = v(&requests[SG_CODE_OTHER]);
    sg_outcome_cancel(&fake_type, &r, &r.answered, &r.rate);
    assert_int_equal(r.answers, 0);
    assert_int_equal(r.released, 1);
    assert_int_equal(r.stopped, 1);
    assert_int_equal(v(&requests[SG_CODE_OTHER]), other + 1);
    sg_outcome_cancel(&fake_type, &r, &r.answered, &r.rate);
    sg_outcome_fail(&fake_type, &r, &r.answered, &r.rate, 503, "unavailable", "x", 1);
    assert_int_equal(r.released, 1);
    assert_int_equal(r.answers, 0);
    assert_int_equal(v(&requests[SG_CODE_OTHER]), other + 1);
}

/* A request answered before it became one: counted on the route by status, no client. */
static void test_count_early(void **state)
{
    (void)state;
    uint64_t r422 = v(&requests[SG_CODE_422]), q422 = v(&queries[SG_CODE_422]), creq = v(&c_requests);
    int64_t in0 = atomic_load(&inflight.v);
    sg_outcome_count_early(&meters, 422, 5, sg_now_us());
    assert_int_equal(v(&requests[SG_CODE_422]), r422 + 1);
    assert_int_equal(v(&queries[SG_CODE_422]), q422 + 5);
    assert_int_equal(v(&c_requests), creq);
    assert_int_equal(atomic_load(&inflight.v), in0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finish_records_once), cmocka_unit_test(test_admitted_part_and_timeout),
        cmocka_unit_test(test_fail_answers_once),   cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_count_early),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
