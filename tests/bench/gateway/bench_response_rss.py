#!/usr/bin/python3
"""Peak RSS of the gateway under large answers (issue 19, item 1), before and after, in one run.

For each build given (--before, --after: build directories holding `searchgate` and `plugins/`),
each workload, each reader kind and each concurrency, it starts a fresh gateway on a BM25 route
with the default limits (L1 cache off, no Redis: the numbers are the answers' own), sends that
many copies of the workload's request at once, and reports the gateway's peak RSS (VmHWM) next to
its idle RSS, the statuses the clients got and the wall time:

  workloads  issue  {"queries": ["water"] x 2000, "topk": 1000}: an 18 KB request whose answer is
                    ~1.45 GB (the issue's measurement on the gcide demo index)
             max    distinct queries at topk 1000 adding up to about --answer-mib MiB, just under
                    the after build's default limits.max_response_bytes (32 MiB); every client
                    sends the same body, so concurrent clients share one set of results
             distinct  the same size as max, but a different body per client (queries no other
                    client sends): N clients hold N answers' results at once, which the after
                    build bounds by limits.max_response_bytes_inflight (512 MiB): peak RSS grows
                    with N up to that budget, and clients beyond it get 503 + Retry-After
                    (--distinct adds it to --workloads)
  readers    normal the client reads the whole answer as fast as it can
             slow   the client reads --slow-rate bytes/s for --slow-seconds, then hangs up (a
                    1 KB/s reader never finishes a large answer)

A memory guard kills a gateway whose RSS passes --rss-cap-mib (reported as "killed"), so the
before build's 16 x 1.45 GB cannot take the machine down. Run it on a quiet machine, e.g.

  tests/bench/gateway/bench_response_rss.py --before ../before/build --after build \\
      --index build/demo/bm25 --sizes 1,4,16
  tests/bench/gateway/bench_response_rss.py --before ../before/build --after build \\
      --index build/demo/bm25 --workloads distinct --sizes 1,4,16,32

(build/demo/bm25 comes from build/prepare-default). A quick check that it runs:
  tests/bench/gateway/bench_response_rss.py --after build --index build/demo/bm25 --sizes 1,2 \\
      --workloads max --distinct --answer-mib 2 --slow-seconds 2
Standard library only; /usr/bin/python3.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--before", help="build directory of the unfixed gateway (e.g. a worktree of the commit before, built the same way)")
ap.add_argument("--after", help="build directory of the fixed gateway (e.g. build)")
ap.add_argument("--index", required=True, help="a BM25 index directory (build/demo/bm25 from build/prepare-default)")
ap.add_argument("--sizes", default="1,4,16", help="concurrent requests, comma-separated")
ap.add_argument("--workloads", default="issue,max", help="issue, max, distinct (comma-separated)")
ap.add_argument("--distinct", action="store_true", help="add the distinct workload: a different max-size body per client")
ap.add_argument("--readers", default="normal,slow", help="normal, slow (comma-separated)")
ap.add_argument("--answer-mib", type=float, default=30.0, help="the max workload's answer size")
ap.add_argument("--slow-rate", type=int, default=1024, help="bytes per second a slow reader takes")
ap.add_argument("--slow-seconds", type=float, default=20.0, help="how long slow readers read before hanging up")
ap.add_argument("--rss-cap-mib", type=int, default=8192, help="kill a gateway whose RSS passes this")
ap.add_argument("--timeout", type=float, default=600.0, help="seconds a normal reader waits for its answer")
ap.add_argument("--threads", type=int, default=2, help="gateway loop threads")
a = ap.parse_args()

builds = [(name, os.path.abspath(d)) for name, d in (("before", a.before), ("after", a.after)) if d]
if not builds:
    sys.exit("give --before and/or --after")
for _, d in builds:
    if not os.path.exists(os.path.join(d, "searchgate")):
        sys.exit("%s: no searchgate binary" % d)
index = os.path.abspath(a.index)
if not os.path.isdir(index):
    sys.exit("%s: no such index (build one with build/prepare-default)" % index)
sizes = [int(x) for x in a.sizes.split(",") if x]
workloads = [w for w in a.workloads.split(",") if w]
if a.distinct and "distinct" not in workloads:
    workloads.append("distinct")
for w in workloads:
    if w not in ("issue", "max", "distinct"):
        sys.exit("unknown workload %s" % w)
readers = [r for r in a.readers.split(",") if r]
tmp = tempfile.mkdtemp(prefix="sgbench-rss-")


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Gateway:
    def __init__(self, build):
        cfg = {"listen": {"host": "127.0.0.1", "port": 0}, "threads": a.threads, "default_backend": "bm25",
               "cache": {"l1_bytes": 0},
               "backends": [{"name": "bm25", "plugin": "bm25", "cache": False, "config": {"index": index}}]}
        self.cfg_path = os.path.join(tmp, "gw.json")
        with open(self.cfg_path, "w") as f:
            json.dump(cfg, f)
        self.log_path = os.path.join(tmp, "gw.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([os.path.join(build, "searchgate"), "--config", self.cfg_path], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.port = None
        end = time.time() + 120
        while time.time() < end and self.port is None:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            for word in text.split():
                if word.startswith("http://127.0.0.1:") and word.rstrip(")").split(":")[-1].isdigit():
                    self.port = int(word.rstrip(")").split(":")[-1])
            if self.proc.poll() is not None:
                sys.exit("searchgate exited:\n" + text)
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            sys.exit("searchgate did not start")
        self.killed = False
        self.peak_seen = 0
        self.guard_stop = threading.Event()
        self.guard = threading.Thread(target=self._guard, daemon=True)
        self.guard.start()

    def _guard(self):
        while not self.guard_stop.is_set() and self.proc.poll() is None:
            rss = status_kib(self.proc.pid, "VmRSS")
            self.peak_seen = max(self.peak_seen, rss)
            if rss > a.rss_cap_mib * 1024:
                self.killed = True
                self.proc.kill()
                return
            time.sleep(0.05)

    def post(self, body, timeout=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout or a.timeout)
        try:
            data = json.dumps(body).encode()
            conn.request("POST", "/retrieve", body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            n = 0
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                n += len(chunk)
            return r.status, n
        finally:
            conn.close()

    def stop(self):
        self.guard_stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def max_count(build):
    """How many distinct queries at topk 1000 make an answer of about --answer-mib MiB (probed on `build`)."""
    gw = Gateway(build)
    try:
        st, n = gw.post({"queries": ["water 0"], "topk": 1000, "return_scores": True})
        if st != 200 or n == 0:
            sys.exit("probe failed: %s" % st)
        return max(1, int(a.answer_mib * 1048576 * 0.97 / n))
    finally:
        gw.stop()


def max_request(count, client=0):
    """`count` distinct queries at topk 1000; `client` > 0 makes them differ from every other
    client's (distinct texts: nothing is shared between the requests)."""
    return {"queries": ["water %d" % (client * count + i) for i in range(count)], "topk": 1000, "return_scores": True}


