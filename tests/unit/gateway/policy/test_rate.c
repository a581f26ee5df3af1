/*
 * Unit tests: the client's rate limit as one step of a request (gateway/policy/rate.c). The
 * local GCRA is driven by the request's arrival time (a fake clock); waits run on the loop's
 * timer heap in real time, checked with lower bounds only. The shared limit of global clients
 * is decided by a real redis-server on a free port (skipped without one) or, without a
 * connection, by this replica's fallback bucket at once. Every decision reaches exactly one of
 * admitted/refused, never one the request's `gone` says it no longer wants, and every hold
 * around a Redis round trip is released.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../redis_server.h"
#include "rate.h"
#include "ratelimit_global.h"
#include "redis.h"

#define T0 1000000000000ull /* the fake clock's start (us) */
#define SECOND 1000000ull

/* What the request saw of the step. */
typedef struct {
    int admitted, waited, refused, status, gone, holds, releases;
    char type[32], msg[256];
    uint32_t retry_after_s;
} seen_t;

static void on_admitted(void *ctx, int waited)
{
    seen_t *s = ctx;
    ++s->admitted;
    s->waited = waited;
}

static void on_refused(void *ctx, int status, const char *type, const char *msg, uint32_t retry_after_s)
{
    seen_t *s = ctx;
    ++s->refused;
    s->status = status;
    snprintf(s->type, sizeof(s->type), "%s", type);
    snprintf(s->msg, sizeof(s->msg), "%s", msg);
    s->retry_after_s = retry_after_s;
}

static int is_gone(void *ctx)
{
    return ((seen_t *)ctx)->gone;
}

static void on_hold(void *ctx)
{
    ++((seen_t *)ctx)->holds;
}

static void on_release(void *ctx)
{
    seen_t *s = ctx;
    ++s->releases;
    assert_true(s->releases <= s->holds);
}

static const sg_rate_next_t next = {on_admitted, on_refused, is_gone, on_hold, on_release};

/* ---- the fixture: one loop (timers, maybe Redis), a client table, clients made per test ---- */

static sg_loop_t loop;
static sg_config_t cfg;
static sg_clients_t *table;
static test_redis_t redis_server;
static sg_redis_conf_t redis_conf;
static sg_redis_t *redis;
static sg_counter_t dummy_c, m_rate_limited, m_queued;
static sg_hist_t m_wait;

typedef struct {
    sg_client_t c;
    sg_client_state_t st;
    sg_client_conf_t conf;
} client_t;

static void make_client(client_t *cl, const char *id, sg_client_conf_t conf)
{
    memset(cl, 0, sizeof(*cl));
    cl->conf = conf;
    cl->c.id = (char *)id;
    cl->c.conf = &cl->conf;
    cl->c.st = &cl->st;
    atomic_init(&cl->c.refs, 1);
    cl->c.m_requests = cl->c.m_queries = cl->c.m_shed = cl->c.m_timeouts = &dummy_c;
    cl->c.m_rate_limited = &m_rate_limited;
    cl->c.m_queued = &m_queued;
    cl->c.m_wait = &m_wait;
    memset(&m_rate_limited, 0, sizeof(m_rate_limited));
    memset(&m_queued, 0, sizeof(m_queued));
    memset(&m_wait, 0, sizeof(m_wait));
}

/* One round of the loop: Redis replies and due timers (at most `ms` of waiting). */
static void run_once(int32_t ms)
{
    h2o_evloop_run(loop.loop, sg_timers_next_wait(&loop.timers, ms));
    sg_timers_run(&loop.timers);
}

/* Runs the loop until `*flag` is set or `ms` passed. */
static void run_until(const int *flag, uint64_t ms)
{
    uint64_t end = sg_now_ms() + ms;
    while (!*flag && sg_now_ms() < end)
        run_once(20);
}

