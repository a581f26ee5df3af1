/* Unit tests: the result cache's keys and its Redis value format (cache/cache.c): a key with search
 * parameters, and values read back only when they are exactly what the writer makes. Built twice,
 * like lib/test_json.c: unit_cache and unit_cache_portable (lib/json.c's portable string scan).
 * The store's Redis half, against a real redis-server on a free port (skipped without one): a
 * store on another thread reaches Redis through the loop's write-behind queue, a full queue drops
 * and counts, and a writer ended with writes queued releases them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "json.h"
#include "server.h"
#include "dispatch.h"
#include "../cache/cache.h"
#include "../redis_server.h"

#include <pthread.h>

/* The key of a request with search parameters differs from the plain one (and from other
 * parameters); without parameters ("" or NULL) it is the key every earlier release wrote. */
static void test_key_params(void **state)
{
    (void)state;
    sg_route_core_t b; /* the route's half that holds its cache identity */
    memset(&b, 0, sizeof(b));
    b.identity = "local|local|1.0.0|x";
    sg_buf_t k0 = {0}, k1 = {0}, k2 = {0}, k3 = {0}, k4 = {0};
    sg_cache_key(&k0, b.identity, 3, NULL, "who wrote hamlet", 16);
    sg_cache_key(&k1, b.identity, 3, "", "who wrote hamlet", 16);
    sg_cache_key(&k2, b.identity, 3, "nprobe=8", "who wrote hamlet", 16);
    sg_cache_key(&k3, b.identity, 3, "nprobe=16", "who wrote hamlet", 16);
    sg_cache_key(&k4, b.identity, 3, "nprobe=8", "who wrote hamlet", 16);
    const char plain[] = "local|local|1.0.0|x\x1f"
                         "3\x1fwho wrote hamlet";
    assert_int_equal(k0.len, sizeof(plain) - 1);
    assert_memory_equal(k0.base, plain, k0.len);
    assert_true(k1.len == k0.len && memcmp(k1.base, k0.base, k0.len) == 0);
    assert_false(k2.len == k0.len && memcmp(k2.base, k0.base, k0.len) == 0);
    assert_false(k2.len == k3.len && memcmp(k2.base, k3.base, k2.len) == 0);
    assert_true(k2.len == k4.len && memcmp(k2.base, k4.base, k2.len) == 0);
    sg_buf_free(&k0);
    sg_buf_free(&k1);
    sg_buf_free(&k2);
    sg_buf_free(&k3);
    sg_buf_free(&k4);
}

/* What the lookup answers (before returning: no Redis). */
typedef struct {
    int calls;
    uint32_t n;
    sg_blob_t *blobs[4];
    uint8_t tier[4];
    sg_l1_miss_t *misses[4];
    uint32_t key_off[4], key_len[4];
} answered_t;

static void on_answer(void *ctx, const sg_cache_answer_t *a)
{
    answered_t *got = ctx;
    ++got->calls;
    got->n = a->n;
    for (uint32_t i = 0; i < a->n && i < 4; ++i) {
        got->blobs[i] = a->blobs[i];
        got->tier[i] = a->tier[i];
        got->misses[i] = a->misses[i];
        got->key_off[i] = a->key_off[i];
        got->key_len[i] = a->key_len[i];
    }
}

/* The lookup makes each text's key once (sg_cache_key's bytes), appends it to the caller's buffer
 * and says where, so that the caller stores the misses' answers under the same bytes; it finds
 * what was stored under them, and leaves L1's watch on a key it missed, which the store fills. */
