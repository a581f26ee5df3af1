"""Query traces (docs/traces.md) with the real gateway: one JSON line per query under concurrent
load, what each line says (ids and scores as answered, cache and singleflight outcome, status,
latency), sampling by whole requests, route and client traces, no API key in any file, rotation by
size and age with `keep`, reopening on SIGUSR1, and a full buffer that drops and counts while
requests go on unslowed (the file is a pipe nobody reads); the cache outcomes joined, redis and
fallback end to end."""
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend

KEY = "sk-trace-test-8f3a1c"


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        raise AssertionError("%s ends in the middle of a line" % path)
    return [json.loads(l) for l in data.decode().splitlines()]


def wait_for(cond, what, timeout=20):
    deadline = time.time() + sgtest.scaled(timeout)
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def written(gw, path):
    return gw.metric("searchgate_trace_lines_total", trace=path)


class Content(unittest.TestCase):
    """Every query of every request is one line, and the lines say what the answers were."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgtrace-")
        ex = example_backend("ex", pages=[{"url": "https://example.org/a", "contents": "page a"}])
        ex["trace"] = {"path": cls.dir + "/"}  # a directory: <dir>/ex.jsonl
        broken = example_backend("broken", error={"status": "unavailable", "message": "down"})
        broken["trace"] = {"path": cls.dir + "/broken.jsonl"}
        slow = example_backend("slow", delay_ms=300)
        slow["trace"] = {"path": cls.dir + "/slow.jsonl"}
        cls.gw = Gateway({"backends": [ex, broken, slow, {"name": "fu", "fusion": {"routes": ["ex", "slow"]},
                                                         "trace": {"path": cls.dir + "/fu.jsonl"}}]}, threads=2)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_one_line_per_query_under_load(self):
        words = ["hamlet", "paris", "tokyo", "faiss", "redis", "zurich", "capital", "city"]
        answers = {}
        lock = threading.Lock()

        def client(t):
            sent = 0
            for i in range(40):
                qs = ["load %s %s" % (words[(t + i) % 8], words[(i * 3 + k) % 8]) for k in range(1 + (i % 4))]
                if i % 5 == 0:
                    qs.append(qs[0])  # a repeat within the batch
                r = self.gw.retrieve(qs, topk=3, path="/retrieve/ex")
                self.assertEqual(r.status, 200, r)
                with lock:
                    for q, hits in zip(qs, r.json()["result"]):
                        answers[q] = ([h["document"]["id"] for h in hits], [h["score"] for h in hits])
                sent += len(qs)
            return sent

        path = os.path.join(self.dir, "ex.jsonl")
        before = written(self.gw, path)
        total = sum(sgtest.parallel(client, [(t,) for t in range(8)]))
        wait_for(lambda: written(self.gw, path) - before >= total, "the trace lines")
        self.assertEqual(written(self.gw, path) - before, total)
        self.assertEqual(self.gw.metric("searchgate_trace_dropped_lines_total", trace=path), 0)
        lines = [l for l in read_lines(path) if l["query"].startswith("load ")]
        self.assertEqual(len(lines), total)
        by_request = {}
        for l in lines:
            by_request.setdefault(l["request"], []).append(l)
            self.assertEqual((l["route"], l["op"], l["topk"], l["status"], l["client"]), ("ex", "retrieve", 3, 200, "ip:127.0.0.1"))
            self.assertEqual((l["ids"], l["scores"]), answers[l["query"]])
            self.assertEqual(l["hits"], len(l["ids"]))
            self.assertFalse(l["empty"])
            self.assertIn(l["cache"], ("l1", "joined", "backend", "batch"))
            self.assertRegex(l["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertGreater(l["ms"], 0)
        self.assertEqual(sum(len(v) for v in by_request.values()), total)
        for req, ls in by_request.items():  # a request's lines are together, in order, with its batch size
            self.assertEqual([l["i"] for l in ls], list(range(ls[0]["n"])), req)
            self.assertEqual(len({l["ms"] for l in ls}), 1)
            seen = set()
            for l in ls:  # a text repeated in the batch is answered by its first occurrence
                self.assertEqual(l["cache"] == "batch", l["query"] in seen, l)
                seen.add(l["query"])

    def test_cache_outcomes(self):
        path = os.path.join(self.dir, "ex.jsonl")
        for _ in range(2):
            self.assertEqual(self.gw.retrieve(["outcome one", "outcome two", "outcome one"], path="/retrieve/ex").status, 200)
        wait_for(lambda: len([l for l in read_lines(path) if l["query"].startswith("outcome ")]) == 6, "6 lines")
        got = [(l["query"], l["cache"]) for l in read_lines(path) if l["query"].startswith("outcome ")]
        self.assertEqual(got, [("outcome one", "backend"), ("outcome two", "backend"), ("outcome one", "batch"),
                               ("outcome one", "l1"), ("outcome two", "l1"), ("outcome one", "batch")])

    def test_failures_and_access(self):
        r = self.gw.retrieve(["fails a", "fails b"], path="/retrieve/broken")
        self.assertEqual(r.status, 503, r)
        r = self.gw.post("/access/ex", {"urls": ["https://example.org/a", "https://example.org/none"]})
        self.assertEqual(r.status, 200, r)
        wait_for(lambda: os.path.exists(self.dir + "/broken.jsonl") and len(read_lines(self.dir + "/broken.jsonl")) == 2, "2 lines")
        for l in read_lines(self.dir + "/broken.jsonl"):
            self.assertEqual((l["status"], l["error"], l["cache"]), (503, "unavailable", "backend"))
            self.assertNotIn("ids", l)
        wait_for(lambda: any(l.get("op") == "access" for l in read_lines(self.dir + "/ex.jsonl")), "the /access lines")
        acc = [l for l in read_lines(self.dir + "/ex.jsonl") if l["op"] == "access"]
        self.assertEqual([(l["query"], l["hits"], l["ids"]) for l in acc],
                         [("https://example.org/a", 1, ["https://example.org/a"]), ("https://example.org/none", 0, [])])

    def test_client_gone_and_timeout(self):
        r = self.gw.retrieve(["slow one"], path="/retrieve/slow", headers={"X-Timeout-Ms": "50"})
        self.assertEqual(r.status, 504, r)
        path = self.dir + "/slow.jsonl"
        wait_for(lambda: os.path.exists(path) and any(l["query"] == "slow one" for l in read_lines(path)), "a line")
        [l] = [l for l in read_lines(path) if l["query"] == "slow one"]
        self.assertEqual((l["status"], l["error"], l["cache"]), (504, "timeout", "backend"))
        self.assertNotIn("ids", l)
        self.assertGreaterEqual(l["ms"], 45)
        # h2c: the client resets after 100 ms while the route takes 300 ms; the request is freed
        # while its search runs, and its lines say 499 client_gone
        if shutil.which("nghttp") is None:
            self.skipTest("nghttp (nghttp2-client) not installed: the 499 part needs an HTTP/2 client")
        subprocess.run(["nghttp", "-t", "100ms", "-d", "-", "-H", ":method: POST", "http://127.0.0.1:%d/retrieve/slow" % self.gw.port],
                       input=json.dumps({"queries": ["gone one", "gone two"]}).encode(), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)
        wait_for(lambda: len([l for l in read_lines(path) if l["query"].startswith("gone ")]) == 2, "the 499 lines")
        gone = [l for l in read_lines(path) if l["query"].startswith("gone ")]
        self.assertEqual([(l["query"], l["i"], l["n"], l["status"], l["error"]) for l in gone],
                         [("gone one", 0, 2, 499, "client_gone"), ("gone two", 1, 2, 499, "client_gone")])
        self.assertTrue(all("ids" not in l for l in gone), gone)
        self.assertGreaterEqual(self.gw.metric("searchgate_requests_total", backend="slow", code="other"), 1)

    def test_early_answers_are_not_traced(self):
        """docs/traces.md "Which requests have lines": answered before they became a query, no line."""
        path = os.path.join(self.dir, "ex.jsonl")
        self.assertEqual(self.gw.retrieve([], path="/retrieve/ex").status, 200)  # an empty batch
        self.assertEqual(self.gw.retrieve(["early params"], path="/retrieve/ex", search_params={"nprobe": 3}).status, 422)
        self.assertEqual(self.gw.retrieve(["early timeout"], path="/retrieve/ex", headers={"X-Timeout-Ms": "soon"}).status, 422)
        self.assertEqual(self.gw.retrieve(["early topk"], topk=-1, path="/retrieve/ex").status, 422)
        self.assertEqual(self.gw.retrieve(["after early"], path="/retrieve/ex").status, 200)
        wait_for(lambda: any(l["query"] == "after early" for l in read_lines(path)), "the line after")
        self.assertEqual([l["query"] for l in read_lines(path) if "early" in l["query"]], ["after early"])

    def test_fusion_route(self):
        r = self.gw.retrieve(["fused paris", "fused tokyo"], topk=2, path="/retrieve/fu")
        self.assertEqual(r.status, 200, r)
        want = {q: [h["document"]["id"] for h in hits] for q, hits in zip(["fused paris", "fused tokyo"], r.json()["result"])}
        path = self.dir + "/fu.jsonl"
        wait_for(lambda: os.path.exists(path) and len(read_lines(path)) == 2, "2 lines")
        for l in read_lines(path):
            self.assertEqual((l["route"], l["cache"], l["ids"]), ("fu", "fusion", want[l["query"]]))
        # the legs' own queries are not in the leg route's trace: the fusion request is
        time.sleep(0.2)
        self.assertFalse(any(l["query"].startswith("fused ") for l in read_lines(self.dir + "/ex.jsonl")))


class CacheOutcomes(unittest.TestCase):
    """The cache outcomes the pipeline sets, end to end: `joined` (an identical query in flight:
    singleflight), `redis` (another gateway's answer, from the shared Redis) and `fallback` (the
    route's fallback backend, named in `fallback`)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgtrace-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def lines(self, gw, path, n):
        wait_for(lambda: written(gw, path) >= n, "%d lines in %s" % (n, path))
        return read_lines(path)

    def test_joined(self):
        slow = example_backend("slow", delay_per_query_ms=1000, cache=False)
        slow["trace"] = {"path": self.dir + "/slow.jsonl"}
        gw = Gateway({"backends": [slow]}, threads=2)
        try:
            def ask(wait):
                time.sleep(wait)
                return gw.retrieve(["joined once"], path="/retrieve/slow").status

            self.assertEqual(sgtest.parallel(ask, [(0,), (0.2,)]), [200, 200])
            lines = self.lines(gw, self.dir + "/slow.jsonl", 2)
            self.assertEqual(gw.metric("searchgate_backend_example_calls_total", backend="slow"), 1)
        finally:
            gw.stop()
        self.assertEqual(len(lines), 2)
        self.assertEqual(sorted(l["cache"] for l in lines), ["backend", "joined"])
        self.assertEqual(lines[0]["ids"], lines[1]["ids"])
        self.assertEqual(len({l["request"] for l in lines}), 2)

    def test_redis(self):
        redis = sgtest.Redis()
        try:
            def gateway(name):
                ex = example_backend("ex", cache=True, cache_ttl_s=60)
                ex["trace"] = {"path": "%s/%s.jsonl" % (self.dir, name)}
                gw = Gateway({"backends": [ex], "cache": {"l1_bytes": 8 << 20, "redis": {"host": "127.0.0.1", "port": redis.port,
                                                                                           "timeout_ms": 1000}}})
                wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", "redis up")
                return gw

            a = gateway("a")
            try:
                self.assertEqual(a.retrieve(["shared paris"]).status, 200)
                self.assertEqual(a.retrieve(["shared paris"]).status, 200)
                wait_for(lambda: len(redis.command("KEYS", "sg:*")) >= 1, "the Redis entry")
                la = self.lines(a, self.dir + "/a.jsonl", 2)
            finally:
                a.stop()
            b = gateway("b")  # a replica on the same Redis: its L1 is empty
            try:
                self.assertEqual(b.retrieve(["shared paris"]).status, 200)
                self.assertEqual(b.retrieve(["shared paris"]).status, 200)
                lb = self.lines(b, self.dir + "/b.jsonl", 2)
            finally:
                b.stop()
        finally:
            redis.close()
        self.assertEqual([l["cache"] for l in la], ["backend", "l1"])
        self.assertEqual([l["cache"] for l in lb], ["redis", "l1"])
        self.assertEqual(lb[0]["ids"], la[0]["ids"])
        self.assertEqual(lb[0]["scores"], la[0]["scores"])

    def test_fallback(self):
        broken = example_backend("broken", error={"status": "unavailable", "message": "down"}, fallback="plain")
        broken["trace"] = {"path": self.dir + "/broken.jsonl"}
        gw = Gateway({"backends": [broken, example_backend("plain")]})
        try:
            r = gw.retrieve(["fall paris", "fall tokyo"], path="/retrieve/broken")
            self.assertEqual(r.status, 200, r)
            want = [[h["document"]["id"] for h in hits] for hits in r.json()["result"]]
            lines = self.lines(gw, self.dir + "/broken.jsonl", 2)
        finally:
            gw.stop()
        self.assertEqual([(l["query"], l["route"], l["cache"], l["fallback"], l["status"]) for l in lines],
                         [("fall paris", "broken", "fallback", "plain", 200), ("fall tokyo", "broken", "fallback", "plain", 200)])
        self.assertEqual([l["ids"] for l in lines], want)


class Mcp(unittest.TestCase):
    """MCP tools/call searches go through the pipeline and are traced like /retrieve (docs/traces.md);
    a call refused for its arguments (-32602) searched nothing and has no line."""

    def test_tools_call_is_traced(self):
        d = tempfile.mkdtemp(prefix="sgtrace-")
        try:
            ex = example_backend("ex")
            ex["trace"] = {"path": d + "/"}
            wiki = example_backend("wiki", pages=[{"url": "https://example.org/a", "contents": "page a"}])
            wiki["trace"] = {"path": d + "/"}
            gw = Gateway({"backends": [ex, wiki]})
            try:
                def call(name, args):
                    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
                    r = sgtest.request(gw.port, "POST", "/mcp", json.dumps(body),
                                       {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
                    self.assertEqual(r.status, 200, r)
                    return r.json()

                self.assertFalse(call("search", {"query": "mcp hamlet", "topk": 2})["result"]["isError"])
                self.assertFalse(call("search_wiki", {"queries": ["mcp paris", "mcp tokyo"]})["result"]["isError"])
                self.assertFalse(call("access_wiki", {"url": "https://example.org/a"})["result"]["isError"])
                self.assertEqual(call("search", {"query": 7})["error"]["code"], -32602)
                want = {q: [h["document"]["id"] for h in gw.retrieve([q], topk=k, path="/retrieve/" + route).json()["result"][0]]
                        for q, k, route in (("mcp hamlet", 2, "ex"), ("mcp paris", 3, "wiki"), ("mcp tokyo", 3, "wiki"))}
                wait_for(lambda: written(gw, d + "/ex.jsonl") >= 2 and written(gw, d + "/wiki.jsonl") >= 5, "the lines")
            finally:
                gw.stop()
            ex_lines = [l for l in read_lines(d + "/ex.jsonl") if l["client"] == "ip:127.0.0.1"]
            self.assertEqual([(l["query"], l["op"], l["topk"], l["n"], l["status"], l["cache"]) for l in ex_lines],
                             [("mcp hamlet", "retrieve", 2, 1, 200, "backend"), ("mcp hamlet", "retrieve", 2, 1, 200, "l1")])
            self.assertEqual(ex_lines[0]["ids"], want["mcp hamlet"])
            wiki_lines = read_lines(d + "/wiki.jsonl")
            self.assertEqual([(l["query"], l["op"], l["i"], l["n"]) for l in wiki_lines[:3]],
                             [("mcp paris", "retrieve", 0, 2), ("mcp tokyo", "retrieve", 1, 2), ("https://example.org/a", "access", 0, 1)])
            self.assertEqual([l["ids"] for l in wiki_lines[:2]], [want["mcp paris"], want["mcp tokyo"]])
            self.assertEqual(wiki_lines[2]["ids"], ["https://example.org/a"])
            self.assertEqual(len(wiki_lines), 5)  # and the two /retrieve queries above
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Clients(unittest.TestCase):
    """Client traces: a keyed client's own file, clients.default's for the others (keyed ones without
    a trace of their own included), none with "trace": null; never a key in any file."""

    def test_client_traces(self):
        d = tempfile.mkdtemp(prefix="sgtrace-")
        try:
            cfg = {"backends": [example_backend("ex")],
                   "clients": {"default": {"trace": {"path": d + "/"}},
                               "keys": [{"id": "job-a", "key_env": "SG_TRACE_KEY_A", "trace": {"path": d + "/"}},
                                        {"id": "job-b", "key_env": "SG_TRACE_KEY_B"},
                                        {"id": "job-c", "key_env": "SG_TRACE_KEY_C", "trace": None}]}}
            gw = Gateway(cfg, env={"SG_TRACE_KEY_A": KEY, "SG_TRACE_KEY_B": KEY + "b", "SG_TRACE_KEY_C": KEY + "c"})
            try:
                for who, hdr in (("a", {"Authorization": "Bearer " + KEY}), ("b", {"X-API-Key": KEY + "b"}),
                                 ("c", {"Authorization": "Bearer " + KEY + "c"}), ("anon", {})):
                    self.assertEqual(gw.retrieve(["who is " + who], headers=hdr).status, 200)
                wait_for(lambda: written(gw, d + "/client-job-a.jsonl") == 1 and written(gw, d + "/clients.jsonl") == 2,
                         "the lines")
            finally:
                gw.stop()
            a = read_lines(d + "/client-job-a.jsonl")
            self.assertEqual([(l["client"], l["query"]) for l in a], [("job-a", "who is a")])
            rest = sorted((l["client"], l["query"]) for l in read_lines(d + "/clients.jsonl"))
            self.assertEqual(rest, [("ip:127.0.0.1", "who is anon"), ("job-b", "who is b")])
            self.assertEqual(sorted(os.listdir(d)), ["client-job-a.jsonl", "clients.jsonl"])
            for name in os.listdir(d):
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(d, name)).st_mode), 0o600)
                with open(os.path.join(d, name), "rb") as f:
                    self.assertNotIn(b"sk-trace", f.read())
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_route_and_client_share_a_file(self):
        """Traced by both the route and the client into one file: one line per query."""
        d = tempfile.mkdtemp(prefix="sgtrace-")
        try:
            ex = example_backend("ex")
            ex["trace"] = {"path": d + "/all.jsonl", "fields": ["query", "client"]}
            gw = Gateway({"backends": [ex], "clients": {"default": {"trace": {"path": d + "/all.jsonl", "fields": ["route"]}}}})
            try:
                self.assertEqual(gw.retrieve(["shared one", "shared two"]).status, 200)
                wait_for(lambda: written(gw, d + "/all.jsonl") == 2, "2 lines")
            finally:
                gw.stop()
            self.assertEqual(read_lines(d + "/all.jsonl"), [{"client": "ip:127.0.0.1", "route": "ex", "query": "shared one"},
                                                            {"client": "ip:127.0.0.1", "route": "ex", "query": "shared two"}])
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Settings(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgtrace-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def gateway(self, trace, **kw):
        ex = example_backend("ex", cache=False)
        ex["trace"] = trace
        return Gateway({"backends": [ex]}, **kw)

    def test_fields_and_query_hash(self):
        gw = self.gateway({"path": self.dir + "/t.jsonl", "fields": ["request", "query_hash", "ids", "status", "docs"]})
        try:
            r = gw.retrieve(["hashed hamlet"], topk=2)
            self.assertEqual(r.status, 200)
            wait_for(lambda: written(gw, self.dir + "/t.jsonl") == 1, "1 line")
        finally:
            gw.stop()
        (l,) = read_lines(self.dir + "/t.jsonl")
        self.assertEqual(sorted(l), ["docs", "i", "ids", "n", "query_hash", "request", "status"])
        self.assertEqual(l["query_hash"], hashlib.sha256(b"hashed hamlet").hexdigest()[:16])
        self.assertEqual(l["docs"], [h["document"] for h in r.json()["result"][0]])
        self.assertEqual(l["ids"], [h["document"]["id"] for h in r.json()["result"][0]])

    def test_sampling_takes_whole_requests(self):
        gw = self.gateway({"path": self.dir + "/half.jsonl", "sample": 0.5})
        try:
            for i in range(300):
                self.assertEqual(gw.retrieve(["s%d a" % i, "s%d b" % i, "s%d a" % i]).status, 200)
            time.sleep(0.3)
            lines = read_lines(self.dir + "/half.jsonl")
        finally:
            gw.stop()
        reqs = {}
        for l in lines:
            reqs.setdefault(l["request"], []).append(l["i"])
        self.assertTrue(all(v == [0, 1, 2] for v in reqs.values()))
        self.assertTrue(90 <= len(reqs) <= 210, len(reqs))  # binomial(300, 0.5): 150 +- 60 is > 6 sigma
        gw = self.gateway({"path": self.dir + "/none.jsonl", "sample": 0})
        try:
            for i in range(20):
                self.assertEqual(gw.retrieve(["zero %d" % i]).status, 200)
            time.sleep(0.3)
            self.assertEqual(os.path.getsize(self.dir + "/none.jsonl"), 0)
            self.assertEqual(written(gw, self.dir + "/none.jsonl"), 0)
        finally:
            gw.stop()

    def test_rotation_by_size(self):
        path = self.dir + "/r.jsonl"
        gw = self.gateway({"path": path, "rotate_bytes": 4096})
        try:
            for i in range(60):
                self.assertEqual(gw.retrieve(["rotate %d" % i, "rotate %d b" % i]).status, 200)
            wait_for(lambda: written(gw, path) == 120, "120 lines")
            rotations = gw.metric("searchgate_trace_rotations_total", trace=path)
        finally:
            gw.stop()
        pieces = sorted(n for n in os.listdir(self.dir) if n.startswith("r.jsonl."))
        self.assertGreaterEqual(len(pieces), 3)
        self.assertEqual(len(pieces), rotations)
        for n in pieces:
            self.assertRegex(n, r"^r\.jsonl\.\d{8}T\d{6}\.\d{3}(-\d+)?$")
            self.assertLess(os.path.getsize(os.path.join(self.dir, n)), 4096 + 2048)  # rotated once past the size
        queries = [l["query"] for n in pieces + ["r.jsonl"] for l in read_lines(os.path.join(self.dir, n))]
        self.assertEqual(sorted(queries), sorted(["rotate %d" % i for i in range(60)] + ["rotate %d b" % i for i in range(60)]))

    def test_rotation_keep_and_age(self):
        path = self.dir + "/k.jsonl"
        gw = self.gateway({"path": path, "rotate_bytes": 2048, "keep": 2})
        try:
            for i in range(60):
                self.assertEqual(gw.retrieve(["keep %d" % i]).status, 200)
            wait_for(lambda: written(gw, path) == 60, "60 lines")
            self.assertGreaterEqual(gw.metric("searchgate_trace_rotations_total", trace=path), 4)
        finally:
            gw.stop()
        self.assertEqual(len([n for n in os.listdir(self.dir) if n.startswith("k.jsonl.")]), 2)
        path = self.dir + "/age.jsonl"
        gw = self.gateway({"path": path, "rotate_s": 1})
        try:
            self.assertEqual(gw.retrieve(["age one"]).status, 200)
            wait_for(lambda: gw.metric("searchgate_trace_rotations_total", trace=path) >= 1, "a rotation by age", timeout=10)
            self.assertEqual(gw.retrieve(["age two"]).status, 200)
            wait_for(lambda: written(gw, path) == 2, "2 lines")
        finally:
            gw.stop()
        old = [n for n in os.listdir(self.dir) if n.startswith("age.jsonl.")]
        self.assertEqual([l["query"] for l in read_lines(os.path.join(self.dir, old[0]))], ["age one"])
        self.assertEqual([l["query"] for l in read_lines(path)], ["age two"])

    def test_sigusr1_reopens(self):
        path = self.dir + "/live.jsonl"
        gw = self.gateway({"path": path})
        try:
            self.assertEqual(gw.retrieve(["before rotate"]).status, 200)
            wait_for(lambda: written(gw, path) == 1, "1 line")
            os.rename(path, path + ".1")  # what logrotate does, then it signals
            gw.proc.send_signal(signal.SIGUSR1)
            wait_for(lambda: os.path.exists(path), "the reopened file")
            self.assertEqual(gw.retrieve(["after rotate"]).status, 200)
            wait_for(lambda: written(gw, path) == 2, "2 lines")
            self.assertEqual(gw.metric("searchgate_trace_reopens_total", trace=path), 1)
            log = gw.read_log()
        finally:
            gw.stop()
        self.assertIn("SIGUSR1: reopening the trace files", log)
        self.assertEqual([l["query"] for l in read_lines(path + ".1")], ["before rotate"])
        self.assertEqual([l["query"] for l in read_lines(path)], ["after rotate"])


class FullBuffer(unittest.TestCase):
    """The trace file is a pipe nobody reads: the writer waits, the buffer fills, records are dropped
    and counted, and requests are answered as fast as ever."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgtrace-")
        self.fifo = os.path.join(self.dir, "pipe.jsonl")
        os.mkfifo(self.fifo)
        self.reader = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, never read (yet)
        ex = example_backend("ex")
        ex["trace"] = {"path": self.fifo, "buffer_bytes": 4096}
        self.gw = Gateway({"backends": [ex]}, threads=2)

    def tearDown(self):
        try:
            if self.gw is not None:
                self.gw.stop()
        finally:
            os.close(self.reader)
            shutil.rmtree(self.dir, ignore_errors=True)

    def drain(self):
        out = b""
        while True:
            try:
                chunk = os.read(self.reader, 1 << 16)
            except BlockingIOError:
                return out
            if not chunk:
                return out
            out += chunk

    def test_drops_and_counts_without_blocking(self):
        def client(t):
            worst = 0.0
            for i in range(100):
                t0 = time.time()
                r = self.gw.retrieve(["full %d %d" % (t, i), "full %d %d b" % (t, i), "full %d %d c" % (t, i)])
                worst = max(worst, time.time() - t0)
                self.assertEqual(r.status, 200)
            return worst

        worst = max(sgtest.parallel(client, [(t,) for t in range(4)]))
        total = 4 * 100 * 3
        self.assertLess(worst, sgtest.scaled(2.0))  # a blocked writer never holds a request
        self.assertEqual(self.gw.get("/health").status, 200)
        dropped = self.gw.metric("searchgate_trace_dropped_lines_total", trace=self.fifo)
        self.assertGreater(dropped, 0)
        self.assertEqual(dropped % 3, 0)  # whole requests
        got = b""
        deadline = time.time() + sgtest.scaled(20)
        while time.time() < deadline:  # now read: the writer goes on and writes what it kept
            got += self.drain()
            w = written(self.gw, self.fifo)
            if w + dropped == total and got.count(b"\n") == w:
                break
            time.sleep(0.05)
        self.assertEqual(written(self.gw, self.fifo) + self.gw.metric("searchgate_trace_dropped_lines_total", trace=self.fifo), total)
        self.assertEqual(got.count(b"\n"), written(self.gw, self.fifo))
        for line in got.decode().splitlines():
            json.loads(line)

    def test_stops_with_a_full_pipe(self):
        for i in range(200):
            self.assertEqual(self.gw.retrieve(["stuck %d" % i, "stuck %d b" % i]).status, 200)
        t0 = time.time()
        gw, self.gw = self.gw, None
        gw.stop()  # the writer gives up on the pipe after its grace: a clean, prompt exit
        self.assertLess(time.time() - t0, sgtest.scaled(15))


class Config(unittest.TestCase):
    def fails(self, cfg, needle, check=False):
        d = tempfile.mkdtemp(prefix="sgtrace-")
        try:
            path = os.path.join(d, "gw.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            p = subprocess.run([sgtest.binary("searchgate"), "--config", path, "--port", "0"] + (["--check"] if check else []),
                               capture_output=True, text=True, timeout=sgtest.scaled(30))
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(needle, p.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def with_trace(self, trace, client=False):
        ex = example_backend("ex")
        if client:
            return {"backends": [ex], "clients": {"default": {"trace": trace}}}
        ex["trace"] = trace
        return {"backends": [ex]}

    def test_errors(self):
        self.fails(self.with_trace({"path": "/tmp/x.jsonl", "sample": 2}),
                   "backends[0].trace.sample: expected a number in [0, 1], got 2")
        self.fails(self.with_trace({"path": "/tmp/x.jsonl", "fields": ["query", "apikey"]}),
                   'backends[0].trace.fields: unknown field (expected time, request')
        self.fails(self.with_trace({"sample": 1}), "backends[0].trace.path: required key is missing")
        self.fails(self.with_trace({"path": "/tmp/x.jsonl", "rotate": 5}), "backends[0].trace.rotate: unknown key")
        self.fails(self.with_trace({"path": "/tmp/x.jsonl", "buffer_bytes": 100}, client=True),
                   "clients.default.trace.buffer_bytes: expected an integer in [4096,")
        self.fails(self.with_trace("traces/"), "backends[0].trace: expected an object")
        self.fails(self.with_trace({"path": "/nonexistent-dir-sg/t.jsonl"}),
                   "backends[0].trace.path: cannot open /nonexistent-dir-sg/t.jsonl: No such file or directory")
        self.fails(self.with_trace({"path": "/nonexistent-dir-sg/t.jsonl"}), "backends[0].trace.path: cannot write", check=True)
        shared = self.with_trace({"path": "/tmp/sg-shared.jsonl", "rotate_bytes": 1000000}, client=True)
        shared["backends"][0]["trace"] = {"path": "/tmp/sg-shared.jsonl"}
        self.fails(shared, "backends[0].trace: writes the file /tmp/sg-shared.jsonl like clients.default.trace, with other "
                           "rotate_bytes")

    def test_check_creates_nothing(self):
        d = tempfile.mkdtemp(prefix="sgtrace-")
        try:
            path = os.path.join(d, "gw.json")
            with open(path, "w") as f:
                json.dump(self.with_trace({"path": "traces.jsonl"}), f)
            p = subprocess.run([sgtest.binary("searchgate"), "--config", path, "--port", "0", "--check"], capture_output=True,
                               text=True, timeout=sgtest.scaled(30))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.listdir(d), ["gw.json"])
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sgtest.main()
