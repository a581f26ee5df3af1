/*
 * Unit tests: singleflight against the cache (gateway/pipeline/dispatch.c with cache/), driven step by step
 * so the races that let a duplicate reach the backend twice happen deterministically.
 *
 * Two loops (h2o contexts run by hand on this thread), one backend whose search() only records the
 * call, so the test decides when a call completes and when each loop gets to run.
 *
 * Also the admission caps a plugin's limits() hands to the gateway (ABI 1.2): in-flight, queue
 * and qps counted per query or per call, the chunk they imply, and the retry budget; and a
 * completed call's store into Redis, through the cache writer of the call's loop (a real
 * redis-server on a free port; skipped without one).
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
#include "../../redis_server.h"

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

/* The limits the limited fake's config "asks for" (set by each test); access() shares them when
 * fake_share is set (one upstream behind both, as for the upstream plugin). */
static sg_limits fake_limits;
static int fake_share;

static void fake_limits_fn(sg_backend *self, int op, sg_limits *out)
{
    (void)self;
    if (op == SG_OP_SEARCH || fake_share) {
        *out = fake_limits;
        out->share_search = op == SG_OP_ACCESS;
    }
}

static const sg_backend_vtable limited_vt = {SG_BACKEND_HEADER("fake", "1"), .search = fake_search, .health = fake_health,
                                             .access = fake_search, .limits = fake_limits_fn};

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
static sg_route_t backend;
static sg_route_core_t core; /* the route's plugin instance and admission state */
static sg_gen_t gen;         /* the configuration generation the route, loops and queries use */
static sg_client_state_t client_st;
static sg_server_t server; /* the test's server: one route, two loops */
static sg_loop_t loops[2];
static sg_client_conf_t client_conf;
static sg_client_t client;
static sg_counter_t dummy_c, m_calls, m_coalesced, m_hits_l1, m_misses, m_shed;
static sg_gauge_t dummy_g;
static sg_hist_t dummy_h;

static int setup(void **state)
{
    (void)state;
    one_route_init(&cfg, &bconf, &backend, &core, &gen, &server, &fake_vt, &dummy_c, &dummy_g, &dummy_h);
    backend.shed = &m_shed;
    backend.calls = &m_calls;
    backend.coalesced = &m_coalesced;
    backend.cache_hits_l1 = &m_hits_l1;
    backend.cache_misses = &m_misses;
    client_conf.weight = 1;
    one_route_client(&client, &client_st, "test", &client_conf, &dummy_c, &dummy_h);
    server.loops = loops;
    server.n_loops = 2;
    for (int i = 0; i < 2; ++i) {
        loops[i].id = i;
        loops[i].server = &server;
        loops[i].gen = &gen;
        loops[i].loop = h2o_evloop_create();
        h2o_context_init(&loops[i].ctx, loops[i].loop, &server.h2o);
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
    h2o_config_dispose(&server.h2o);
    sg_metrics_reset();
    pthread_mutex_destroy(&core.admit_mutex);
    return 0;
}

/* Each admission test starts from a route without caps. */
static int setup_caps(void **state)
{
    (void)state;
    memset(backend.caps, 0, sizeof(backend.caps));
    memset(core.cap_state, 0, sizeof(core.cap_state));
    core.admit_ready = 0; /* sg_dispatch_setup_route() sets the counters up afresh */
    memset(backend.chunk, 0, sizeof(backend.chunk));
    memset(backend.max_attempts, 0, sizeof(backend.max_attempts));
    core.admit_inflight = core.admit_queued = 0;
    core.plugin.vt = &limited_vt;
    bconf.retries = -1;
    bconf.burst = 1;
    memset(&fake_limits, 0, sizeof(fake_limits));
    fake_limits.struct_size = sizeof(fake_limits);
    fake_limits.retries = -1;
    atomic_store(&m_shed.v, 0);
    fake_share = 0;
    return 0;
}

static int teardown_caps(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_calls; ++i) /* the calls still running end now */
        complete(i);
    run_loop(0);
    run_loop(1);
    memset(backend.caps, 0, sizeof(backend.caps));
    memset(core.cap_state, 0, sizeof(core.cap_state));
    core.admit_ready = 0;
    memset(backend.chunk, 0, sizeof(backend.chunk));
    core.plugin.vt = &fake_vt;
    bconf.chunk = 64;
    bconf.qps = 0;
    return 0;
}

