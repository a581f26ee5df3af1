/*
 * Unit tests: fusion routes as a route type (gateway/routes/fusion_route.c) driven directly, the
 * way http/retrieve.c and MCP call sg_fusion_start() -- no HTTP anywhere. Two plugin routes a and
 * b over a fake plugin the test completes, the fusion route f (RRF) over them (fusion_gateway.h):
 * the fan-out of a batch's distinct queries to every leg, the merge of their answers, partial
 * answers, the status when every leg failed, the 413 estimate and exact checks, the batch's rate
 * limit, deadlines, cancellation and the GET / entry. The merge itself: test_fusion.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <cJSON.h>
#include "fusion_gateway.h"

static int setup(void **state)
{
    (void)state;
    fg_setup();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fg_teardown();
    return 0;
}

/* ---- what the caller sees ---- */

typedef struct {
    int calls; /* done() invocations */
    int status;
    char type[32], message[400], partial[128], body[2048];
    int has_partial;
    uint32_t n, retry_after_s;
} outcome_t;

/* Copies the result out (everything in it is borrowed for the callback), as a caller would: the
 * blobs as scored fragments joined by '|'. */
static void on_done(void *ctx, const sg_query_result_t *res, const char *partial)
{
    outcome_t *o = ctx;
    ++o->calls;
    o->status = res->status;
    o->n = res->n;
    o->retry_after_s = res->retry_after_s;
    snprintf(o->type, sizeof(o->type), "%s", res->type != NULL ? res->type : "");
    snprintf(o->message, sizeof(o->message), "%s", res->message != NULL ? res->message : "");
    o->has_partial = partial != NULL;
    snprintf(o->partial, sizeof(o->partial), "%s", partial != NULL ? partial : "");
    char *p = o->body;
    for (uint32_t i = 0; i < res->n; ++i) {
        assert_true((size_t)(p - o->body) + sg_blob_fragment_len(res->blobs[i], 1) + 2 < sizeof(o->body));
        if (i != 0)
            *p++ = '|';
        p = sg_blob_write_fragment(res->blobs[i], 1, p);
    }
    *p = '\0';
}

static sg_fusion_query_t *start_spec(outcome_t *o, sg_fusion_spec_t *spec, const char *const *texts, uint32_t n)
{
    static uint32_t lens[8];
    for (uint32_t i = 0; i < n; ++i)
        lens[i] = (uint32_t)strlen(texts[i]);
    spec->gen = &fg_gen;
    spec->route = 0;
    if (spec->client == NULL)
        spec->client = &fg_client;
    spec->texts = texts;
    spec->lens = lens;
    spec->n = n;
    memset(o, 0, sizeof(*o));
    return sg_fusion_start(&fg_loop, spec, on_done, o);
}

static sg_fusion_query_t *start(outcome_t *o, const char *const *texts, uint32_t n)
{
    sg_fusion_spec_t spec = {0};
    return start_spec(o, &spec, texts, n);
}

/* Asserts that scored fragment `frag` (one query's list) holds the documents `ids` (comma-separated)
 * with `scores`, in that order. */
static void expect_list(const char *frag, size_t len, const char *ids, const double *scores)
{
    cJSON *a = cJSON_ParseWithLength(frag, len);
    assert_true(cJSON_IsArray(a));
    int i = 0;
    for (const char *p = ids; *p != '\0'; ++i) {
        size_t l = strcspn(p, ",");
        cJSON *h = cJSON_GetArrayItem(a, i);
        assert_non_null(h);
        cJSON *id = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "document"), "id");
        assert_true(cJSON_IsString(id));
        assert_int_equal(strlen(id->valuestring), l);
        assert_memory_equal(id->valuestring, p, l);
        cJSON *score = cJSON_GetObjectItem(h, "score");
        assert_true(cJSON_IsNumber(score));
        assert_true(fabs(score->valuedouble - scores[i]) < 1e-9);
        p += l + (p[l] == ',');
    }
    assert_int_equal(cJSON_GetArraySize(a), i);
    cJSON_Delete(a);
}

