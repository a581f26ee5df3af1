#!/usr/bin/python3
"""Soak test of searchgate (issue 19, item 8): prove that the gateway stays bounded.

For a configurable time, one real gateway serves mixed valid traffic on every kind of route -- a
BM25 index (the demo index when it was built, else a generated one), the example and mock plugins,
the upstream plugin over a fake Search-R1 server, serper over the fake serper.dev, qdrant over the
fake Qdrant (with the e5-tiny fixture), a fusion route, a rerank route with the xenc-tiny fixture,
POST /access, and MCP tools/call -- while attackers send what issue 19 measured: the 2000 x topk
1000 amplification request, bodies of the maximal size, unauthenticated 16 MB bodies, evil Host
and Origin headers, readers that take 1 KB/s, readers that take nothing (a /retrieve answer, an MCP
answer, an MCP GET /sse stream), bodies shorter than their Content-Length and attempts to exhaust
the gateway's file descriptors. Redis is killed and restarted, and the upstream hangs for a while.

A sampler reads the gateway's RSS (and anonymous RSS), CPU time and open file descriptors from
/proc every 100 ms. The run fails when

  * any valid request failed -- after the retries every RL client makes (503/429 with
    Retry-After, 502/504, a reset connection), and except for the route whose upstream was made to
    hang, during the hang and a short recovery; a Redis outage must cost nothing;
  * the peak anonymous RSS exceeds the bound derived from the config it runs:
    base (after warm-up) + cache.l1_bytes + limits.max_response_bytes_inflight + the request
    bodies the attackers may have in flight + a fixed allowance;
  * at the end, with the traffic stopped: response memory is still held, a backend still has
    queries in flight, file descriptors did not come back, the idle gateway uses CPU, or it does
    not shut down cleanly.

It prints a report (peak RSS, CPU, fds, valid requests and attacks by route/kind and status,
every failed valid request) and writes it as JSON with --report.

    /usr/bin/python3 tests/soak/soak.py --build build --duration 600
    /usr/bin/python3 tests/soak/soak.py --build build --short          # ~2.5 minutes (make soak-short)

Standard library only; starts its own redis-server and fakes on free loopback ports.
"""
import argparse
import http.client
import json
import os
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "remote", "fakes"))

MiB = 1 << 20
KEY_A, KEY_B, KEY_X, ADMIN = "soak-key-a", "soak-key-b", "soak-key-x", "soak-admin"
SERPER_KEY = "soak-serper-key"
WORDS = ("water river city capital music history science law war king queen paper film light energy ocean island "
         "mountain language school bridge planet garden market museum engine theory novel poem battle forest desert "
         "animal bird fish tree stone metal glass fire wind snow rain cloud sun moon star road train ship").split()


def log(*a):
    print("[soak %6.1f]" % (time.time() - T0), *a, flush=True)


T0 = time.time()


# ---- the gateway process ----

def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Sampler(threading.Thread):
    """RSS, anonymous RSS, CPU and fds of the gateway every `period` seconds."""

    def __init__(self, pid, period=0.1):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.stop_ev = threading.Event()
        self.samples = []  # (t, rss, anon, cpu_s, fds)
        self.lock = threading.Lock()

    def sample(self):
        st = proc_status(self.pid)
        s = (time.time(), st.get("VmRSS", 0), st.get("RssAnon", 0), proc_cpu(self.pid), proc_fds(self.pid))
        with self.lock:
            self.samples.append(s)
        return s

    def run(self):
        while not self.stop_ev.wait(self.period):
            try:
                self.sample()
            except (OSError, ValueError):
                return

    def peak(self, i, since=0.0):
        with self.lock:
            return max((s[i] for s in self.samples if s[0] >= since), default=0)

    def cpu_rate(self, t0, t1):
        """Cores used between t0 and t1 (CPU seconds / wall seconds)."""
        with self.lock:
            pts = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return 0.0
        return (pts[-1][3] - pts[0][3]) / (pts[-1][0] - pts[0][0])

    def series(self, t0, t1, points=20):
        """About `points` samples between t0 and t1: (s since t0, RSS MiB, anonymous MiB, fds, cores since the previous)."""
        with self.lock:
            pts = [s for s in self.samples if t0 <= s[0] <= t1]
        if not pts:
            return []
        step = max(1, len(pts) // points)
        picked = pts[::step] + ([pts[-1]] if (len(pts) - 1) % step else [])
        out, prev = [], None
        for s in picked:
            cores = (s[3] - prev[3]) / (s[0] - prev[0]) if prev is not None and s[0] > prev[0] else 0.0
            out.append((round(s[0] - t0, 1), round(s[1] / MiB, 1), round(s[2] / MiB, 1), s[4], round(cores, 2)))
            prev = s
        return out

    def cpu_peak(self, window=2.0):
        with self.lock:
            pts = list(self.samples)
        best, j = 0.0, 0
        for i in range(len(pts)):
            while pts[i][0] - pts[j][0] > window:
                j += 1
            if pts[i][0] - pts[j][0] >= window / 2:
                best = max(best, (pts[i][3] - pts[j][3]) / (pts[i][0] - pts[j][0]))
        return best


def build_bm25(build, tmp):
    demo = os.path.join(build, "demo", "bm25")
    if os.path.isdir(demo):
        return demo, "the demo index (%s)" % demo
    corpus = os.path.join(tmp, "corpus.jsonl")
    rnd = random.Random(7)
    with open(corpus, "w") as f:
        for i in range(20000):
            title = "%s %s %d" % (rnd.choice(WORDS).title(), rnd.choice(WORDS), i)
            text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 120)))
            f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s" % (title, text)}) + "\n")
    out = os.path.join(tmp, "bm25")
    subprocess.run([os.path.join(build, "searchgate-index-bm25"), corpus, out, "--no-progress", "--quiet"], check=True,
                   capture_output=True, timeout=600)
    return out, "a generated index of 20,000 documents"