static int setup(void **state)
{
    (void)state;
    cfg.clients.max_tracked = 16;
    cfg.clients.global_replicas = 2;
    table = sg_clients_create(&cfg, NULL);
    memset(&loop, 0, sizeof(loop));
    loop.loop = h2o_evloop_create();
    if (test_redis_available() && test_redis_start(&redis_server, 0) == 0) {
        redis_conf.enabled = 1;
        redis_conf.node.host = sg_strdup("127.0.0.1");
        redis_conf.node.port = redis_server.port;
        redis_conf.timeout_ms = 2000;
        redis = sg_redis_create(loop.loop, &loop.timers, 0, &redis_conf);
        uint64_t end = sg_now_ms() + 5000;
        while (!sg_redis_is_up(redis) && sg_now_ms() < end)
            run_once(20);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sg_redis_destroy(redis);
    sg_timers_dispose(&loop.timers);
    h2o_evloop_destroy(loop.loop);
    test_redis_stop(&redis_server);
    free(redis_conf.node.host);
    sg_clients_destroy(table);
    sg_metrics_reset();
    return 0;
}

/* Charges `n` queries of client `cl` for a request that arrived at `start_us` and ends at `deadline_us`. */
static void charge(sg_rate_t *r, seen_t *s, client_t *cl, uint32_t n, uint64_t start_us, uint64_t deadline_us)
{
    memset(r, 0, sizeof(*r));
    sg_rate_charge(r, &loop, table, &cl->c, n, start_us, deadline_us, &next, s);
}

/* ---- this replica's limit ---- */

/* Reject mode: the burst goes on at once (within the call), the next query is refused 429 with
 * the client's message and the seconds until it could start; the clock moving on frees a slot. */
static void test_reject_mode(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "lim", (sg_client_conf_t){.rate = 1, .burst = 2, .mode = SG_RL_REJECT, .weight = 1});
    sg_rate_t r;
    seen_t s[4] = {{0}};
    for (int i = 0; i < 2; ++i) {
        charge(&r, &s[i], &cl, 1, T0, T0 + 10 * SECOND);
        assert_int_equal(s[i].admitted, 1);
        assert_int_equal(s[i].waited, 0);
        assert_int_equal(s[i].refused, 0);
    }
    charge(&r, &s[2], &cl, 1, T0, T0 + 10 * SECOND);
    assert_int_equal(s[2].admitted, 0);
    assert_int_equal(s[2].refused, 1);
    assert_int_equal(s[2].status, 429);
    assert_string_equal(s[2].type, "rate_limited");
    assert_string_equal(s[2].msg, "rate limit of client lim exceeded (1 queries/s, burst 2); retry in 1 s");
    assert_int_equal(s[2].retry_after_s, 1);
    assert_int_equal(atomic_load(&m_rate_limited.v), 1);
    assert_int_equal(atomic_load(&m_queued.v), 0);
    charge(&r, &s[3], &cl, 1, T0 + SECOND, T0 + 10 * SECOND); /* a second later: one slot again */
    assert_int_equal(s[3].admitted, 1);
    for (int i = 0; i < 4; ++i)
        assert_int_equal(s[i].holds + s[i].releases, 0); /* no round trip: nothing held */
}

/* A request is charged for all its queries: a batch larger than the burst goes on when the
 * bucket is full and pays its debt afterwards. */
static void test_batch_is_charged_per_query(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "batch", (sg_client_conf_t){.rate = 1, .burst = 2, .mode = SG_RL_REJECT, .weight = 1});
    sg_rate_t r;
    seen_t a = {0}, b = {0};
    charge(&r, &a, &cl, 3, T0, T0 + 10 * SECOND);
    assert_int_equal(a.admitted, 1);
    charge(&r, &b, &cl, 1, T0, T0 + 10 * SECOND);
    assert_int_equal(b.refused, 1);
    assert_string_equal(b.msg, "rate limit of client batch exceeded (1 queries/s, burst 2); retry in 2 s");
    assert_int_equal(b.retry_after_s, 2);
}

/* A client that retries only 5xx is refused with 503 (clients.*.reject_status); a reject-mode
 * client never waits, whatever its max_wait_ms says. */