/* What a query answered, for the tests that look at failures. */
typedef struct {
    int status;
    uint32_t retry_after;
    char message[200];
} answer_t;

/* The caller's done(): the test inspects the query itself, or the answer_t in ctx. */
static void on_done(void *ctx, const sg_query_result_t *res)
{
    answer_t *a = ctx;
    if (a == NULL)
        return;
    a->status = res->status;
    a->retry_after = res->retry_after_s;
    snprintf(a->message, sizeof(a->message), "%s", res->message != NULL ? res->message : "");
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
    r->next = &sg__query_next;
    r->loop = &loops[l];
    r->gen = sg_gen_ref(&gen);
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

/* The cache step's answer for a hand-built query of one text, as query.c's on_cache keeps it:
 * the key and, on a miss, L1's watch on it. */
static void keep_answer(void *ctx, const sg_cache_answer_t *a)
{
    sg_query_t *r = ctx;
    assert_int_equal(a->n, 1);
    assert_null(a->blobs[0]);
    r->uniq[0].key_off = a->key_off[0];
    r->uniq[0].key_len = a->key_len[0];
    r->uniq[0].miss = a->misses[0];
}

/* Results of other queries that push every older entry out of L1 (1 MiB here). */
static void fill_l1(void)
{
    static char doc[200 * 1024];
    memset(doc, 'x', sizeof(doc));
    doc[0] = '"';
    doc[sizeof(doc) - 1] = '"';
    sg_hit hit = {doc, sizeof(doc), 1.0};
    sg_hits hits = {&hit, 1};
    for (int i = 0; i < 8; ++i) {
        char key[16];
        int n = snprintf(key, sizeof(key), "filler%d", i);
        sg_blob_t *b = sg_blob_from_hits(&hits);
        sg_cache_store(NULL, key, (size_t)n, b, 60);
        sg_blob_release(b);
    }
}

/* Query `a` of `text` on loop 0 starts a flight; then query b of the same text, on loop 1, does
 * its cache lookup while that flight is in the air (it misses, leaving its watch), and stops
 * there, as if its MGET were outstanding. Returns b. */
static sg_query_t *lookup_while_in_flight(const char *text, sg_query_t **a)
{
    sg_query_t *b = new_request(1, text);
    *a = new_request(0, text);
    sg__query_lookup(*a);
    assert_int_equal(n_calls, 1);
    const char *texts[] = {b->uniq[0].text};
    const uint32_t lens[] = {b->uniq[0].len};
    sg_cache_lookup_t req = {core.identity, b->topk, NULL, 1, texts, lens, 60, &b->keys};
    b->keys_of = &backend;
    sg_cache_lookup(NULL, &req, keep_answer, b);
    return b;
}

/* The duplicate's cache lookup missed while the flight was in the air (its MGET outstanding),
 * and by the time it dispatches, the flight's result has left L1 again (evicted by other
 * results): the watch its lookup left on the key still carries the result, so the backend is
 * not asked twice. (Before the watch, dispatch looked in L1 a second time and found nothing.) */
static void test_lookup_watch_outlives_the_entry(void **state)
{
    (void)state;
    reset_counts();
    sg_query_t *a, *b = lookup_while_in_flight("tallest mountain", &a); /* b's L1 lookup misses now */
    complete(0);
    run_loop(0);
    assert_true(a->responded);
    fill_l1();
    assert_null(peek_l1("tallest mountain", 16));
    sg__query_after_cache(b); /* the MGET answered nil: b dispatches its miss */
    assert_int_equal(n_calls, 1);
    assert_true(b->responded);
    assert_non_null(b->uniq[0].blob);
    assert_int_equal(b->hits_l1, 1);
    assert_int_equal(b->misses, 0);
    sg__query_unref(a);
    sg__query_unref(b);
}

/* A watch filled with a result that expired before the request dispatched (a TTL shorter than its
 * MGET and budget step) does not hide a fresh result a later store put in L1: the request looks. */
static void test_lookup_watch_expired_looks_in_l1(void **state)
{
    (void)state;
    reset_counts();
    sg_query_t *a, *b = lookup_while_in_flight("deepest lake", &a); /* b's L1 lookup misses now */
    const uint32_t ttl = bconf.cache_ttl_s;
    bconf.cache_ttl_s = 0; /* a's store fills b's watch with a result that expires at once */
    complete(0);
    run_loop(0);
    bconf.cache_ttl_s = ttl;
    assert_true(a->responded);
    assert_true(sg_l1_miss_filled(b->uniq[0].miss));
    assert_null(peek_l1("deepest lake", 12));
    sg_buf_t key = {0};
    sg__query_cache_key(&key, &backend, 3, NULL, "deepest lake", 12);
    sg_cache_store(NULL, key.base, key.len, a->uniq[0].blob, 60); /* a later flight's fresh result */
    sg_buf_free(&key);
    sg__query_after_cache(b);
    assert_int_equal(n_calls, 1);
    assert_true(b->responded);
    assert_int_equal(b->hits_l1, 1);
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

/* A query of `n` distinct texts on loop `l` whose answer lands in `a`. */
static sg_query_t *new_batch(int l, const char *const *texts, uint32_t n, answer_t *a)
{
    sg_query_t *r = new_request(l, texts[0]);
    size_t total = 0;
    for (uint32_t i = 0; i < n; ++i)
        total += strlen(texts[i]) + 1;
    free(r->arena);
    free(r->slot_uniq);
    free(r->uniq);
    r->arena = sg_mem_alloc(total);
    r->slot_uniq = sg_mem_calloc(n, sizeof(uint32_t));
    r->uniq = sg_mem_calloc(n, sizeof(sg_uq_t));
    r->n_queries = r->n_uniq = r->n_pending = n;
    char *p = r->arena;
    for (uint32_t i = 0; i < n; ++i) {
        size_t len = strlen(texts[i]);
        memcpy(p, texts[i], len + 1);
        r->slot_uniq[i] = i;
        r->uniq[i].text = p;
        r->uniq[i].len = (uint32_t)len;
        p += len + 1;
    }
    r->ctx = a;
    return r;
}

/* A plugin that sends one request per query (serper) with max_inflight 2: a 5-query request
 * reaches it in calls of at most 2 queries, and never more than 2 queries run at once. */
static void test_plugin_inflight_per_query(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.max_inflight = 2;
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.chunk[0], 2);
    static const char *const q[] = {"q one", "q two", "q three", "q four", "q five"};
    answer_t a = {0};
    sg_query_t *r = new_batch(0, q, 5, &a);
    sg__query_lookup(r);
    assert_int_equal(n_calls, 1);
    assert_int_equal(calls[0].s->n_queries, 2);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].inflight, 2);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].queued, 3);
    complete(0);
    run_loop(0); /* the completion frees the slots: the next call starts */
    assert_int_equal(n_calls, 2);
    assert_int_equal(calls[1].s->n_queries, 2);
    complete(1);
    run_loop(0);
    assert_int_equal(n_calls, 3);
    assert_int_equal(calls[2].s->n_queries, 1);
    complete(2);
    run_loop(0);
    assert_true(r->responded);
    assert_int_equal(a.status, 200);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].inflight, 0);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].queued, 0);
    n_calls = 0;
    sg__query_unref(r);
}