def bulk_docs():
    """The documents of the route the attackers use for large answers: 10 x ~60 KB."""
    return [{"id": "b%d" % i, "contents": "\"Bulk %d\"\n" % i + ("bulk%d water " % i) * 5000} for i in range(10)]


def make_config(args, tmp, redis_port, up, serper, qdrant, plugins):
    index, index_what = build_bm25(args.build, tmp)
    import sgtest
    routes = [
        {"name": "wiki", "plugin": "bm25", "config": {"index": index}, "topk": 3},
        {"name": "example", "plugin": "example", "config": {"documents": sgtest.DOCS,
                                                            "pages": [{"url": "https://en.wikipedia.org/wiki/Hamlet",
                                                                       "contents": "Hamlet page"}]}},
        {"name": "mock", "plugin": "mock", "config": {"seed": 1}},
        {"name": "up", "plugin": "upstream", "timeout_ms": 3000, "max_inflight": 8, "min_remaining_ms": 200,
         "config": {"servers": [up.url], "retries": 0, "health_interval_ms": 0}},
        {"name": "google", "plugin": "serper", "config": {"base_url": serper.url, "api_key_env": "SOAK_SERPER_KEY",
                                                          "qps": 0, "max_inflight": 0, "backoff_ms": 20}},
        {"name": "bulk", "plugin": "example", "cache": False, "config": {"documents": bulk_docs()}},
        {"name": "fused", "fusion": {"routes": ["wiki", "mock"], "method": "rrf", "k": 60}, "topk": 5},
    ]
    skipped = []
    if qdrant is not None:
        routes.append({"name": "qd", "plugin": "qdrant", "config": {"url": qdrant.url, "collection": qdrant.collection,
                                                                    "model": os.path.join(SOURCE, "tests", "fixtures", "e5-tiny"),
                                                                    "backoff_ms": 10}})
    else:
        skipped.append("qdrant (no sg_qdrant.so in this build)")
    if "rerank_xenc.so" in plugins:
        rr = {"name": "reranked", "plugin": "example", "config": {"documents": sgtest.DOCS},
              "rerank": {"model": os.path.join(SOURCE, "tests", "fixtures", "xenc-tiny"), "candidates": 6, "max_length": 64}}
        routes.append(rr)
    else:
        skipped.append("rerank (no rerank_xenc.so in this build)")
    cfg = {
        "threads": 2,
        "listen": {"host": "127.0.0.1", "port": 0, "read_timeout_ms": 2000},
        "limits": {"max_response_bytes": 8 * MiB, "max_response_bytes_inflight": 64 * MiB, "response_wait_ms": 2000,
                   "write_timeout_ms": 2000},
        "cache": {"l1_bytes": 32 * MiB, "redis": {"host": "127.0.0.1", "port": redis_port}},
        "clients": {"require_key": True, "admin_key_env": "SOAK_ADMIN",
                    "keys": [{"id": "job-a", "key_env": "SOAK_KEY_A"}, {"id": "job-b", "key_env": "SOAK_KEY_B"},
                             {"id": "attacker", "key_env": "SOAK_KEY_X"}]},
        "backends": routes,
    }
    return cfg, index_what, skipped


def limits_of(cfg):
    lim = cfg.get("limits", {})
    return {"max_body_bytes": lim.get("max_body_bytes", 16 * MiB), "max_response_bytes": lim["max_response_bytes"],
            "inflight": lim["max_response_bytes_inflight"], "l1": cfg["cache"]["l1_bytes"]}


# ---- HTTP ----

class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body


