#!/usr/bin/python3
"""Rerank throughput through the gateway, beside the library alone: the pairs/s of a route with
`rerank` over the example plugin (an instant first stage) against bench_xenc's figure for the same
model, candidates and max_length (docs/rerank.md, "Throughput"). Not a test.

    /usr/bin/python3 tests/bench/local/bench_rerank.py MODEL_DIR [--seconds 40] [--workers 1]
        [--clients N] [--library]

Each client posts one query at a time, every query a new text (no cache, no coalescing), topk 3
of 30 candidates of ~350 words (each pair truncated to max_length 256), as bench_xenc scores them.
--workers sets rerank.workers (scoring threads; each call runs on one); --clients defaults to the
workers. --library also runs build/tests/local/bench/local_bench_xenc MODEL_DIR SECONDS WORKERS
(a team of that many threads on each call) for the library figure on the same machine.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

import sgtest  # noqa: E402

WORDS = ("the of and in to was is for on as by with he at from his an were are which this also be has first new one their "
         "after two who they city river church war school album season film team league world state county born known "
         "song history company series village england 1999 national population").split()


def passage(seed, n=350):
    x = (0x9E3779B97F4A7C15 * (seed + 1)) & (2**64 - 1)
    out = []
    for i in range(n):
        x ^= (x << 13) & (2**64 - 1)
        x ^= x >> 7
        x ^= (x << 17) & (2**64 - 1)
        out.append(WORDS[x % len(WORDS)] + ("." if i % 17 == 16 else ""))
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--clients", type=int, default=0)
    ap.add_argument("--candidates", type=int, default=30)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--library", action="store_true")
    a = ap.parse_args()
    clients = a.clients or a.workers
    docs = [{"id": str(i), "contents": "\"Document %d\"\n%s" % (i, passage(i))} for i in range(a.candidates)]
    route = {"name": "rr", "plugin": "example", "topk": 3, "cache": False, "timeout_ms": 600000,
             "config": {"documents": docs, "workers": 2},
             "rerank": {"model": os.path.abspath(a.model), "candidates": a.candidates, "max_length": a.max_length,
                        "workers": a.workers, "batch": a.candidates}}
    gw = sgtest.Gateway({"backends": [route], "limits": {"max_deadline_ms": 600000}}, threads=1)
    try:
        r = gw.retrieve(["warm-up query about the river"], topk=3)
        assert r.status == 200, r
        pairs0 = gw.metric("searchgate_rerank_pairs_total")
        score_s0 = gw.metric("searchgate_rerank_score_duration_seconds_sum")
        score_n0 = gw.metric("searchgate_rerank_score_duration_seconds_count")
        lat = []
        lock = threading.Lock()
        stop = time.time() + a.seconds
        counter = [0]

        def client(c):
            while time.time() < stop:
                with lock:
                    counter[0] += 1
                    i = counter[0]
                t0 = time.time()
                r = gw.retrieve(["question %d from client %d: who was the first president of the united states" % (i, c)],
                                topk=3)
                assert r.status == 200, r
                with lock:
                    lat.append(time.time() - t0)

        t0 = time.time()
        ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        pairs = gw.metric("searchgate_rerank_pairs_total") - pairs0
        score_s = gw.metric("searchgate_rerank_score_duration_seconds_sum") - score_s0
        score_n = gw.metric("searchgate_rerank_score_duration_seconds_count") - score_n0
        lat.sort()
        print("gateway: %.1f pairs/s; %d queries of %d pairs in %.1f s; request latency mean %.2f s, p50 %.2f s; "
              "scoring %.2f s per call (%d worker%s, %d client%s, max_length %d)" %
              (pairs / wall, len(lat), a.candidates, wall, sum(lat) / len(lat), lat[len(lat) // 2], score_s / score_n,
               a.workers, "" if a.workers == 1 else "s", clients, "" if clients == 1 else "s", a.max_length))
    finally:
        gw.stop()
    if a.library:
        exe = os.path.join(sgtest.BUILD_DIR, "tests", "local", "bench", "local_bench_xenc")
        out = subprocess.run([exe, a.model, str(int(a.seconds)), str(a.workers)], capture_output=True, text=True, check=True)
        print("library (local_bench_xenc, team of %d): %s" % (a.workers, out.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
