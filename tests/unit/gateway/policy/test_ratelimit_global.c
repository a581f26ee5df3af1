/*
 * Unit tests: the cross-replica rate limit (gateway/policy/ratelimit_global.c). Against a real
 * redis-server on a free port: the Lua GCRA admits a global client's burst, then refuses with the
 * wait (or reserves the slot when the client may wait), per client id, under the configured key
 * prefix. Without Redis, and once Redis is gone, this replica's fallback bucket (rate and burst /
 * clients.global_replicas) decides at once, counted, and the fallback gauge says so until Redis
 * decides again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "../../redis_server.h"
#include "common.h"
#include "metrics.h"
#include "ratelimit_global.h"

typedef struct {
    h2o_evloop_t *loop;
    sg_timers_t timers;
    sg_redis_conf_t conf;
    sg_redis_t *r;
    test_redis_t server;
    sg_config_t cfg;
    sg_clients_t *clients;
} fixture_t;

typedef struct {
    int done, decision;
    uint64_t wait_us;
} decision_t;

static void on_decision(void *ctx, int decision, uint64_t wait_us)
{
    decision_t *d = ctx;
    d->done += 1;
    d->decision = decision;
    d->wait_us = wait_us;
}

static void on_reply(void *arg, redisReply *reply)
{
    long long *v = arg;
    *v = reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
}

static void run_until(fixture_t *f, const int *flag, uint64_t ms)
{
    uint64_t end = sg_now_ms() + ms;
    while (!*flag && sg_now_ms() < end) {
        h2o_evloop_run(f->loop, sg_timers_next_wait(&f->timers, 20));
        sg_timers_run(&f->timers);
    }
}

/* The decision for `n` queries of client `c`: Redis' (run to its callback) or the fallback's. */
static int decide(fixture_t *f, sg_client_t *c, uint64_t n, uint64_t max_wait_us, uint64_t *wait_us, int *by_redis)
{
    decision_t d = {0, -1, 0};
    int rl = -1;
    *by_redis = sg_ratelimit_global(f->r, f->clients, c, n, max_wait_us, on_decision, &d, &rl, wait_us);
    if (!*by_redis)
        return rl;
    run_until(f, &d.done, 3000);
    assert_int_equal(d.done, 1);
    *wait_us = d.wait_us;
    return d.decision;
}

static uint64_t counter(const char *name)
{
    return atomic_load(&sg_metrics_counter(name, "", "")->v);
}

static int64_t gauge(const char *name)
{
    return atomic_load(&sg_metrics_gauge(name, "", "")->v);
}