static void test_lookup_makes_the_keys(void **state)
{
    (void)state;
    sg_cache_init(1 << 20, "");
    const char *identity = "local|local|1.0.0|x";
    sg_buf_t want = {0}, keys = {0};
    sg_cache_key(&want, identity, 5, "nprobe=8", "beta", 4);
    sg_hit hit = {"{\"id\":\"b\"}", 10, 1.0};
    sg_hits hits = {&hit, 1};
    sg_blob_t *stored = sg_blob_from_hits(&hits);
    sg_cache_store(NULL, want.base, want.len, stored, 60);
    sg_buf_appends(&keys, "earlier"); /* the lookup appends */
    const char *texts[] = {"alpha", "beta"};
    const uint32_t lens[] = {5, 4};
    answered_t got = {0};
    sg_cache_lookup_t req = {identity, 5, "nprobe=8", 2, texts, lens, 60, &keys};
    sg_cache_lookup(NULL, &req, on_answer, &got);
    assert_int_equal(got.calls, 1);
    assert_int_equal(got.n, 2);
    assert_null(got.blobs[0]);
    assert_ptr_equal(got.blobs[1], stored);
    assert_int_equal(got.tier[1], SG_CACHE_L1);
    assert_null(got.misses[1]);
    assert_non_null(got.misses[0]);
    assert_null(sg_l1_miss_result(got.misses[0], 0));
    assert_int_equal(got.key_off[0], 7);
    assert_int_equal(got.key_off[1], 7 + got.key_len[0]);
    assert_int_equal(keys.len, 7 + got.key_len[0] + got.key_len[1]);
    assert_int_equal(got.key_len[1], want.len);
    assert_memory_equal(keys.base + got.key_off[1], want.base, want.len);
    sg_cache_key(&want, identity, 5, "nprobe=8", "alpha", 5);
    assert_int_equal(got.key_len[0], want.len);
    assert_memory_equal(keys.base + got.key_off[0], want.base, want.len);
    sg_cache_store(NULL, keys.base + got.key_off[0], got.key_len[0], stored, 60); /* the miss's answer */
    sg_blob_t *late = sg_l1_miss_result(got.misses[0], sg_now_ms());
    assert_ptr_equal(late, stored);
    sg_blob_release(late);
    sg_l1_miss_release(got.misses[0]);
    sg_blob_release(got.blobs[1]);
    sg_blob_release(stored);
    sg_buf_free(&want);
    sg_buf_free(&keys);
    sg_cache_dispose();
}

/* A cached value's documents must lie inside its fragment's brackets, in order, without
 * overlapping: the flat reply is spliced from them, so a value that lists the same span many
 * times (a foreign or damaged Redis entry) would make a reply many times its size -- 4,000 copies
 * of a 1 kB fragment, a 4 MB reply from a 50 kB value, and with 100,000 copies of a large
 * fragment an allocation the gateway dies on. Found by the cache value fuzz target (tests/fuzz). */
static void test_cache_value_docs_bounded(void **state)
{
    (void)state;
    const char *bad[] = {
        "SG1 2 1 2 1 2\n[{},{}]", /* the same document twice */
        "SG1 2 4 2 1 2\n[{},{}]", /* out of order */
        "SG1 1 1 3\n[{}]",        /* takes the closing bracket */
        "SG1 1 0 3\n[{}]",        /* takes the opening bracket */
        "SG1 2 1 2 2 2\n[{},{}]", /* overlapping */
        "SG1 1 1 0\n[{}]",        /* empty */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_blob_t *b = sg_cache_decode(bad[i], strlen(bad[i]), NULL);
        if (b != NULL)
            fail_msg("accepted %s", bad[i]);
    }
    /* the amplification itself: n copies of the whole document */
    sg_buf_t v = {0};
    const size_t n = 4000, doc = 1000;
    sg_buf_appendf(&v, "SG1 %zu", n);
    for (size_t i = 0; i < n; ++i)
        sg_buf_appendf(&v, " 1 %zu", doc);
    sg_buf_appendc(&v, '\n');
    sg_buf_appendc(&v, '[');
    sg_buf_appendc(&v, '{');
    for (size_t i = 0; i < doc - 2; ++i)
        sg_buf_appendc(&v, ' ');
    sg_buf_appends(&v, "}]");
    sg_blob_t *b = sg_cache_decode(v.base, v.len, NULL);
    if (b != NULL) {
        size_t flat = sg_blob_fragment_len(b, 0);
        sg_blob_release(b);
        fail_msg("a %zu-byte value decoded into a %zu-byte reply", v.len, flat);
    }
    sg_buf_free(&v);
    /* documents back to back (no separator) keep the bound but are not the writer's shape: since
     * values are validated in full (test_cache_value_content) they are refused too */
    assert_null(sg_cache_decode("SG1 2 1 2 3 2\n[{}{}]", strlen("SG1 2 1 2 3 2\n[{}{}]"), NULL));
}

