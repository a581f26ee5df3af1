#!/usr/bin/python3
"""Local dense backend vs the Search-R1 reference server, measured in one run on one machine.

Data (made once under --workdir, reused later): an e5-base-shaped BERT with random weights
(make_model.py), a 100k-row wiki-18 style corpus of random vocabulary words, a Flat IP FAISS index
of 100k random unit vectors (building it with the 110M-parameter encoder would take hours on 2
cores; both servers load the very same file, so the search work is the same), and a list of
distinct synthetic questions.

First the machine's bounds (bench_bounds.c): the encoder's matrix products on all cores, at one
query's tokens and at 32 queries', and memory bandwidth, with the kernels OpenBLAS picks and with
the best kernels for the CPU's features forced (OPENBLAS_CORETYPE). Then, for searchgate at its
default start, searchgate with the best kernels forced, and the reference server with the best
kernels forced (as a user tuning it would): start-up time (process start to the first answered
/retrieve; for searchgate also the first start that builds the corpus offsets), then wrk load:
one-query requests at concurrency 1, 16 and 64, 32-query requests at concurrency 4 and 512-query
requests at concurrency 2; queries/s and p50/p99 latency. Each row is printed as a fraction of
its bound (queries/s the measured FLOP rate and bandwidth allow at the row's mean batch; for c=1,
p50 over the floor: one query's FLOPs on all cores plus one scan of the index). Then identical
top-k: the same 256 queries (topk 10) sent to both servers, ids compared. The result cache of the
gateway is off for the benchmark so every query reaches the backend.

The bound of a row is what the machine's best float32 products allow (the faster of OpenBLAS and
the encoder's own kernels, both measured by bench_bounds.c); int8 rows are printed against it and
against the int8 products' own bound. --baseline BUILD adds the same rows for another build (the
code before a change, run back to back on the same machine); --int8 adds "precision": "int8" and the
share of 1,000 queries whose top-3 list is identical to float32's.

    /usr/bin/python3 bench.py --build BUILD_DIR [--workdir DIR] [--seconds 20] [--rows 100000] [--bf16] [--int8]
                              [--baseline OTHER_BUILD_DIR] [--skip-ref] [--compare] [--out FILE.json]
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_VOCAB = os.path.join(HERE, "..", "..", "fixtures", "e5-tiny", "vocab.txt")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def words():
    out = []
    with open(FIXTURE_VOCAB, encoding="utf-8") as f:
        for w in f.read().split("\n"):
            if len(w) >= 3 and w.isascii() and w.isalpha():
                out.append(w)
    return out


def write_flat_index(path, rows, dim, seed=3):
    """An IndexFlatIP of `rows` random unit vectors in FAISS's file layout (fourcc, d, ntotal, two
    dummies, is_trained, metric 0, n_floats, data), written by numpy in pieces."""
    import struct
    import numpy as np
    rng = np.random.default_rng(seed)
    with open(path + ".tmp", "wb") as f:
        f.write(b"IxFI" + struct.pack("<iqqq?iQ", dim, rows, 1 << 20, 1 << 20, True, 0, rows * dim))
        step = 250000
        for s in range(0, rows, step):
            x = rng.standard_normal((min(step, rows - s), dim), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            f.write(x.astype("<f4").tobytes())
    os.rename(path + ".tmp", path)


def make_data(wd, rows, dim):
    os.makedirs(wd, exist_ok=True)
    model = os.path.join(wd, "e5-base-random")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_model.py"), model], check=True)
    vocab = words()
    corpus = os.path.join(wd, "wiki-18-%d.jsonl" % rows)
    if not os.path.exists(corpus):
        log("writing %s" % corpus)
        rnd = random.Random(7)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f:
            for i in range(rows):
                title = " ".join(rnd.choice(vocab).capitalize() for _ in range(rnd.randint(1, 3)))
                body = " ".join(rnd.choice(vocab) for _ in range(100))
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s %s" % (title, title, body)}) + "\n")
        os.rename(corpus + ".tmp", corpus)
    index = os.path.join(wd, "e5_Flat-%d.index" % rows)
    if not os.path.exists(index):
        log("writing %s" % index)
        write_flat_index(index, rows, dim)
    queries = os.path.join(wd, "queries.txt")
    if not os.path.exists(queries):
        make_queries(queries)
    return model, corpus, index, queries


def make_queries(path, n=60000):
    """`n` distinct synthetic questions, one JSON string a line."""
    vocab = words()
    rnd = random.Random(11)
    forms = ["what is the %s of %s", "who %s the %s", "when did %s %s", "where is %s %s", "how many %s in %s",
             "%s %s definition", "why does %s %s"]
    seen = set()
    with open(path + ".tmp", "w") as f:
        while len(seen) < n:
            q = rnd.choice(forms) % (rnd.choice(vocab), " ".join(rnd.choice(vocab) for _ in range(rnd.randint(1, 3))))
            if q not in seen:
                seen.add(q)
                f.write(json.dumps(q) + "\n")
    os.rename(path + ".tmp", path)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    return m.group(1) if m else "?"


def post(port, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d/retrieve" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    def __init__(self, name, argv, port, env=None, logpath=None):
        self.name, self.port = name, port
        self.logf = open(logpath, "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.t0 = time.time()
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        self.startup = None
        deadline = self.t0 + 900
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited during start-up; see %s" % (name, logpath))
            try:
                post(port, {"queries": ["warm up"], "topk": 3, "return_scores": True}, timeout=120)
                self.startup = time.time() - self.t0
                break
            except OSError:
                time.sleep(0.01)
        if self.startup is None:
            self.stop()
            raise RuntimeError("%s did not start" % name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def parse_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    v, u = float(m.group(1)), m.group(2)
    return v * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[u]


def wrk(port, conns, per, seconds, queries, offset):
    env = dict(os.environ, SG_BENCH_QUERIES=queries, SG_BENCH_PER_REQUEST=str(per), SG_BENCH_OFFSET=str(offset))
    out = subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "600s", "--latency", "-s",
                          os.path.join(HERE, "post.lua"), "http://127.0.0.1:%d/retrieve" % port],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True).stdout.decode()
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    dur = re.search(r"requests in ([\d.]+\w+),", out).group(1)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"requests": reqs, "duration": dur, "qps": rps * per, "p50_ms": parse_ms(lat["50"]) if "50" in lat else None,
            "p99_ms": parse_ms(lat["99"]) if "99" in lat else None, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(1) if errors else ""}


POINTS = [("1 query/request, c=1", 1, 1), ("1 query/request, c=16", 16, 1), ("1 query/request, c=64", 64, 1),
          ("32 queries/request, c=4", 4, 32), ("512 queries/request, c=2", 2, 512)]


def metrics(port):
    """searchgate's local backend counters (None for the reference, which has no /metrics)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for name in ("batches_total", "batch_queries_total", "encode_seconds_total", "search_seconds_total", "tokens_total",
                 "team_helper_seconds_total", "workers"):
        m = re.search(r"^searchgate_backend_local_%s\{[^}]*\} (\S+)$" % name, text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    for step, v in re.findall(r'^searchgate_backend_local_encode_step_seconds_total\{[^}]*step="(\w+)"[^}]*\} (\S+)$', text, re.M):
        out["step_" + step] = float(v)
    return out


STEPS = ("tokenize", "embed", "qkv", "attention", "o", "inter", "out", "pool")


def breakdown(d, wall):
    """Where a row's time went (from the local backend's counters): the share of the cores' time that
    was busy (the batches' wall time on the workers leading them, plus the time helpers spent in
    tasks, over the row's wall time x workers), and each batch's mean milliseconds per step (on the
    leading worker: a step split over a team lasts until its last task returns), FAISS included."""
    b = d["batches_total"]
    if b <= 0 or not d.get("workers"):
        return ""
    busy = (d["encode_seconds_total"] + d["search_seconds_total"] + d["team_helper_seconds_total"]) / (wall * d["workers"])
    steps = " ".join("%s %.2f" % (st, 1000 * d.get("step_" + st, 0.0) / b) for st in STEPS)
    return "cores busy %.0f%%; per batch ms: %s, search %.2f" % (100 * busy, steps, 1000 * d["search_seconds_total"] / b)


def run_points(srv, seconds, queries, offset0):
    res = {}
    last_qps = None
    for i, (label, conns, per) in enumerate(POINTS):
        before = metrics(srv.port)
        dur = seconds * (2 if per > 1 else 1)
        if per > 32 and last_qps:  # long requests: long enough for each connection to finish ~4 of them
            dur = max(dur, int(4.0 * per * conns / last_qps) + 1)
        r = wrk(srv.port, conns, per, dur, queries, offset0 + i * 10000)
        last_qps = r["qps"] or last_qps
        after = metrics(srv.port)
        extra = ""
        if before is not None and after is not None:
            d = {k: after[k] - before[k] for k in after}
            if d["batches_total"] > 0:
                r["mean_batch"] = d["batch_queries_total"] / d["batches_total"]
                r["encode_ms_per_query"] = 1000 * d["encode_seconds_total"] / d["batch_queries_total"]
                r["search_ms_per_query"] = 1000 * d["search_seconds_total"] / d["batch_queries_total"]
                r["encode_seconds"] = d["encode_seconds_total"]
                r["queries_encoded"] = d["batch_queries_total"]
                r["tokens"] = d["tokens_total"]  # 0 from a build without the counter
                extra = "; mean batch %.1f, encode %.1f + FAISS %.1f ms/query" % (
                    r["mean_batch"], r["encode_ms_per_query"], r["search_ms_per_query"])
                wall = float(str(r.get("duration", "0")).rstrip("s") or 0) or float(dur)
                d["workers"] = after["workers"]  # a gauge
                r["breakdown"] = breakdown(d, wall)
        log("  %-26s %8.1f q/s  p50 %8.1f ms  p99 %8.1f ms  (%d requests, non-2xx %d%s%s)" % (
            label, r["qps"], r["p50_ms"] or -1, r["p99_ms"] or -1, r["requests"], r["non2xx"],
            ", socket errors " + r["socket_errors"] if r["socket_errors"] else "", extra))
        if r.get("breakdown"):
            log("  %-26s %s" % ("", r["breakdown"]))
        res[label] = r
    return res


def topk_ids(port, qs, k):
    ids, scores = [], []
    for s in range(0, len(qs), 16):
        for lst in post(port, {"queries": qs[s:s + 16], "topk": k, "return_scores": True})["result"]:
            ids.append([it["document"]["id"] for it in lst])
            scores.append([it["score"] for it in lst])
    return ids, scores


def cpu_best_core():
    """The OpenBLAS core blas.c picks for this CPU's features (a user forcing the best kernels)."""
    with open("/proc/cpuinfo") as f:
        info = f.read()
    flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split())
    amd = "AuthenticAMD" in info or "HygonGenuine" in info
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= flags:
        return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if amd else "Haswell"
    return "Sandybridge" if "avx" in flags else None


