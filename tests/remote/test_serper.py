"""The serper backend end to end: the real searchgate and sg_serper.so against the fake
serper.dev of fakes/fake_serper.py (no serper.dev is reachable from the build machines)."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import rtest
from rtest import backend, gateway, scaled, wait_for
from base import make_cert
from fake_serper import FakeSerper, slime_format

KEY_ENV = "SG_TEST_SERPER_KEY"


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def serper_cfg(fake, **kw):
    cfg = {"base_url": fake.url, "api_key_env": KEY_ENV, "backoff_ms": 20, "qps": 0, "max_inflight": 0}
    cfg.update(kw)
    return cfg


class SerperBase(unittest.TestCase):
    def setUp(self):
        self.fake = FakeSerper()
        self.env = {KEY_ENV: self.fake.api_key}
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            log = self.gw.stop()
            self.assertNotIn(self.fake.api_key, log, "the API key leaked into the log")
        self.fake.stop()

    def start(self, route=None, env=None, **cfg):
        self.gw = gateway(backend("google", "serper", serper_cfg(self.fake, **cfg), **(route or {})), env=env or self.env)
        return self.gw


TRICKY = [
    {"title": "Hamlet", "link": "https://en.wikipedia.org/wiki/Hamlet", "position": 1,
     "snippet": "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601 ... It is "
                "Shakespeare's longest play ... with 29,551 words."},
    {"title": "Only short bits", "link": "https://example.org/short", "position": 2,
     "snippet": "one two three ... four five six seven eight ... nine"},
    {"link": "https://example.org/notitle", "position": 3,
     "snippet": "A result that has no title at all but a long enough snippet here"},
    {"title": "", "snippet": "tiny", "link": "https://example.org/skipped", "position": 4},
    {"title": "Unicode whitespace", "position": 5, "link": "https://example.org/ws",
     "snippet": "\u3000 words\u00a0separated\u2009by\u2003odd\u205fspaces here \u3000...zero\u200bwidth\u200bjoins do not split here"},
    {"title": "Quotes \"inside\" and 東京 🚀", "position": 6, "link": "https://example.org/q",
     "snippet": "exactly six words are kept here ..... five words are dropped now ...\nnew lines\ncount as spaces too ok"},
    {"title": "No link here", "position": 7, "snippet": "the url of this document must be an empty string then"},
    {"snippet": "", "position": 8},
    {"title": "Ellipsis char", "position": 9, "link": "https://example.org/e",
     "snippet": "the unicode ellipsis \u2026 does not split a snippet into fragments at all"},
]


class TestFormatting(SerperBase):
    def test_slime_fidelity_both_shapes(self):
        q = "tricky formatting"
        self.fake.organic[q] = TRICKY
        gw = self.start()
        expected = slime_format(TRICKY)
        self.assertEqual(len(expected), 7)  # two items have neither a title nor a surviving fragment
        r = gw.retrieve([q], topk=10, return_scores=True)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers["content-type"], "application/json")
        items = r.json()["result"][0]
        self.assertEqual([it["document"]["contents"] for it in items], [e["document"]["contents"] for e in expected])
        emitted = [it for it in TRICKY if slime_format([it])]
        self.assertEqual([it["document"]["url"] for it in items], [it.get("link", "") for it in emitted])
        self.assertEqual([it["document"]["id"] for it in items], [str(it["position"]) for it in emitted])
        self.assertEqual([it["score"] for it in items], [1.0 / (i + 1) for i in range(len(items))])
        r2 = gw.retrieve([q], topk=10, return_scores=False)
        self.assertEqual(r2.status, 200, r2)
        self.assertEqual(r2.json()["result"][0], [it["document"] for it in items])
        # Search-R1's renderer splits on the first newline: title keeps its quotes
        first = items[0]["document"]["contents"]
        self.assertEqual(first.split("\n")[0], '"Hamlet"')
        # the request body is exactly what slime sends
        req = self.fake.search_requests()[0]
        self.assertEqual(req.json(), {"q": q, "num": 10, "gl": "us", "hl": "en"})
        self.assertEqual(req.headers["x-api-key"], self.fake.api_key)
        self.assertEqual(req.headers["content-type"], "application/json")

    def test_topk_truncates_and_empty_organic(self):
        gw = self.start()
        self.fake.organic["none"] = []
        r = gw.retrieve(["none", "some results"], topk=2)
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(res[0], [])
        self.assertEqual(len(res[1]), 2)

    def test_lang_and_extra_params(self):
        gw = self.start(gl="", hl="de", params={"tbs": "qdr:y", "page": 2})
        r = gw.retrieve(["params please"], topk=3)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.fake.search_requests()[0].json(), {"q": "params please", "num": 3, "hl": "de", "tbs": "qdr:y",
                                                                 "page": 2})


class TestFanOut(SerperBase):
    def test_batch_runs_concurrently_and_reuses_connections(self):
        gw = self.start()
        self.fake.default_script = [{"delay": 0.3}]
        queries = ["fan out %d" % i for i in range(8)]
        t0 = time.time()
        r = gw.retrieve(queries, topk=3)
        took = time.time() - t0
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(len(res), 8)
        for q, lst in zip(queries, res):  # answers stay in query order
            self.assertIn(q, lst[0]["document"]["contents"])
        self.assertLess(took, scaled(1.5), "8 queries of 0.3 s each were not sent concurrently")
        self.assertGreaterEqual(self.fake.server.max_inflight, 4)
        self.assertEqual(sorted(rq.json()["q"] for rq in self.fake.search_requests()), sorted(queries))
        # a second batch reuses the kept-alive connections
        conns = self.fake.server.connections
        self.fake.default_script = []
        for i in range(5):
            self.assertEqual(gw.retrieve(["again %d" % i], topk=1).status, 200)
        self.assertEqual(self.fake.server.connections, conns, "keep-alive connections were not reused")
        self.assertEqual(gw.metric("searchgate_backend_serper_http_connections_total"), conns)

    def test_max_inflight_and_qps_caps(self):
        gw = self.start(max_inflight=2, qps=20, burst=2)
        self.fake.default_script = [{"delay": 0.15}]
        queries = ["capped %d" % i for i in range(6)]
        t0 = time.time()
        r = gw.retrieve(queries, topk=1)
        took = time.time() - t0
        self.assertEqual(r.status, 200, r)
        self.assertLessEqual(self.fake.server.max_inflight, 2)
        self.assertGreaterEqual(took, 0.45 - 0.05)  # 6 requests, 2 at a time, 0.15 s each

    def test_qps_cap_paces_starts(self):
        gw = self.start(qps=10, burst=1)
        queries = ["paced %d" % i for i in range(6)]
        t0 = time.time()
        r = gw.retrieve(queries, topk=1)
        took = time.time() - t0
        self.assertEqual(r.status, 200, r)
        times = sorted(rq.time for rq in self.fake.search_requests())
        self.assertGreaterEqual(times[-1] - times[0], 0.5 - 0.06, "6 starts at 10 qps (burst 1) need 0.5 s")
        self.assertGreaterEqual(took, 0.45)
        self.assertGreaterEqual(gw.metric("searchgate_backend_serper_http_qps_delayed_total"), 4)


class TestGatewayAdmission(SerperBase):
    """The serper config's max_inflight/qps/max_queue and retries are enforced by the gateway (ABI
    1.2 limits()): one unit per query, refusals and deadlines answered like the route's own."""

    def test_plugin_max_queue_is_503_with_retry_after(self):
        gw = self.start(max_inflight=1, max_queue=1)
        self.fake.default_script = [{"delay": 0.5}]
        # chunk 1 (max_inflight 1): while another request's query runs, one query of this one
        # waits and the second finds the queue full -- momentary: 503 + Retry-After
        first = {}
        t = threading.Thread(target=lambda: first.update(r=gw.retrieve(["busy one"], topk=1)))
        t.start()
        self.assertTrue(wait_for(lambda: len(self.fake.search_requests()) == 1))
        r = gw.retrieve(["full one", "full two"], topk=1)
        t.join()
        self.assertEqual(first["r"].status, 200, first["r"])
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.headers.get("retry-after"), "1")
        self.assertIn("max_queue 1", r.body.decode())
        self.assertGreaterEqual(gw.metric("searchgate_backend_shed_total", backend="google"), 1)

    def test_request_over_the_plugin_caps_is_413(self):
        # one query runs, one may wait: three queries of one request can never be admitted (a
        # retry would meet the same caps), so the answer is final (issue 19, item 6)
        gw = self.start(max_inflight=1, max_queue=1)
        r = gw.retrieve(["full one", "full two", "full three"], topk=1)
        self.assertEqual(r.status, 413, r)
        self.assertNotIn("retry-after", r.headers)
        msg = r.json()["error"]["message"]
        self.assertIn("can never admit 3 queries", msg)
        self.assertIn("at most 2", msg)
        self.assertIn("the plugin's max_inflight 1, max_queue 1 queries", msg)
        self.assertEqual(len(self.fake.search_requests()), 0)

    def test_waiting_for_a_qps_token_past_the_deadline_is_504(self):
        gw = self.start(route={"timeout_ms": 300}, qps=1, burst=1)
        t0 = time.time()
        r = gw.retrieve(["token one", "token two"], topk=1)  # the second token is due after 1 s
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(1.0))
        self.assertEqual(len(self.fake.search_requests()), 1, "the waiting query was sent")
        self.assertGreaterEqual(gw.metric("searchgate_backend_serper_http_qps_delayed_total"), 1)

    def test_retries_take_qps_tokens(self):
        gw = self.start(qps=2, burst=1, retries=2, backoff_ms=10)
        self.fake.script["flaky"] = [{"status": 500}, {}]
        r = gw.retrieve(["flaky"], topk=1)
        self.assertEqual(r.status, 200, r)
        times = [rq.time for rq in self.fake.search_requests()]
        self.assertEqual(len(times), 2)
        self.assertGreaterEqual(times[1] - times[0], 0.5 - 0.06, "the retry did not wait for a token at 2 qps")
        self.assertEqual(gw.metric("searchgate_backend_serper_http_qps_delayed_total"), 1)

    def test_route_retries_bound_the_plugins(self):
        gw = self.start(route={"retries": 0}, retries=3)
        self.fake.script["broken"] = [{"status": 500}]
        r = gw.retrieve(["broken"], topk=1)
        self.assertEqual(r.status, 502, r)
        self.assertEqual(len(self.fake.search_requests()), 1, "the route allows no retry")
        self.assertEqual(gw.metric("searchgate_backend_serper_retries_total"), 0)


