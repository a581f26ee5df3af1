"""Integration tests of the gateway core with the example plugin: the /retrieve contract of
docs/protocols.md, "The `/retrieve` contract", error statuses, concurrency, keep-alive, hang-ups."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import DOCS, Gateway, example_backend, parallel, scaled


def config(**extra):
    cfg = {
        "backends": [
            example_backend("example", directives=True, workers=2,
                            pages=[{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}]),
            example_backend("slow", hang=True, timeout_ms=400),
            example_backend("broken", error={"status": "unavailable", "message": "index not loaded"}),
            example_backend("bad-upstream", error={"status": "upstream", "message": "upstream said no"}),
            example_backend("nocache", cache=False),
        ],
        "limits": {"max_body_bytes": 400000, "max_queries": 3000, "max_query_bytes": 512, "max_topk": 50},
    }
    cfg.update(extra)
    return cfg


class Core(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(config())

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    # --- docs/protocols.md, "The `/retrieve` contract" ---

    def test_appendix_a_scored_shape(self):
        r = self.gw.post("/retrieve", {"queries": ["who wrote hamlet", "capital of france"], "topk": 3, "return_scores": True},
                         headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["content-type"], "application/json")
        res = r.json()["result"]
        self.assertEqual(len(res), 2)
        for q in res:
            self.assertEqual(len(q), 3)
            scores = [item["score"] for item in q]
            self.assertEqual(scores, sorted(scores, reverse=True))
            for item in q:
                self.assertEqual(set(item), {"document", "score"})
                self.assertIsInstance(item["score"], float)
                doc = item["document"]
                self.assertIsInstance(doc["id"], str)
                self.assertIsInstance(doc["url"], str)
                self.assertTrue(doc["contents"].startswith('"'))
        self.assertTrue(res[0][0]["document"]["contents"].startswith('"Hamlet"\n'))
        self.assertTrue(res[1][0]["document"]["contents"].startswith('"Paris"\n'))

    def test_appendix_a_flat_shape(self):
        r = self.gw.retrieve(["who wrote hamlet"], topk=3, return_scores=False)
        self.assertEqual(r.status, 200)
        res = r.json()["result"]
        self.assertEqual(len(res), 1)
        self.assertEqual(len(res[0]), 3)
        first = res[0][0]
        self.assertNotIn("document", first)
        self.assertEqual(first["id"], "0")
        self.assertEqual(first["url"], "")  # RLinf/ASearcher read r["url"]
        self.assertTrue(first["contents"].startswith('"Hamlet"\n'))

    def test_appendix_a_empty_batch(self):
        r = self.gw.post("/retrieve", {"queries": [], "topk": 3, "return_scores": True})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b'{"result":[]}')

    def test_appendix_a_access(self):
        r = self.gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet", "https://nowhere.example/x"]})
        self.assertEqual(r.status, 200)
        res = r.json()["result"]
        self.assertEqual(res[0]["contents"], "Hamlet page")
        self.assertIsNone(res[1])

    def test_access_without_page_store_is_null_pages(self):
        """A backend without pages answers /access as RLinf's and ASearcher's own servers answer a
        page they do not have: 200 with a null per URL (their clients retry any error, a 404
        included, ten times ten seconds apart), with X-Searchgate-No-Page-Store and
        searchgate_access_no_page_store_total saying why; GET / says it has no /access."""
        before = self.gw.metric("searchgate_access_no_page_store_total", backend="slow")
        self.assertIn('searchgate_access_no_page_store_total{backend="nocache"} ',
                      self.gw.get("/metrics").body.decode())  # exported at 0 from the start
        urls = ["https://en.wikipedia.org/wiki/Hamlet", "https://example.org/2"]
        for path, body, name in (("/access/slow", {"urls": urls}, "slow"),
                                 ("/access", {"urls": urls, "backend": "nocache"}, "nocache")):
            r = self.gw.post(path, body)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.headers["content-type"], "application/json")
            self.assertEqual(r.json(), {"result": [None, None]})
            self.assertEqual(r.headers.get("x-searchgate-no-page-store"), name)
            self.assertNotIn("retry-after", r.headers)
        self.assertEqual(self.gw.metric("searchgate_access_no_page_store_total", backend="slow"), before + 1)
        self.assertNotIn("x-searchgate-no-page-store", self.gw.post("/access", {"urls": urls}).headers)
        # still validated: a malformed body is a 422, an unknown route a 404
        self.assertEqual(self.gw.post("/access/slow", {"urls": "x"}).status, 422)
        self.assertEqual(self.gw.post("/access/nosuch", {"urls": urls}).status, 404)
        access = {b["name"]: b["access"] for b in self.gw.get("/").json()["backends"]}
        self.assertEqual(access, {"example": True, "slow": False, "broken": False, "bad-upstream": False, "nocache": False})

    def test_both_shapes_same_documents(self):
        q = ["largest city", "similarity search library"]
        a = self.gw.retrieve(q, topk=4, return_scores=True).json()["result"]
        b = self.gw.retrieve(q, topk=4, return_scores=False).json()["result"]
        self.assertEqual([[i["document"] for i in x] for x in a], b)

    def test_topk_defaults(self):
        for body in ({"queries": ["paris"]}, {"queries": ["paris"], "topk": None}, {"queries": ["paris"], "topk": 0}):
            r = self.gw.post("/retrieve", body)
            self.assertEqual(r.status, 200, body)
            self.assertEqual(len(r.json()["result"][0]), 3, body)  # the configured default
        r = self.gw.post("/retrieve", {"queries": ["paris"], "topk": 5})
        self.assertEqual(len(r.json()["result"][0]), 5)
        # more than the corpus holds: every document, no padding
        r = self.gw.post("/retrieve", {"queries": ["paris"], "topk": 50})
        self.assertEqual(len(r.json()["result"][0]), len(DOCS))

    def test_unknown_fields_and_skyrl_form(self):
        r = self.gw.post("/retrieve", {"queries": ["tokyo"], "topk": 1, "return_scores": True, "extra": {"a": [1, 2]}, "n": 3})
        self.assertEqual(r.status, 200)
        r = self.gw.post("/retrieve", {"query": "tokyo", "topk": 1, "return_scores": True})
        self.assertEqual(r.status, 200)
        res = r.json()["result"]
        self.assertEqual(len(res), 1)
        self.assertTrue(res[0][0]["document"]["contents"].startswith('"Tokyo"'))

    def test_order_and_duplicates(self):
        qs = ["tokyo", "paris", "tokyo", "hamlet", "paris", "redis cache"]
        res = self.gw.retrieve(qs, topk=1).json()["result"]
        titles = [x[0]["document"]["contents"].split("\n")[0] for x in res]
        self.assertEqual(titles, ['"Tokyo"', '"Paris"', '"Tokyo"', '"Hamlet"', '"Paris"', '"Redis"'])

    def test_large_batch_2560(self):
        words = ["hamlet", "paris", "tokyo", "faiss", "redis", "zürich"]
        qs = ["%s q%d" % (words[i % 6], i) for i in range(2560)]  # 2,560 distinct queries (SR1's 512 x 5)
        r = self.gw.retrieve(qs, topk=3, return_scores=True)
        self.assertEqual(r.status, 200)
        res = r.json()["result"]
        self.assertEqual(len(res), 2560)
        want = ['"Hamlet"', '"Paris"', '"Tokyo"', '"FAISS"', '"Redis"', '"Zürich"']
        for i, q in enumerate(res):
            self.assertEqual(len(q), 3)
            self.assertEqual(q[0]["document"]["contents"].split("\n")[0], want[i % 6], i)

    def test_non_ascii_round_trip(self):
        # Python clients send json.dumps(ensure_ascii=True): \u escapes incl. surrogate pairs
        body = json.dumps({"queries": ["東京 tokyo 😀", "zürich city"], "topk": 1, "return_scores": False})
        self.assertIn("\\ud83d\\ude00", body)
        r = self.gw.post("/retrieve", body.encode("ascii"), headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200)
        self.assertIn("東京都".encode(), r.body)  # raw UTF-8 out, not escaped
        self.assertIn("Zürich".encode(), r.body)
        self.assertNotIn(b"\\u", r.body)
        res = r.json()["result"]
        self.assertTrue(res[0][0]["contents"].startswith('"Tokyo"'))
        self.assertTrue(res[1][0]["contents"].startswith('"Zürich"'))
        # raw UTF-8 in the request works too
        r = self.gw.post("/retrieve", '{"queries":["Zürich"],"topk":1}'.encode())
        self.assertTrue(r.json()["result"][0][0]["contents"].startswith('"Zürich"'))

    def test_backend_selection(self):
        r = self.gw.retrieve(["x"], path="/retrieve/broken")
        self.assertEqual(r.status, 503)
        r = self.gw.post("/retrieve", {"queries": ["x"], "backend": "broken"})
        self.assertEqual(r.status, 503)
        r = self.gw.retrieve(["paris"], path="/retrieve/nocache")
        self.assertEqual(r.status, 200)
        r = self.gw.retrieve(["paris"], path="/retrieve/nosuch")
        self.assertEqual(r.status, 404)
        self.assertIn("nosuch", r.json()["error"]["message"])
        r = self.gw.post("/retrieve", {"queries": ["x"], "backend": "nosuch"})
        self.assertEqual(r.status, 404)

    # --- errors ---

    def assertError(self, r, status, needle):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.headers["content-type"], "application/json")
        body = r.json()
        self.assertEqual(body["error"]["code"], status)
        self.assertIn(needle, body["error"]["message"])
        self.assertEqual(body["detail"], body["error"]["message"])

    def test_strict_json_bodies(self):
        """RFC 8259: what is not JSON is a 400 invalid_json -- never a silently different query."""
        ham = self.gw.retrieve(["ham"], topk=1).body
        for body in (b'{"queries":["ham\x00let"],"topk":1}', b'{"queries":["ham\nlet"]}', b'{"queries":["a\x01"]}',
                     b'{"queries":["\xff\xfe"]}', b'{"queries":["hamlet"]} xyz', b'{"queries":["a"],"topk":01}'):
            r = self.gw.post("/retrieve", body, headers={"Content-Type": "application/json"})
            self.assertError(r, 400, "not valid JSON")
            self.assertEqual(r.json()["error"]["type"], "invalid_json")
            self.assertNotEqual(r.body, ham)
        self.assertError(self.gw.post("/access", b'{"urls":["a\x00b"]}'), 400, "raw NUL byte in a string")
        # the escaped NUL stays a 422 (valid JSON, but not a query the backends can take)
        self.assertError(self.gw.post("/retrieve", b'{"queries":["ham\\u0000let"]}'), 422, "NUL")
        # a key given twice keeps its last value, as Python's json does
        r = self.gw.post("/retrieve", b'{"queries":["paris"],"topk":1,"queries":["hamlet"],"topk":2,"return_scores":true}')
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(len(res), 1)
        self.assertEqual(len(res[0]), 2)
        self.assertTrue(res[0][0]["document"]["contents"].startswith('"Hamlet"'))

    def raw(self, data):
        """Sends raw bytes on a fresh connection; returns (status, headers dict, body)."""
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:  # h2o closed with our bytes unread: the answer came first
                    break
                if not chunk:
                    break
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        return int(lines[0].split()[1]), headers, body

    def test_h2o_errors_are_json(self):
        """Requests h2o refuses before the handler runs get the gateway's JSON error shape."""
        cases = [
            (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad_request",
             "broken chunked-encoding"),
            (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "bad_request",
             "unknown transfer-encoding"),
            (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12x\r\n\r\n", 400, "bad_request",
             "broken content-length header"),
            (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999\r\n\r\n", 413, "too_large",
             "limits.max_body_bytes (400000 bytes)"),
            (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n", 417,
             "expectation_failed", "unknown expectation"),
        ]
        for data, status, typ, needle in cases:
            st, headers, body = self.raw(data)
            self.assertEqual(st, status, body)
            self.assertEqual(headers["content-type"], "application/json", body)
            self.assertEqual(int(headers["content-length"]), len(body))
            err = json.loads(body)
            self.assertEqual(err["error"], {"code": status, "type": typ, "message": err["detail"]})
            self.assertIn(needle, err["detail"])
        # what h2o writes straight to the socket stays plain text (documented in docs/api.md)
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
        st, headers, body = self.raw(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many + b"\r\n")
        self.assertEqual((st, body), (400, b"Bad Request"))

    def test_error_statuses(self):
        gw = self.gw
        self.assertError(gw.post("/retrieve", "not json"), 400, "not valid JSON")
        self.assertError(gw.post("/retrieve", '{"queries": ["a"'), 400, "not valid JSON")
        self.assertError(gw.post("/retrieve", b""), 422, "body is required")
        self.assertError(gw.post("/retrieve", {"topk": 3}), 422, '"queries" is required')
        self.assertError(gw.post("/retrieve", {"queries": "a"}), 422, "list of strings")
        self.assertError(gw.post("/retrieve", {"queries": ["a", 7]}), 422, "queries[1] must be a string")
        self.assertError(gw.post("/retrieve", {"queries": ["a"], "topk": -1}), 422, "negative")
        self.assertError(gw.post("/retrieve", {"queries": ["a"], "topk": 1.5}), 422, "integer")
        self.assertError(gw.post("/retrieve", {"queries": ["a"], "topk": 51}), 413, "max_topk")
        self.assertError(gw.post("/retrieve", {"queries": ["a"] * 3001}), 413, "max_queries")
        self.assertError(gw.post("/retrieve", {"queries": ["a" * 513]}), 413, "max_query_bytes")
        self.assertError(gw.post("/retrieve", {"queries": ["a"], "padding": "x" * 400001}), 413, "max_body_bytes")
        self.assertError(gw.get("/retrieve"), 405, "use POST")
        self.assertEqual(gw.get("/retrieve").headers["allow"], "POST")
        self.assertError(gw.post("/health", {}), 405, "use GET")
        self.assertError(gw.get("/nope"), 404, "no route")
        self.assertError(gw.post("/retrieve/a/b", {"queries": ["x"]}), 404, "no route")
        self.assertError(gw.retrieve(["x"], path="/retrieve/broken"), 503, "index not loaded")
        self.assertError(gw.retrieve(["x"], path="/retrieve/bad-upstream"), 502, "upstream said no")
        self.assertIn("retry-after", gw.retrieve(["x"], path="/retrieve/broken").headers)
        self.assertError(gw.retrieve(["@error=internal boom"]), 500, "scripted failure")
        self.assertError(gw.retrieve(["@error=timeout boom"]), 504, "scripted failure")
        for bad in ("soon", "0", "-5", "-1", "5abc", "+5", "1.5", "1e3", "99999999999999999999999"):
            self.assertError(gw.retrieve(["x"], headers={"X-Timeout-Ms": bad}), 422, "X-Timeout-Ms")
        self.assertEqual(gw.retrieve(["x"], headers={"X-Timeout-Ms": "5000"}).status, 200)
        self.assertError(gw.post("/access", {"urls": [1]}), 422, "urls[0] must be a string")

    def test_body_over_h2o_limit(self):
        # h2o itself refuses bodies beyond twice the limit as soon as it sees Content-Length, before
        # reading them: still a 413 (sent before the body, so the client must not write it first)
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=30) as s:
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n")
            head = s.recv(4096)
        self.assertTrue(head.startswith(b"HTTP/1.1 413 "), head)

    def test_deadline_504_and_other_routes_fast(self):
        t0 = time.time()
        r = self.gw.retrieve(["hang"], path="/retrieve/slow")
        took = time.time() - t0
        self.assertError(r, 504, "deadline of 400 ms exceeded")
        self.assertLess(took, 0.4 + scaled(0.3))
        self.assertGreaterEqual(took, 0.39)
        # the client may shorten the deadline, never lengthen it
        t0 = time.time()
        r = self.gw.retrieve(["hang"], path="/retrieve/slow", headers={"X-Timeout-Ms": "100"})
        self.assertEqual(r.status, 504)
        self.assertLess(time.time() - t0, 0.1 + scaled(0.3))
        t0 = time.time()
        r = self.gw.retrieve(["hang"], path="/retrieve/slow", headers={"X-Timeout-Ms": "100000"})
        self.assertEqual(r.status, 504)
        self.assertLess(time.time() - t0, 0.4 + scaled(0.3))

    # --- concurrency and connections ---

    def test_concurrent_requests(self):
        words = ["hamlet", "paris", "tokyo", "faiss", "redis"]
        want = ['"Hamlet"', '"Paris"', '"Tokyo"', '"FAISS"', '"Redis"']

        def worker(k):
            conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
            for j in range(10):
                i = (k + j) % 5
                conn.request("POST", "/retrieve", json.dumps({"queries": [words[i] + " c%d" % k], "topk": 1}),
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = json.loads(resp.read())
                assert resp.status == 200, resp.status
                got = body["result"][0][0]["document"]["contents"].split("\n")[0] if body["result"][0] and "document" in \
                    body["result"][0][0] else body["result"][0][0]["contents"].split("\n")[0]
                assert got == want[i], (got, want[i])
            conn.close()
            return True

        self.assertTrue(all(parallel(worker, [(k,) for k in range(64)])))

    def test_keep_alive_and_connection_per_request(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=30)
        for i in range(20):
            conn.request("POST", "/retrieve", json.dumps({"queries": ["paris %d" % i], "topk": 1}),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
            sock = conn.sock
        self.assertIs(conn.sock, sock)  # the same TCP connection served all of them
        conn.close()
        for i in range(20):
            r = sgtest.request(self.gw.port, "POST", "/retrieve", {"queries": ["tokyo %d" % i], "topk": 1},
                               headers={"Connection": "close"})
            self.assertEqual(r.status, 200)

    def test_client_hangs_up_mid_request(self):
        before = self.gw.metric("searchgate_requests_total", backend="example")
        body = json.dumps({"queries": ["@delay=300 hangup %d" % os.getpid()], "topk": 1}).encode()
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", self.gw.port))
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
            if i % 2:
                s.shutdown(socket.SHUT_WR)
            s.close()
        # half a request, then gone
        s = socket.create_connection(("127.0.0.1", self.gw.port))
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"queries\"")
        s.close()
        time.sleep(scaled(0.6))
        self.assertEqual(self.gw.get("/").status, 200)
        self.assertEqual(self.gw.retrieve(["paris"], topk=1).status, 200)
        self.assertGreaterEqual(self.gw.metric("searchgate_requests_total", backend="example") - before, 20)

    @unittest.skipUnless(shutil.which("nghttp"), "nghttp (nghttp2-client) not installed")
    def test_http2_client_resets_before_completion(self):
        # h2c: the client gives up after 100 ms while the backend takes 500 ms; h2o disposes the
        # request while the search is in flight, and the late completion must be dropped safely
        for i in range(5):
            subprocess.run(["nghttp", "-t", "100ms", "-d", "-", "-H", ":method: POST",
                            "http://127.0.0.1:%d/retrieve" % self.gw.port],
                           input=json.dumps({"queries": ["@delay=500 h2 %d" % i], "topk": 1}).encode(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        time.sleep(scaled(0.8))
        out = subprocess.run(["nghttp", "-d", "-", "-H", ":method: POST", "http://127.0.0.1:%d/retrieve" % self.gw.port],
                             input=b'{"queries":["paris"],"topk":1}', capture_output=True, timeout=30)
        self.assertIn(b'Paris is the capital', out.stdout)
        self.assertGreaterEqual(self.gw.metric("searchgate_requests_total", backend="example", code="other"), 1)

    # --- health, metrics, root ---

    def test_stats_window(self):
        """window is whole seconds in [10, 900]; anything else is a 400 naming the range, not a clamp."""
        self.assertEqual(len(self.gw.get("/stats").json()["series"]), 300)
        for value, n in (("10", 10), ("900", 900), ("60", 60)):
            r = self.gw.get("/stats?window=" + value)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["window_s"], n)
            self.assertEqual(len(r.json()["series"]), n)
        self.assertEqual(self.gw.get("/stats?window=60&window=20").json()["window_s"], 20)  # the last one, as Starlette
        self.assertEqual(self.gw.get("/stats?xwindow=5&other=1").json()["window_s"], 300)  # other parameters are ignored
        for bad in ("abc", "5", "9", "901", "-1", "", "10.5", "60x", "+60", "%3600", "1000000000000"):
            r = self.gw.get("/stats?window=" + bad)
            self.assertError(r, 400, "window must be a whole number of seconds in [10, 900]")
            self.assertEqual(r.json()["error"]["type"], "bad_request")
        self.assertGreaterEqual(self.gw.metric("searchgate_http_requests_total", route="stats", code="400"), 11)

    def test_health_metrics_root(self):
        r = self.gw.get("/health")
        self.assertEqual(r.status, 503)  # "broken" is configured to fail
        h = r.json()
        self.assertEqual(h["status"], "degraded")
        self.assertEqual(h["backends"]["example"]["status"], "ok")
        self.assertEqual(h["backends"]["broken"]["status"], "unhealthy")
        self.assertIn("index not loaded", h["backends"]["broken"]["error"])
        root = self.gw.get("/").json()
        self.assertEqual(root["default_backend"], "example")
        self.assertEqual([b["name"] for b in root["backends"]], ["example", "slow", "broken", "bad-upstream", "nocache"])
        self.gw.retrieve(["metrics probe"], topk=1)
        m = self.gw.get("/metrics")
        self.assertTrue(m.headers["content-type"].startswith("text/plain; version=0.0.4"))
        text = m.body.decode()
        for name in ("searchgate_requests_total", "searchgate_queries_total", "searchgate_request_duration_seconds_bucket",
                     "searchgate_inflight_requests", "searchgate_backend_calls_total", "searchgate_cache_hits_total",
                     "searchgate_backend_example_calls_total", "searchgate_http_requests_total"):
            self.assertIn(name, text)
        self.assertGreaterEqual(self.gw.metric("searchgate_requests_total", backend="example", code="200"), 1)
        self.assertGreaterEqual(self.gw.metric("searchgate_request_duration_seconds_count", backend="example"), 1)
        # every sample line parses as "name{labels} value"
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                float(value.replace("+Inf", "inf").replace("NaN", "nan"))


class DebugLog(unittest.TestCase):
    """log_level debug: one line per request with route, backend, client and outcome."""

    def test_per_request_lines(self):
        env = {"SG_TEST_KEY_DBG": "k-dbg"}
        cfg = config(log_level="debug",
                     clients={"keys": [{"id": "job-dbg", "key_env": "SG_TEST_KEY_DBG"}]})
        gw = Gateway(cfg, env=env)
        try:
            self.assertEqual(gw.retrieve(["who wrote hamlet", "paris", "paris"], headers={"X-API-Key": "k-dbg"}).status, 200)
            self.assertEqual(gw.post("/retrieve", {"queries": [3]}).status, 422)
            self.assertEqual(gw.retrieve(["x"], headers={"X-API-Key": "nope"}).status, 401)
            self.assertEqual(gw.retrieve(["x"], path="/retrieve/missing").status, 404)
            self.assertEqual(gw.retrieve(["x"], path="/retrieve/broken").status, 503)
            self.assertEqual(gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet"]}).status, 200)
            self.assertEqual(gw.get("/metrics").status, 200)
            self.assertEqual(gw.get("/nope").status, 404)
            # the other routes log after their answer went out: give the last line a moment
            deadline = time.time() + scaled(5)
            # (the connections may sit on different loops, so wait for both lines)
            while time.time() < deadline and not all(
                    s in gw.read_log() for s in ("GET /metrics 200", "GET /nope 404")):
                time.sleep(0.02)
            log = gw.read_log()
        finally:
            gw.stop()
        req = [l for l in log.splitlines() if "debug [request]" in l]
        self.assertRegex(req[0], r"debug \[request\] \d+-\d+ POST /retrieve backend=example client=job-dbg status=200 "
                                 r"queries=3 distinct=2 l1=0 redis=0 misses=2 ms=[\d.]+$")
        self.assertIn("- POST /retrieve backend=example client=- status=422 error=validation_error queries=0", req[1])
        self.assertIn("backend=- client=- status=401 error=unauthorized", req[2])  # refused before the route is looked up
        self.assertIn("backend=- client=- status=404 error=not_found", req[3])
        self.assertRegex(req[4], r"POST /retrieve backend=broken client=ip:127\.0\.0\.1 status=503 error=unavailable queries=1 ")
        self.assertIn("POST /access backend=example client=ip:127.0.0.1 status=200 queries=1 ms=", req[5])
        self.assertEqual(len(req), 6, "\n".join(req))
        self.assertRegex(log, r"debug \[http\] GET /metrics 200")
        self.assertRegex(log, r"debug \[http\] GET /nope 404")

    def test_quiet_at_info(self):
        gw = Gateway(config())
        try:
            self.assertEqual(gw.retrieve(["paris"]).status, 200)
            log = gw.read_log()
        finally:
            gw.stop()
        self.assertNotIn("debug", log)


class MetricsAtStart(unittest.TestCase):
    """Prometheus convention: a counter whose label values are known from the config is exported
    at 0 from the start (rate() over an absent series is empty, and alerts on it never fire).
    Every family docs/operations.md describes must be in /metrics before any traffic, for a config
    that uses every feature but rerank and the local backend (their pages test them)."""

    def start(self, queries_budget=10):
        """Two plugin routes (one metered and traced, one with pages), a fusion route over them, a
        keyed client with a budget and rate-limited anonymous callers, Redis."""
        redis = sgtest.Redis()
        self.addCleanup(redis.close)
        os.environ["SG_TEST_KEY_METRICS"] = "metrics-key"
        paid = example_backend("paid", directives=True)
        paid["metered"] = True
        tdir = tempfile.mkdtemp(prefix="sgtrace-")
        self.addCleanup(shutil.rmtree, tdir, True)
        paid["trace"] = {"path": tdir + "/"}  # the searchgate_trace_* families exist per trace file
        # paid fails on "@error=STATUS" queries, paged answers them: on the fusion route, a partial answer
        gw = Gateway({"backends": [paid, example_backend("paged", pages=[{"url": "https://x.example/", "contents": "x"}]),
                                   {"name": "hy", "fusion": {"routes": ["paid", "paged"]}}],
                      "cache": {"redis": {"port": redis.port}},
                      "clients": {"default": {"rate": 100},
                                  "keys": [{"id": "job", "key_env": "SG_TEST_KEY_METRICS", "global": True,
                                            "budget": {"queries": queries_budget, "period": "day"}}]}})
        self.addCleanup(gw.stop)
        return gw

    @staticmethod
    def series(text):
        """(family, label set) of every sample; histogram buckets' `le` dropped; the series of
        anonymous callers (client="ip:...", known only once they call) left out."""
        out = set()
        for line in text.splitlines():
            m = re.match(r"^(searchgate_[a-z0-9_]+?)(_bucket|_sum|_count)?(\{([^}]*)\})? \S+$", line)
            if m:
                labels = tuple(sorted((k, v) for k, v in re.findall(r'(\w+)="([^"]*)"', m.group(4) or "") if k != "le"))
                if ("client", "ip:127.0.0.1") not in labels:
                    out.add((m.group(1), labels))
        return out

    def test_every_configured_label_set_is_exported_at_start(self):
        """Every series that traffic on every route (errors of each kind, /access, the fusion
        route, an exhausted budget, an unknown route) and from both kinds of client brings about
        was already in /metrics before it: every route, fusion leg, client, status and reason."""
        gw = self.start(queries_budget=3)
        at_start = self.series(gw.get("/metrics").body.decode())
        key = {"X-API-Key": "metrics-key"}
        statuses = set()
        for path in ("/retrieve", "/retrieve/paged", "/retrieve/hy", "/access/paged", "/access/paid", "/access/hy"):
            for q in ("paris", "@error=unavailable x", "@error=timeout y", "@error=upstream z", "@error=internal w"):
                body = {"urls": ["https://x.example/"]} if path.startswith("/access") else {"queries": [q]}
                statuses.add(gw.post(path, body).status)
                statuses.add(gw.post(path, body, headers=key).status)
        statuses |= {gw.post("/retrieve/nope", {"queries": ["x"]}).status, gw.post("/retrieve", {"queries": "x"}).status,
                     gw.post("/retrieve", b"{").status, gw.get("/nope").status}
        self.assertTrue({200, 400, 404, 422, 429, 500, 502, 503, 504} <= statuses, statuses)
        self.assertGreater(gw.metric("searchgate_fusion_partial_total", route="hy", leg="paid"), 0)
        after = self.series(gw.get("/metrics").body.decode())
        self.assertEqual(sorted(after - at_start), [], "series that appeared only after traffic")

    def test_every_documented_family_is_exported_at_start(self):
        with open(os.path.join(sgtest.SOURCE_DIR, "docs", "operations.md")) as f:
            documented = set(re.findall(r"searchgate_[a-z0-9_]+", f.read()))
        gw = self.start()
        text = gw.get("/metrics").body.decode()
        exported = set(re.findall(r"^# TYPE (searchgate_\S+)", text, re.M))
        elsewhere = ("searchgate_rerank_", "searchgate_backend_local_")  # not configured here
        families = {re.sub(r"_(bucket|sum|count)$", "", m) if re.sub(r"_(bucket|sum|count)$", "", m) in exported else m
                    for m in documented if not m.endswith("_")}  # "searchgate_backend_<plugin>_..." are templates
        missing = sorted(m for m in families - exported if not m.startswith(elsewhere))
        self.assertEqual(missing, [], "documented metrics absent from /metrics at start")
        # the fusion route's partial answers: every leg and reason, at 0 (was: absent until the first one)
        partial = re.findall(r'^searchgate_fusion_partial_total\{route="hy",leg="(\w+)",reason="(\w+)"\} (\S+)$', text, re.M)
        self.assertIn(("paged", "timeout", "0"), partial)
        self.assertIn(("paid", "unavailable", "0"), partial)
        self.assertEqual({v for _, _, v in partial}, {"0"})
        self.assertIn('searchgate_access_no_page_store_total{backend="paid"} 0', text)


class Shutdown(unittest.TestCase):
    def test_sigterm_with_requests_in_flight(self):
        gw = Gateway({"backends": [example_backend(hang=True, timeout_ms=60000), example_backend("fast", delay_ms=200)],
                      "shutdown_grace_ms": 400})
        out = {}

        def call(name, path):
            out[name] = gw.retrieve(["x"], path=path)

        ts = [threading.Thread(target=call, args=("hang", "/retrieve")),
              threading.Thread(target=call, args=("fast", "/retrieve/fast"))]
        for t in ts:
            t.start()
        time.sleep(0.1)
        t0 = time.time()
        gw.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join()
        self.assertEqual(out["fast"].status, 200)  # finished within the grace period
        self.assertEqual(out["hang"].status, 503)  # still waiting when it ended
        self.assertIn("shutting down", out["hang"].json()["error"]["message"])
        self.assertLess(time.time() - t0, 0.4 + scaled(0.5))
        gw.stop()  # exit 0, and no sanitizer report
        self.assertEqual(gw.proc.returncode, 0)


class DocsPluginExample(unittest.TestCase):
    def test_minimal_plugin_from_docs_builds_and_serves(self):
        """docs/plugins.md's minimal plugin, compiled as the page says, loads and answers."""
        with open(os.path.join(sgtest.SOURCE_DIR, "docs", "plugins.md"), encoding="utf-8") as f:
            text = f.read()
        blocks = [b.split("```", 1)[0] for b in text.split("```c\n")[1:]]
        code = [b for b in blocks if '#include "sg_backend.h"' in b and "sg_backend_entry" in b]
        self.assertEqual(len(code), 1)
        d = tempfile.mkdtemp(prefix="sgdoc-")
        try:
            src, so = os.path.join(d, "hello.c"), os.path.join(d, "sg_hello.so")
            with open(src, "w") as f:
                f.write(code[0])
            cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                                 "-I", os.path.join(sgtest.SOURCE_DIR, "backends", "include"), src, "-o", so, "-Wl,-z,defs"],
                                capture_output=True, text=True)
            self.assertEqual(cc.returncode, 0, cc.stderr)
            gw = Gateway({"backends": [{"name": "hello", "plugin": so}]})
            try:
                r = gw.retrieve(["a", "b"], topk=1, return_scores=False)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.json(), {"result": [[{"id": "0", "contents": '"Hello"\nworld', "url": ""}]] * 2})
            finally:
                gw.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)


