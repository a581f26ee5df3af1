"""searchgate-trace (docs/traces.md): `summary` of handwritten traces against numbers computed here,
the comparison of two traces, and `replay` against the real gateway -- the same route reproduces
the recorded answers exactly (ids, scores, batches), another route's differences are what the
comparison reports, batching, rate, failures and bad usage."""
import http.server
import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np

import sgtest
from sgtest import Gateway, example_backend


def tool(*args, check=True, stdin=None):
    p = subprocess.run([sgtest.binary("searchgate-trace")] + list(args), capture_output=True, text=True, input=stdin,
                       timeout=sgtest.scaled(120))
    if check and p.returncode != 0:
        raise AssertionError("searchgate-trace %s: %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def summary(*files):
    return json.loads(tool("summary", "--json", *files).stdout)


def write(path, lines, extra=""):
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        f.write(extra)


def line(req, i, n, q, ids, client="a", route="r", status=200, ms=1.0, cache="backend", empty=False, error=None):
    l = {"request": req, "i": i, "n": n, "client": client, "route": route, "op": "retrieve", "topk": 3, "query": q,
         "status": status, "ms": ms, "cache": cache}
    if status == 200:
        l.update(hits=len(ids), ids=ids, scores=[1.0] * len(ids), empty=empty)
    else:
        l["error"] = error
    return l


class Summary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgtool-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_stats(self):
        p = os.path.join(self.dir, "t.jsonl")
        lines = [
            line("1", 0, 3, "who wrote hamlet", ["0", "1"], ms=4.0),
            line("1", 1, 3, "capital of france", ["1"], ms=4.0),
            line("1", 2, 3, "who wrote hamlet", ["0", "1"], ms=4.0, cache="batch"),
            line("2", 0, 2, "the of and", [], ms=1.0, cache="l1"),
            line("2", 1, 2, "blank one", ["9"], ms=1.0, empty=True),
            line("3", 0, 1, "who wrote hamlet", [], status=504, ms=30.0, error="timeout"),
            line("4", 0, 1, "capital of france", ["1"], client="b", route="s", ms=2.0, cache="redis"),
        ]
        hashed = {"request": "5", "i": 0, "n": 1, "client": "b", "route": "s", "query_hash": "00ff", "status": 200, "hits": 1,
                  "ids": ["x"], "ms": 3.0}
        write(p, lines + [hashed], extra="not json\n{\"cut\": \n")
        doc = summary(p)
        t = doc["traces"][0]
        self.assertEqual((t["file"], t["lines"], t["malformed"]), (p, 8, 2))
        a = t["groups"][0]
        self.assertEqual((a["client"], a["route"]), ("a", "r"))
        self.assertEqual((a["queries"], a["requests"], a["distinct"]), (6, 3, 4))
        self.assertAlmostEqual(a["repeat_rate"], 1 - 4 / 6)
        self.assertEqual((a["answered"], a["zero_hits"], a["empty"], a["errors"]), (5, 1, 1, 1))
        self.assertAlmostEqual(a["zero_hit_share"], 1 / 5)
        self.assertAlmostEqual(a["empty_share"], 1 / 5)
        self.assertAlmostEqual(a["error_share"], 1 / 6)
        self.assertEqual(a["errors_by_type"], {"timeout": 1})
        self.assertEqual(a["cache"], {"backend": 4, "batch": 1, "l1": 1})
        # latency over requests (nearest rank of 1, 4, 30)
        self.assertEqual(a["latency_ms"], {"p50": 4.0, "p90": 30.0, "p99": 30.0, "max": 30.0})
        self.assertEqual([q["query"] for q in a["top_queries"]], ["who wrote hamlet", "blank one", "capital of france", "the of and"])
        self.assertEqual([q["count"] for q in a["top_queries"]], [3, 1, 1, 1])
        b = t["groups"][1]
        self.assertEqual((b["client"], b["route"], b["queries"], b["distinct"]), ("b", "s", 2, 2))
        self.assertEqual(sorted(q["query"] for q in b["top_queries"]), ["#00ff", "capital of france"])
        self.assertEqual((t["all"]["queries"], t["all"]["requests"], t["all"]["distinct"]), (8, 5, 5))
        self.assertEqual(doc["comparisons"], [])
        text = tool("summary", "--top", "1", p).stdout
        self.assertIn("client a, route r", text)
        self.assertIn("queries 6  requests 3  distinct 4  repeat rate 33.3%", text)
        self.assertIn('top queries:      3  "who wrote hamlet"', text)
        self.assertNotIn('"blank one"', text)
        # a trace read from standard input (rotated pieces concatenated)
        with open(p) as f:
            self.assertEqual(json.loads(tool("summary", "--json", "-", stdin=f.read()).stdout)["traces"][0]["lines"], 8)

    def test_comparison(self):
        old, new = os.path.join(self.dir, "old.jsonl"), os.path.join(self.dir, "new.jsonl")
        write(old, [line("1", 0, 1, "q1", ["a", "b", "c"]), line("2", 0, 1, "q2", ["a", "b", "c"]),
                    line("3", 0, 1, "q3", ["a", "b", "c"]), line("4", 0, 1, "q4", []),
                    line("5", 0, 1, "q5", ["z"]), line("6", 0, 1, "q1", ["other"]),  # a later answer is not compared
                    line("7", 0, 1, "q6", [], status=503, error="unavailable")])
        write(new, [line("1", 0, 1, "q1", ["a", "b", "c"]), line("2", 0, 1, "q2", ["b", "a", "d"]),
                    line("3", 0, 1, "q3", ["x", "y", "a", "b"]), line("4", 0, 1, "q4", []),
                    line("5", 0, 1, "q7", ["z"]), line("6", 0, 1, "q6", ["k"])])
        c = summary(old, new)["comparisons"][0]
        self.assertEqual((c["old"], c["new"]), (old, new))
        self.assertEqual((c["compared"], c["only_old"], c["only_new"]), (4, 1, 2))
        self.assertEqual(c["identical"], 2)  # q1, q4
        self.assertAlmostEqual(c["identical_share"], 0.5)
        # recall@k over queries with an old list: q1 3/3, q2 2/3 (d is new), q3 1/3 (x, y, a within the first 3)
        self.assertAlmostEqual(c["recall_at_k"], (1 + 2 / 3 + 1 / 3) / 3)
        self.assertEqual((c["top1_changed"], c["top1_changed_share"]), (2, 0.5))
        self.assertEqual(c["examples"], [{"query": "q2", "old_top1": "a", "new_top1": "b"},
                                         {"query": "q3", "old_top1": "a", "new_top1": "x"}])
        text = tool("summary", old, new).stdout
        self.assertIn("identical top-k 50.0%  recall@k 0.667  top-1 changed 50.0% (2)", text)
        self.assertIn('"q3": top-1 "a" -> "x"', text)

    def test_usage(self):
        self.assertEqual(tool(check=False).returncode, 2)
        self.assertEqual(tool("frobnicate", check=False).returncode, 2)
        self.assertEqual(tool("summary", "--bogus", "x", check=False).returncode, 2)
        self.assertEqual(tool("summary", check=False).returncode, 2)
        p = tool("summary", os.path.join(self.dir, "missing.jsonl"), check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot open", p.stderr)
        self.assertEqual(tool("replay", "x.jsonl", "--out", "-", check=False).returncode, 2)  # no --url
        self.assertEqual(tool("replay", "x.jsonl", "--url", "http://127.0.0.1:1/retrieve", "--out", "-", "--rate", "fast",
                              check=False).returncode, 2)
        self.assertIn("usage: searchgate-trace summary", tool("--help").stdout)


class Replay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgtool-")
        cls.trace = os.path.join(cls.dir, "mock.jsonl")
        cls.gw = Gateway({"backends": [
            {"name": "mock", "plugin": "mock", "config": {"seed": 1, "empty_rate": 0.1}, "trace": {"path": cls.trace}},
            {"name": "mock2", "plugin": "mock", "config": {"seed": 1, "hits": 2}},
            {"name": "hybrid", "fusion": {"routes": ["mock", "mock2"]}},
            example_backend("broken", error={"status": "unavailable", "message": "down"}),
        ]})
        cls.queries = []
        for i in range(30):  # GRPO-like: batches with repeats, different topk
            qs = ["replay %d" % (i % 11), "replay %d b" % (i % 7), "replay %d" % (i % 11)][: 1 + i % 3]
            r = cls.gw.retrieve(qs, topk=2 + i % 3, path="/retrieve/mock")
            assert r.status == 200, r
            cls.queries += qs
        deadline = time.time() + sgtest.scaled(20)
        while cls.gw.metric("searchgate_trace_lines_total", trace=cls.trace) < len(cls.queries) and time.time() < deadline:
            time.sleep(0.02)
        # a snapshot: replays against the mock route are traced into its file too
        snapshot = os.path.join(cls.dir, "recorded.jsonl")
        shutil.copyfile(cls.trace, snapshot)
        cls.trace = snapshot
        with open(cls.trace) as f:
            cls.recorded = [json.loads(l) for l in f]
        assert len(cls.recorded) == len(cls.queries), (len(cls.recorded), len(cls.queries))
        cls.url = "http://127.0.0.1:%d/retrieve" % cls.gw.port

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def replay(self, name, *args, check=True):
        out = os.path.join(self.dir, name)
        p = tool("replay", self.trace, "--url", self.url, "--out", out, *args, check=check)
        with open(out) as f:
            return p, [json.loads(l) for l in f]

    def requests(self, route):
        return self.gw.metric("searchgate_requests_total", backend=route)

    def test_same_route_reproduces_the_trace(self):
        before = self.requests("mock")
        _, got = self.replay("same.jsonl", "--route", "mock")
        self.assertEqual(len(got), len(self.recorded))
        n_requests = len({l["request"] for l in self.recorded})
        self.assertEqual(self.requests("mock") - before, n_requests)  # the recorded batches, one request each
        for old, new in zip(self.recorded, got):
            self.assertEqual((new["query"], new["i"], new["n"], new["topk"]), (old["query"], old["i"], old["n"], old["topk"]))
            self.assertEqual((new["ids"], new["scores"], new["hits"], new["empty"]), (old["ids"], old["scores"], old["hits"],
                                                                                      old["empty"]))
            self.assertEqual(new["replay_of"], "%s#%d" % (old["request"], old["i"]))
            self.assertEqual((new["status"], new["route"], new["client"]), (200, "mock", "replay"))
            self.assertTrue(new["provenance"].startswith("route=mock; type=plugin; plugin=mock/1.0.0; data="))
        self.assertTrue(any(l["hits"] == 0 for l in got))  # empty_rate lists are reproduced too
        c = summary(self.trace, os.path.join(self.dir, "same.jsonl"))["comparisons"][0]
        self.assertEqual((c["identical_share"], c["recall_at_k"], c["top1_changed"], c["only_old"], c["only_new"]),
                         (1, 1, 0, 0, 0))

    def test_other_route_differences_are_reported(self):
        _, got = self.replay("hybrid.jsonl", "--route", "hybrid", "--batch", "single")
        self.assertEqual(len(got), len(self.recorded))
        self.assertTrue(all(l["n"] == 1 and l["route"] == "hybrid" for l in got))
        first_old, first_new = {}, {}
        for l in self.recorded:
            first_old.setdefault(l["query"], l["ids"])
        for l in got:
            first_new.setdefault(l["query"], l["ids"])
        identical = sum(first_old[q] == first_new[q] for q in first_old)
        recalls = [len(set(o) & set(first_new[q][: len(o)])) / len(o) for q, o in first_old.items() if o]
        top1 = sum((o[:1] != first_new[q][:1]) for q, o in first_old.items())
        c = summary(self.trace, os.path.join(self.dir, "hybrid.jsonl"))["comparisons"][0]
        self.assertEqual(c["compared"], len(first_old))
        self.assertEqual(c["identical"], identical)
        self.assertTrue(math.isclose(c["recall_at_k"], sum(recalls) / len(recalls)), (c, recalls))
        self.assertEqual(c["top1_changed"], top1)
        self.assertLess(c["identical_share"], 1)

    def test_single_batches_and_rate(self):
        before = self.requests("mock")
        t0 = time.time()
        p, got = self.replay("rate.jsonl", "--route", "mock", "--batch", "single", "--rate", "40/s", "--concurrency", "4")
        elapsed = time.time() - t0
        self.assertEqual(self.requests("mock") - before, len(self.queries))
        self.assertGreaterEqual(elapsed, (len(self.queries) - 1) / 40 * 0.9)
        self.assertEqual(sorted(l["query"] for l in got), sorted(self.queries))
        self.assertIn("%d queries in %d requests, 0 failed" % (len(self.queries), len(self.queries)), p.stderr)

    def test_failures(self):
        p, got = self.replay("broken.jsonl", "--route", "broken", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertTrue(all(l["status"] == 503 and l["error"] == "unavailable" and "ids" not in l for l in got))
        out = os.path.join(self.dir, "refused.jsonl")
        p = tool("replay", self.trace, "--url", "http://127.0.0.1:%d/retrieve" % sgtest.free_port(), "--out", out, "--timeout",
                 "5", check=False)
        self.assertEqual(p.returncode, 3)
        with open(out) as f:
            got = [json.loads(l) for l in f]
        self.assertEqual(len(got), len(self.recorded))
        self.assertTrue(all(l["status"] == 0 and l["error"].startswith("connection: ") for l in got), got[0])


class ReplayParams(unittest.TestCase):
    """Replay resends the recorded search parameters: a local IVF route (the plugin that takes
    "search_params") recorded with and without {"nprobe": 8}, replayed against itself, gives the
    recorded answers exactly; --params none gives the route's defaults; queries with different
    parameters are never sent together; "params" that are not key=value text are refused."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgtool-params-")
        n, d = 2000, 64  # the e5-tiny fixture encodes 64-d
        rng = np.random.default_rng(7)
        centers = rng.standard_normal((25, d))
        x = centers[rng.integers(0, 25, n)] + 0.4 * rng.standard_normal((n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        flat = os.path.join(cls.dir, "flat.index")
        with open(flat, "wb") as f:  # a FAISS IndexFlatIP file (docs/protocols.md, "Corpus and index files")
            f.write(b"IxFI" + struct.pack("<iqqq?iQ", d, n, 1 << 20, 1 << 20, True, 0, n * d))
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
        corpus = os.path.join(cls.dir, "corpus.jsonl")
        with open(corpus, "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": str(i), "contents": "\"Row %d\"\nrow %d" % (i, i)}) + "\n")
        ivf = os.path.join(cls.dir, "ivf.index")
        subprocess.run([sgtest.binary("searchgate-index"), "convert", flat, ivf, "--factory", "IVF8,Flat", "--eval", "50", "--nprobe",
                        "1,8"], check=True, capture_output=True, timeout=sgtest.scaled(300))
        cls.trace = os.path.join(cls.dir, "ivf.jsonl")
        cls.gw = Gateway({"backends": [{"name": "ivf", "plugin": "local", "topk": 5, "trace": {"path": cls.trace}, "config": {
            "model": os.path.join(sgtest.FIXTURES, "e5-tiny"), "index": ivf, "corpus": corpus, "nprobe": 1, "max_nprobe": 8,
            "workers": 1, "max_wait_ms": 1}}]})
        cls.url = "http://127.0.0.1:%d/retrieve" % cls.gw.port
        cls.qs = ["meadow lantern %d" % i for i in range(16)]
        sent = 0
        for k in range(0, 16, 4):  # batches of 4: with nprobe 8, with the route's nprobe 1, alternately
            extra = {"search_params": {"nprobe": 8}} if k % 8 == 0 else {}
            r = cls.gw.retrieve(cls.qs[k:k + 4], topk=5, path="/retrieve/ivf", **extra)
            assert r.status == 200, r
            sent += 4
        deadline = time.time() + sgtest.scaled(20)
        while cls.gw.metric("searchgate_trace_lines_total", trace=cls.trace) < sent and time.time() < deadline:
            time.sleep(0.02)
        snapshot = os.path.join(cls.dir, "recorded.jsonl")
        shutil.copyfile(cls.trace, snapshot)
        cls.trace = snapshot
        with open(snapshot) as f:
            cls.recorded = [json.loads(l) for l in f]
        assert len(cls.recorded) == sent, (len(cls.recorded), sent)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def replay(self, trace, name, *args, check=True):
        out = os.path.join(self.dir, name)
        p = tool("replay", trace, "--url", self.url, "--out", out, *args, check=check)
        if not os.path.exists(out):
            return p, None
        with open(out) as f:
            return p, [json.loads(l) for l in f]

    def defaults(self, q):
        """The route's answer to `q` with its own parameters."""
        r = self.gw.retrieve([q], topk=5, path="/retrieve/ivf")
        self.assertEqual(r.status, 200, r)
        return [h["document"]["id"] for h in r.json()["result"][0]], [h["score"] for h in r.json()["result"][0]]

    def test_recorded(self):
        self.assertEqual([l.get("params") for l in self.recorded], ["nprobe=8"] * 4 + [None] * 4 + ["nprobe=8"] * 4 + [None] * 4)
        # the parameters matter for these queries: nprobe 8 finds what nprobe 1 misses
        self.assertTrue(any(l["ids"] != self.defaults(l["query"])[0] for l in self.recorded if l.get("params")))

    def test_same_route_reproduces_the_parameters(self):
        before = self.gw.metric("searchgate_requests_total", backend="ivf")
        _, got = self.replay(self.trace, "same.jsonl", "--route", "ivf")
        self.assertEqual(self.gw.metric("searchgate_requests_total", backend="ivf") - before, 4)
        self.assertEqual(len(got), len(self.recorded))
        for old, new in zip(self.recorded, got):
            self.assertEqual((new["query"], new["i"], new["n"], new.get("params")), (old["query"], old["i"], old["n"], old.get("params")))
            self.assertEqual((new["ids"], new["scores"]), (old["ids"], old["scores"]), new["query"])
            self.assertEqual("params=nprobe=8" in new["provenance"], "params" in old, new["provenance"])
        c = summary(self.trace, os.path.join(self.dir, "same.jsonl"))["comparisons"][0]
        self.assertEqual((c["identical_share"], c["top1_changed"]), (1, 0))

    def test_params_none_gives_the_route_defaults(self):
        _, got = self.replay(self.trace, "none.jsonl", "--route", "ivf", "--params", "none")
        self.assertEqual(len(got), len(self.recorded))
        for l in got:
            self.assertNotIn("params", l)
            self.assertNotIn("params=", l["provenance"])
            self.assertEqual((l["ids"], l["scores"]), self.defaults(l["query"]), l["query"])

    def test_different_params_are_sent_apart(self):
        t = os.path.join(self.dir, "mixed.jsonl")
        write(t, [{"request": "m", "i": i, "n": 4, "op": "retrieve", "topk": 5, "query": self.qs[i], **p}
                  for i, p in enumerate([{"params": "nprobe=8"}, {"params": "nprobe=8"}, {}, {"params": "nprobe=2"}])])
        before = self.gw.metric("searchgate_requests_total", backend="ivf")
        _, got = self.replay(t, "mixed.out", "--route", "ivf")
        self.assertEqual(self.gw.metric("searchgate_requests_total", backend="ivf") - before, 3)
        self.assertEqual([(l["request"], l["i"], l["n"], l.get("params")) for l in got],
                         [("replay-0", 0, 2, "nprobe=8"), ("replay-0", 1, 2, "nprobe=8"), ("replay-1", 0, 1, None),
                          ("replay-2", 0, 1, "nprobe=2")])
        self.assertIn("params=nprobe=2", got[3]["provenance"])

    def test_bodies_sent(self):
        """The exact inverse of the canonical text, seen by a server that records the bodies."""
        bodies = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                out = json.dumps({"result": [[] for _ in body["queries"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            t = os.path.join(self.dir, "kinds.jsonl")
            write(t, [{"request": "k", "i": 0, "n": 2, "op": "retrieve", "topk": 4, "query": "a",
                       "params": "efSearch=64,exact=true,mode=fast,rerank=-1.5e3,w=0.25"},
                      {"request": "k", "i": 1, "n": 2, "op": "retrieve", "topk": 4, "query": "b",
                       "params": "efSearch=64,exact=true,mode=fast,rerank=-1.5e3,w=0.25"},
                      {"request": "l", "i": 0, "n": 1, "op": "retrieve", "query": "c", "params": "x=07,y=1.,z=True,e="},
                      {"request": "m", "i": 0, "n": 1, "op": "retrieve", "query": "d", "params": ""}])
            url = "http://127.0.0.1:%d/retrieve" % srv.server_address[1]
            for mode, want in (("recorded", [{"efSearch": 64, "exact": True, "mode": "fast", "rerank": -1500.0, "w": 0.25},
                                             {"x": "07", "y": "1.", "z": "True", "e": ""}, None]),
                               ("none", [None, None, None])):
                del bodies[:]
                tool("replay", t, "--url", url, "--out", os.path.join(self.dir, "kinds.out"), "--params", mode)
                self.assertEqual([b["queries"] for b in bodies], [["a", "b"], ["c"], ["d"]])
                self.assertEqual([b.get("search_params") for b in bodies], want)
                self.assertEqual([b.get("topk") for b in bodies], [4, None, None])
        finally:
            srv.shutdown()
            srv.server_close()

    def test_params_that_are_not_key_value_text(self):
        t = os.path.join(self.dir, "odd.jsonl")
        write(t, [{"request": "o", "i": 0, "n": 1, "op": "retrieve", "query": "odd", "params": "fast"}])
        p, got = self.replay(t, "odd.out", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIsNone(got)
        self.assertIn("1 lines have \"params\" that are not key=value text (\"fast\")", p.stderr)
        self.assertIn("--params none", p.stderr)
        _, got = self.replay(t, "odd.out", "--route", "ivf", "--params", "none")
        self.assertEqual([(l["status"], l.get("params")) for l in got], [(200, None)])


class WorkedExample(unittest.TestCase):
    """docs/traces.md's worked example as written: configs/trace-demo.json on the BM25 demo, the
    run script from the page, summary, replay against the fusion route and the route itself, and
    the figures the page shows."""

    def test_docs_example(self):
        prep = subprocess.run([sgtest.binary("prepare-default")], capture_output=True, text=True, timeout=sgtest.scaled(300))
        self.assertEqual(prep.returncode, 0, prep.stdout + prep.stderr)
        with open(os.path.join(sgtest.SOURCE_DIR, "docs", "traces.md")) as f:
            page = f.read()
        script = re.search(r"/usr/bin/python3 - <<'EOF'\n(.*?)\nEOF", page, re.S).group(1)
        with open(os.path.join(sgtest.SOURCE_DIR, "configs", "trace-demo.json")) as f:
            cfg = json.load(f)
        shown = re.search(r"`configs/trace-demo.json`.*?```json\n(.*?)```", page, re.S).group(1)
        self.assertEqual(json.loads(shown), cfg)  # the page shows the shipped file
        d = tempfile.mkdtemp(prefix="sgtool-")
        for b in cfg["backends"][:2]:
            b["config"]["index"] = os.path.join(sgtest.BUILD_DIR, "demo", "bm25")
        cfg["backends"][0]["trace"]["path"] = d + "/"
        gw = Gateway(cfg)
        try:
            url = "http://127.0.0.1:%d/retrieve" % gw.port
            run = subprocess.run(["/usr/bin/python3", "-"], input=script.replace("http://127.0.0.1:8000/retrieve", url), text=True,
                                 capture_output=True, timeout=sgtest.scaled(120))
            self.assertEqual(run.returncode, 0, run.stderr)
            trace = os.path.join(d, "bm25.jsonl")
            deadline = time.time() + sgtest.scaled(10)
            while gw.metric("searchgate_trace_lines_total", trace=trace) < 240 and time.time() < deadline:
                time.sleep(0.02)
            snapshot = os.path.join(d, "recorded.jsonl")
            shutil.copyfile(trace, snapshot)
            a = summary(snapshot)["traces"][0]["all"]
            self.assertEqual((a["queries"], a["requests"], a["distinct"]), (240, 6, 16))
            self.assertEqual((round(a["repeat_rate"], 3), a["zero_hit_share"], a["empty"]), (0.933, 0.125, 0))
            self.assertEqual(a["cache"], {"batch": 192, "l1": 32, "backend": 16})
            self.assertEqual(a["top_queries"][0], {"query": "map maker", "count": 20})
            for route in ("hybrid", "bm25"):
                tool("replay", snapshot, "--url", url, "--route", route, "--out", os.path.join(d, route + ".out"))
        finally:
            gw.stop()
        c = summary(snapshot, os.path.join(d, "hybrid.out"), os.path.join(d, "bm25.out"))["comparisons"]
        self.assertEqual((c[0]["compared"], c[0]["identical"], round(c[0]["recall_at_k"], 3), c[0]["top1_changed"]), (16, 7, 0.81, 2))
        self.assertEqual([e["query"] for e in c[0]["examples"]], ["lava", "what is the capital of a country"])
        self.assertEqual((c[1]["identical_share"], c[1]["recall_at_k"], c[1]["top1_changed"]), (1, 1, 0))
        self.assertIn("identical top-k 43.8%  recall@k 0.810  top-1 changed 12.5% (2)", page)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sgtest.main()
