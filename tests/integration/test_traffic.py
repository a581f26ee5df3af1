"""Integration tests of traffic control on a shared gateway: client identity and API keys, rate
limits (queue and reject modes), fair sharing of a saturated backend, deadlines, singleflight."""
import http.client
import json
import os
import sys
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend, parallel, scaled


class Auth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["SG_TEST_KEY_A"] = "key-for-job-a-0123456789"
        os.environ["SG_TEST_KEY_B"] = "key-for-job-b-9876543210"
        cls.gw = Gateway({
            "backends": [example_backend()],
            "clients": {"require_key": True, "keys": [{"id": "job-a", "key_env": "SG_TEST_KEY_A"},
                                                      {"id": "job-b", "key_env": "SG_TEST_KEY_B"}]},
        })
        cls.gw.metrics_headers = {"X-API-Key": "key-for-job-a-0123456789"}  # require_key guards /metrics too

    @classmethod
    def tearDownClass(cls):
        log = cls.gw.stop()
        # keys are never logged
        assert "key-for-job" not in log, log

    def test_missing_and_wrong_keys(self):
        r = self.gw.retrieve(["paris"])
        self.assertEqual(r.status, 401)
        self.assertIn("API key is required", r.json()["error"]["message"])
        for h in ({"Authorization": "Bearer nope"}, {"X-API-Key": "key-for-job-a-012345678"},
                  {"X-API-Key": "key-for-job-a-01234567890"}, {"Authorization": "Bearer "}):
            r = self.gw.retrieve(["paris"], headers=h)
            self.assertEqual(r.status, 401, h)
            self.assertNotIn("key-for-job", r.body.decode())

    def test_good_keys(self):
        r = self.gw.retrieve(["paris"], headers={"Authorization": "Bearer key-for-job-a-0123456789"})
        self.assertEqual(r.status, 200)
        r = self.gw.retrieve(["tokyo"], headers={"X-API-Key": "key-for-job-b-9876543210"})
        self.assertEqual(r.status, 200)
        r = self.gw.retrieve(["tokyo"], headers={"authorization": "bearer   key-for-job-b-9876543210  "})
        self.assertEqual(r.status, 200)
        self.assertGreaterEqual(self.gw.metric("searchgate_client_requests_total", client="job-a"), 1)
        self.assertGreaterEqual(self.gw.metric("searchgate_client_requests_total", client="job-b"), 2)


class ClientIdentity(unittest.TestCase):
    def test_client_id_header_only_when_trusted(self):
        for trusted in (True, False):
            gw = Gateway({"backends": [example_backend()], "clients": {"trust_client_id_header": trusted}})
            try:
                for job in ("grpo-1", "grpo-2"):
                    self.assertEqual(gw.retrieve(["paris"], headers={"X-Client-Id": job}).status, 200)
                got = gw.metric("searchgate_client_requests_total", client="id:grpo-1")
                self.assertEqual(got, 1 if trusted else 0)
                if not trusted:  # the peer address identifies the caller instead
                    self.assertEqual(gw.metric("searchgate_client_requests_total", client="ip:127.0.0.1"), 2)
            finally:
                gw.stop()