def bounds(build, model, queries, env, seconds):
    out = subprocess.run([os.path.join(build, "tests", "local", "bench", "local_bench_bounds"), model, queries, "--tokens",
                          "x1,x32", "--seconds", str(seconds)], env=env, stdout=subprocess.PIPE, check=True).stdout
    return json.loads(out)


def best_rate(b, which):
    """The faster float32 products for `which` (e.g. "allcores_x32"): OpenBLAS's or the own kernels'."""
    return max(b["gflops_" + which], b.get("own_gflops_" + which, 0.0))


def bound_qps(b, rows, dim, batch, int8=False):
    """Queries/s the machine allows at a mean batch of `batch` queries, every core busy: the encoder's
    FLOPs at the batch products' measured rate (the best float32 products, or the int8 ones), plus the
    larger of the flat scan's FLOPs and its bytes (the index read once per batch) at the measured
    bandwidth."""
    f_enc = (b["int8_gops_allcores_x32"] if int8 else best_rate(b, "allcores_x32")) * 1e9
    enc = b["encoder_flops_per_query"] / f_enc
    search = max(2.0 * rows * dim / f_enc, rows * dim * 4.0 / (max(batch, 1.0) * b["bandwidth_gbs"] * 1e9))
    return 1.0 / (enc + search)