/* A value whose frame is right but whose content is not what the writer makes: served, its
 * fragment would splice invalid JSON into the reply ({"result":[[xxxxx]]}). Each is a miss with
 * a reason; the writer's own values, with every kind of score it writes, still decode. */
static void test_cache_value_content(void **state)
{
    (void)state;
    static const struct {
        const char *value, *what;
    } bad[] = {
        {"SG1 1 13 5\n[{\"document\":xxxxx,\"score\":1}]", "the issue's {\"result\":[[xxxxx]]}"},
        {"SG1 1 13 9\n[{\"document\":{\"a\":\"\x80\"},\"score\":1}]", "invalid UTF-8"},
        {"SG1 1 13 9\n[{\"document\":{\"a\":\"\x01\"},\"score\":1}]", "a raw control character"},
        {"SG1 1 13 8\n[{\"document\":{\"a\":01},\"score\":1}]", "a number outside the grammar"},
        {"SG1 1 13 3\n[{\"document\":{}x,\"score\":1}]", "a document with junk after it"},
        {"SG1 1 13 5\n[{\"document\":[1,2],\"score\":1}]", "a document that is not an object"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1.}]", "a bad score (the flat shape alone would be valid)"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":\"1\"}]", "a score that is a string"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1,\"x\":2}]", "a member beyond document and score"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1}", "no closing bracket"},
        {"SG1 1 13 2\n[{\"document\":{},\"score\":1}x]", "junk after the last hit"},
        {"SG1 2 13 2 38 2\n[{\"document\":{},\"score\":1}{\"document\":{},\"score\":1}]", "a missing comma"},
        {"SG1 1 14 2\n[{\"document\": {},\"score\":1}]", "whitespace the writer never makes"},
        {"SG1 1 13 2\n[{\"score\":1,\"document\":{}}]", "members in another order"},
        {"SG1 0\n[{\"document\":{},\"score\":1}]", "a hit the header does not list"},
        {"SG1 50000 13 2\n[]", "more hits than the value can hold"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        const char *why = NULL;
        sg_blob_t *b = sg_cache_decode(bad[i].value, strlen(bad[i].value), &why);
        if (b != NULL)
            fail_msg("accepted a value with %s", bad[i].what);
        assert_non_null(why);
    }
    static const char *const good[] = {
        "SG1 0\n[]",
        "SG1 1 13 2\n[{\"document\":{},\"score\":null}]",
        "SG1 2 13 10 53 8\n[{\"document\":{\"id\":\"1\"},\"score\":-1.5e-7},{\"document\":{\"b\":[]},\"score\":0}]",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); ++i) {
        sg_blob_t *b = sg_cache_decode(good[i], strlen(good[i]), NULL);
        if (b == NULL)
            fail_msg("refused %s", good[i]);
        sg_blob_release(b);
    }
    /* a document nested deeper than any parser a client uses would read */
    sg_buf_t deep = {0}, v = {0};
    for (int i = 0; i < 600; ++i)
        sg_buf_appends(&deep, "{\"a\":");
    sg_buf_appends(&deep, "1");
    for (int i = 0; i < 600; ++i)
        sg_buf_appendc(&deep, '}');
    sg_buf_appendf(&v, "SG1 1 13 %zu\n[{\"document\":", deep.len);
    sg_buf_append(&v, deep.base, deep.len);
    sg_buf_appends(&v, ",\"score\":1}]");
    assert_null(sg_cache_decode(v.base, v.len, NULL));
    sg_buf_free(&deep);
    sg_buf_free(&v);
    /* what the writer makes from a plugin's documents (escapes, UTF-8, NaN scores) round-trips */
    sg_hit hits[3] = {{"{\"t\":\"\\u00e9 \xc3\xa9 \\\"\"}", 20, 0.25}, {"{\"n\":[1,{\"x\":null}]}", 20, NAN}, {"{}", 2, -3}};
    sg_hits h = {hits, 3};
    sg_blob_t *b = sg_blob_from_hits(&h);
    sg_buf_t enc = {0};
    sg_cache_encode(&enc, b);
    sg_blob_t *d = sg_cache_decode(enc.base, enc.len, NULL);
    assert_non_null(d);
    assert_int_equal(d->json_len, b->json_len);
    assert_memory_equal(d->json, b->json, b->json_len);
    sg_blob_release(d);
    sg_blob_release(b);
    sg_buf_free(&enc);
}

