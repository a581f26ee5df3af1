"""The rerank route option end to end: the real searchgate with the example plugin as the first
stage and the tiny random cross-encoder of tests/fixtures/xenc-tiny, checked against the plain-torch
reference of xenc_ref.py (Search-R1's passages, CrossEncoder's scores, a stable sort)."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, Redis, example_backend, parallel, scaled, FIXTURES
import xenc_ref

TINY = os.path.join(FIXTURES, "xenc-tiny")
TINY3 = os.path.join(FIXTURES, "xenc-tiny-3labels")
TOL = 1e-5


def long_words(n, seed):
    words = ("the of and in to was is for on as by with he at from his an were are which this also be has or had its first "
             "new one their after two who they her but she been other when time all during there would into city river "
             "church war school university population family album season film game team league world state").split()
    x = seed
    out = []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(words[x % len(words)])
    return " ".join(out)


DOCS = [
    {"id": "0", "contents": "\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "1", "contents": "\"Paris\"\nParis is the capital and largest city of France."},
    {"id": "2", "contents": "\"Tokyo\"\nTokyo is the capital of Japan. 東京都 is its name."},
    {"id": "3", "contents": "\"River Thames\"\nThe Thames is a river that flows through London, the capital city."},
    {"id": "4", "contents": "no title line: the capital of nothing in particular"},
    {"id": "5", "contents": "\"Zürich\"\nZürich is the largest city in Switzerland.\nIts second line is here."},
    {"id": "6", "contents": "\"A long one\"\nThe capital city " + long_words(300, 7)},
    {"id": "7", "contents": "\"Twin\"\nThe same text twice: the capital of twins."},
    {"id": "8", "contents": "\"Twin\"\nThe same text twice: the capital of twins."},
    {"id": "9", "contents": "\"Café\"\nA café in the capital serves crème brûlée [SEP] and [MASK] tokens."},
]

QUERIES = ["what is the capital city", "capital of Japan", "Who wrote Hamlet?", "river in the capital city", "twins capital"]


def rerank_route(name="rr", model=TINY, docs=DOCS, **rerank):
    conf = {"model": model, "candidates": 8, "max_length": 64}
    conf.update(rerank)
    e = example_backend(name, documents=docs)
    e["rerank"] = conf
    return e


def ids(resp_list):
    return [it["document"]["id"] for it in resp_list]


class Golden(unittest.TestCase):
    """Order and scores equal the reference's (tolerance 1e-5), ties keep the first-stage order."""

    @classmethod
    def setUpClass(cls):
        cls.ref = xenc_ref.CrossEncoder(TINY)
        plain = example_backend("plain", documents=DOCS, cache=False)
        rr = rerank_route()
        rr["cache"] = False
        rr_all = rerank_route("all", candidates=10, max_length=512)
        rr_all["cache"] = False
        cls.gw = Gateway({"backends": [plain, rr, rr_all]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def first_stage(self, q, k):
        r = self.gw.retrieve([q], topk=k, path="/retrieve/plain")
        self.assertEqual(r.status, 200, r)
        return [it["document"] for it in r.json()["result"][0]]

    def check(self, route, q, topk, candidates, max_length):
        want = self.ref.rerank(q, self.first_stage(q, candidates), topk, max_length)
        r = self.gw.retrieve([q], topk=topk, path="/retrieve/" + route)
        self.assertEqual(r.status, 200, r)
        got = r.json()["result"][0]
        self.assertEqual(ids(got), [d["id"] for d, _ in want], q)
        for g, (d, s) in zip(got, want):
            self.assertEqual(g["document"], d)
            self.assertLessEqual(abs(g["score"] - s), TOL, (q, d["id"], g["score"], s))
        return got

    def test_order_and_scores(self):
        for q in QUERIES:
            for topk in (1, 3, 8):
                self.check("rr", q, topk, 8, 64)

    def test_every_candidate_full_length(self):
        for q in QUERIES:
            got = self.check("all", q, 10, 10, 512)
            self.assertEqual(sorted(ids(got)), [str(i) for i in range(10)])
            pos = ids(got)
            # the twins score the same: the first stage's order (7 before 8) decides
            self.assertLess(pos.index("7"), pos.index("8"))
            scores = [g["score"] for g in got]
            self.assertEqual(scores, sorted(scores, reverse=True))

    def test_flat_shape_and_batch(self):
        r = self.gw.retrieve(QUERIES, topk=3, path="/retrieve/rr", return_scores=False)
        self.assertEqual(r.status, 200, r)
        for q, lst in zip(QUERIES, r.json()["result"]):
            want = self.ref.rerank(q, self.first_stage(q, 8), 3, 64)
            self.assertEqual([d["id"] for d in lst], [d["id"] for d, _ in want])

    def test_topk_above_candidates_reranks_that_many(self):
        q = QUERIES[0]
        self.check("rr", q, 10, 10, 64)

    def test_metrics(self):
        before = self.gw.metric("searchgate_rerank_pairs_total", backend="rr")
        q = "metrics query: the twins capital"
        r = self.gw.retrieve([q], topk=2, path="/retrieve/rr")
        self.assertEqual(r.status, 200, r)
        first = self.first_stage(q, 8)
        self.assertEqual([d["id"] for d in first[:2]], ["7", "8"])
        # identical passages are scored once
        distinct = len(set(xenc_ref.passage(d) for d in first))
        self.assertEqual(distinct, 7)
        self.assertEqual(self.gw.metric("searchgate_rerank_pairs_total", backend="rr") - before, distinct)
        self.assertGreaterEqual(self.gw.metric("searchgate_rerank_duration_seconds_count", backend="rr"), 1)
        self.assertEqual(self.gw.metric("searchgate_rerank_pending_pairs", backend="rr"), 0)
        self.assertEqual(self.gw.metric("searchgate_rerank_queued_pairs", backend="rr"), 0)
        self.assertEqual(self.gw.metric("searchgate_rerank_queue_limit_pairs", backend="rr"), 10000)


class Cache(unittest.TestCase):
    """Cached per (route, model, candidates, max_length, topk, query); identical queries in flight
    are reranked once."""

    def setUp(self):
        self.redis = Redis()
        self.gws = []

    def tearDown(self):
        for g in self.gws:
            g.stop()
        self.redis.close()

    def start(self, **rerank):
        rr = rerank_route(docs=DOCS[:8] + DOCS[9:], **rerank)  # no twins: every candidate is a scored pair
        rr["config"]["delay_ms"] = 200
        g = Gateway({"backends": [rr], "cache": {"redis": {"host": "127.0.0.1", "port": self.redis.port}}})
        self.gws.append(g)
        return g

    def stop(self, g):
        self.gws.remove(g)
        g.stop()

    def ask(self, g, q="what is the capital city", topk=3):
        r = g.retrieve([q], topk=topk)
        self.assertEqual(r.status, 200, r)
        return r.json()["result"][0]

    def wait_keys(self, n):
        self.assertTrue(sgtest.wait_for(lambda: int(self.redis.command("DBSIZE")) >= n, 5), "Redis never got %d keys" % n)

    def test_repeat_hits_and_other_settings_miss(self):
        g = self.start()
        first = self.ask(g)
        self.assertEqual(g.metric("searchgate_rerank_pairs_total"), 8)
        self.assertEqual(self.ask(g), first)  # L1
        self.assertEqual(g.metric("searchgate_cache_hits_total", layer="l1"), 1)
        self.assertEqual(g.metric("searchgate_rerank_pairs_total"), 8)
        self.wait_keys(1)
        self.stop(g)
        g = self.start()  # same settings, fresh process: Redis answers
        self.assertEqual(self.ask(g), first)
        self.assertEqual(g.metric("searchgate_cache_hits_total", layer="redis"), 1)
        self.assertEqual(g.metric("searchgate_rerank_pairs_total"), 0)
        self.stop(g)
        for other in ({"candidates": 6}, {"max_length": 32}, {"model": TINY3}):
            g = self.start(**other)
            got = self.ask(g)
            self.assertEqual(g.metric("searchgate_cache_hits_total"), 0, other)
            self.assertEqual(g.metric("searchgate_cache_misses_total"), 1, other)
            self.assertEqual(g.metric("searchgate_rerank_pairs_total"), other.get("candidates", 8), other)
            if "model" in other:
                self.assertNotEqual([x["score"] for x in got], [x["score"] for x in first])
            self.stop(g)
        g = self.start()  # a different topk is another entry too
        self.ask(g, topk=2)
        self.assertEqual(g.metric("searchgate_cache_hits_total"), 0)

    def test_singleflight(self):
        g = self.start()
        out = parallel(lambda: self.ask(g, q="the same question"), [()] * 6)
        self.assertTrue(all(o == out[0] for o in out))
        self.assertEqual(g.metric("searchgate_rerank_pairs_total"), 8)
        self.assertEqual(g.metric("searchgate_rerank_calls_total"), 1)
        self.assertEqual(g.metric("searchgate_coalesced_queries_total") + g.metric("searchgate_cache_hits_total"), 5)


class Slow(unittest.TestCase):
    """A cross-encoder slow enough (hidden 128, 4 layers, 40 long passages at max_length 384) that a
    call's scoring outlasts a short deadline and a second call finds the stage busy. Each test first
    times one whole call on this machine (`full`) and sets its deadlines from that, so the checks
    hold on a fast idle machine and on a loaded one alike."""

    N = 20 if sgtest.SANITIZED else 40  # the sanitizer build computes at -O0: a smaller load is slow enough
    MAX_LENGTH = 128 if sgtest.SANITIZED else 384

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgrerank-")
        cls.model = os.path.join(cls.dir, "model")
        subprocess.run(["/usr/bin/python3", os.path.join(sgtest.SOURCE_DIR, "tests", "bench", "local", "make_model.py"), cls.model,
                        "--hidden", "128", "--layers", "4", "--heads", "4", "--intermediate", "512", "--labels", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.docs = [{"id": str(i), "contents": "\"Doc %d\"\n%s" % (i, long_words(500, i + 1))} for i in range(cls.N)]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def gateway(self, **rerank):
        conf = {"model": self.model, "candidates": self.N, "max_length": self.MAX_LENGTH, "batch": 2, "workers": 1}
        conf.update(rerank)
        e = example_backend("slow", documents=self.docs, cache=False, timeout_ms=600000)
        e["rerank"] = conf
        g = Gateway({"backends": [e]})
        for i in range(2):  # the second call is the warm one
            t0 = time.time()
            r = g.post("/retrieve", {"queries": ["calibration %d: how long does one call take" % i], "topk": 3}, timeout=600)
            self.full = time.time() - t0
            self.assertEqual(r.status, 200, r)
        self.base = g.metric("searchgate_rerank_pairs_total")
        self.assertEqual(self.base, 2 * self.N)
        return g

    def deadline_ms(self):
        return str(max(20, int(self.full * 1000 / 5)))

    def test_deadline(self):
        g = self.gateway()
        try:
            r = g.retrieve(["the city of the river"], topk=3, headers={"X-Timeout-Ms": self.deadline_ms()})
            self.assertEqual(r.status, 504, r)
            # the stage stops scoring at its next pass instead of finishing the call's pairs
            self.assertTrue(sgtest.wait_for(lambda: g.metric("searchgate_rerank_dropped_total") >= 1, 2 * self.full + 5),
                            g.get("/metrics").body.decode()[-3000:])
            self.assertTrue(sgtest.wait_for(lambda: g.metric("searchgate_rerank_pending_pairs") == 0, 2 * self.full + 5))
            self.assertLess(g.metric("searchgate_rerank_pairs_total") - self.base, self.N)
            self.assertEqual(g.metric("searchgate_rerank_queries_total"), 2)  # the calibration only
        finally:
            g.stop()

    def test_waiting_call_leaves_the_queue(self):
        g = self.gateway()
        try:
            first = {}

            def slow():  # three queries in one call: three times the calibrated call's work
                first["r"] = g.post("/retrieve", {"queries": ["one question about the city", "a question on rivers", "and one on schools"],
                                                  "topk": 3}, timeout=600)

            t = threading.Thread(target=slow)
            t.start()
            self.assertTrue(sgtest.wait_for(lambda: g.metric("searchgate_rerank_pairs_total") > self.base, 2 * self.full + 5))
            # the only worker is busy: this call waits in the queue until its deadline
            r = g.retrieve(["a second question"], topk=3, headers={"X-Timeout-Ms": self.deadline_ms()})
            self.assertEqual(r.status, 504, r)
            self.assertTrue(sgtest.wait_for(lambda: g.metric("searchgate_rerank_dropped_total", reason="canceled") == 1, 5))
            self.assertEqual(g.metric("searchgate_rerank_queued_pairs"), 0)
            t.join()
            self.assertEqual(first["r"].status, 200, first["r"])
            self.assertEqual(g.metric("searchgate_rerank_pairs_total") - self.base, 3 * self.N)  # the dropped call was never scored
            self.assertEqual(g.metric("searchgate_rerank_pending_pairs"), 0)
        finally:
            g.stop()

    def test_overload(self):
        g = self.gateway(max_queue=self.N)
        try:
            first = {}

            def slow():
                first["r"] = g.post("/retrieve", {"queries": ["one question about the city"], "topk": 3}, timeout=600)

            t = threading.Thread(target=slow)
            t.start()
            self.assertTrue(sgtest.wait_for(lambda: g.metric("searchgate_rerank_pending_pairs") == self.N, 5))
            r = g.retrieve(["another question"], topk=3)
            t.join()
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.headers.get("retry-after"), "1")
            self.assertEqual(r.json()["error"]["type"], "overloaded")
            self.assertIn("max_queue %d" % self.N, r.json()["error"]["message"])
            self.assertEqual(g.metric("searchgate_rerank_shed_total"), 1)
            self.assertEqual(first["r"].status, 200, first["r"])
            self.assertEqual(len(first["r"].json()["result"][0]), 3)
        finally:
            g.stop()


class StartUp(unittest.TestCase):
    """Broken rerank settings stop start-up (and --check) with a message naming the key."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgrerankcheck-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_gateway(self, cfg, *args):
        path = os.path.join(self.dir, "gw.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([sgtest.binary("searchgate"), "--config", path, "--port", "0"] + list(args), capture_output=True,
                           text=True, timeout=scaled(60))
        return p.returncode, p.stdout + p.stderr

    def refused(self, rerank, needle, topk=None):
        e = example_backend("rr", documents=DOCS)
        e["rerank"] = rerank
        if topk is not None:
            e["topk"] = topk
        for extra in (["--check"], []):
            rc, out = self.run_gateway({"backends": [e]}, *extra)
            self.assertEqual(rc, 1, "%s: %s" % (extra, out))
            self.assertIn(needle, out)
            self.assertNotIn("listening on", out)

    def test_valid(self):
        e = example_backend("rr", documents=DOCS)
        e["rerank"] = {"model": TINY, "candidates": 5}
        rc, out = self.run_gateway({"backends": [e]}, "--check")
        self.assertEqual(rc, 0, out)
        self.assertIn("is valid", out)

    def test_bad_settings(self):
        broken = os.path.join(self.dir, "broken")
        os.makedirs(broken)
        with open(os.path.join(broken, "config.json"), "w") as f:
            f.write('{"model_type": "bert", "architectures": ["BertModel"]}')
        missing = os.path.join(self.dir, "nowhere")
        self.refused({"model": missing}, "rerank.model %s" % missing)
        self.refused({"model": broken}, "rerank.model %s" % broken)
        self.refused({"candidates": 5}, "backends[0].rerank.model")
        self.refused({"model": TINY, "candidates": 2}, "backends[0].rerank.candidates", topk=3)
        self.refused({"model": TINY, "candidates": 0}, "backends[0].rerank.candidates")
        self.refused({"model": TINY, "max_length": 2}, "backends[0].rerank.max_length")
        self.refused({"model": TINY, "max_length": 4096}, "rerank.max_length 4096 exceeds the model's max_position_embeddings")
        self.refused({"model": TINY, "candidates": 30, "max_queue": 10}, "backends[0].rerank.max_queue")
        self.refused({"model": TINY, "score_label": 3}, "rerank.score_label 3")
        self.refused({"model": TINY, "shards": 2}, "backends[0].rerank")
        self.refused("yes", "backends[0].rerank")


if __name__ == "__main__":
    unittest.main(verbosity=2)
