#!/usr/bin/python3
"""Remote-backend benchmark: gateway overhead of the serper, qdrant and upstream backends.

Starts bench_fake (an upstream answering instantly with canned serper/Qdrant/Search-R1 replies)
and the real searchgate with one backend of each kind (result cache off), then measures with wrk,
in the same run:
  * the peer: each upstream API called directly (the request the backend itself sends);
  * the same work through the gateway: POST /retrieve/<backend> with unique queries.
At concurrency 1 the p50/p99 difference is the latency the gateway adds per request; at
concurrency 64 it reports requests/s and the ratio to the direct peer.

usage: tests/bench/remote/run_bench.py [BUILD_DIR]     (env: SG_BENCH_SECONDS, default 5)
Needs wrk (.ci/deps.sh bench). Not a test: numbers depend on the machine and its load.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
SECONDS = int(os.environ.get("SG_BENCH_SECONDS", "5"))
MODEL = os.path.join(ROOT, "tests", "fixtures", "e5-tiny")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %d" % port)


def to_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    x = float(m.group(1))
    return x / 1000 if m.group(2) == "us" else x if m.group(2) == "ms" else x * 1000


def wrk(port, path, body, conns):
    env = dict(os.environ, SG_BENCH_PATH=path, SG_BENCH_BODY=body)
    threads = 1 if conns == 1 else 2
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % SECONDS, "--latency", "-s",
                          os.path.join(HERE, "post.lua"), "http://127.0.0.1:%d" % port],
                         env=env, capture_output=True, text=True, check=True).stdout
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: .*", out)
    if non2xx or errors:
        raise RuntimeError("wrk saw failures on %s:\n%s" % (path, out))
    return {"p50": to_ms(pct["50"]), "p99": to_ms(pct["99"]), "rps": rps}


def main():
    fake_port, gw_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="sgbench-")
    fake = subprocess.Popen([os.path.join(BUILD, "tests", "remote", "bench_fake"), str(fake_port), "64"],
                            stderr=subprocess.DEVNULL)
    wait_port(fake_port)
    up = "http://127.0.0.1:%d" % fake_port
    cfg = {"listen": {"host": "127.0.0.1", "port": gw_port}, "threads": 1, "log_level": "warn",
           "backends": [
               {"name": "google", "plugin": "serper", "cache": False, "max_queue": 1000000,
                "config": {"base_url": up, "api_key_env": "SG_BENCH_KEY", "qps": 0, "max_inflight": 0}},
               {"name": "wiki", "plugin": "qdrant", "cache": False, "max_queue": 1000000,
                "config": {"url": up, "collection": "bench", "model": MODEL}},
               {"name": "lab", "plugin": "upstream", "cache": False, "max_queue": 1000000,
                "config": {"servers": [up], "health_interval_ms": 0}}]}
    cfg_path = os.path.join(tmp, "bench.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    gw = subprocess.Popen([os.path.join(BUILD, "searchgate"), "--config", cfg_path],
                          env=dict(os.environ, SG_BENCH_KEY="bench-key", OPENBLAS_NUM_THREADS="1"),
                          stdout=open(os.path.join(tmp, "gw.log"), "w"), stderr=subprocess.STDOUT)
    try:
        wait_port(gw_port)
        vec = json.dumps([round(0.125 * ((i % 7) - 3), 3) for i in range(64)])
        cases = [
            ("serper", "/search", '{"q":"who wrote hamlet @N@","num":3,"gl":"us","hl":"en"}', "google"),
            ("qdrant", "/collections/bench/points/query/batch",
             '{"searches":[{"query":%s,"limit":3,"with_payload":true}],"n":"@N@"}' % vec, "wiki"),
            ("upstream", "/retrieve", '{"queries":["who wrote hamlet @N@"],"topk":3,"return_scores":true}', "lab"),
        ]
        gw_body = '{"queries":["who wrote hamlet @N@"],"topk":3,"return_scores":true}'
        rows = []
        for name, path, body, be in cases:
            d1 = wrk(fake_port, path, body, 1)
            g1 = wrk(gw_port, "/retrieve/" + be, gw_body, 1)
            d64 = wrk(fake_port, path, body, 64)
            g64 = wrk(gw_port, "/retrieve/" + be, gw_body, 64)
            rows.append((name, d1, g1, d64, g64))
        print("remote backends, %d s per run, wrk and the fake share this machine's %d CPUs" % (SECONDS, os.cpu_count()))
        print("%-9s | %-27s | %-27s | %-34s" % ("", "c=1 p50 ms: direct gw added", "c=1 p99 ms: direct gw added",
                                                "c=64 req/s: direct gw (ratio) gw-p50"))
        for name, d1, g1, d64, g64 in rows:
            print("%-9s | %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %9.0f %9.0f (%.2f) %6.2fms" % (
                name, d1["p50"], g1["p50"], g1["p50"] - d1["p50"], d1["p99"], g1["p99"], g1["p99"] - d1["p99"],
                d64["rps"], g64["rps"], g64["rps"] / d64["rps"], g64["p50"]))
    finally:
        gw.terminate()
        fake.terminate()
        gw.wait(10)
        fake.wait(10)


if __name__ == "__main__":
    main()