/* The i-th '|'-separated list of o->body. */
static void expect_body_list(const outcome_t *o, int i, const char *ids, const double *scores)
{
    const char *p = o->body;
    for (int k = 0; k < i; ++k) {
        p = strchr(p, '|');
        assert_non_null(p);
        ++p;
    }
    const char *end = strchr(p, '|');
    expect_list(p, end != NULL ? (size_t)(end - p) : strlen(p), ids, scores);
}

static uint64_t partial_count(const char *leg, const char *reason)
{
    char l[128];
    snprintf(l, sizeof(l), "route=\"f\",leg=\"%s\",reason=\"%s\"", leg, reason);
    return atomic_load(&sg_metrics_counter("searchgate_fusion_partial_total",
                                           "Fusion requests answered without a leg, by fusion route, leg and the leg's error type.",
                                           l)
                            ->v);
}

/* ---- the tests ---- */

/* Every leg searches the batch's distinct queries once, at the leg depth; the legs' lists are
 * fused by RRF (a DOC found by both legs first), one list per query in the caller's order; the
 * same batch again is answered from the legs' L1 before sg_fusion_start() returns. */
static void test_fan_out_and_merge(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t ok_before = fg_requests(200);
    outcome_t o;
    const char *texts[] = {"fm x", "fm y", "fm x"};
    sg_fusion_query_t *q = start(&o, texts, 3);
    assert_non_null(q);
    assert_int_equal(o.calls, 0);
    assert_int_equal(fg_n_calls, 2); /* one call per leg */
    size_t ca = fg_call_of(0, 0), cb = fg_call_of(1, 0);
    for (size_t c = 0; c < 2; ++c) {
        const sg_search *s = fg_calls[c == 0 ? ca : cb].s;
        assert_int_equal(s->n_queries, 2); /* "fm x" once */
        assert_int_equal(s->topk, 10);     /* sg_fusion_depth(): max(topk 3, 10) */
        assert_memory_equal(s->queries[0].text, "fm x", 4);
        assert_memory_equal(s->queries[1].text, "fm y", 4);
    }
    fg_complete(ca, "A,B,D");
    fg_run_loop();
    assert_int_equal(o.calls, 0); /* b still runs */
    fg_complete(cb, "B,C");
    fg_run_loop();
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 200);
    assert_int_equal(o.n, 3);
    assert_false(o.has_partial);
    /* RRF k=60: B 1/62 + 1/61, A 1/61, C 1/62 (D 1/63 is cut by topk 3) */
    const double want[] = {1.0 / 62 + 1.0 / 61, 1.0 / 61, 1.0 / 62};
    for (int i = 0; i < 3; ++i)
        expect_body_list(&o, i, "B,A,C", want);
    assert_int_equal(fg_requests(200), ok_before + 1);

    outcome_t o2;
    const char *again[] = {"fm y", "fm x"};
    assert_null(start(&o2, again, 2)); /* every leg answered from L1: done() already ran */
    assert_int_equal(o2.calls, 1);
    assert_int_equal(o2.status, 200);
    assert_int_equal(o2.n, 2);
    expect_body_list(&o2, 0, "B,A,C", want);
    expect_body_list(&o2, 1, "B,A,C", want);
    assert_int_equal(fg_n_calls, 2);

    /* a topk of the request: the fused list's length, and the legs' depth beyond 10 */
    outcome_t o3;
    sg_fusion_spec_t spec = {.topk = 12};
    const char *one[] = {"fm z"};
    assert_non_null(start_spec(&o3, &spec, one, 1));
    assert_int_equal(fg_calls[fg_call_of(0, 2)].s->topk, 12);
    fg_complete(fg_call_of(0, 2), "A");
    fg_complete(fg_call_of(1, 2), "C,A");
    fg_run_loop();
    const double want3[] = {1.0 / 61 + 1.0 / 62, 1.0 / 61};
    expect_body_list(&o3, 0, "A,C", want3);
}

