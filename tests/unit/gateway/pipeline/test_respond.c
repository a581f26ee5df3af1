/*
 * test_respond.c -- the pure parts of the bounds of answers (issue 19): a blob's pieces in each
 * shape are exactly the bytes the answer had when it was built whole (the streaming writer
 * copies pieces), answer sizes, the process's response budget, the two 413 checks of an answer's
 * size, and what a route can ever admit of one request (sg_dispatch_capacity: 413 instead of 503
 * forever).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "respond.h"

static sg_blob_t *blob_of(size_t n)
{
    static const char *const docs[] = {"{\"id\":\"0\",\"contents\":\"a\"}", "{\"id\":\"1\",\"contents\":\"b, c\"}",
                                       "{\"id\":\"2\",\"contents\":\"\\u00e9t\\u00e9\"}"};
    sg_hit hits[3];
    for (size_t i = 0; i < n; ++i)
        hits[i] = (sg_hit){docs[i], strlen(docs[i]), 0.5 + (double)i};
    sg_hits h = {hits, n};
    return sg_blob_from_hits(&h);
}

/* The blob's bytes in `shape`, joined from its pieces. */
static char *join_pieces(const sg_blob_t *b, int shape, size_t *len)
{
    char *out = malloc(sg_blob_shape_len(b, shape) + 1);
    size_t at = 0;
    const char *p;
    size_t n;
    for (uint32_t part = 0; sg_blob_piece(b, shape, part, &p, &n); ++part) {
        assert_true(at + n <= sg_blob_shape_len(b, shape));
        memcpy(out + at, p, n);
        at += n;
    }
    out[at] = '\0';
    *len = at;
    return out;
}

static void test_pieces_are_the_fragment(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 3; ++n) {
        sg_blob_t *b = blob_of(n);
        for (int shape = SG_SHAPE_FLAT; shape <= SG_SHAPE_SCORED; ++shape) {
            char want[1024];
            size_t wlen = (size_t)(sg_blob_write_fragment(b, shape == SG_SHAPE_SCORED, want) - want);
            size_t len;
            char *got = join_pieces(b, shape, &len);
            assert_int_equal(len, wlen);
            assert_memory_equal(got, want, wlen);
            assert_int_equal(sg_blob_shape_len(b, shape), wlen);
            free(got);
        }
        size_t len;
        char *page = join_pieces(b, SG_SHAPE_PAGE, &len);
        if (n == 0)
            assert_string_equal(page, "null");
        else
            assert_string_equal(page, "{\"id\":\"0\",\"contents\":\"a\"}");
        assert_int_equal(sg_blob_shape_len(b, SG_SHAPE_PAGE), len);
        free(page);
        sg_blob_release(b);
    }
}

static void test_sizes(void **state)
{
    (void)state;
    sg_blob_t *a = blob_of(2), *b = blob_of(0);
    sg_blob_t *answer[] = {a, b, a, a};
    /* {"result":[F(a),F(b),F(a),F(a)]} */
    uint64_t want = 11 + 3 * sg_blob_fragment_len(a, 0) + sg_blob_fragment_len(b, 0) + 3 + 2;
    assert_int_equal(sg_respond_size(answer, 4, SG_SHAPE_FLAT), want);
    assert_int_equal(sg_respond_envelope(4), 13 + 3);
    assert_int_equal(sg_respond_envelope(0), 13);
    /* a repeated query's blob is held once */
    assert_int_equal(sg_respond_blob_bytes(answer, 4), sg_blob_footprint(a) + sg_blob_footprint(b));
    sg_blob_release(a);
    sg_blob_release(b);
}

static void test_budget(void **state)
{
    (void)state;
    sg_server_t s;
    memset(&s, 0, sizeof(s));
    s.responses.limit = 1000;
    assert_int_equal(sg_respond_reserve(&s, 0, 600), 0);
    assert_int_equal(sg_respond_reserve(&s, 0, 600), -1);  /* 1200 over 1000, and someone holds 600 */
    assert_int_equal(sg_respond_reserve(&s, 0, 400), 0);   /* fits exactly */
    assert_int_equal(sg_respond_reserve(&s, 600, 10), -1); /* the holder of 600 may not grow: others hold 400 */
    sg_respond_release(&s, 400);
    assert_int_equal(sg_respond_reserve(&s, 600, 5000), 0); /* alone: one answer larger than the budget still runs */
    sg_respond_grow(&s, 7);
    assert_int_equal(atomic_load(&s.responses.held), 5607);
    sg_respond_release(&s, 5607);
    assert_int_equal(atomic_load(&s.responses.held), 0);
    assert_int_equal(sg_respond_reserve(&s, 0, 5000), 0); /* nothing held: a large one starts */
    sg_respond_release(&s, 5000);
}

