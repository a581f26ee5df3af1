#!/usr/bin/python3
"""End-to-end /retrieve queries/s of the local backend on GPUs ("device": "cuda": e5-base-shaped
encoder in fp16, Flat IP index sharded over the GPUs in fp16) with cross-request batching,
against the same gateway with "device": "cpu" (the peer, measured in the same run; only up to
--cpu-rows vectors, as a CPU flat search over 10 M rows takes seconds per query).

Data, made once under --workdir: the e5-base-shaped random model (tests/bench/local/make_model.py),
a corpus of --rows short rows, a FAISS IndexFlatIP file of --rows random unit vectors written in
FAISS's own layout (docs/protocols.md, "Corpus and index files") by numpy in pieces (a 10 M x 768 file is 30.7 GB), and
distinct Search-R1-like questions. Load: wrk (tests/bench/local/post.lua) with many connections,
so the batcher gathers queries from concurrent requests; the gateway's result cache is off.

    /usr/bin/python3 bench_e2e.py --build BUILD_DIR [--workdir DIR] [--rows 1000000] [--seconds 20]
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
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
LOCAL_BENCH = os.path.join(ROOT, "tests", "bench", "local")
sys.path.insert(0, LOCAL_BENCH)
from bench import free_port, log, parse_ms, post, words, write_flat_index  # noqa: E402 -- shared with the CPU benchmark


def make_data(wd, rows, dim, model=None):
    os.makedirs(wd, exist_ok=True)
    model = model or os.path.join(wd, "e5-base-random")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run(["/usr/bin/python3", os.path.join(LOCAL_BENCH, "make_model.py"), model], check=True)
    vocab = words()
    corpus = os.path.join(wd, "corpus-%d.jsonl" % rows)
    if not os.path.exists(corpus):
        log("writing %s" % corpus)
        rnd = random.Random(7)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f:
            for i in range(rows):
                title = rnd.choice(vocab).capitalize()
                f.write('{"id": "%d", "contents": "\\"%s\\"\\n%s %s %s"}\n' % (i, title, title, rnd.choice(vocab), rnd.choice(vocab)))
        os.rename(corpus + ".tmp", corpus)
    index = os.path.join(wd, "e5_Flat-%d-%d.index" % (rows, dim))
    if not os.path.exists(index):
        log("writing %s (%.1f GB)" % (index, rows * dim * 4 / 1e9))
        write_flat_index(index, rows, dim)
    queries = os.path.join(wd, "queries.txt")
    if not os.path.exists(queries):
        rnd = random.Random(11)
        with open(queries, "w", encoding="utf-8") as f:
            for i in range(200000):
                f.write(json.dumps("%s %s of the %s %s in %s %d" % (rnd.choice(["who", "what", "when", "where", "how many"]),
                                                                  rnd.choice(vocab), rnd.choice(vocab), rnd.choice(vocab),
                                                                  rnd.choice(vocab), i)) + "\n")
    return model, corpus, index, queries


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for name in ("batches_total", "batch_queries_total", "encode_seconds_total", "search_seconds_total", "gpus"):
        m = re.search(r"^searchgate_backend_local_%s\{[^}]*\} (\S+)$" % name, text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


class Gateway:
    def __init__(self, build, wd, name, cfg, threads):
        self.port = free_port()
        path = os.path.join(wd, "gateway-%s.json" % name)
        with open(path, "w") as f:
            json.dump({"listen": {"host": "127.0.0.1", "port": self.port}, "threads": threads, "log_level": "info",
                       "backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False, "config": cfg}]}, f)
        self.logpath = os.path.join(wd, "gateway-%s.log" % name)
        self.logf = open(self.logpath, "wb")
        t0 = time.time()
        self.proc = subprocess.Popen([os.path.join(build, "searchgate"), "--config", path], stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited; see %s" % (name, self.logpath))
            try:
                post(self.port, {"queries": ["warm up"], "topk": 3})
                break
            except OSError:
                if time.time() - t0 > 1800:
                    raise RuntimeError("%s did not start" % name)
                time.sleep(0.05)
        self.startup = time.time() - t0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.logf.close()


def wrk(port, conns, per, seconds, queries, offset):
    env = dict(os.environ, SG_BENCH_QUERIES=queries, SG_BENCH_PER_REQUEST=str(per), SG_BENCH_OFFSET=str(offset))
    before = metrics(port)
    out = subprocess.run(["wrk", "-t4", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "600s", "--latency", "-s",
                          os.path.join(LOCAL_BENCH, "post.lua"), "http://127.0.0.1:%d/retrieve" % port],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True).stdout.decode()
    after = metrics(port)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    d = {k: after[k] - before[k] for k in after}
    batch = d["batch_queries_total"] / d["batches_total"] if d["batches_total"] else 0
    nq = d["batch_queries_total"] or 1
    return {"qps": rps * per, "p50": parse_ms(lat["50"]) if "50" in lat else -1, "p99": parse_ms(lat["99"]) if "99" in lat else -1,
            "non2xx": int(non2xx.group(1)) if non2xx else 0, "batch": batch,
            "enc_ms": 1000 * d["encode_seconds_total"] / nq, "search_ms": 1000 * d["search_seconds_total"] / nq}


POINTS = [("1 query/request, c=256", 256, 1), ("16 queries/request, c=64", 64, 16), ("64 queries/request, c=32", 32, 64)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--workdir", default="/tmp/sggpu-bench")
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--cpu-rows", type=int, default=2000000, help="run the CPU peer only up to this many vectors")
    ap.add_argument("--threads", type=int, default=4, help="gateway event-loop threads")
    ap.add_argument("--model", help="another model folder (its hidden size must be --dim)")
    ap.add_argument("--cuda-module", help="the CUDA module to load (default: beside sg_local.so)")
    a = ap.parse_args()
    model, corpus, index, queries = make_data(a.workdir, a.rows, a.dim, os.path.abspath(a.model) if a.model else None)
    base = {"model": model, "index": index, "corpus": corpus, "max_wait_ms": 2}
    gpu = dict(base, device="cuda", max_batch=512)
    if a.cuda_module:
        gpu["cuda_module"] = a.cuda_module
    runs = [("gpu", gpu)]
    if a.rows <= a.cpu_rows:
        runs.append(("cpu", dict(base, device="cpu", max_batch=64)))
    results = {}
    for name, cfg in runs:
        gw = Gateway(a.build, a.workdir, name, cfg, a.threads)
        try:
            log("%s: ready in %.1f s (%s)" % (name, gw.startup, gw.logpath))
            res = {}
            for i, (label, conns, per) in enumerate(POINTS):
                r = wrk(gw.port, conns, per, a.seconds, queries, i * 50000)
                res[label] = r
                print("%-4s %-26s %10.1f queries/s  p50 %8.1f ms  p99 %8.1f ms  mean batch %6.1f  encode %.3f + search %.3f "
                      "ms/query (summed over workers)  non-2xx %d" % (name, label, r["qps"], r["p50"], r["p99"], r["batch"],
                                                                     r["enc_ms"], r["search_ms"], r["non2xx"]), flush=True)
            results[name] = res
        finally:
            gw.stop()
    if "cpu" in results:
        for label, _, _ in POINTS:
            print("ratio GPU / CPU, %-26s %8.1fx" % (label, results["gpu"][label]["qps"] / max(results["cpu"][label]["qps"], 1e-9)))
    else:
        print("(no CPU peer: %d vectors is more than --cpu-rows %d)" % (a.rows, a.cpu_rows))
    best = max(r["qps"] for r in results["gpu"].values())
    print("end to end on %d vectors: best %.1f queries/s (target >= 10,000 on a 10 M index)" % (a.rows, best))


if __name__ == "__main__":
    main()
