"""End-to-end tests of the local dense backend through the real gateway (build/searchgate +
build/plugins/sg_local.so), with data made here by the project's own tools: a small corpus,
its FAISS index built by searchgate-index-dense from the e5-tiny fixture model, and a brute-force
search in pure Python over embeddings from searchgate-encode (the encoder itself is checked
against the transformers goldens by local.test_e5).

Covers: result ids/scores against brute force, both response shapes, DOC splicing (the corpus
line as is + "url"), concurrent requests gathered into shared batches yet each answered with its
own results, a 2,560-query request, POST /access with URL normalisation, and start-up failures
on a corrupt index, model or corpus.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import sgtest

MODEL = os.path.join(sgtest.FIXTURES, "e5-tiny")
WORDS = ["river", "mountain", "castle", "piano", "rocket", "garden", "winter", "ocean", "library", "dragon", "coffee",
         "violin", "desert", "forest", "harbor", "comet", "Zürich", "東京", "naïve", "résumé"]
ROWS = 160


def tool(name, *args, stdin=None):
    r = subprocess.run([sgtest.binary(name)] + list(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=sgtest.scaled(120))
    if r.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (name, r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout


def encode(texts, prefix="query: "):
    out = tool("searchgate-encode", "--model", MODEL, "--prefix", prefix,
               stdin="".join(json.dumps(t) + "\n" for t in texts).encode())
    vecs = [json.loads(line) for line in out.decode().splitlines()]
    assert len(vecs) == len(texts)
    return vecs


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


class LocalE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sglocal-e2e-")
        cls.rows = []
        for i in range(ROWS):
            title = "%s %s" % (WORDS[i % len(WORDS)].capitalize(), i)
            row = {"id": str(i), "contents": "\"%s\"\n%s %s %s, a story about %s." % (
                title, title, WORDS[(i * 3) % len(WORDS)], WORDS[(i * 7) % len(WORDS)], WORDS[(i // 20) % len(WORDS)])}
            if i % 9 == 4:
                row["url"] = "https://example.org/wiki/%d" % i
            cls.rows.append(row)
        cls.corpus = os.path.join(cls.dir, "wiki-18.jsonl")
        with open(cls.corpus, "w", encoding="utf-8") as f:
            for i, r in enumerate(cls.rows):
                # a mix of separators and spacing, as real files have
                f.write(json.dumps(r, ensure_ascii=(i % 2 == 0)) + ("\r\n" if i % 5 == 0 else "\n"))
        cls.index = os.path.join(cls.dir, "e5_Flat.index")
        tool("searchgate-index-dense", "--model", MODEL, cls.corpus, cls.index, "--batch", "16")
        cls.row_vecs = encode([r["contents"] for r in cls.rows], prefix="passage: ")
        cls.pages = os.path.join(cls.dir, "wiki_webpages.jsonl")
        with open(cls.pages, "w", encoding="utf-8") as f:
            f.write(json.dumps({"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}) + "\n")
            f.write(json.dumps({"url": "https://en.wikipedia.org/w/index.php?title=Paris", "contents": "Paris page",
                                "title": "Paris"}, ensure_ascii=False) + "\n")
        cls.gw = sgtest.Gateway({"backends": [{
            "name": "local", "plugin": "local", "topk": 3,
            "config": {"model": MODEL, "index": cls.index, "corpus": cls.corpus, "pages": cls.pages,
                       "workers": 2, "max_batch": 64, "max_wait_ms": 50}}]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def brute(self, queries, k):
        """[(query vector, [(score, row), ...k best])] by exhaustive inner product."""
        out = []
        for q in encode(queries):
            scored = sorted(((dot(q, v), i) for i, v in enumerate(self.row_vecs)), key=lambda t: (-t[0], t[1]))
            out.append((q, scored[:k]))
        return out

    def expect_doc(self, doc):
        want = dict(self.rows[int(doc["id"])])
        want.setdefault("url", "")
        self.assertEqual(doc, want)  # the corpus row as is, plus url
        self.assertEqual(list(doc.keys())[:2], ["id", "contents"])  # column order kept

    def check(self, queries, result, k, scores=True):
        """Rank i must hold a row whose exact score is the i-th best (ties may swap rows)."""
        self.assertEqual(len(result), len(queries))
        for (qv, want), got in zip(self.brute(queries, k), result):
            self.assertEqual(len(got), k)
            for (best, _), item in zip(want, got):
                doc = item["document"] if scores else item
                self.expect_doc(doc)
                exact = dot(qv, self.row_vecs[int(doc["id"])])
                self.assertAlmostEqual(exact, best, delta=1e-4)
                if scores:
                    self.assertAlmostEqual(item["score"], exact, delta=1e-4)

    def test_retrieve_matches_brute_force(self):
        queries = ["castle in winter", "a story about the ocean", "Zürich piano", "東京 library 42", "dragon"]
        r = self.gw.retrieve(queries, topk=5, return_scores=True)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("content-type"), "application/json")
        self.check(queries, r.json()["result"], 5)
        # default topk (3) and the flat shape
        r = self.gw.post("/retrieve", {"queries": queries[:2], "return_scores": False})
        self.assertEqual(r.status, 200, r)
        self.check(queries[:2], r.json()["result"], 3, scores=False)

    def test_concurrent_requests_share_batches(self):
        before_b = self.gw.metric("searchgate_backend_local_batches_total")
        before_q = self.gw.metric("searchgate_backend_local_batch_queries_total")
        sets = [["%s %s %d" % (WORDS[i % len(WORDS)], WORDS[(i * 5) % len(WORDS)], i), "story %d" % (i * 11)]
                for i in range(24)]
        results = sgtest.parallel(lambda qs: self.gw.retrieve(qs, topk=3), [(qs,) for qs in sets])
        for qs, r in zip(sets, results):
            self.assertEqual(r.status, 200, r)
            self.check(qs, r.json()["result"], 3)  # every request got its own answers
        batches = self.gw.metric("searchgate_backend_local_batches_total") - before_b
        queries = self.gw.metric("searchgate_backend_local_batch_queries_total") - before_q
        self.assertEqual(queries, 48)
        self.assertLess(batches, 24, "48 queries of 24 concurrent requests were not batched together")

    def test_search_r1_sized_request(self):
        queries = ["%s question %d" % (WORDS[i % len(WORDS)], i) for i in range(2560)]
        r = self.gw.retrieve(queries, topk=3, return_scores=True)
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(len(res), 2560)
        self.assertTrue(all(len(x) == 3 for x in res))
        sample = list(range(0, 2560, 97))
        self.check([queries[i] for i in sample], [res[i] for i in sample], 3)

    def test_access(self):
        r = self.gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet", "https://nowhere.example/x",
                                              "https://en.wikipedia.org/w/index.php/Paris"]})
        self.assertEqual(r.status, 200, r)
        res = r.json()["result"]
        self.assertEqual(res[0], {"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"})
        self.assertIsNone(res[1])
        self.assertEqual(res[2]["contents"], "Paris page")


class LocalAccessWithoutPages(unittest.TestCase):
    """/access needs a pages file whose rows carry "url": without one every page is null (200, with
    X-Searchgate-No-Page-Store: RLinf/ASearcher retry any error for minutes), and a pages file
    without any "url" is warned about."""

    def test_no_pages_and_pages_without_urls(self):
        d = tempfile.mkdtemp(prefix="sglocal-nopages-")
        try:
            corpus = os.path.join(d, "wiki-18.jsonl")
            with open(corpus, "w") as f:
                for i in range(8):
                    f.write(json.dumps({"id": str(i), "contents": "\"T%d\"\nrow %d" % (i, i)}) + "\n")
            index = os.path.join(d, "e5_Flat.index")
            tool("searchgate-index-dense", "--model", MODEL, corpus, index)
            base = {"model": MODEL, "index": index, "corpus": corpus, "workers": 1}
            gw = sgtest.Gateway({"backends": [
                {"name": "nopages", "plugin": "local", "config": base},
                {"name": "nourl", "plugin": "local", "config": dict(base, pages=corpus)}]})
            try:
                r = gw.post("/access", {"urls": ["https://en.wikipedia.org/wiki/Hamlet"]})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json(), {"result": [None]})
                self.assertEqual(r.headers.get("x-searchgate-no-page-store"), "nopages")
                access = {b["name"]: b["access"] for b in gw.get("/").json()["backends"]}
                self.assertEqual(access, {"nopages": False, "nourl": True})
                r = gw.post("/access/nourl", {"urls": ["https://en.wikipedia.org/wiki/Hamlet"]})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json(), {"result": [None]})
                log = gw.read_log()
                self.assertEqual(log.count('no row of %s has a "url" field' % corpus), 1, log)
            finally:
                gw.stop()
            # the second start reuses the pages sidecar: the warning must not depend on building it
            gw = sgtest.Gateway({"backends": [{"name": "nourl", "plugin": "local", "config": dict(base, pages=corpus)}]})
            try:
                self.assertIn('no row of %s has a "url" field' % corpus, gw.read_log())
            finally:
                gw.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)


class LocalStartupFailures(unittest.TestCase):
    """A corrupt index, model or corpus stops start-up with a message naming the file."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sglocal-bad-")
        cls.corpus = os.path.join(cls.dir, "corpus.jsonl")
        with open(cls.corpus, "w") as f:
            for i in range(10):
                f.write(json.dumps({"id": str(i), "contents": "\"T%d\"\nrow %d" % (i, i)}) + "\n")
        cls.index = os.path.join(cls.dir, "e5_Flat.index")
        tool("searchgate-index-dense", "--model", MODEL, cls.corpus, cls.index)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start_fails(self, config, *wanted):
        gw = sgtest.Gateway({"backends": [{"name": "local", "plugin": "local", "config": config}]}, expect_fail=True)
        rc = gw.wait_exit(30)
        log = gw.read_log()
        self.assertNotEqual(rc, 0, log)
        for w in wanted:
            self.assertIn(w, log)
        self.assertNotIn("AddressSanitizer", log)
        shutil.rmtree(gw.dir, ignore_errors=True)

    def test_corrupt_index(self):
        bad = os.path.join(self.dir, "bad.index")
        with open(self.index, "rb") as f:
            data = f.read()
        with open(bad, "wb") as f:
            f.write(data[:len(data) // 2])
        self.start_fails({"model": MODEL, "index": bad, "corpus": self.corpus}, "bad.index: the FAISS Flat index header describes",
                         "(truncated or corrupt)")
        with open(bad, "wb") as f:
            f.write(b"garbage, not an index")
        self.start_fails({"model": MODEL, "index": bad, "corpus": self.corpus}, "bad.index: not a readable FAISS index")

    def test_corrupt_model(self):
        model = os.path.join(self.dir, "model")
        shutil.copytree(MODEL, model)
        with open(os.path.join(model, "model.safetensors"), "r+b") as f:
            f.truncate(6000)
        self.start_fails({"model": model, "index": self.index, "corpus": self.corpus}, "model.safetensors: tensor ",
                         "truncated file?")

    def test_corrupt_corpus(self):
        bad = os.path.join(self.dir, "bad.jsonl")
        with open(self.corpus) as f:
            lines = f.readlines()
        lines[6] = lines[6][:20] + "\n"
        with open(bad, "w") as f:
            f.writelines(lines)
        self.start_fails({"model": MODEL, "index": self.index, "corpus": bad}, "bad.jsonl:7: row 6 is not one JSON object")

    def test_model_config_mismatch(self):
        other = os.path.join(self.dir, "model16")
        shutil.copytree(MODEL, other)
        with open(os.path.join(other, "config.json")) as f:
            cfg = json.load(f)
        cfg["hidden_size"] = 32
        with open(os.path.join(other, "config.json"), "w") as f:
            json.dump(cfg, f)
        self.start_fails({"model": other, "index": self.index, "corpus": self.corpus},
                         "tensor embeddings.word_embeddings.weight has shape [30522, 64], config.json implies [30522, 32]")


if __name__ == "__main__":
    sgtest.main()