/* The two 413 checks a query's answer and a fused one share: the estimate before any work (half
 * the mean DOC size a document) and the exact size, each counted by stage, with the message that
 * names the route, the sizes and the limit. */
static void test_too_large_checks(void **state)
{
    (void)state;
    sg_server_t s;
    memset(&s, 0, sizeof(s));
    sg_counter_t estimate = {0}, exact = {0};
    s.responses.m_too_large_estimate = &estimate;
    s.responses.m_too_large_exact = &exact;
    char msg[400] = "";
    sg_respond_bound_t b = {"backend", "wiki", 3099, 100};
    /* 100 + 2 x 3 x 500 = 3100 */
    assert_int_equal(sg_respond_check_estimate(&s, &b, 2, "topk", 3, 1000, ", half the route's mean", msg, sizeof(msg)), 3100);
    assert_string_equal(msg, "backend wiki: the answer would be at least about 3100 bytes (2 queries x topk 3 x ~500 bytes per "
                             "document, half the route's mean), over limits.max_response_bytes (3099): ask for fewer queries "
                             "or a smaller topk");
    assert_int_equal(atomic_load(&estimate.v), 1);
    b.max = 3100; /* at the limit it runs */
    assert_int_equal(sg_respond_check_estimate(&s, &b, 2, "topk", 3, 1000, "", msg, sizeof(msg)), 0);
    b.max = 0; /* no bound, or no mean known: nothing to estimate */
    assert_int_equal(sg_respond_check_estimate(&s, &b, 2, "topk", 3, 1000, "", msg, sizeof(msg)), 0);
    b.max = 10;
    assert_int_equal(sg_respond_check_estimate(&s, &b, 2, "topk", 3, 0, "", msg, sizeof(msg)), 0);
    assert_int_equal(atomic_load(&estimate.v), 1);

    sg_respond_bound_t f = {"fusion route", "hy", 100, 20};
    assert_int_equal(sg_respond_check_exact(&s, &f, 100, 0, 2, msg, sizeof(msg)), 0);
    assert_int_equal(sg_respond_check_exact(&s, &f, 101, 0, 2, msg, sizeof(msg)), -1);
    assert_string_equal(msg, "fusion route hy: the answer is 101 bytes, over limits.max_response_bytes (100): ask for fewer "
                             "queries or a smaller topk");
    assert_int_equal(sg_respond_check_exact(&s, &f, 150, 1, 3, msg, sizeof(msg)), -1);
    assert_string_equal(msg, "fusion route hy: the answer is already 150 bytes with 1 of 3 distinct queries still to come, over "
                             "limits.max_response_bytes (100): ask for fewer queries or a smaller topk");
    assert_int_equal(atomic_load(&exact.v), 2);
    f.max = 0;
    assert_int_equal(sg_respond_check_exact(&s, &f, 1u << 30, 0, 1, msg, sizeof(msg)), 0);
    assert_int_equal(atomic_load(&estimate.v), 1);
}

/* The route's mean DOC size (route.h), which the estimate reads: the first call's mean, then a
 * moving mean of 1/8 per call, never 0 once measured; search and access apart. */