def call(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def metrics(port):
    r = call(port, "GET", "/metrics", headers={"Authorization": "Bearer " + ADMIN}, timeout=30)
    out = {}
    for line in r.body.decode().splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def metric_sum(ms, name, **labels):
    total = 0.0
    for k, v in ms.items():
        base, _, rest = k.partition("{")
        if base != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(got.get(a) == str(b) for a, b in labels.items()):
            total += v
    return total


# ---- bookkeeping ----

class Book:
    def __init__(self):
        self.lock = threading.Lock()
        self.valid = {}     # (scenario, status) -> count of final outcomes
        self.expected = {}  # (scenario, status) -> failures inside a fault window of that scenario
        self.failures = []  # dicts
        self.attacks = {}   # (kind, outcome) -> count
        self.attempts = {}  # (scenario, status) -> attempts that failed and were retried
        self.retries = 0
        self.redis_down_ok = 0

    def add(self, table, key):
        with self.lock:
            table[key] = table.get(key, 0) + 1


class Faults:
    """Windows in which a scenario may fail: name -> [(t0, t1)]; and the run's timeline."""

    def __init__(self):
        self.lock = threading.Lock()
        self.windows = {}
        self.redis_down = False
        self.timeline = []

    def event(self, what):
        log(what)
        with self.lock:
            self.timeline.append("%.1f s: %s" % (time.time() - T0, what))

    def open(self, scenario):
        with self.lock:
            self.windows.setdefault(scenario, []).append([time.time(), None])

    def close(self, scenario, grace):
        with self.lock:
            self.windows[scenario][-1][1] = time.time() + grace

    def covers(self, scenario, t0, t1):
        with self.lock:
            for a, b in self.windows.get(scenario, []):
                if t0 <= (b if b is not None else float("inf")) and t1 >= a:
                    return True
        return False


# ---- valid traffic ----

class Valid:
    """One kind of valid request: what it sends and how its answer is checked."""

    def __init__(self, name, weight, fn):
        self.name, self.weight, self.fn = name, weight, fn


def queries(rnd, pool):
    n = rnd.choice((1, 1, 2, 3, 5, 8))
    qs = []
    for _ in range(n):
        if rnd.random() < 0.7:
            qs.append(rnd.choice(pool))  # repeats: cache hits, GRPO duplicates
        else:
            qs.append(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 4))))
    return qs


def check_retrieve(a, qs, topk, rs):
    if a.status != 200:
        return "HTTP %d: %s" % (a.status, a.body[:200])
    j = json.loads(a.body)
    res = j.get("result")
    if not isinstance(res, list) or len(res) != len(qs):
        return "a result of %r lists for %d queries" % (len(res) if isinstance(res, list) else res, len(qs))
    for lst in res:
        if not isinstance(lst, list) or len(lst) > topk:
            return "a list of %d for topk %d" % (len(lst), topk)
        for it in lst:
            if rs and not ("document" in it and "score" in it):
                return "an item without document/score: %r" % (it,)
    return None


def retrieve_scenario(route, topk_max=5):
    def run(ctx, rnd):
        qs = queries(rnd, ctx.pool)
        topk = rnd.randint(1, topk_max)
        rs = rnd.random() < 0.5
        body = {"queries": qs, "topk": topk, "return_scores": rs}
        path = "/retrieve/" + route if rnd.random() < 0.5 else "/retrieve"
        if path == "/retrieve":
            body["backend"] = route
        a = call(ctx.port, "POST", path, body, headers=ctx.key(rnd))
        return a, (lambda: check_retrieve(a, qs, topk, rs))
    return run


def access_scenario(route):
    def run(ctx, rnd):
        urls = ["https://en.wikipedia.org/wiki/Hamlet", "https://example.org/%d" % rnd.randint(0, 50)][: rnd.randint(1, 2)]
        a = call(ctx.port, "POST", "/access/" + route, {"urls": urls}, headers=ctx.key(rnd))

        def check():
            if a.status != 200:
                return "HTTP %d: %s" % (a.status, a.body[:200])
            res = json.loads(a.body).get("result")
            return None if isinstance(res, list) and len(res) == len(urls) else "bad access result %r" % (res,)
        return a, check
    return run


def mcp_scenario(ctx, rnd):
    q = rnd.choice(ctx.pool)
    msg = {"jsonrpc": "2.0", "id": rnd.randint(1, 1 << 30), "method": "tools/call",
           "params": {"name": "search", "arguments": {"query": q, "topk": rnd.randint(1, 5)}}}
    h = dict(ctx.key(rnd))
    h["Accept"] = "application/json, text/event-stream"
    a = call(ctx.port, "POST", "/mcp", msg, headers=h)

    def check():
        if a.status != 200:
            return "HTTP %d: %s" % (a.status, a.body[:200])
        j = json.loads(a.body)
        if "result" not in j or j["result"].get("isError"):
            return "tool error: %s" % (a.body[:300],)
        return None
    return a, check