/* A leg that failed: the answer is the other legs' fusion, the failed legs named for the
 * X-Searchgate-Fusion-Partial header and counted by leg and reason. */
static void test_partial_answer(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t before = partial_count("b", "timeout");
    outcome_t o;
    const char *texts[] = {"pa x"};
    assert_non_null(start(&o, texts, 1));
    fg_fail(fg_call_of(1, 0), SG_ETIMEDOUT, "too slow", 0);
    fg_run_loop();
    assert_int_equal(o.calls, 0);
    fg_complete(fg_call_of(0, 0), "A,B");
    fg_run_loop();
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 200);
    assert_true(o.has_partial);
    assert_string_equal(o.partial, "b=timeout");
    const double want[] = {1.0 / 61, 1.0 / 62};
    expect_body_list(&o, 0, "A,B", want);
    assert_int_equal(partial_count("b", "timeout"), before + 1);
    assert_int_equal(partial_count("a", "timeout"), 0);
}

/* Every leg failed: the most specific failure is the answer (the client's own error, then a
 * backend bug, an upstream error, a timeout, unavailable), with every leg's message and the
 * longest Retry-After. */
static void test_every_leg_failed(void **state)
{
    (void)state;
    fg_n_calls = 0;
    outcome_t o;
    const char *texts[] = {"ef x"};
    assert_non_null(start(&o, texts, 1));
    fg_fail(fg_call_of(0, 0), SG_EUNAVAIL, "down", 7);
    fg_fail(fg_call_of(1, 0), SG_EUPSTREAM, "garbage", 0);
    fg_run_loop();
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 502);
    assert_string_equal(o.type, "upstream_error");
    assert_string_equal(o.message, "every leg of fusion route f failed: backend a: down; backend b: garbage");
    assert_int_equal(o.retry_after_s, 7);
    assert_int_equal(o.n, 0);

    outcome_t o2;
    const char *more[] = {"ef y"};
    assert_non_null(start(&o2, more, 1));
    fg_fail(fg_call_of(0, 2), SG_EINTERNAL, "bug", 0);
    fg_fail(fg_call_of(1, 2), SG_EINVAL, "bad query", 0);
    fg_run_loop();
    assert_int_equal(o2.status, 422); /* the client's own error beats a 500 */
    assert_string_equal(o2.type, "invalid_request");
    assert_string_equal(o2.message, "every leg of fusion route f failed: backend a: bug; backend b: bad query");
    assert_int_equal(o2.retry_after_s, 0);

    outcome_t o3;
    const char *third[] = {"ef z"};
    assert_non_null(start(&o3, third, 1));
    fg_fail(fg_call_of(0, 4), SG_ETIMEDOUT, NULL, 0);
    fg_fail(fg_call_of(1, 4), SG_EOVERLOAD, NULL, 0);
    fg_run_loop();
    assert_int_equal(o3.status, 504); /* a timeout beats overloaded */
    assert_string_equal(o3.type, "timeout");
}

/* Before any work, the answer's size estimated from the legs' mean DOC (the largest, halved)
 * over limits.max_response_bytes is a 413; at the limit it runs. */
