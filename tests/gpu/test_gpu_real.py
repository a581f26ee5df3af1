"""The GPU path on real GPUs (CTest label "gpu"; exits 77 = skipped, saying why, where the CUDA
module is not built (-DSG_CUDA=ON) or no GPU can be used).

* The CUDA encoder against the CPU encoder on an e5-base-shaped model (hidden 768, 12 layers,
  random weights from tests/bench/local/make_model.py): cosine >= 0.999 per query, on every GPU
  (gpu_test_module ... encoder).
* Through the gateway, "device": "cuda" with the Flat index sharded over all GPUs and on GPU 0
  only, and "auto" picking the GPUs: a 2,560-query request (Search-R1's batch) and concurrent
  small requests, against "cpu" (same ids except near-ties at fp16 precision).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import sgtest

MODEL = os.path.join(sgtest.FIXTURES, "e5-tiny")
REAL = os.path.join(sgtest.BUILD_DIR, "plugins", "sg_local_cuda.so")
CHECKER = os.path.join(sgtest.BUILD_DIR, "tests", "gpu", "gpu_test_module")
MAKE_MODEL = os.path.join(sgtest.SOURCE_DIR, "tests", "bench", "local", "make_model.py")
WORDS = ["river", "mountain", "castle", "piano", "rocket", "garden", "winter", "ocean", "library", "dragon", "coffee",
         "violin", "desert", "forest", "harbor", "comet", "Zürich", "東京", "naïve", "résumé"]
ROWS = 3000
TOL = 3e-3


def gpus():
    """The number of usable GPUs, or exit 77 with the reason."""
    if not os.path.exists(REAL):
        print("skipped: no GPU module (%s is built with -DSG_CUDA=ON)" % REAL)
        sys.exit(77)
    r = subprocess.run([CHECKER, REAL, "probe"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = r.stdout.decode(errors="replace")
    if r.returncode == 77:
        print(out.strip())
        sys.exit(77)
    if r.returncode != 0:
        raise SystemExit("probe failed:\n" + out)
    print(out.strip())
    return int(out.split(" GPU(s)")[0].rsplit(" ", 1)[1])


class RealGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.n_gpus = N_GPUS
        cls.dir = tempfile.mkdtemp(prefix="sggpu-real-")
        cls.corpus = os.path.join(cls.dir, "wiki-18.jsonl")
        with open(cls.corpus, "w", encoding="utf-8") as f:
            for i in range(ROWS):
                title = "%s %s" % (WORDS[i % len(WORDS)].capitalize(), i)
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s %s %s, a story about %s." % (
                    title, title, WORDS[(i * 3) % len(WORDS)], WORDS[(i * 7) % len(WORDS)],
                    WORDS[(i // 20) % len(WORDS)])}, ensure_ascii=False) + "\n")
        cls.index = os.path.join(cls.dir, "e5_Flat.index")
        subprocess.run([sgtest.binary("searchgate-index-dense"), "--model", MODEL, cls.corpus, cls.index, "--batch", "64"],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def gateway(self, extra):
        cfg = {"model": MODEL, "index": self.index, "corpus": self.corpus, "max_batch": 512, "max_wait_ms": 5}
        cfg.update(extra)
        return sgtest.Gateway({"backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False, "config": cfg}]})

    @staticmethod
    def scores(gw, queries, k):
        r = gw.retrieve(queries, topk=k, return_scores=True)
        assert r.status == 200, r
        return [[(h["document"]["id"], h["score"]) for h in hits] for hits in r.json()["result"]]

    def compare(self, got, want):
        same = total = 0
        for q, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(len(g), len(w))
            ids = [i for i, _ in w]
            for (gid, gs), (wid, ws) in zip(g, w):
                self.assertLessEqual(abs(gs - ws), TOL, "query %d: GPU %s %.5f vs CPU %s %.5f" % (q, gid, gs, wid, ws))
                same += gid in ids
                total += 1
        return same / total

    def test_encoder_e5_base_shape(self):
        model = os.path.join(self.dir, "e5-base-random")
        subprocess.run(["/usr/bin/python3", MAKE_MODEL, model], check=True, timeout=600)
        r = subprocess.run([CHECKER, REAL, "encoder", model, "256"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=900)
        print(r.stdout.decode(errors="replace"))
        self.assertEqual(r.returncode, 0)

    def test_search_r1_request_on_gpus(self):
        queries = ["%s question %d" % (WORDS[i % len(WORDS)], i) for i in range(2560)]
        cpu = self.gateway({"device": "cpu"})
        try:
            want = self.scores(cpu, queries, 3)
        finally:
            cpu.stop()
        configs = [{"device": "cuda"}, {"device": "cuda", "gpu_ids": [0]}, {"device": "auto"},
                   {"device": "cuda", "gpu_rescore": 4}, {"device": "cuda", "gpu_index": False}]
        for extra in configs:
            with self.subTest(extra=extra):
                gw = self.gateway(extra)
                try:
                    n = len(extra.get("gpu_ids", range(self.n_gpus)))
                    self.assertEqual(gw.metric("searchgate_backend_local_gpus"), n)
                    got = self.scores(gw, queries, 3)
                    recall = self.compare(got, want)
                    print("%s: 2,560 queries, recall@3 against the CPU %.4f" % (extra, recall))
                    self.assertGreaterEqual(recall, 0.95)
                    results = sgtest.parallel(lambda q: gw.retrieve([q], topk=3), [(q,) for q in queries[:64]])
                    self.compare([[(h["document"]["id"], h["score"]) for h in r.json()["result"][0]] for r in results],
                                 want[:64])
                finally:
                    gw.stop()


if __name__ == "__main__":
    N_GPUS = gpus()
    unittest.main(verbosity=2)