static void test_doc_mean(void **state)
{
    (void)state;
    sg_route_core_t core;
    sg_route_t b;
    memset(&core, 0, sizeof(core));
    memset(&b, 0, sizeof(b));
    b.core = &core;
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_SEARCH), 0); /* unknown */
    sg_route_observe_docs(&b, SG_OP_SEARCH, 0, 0);             /* no DOC: no sample */
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_SEARCH), 0);
    sg_route_observe_docs(&b, SG_OP_SEARCH, 3000, 3); /* the first call sets it */
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_SEARCH), 1000);
    sg_route_observe_docs(&b, SG_OP_SEARCH, 1800, 1); /* (1000 x 7 + 1800 + 4) / 8 */
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_SEARCH), 1100);
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_ACCESS), 0); /* its own mean */
    sg_route_observe_docs(&b, SG_OP_ACCESS, 0, 5);             /* empty DOCs count as 1 byte */
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_ACCESS), 1);
    sg_route_observe_docs(&b, SG_OP_ACCESS, (uint64_t)UINT32_MAX * 4, 2); /* clamped */
    assert_int_equal(sg_route_doc_bytes(&b, SG_OP_ACCESS), ((uint64_t)1 * 7 + UINT32_MAX + 4) / 8);
}

/* A route as sg_dispatch_setup_route() leaves it: its conf, caps and chunk. */
static void route_init(sg_route_t *b, sg_backend_conf_t *bc, uint32_t max_inflight, uint32_t max_queue, uint32_t chunk)
{
    memset(b, 0, sizeof(*b));
    memset(bc, 0, sizeof(*bc));
    bc->name = "r";
    bc->max_inflight = max_inflight;
    bc->max_queue = max_queue;
    bc->chunk = chunk;
    b->conf = bc;
    b->chunk[0] = b->chunk[1] = chunk;
    for (int i = 0; i < SG_NUM_CAPS; ++i)
        b->caps[i].burst = 1;
}

static void test_capacity(void **state)
{
    (void)state;
    sg_route_t b;
    sg_backend_conf_t bc;
    char msg[600];
    /* the route: max_inflight 8, max_queue 10, calls of 64: the first call runs alone on an
     * idle route, the second must wait in the queue */
    route_init(&b, &bc, 8, 10, 64);
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 74);
    assert_int_equal(sg_dispatch_describe_capacity(&b, 0, 74, msg, sizeof(msg)), 0);
    assert_int_equal(sg_dispatch_describe_capacity(&b, 0, 128, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "can never admit 128 queries"));
    assert_non_null(strstr(msg, "at most 74 (max_inflight 8, max_queue 10, calls of 64 queries)"));
    assert_non_null(strstr(msg, "raise the route's max_queue to 64"));
    /* no in-flight cap: everything starts at once */
    route_init(&b, &bc, 0, 0, 64);
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 10000);
    /* calls that fit the cap together start together: 4 calls of 16 under 64, then 10 queued */
    route_init(&b, &bc, 64, 10, 16);
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 74);
    /* a plugin that counts queries (serper): max_inflight 1 and max_queue 1 in calls of 1 */
    route_init(&b, &bc, 0, 100000, 1);
    b.caps[SG_CAP_SEARCH].max_inflight = 1;
    b.caps[SG_CAP_SEARCH].max_queue = 1;
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 2);
    assert_int_equal(sg_dispatch_describe_capacity(&b, 0, 3, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "the plugin's max_queue is the bound"));
    /* a plugin that counts calls (upstream): 2 run, 3 wait, whatever their size */
    route_init(&b, &bc, 0, 100000, 64);
    b.caps[SG_CAP_SEARCH].per_call = 1;
    b.caps[SG_CAP_SEARCH].max_inflight = 2;
    b.caps[SG_CAP_SEARCH].max_queue = 3;
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 5 * 64);
    /* access shares the search caps when the plugin says so */
    b.access_shares_search = 1;
    assert_int_equal(sg_dispatch_capacity(&b, 1, 10000), 5 * 64);
    b.access_shares_search = 0;
    assert_int_equal(sg_dispatch_capacity(&b, 1, 10000), 10000);
    /* a qps bucket: a burst of 4 starts at once, the rest waits for tokens in the queue */
    route_init(&b, &bc, 0, 6, 2);
    b.caps[SG_CAP_ROUTE].qps = 1;
    b.caps[SG_CAP_ROUTE].burst = 4;
    assert_int_equal(sg_dispatch_capacity(&b, 0, 10000), 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_are_the_fragment), cmocka_unit_test(test_sizes),    cmocka_unit_test(test_budget),
        cmocka_unit_test(test_too_large_checks),        cmocka_unit_test(test_doc_mean), cmocka_unit_test(test_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
