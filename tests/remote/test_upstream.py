"""The upstream backend end to end: the real searchgate and sg_upstream.so in front of fake
Search-R1-compatible retrieval servers (fakes/fake_upstream.py)."""
import json
import threading
import time
import unittest

import rtest
from rtest import backend, gateway, scaled, wait_for, docs_of
from fake_upstream import FakeUpstream


def up_cfg(*fakes, **kw):
    cfg = {"servers": [f.url for f in fakes], "health_interval_ms": 0, "backoff_ms": 10}
    cfg.update(kw)
    return cfg


def direct(fake, queries, topk, return_scores):
    r = rtest.request(fake.port, "POST", "/retrieve", {"queries": queries, "topk": topk, "return_scores": return_scores})
    assert r.status == 200, r
    return r.json()


def with_url(doc):
    d = dict(doc)
    d.setdefault("url", "")
    return d


class UpBase(rtest.FakeTestCase):
    fake_class = FakeUpstream


class TestPassthrough(UpBase):
    def test_both_shapes_match_the_upstream(self):
        f = self.fake(mode="slime")
        self.gw = gateway(backend("lab", "upstream", up_cfg(f)))
        qs = ["who wrote hamlet", "capital of france", "東京 capital of japan"]
        want = direct(f, qs, 3, True)["result"]
        r = self.gw.retrieve(qs, topk=3, return_scores=True)
        self.assertEqual(r.status, 200, r)
        got = r.json()["result"]
        self.assertEqual(len(got), 3)
        for g, w in zip(got, want):
            self.assertEqual([it["document"] for it in g], [with_url(it["document"]) for it in w])
            self.assertEqual([it["score"] for it in g], [it["score"] for it in w])
        r = self.gw.retrieve(qs, topk=3, return_scores=False)
        self.assertEqual(r.status, 200, r)
        flat = direct(f, qs, 3, False)["result"]
        self.assertEqual(r.json()["result"], [[with_url(d) for d in lst] for lst in flat])
        # the gateway always asks for scores upstream (the SR1 server crashes without them)
        for req in f.retrieve_requests():
            if not req.headers.get("user-agent", "").startswith("searchgate/"):
                continue  # the test's own direct calls
            self.assertIs(req.json()["return_scores"], True)
            self.assertEqual(req.json()["topk"], 3)

    def test_sr1_server_with_the_return_scores_bug(self):
        f = self.fake(mode="sr1")
        self.assertEqual(rtest.request(f.port, "POST", "/retrieve", {"queries": ["x"], "topk": 1}).status, 500)
        self.gw = gateway(backend("lab", "upstream", up_cfg(f)))
        r = self.gw.retrieve(["who wrote hamlet"], topk=2, return_scores=False)  # slime/RLinf style
        self.assertEqual(r.status, 200, r)
        doc = r.json()["result"][0][0]
        self.assertIn("Hamlet", doc["contents"])
        self.assertEqual(doc["url"], "")  # RLinf/ASearcher read r["url"]

    def test_flat_only_server_gets_rank_scores(self):
        f = self.fake(mode="flat")
        self.gw = gateway(backend("lab", "upstream", up_cfg(f)))
        r = self.gw.retrieve(["redis cache"], topk=3, return_scores=True)
        self.assertEqual(r.status, 200, r)
        items = r.json()["result"][0]
        self.assertEqual([it["score"] for it in items], [1.0, 0.5, 1.0 / 3])
        self.assertEqual(items[0]["document"]["url"], "https://redis.io/")  # an existing url is kept

    def test_access_passthrough(self):
        f = self.fake()
        self.gw = gateway(backend("lab", "upstream", up_cfg(f)))
        r = self.gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet", "https://nowhere.example/"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["result"], [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}, None])
        self.assertEqual(f.server.requests[-1].path, "/access")

    def test_access_path_null_disables_access(self):
        """"access_path": null turns the route's page store off (docs/backends/upstream.md): /access
        answers a null page per URL like any route without pages (200 + X-Searchgate-No-Page-Store,
        docs/api.md), "access": false in GET /, nothing sent upstream; a fusion route over such legs
        has no page store either, and one with another leg that has pages answers /access through
        that leg."""
        f, g = self.fake(name="nopages"), self.fake(name="pages")
        self.gw = gateway(backend("a", "upstream", up_cfg(f, access_path=None)),
                          backend("b", "upstream", up_cfg(f, access_path=None)),
                          backend("c", "upstream", up_cfg(g)),
                          {"name": "ab", "fusion": {"routes": ["a", "b"]}},
                          {"name": "ac", "fusion": {"routes": ["a", "c"]}})
        urls = {"urls": ["https://en.wikipedia.org/wiki/Hamlet"]}
        for path, name in (("/access/a", "a"), ("/access/ab", "ab")):
            r = self.gw.post(path, urls)
            self.assertEqual(r.status, 200, (path, r))
            self.assertEqual(r.json()["result"], [None], (path, r))
            self.assertEqual(r.headers.get("x-searchgate-no-page-store"), name, (path, r))
        self.assertEqual([q for q in f.server.requests if q.path == "/access"], [])
        r = self.gw.post("/access/ac", urls)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["result"], [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}])
        self.assertEqual(g.server.requests[-1].path, "/access")
        routes = {b["name"]: b for b in self.gw.get("/").json()["backends"]}
        self.assertEqual({n: routes[n]["access"] for n in routes}, {"a": False, "b": False, "c": True, "ab": False, "ac": True})
        self.assertNotIn("access_via", routes["ab"])
        self.assertEqual(routes["ac"]["access_via"], "c")
        self.assertEqual(self.gw.retrieve(["hamlet"], path="/retrieve/a", topk=1).status, 200)  # /retrieve is untouched

    def test_empty_batch_and_topk_cap(self):
        f = self.fake()
        self.gw = gateway(backend("lab", "upstream", up_cfg(f)))
        r = self.gw.retrieve([], topk=3)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"result": []})
        r = self.gw.retrieve(["paris"], topk=2)
        self.assertEqual(len(r.json()["result"][0]), 2)


