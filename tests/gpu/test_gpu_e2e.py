"""The local backend's device selection end to end, through the real gateway (build/searchgate +
build/plugins/sg_local.so), on any machine:

* "auto" without a usable GPU serves from the CPU, says why in the log, and answers byte for byte
  what "cpu" answers: with the real CUDA module where it is built (on a GPU-less machine
  cudaGetDeviceCount fails), with a missing module, and with the CUDA emulation (tests/gpu/emu)
  reporting no device.
* "cuda" without a usable GPU fails start-up with a message that says why.
* The GPU path itself on the CUDA emulation (2 emulated GPUs): encoder and sharded flat index on
  the "GPUs", results against the CPU's (same ids except near-ties at fp16 precision), with
  re-scoring, with the index left to FAISS, concurrent requests, metrics, the start-up errors for
  gpu_ids and memory, and a sticky CUDA error (injected) reported by /health.

Data is made here: a small corpus and its Flat IP index built by searchgate-index-dense from the
e5-tiny fixture model.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import sgtest

MODEL = os.path.join(sgtest.FIXTURES, "e5-tiny")
EMU = os.path.join(sgtest.BUILD_DIR, "tests", "gpu", "sg_local_cuda_emu.so")
REAL = os.path.join(sgtest.BUILD_DIR, "plugins", "sg_local_cuda.so")
CHECKER = os.path.join(sgtest.BUILD_DIR, "tests", "gpu", "gpu_test_module")
WORDS = ["river", "mountain", "castle", "piano", "rocket", "garden", "winter", "ocean", "library", "dragon", "coffee",
         "violin", "desert", "forest", "harbor", "comet", "Zürich", "東京", "naïve", "résumé"]
ROWS = 160
QUERIES = ["castle in winter", "a story about the ocean", "Zürich piano", "東京 library 42", "dragon", "harbor comet 7",
           "violin and coffee", "the desert forest", "naïve résumé", "rocket garden"]
TOL = 3e-3  # fp16 encoder + fp16 index


def real_gpu_present():
    """True when the real module is built and sees a GPU (then "auto" is expected to use it)."""
    if not os.path.exists(REAL):
        return False
    r = subprocess.run([CHECKER, REAL, "probe"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return r.returncode == 0


class GpuE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sggpu-e2e-")
        cls.corpus = os.path.join(cls.dir, "wiki-18.jsonl")
        with open(cls.corpus, "w", encoding="utf-8") as f:
            for i in range(ROWS):
                title = "%s %s" % (WORDS[i % len(WORDS)].capitalize(), i)
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s %s %s, a story about %s." % (
                    title, title, WORDS[(i * 3) % len(WORDS)], WORDS[(i * 7) % len(WORDS)],
                    WORDS[(i // 20) % len(WORDS)])}, ensure_ascii=False) + "\n")
        cls.index = os.path.join(cls.dir, "e5_Flat.index")
        r = subprocess.run([sgtest.binary("searchgate-index-dense"), "--model", MODEL, cls.corpus, cls.index, "--batch", "32"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=sgtest.scaled(300))
        if r.returncode != 0:
            raise AssertionError("searchgate-index-dense failed: %s" % r.stderr.decode(errors="replace"))
        cls.gpu_machine = real_gpu_present()
        # one worker: the 10 queries of a request form one batch, so CPU answers are bit-reproducible
        cpu = cls.start({"device": "cpu", "workers": 1})
        try:
            cls.cpu_scores = cls.retrieve(cpu, QUERIES, 5)
            cls.cpu_body = cpu.retrieve(QUERIES, topk=5, return_scores=True).body
            cls.cpu_log = cpu.read_log()
        finally:
            cpu.stop()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def config(cls, extra):
        cfg = {"model": MODEL, "index": cls.index, "corpus": cls.corpus, "max_batch": 64, "max_wait_ms": 5}
        cfg.update(extra)
        cfg = {k: v for k, v in cfg.items() if v is not None}  # None: leave the key out (its default)
        # the emulated GPU runs its kernels on the CPU: a 200-query request can pass the default 30 s
        # deadline on a loaded (or sanitized) 2-core machine
        return {"backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False,
                              "timeout_ms": int(1000 * sgtest.scaled(90)), "config": cfg}]}

    @classmethod
    def start(cls, extra, env=None, expect_fail=False):
        return sgtest.Gateway(cls.config(extra), env=env, expect_fail=expect_fail)

    @staticmethod
    def retrieve(gw, queries, k):
        r = gw.retrieve(queries, topk=k, return_scores=True)
        assert r.status == 200, r
        return [[(item["document"]["id"], item["score"]) for item in hits] for hits in r.json()["result"]]

    def fail_start(self, extra, env=None):
        gw = self.start(extra, env=env, expect_fail=True)
        rc = gw.wait_exit(60)
        self.assertNotEqual(rc, 0)
        return gw.read_log()

    def close_to_cpu(self, got, queries=QUERIES):
        """Rank by rank: the CPU's id, or another whose score is within the fp16 error (a near-tie)."""
        want = self.cpu_scores if queries is QUERIES else None
        self.assertEqual(len(got), len(want))
        same = total = 0
        for q, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(len(g), len(w))
            ids = [i for i, _ in w]
            for rank, ((gid, gs), (wid, ws)) in enumerate(zip(g, w)):
                self.assertLessEqual(abs(gs - ws), TOL, "query %d rank %d: %s %.5f vs CPU %s %.5f" % (q, rank, gid, gs, wid, ws))
                same += gid in ids
                total += 1
        return same / total

    # ---- no GPU: fallback and forced failures ----

    def test_auto_falls_back_without_gpu(self):
        cases = [({"cuda_module": EMU}, {"SG_CUDA_EMU_GPUS": "0"},
                  "device auto: no usable GPU (cudaGetDeviceCount: no CUDA-capable device is detected (error 100)); using the CPU"),
                 ({"cuda_module": os.path.join(self.dir, "missing", "sg_local_cuda.so")}, None,
                  "device auto: no CUDA module (cannot load %s" % os.path.join(self.dir, "missing", "sg_local_cuda.so"))]
        if not self.gpu_machine:
            # the plugin's own default: beside sg_local.so (the real module where -DSG_CUDA=ON built it)
            cases.append(({}, None, "using the CPU"))
        for extra, env, line in cases:
            with self.subTest(extra=extra):
                gw = self.start(dict(extra, device="auto", workers=1), env=env)
                try:
                    r = gw.retrieve(QUERIES, topk=5, return_scores=True)
                    self.assertEqual(r.status, 200, r)
                    self.assertEqual(r.body, self.cpu_body)  # exactly the CPU path
                    self.assertEqual(gw.metric("searchgate_backend_local_gpus"), 0)
                    log = gw.read_log()
                    self.assertIn(line, log)
                    if not extra and not os.path.exists(REAL):
                        self.assertIn("device auto: no CUDA module (cannot load", log)
                    if not extra and os.path.exists(REAL):
                        self.assertIn("device auto: no usable GPU (cudaGetDeviceCount: ", log)
                finally:
                    gw.stop()

    def test_cpu_never_loads_cuda(self):
        for word in ("device auto", "CUDA", "GPU"):
            self.assertNotIn(word, self.cpu_log)

    def test_cuda_without_gpu_fails_start(self):
        log = self.fail_start({"device": "cuda", "cuda_module": EMU}, env={"SG_CUDA_EMU_GPUS": "0"})
        self.assertIn('config.device: "cuda", but no GPU can be used: cudaGetDeviceCount: no CUDA-capable device is detected '
                      '(error 100)', log)
        missing = os.path.join(self.dir, "missing", "sg_local_cuda.so")
        log = self.fail_start({"device": "cuda", "cuda_module": missing})
        self.assertIn('config.device: "cuda", but the CUDA module cannot be used: cannot load %s' % missing, log)
        if os.path.exists(REAL) and not self.gpu_machine:
            log = self.fail_start({"device": "cuda"})
            self.assertIn('config.device: "cuda", but no GPU can be used: cudaGetDeviceCount: ', log)

    def test_config_errors(self):
        log = self.fail_start({"device": "tpu"})
        self.assertIn("config.device", log)
        self.assertIn('"tpu"', log)
        log = self.fail_start({"gpu_ids": [0, 0], "device": "cpu"})
        self.assertIn("config.gpu_ids: a GPU listed twice, got 0", log)
        log = self.fail_start({"gpu_ids": "0", "device": "cpu"})
        self.assertIn("config.gpu_ids: expected an array", log)
        log = self.fail_start({"gpu_rescore": 17})
        self.assertIn("config.gpu_rescore", log)

    # ---- the GPU path on the emulation ----

    def emu_env(self, gpus=2, mem_mb=2048):
        return {"SG_CUDA_EMU_GPUS": str(gpus), "SG_CUDA_EMU_MEM_MB": str(mem_mb)}

    def test_emulated_gpus_serve(self):
        base = {"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1024}
        for extra, index_on_gpu in (({}, True), ({"gpu_rescore": 4}, True), ({"gpu_index": False}, False),
                                     ({"gpu_ids": [1]}, True)):
            with self.subTest(extra=extra):
                gw = self.start(dict(base, **extra), env=self.emu_env())
                try:
                    log = gw.read_log()
                    self.assertIn("device cuda: sg_local_cuda 1.1.0 (EMULATED on the CPU: tests only) from %s, 2 GPU(s) visible"
                                  % EMU, log)
                    n = len(extra.get("gpu_ids", [0, 1]))
                    self.assertEqual(gw.metric("searchgate_backend_local_gpus"), n)
                    self.assertEqual(gw.metric("searchgate_backend_local_gpu_index"), 1 if index_on_gpu else 0)
                    self.assertEqual(gw.metric("searchgate_backend_local_workers"), 2 * n)
                    if index_on_gpu:
                        self.assertIn("flat index on the GPUs: %d vectors in fp16 over %d shard(s)" % (ROWS, n), log)
                    else:
                        self.assertIn("the index is searched by FAISS on the CPU", log)
                    recall = self.close_to_cpu(self.retrieve(gw, QUERIES, 5))
                    self.assertGreaterEqual(recall, 0.9)
                    # the flat shape, and concurrent requests gathered into shared batches
                    r = gw.post("/retrieve", {"queries": QUERIES[:2], "return_scores": False})
                    self.assertEqual(r.status, 200, r)
                    self.assertEqual(len(r.json()["result"][0]), 3)
                    self.assertIn("contents", r.json()["result"][0][0])
                    sets = [[q] for q in QUERIES]
                    results = sgtest.parallel(lambda qs: gw.retrieve(qs, topk=5), [(qs,) for qs in sets])
                    got = [r.json()["result"][0] for r in results]
                    self.close_to_cpu([[(h["document"]["id"], h["score"]) for h in hits] for hits in got])
                finally:
                    gw.stop()

    def test_emulated_larger_request(self):
        queries = ["%s question %d" % (WORDS[i % len(WORDS)], i) for i in range(200)]
        gw = self.start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1024, "max_batch": 64}, env=self.emu_env())
        cpu = self.start({"device": "cpu"})
        try:
            got = self.retrieve(gw, queries, 3)
            want = self.retrieve(cpu, queries, 3)
            for q, (g, w) in enumerate(zip(got, want)):
                for (gid, gs), (wid, ws) in zip(g, w):
                    self.assertLessEqual(abs(gs - ws), TOL, "query %d: %s %.5f vs %s %.5f" % (q, gid, gs, wid, ws))
        finally:
            gw.stop()
            cpu.stop()

    def test_emulated_length_sorted_passes(self):
        """Issue 21: one long query among short ones. The GPU pads each pass to its longest sequence; in
        arrival order the long query's pass pads its neighbours, sorted by length it pads nothing in
        as many passes, so the batch runs sorted (and answers in order, as the CPU does).
        local_tokens_total / local_padded_tokens_total count what the passes computed."""
        queries = ["dragon", "a long question about the castle in winter and the ocean library and the rocket garden in the forest",
                   "piano", "comet", "violin", "desert", "harbor", "coffee"]
        r = subprocess.run([sgtest.binary("searchgate-encode"), "--model", MODEL, "--ids", "--max-length", "32"],
                           input="".join(json.dumps(q) + "\n" for q in queries).encode(), stdout=subprocess.PIPE, check=True,
                           timeout=sgtest.scaled(60))
        lens = [len(json.loads(line)) for line in r.stdout.decode().splitlines()]

        def passes(ls, max_tokens=64, max_seqs=64):  # sg_gpu_enc_pass's cut
            out, first = [], 0
            while first < len(ls):
                j, mx = first, 0
                while j < len(ls) and j - first < max_seqs:
                    m2 = max(mx, ls[j])
                    if j > first and (j - first + 1) * m2 > max_tokens:
                        break
                    mx, j = m2, j + 1
                out.append((j - first, mx))
                first = j
            return out

        arrival, ordered = passes(lens), passes(sorted(lens))
        pad = lambda ps, ls: sum(b * m for b, m in ps) - sum(ls)
        self.assertLess(pad(ordered, lens), pad(arrival, lens))
        self.assertLessEqual(len(ordered), len(arrival))
        gw = self.start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 64, "max_length": 32, "workers": 1},
                        env=self.emu_env(gpus=1))
        cpu = self.start({"device": "cpu", "max_length": 32, "workers": 1})
        try:
            got, want = self.retrieve(gw, queries, 3), self.retrieve(cpu, queries, 3)
            for q, (g, w) in enumerate(zip(got, want)):
                for (gid, gs), (wid, ws) in zip(g, w):
                    self.assertLessEqual(abs(gs - ws), TOL, "query %d: %s %.5f vs %s %.5f" % (q, gid, gs, wid, ws))
            self.assertEqual(gw.metric("searchgate_backend_local_length_sorted_batches_total"), 1)
            self.assertEqual(gw.metric("searchgate_backend_local_padded_tokens_total"), pad(ordered, lens))
            self.assertEqual(gw.metric("searchgate_backend_local_tokens_total"), sum(b * m for b, m in ordered))
            self.assertEqual(cpu.metric("searchgate_backend_local_padded_tokens_total"), 0)
            self.assertEqual(cpu.metric("searchgate_backend_local_tokens_total"), sum(lens))
        finally:
            gw.stop()
            cpu.stop()

    def test_emulated_topk_limit(self):
        gw = self.start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1024, "gpu_rescore": 8, "max_topk": 1000},
                        env=self.emu_env())
        try:
            self.assertIn("max_topk 1000 is more than a GPU search returns; using 128", gw.read_log())
            self.assertEqual(gw.retrieve(["dragon"], topk=128).status, 200)
            self.assertEqual(gw.retrieve(["dragon"], topk=129).status, 413)
        finally:
            gw.stop()

    def test_emulated_defaults(self):
        gw = self.start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1024, "max_batch": None}, env=self.emu_env())
        try:
            log = gw.read_log()
            self.assertIn("top-k up to 100", log)
            self.assertIn("4 workers, max_batch 512", log)
            self.assertEqual(gw.retrieve(["dragon"], topk=100).status, 200)
            self.assertEqual(gw.retrieve(["dragon"], topk=101).status, 413)
        finally:
            gw.stop()

    def test_emulated_sticky_error_makes_health_fail(self):
        """A sticky CUDA error met by a worker (the emulation makes the first embed_ln launch fault
        with an illegal address) turns /health into 503 naming the GPU and the error, where it used
        to stay "ok" while every batch on that GPU failed; the request that met it gets a JSON 500."""
        env = dict(self.emu_env(), SG_CUDA_EMU_FAULT="embed_ln:1")
        gw = self.start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1024, "gpu_ids": [1]}, env=env)
        try:
            h = gw.get("/health")
            self.assertEqual(h.status, 200, h)
            self.assertEqual(h.json()["backends"]["local"]["status"], "ok")
            r = gw.retrieve(["dragon"], topk=3)
            self.assertEqual(r.status, 500, r)
            # whichever call met the fault first says so (a launch, a cuBLAS call, the final sync)
            self.assertIn("GPU 1: ", r.json()["error"]["message"])
            h = gw.get("/health")
            self.assertEqual(h.status, 503, h)
            local = h.json()["backends"]["local"]
            self.assertEqual(local["status"], "unhealthy")
            self.assertIn("GPU 1: an illegal memory access was encountered (700)", local["error"])
            self.assertIn("until the process restarts", local["error"])
            self.assertEqual(gw.retrieve(["castle"], topk=3).status, 500)  # sticky: the GPU stays broken
        finally:
            gw.stop()

    def test_emulated_start_errors(self):
        log = self.fail_start({"device": "cuda", "cuda_module": EMU, "gpu_ids": [5]}, env=self.emu_env())
        self.assertIn("config.gpu_ids: GPU 5 does not exist (2 visible: 0 .. 1)", log)
        # 1 MiB per GPU: the weights do not fit, and the message has the sizes
        log = self.fail_start({"device": "cuda", "cuda_module": EMU}, env=self.emu_env(mem_mb=1))
        self.assertIn("config.model: cannot put the encoder on GPU 0: GPU 0 (EMULATED GPU 0): the encoder weights (hidden 64, 2 "
                      "layers, fp16) needs 3.", log)
        self.assertIn("MiB but only 1.0 MiB of its 1.0 MiB are free", log)
        # 64 MiB: the weights fit, the index does not with a large search budget... the workspace does not
        log = self.fail_start({"device": "cuda", "cuda_module": EMU, "gpu_max_tokens": 1 << 20}, env=self.emu_env(mem_mb=1024))
        self.assertIn("an encoder workspace (1048576 tokens per pass", log)
        self.assertIn("lower max_batch, gpu_max_tokens or workers", log)
        # "auto" turns a GPU it cannot use into a start-up error too: the GPU exists
        log = self.fail_start({"device": "auto", "cuda_module": EMU, "gpu_max_tokens": 1 << 20}, env=self.emu_env(mem_mb=1024))
        self.assertIn("an encoder workspace", log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
