/*
 * Unit tests: a loop's timer heap (lib/timer.c): due timers fire in deadline order, each disarmed
 * before its callback (which may re-arm it); stopped and re-armed timers; the wait the loop passes
 * to h2o_evloop_run(). The clock is the real one: "due" timers are armed in the past, the others
 * far in the future.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include "common.h"
#include "timer.h"

#define N 1000

typedef struct {
    sg_timer_t t; /* first: the callback finds the record from the timer */
    int id, fired, rearm;
} rec_t;

static sg_timers_t *g_q;
static uint64_t fired_at[N];
static int n_fired;

static void on_fire(sg_timer_t *t)
{
    rec_t *r = (rec_t *)t;
    assert_false(sg_timer_is_armed(t)); /* disarmed before the callback */
    fired_at[n_fired++] = t->at_ms;
    r->fired += 1;
    if (r->rearm) { /* into the future: not fired again by this run */
        r->rearm = 0;
        sg_timer_start(g_q, t, sg_now_ms() + 3600000, on_fire);
    }
}

static void test_order_and_stop(void **state)
{
    (void)state;
    sg_timers_t q = {0};
    g_q = &q;
    n_fired = 0;
    static rec_t recs[N];
    uint64_t now = sg_now_ms();
    srand(7);
    for (int i = 0; i < N; ++i) {
        recs[i] = (rec_t){.id = i};
        sg_timer_start(&q, &recs[i].t, now - 1 - (uint64_t)(rand() % 100000), on_fire); /* all due */
        assert_true(sg_timer_is_armed(&recs[i].t));
    }
    for (int i = 0; i < N; i += 3)
        sg_timer_stop(&q, &recs[i].t); /* a third never fires */
    sg_timer_stop(&q, &recs[0].t);     /* stopping twice is a no-op */
    for (int i = 1; i < N; i += 3)     /* re-arming moves a timer: it fires once, at its new time */
        sg_timer_start(&q, &recs[i].t, now - 1 - (uint64_t)(rand() % 100000), on_fire);
    recs[2].rearm = 1;
    assert_int_equal(sg_timers_next_wait(&q, 1000), 0);
    sg_timers_run(&q);
    int expect = 0;
    for (int i = 0; i < N; ++i) {
        assert_int_equal(recs[i].fired, i % 3 == 0 ? 0 : 1);
        expect += i % 3 != 0;
    }
    assert_int_equal(n_fired, expect);
    for (int i = 1; i < n_fired; ++i)
        assert_true(fired_at[i - 1] <= fired_at[i]); /* earliest deadline first */
    /* what is left: the one that re-armed itself an hour ahead */
    assert_int_equal(q.len, 1);
    assert_true(sg_timer_is_armed(&recs[2].t));
    sg_timers_run(&q);
    assert_int_equal(recs[2].fired, 1);
    sg_timer_stop(&q, &recs[2].t);
    assert_int_equal(q.len, 0);
    sg_timers_dispose(&q);
}

static void test_next_wait(void **state)
{
    (void)state;
    sg_timers_t q = {0};
    rec_t a = {0}, b = {0};
    assert_int_equal(sg_timers_next_wait(&q, 250), 250); /* nothing armed: the longest wait */
    uint64_t now = sg_now_ms();
    sg_timer_start(&q, &a.t, now + 60000, on_fire);
    assert_int_equal(sg_timers_next_wait(&q, 1000), 1000); /* capped */
    int32_t w = sg_timers_next_wait(&q, 120000);
    assert_true(w > 50000 && w <= 60000);
    sg_timer_start(&q, &b.t, now + 5000, on_fire); /* an earlier one decides */
    w = sg_timers_next_wait(&q, 120000);
    assert_true(w > 0 && w <= 5000);
    sg_timer_stop(&q, &b.t);
    w = sg_timers_next_wait(&q, 120000);
    assert_true(w > 5000 && w <= 60000);
    n_fired = 0;
    sg_timers_run(&q); /* nothing is due */
    assert_int_equal(n_fired, 0);
    assert_true(sg_timer_is_armed(&a.t));
    sg_timer_stop(&q, &a.t);
    sg_timers_dispose(&q);
    assert_null(q.heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_order_and_stop), cmocka_unit_test(test_next_wait)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