class RateLimits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["SG_TEST_KEY_R"] = "reject-key"
        os.environ["SG_TEST_KEY_Q"] = "queue-key"
        cls.gw = Gateway({
            "backends": [example_backend(cache=False)],
            "clients": {"keys": [
                {"id": "rejecter", "key_env": "SG_TEST_KEY_R", "rate": 10, "burst": 5, "mode": "reject"},
                {"id": "queuer", "key_env": "SG_TEST_KEY_Q", "rate": 20, "burst": 1, "mode": "queue", "max_wait_ms": 1500},
            ]},
        })

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_reject_mode_429_retry_after(self):
        h = {"X-API-Key": "reject-key"}
        statuses = [self.gw.retrieve(["paris %d" % i], headers=h).status for i in range(12)]
        self.assertEqual(statuses[:5], [200] * 5)  # the burst
        self.assertIn(429, statuses[5:])
        r = self.gw.retrieve(["paris x"], headers=h)
        self.assertEqual(r.status, 429)
        self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        self.assertIn("rate limit of client rejecter", r.json()["error"]["message"])
        # a batch counts as many queries as it holds
        time.sleep(1.0)  # 10 queries' worth of credit, capped by the burst (5)
        self.assertEqual(self.gw.retrieve(["a", "b", "c", "d", "e", "f"], headers=h).status, 200)  # admitted on a full bucket
        self.assertEqual(self.gw.retrieve(["g"], headers=h).status, 429)  # ...and its debt is paid afterwards
        self.assertGreaterEqual(self.gw.metric("searchgate_client_rate_limited_total", client="rejecter"), 2)

    def test_queue_mode_waits_then_503(self):
        h = {"X-API-Key": "queue-key"}
        t0 = time.time()
        res = parallel(lambda i: self.gw.retrieve(["tokyo %d" % i], headers=h).status, [(i,) for i in range(20)])
        took = time.time() - t0
        self.assertEqual(res, [200] * 20)  # queued, not refused: RL clients treat 4xx as fatal
        self.assertGreater(took, 0.85)  # 20 queries at 20/s with burst 1: ~0.95 s
        self.assertGreaterEqual(self.gw.metric("searchgate_client_queued_total", client="queuer"), 15)
        # more than max_wait_ms of backlog: 503 with Retry-After, never a 4xx
        res = parallel(lambda i: self.gw.retrieve(["kyoto %d" % i], headers=h), [(i,) for i in range(60)])
        codes = [r.status for r in res]
        self.assertIn(503, codes)
        self.assertNotIn(429, codes)
        bad = [r for r in res if r.status == 503][0]
        self.assertGreaterEqual(int(bad.headers["retry-after"]), 1)

    def test_unlimited_default(self):
        statuses = parallel(lambda i: self.gw.retrieve(["anon %d" % i]).status, [(i,) for i in range(50)])
        self.assertEqual(statuses, [200] * 50)


