"""X-Searchgate-Provenance (docs/api.md) on /retrieve and /access answers of every route type --
plugin, rerank, fusion, a fallback -- with the cache outcome of each answer, and the same
fingerprints in GET / and in searchgate_route_info. The real gateway with the example plugin, the
mock plugin and the tiny cross-encoder fixture."""
import hashlib
import os
import unittest

import sgtest
from sgtest import Gateway, example_backend

TINY = os.path.join(sgtest.FIXTURES, "xenc-tiny")
PAGES = [{"url": "https://example.org/hamlet", "contents": "Hamlet page"}]


def prov(r):
    """The header as an ordered list of (key, value) pairs (it must be there)."""
    h = r.headers.get("x-searchgate-provenance")
    if h is None:
        raise AssertionError("no X-Searchgate-Provenance in %r %r" % (r, r.headers))
    pairs = [kv.split("=", 1) for kv in h.split("; ")]
    for kv in pairs:
        if len(kv) != 2 or not kv[0]:
            raise AssertionError("malformed header %r" % h)
    return pairs


def provd(r):
    return dict(prov(r))


class Routes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        broken = example_backend("broken", error={"status": "unavailable", "message": "down"}, fallback="plain")
        rr = example_backend("rr")
        rr["rerank"] = {"model": TINY, "candidates": 6, "max_length": 64}
        cls.gw = Gateway({"backends": [
            example_backend("plain", pages=PAGES),
            example_backend("nocache", cache=False),
            rr,
            broken,
            {"name": "mock", "plugin": "mock", "config": {"seed": 7}},
            {"name": "hybrid", "fusion": {"routes": ["plain", "mock"], "method": "rrf"}},
        ]})
        cls.root = {b["name"]: b for b in cls.gw.get("/").json()["backends"]}

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def fixed(self, name):
        """What GET / says the header's fixed part must be."""
        p = self.root[name]["provenance"]
        return [["route", name], ["type", p["type"]], ["plugin", p["plugin"]], ["data", p["data"]]]

    def test_root_and_metric_agree(self):
        for name, b in self.root.items():
            p = b["provenance"]
            # the fingerprint is SHA-256 of the identity, so a client can check it
            self.assertEqual(p["data"], hashlib.sha256(p["identity"].encode()).hexdigest()[:16], name)
            self.assertEqual(self.gw.metric("searchgate_route_info", route=name, type=p["type"], data=p["data"],
                                            identity=p["identity"]), 1.0, name)
        self.assertEqual(self.root["plain"]["provenance"]["type"], "plugin")
        self.assertEqual(self.root["plain"]["provenance"]["plugin"], "example/1.0.0")
        self.assertEqual(self.root["mock"]["provenance"]["plugin"], "mock/1.0.0")
        self.assertIn("seed=7", self.root["mock"]["provenance"]["identity"])

    def test_plugin_route_and_cache_outcome(self):
        first = self.gw.retrieve(["prov hamlet", "prov paris"], path="/retrieve/plain")
        self.assertEqual(first.status, 200, first)
        self.assertEqual(prov(first), self.fixed("plain") + [["cache", "none"], ["cached", "0/2"]])
        again = self.gw.retrieve(["prov hamlet", "prov paris", "prov hamlet"], path="/retrieve/plain")
        self.assertEqual(prov(again)[4:], [["cache", "all"], ["cached", "2/2"]])
        mixed = self.gw.retrieve(["prov hamlet", "prov tokyo"], path="/retrieve/plain")
        self.assertEqual(prov(mixed)[4:], [["cache", "partial"], ["cached", "1/2"]])
        # the default route (plain POST /retrieve) is "plain"
        self.assertEqual(provd(self.gw.retrieve(["prov hamlet"]))["route"], "plain")

    def test_route_without_cache(self):
        r = self.gw.retrieve(["prov nocache"], path="/retrieve/nocache")
        self.assertEqual(prov(r), self.fixed("nocache") + [["cache", "off"]])

    def test_access(self):
        r = self.gw.post("/access/plain", {"urls": ["https://example.org/hamlet"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(prov(r), self.fixed("plain") + [["cache", "off"]])
        # /access on a fusion route is answered by its first leg with pages: that leg is named
        r = self.gw.post("/access/hybrid", {"urls": ["https://example.org/hamlet"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(prov(r), self.fixed("plain") + [["cache", "off"]])

    def test_rerank_route(self):
        p = self.root["rr"]["provenance"]
        self.assertEqual(p["type"], "rerank")
        self.assertIn("|rerank:", p["identity"])
        self.assertIn("candidates=6,max_length=64", p["identity"])
        # same plugin and documents as "plain": only the stage differs, and so does the data fingerprint
        self.assertNotEqual(p["data"], self.root["plain"]["provenance"]["data"])
        r = self.gw.retrieve(["prov rerank hamlet"], path="/retrieve/rr")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(prov(r), self.fixed("rr") + [["cache", "none"], ["cached", "0/1"]])
        r = self.gw.retrieve(["prov rerank hamlet"], path="/retrieve/rr")
        self.assertEqual(prov(r)[4:], [["cache", "all"], ["cached", "1/1"]])

    def test_fusion_route(self):
        p = self.root["hybrid"]["provenance"]
        self.assertEqual(p["type"], "fusion")
        legs = "plain:%s,mock:%s" % (self.root["plain"]["provenance"]["data"], self.root["mock"]["provenance"]["data"])
        self.assertIn("|leg_data=" + legs, p["identity"])
        r = self.gw.retrieve(["prov fused a", "prov fused b", "prov fused a"], path="/retrieve/hybrid")
        self.assertEqual(r.status, 200, r)
        # distinct queries are counted per leg: 2 texts x 2 legs
        self.assertEqual(prov(r), self.fixed("hybrid") + [["legs", legs], ["cache", "none"], ["cached", "0/4"]])
        r = self.gw.retrieve(["prov fused a", "prov fused c"], path="/retrieve/hybrid")
        self.assertEqual(prov(r)[5:], [["cache", "partial"], ["cached", "2/4"]])
        r = self.gw.retrieve(["prov fused a"], path="/retrieve/hybrid", backend="ignored-when-the-path-names-one")
        self.assertEqual(prov(r)[5:], [["cache", "all"], ["cached", "2/2"]])

    def test_fallback_named(self):
        r = self.gw.retrieve(["prov fallback"], path="/retrieve/broken")
        self.assertEqual(r.status, 200, r)
        d = provd(r)
        self.assertEqual(prov(r)[:4], self.fixed("broken"))
        self.assertEqual(d["fallback"], "plain:" + self.root["plain"]["provenance"]["data"])

    def test_errors_carry_the_route_but_no_cache_outcome(self):
        r = self.gw.retrieve(["x"], path="/retrieve/plain", search_params={"nprobe": 4})  # example takes none: 422
        self.assertEqual(r.status, 422, r)
        self.assertEqual(prov(r), self.fixed("plain"))
        r = self.gw.retrieve(["x"], path="/retrieve/plain", headers={"X-Timeout-Ms": "soon"})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(prov(r), self.fixed("plain"))
        r = self.gw.retrieve(["x"], path="/retrieve/hybrid", headers={"X-Timeout-Ms": "-1"})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(prov(r), self.fixed("hybrid") + [prov(r)[4]])
        self.assertEqual(prov(r)[4][0], "legs")
        # no route, no provenance
        r = self.gw.retrieve(["x"], path="/retrieve/nosuchroute")
        self.assertEqual(r.status, 404, r)
        self.assertNotIn("x-searchgate-provenance", r.headers)
        # answered before the route is looked up: a wrong method has none either
        r = self.gw.get("/retrieve/plain")
        self.assertEqual(r.status, 405, r)
        self.assertNotIn("x-searchgate-provenance", r.headers)

    def test_unauthorized_has_none(self):
        """The key is checked before the route is looked up: a 401 names no route."""
        gw = Gateway({"backends": [example_backend("plain")],
                      "clients": {"require_key": True, "keys": [{"id": "job", "key_env": "SG_PROV_KEY"}]}},
                     env={"SG_PROV_KEY": "sk-prov-test"})
        try:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                r = gw.retrieve(["x"], path="/retrieve/plain", headers=headers)
                self.assertEqual(r.status, 401, r)
                self.assertNotIn("x-searchgate-provenance", r.headers)
            r = gw.retrieve(["x"], path="/retrieve/plain", headers={"Authorization": "Bearer sk-prov-test"})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(provd(r)["route"], "plain")
        finally:
            gw.stop()

    def test_stable_across_restarts(self):
        """The fingerprints depend on the data and settings, not on the process."""
        gw = Gateway({"backends": [example_backend("plain", pages=PAGES), {"name": "mock", "plugin": "mock",
                                                                           "config": {"seed": 7}}]})
        try:
            root = {b["name"]: b for b in gw.get("/").json()["backends"]}
        finally:
            gw.stop()
        for name in ("plain", "mock"):
            self.assertEqual(root[name]["provenance"], self.root[name]["provenance"])


if __name__ == "__main__":
    sgtest.main()