static void test_reject_status_and_no_wait(void **state)
{
    (void)state;
    client_t cl;
    make_client(
        &cl, "five",
        (sg_client_conf_t){.rate = 1, .burst = 1, .mode = SG_RL_REJECT, .reject_status = 503, .max_wait_ms = 5000, .weight = 1});
    sg_rate_t r;
    seen_t a = {0}, b = {0};
    charge(&r, &a, &cl, 1, T0, T0 + 10 * SECOND);
    assert_int_equal(a.admitted, 1);
    charge(&r, &b, &cl, 1, T0, T0 + 10 * SECOND);
    assert_int_equal(b.admitted, 0);
    assert_int_equal(b.refused, 1);
    assert_int_equal(b.status, 503);
    assert_string_equal(b.msg, "rate limit of client five exceeded (1 queries/s, burst 1); retry in 1 s");
    assert_false(sg_timer_is_armed(&r.timer));
    assert_int_equal(atomic_load(&m_queued.v), 0);
}

/* rate 0: no limit, and no round trip to Redis even for a global client. */
static void test_unlimited(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "free", (sg_client_conf_t){.rate = 0, .mode = SG_RL_REJECT, .global = 1, .weight = 1});
    sg_rate_t r;
    for (int i = 0; i < 100; ++i) {
        seen_t s = {0};
        charge(&r, &s, &cl, 1000, T0, T0 + SECOND);
        assert_int_equal(s.admitted, 1);
        assert_int_equal(s.waited, 0);
        assert_int_equal(s.holds, 0);
    }
}

/* Queue mode: a query over the limit waits on the loop's timer heap for its slot (counted, its
 * wait observed) and then goes on, with `waited` set -- never before the slot is due. */
static void test_queue_mode_waits(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "queue", (sg_client_conf_t){.rate = 20, .burst = 1, .mode = SG_RL_QUEUE, .max_wait_ms = 5000, .weight = 1});
    sg_rate_t r1, r2;
    seen_t a = {0}, b = {0};
    uint64_t start = sg_now_us();
    charge(&r1, &a, &cl, 1, start, start + 10 * SECOND);
    assert_int_equal(a.admitted, 1);
    assert_int_equal(a.waited, 0);
    charge(&r2, &b, &cl, 1, start, start + 10 * SECOND);
    assert_int_equal(b.admitted + b.refused, 0); /* waiting */
    assert_true(sg_timer_is_armed(&r2.timer));
    assert_int_equal(atomic_load(&m_queued.v), 1);
    assert_int_equal(atomic_load(&m_wait.count), 1);
    assert_int_equal(atomic_load(&m_wait.sum_us), 50000); /* one slot at 20 queries/s */
    run_until(&b.admitted, 5000);
    assert_int_equal(b.admitted, 1);
    assert_int_equal(b.waited, 1);
    assert_int_equal(b.refused, 0);
    assert_true(sg_now_us() - start >= 45000);
    assert_int_equal(atomic_load(&m_rate_limited.v), 0);
}

/* Queue mode: a wait longer than the client allows -- or than is left until the request's
 * deadline -- is refused at once with 503 and both figures. */
static void test_queue_mode_wait_too_long(void **state)
{
    (void)state;
    client_t cl, short_wait;
    make_client(&cl, "q", (sg_client_conf_t){.rate = 10, .burst = 1, .mode = SG_RL_QUEUE, .max_wait_ms = 5000, .weight = 1});
    sg_rate_t r;
    seen_t a = {0}, b = {0};
    charge(&r, &a, &cl, 1, T0, T0 + 20000);
    assert_int_equal(a.admitted, 1);
    charge(&r, &b, &cl, 1, T0, T0 + 20000); /* 100 ms to wait, 20 ms to the deadline */
    assert_int_equal(b.admitted, 0);
    assert_int_equal(b.refused, 1);
    assert_int_equal(b.status, 503);
    assert_string_equal(b.type, "rate_limited");
    assert_string_equal(b.msg, "rate limit of client q: the wait (100 ms) would exceed the allowed 20 ms; retry in 1 s");
    assert_int_equal(b.retry_after_s, 1);
    assert_false(sg_timer_is_armed(&r.timer));
    assert_int_equal(atomic_load(&m_queued.v), 0);

    make_client(&short_wait, "q2", (sg_client_conf_t){.rate = 10, .burst = 1, .mode = SG_RL_QUEUE, .max_wait_ms = 50, .weight = 1});
    seen_t c = {0}, d = {0};
    charge(&r, &c, &short_wait, 1, T0, T0 + 60 * SECOND);
    charge(&r, &d, &short_wait, 1, T0, T0 + 60 * SECOND);
    assert_int_equal(c.admitted, 1);
    assert_int_equal(d.refused, 1);
    assert_string_equal(d.msg, "rate limit of client q2: the wait (100 ms) would exceed the allowed 50 ms; retry in 1 s");
}

