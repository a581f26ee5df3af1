"""Spend budgets (docs/configuration.md, "Spend budgets") end to end: the real searchgate with
sg_serper.so against the fake serper.dev (fakes/fake_serper.py) as the paid route, a real
redis-server started by the test for the budgets shared by replicas, and the fake page reader
(fakes/fake_jina.py) for POST /access."""
import json
import os
import time
import unittest

import rtest
from rtest import backend, scaled, wait_for, parallel
from sgtest import Gateway, Redis, binary
from fake_jina import FakeJina
from fake_serper import FakeSerper

SERPER_ENV = "SG_TEST_BUDGET_SERPER_KEY"
JINA_ENV = "SG_TEST_BUDGET_JINA_KEY"
KEYS = {"SG_TEST_BUDGET_KEY_A": "key-of-job-a", "SG_TEST_BUDGET_KEY_B": "key-of-job-b"}
A = {"Authorization": "Bearer key-of-job-a"}
B = {"Authorization": "Bearer key-of-job-b"}
PERIOD_S = {"hour": 3600, "day": 86400}


def to_period_end(period):
    now = time.time()
    if period in PERIOD_S:
        return PERIOD_S[period] - now % PERIOD_S[period]
    raise ValueError(period)


def google(serper, jina=None, **route):
    cfg = {"base_url": serper.url, "api_key_env": SERPER_ENV, "backoff_ms": 20, "qps": 0, "max_inflight": 0}
    if jina is not None:
        cfg["reader"] = {"base_url": jina.url, "api_key_env": JINA_ENV, "backoff_ms": 20}
    route.setdefault("cache", True)
    route.setdefault("metered", True)
    return backend("google", "serper", cfg, **route)


def clients(a=None, b=None, default=None, **top):
    ka = {"id": "job-a", "key_env": "SG_TEST_BUDGET_KEY_A"}
    kb = {"id": "job-b", "key_env": "SG_TEST_BUDGET_KEY_B"}
    if a is not None:
        ka["budget"] = a
    if b is not None:
        kb["budget"] = b
    c = {"keys": [ka, kb]}
    if default is not None:
        c["default"] = {"budget": default}
    c.update(top)
    return c


class BudgetBase(unittest.TestCase):
    def setUp(self):
        self.serper = FakeSerper(api_key="test-serper-key")
        self.env = dict(KEYS)
        self.env[SERPER_ENV] = "test-serper-key"
        self.env[JINA_ENV] = "test-jina-key"
        self.gws = []
        self.redis = None
        self.jina = None

    def tearDown(self):
        for gw in self.gws:
            gw.stop()
        self.serper.stop()
        if self.jina is not None:
            self.jina.stop()
        if self.redis is not None:
            self.redis.close()

    def start(self, route=None, redis=False, jina=False, **top):
        if redis and self.redis is None:
            self.redis = Redis()
        if jina and self.jina is None:
            self.jina = FakeJina(keys=("test-jina-key",))
        cfg = {"backends": [google(self.serper, self.jina, **(route or {}))]}
        if self.redis is not None:
            cfg["cache"] = {"redis": {"port": self.redis.port, "timeout_ms": 5000}}  # a loaded machine must not fail closed
        cfg.update(top)
        gw = Gateway(cfg, threads=2, env=self.env)
        self.gws.append(gw)
        return gw

    def ask(self, gw, queries, headers=A):
        return gw.retrieve(queries, topk=2, headers=headers)

    def searched(self):
        return len(self.serper.search_requests())

    def assert_exhausted(self, r, period="day", who="client job-a"):
        self.assertEqual(r.status, 429, r)
        err = r.json()["error"]
        self.assertEqual(err["code"], 429)
        self.assertEqual(err["type"], "budget_exhausted")
        self.assertIn(who, err["message"])
        retry = int(r.headers["retry-after"])
        self.assertAlmostEqual(retry, to_period_end(period), delta=5)