class Ctx:
    def __init__(self, port, pool):
        self.port, self.pool = port, pool

    @staticmethod
    def key(rnd):
        return {"Authorization": "Bearer " + (KEY_A if rnd.random() < 0.5 else KEY_B)}


RETRYABLE = (429, 502, 503, 504)


def valid_worker(ctx, scenarios, book, faults, stop, seed):
    rnd = random.Random(seed)
    weights = [s.weight for s in scenarios]
    while not stop.is_set():
        sc = rnd.choices(scenarios, weights)[0]
        t0 = time.time()
        last = None
        for attempt in range(8):
            a = None
            try:
                a, check = sc.fn(ctx, rnd)
            except (OSError, http.client.HTTPException) as e:
                last = ("conn", "%s: %s" % (type(e).__name__, e))
            else:
                why = check()
                if why is None:
                    last = None
                    book.add(book.valid, (sc.name, a.status))
                    if faults.redis_down:
                        with book.lock:
                            book.redis_down_ok += 1
                    break
                last = (a.status, why)
                if a.status not in RETRYABLE:
                    break
            if time.time() - t0 > 30 or stop.is_set():
                break
            book.add(book.attempts, (sc.name, last[0]))
            with book.lock:
                book.retries += 1
            wait = 0.2 * (attempt + 1)
            if last[0] in (429, 503) and a is not None:
                try:
                    wait = min(2.0, float(a.headers.get("retry-after", wait)))
                except ValueError:
                    pass
            time.sleep(wait)
        if last is None:
            continue
        t1 = time.time()
        if faults.covers(sc.name, t0, t1):
            book.add(book.expected, (sc.name, last[0]))
            continue
        book.add(book.valid, (sc.name, last[0]))
        with book.lock:
            book.failures.append({"at_s": round(t0 - T0, 1), "scenario": sc.name, "status": last[0], "why": str(last[1])[:300],
                                  "took_s": round(t1 - t0, 2)})


# ---- attacks ----

def raw(port, data, read=True, timeout=30, host=None):
    """Sends raw bytes; returns the status line's code (or 'closed'/'reset'/'timeout')."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the body was all sent
        if not read:
            return None
        got = b""
        while b"\r\n" not in got:
            c = s.recv(65536)
            if not c:
                break
            got += c
        m = re.match(rb"HTTP/1\.[01] (\d+)", got)
        return int(m.group(1)) if m else "closed"
    except ConnectionResetError:
        return "reset"
    except socket.timeout:
        return "timeout"
    finally:
        s.close()


def head(port, path, length, key=None, extra=""):
    h = "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (path, port, length)
    if key:
        h += "Authorization: Bearer %s\r\n" % key
    return (h + extra + "\r\n").encode()


def attack_amplify(port, rnd):
    body = json.dumps({"queries": ["water"] * 2000, "topk": 1000, "return_scores": True}).encode()
    a = call(port, "POST", "/retrieve/wiki", body, headers={"Authorization": "Bearer " + KEY_X})
    return a.status


MAX_SIZE_LOCK = threading.Lock()  # one maximal body at a time: the memory bound counts one


def attack_max_size(port, rnd, max_body):
    # valid JSON just under limits.max_body_bytes: many long queries (over the other limits: a 413/422 after parsing)
    q = "w" * 1590
    n = (max_body - 64) // (len(q) + 3)
    body = ('{"queries": [' + ",".join(['"%s"' % q] * n) + '], "topk": 3}').encode()
    assert len(body) <= max_body
    with MAX_SIZE_LOCK:
        a = call(port, "POST", "/retrieve/wiki", body, headers={"Authorization": "Bearer " + KEY_X}, timeout=60)
    return a.status


def attack_unauth_body(port, rnd):
    size = 16 * MiB
    return raw(port, head(port, "/retrieve/wiki", size) + b"x" * size)


def attack_evil_host(port, rnd):
    a = call(port, "POST", "/retrieve/wiki", {"queries": ["water"]},
             headers={"Host": "evil.example.com", "Origin": "http://evil.example.com", "Authorization": "Bearer " + KEY_X})
    b = call(port, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
             headers={"Origin": "http://evil.example.com", "Accept": "application/json, text/event-stream",
                      "Authorization": "Bearer " + KEY_X})
    return "%s/%s" % (a.status, b.status)


def attack_short_body(port, rnd):
    return raw(port, head(port, "/retrieve/wiki", 1000, KEY_X) + b'{"queries"', timeout=30)


def big_request(port):
    body = json.dumps({"queries": ["bulk%d water" % i for i in range(10)], "topk": 10}).encode()
    return head(port, "/retrieve/bulk", len(body), KEY_X) + body


def attack_stalled_reader(port, rnd, write_timeout_s):
    """A ~6 MB answer nobody reads: the gateway must close the connection after write_timeout_ms."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(big_request(port))
    time.sleep(write_timeout_s + 3)
    s.settimeout(10)
    got = 0
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            got += len(c)
        return "closed"
    except ConnectionResetError:
        return "closed"
    except socket.timeout:
        return "still-open"
    finally:
        s.close()