def floor_ms(b, rows, dim):
    """A lone query on every core: its encoder FLOPs at the one-query products' all-core rate, plus
    one scan of the index at the measured bandwidth (or its FLOPs, if slower)."""
    f1 = best_rate(b, "allcores_x1") * 1e9
    return 1000.0 * (b["encoder_flops_per_query"] / f1 + max(rows * dim * 4.0 / (b["bandwidth_gbs"] * 1e9),
                                                           2.0 * rows * dim / f1))


def run_gateway(build, wd, model, index, corpus, queries, seconds, name, env=None, extra=None, cold=False, points=True):
    port = free_port()
    cfg = {"listen": {"host": "127.0.0.1", "port": port}, "threads": 1, "log_level": "info",
           "plugin_dir": os.path.join(build, "plugins"),
           "backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False,
                         "config": dict({"model": model, "index": index, "corpus": corpus}, **(extra or {}))}]}
    cfg_path = os.path.join(wd, "searchgate-%s.json" % name)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    argv = [os.path.join(build, "searchgate"), "--config", cfg_path]
    res = {}
    if cold:
        side = corpus + ".sgrows"
        if os.path.exists(side):
            os.unlink(side)
        log("searchgate (%s): first start (builds the corpus offsets)" % name)
        g = Server("searchgate", argv, port, env=env, logpath=os.path.join(wd, "searchgate-%s-cold.log" % name))
        res["startup_first_s"] = g.startup
        g.stop()
    g = Server("searchgate", argv, port, env=env, logpath=os.path.join(wd, "searchgate-%s.log" % name))
    with open(os.path.join(wd, "searchgate-%s.log" % name)) as f:
        text = f.read()
    m = re.search(r"BLAS: (.*)", text)
    res["blas"] = m.group(1) if m else "?"
    m = re.search(r"(encoder_blas .*|precision int8: .*)", text)
    res["encoder_blas"] = m.group(1) if m else "OpenBLAS"
    log("searchgate (%s): start-up %.2f s; %s" % (name, g.startup, res["blas"]))
    res["startup_s"] = g.startup
    if points:
        res["points"] = run_points(g, seconds, queries, 0)
    return g, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--workdir", default="/tmp/sglocal-bench")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--skip-ref", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="also run \"precision\": \"bf16\" (needs AVX512_BF16/AMX)")
    ap.add_argument("--compare", action="store_true",
                    help="also run \"teams\": false and \"encoder_blas\": \"openblas\"/\"onednn\" (the choices the defaults make)")
    ap.add_argument("--int8", action="store_true", help="also run \"precision\": \"int8\", with the top-3 agreement on 1,000 queries")
    ap.add_argument("--int8-blas", default="auto",
                    help="comma-separated encoder_blas values to run int8 with (default auto; e.g. auto,own on an AMX CPU)")
    ap.add_argument("--baseline", help="another build (the code before a change): its default start, run in the same session")
    ap.add_argument("--points", help="comma-separated rows to run, 0-4 (default: all): 0 = c=1, 1 = c=16, 2 = c=64, "
                                     "3 = 32-query requests, 4 = 512-query requests")
    ap.add_argument("--env-variant", action="append", default=[], metavar="NAME:K=V[,K=V]",
                    help="also run this build with these environment variables set (repeatable; a key cfg.KEY sets the backend's "
                         "config key KEY instead), printed against the default")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    if a.points:
        global POINTS
        POINTS = [POINTS[int(i)] for i in a.points.split(",")]
    build = os.path.abspath(a.build)
    dim = 768
    model, corpus, index, queries = make_data(a.workdir, a.rows, dim)
    with open(queries) as f:
        qlist = [json.loads(line) for line in f]
    results = {"machine": {"nproc": os.cpu_count(), "loadavg_before": os.getloadavg()[0]}}
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        results["machine"]["cpu"] = m.group(1) if m else "?"
    best = cpu_best_core()
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "SG_CPU_FEATURES") and
             not k.startswith("SG_BLAS")}
    forced = dict(clean, OPENBLAS_CORETYPE=best) if best else dict(clean)

    # ---- the machine's bounds, with the kernels OpenBLAS picks and with the best ones ----
    log("bounds: matrix products and memory bandwidth (the gateway's kernel choice, then %s forced)" % best)
    b_def = bounds(build, model, queries, clean, 3)
    b_best = b_def if b_def["core"] == best else bounds(build, model, queries, forced, 3)  # the same kernels: measured once
    results["bounds"] = {"default": b_def, "forced": b_best}
    log("  default %s: %.1f GFLOP/s (one query's products, all cores), %.1f (32 queries'), %.1f GB/s; forced %s: %.1f, %.1f"
        % (b_def["core"], b_def["gflops_allcores_x1"], b_def["gflops_allcores_x32"], b_def["bandwidth_gbs"], b_best["core"],
           b_best["gflops_allcores_x1"], b_best["gflops_allcores_x32"]))

    # ---- searchgate at its default start, then with the best kernels forced ----
    g, results["searchgate"] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, "default", clean,
                                           cold=True)
    sample = qlist[50000:50256]
    gw_ids, gw_scores = topk_ids(g.port, sample, 10)
    g.stop()
    same_kernels = b_def["core"] == b_best["core"]
    if same_kernels:
        log("searchgate (forced %s): OpenBLAS already picks %s here; the default run stands for both" % (best, b_def["core"]))
        results["searchgate_forced"] = results["searchgate"]
    else:
        g, results["searchgate_forced"] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, "forced",
                                                      forced)
        g.stop()
    variants = []
    if a.compare:
        variants = [("teams off", "noteams", {"teams": False}), ("encoder OpenBLAS", "openblas", {"encoder_blas": "openblas"}),
                    ("encoder oneDNN", "onednn", {"encoder_blas": "onednn"})]
        for label, name, extra in variants:
            g, results["searchgate_" + name] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, name, clean,
                                                           extra=extra)
            g.stop()
    env_variants = []
    for spec in a.env_variant:
        name, _, kvs = spec.partition(":")
        pairs = [kv.split("=", 1) for kv in kvs.split(",") if kv]
        env = dict(clean, **{k: v for k, v in pairs if not k.startswith("cfg.")})
        extra = {k[4:]: json.loads(v) if v[:1] in "0123456789tfn[{" else v for k, v in pairs if k.startswith("cfg.")}
        g, results["searchgate_env_" + name] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, name, env,
                                                           extra=extra)
        g.stop()
        env_variants.append((name, kvs))
    if a.baseline:
        g, results["searchgate_baseline"] = run_gateway(os.path.abspath(a.baseline), a.workdir, model, index, corpus, queries,
                                                        a.seconds, "baseline", clean)
        g.stop()
    sample1k = qlist[50000:51000]
    if a.int8:
        g, _ = run_gateway(build, a.workdir, model, index, corpus, queries, 0, "fp32-top3", clean, points=False)
        fp_ids, _ = topk_ids(g.port, sample1k, 3)
        g.stop()
        for i, eng in enumerate(a.int8_blas.split(",")):
            key = "searchgate_int8" + ("" if i == 0 else "_" + eng)
            g, results[key] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, "int8-" + eng, clean,
                                          extra={"precision": "int8", "encoder_blas": eng})
            q_ids, _ = topk_ids(g.port, sample1k, 3)
            g.stop()
            results[key.replace("searchgate_", "") + "_top3_agreement"] = (
                sum(1 for x, y in zip(q_ids, fp_ids) if x == y) / len(sample1k))
    if a.bf16:
        g, results["searchgate_bf16"] = run_gateway(build, a.workdir, model, index, corpus, queries, a.seconds, "bf16", clean,
                                                    extra={"precision": "bf16"})
        bf_ids, _ = topk_ids(g.port, sample, 3)
        g.stop()
        results["bf16_top3_agreement"] = sum(1 for x, y in zip(bf_ids, gw_ids) if x == y[:3]) / len(sample)

    # ---- the Search-R1 style reference, with the best kernels forced ----
    if not a.skip_ref:
        ref_port = free_port()
        argv = ["/usr/bin/python3", os.path.join(HERE, "ref_server.py"), "--model", model, "--index", index, "--corpus",
                corpus, "--port", str(ref_port)]
        log("reference: starting (OPENBLAS_CORETYPE=%s)" % best)
        r = Server("reference", argv, ref_port, env=forced, logpath=os.path.join(a.workdir, "reference.log"))
        log("reference: start-up %.2f s" % r.startup)
        results["reference"] = {"startup_s": r.startup, "points": run_points(r, a.seconds, queries, 0)}
        ref_ids, ref_scores = topk_ids(ref_port, sample, 10)
        r.stop()
        same = sum(1 for x, y in zip(gw_ids, ref_ids) if x == y)
        same_set = sum(1 for x, y in zip(gw_ids, ref_ids) if set(x) == set(y))
        dmax = max(abs(s1 - s2) for a1, b1 in zip(gw_scores, ref_scores) for s1, s2 in zip(a1, b1))
        results["topk_check"] = {"queries": len(sample), "k": 10, "identical_lists": same, "identical_sets": same_set,
                                 "max_abs_score_diff": dmax}

    # ---- report ----
    print("\nlocal dense backend, %d-row Flat IP index, e5-base-shaped random model (%.1f tokens/query), one run on %s, %d CPUs"
          % (a.rows, b_def["mean_tokens"], results["machine"]["cpu"], results["machine"]["nproc"]))
    print("BLAS: default start: %s; encoder products: %s" % (results["searchgate"]["blas"], results["searchgate"]["encoder_blas"]))
    print("bounds: one query's products %.1f GFLOP/s, 32 queries' %.1f GFLOP/s (all cores; OpenBLAS %s kernels %.1f / %.1f, own "
          "%s kernels %.1f / %.1f); memory %.1f GB/s"
          % (best_rate(b_def, "allcores_x1"), best_rate(b_def, "allcores_x32"), b_def["core"], b_def["gflops_allcores_x1"],
             b_def["gflops_allcores_x32"], b_def.get("own_kernel", "-"), b_def.get("own_gflops_allcores_x1", 0),
             b_def.get("own_gflops_allcores_x32", 0), b_def["bandwidth_gbs"]))
    hdr = "%-26s %22s %9s %22s %8s" % ("", "default q/s (p50/p99)", "of bound", "forced-best q/s", "def/best")
    if "reference" in results:
        hdr += " %22s %8s" % ("reference q/s (p50)", "vs ref")
    print(hdr)

    def ms(v):
        return "%5.0f" % v if v is not None else "    ?"

    for label, conns, per in POINTS:
        x = results["searchgate"]["points"][label]
        y = results["searchgate_forced"]["points"][label]
        if conns == 1 and per == 1:
            fl = floor_ms(b_def, a.rows, dim)
            frac = "%5.2fx fl" % (x["p50_ms"] / fl) if x["p50_ms"] else "?"
        else:
            bq = bound_qps(b_def, a.rows, dim, x.get("mean_batch", 1.0))
            frac = "%7.0f%%" % (100.0 * x["qps"] / bq)
        line = "%-26s %9.1f (%s/%s) %9s %13.1f (%s) %7.2f" % (label, x["qps"], ms(x["p50_ms"]), ms(x["p99_ms"]), frac, y["qps"],
                                                              ms(y["p50_ms"]), x["qps"] / y["qps"] if y["qps"] else 0)
        if "reference" in results:
            z = results["reference"]["points"][label]
            line += " %14.1f (%s) %7.1fx" % (z["qps"], ms(z["p50_ms"]), x["qps"] / z["qps"] if z["qps"] else 0)
        print(line)
    print("c=1 floor: %.1f ms (encoder %.2f GFLOP at %.1f GFLOP/s + one %.0f MB scan at %.1f GB/s); fl = p50 / floor"
          % (floor_ms(b_def, a.rows, dim), b_def["encoder_flops_per_query"] / 1e9, best_rate(b_def, "allcores_x1"),
             a.rows * dim * 4 / 1e6, b_def["bandwidth_gbs"]))
    print("start-up: searchgate %.2f s (first start, building offsets: %.2f s)%s" % (
        results["searchgate"]["startup_s"], results["searchgate"]["startup_first_s"],
        ", reference %.2f s" % results["reference"]["startup_s"] if "reference" in results else ""))
    if "topk_check" in results:
        t = results["topk_check"]
        print("top-10 ids identical for %d of %d queries (same sets: %d); max |score difference| %.2g" % (
            t["identical_lists"], t["queries"], t["identical_sets"], t["max_abs_score_diff"]))
    for label, name, _ in variants:
        v = results["searchgate_" + name]["points"]
        print("%s: " % label + ", ".join("%s %.1f q/s (%.2fx default)" % (l, v[l]["qps"], v[l]["qps"] / max(
            results["searchgate"]["points"][l]["qps"], 1e-9)) for l, _, _ in POINTS))
    def of_bound(x, conns, per):
        """A row against its bound: c=1's p50 over the floor, a loaded row's q/s over the fp32 bound."""
        if conns == 1 and per == 1:
            return "%.2fx floor" % (x["p50_ms"] / floor_ms(b_def, a.rows, dim)) if x["p50_ms"] else "?"
        return "%.0f%% of fp32 bound" % (100.0 * x["qps"] / bound_qps(b_def, a.rows, dim, x.get("mean_batch", 1.0)))

    for name, kvs in env_variants:
        v = results["searchgate_env_" + name]["points"]
        cells = []
        for l, conns, per in POINTS:
            frac = of_bound(v[l], conns, per)
            cells.append("%s %.1f q/s (%s, %.2fx default)" % (l, v[l]["qps"], frac, v[l]["qps"] / max(
                results["searchgate"]["points"][l]["qps"], 1e-9)))
        print("%s (%s): %s" % (name, kvs, "; ".join(cells)))
    if a.bf16:
        bf = results["searchgate_bf16"]["points"]
        print("bf16: " + ", ".join("%s %.1f q/s (%.2fx fp32)" % (l, bf[l]["qps"], bf[l]["qps"] / results["searchgate"]["points"][l]["qps"])
                                   for l, _, _ in POINTS) + "; top-3 lists equal to fp32 for %.1f%% of %d queries"
              % (100 * results["bf16_top3_agreement"], len(sample)))
    def per_core(res):
        """Encoder G(FL)OP/s in the 32-query row (full batches): per batch (its FLOPs over its encode wall
        time; a batch runs on its worker and the idle workers that help it) and per core of the machine
        (the run's encoder FLOPs over wall time x cores: what the whole machine turned into encoder work)."""
        p = res["points"].get("32 queries/request, c=4", {})
        if not p.get("encode_seconds"):
            return None
        tokens = p["tokens"] or p["queries_encoded"] * b_def["mean_tokens"]
        flops = tokens * b_def["encoder_flops_per_query"] / b_def["mean_tokens"]
        wall = float(str(p.get("duration", "0")).rstrip("s") or 0)
        machine = flops / (wall * (os.cpu_count() or 1)) / 1e9 if wall > 0 else 0.0
        return flops / p["encode_seconds"] / 1e9, machine

    rows = [("after (this build)", results["searchgate"], False)]
    if "searchgate_baseline" in results:
        rows.insert(0, ("before (%s)" % a.baseline, results["searchgate_baseline"], False))
    for key in [k for k in results if k.startswith("searchgate_int8")]:
        eng = key[len("searchgate_int8_"):] or a.int8_blas.split(",")[0]
        rows.append(("int8-%s (this build, encoder_blas %s)" % (eng, eng), results[key], True))
    if len(rows) > 1:
        print("\nback to back, same bounds (fp32: %.1f GFLOP/s at one query's products, %.1f at 32 queries', best of OpenBLAS "
              "and the own kernels; int8: %.1f / %.1f GOP/s):" % (best_rate(b_def, "allcores_x1"), best_rate(b_def, "allcores_x32"),
                                                                  b_def["int8_gops_allcores_x1"], b_def["int8_gops_allcores_x32"]))
        for label, conns, per in POINTS:
            cells = []
            for name, res, int8 in rows:
                x = res["points"][label]
                frac = of_bound(x, conns, per)
                if int8 and not (conns == 1 and per == 1):
                    frac += ", %.0f%% of int8 bound" % (
                        100.0 * x["qps"] / bound_qps(b_def, a.rows, dim, x.get("mean_batch", 1.0), int8=True))
                cells.append("%s %.1f q/s (%s)" % (name.split(" ")[0], x["qps"], frac))
            after = results["searchgate"]["points"][label]["qps"]
            ratio = ", ".join("%s/after %.2fx" % (n.split(" ")[0], r["points"][label]["qps"] / max(after, 1e-9))
                              for n, r, _ in rows if r is not results["searchgate"])
            print("  %-26s %s; %s" % (label, "; ".join(cells), ratio))
        for name, res, _ in rows:
            pc = per_core(res)
            if pc is not None:
                print("  encoder in full batches (32-query row), %s: %.1f G(FL)OP/s per batch, %.1f per core of the machine"
                      % (name, pc[0], pc[1]))
        print("  bare products per core at 32 queries' tokens: OpenBLAS %.1f, own float32 %.1f GFLOP/s, int8 %.1f GOP/s "
              "(oneDNN's: run_bench.sh's bench_blas_libs lines)" % (b_def["gflops_1core_x32"], b_def.get("own_gflops_1core_x32", 0),
                                                                      b_def["int8_gops_1core_x32"]))
    for key in [k for k in results if k.startswith("int8") and k.endswith("_top3_agreement")]:
        print("%s: top-3 lists identical to float32's for %.1f%% of %d queries" % (key[:-len("_top3_agreement")],
                                                                                  100 * results[key], len(sample1k)))
    print("machine load average before the run %.2f" % results["machine"]["loadavg_before"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