/* A plugin that sends one request per call (upstream, qdrant) counts calls: max_inflight 1 lets
 * a 3-query call run, and the next call waits; its max_queue 1 refuses a third with 503. */
static void test_plugin_per_call_and_queue(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.per_call = 1;
    fake_limits.max_inflight = 1;
    fake_limits.max_queue = 1;
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.chunk[0], 64); /* a call is one request, whatever its size */
    static const char *const q1[] = {"a one", "a two", "a three"}, *const q2[] = {"b one", "b two"}, *const q3[] = {"c one"};
    answer_t a1 = {0}, a2 = {0}, a3 = {0};
    sg_query_t *r1 = new_batch(0, q1, 3, &a1), *r2 = new_batch(0, q2, 2, &a2), *r3 = new_batch(1, q3, 1, &a3);
    sg__query_lookup(r1);
    assert_int_equal(n_calls, 1);
    assert_int_equal(calls[0].s->n_queries, 3);
    sg__query_lookup(r2); /* waits: one call in flight */
    assert_int_equal(n_calls, 1);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].queued, 1);
    sg__query_lookup(r3); /* the plugin's queue of 1 call is full */
    assert_int_equal(n_calls, 1);
    run_loop(1);
    assert_true(r3->responded);
    assert_int_equal(a3.status, 503);
    assert_true(a3.retry_after >= 1);
    assert_non_null(strstr(a3.message, "max_queue 1"));
    assert_int_equal(atomic_load(&m_shed.v), 1);
    complete(0);
    run_loop(0);
    assert_int_equal(n_calls, 2);
    assert_int_equal(calls[1].s->n_queries, 2);
    complete(1);
    run_loop(0);
    assert_true(r1->responded && r2->responded);
    assert_int_equal(a1.status, 200);
    assert_int_equal(a2.status, 200);
    n_calls = 0;
    sg__query_unref(r1);
    sg__query_unref(r2);
    sg__query_unref(r3);
}