/* The request was answered while it waited: sg_rate_stop() ends the wait without a decision.
 * Stopping a step that never waited (or never ran) does nothing. */
static void test_stop(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "stopped", (sg_client_conf_t){.rate = 20, .burst = 1, .mode = SG_RL_QUEUE, .max_wait_ms = 5000, .weight = 1});
    sg_rate_t never;
    memset(&never, 0, sizeof(never));
    sg_rate_stop(&never);
    sg_rate_t r1, r2;
    seen_t a = {0}, b = {0};
    uint64_t start = sg_now_us();
    charge(&r1, &a, &cl, 1, start, start + 10 * SECOND);
    sg_rate_stop(&r1); /* admitted at once: nothing to stop */
    charge(&r2, &b, &cl, 1, start, start + 10 * SECOND);
    assert_true(sg_timer_is_armed(&r2.timer));
    sg_rate_stop(&r2);
    assert_false(sg_timer_is_armed(&r2.timer));
    uint64_t end = sg_now_ms() + 200; /* well past the 50 ms the wait was */
    while (sg_now_ms() < end)
        run_once(20);
    assert_int_equal(b.admitted + b.refused, 0);
    assert_int_equal(a.admitted, 1);
}

/* ---- the shared limit of global clients ---- */

/* The loop's Redis connection from now on: 0 when there is none (no redis-server, or it did not start). */
static int use_redis(void)
{
    if (redis == NULL || !sg_redis_is_up(redis))
        return 0;
    loop.redis = redis;
    return 1;
}

/* No Redis connection: this replica's fallback bucket (rate and burst / clients.global_replicas)
 * decides within the call, and the hold taken for the round trip is given back at once. */
static void test_global_without_redis(void **state)
{
    (void)state;
    client_t cl;
    make_client(&cl, "g", (sg_client_conf_t){.rate = 0.01, .burst = 4, .mode = SG_RL_REJECT, .global = 1, .weight = 1});
    sg_redis_t *saved = loop.redis;
    loop.redis = NULL;
    sg_rate_t r;
    seen_t s[3] = {{0}};
    for (int i = 0; i < 3; ++i) {
        charge(&r, &s[i], &cl, 1, sg_now_us(), sg_now_us() + 10 * SECOND);
        assert_int_equal(s[i].holds, 1);
        assert_int_equal(s[i].releases, 1);
    }
    assert_int_equal(s[0].admitted, 1); /* 4 / 2 replicas: two at once */
    assert_int_equal(s[1].admitted, 1);
    assert_int_equal(s[2].admitted, 0);
    assert_int_equal(s[2].refused, 1);
    assert_int_equal(s[2].status, 429);
    /* the fallback runs on the real clock: the 200 s its next slot is away, less what passed since */
    assert_in_range(s[2].retry_after_s, 190, 200);
    char want[200];
    snprintf(want, sizeof(want), "rate limit of client g exceeded (0.01 queries/s, burst 4); retry in %u s", s[2].retry_after_s);
    assert_string_equal(s[2].msg, want);
    assert_int_equal(cl.st.tat_us, 0); /* the local limit is not the one charged */
    loop.redis = saved;
}

/* Redis decides: nothing within the call; the decision comes on the loop, after which the hold
 * is released. The shared burst is the client's whole burst. */