static int setup(void **state)
{
    fixture_t *f = sg_mem_calloc(1, sizeof(*f));
    f->cfg.clients.max_tracked = 16;
    f->cfg.clients.global_replicas = 2;
    f->clients = sg_clients_create(&f->cfg, NULL);
    f->loop = h2o_evloop_create();
    if (test_redis_available() && test_redis_start(&f->server, 0) == 0) {
        f->conf.enabled = 1;
        f->conf.node.host = sg_strdup("127.0.0.1");
        f->conf.node.port = f->server.port;
        f->conf.timeout_ms = 500;
        f->r = sg_redis_create(f->loop, &f->timers, 0, &f->conf);
        uint64_t end = sg_now_ms() + 5000;
        while (!sg_redis_is_up(f->r) && sg_now_ms() < end) {
            h2o_evloop_run(f->loop, sg_timers_next_wait(&f->timers, 20));
            sg_timers_run(&f->timers);
        }
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    sg_redis_destroy(f->r);
    sg_timers_dispose(&f->timers);
    h2o_evloop_destroy(f->loop);
    test_redis_stop(&f->server);
    free(f->conf.node.host);
    sg_clients_destroy(f->clients);
    free(f);
    return 0;
}

/* A global client of rate 1/s and burst 4 (a stack object: the limit only reads it and counts references). */
static void make_client(sg_client_t *c, sg_client_conf_t *cc, sg_client_state_t *st, char *id)
{
    memset(c, 0, sizeof(*c));
    memset(st, 0, sizeof(*st));
    *cc = (sg_client_conf_t){.rate = 1, .burst = 4, .global = 1, .weight = 1};
    c->id = id;
    c->conf = cc;
    c->st = st;
    atomic_init(&c->refs, 1);
}

static void test_shared_limit_in_redis(void **state)
{
    fixture_t *f = *state;
    if (f->r == NULL || !sg_redis_is_up(f->r))
        skip();
    sg_client_t c, d;
    sg_client_conf_t cc, dc;
    sg_client_state_t cs, ds;
    make_client(&c, &cc, &cs, "job-a");
    make_client(&d, &dc, &ds, "job-b");
    uint64_t wait;
    int by_redis;
    for (int i = 0; i < 4; ++i) {
        assert_int_equal(decide(f, &c, 1, 0, &wait, &by_redis), SG_RL_ALLOW); /* the whole burst: 4, not 4 / 2 */
        assert_true(by_redis);
    }
    assert_int_equal(decide(f, &c, 1, 0, &wait, &by_redis), SG_RL_DENY);
    assert_true(by_redis);
    assert_true(wait > 0 && wait <= 1000000);                                  /* the next slot, at 1 query/s */
    assert_int_equal(decide(f, &c, 1, 5000000, &wait, &by_redis), SG_RL_WAIT); /* may wait: reserved */
    assert_true(wait > 0 && wait <= 1000000);
    assert_int_equal(decide(f, &d, 4, 0, &wait, &by_redis), SG_RL_ALLOW); /* another id: its own limit */
    assert_int_equal(cs.tat_us, 0);                                       /* the local state is untouched: Redis holds the limit */
    /* the key is the configured prefix's */
    long long exists = -2;
    size_t lens[2] = {6, strlen("t:rl:job-a")};
    assert_int_equal(sg_redis_command(f->r, on_reply, &exists, 2, (const char *[]){"EXISTS", "t:rl:job-a"}, lens), 0);
    uint64_t end = sg_now_ms() + 3000;
    while (exists == -2 && sg_now_ms() < end) {
        h2o_evloop_run(f->loop, 20);
        sg_timers_run(&f->timers);
    }
    assert_int_equal(exists, 1);
    assert_int_equal(gauge("searchgate_ratelimit_global_fallback_active"), 0);
}

static void test_fallback(void **state)
{
    fixture_t *f = *state;
    sg_client_t c;
    sg_client_conf_t cc;
    sg_client_state_t cs;
    make_client(&c, &cc, &cs, "job-c");
    uint64_t before = counter("searchgate_ratelimit_global_fallback_total"), wait;
    int rl = -1;
    decision_t d = {0, -1, 0};
    /* no Redis connection: this replica's half of the burst (4 / 2 replicas), decided at once */
    for (int i = 0; i < 2; ++i) {
        assert_int_equal(sg_ratelimit_global(NULL, f->clients, &c, 1, 0, on_decision, &d, &rl, &wait), 0);
        assert_int_equal(rl, SG_RL_ALLOW);
    }
    assert_int_equal(sg_ratelimit_global(NULL, f->clients, &c, 1, 0, on_decision, &d, &rl, &wait), 0);
    assert_int_equal(rl, SG_RL_DENY);
    assert_true(wait > 0 && wait <= 2000000); /* at half the rate */
    assert_int_equal(d.done, 0);              /* the callback is never called */
    assert_int_equal(counter("searchgate_ratelimit_global_fallback_total") - before, 3);
    assert_int_equal(gauge("searchgate_ratelimit_global_fallback_active"), 1);
    if (f->r == NULL || !sg_redis_is_up(f->r))
        return;
    /* Redis decides again: the gauge goes back to 0 */
    sg_client_t e;
    sg_client_conf_t ec;
    sg_client_state_t es;
    make_client(&e, &ec, &es, "job-d");
    int by_redis;
    assert_int_equal(decide(f, &e, 1, 0, &wait, &by_redis), SG_RL_ALLOW);
    assert_true(by_redis);
    assert_int_equal(gauge("searchgate_ratelimit_global_fallback_active"), 0);
    /* Redis gone: the fallback decides again, for the client's own fallback state */
    test_redis_stop(&f->server);
    uint64_t end = sg_now_ms() + 3000;
    while (sg_redis_is_up(f->r) && sg_now_ms() < end) {
        h2o_evloop_run(f->loop, 20);
        sg_timers_run(&f->timers);
    }
    before = counter("searchgate_ratelimit_global_fallback_total");
    assert_int_equal(decide(f, &e, 1, 0, &wait, &by_redis), SG_RL_ALLOW);
    assert_false(by_redis);
    assert_int_equal(counter("searchgate_ratelimit_global_fallback_total") - before, 1);
    assert_int_equal(gauge("searchgate_ratelimit_global_fallback_active"), 1);
}

int main(void)
{
    sg_ratelimit_global_init("t:");
    const struct CMUnitTest tests[] = {cmocka_unit_test_setup_teardown(test_shared_limit_in_redis, setup, teardown),
                                       cmocka_unit_test_setup_teardown(test_fallback, setup, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
