/*
 * Unit tests: the internal query pipeline (gateway/pipeline/query.h) driven directly, the way MCP and
 * composite routes call it -- no HTTP anywhere. One loop (an h2o context run by hand on this
 * thread), one backend whose search() only records the call, so the test decides when and how a
 * call completes; the real cache (L1), dispatch, admission and client rate limits around it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server.h"
#include "query.h"
#include "query_impl.h"
#include "dispatch.h"
#include "clients.h"
#include "gen.h"
#include "../cache/cache.h"
#include "one_route.h"

/* ---- a backend whose calls the test completes ---- */

typedef struct {
    const sg_search *s;
    sg_done_fn done;
    void *cb_data;
    int cancelled;
} fake_call_t;

static fake_call_t calls[16];
static size_t n_calls;

static sg_status fake_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    (void)self;
    assert_true(n_calls < 16);
    calls[n_calls++] = (fake_call_t){s, done, cb_data, 0};
    return SG_OK;
}

static void fake_cancel(sg_backend *self, void *cb_data)
{
    (void)self;
    for (size_t i = 0; i < n_calls; ++i)
        if (calls[i].cb_data == cb_data)
            calls[i].cancelled = 1;
}

static sg_status fake_health(sg_backend *self, char *detail, size_t n)
{
    (void)self, (void)detail, (void)n;
    return SG_OK;
}

static const sg_backend_vtable fake_vt = {SG_BACKEND_HEADER("fake", "1"), .search = fake_search, .cancel = fake_cancel,
                                          .health = fake_health};

/* Completes call i: query q gets the document {"id":"<its text>"} with score 0.5. */
static void complete(size_t i)
{
    static char docs[8][96];
    sg_hit hits[8];
    sg_hits per[8];
    const sg_search *s = calls[i].s;
    assert_true(s->n_queries <= 8);
    for (size_t q = 0; q < s->n_queries; ++q) {
        int n = snprintf(docs[q], sizeof(docs[q]), "{\"id\":\"%.*s\"}", (int)s->queries[q].len, s->queries[q].text);
        hits[q] = (sg_hit){docs[q], (size_t)n, 0.5};
        per[q] = (sg_hits){&hits[q], 1};
    }
    sg_result res = {SG_OK, NULL, per, s->n_queries, 0};
    calls[i].done(calls[i].cb_data, &res);
}

/* ---- the gateway around it ---- */

static sg_config_t cfg;
static sg_backend_conf_t bconf;
static sg_route_t backend;
static sg_route_core_t core; /* the route's plugin instance and admission state */
static sg_gen_t gen;         /* the configuration generation of the route, the clients and the loop */
static sg_server_t server;   /* the test's server: one route, one loop */
static sg_loop_t loop;
static sg_client_conf_t client_conf, limited_conf;
static sg_client_t client, limited;
static sg_client_state_t client_st, limited_st;
static sg_counter_t dummy_c, m_calls, m_hits_l1, m_expired, m_r200, m_r499, m_r504;
static sg_gauge_t dummy_g;
static sg_hist_t dummy_h;

static int setup(void **state)
{
    (void)state;
    one_route_init(&cfg, &bconf, &backend, &core, &gen, &server, &fake_vt, &dummy_c, &dummy_g, &dummy_h);
    backend.meters.requests[sg_code_index(200)] = &m_r200;
    backend.meters.requests[sg_code_index(499)] = &m_r499;
    backend.meters.requests[sg_code_index(504)] = &m_r504;
    backend.expired = &m_expired;
    backend.calls = &m_calls;
    backend.cache_hits_l1 = &m_hits_l1;
    client_conf.weight = 1;
    one_route_client(&client, &client_st, "test", &client_conf, &dummy_c, &dummy_h);
    limited_conf = (sg_client_conf_t){.weight = 1, .rate = 1, .burst = 1, .mode = SG_RL_REJECT};
    one_route_client(&limited, &limited_st, "limited", &limited_conf, &dummy_c, &dummy_h);
    server.loops = &loop;
    server.n_loops = 1;
    gen.clients = sg_clients_create(&cfg, NULL);
    loop.server = &server;
    loop.gen = &gen;
    loop.loop = h2o_evloop_create();
    h2o_context_init(&loop.ctx, loop.loop, &server.h2o);
    h2o_linklist_init_anchor(&loop.active);
    sg_dispatch_init_loop(&loop);
    sg_dispatch_init();
    sg_cache_init(cfg.cache.l1_bytes, "");
    return 0;
}