class TestBalancing(UpBase):
    def test_round_robin(self):
        a, b = self.fake(name="a"), self.fake(name="b")
        self.gw = gateway(backend("lab", "upstream", up_cfg(a, b, balance="round_robin")))
        for i in range(10):
            self.assertEqual(self.gw.retrieve(["rr %d" % i], topk=1).status, 200)
        self.assertEqual((len(a.retrieve_requests()), len(b.retrieve_requests())), (5, 5))

    def test_least_inflight_prefers_the_idle_server(self):
        slow, fast = self.fake(name="slow"), self.fake(name="fast")
        slow.default_script = [{"delay": 2.0}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(slow, fast, balance="least_inflight")), threads=2)
        threads = []
        for i in range(12):  # staggered: the slow server stays busy with whatever it got first
            t = threading.Thread(target=self.gw.retrieve, args=(["li %d" % i],), kwargs={"topk": 1})
            t.start()
            threads.append(t)
            time.sleep(0.05)
        for t in threads:
            t.join(30)
        n_slow, n_fast = len(slow.retrieve_requests()), len(fast.retrieve_requests())
        self.assertEqual(n_slow + n_fast, 12)
        self.assertLessEqual(n_slow, 3, "round robin would have sent 6 to the busy server")

    def test_failed_attempt_moves_to_another_server(self):
        a, b = self.fake(name="a"), self.fake(name="b")
        a.script["flaky"] = [{"status": 500, "body": {"detail": "boom"}}]  # round robin starts with a
        self.gw = gateway(backend("lab", "upstream", up_cfg(a, b, balance="round_robin", retries=1)))
        r = self.gw.retrieve(["flaky"], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(a.retrieve_requests()) + len(b.retrieve_requests()), 2)
        self.assertEqual((len(a.retrieve_requests()), len(b.retrieve_requests())), (1, 1))

    def test_health_checks_route_around_a_dead_server(self):
        a, b = self.fake(name="a"), self.fake(name="b")
        port_a = a.port
        self.gw = gateway(backend("lab", "upstream", up_cfg(a, b, health_interval_ms=100, retries=0,
                                                             balance="round_robin")))
        a.stop()
        self.fakes.remove(a)
        label_a = {"server": "http://127.0.0.1:%d" % port_a}
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_upstream_server_up", **label_a) == 0))
        for i in range(6):
            r = self.gw.retrieve(["dead a %d" % i], topk=1)
            self.assertEqual(r.status, 200, r)
        self.assertEqual(self.gw.get("/health").status, 200)
        a2 = self.fake(name="a2", port=port_a)  # back on the same port
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_backend_upstream_server_up", **label_a) == 1))
        for i in range(4):
            self.assertEqual(self.gw.retrieve(["back %d" % i], topk=1).status, 200)
        self.assertGreaterEqual(len(a2.retrieve_requests()), 1)
        # probes carry the configured body
        probes = [r for r in b.server.requests if r.body and json.loads(r.body).get("queries") == []]
        self.assertGreater(len(probes), 0)

    def test_all_down(self):
        a = self.fake()
        url = a.url
        a.stop()
        self.fakes.remove(a)
        self.gw = gateway(backend("lab", "upstream", {"servers": [url], "health_interval_ms": 50, "retries": 0}))
        r = self.gw.retrieve(["anyone"], topk=1)
        self.assertEqual(r.status, 503, r)
        self.assertIn("cannot reach upstream", r.body.decode())
        self.assertTrue(wait_for(lambda: self.gw.get("/health").status == 503))
        self.assertIn("down", self.gw.get("/health").body.decode())


