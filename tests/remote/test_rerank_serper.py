"""The rerank route option over a remote backend: serper snippets reranked by the tiny random
cross-encoder (tests/fixtures/xenc-tiny), against the fake serper.dev of fakes/fake_serper.py and
the plain-torch reference of tests/integration/xenc_ref.py."""
import os
import unittest

import rtest
from rtest import backend, gateway
from fake_serper import FakeSerper
import xenc_ref

KEY_ENV = "SG_TEST_SERPER_KEY"
TINY = os.path.join(rtest.sgtest.FIXTURES, "xenc-tiny")

ORGANIC = [
    {"title": "Paris - Wikipedia", "link": "https://en.wikipedia.org/wiki/Paris", "position": 1,
     "snippet": "Paris is the capital and most populous city of France, with an estimated population of two million."},
    {"title": "Capital of France", "link": "https://example.org/capital", "position": 2,
     "snippet": "The capital of France is Paris, a city on the Seine river known for its museums and cafés."},
    {"title": "Lyon", "link": "https://example.org/lyon", "position": 3,
     "snippet": "Lyon is the third largest city of France and the capital of the Auvergne Rhône Alpes region."},
    {"title": "France travel guide", "link": "https://example.org/travel", "position": 4,
     "snippet": "Plan your trip to France with this travel guide covering cities, food, wine and the countryside."},
    {"title": "Eiffel Tower", "link": "https://example.org/eiffel", "position": 5,
     "snippet": "The Eiffel Tower is a wrought iron lattice tower on the Champ de Mars in Paris, France, built in 1889."},
    {"title": "History of Paris", "link": "https://example.org/history", "position": 6,
     "snippet": "The history of Paris spans more than two thousand years, from a Gallic settlement to a world capital."},
    {"title": "Marseille", "link": "https://example.org/marseille", "position": 7,
     "snippet": "Marseille is a port city in southern France and the second largest city in the country by population."},
    {"title": "French government", "link": "https://example.org/gov", "position": 8,
     "snippet": "The French government sits in Paris; the president lives in the Élysée Palace near the Champs Élysées."},
]


class SerperRerank(unittest.TestCase):
    def setUp(self):
        self.fake = FakeSerper()
        self.fake.organic["capital of france"] = ORGANIC
        cfg = {"base_url": self.fake.url, "api_key_env": KEY_ENV, "backoff_ms": 20, "qps": 0, "max_inflight": 0}
        plain = backend("google", "serper", cfg)
        rr = backend("google-rr", "serper", cfg, topk=3, cache=True,
                     rerank={"model": TINY, "candidates": 8, "max_length": 128})
        self.gw = gateway(plain, rr, env={KEY_ENV: self.fake.api_key})
        self.ref = xenc_ref.CrossEncoder(TINY)

    def tearDown(self):
        self.gw.stop()
        self.fake.stop()

    def test_snippets_reranked(self):
        q = "capital of france"
        r = self.gw.retrieve([q], topk=8, path="/retrieve/google")
        self.assertEqual(r.status, 200, r)
        first = [it["document"] for it in r.json()["result"][0]]
        self.assertEqual(len(first), 8)
        want = self.ref.rerank(q, first, 3, 128)
        n_search = len(self.fake.search_requests())
        r = self.gw.retrieve([q], topk=3, path="/retrieve/google-rr")
        self.assertEqual(r.status, 200, r)
        got = r.json()["result"][0]
        self.assertEqual([g["document"] for g in got], [d for d, _ in want])
        for g, (_, s) in zip(got, want):
            self.assertLessEqual(abs(g["score"] - s), 1e-5)
        # the stage asked serper for its candidates, once
        reqs = self.fake.search_requests()[n_search:]
        self.assertEqual(len(reqs), 1)
        self.assertEqual(reqs[0].json()["num"], 8)
        self.assertEqual(self.gw.metric("searchgate_rerank_pairs_total", backend="google-rr"), 8)
        # a repeat is a cache hit: no serper call, no scoring
        r2 = self.gw.retrieve([q], topk=3, path="/retrieve/google-rr")
        self.assertEqual(r2.json(), r.json())
        self.assertEqual(len(self.fake.search_requests()), n_search + 1)
        self.assertEqual(self.gw.metric("searchgate_rerank_pairs_total", backend="google-rr"), 8)

    def test_upstream_errors_pass_through(self):
        self.fake.script["broken query"] = [{"status": 500}] * 10
        r = self.gw.retrieve(["broken query"], topk=3, path="/retrieve/google-rr")
        plain = self.gw.retrieve(["broken query"], topk=3, path="/retrieve/google")
        self.assertEqual(r.status, plain.status, (r, plain))
        self.assertGreaterEqual(r.status, 500)
        self.assertEqual(self.gw.metric("searchgate_rerank_pairs_total", backend="google-rr"), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
