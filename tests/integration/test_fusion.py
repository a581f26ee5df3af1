"""Hybrid fusion routes (docs/fusion.md) with the real components: a BM25 route over an index built
here with the real tool, the example plugin over the same documents, and fusion routes over them.
The fused order and scores must equal a fusion computed in Python from the legs' own /retrieve
answers; failing and slow legs give partial answers with a header and a metric; start-up refuses
bad fusion settings."""
import json
import math
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest

import sgtest

K = 60.0
WORDS = ("volcano lava crater eruption mountain river lake city capital france paris tokyo japan bridge roman empire "
         "science music history war peace king queen island ocean ship star planet moon forest bird").split()


def corpus():
    """Passages with ids "0".."59"; a few carry a url (the identity of the example's copies too)."""
    rnd = random.Random(14)
    rows = []
    for i in range(60):
        title = " ".join(rnd.choice(WORDS) for _ in range(2))
        body = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 25)))
        row = {"id": str(i), "contents": '"%s"\n%s' % (title, body)}
        if i % 5 == 0:
            row["url"] = "https://example.org/%d" % i
        rows.append(row)
    return rows


DOCS = corpus()
QUERIES = ["volcano lava eruption", "paris france capital", "ocean ship island", "king queen war peace",
           "roman empire history", "moon star planet", "bird forest river", "tokyo japan city bridge", "music science"]


def identity(doc):
    """The merge's document identity: a non-empty id, else a non-empty url, else the contents."""
    if isinstance(doc.get("id"), str) and doc["id"] != "":
        return ("i", doc["id"])
    if isinstance(doc.get("url"), str) and doc["url"] != "":
        return ("u", doc["url"])
    if isinstance(doc.get("contents"), str):
        return ("c", doc["contents"])
    return ("d", json.dumps(doc))


def norm_stats(scores):
    fin = [s for s in scores if s is not None and math.isfinite(s)]
    if not fin:
        return None
    mean = sum(fin) / len(fin)
    sq = 0.0
    for s in fin:
        sq += (s - mean) * (s - mean)
    return min(fin), max(fin), mean, math.sqrt(sq / len(fin))


def normalise(how, s, st):
    if s is None or not math.isfinite(s):
        return 0.0
    lo, hi, mean, sd = st
    if how == "minmax":
        return (s - lo) / (hi - lo) if hi > lo else 1.0
    if how == "zscore":
        return (s - mean) / sd if sd > 0 else 0.0
    return s


def fuse(legs, topk, method="rrf", k=K, weights=None, normalize=None):
    """legs: each leg's scored list (or None when it failed), in route order. Returns [(doc, score)]."""
    weights = weights or [1.0] * len(legs)
    normalize = normalize or ["minmax"] * len(legs)
    entries = {}
    for l, hits in enumerate(legs):
        if hits is None:
            continue
        seen, kept = set(), []
        for h in hits:
            key = identity(h["document"])
            if key in seen:
                continue
            seen.add(key)
            kept.append((key, h))
        st = norm_stats([h["score"] for _, h in kept]) if method == "weighted" else None
        for rank0, (key, h) in enumerate(kept):
            rank = rank0 + 1
            e = entries.get(key)
            if e is None:
                e = entries[key] = {"score": 0.0, "best": (1 << 40, 0), "doc": h["document"]}
            if method == "rrf":
                e["score"] += weights[l] / (k + rank)
            else:
                e["score"] += weights[l] * normalise(normalize[l], h["score"], st)
            if rank < e["best"][0]:
                e["best"] = (rank, l)
    order = sorted(entries.values(), key=lambda e: (-e["score"], e["best"][0], e["best"][1]))
    return [(e["doc"], e["score"]) for e in order[:topk]]


def build_bm25(dirpath):
    corpus_path = os.path.join(dirpath, "corpus.jsonl")
    with open(corpus_path, "w", encoding="utf-8") as f:
        for r in DOCS:
            f.write(json.dumps(r) + "\n")
    out = os.path.join(dirpath, "bm25")
    subprocess.run([sgtest.binary("searchgate-index-bm25"), corpus_path, out, "--no-progress", "--quiet"], check=True,
                   capture_output=True, timeout=sgtest.scaled(120))
    return out