static void test_estimate_too_large(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t est = atomic_load(&fg_too_large_estimate.v), r413 = fg_requests(413);
    atomic_store(&fg_cores[0].doc_bytes[0], 400);
    atomic_store(&fg_cores[1].doc_bytes[0], 1000);
    outcome_t o;
    const char *texts[] = {"et x", "et y"};
    /* 100 + 2 queries x topk 3 x 500 = 3100 */
    sg_fusion_spec_t spec = {.max_response_bytes = 3099, .envelope_bytes = 100, .shape = SG_SHAPE_SCORED};
    assert_null(start_spec(&o, &spec, texts, 2));
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 413);
    assert_string_equal(o.type, "too_large");
    assert_string_equal(o.message, "fusion route f: the answer would be at least about 3100 bytes (2 queries x topk 3 x ~500 "
                                   "bytes per document), over limits.max_response_bytes (3099): ask for fewer queries or a "
                                   "smaller topk");
    assert_int_equal(fg_n_calls, 0);
    assert_int_equal(atomic_load(&fg_too_large_estimate.v), est + 1);
    assert_int_equal(fg_requests(413), r413 + 1);

    outcome_t o2;
    sg_fusion_spec_t at_limit = {.max_response_bytes = 3100, .envelope_bytes = 100, .shape = SG_SHAPE_SCORED};
    assert_non_null(start_spec(&o2, &at_limit, texts, 2));
    assert_int_equal(fg_n_calls, 2);
    fg_complete(fg_call_of(0, 0), "A");
    fg_complete(fg_call_of(1, 0), "A");
    fg_run_loop();
    assert_int_equal(o2.status, 200);
    assert_int_equal(atomic_load(&fg_too_large_estimate.v), est + 1);
    atomic_store(&fg_cores[0].doc_bytes[0], 0);
    atomic_store(&fg_cores[1].doc_bytes[0], 0);
}

/* The fused answer itself over limits.max_response_bytes is a 413 with its exact size; an
 * answer of exactly the limit is sent. */
static void test_exact_too_large(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t exact = atomic_load(&fg_too_large_exact.v);
    atomic_store(&fg_cores[0].doc_bytes[0], 0);
    atomic_store(&fg_cores[1].doc_bytes[0], 0); /* unknown: no estimate */
    outcome_t o;
    const char *texts[] = {"ex x", "ex y", "ex x"};
    sg_fusion_spec_t spec = {.max_response_bytes = 100, .envelope_bytes = 20, .shape = SG_SHAPE_SCORED};
    assert_non_null(start_spec(&o, &spec, texts, 3));
    fg_complete(fg_call_of(0, 0), "A,B");
    fg_complete(fg_call_of(1, 0), "B,C");
    fg_run_loop();
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 413);
    assert_string_equal(o.type, "too_large");
    unsigned long long size = 0;
    assert_int_equal(sscanf(o.message, "fusion route f: the answer is %llu bytes", &size), 1);
    assert_true(size > 100);
    char want[300];
    snprintf(want, sizeof(want),
             "fusion route f: the answer is %llu bytes, over limits.max_response_bytes (100): ask for fewer queries or a smaller "
             "topk",
             size);
    assert_string_equal(o.message, want);
    assert_int_equal(atomic_load(&fg_too_large_exact.v), exact + 1);

    /* the same documents for other texts: exactly `size` bytes, which the limit admits */
    outcome_t o2;
    const char *other[] = {"ex z", "ex w", "ex z"};
    sg_fusion_spec_t fits = {.max_response_bytes = size, .envelope_bytes = 20, .shape = SG_SHAPE_SCORED};
    assert_non_null(start_spec(&o2, &fits, other, 3));
    fg_complete(fg_call_of(0, 2), "A,B");
    fg_complete(fg_call_of(1, 2), "B,C");
    fg_run_loop();
    assert_int_equal(o2.status, 200);
    assert_int_equal(20 + strlen(o2.body) - 2, size); /* the lists, without the two '|' */
    assert_int_equal(atomic_load(&fg_too_large_exact.v), exact + 1);
}

/* The client's rate limit is charged once for the batch, not again by the legs; a refusal is a
 * 429 before any leg runs. */
