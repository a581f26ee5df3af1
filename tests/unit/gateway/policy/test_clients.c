/* Unit tests: clients (gateway/policy/clients.c): the GCRA limiter with a fake clock, the fallback
 * bucket of global clients, identity across reloads and the LRU of anonymous clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include "clients.h"

/* Offer `offered` queries/s in batches of `batch` for `seconds`; count what is admitted at once. */
static double admitted_rate(double rate, double burst, double offered, uint64_t batch, double seconds)
{
    uint64_t tat = 0, wait, admitted = 0;
    uint64_t t0 = 1000000000ull, step = (uint64_t)(1e6 * (double)batch / offered);
    uint64_t end = t0 + (uint64_t)(seconds * 1e6);
    for (uint64_t now = t0; now < end; now += step)
        if (sg_gcra(&tat, rate, burst, batch, now, 0, &wait) == SG_RL_ALLOW)
            admitted += batch;
    return (double)admitted / seconds;
}

static void test_accuracy(void **state)
{
    (void)state;
    /* offered 3x the rate for 10 s: admitted within 5% of the rate (the burst adds at most burst/10 s) */
    double r = admitted_rate(100, 10, 300, 1, 10);
    assert_true(fabs(r - 100) / 100 < 0.05);
    r = admitted_rate(1000, 50, 5000, 8, 10);
    assert_true(fabs(r - 1000) / 1000 < 0.05);
    /* under the rate everything passes */
    r = admitted_rate(100, 10, 50, 1, 10);
    assert_true(fabs(r - 50) / 50 < 0.02);
}

static void test_burst(void **state)
{
    (void)state;
    uint64_t tat = 0, wait;
    uint64_t now = 5000000;
    int ok = 0;
    for (int i = 0; i < 30; ++i)
        ok += sg_gcra(&tat, 10, 20, 1, now, 0, &wait) == SG_RL_ALLOW;
    assert_int_equal(ok, 20); /* a full bucket admits exactly `burst` queries at once */
    assert_int_equal(sg_gcra(&tat, 10, 20, 1, now, 0, &wait), SG_RL_DENY);
    assert_true(wait > 0 && wait <= 100000); /* the next query fits after one emission interval (100 ms) */
    assert_int_equal(sg_gcra(&tat, 10, 20, 1, now + wait, 0, &wait), SG_RL_ALLOW);
}

static void test_large_batch_pays_debt(void **state)
{
    (void)state;
    uint64_t tat = 0, wait;
    uint64_t now = 10000000;
    /* a 512-query batch on a 100 q/s, burst-10 limit: admitted when the bucket is full... */
    assert_int_equal(sg_gcra(&tat, 100, 10, 512, now, 0, &wait), SG_RL_ALLOW);
    /* ...and the next request waits for the debt: 5.12 s minus the 0.09 s burst tolerance */
    assert_int_equal(sg_gcra(&tat, 100, 10, 1, now, 0, &wait), SG_RL_DENY);
    assert_int_equal(wait, 5030000);
}

static void test_queue_mode_reserves(void **state)
{
    (void)state;
    uint64_t tat = 0, wait;
    uint64_t now = 1000000;
    assert_int_equal(sg_gcra(&tat, 10, 2, 1, now, 0, &wait), SG_RL_ALLOW);
    assert_int_equal(sg_gcra(&tat, 10, 2, 1, now, 0, &wait), SG_RL_ALLOW);
    /* queue mode: within max_wait the slot is reserved and the caller told how long to sleep */
    assert_int_equal(sg_gcra(&tat, 10, 2, 1, now, 500000, &wait), SG_RL_WAIT);
    assert_int_equal(wait, 100000);
    assert_int_equal(sg_gcra(&tat, 10, 2, 1, now, 500000, &wait), SG_RL_WAIT);
    assert_int_equal(wait, 200000);
    /* beyond max_wait: refused, nothing reserved */
    uint64_t before = tat;
    assert_int_equal(sg_gcra(&tat, 10, 2, 1, now, 150000, &wait), SG_RL_DENY);
    assert_int_equal(tat, before);
    /* a queued stream is admitted at exactly the rate: 100 requests at t=now are spread over 10 s */
    uint64_t tat2 = 0, last = 0;
    for (int i = 0; i < 100; ++i) {
        int r = sg_gcra(&tat2, 10, 1, 1, now, 60000000, &wait);
        assert_true(r == SG_RL_ALLOW || r == SG_RL_WAIT);
        last = wait;
    }
    assert_true(last >= 9700000 && last <= 9900000);
}

static void test_unlimited_and_clock_skew(void **state)
{
    (void)state;
    uint64_t tat = 0, wait;
    for (int i = 0; i < 1000; ++i)
        assert_int_equal(sg_gcra(&tat, 0, 0, 1000, 5, 0, &wait), SG_RL_ALLOW);
    /* an earlier `now` than the last one (threads racing on one client) never underflows */
    tat = 0;
    assert_int_equal(sg_gcra(&tat, 1, 2, 1, 100, 0, &wait), SG_RL_ALLOW);
    assert_int_equal(sg_gcra(&tat, 1, 2, 1, 50, 0, &wait), SG_RL_DENY);
    assert_int_equal(wait, 50);
    assert_int_equal(sg_gcra(&tat, 1, 2, 1, 0, 0, &wait), SG_RL_DENY);
    assert_int_equal(wait, 100);
}

