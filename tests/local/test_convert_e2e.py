"""`searchgate-index convert` on the command line, and converted indexes served through the real
gateway (build/searchgate + build/plugins/sg_local.so), with data made here: 2,000 clustered
64-d unit vectors written as a FAISS Flat IP file (the e5-tiny fixture model encodes 64-d), a
corpus of as many rows, and query embeddings from searchgate-encode; expected results come from
a brute-force search in numpy.

Covers: the progress line, no temporary files, an interrupted conversion leaving nothing; the
start-up log (index kind, mapped lists, memory, search parameters, the recall convert measured);
IVF with nprobe = nlist equal to brute force; re-ranked scores equal to exact inner products;
the optional "search_params" request field (bounds, wrong keys, routes that take none, cache
keys and in-flight sharing per parameter set, clients that do not send it unaffected); config
errors.
"""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest

import numpy as np

import sgtest

MODEL = os.path.join(sgtest.FIXTURES, "e5-tiny")
N, D = 2000, 64


def write_flat(path, x):
    """A FAISS IndexFlatIP file: header (docs/protocols.md, "Corpus and index files") + float32 rows."""
    n, d = x.shape
    with open(path, "wb") as f:
        f.write(b"IxFI" + struct.pack("<iqqq?iQ", d, n, 1 << 20, 1 << 20, True, 0, n * d))
        f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())


def run(args, timeout=300):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=sgtest.scaled(timeout))
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def convert(*args):
    rc, out, err = run([sgtest.binary("searchgate-index"), "convert"] + list(args))
    if rc != 0:
        raise AssertionError("convert %s failed (%d): %s" % (args, rc, err))
    return out, err


def encode(texts):
    r = subprocess.run([sgtest.binary("searchgate-encode"), "--model", MODEL], input="".join(json.dumps(t) + "\n" for t in texts).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=sgtest.scaled(120), check=True)
    return np.array([json.loads(line) for line in r.stdout.decode().splitlines()], dtype=np.float64)


def temp_files(d):
    return [f for f in os.listdir(d) if ".tmp." in f]