static void test_rate_limit_once_per_batch(void **state)
{
    (void)state;
    fg_n_calls = 0;
    static sg_client_conf_t conf;
    static sg_client_t limited;
    static sg_client_state_t st;
    conf = (sg_client_conf_t){.weight = 1, .rate = 1, .burst = 2, .mode = SG_RL_REJECT};
    one_route_client(&limited, &st, "limited", &conf, &fg_dummy_c, &fg_dummy_h);
    outcome_t o;
    const char *texts[] = {"rl x", "rl y"};
    sg_fusion_spec_t spec = {.client = &limited};
    assert_non_null(start_spec(&o, &spec, texts, 2)); /* 2 queries: the whole burst, though the legs search 4 */
    assert_int_equal(fg_n_calls, 2);
    fg_complete(fg_call_of(0, 0), "A");
    fg_complete(fg_call_of(1, 0), "B");
    fg_run_loop();
    assert_int_equal(o.status, 200);
    outcome_t o2;
    const char *more[] = {"rl z"};
    sg_fusion_spec_t spec2 = {.client = &limited};
    assert_null(start_spec(&o2, &spec2, more, 1));
    assert_int_equal(o2.calls, 1);
    assert_int_equal(o2.status, 429);
    assert_string_equal(o2.type, "rate_limited");
    assert_true(o2.retry_after_s >= 1);
    assert_int_equal(fg_n_calls, 2);
}

/* The legs share the request's deadline: a caller's deadline shortens the route's timeout_ms,
 * never lengthens it. */
static void test_deadline_shared_by_legs(void **state)
{
    (void)state;
    fg_n_calls = 0;
    uint64_t now = sg_now_us();
    outcome_t o;
    const char *texts[] = {"dl x"};
    sg_fusion_spec_t spec = {.start_us = now, .deadline_us = now + 30000};
    sg_fusion_query_t *q = start_spec(&o, &spec, texts, 1);
    assert_non_null(q);
    assert_int_equal(fg_n_calls, 2);
    assert_int_equal(fg_calls[0].s->deadline_ms, (now + 30000) / 1000);
    assert_int_equal(fg_calls[1].s->deadline_ms, (now + 30000) / 1000);
    sg_fusion_cancel(q);

    outcome_t o2;
    const char *late[] = {"dl y"};
    sg_fusion_spec_t spec2 = {.start_us = now, .deadline_us = now + 3600ull * 1000000};
    q = start_spec(&o2, &spec2, late, 1);
    assert_non_null(q);
    assert_int_equal(fg_calls[2].s->deadline_ms, (now + 10000ull * 1000) / 1000); /* the route's 10 s */
    sg_fusion_cancel(q);
    for (size_t i = 0; i < 4; ++i) { /* the plugin still completes what was cancelled */
        assert_true(fg_calls[i].cancelled);
        fg_complete(i, "A");
    }
    fg_run_loop();
    assert_int_equal(o.calls + o2.calls, 0);
}

/* A caller that goes away hears nothing more; the legs' calls are cancelled and the request is
 * counted once (499, under "other"). */
static void test_cancel(void **state)
{
    (void)state;
    fg_n_calls = 0;
    char l[64];
    snprintf(l, sizeof(l), "backend=\"f\",code=\"other\"");
    sg_counter_t *other =
        sg_metrics_counter("searchgate_requests_total", "Retrieve/access requests by backend and HTTP status.", l);
    uint64_t before = atomic_load(&other->v);
    outcome_t o;
    const char *texts[] = {"cn x"};
    sg_fusion_query_t *q = start(&o, texts, 1);
    assert_non_null(q);
    fg_complete(fg_call_of(0, 0), "A"); /* one leg answered, one still runs */
    fg_run_loop();
    sg_fusion_cancel(q);
    assert_true(fg_calls[fg_call_of(1, 0)].cancelled);
    assert_int_equal(atomic_load(&other->v), before + 1);
    fg_complete(fg_call_of(1, 0), "B");
    fg_run_loop();
    assert_int_equal(o.calls, 0);
    assert_int_equal(atomic_load(&other->v), before + 1);
    assert_true(h2o_linklist_is_empty(&fg_loop.active));
}

