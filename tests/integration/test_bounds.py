"""Integration tests of the bounds of answers (issue 19, items 1 and 6): bytes per answer
(limits.max_response_bytes: 413 from an estimate before any backend work, and exactly as results
arrive), the process's response memory budget (limits.max_response_bytes_inflight: wait, then 503
+ Retry-After), answers streamed window by window (byte for byte what building them whole gives,
HTTP/1.1 and h2), slow readers disconnected after limits.write_timeout_ms, and requests a route
could never admit answered 413 instead of 503 forever."""
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, scaled, wait_for

# 40 documents of about 10 KB: answers of megabytes from a handful of queries
BIG_DOCS = [{"id": str(i), "contents": "\"Doc %d\"\n" % i + ("word%d lorem ipsum common " % i) * 400} for i in range(40)]


def big_backend(name="big", **route):
    entry = {"name": name, "plugin": "example", "config": {"documents": BIG_DOCS}, "cache": False}
    if "delay_ms" in route:
        entry["config"]["delay_ms"] = route.pop("delay_ms")
    entry.update(route)
    return entry


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stalled_request(port, body, rcvbuf=4096, mss=None):
    """Sends a POST /retrieve on a socket with a tiny receive buffer and never reads it. `mss`:
    the segment size the client announces (loopback's is 64 KiB, so a slow reader there reopens
    its window only each 64 KiB it reads; an Ethernet MSS of 1448 makes it behave as on a LAN)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if mss is not None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (len(data), data))
    return s


def closed_by_peer(s, timeout=10.0):
    """Reads what the peer sent until it closed the connection; True when it did within `timeout`."""
    s.settimeout(scaled(timeout))
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def inner(resp):
    """The bytes between {"result":[ and ]} of an answer."""
    body = resp.body
    assert body.startswith(b'{"result":[') and body.endswith(b"]}"), body[:80]
    return body[len(b'{"result":['):-2]


class AnswerSize(unittest.TestCase):
    def test_issue_request_refused_before_backend_work(self):
        # the issue's request: one query 2000 times, topk 1000 (its answer was built whole before);
        # once the route knows its DOC size, a 1 MiB limit refuses it before any backend call
        gw = Gateway({"limits": {"max_response_bytes": 1 << 20}, "backends": [sgtest.example_backend()]})
        try:
            self.assertEqual(gw.retrieve(["paris"], topk=2).status, 200)  # teaches the route its DOC size
            calls = gw.metric("searchgate_backend_calls_total")
            r = gw.retrieve(["water"] * 2000, topk=1000)
            self.assertEqual(r.status, 413, r)
            err = r.json()["error"]
            self.assertEqual(err["type"], "too_large")
            self.assertIn("limits.max_response_bytes (1048576)", err["message"])
            self.assertIn("2000 queries x topk 1000", err["message"])
            self.assertEqual(gw.metric("searchgate_backend_calls_total"), calls, "no backend work")
            self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="estimate"), 1)
            self.assertEqual(gw.metric("searchgate_requests_total", backend="example", code="413"), 1)
        finally:
            gw.stop()

    def test_exact_limit(self):
        body = {"queries": ["word%d lorem" % i for i in range(12)], "topk": 5, "return_scores": True}
        gw = Gateway({"backends": [big_backend()]})
        try:
            r = gw.post("/retrieve", body)
            self.assertEqual(r.status, 200, r)
            size = len(r.body)
            self.assertGreater(size, 300000)
        finally:
            gw.stop()
        # a fresh gateway knows no DOC size: nothing is refused before the results are in
        for limit, status in ((size, 200), (size - 1, 413)):
            gw = Gateway({"limits": {"max_response_bytes": limit}, "backends": [big_backend()]})
            try:
                r = gw.post("/retrieve", body)
                self.assertEqual(r.status, status, (limit, r))
                if status == 413:
                    msg = r.json()["error"]["message"]
                    self.assertIn("the answer is %d bytes" % size, msg)
                    self.assertIn("limits.max_response_bytes (%d)" % limit, msg)
                    self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="exact"), 1)
                else:
                    self.assertEqual(len(r.body), size)
            finally:
                gw.stop()

    def test_answer_stops_growing_at_the_limit(self):
        # 40 distinct queries in calls of 4: the query gives up as soon as the results that arrived
        # pass the limit, and the calls still queued are dropped
        gw = Gateway({"limits": {"max_response_bytes": 600000},
                      "backends": [big_backend(chunk=4, max_inflight=4, delay_ms=50)]})
        try:
            r = gw.retrieve(["word%d" % i for i in range(40)], topk=5)
            self.assertEqual(r.status, 413, r)
            self.assertIn("is already", r.json()["error"]["message"])
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_backend_inflight_queries") == 0))
            self.assertLess(gw.metric("searchgate_backend_calls_total"), 10, "the rest of the batch never ran")
            self.assertEqual(gw.metric("searchgate_response_bytes_held"), 0)
        finally:
            gw.stop()

    def test_valid_traffic_unchanged(self):
        # a Search-R1 batch (GRPO repeats, topk 3) under the default limits: answered, the same
        # bytes as each query alone, nothing refused or held afterwards
        gw = Gateway({"backends": [sgtest.example_backend()]})
        try:
            qs = ["paris %d" % (i % 64) for i in range(512)]
            r = gw.retrieve(qs, topk=3)
            self.assertEqual(r.status, 200, r)
            singles = {q: inner(gw.retrieve([q], topk=3)) for q in set(qs)}
            self.assertEqual(inner(r), b",".join(singles[q] for q in qs))
            self.assertEqual(gw.metric("searchgate_response_too_large_total"), 0)
            self.assertEqual(gw.metric("searchgate_response_budget_refused_total"), 0)
            self.assertEqual(gw.metric("searchgate_response_bytes_held"), 0)
        finally:
            gw.stop()


class AnswerSizeOtherRoutes(unittest.TestCase):
    """limits.max_response_bytes on the paths beside the query pipeline's: a fusion route's own
    checks (the estimate from its legs' DOC sizes, the exact fused size) and a cold bm25 route
    that knows its corpus's DOC size before its first answer."""

    def fusion_config(self, limit):
        return {"limits": {"max_response_bytes": limit},
                "backends": [big_backend("a"), big_backend("b"),
                             {"name": "hy", "fusion": {"routes": ["a", "b"], "method": "rrf"}}]}

    def test_fusion_exact_size(self):
        body = {"queries": ["word%d lorem" % i for i in range(6)], "topk": 5}
        gw = Gateway(self.fusion_config(64 << 20))
        try:
            r = gw.post("/retrieve/hy", body)
            self.assertEqual(r.status, 200, r)
            size = len(r.body)
            self.assertGreater(size, 200000)
        finally:
            gw.stop()
        # fresh gateways: the legs know no DOC size, so only the fused answer's exact size decides
        for limit, status in ((size, 200), (size - 1, 413)):
            gw = Gateway(self.fusion_config(limit))
            try:
                r = gw.post("/retrieve/hy", body)
                self.assertEqual(r.status, status, (limit, r))
                if status == 413:
                    err = r.json()["error"]
                    self.assertEqual(err["type"], "too_large")
                    self.assertIn("fusion route hy: the answer is %d bytes, over limits.max_response_bytes (%d)"
                                  % (size, limit), err["message"])
                    self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="exact"), 1)
                    self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="estimate"), 0)
                else:
                    self.assertEqual(len(r.body), size)
                self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0))
            finally:
                gw.stop()

    def test_fusion_estimate_before_any_leg_work(self):
        gw = Gateway(self.fusion_config(1 << 20))
        try:
            self.assertEqual(gw.post("/retrieve/hy", {"queries": ["word1"], "topk": 1}).status, 200)  # teaches the legs
            calls = gw.metric("searchgate_backend_calls_total")
            r = gw.post("/retrieve/hy", {"queries": ["word%d" % i for i in range(200)], "topk": 5})
            self.assertEqual(r.status, 413, r)
            err = r.json()["error"]
            self.assertEqual(err["type"], "too_large")
            self.assertIn("fusion route hy: the answer would be at least about", err["message"])
            self.assertIn("200 queries x topk 5", err["message"])
            self.assertIn("limits.max_response_bytes (1048576)", err["message"])
            self.assertEqual(gw.metric("searchgate_backend_calls_total"), calls, "no leg was called")
            self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="estimate"), 1)
            self.assertEqual(gw.post("/retrieve/hy", {"queries": ["word2"], "topk": 2}).status, 200)
        finally:
            gw.stop()

    def test_cold_bm25_route_refuses_from_its_corpus_doc_size(self):
        # the issue's request against a fresh bm25 route: the plugin tells the gateway its corpus's
        # mean DOC size (ABI 1.3 limits), so it is refused before the first search -- the real
        # answer over this 8-passage corpus would be a small 200, so only the seeded size refuses it
        tmp = tempfile.mkdtemp(prefix="sgbounds-")
        try:
            corpus = os.path.join(tmp, "corpus.jsonl")
            with open(corpus, "w") as f:
                for i in range(8):
                    f.write(json.dumps({"id": str(i), "contents": "\"Water %d\"\n" % i + "water rivers and lakes " * 5}) + "\n")
            index = os.path.join(tmp, "bm25")
            subprocess.run([sgtest.binary("searchgate-index-bm25"), corpus, index, "--no-progress", "--quiet"], check=True,
                           capture_output=True, timeout=scaled(120))
            gw = Gateway({"backends": [{"name": "wiki", "plugin": "bm25", "config": {"index": index}}]})
            try:
                r = gw.retrieve(["water"] * 2000, topk=1000)
                self.assertEqual(r.status, 413, r)
                err = r.json()["error"]
                self.assertEqual(err["type"], "too_large")
                self.assertIn("2000 queries x topk 1000", err["message"])
                self.assertIn("limits.max_response_bytes (33554432)", err["message"])
                self.assertEqual(gw.metric("searchgate_backend_calls_total"), 0, "no backend work")
                self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="estimate"), 1)
                # what fits is answered
                r = gw.retrieve(["water"] * 20, topk=3)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(len(r.json()["result"]), 20)
            finally:
                gw.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class Streaming(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway({"limits": {"max_response_bytes": 64 << 20},
                          "backends": [big_backend(), sgtest.example_backend("pages", pages=[
                              {"url": "https://p/%d" % i, "contents": "page %d " % i + "x" * 20000} for i in range(20)])]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_streamed_answer_is_byte_identical(self):
        qs = ["word%d lorem" % (i % 30) for i in range(90)]  # 90 queries, repeats included: ~9 MB
        for scores in (True, False):
            r = self.gw.retrieve(qs, topk=10, return_scores=scores)
            self.assertEqual(r.status, 200, r)
            self.assertGreater(len(r.body), 4 * 65536)
            self.assertEqual(int(r.headers["content-length"]), len(r.body))
            singles = {q: inner(self.gw.retrieve([q], topk=10, return_scores=scores)) for q in set(qs)}
            self.assertEqual(r.body, b'{"result":[' + b",".join(singles[q] for q in qs) + b"]}")
            json.loads(r.body)
        self.assertGreaterEqual(self.gw.metric("searchgate_response_streamed_total"), 2)
        self.assertTrue(wait_for(lambda: self.gw.metric("searchgate_response_bytes_held") == 0))

    def test_streamed_access_is_byte_identical(self):
        urls = ["https://p/%d" % (i % 20) for i in range(40)] + ["https://nowhere/"]
        r = self.gw.post("/access/pages", {"urls": urls})
        self.assertEqual(r.status, 200, r)
        self.assertGreater(len(r.body), 65536)
        singles = {u: inner(self.gw.post("/access/pages", {"urls": [u]})) for u in set(urls)}
        self.assertEqual(r.body, b'{"result":[' + b",".join(singles[u] for u in urls) + b"]}")

    @unittest.skipUnless(shutil.which("nghttp"), "nghttp (nghttp2-client) not installed")
    def test_http2_answer_is_byte_identical(self):
        body = json.dumps({"queries": ["word%d" % i for i in range(40)], "topk": 8}).encode()
        h1 = self.gw.post("/retrieve", body, headers={"Content-Type": "application/json"})
        self.assertEqual(h1.status, 200, h1)
        out = subprocess.run(["nghttp", "-d", "-", "-H", ":method: POST", "http://127.0.0.1:%d/retrieve" % self.gw.port],
                             input=body, capture_output=True, timeout=scaled(60))
        self.assertEqual(out.stdout, h1.body)


def h2_stalled_request(port, body):
    """An h2c client that sends one POST /retrieve and never grants flow-control window: the
    server may send 65535 bytes of the answer, then has to wait for it."""
    def frame(ftype, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload

    def lit(name, value):  # literal header field without indexing, new name, no Huffman
        n, v = name.encode(), value.encode()
        assert len(n) < 127 and len(v) < 127
        return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v

    data = json.dumps(body).encode()
    block = (lit(":method", "POST") + lit(":scheme", "http") + lit(":path", "/retrieve") + lit(":authority", "127.0.0.1") +
             lit("content-type", "application/json") + lit("content-length", str(len(data))))
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 4, 1, block) + frame(0, 1, 1, data))
    return s


class SlowReaders(unittest.TestCase):
    def test_slow_reader_disconnected_and_memory_freed(self):
        gw = Gateway({"limits": {"max_response_bytes": 64 << 20, "write_timeout_ms": 1000},
                      "backends": [big_backend()]})
        try:
            # 20 distinct queries 20 times each: 1 MB of results, a 20 MB answer
            body = {"queries": ["word%d lorem" % (i % 20) for i in range(400)], "topk": 5}
            self.assertEqual(gw.retrieve(["word1"], topk=1).status, 200)
            before = rss_kib(gw.proc.pid)
            s = stalled_request(gw.port, body)
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_streamed_total") == 1))
            time.sleep(0.3)
            # the stalled answer holds its blobs and a window, not a copy of its 20 MB body
            self.assertLess(rss_kib(gw.proc.pid) - before, 8 * 1024)
            t0 = time.time()
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_write_timeouts_total") == 1, 15),
                            "the stalled reader was not disconnected")
            self.assertGreater(time.time() - t0, 0.5)
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0), "memory not given back")
            self.assertTrue(closed_by_peer(s), "the connection is still open")
            s.close()
            self.assertLess(rss_kib(gw.proc.pid) - before, 8 * 1024)
            self.assertEqual(gw.retrieve(["word1"], topk=1).status, 200)
        finally:
            log = gw.stop()
        self.assertIn("took no bytes for 1000 ms", log)

    def read_answer(self, s):
        """A reader of the answer on `s`: read(n) takes up to n bytes; returns (read, state)."""
        state = {"got": b"", "length": None}

        def read(n):
            chunk = s.recv(n)
            state["got"] += chunk
            if state["length"] is None and b"\r\n\r\n" in state["got"]:
                head, state["got"] = state["got"].split(b"\r\n\r\n", 1)
                state["length"] = int([h.split(b":")[1] for h in head.split(b"\r\n")
                                       if h.lower().startswith(b"content-length")][0])
            return chunk
        return read, state

    def test_slow_steady_reader_is_cut_at_the_minimum_rate(self):
        # a reader that takes ~1 KB/s all along is never idle, yet it would hold its answer's
        # blobs for hours: after the grace (write_timeout_ms) it must keep up with
        # limits.min_write_bytes_per_s on average, and is cut when it falls behind
        # (the reader's window reopens each ~1.5 KB it reads: progress every ~1.5 s, never idle
        # for the grace of 4 s)
        grace, rate = 4000, 64 << 10
        gw = Gateway({"limits": {"max_response_bytes": 64 << 20, "write_timeout_ms": grace, "min_write_bytes_per_s": rate},
                      "backends": [big_backend()]})
        try:
            self.assertEqual(gw.retrieve(["word1"], topk=1).status, 200)
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0))
            level = gw.metric("searchgate_response_bytes_held")
            body = {"queries": ["word%d lorem" % (i % 20) for i in range(120)], "topk": 5}  # ~6 MB
            s = stalled_request(gw.port, body, mss=1448)
            s.settimeout(scaled(10))
            read, state = self.read_answer(s)
            t0 = time.time()
            self.assertTrue(read(1024))
            self.assertGreater(gw.metric("searchgate_response_bytes_held"), level + (512 << 10), "the answer holds its blobs")
            cut_after = None
            try:
                while time.time() - t0 < scaled(20):
                    time.sleep(0.25)
                    if not read(256):  # 256 bytes every 250 ms: ~1 KB/s
                        break
                    if cut_after is None and gw.metric("searchgate_response_write_timeouts_total", reason="slow") == 1:
                        cut_after = time.time() - t0
            except ConnectionResetError:
                pass
            if cut_after is None:
                cut_after = time.time() - t0
            self.assertEqual(gw.metric("searchgate_response_write_timeouts_total", reason="slow"), 1, "the slow reader was not cut")
            self.assertEqual(gw.metric("searchgate_response_write_timeouts_total", reason="idle"), 0, "cut as idle, not as slow")
            # cut after the grace plus what the rate allows for the bytes the kernels buffered
            # (a few KB here: well under a second at 64 KiB/s), plus a check period (1 s)
            self.assertGreater(cut_after, grace / 1000.0)
            self.assertLess(cut_after, grace / 1000.0 + scaled(3))
            self.assertLess(len(state["got"]), state["length"])
            self.assertTrue(closed_by_peer(s), "the connection is still open")
            s.close()
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == level),
                            "the answer's budget bytes did not come back")
            self.assertEqual(gw.retrieve(["word1"], topk=1).status, 200)
            log = gw.wait_log("takes less than limits.min_write_bytes_per_s (65536 bytes/s)")
        finally:
            gw.stop()
        self.assertIn("of an answer taken in", log)

    def test_reader_above_the_minimum_rate_is_not_cut(self):
        # the new contract (a minimum rate, limits.min_write_bytes_per_s) cuts readers below it;
        # one that reads steadily above it, from the first byte, is not cut however long the
        # answer takes: 16 KB every 100 ms (~160 KB/s) against a minimum of 64 KiB/s, a 64 KiB
        # window then takes 0.4 s to go out, longer than the write timeout (grace) of 300 ms
        gw = Gateway({"limits": {"max_response_bytes": 64 << 20, "write_timeout_ms": 300, "min_write_bytes_per_s": 64 << 10},
                      "backends": [big_backend()]})
        try:
            body = {"queries": ["word%d lorem" % (i % 20) for i in range(120)], "topk": 5}  # ~6 MB
            s = stalled_request(gw.port, body, rcvbuf=16384)
            s.settimeout(scaled(10))
            read, state = self.read_answer(s)
            slow_end = time.time() + 4
            while time.time() < slow_end:
                self.assertTrue(read(16384))
                time.sleep(0.1)
            self.assertEqual(gw.metric("searchgate_response_write_timeouts_total"), 0, "a reader above the minimum was cut")
            self.assertGreater(gw.metric("searchgate_response_bytes_held"), 512 << 10, "the answer is still being written")
            while len(state["got"]) < state["length"]:
                self.assertTrue(read(1 << 16))
            s.close()
            self.assertEqual(len(state["got"]), state["length"])
            json.loads(state["got"])
            self.assertEqual(gw.metric("searchgate_response_write_timeouts_total"), 0)
        finally:
            gw.stop()

    def test_slow_steady_reader_without_minimum_rate_is_not_cut(self):
        # min_write_bytes_per_s 0 turns the rate off: after the first 3 MB (what the kernel
        # buffers hold) the reader takes 8 KB every 100 ms, a 64 KiB window takes 0.8 s to go out,
        # twice the write timeout, yet the reader is not cut -- it takes bytes all along (the
        # socket's send queue shrinks)
        gw = Gateway({"limits": {"max_response_bytes": 64 << 20, "write_timeout_ms": 400, "min_write_bytes_per_s": 0},
                      "backends": [big_backend()]})
        try:
            body = {"queries": ["word%d lorem" % (i % 20) for i in range(120)], "topk": 5}  # ~6 MB
            s = stalled_request(gw.port, body)
            s.settimeout(scaled(10))
            read, state = self.read_answer(s)
            while len(state["got"]) < 3 << 20:
                self.assertTrue(read(1 << 16))
            slow_end = time.time() + 3
            while time.time() < slow_end:
                self.assertTrue(read(8192))
                time.sleep(0.1)
            self.assertEqual(gw.metric("searchgate_response_write_timeouts_total"), 0, "a steady reader was cut")
            while len(state["got"]) < state["length"]:
                self.assertTrue(read(1 << 16))
            s.close()
            self.assertEqual(len(state["got"]), state["length"])
            json.loads(state["got"])
        finally:
            gw.stop()

    def test_http2_reader_without_window_disconnected(self):
        gw = Gateway({"limits": {"max_response_bytes": 64 << 20, "write_timeout_ms": 800},
                      "backends": [big_backend()]})
        try:
            s = h2_stalled_request(gw.port, {"queries": ["word%d" % i for i in range(40)], "topk": 5})
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_write_timeouts_total") == 1, 15))
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0))
            self.assertTrue(closed_by_peer(s))
            s.close()
            self.assertEqual(gw.retrieve(["word1"], topk=1).status, 200)
        finally:
            gw.stop()


