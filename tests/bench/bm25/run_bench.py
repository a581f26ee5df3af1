#!/usr/bin/python3
"""Benchmark of the bm25 backend on the demo corpus (dict-gcide, ~126k passages), with the peer
measured in the same run and ratios printed at the end:

  1. index build: passages/s and peak RSS of searchgate-index-bm25 (3 runs, median; plus one run
     with a 4 MB memory budget to show the spill path), and of the peer's in-memory build;
  2. queries/s at concurrency 1 and 64, one query per POST /retrieve, topk 3, return_scores true,
     through the real gateway with its result cache off (every query is scored), and through the
     peer (tests/bench/bm25/peer_bm25.py: the Search-R1 server shape, FastAPI + uvicorn, BM25 in
     Python + numpy), with wrk;
  3. agreement of the top 3 between the two on a sample of the queries (a sanity check).

usage: /usr/bin/python3 tests/bench/bm25/run_bench.py [--build DIR] [--duration S] [--out FILE] [--no-peer] [--gateway BIN]
Needs .ci/deps.sh bench (wrk, python3-fastapi, python3-uvicorn, python3-numpy, python3-stemmer).
Not a CTest test: run it by hand on an otherwise idle machine."""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited with %s" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not open port %d" % port)


def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/retrieve" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def to_seconds(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    n = float(m.group(1))
    return n * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]


