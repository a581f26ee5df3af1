"""A route's max_inflight bounds what its upstream really carries (issue 19, item 5): the real
searchgate and sg_upstream.so in front of a slow fake Search-R1 server (fakes/fake_upstream.py) that,
like the Python servers, keeps working on a request after its client hung up, and counts the
requests it works on at once.

A call keeps its admission slot until the upstream's answer was read (on_cancel "drain"), and a
call is not started with less of its deadline left than the route's floor (min_remaining_ms, or
the observed p50 of its calls with min_remaining_quantile): the client gets 504 at once.

The serper plugin sends one request per query (its page reader one per URL): a call whose first
request fails for good is answered at once, but keeps its slot until its other requests have ended
too, since serper.dev keeps working on them (ABI 1.4 hold/release)."""
import threading
import time
import unittest

import rtest
from rtest import backend, gateway, parallel, scaled, wait_for
from fake_upstream import FakeUpstream
from fake_jina import FakeJina
from fake_serper import FakeSerper

SERPER_ENV = "SG_TEST_SERPER_KEY"
JINA_ENV = "SG_TEST_JINA_KEY"


def up_cfg(fake, **kw):
    cfg = {"servers": [fake.url], "health_interval_ms": 0, "retries": 0}
    cfg.update(kw)
    return cfg


class UpstreamLoad(rtest.FakeTestCase):
    fake_class = FakeUpstream

    def test_max_inflight_bounds_the_upstream(self):
        # the scenario: max_inflight 8, an upstream taking 2 s, 64 clients with 500 ms deadlines
        f = self.fake(mode="slime")
        f.default_script = [{"delay": 2.0}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(f), max_inflight=8, min_remaining_ms=100))
        sent, statuses, lock = {}, [], threading.Lock()
        stop = time.time() + scaled(5)

        def client(c):
            i = 0
            while time.time() < stop:
                q = "c%d-%d" % (c, i)
                i += 1
                with lock:
                    sent[q] = time.time()
                r = self.gw.retrieve([q], topk=1, headers={"X-Timeout-Ms": "500"})
                with lock:
                    statuses.append(r.status)

        parallel(client, [(c,) for c in range(64)])
        self.assertTrue(f.server.wait_idle(scaled(15)))
        reqs = f.retrieve_requests()
        self.assertGreater(len(reqs), 0)
        self.assertLessEqual(f.server.max_inflight, 8, "the upstream carried more than the route's max_inflight")
        late = [(r.json()["queries"][0], round(r.time - sent[r.json()["queries"][0]], 3)) for r in reqs
                if r.time - sent[r.json()["queries"][0]] > 0.5]
        self.assertEqual(late, [], "calls arrived upstream after their deadline")
        self.assertEqual(set(statuses), {504})
        self.assertGreater(self.gw.metric("searchgate_backend_upstream_http_drained_total"), 0)
        self.assertGreater(self.gw.metric("searchgate_backend_expired_total") +
                           self.gw.metric("searchgate_backend_floor_refused_total"), 0)
        # the answers read after the clients left were cached for the next asker
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_inflight_queries") == 0, 10))

    def test_floor_from_the_observed_p50(self):
        f = self.fake(mode="slime")
        f.default_script = [{"delay": 1.0}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(f), max_inflight=8, min_remaining_quantile="p50"))
        rs = parallel(lambda q: self.gw.retrieve([q], topk=1), [("warm %d" % i,) for i in range(8)])
        self.assertEqual([r.status for r in rs], [200] * 8)
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_floor_ms") >= 900, 5),
                        self.gw.metric("searchgate_backend_floor_ms"))
        n = len(f.retrieve_requests())
        t0 = time.time()
        r = self.gw.retrieve(["too little time"], topk=1, headers={"X-Timeout-Ms": "500"})
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(0.4), "not answered at once")
        self.assertIn("floor", r.json()["error"]["message"])
        self.assertEqual(len(f.retrieve_requests()), n, "the call was sent anyway")
        self.assertEqual(self.gw.metric("searchgate_backend_floor_refused_total"), 1)
        # with time enough it is served
        self.assertEqual(self.gw.retrieve(["enough time"], topk=1, headers={"X-Timeout-Ms": "5000"}).status, 200)

    def test_close_frees_the_slot_at_once(self):
        # on_cancel "close": for an upstream that stops when its client hangs up -- the connection
        # is closed at the deadline and nothing is drained
        f = self.fake(mode="slime")
        f.default_script = [{"delay": 1.0}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(f, on_cancel="close"), max_inflight=1))
        r = self.gw.retrieve(["hang up"], topk=1, headers={"X-Timeout-Ms": "300"})
        self.assertEqual(r.status, 504, r)
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_inflight_queries") == 0, 2))
        self.assertEqual(self.gw.metric("searchgate_backend_upstream_http_drained_total"), 0)