/* The bucket that stands in for a global client's shared limit while Redis cannot decide: its own
 * state (the client's tat is untouched), at the client's rate and burst / the replicas, the burst
 * at least 1. */
static void test_global_fallback_share(void **state)
{
    (void)state;
    sg_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.clients.max_tracked = 16;
    sg_clients_t *t = sg_clients_create(&cfg, NULL);
    sg_client_conf_t cc = {.rate = 40, .burst = 20, .global = 1, .weight = 1};
    sg_client_t c;
    sg_client_state_t cst, dst;
    memset(&c, 0, sizeof(c));
    memset(&cst, 0, sizeof(cst));
    memset(&dst, 0, sizeof(dst));
    c.conf = &cc;
    c.st = &cst;
    uint64_t wait, now = 1000000000ull, admitted = 0;
    for (int i = 0; i < 11; ++i)
        admitted += sg_clients_ratelimit_fallback(t, &c, 2, 1, now, 0, &wait) == SG_RL_ALLOW;
    assert_int_equal(admitted, 10); /* burst 20 / 2 replicas */
    assert_int_equal(cst.tat_us, 0);
    admitted = 0;
    for (uint64_t at = now + 1000000; at < now + 11000000; at += 5000) /* 200 offered per second for 10 s */
        admitted += sg_clients_ratelimit_fallback(t, &c, 2, 1, at, 0, &wait) == SG_RL_ALLOW;
    assert_true(admitted >= 195 && admitted <= 225); /* rate 40 / 2 replicas, plus what refilled in the first second */
    /* more replicas than the burst: one query at once, never none */
    sg_client_t d;
    memset(&d, 0, sizeof(d));
    d.conf = &cc;
    d.st = &dst;
    assert_int_equal(sg_clients_ratelimit_fallback(t, &d, 100, 1, now, 0, &wait), SG_RL_ALLOW);
    assert_int_equal(sg_clients_ratelimit_fallback(t, &d, 100, 1, now, 0, &wait), SG_RL_DENY);
    assert_int_equal(wait, 2500000); /* 100 / 40 s */
    /* queue mode reserves in the fallback bucket too */
    assert_int_equal(sg_clients_ratelimit_fallback(t, &d, 100, 1, now, 5000000, &wait), SG_RL_WAIT);
    sg_clients_destroy(t);
}

/* A configuration reload makes a new client table (gen.h): a client of the same id shares the rate
 * limit of the old table's, a removed key is refused, the anonymous clients the old table tracked
 * are tracked by the new one (most recent first, within its bound), and the state outlives either
 * table only as long as one of them has the client. */
static void test_reload_keeps_state(void **state)
{
    (void)state;
    setenv("SG_TEST_RL_KEY_A", "key-a", 1);
    setenv("SG_TEST_RL_KEY_B", "key-b", 1);
    static const char v1[] = "{\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_RL_KEY_A\",\"rate\":1,\"mode\":"
                             "\"reject\"},{\"id\":\"b\",\"key_env\":\"SG_TEST_RL_KEY_B\"}],\"max_tracked\":16},"
                             "\"backends\":[{\"name\":\"r\",\"plugin\":\"example\"}]}";
    static const char v2[] = "{\"clients\":{\"keys\":[{\"id\":\"a\",\"key_env\":\"SG_TEST_RL_KEY_A\",\"rate\":2,\"mode\":"
                             "\"reject\"}],\"max_tracked\":16},\"backends\":[{\"name\":\"r\",\"plugin\":\"example\"}]}";
    sg_config_t c1, c2;
    char err[256];
    assert_int_equal(sg_config_parse(&c1, v1, strlen(v1), ".", err, sizeof(err)), 0);
    assert_int_equal(sg_config_parse(&c2, v2, strlen(v2), ".", err, sizeof(err)), 0);
    sg_clients_t *t1 = sg_clients_create(&c1, NULL);
    const char *why = NULL;
    sg_client_t *a1 = sg_clients_identify(t1, "key-a", 5, NULL, 0, NULL, &why);
    assert_non_null(a1);
    uint64_t wait, now = 1000000000ull;
    assert_int_equal(sg_clients_ratelimit(t1, a1, 1, now, 0, &wait), SG_RL_ALLOW);
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    sg_client_t *anon1 = sg_clients_identify(t1, NULL, 0, NULL, 0, (struct sockaddr *)&peer, &why);
    assert_non_null(anon1);
    sg_clients_t *t2 = sg_clients_create(&c2, t1); /* the reload */
    sg_client_t *a2 = sg_clients_identify(t2, "key-a", 5, NULL, 0, NULL, &why);
    assert_non_null(a2);
    assert_ptr_not_equal(a2, a1);
    assert_ptr_equal(a2->st, a1->st);                                             /* one rate limit across the two configs */
    assert_true(a2->conf->rate == 2.0);                                           /* the new config's quota */
    assert_int_equal(sg_clients_ratelimit(t2, a2, 1, now, 0, &wait), SG_RL_DENY); /* its token was spent before */
    assert_int_equal(wait, 500000);                                               /* at the new rate */
    assert_null(sg_clients_identify(t2, "key-b", 5, NULL, 0, NULL, &why));        /* removed */
    assert_string_equal(why, "invalid API key");
    assert_int_equal(sg_clients_tracked(t2), 1); /* the anonymous client came along */
    sg_client_t *anon2 = sg_clients_identify(t2, NULL, 0, NULL, 0, (struct sockaddr *)&peer, &why);
    assert_ptr_equal(anon2->st, anon1->st);
    sg_clients_release(a1);
    sg_clients_release(anon1);
    sg_clients_destroy(t1); /* the old generation goes; the states stay with the new table */
    assert_int_equal(sg_clients_ratelimit(t2, a2, 1, now + 500000, 0, &wait), SG_RL_ALLOW);
    sg_clients_release(a2);
    sg_clients_release(anon2);
    sg_clients_destroy(t2);
    sg_config_free(&c1);
    sg_config_free(&c2);
}

