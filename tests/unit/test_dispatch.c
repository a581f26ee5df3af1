/*
 * Unit tests: singleflight against the cache (gateway/dispatch.c with cache/), driven step by step
 * so the races that let a duplicate reach the backend twice happen deterministically.
 *
 * Two loops (h2o contexts run by hand on this thread), one backend whose search() only records the
 * call, so the test decides when a call completes and when each loop gets to run.
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
#include "../cache/cache.h"

/* ---- a backend whose calls the test completes ---- */

typedef struct {
    const sg_search *s;
    sg_done_fn done;
    void *cb_data;
} fake_call_t;

static fake_call_t calls[16];
static size_t n_calls;

static sg_status fake_search(sg_backend *self, const sg_search *s, sg_done_fn done, void *cb_data)
{
    (void)self;
    assert_true(n_calls < 16);
    calls[n_calls++] = (fake_call_t){s, done, cb_data};
    return SG_OK;
}

static sg_status fake_health(sg_backend *self, char *detail, size_t n)
{
    (void)self, (void)detail, (void)n;
    return SG_OK;
}

static const sg_backend_vtable fake_vt = {SG_BACKEND_HEADER("fake", "1"), .search = fake_search, .health = fake_health};

/* Completes call i with one hit per query. Runs on this thread, like a plugin thread would. */
static void complete(size_t i)
{
    static const char doc[] = "{\"id\":\"0\",\"contents\":\"\\\"T\\\"\\nx\",\"url\":\"\"}";
    sg_hit hit = {doc, sizeof(doc) - 1, 0.5};
    sg_hits per[8];
    const sg_search *s = calls[i].s;
    for (size_t q = 0; q < s->n_queries; ++q)
        per[q] = (sg_hits){&hit, 1};
    sg_result res = {SG_OK, NULL, per, s->n_queries, 0};
    calls[i].done(calls[i].cb_data, &res);
}

/* ---- the gateway around it ---- */

static sg_config_t cfg;
static sg_backend_conf_t bconf;
static sg_backend_t backend;
static sg_loop_t loops[2];
static sg_client_conf_t client_conf;
static sg_client_t client;
static sg_counter_t dummy_c, m_calls, m_coalesced, m_hits_l1, m_misses;
static sg_gauge_t dummy_g;
static sg_hist_t dummy_h;

static int setup(void **state)
{
    (void)state;
    memset(&sg_server, 0, sizeof(sg_server));
    cfg.cache.l1_bytes = 1 << 20;
    bconf = (sg_backend_conf_t){
        .name = "t", .topk = 3, .timeout_ms = 10000, .max_queue = 1000, .chunk = 64, .cache = 1, .cache_ttl_s = 60, .fallback = -1};
    cfg.backends = &bconf;
    cfg.n_backends = 1;
    backend.conf = &bconf;
    backend.plugin.vt = &fake_vt;
    backend.identity = "fake|t|1|";
    pthread_mutex_init(&backend.admit_mutex, NULL);
    for (int c = 0; c < SG_NUM_CODES; ++c)
        backend.requests[c] = backend.queries[c] = &dummy_c;
    backend.latency = backend.call_latency = &dummy_h;
    backend.inflight_requests = backend.inflight_queries = backend.queued_queries = &dummy_g;
    backend.call_errors = backend.batch_queries = backend.shed = backend.expired = backend.fallbacks = &dummy_c;
    backend.cache_hits_redis = &dummy_c;
    backend.calls = &m_calls;
    backend.coalesced = &m_coalesced;
    backend.cache_hits_l1 = &m_hits_l1;
    backend.cache_misses = &m_misses;
    client_conf.weight = 1;
    client.id = "test";
    client.conf = &client_conf;
    atomic_init(&client.refs, 1);
    client.m_requests = client.m_queries = client.m_rate_limited = client.m_queued = client.m_shed = client.m_timeouts =
        client.m_hits_l1 = client.m_hits_redis = client.m_misses = &dummy_c;
    client.m_wait = &dummy_h;
    sg_server.cfg = &cfg;
    sg_server.backends = &backend;
    sg_server.n_backends = 1;
    sg_server.loops = loops;
    sg_server.n_loops = 2;
    h2o_config_init(&sg_server.h2o);
    h2o_config_register_host(&sg_server.h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    for (int i = 0; i < 2; ++i) {
        loops[i].id = i;
        loops[i].server = &sg_server;
        loops[i].loop = h2o_evloop_create();
        h2o_context_init(&loops[i].ctx, loops[i].loop, &sg_server.h2o);
        h2o_linklist_init_anchor(&loops[i].active);
        sg_dispatch_init_loop(&loops[i]);
    }
    sg_dispatch_init();
    sg_cache_init(cfg.cache.l1_bytes, "");
    return 0;
}

static void run_loop(int i)
{
    for (int k = 0; k < 3; ++k)
        h2o_evloop_run(loops[i].loop, 0);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; ++i) {
        run_loop(i);
        h2o_multithread_unregister_receiver(loops[i].ctx.queue, &loops[i].deliveries);
        h2o_multithread_unregister_receiver(loops[i].ctx.queue, &loops[i].finished);
        h2o_multithread_queue_t *q = loops[i].ctx.queue;
        h2o_context_dispose(&loops[i].ctx);
        run_loop(i);
        free(q);
        h2o_evloop_destroy(loops[i].loop);
        sg_timers_dispose(&loops[i].timers);
    }
    sg_cache_dispose();
    sg_dispatch_dispose();
    h2o_config_dispose(&sg_server.h2o);
    sg_metrics_reset();
    pthread_mutex_destroy(&backend.admit_mutex);
    return 0;
}