/* ---- the store's Redis half: one loop, its queue, its connection and its writer ---- */

typedef struct {
    h2o_evloop_t *loop;
    h2o_multithread_queue_t *queue;
    sg_timers_t timers;
    sg_redis_conf_t conf;
    sg_redis_t *redis;
    test_redis_t server;
    sg_cache_writer_t *writer; /* the test's, ended by the teardown */
} loop_fixture_t;

/* Runs the loop (its sockets and timers) until `*flag` or `ms` passed. */
static void run_until(loop_fixture_t *f, const int *flag, uint64_t ms)
{
    uint64_t end = sg_now_ms() + ms;
    while ((flag == NULL || !*flag) && sg_now_ms() < end) {
        h2o_evloop_run(f->loop, sg_timers_next_wait(&f->timers, 10));
        sg_timers_run(&f->timers);
    }
}

/* A loop with a connection to a redis-server of its own (state: NULL without one: the tests skip). */
static int loop_setup(void **state)
{
    loop_fixture_t *f = sg_mem_calloc(1, sizeof(*f));
    f->loop = h2o_evloop_create();
    f->queue = h2o_multithread_create_queue(f->loop);
    *state = f;
    if (!test_redis_available() || test_redis_start(&f->server, 0) != 0)
        return 0;
    f->conf.enabled = 1;
    f->conf.node.host = sg_strdup("127.0.0.1");
    f->conf.node.port = f->server.port;
    f->conf.timeout_ms = 500;
    f->redis = sg_redis_create(f->loop, &f->timers, 0, &f->conf);
    uint64_t end = sg_now_ms() + 5000;
    while (!sg_redis_is_up(f->redis) && sg_now_ms() < end)
        run_until(f, NULL, 10);
    return 0;
}

/* Also after a failed test: the writer, the cache, the connection, the server. */
static int loop_teardown(void **state)
{
    loop_fixture_t *f = *state;
    sg_cache_writer_destroy(f->writer);
    sg_cache_dispose();
    sg_redis_destroy(f->redis);
    h2o_multithread_destroy_queue(f->queue);
    h2o_evloop_run(f->loop, 0); /* the queue's socket closes */
    free(f->queue);
    sg_timers_dispose(&f->timers);
    h2o_evloop_destroy(f->loop);
    test_redis_stop(&f->server);
    free(f->conf.node.host);
    free(f);
    return 0;
}

/* The fixture of a test that needs Redis up, or skip. */
static loop_fixture_t *with_redis(void **state)
{
    loop_fixture_t *f = *state;
    if (f->redis == NULL || !sg_redis_is_up(f->redis))
        skip();
    return f;
}

/* Waits until every command sent so far on the loop's connection was answered (a PING after them). */
static void on_pong(void *arg, redisReply *reply)
{
    (void)reply;
    *(int *)arg = 1;
}

static void loop_sync(loop_fixture_t *f)
{
    int done = 0;
    size_t len = 4;
    assert_int_equal(sg_redis_command(f->redis, on_pong, &done, 1, (const char *[]){"PING"}, &len), 0);
    run_until(f, &done, 3000);
    assert_true(done);
}

static int64_t queued_gauge(void)
{
    return atomic_load(&sg_metrics_gauge("searchgate_cache_redis_write_queue", "", "")->v);
}

static uint64_t queue_dropped(void)
{
    return atomic_load(&sg_metrics_counter("searchgate_cache_redis_write_queue_dropped_total", "", "")->v);
}

static sg_blob_t *one_hit_blob(const char *doc)
{
    sg_hit hit = {doc, strlen(doc), 0.25};
    sg_hits hits = {&hit, 1};
    return sg_blob_from_hits(&hits);
}

typedef struct {
    sg_cache_writer_t *w;
    const char *key;
    size_t key_len;
    sg_blob_t *blob;
} store_arg_t;

static void *store_thread(void *arg)
{
    store_arg_t *a = arg;
    sg_cache_store(a->w, a->key, a->key_len, a->blob, 60);
    return NULL;
}

/* A miss served: the lookup misses L1 and Redis, the flight's result is stored on the plugin's
 * thread (another thread), and the loop sends it: the value is in Redis under the key every
 * replica reads, in the value format, with the route's TTL, and a later lookup with nothing in
 * L1 finds it there. The watch the miss left is filled at once, before the loop ran. */