/* qps 1 with burst 1: the first query takes the token, the second waits for the next one; the
 * loop's admission timer is armed for it and starts it once the token is there. */
static void test_plugin_qps_waits_for_a_token(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.qps = 1;
    fake_limits.burst = 1;
    fake_limits.metric_prefix = "fake";
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.chunk[0], 1); /* a call never needs more than a full bucket */
    answer_t a = {0};
    static const char *const q[] = {"t one", "t two"};
    sg_query_t *r = new_batch(0, q, 2, &a);
    sg__query_lookup(r);
    assert_int_equal(n_calls, 1);
    assert_true(sg_timer_is_armed(&loops[0].admit_timer));
    uint64_t due = loops[0].admit_timer.at_ms;
    assert_true(due > sg_now_ms() + 500 && due <= sg_now_ms() + 1001);
    assert_int_equal(atomic_load(&backend.caps[SG_CAP_SEARCH].qps_delayed->v), 1);
    loops[0].admit_timer.cb(&loops[0].admit_timer); /* early: still no token, armed again */
    assert_int_equal(n_calls, 1);
    assert_true(sg_timer_is_armed(&loops[0].admit_timer));
    core.cap_state[SG_CAP_SEARCH].tokens = 1; /* the token is due */
    loops[0].admit_timer.cb(&loops[0].admit_timer);
    assert_int_equal(n_calls, 2);
    assert_int_equal(atomic_load(&backend.caps[SG_CAP_SEARCH].qps_delayed->v), 1); /* counted once */
    complete(0);
    complete(1);
    run_loop(0);
    assert_true(r->responded);
    assert_int_equal(a.status, 200);
    n_calls = 0;
    sg__query_unref(r);
}

/* The route's own qps/burst (queries) holds even for a plugin without limits, and bounds the chunk. */
static void test_route_qps(void **state)
{
    (void)state;
    reset_counts();
    bconf.qps = 2;
    bconf.burst = 2;
    sg_dispatch_setup_route(&backend, &fake_vt, NULL);
    assert_int_equal(backend.chunk[0], 2);
    assert_int_equal(backend.max_attempts[0], 0); /* a plugin without limits() keeps its own retries */
    static const char *const q[] = {"r one", "r two", "r three"};
    answer_t a = {0};
    sg_query_t *r = new_batch(0, q, 3, &a);
    sg__query_lookup(r);
    assert_int_equal(n_calls, 1); /* the burst of 2 is spent; the third query waits */
    assert_int_equal(calls[0].s->n_queries, 2);
    assert_true(sg_timer_is_armed(&loops[0].admit_timer));
    core.cap_state[SG_CAP_ROUTE].tokens = 1;
    loops[0].admit_timer.cb(&loops[0].admit_timer);
    assert_int_equal(n_calls, 2);
    complete(0);
    complete(1);
    run_loop(0);
    assert_int_equal(a.status, 200);
    n_calls = 0;
    sg__query_unref(r);
}

