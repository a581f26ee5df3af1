#!/usr/bin/python3
"""What a route's max_inflight lets its upstream carry (issue 19, item 5), measured the way the
issue measured it, for any build: a route with max_inflight 8 in front of a slow Search-R1-style
upstream (tests/remote/fakes/fake_upstream.py: it takes DELAY s per request and, like the Python
servers, keeps working when its client hangs up), CLIENTS clients sending one query at a time with
X-Timeout-Ms DEADLINE for SECONDS s. Reports what the upstream saw -- its most concurrent requests,
the requests it got, those that arrived after their deadline had passed or with under 100 ms of
it left -- and what the clients got (statuses), then how long until the upstream is idle again.

  tests/bench/gateway/bench_upstream_load.py --build BUILD [--build OTHER ...]

A build whose gateway knows the route key min_remaining_ms (issue 19's) runs with its default;
older ones run without it. Standard library only; run it on a quiet machine.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "remote"), os.path.join(HERE, "..", "..", "remote", "fakes"),
                os.path.join(HERE, "..", "..", "integration")]

ap = argparse.ArgumentParser()
ap.add_argument("--build", action="append", required=True, help="build directory (repeat to compare)")
ap.add_argument("--clients", type=int, default=64)
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--delay", type=float, default=2.0, help="seconds the upstream takes per request")
ap.add_argument("--deadline", type=int, default=500, help="X-Timeout-Ms of every request")
ap.add_argument("--max-inflight", type=int, default=8)
args = ap.parse_args()


def run(build):
    os.environ["SG_BUILD_DIR"] = os.path.abspath(build)
    import importlib
    import sgtest
    importlib.reload(sgtest)
    import rtest
    importlib.reload(rtest)
    from fake_upstream import FakeUpstream
    f = FakeUpstream(mode="slime")
    f.default_script = [{"delay": args.delay}]
    cfg = {"servers": [f.url], "health_interval_ms": 0, "retries": 0}
    gw = rtest.gateway(rtest.backend("lab", "upstream", cfg, max_inflight=args.max_inflight))
    sent, statuses, lock = {}, collections.Counter(), threading.Lock()
    stop = time.time() + args.seconds

    def client(c):
        i = 0
        while time.time() < stop:
            q = "c%d-%d" % (c, i)
            i += 1
            with lock:
                sent[q] = time.time()
            r = gw.retrieve([q], topk=1, headers={"X-Timeout-Ms": str(args.deadline)})
            with lock:
                statuses[r.status] += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0 = time.time()
    idle = f.server.wait_idle(120)
    drain_s = time.time() - t0
    reqs = f.retrieve_requests()
    ages = [r.time - sent[r.json()["queries"][0]] for r in reqs]
    out = {"build": build, "upstream_max_concurrent": f.server.max_inflight, "upstream_requests": len(reqs),
           "arrived_after_deadline": sum(a > args.deadline / 1000 for a in ages),
           "arrived_with_under_100ms_left": sum(a > args.deadline / 1000 - 0.1 for a in ages),
           "client_requests": sum(statuses.values()), "client_statuses": dict(sorted(statuses.items())),
           "upstream_idle_after_s": round(drain_s, 2) if idle else None}
    gw.stop()
    f.stop()
    return out


rows = [run(b) for b in args.build]
print("route max_inflight %d, upstream %.1f s per request, %d clients, X-Timeout-Ms %d, %.0f s; load %s" %
      (args.max_inflight, args.delay, args.clients, args.deadline, args.seconds, open("/proc/loadavg").read().split()[:3]))
keys = ["upstream_max_concurrent", "upstream_requests", "arrived_after_deadline", "arrived_with_under_100ms_left",
        "client_requests", "client_statuses", "upstream_idle_after_s"]
print("| build | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 1) + "|")
for r in rows:
    print("| %s | " % r["build"] + " | ".join(json.dumps(r[k]) for k in keys) + " |")
