"""The BLAS kernel choice (lib/blas.c) through the real gateway and tools: the log line,
the "blas" object of /stats and the searchgate_blas_info metric, for each way the choice is made;
the local backend's "precision" (bf16 where the CPU has AVX512_BF16/AMX, refused or fallen back
from where it has not; int8 on the kernel the CPU's features allow) and "encoder_blas" (the own
kernels, OpenBLAS, oneDNN), each said in the log, a metric and /stats; the token counter.

OpenBLAS picks its kernels from the CPU model number; a CPU it does not know (a new Xeon) gets SSE3
`Prescott` kernels. That case is reproduced on any machine with SG_BLAS_SIMULATE_DEFAULT_CORE,
which makes the decision behave as if OpenBLAS had picked that core: the gateway must then
re-execute itself with OPENBLAS_CORETYPE set to the best core for the CPU's features, and report
what the re-loaded library actually runs.
"""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import sgtest

MODEL = os.path.join(sgtest.FIXTURES, "e5-tiny")


def cpuinfo():
    with open("/proc/cpuinfo") as f:
        return f.read()


def cpu_flags():
    for line in cpuinfo().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def best_core():
    """What blas.c should pick for this machine, from /proc/cpuinfo (an independent reading)."""
    fl = cpu_flags()
    vendor = cpuinfo().split("vendor_id", 1)[1].split(":", 1)[1].split()[0]
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= fl:
        return "Cooperlake" if "avx512_bf16" in fl else "SkylakeX"
    if {"avx2", "fma"} <= fl:
        return "Zen" if vendor in ("AuthenticAMD", "HygonGenuine") else "Haswell"
    if "avx" in fl:
        return "Sandybridge"
    return None