/* A retry takes a token of the plugin's qps cap like a first attempt (host->retry_at). */
static void test_retry_takes_a_token(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.qps = 1;
    fake_limits.burst = 2;
    fake_limits.metric_prefix = "fake_retry"; /* a counter of its own */
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    answer_t a = {0};
    static const char *const q[] = {"retried"};
    sg_query_t *r = new_batch(0, q, 1, &a);
    sg__query_lookup(r);
    assert_int_equal(n_calls, 1);
    uint64_t now = sg_now_ms();
    void *adm = calls[0].s->admission;
    assert_non_null(adm);
    assert_true(sg_plugin_host_api()->retry_at == sg_dispatch_retry_at);
    assert_int_equal(sg_dispatch_retry_at(adm, now + 5), now + 5); /* the second token of the burst */
    uint64_t at = sg_dispatch_retry_at(adm, now + 5);              /* the bucket is empty now */
    assert_true(at > now + 500 && at <= sg_now_ms() + 1001);
    assert_int_equal(atomic_load(&backend.caps[SG_CAP_SEARCH].qps_delayed->v), 1);
    backend.caps[SG_CAP_SEARCH].qps = 0; /* no cap: at once */
    assert_int_equal(sg_dispatch_retry_at(adm, now + 7), now + 7);
    assert_int_equal(sg_dispatch_retry_at(NULL, 9), 9);
    complete(0);
    run_loop(0);
    assert_int_equal(a.status, 200);
    n_calls = 0;
    sg__query_unref(r);
}

/* A plugin with one upstream behind search() and access() (share_search) has one set of caps for
 * both: a running search call holds the only slot an access call needs. */
static void test_access_shares_the_search_caps(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.per_call = 1;
    fake_limits.max_inflight = 1;
    fake_limits.retries = 2;
    fake_share = 1;
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.access_shares_search, 1);
    assert_int_equal(backend.max_attempts[1], 3);
    answer_t a1 = {0}, a2 = {0};
    static const char *const q1[] = {"shared search"}, *const q2[] = {"https://example.org/page"};
    sg_query_t *r1 = new_batch(0, q1, 1, &a1), *r2 = new_batch(0, q2, 1, &a2);
    r2->is_access = 1;
    sg__query_lookup(r1);
    assert_int_equal(n_calls, 1);
    sg__query_lookup(r2); /* waits for the search call's slot */
    assert_int_equal(n_calls, 1);
    assert_int_equal(core.cap_state[SG_CAP_SEARCH].queued, 1);
    assert_int_equal(core.cap_state[SG_CAP_ACCESS].queued, 0);
    complete(0);
    run_loop(0);
    assert_int_equal(n_calls, 2);
    assert_int_equal(SG_SEARCH_MAX_ATTEMPTS(calls[1].s, 99), 3);
    complete(1);
    run_loop(0);
    assert_int_equal(a1.status, 200);
    assert_int_equal(a2.status, 200);
    n_calls = 0;
    sg__query_unref(r1);
    sg__query_unref(r2);
}

/* The retry budget: the plugin's own retries unless the route sets `retries`. */
static void test_retry_budget(void **state)
{
    (void)state;
    reset_counts();
    fake_limits.retries = 3;
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.max_attempts[0], 4);
    answer_t a = {0};
    static const char *const q[] = {"budget"};
    sg_query_t *r = new_batch(0, q, 1, &a);
    sg__query_lookup(r);
    assert_int_equal(n_calls, 1);
    assert_int_equal(SG_SEARCH_MAX_ATTEMPTS(calls[0].s, 99), 4);
    complete(0);
    run_loop(0);
    n_calls = 0;
    sg__query_unref(r);
    bconf.retries = 0; /* the route allows no retry */
    sg_dispatch_setup_route(&backend, &limited_vt, NULL);
    assert_int_equal(backend.max_attempts[0], 1);
}

/* ---- Redis on loop 0: its connection and cache writer, as server.c sets a loop up ---- */

static test_redis_t redis_server;
static sg_redis_conf_t redis_conf;

/* Runs loop 0 with its timers until `*flag` or `ms` passed. */
static void run_loop0_until(const int *flag, uint64_t ms)
{
    uint64_t end = sg_now_ms() + ms;
    while ((flag == NULL || !*flag) && sg_now_ms() < end) {
        h2o_evloop_run(loops[0].loop, sg_timers_next_wait(&loops[0].timers, 10));
        sg_timers_run(&loops[0].timers);
    }
}

static int setup_redis(void **state)
{
    (void)state;
    if (!test_redis_available() || test_redis_start(&redis_server, 0) != 0)
        return 0;
    redis_conf.enabled = 1;
    redis_conf.node.host = sg_strdup("127.0.0.1");
    redis_conf.node.port = redis_server.port;
    redis_conf.timeout_ms = 500;
    loops[0].redis = sg_redis_create(loops[0].loop, &loops[0].timers, 0, &redis_conf);
    uint64_t end = sg_now_ms() + 5000;
    while (!sg_redis_is_up(loops[0].redis) && sg_now_ms() < end)
        run_loop0_until(NULL, 10);
    loops[0].cache_writer = sg_cache_writer_create(loops[0].ctx.queue, loops[0].redis, 16, 1 << 20);
    return 0;
}