class TestClientBudget(BudgetBase):
    def test_exhausted_gets_429_with_retry_after_to_the_end_of_the_day(self):
        gw = self.start(clients=clients(a={"queries": 5, "period": "day"}))
        r = self.ask(gw, ["q1", "q2", "q3"])
        self.assertEqual(r.status, 200, r)
        # a request whose misses the rest cannot cover is refused whole, and sends nothing
        r = self.ask(gw, ["q4", "q5", "q6"])
        self.assert_exhausted(r)
        self.assertIn("2 left", r.json()["error"]["message"])
        self.assertEqual(self.searched(), 3)
        # one that fits is admitted; a cached query in it costs nothing
        self.assertEqual(self.ask(gw, ["q4", "q5", "q1"]).status, 200)
        self.assertEqual(self.searched(), 5)
        self.assert_exhausted(self.ask(gw, ["q7"]))
        # cache hits are still answered once the budget is spent
        r = self.ask(gw, ["q2", "q3", "q2"])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(r.json()["result"]), 3)
        # another client has no budget: not affected
        self.assertEqual(self.ask(gw, ["q8"], headers=B).status, 200)
        self.assertEqual(self.searched(), 6)
        self.assertEqual(gw.metric("searchgate_budget_spent_queries_total", client="job-a"), 5)
        self.assertEqual(gw.metric("searchgate_budget_exhausted_total", client="job-a"), 2)
        self.assertEqual(gw.metric("searchgate_budget_remaining_queries", client="job-a"), 0)
        log = gw.stop()
        self.gws.remove(gw)
        self.assertEqual(log.count("budget of 5 queries per day is exhausted"), 1, log)

    def test_cache_hits_and_singleflight_duplicates_do_not_spend(self):
        # GRPO: n rollouts of one prompt ask the same query at once, in one request and across requests
        self.serper.default_script = [{"delay": 0.6}]
        gw = self.start(redis=True, clients=clients(a={"queries": 100, "period": "hour"}))
        rs = parallel(lambda: self.ask(gw, ["who wrote hamlet"] * 5), [()] * 8)
        self.assertEqual([r.status for r in rs], [200] * 8, rs)
        self.assertEqual(self.searched(), 1)
        self.assertEqual(self.ask(gw, ["who wrote hamlet", "who wrote hamlet"]).status, 200)  # L1 hit
        self.assertEqual(self.searched(), 1)
        self.assertEqual(gw.metric("searchgate_budget_spent_queries_total", client="job-a"), 1)
        # the shared counter as this replica saw it last (the replies to the refunds of the joins)
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_budget_used_queries", client="job-a") == 1))
        # the shared counter holds what was sent: every join's reservation was given back
        start = int(time.time()) // 3600 * 3600
        key = "sg:budget:client:job-a:hour:%d" % start
        self.assertTrue(wait_for(lambda: self.redis.command("HGET", key, "used") == b"1"), self.redis.command("HGETALL", key))
        ttl = self.redis.command("TTL", key)
        self.assertGreater(ttl, 0)
        self.assertLessEqual(ttl, to_period_end("hour") + 300 + 2)

    def test_calls_that_never_reach_the_backend_are_given_back(self):
        # one query in the plugin at a time and no queue: a second concurrent call is shed (503)
        self.serper.default_script = [{"delay": 0.8}]
        gw = self.start(redis=True, route={"max_inflight": 1, "max_queue": 0},
                        clients=clients(a={"queries": 10, "period": "day"}))
        rs = parallel(lambda q: self.ask(gw, [q]), [("slow one",), ("slow two",)])
        self.assertEqual(sorted(r.status for r in rs), [200, 503], rs)
        self.assertEqual(self.searched(), 1)
        self.assertEqual(gw.metric("searchgate_budget_spent_queries_total", client="job-a"), 1)
        day = int(time.time()) // 86400 * 86400
        key = "sg:budget:client:job-a:day:%d" % day
        self.assertTrue(wait_for(lambda: self.redis.command("HGET", key, "used") == b"1"), self.redis.command("HGETALL", key))
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_budget_used_queries", client="job-a") == 1))

    def test_warning_at_80_percent(self):
        gw = self.start(clients=clients(a={"queries": 10, "period": "day"}))
        self.assertEqual(self.ask(gw, ["w%d" % i for i in range(7)]).status, 200)
        self.assertEqual(gw.metric("searchgate_budget_warnings_total", client="job-a"), 0)
        self.assertAlmostEqual(gw.metric("searchgate_budget_used_ratio", client="job-a"), 0.7)
        self.assertEqual(self.ask(gw, ["w7"]).status, 200)
        self.assertEqual(gw.metric("searchgate_budget_warnings_total", client="job-a"), 1)
        self.assertAlmostEqual(gw.metric("searchgate_budget_used_ratio", client="job-a"), 0.8)
        self.assertEqual(self.ask(gw, ["w8", "w9"]).status, 200)
        self.assertEqual(gw.metric("searchgate_budget_warnings_total", client="job-a"), 1)  # one per period
        self.assertAlmostEqual(gw.metric("searchgate_budget_used_ratio", client="job-a"), 1.0)
        log = gw.stop()
        self.gws.remove(gw)
        self.assertEqual(log.count("client job-a has used"), 1, log)
        self.assertIn("client job-a has used 8 of its 10 queries this day (80%)", log)

    def test_stats_and_metrics(self):
        gw = self.start(route={"budget": {"queries": 50, "period": "hour", "fail": "open"}},
                        clients=clients(a={"queries": 20, "period": "day"}))
        self.assertEqual(self.ask(gw, ["s1", "s2", "s3"]).status, 200)
        self.assertEqual(self.ask(gw, ["s4"], headers=B).status, 200)
        st = gw.get("/stats").json()["budgets"]
        a = st["clients"]["job-a"]
        self.assertEqual((a["queries"], a["period"], a["used"], a["remaining"], a["spent_here"]), (20, "day", 3, 17, 3))
        self.assertAlmostEqual(a["used_ratio"], 0.15)
        self.assertEqual((a["shared"], a["fail"], a["warning"]), (False, "closed", False))
        self.assertAlmostEqual(a["resets_in_s"], to_period_end("day"), delta=5)
        day = time.strftime("%Y-%m-%dT00:00:00Z", time.gmtime())
        self.assertEqual(a["period_start"], day)
        self.assertNotIn("job-b", st["clients"])  # no budget
        g = st["routes"]["google"]
        self.assertEqual((g["queries"], g["period"], g["used"], g["remaining"], g["fail"]), (50, "hour", 4, 46, "open"))
        self.assertAlmostEqual(g["resets_in_s"], to_period_end("hour"), delta=5)
        self.assertTrue(g["period_start"].endswith(":00:00Z"))
        m = gw.metric
        self.assertEqual(m("searchgate_budget_limit_queries", client="job-a"), 20)
        self.assertEqual(m("searchgate_budget_used_queries", client="job-a"), 3)
        self.assertEqual(m("searchgate_budget_remaining_queries", client="job-a"), 17)
        self.assertEqual(m("searchgate_budget_limit_queries", route="google"), 50)
        self.assertEqual(m("searchgate_budget_used_queries", route="google"), 4)
        self.assertEqual(m("searchgate_budget_remaining_queries", route="google"), 46)
        self.assertAlmostEqual(m("searchgate_budget_used_ratio", route="google"), 0.08)
        self.assertAlmostEqual(m("searchgate_budget_reset_seconds", route="google"), to_period_end("hour"), delta=5)
        self.assertEqual(m("searchgate_budget_spent_queries_total", route="google"), 4)

    def test_anonymous_clients_share_one_budget(self):
        gw = self.start(clients=clients(default={"queries": 3, "period": "day"}, trust_client_id_header=True))
        self.assertEqual(self.ask(gw, ["n1", "n2"], headers={"X-Client-Id": "one"}).status, 200)
        # a fresh identity costs nothing to make: it is not a fresh budget
        self.assert_exhausted(self.ask(gw, ["n3", "n4"], headers={"X-Client-Id": "two"}), who="client (anonymous)")
        self.assertEqual(self.ask(gw, ["n3"], headers={"X-Client-Id": "three"}).status, 200)
        # keyed clients inherit the default budget as their own
        self.assertEqual(self.ask(gw, ["n5", "n6", "n7"]).status, 200)
        self.assert_exhausted(self.ask(gw, ["n8"]))
        self.assertEqual(gw.metric("searchgate_budget_used_queries", client="(anonymous)"), 3)

    def test_unmetered_route_is_free_for_client_budgets(self):
        self.serper2 = FakeSerper(api_key="test-serper-key")
        try:
            free = google(self.serper2, metered=False)
            free["name"] = "free"
            gw = self.start(clients=clients(a={"queries": 1, "period": "day"}), backends=[
                google(self.serper), free])
            self.assertEqual(gw.retrieve(["f1", "f2"], headers=A, path="/retrieve/free").status, 200)
            self.assertEqual(self.ask(gw, ["p1"]).status, 200)
            self.assert_exhausted(self.ask(gw, ["p2"]))
            self.assertEqual(gw.retrieve(["f3"], headers=A, path="/retrieve/free").status, 200)
        finally:
            self.serper2.stop()