class TestFailures(SerperBase):
    def test_bad_key_is_503_with_message_and_no_retry(self):
        gw = self.start(env={KEY_ENV: "wrong-key-123"}, retries=3)
        r = gw.retrieve(["bad key"], topk=3)
        self.assertEqual(r.status, 503, r)
        body = r.json()
        self.assertIn("Unauthorized.", json.dumps(body))
        self.assertIn("API key", json.dumps(body))
        self.assertNotIn("wrong-key-123", r.body.decode())
        self.assertEqual(len(self.fake.search_requests()), 1, "a rejected key must not be retried")
        h = gw.get("/health")
        self.assertEqual(h.status, 503)
        self.assertIn("Unauthorized.", h.body.decode())
        self.assertNotIn("wrong-key-123", gw.get("/metrics").body.decode())
        self.assertEqual(gw.metric("searchgate_backend_serper_results_total", outcome="bad_key"), 1)
        log = gw.stop()
        self.gw = None
        self.assertNotIn("wrong-key-123", log)

    def test_scripted_upstream_faults(self):
        gw = self.start(retries=2, timeout_ms=400, max_response_bytes=4096)
        f = self.fake
        f.script["always 500"] = [{"status": 500, "body": {"message": "Internal upstream trouble", "statusCode": 500}}]
        f.script["500 then ok"] = [{"status": 502}, {"status": 503}, {}]
        f.script["429 then ok"] = [{"status": 429, "retry_after": 0}, {}]
        f.script["garbage"] = [{"garbage": b"<html>not json</html>"}]
        f.script["not an object"] = [{"garbage": b"[1,2,3]"}]
        f.script["oversized"] = [{"oversize": 100000}]
        f.script["slow"] = [{"delay": 2.0}]
        f.script["closed"] = [{"close": True}]
        f.script["bad request"] = [{"status": 400, "body": {"message": "Query too long.", "statusCode": 400}}]

        r = gw.retrieve(["always 500"], topk=3)
        self.assertEqual(r.status, 502, r)
        self.assertIn("Internal upstream trouble", r.body.decode())
        self.assertEqual(len([q for q in f.search_requests() if q.json()["q"] == "always 500"]), 3)

        r = gw.retrieve(["500 then ok"], topk=3)
        self.assertEqual(r.status, 200, r)
        r = gw.retrieve(["429 then ok"], topk=3)
        self.assertEqual(r.status, 200, r)

        r = gw.retrieve(["garbage"], topk=3)
        self.assertEqual(r.status, 502, r)
        self.assertIn("malformed JSON", r.body.decode())
        self.assertIn("not json", r.body.decode())
        r = gw.retrieve(["not an object"], topk=3)
        self.assertEqual(r.status, 502, r)

        r = gw.retrieve(["oversized"], topk=3)
        self.assertEqual(r.status, 502, r)
        self.assertIn("max_response_bytes", r.body.decode())

        t0 = time.time()
        r = gw.retrieve(["slow"], topk=3)
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(3 * 0.4 + 1.0))
        self.assertIn("in time", r.body.decode())

        r = gw.retrieve(["closed"], topk=3)
        self.assertEqual(r.status, 502, r)

        r = gw.retrieve(["bad request"], topk=3)
        self.assertEqual(r.status, 502, r)  # never a 4xx for the client: the query itself was fine
        self.assertIn("Query too long.", r.body.decode())
        self.assertEqual(len([q for q in f.search_requests() if q.json()["q"] == "bad request"]), 1)
        self.assertGreaterEqual(gw.metric("searchgate_backend_serper_retries_total"), 2 + 2 + 1)

    def test_429_exhausted_is_503_with_retry_after(self):
        gw = self.start(retries=0)
        self.fake.script["limited"] = [{"status": 429, "retry_after": 7,
                                        "body": {"message": "Too many requests", "statusCode": 429}}]
        r = gw.retrieve(["limited"], topk=3)
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.headers.get("retry-after"), "7")
        self.assertIn("Too many requests", r.body.decode())

    def test_one_failing_query_fails_the_batch_fast(self):
        gw = self.start(retries=0)
        self.fake.script["slow sibling"] = [{"delay": 3.0}]
        self.fake.script["broken"] = [{"status": 500}]
        t0 = time.time()
        r = gw.retrieve(["slow sibling", "broken"], topk=3)
        self.assertEqual(r.status, 502, r)
        self.assertLess(time.time() - t0, scaled(1.5), "the failure waited for the slow sibling")
        # the sibling already sent is read to its end (on_cancel "drain"), not abandoned mid-flight
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_backend_serper_http_drained_total") >= 1))

    def test_connection_refused_is_503(self):
        self.fake.url = "http://127.0.0.1:%d" % rtest.closed_port()
        gw = self.start(retries=1, backoff_ms=10)
        r = gw.retrieve(["nobody home"], topk=3)
        self.assertEqual(r.status, 503, r)
        self.assertIn("cannot reach serper.dev", r.body.decode())
        self.assertEqual(gw.metric("searchgate_backend_serper_http_errors_total", kind="connect"), 2)

    def test_deadline_cancels_the_upstream_call(self):
        gw = self.start(route={"timeout_ms": 400}, retries=0, timeout_ms=10000)
        self.fake.script["hangs"] = [{"delay": 5.0}]
        t0 = time.time()
        r = gw.retrieve(["hangs"], topk=3)
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(2.0))
        # sent: read to its end (on_cancel "drain"), its admission slot held meanwhile
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_backend_serper_http_drained_total") >= 1))
        self.assertEqual(gw.metric("searchgate_backend_inflight_queries", backend="google"), 1)

    def test_deadline_closes_the_upstream_call_with_on_cancel_close(self):
        gw = self.start(route={"timeout_ms": 400}, retries=0, timeout_ms=10000, on_cancel="close")
        self.fake.script["hangs"] = [{"delay": 5.0}]
        t0 = time.time()
        r = gw.retrieve(["hangs"], topk=3)
        self.assertEqual(r.status, 504, r)
        self.assertLess(time.time() - t0, scaled(2.0))
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_backend_serper_http_canceled_total") +
                                 gw.metric("searchgate_backend_serper_http_errors_total", kind="timeout") >= 1))
        self.assertTrue(wait_for(lambda: gw.metric("searchgate_backend_inflight_queries", backend="google") == 0))

    def test_shutdown_with_searches_in_flight(self):
        gw = self.start(retries=0)
        self.fake.default_script = [{"delay": 30.0}]
        out = {}

        def call():
            try:
                out["r"] = gw.retrieve(["pending %d" % i for i in range(3)], topk=3)
            except OSError as e:
                out["e"] = e
        t = threading.Thread(target=call)
        t.start()
        self.assertTrue(wait_for(lambda: self.fake.server.inflight >= 3))
        t0 = time.time()
        rtest.stop_after_pending(gw)  # clean exit while 3 transfers are running
        self.gw = None
        self.assertLess(time.time() - t0, scaled(9.0))  # the gateway's own 5 s grace, not the upstream's 30 s
        t.join(10)