static int teardown_redis(void **state)
{
    (void)state;
    sg_cache_writer_destroy(loops[0].cache_writer);
    loops[0].cache_writer = NULL;
    sg_redis_destroy(loops[0].redis);
    loops[0].redis = NULL;
    test_redis_stop(&redis_server);
    free(redis_conf.node.host);
    redis_conf.node.host = NULL;
    return 0;
}

static void on_pong(void *arg, redisReply *reply)
{
    (void)reply;
    *(int *)arg = 1;
}

/* Whether Redis holds the cache entry of `text` of the test backend (the value's bytes in `*value`). */
static int in_redis(const char *text, char **value, size_t *value_len)
{
    sg_buf_t key = {0};
    sg__query_cache_key(&key, &backend, 3, NULL, text, strlen(text));
    char rkey[128];
    test_redis_cache_key(rkey, "", key.base, key.len);
    sg_buf_free(&key);
    long long n;
    assert_int_equal(test_redis_call(redis_server.port, 2, (const char *[]){"GET", rkey}, &n, value, value_len), '$');
    return *value != NULL;
}

/* A miss served on loop 0 (whose lookup asked Redis first) is stored in Redis by the call's own
 * store, carried to loop 0's connection by its cache writer; the result of a call of loop 1,
 * which has no writer, goes to L1 only. The writes are sent by loop 0 alone. */
static void test_store_reaches_redis_through_the_calls_loop(void **state)
{
    (void)state;
    if (loops[0].redis == NULL || !sg_redis_is_up(loops[0].redis))
        skip();
    reset_counts();
    sg_query_t *a = new_request(0, "who wrote macbeth");
    sg_query_t *b = new_request(1, "who wrote lear");
    sg__query_lookup(a); /* L1 misses: an MGET on loop 0's connection, answered nil */
    sg__query_lookup(b); /* no Redis on loop 1: a call at once */
    assert_int_equal(n_calls, 1);
    uint64_t end = sg_now_ms() + 3000;
    while (n_calls < 2 && sg_now_ms() < end)
        run_loop0_until(NULL, 10);
    assert_int_equal(n_calls, 2);
    complete(0); /* "the plugin's thread": L1 at once, the Redis write queued for loop 0 */
    complete(1);
    sg_blob_t *in_l1 = peek_l1("who wrote macbeth", 17);
    assert_non_null(in_l1);
    sg_blob_release(in_l1);
    run_loop(1);
    int synced = 0;
    size_t len = 4;
    run_loop0_until(&a->responded, 3000); /* its delivery, and the queued write in the same turns */
    assert_int_equal(sg_redis_command(loops[0].redis, on_pong, &synced, 1, (const char *[]){"PING"}, &len), 0);
    run_loop0_until(&synced, 3000);
    assert_true(a->responded && b->responded);
    char *value = NULL;
    size_t value_len = 0;
    assert_true(in_redis("who wrote macbeth", &value, &value_len));
    sg_buf_t want = {0};
    sg_cache_encode(&want, a->uniq[0].blob);
    assert_int_equal(value_len, want.len);
    assert_memory_equal(value, want.base, want.len);
    free(value);
    sg_buf_free(&want);
    assert_false(in_redis("who wrote lear", &value, &value_len));
    sg__query_unref(a);
    sg__query_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_after_completion_before_store),
        cmocka_unit_test(test_lookup_before_completion_dispatch_after),
        cmocka_unit_test(test_lookup_watch_outlives_the_entry),
        cmocka_unit_test(test_lookup_watch_expired_looks_in_l1),
        cmocka_unit_test(test_in_flight_join_and_errors),
        cmocka_unit_test_setup_teardown(test_plugin_inflight_per_query, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_plugin_per_call_and_queue, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_plugin_qps_waits_for_a_token, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_route_qps, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_retry_budget, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_retry_takes_a_token, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_access_shares_the_search_caps, setup_caps, teardown_caps),
        cmocka_unit_test_setup_teardown(test_store_reaches_redis_through_the_calls_loop, setup_redis, teardown_redis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
