"""The mock plugin (docs/backends/mock.md) through the real gateway: answers that depend on the
query text and the config only -- the same across restarts (and across builds: one answer is
pinned here), a larger topk extends the same list, a document is the same whichever query finds it
-- and its testing knobs: hits, empty_rate, blank_rate, latency_ms, error_rate/error_status, pages."""
import json
import os
import subprocess
import time
import unittest

import sgtest
from sgtest import Gateway

QUERIES = ["who wrote hamlet", "capital of France", "東京 tower", "", "  spaces  ", "who wrote hamlet"]


def mock(name="mock", **config):
    route = {k: config.pop(k) for k in list(config) if k in ("cache", "topk")}
    e = {"name": name, "plugin": "mock", "config": config}
    e.update(route)
    return e


class Deterministic(unittest.TestCase):
    def answers(self, *routes):
        gw = Gateway({"backends": [mock(), mock("seeded", seed=3), mock("small", corpus_size=3, cache=False)]})
        try:
            return [gw.retrieve(QUERIES, topk=5, path="/retrieve/" + r).body for r in routes]
        finally:
            gw.stop()

    def test_stable_across_restarts(self):
        first = self.answers("mock", "seeded")
        second = self.answers("mock", "seeded")
        self.assertEqual(first, second)  # byte for byte
        self.assertNotEqual(first[0], first[1])  # another seed, another corpus
        res = json.loads(first[0])["result"]
        self.assertEqual(res[0], res[5])
        # pinned: the algorithm is part of the plugin's contract (docs/backends/mock.md)
        top = res[0][0]
        self.assertEqual(top["document"]["id"], "mock-558816")
        self.assertEqual(top["document"]["title"], "Bridge empire 558816")
        self.assertEqual(top["document"]["url"], "https://mock.searchgate.invalid/doc/558816")
        self.assertAlmostEqual(top["score"], 0.5534085203332919, places=15)

    def test_shape(self):
        gw = Gateway({"backends": [mock(), mock("small", corpus_size=3, cache=False)]})
        try:
            five = gw.retrieve(QUERIES, topk=5).json()["result"]
            two = gw.retrieve(QUERIES, topk=2).json()["result"]
            flat = gw.retrieve(QUERIES, topk=2, return_scores=False).json()["result"]
            small = gw.retrieve(["a", "b"], topk=5, path="/retrieve/small").json()["result"]
        finally:
            gw.stop()
        docs = {}
        for lst5, lst2, lstf in zip(five, two, flat):
            self.assertEqual(len(lst5), 5)
            self.assertEqual(lst2, lst5[:2])  # a larger topk extends the same list
            self.assertEqual(lstf, [h["document"] for h in lst2])
            scores = [h["score"] for h in lst5]
            self.assertEqual(scores, sorted(scores, reverse=True))
            self.assertEqual(len(set(scores)), 5)
            for h in lst5:
                d = h["document"]
                self.assertEqual(set(d), {"id", "contents", "title", "text", "url"})
                self.assertEqual(d["contents"], '"%s"\n%s' % (d["title"], d["text"]))
                docs.setdefault(d["id"], d)
                self.assertEqual(docs[d["id"]], d)
        for lst in small:  # a 3-document corpus: 3 distinct hits at most, the same documents for every query
            self.assertEqual(sorted(h["document"]["id"] for h in lst), ["mock-0", "mock-1", "mock-2"])
        self.assertEqual({h["document"]["id"]: h["document"] for h in small[0]},
                         {h["document"]["id"]: h["document"] for h in small[1]})


class Knobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway({"backends": [
            mock("hits", hits=2),
            mock("empty", empty_rate=0.5),
            mock("blank", blank_rate=1),
            mock("slow", latency_ms=300, jitter_ms=100, cache=False),
            mock("down", error_rate=1),
            mock("timeouts", error_rate=1, error_status="timeout"),
            mock("flaky", error_rate=0.5, cache=False),
            mock("nopages", pages=False),
            mock("fast", latency_ms=0),
        ]})
        cls.root = {b["name"]: b for b in cls.gw.get("/").json()["backends"]}

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_hits_empty_blank(self):
        r = self.gw.retrieve(QUERIES, topk=5, path="/retrieve/hits").json()["result"]
        self.assertTrue(all(len(l) == 2 for l in r))
        qs = ["empty %d" % i for i in range(200)]
        lists = self.gw.retrieve(qs, topk=3, path="/retrieve/empty").json()["result"]
        empty = [q for q, l in zip(qs, lists) if not l]
        self.assertTrue(60 <= len(empty) <= 140, len(empty))
        self.assertTrue(all(len(l) == 3 for l in lists if l))
        again = self.gw.retrieve(qs, topk=3, path="/retrieve/empty").json()["result"]
        self.assertEqual([q for q, l in zip(qs, again) if not l], empty)  # chosen by the text
        for l in self.gw.retrieve(QUERIES, topk=3, path="/retrieve/blank").json()["result"]:
            self.assertTrue(all(h["document"]["contents"] == '""\n' and h["document"]["text"] == "" for h in l))

    def test_latency(self):
        t0 = time.time()
        r = self.gw.retrieve(["slow one"], path="/retrieve/slow")
        took = time.time() - t0
        self.assertEqual(r.status, 200, r)
        self.assertGreaterEqual(took, 0.3)
        self.assertLess(took, sgtest.scaled(5))
        r = self.gw.retrieve(["slow two"], path="/retrieve/slow", headers={"X-Timeout-Ms": "100"})
        self.assertEqual(r.status, 504, r)  # cancelled by the gateway's deadline

    def test_errors(self):
        r = self.gw.retrieve(["x"], path="/retrieve/down")
        self.assertEqual((r.status, r.json()["error"]["type"], r.headers.get("retry-after")), (503, "unavailable", "1"))
        self.assertIn("injected failure", r.json()["error"]["message"])
        r = self.gw.retrieve(["x"], path="/retrieve/timeouts")
        self.assertEqual((r.status, r.json()["error"]["type"]), (504, "timeout"))
        statuses = [self.gw.retrieve(["flaky %d" % i], path="/retrieve/flaky").status for i in range(200)]
        failed = statuses.count(503)
        self.assertEqual(failed + statuses.count(200), 200)
        self.assertTrue(50 <= failed <= 150, failed)
        self.assertEqual(self.gw.metric("searchgate_backend_mock_injected_errors_total", backend="flaky"), failed)

    def test_access(self):
        urls = ["https://en.wikipedia.org/wiki/Hamlet", "https://example.org/x"]
        r = self.gw.post("/access/hits", {"urls": urls})
        self.assertEqual(r.status, 200, r)
        pages = r.json()["result"]
        self.assertEqual([p["url"] for p in pages], urls)
        self.assertTrue(all(p["contents"].startswith("Mock page ") for p in pages))
        self.assertEqual(self.gw.post("/access/hits", {"urls": urls}).json(), r.json())
        self.assertTrue(self.root["hits"]["access"])
        self.assertFalse(self.root["nopages"]["access"])
        r = self.gw.post("/access/nopages", {"urls": urls})  # no page store: a null page per URL (docs/api.md)
        self.assertEqual((r.status, r.json()["result"]), (200, [None] * len(urls)))

    def test_identity(self):
        """What changes answers changes the data fingerprint (and the cache keys); latency and errors do not."""
        data = {n: b["provenance"]["data"] for n, b in self.root.items()}
        self.assertEqual(data["slow"], data["fast"])
        self.assertEqual(data["down"], data["fast"])
        self.assertNotEqual(data["hits"], data["fast"])
        self.assertNotEqual(data["empty"], data["fast"])
        self.assertIn("mock1:seed=0:corpus=1000000:hits=2", self.root["hits"]["provenance"]["identity"])


class ShippedConfig(unittest.TestCase):
    """configs/mock.json (docs/clients.md, CI without a retriever) as shipped, but for the port."""

    def test_mock_config(self):
        path = os.path.join(sgtest.SOURCE_DIR, "configs", "mock.json")
        check = subprocess.run([sgtest.binary("searchgate"), "--check", "--port", "0", "--config", path], capture_output=True,
                               text=True, timeout=sgtest.scaled(30))
        self.assertEqual(check.returncode, 0, check.stderr)
        with open(path) as f:
            cfg = json.load(f)
        gw = Gateway(cfg)
        try:
            r = gw.retrieve(["who wrote hamlet"], topk=1, return_scores=False)
            self.assertEqual(r.json()["result"][0][0]["id"], "mock-558816")
            statuses = [gw.retrieve(["flaky %d" % i], path="/retrieve/mock-flaky").status for i in range(60)]
            self.assertEqual(set(statuses), {200, 503})
            self.assertEqual(gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet"]}).status, 200)
        finally:
            gw.stop()


class Config(unittest.TestCase):
    def test_errors(self):
        for cfg, needle in (({"seed": -1}, "config.seed: expected an integer in [0, 1000000000000], got -1"),
                            ({"error_rate": 1.5}, "config.error_rate: expected a number in [0, 1], got 1.5"),
                            ({"error_status": "teapot"}, "config.error_status"),
                            ({"corpus": 5}, "config.corpus: unknown key")):
            gw = Gateway({"backends": [mock(**cfg)]}, expect_fail=True)
            rc = gw.wait_exit()
            log = gw.read_log()
            self.assertEqual(rc, 1, log)
            self.assertIn(needle, log)


if __name__ == "__main__":
    sgtest.main()