/* Identifies the anonymous client `id` (X-Client-Id) and spends its one token at `now`: ALLOW for
 * a client the table did not track (a fresh bucket), DENY for one it still tracked. */
static int seen(sg_clients_t *t, const char *id, uint64_t now)
{
    const char *why = NULL;
    uint64_t wait;
    sg_client_t *c = sg_clients_identify(t, NULL, 0, id, strlen(id), NULL, &why);
    assert_non_null(c);
    int rl = sg_clients_ratelimit(t, c, 1, now, 0, &wait);
    sg_clients_release(c);
    return rl;
}

/* The table of anonymous clients is an LRU bounded by clients.max_tracked: being seen makes a
 * client the most recent, and a new one evicts the least recently seen (whose limit then starts
 * afresh); a client in use is never evicted. */
static void test_anonymous_lru(void **state)
{
    (void)state;
    sg_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.clients.max_tracked = 3;
    cfg.clients.trust_client_id_header = 1;
    cfg.clients.defaults = (sg_client_conf_t){.rate = 0.001, .burst = 1, .mode = SG_RL_REJECT, .weight = 1};
    sg_clients_t *t = sg_clients_create(&cfg, NULL);
    uint64_t now = 1000000000ull;
    assert_int_equal(seen(t, "p1", now), SG_RL_ALLOW);
    assert_int_equal(seen(t, "p2", now), SG_RL_ALLOW);
    assert_int_equal(seen(t, "p3", now), SG_RL_ALLOW);
    assert_int_equal(seen(t, "p1", now), SG_RL_DENY);  /* tracked: its token is spent; now the most recent */
    assert_int_equal(seen(t, "p4", now), SG_RL_ALLOW); /* evicts p2, the least recently seen */
    assert_int_equal(sg_clients_tracked(t), 3);
    /* order now p4 p1 p3: seeing p3 and p1 keeps them (and makes p4 the coldest) */
    assert_int_equal(seen(t, "p3", now), SG_RL_DENY);
    assert_int_equal(seen(t, "p1", now), SG_RL_DENY);
    assert_int_equal(seen(t, "p2", now), SG_RL_ALLOW); /* forgotten: a fresh bucket; evicts p4 */
    assert_int_equal(seen(t, "p1", now), SG_RL_DENY);
    assert_int_equal(seen(t, "p3", now), SG_RL_DENY);
    assert_int_equal(seen(t, "p4", now), SG_RL_ALLOW); /* was evicted; evicts p2 */
    /* a client held by a request is skipped: the next coldest goes instead */
    const char *why = NULL;
    sg_client_t *held = sg_clients_identify(t, NULL, 0, "p1", 2, NULL, &why); /* order p1 p4 p3 */
    assert_int_equal(seen(t, "p3", now), SG_RL_DENY);                         /* order p3 p1 p4 */
    assert_int_equal(seen(t, "p4", now), SG_RL_DENY);                         /* order p4 p3 p1 */
    assert_int_equal(seen(t, "p5", now), SG_RL_ALLOW);                        /* p1 is held and the coldest: p3 goes */
    assert_int_equal(sg_clients_tracked(t), 3);
    assert_int_equal(seen(t, "p4", now), SG_RL_DENY);
    assert_int_equal(sg_clients_ratelimit(t, held, 1, now, 0, &(uint64_t){0}), SG_RL_DENY); /* still p1's spent bucket */
    sg_clients_release(held);
    sg_clients_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accuracy),
                                       cmocka_unit_test(test_burst),
                                       cmocka_unit_test(test_large_batch_pays_debt),
                                       cmocka_unit_test(test_queue_mode_reserves),
                                       cmocka_unit_test(test_unlimited_and_clock_skew),
                                       cmocka_unit_test(test_global_fallback_share),
                                       cmocka_unit_test(test_reload_keeps_state),
                                       cmocka_unit_test(test_anonymous_lru)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