class TestRouteBudget(BudgetBase):
    def test_route_budget_counts_every_client(self):
        gw = self.start(route={"budget": {"queries": 4, "period": "hour"}}, clients=clients())
        self.assertEqual(self.ask(gw, ["r1", "r2", "r3"]).status, 200)
        self.assertEqual(self.ask(gw, ["r4"], headers=B).status, 200)
        r = self.ask(gw, ["r5"], headers=B)
        self.assert_exhausted(r, period="hour", who="route google")
        self.assert_exhausted(self.ask(gw, ["r6"]), period="hour", who="route google")
        self.assertEqual(self.searched(), 4)
        self.assertEqual(gw.metric("searchgate_budget_used_queries", route="google"), 4)
        self.assertEqual(gw.metric("searchgate_budget_exhausted_total", route="google"), 2)

    def test_client_and_route_budgets_reserve_together(self):
        # the client's budget refuses: the route's must not be charged for the refused request
        gw = self.start(redis=True, route={"budget": {"queries": 10, "period": "day"}},
                        clients=clients(a={"queries": 2, "period": "day"}))
        self.assertEqual(self.ask(gw, ["c1", "c2"]).status, 200)
        self.assert_exhausted(self.ask(gw, ["c3", "c4", "c5"]))
        self.assertEqual(self.ask(gw, ["c6", "c7", "c8"], headers=B).status, 200)
        self.assertEqual(gw.metric("searchgate_budget_used_queries", route="google"), 5)
        day = int(time.time()) // 86400 * 86400
        self.assertEqual(self.redis.command("HGET", "sg:budget:route:google:day:%d" % day, "used"), b"5")
        self.assertEqual(self.redis.command("HGET", "sg:budget:client:job-a:day:%d" % day, "used"), b"2")

    def test_access_on_a_paid_route_counts(self):
        gw = self.start(jina=True, route={"budget": {"queries": 3, "period": "day"}}, clients=clients())
        self.assertEqual(self.ask(gw, ["a1"]).status, 200)
        urls = ["https://example.org/page-1", "https://example.org/page-2"]
        r = gw.post("/access", {"urls": urls + urls[:1]}, headers=A)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.jina.server.requests), 2)
        r = gw.post("/access", {"urls": ["https://example.org/page-3"]}, headers=A)
        self.assert_exhausted(r, who="route google")
        self.assertEqual(len(self.jina.server.requests), 2)


