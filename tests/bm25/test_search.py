"""End-to-end tests of the bm25 backend through the real gateway: scores against a brute-force
BM25 computed here (over the plugin's own analyzer tokens, from `searchgate-index-bm25 --analyze`),
the DOC shape of protocols.md (BM25 variant: id, title, text, contents, url), both return_scores
shapes, empty and punctuation-only queries, k1/b overrides, topk limits, concurrency, metrics, and
that a rebuilt index gets a new cache identity (a shared Redis does not serve stale results)."""
import os
import random
import shutil
import tempfile
import threading
import time
import unittest

import sgtest
from bm25util import BruteForce, analyze, build_index, expected_doc, random_corpus, same_ranking, write_corpus


def bm25_backend(index_dir, name="bm25", **cfg):
    route = {k: cfg.pop(k) for k in list(cfg) if k in ("topk", "timeout_ms", "max_inflight", "max_queue", "chunk", "cache")}
    config = {"index": index_dir}
    config.update(cfg)
    entry = {"name": name, "plugin": "bm25", "config": config}
    entry.update(route)
    return entry


class SearchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sg-bm25-search-")
        cls.rows = random_corpus(400, seed=1)
        cls.corpus = os.path.join(cls.dir, "corpus.jsonl")
        write_corpus(cls.corpus, cls.rows)
        cls.index = os.path.join(cls.dir, "index")
        cls.stats = build_index(cls.corpus, cls.index)
        cls.bf = BruteForce(cls.rows)
        rnd = random.Random(2)
        with open(cls.corpus, encoding="utf-8") as f:
            words = [w for w in f.read().split() if w.isalpha()]
        cls.queries = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6))) for _ in range(80)]
        cls.queries += ["what is a volcano?", "Volcano's eruption", "ZÜRICH Café", "東京", "lava lava lava volcano",
                        "Can't stop the U.S.A.", "zzzunindexed", "3.14 1,000"]
        cls.query_tokens = analyze(cls.queries)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def by_id(self):
        return {r["id"]: (i, r) for i, r in enumerate(self.rows)}

    def check_results(self, gw, bf, queries, tokens, topk):
        ids = self.by_id()
        r = gw.retrieve(queries, topk=topk, return_scores=True)
        self.assertEqual(r.status, 200, r)
        result = r.json()["result"]
        self.assertEqual(len(result), len(queries))
        for q, toks, hits in zip(queries, tokens, result):
            full = bf.search(toks, len(self.rows))
            want = [(self.rows[row]["id"], s) for row, s in full[:topk]]
            all_scores = {self.rows[row]["id"]: s for row, s in full}
            got = [(h["document"]["id"], h["score"]) for h in hits]
            err = same_ranking(got, want, all_scores)
            self.assertIsNone(err, "query %r (tokens %s): %s" % (q, toks, err))
            for h in hits:
                i, row = ids[h["document"]["id"]]
                self.assertEqual(h["document"], expected_doc(row, i))
        return result

    def test_scores_match_brute_force(self):
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index)]})
        try:
            for topk in (3, 10):
                for i in range(0, len(self.queries), 16):
                    self.check_results(gw, self.bf, self.queries[i:i + 16], self.query_tokens[i:i + 16], topk)
            # a topk larger than the matches returns every matching document
            self.check_results(gw, self.bf, ["volcano"], analyze(["volcano"]), 300)
            self.assertGreater(gw.metric("searchgate_backend_bm25_queries_total"), 0)
            self.assertGreater(gw.metric("searchgate_backend_bm25_postings_scored_total"), 0)
            self.assertEqual(gw.metric("searchgate_backend_bm25_index_documents"), len(self.rows))
        finally:
            gw.stop()

    def test_empty_and_punctuation_queries(self):
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index)]})
        try:
            queries = ["", "   ", "?!...", "the of a and", "volcano", "\u00a0\u3000", "🔥"]
            r = gw.retrieve(queries, topk=3, return_scores=True)
            self.assertEqual(r.status, 200, r)
            res = r.json()["result"]
            self.assertEqual(len(res), len(queries))
            for q, hits in zip(queries, res):
                if q == "volcano":
                    self.assertEqual(len(hits), 3)
                else:
                    self.assertEqual(hits, [], "query %r" % q)
            r = gw.retrieve([""], topk=3, return_scores=False)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json(), {"result": [[]]})
        finally:
            gw.stop()

    def test_flat_docs_and_shape(self):
        ids = self.by_id()
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index, topk=3)]})
        try:
            r = gw.post("/retrieve", {"queries": ["volcanic eruption", "multi line quoted"], "return_scores": False})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.headers.get("content-type"), "application/json")
            res = r.json()["result"]
            self.assertEqual(len(res[0]), 3)  # the route's default topk
            for hits in res:
                for d in hits:
                    self.assertEqual(list(d.keys()), ["id", "title", "text", "contents", "url"])
                    i, row = ids[d["id"]]
                    self.assertEqual(d, expected_doc(row, i))
            self.assertEqual(res[1][0]["id"], "multi")
            self.assertEqual(res[1][0]["title"], "Multi line")
            self.assertEqual(res[1][0]["text"], 'first line\nsecond "quoted" line\\ with backslash')
            with_url = [d for d in res[0] + res[1] if d["url"]]
            for d in with_url:
                self.assertTrue(d["url"].startswith("https://example.org/"))
        finally:
            gw.stop()

    def test_k1_b_override_and_limits(self):
        bf = BruteForce(self.rows, k1=1.2, b=0.75)
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index, k1=1.2, b=0.75, max_topk=20, workers=3, verify="header")]})
        try:
            self.check_results(gw, bf, self.queries[:20], self.query_tokens[:20], 10)
            r = gw.retrieve(["volcano"], topk=21)
            self.assertEqual(r.status, 413, r)
        finally:
            gw.stop()

    def test_concurrent_requests(self):
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index, cache=False, workers=2)]})
        try:
            batches = [(self.queries[i % len(self.queries):][:5], self.query_tokens[i % len(self.queries):][:5])
                       for i in range(0, 64 * 3, 3)]
            sgtest.parallel(lambda q, t: self.check_results(gw, self.bf, q, t, 5), batches)
            self.assertGreaterEqual(gw.metric("searchgate_backend_bm25_calls_total"), 1)
        finally:
            gw.stop()

    def test_deadline_and_shutdown_with_work_in_flight(self):
        gw = sgtest.Gateway({"backends": [bm25_backend(self.index, cache=False, workers=1)]})
        try:
            big = [self.queries[i % len(self.queries)] + " %d" % i for i in range(5000)]
            r = gw.retrieve(big, topk=3, headers={"X-Timeout-Ms": "1"})
            self.assertEqual(r.status, 504, r)
            # the 504 leaves on the deadline; the plugin notices the cancel on its worker thread,
            # which may be a moment later on a loaded machine
            def stopped_early():
                return (gw.metric("searchgate_backend_bm25_timeouts_total") +
                        gw.metric("searchgate_backend_bm25_cancelled_total") +
                        gw.metric("searchgate_backend_expired_total") +
                        gw.metric("searchgate_backend_floor_refused_total"))
            deadline = time.time() + sgtest.scaled(10)
            while not stopped_early() and time.time() < deadline:
                time.sleep(0.05)
            self.assertGreater(stopped_early(), 0)
            # the gateway still answers, and stops cleanly with a large batch in flight
            self.assertEqual(gw.retrieve(["volcano"], topk=1).status, 200)
            def late():
                try:
                    gw.retrieve(big, topk=3, timeout=120)
                except OSError:
                    pass  # the gateway went away first: fine, only its clean exit matters
            t = threading.Thread(target=late)
            t.start()
            time.sleep(0.05)
        finally:
            gw.stop()
        t.join()

    def test_rebuilt_index_changes_cache_identity(self):
        redis = sgtest.Redis()
        d = tempfile.mkdtemp(prefix="sg-bm25-ident-", dir=self.dir)
        idx = os.path.join(d, "index")
        try:
            write_corpus(os.path.join(d, "c1.jsonl"), [{"id": "one", "contents": '"One"\nalpha beta'},
                                                        {"id": "two", "contents": '"Two"\ngamma'}])
            write_corpus(os.path.join(d, "c2.jsonl"), [{"id": "three", "contents": '"Three"\ngamma'},
                                                        {"id": "four", "contents": '"Four"\nalpha delta'}])
            cfg = {"cache": {"redis": {"host": "127.0.0.1", "port": redis.port}}, "backends": [bm25_backend(idx)]}
            build_index(os.path.join(d, "c1.jsonl"), idx)
            gw = sgtest.Gateway(cfg)
            try:
                r = gw.retrieve(["alpha"], topk=1)
                self.assertEqual(r.json()["result"][0][0]["document"]["id"], "one")
                deadline = time.time() + sgtest.scaled(10)
                while not redis.command("DBSIZE") and time.time() < deadline:
                    time.sleep(0.05)
                self.assertGreater(redis.command("DBSIZE"), 0, "the result never reached redis")
            finally:
                gw.stop()
            build_index(os.path.join(d, "c2.jsonl"), idx)
            gw = sgtest.Gateway(cfg)
            try:
                r = gw.retrieve(["alpha"], topk=1)
                self.assertEqual(r.json()["result"][0][0]["document"]["id"], "four")
            finally:
                gw.stop()
        finally:
            redis.close()


if __name__ == "__main__":
    sgtest.main()