/* One round of the loop: deliveries, finished calls, due timers. */
static void run_loop(void)
{
    for (int k = 0; k < 3; ++k) {
        h2o_evloop_run(loop.loop, 0);
        sg_timers_run(&loop.timers);
    }
}

static int teardown(void **state)
{
    (void)state;
    run_loop();
    h2o_multithread_unregister_receiver(loop.ctx.queue, &loop.deliveries);
    h2o_multithread_unregister_receiver(loop.ctx.queue, &loop.finished);
    h2o_multithread_queue_t *q = loop.ctx.queue;
    h2o_context_dispose(&loop.ctx);
    run_loop();
    free(q);
    h2o_evloop_destroy(loop.loop);
    sg_timers_dispose(&loop.timers);
    sg_cache_dispose();
    sg_dispatch_dispose();
    sg_clients_destroy(gen.clients);
    h2o_config_dispose(&server.h2o);
    sg_metrics_reset();
    pthread_mutex_destroy(&core.admit_mutex);
    return 0;
}

/* ---- what the caller sees ---- */

typedef struct {
    int calls; /* done() invocations */
    int status;
    char type[32], message[256], body[1024];
    uint32_t retry_after_s;
} outcome_t;

/* Copies the result out (everything in it is borrowed for the callback), as a caller would. */
static void on_done(void *ctx, const sg_query_result_t *res)
{
    outcome_t *o = ctx;
    ++o->calls;
    o->status = res->status;
    o->retry_after_s = res->retry_after_s;
    snprintf(o->type, sizeof(o->type), "%s", res->type != NULL ? res->type : "");
    snprintf(o->message, sizeof(o->message), "%s", res->message != NULL ? res->message : "");
    char *p = o->body;
    for (uint32_t i = 0; i < res->n; ++i) {
        assert_true((size_t)(p - o->body) + sg_blob_fragment_len(res->blobs[i], 1) + 2 < sizeof(o->body));
        if (i != 0)
            *p++ = '|';
        p = sg_blob_write_fragment(res->blobs[i], 1, p);
    }
    *p = '\0';
}

static sg_query_t *start_at(outcome_t *o, sg_client_t *cl, const char *const *texts, uint32_t n, uint64_t start_us,
                            uint64_t deadline_us)
{
    uint32_t lens[8];
    for (uint32_t i = 0; i < n; ++i)
        lens[i] = (uint32_t)strlen(texts[i]);
    sg_query_spec_t spec = {
        .route = &backend, .client = cl, .texts = texts, .lens = lens, .n = n, .start_us = start_us, .deadline_us = deadline_us};
    memset(o, 0, sizeof(*o));
    return sg_query_start(&loop, &spec, on_done, o);
}

static sg_query_t *start(outcome_t *o, sg_client_t *cl, const char *const *texts, uint32_t n, uint64_t deadline_us)
{
    return start_at(o, cl, texts, n, 0, deadline_us);
}

static void reset_counts(void)
{
    n_calls = 0;
    atomic_store(&m_calls.v, 0);
    atomic_store(&m_hits_l1.v, 0);
    atomic_store(&m_expired.v, 0);
    atomic_store(&m_r200.v, 0);
    atomic_store(&m_r499.v, 0);
    atomic_store(&m_r504.v, 0);
}

/* Results come back in the caller's order, a repeated text is searched once, and a later query
 * for the same texts is answered from L1 before sg_query_start() returns. */
