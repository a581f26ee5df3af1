"""What an abusive client costs the gateway on the HTTP side (issue 19, items 2 and 4), measured the
way the issue measured it, for any build (run it on the build before and after a change):

  unauth   clients.require_key on; BODIES valid /retrieve bodies of SIZE_MB MB (10,000 long queries)
           without a key, CONCURRENCY at a time, each on its own connection (Content-Length, the
           whole body written, then the answer read). Reports the answers' statuses, the gateway's CPU time (utime + stime) over
           the run, its RSS before and at its peak (sampled every 10 ms), and the wall time.
  fdlimit  RLIMIT_NOFILE FDS (soft = hard) and IDLE idle connections (more than the limit allows):
           the gateway's CPU use over DURATION s while it is out of descriptors, then the time until
           a request is served once the idle connections close.

Usage: bench_http_abuse.py [--build build] [--what unauth,fdlimit] [--bodies 100] [--size-mb 16]
                           [--concurrency 10] [--fds 256] [--idle 300] [--duration 5]
The gateway is the example plugin (the requests never reach a backend), 2 loop threads, Redis off.
Figures from a shared or loaded machine mean little: run it on a quiet one.
"""
import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "build"))
ap.add_argument("--what", default="unauth,fdlimit")
ap.add_argument("--bodies", type=int, default=100)
ap.add_argument("--size-mb", type=float, default=16)
ap.add_argument("--concurrency", type=int, default=10)
ap.add_argument("--fds", type=int, default=256)
ap.add_argument("--idle", type=int, default=300)
ap.add_argument("--duration", type=float, default=5)
a = ap.parse_args()
build = os.path.abspath(a.build)
DOCS = [{"id": "0", "contents": "\"Paris\"\nParis is the capital and largest city of France."}]


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(cfg, env=None, fds=None):
    d = tempfile.mkdtemp(prefix="sgbench-")
    path = os.path.join(d, "gw.json")
    cfg = dict(cfg, listen={"host": "127.0.0.1", "port": 0}, threads=2)
    with open(path, "w") as f:
        json.dump(cfg, f)
    log = open(os.path.join(d, "gw.log"), "w+")
    pre = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))) if fds else None
    p = subprocess.Popen([os.path.join(build, "searchgate"), "--config", path], stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, **(env or {})), preexec_fn=pre)
    for _ in range(600):
        log.seek(0)
        m = re.search(r"listening on http://[^:]+:(\d+)", log.read())
        if m:
            return p, int(m.group(1)), log
        if p.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    sys.exit("searchgate did not start:\n" + log.read())


def stop(p):
    p.terminate()
    p.wait(timeout=30)


def answer(s):
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        got += chunk
    return int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.") else 0


def json_body(size):
    """A valid /retrieve body of about `size` bytes: 10,000 queries (the default max_queries) of
    equal length, so a server that parses before it authenticates parses all of it."""
    n = 10000
    q = "w" * max(1, size // n - 4)
    return json.dumps({"queries": [q] * n, "topk": 3}).encode()


def unauth():
    p, port, _ = start({"backends": [{"name": "example", "plugin": "example", "config": {"documents": DOCS}}],
                        "clients": {"require_key": True, "keys": [{"id": "job", "key_env": "SG_BENCH_KEY"}]}},
                       env={"SG_BENCH_KEY": "bench-key"})
    try:
        body = json_body(int(a.size_mb * 1000 * 1000))
        head = (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n" % (port, len(body)))
        time.sleep(0.5)
        rss0, cpu0, peak, done = rss(p.pid), cpu(p.pid), [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss(p.pid))
                time.sleep(0.01)

        statuses, lock, todo = {}, threading.Lock(), list(range(a.bodies))

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    todo.pop()
                with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
                    s.sendall(head)
                    try:
                        s.sendall(body)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    st = answer(s)
                with lock:
                    statuses[st] = statuses.get(st, 0) + 1

        t0 = time.time()
        threads = [threading.Thread(target=sample)] + [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for t in threads:
            t.start()
        for t in threads[1:]:
            t.join()
        done.set()
        threads[0].join()
        print("unauth: %d bodies of %.0f MB, %d at a time: statuses %s; gateway CPU %.2f s; RSS %.0f -> peak %.0f MiB; "
              "wall %.2f s" % (a.bodies, a.size_mb, a.concurrency, statuses, cpu(p.pid) - cpu0, rss0 / 2**20,
                               peak[0] / 2**20, time.time() - t0))
    finally:
        stop(p)


def fdlimit():
    p, port, _ = start({"backends": [{"name": "example", "plugin": "example", "config": {"documents": DOCS}}]}, fds=a.fds)
    idle = []
    try:
        for _ in range(a.idle):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        time.sleep(0.5)
        c0 = cpu(p.pid)
        time.sleep(a.duration)
        used = cpu(p.pid) - c0
        t0 = time.time()
        for s in idle:
            s.close()
        idle = []
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            st = answer(s)
        print("fdlimit: RLIMIT_NOFILE %d, %d idle connections: gateway CPU %.2f s in %.1f s (%.0f %%); after they close, "
              "GET /health %d in %.2f s" % (a.fds, a.idle, used, a.duration, 100 * used / a.duration, st, time.time() - t0))
    finally:
        for s in idle:
            s.close()
        stop(p)


for what in a.what.split(","):
    {"unauth": unauth, "fdlimit": fdlimit}[what]()