def wrk(port, conns, duration, bodies):
    threads = 1 if conns == 1 else 2
    cmd = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency", "--timeout", "30s",
           "-s", os.path.join(HERE, "bodies.lua"), "http://127.0.0.1:%d/retrieve" % port]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, SG_BENCH_BODIES=bodies),
                         check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    if "50" not in lat or "99" not in lat:
        raise RuntimeError("unexpected wrk output:\n" + out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    return {"qps": rps, "p50_ms": to_seconds(lat["50"]) * 1e3, "p99_ms": to_seconds(lat["99"]) * 1e3,
            "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errs.group(1) if errs else ""}


def make_queries(corpus, n, seed=7):
    """Questions a newcomer might type: 'what is a <headword>' and word mixes from passages."""
    rows = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line)["contents"])
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        c = rnd.choice(rows)
        title, _, text = c.partition("\n")
        if i % 2 == 0:
            out.append("what is a %s" % title.strip('"').lower())
        else:
            words = re.findall(r"[A-Za-z]{3,}", text)
            out.append(" ".join(rnd.sample(words, min(len(words), rnd.randint(2, 6)))) if words else title)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--gateway", default=None, help="searchgate binary (default BUILD/searchgate); plugins come from BUILD")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="sg-bm25-bench-")
    procs = []
    res = {"machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}}
    try:
        subprocess.run([os.path.join(build, "prepare-default")], check=True)
        corpus = os.path.join(build, "demo", "gcide.jsonl")
        tool = os.path.join(build, "searchgate-index-bm25")

        # 1. index build
        runs = []
        for i in range(3):
            out = subprocess.run([tool, corpus, os.path.join(tmp, "idx"), "--stats-json", "--quiet", "--no-progress"],
                                 capture_output=True, text=True, check=True).stdout
            runs.append(json.loads(out))
        spill = json.loads(subprocess.run([tool, corpus, os.path.join(tmp, "idx-spill"), "--memory-mb", "4", "--stats-json",
                                           "--quiet", "--no-progress"], capture_output=True, text=True, check=True).stdout)
        res["build"] = {"docs": runs[0]["docs"], "corpus_mb": runs[0]["corpus_bytes"] / 2**20,
                        "index_mb": runs[0]["index_bytes"] / 2**20, "terms": runs[0]["terms"],
                        "seconds": statistics.median(r["seconds"] for r in runs),
                        "docs_per_s": statistics.median(r["docs_per_s"] for r in runs),
                        "peak_rss_mb": max(r["peak_rss_kb"] for r in runs) / 1024,
                        "spill_runs": spill["runs"], "spill_docs_per_s": spill["docs_per_s"],
                        "spill_peak_rss_mb": spill["peak_rss_kb"] / 1024}

        # 2. queries
        queries = make_queries(corpus, 4000)
        bodies = os.path.join(tmp, "bodies.jsonl")
        with open(bodies, "w") as f:
            for q in queries:
                f.write(json.dumps({"queries": [q], "topk": 3, "return_scores": True}) + "\n")
        gw_port = free_port()
        cfg = {"listen": {"host": "127.0.0.1", "port": gw_port}, "threads": 0, "log_level": "warn",
               "plugin_dir": os.path.join(build, "plugins"),
               "backends": [{"name": "bm25", "plugin": "bm25", "topk": 3, "cache": False,
                             "config": {"index": os.path.join(tmp, "idx")}}]}
        cfg_path = os.path.join(tmp, "gateway.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        gw = subprocess.Popen([args.gateway or os.path.join(build, "searchgate"), "--config", cfg_path], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        procs.append(gw)
        wait_port(gw_port, gw)
        targets = [("searchgate", gw_port)]
        if not args.no_peer:
            peer_port = free_port()
            stats = os.path.join(tmp, "peer-build.json")
            peer = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "peer_bm25.py"), corpus, str(peer_port), stats],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(peer)
            wait_port(peer_port, peer)
            with open(stats) as f:
                res["peer_build"] = json.load(f)
            res["peer_build"]["peak_rss_mb"] = res["peer_build"].pop("peak_rss_kb") / 1024
            targets.append(("peer", peer_port))
        for name, port in targets:
            post(port, {"queries": queries[:50], "topk": 3})  # warm up
            res[name] = {"c1": wrk(port, 1, args.duration, bodies), "c64": wrk(port, 64, args.duration, bodies)}

        # 3. agreement of the top 3 on a sample
        if not args.no_peer:
            sample = queries[:200]
            a = post(gw_port, {"queries": sample, "topk": 3})["result"]
            b = post(targets[1][1], {"queries": sample, "topk": 3})["result"]
            same = sum(1 for x, y in zip(a, b) if [d["id"] for d in x] == [d["id"] for d in y])
            top1 = sum(1 for x, y in zip(a, b) if x[:1] and y[:1] and x[0]["id"] == y[0]["id"])
            res["agreement"] = {"queries": len(sample), "top3_identical": same, "top1_identical": top1}
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    b = res["build"]
    print("\n== bm25 benchmark (demo corpus: %d passages, %.1f MB of JSONL; index %.1f MB, %d terms) =="
          % (b["docs"], b["corpus_mb"], b["index_mb"], b["terms"]))
    print("index build   searchgate-index-bm25: %.2f s, %.0f passages/s, peak RSS %.1f MB"
          % (b["seconds"], b["docs_per_s"], b["peak_rss_mb"]))
    print("              with --memory-mb 4: %d runs spilled, %.0f passages/s, peak RSS %.1f MB"
          % (b["spill_runs"], b["spill_docs_per_s"], b["spill_peak_rss_mb"]))
    if "peer_build" in res:
        p = res["peer_build"]
        print("              peer (Python + numpy):  %.2f s, %.0f passages/s, peak RSS %.1f MB" %
              (p["seconds"], p["docs_per_s"], p["peak_rss_mb"]))
        print("              ratio: %.1fx passages/s, %.2fx peak RSS" %
              (b["docs_per_s"] / p["docs_per_s"], b["peak_rss_mb"] / p["peak_rss_mb"]))
    for name in ("searchgate", "peer"):
        if name in res:
            for c in ("c1", "c64"):
                r = res[name][c]
                print("queries %-10s concurrency %-3s %8.0f q/s  p50 %7.2f ms  p99 %7.2f ms  non-2xx %d %s"
                      % (name, c[1:], r["qps"], r["p50_ms"], r["p99_ms"], r["non2xx"], r["socket_errors"]))
    if "peer" in res:
        for c in ("c1", "c64"):
            print("ratio searchgate/peer at concurrency %s: %.1fx queries/s, %.2fx p50 latency"
                  % (c[1:], res["searchgate"][c]["qps"] / res["peer"][c]["qps"],
                     res["searchgate"][c]["p50_ms"] / res["peer"][c]["p50_ms"]))
        a = res["agreement"]
        print("top-3 identical to the peer on %d/%d queries (top-1 on %d)" % (a["top3_identical"], a["queries"],
                                                                              a["top1_identical"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