static void test_results_and_cache_hits(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"alpha", "beta", "alpha"};
    sg_query_t *q = start(&o, &client, texts, 3, 0);
    assert_non_null(q);
    assert_int_equal(o.calls, 0);
    assert_int_equal(n_calls, 1);
    assert_int_equal(calls[0].s->n_queries, 2); /* "alpha" once */
    assert_int_equal(calls[0].s->topk, 3);      /* the route's default */
    complete(0);
    run_loop();
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 200);
    assert_string_equal(o.body, "[{\"document\":{\"id\":\"alpha\"},\"score\":0.5}]|"
                                "[{\"document\":{\"id\":\"beta\"},\"score\":0.5}]|"
                                "[{\"document\":{\"id\":\"alpha\"},\"score\":0.5}]");
    assert_int_equal(atomic_load(&m_r200.v), 1);

    outcome_t o2;
    const char *again[] = {"beta", "alpha"};
    assert_null(start(&o2, &client, again, 2, 0)); /* finished before returning */
    assert_int_equal(o2.calls, 1);
    assert_int_equal(o2.status, 200);
    assert_string_equal(o2.body, "[{\"document\":{\"id\":\"beta\"},\"score\":0.5}]|"
                                 "[{\"document\":{\"id\":\"alpha\"},\"score\":0.5}]");
    assert_int_equal(n_calls, 1); /* the backend was not asked again */
    assert_int_equal(atomic_load(&m_hits_l1.v), 2);
    assert_int_equal(atomic_load(&m_calls.v), 1);
}

/* The cache step makes each miss's key once and the new flight stores its answer in L1 under a
 * copy of it; once another backend serves (a fallback), the key is made anew for that backend. */
static void test_flight_reuses_the_cache_key(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"gamma", "delta"};
    sg_query_t *q = start(&o, &client, texts, 2, 0);
    assert_non_null(q);
    assert_ptr_equal(q->keys_of, &backend);
    sg_buf_t want = {0}, got = {0};
    for (uint32_t i = 0; i < 2; ++i) {
        sg_uq_t *u = &q->uniq[i];
        sg__query_cache_key(&want, &backend, q->topk, NULL, u->text, u->len);
        assert_int_equal(u->key_len, want.len);
        assert_memory_equal(q->keys.base + u->key_off, want.base, want.len);
        sg__query_key_of(&got, q, u);
        assert_int_equal(got.len, want.len);
        assert_memory_equal(got.base, want.base, want.len);
    }
    /* another backend serving: its own identity, not the cache step's copy */
    sg_route_core_t other_core = core;
    other_core.identity = "fake|other|1|";
    sg_route_t other = backend;
    other.core = &other_core;
    q->serving = &other;
    sg__query_key_of(&got, q, &q->uniq[0]);
    sg__query_cache_key(&want, &other, q->topk, NULL, "gamma", 5);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.base, want.base, want.len);
    q->serving = &backend;

    complete(0);
    run_loop();
    assert_int_equal(o.status, 200);
    sg__query_cache_key(&want, &backend, 3, NULL, "delta", 5); /* stored under the cache step's key */
    sg_blob_t *b = sg_cache_get_l1(want.base, want.len);
    assert_non_null(b);
    sg_blob_release(b);
    sg_buf_free(&want);
    sg_buf_free(&got);
}

/* The deadline answers 504 with the usual message, cancels the plugin call nobody else waits for,
 * and a caller's deadline can only shorten the route's. */
static void test_deadline(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"slow query"};
    uint64_t now = sg_now_us();
    sg_query_t *q = start_at(&o, &client, texts, 1, now, now + 30000);
    assert_non_null(q);
    assert_int_equal(n_calls, 1);
    assert_int_equal(calls[0].s->deadline_ms, (now + 30000) / 1000);
    while (o.calls == 0 && sg_now_us() < now + 5000000) {
        h2o_evloop_run(loop.loop, 5);
        sg_timers_run(&loop.timers);
    }
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 504);
    assert_string_equal(o.type, "timeout");
    assert_string_equal(o.message, "deadline of 30 ms exceeded waiting for backend t");
    assert_int_equal(atomic_load(&m_r504.v), 1);
    assert_true(calls[0].cancelled);
    complete(0); /* the plugin still completes it; nobody is told twice */
    run_loop();
    assert_int_equal(o.calls, 1);

    outcome_t o2;
    const char *late[] = {"later query"};
    q = start(&o2, &client, late, 1, sg_now_us() + 3600ull * 1000000);
    assert_non_null(q);
    assert_true(calls[1].s->deadline_ms <= sg_now_ms() + bconf.timeout_ms);
    complete(1);
    run_loop();
    assert_int_equal(o2.status, 200);
}

