"""Fusion latency overhead over the slower leg (docs/fusion.md, "Cost").

Starts one gateway with a BM25 route, a second route standing in for a dense retriever (the example
plugin with a fixed delay, like an encoder + index search), and an RRF fusion of the two. For each
query it times /retrieve on each leg and on the fusion, one request at a time over a keep-alive
connection (each leg asked for the depth the fusion asks of it), and reports p50/p99 of each and
the ratio fusion / max(leg A, leg B) per query.

Two modes: "cold" (the legs' caches off: every request runs both plugins) and "warm" (legs cached,
every query asked once before timing: the fusion is then pure fan-out + merge).

Usage: bench_fusion.py [--build build] [--index DIR] [--queries 300] [--topk 5] [--delay-ms 2]
  --index: an existing BM25 index (e.g. build/demo/bm25); without it one is built over a random
  20,000-passage corpus. Take timings on a quiet machine: nothing else building or testing.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "build"))
ap.add_argument("--index", default=None)
ap.add_argument("--queries", type=int, default=300)
ap.add_argument("--topk", type=int, default=5)
ap.add_argument("--batch", type=int, default=1, help="queries per request")
ap.add_argument("--delay-ms", type=int, default=2, help="the simulated dense leg's latency")
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()
build = os.path.abspath(a.build)
rng = random.Random(a.seed)
WORDS = ("volcano lava crater eruption mountain river lake city capital france paris tokyo japan bridge roman empire "
         "science music history war peace king queen island ocean ship star planet moon forest bird theory light "
         "dark sea sailor sun tree fish music art painting poem novel author physics chemistry biology").split()
tmp = tempfile.mkdtemp(prefix="sgbench-fusion-")
procs = []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)


try:
    index = a.index
    docs = [{"id": str(i), "contents": '"%s"\n%s' % (" ".join(rng.choice(WORDS) for _ in range(2)),
                                                     " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))))}
            for i in range(20000 if index is None else 2000)]
    if index is None:
        path = os.path.join(tmp, "corpus.jsonl")
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        index = os.path.join(tmp, "bm25")
        subprocess.run([os.path.join(build, "searchgate-index-bm25"), path, index, "--no-progress", "--quiet"], check=True)

    def config(cache):
        return {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 2, "log_level": "warn",
                "backends": [
                    {"name": "bm25", "plugin": "bm25", "cache": cache, "config": {"index": os.path.abspath(index)}},
                    {"name": "dense", "plugin": "example", "cache": cache,
                     "config": {"documents": docs[:2000], "delay_ms": a.delay_ms, "workers": 2}},
                    {"name": "hybrid", "fusion": {"routes": ["bm25", "dense"], "method": "rrf", "k": 60}}]}

    def start(cache):
        cpath = os.path.join(tmp, "gw-%s.json" % cache)
        with open(cpath, "w") as f:
            json.dump(config(cache), f)
        log = open(os.path.join(tmp, "gw-%s.log" % cache), "wb+")
        p = subprocess.Popen([os.path.join(build, "searchgate"), "--config", cpath, "--log-level", "info"], stdout=log,
                             stderr=subprocess.STDOUT)
        procs.append(p)
        deadline = time.time() + 60
        while time.time() < deadline:
            log.seek(0)
            m = re.search(rb"listening on http://[^:]+:(\d+)", log.read())
            if m:
                return p, int(m.group(1))
            if p.poll() is not None:
                break
            time.sleep(0.05)
        log.seek(0)
        sys.exit("searchgate did not start:\n" + log.read().decode(errors="replace"))

    def timed(conn, path, queries, topk):
        body = json.dumps({"queries": queries, "topk": topk, "return_scores": True})
        t0 = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t0
        if r.status != 200 or r.getheader("X-Searchgate-Fusion-Partial"):
            sys.exit("%s: %d %s %s" % (path, r.status, r.getheader("X-Searchgate-Fusion-Partial"), data[:200]))
        return dt

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]

    results = {}
    for mode, cache in (("cold", False), ("warm", True)):
        p, port = start(cache)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        batches = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) + " %d" % (i * a.batch + j)
                    for j in range(a.batch)] for i in range(a.queries)]
        depth = max(a.topk, 10)  # what the fusion asks of each leg: the legs are timed doing the same
        for qs in batches[:20]:  # warm the connection and the page cache
            timed(conn, "/retrieve/hybrid", qs, a.topk)
        if cache:
            for qs in batches:  # fill the legs' caches at the depth the fusion asks for
                for leg in ("bm25", "dense"):
                    conn.request("POST", "/retrieve/" + leg, json.dumps({"queries": qs, "topk": depth}),
                                 {"Content-Type": "application/json"})
                    conn.getresponse().read()
        t_a, t_b, t_f, ratio = [], [], [], []
        for qs in batches:
            x = timed(conn, "/retrieve/bm25", qs, depth)
            y = timed(conn, "/retrieve/dense", qs, depth)
            z = timed(conn, "/retrieve/hybrid", qs, a.topk)
            t_a.append(x)
            t_b.append(y)
            t_f.append(z)
            ratio.append(z / max(x, y))
        slower = [max(x, y) for x, y in zip(t_a, t_b)]
        results[mode] = {
            "bm25_p50_ms": round(pct(t_a, 50) * 1e3, 3), "dense_p50_ms": round(pct(t_b, 50) * 1e3, 3),
            "slower_leg_p50_ms": round(pct(slower, 50) * 1e3, 3), "fusion_p50_ms": round(pct(t_f, 50) * 1e3, 3),
            "fusion_p99_ms": round(pct(t_f, 99) * 1e3, 3), "slower_leg_p99_ms": round(pct(slower, 99) * 1e3, 3),
            "ratio_p50": round(statistics.median(ratio), 3),
            "overhead_p50_ms": round((pct(t_f, 50) - pct(slower, 50)) * 1e3, 3)}
        conn.close()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    print(json.dumps({"queries": a.queries, "batch": a.batch, "topk": a.topk, "depth": max(a.topk, 10),
                      "dense_delay_ms": a.delay_ms, "index": a.index or "random 20k passages", "modes": results}, indent=1))
finally:
    cleanup()