class TestFusion(BudgetBase):
    def test_fusion_legs_are_counted_by_their_routes(self):
        serper2 = FakeSerper(api_key="test-serper-key")
        try:
            free = google(serper2, metered=False)
            free["name"] = "free"
            gw = self.start(clients=clients(), backends=[
                google(self.serper, budget={"queries": 3, "period": "day"}), free,
                {"name": "hy", "fusion": {"routes": ["google", "free"], "method": "rrf", "k": 60}, "topk": 2}])
            self.assertEqual(gw.retrieve(["h1", "h2"], topk=2, headers=A, path="/retrieve/hy").status, 200)
            self.assertEqual(self.searched(), 2)
            self.assertEqual(gw.metric("searchgate_budget_used_queries", route="google"), 2)
            # the paid leg cannot cover two more misses: it sends nothing, the free leg still answers
            gw.retrieve(["h3", "h4"], topk=2, headers=A, path="/retrieve/hy")
            self.assertEqual(self.searched(), 2)
            self.assertEqual(len(serper2.search_requests()), 4)
            self.assertEqual(gw.metric("searchgate_budget_exhausted_total", route="google"), 1)
            self.assertEqual(gw.metric("searchgate_budget_used_queries", route="google"), 2)
        finally:
            serper2.stop()


class TestShared(BudgetBase):
    def test_two_replicas_share_one_budget(self):
        cfg = dict(redis=True, clients=clients(a={"queries": 6, "period": "day"}),
                   route={"budget": {"queries": 100, "period": "day"}})
        gw1 = self.start(**cfg)
        gw2 = self.start(**cfg)
        self.assertEqual(self.ask(gw1, ["x1", "x2", "x3", "x4"]).status, 200)
        self.assert_exhausted(self.ask(gw2, ["x5", "x6", "x7"]))
        self.assertEqual(self.ask(gw2, ["x5", "x6"]).status, 200)
        self.assert_exhausted(self.ask(gw1, ["x7"]))
        # the other replica's cache entries (through Redis) are free for both
        self.assertEqual(self.ask(gw1, ["x5", "x6"]).status, 200)
        self.assertEqual(self.searched(), 6)
        day = int(time.time()) // 86400 * 86400
        self.assertEqual(self.redis.command("HGET", "sg:budget:client:job-a:day:%d" % day, "used"), b"6")
        self.assertEqual(self.redis.command("HGET", "sg:budget:route:google:day:%d" % day, "used"), b"6")
        # each replica counts what it sent; both see the shared total
        self.assertEqual(gw1.metric("searchgate_budget_spent_queries_total", client="job-a"), 4)
        self.assertEqual(gw2.metric("searchgate_budget_spent_queries_total", client="job-a"), 2)
        self.assertEqual(gw1.metric("searchgate_budget_used_queries", client="job-a"), 6)
        self.assertEqual(gw2.get("/stats").json()["budgets"]["clients"]["job-a"]["used"], 6)

    def test_concurrent_replicas_never_overspend(self):
        cfg = dict(redis=True, clients=clients(a={"queries": 10, "period": "day"}))
        gw1 = self.start(**cfg)
        gw2 = self.start(**cfg)
        args = [(gw1 if i % 2 else gw2, ["y%d-%d" % (i, j) for j in range(2)]) for i in range(12)]
        rs = parallel(lambda gw, q: self.ask(gw, q), args)
        ok = [r for r in rs if r.status == 200]
        self.assertEqual(len(ok), 5, [r.status for r in rs])
        self.assertTrue(all(r.status in (200, 429) for r in rs))
        self.assertEqual(self.searched(), 10)

    def test_redis_down_fail_closed(self):
        gw = self.start(redis=True, clients=clients(a={"queries": 10, "period": "day"}))
        self.assertEqual(self.ask(gw, ["d1"]).status, 200)
        self.redis.stop()
        r = wait_for(lambda: (lambda x: x if x.status == 503 else None)(self.ask(gw, ["d2"])), timeout=10)
        self.assertIsNotNone(r)
        self.assertEqual(r.json()["error"]["type"], "budget_unavailable")
        self.assertEqual(r.headers["retry-after"], "1")
        self.assertEqual(self.searched(), 1)
        self.assertEqual(self.ask(gw, ["d1"]).status, 200)  # a cache hit needs no budget
        self.assertEqual(self.ask(gw, ["d3"], headers=B).status, 200)  # nor does a client without one
        self.assertGreaterEqual(gw.metric("searchgate_budget_unavailable_total", client="job-a", fail="closed"), 1)

    def test_redis_down_fail_open_counts_locally_then_catches_up(self):
        gw = self.start(redis=True, clients=clients(a={"queries": 6, "period": "day", "fail": "open"}))
        self.assertEqual(self.ask(gw, ["o1"]).status, 200)
        port = self.redis.port
        self.redis.stop()
        self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] != "up", timeout=10))
        # this replica goes on alone: the last shared value plus what it sends now
        self.assertEqual(self.ask(gw, ["o2", "o3"]).status, 200)
        self.assertEqual(self.ask(gw, ["o4", "o5"]).status, 200)
        self.assert_exhausted(self.ask(gw, ["o6", "o7"]))
        self.assertGreaterEqual(gw.metric("searchgate_budget_unavailable_total", client="job-a", fail="open"), 3)
        # Redis is back (empty, as after a restart): the next script carries what was sent meanwhile
        self.redis.close()
        self.redis = Redis(port=port)
        # every loop thread has its own connection: wait for both
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_cache_redis_connections_up") == 2, timeout=15))
        self.assertEqual(self.ask(gw, ["o6"]).status, 200)
        day = int(time.time()) // 86400 * 86400
        self.assertEqual(self.redis.command("HGET", "sg:budget:client:job-a:day:%d" % day, "used"), b"5")
        self.assert_exhausted(self.ask(gw, ["o7", "o8"]))
        self.assertEqual(self.searched(), 6)