class MemoryBudget(unittest.TestCase):
    def config(self, wait_ms):
        return {"limits": {"max_response_bytes": 8 << 20, "max_response_bytes_inflight": 8 << 20, "response_wait_ms": wait_ms},
                "backends": [big_backend(delay_ms=1500, cache=False)]}

    def hold_budget(self, gw):
        """Starts a large request that holds its share of the budget while the backend works."""
        res = {}
        t = threading.Thread(target=lambda: res.update(r=gw.retrieve(["word%d" % i for i in range(30)], topk=20)))
        t.start()
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") > 0))
        return t, res

    def test_budget_full_is_503_with_retry_after(self):
        gw = Gateway(self.config(300))
        try:
            self.assertEqual(gw.retrieve(["lorem"], topk=1).status, 200)  # teaches the DOC size
            t, first = self.hold_budget(gw)
            t0 = time.time()
            r = gw.retrieve(["word%d common" % i for i in range(30)], topk=20)
            waited = time.time() - t0
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.headers.get("retry-after"), "1")
            self.assertEqual(r.json()["error"]["type"], "overloaded")
            self.assertIn("limits.max_response_bytes_inflight", r.json()["error"]["message"])
            self.assertGreaterEqual(waited, 0.25)
            self.assertEqual(gw.metric("searchgate_response_budget_refused_total"), 1)
            # small requests are not held up by it
            self.assertEqual(gw.retrieve(["lorem"], topk=1).status, 200)
            t.join()
            self.assertEqual(first["r"].status, 200, first["r"])
            self.assertTrue(wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0))
            self.assertEqual(gw.retrieve(["word%d common" % i for i in range(30)], topk=20).status, 200)
        finally:
            gw.stop()

    def test_request_waits_for_room(self):
        gw = Gateway(self.config(5000))
        try:
            self.assertEqual(gw.retrieve(["lorem"], topk=1).status, 200)
            t, first = self.hold_budget(gw)
            r = gw.retrieve(["word%d common" % i for i in range(30)], topk=20)
            self.assertEqual(r.status, 200, r)
            t.join()
            self.assertEqual(first["r"].status, 200)
            self.assertEqual(gw.metric("searchgate_response_budget_waits_total"), 1)
            self.assertEqual(gw.metric("searchgate_response_budget_refused_total"), 0)
        finally:
            gw.stop()