def example(name, **cfg):
    route = {k: cfg.pop(k) for k in list(cfg) if k in ("topk", "timeout_ms", "cache", "max_inflight")}
    entry = {"name": name, "plugin": "example", "config": dict({"documents": DOCS}, **cfg)}
    entry.update(route)
    return entry


class FusionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sgfusion-")
        cls.index = build_bm25(cls.tmp)
        cls.pages = [{"url": "https://example.org/0", "contents": "page zero"}]
        cls.gw = sgtest.Gateway({
            "clients": {"trust_client_id_header": True},
            "backends": [
                {"name": "bm25", "plugin": "bm25", "config": {"index": cls.index}},
                example("ex", pages=cls.pages),
                example("slow", delay_ms=5000, timeout_ms=300),
                example("slow30", delay_ms=3000),
                example("down", error={"status": "unavailable", "message": "leg down"}),
                example("bad", error={"status": "upstream", "message": "leg upstream garbage"}),
                example("nocache", cache=False),
                {"name": "hy", "fusion": {"routes": ["bm25", "ex"], "method": "rrf", "k": 60}, "topk": 5},
                {"name": "hy-rev", "fusion": {"routes": ["ex", "bm25"], "k": 10, "weights": {"bm25": 2}}},
                {"name": "hyw", "fusion": {"routes": ["bm25", "ex"], "method": "weighted",
                                           "weights": {"bm25": 0.3, "ex": 0.7}, "normalize": {"bm25": "zscore"},
                                           "depth": 15}},
                {"name": "hyw-none", "fusion": {"routes": ["bm25", "ex"], "method": "weighted", "normalize": "none"}},
                {"name": "hy-slow", "fusion": {"routes": ["bm25", "slow"]}},
                {"name": "hy-slow30", "fusion": {"routes": ["ex", "slow30"]}},
                {"name": "hy-down", "fusion": {"routes": ["bm25", "down"]}},
                {"name": "hy-dead", "fusion": {"routes": ["down", "bad"]}},
                {"name": "hy-nopages", "fusion": {"routes": ["bm25", "nocache"]}},
                {"name": "hy-nc", "fusion": {"routes": ["nocache", "bm25"]}},
            ]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def legs(self, routes, queries, depth):
        out = []
        for r in routes:
            resp = self.gw.retrieve(queries, topk=depth, path="/retrieve/" + r)
            self.assertEqual(resp.status, 200, resp)
            out.append(resp.json()["result"])
        return out

    def check_fused(self, route, legs_routes, topk, depth, **method):
        got = self.gw.retrieve(QUERIES, topk=topk, path="/retrieve/" + route)
        self.assertEqual(got.status, 200, got)
        self.assertNotIn("x-searchgate-fusion-partial", got.headers)
        got = got.json()["result"]
        legs = self.legs(legs_routes, QUERIES, depth)
        for qi, q in enumerate(QUERIES):
            want = fuse([leg[qi] for leg in legs], topk, **method)
            self.assertEqual([(h["document"], h["score"]) for h in got[qi]], want, q)
            self.assertEqual(len(got[qi]), min(topk, len({identity(h["document"]) for leg in legs for h in leg[qi]})))

    def test_rrf_equals_python(self):
        # depth: max(topk, 10); the fused DOC is the first leg's (bm25's, with title and text)
        self.check_fused("hy", ["bm25", "ex"], 5, 10)
        self.check_fused("hy", ["bm25", "ex"], 12, 12)
        r = self.gw.retrieve(["volcano lava"], topk=3, path="/retrieve/hy").json()["result"][0]
        self.assertIn("title", r[0]["document"])

    def test_rrf_weights_k_and_route_order(self):
        self.check_fused("hy-rev", ["ex", "bm25"], 4, 10, k=10.0, weights=[1.0, 2.0])

    def test_weighted_equals_python(self):
        self.check_fused("hyw", ["bm25", "ex"], 6, 15, method="weighted", weights=[0.3, 0.7],
                         normalize=["zscore", "minmax"])
        self.check_fused("hyw-none", ["bm25", "ex"], 3, 10, method="weighted", normalize=["none", "none"])

    def test_default_topk_batch_repeats_and_flat_shape(self):
        qs = ["paris france", "ocean ship", "paris france", ""]
        r = self.gw.post("/retrieve", {"queries": qs, "backend": "hy", "return_scores": True})  # the body's "backend" field
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(len(res), 4)
        self.assertEqual([len(x) for x in res[:3]], [5, 5, 5])  # the route's topk
        self.assertEqual(res[0], res[2])
        flat = self.gw.retrieve(qs, topk=5, return_scores=False, path="/retrieve/hy").json()["result"]
        self.assertEqual(flat[:3], [[h["document"] for h in x] for x in res[:3]])
        self.assertEqual(self.gw.retrieve([], path="/retrieve/hy").json(), {"result": []})

    def test_partial_leg_timeout(self):
        before = self.gw.metric("searchgate_fusion_partial_total", route="hy-slow", leg="slow", reason="timeout")
        t0 = time.time()
        r = self.gw.retrieve(QUERIES[:3], topk=4, path="/retrieve/hy-slow")
        took = time.time() - t0
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("x-searchgate-fusion-partial"), "slow=timeout")
        self.assertLess(took, sgtest.scaled(3))  # the slow leg's own 300 ms timeout, not its 5 s delay
        legs = self.legs(["bm25"], QUERIES[:3], 10)
        for qi in range(3):
            self.assertEqual([(h["document"], h["score"]) for h in r.json()["result"][qi]],
                             fuse([legs[0][qi], None], 4))
        self.assertEqual(self.gw.metric("searchgate_fusion_partial_total", route="hy-slow", leg="slow", reason="timeout"),
                         before + 1)

    def test_shared_deadline(self):
        # the request's deadline (X-Timeout-Ms) bounds every leg: slow30 answers in 3 s, the request allows 400 ms
        t0 = time.time()
        r = self.gw.retrieve(["ocean ship"], topk=3, path="/retrieve/hy-slow30", headers={"X-Timeout-Ms": "400"})
        self.assertLess(time.time() - t0, sgtest.scaled(2.5))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("x-searchgate-fusion-partial"), "slow30=timeout")
        ex = self.legs(["ex"], ["ocean ship"], 10)[0][0]
        self.assertEqual([(h["document"], h["score"]) for h in r.json()["result"][0]], fuse([ex, None], 3))
        r = self.gw.retrieve(["ocean ship"], path="/retrieve/hy-slow30", headers={"X-Timeout-Ms": "0"})
        self.assertEqual(r.status, 422, r)

    def test_partial_leg_error(self):
        r = self.gw.retrieve(["king queen"], topk=3, path="/retrieve/hy-down")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("x-searchgate-fusion-partial"), "down=unavailable")
        self.assertEqual(len(r.json()["result"][0]), 3)
        self.assertGreaterEqual(
            self.gw.metric("searchgate_fusion_partial_total", route="hy-down", leg="down", reason="unavailable"), 1)

    def test_all_legs_fail(self):
        # 503 unavailable and 502 upstream: the more specific 502 is the answer, both messages in it
        r = self.gw.retrieve(["king queen"], path="/retrieve/hy-dead")
        self.assertEqual(r.status, 502, r)
        body = r.json()
        self.assertEqual(body["error"]["type"], "upstream_error")
        self.assertIn("leg down", body["error"]["message"])
        self.assertIn("leg upstream garbage", body["error"]["message"])
        self.assertEqual(self.gw.metric("searchgate_requests_total", backend="hy-dead", code="502"), 1)

    def test_search_params_refused(self):
        r = self.gw.retrieve(["ocean"], path="/retrieve/hy", search_params={"nprobe": 4})
        self.assertEqual(r.status, 422, r)
        self.assertIn("takes no search_params", r.json()["error"]["message"])

    def test_root_lists_fusion(self):
        root = self.gw.get("/").json()
        by = {b["name"]: b for b in root["backends"]}
        hy = by["hy"]
        self.assertEqual(hy["plugin"], "fusion")
        self.assertEqual(hy["retrieve"], "/retrieve/hy")
        self.assertEqual(hy["fusion"]["routes"], ["bm25", "ex"])
        self.assertEqual(hy["fusion"]["method"], "rrf")
        self.assertEqual(hy["fusion"]["k"], 60)
        self.assertTrue(hy["access"])
        self.assertEqual(hy["access_via"], "ex")
        self.assertEqual(by["hyw"]["fusion"]["normalize"], {"bm25": "zscore", "ex": "minmax"})
        self.assertEqual(by["hyw"]["fusion"]["weights"], {"bm25": 0.3, "ex": 0.7})
        self.assertFalse(by["hy-nopages"]["access"])

    def test_access(self):
        r = self.gw.post("/access/hy", {"urls": ["https://example.org/0", "https://nowhere"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["result"][0]["contents"], "page zero")
        self.assertIsNone(r.json()["result"][1])
        r = self.gw.post("/access/hy-nopages", {"urls": ["https://example.org/0", "https://example.org/1"]})
        self.assertEqual(r.status, 200, r)  # no leg has pages: a null page per URL, and the header says why
        self.assertEqual(r.json(), {"result": [None, None]})
        self.assertEqual(r.headers.get("x-searchgate-no-page-store"), "hy-nopages")
        self.assertEqual(self.gw.metric("searchgate_access_no_page_store_total", backend="hy-nopages"), 1)

    def test_legs_cached_fusion_not(self):
        # the legs keep their caches: a repeated fusion request makes no new plugin call on a cached leg,
        # and a leg with "cache": false is called every time (the fused list itself is not cached)
        q = ["crater eruption mountain %d" % time.time_ns()]
        calls = lambda b: self.gw.metric("searchgate_backend_calls_total", backend=b)  # noqa: E731
        bm0, nc0 = calls("bm25"), calls("nocache")
        first = self.gw.retrieve(q, path="/retrieve/hy-nc")
        self.assertEqual((calls("bm25"), calls("nocache")), (bm0 + 1, nc0 + 1))
        hits0 = self.gw.metric("searchgate_cache_hits_total", backend="bm25")
        second = self.gw.retrieve(q, path="/retrieve/hy-nc")
        self.assertEqual(first.json(), second.json())
        self.assertEqual((calls("bm25"), calls("nocache")), (bm0 + 1, nc0 + 2))
        self.assertEqual(self.gw.metric("searchgate_cache_hits_total", backend="bm25"), hits0 + 1)
        # and a leg's cache serves the route's own requests: the fused request warmed bm25 at depth 10
        self.gw.retrieve(q, topk=10, path="/retrieve/bm25")
        self.assertEqual(calls("bm25"), bm0 + 1)

    def test_client_counted_once(self):
        h = {"X-Client-Id": "fusion-counter"}
        for _ in range(2):
            self.assertEqual(self.gw.retrieve(["bird", "moon"], path="/retrieve/hy", headers=h).status, 200)
        self.assertEqual(self.gw.metric("searchgate_client_requests_total", client="id:fusion-counter"), 2)
        self.assertEqual(self.gw.metric("searchgate_client_queries_total", client="id:fusion-counter"), 4)


class FusionRateLimitTest(unittest.TestCase):
    """The client's rate limit is charged once per fusion request, in its queries, before the fan-out."""

    def test_charged_once(self):
        tmp = tempfile.mkdtemp(prefix="sgfusion-rl-")
        gw = sgtest.Gateway({
            "clients": {"default": {"rate": 0.001, "burst": 4, "mode": "reject"}},
            "backends": [example("a"), example("b", delay_ms=1), {"name": "ab", "fusion": {"routes": ["a", "b"]}}]})
        try:
            # 4 queries fit the burst of 4 exactly: charged once, not once per leg (that would be 8)
            r = gw.retrieve(["paris", "ocean", "moon", "king"], path="/retrieve/ab")
            self.assertEqual(r.status, 200, r)
            self.assertNotIn("x-searchgate-fusion-partial", r.headers)
            r = gw.retrieve(["paris"], path="/retrieve/ab")
            self.assertEqual(r.status, 429, r)
            self.assertIn("retry-after", r.headers)
            self.assertEqual(gw.metric("searchgate_backend_calls_total", backend="a"), 1)
        finally:
            gw.stop()
            shutil.rmtree(tmp, ignore_errors=True)


    def test_charged_once_global(self):
        # a "global" client: the shared limit lives in Redis (one Lua GCRA per fusion request)
        redis = sgtest.Redis()
        gw = sgtest.Gateway({
            "cache": {"redis": {"port": redis.port}},
            "clients": {"trust_client_id_header": True,
                        "default": {"rate": 0.001, "burst": 3, "mode": "reject", "global": True}},
            "backends": [example("a"), example("b"), {"name": "ab", "fusion": {"routes": ["a", "b"]}}]})
        try:
            deadline = time.time() + sgtest.scaled(10)
            while gw.get("/health").json()["cache"]["redis"] != "up" and time.time() < deadline:
                time.sleep(0.05)
            h = {"X-Client-Id": "global-job"}
            r = gw.retrieve(["paris", "ocean", "moon"], path="/retrieve/ab", headers=h)
            self.assertEqual(r.status, 200, r)
            self.assertNotIn("x-searchgate-fusion-partial", r.headers)
            r = gw.retrieve(["paris"], path="/retrieve/ab", headers=h)
            self.assertEqual(r.status, 429, r)
            self.assertEqual(gw.metric("searchgate_client_rate_limited_total", client="id:global-job"), 1)
        finally:
            gw.stop()
            redis.close()


class FusionStartupTest(unittest.TestCase):
    def check_refused(self, backends, needle):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.json")
            with open(path, "w") as f:
                json.dump({"listen": {"host": "127.0.0.1", "port": 0}, "backends": backends}, f)
            for extra in (["--check"], []):
                r = subprocess.run([sgtest.binary("searchgate"), "--config", path] + extra, capture_output=True, text=True,
                                   timeout=sgtest.scaled(30))
                self.assertEqual(r.returncode, 1, r)
                self.assertIn(needle, r.stderr)
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_refused(self):
        a, b = example("a"), example("b")
        self.check_refused([a, b, {"name": "f", "fusion": {"routes": ["a", "zz"]}}],
                           "backends[2].fusion.routes[1]: no route named zz is configured")
        self.check_refused([a, {"name": "f", "fusion": {"routes": ["a", "f"]}}], "names the fusion route itself")
        self.check_refused([a, b, {"name": "f", "fusion": {"routes": ["a", "g"]}}, {"name": "g", "fusion": {"routes": ["b", "f"]}}],
                           "names fusion route g; the legs of a fusion must be plugin routes")
        self.check_refused([a, {"name": "f", "fusion": {"routes": ["a"]}}], "expected 2 to 8 route names")
        self.check_refused([a, b, {"name": "f", "fusion": {"routes": ["a", "b"], "k": -5}}], "backends[2].fusion.k")
        self.check_refused([a, b, {"name": "f", "fusion": {"routes": ["a", "b"], "weights": {"a": -1}}}],
                           "backends[2].fusion.weights.a: expected a number in [0, 1000000]")

    def test_check_accepts(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.json")
            with open(path, "w") as f:
                json.dump({"listen": {"host": "127.0.0.1", "port": 0},
                           "backends": [example("a"), example("b"), {"name": "f", "fusion": {"routes": ["a", "b"]}}]}, f)
            r = subprocess.run([sgtest.binary("searchgate"), "--config", path, "--check"], capture_output=True, text=True,
                               timeout=sgtest.scaled(30))
            self.assertEqual(r.returncode, 0, r)


if __name__ == "__main__":
    sgtest.main()
