"""A route's max_inflight bounds what its upstream really carries (issue 19, item 5): the real
searchgate and sg_upstream.so in front of a slow fake Search-R1 server (fakes/fake_upstream.py) that,
like the Python servers, keeps working on a request after its client hung up, and counts the
requests it works on at once.

A call keeps its admission slot until the upstream's answer was read (on_cancel "drain"), and a
call is not started with less of its deadline left than the route's floor (min_remaining_ms, or
the observed p50 of its calls with min_remaining_quantile): the client gets 504 at once."""
import threading
import time
import unittest

import rtest
from rtest import backend, gateway, parallel, scaled, wait_for
from fake_upstream import FakeUpstream


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
