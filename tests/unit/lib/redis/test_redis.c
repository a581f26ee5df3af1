/*
 * Unit tests: the Redis client (lib/redis/redis.c) against a real redis-server on a free loopback
 * port, driven by an h2o evloop and a timer heap as a gateway loop drives it: it connects and
 * runs commands (replies, an error reply turned into NULL, fire-and-forget), refuses commands at
 * once while Redis is gone and reconnects when it is back, and turns a frozen Redis into NULL
 * replies after timeout_ms and an open circuit breaker, which the next answered set-up closes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "../../redis_server.h"
#include "common.h"
#include "redis.h"

typedef struct {
    h2o_evloop_t *loop;
    sg_timers_t timers;
    sg_redis_conf_t conf;
    sg_redis_t *r;
    test_redis_t server;
} fixture_t;

typedef struct {
    int done;
    int type; /* REDIS_REPLY_*, or -1 for a NULL reply */
    char str[64];
    long long integer;
} answer_t;

static void on_answer(void *arg, redisReply *reply)
{
    answer_t *a = arg;
    a->done += 1;
    a->type = reply != NULL ? reply->type : -1;
    if (reply != NULL && reply->str != NULL)
        snprintf(a->str, sizeof(a->str), "%.*s", (int)reply->len, reply->str);
    if (reply != NULL)
        a->integer = reply->integer;
}

/* Runs the loop as a gateway loop does until `*flag` is non-zero (or `want_up` matches
 * sg_redis_is_up when flag is NULL), at most `ms`. Returns 1 when it happened. */
static int run_until(fixture_t *f, const int *flag, int want_up, uint64_t ms)
{
    uint64_t end = sg_now_ms() + ms;
    while (sg_now_ms() < end) {
        if (flag != NULL ? *flag != 0 : sg_redis_is_up(f->r) == want_up)
            return 1;
        h2o_evloop_run(f->loop, sg_timers_next_wait(&f->timers, 20));
        sg_timers_run(&f->timers);
    }
    return flag != NULL ? *flag != 0 : sg_redis_is_up(f->r) == want_up;
}

static int cmd(fixture_t *f, answer_t *a, int argc, const char **argv)
{
    size_t lens[8];
    for (int i = 0; i < argc; ++i)
        lens[i] = strlen(argv[i]);
    if (a != NULL)
        memset(a, 0, sizeof(*a));
    return sg_redis_command(f->r, a != NULL ? on_answer : NULL, a, argc, argv, lens);
}

static int setup(void **state)
{
    *state = NULL;
    if (!test_redis_available()) {
        print_message("no redis-server (SG_REDIS_SERVER=%s): skipped\n", SG_REDIS_SERVER);
        return 0;
    }
    fixture_t *f = sg_mem_calloc(1, sizeof(*f));
    if (test_redis_start(&f->server, 0) != 0)
        return -1;
    f->loop = h2o_evloop_create();
    f->conf.enabled = 1;
    f->conf.node.host = sg_strdup("127.0.0.1");
    f->conf.node.port = f->server.port;
    f->conf.timeout_ms = 300;
    f->r = sg_redis_create(f->loop, &f->timers, 0, &f->conf);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (f == NULL)
        return 0;
    sg_redis_destroy(f->r);
    sg_timers_dispose(&f->timers);
    h2o_evloop_destroy(f->loop);
    test_redis_stop(&f->server);
    free(f->conf.node.host);
    free(f);
    return 0;
}