def attack_slow_reader(port, rnd, seconds, stop):
    """Takes 1 KB per second of a ~6 MB answer for `seconds`, then leaves (or is cut: slower than
    limits.min_write_bytes_per_s after the grace of write_timeout_ms, it holds the budget no longer)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(big_request(port))
    s.settimeout(10)
    got, end = 0, time.time() + seconds
    try:
        while time.time() < end and not stop.is_set():
            c = s.recv(1024)
            if not c:
                return "cut after %d bytes" % got
            got += len(c)
            time.sleep(1.0)
        return "read %d bytes" % got
    except (ConnectionResetError, socket.timeout):
        return "cut after %d bytes" % got
    finally:
        s.close()


def attack_mcp_stalled(port, rnd, write_timeout_s):
    """An MCP answer nobody reads (a tool result on the bulk route)."""
    msg = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "search_bulk", "arguments": {"queries": ["bulk%d" % i for i in range(8)], "topk": 10}}})
    body = msg.encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(head(port, "/mcp", len(body), KEY_X, "Accept: application/json, text/event-stream\r\n") + body)
    time.sleep(write_timeout_s + 3)
    s.settimeout(10)
    try:
        while s.recv(1 << 20):
            pass
        return "closed"
    except ConnectionResetError:
        return "closed"
    except socket.timeout:
        return "still-open"
    finally:
        s.close()


def attack_sse_stalled(port, rnd, write_timeout_s):
    """An MCP GET /sse stream whose reader takes nothing while tool results are sent to it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(("GET /sse HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n"
               % (port, KEY_X)).encode())
    s.settimeout(10)
    got = b""
    try:
        while re.search(rb"session_id=([0-9a-f]{32})", got) is None:
            c = s.recv(4096)
            if not c:
                return "no stream"
            got += c
        sid = re.search(rb"session_id=([0-9a-f]{32})", got).group(1).decode()
        for i in range(3):
            msg = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                   "params": {"name": "search_bulk", "arguments": {"queries": ["bulk%d" % j for j in range(4)], "topk": 10}}}
            call(port, "POST", "/messages?session_id=" + sid, msg, headers={"Authorization": "Bearer " + KEY_X})
        time.sleep(write_timeout_s + 3)
        while s.recv(1 << 20):
            pass
        return "closed"
    except ConnectionResetError:
        return "closed"
    except socket.timeout:
        return "still-open"
    finally:
        s.close()


def attacker(port, book, stop, seed, lim, write_timeout_s, slow_s):
    rnd = random.Random(seed)
    kinds = [("amplify_2000x1000", lambda: attack_amplify(port, rnd), 3),
             ("max_size_body", lambda: attack_max_size(port, rnd, lim["max_body_bytes"]), 1),
             ("unauth_16MB_body", lambda: attack_unauth_body(port, rnd), 2),
             ("evil_host_origin", lambda: attack_evil_host(port, rnd), 3),
             ("short_body", lambda: attack_short_body(port, rnd), 2),
             ("stalled_reader", lambda: attack_stalled_reader(port, rnd, write_timeout_s), 1),
             ("slow_reader_1KBps", lambda: attack_slow_reader(port, rnd, slow_s, stop), 1),
             ("mcp_stalled_reader", lambda: attack_mcp_stalled(port, rnd, write_timeout_s), 1),
             ("sse_stalled_reader", lambda: attack_sse_stalled(port, rnd, write_timeout_s), 1)]
    # every kind once per round (in a random order), the frequent ones more often
    rounds = [k for k in kinds for _ in range(k[2])]
    while not stop.is_set():
        rnd.shuffle(rounds)
        for name, fn, _ in rounds:
            if stop.is_set():
                break
            attack_once(book, name, fn)
            stop.wait(rnd.uniform(0.1, 0.6))


def attack_once(book, name, fn):
    try:
        out = fn()
    except (OSError, http.client.HTTPException) as e:
        out = type(e).__name__
    book.add(book.attacks, (name, str(out)))


def fd_attack(port, book, hold_s, count):
    """Opens `count` idle connections (more than the gateway may hold) and keeps them until the
    gateway closes them (listen.read_timeout_ms) or `hold_s` passed."""
    socks, refused = [], 0
    for _ in range(count):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            socks.append(s)
        except OSError:
            refused += 1
            break
    log("fd attack: %d idle connections open" % len(socks))
    time.sleep(hold_s)
    for s in socks:
        s.close()
    book.add(book.attacks, ("fd_exhaustion_%d_conns" % len(socks), "held %.0f s" % hold_s))


