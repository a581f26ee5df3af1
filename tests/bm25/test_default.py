"""The embedded default (issue 6): build/prepare-default makes the demo corpus from Debian's
dict-gcide and its BM25 index (once; a second run reuses them), and the gateway started on
configs/default.json answers a question with sensible passages. This is the path of the README's
first command (`make run`) in a clean checkout; the only change made to the config here is the
index path, pointed at this build directory (the checked-in one names build/, the Makefile's)."""
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import sgtest

PREPARE = sgtest.binary("prepare-default")
DEMO = os.path.join(sgtest.BUILD_DIR, "demo")
CONFIG = os.path.join(sgtest.SOURCE_DIR, "configs", "default.json")


def b64(n):
    """A number in dictd's base64 (the offsets and lengths of a .index file)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    s = ""
    while True:
        s = alphabet[n % 64] + s
        n //= 64
        if n == 0:
            return s


def prepare():
    t0 = time.time()
    r = subprocess.run([PREPARE], capture_output=True, text=True, timeout=sgtest.scaled(300))
    if r.returncode != 0:
        raise AssertionError("prepare-default failed (%d):\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout + r.stderr, time.time() - t0


class DefaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.first_log, cls.first_s = prepare()

    def test_prepare_is_cached(self):
        self.assertTrue(os.path.exists(os.path.join(DEMO, "bm25", "bm25.meta")), self.first_log)
        with open(os.path.join(DEMO, "gcide.jsonl"), encoding="utf-8") as f:
            rows = [json.loads(line) for _, line in zip(range(50000), f)]
        self.assertEqual(rows[0]["id"], "0")
        for r in rows:
            self.assertRegex(r["contents"], r'^"[^"\n]+"\n.+', r)
            for markup in ("[1913 Webster]", "[WordNet", "{", "}"):
                self.assertNotIn(markup, r["contents"])
        info = subprocess.run([sgtest.binary("searchgate-index-bm25"), "--info", os.path.join(DEMO, "bm25")],
                              capture_output=True, text=True, check=True).stdout
        info = json.loads(info)
        self.assertGreater(info["docs"], 100000)  # one passage per dictionary entry, ~126k
        self.assertEqual((info["k1"], info["b"], info["stemmer"]), (0.9, 0.4, "porter"))
        log, seconds = prepare()
        self.assertIn("up to date", log)
        self.assertLess(seconds, sgtest.scaled(10))
        with open(os.path.join(DEMO, "stamp")) as f:
            self.assertIn("/usr/share/dictd/gcide.dict.dz", f.read())

    def test_markup_cleaning_and_rebuild_on_change(self):
        # a tiny dictd dictionary in the format of dict-gcide: markup cleaned, the article order
        # kept, one passage per article (not per headword), the database entries skipped; a
        # changed input is rebuilt, an unchanged one reused
        d = tempfile.mkdtemp(prefix="sg-bm25-dictd-")
        try:
            articles = ['00-database-short\n   A test dictionary\n',
                        'Volcano \\Vol*ca"no\\, n.; pl. {Volcanoes}. [It. volcano.] (Geol.)\n'
                        '   A mountain from which lava is ejected.\n   [1913 Webster]\n',
                        'Hamlet \\Ham"let\\ (h[a^]m"l[e^]t), n.\n   A small village. Syn: {Village}.\n   [WordNet 1.5 +PJC]\n',
                        "Cafe \\Caf`e\"\\, n. [F. caf['e].]\n   A coffee house, (c[o^]f\"f[=e]) [Obs.]\n   [PJC]\n"]
            want = ['"Volcano"\nVolcano, n.; pl. Volcanoes. [It. volcano.] (Geol.) A mountain from which lava is ejected.',
                    '"Hamlet"\nHamlet, n. A small village. Syn: Village.',
                    '"Cafe"\nCafe, n. [F. café.] A coffee house, [Obs.]']

            def write_dict(arts, heads):
                data, offs = "", []
                for a in arts:
                    offs.append((len(data.encode()), len(a.encode())))
                    data += a
                with gzip.open(os.path.join(d, "t.dict.dz"), "wb") as f:
                    f.write(data.encode())
                with open(os.path.join(d, "t.index"), "w") as f:
                    for h, i in heads:
                        f.write("%s\t%s\t%s\n" % (h, b64(offs[i][0]), b64(offs[i][1])))

            write_dict(articles, [("00-database-short", 0), ("Cafe", 3), ("Hamlet", 2), ("Volcano", 1), ("Volcanoes", 1)])
            env = dict(os.environ, SG_GCIDE_DICT=os.path.join(d, "t.dict.dz"), SG_GCIDE_INDEX=os.path.join(d, "t.index"))
            demo = os.path.join(d, "demo")

            def run():
                r = subprocess.run([PREPARE, demo], capture_output=True, text=True, env=env, timeout=sgtest.scaled(60))
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(os.path.join(demo, "gcide.jsonl"), encoding="utf-8") as f:
                    rows = [json.loads(line) for line in f]
                return r.stdout, rows

            out, rows = run()
            self.assertIn("building the demo corpus", out)
            self.assertEqual(rows, [{"id": str(i), "contents": c} for i, c in enumerate(want)])
            out, _ = run()
            self.assertIn("up to date", out)
            articles.append('Zebra \\Ze"bra\\, n. (Zool.)\n   A striped horse.\n')
            write_dict(articles, [("Volcano", 1), ("Hamlet", 2), ("Cafe", 3), ("Zebra", 4)])
            out, rows = run()
            self.assertIn("building the demo corpus", out)
            self.assertEqual(rows[-1]["contents"], '"Zebra"\nZebra, n. (Zool.) A striped horse.')
            info = json.loads(subprocess.run([sgtest.binary("searchgate-index-bm25"), "--info", os.path.join(demo, "bm25"),
                                              "--verify"], capture_output=True, text=True, check=True).stdout)
            self.assertEqual(info["docs"], 4)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_default_config_answers(self):
        with open(CONFIG) as f:
            cfg = json.load(f)
        backend = cfg["backends"][0]
        self.assertEqual(backend["plugin"], "bm25")
        self.assertEqual(cfg.get("default_backend"), backend["name"])
        self.assertEqual(cfg["listen"], {"host": "127.0.0.1", "port": 8000})
        self.assertEqual(cfg["cache"]["redis"], {"host": "127.0.0.1", "port": 6379, "timeout_ms": 50})
        # the checked-in path is relative to configs/ and names the Makefile's build/ directory
        self.assertEqual(os.path.normpath(os.path.join(os.path.dirname(CONFIG), backend["config"]["index"])),
                         os.path.join(sgtest.SOURCE_DIR, "build", "demo", "bm25"))
        backend["config"]["index"] = os.path.join(DEMO, "bm25")
        gw = sgtest.Gateway(cfg)
        try:
            self.assertIn("/dashboard", gw.read_log())
            r = gw.post("/retrieve", {"queries": ["what is a volcano", "capital of France", "!!!"], "topk": 3,
                                      "return_scores": True})
            self.assertEqual(r.status, 200, r)
            res = r.json()["result"]
            titles = [h["document"]["title"] for h in res[0]]
            self.assertEqual(titles[0], "Volcano", titles)
            self.assertEqual(len(res[0]), 3)
            self.assertTrue(any("France" in h["document"]["text"] for h in res[1]), res[1])
            self.assertEqual(res[2], [])
            for h in res[0] + res[1]:
                d = h["document"]
                self.assertEqual(set(d), {"id", "title", "text", "contents", "url"})
                self.assertEqual(d["contents"], '"%s"\n%s' % (d["title"], d["text"]))
                self.assertGreater(h["score"], 0)
            # the Search-R1 flat shape (slime / RLinf) with the default topk of 3
            r = gw.post("/retrieve", {"queries": ["Who wrote Hamlet?"], "return_scores": False})
            self.assertEqual(r.status, 200, r)
            docs = r.json()["result"][0]
            self.assertEqual(len(docs), 3)
            self.assertTrue(any("hamlet" in d["contents"].lower() for d in docs), docs)
        finally:
            gw.stop()


if __name__ == "__main__":
    sgtest.main()