static void test_store_reaches_redis(void **state)
{
    loop_fixture_t *f = with_redis(state);
    sg_cache_init(1 << 20, "t:");
    sg_cache_writer_t *w = f->writer = sg_cache_writer_create(f->queue, f->redis, 16, 1 << 20);
    const char *identity = "local|local|1.0.0|x";
    const char *texts[] = {"who wrote hamlet"};
    const uint32_t lens[] = {16};
    sg_buf_t keys = {0};
    answered_t got = {0};
    sg_cache_lookup_t req = {identity, 3, NULL, 1, texts, lens, 60, &keys};
    sg_cache_lookup(f->redis, &req, on_answer, &got);
    run_until(f, &got.calls, 3000);
    assert_int_equal(got.calls, 1);
    assert_null(got.blobs[0]); /* a miss in L1 and in Redis */
    assert_int_equal(got.tier[0], SG_CACHE_MISS);
    assert_non_null(got.misses[0]);

    sg_blob_t *blob = one_hit_blob("{\"id\":\"7\",\"contents\":\"Hamlet\"}");
    int64_t queued = queued_gauge();
    store_arg_t arg = {w, keys.base + got.key_off[0], got.key_len[0], blob};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, store_thread, &arg), 0);
    pthread_join(t, NULL);
    sg_blob_t *filled = sg_l1_miss_result(got.misses[0], sg_now_ms()); /* L1 at once */
    assert_ptr_equal(filled, blob);
    sg_blob_release(filled);
    sg_l1_miss_release(got.misses[0]);
    assert_int_equal(queued_gauge(), queued + 1); /* the Redis write waits for the loop */

    run_until(f, NULL, 50); /* the loop's turn: the SET goes out */
    loop_sync(f);
    assert_int_equal(queued_gauge(), queued);
    char rkey[128];
    test_redis_cache_key(rkey, "t:", arg.key, arg.key_len);
    char *value = NULL;
    size_t value_len = 0;
    long long n;
    assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"GET", rkey}, &n, &value, &value_len), '$');
    assert_non_null(value);
    sg_buf_t want = {0};
    sg_cache_encode(&want, blob);
    assert_int_equal(value_len, want.len);
    assert_memory_equal(value, want.base, want.len);
    assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"TTL", rkey}, &n, NULL, NULL), ':');
    assert_true(n > 0 && n <= 60);

    /* another replica (nothing in L1) finds it in Redis */
    sg_cache_writer_destroy(w);
    f->writer = NULL;
    sg_cache_dispose();
    sg_cache_init(0, "t:");
    answered_t again = {0};
    keys.len = 0;
    sg_cache_lookup(f->redis, &req, on_answer, &again);
    run_until(f, &again.calls, 3000);
    assert_int_equal(again.calls, 1);
    assert_int_equal(again.tier[0], SG_CACHE_REDIS);
    assert_non_null(again.blobs[0]);
    assert_int_equal(again.blobs[0]->json_len, blob->json_len);
    assert_memory_equal(again.blobs[0]->json, blob->json, blob->json_len);
    sg_blob_release(again.blobs[0]);
    sg_blob_release(blob);
    free(value);
    sg_buf_free(&want);
    sg_buf_free(&keys);
}

/* A full write-behind queue (in writes, then in bytes) keeps the result in L1, drops its Redis
 * write and counts it; what was queued still reaches Redis. */