static void test_global_in_redis(void **state)
{
    (void)state;
    if (!use_redis())
        skip();
    client_t cl;
    make_client(&cl, "shared", (sg_client_conf_t){.rate = 0.1, .burst = 2, .mode = SG_RL_REJECT, .global = 1, .weight = 1});
    sg_rate_t r[3];
    seen_t s[3] = {{0}};
    for (int i = 0; i < 3; ++i) {
        charge(&r[i], &s[i], &cl, 1, sg_now_us(), sg_now_us() + 10 * SECOND);
        assert_int_equal(s[i].admitted + s[i].refused, 0); /* Redis has not answered yet */
        assert_int_equal(s[i].holds, 1);
        assert_int_equal(s[i].releases, 0);
        run_until(&s[i].releases, 5000);
        assert_int_equal(s[i].releases, 1);
    }
    assert_int_equal(s[0].admitted, 1);
    assert_int_equal(s[0].waited, 0);
    assert_int_equal(s[1].admitted, 1);
    assert_int_equal(s[2].admitted, 0);
    assert_int_equal(s[2].refused, 1);
    assert_int_equal(s[2].status, 429);
    assert_in_range(s[2].retry_after_s, 1, 10); /* Redis' clock: the next slot is at most 10 s away */
    char want[200];
    snprintf(want, sizeof(want), "rate limit of client shared exceeded (0.1 queries/s, burst 2); retry in %u s",
             s[2].retry_after_s);
    assert_string_equal(s[2].msg, want);
    assert_int_equal(cl.st.tat_us, 0);
    loop.redis = NULL;
}

/* A request answered (deadline, client gone) while Redis decided: the decision is dropped, the
 * hold released all the same. A queue-mode wait Redis reserved runs on the loop's timers. */
static void test_global_gone_and_wait(void **state)
{
    (void)state;
    if (!use_redis())
        skip();
    client_t cl, q;
    make_client(&cl, "left", (sg_client_conf_t){.rate = 1, .burst = 2, .mode = SG_RL_REJECT, .global = 1, .weight = 1});
    sg_rate_t r;
    seen_t s = {0};
    charge(&r, &s, &cl, 1, sg_now_us(), sg_now_us() + 10 * SECOND);
    s.gone = 1;
    run_until(&s.releases, 5000);
    assert_int_equal(s.releases, 1);
    assert_int_equal(s.admitted + s.refused, 0);

    make_client(&q, "waits",
                (sg_client_conf_t){.rate = 0.5, .burst = 1, .mode = SG_RL_QUEUE, .max_wait_ms = 5000, .global = 1, .weight = 1});
    sg_rate_t r1, r2;
    seen_t a = {0}, b = {0};
    charge(&r1, &a, &q, 1, sg_now_us(), sg_now_us() + 10 * SECOND);
    run_until(&a.admitted, 5000);
    assert_int_equal(a.admitted, 1);
    assert_int_equal(a.waited, 0);
    charge(&r2, &b, &q, 1, sg_now_us(), sg_now_us() + 10 * SECOND);
    run_until(&b.releases, 5000);
    assert_int_equal(b.releases, 1);
    assert_int_equal(b.admitted, 0); /* its slot is up to 2 s away */
    run_until(&b.admitted, 8000);
    assert_int_equal(b.admitted, 1);
    assert_int_equal(b.waited, 1); /* after a wait on the timer heap */
    assert_int_equal(b.refused, 0);
    assert_int_equal(atomic_load(&m_queued.v), 1);
    loop.redis = NULL;
}

int main(void)
{
    sg_ratelimit_global_init("t:");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reject_mode),
        cmocka_unit_test(test_batch_is_charged_per_query),
        cmocka_unit_test(test_reject_status_and_no_wait),
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_queue_mode_waits),
        cmocka_unit_test(test_queue_mode_wait_too_long),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_global_without_redis),
        cmocka_unit_test(test_global_in_redis),
        cmocka_unit_test(test_global_gone_and_wait),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