def slow_reader(port, body, out, i):
    data = json.dumps(body).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(data) + data)
        got, head = 0, b""
        end = time.time() + a.slow_seconds
        step = max(1, a.slow_rate // 10)
        s.settimeout(1.0)
        while time.time() < end:
            try:
                chunk = s.recv(step)
            except socket.timeout:
                continue
            if not chunk:
                break
            if len(head) < 12:
                head += chunk[:12]
            got += len(chunk)
            time.sleep(0.1)
        status = int(head[9:12]) if head[:5] == b"HTTP/" and head[9:12].isdigit() else 0
        out[i] = (status, got)
    except OSError as e:
        out[i] = ("error: %s" % e.__class__.__name__, 0)
    finally:
        s.close()


def run_one(build, body_of, readers_kind, conc):
    """`body_of(i)`: the body client i sends."""
    gw = Gateway(build)
    try:
        gw.post({"queries": ["water"], "topk": 3})  # warm: the index pages in, the route learns its DOC size
        time.sleep(0.3)
        idle = status_kib(gw.proc.pid, "VmRSS")
        out = [None] * conc
        t0 = time.time()

        def normal(i):
            try:
                out[i] = gw.post(body_of(i))
            except (OSError, http.client.HTTPException) as e:
                out[i] = ("error: %s" % e.__class__.__name__, 0)

        target = normal if readers_kind == "normal" else (lambda i: slow_reader(gw.port, body_of(i), out, i))
        ts = [threading.Thread(target=target, args=(i,)) for i in range(conc)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        time.sleep(0.5)
        after = status_kib(gw.proc.pid, "VmRSS")
        peak = max(status_kib(gw.proc.pid, "VmHWM"), gw.peak_seen)
        killed = gw.killed
    finally:
        gw.stop()
    statuses = {}
    for o in out:
        key = str(o[0]) if o is not None else "none"
        statuses[key] = statuses.get(key, 0) + 1
    return {"idle": idle, "peak": peak, "after": after, "wall": wall, "killed": killed,
            "statuses": ",".join("%sx%d" % (k, v) for k, v in sorted(statuses.items())),
            "bytes": sum(o[1] for o in out if o is not None and isinstance(o[1], int))}


def main():
    bodies = {}  # workload -> body_of(client)
    if "issue" in workloads:
        issue = {"queries": ["water"] * 2000, "topk": 1000, "return_scores": True}
        bodies["issue"] = lambda i: issue
    if "max" in workloads or "distinct" in workloads:
        count = max_count(builds[-1][1])
        same = max_request(count)
        bodies["max"] = lambda i: same
        distinct = {}
        bodies["distinct"] = lambda i: distinct.setdefault(i, max_request(count, i + 1))
        print("max workloads: %d distinct queries at topk 1000 (~%.0f MiB answer)%s" %
              (count, a.answer_mib, "; distinct: a different body per client" if "distinct" in workloads else ""))
    rows = []
    for wname in workloads:
        for rkind in readers:
            for conc in sizes:
                for bname, bdir in builds:
                    r = run_one(bdir, bodies[wname], rkind, conc)
                    rows.append((wname, rkind, conc, bname, r))
                    print("%-6s %-6s %3d %-6s peak %8.1f MiB (idle %6.1f, after %6.1f)%s  %s  %.1f s" %
                          (wname, rkind, conc, bname, r["peak"] / 1024, r["idle"] / 1024, r["after"] / 1024,
                           " KILLED at cap" if r["killed"] else "", r["statuses"], r["wall"]), flush=True)
    print()
    print("| workload | readers | concurrent | build | peak RSS MiB | idle MiB | RSS after MiB | statuses | bytes read | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for wname, rkind, conc, bname, r in rows:
        peak = ">%d (killed)" % a.rss_cap_mib if r["killed"] else "%.0f" % (r["peak"] / 1024)
        print("| %s | %s | %d | %s | %s | %.0f | %.0f | %s | %d | %.1f |" %
              (wname, rkind, conc, bname, peak, r["idle"] / 1024, r["after"] / 1024, r["statuses"], r["bytes"], r["wall"]))


try:
    main()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