class NeverAdmitted(unittest.TestCase):
    """Item 6: max_inflight 8 + max_queue 10 with calls of 64: one request of 75+ distinct misses can
    never be admitted (its second call never fits the queue) -- 413 naming the bounds, not 503."""

    CFG = {"backends": [{"name": "small", "plugin": "example", "config": {"documents": sgtest.DOCS}, "cache": False,
                         "max_inflight": 8, "max_queue": 10}]}

    def test_413_naming_the_limit(self):
        gw = Gateway(self.CFG)
        try:
            for n in (75, 128):
                r = gw.retrieve(["never %d" % i for i in range(n)], topk=1)
                self.assertEqual(r.status, 413, r)
                self.assertNotIn("retry-after", r.headers)
                msg = r.json()["error"]["message"]
                self.assertIn("can never admit %d queries" % n, msg)
                self.assertIn("at most 74", msg)
                self.assertIn("max_queue 10", msg)
            self.assertEqual(gw.metric("searchgate_backend_calls_total"), 0)
            r = gw.retrieve(["fits %d" % i for i in range(74)], topk=1)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(len(r.json()["result"]), 74)
        finally:
            gw.stop()

    def test_check_warns_with_the_numbers(self):
        d = tempfile.mkdtemp(prefix="sgcheck-")
        path = os.path.join(d, "gw.json")
        cfg = dict(self.CFG, listen={"host": "127.0.0.1", "port": 0})
        with open(path, "w") as f:
            json.dump(cfg, f)
        out = subprocess.run([sgtest.binary("searchgate"), "--config", path, "--check"], capture_output=True, text=True,
                             timeout=scaled(60))
        self.assertEqual(out.returncode, 0, out)
        self.assertIn("warning: /retrieve small", out.stdout)
        self.assertIn("at most 74", out.stdout)
        self.assertIn("raise the route's max_queue to 9936", out.stdout)
        self.assertIn("limits.max_queries is 10000", out.stdout)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sgtest.main()