class SerperLoad(rtest.FakeTestCase):
    """A call of several upstream requests: one fails at once, the others take a while."""

    fake_class = FakeSerper

    def serper(self, **route):
        f = self.fake()
        cfg = {"base_url": f.url, "api_key_env": SERPER_ENV, "qps": 0, "max_inflight": 0, "retries": 0}
        self.gw = gateway(backend("google", "serper", cfg, **route), env={SERPER_ENV: f.api_key})
        return f

    def test_a_failed_query_keeps_the_slot_until_the_others_end(self):
        f = self.serper(max_inflight=4, timeout_ms=10000)
        f.default_script = [{"delay": 2.5}]
        f.script["bad"] = [{"status": 400}]  # refused at once, not retried
        r = self.gw.retrieve(["bad", "slow 1", "slow 2", "slow 3"], topk=1)
        self.assertEqual(r.status, 502, r)
        self.assertIn("HTTP 400", r.json()["error"]["message"])
        # answered at once, but the three others still run at serper.dev: the call keeps its slot
        self.assertEqual(self.gw.metric("searchgate_backend_inflight_queries"), 4)
        t0 = time.time()
        r = self.gw.retrieve(["next 1", "next 2", "next 3", "next 4"], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertGreaterEqual(time.time() - t0, 1.0, "the next call did not wait for the slot")
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_inflight_queries") == 0, 5))
        self.assertTrue(f.server.wait_idle(scaled(10)))
        self.assertLessEqual(f.server.max_inflight, 4, "serper.dev carried more than the route's max_inflight")

    def test_concurrent_callers_never_exceed_max_inflight(self):
        f = self.serper(max_inflight=4, timeout_ms=10000)
        f.default_script = [{"delay": 0.5}]
        for i in range(8):
            f.script["bad %d" % i] = [{"status": 400}]
        rs = parallel(lambda i: self.gw.retrieve(["bad %d" % i, "a%d" % i, "b%d" % i, "c%d" % i], topk=1), [(i,) for i in range(8)])
        self.assertEqual([r.status for r in rs], [502] * 8)
        self.assertTrue(f.server.wait_idle(scaled(10)))
        self.assertLessEqual(f.server.max_inflight, 4, "serper.dev carried more than the route's max_inflight")

    def test_reader_failed_url_keeps_the_slot(self):
        f = self.fake()
        jina = FakeJina(keys=("test-jina-key",))
        self.addCleanup(jina.stop)
        cfg = {"base_url": f.url, "api_key_env": SERPER_ENV, "qps": 0, "max_inflight": 0,
               "reader": {"base_url": jina.url, "api_key_env": JINA_ENV, "retries": 0, "max_inflight": 3, "qps": 0}}
        self.gw = gateway(backend("google", "serper", cfg, timeout_ms=10000),
                          env={SERPER_ENV: f.api_key, JINA_ENV: "test-jina-key"})
        urls = ["https://example.org/%d" % i for i in range(3)]
        for u in urls[1:]:
            jina.script[u] = [{"delay": 2.5}]
        jina.script[urls[0]] = [{"status": 402}]  # the key is refused: the whole access fails (503)
        r = self.gw.post("/access", {"urls": urls})
        self.assertEqual(r.status, 503, r)
        self.assertEqual(self.gw.metric("searchgate_backend_inflight_queries"), 3)
        t0 = time.time()
        r = self.gw.post("/access", {"urls": ["https://example.org/next/%d" % i for i in range(3)]})
        self.assertEqual(r.status, 200, r)
        self.assertGreaterEqual(time.time() - t0, 1.0, "the next call did not wait for the slot")
        self.assertTrue(jina.server.wait_idle(scaled(10)))
        self.assertLessEqual(jina.server.max_inflight, 3, "the reader carried more than its max_inflight")


if __name__ == "__main__":
    unittest.main(verbosity=2)