class TestTransport(SerperBase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="sgtls-")

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_tls_verification(self):
        cert, key = make_cert(self.dir)
        tls = FakeSerper(api_key=self.fake.api_key, certfile=cert, keyfile=key)
        try:
            gw = gateway(backend("verified", "serper", serper_cfg(tls, ca_file=cert)),
                         backend("untrusted", "serper", serper_cfg(tls)),
                         backend("noverify", "serper", serper_cfg(tls, tls_verify=False)), env=self.env)
            try:
                r = gw.post("/retrieve/verified", {"queries": ["over tls"], "topk": 2, "return_scores": True})
                self.assertEqual(r.status, 200, r)
                r = gw.post("/retrieve/untrusted", {"queries": ["over tls 2"], "topk": 2})
                self.assertEqual(r.status, 503, r)
                self.assertIn("certificate", r.body.decode().lower())
                r = gw.post("/retrieve/noverify", {"queries": ["over tls 3"], "topk": 2})
                self.assertEqual(r.status, 200, r)
            finally:
                gw.stop()
        finally:
            tls.stop()

    def test_http2_over_tls_multiplexes(self):
        # nghttpd (Debian nghttp2-server) is an HTTP/2-only TLS server; it answers any method on
        # /search with the file htdocs/search, which is enough to check the transport
        cert, key = make_cert(self.dir)
        htdocs = os.path.join(self.dir, "htdocs")
        os.mkdir(htdocs)
        with open(os.path.join(htdocs, "search"), "w") as f:
            json.dump({"organic": [{"title": "Over h2", "snippet": "one two three four five six", "link": "https://h2/"}]}, f)
        port = rtest.free_port()
        nghttpd = shutil.which("nghttpd") or "/usr/sbin/nghttpd"
        srv = subprocess.Popen([nghttpd, "-d", htdocs, str(port), key, cert], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(wait_for(lambda: port_open(port)))
            gw = gateway(backend("h2", "serper", {"base_url": "https://127.0.0.1:%d" % port, "api_key_env": KEY_ENV,
                                                  "ca_file": cert, "qps": 0, "max_inflight": 0}), env=self.env)
            try:
                r = gw.retrieve(["h2 query %d" % i for i in range(8)], topk=1)
                self.assertEqual(r.status, 200, r)
                for lst in r.json()["result"]:
                    self.assertEqual(lst[0]["document"]["contents"], '"Over h2"\none two three four five six')
                # eight concurrent requests, one connection: they were multiplexed as HTTP/2 streams
                self.assertEqual(gw.metric("searchgate_backend_serper_http_connections_total"), 1)
                self.assertEqual(gw.metric("searchgate_backend_serper_http_responses_total"), 8)
            finally:
                gw.stop()
        finally:
            srv.terminate()
            srv.wait(10)

    def test_proxy(self):
        target = "http://serper.invalid"
        gw = gateway(backend("google", "serper", {"base_url": target, "api_key_env": KEY_ENV, "proxy": self.fake.url,
                                                  "qps": 0}), env=self.env)
        try:
            r = gw.retrieve(["through the proxy"], topk=2)
            self.assertEqual(r.status, 200, r)
            req = self.fake.search_requests()[0]
            self.assertTrue(req.proxied)
            self.assertEqual(req.host, "serper.invalid")
        finally:
            gw.stop()


class TestFallback(SerperBase):
    def test_google_falls_back_to_example(self):
        self.fake.default_script = [{"status": 500}]
        self.gw = gateway(backend("google", "serper", serper_cfg(self.fake, retries=0), fallback="example"),
                          rtest.sgtest.example_backend(), env=self.env)
        r = self.gw.retrieve(["who wrote hamlet"], topk=2)
        self.assertEqual(r.status, 200, r)
        docs = r.json()["result"][0]
        self.assertIn("Hamlet", docs[0]["document"]["contents"])
        self.assertEqual(self.gw.metric("searchgate_fallbacks_total", backend="google"), 1)
        # when serper is fine the fallback stays unused
        self.fake.default_script = []
        r = self.gw.retrieve(["who wrote hamlet again"], topk=2)
        self.assertEqual(r.status, 200, r)
        self.assertIn("Result 1 for", r.json()["result"][0][0]["document"]["contents"])
        self.assertEqual(self.gw.metric("searchgate_fallbacks_total", backend="google"), 1)


class TestConfig(unittest.TestCase):
    def fails(self, cfg, env, needle):
        g = rtest.Gateway({"backends": [backend("google", "serper", cfg)]}, env=env, expect_fail=True)
        rc = g.wait_exit(15)
        self.assertNotEqual(rc, 0)
        self.assertIn(needle, g.read_log())

    def test_errors_name_the_key(self):
        env = {KEY_ENV: "k"}
        self.fails({"base_url": "http://127.0.0.1:1"}, env, "api_key_env")
        self.fails({"api_key_env": "SG_TEST_SURELY_UNSET_VAR"}, {}, "SG_TEST_SURELY_UNSET_VAR")
        self.fails({"api_key_env": KEY_ENV, "base_url": "ftp://x"}, env, "base_url")
        self.fails({"api_key_env": KEY_ENV, "qps": -1}, env, "qps")
        self.fails({"api_key_env": KEY_ENV, "colour": "blue"}, env, "colour")
        self.fails({"api_key_env": KEY_ENV, "params": {"q": "x"}}, env, "config.params.q")
        self.fails({"api_key_env": KEY_ENV, "ca_file": "/nonexistent/ca.pem"}, env, "ca_file")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    unittest.main(verbosity=2)
