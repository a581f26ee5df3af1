"""The qdrant backend end to end: the real searchgate, sg_qdrant.so and the e5 encoder (tiny
fixture model, 64-d) against the fake Qdrant of fakes/fake_qdrant.py (no Qdrant server can run on
the build machines). The fake collection holds the fixture's golden query embeddings, so a golden
text must find its own point first."""
import json
import os
import time
import unittest

import rtest
from rtest import backend, gateway, scaled, wait_for
from fake_qdrant import FakeQdrant

MODEL = os.path.join(rtest.sgtest.FIXTURES, "e5-tiny")
with open(os.path.join(MODEL, "golden.jsonl")) as f:
    GOLDEN = [json.loads(line) for line in f]
KEY_ENV = "SG_TEST_QDRANT_KEY"


def qcfg(fake, **kw):
    cfg = {"url": fake.url, "collection": fake.collection, "model": MODEL, "backoff_ms": 10}
    cfg.update(kw)
    return cfg


def fill(fake, payloadless=()):
    """One point per golden case: vector = its query embedding, payload = a corpus-like row."""
    for g in GOLDEN:
        payload = None if g["id"] in payloadless else {"id": str(g["id"]), "contents": "\"%s\"\n%s" % (g["tag"], g["text"])}
        fake.upsert(1000 + g["id"], g["embedding"], payload)


def simple(texts):
    """Golden cases with plain text (the gateway rejects nothing of these)."""
    return [g for g in GOLDEN if g["text"] in texts]


class QBase(rtest.FakeTestCase):
    fake_class = FakeQdrant


class TestSearch(QBase):
    def test_batch_query_shape_vectors_and_hits(self):
        f = self.fake()
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, hnsw_ef=128, exact=True, score_threshold=-1.0)))
        cases = [g for g in GOLDEN if g["tag"] == "english"][:3] or GOLDEN[:3]
        queries = [g["text"] for g in cases]
        f.server.reset()
        r = self.gw.retrieve(queries, topk=2, return_scores=True)
        self.assertEqual(r.status, 200, r)
        reqs = f.query_requests()
        self.assertEqual(len(reqs), 1, "a multi-query request must be one batch call")
        self.assertEqual(reqs[0].path, "/collections/wiki_collection/points/query/batch")
        body = reqs[0].json()
        self.assertEqual(len(body["searches"]), 3)
        for g, s in zip(cases, body["searches"]):
            self.assertEqual(s["limit"], 2)
            self.assertIs(s["with_payload"], True)
            self.assertEqual(s["params"], {"hnsw_ef": 128, "exact": True})
            self.assertEqual(s["score_threshold"], -1.0)
            self.assertEqual(len(s["query"]), 64)
            # the vector is the e5 query embedding ("query: " prefix, mean pooling, L2 norm)
            self.assertLess(max(abs(a - b) for a, b in zip(s["query"], g["embedding"])), 1e-5)
        res = r.json()["result"]
        for g, lst in zip(cases, res):
            self.assertEqual(len(lst), 2)
            top = lst[0]
            self.assertEqual(top["document"], {"id": str(g["id"]), "contents": "\"%s\"\n%s" % (g["tag"], g["text"]), "url": ""})
            self.assertAlmostEqual(top["score"], 1.0, places=4)
            self.assertGreaterEqual(lst[0]["score"], lst[1]["score"])
        flat = self.gw.retrieve(queries, topk=2, return_scores=False)
        self.assertEqual(flat.status, 200, flat)
        self.assertEqual(flat.json()["result"], [[it["document"] for it in lst] for lst in res])

    def test_payloadless_points_and_defaults(self):
        f = self.fake()
        fill(f, payloadless={GOLDEN[0]["id"]})
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f)))
        r = self.gw.retrieve([GOLDEN[0]["text"]], topk=3)
        self.assertEqual(r.status, 200, r)
        top = r.json()["result"][0][0]
        self.assertEqual(top["document"], {"id": str(1000 + GOLDEN[0]["id"]), "contents": "", "url": ""})
        s = f.query_requests()[-1].json()["searches"][0]
        self.assertNotIn("params", s)  # nothing configured: Qdrant's defaults
        self.assertNotIn("score_threshold", s)

    def test_api_key(self):
        f = self.fake(api_key="qd-secret")
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, api_key_env=KEY_ENV)), env={KEY_ENV: "qd-secret"})
        r = self.gw.retrieve([GOLDEN[1]["text"]], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(f.query_requests()[-1].headers["api-key"], "qd-secret")
        # the key changes under our feet: a clear 503, never the key in the message
        f.api_key = "rotated"
        r = self.gw.retrieve([GOLDEN[2]["text"]], topk=1)
        self.assertEqual(r.status, 503, r)
        self.assertIn("Invalid API key or JWT", r.body.decode())
        self.assertNotIn("qd-secret", r.body.decode())
        self.assertEqual(self.gw.get("/health").status, 503)
        log = self.gw.stop()
        self.gw = None
        self.assertNotIn("qd-secret", log)

    def test_named_vector(self):
        f = self.fake(vector_name="dense")
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, vector="dense")))
        r = self.gw.retrieve([GOLDEN[3]["text"]], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(f.query_requests()[-1].json()["searches"][0]["using"], "dense")

    def test_fallback_when_qdrant_is_down(self):
        f = self.fake()
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, retries=0), fallback="example"), rtest.sgtest.example_backend())
        f.stop()
        self.fakes.remove(f)
        r = self.gw.retrieve(["who wrote hamlet"], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertIn("Hamlet", r.json()["result"][0][0]["document"]["contents"])
        self.assertEqual(self.gw.metric("searchgate_fallbacks_total", backend="wiki"), 1)


class TestErrors(QBase):
    def test_error_mapping(self):
        f = self.fake()
        fill(f)
        # the plugin's timeout also bounds its start-up check of the collection: room for a loaded
        # (or sanitized) machine, and the delayed answer well past it
        timeout_ms = int(1000 * scaled(1.0))
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, retries=0, timeout_ms=timeout_ms)))
        q = [GOLDEN[4]["text"]]
        cases = [
            ({"status": 400, "body": {"status": {"error": "Wrong input: Vector dimension error: expected dim: 64, got 3"},
                                      "time": 0.0, "result": None}}, 502, "Vector dimension error"),
            ({"status": 500, "body": {"status": {"error": "Service internal error: disk on fire"}, "time": 0.0}}, 502,
             "disk on fire"),
            ({"status": 503, "retry_after": 2}, 503, "unavailable"),
            ({"status": 429}, 503, "rate limit"),
            ({"garbage": b"<html>oops</html>"}, 502, "malformed JSON"),
            ({"delay": 3.0 * timeout_ms / 1000.0}, 504, "in time"),
            ({"close": True}, 502, "Qdrant"),
        ]
        for entry, status, needle in cases:
            f.script = [entry]
            r = self.gw.retrieve(q, topk=1)
            self.assertEqual(r.status, status, (entry, r))
            self.assertIn(needle, r.body.decode(), entry)
        f.script = []
        self.assertEqual(self.gw.retrieve(q, topk=1).status, 200)

    def test_retry_then_success(self):
        f = self.fake()
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, retries=2)))
        f.script = [{"status": 502}, {"status": 503}, {}]
        r = self.gw.retrieve([GOLDEN[5]["text"]], topk=1)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.gw.metric("searchgate_backend_qdrant_retries_total"), 2)

    def test_deadline_cancels(self):
        f = self.fake()
        fill(f)
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, retries=0), timeout_ms=300))
        f.script = [{"delay": 3.0}, {}]
        t0 = time.time()
        r = self.gw.retrieve([GOLDEN[6]["text"]], topk=1)
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(2.0))