class ConvertE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgconvert-e2e-")
        rng = np.random.default_rng(5)
        centers = rng.standard_normal((25, D))
        x = centers[rng.integers(0, 25, N)] + 0.4 * rng.standard_normal((N, D))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        cls.x = x.astype(np.float32)
        cls.flat = os.path.join(cls.dir, "e5_Flat.index")
        write_flat(cls.flat, cls.x)
        cls.corpus = os.path.join(cls.dir, "wiki-18.jsonl")
        with open(cls.corpus, "w") as f:
            for i in range(N):
                f.write(json.dumps({"id": str(i), "contents": "\"Row %d\"\nrow %d of the test corpus" % (i, i)}) + "\n")
        cls.ivf = os.path.join(cls.dir, "ivf.index")
        cls.ivf_out, cls.ivf_err = convert(cls.flat, cls.ivf, "--factory", "IVF8,Flat", "--eval", "200", "--nprobe", "1,2,8",
                                           "--target-recall", "0.9")
        cls.pq = os.path.join(cls.dir, "pq.index")
        convert(cls.flat, cls.pq, "--factory", "IVF8,PQ8", "--eval", "200", "--nprobe", "2,8", "--rerank", "4")
        cls.hnsw = os.path.join(cls.dir, "hnsw.index")
        convert(cls.flat, cls.hnsw, "--factory", "HNSW16", "--eval", "100", "--ef-search", "16,32")
        with open(cls.ivf + ".sgmeta") as f:
            cls.ivf_meta = json.load(f)
        with open(cls.pq + ".sgmeta") as f:
            cls.pq_meta = json.load(f)

        def local(name, index, **extra):
            cfg = {"model": MODEL, "index": index, "corpus": cls.corpus, "workers": 2, "max_wait_ms": 1}
            cfg.update(extra)
            return {"name": name, "plugin": "local", "topk": 3, "config": cfg}

        cls.gw = sgtest.Gateway({"backends": [
            local("ivf", cls.ivf, max_nprobe=8), local("pq", cls.pq), local("hnsw", cls.hnsw, max_ef_search=64),
            local("flat", cls.flat), sgtest.example_backend("example")]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def brute(self, q, k):
        s = self.x.astype(np.float64) @ q
        order = sorted(range(N), key=lambda i: (-s[i], i))[:k]
        return order, s

    # ---- the tool ----

    def test_cli_output_and_files(self):
        self.assertIn("rows/s", self.ivf_err)
        self.assertIn("ETA", self.ivf_err)
        self.assertIn("recall@3", self.ivf_out)
        self.assertRegex(self.ivf_out, r"recommended: nprobe=\d+")
        self.assertEqual(temp_files(self.dir), [])
        m = self.ivf_meta
        self.assertEqual(m["factory"], "IVF8,Flat")
        self.assertEqual(m["ntotal"], N)
        self.assertEqual(m["source"]["path"], os.path.realpath(self.flat))
        self.assertEqual(m["index"]["size"], os.path.getsize(self.ivf))
        # nprobe = nlist scans every list: exact
        full = [p for p in m["recall"] if p["nprobe"] == 8][0]
        self.assertEqual((full["recall@1"], full["recall@3"], full["recall@10"]), (1.0, 1.0, 1.0))

    def test_cli_real_queries(self):
        """--queries FILE --model DIR: the report runs over encoded queries (none left out); at nprobe = nlist it
        must be exact, and the query count is the file's."""
        qf = os.path.join(self.dir, "queries.jsonl")
        with open(qf, "w") as f:
            for i in range(40):
                f.write(json.dumps("question number %d about rivers" % i) + "\n")
            f.write("\n")  # a trailing blank line is fine
        out = os.path.join(self.dir, "ivf_q.index")
        text, _ = convert(self.flat, out, "--factory", "IVF8,Flat", "--queries", qf, "--model", MODEL, "--nprobe", "8")
        self.assertIn("40 encoded queries", text)
        with open(out + ".sgmeta") as f:
            m = json.load(f)
        self.assertEqual(m["eval"]["kind"], "queries")
        self.assertEqual(m["eval"]["queries"], 40)
        self.assertEqual([(p["nprobe"], p["recall@1"], p["recall@10"]) for p in m["recall"]], [(8, 1.0, 1.0)])
        rc, _, err = run([sgtest.binary("searchgate-index-convert"), self.flat, out + "2", "--factory", "IVF8,Flat", "--queries",
                          qf])
        self.assertEqual(rc, 2)
        self.assertIn("--queries and --model go together", err)
        with open(qf, "a") as f:
            f.write("not json\n")
        rc, _, err = run([sgtest.binary("searchgate-index-convert"), self.flat, out + "3", "--factory", "IVF8,Flat", "--queries",
                          qf, "--model", MODEL])
        self.assertEqual(rc, 1)
        self.assertIn("queries.jsonl:42: expected one JSON string per line", err)
        self.assertFalse(os.path.exists(out + "3"))  # checked before any work
        self.assertEqual(temp_files(self.dir), [])

    def test_cli_interrupted_leaves_nothing(self):
        big = os.path.join(self.dir, "big_Flat.index")
        rng = np.random.default_rng(9)
        x = rng.standard_normal((60000, D)).astype(np.float32)
        write_flat(big, x)
        out = os.path.join(self.dir, "big_hnsw.index")
        p = subprocess.Popen([sgtest.binary("searchgate-index-convert"), big, out, "--factory", "HNSW32", "--threads", "1",
                              "--chunk", "500"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            seen = b""
            deadline = time.time() + sgtest.scaled(60)
            while b"adding" not in seen and time.time() < deadline:
                seen += p.stderr.readline()
            self.assertIn(b"adding", seen)
            time.sleep(0.2)
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=sgtest.scaled(60))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
        self.assertEqual(rc, -signal.SIGTERM)
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(out + ".sgmeta"))
        self.assertEqual(temp_files(self.dir), [])
        os.unlink(big)

    # ---- serving ----

    def test_start_up_log(self):
        log = self.gw.read_log()
        self.assertRegex(log, r"\[backend:ivf\] index \S+ivf.index: IVF8 \(Flat codes, 256 B/vector \+ 8 B id; lists "
                              r"memory-mapped from the file\), 2000 vectors of dimension 64, metric inner_product; read in \d+ ms, "
                              r"memory \+[\d.]+ \w+ resident")
        rec = self.ivf_meta["recommended"]
        point = [p for p in self.ivf_meta["recall"] if p["nprobe"] == rec["nprobe"] and p["rerank"] == 0][0]
        self.assertIn("[backend:ivf] search: nprobe %d (recommended by searchgate-index convert) of 8 lists" % rec["nprobe"], log)
        self.assertIn("[backend:ivf] expected recall against exact search: recall@3 %.3f (recall@1 %.3f, recall@10 %.3f) at "
                      "nprobe=%d" % (point["recall@3"], point["recall@1"], point["recall@10"], rec["nprobe"]), log)
        self.assertIn("[backend:pq] search: nprobe %d" % self.pq_meta["recommended"]["nprobe"], log)
        self.assertIn("re-ranking: topk x 4 candidates re-scored exactly from %s" % os.path.realpath(self.flat), log)
        self.assertIn("with re-ranking x4, measured by searchgate-index convert on 200 held-out rows", log)
        self.assertIn("[backend:hnsw] search: efSearch", log)
        self.assertIn("[backend:flat] search: exact (Flat)", log)
        self.assertRegex(log, r"\[backend:ivf\] ready in \d+ ms: .* resident [\d.]+ \w+ private \+ [\d.]+ \w+ of mapped files, "
                              r"peak [\d.]+ \w+")
        # the IVF lists are a mapping of the index file, not a copy
        with open("/proc/%d/maps" % self.gw.proc.pid) as f:
            maps = f.read()
        self.assertIn(os.path.realpath(self.ivf), maps)

    def test_ivf_all_lists_equals_brute_force(self):
        qs = ["river castle %d" % i for i in range(6)]
        vecs = encode(qs)  # searchgate-encode puts "query: " first, as the backend does
        r = self.gw.retrieve(qs, topk=5, path="/retrieve/ivf", search_params={"nprobe": 8})
        self.assertEqual(r.status, 200, r)
        for q, v, hits in zip(qs, vecs, r.json()["result"]):
            want, s = self.brute(v, 5)
            got = [int(h["document"]["id"]) for h in hits]
            for g, w in zip(got, want):
                if g != w:  # only a near-tie may swap
                    self.assertAlmostEqual(s[g], s[w], places=5)
            for h in hits:
                self.assertAlmostEqual(h["score"], s[int(h["document"]["id"])], places=4)

    def test_rerank_scores_are_exact(self):
        qs = ["garden winter %d" % i for i in range(6)]
        vecs = encode(qs)
        r = self.gw.retrieve(qs, topk=5, path="/retrieve/pq")
        self.assertEqual(r.status, 200, r)
        for v, hits in zip(vecs, r.json()["result"]):
            self.assertEqual(len(hits), 5)
            s = self.x.astype(np.float64) @ v
            scores = [h["score"] for h in hits]
            self.assertEqual(scores, sorted(scores, reverse=True))
            for h in hits:
                self.assertAlmostEqual(h["score"], s[int(h["document"]["id"])], places=5)

    def test_provenance_names_the_index_and_search_params(self):
        """X-Searchgate-Provenance (docs/api.md): the route's data fingerprint from GET /, and the
        request's search parameters as the backend canonicalised them."""
        p = {b["name"]: b for b in self.gw.get("/").json()["backends"]}["ivf"]["provenance"]
        self.assertEqual(p["type"], "plugin")
        self.assertTrue(p["plugin"].startswith("local/"), p)
        self.assertIn("|ix:", p["identity"])
        nprobe = 7 if self.ivf_meta["recommended"]["nprobe"] == 8 else 8  # not the route's own value
        r = self.gw.retrieve(["provenance river"], topk=3, path="/retrieve/ivf", search_params={"nprobe": nprobe})
        self.assertEqual(r.status, 200, r)
        h = dict(kv.split("=", 1) for kv in r.headers["x-searchgate-provenance"].split("; "))
        self.assertEqual((h["route"], h["data"], h["params"]), ("ivf", p["data"], "nprobe=%d" % nprobe))
        r = self.gw.retrieve(["provenance river"], topk=3, path="/retrieve/ivf")
        h = dict(kv.split("=", 1) for kv in r.headers["x-searchgate-provenance"].split("; "))
        self.assertNotIn("params", h)
        self.assertEqual(h["data"], p["data"])

    def test_search_params_validation(self):
        def err(route, params, status, needle):
            r = self.gw.retrieve(["q"], path="/retrieve/" + route, search_params=params)
            self.assertEqual(r.status, status, r)
            self.assertIn(needle, r.json()["error"]["message"])

        err("ivf", {"nprobe": 9}, 413, "exceeds this route's limit of 8")
        err("ivf", {"nprobe": 0}, 422, "positive integer")
        err("ivf", {"nprobe": 2.5}, 422, "positive integer")
        err("ivf", {"efSearch": 8}, 422, "takes \"nprobe\"")
        err("ivf", [1], 422, "must be an object")
        err("hnsw", {"nprobe": 2}, 422, "takes \"efSearch\"")
        err("hnsw", {"efSearch": 65}, 413, "max_ef_search")
        err("flat", {"nprobe": 2}, 422, "exact")
        err("example", {"nprobe": 2}, 422, "takes no search_params")
        for route, params in (("ivf", {"nprobe": 1}), ("ivf", {}), ("ivf", None), ("hnsw", {"efSearch": 64}),
                              ("pq", {"nprobe": 1})):
            r = self.gw.retrieve(["q"], path="/retrieve/" + route, search_params=params)
            self.assertEqual(r.status, 200, r)

    def test_search_params_cache_and_sharing(self):
        q = "distinct question for the cache test"
        route = "/retrieve/ivf"
        own = self.ivf_meta["recommended"]["nprobe"]
        a, b, c = [v for v in range(1, 9) if v != own][:3]

        def searched():
            return self.gw.metric("searchgate_backend_local_queries_total", backend="ivf")

        before = searched()
        plain = self.gw.retrieve([q], path=route).json()
        self.assertEqual(searched(), before + 1)
        # another nprobe: not answered from the plain entry
        self.assertEqual(self.gw.retrieve([q], path=route, search_params={"nprobe": a}).status, 200)
        self.assertEqual(searched(), before + 2)
        # each again: both cached
        self.assertEqual(self.gw.retrieve([q], path=route, search_params={"nprobe": a}).status, 200)
        self.assertEqual(self.gw.retrieve([q], path=route).json(), plain)
        # the route's own nprobe spelled out is the plain request
        self.assertEqual(self.gw.retrieve([q], path=route, search_params={"nprobe": own}).json(), plain)
        self.assertEqual(searched(), before + 2)
        # the same text with two parameter sets at once: two searches (a third for a repeat that
        # arrives between the end of its twin's search and the cache fill)
        q2 = "another distinct question"
        res = sgtest.parallel(lambda p: self.gw.retrieve([q2], path=route, search_params=p).status,
                              [({"nprobe": b},), ({"nprobe": c},), ({"nprobe": b},)])
        self.assertEqual(res, [200, 200, 200])
        self.assertIn(searched(), (before + 4, before + 5))

    # ---- config errors ----

    def start_fail(self, cfg):
        entry = {"model": MODEL, "corpus": self.corpus}
        entry.update(cfg)
        g = sgtest.Gateway({"backends": [{"name": "x", "plugin": "local", "config": entry}]}, expect_fail=True)
        rc = g.wait_exit()
        self.assertNotEqual(rc, 0)
        text = g.read_log()
        shutil.rmtree(g.dir, ignore_errors=True)
        return text

    def test_config_errors(self):
        self.assertIn("config.nprobe: %s is not an IVF index" % self.flat, self.start_fail({"index": self.flat, "nprobe": 4}))
        self.assertIn("config.ef_search:", self.start_fail({"index": self.ivf, "ef_search": 4}))
        self.assertIn("config.nprobe: 9 exceeds the 8 inverted lists", self.start_fail({"index": self.ivf, "nprobe": 9}))
        self.assertIn("config.max_nprobe: 2 is below the route's nprobe 4",
                      self.start_fail({"index": self.ivf, "nprobe": 4, "max_nprobe": 2}))
        self.assertIn("config.rerank: %s is a Flat index" % self.flat, self.start_fail({"index": self.flat, "rerank": 2}))
        self.assertIn("config.rerank_index: %s/none.index: cannot open" % self.dir,
                      self.start_fail({"index": self.ivf, "rerank": 2, "rerank_index": os.path.join(self.dir, "none.index")}))
        self.assertIn("not a FAISS Flat index", self.start_fail({"index": self.ivf, "rerank": 2, "rerank_index": self.pq}))


class ReportPredictsServing(unittest.TestCase):
    """Issue 21: the recall convert reports for a setting is the recall the route serving it gives.
    A Flat IP index of 3,000 rows encoded with the e5-tiny fixture model, 200 encoded queries,
    IVF16,PQ16 with re-ranking x3 (PQ codes reorder near neighbours, so the shortlist matters): for
    k = 1, 3, 10 the gateway's top-k lists on the PQ route, scored against its Flat route on the same
    queries, must give the recall@k the report printed for the route's setting. (The report used to
    re-rank one shortlist of 10 x F candidates for every k: 0.89 reported for recall@3 where the
    route, re-ranking 3 x F, served 0.66.)"""

    @classmethod
    def setUpClass(cls):
        import random
        cls.dir = tempfile.mkdtemp(prefix="sgconvert-report-")
        with open(os.path.join(MODEL, "vocab.txt"), encoding="utf-8") as f:
            vocab = [w for w in f.read().split("\n") if len(w) >= 3 and w.isascii() and w.isalpha()]
        rnd = random.Random(3)

        def words(topic, n):  # 40 topics of 60 words each, so that neighbours cluster as in a real corpus
            return [vocab[(topic * 97 + rnd.randrange(60)) % len(vocab)] for _ in range(n)]

        cls.corpus = os.path.join(cls.dir, "corpus.jsonl")
        with open(cls.corpus, "w") as f:
            for i in range(3000):
                w = words(rnd.randrange(40), 8) + [rnd.choice(vocab) for _ in range(6)]
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s" % (w[0], " ".join(w))}) + "\n")
        cls.queries = [" ".join(words(rnd.randrange(40), 4)) + " " + rnd.choice(vocab) for _ in range(200)]
        qf = os.path.join(cls.dir, "queries.jsonl")
        with open(qf, "w") as f:
            f.write("".join(json.dumps(q) + "\n" for q in cls.queries))
        cls.flat = os.path.join(cls.dir, "e5_Flat.index")
        subprocess.run([sgtest.binary("searchgate-index-dense"), "--model", MODEL, cls.corpus, cls.flat], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=sgtest.scaled(300))
        cls.pq = os.path.join(cls.dir, "pq.index")
        cls.report, _ = convert(cls.flat, cls.pq, "--factory", "IVF16,PQ16", "--rerank", "3", "--queries", qf, "--model", MODEL,
                                "--nprobe", "1,4,16")
        with open(cls.pq + ".sgmeta") as f:
            cls.meta = json.load(f)

        def local(name, index):
            return {"name": name, "plugin": "local", "topk": 3, "cache": False,
                    "config": {"model": MODEL, "index": index, "corpus": cls.corpus, "workers": 2, "max_wait_ms": 1}}

        cls.gw = sgtest.Gateway({"backends": [local("pq", cls.pq), local("flat", cls.flat)]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def answers(self, route, k):
        out = []
        for s in range(0, len(self.queries), 50):
            r = self.gw.retrieve(self.queries[s:s + 50], topk=k, path="/retrieve/" + route)
            self.assertEqual(r.status, 200, r)
            out += [[h["document"]["id"] for h in hits] for hits in r.json()["result"]]
        return out

    def test_report_is_what_the_route_serves(self):
        rec = self.meta["recommended"]
        self.assertEqual(rec["rerank"], 3)
        self.assertIn("[backend:pq] search: nprobe %d (recommended by searchgate-index convert)" % rec["nprobe"],
                      self.gw.read_log())
        point = [p for p in self.meta["recall"] if p["nprobe"] == rec["nprobe"] and p["rerank"] == 3][0]
        n = len(self.queries)
        for k in (1, 3, 10):
            pq, flat = self.answers("pq", k), self.answers("flat", k)
            served = sum(len(set(a) & set(b)) / k for a, b in zip(pq, flat)) / n
            reported = point["recall@%d" % k]
            se = max(0.01, (served * (1 - served) / n) ** 0.5)
            self.assertLessEqual(abs(reported - served), se, "recall@%d: reported %.4f, served %.4f" % (k, reported, served))

    def test_recommendation_when_none_reaches_the_target(self):
        """No setting reaches the default target here: the recommendation is the cheapest setting
        within --tolerance of the best recall@3 measured, not the largest nprobe."""
        rec = self.meta["recommended"]
        self.assertFalse(rec["reached_target"])
        pts = [p for p in self.meta["recall"] if p["rerank"] == 3]
        best = max(p["recall@3"] for p in pts)
        self.assertEqual(rec["nprobe"], min(p["nprobe"] for p in pts if p["recall@3"] >= best - rec["tolerance"]))
        self.assertIn("the smallest within 0.005 of the best measured", self.report)


if __name__ == "__main__":
    sgtest.main()