/* A caller that goes away hears nothing more; its call is cancelled and counted as 499. */
static void test_cancel(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"abandoned query"};
    sg_query_t *q = start(&o, &client, texts, 1, 0);
    assert_non_null(q);
    assert_int_equal(n_calls, 1);
    sg_query_cancel(q);
    assert_int_equal(atomic_load(&m_r499.v), 1);
    assert_true(calls[0].cancelled);
    complete(0);
    run_loop();
    assert_int_equal(o.calls, 0);
    assert_true(h2o_linklist_is_empty(&loop.active));
}

/* The client's rate limit applies to every entry point: a refusal is a 429 before any search. */
static void test_rate_limit(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"first"};
    assert_non_null(start(&o, &limited, texts, 1, 0));
    complete(0);
    run_loop();
    assert_int_equal(o.status, 200);
    outcome_t o2;
    const char *more[] = {"second"};
    assert_null(start(&o2, &limited, more, 1, 0));
    assert_int_equal(o2.calls, 1);
    assert_int_equal(o2.status, 429);
    assert_string_equal(o2.type, "rate_limited");
    assert_true(o2.retry_after_s >= 1);
    assert_int_equal(n_calls, 1);
}

/* A fusion route's leg: the fusion request was charged the client's rate limit and is the client's
 * request, so the leg skips the limit and does not count as one of the client's requests. */
static void test_leg(void **state)
{
    (void)state;
    reset_counts();
    static sg_client_conf_t conf;
    static sg_client_t legc;
    static sg_client_state_t legst;
    static sg_counter_t m_req;
    conf = (sg_client_conf_t){.weight = 1, .rate = 1, .burst = 1, .mode = SG_RL_REJECT};
    one_route_client(&legc, &legst, "legs", &conf, &dummy_c, &dummy_h);
    legc.m_requests = &m_req;
    outcome_t o;
    const char *texts[] = {"leg first"};
    assert_non_null(start(&o, &legc, texts, 1, 0)); /* a plain query takes the whole burst */
    complete(0);
    run_loop();
    assert_int_equal(o.status, 200);
    assert_int_equal(atomic_load(&m_req.v), 1);
    const char *more[] = {"leg second", "leg third"};
    uint32_t lens[] = {10, 9};
    sg_query_spec_t spec = {.route = &backend, .client = &legc, .texts = more, .lens = lens, .n = 2, .admitted = 1};
    outcome_t o2;
    memset(&o2, 0, sizeof(o2));
    assert_non_null(sg_query_start(&loop, &spec, on_done, &o2)); /* not refused: searched */
    assert_int_equal(n_calls, 2);
    complete(1);
    run_loop();
    assert_int_equal(o2.status, 200);
    assert_int_equal(atomic_load(&m_req.v), 1);
    assert_int_equal(atomic_load(&m_r200.v), 2); /* the route counts it */
    outcome_t o3;
    const char *plain[] = {"leg fourth"};
    assert_null(start(&o3, &legc, plain, 1, 0)); /* the client's own next query is still limited */
    assert_int_equal(o3.status, 429);
}

/* Shutdown fails what still runs with 503. */
static void test_fail_all(void **state)
{
    (void)state;
    reset_counts();
    outcome_t o;
    const char *texts[] = {"during shutdown"};
    assert_non_null(start(&o, &client, texts, 1, 0));
    sg_query_fail_all(&loop, "the gateway is shutting down");
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, 503);
    assert_string_equal(o.message, "the gateway is shutting down");
    complete(0);
    run_loop();
    assert_int_equal(o.calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results_and_cache_hits),
        cmocka_unit_test(test_flight_reuses_the_cache_key),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_leg),
        cmocka_unit_test(test_fail_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