class StartupErrors(unittest.TestCase):
    def run_gw(self, cfg, *args):
        gw = Gateway(cfg, expect_fail=True, extra_args=args)
        rc = gw.wait_exit(30)
        return rc, gw.read_log()

    def test_bad_config(self):
        rc, log = self.run_gw({"backends": [{"name": "x", "plugin": "example", "topk": 0}]})
        self.assertEqual(rc, 1)
        self.assertIn("backends[0].topk: expected an integer in [1, 1000], got 0", log)

    def test_bad_plugin_config(self):
        rc, log = self.run_gw({"backends": [{"name": "x", "plugin": "example", "config": {"documents": []}}]})
        self.assertEqual(rc, 1)
        self.assertIn("backend x", log)
        self.assertIn("config.documents: needs at least one document", log)

    def test_missing_and_wrong_plugins(self):
        rc, log = self.run_gw({"backends": [{"name": "x", "plugin": "nonexistent"}]})
        self.assertEqual(rc, 1)
        self.assertIn("sg_nonexistent.so: cannot load", log)
        bad = os.path.join(sgtest.BUILD_DIR, "tests", "unit", "plugins", "sg_test_bad_abi.so")
        rc, log = self.run_gw({"backends": [{"name": "x", "plugin": bad}]})
        self.assertEqual(rc, 1)
        self.assertIn("built for plugin ABI 2.0", log)

    def test_port_in_use(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            rc, log = self.run_gw({"backends": [example_backend()]}, "--port", str(port))
        self.assertEqual(rc, 1)
        self.assertIn("cannot listen on 127.0.0.1:%d" % port, log)

    def test_index_dispatcher(self):
        out = subprocess.run([sgtest.binary("searchgate-index"), "nosuchkind", "x"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn('no index builder for "nosuchkind"', out.stderr)
        out = subprocess.run([sgtest.binary("searchgate-index"), "--help"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0)
        # every builder the build ships next to it is in the usage (convert was missing from it)
        kinds = sorted(f[len("searchgate-index-"):] for f in os.listdir(sgtest.BUILD_DIR) if f.startswith("searchgate-index-"))
        self.assertIn("bm25", kinds)
        for kind in kinds:
            self.assertRegex(out.stdout, r"(?m)^  %s " % kind, "searchgate-index --help does not name %s" % kind)

    def test_version_and_help(self):
        out = subprocess.run([sgtest.binary("searchgate"), "--version"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        # the version, the git revision, the plugin ABI and the libraries in use (issue 20)
        self.assertRegex(out.stdout, r"^searchgate \d+\.\d+\.\d+ \(git ([0-9a-f]{7,}(-dirty)?|unknown)\)\n")
        for line in (r"plugin ABI\s+\d+\.\d+$", r"h2o\s+2\.2\.5 ", r"hiredis\s+\d+\.\d+\.\d+$", r"libcurl\s+\d+\.\d+\.\d+$",
                     r"BLAS\s+OpenBLAS \d+\.\d+\.\d+, \w+ kernels", r"FAISS\s+\d+\.\d+\.\d+", r"OpenSSL\s+OpenSSL \d",
                     r"plugins\s+%s: .*\bbm25\b" % re.escape(os.path.join(sgtest.BUILD_DIR, "plugins"))):
            self.assertRegex(out.stdout, re.compile("^" + line, re.M))
        out = subprocess.run([sgtest.binary("searchgate"), "--help"], capture_output=True, text=True)
        self.assertIn("--config", out.stdout)
        out = subprocess.run([sgtest.binary("searchgate")], capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        out = subprocess.run([sgtest.binary("searchgate"), "--config", "x", "--port", "99999"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("--port", out.stderr)


if __name__ == "__main__":
    sgtest.main()