class TestErrors(UpBase):
    def test_error_mapping(self):
        f = self.fake()
        f.script["e500"] = [{"status": 500, "body": {"detail": "index exploded"}}]
        f.script["e503"] = [{"status": 503, "retry_after": 4, "body": {"detail": "busy"}}]
        f.script["e422"] = [{"status": 422, "body": {"detail": [{"loc": ["body", "queries"], "msg": "bad"}]}}]
        f.script["garbage"] = [{"garbage": b"Internal Server Error"}]
        f.script["count"] = [{"wrong_count": True}]
        f.script["slow"] = [{"delay": 2.0}]
        f.script["closed"] = [{"close": True}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(f, retries=0, timeout_ms=300)))
        cases = [("e500", 502, "index exploded"), ("e503", 503, "busy"), ("e422", 502, "bad"),
                 ("garbage", 502, "malformed JSON"), ("count", 502, "0 result lists for 1 queries"),
                 ("slow", 504, "in time"), ("closed", 502, "upstream")]
        for q, status, needle in cases:
            r = self.gw.retrieve([q], topk=1)
            self.assertEqual(r.status, status, (q, r))
            self.assertIn(needle, r.body.decode(), q)
            if q == "e503":
                self.assertEqual(r.headers.get("retry-after"), "4")

    def test_connection_refused(self):
        self.gw = gateway(backend("lab", "upstream", {"servers": ["http://127.0.0.1:%d" % rtest.closed_port()],
                                                      "health_interval_ms": 0, "retries": 1, "backoff_ms": 10}))
        r = self.gw.retrieve(["nobody"], topk=1)
        self.assertEqual(r.status, 503, r)

    def test_deadline_bounds_the_call(self):
        f = self.fake()
        f.default_script = [{"delay": 5.0}]
        self.gw = gateway(backend("lab", "upstream", up_cfg(f, retries=0), timeout_ms=300))
        t0 = time.time()
        r = self.gw.retrieve(["hang"], topk=1)
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(2.0))

    def test_config_errors(self):
        for cfg, needle in [({}, "servers"), ({"servers": []}, "servers"), ({"servers": ["ftp://x"]}, "servers[0]"),
                            ({"servers": ["http://x"], "balance": "random"}, "balance"),
                            ({"servers": ["http://x"], "path": "retrieve"}, "path")]:
            g = rtest.Gateway({"backends": [backend("lab", "upstream", cfg)]}, expect_fail=True)
            self.assertNotEqual(g.wait_exit(15), 0)
            self.assertIn(needle, g.read_log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