static void test_commands(void **state)
{
    fixture_t *f = *state;
    if (f == NULL)
        skip();
    assert_true(run_until(f, NULL, 1, 5000)); /* connected and set up */
    answer_t a;
    assert_int_equal(cmd(f, &a, 3, (const char *[]){"SET", "sg:k", "v1"}), 0);
    assert_true(run_until(f, &a.done, 0, 2000));
    assert_int_equal(a.done, 1);
    assert_int_equal(a.type, REDIS_REPLY_STATUS);
    assert_string_equal(a.str, "OK");
    assert_int_equal(cmd(f, &a, 2, (const char *[]){"GET", "sg:k"}), 0);
    assert_true(run_until(f, &a.done, 0, 2000));
    assert_int_equal(a.type, REDIS_REPLY_STRING);
    assert_string_equal(a.str, "v1");
    /* an error reply is "no answer" for the caller */
    assert_int_equal(cmd(f, &a, 2, (const char *[]){"INCR", "sg:k"}), 0);
    assert_true(run_until(f, &a.done, 0, 2000));
    assert_int_equal(a.type, -1);
    assert_true(sg_redis_is_up(f->r)); /* and not a reason to drop the connection */
    /* fire-and-forget, then read back */
    assert_int_equal(cmd(f, NULL, 3, (const char *[]){"SET", "sg:k2", "v2"}), 0);
    assert_int_equal(cmd(f, &a, 2, (const char *[]){"GET", "sg:k2"}), 0);
    assert_true(run_until(f, &a.done, 0, 2000));
    assert_string_equal(a.str, "v2");
    assert_int_equal(a.done, 1); /* exactly once */
    assert_false(sg_redis_breaker_open());
    assert_false(sg_redis_refused());
}

static void test_down_and_back(void **state)
{
    fixture_t *f = *state;
    if (f == NULL)
        skip();
    assert_true(run_until(f, NULL, 1, 5000));
    uint16_t port = f->server.port;
    test_redis_stop(&f->server);
    answer_t a;
    /* the loss is seen at once (the socket closes) or by the next command, which gets NULL */
    if (cmd(f, &a, 1, (const char *[]){"PING"}) == 0) {
        assert_true(run_until(f, &a.done, 0, 2000));
        assert_int_equal(a.type, -1);
    }
    assert_true(run_until(f, NULL, 0, 2000));
    memset(&a, 0, sizeof(a));
    assert_int_equal(cmd(f, &a, 1, (const char *[]){"PING"}), -1); /* refused at once, never called back */
    run_until(f, &a.done, 0, 200);
    assert_int_equal(a.done, 0);
    assert_int_equal(test_redis_start(&f->server, port), 0); /* back on the same port */
    assert_true(run_until(f, NULL, 1, 8000));                /* reconnected within the back-off (at most 2 s) */
    assert_int_equal(cmd(f, &a, 1, (const char *[]){"PING"}), 0);
    assert_true(run_until(f, &a.done, 0, 2000));
    assert_string_equal(a.str, "PONG");
}

static void test_frozen_breaker(void **state)
{
    fixture_t *f = *state;
    if (f == NULL)
        skip();
    assert_true(run_until(f, NULL, 1, 5000));
    kill(f->server.pid, SIGSTOP); /* accepts nothing, answers nothing: a stalled Redis */
    answer_t a[3];
    uint64_t t0 = sg_now_ms();
    for (int i = 0; i < 3; ++i)
        assert_int_equal(cmd(f, &a[i], 2, (const char *[]){"GET", "sg:k"}), 0);
    for (int i = 0; i < 3; ++i) {
        assert_true(run_until(f, &a[i].done, 0, 3000));
        assert_int_equal(a[i].type, -1); /* no reply in time */
    }
    assert_true(sg_now_ms() - t0 >= f->conf.timeout_ms);
    assert_true(sg_redis_breaker_open()); /* three in a row: every command now skips Redis */
    assert_false(sg_redis_is_up(f->r));
    answer_t b;
    assert_int_equal(cmd(f, &b, 1, (const char *[]){"PING"}), -1);
    kill(f->server.pid, SIGCONT);
    assert_true(run_until(f, NULL, 1, 10000)); /* a reconnect's set-up was answered */
    assert_false(sg_redis_breaker_open());
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test_setup_teardown(test_commands, setup, teardown),
                                       cmocka_unit_test_setup_teardown(test_down_and_back, setup, teardown),
                                       cmocka_unit_test_setup_teardown(test_frozen_breaker, setup, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