class Fairness(unittest.TestCase):
    def saturate(self, clients, weights=None):
        """Two clients keep a backend saturated (4 queries in the plugin at a time, 10 ms per query:
        ~100 queries/s whoever sends them); returns the queries each got answered in a window."""
        keys = []
        cfg_clients = {"trust_client_id_header": True}
        if weights:
            cfg_clients["keys"] = []
            for name, w in weights.items():
                os.environ["SG_TEST_KEY_W_" + name.upper()] = "key-" + name
                cfg_clients["keys"].append({"id": name, "key_env": "SG_TEST_KEY_W_" + name.upper(), "weight": w})
        gw = Gateway({
            "backends": [example_backend(cache=False, max_inflight=4, chunk=4, max_queue=100000, delay_per_query_ms=10,
                                         workers=4, timeout_ms=120000)],
            "clients": cfg_clients,
        })
        done = {name: 0 for name, _, _ in clients}
        lock = threading.Lock()
        t_start = time.time()
        measure = (t_start + scaled(1.5), t_start + scaled(7.5))

        def job(name, batch, k):
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
            headers = {"Content-Type": "application/json", "X-Client-Id": name}
            if weights:
                headers = {"Content-Type": "application/json", "X-API-Key": "key-" + name}
            i = 0
            while time.time() < measure[1]:
                qs = ["%s %d %d %d" % (name, k, i, j) for j in range(batch)]
                i += 1
                conn.request("POST", "/retrieve", json.dumps({"queries": qs, "topk": 1}), headers)
                r = conn.getresponse()
                r.read()
                assert r.status == 200, r.status
                now = time.time()
                if measure[0] <= now <= measure[1]:
                    with lock:
                        done[name] += batch
            conn.close()

        try:
            threads = [threading.Thread(target=job, args=(name, batch, k)) for name, batch, conns in clients for k in range(conns)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            gw.stop()
        return done

    def test_two_clients_share_a_saturated_backend(self):
        # "big" keeps 4 x 16 queries queued (a burst job), "small" 16 single queries
        done = self.saturate([("big", 16, 4), ("small", 1, 16)])
        total = done["big"] + done["small"]
        self.assertGreater(total, 100)
        share = done["small"] / total
        print("fairness: small client's share %.3f of %d queries %r" % (share, total, done), file=sys.stderr)
        self.assertTrue(0.40 <= share <= 0.60, "small client's share %.2f of %d queries (%r)" % (share, total, done))

    def test_weights(self):
        # weight 3 vs weight 1, both saturating: 75% / 25% of the backend
        done = self.saturate([("heavy", 8, 8), ("light", 8, 8)], weights={"heavy": 3, "light": 1})
        total = done["heavy"] + done["light"]
        self.assertGreater(total, 100)
        share = done["heavy"] / total
        print("fairness: weight-3 client's share %.3f of %d queries %r" % (share, total, done), file=sys.stderr)
        self.assertTrue(0.65 <= share <= 0.85, "weight-3 client's share %.2f of %d queries (%r)" % (share, total, done))

    def test_burst_does_not_starve_single_queries(self):
        # one job posts a 2,560-query batch; another job's single queries still get answered quickly
        gw = Gateway({
            "backends": [example_backend(cache=False, max_inflight=8, chunk=8, delay_per_query_ms=2, workers=2,
                                         timeout_ms=120000)],
            "clients": {"trust_client_id_header": True},
        })
        try:
            big = threading.Thread(target=lambda: gw.retrieve(["burst %d" % i for i in range(2560)],
                                                              headers={"X-Client-Id": "burst"}))
            big.start()
            time.sleep(0.3)
            lat = []
            for i in range(10):
                t0 = time.time()
                self.assertEqual(gw.retrieve(["single %d" % i], headers={"X-Client-Id": "single"}).status, 200)
                lat.append(time.time() - t0)
            self.assertTrue(big.is_alive())  # the burst (~5 s of backend work) is still running
            big.join()
        finally:
            gw.stop()
        # one chunk of the burst (8 queries, ~16 ms) at most ahead of each single query
        self.assertLess(max(lat), scaled(0.25), lat)


class BackendQueue(unittest.TestCase):
    def test_full_queue_sheds_with_503_and_chunks_split_requests(self):
        gw = Gateway({"backends": [example_backend(cache=False, max_inflight=1, chunk=1, max_queue=2, delay_ms=300)]})
        try:
            res = {}

            def call(i):
                res[i] = gw.retrieve(["q%d" % i])

            ts = []
            for i in range(3):  # one in the plugin, two queued
                ts.append(threading.Thread(target=call, args=(i,)))
                ts[-1].start()
                time.sleep(0.05)
            r = gw.retrieve(["one too many"])
            self.assertEqual(r.status, 503)
            self.assertEqual(r.json()["error"]["type"], "overloaded")
            self.assertIn("max_queue 2", r.json()["error"]["message"])
            self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
            for t in ts:
                t.join()
            self.assertEqual([res[i].status for i in range(3)], [200] * 3)
            self.assertEqual(gw.metric("searchgate_backend_shed_total", backend="example"), 1)
            self.assertEqual(gw.metric("searchgate_client_shed_total"), 1)
        finally:
            gw.stop()
        # a request reaches the plugin in calls of at most `chunk` distinct queries
        gw = Gateway({"backends": [example_backend(cache=False, chunk=4)]})
        try:
            self.assertEqual(gw.retrieve(["c%d" % i for i in range(10)] + ["c0", "c1"]).status, 200)
            self.assertEqual(gw.metric("searchgate_backend_calls_total", backend="example"), 3)  # 4 + 4 + 2
            self.assertEqual(gw.metric("searchgate_backend_call_queries_total", backend="example"), 10)
        finally:
            gw.stop()


class ClientConcurrencyCap(unittest.TestCase):
    def test_client_max_inflight(self):
        os.environ["SG_TEST_KEY_CAP"] = "capped-key"
        gw = Gateway({
            "backends": [example_backend(cache=False, delay_ms=300, workers=4)],
            "clients": {"keys": [{"id": "capped", "key_env": "SG_TEST_KEY_CAP", "max_inflight": 2}]},
        })
        try:
            def capped(i):
                t0 = time.time()
                self.assertEqual(gw.retrieve(["capped %d" % i], headers={"X-API-Key": "capped-key"}).status, 200)
                return time.time() - t0

            box = []
            t = threading.Thread(target=lambda: box.extend(parallel(capped, [(i,) for i in range(6)])))
            t.start()
            time.sleep(0.1)
            t0 = time.time()
            self.assertEqual(gw.retrieve(["uncapped"]).status, 200)  # another client is not held back
            other = time.time() - t0
            t.join()
            lat = sorted(box)
            # 2 at a time, 300 ms each: three waves
            self.assertLess(lat[1], 0.3 + scaled(0.2))
            self.assertGreater(lat[-1], 0.85)
            self.assertLess(other, 0.3 + scaled(0.2))
        finally:
            gw.stop()


class Deadlines(unittest.TestCase):
    def test_hanging_backend_504_others_fast_and_queued_work_dropped(self):
        gw = Gateway({"backends": [
            example_backend("fast"),
            example_backend("hang", hang=True, timeout_ms=300),
            example_backend("busy", delay_ms=600, max_inflight=1, chunk=1, cache=False),
        ]})
        try:
            lat = []

            def hang(i):
                t0 = time.time()
                r = gw.retrieve(["stuck %d" % i], path="/retrieve/hang")
                return r.status, time.time() - t0

            def fast(i):
                t0 = time.time()
                r = gw.retrieve(["paris %d" % i], path="/retrieve/fast")
                lat.append(time.time() - t0)
                return r.status

            hangs = [threading.Thread(target=lambda i=i: lat_h.append(hang(i))) for i in range(8)]
            lat_h = []
            for t in hangs:
                t.start()
            time.sleep(0.05)
            self.assertEqual([fast(i) for i in range(20)], [200] * 20)
            for t in hangs:
                t.join()
            for status, took in lat_h:
                self.assertEqual(status, 504)
                self.assertLess(took, 0.300 + scaled(0.05) + 0.05)  # deadline + 50 ms (+ client overhead)
            self.assertLess(max(lat), 0.1 * (4 if sgtest.SANITIZED else 1))
            # the hanging searches were cancelled in the plugin
            self.assertEqual(gw.metric("searchgate_backend_example_cancels_total", backend="hang"), 8)

            # queued work past its deadline never reaches the backend
            calls0 = gw.metric("searchgate_backend_example_calls_total", backend="busy")
            first = threading.Thread(target=lambda: gw.retrieve(["first"], path="/retrieve/busy"))
            first.start()
            time.sleep(0.1)
            r = gw.retrieve(["second"], path="/retrieve/busy", headers={"X-Timeout-Ms": "200"})
            self.assertEqual(r.status, 504)
            first.join()
            self.assertEqual(gw.metric("searchgate_backend_example_calls_total", backend="busy") - calls0, 1)
            self.assertGreaterEqual(gw.metric("searchgate_backend_expired_total", backend="busy"), 1)
            self.assertGreaterEqual(gw.metric("searchgate_client_timeouts_total"), 9)
        finally:
            gw.stop()


class Singleflight(unittest.TestCase):
    def test_64_identical_concurrent_queries_one_backend_call(self):
        gw = Gateway({"backends": [example_backend(cache=False, delay_ms=400)]}, threads=2)
        try:
            barrier = threading.Barrier(64)

            def one(i):
                barrier.wait()
                return gw.retrieve(["who wrote hamlet"], topk=2, return_scores=bool(i % 2)).json()["result"]

            res = parallel(one, [(i,) for i in range(64)])
            self.assertEqual(gw.metric("searchgate_backend_example_calls_total"), 1)
            self.assertEqual(gw.metric("searchgate_coalesced_queries_total"), 63)
            scored = [r for i, r in enumerate(res) if i % 2]
            flat = [r for i, r in enumerate(res) if not i % 2]
            self.assertTrue(all(r == scored[0] for r in scored))
            self.assertTrue(all(r == flat[0] for r in flat))
            self.assertEqual([x["document"] for x in scored[0][0]], flat[0][0])
            # a different topk is a different computation
            gw.retrieve(["who wrote hamlet"], topk=3)
            self.assertEqual(gw.metric("searchgate_backend_example_calls_total"), 2)
        finally:
            gw.stop()


if __name__ == "__main__":
    sgtest.main()