class TestStartup(QBase):
    def fails(self, cfg, needle, env=None):
        g = rtest.Gateway({"backends": [backend("wiki", "qdrant", cfg)]}, env=env, expect_fail=True)
        self.assertNotEqual(g.wait_exit(30), 0)
        log = g.read_log()
        self.assertIn(needle, log)
        return log

    def test_checks(self):
        f = self.fake()
        self.fails(qcfg(f, collection="nope"), "has no collection \"nope\"")
        self.fails(qcfg(f, collection="nope"), "doesn't exist")
        g = self.fake(dim=32, collection="small")
        self.fails(qcfg(g), "64-dimensional vectors but collection \"small\" holds 32-dimensional")
        k = self.fake(api_key="needed", collection="locked")
        self.fails(qcfg(k), "Must provide an API key")
        log = self.fails(qcfg(k, api_key_env=KEY_ENV), "Invalid API key or JWT", env={KEY_ENV: "wrong-one"})
        self.assertNotIn("wrong-one", log)
        self.fails(qcfg(f, vector="dense"), "no vector named \"dense\"")
        self.fails({"url": "http://127.0.0.1:%d" % rtest.closed_port(), "model": MODEL}, "cannot reach Qdrant")
        self.fails(qcfg(f, model="/nonexistent/model"), "config.model")
        self.fails({"collection": "x"}, "config.model")

    def test_unchecked_start_and_missing_collection_at_query_time(self):
        f = self.fake()
        self.gw = gateway(backend("wiki", "qdrant", qcfg(f, collection="later", check_collection=False, retries=0)))
        r = self.gw.retrieve(["anything"], topk=1)
        self.assertEqual(r.status, 503, r)
        self.assertIn("later", r.body.decode())
        self.assertIn("doesn't exist", r.body.decode())


if __name__ == "__main__":
    unittest.main(verbosity=2)