class TestConfigErrors(unittest.TestCase):
    def check(self, clients_cfg=None, route=None, modes=(["--check"], [])):
        entry = {"name": "google", "plugin": "serper", "config": {"base_url": "http://127.0.0.1:1", "api_key_env": SERPER_ENV}}
        entry.update(route or {})
        cfg = {"backends": [entry]}
        if clients_cfg is not None:
            cfg["clients"] = clients_cfg
        env = dict(os.environ)
        env.update(KEYS)
        env[SERPER_ENV] = "k"
        results = []
        for extra in modes:
            gw = Gateway(cfg, env=env, extra_args=extra, expect_fail=True)
            rc = gw.wait_exit(30)
            results.append((rc, gw.read_log()))
        return results

    def assert_refused(self, needle, **kw):
        for rc, log in self.check(**kw):
            self.assertEqual(rc, 1, log)
            self.assertIn(needle, log)

    def test_bad_values(self):
        self.assert_refused('backends[0].budget.period: expected one of "hour", "day", "week", "month", got "year"',
                            route={"budget": {"queries": 5, "period": "year"}})
        self.assert_refused("backends[0].budget.queries", route={"budget": {"queries": -1, "period": "day"}})
        self.assert_refused("backends[0].budget.queries: is required", route={"budget": {"period": "day"}})
        self.assert_refused("backends[0].budget.fail", route={"budget": {"queries": 1, "fail": "maybe"}})
        self.assert_refused("backends[0].budget.limit: unknown key", route={"budget": {"queries": 1, "limit": 3}})
        self.assert_refused("backends[0].metered: cannot be false on a route with a budget",
                            route={"metered": False, "budget": {"queries": 1}})
        self.assert_refused("clients.keys[0].budget.period",
                            clients_cfg=clients(a={"queries": 5, "period": "fortnight"}), route={"metered": True})
        self.assert_refused("clients.keys[0].budget: counts backend calls on metered routes, and no route is metered",
                            clients_cfg=clients(a={"queries": 5}))
        self.assert_refused("clients.default.budget: expected an object", clients_cfg={"default": {"budget": 5}},
                            route={"metered": True})

    def test_good_config_passes_check(self):
        (rc, log), = self.check(clients_cfg=clients(a={"queries": 0, "period": "month"}, b=None,
                                                    default={"queries": 10, "period": "week", "fail": "open"}),
                                route={"metered": True}, modes=(["--check"],))
        self.assertEqual(rc, 0, log)


if __name__ == "__main__":
    rtest.sgtest.main()