class BlasKernels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sgblas-")
        cls.corpus = os.path.join(cls.dir, "corpus.jsonl")
        with open(cls.corpus, "w") as f:
            for i in range(40):
                f.write(json.dumps({"id": str(i), "contents": "\"Row %d\"\nabout topic %d" % (i, i % 7)}) + "\n")
        cls.index = os.path.join(cls.dir, "e5_Flat.index")
        subprocess.run([sgtest.binary("searchgate-index-dense"), "--model", MODEL, cls.corpus, cls.index],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=sgtest.scaled(120))
        for k in [k for k in os.environ if k.startswith("SG_BLAS") or k in ("SG_CPU_FEATURES", "OPENBLAS_CORETYPE")]:
            del os.environ[k]
        cls.base_env = dict(os.environ)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, env, **extra):
        cfg = {"model": MODEL, "index": self.index, "corpus": self.corpus}
        cfg.update(extra)
        return sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "topk": 2, "cache": False, "config": cfg}]},
                              env=env)

    def check(self, env, source, core=None, default_core=None):
        gw = self.start(env)
        try:
            blas = gw.get("/stats").json()["blas"]
            self.assertTrue(blas["library"].startswith("OpenBLAS "), blas)
            self.assertEqual(blas["source"], source, blas)
            if core is not None:
                self.assertEqual(blas["core"], core, blas)
            if default_core is not None:
                self.assertEqual(blas["default_core"], default_core, blas)
            self.assertEqual(gw.metric("searchgate_blas_info", core=blas["core"], source=source), 1.0)
            r = gw.retrieve(["topic 3"], topk=2)
            self.assertEqual(r.status, 200, r)
            log = gw.stop()
        except BaseException:
            gw.stop(check=False)
            raise
        lines = [l for l in log.splitlines() if "BLAS: " in l]
        self.assertEqual(len(lines), 1, log)
        self.assertIn("with %s kernels" % blas["core"], lines[0])
        return blas, lines[0]

    def test_library_choice_kept(self):
        """No override: the gateway runs the library's own pick, unless that is weaker than the
        features allow (then this machine is one OpenBLAS does not know: source cpu-features)."""
        gw = self.start({})
        try:
            blas = gw.get("/stats").json()["blas"]
        finally:
            gw.stop()
        self.assertIn(blas["source"], ("library", "cpu-features"), blas)
        if blas["source"] == "cpu-features":
            self.assertEqual(blas["core"], best_core(), blas)

    def test_unknown_cpu_is_forced_to_its_features(self):
        best = best_core()
        if best is None:
            self.skipTest("this CPU has no AVX: no kernel set beats the SSE ones")
        blas, line = self.check({"SG_BLAS_SIMULATE_DEFAULT_CORE": "Prescott"}, "cpu-features", core=best,
                                default_core="Prescott")
        self.assertIn("OPENBLAS_CORETYPE=%s" % best, line)
        self.assertIn("OpenBLAS picks Prescott", line)

    def test_haswell_features_off_then_on(self):
        """Through the SG_CPU_FEATURES override: with only SSE3+AVX visible the best is Sandybridge;
        with AVX2+FMA visible too it is Haswell (or Zen on AMD)."""
        fl = cpu_flags()
        if not {"avx", "avx2", "fma"} <= fl:
            self.skipTest("needs an AVX2+FMA CPU")
        self.check({"SG_BLAS_SIMULATE_DEFAULT_CORE": "Prescott", "SG_CPU_FEATURES": "sse3,avx"}, "cpu-features",
                   core="Sandybridge", default_core="Prescott")
        want = "Zen" if ("AuthenticAMD" in cpuinfo() or "HygonGenuine" in cpuinfo()) else "Haswell"
        self.check({"SG_BLAS_SIMULATE_DEFAULT_CORE": "Prescott", "SG_CPU_FEATURES": "sse3,avx,fma,avx2"}, "cpu-features",
                   core=want, default_core="Prescott")

    def test_nothing_better_than_sse(self):
        self.check({"SG_BLAS_SIMULATE_DEFAULT_CORE": "Prescott", "SG_CPU_FEATURES": "sse3"}, "library")

    def test_user_setting_wins(self):
        blas, line = self.check({"OPENBLAS_CORETYPE": "Sandybridge", "SG_BLAS_SIMULATE_DEFAULT_CORE": "Prescott"}, "user",
                                core="Sandybridge")
        self.assertIn("set by the user", line)

    def test_bad_feature_list_fails_startup(self):
        gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": {
            "model": MODEL, "index": self.index, "corpus": self.corpus}}]}, env={"SG_CPU_FEATURES": "avx2,sse9"},
            expect_fail=True)
        self.assertEqual(gw.wait_exit(), 1)
        self.assertIn("SG_CPU_FEATURES: unknown feature \"sse9\"", gw.read_log())

    def test_no_blas_without_dense_backend(self):
        gw = sgtest.Gateway({"backends": [sgtest.example_backend("ex")]})
        try:
            blas = gw.get("/stats").json()["blas"]
            self.assertEqual(blas["library"], "none")
        finally:
            log = gw.stop()
        self.assertNotIn("BLAS: ", log)

    def test_tools_report_and_apply(self):
        best = best_core()
        if best is None:
            self.skipTest("no AVX")
        env = dict(self.base_env, SG_BLAS_SIMULATE_DEFAULT_CORE="Prescott")
        r = subprocess.run([sgtest.binary("searchgate-encode"), "--model", MODEL], input=b'"hello"\n', env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=sgtest.scaled(60))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("BLAS: OpenBLAS", r.stderr.decode())
        self.assertIn("with %s kernels" % best, r.stderr.decode())
        self.assertEqual(len(json.loads(r.stdout.decode().splitlines()[0])), 64)  # e5-tiny's hidden size


    # ---- precision ----

    def bf16_cpu(self):
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())

    def test_precision_bf16_refused_without_bf16_cpu(self):
        """Refused clearly where the CPU has no bf16 instructions (here, or with them hidden)."""
        env = {} if not self.bf16_cpu() else {"SG_CPU_FEATURES": "sse3,avx,fma,avx2"}
        gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": {
            "model": MODEL, "index": self.index, "corpus": self.corpus, "precision": "bf16"}}]}, env=env, expect_fail=True)
        self.assertEqual(gw.wait_exit(), 1)
        log = gw.read_log()
        self.assertIn('config.precision: "bf16" cannot run here', log)
        self.assertIn("neither AVX512_BF16 nor AMX-BF16", log)

    def test_precision_auto_falls_back(self):
        env = {} if not self.bf16_cpu() else {"SG_CPU_FEATURES": "sse3,avx,fma,avx2"}
        gw = self.start(env, precision="auto")
        try:
            self.assertEqual(gw.metric("searchgate_backend_local_bf16"), 0.0)
            self.assertEqual(gw.retrieve(["topic 3"], topk=2).status, 200)
        finally:
            log = gw.stop()
        self.assertIn("precision auto: float32, because this CPU", log)

    def test_precision_bf16_where_the_cpu_has_it(self):
        if not self.bf16_cpu():
            self.skipTest("this CPU has no AVX512_BF16/AMX-BF16")
        gw = self.start({}, precision="bf16")
        try:
            self.assertEqual(gw.metric("searchgate_backend_local_bf16"), 1.0)
            r = gw.retrieve(["topic 3"], topk=2)
            self.assertEqual(r.status, 200)
        finally:
            log = gw.stop()
        self.assertIn("run in bf16 through oneDNN", log)

    def test_encoder_blas(self):
        """auto: the own kernels over packed weights where AVX2 + FMA run (AVX-512 where present), else
        OpenBLAS; openblas / onednn / own forced; all answer the same ids. The choice is in the log,
        the local_encoder_info metric and /stats."""
        fl = cpu_flags()
        native = "avx512" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= fl else "avx2" if {"avx2", "fma"} <= fl else None
        answers = {}
        for name, env, extra, onednn, engine, kernel, why in (
                ("openblas", {}, {"encoder_blas": "openblas"}, 0.0, "openblas", "blas", "encoder_blas"),
                ("auto-avx2", {"SG_CPU_FEATURES": "sse3,avx,fma,avx2"}, {}, 0.0, "own", "avx2", "avx2_fma"),
                ("auto-noavx2", {"SG_CPU_FEATURES": "sse3,avx"}, {}, 0.0, "openblas", "blas", "no_avx2"),
                ("auto", {}, {}, 0.0, "own" if native else "openblas", native or "blas",
                 {"avx512": "avx512", "avx2": "avx2_fma", None: "no_avx2"}[native]),
                ("own", {}, {"encoder_blas": "own"}, 0.0, "own", native, "encoder_blas"),
                ("onednn", {}, {"encoder_blas": "onednn"}, 1.0, "onednn", "blas", "encoder_blas")):
            if kernel is None or (name == "auto-avx2" and not {"avx2", "fma"} <= fl):
                continue
            gw = self.start(env, **extra)
            try:
                self.assertEqual(gw.metric("searchgate_backend_local_encoder_onednn"), onednn, name)
                labels = dict(precision="fp32", engine=engine, kernel=kernel, weight_bits="32", why=why)
                self.assertEqual(gw.metric("searchgate_backend_local_encoder_info", **labels), 1.0, name)
                plugin = gw.get("/stats").json()["backends"]["dense"]["plugin"]
                key = "local_encoder_info{%s}" % ",".join('%s="%s"' % kv for kv in labels.items())
                self.assertEqual(plugin.get(key), 1, (name, sorted(plugin)))
                r = gw.retrieve(["topic 3", "row 12", "about topic 5"], topk=3)
                self.assertEqual(r.status, 200)
                answers[name] = [[h["document"]["id"] for h in q] for q in r.json()["result"]]
            finally:
                log = gw.stop()
            if engine == "onednn":
                self.assertIn("float32 products run through oneDNN", log)
            if engine == "own":
                self.assertIn("float32 products run on the own %s kernels over weights packed at start-up" % kernel, log)
        for name in answers:
            self.assertEqual(answers[name], answers["openblas"], name)

    def test_encoder_blas_own_refused_without_avx2(self):
        gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": {
            "model": MODEL, "index": self.index, "corpus": self.corpus, "encoder_blas": "own"}}]},
            env={"SG_CPU_FEATURES": "sse3,avx"}, expect_fail=True)
        self.assertEqual(gw.wait_exit(), 1)
        self.assertIn('config.encoder_blas: "own": the own kernels need AVX2 and FMA', gw.read_log())

    # ---- int8 ----

    def test_precision_int8(self):
        """The int8 kernel follows the CPU's features (hidden with SG_CPU_FEATURES): AVX512-VNNI with
        8-bit weights, AVX2 with 7-bit weights, else C; said in the log, the metrics and /stats. Kernels
        of the same weights answer alike (the same int32 sums); every top-3 list keeps at least two of
        float32's ids (this 40-row corpus of near-duplicates has close ties)."""
        fl = cpu_flags()
        cases = [("scalar", {"SG_CPU_FEATURES": "sse3,avx"}, "scalar", "8", "no_avx2", "the CPU has no AVX2")]
        if {"avx2", "fma"} <= fl:
            cases.append(("avx2", {"SG_CPU_FEATURES": "sse3,avx,fma,avx2"}, "avx2", "7", "avx2_no_vnni",
                          "own kernels with 7-bit weights"))
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"} <= fl:
            cases.append(("vnni", {"SG_CPU_FEATURES": "sse3,avx,fma,avx2,avx512f,avx512bw,avx512dq,avx512vl,avx512_vnni"},
                          "avx512-vnni", "8", "avx512_vnni", "the CPU has AVX512-VNNI"))
        qs = ["topic 3", "row 12", "about topic 5", "topic 6 row"]
        gw = self.start({})
        try:
            fp32 = [[h["document"]["id"] for h in q] for q in gw.retrieve(qs, topk=3).json()["result"]]
            self.assertEqual(gw.metric("searchgate_backend_local_int8"), 0.0)
        finally:
            gw.stop()
        answers = {}
        for name, env, kernel, bits, why, reason in cases:
            gw = self.start(env, precision="int8")
            try:
                self.assertEqual(gw.metric("searchgate_backend_local_int8"), 1.0, name)
                labels = dict(precision="int8", engine="own", kernel=kernel, weight_bits=bits, why=why)
                self.assertEqual(gw.metric("searchgate_backend_local_encoder_info", **labels), 1.0, name)
                plugin = gw.get("/stats").json()["backends"]["dense"]["plugin"]
                self.assertEqual(plugin.get("local_int8"), 1)
                self.assertIn("local_encoder_info{%s}" % ",".join('%s="%s"' % kv for kv in labels.items()), plugin)
                r = gw.retrieve(qs, topk=3)
                self.assertEqual(r.status, 200)
                answers[name] = got = [[h["document"]["id"] for h in q] for q in r.json()["result"]]
                for a, b in zip(got, fp32):
                    self.assertGreaterEqual(len(set(a) & set(b)), 2, (name, got, fp32))
            finally:
                log = gw.stop()
            self.assertIn("precision int8: the encoder's linear layers run in int8 (%s-bit weights), own %s kernels" % (bits, kernel),
                          log)
            self.assertIn(reason, log)
            self.assertIn("cache identity suffix .int8%scr" % ("w7" if bits == "7" else ""), log)
        if "vnni" in answers:
            self.assertEqual(answers["vnni"], answers["scalar"])

    def test_precision_int8_engines(self):
        """"encoder_blas": "openblas" has no int8: refused; "onednn": oneDNN's int8 GEMM where it is exact
        (VNNI/AMX), refused elsewhere; "auto" never picks int8."""
        gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": {
            "model": MODEL, "index": self.index, "corpus": self.corpus, "precision": "int8", "encoder_blas": "openblas"}}]},
            expect_fail=True)
        self.assertEqual(gw.wait_exit(), 1)
        self.assertIn('config.encoder_blas: "openblas" has no int8 products', gw.read_log())
        gw = self.start({}, precision="auto")
        try:
            self.assertEqual(gw.metric("searchgate_backend_local_int8"), 0.0)
        finally:
            gw.stop()
        vnni = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= cpu_flags() or {"amx_tile", "amx_int8"} <= cpu_flags()
        cfg = {"model": MODEL, "index": self.index, "corpus": self.corpus, "precision": "int8", "encoder_blas": "onednn"}
        if not vnni:
            gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": cfg}]}, expect_fail=True)
            self.assertEqual(gw.wait_exit(), 1)
            self.assertIn('config.encoder_blas: "onednn" cannot run int8 here', gw.read_log())
            return
        gw = self.start({}, precision="int8", encoder_blas="onednn")
        try:
            self.assertEqual(gw.metric("searchgate_backend_local_encoder_info", precision="int8", engine="onednn",
                                       kernel="onednn", why="encoder_blas"), 1.0)
            self.assertEqual(gw.retrieve(["topic 3"], topk=2).status, 200)
        finally:
            log = gw.stop()
        self.assertIn("int8 (8-bit weights) through oneDNN's dnnl_gemm_u8s8s32", log)

    def test_compare_tool(self):
        """searchgate-encode --compare int8 --index: its cosines, identical top-k shares and recall@k,
        recomputed here with numpy from the tool's own embeddings (--precision fp32 / int8) and the Flat
        file; usage errors."""
        import numpy as np
        qs = ["topic %d" % i for i in range(7)] + ["row %d" % i for i in range(0, 40, 3)] + ["about topic %d row" % i for i in range(5)]
        qf = os.path.join(self.dir, "queries.jsonl")
        with open(qf, "w") as f:
            f.write("".join(json.dumps(q) + "\n" for q in qs) + "\n")
        enc = sgtest.binary("searchgate-encode")

        def run(*args, data=None):
            r = subprocess.run([enc, "--model", MODEL] + list(args), input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=sgtest.scaled(120))
            return r.returncode, r.stdout.decode(), r.stderr.decode()

        rc, out, err = run("--compare", "int8", "--queries", qf, "--index", self.index, "--json")
        self.assertEqual(rc, 0, err)
        got = json.loads(out)
        self.assertEqual(got["queries"], len(qs))
        text = "".join(json.dumps(q) + "\n" for q in qs).encode()
        emb = {}
        for p in ("fp32", "int8"):
            rc, out, err = run("--precision", p, data=text)
            self.assertEqual(rc, 0, err)
            emb[p] = np.array([json.loads(l) for l in out.splitlines()], dtype=np.float64)
        cos = np.sort((emb["fp32"] * emb["int8"]).sum(axis=1))
        self.assertAlmostEqual(got["cosine"]["min"], cos[0], places=5)
        self.assertAlmostEqual(got["cosine"]["mean"], cos.mean(), places=5)
        self.assertGreater(got["cosine"]["min"], 0.999)
        with open(self.index, "rb") as f:
            raw = f.read()
        d, n = struct.unpack("<iq", raw[4:16])
        x = np.frombuffer(raw[45:45 + 4 * n * d], dtype="<f4").reshape(n, d).astype(np.float64)

        def top(e):
            s = e @ x.T
            return [sorted(range(n), key=lambda i: (-round(row[i], 6), i))[:10] for row in s]

        a, b = top(emb["fp32"]), top(emb["int8"])
        for k in (1, 3, 10):
            same = sum(1 for u, v in zip(a, b) if u[:k] == v[:k]) / len(qs)
            rec = sum(len(set(u[:k]) & set(v[:k])) / k for u, v in zip(a, b)) / len(qs)
            self.assertLessEqual(abs(got["index"]["identical_top%d" % k] - same), 2.0 / len(qs), k)
            self.assertLessEqual(abs(got["index"]["recall@%d" % k] - rec), 2.0 / len(qs), k)
        # the text form, and usage errors
        rc, out, err = run("--compare", "int8", "--queries", qf, "--index", self.index)
        self.assertEqual(rc, 0, err)
        self.assertIn("cosine(float32, int8) per query: min", out)
        self.assertIn("identical top-k lists (same ids, same order):", out)
        self.assertEqual(run("--compare", "fp16", "--queries", qf)[0], 2)
        self.assertEqual(run("--compare", "int8")[0], 2)
        self.assertEqual(run("--index", self.index)[0], 2)
        rc, _, err = run("--compare", "int8", "--queries", os.path.join(self.dir, "none.jsonl"))
        self.assertEqual(rc, 1)
        self.assertIn("cannot open", err)

    def test_tokens_counted(self):
        """local_tokens_total counts the tokens the encoder computed; the CPU packs sequences, so
        nothing is padding, whatever the lengths in a batch."""
        gw = self.start({})
        try:
            qs = ["a", "a much longer question about topic 3 and row 12 and many other words of the corpus"]
            self.assertEqual(gw.retrieve(qs, topk=2).status, 200)
            r = subprocess.run([sgtest.binary("searchgate-encode"), "--model", MODEL, "--ids"],
                               input="".join(json.dumps(q) + "\n" for q in qs).encode(), stdout=subprocess.PIPE, check=True,
                               timeout=sgtest.scaled(60))
            want = sum(len(json.loads(line)) for line in r.stdout.decode().splitlines())
            self.assertEqual(gw.metric("searchgate_backend_local_tokens_total"), want)
            self.assertEqual(gw.metric("searchgate_backend_local_padded_tokens_total"), 0.0)
        finally:
            gw.stop()

    def test_flat_scan_kernel(self):
        """The flat scan's kernel follows the CPU's features (SG_CPU_FEATURES can hide them):
        AVX-512 in place with AVX-512 F+DQ, AVX2 in place with AVX2+FMA, sgemm otherwise; all
        answer the same ids."""
        fl = cpu_flags()
        native = ("avx512" if {"avx512f", "avx512dq", "avx2", "fma"} <= fl else
                  "avx2" if {"avx2", "fma"} <= fl else "sgemm")
        runs = [("native", {}, native), ("no-avx2", {"SG_CPU_FEATURES": "sse3,avx"}, "sgemm")]
        if native == "avx512":
            runs.append(("no-avx512", {"SG_CPU_FEATURES": "sse3,avx,fma,avx2"}, "avx2"))
        answers = {}
        for name, env, want in runs:
            gw = self.start(env)
            try:
                self.assertEqual(gw.metric("searchgate_backend_local_flat_scan_kernel", kernel=want), 1.0, name)
                r = gw.retrieve(["topic 3", "row 12", "about topic 5"], topk=3)
                self.assertEqual(r.status, 200)
                answers[name] = [[h["document"]["id"] for h in q] for q in r.json()["result"]]
            finally:
                log = gw.stop()
            self.assertIn("flat scan: " + {"avx512": "AVX-512 kernel in place", "avx2": "AVX2 kernel in place"}.get(
                want, "sgemm blocks"), log)
        for name in answers:
            self.assertEqual(answers[name], answers["native"], name)

    def test_precision_bad_value(self):
        gw = sgtest.Gateway({"backends": [{"name": "dense", "plugin": "local", "config": {
            "model": MODEL, "index": self.index, "corpus": self.corpus, "precision": "fp8"}}]}, expect_fail=True)
        self.assertEqual(gw.wait_exit(), 1)
        self.assertIn("config.precision", gw.read_log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
