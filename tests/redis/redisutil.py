"""Real Redis deployments for the tests of tests/redis/: redis-server with a config file (ACL users,
passwords, replication), redis-sentinel, and stunnel, each on a free loopback port in a temporary
directory, with a small RESP client that authenticates.

Standard library only; run by Debian's /usr/bin/python3 (sgtest.py is on PYTHONPATH).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from sgtest import _resp, free_port

# The commands the gateway sends, as docs/operations.md ("Redis in production") grants them to its
# ACL user: the tests run the gateway as exactly this user, so a command missing here fails them.
GATEWAY_ACL = ("-@all +ping +select +role +get +mget +set +eval "
               "+time +exists +hget +hset +hincrby +expireat")
# What the gateway needs on a sentinel.
SENTINEL_ACL = "-@all +auth +sentinel|get-master-addr-by-name +subscribe &+switch-master"


def resp(port, *args, user=None, password=None, timeout=5):
    """One command on a fresh connection (after AUTH when a password is given); returns the reply,
    raises RuntimeError on an error reply and OSError when nothing answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        cmds = []
        if password is not None:
            cmds.append(("AUTH", user, password) if user is not None else ("AUTH", password))
        cmds.append(args)
        out = b""
        for c in cmds:
            out += b"*%d\r\n" % len(c)
            for a in c:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        reply = None
        for _ in cmds:
            reply = _resp(f)
        return reply


class Server:
    """A redis-server (or, with sentinel=True, a redis-sentinel) from config lines."""

    def __init__(self, lines=(), port=None, sentinel=False, admin=None, tunnel=None):
        """`tunnel(port)`, when given, makes the plain-RESP way in to a TLS-only server (an object
        with .port and .close()); the tests' own commands go through it."""
        self.port = port or free_port()
        self.tunnel = tunnel(self.port) if tunnel is not None else None
        self.dir = tempfile.mkdtemp(prefix="sgredis-")
        self.sentinel = sentinel
        self.admin = admin  # (user, password) the tests use, or None
        self.lines = ["port %d" % self.port, "bind 127.0.0.1", "daemonize no", "dir %s" % self.dir,
                      "logfile %s" % os.path.join(self.dir, "server.log")]
        if not sentinel:
            self.lines += ['save ""', "appendonly no"]
        self.lines += list(lines)
        self.proc = None
        self.start()

    def start(self):
        conf = os.path.join(self.dir, "server.conf")
        with open(conf, "w") as f:  # sentinels rewrite their file: it is written once per start
            f.write("\n".join(self.lines) + "\n")
        if self.sentinel:
            exe = shutil.which("redis-sentinel")
            argv = [exe, conf] if exe else [shutil.which("redis-server") or "/usr/bin/redis-server", conf, "--sentinel"]
        else:
            argv = [shutil.which("redis-server") or "/usr/bin/redis-server", conf]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except (OSError, RuntimeError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("%s did not start:\n%s" % (argv, self.log()[-3000:]))

    def cmd(self, *args, **kw):
        """A command as the admin user. A connection the server drops (a sentinel promoting or
        demoting it kills its clients) is retried once; an error reply raises RuntimeError."""
        if self.admin is not None and "password" not in kw:
            kw["user"], kw["password"] = self.admin
        port = self.tunnel.port if self.tunnel is not None else self.port
        for attempt in (0, 1):
            try:
                return resp(port, *args, **kw)
            except OSError:
                if attempt == 1 or self.proc is None or self.proc.poll() is not None:
                    raise
        return None

    def log(self):
        try:
            with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill(self):
        """SIGKILL: the way a crashed host looks to its clients and sentinels."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        if self.tunnel is not None:
            self.tunnel.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Subscriber:
    """Watches a channel (on a sentinel: +switch-master) from a thread; `first` is the time the
    first message arrived, or None."""

    def __init__(self, port, channel, user=None, password=None):
        self.first = None
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")
        out = b""
        cmds = ([("AUTH", user, password) if user else ("AUTH", password)] if password else []) + [("SUBSCRIBE", channel)]
        for c in cmds:
            out += b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in c)
        self.sock.sendall(out)
        for _ in cmds:
            _resp(self.f)  # +OK, then the subscribe confirmation
        self.sock.settimeout(None)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            while True:
                m = _resp(self.f)
                if isinstance(m, list) and m and m[0] == b"message" and self.first is None:
                    self.first = time.time()
        except (OSError, ValueError):
            pass

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class DelayProxy:
    """A TCP proxy on loopback that holds each new connection's traffic for `delay` seconds before
    relaying it: a Redis that is slow to answer a new connection (a distant or loaded server)."""

    def __init__(self, upstream_port, delay):
        self.upstream_port = upstream_port
        self.delay = delay
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.socks = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        time.sleep(self.delay)
        try:
            u = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            c.close()
            return
        self.socks += [c, u]
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


def wait_for(pred, timeout=10.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if pred():
                return True
        except (OSError, RuntimeError, AssertionError):
            pass
        time.sleep(interval)
    return False


def searchgate_check(config_path, env=None):
    """Runs `searchgate --check`; returns (exit status, stdout, stderr)."""
    from sgtest import binary
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([binary("searchgate"), "--config", config_path, "--check", "--port", "0"], capture_output=True, text=True,
                       env=e, timeout=120)
    return p.returncode, p.stdout, p.stderr