static void test_write_queue_full_drops(void **state)
{
    loop_fixture_t *f = with_redis(state);
    sg_cache_init(1 << 20, "");
    sg_blob_t *blob = one_hit_blob("{\"id\":\"1\",\"contents\":\"a document of some size\"}");
    sg_cache_writer_t *w = f->writer = sg_cache_writer_create(f->queue, f->redis, 2, 3 * blob->json_len);
    const char *keys[] = {"key-0", "key-1", "key-2"};
    uint64_t dropped = queue_dropped();
    int64_t queued = queued_gauge();
    for (int i = 0; i < 3; ++i)
        sg_cache_store(w, keys[i], 5, blob, 60);
    assert_int_equal(queue_dropped() - dropped, 1); /* the third: over 2 writes */
    assert_int_equal(queued_gauge(), queued + 2);
    for (int i = 0; i < 3; ++i) { /* every result is in L1 */
        sg_blob_t *b = sg_cache_get_l1(keys[i], 5);
        assert_ptr_equal(b, blob);
        sg_blob_release(b);
    }
    run_until(f, NULL, 50);
    loop_sync(f);
    assert_int_equal(queued_gauge(), queued);
    long long n;
    char rkey[128];
    for (int i = 0; i < 3; ++i) {
        test_redis_cache_key(rkey, "", keys[i], 5);
        assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"EXISTS", rkey}, &n, NULL, NULL), ':');
        assert_int_equal(n, i < 2 ? 1 : 0);
    }
    /* in bytes (3 x the small result's allowed): one large result fits, a second does not */
    sg_buf_t big = {0};
    sg_buf_appends(&big, "{\"id\":\"2\",\"contents\":\"");
    for (size_t i = 0; i < blob->json_len; ++i)
        sg_buf_appendc(&big, 'x');
    sg_buf_appends(&big, "\"}");
    sg_blob_t *large = one_hit_blob(big.base);
    assert_true(large->json_len <= 3 * blob->json_len && 2 * large->json_len > 3 * blob->json_len);
    dropped = queue_dropped();
    sg_cache_store(w, "key-3", 5, large, 60); /* fits */
    sg_cache_store(w, "key-4", 5, large, 60); /* over the bytes, though under 2 writes */
    assert_int_equal(queue_dropped() - dropped, 1);
    run_until(f, NULL, 50);
    loop_sync(f);
    test_redis_cache_key(rkey, "", "key-3", 5);
    assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"EXISTS", rkey}, &n, NULL, NULL), ':');
    assert_int_equal(n, 1);
    test_redis_cache_key(rkey, "", "key-4", 5);
    assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"EXISTS", rkey}, &n, NULL, NULL), ':');
    assert_int_equal(n, 0);
    sg_cache_writer_destroy(w);
    f->writer = NULL;
    sg_blob_release(large);
    sg_blob_release(blob);
    sg_buf_free(&big);
}

/* The loop stops before its turn: the writer, ended with writes queued and its wake-up not
 * delivered, releases their results (their references come back), counts them dropped and sends
 * nothing -- the connection is destroyed after it. (ASan: nothing leaks.) */
static void test_writer_destroy_frees_queued(void **state)
{
    loop_fixture_t *f = with_redis(state);
    sg_cache_init(0, ""); /* no L1: the queue holds the only other references */
    sg_blob_t *blob = one_hit_blob("{\"id\":\"3\",\"contents\":\"queued\"}");
    sg_cache_writer_t *w = f->writer = sg_cache_writer_create(f->queue, f->redis, 16, 1 << 20);
    uint64_t dropped = queue_dropped();
    int64_t queued = queued_gauge();
    sg_cache_store(w, "q-0", 3, blob, 60);
    sg_cache_store(w, "q-1", 3, blob, 60);
    sg_cache_store(w, "q-2", 3, blob, 60);
    assert_int_equal(atomic_load(&blob->refs), 4);
    sg_cache_writer_destroy(w);
    f->writer = NULL;
    assert_int_equal(atomic_load(&blob->refs), 1);
    assert_int_equal(queue_dropped() - dropped, 3);
    assert_int_equal(queued_gauge(), queued);
    run_until(f, NULL, 50); /* nothing is sent after it */
    loop_sync(f);
    long long n;
    char rkey[128];
    test_redis_cache_key(rkey, "", "q-0", 3);
    assert_int_equal(test_redis_call(f->server.port, 2, (const char *[]){"EXISTS", rkey}, &n, NULL, NULL), ':');
    assert_int_equal(n, 0);
    sg_blob_release(blob);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_params),
        cmocka_unit_test(test_lookup_makes_the_keys),
        cmocka_unit_test(test_cache_value_docs_bounded),
        cmocka_unit_test(test_cache_value_content),
        cmocka_unit_test_setup_teardown(test_store_reaches_redis, loop_setup, loop_teardown),
        cmocka_unit_test_setup_teardown(test_write_queue_full_drops, loop_setup, loop_teardown),
        cmocka_unit_test_setup_teardown(test_writer_destroy_frees_queued, loop_setup, loop_teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