# ---- the run ----

def warm(port, routes):
    for r in routes:
        for _ in range(40):
            try:
                a = call(port, "POST", "/retrieve/" + r, {"queries": ["water"], "topk": 1},
                         headers={"Authorization": "Bearer " + KEY_A})
                if a.status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.25)
        else:
            raise RuntimeError("route %s does not answer at start" % r)


def main():
    global T0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of traffic (default 600)")
    ap.add_argument("--short", action="store_true", help="the CI variant: 150 s, fewer workers")
    ap.add_argument("--workers", type=int, default=0, help="valid-traffic threads (default 8; 5 with --short)")
    ap.add_argument("--attackers", type=int, default=0, help="attack threads (default 4; 3 with --short)")
    ap.add_argument("--gateway-fds", type=int, default=1024, help="RLIMIT_NOFILE of the gateway (the fd attack opens more)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", help="write the report as JSON to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (gateway log)")
    args = ap.parse_args()
    if args.short and args.duration == 600.0:
        args.duration = 150.0
    workers = args.workers or (5 if args.short else 8)
    attackers = args.attackers or (3 if args.short else 4)
    args.build = os.path.abspath(args.build)
    os.environ["SG_BUILD_DIR"] = args.build
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fd_count = max(0, min(args.gateway_fds + 200, hard - 200))

    import sgtest
    from fake_upstream import FakeUpstream
    from fake_serper import FakeSerper
    plugins = set(os.listdir(os.path.join(args.build, "plugins")))
    tmp = tempfile.mkdtemp(prefix="sgsoak-")
    redis = sgtest.Redis()
    up = FakeUpstream(mode="slime")
    serper = FakeSerper(api_key=SERPER_KEY)
    qdrant = None
    if "sg_qdrant.so" in plugins:
        from fake_qdrant import FakeQdrant
        qdrant = FakeQdrant()
        with open(os.path.join(SOURCE, "tests", "fixtures", "e5-tiny", "golden.jsonl")) as f:
            for line in f:
                g = json.loads(line)
                qdrant.upsert(1000 + g["id"], g["embedding"], {"id": str(g["id"]), "contents": "\"%s\"\n%s" % (g["tag"], g["text"])})
    # the upstream hang: requests wait in the fake until it is released
    hang, hang_release = threading.Event(), threading.Event()
    up_app = up.server.app

    def hanging_app(req):
        if hang.is_set() and req.path == "/retrieve" and req.body and json.loads(req.body).get("queries"):
            hang_release.wait(120)
        return up_app(req)
    up.server.app = hanging_app

    cfg, index_what, skipped = make_config(args, tmp, redis.port, up, serper, qdrant, plugins)
    lim = limits_of(cfg)
    env = {"SOAK_KEY_A": KEY_A, "SOAK_KEY_B": KEY_B, "SOAK_KEY_X": KEY_X, "SOAK_ADMIN": ADMIN, "SOAK_SERPER_KEY": SERPER_KEY,
           "OMP_NUM_THREADS": "1"}
    nofile = min(args.gateway_fds, hard)  # hard: ours, which the gateway inherits

    def limit_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    gw = sgtest.Gateway(cfg, threads=2, env=env, config_dir=tmp, preexec_fn=limit_fds)
    pid, port = gw.proc.pid, gw.port
    routes = [b["name"] for b in cfg["backends"]]
    log("gateway pid %d on port %d; routes %s; BM25 on %s%s" % (pid, port, ", ".join(routes), index_what,
                                                              "; skipped: " + "; ".join(skipped) if skipped else ""))
    book, faults, stop_valid, stop_attack = Book(), Faults(), threading.Event(), threading.Event()
    report = {"ok": False}
    failed_checks = []
    try:
        warm(port, [r for r in routes if r != "bulk"])
        T0 = time.time()
        D = args.duration
        sampler = Sampler(pid)
        base = sampler.sample()
        sampler.start()
        rnd = random.Random(args.seed)
        pool = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 3))) for _ in range(300)]
        ctx = Ctx(port, pool)
        scen = [Valid("retrieve:" + r, 3 if r in ("wiki", "mock", "example") else 2, retrieve_scenario(r))
                for r in routes if r not in ("bulk",)]
        scen += [Valid("access:mock", 1, access_scenario("mock")), Valid("access:example", 1, access_scenario("example")),
                 Valid("mcp:tools/call", 2, mcp_scenario)]
        threads = [threading.Thread(target=valid_worker, args=(ctx, scen, book, faults, stop_valid, args.seed * 100 + i), daemon=True)
                   for i in range(workers)]
        for t in threads:
            t.start()
        # warm-up: the base the memory bound starts from, once every route was used
        time.sleep(min(10.0, 0.05 * D))
        base = sampler.sample()
        log("base: RSS %.1f MiB (anonymous %.1f MiB), %d fds" % (base[1] / MiB, base[2] / MiB, base[4]))
        attack_threads = [threading.Thread(target=attacker, args=(port, book, stop_attack, args.seed * 1000 + i, lim, 2.0,
                                                                   6.0 if args.short else 20.0), daemon=True)
                          for i in range(attackers)]
        for t in attack_threads:
            t.start()

        def at(frac):
            delay = T0 + frac * D - time.time()
            if delay > 0:
                time.sleep(delay)

        at(0.25)
        faults.event("Redis killed (SIGKILL)")
        faults.redis_down = True
        redis.proc.kill()
        redis.proc.wait()
        at(0.40)
        faults.event("Redis restarted")
        redis.start()
        faults.redis_down = False
        at(0.50)
        faults.event("the upstream hangs")
        faults.open("retrieve:up")
        hang_release.clear()
        hang.set()
        at(0.62)
        faults.event("the upstream answers again")
        hang.clear()
        hang_release.set()
        faults.close("retrieve:up", grace=5.0)
        at(0.75)
        faults.event("fd attack: %d idle connections" % fd_count)
        fd_attack(port, book, hold_s=4.0, count=fd_count)
        at(0.90)
        faults.event("attacks stop")
        stop_attack.set()
        for t in attack_threads:
            t.join(60)
        at(1.0)
        faults.event("valid traffic stops")
        stop_valid.set()
        for t in threads:
            t.join(60)
        t_quiet = time.time()
        time.sleep(max(4.0, 2 * 2.0 + 1))  # idle connections close (read_timeout_ms); drained calls end
        ms = metrics(port)
        t_end = time.time()
        time.sleep(3.0)
        sampler.sample()
        idle_cpu = sampler.cpu_rate(t_end, time.time())
        sampler.stop_ev.set()
        sampler.join(5)
        end = sampler.sample()
        # ---- checks ----
        peak_rss, peak_anon, peak_fds = sampler.peak(1), sampler.peak(2), sampler.peak(4)
        hwm = proc_status(pid).get("VmHWM", 0)
        bodies = 1 * 4 * lim["max_body_bytes"]  # one maximal body at a time (the attackers' max_size), parsed: ~4x
        allowance = 96 * MiB
        bound = base[2] + lim["l1"] + lim["inflight"] + bodies + allowance
        held = metric_sum(ms, "searchgate_response_bytes_held")
        inflight_q = metric_sum(ms, "searchgate_backend_inflight_queries")
        if book.failures:
            failed_checks.append("%d valid requests failed" % len(book.failures))
        if peak_anon > bound:
            failed_checks.append("peak anonymous RSS %.1f MiB over the bound %.1f MiB" % (peak_anon / MiB, bound / MiB))
        if held != 0:
            failed_checks.append("response memory still held at the end: %d bytes" % held)
        if inflight_q != 0:
            failed_checks.append("queries still in flight in a backend at the end: %d" % inflight_q)
        if end[4] > base[4] + 16:
            failed_checks.append("file descriptors did not come back: %d at the end, %d at the start" % (end[4], base[4]))
        if idle_cpu > 0.10:
            failed_checks.append("the idle gateway uses %.0f%% of a core" % (idle_cpu * 100))
        if book.redis_down_ok == 0:
            failed_checks.append("no valid request was served while Redis was down")
        if gw.proc.poll() is not None:
            failed_checks.append("the gateway died (exit %s)" % gw.proc.returncode)
        interesting = ["searchgate_response_write_timeouts_total", "searchgate_accept_paused_total",
                       "searchgate_response_budget_refused_total", "searchgate_response_budget_waits_total",
                       "searchgate_request_body_bytes_parsed_total", "searchgate_backend_floor_refused_total",
                       "searchgate_backend_upstream_http_drained_total", "searchgate_cache_hits_total",
                       "searchgate_cache_misses_total", "searchgate_fd_limit"]
        report = {
            "duration_s": D, "workers": workers, "attackers": attackers, "bm25": index_what, "skipped": skipped,
            "limits": lim,
            "rss": {"base_mib": round(base[1] / MiB, 1), "base_anon_mib": round(base[2] / MiB, 1),
                    "peak_mib": round(peak_rss / MiB, 1), "peak_anon_mib": round(peak_anon / MiB, 1),
                    "hwm_mib": round(hwm / MiB, 1), "end_mib": round(end[1] / MiB, 1),
                    "bound_anon_mib": round(bound / MiB, 1),
                    "bound_is": "base anon + cache.l1_bytes + limits.max_response_bytes_inflight + 4 x limits.max_body_bytes + 96 MiB"},
            "cpu": {"mean_cores": round(sampler.cpu_rate(T0, t_quiet), 2), "peak_cores_2s": round(sampler.cpu_peak(), 2),
                    "idle_cores": round(idle_cpu, 3)},
            "fds": {"base": base[4], "peak": peak_fds, "end": end[4], "limit": nofile},
            "series": sampler.series(T0, time.time()),
            "valid": {"%s %s" % k: v for k, v in sorted(book.valid.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))},
            "expected_under_fault": {"%s %s" % k: v for k, v in sorted(book.expected.items(), key=lambda kv: str(kv[0]))},
            "served_while_redis_down": book.redis_down_ok, "retries": book.retries,
            "retried_attempts": {"%s %s" % k: v for k, v in sorted(book.attempts.items(), key=lambda kv: str(kv[0]))},
            "attacks": {"%s -> %s" % k: v for k, v in sorted(book.attacks.items())},
            "failures": book.failures[:50], "n_failures": len(book.failures),
            "refused_before_routing": {k: v for k, v in ms.items() if k.startswith("searchgate_http_refused_total")},
            "too_large": {k: v for k, v in ms.items() if k.startswith("searchgate_response_too_large_total")},
            "metrics": {n: metric_sum(ms, n) for n in interesting},
            "timeline": faults.timeline,
            "failed_checks": failed_checks,
        }
    except Exception:  # noqa: BLE001 - reported, and the run fails
        failed_checks.append("the soak itself failed:\n" + traceback.format_exc())
        report["failed_checks"] = failed_checks
    finally:
        stop_attack.set()
        stop_valid.set()
        hang_release.set()
        try:
            text = gw.stop(check=False)
            bad = [m for m in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer") if m in text]
            if gw.proc.returncode != 0 or bad:
                failed_checks.append("unclean shutdown: exit %s %s" % (gw.proc.returncode, bad))
            if args.keep:
                with open(os.path.join(tmp, "searchgate.log"), "w") as f:
                    f.write(text)
        except AssertionError as e:
            failed_checks.append(str(e)[:2000])
        for f in (up, serper) + ((qdrant,) if qdrant else ()):
            f.stop()
        redis.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    report["failed_checks"] = failed_checks
    report["ok"] = not failed_checks
    print_report(report)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if report["ok"] else 1


def print_report(r):
    print("\n==== searchgate soak report ====")
    if "rss" in r:
        print("duration %.0f s, %d valid workers, %d attackers, BM25 on %s%s" % (
            r["duration_s"], r["workers"], r["attackers"], r["bm25"], ("; skipped " + "; ".join(r["skipped"])) if r["skipped"] else ""))
        x = r["rss"]
        print("RSS: base %.1f MiB (anon %.1f), peak %.1f MiB (anon %.1f; bound %.1f = %s), VmHWM %.1f, end %.1f" % (
            x["base_mib"], x["base_anon_mib"], x["peak_mib"], x["peak_anon_mib"], x["bound_anon_mib"], x["bound_is"], x["hwm_mib"],
            x["end_mib"]))
        c = r["cpu"]
        print("CPU: mean %.2f cores, peak %.2f cores (2 s), idle at the end %.3f cores" % (c["mean_cores"], c["peak_cores_2s"],
                                                                                             c["idle_cores"]))
        f = r["fds"]
        print("fds: base %d, peak %d, end %d (limit %d)" % (f["base"], f["peak"], f["end"], f["limit"]))
        print("timeline: " + "; ".join(r["timeline"]))
        print("over time (s: RSS MiB / anonymous MiB / fds / cores): " +
              ", ".join("%.0f: %.0f/%.0f/%d/%.2f" % p for p in r["series"]))
        print("valid requests (scenario status: count):")
        for k, v in r["valid"].items():
            print("  %-28s %d" % (k, v))
        if r["expected_under_fault"]:
            print("failed inside their fault window (the upstream hang), not counted as failures:")
            for k, v in r["expected_under_fault"].items():
                print("  %-28s %d" % (k, v))
        print("served while Redis was down: %d; retries: %d" % (r["served_while_redis_down"], r["retries"]))
        if r["retried_attempts"]:
            print("attempts that failed and were retried, as RL clients do (scenario status: count):")
            for k, v in r["retried_attempts"].items():
                print("  %-28s %d" % (k, v))
        print("attacks (kind -> outcome: count):")
        for k, v in r["attacks"].items():
            print("  %-50s %d" % (k, v))
        for k, v in list(r["refused_before_routing"].items()) + list(r["too_large"].items()) + list(r["metrics"].items()):
            print("  %s %g" % (k, v))
        if r["failures"]:
            print("FAILED valid requests (%d, first %d):" % (r["n_failures"], len(r["failures"])))
            for x in r["failures"]:
                print("  ", x)
    print("RESULT:", "PASS" if r["ok"] else "FAIL")
    for c in r.get("failed_checks", []):
        print("  -", c)


if __name__ == "__main__":
    sys.exit(main())
