"""Helpers for searchgate's integration tests: start the real binaries (searchgate, redis-server)
on free loopback ports, talk HTTP to them with the standard library, and stop them cleanly.

Tests run with Debian's /usr/bin/python3 and the standard library only. The build directory
comes from $SG_BUILD_DIR (CTest sets it).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

BUILD_DIR = os.environ.get("SG_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures")
SANITIZED = os.environ.get("SG_SANITIZED", "0") == "1"


def binary(name):
    return os.path.join(BUILD_DIR, name)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scaled(seconds):
    """Timeouts for waiting on things: sanitizer builds run several times slower."""
    return seconds * (4 if SANITIZED else 1)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.body[:300])


def request(port, method, path, body=None, headers=None, timeout=60, host="127.0.0.1"):
    """One request on a fresh connection. `body` may be bytes, str or a JSON-able object."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return Response(r.status, r.getheaders(), r.read())
    finally:
        conn.close()



def wait_for(pred, timeout=10.0):
    """True once pred() holds, polled every 20 ms for `timeout` (scaled) seconds, else pred()'s last answer."""
    end = time.time() + scaled(timeout)
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()

class Gateway:
    """A searchgate process on a free port, with a config given as a dict."""

    def __init__(self, config, threads=2, extra_args=(), env=None, config_dir=None, expect_fail=False, preexec_fn=None,
                 port_arg=True):
        self.dir = tempfile.mkdtemp(prefix="sgtest-")
        self.config = dict(config)
        self.config.setdefault("listen", {"host": "127.0.0.1", "port": 0})
        self.config.setdefault("threads", threads)
        self.config_path = os.path.join(config_dir or self.dir, "gateway-%d.json" % os.getpid())
        with open(self.config_path, "w") as f:
            json.dump(self.config, f)
        self.log_path = os.path.join(self.dir, "searchgate.log")
        self.log = open(self.log_path, "wb")
        e = dict(os.environ)
        e.setdefault("LSAN_OPTIONS", "suppressions=" + os.path.join(SOURCE_DIR, "tests", "lsan.supp"))
        e.update(env or {})
        # port_arg: "--port 0" (a free port for the first TCP listener; one is added to a config
        # that only has a Unix domain socket)
        self.proc = subprocess.Popen([binary("searchgate"), "--config", self.config_path] + (["--port", "0"] if port_arg else []) +
                                     list(extra_args), stdout=self.log, stderr=subprocess.STDOUT, env=e, preexec_fn=preexec_fn)
        self.port = None
        self.metrics_headers = None  # the key /metrics needs when keys are in use (clients.admin_key_env, require_key)
        if expect_fail:
            return
        deadline = time.time() + scaled(30)
        started = False
        while time.time() < deadline:
            text = self.read_log()
            m = re.search(r"listening on (http://[^:]+:(\d+)|unix:)", text)  # the first listener; unix: for a socket only
            if m:
                self.port = int(m.group(2)) if m.group(2) else None
                started = True
                break
            if self.proc.poll() is not None:
                raise RuntimeError("searchgate exited with %s:\n%s" % (self.proc.returncode, text))
            time.sleep(0.02)
        if not started:
            self.proc.kill()
            raise RuntimeError("searchgate did not start:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_log(self, needle, timeout=5):
        """The log once it holds `needle`: lines logged by another loop or a timer come a little
        after the request that caused them. Fails after `timeout` (scaled) seconds."""
        deadline = time.time() + scaled(timeout)
        while True:
            text = self.read_log()
            if needle in text:
                return text
            if time.time() > deadline:
                raise AssertionError("%r not logged within %.1f s:\n%s" % (needle, scaled(timeout), text))
            time.sleep(0.01)

    def wait_exit(self, timeout=30):
        try:
            return self.proc.wait(timeout=scaled(timeout))
        finally:
            self.log.close()

    def post(self, path, body, headers=None, timeout=60):
        return request(self.port, "POST", path, body, headers, timeout)

    def get(self, path, headers=None, timeout=60):
        return request(self.port, "GET", path, None, headers, timeout)

    def retrieve(self, queries, topk=3, return_scores=True, path="/retrieve", headers=None, **extra):
        body = {"queries": queries, "topk": topk, "return_scores": return_scores}
        body.update(extra)
        return self.post(path, body, headers)

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        r = self.get("/metrics", headers=self.metrics_headers)
        if r.status != 200:
            raise AssertionError("GET /metrics: %r" % r)
        text = r.body.decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
            if all(got.get(k) == str(v) for k, v in labels.items()):
                total += float(m.group(4))
        return total

    def stop(self, check=True):
        """SIGTERM, wait, and (by default) require a clean exit without sanitizer reports."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("searchgate did not stop on SIGTERM:\n" + self.read_log()[-4000:])
        finally:
            self.log.close()
        text = self.read_log()
        if check:
            bad = [m for m in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer") if m in text]
            if rc != 0 or bad:
                raise AssertionError("searchgate exited with %d %s:\n%s" % (rc, bad, text[-6000:]))
        shutil.rmtree(self.dir, ignore_errors=True)
        return text


class Redis:
    """A throwaway redis-server on a free loopback port."""

    def __init__(self, port=None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="sgredis-")
        self.start()

    def start(self):
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", self.dir, "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if self.command("PING") == "PONG":
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def command(self, *args):
        """Minimal RESP client: sends one command, returns the parsed reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            f = s.makefile("rb")
            return _resp(f)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _resp(f):
    line = f.readline()
    if not line:
        raise OSError("connection closed")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [_resp(f) for _ in range(n)]
    raise OSError("bad reply %r" % line)


def parallel(fn, args_list, threads=None):
    """Runs fn(*args) for each args in parallel threads; returns results in order (re-raises errors)."""
    results = [None] * len(args_list)
    errors = []

    def run(i, a):
        try:
            results[i] = fn(*a)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return results


DOCS = [
    {"id": "0", "contents": "\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "1", "contents": "\"Paris\"\nParis is the capital and largest city of France."},
    {"id": "2", "contents": "\"Tokyo\"\nTokyo is the capital of Japan. 東京都"},
    {"id": "3", "contents": "\"FAISS\"\nFAISS is a library for efficient similarity search of dense vectors."},
    {"id": "4", "contents": "\"Redis\"\nRedis is an in-memory data store used as a cache."},
    {"id": "5", "contents": "\"Zürich\"\nZürich is the largest city in Switzerland."},
]


def example_backend(name="example", **cfg):
    """A backend entry for the example plugin; keyword args go into its config, route keys are lifted."""
    route = {k: cfg.pop(k) for k in list(cfg) if k in ("topk", "timeout_ms", "max_inflight", "max_queue", "chunk", "cache",
                                                         "cache_ttl_s", "fallback")}
    config = {"documents": DOCS}
    config.update(cfg)
    entry = {"name": name, "plugin": "example", "config": config}
    entry.update(route)
    return entry


def main():
    unittest.main(verbosity=2)
