"""The shipped configs (configs/google.json, qdrant.json, upstream.json) start and serve as
shipped, with only the upstream address (and the model path) pointed at the local fakes."""
import json
import os
import unittest

import rtest
from fake_jina import FakeJina
from fake_qdrant import FakeQdrant
from fake_serper import FakeSerper
from fake_upstream import FakeUpstream

CONFIGS = os.path.join(rtest.sgtest.SOURCE_DIR, "configs")


def shipped(name):
    with open(os.path.join(CONFIGS, name)) as f:
        return json.load(f)


class TestShippedConfigs(unittest.TestCase):
    def run_config(self, cfg, env=None, flat=False):
        gw = rtest.Gateway(cfg, env=env)
        try:
            r = gw.retrieve(["who wrote hamlet"], topk=None, return_scores=not flat)
            self.assertEqual(r.status, 200, r)
            res = r.json()["result"]
            self.assertEqual(len(res), 1)
            self.assertEqual(len(res[0]), 3)  # the route's default topk
            return res
        finally:
            gw.stop()

    def test_google(self):
        cfg = shipped("google.json")
        fake = FakeSerper()
        jina = FakeJina(keys=())
        try:
            cfg["backends"][0]["config"]["base_url"] = fake.url
            cfg["backends"][0]["config"]["reader"]["base_url"] = jina.url
            res = self.run_config(cfg, env={"SERPER_API_KEY": fake.api_key})
            self.assertTrue(res[0][0]["document"]["contents"].startswith('"Result 1 for who wrote hamlet"\n'))
            self.assertEqual(fake.search_requests()[0].json(), {"q": "who wrote hamlet", "num": 3, "gl": "us", "hl": "en"})
            # the online mode: /access reads the result pages through the (anonymous) reader
            gw = rtest.Gateway(cfg, env={"SERPER_API_KEY": fake.api_key})
            try:
                r = gw.post("/access", {"urls": [res[0][0]["document"]["url"]]})
                self.assertEqual(r.status, 200, r)
                page = r.json()["result"][0]
                self.assertEqual(page["url"], res[0][0]["document"]["url"])
                self.assertTrue(page["contents"].startswith("# Page of "))
                self.assertNotIn("authorization", jina.server.requests[0].headers)
            finally:
                gw.stop()
        finally:
            fake.stop()
            jina.stop()

    def test_qdrant(self):
        cfg = shipped("qdrant.json")
        fake = FakeQdrant(collection=cfg["backends"][0]["config"]["collection"])
        try:
            for i in range(5):
                fake.upsert(i, [float((i + k) % 5) - 2.0 for k in range(64)], {"id": str(i), "contents": "\"T%d\"\nx" % i})
            cfg["backends"][0]["config"]["url"] = fake.url
            cfg["backends"][0]["config"]["model"] = os.path.join(rtest.sgtest.FIXTURES, "e5-tiny")
            res = self.run_config(cfg, flat=True)
            self.assertEqual(res[0][0]["url"], "")
        finally:
            fake.stop()

    def test_upstream(self):
        cfg = shipped("upstream.json")
        fake = FakeUpstream()
        try:
            cfg["backends"][0]["config"]["servers"] = [fake.url]
            res = self.run_config(cfg)
            self.assertIn("Hamlet", res[0][0]["document"]["contents"])
        finally:
            fake.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