/* GET /'s entry of a fusion route: its legs, method and weights, the leg that serves /access,
 * and its provenance over the legs' data. */
static void test_root_entry_and_access(void **state)
{
    (void)state;
    assert_int_equal(sg_fusion_count(fg_gen.fusion), 1);
    assert_int_equal(sg_fusion_count(NULL), 0);
    assert_ptr_equal(sg_fusion_access_backend(&fg_gen, 0), &fg_routes[1]);
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_arr(&w);
    sg_fusion_append_root(&fg_gen, &w);
    fg_cores[1].serves_access = 0;
    assert_null(sg_fusion_access_backend(&fg_gen, 0));
    sg_fusion_append_root(&fg_gen, &w);
    fg_cores[1].serves_access = 1;
    sg_jw_end(&w);
    cJSON *a = cJSON_ParseWithLength(b.base, b.len);
    assert_int_equal(cJSON_GetArraySize(a), 2);
    cJSON *e = cJSON_GetArrayItem(a, 0);
    assert_string_equal(cJSON_GetObjectItem(e, "name")->valuestring, "f");
    assert_string_equal(cJSON_GetObjectItem(e, "plugin")->valuestring, "fusion");
    assert_int_equal(cJSON_GetObjectItem(e, "topk")->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(e, "retrieve")->valuestring, "/retrieve/f");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "access")));
    assert_string_equal(cJSON_GetObjectItem(e, "access_via")->valuestring, "b");
    cJSON *f = cJSON_GetObjectItem(e, "fusion");
    assert_string_equal(cJSON_GetObjectItem(f, "method")->valuestring, "rrf");
    assert_true(cJSON_GetObjectItem(f, "k")->valuedouble == 60);
    assert_null(cJSON_GetObjectItem(f, "depth"));
    assert_null(cJSON_GetObjectItem(f, "normalize")); /* weighted only */
    cJSON *routes = cJSON_GetObjectItem(f, "routes");
    assert_int_equal(cJSON_GetArraySize(routes), 2);
    assert_string_equal(cJSON_GetArrayItem(routes, 0)->valuestring, "a");
    assert_string_equal(cJSON_GetArrayItem(routes, 1)->valuestring, "b");
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(f, "weights"), "b")->valuedouble == 1);
    assert_non_null(cJSON_GetObjectItem(e, "provenance"));
    cJSON *e2 = cJSON_GetArrayItem(a, 1);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(e2, "access")));
    assert_null(cJSON_GetObjectItem(e2, "access_via"));
    cJSON_Delete(a);
    sg_buf_free(&b);

    /* the provenance names each leg's data fingerprint */
    char legs[80];
    snprintf(legs, sizeof(legs), "; legs=a:%s,b:%s", fg_routes[0].prov.data, fg_routes[1].prov.data);
    const sg_provenance_t *p = sg_fusion_prov(fg_gen.fusion, 0);
    assert_non_null(strstr(p->header, "route=f"));
    assert_non_null(strstr(p->header, legs));
}

/* A request that ended before its fusion query (malformed, a bad X-Timeout-Ms) is counted on
 * the route by its status. */
static void test_count_early(void **state)
{
    (void)state;
    uint64_t before = fg_requests(400);
    sg_fusion_count_early(&fg_gen, 0, 400, 2, sg_now_us());
    assert_int_equal(fg_requests(400), before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fan_out_and_merge),       cmocka_unit_test(test_partial_answer),
        cmocka_unit_test(test_every_leg_failed),        cmocka_unit_test(test_estimate_too_large),
        cmocka_unit_test(test_exact_too_large),         cmocka_unit_test(test_rate_limit_once_per_batch),
        cmocka_unit_test(test_deadline_shared_by_legs), cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_root_entry_and_access),   cmocka_unit_test(test_count_early),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