/* The caller's done(): the test inspects the query itself. */
static void on_done(void *ctx, const sg_query_result_t *res)
{
    (void)ctx, (void)res;
}

/* The L1 entry of one query of the test backend, or NULL. */
static sg_blob_t *peek_l1(const char *text, size_t len)
{
    sg_buf_t key = {0};
    sg__query_cache_key(&key, &backend, 3, NULL, text, len);
    sg_blob_t *b = sg_cache_get_l1(key.base, key.len);
    sg_buf_free(&key);
    return b;
}

/* A one-query query on loop `l`, as sg_query_start() builds it, plus a reference for the test so
 * it can be inspected after it answered. */
static sg_query_t *new_request(int l, const char *text)
{
    sg_query_t *r = sg_mem_calloc(1, sizeof(*r));
    r->refs = 2;
    r->done = on_done;
    r->loop = &loops[l];
    r->backend = r->serving = &backend;
    r->client = sg_clients_ref(&client);
    r->topk = 3;
    r->start_us = sg_now_us();
    r->deadline_ms = sg_now_ms() + 10000;
    r->n_queries = r->n_uniq = r->n_pending = 1;
    r->arena = sg_strdup(text);
    r->slot_uniq = sg_mem_calloc(1, sizeof(uint32_t));
    r->uniq = sg_mem_calloc(1, sizeof(sg_uq_t));
    r->uniq[0].text = r->arena;
    r->uniq[0].len = (uint32_t)strlen(text);
    return r;
}

static void reset_counts(void)
{
    n_calls = 0;
    atomic_store(&m_calls.v, 0);
    atomic_store(&m_coalesced.v, 0);
    atomic_store(&m_hits_l1.v, 0);
}

/* The duplicate arrives after the flight's call completed (the flight has left the table) but
 * before the call's own loop ran on_finished -- where the result used to be stored in L1. */
static void test_duplicate_after_completion_before_store(void **state)
{
    (void)state;
    reset_counts();
    sg_query_t *a = new_request(0, "who wrote hamlet");
    sg__query_lookup(a); /* L1 miss -> a flight and a call */
    assert_int_equal(n_calls, 1);
    complete(0); /* the plugin answers; loop 0 is busy and runs nothing yet */
    assert_int_equal(sg_dispatch_flights(), 0);

    sg_query_t *b = new_request(1, "who wrote hamlet");
    sg__query_lookup(b);
    assert_int_equal(n_calls, 1); /* the backend was not asked again */
    assert_true(b->responded);
    assert_non_null(b->uniq[0].blob);
    assert_int_equal(b->hits_l1, 1);
    assert_int_equal(atomic_load(&m_hits_l1.v), 1);

    run_loop(0); /* now loop 0 delivers a's answer and finishes the call */
    assert_true(a->responded);
    assert_non_null(a->uniq[0].blob);
    assert_int_equal(atomic_load(&m_calls.v), 1);
    sg__query_unref(a);
    sg__query_unref(b);
}

/* The duplicate's cache lookup (L1, then an MGET that answers nil) ran while the flight was in
 * the air; the flight completes before the duplicate gets to dispatch its miss. */
static void test_lookup_before_completion_dispatch_after(void **state)
{
    (void)state;
    reset_counts();
    sg_query_t *b = new_request(1, "capital of france");
    sg_query_t *a = new_request(0, "capital of france");
    sg__query_lookup(a);
    assert_int_equal(n_calls, 1);
    /* b's L1 lookup misses now; its Redis MGET is "outstanding" */
    assert_null(peek_l1("capital of france", 17));
    complete(0);
    run_loop(0); /* even with the call fully finished on its loop */
    assert_true(a->responded);
    sg__query_after_cache(b); /* the MGET answered nil: b dispatches its miss */
    assert_int_equal(n_calls, 1);
    assert_true(b->responded);
    assert_non_null(b->uniq[0].blob);
    assert_int_equal(b->hits_l1, 1);
    assert_int_equal(b->misses, 0);
    sg__query_unref(a);
    sg__query_unref(b);
}

/* Still coalesced while in flight; and errors are not cached, so a later duplicate searches again. */
static void test_in_flight_join_and_errors(void **state)
{
    (void)state;
    reset_counts();
    sg_query_t *a = new_request(0, "faiss library");
    sg_query_t *b = new_request(1, "faiss library");
    sg__query_lookup(a);
    sg__query_lookup(b);
    assert_int_equal(n_calls, 1);
    assert_int_equal(atomic_load(&m_coalesced.v), 1);
    complete(0);
    run_loop(0);
    run_loop(1);
    assert_true(a->responded && b->responded);

    sg_query_t *c = new_request(0, "a failing query");
    sg__query_lookup(c);
    assert_int_equal(n_calls, 2);
    sg_result fail = {SG_EUNAVAIL, "down", NULL, 0, 0};
    calls[1].done(calls[1].cb_data, &fail);
    sg_query_t *d = new_request(1, "a failing query");
    sg__query_lookup(d);
    assert_int_equal(n_calls, 3);
    complete(2);
    run_loop(0);
    run_loop(1);
    assert_true(c->responded && d->responded);
    sg__query_unref(a);
    sg__query_unref(b);
    sg__query_unref(c);
    sg__query_unref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_after_completion_before_store),
        cmocka_unit_test(test_lookup_before_completion_dispatch_after),
        cmocka_unit_test(test_in_flight_join_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
