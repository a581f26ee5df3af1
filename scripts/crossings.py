#!/usr/bin/python3
"""Counts how often one request's data enters each source file: the "crossings" of
docs/architecture.md ("Following one request").

Starts a searchgate of the build under `gdb -batch` on a free port, puts a breakpoint that never
stops on every function that the debug information places in a file of the named folders
(default: gateway/ and cache/; static and inlined functions included), waits until the gateway
answers /health, then counts, while exactly one request is in the gateway, every entry into a
function whose caller's frame lies in another file (another folder's, a library's, a thread's
start: anything but the same file), from the entry into the /retrieve handler (--from) until
--settle seconds after the answer arrived. Calls made by the loop's own iteration (loop_main:
it refreshes the loop's generation every turn, request or not) are listed apart (--not-from). A call through a function pointer counts like a direct call:
a continuation that dispatch.c calls into query.c is an entry into query.c. Prints the entries
per file, most first, split into direct calls and callbacks (an entry through a function pointer:
a continuation the file handed to the step it called, an h2o receiver or dispose callback it
registered -- told apart by the call instruction before the return address, x86-64 only);
--detail also prints each entry as callee <- caller.

With no --config it serves the example plugin (one route, one loop thread, no Redis, no budget),
and the request (default: one query, topk 3) misses L1, so the walk goes to the plugin and back.
--with-redis walks that configuration a second time with cache.redis, on an empty redis-server
the script starts on a free loopback port (so the request misses Redis too, and its result is
written there); the report covers both walks, and the Redis walk must have written the value.
The counts depend on what the compiler inlined: compare builds of the same type. A tail call
hides its caller's frame (the entry is then counted from the caller's caller, often in another
file), so measure a RelWithDebInfo build configured with -fno-optimize-sibling-calls; the report
warns when the binary was not:

    cmake -S . -B build-xing -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-fno-optimize-sibling-calls
    cmake --build build-xing --target searchgate sg_example
    scripts/crossings.py --build build-xing --detail

    scripts/crossings.py                              # build/, the example route
    scripts/crossings.py --build /work/wt/base/build --detail
    scripts/crossings.py --config my.json --body '{"queries": ["q"], "topk": 5}'
    scripts/crossings.py --build build-xing --max-direct 2   # the check (CTest lint_crossings)
    scripts/crossings.py --build build-xing --max-direct 2 --with-redis /usr/bin/redis-server   # and with Redis

Needs gdb (and, for --with-redis, redis-server). Exit status 0, or 1 when the gateway or Redis did
not start or gdb failed, or with --max-direct when a file was entered by more direct calls than
that in either walk (or the binary keeps sibling calls, whose counts mean nothing for it, or the
Redis walk wrote nothing to Redis).
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

DOCS = [
    {"id": "0", "contents": "\"Hamlet\"\nHamlet is a tragedy written by William Shakespeare around 1600."},
    {"id": "1", "contents": "\"Paris\"\nParis is the capital and largest city of France."},
    {"id": "2", "contents": "\"Redis\"\nRedis is an in-memory data store used as a cache."},
]

# Runs inside gdb (its Python). Settings come through the environment.
GDB_SCRIPT = r'''
import gdb, json, os, re
ROOT = os.environ["XING_ROOT"]
FOLDERS = [f.strip("/") + "/" for f in os.environ["XING_FOLDERS"].split(",")]
FLAG = os.environ["XING_FLAG"]
OUT = os.environ["XING_OUT"]
START = os.environ["XING_FROM"]
NOT_FROM = set(x for x in os.environ["XING_NOT_FROM"].split(",") if x)
entries = {}
state = {"armed": False}

def rel(path):
    if path is None:
        return None
    p = os.path.realpath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + "/") else p

def watched(path):
    return path is not None and any(path.startswith(f) for f in FOLDERS)

class Entry(gdb.Breakpoint):
    def __init__(self, source, function):
        super().__init__(source=source, function=function, internal=True)
        self.file = rel(source)
        self.fn = function

    def stop(self):
        if not state["armed"]:
            if self.fn != START or not os.path.exists(FLAG):
                return False
            state["armed"] = True
        elif not os.path.exists(FLAG):
            return False
        f = gdb.newest_frame()
        caller = f.older()
        cfile, cfn = None, None
        if caller is not None:
            sal = caller.find_sal()
            cfile = rel(sal.symtab.filename) if sal.symtab is not None else None
            cfn = caller.name()
        if cfn in NOT_FROM:
            cfile, cfn = "(not counted)", cfn
        if cfile != self.file:
            how = "callback"
            if caller is not None:  # x86-64: a direct call is `call rel32` (E8), 5 bytes before the return address
                try:
                    if bytes(gdb.selected_inferior().read_memory(caller.pc() - 5, 1))[0] == 0xE8:
                        how = "direct"
                except gdb.error:
                    pass
            key = (self.file, self.fn, cfile or "?", cfn or "?", how)
            entries[key] = entries.get(key, 0) + 1
        return False

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set print thread-events off")
gdb.execute("set print inferior-events off")
for sig in ("SIGTERM", "SIGINT", "SIGPIPE", "SIGUSR1", "SIGUSR2", "SIGHUP"):
    gdb.execute("handle %s nostop noprint pass" % sig)
listing = gdb.execute("info functions -n", to_string=True)
current, seen, n = None, set(), 0
for line in listing.splitlines():
    m = re.match(r"^File (.*):$", line)
    if m:
        current = m.group(1) if watched(rel(m.group(1))) else None
        continue
    if current is None:
        continue
    m = re.match(r"^\d+:\s+(.*)$", line)
    if not m:
        continue
    name = re.search(r"(\w+)\(", m.group(1))
    if name is None or (current, name.group(1)) in seen:
        continue
    seen.add((current, name.group(1)))
    try:
        Entry(current, name.group(1))
        n += 1
    except gdb.error:
        pass
print("crossings: %d functions watched" % n, flush=True)
gdb.execute("run")
with open(OUT, "w") as fp:
    json.dump([list(k) + [v] for k, v in entries.items()], fp)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=2):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.status, r.read()


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body.encode(),
                                 headers={"Content-Type": "application/json", "Connection": "close"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def inferior_pid(gdb_pid):
    """The gateway: gdb's child (gdb forks it through a shell or directly)."""
    try:
        with open("/proc/%d/task/%d/children" % (gdb_pid, gdb_pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return None
    for k in kids:
        try:
            with open("/proc/%d/comm" % k) as f:
                if f.read().strip() == "searchgate":
                    return k
        except OSError:
            pass
    return kids[0] if kids else None


def wait_ready(port, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if get(port, "/health")[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def resp(port, *args):
    """One Redis command on a connection of its own; the reply: an int, bytes, str, or None (nil)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        f = s.makefile("rb")
        line = f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:n]
        if kind in (b"+", b"-"):
            return rest.decode()
        raise RuntimeError("unexpected Redis reply %r" % line)


class RedisServer:
    """An empty redis-server on a free loopback port, no persistence (like the test suites')."""

    def __init__(self, exe, work):
        self.port = free_port()
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", work, "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if resp(self.port, "PING") == "PONG":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server (%s) did not start" % exe)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def measure(args, work, redis_port=None):
    port = free_port()
    config = args.config
    if config is None:
        config = os.path.join(work, "gateway.json")
        conf = {"listen": {"host": "127.0.0.1", "port": port}, "threads": 1,
                "backends": [{"name": "example", "plugin": "example", "config": {"documents": DOCS}}]}
        if redis_port is not None:
            conf["cache"] = {"redis": {"host": "127.0.0.1", "port": redis_port, "timeout_ms": 1000}}
        with open(config, "w") as f:
            json.dump(conf, f)
    script = os.path.join(work, "count.py")
    with open(script, "w") as f:
        f.write(GDB_SCRIPT)
    env = dict(os.environ, XING_ROOT=ROOT, XING_FROM=args.start, XING_NOT_FROM=",".join(args.not_from), XING_FOLDERS=",".join(args.folders), XING_FLAG=os.path.join(work, "counting"),
               XING_OUT=os.path.join(work, "entries.json"))
    log = open(os.path.join(work, "gdb.log"), "w")
    cmd = ["gdb", "-batch", "-nx", "-x", script, "--args", os.path.join(args.build, "searchgate"), "--config", config,
           "--port", str(port), "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        if not wait_ready(port, proc, args.start_timeout):
            raise RuntimeError("the gateway did not answer /health")
        open(env["XING_FLAG"], "w").close()
        status, body = post(port, args.path, args.body)
        time.sleep(args.settle)  # the request's release after the answer went out
        os.unlink(env["XING_FLAG"])
        pid = inferior_pid(proc.pid)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    if not os.path.exists(env["XING_OUT"]):
        raise RuntimeError("gdb wrote no counts")
    with open(env["XING_OUT"]) as f:
        return status, body, [tuple(e) for e in json.load(f)]


def sibling_calls_kept(build):
    """Whether the binary was compiled with -fno-optimize-sibling-calls (DW_AT_producer, which GCC
    records by default): without it a tail call hides its caller's frame and is counted from the
    caller's caller, in another file."""
    try:
        info = subprocess.run(["readelf", "--debug-dump=info", os.path.join(build, "searchgate")], capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return "-fno-optimize-sibling-calls" in info


def report(status, body, entries, detail, build, max_direct=None, title=None):
    if title is not None:
        print("== %s" % title)
    print("request: HTTP %d, %d bytes" % (status, len(body)))
    kept = sibling_calls_kept(build)
    if kept is False:
        print("warning: %s/searchgate was built with sibling-call optimisation: each tail call is counted from its "
              "caller's caller (configure with -DCMAKE_C_FLAGS=-fno-optimize-sibling-calls, see the docstring)" % build)
    per_file, skipped = {}, 0
    for file, fn, cfile, cfn, how, n in entries:
        if cfile == "(not counted)":
            skipped += n
            continue
        d, c = per_file.get(file, (0, 0))
        per_file[file] = (d + n, c) if how == "direct" else (d, c + n)
    print("%-36s %7s %7s %9s" % ("file", "entries", "direct", "callbacks"))
    for file, (d, c) in sorted(per_file.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
        print("%-36s %7d %7d %9d" % (file, d + c, d, c))
        if detail:
            for e in sorted((e for e in entries if e[0] == file and e[2] != "(not counted)"), key=lambda e: (e[4], -e[5], e[1])):
                print("    %3d  %-8s %s <- %s (%s)" % (e[5], e[4], e[1], e[3], e[2]))
    over = sorted((f, d) for f, (d, _) in per_file.items() if max_direct is not None and d > max_direct)
    for f, d in over:
        print("crossings: %s entered by %d direct calls, over %d" % (f, d, max_direct))
    total_d = sum(d for d, _ in per_file.values())
    total_c = sum(c for _, c in per_file.values())
    print("total %d (%d direct calls, %d callbacks); not counted: %d entries called by %s" %
          (total_d + total_c, total_d, total_c, skipped,
           ", ".join(sorted(set(e[3] for e in entries if e[2] == "(not counted)"))) or "-"))
    if max_direct is not None and kept is not True:
        print("crossings: --max-direct needs a binary built with -fno-optimize-sibling-calls")
        return 1
    return 1 if over else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with searchgate (default build/)")
    ap.add_argument("--config", help="gateway config (default: the example plugin, one loop, no Redis)")
    ap.add_argument("--from", dest="start", default="sg_retrieve_handle",
                    help="function that opens the count, once the request is sent (default: the /retrieve handler)")
    ap.add_argument("--not-from", nargs="*", default=["loop_main"],
                    help="callers whose calls are not the request's (default: loop_main, the loop's own iteration)")
    ap.add_argument("--folders", nargs="+", default=["gateway", "cache"], help="source folders watched")
    ap.add_argument("--path", default="/retrieve")
    ap.add_argument("--body", default=json.dumps({"queries": ["capital of France"], "topk": 3, "return_scores": True}))
    ap.add_argument("--settle", type=float, default=0.5, help="seconds counted after the answer (default 0.5)")
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--detail", action="store_true", help="each entry: callee <- caller (caller's file)")
    ap.add_argument("--max-direct", type=int, metavar="N",
                    help="exit 1 when a file is entered by more than N direct calls (a check; needs a build with "
                         "-fno-optimize-sibling-calls)")
    ap.add_argument("--with-redis", metavar="REDIS_SERVER",
                    help="also walk the default configuration with cache.redis, on an empty redis-server (this "
                         "executable) started on a free loopback port")
    args = ap.parse_args()
    if args.with_redis is not None and args.config is not None:
        ap.error("--with-redis walks the default configuration; for another one, put cache.redis in --config")
    rc = walk(args, None)
    if args.with_redis is not None:
        print()
        rc = walk(args, args.with_redis) or rc
    return rc


def walk(args, redis_exe):
    """One walk (with Redis when `redis_exe` is set): measures, checks, prints. Exit status."""
    with tempfile.TemporaryDirectory(prefix="sg-crossings-") as work:
        redis = None
        try:
            redis = RedisServer(redis_exe, work) if redis_exe is not None else None
            status, body, entries = measure(args, work, redis.port if redis is not None else None)
            written = resp(redis.port, "DBSIZE") if redis is not None else None
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            if os.path.exists(os.path.join(work, "gdb.log")):
                with open(os.path.join(work, "gdb.log")) as f:
                    sys.stderr.write(f.read()[-4000:])
            sys.stderr.write("crossings: %s\n" % e)
            return 1
        finally:
            if redis is not None:
                redis.stop()
    title = ("with Redis (cache.redis, empty: the request misses it; %d value%s written)" %
             (written, "" if written == 1 else "s")) if redis_exe is not None else None
    if args.max_direct is not None and status != 200:
        print("crossings: the request was answered %d, not 200: the walk did not reach the backend" % status)
        return 1
    rc = report(status, body, entries, args.detail, args.build, args.max_direct, title)
    if redis_exe is not None and args.max_direct is not None and not written:
        print("crossings: the walk with Redis wrote nothing to Redis: it did not cover the Redis store")
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
