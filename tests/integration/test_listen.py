"""Listening the way clusters need it (issue 20, item 3), with the real binary:

* `listen.port: 0` takes a free port that every loop's SO_REUSEPORT listener shares, and
  `--address-file` / `listen.address_file` publish `host:port` atomically once the gateway serves,
  removed on exit (a SLURM job or an RLinf/ASearcher worker reads it instead of guessing);
* `listen.unix` serves on a Unix domain socket (curl --unix-socket), beside or instead of TCP;
* several `listen` entries (the array form) all serve, each under its own Host/Origin rules and
  h2c setting (the connection gate knows which listener a connection came through, on its first
  request and on the later ones h2o reads); a Unix domain socket's peer has no address: Host is not
  restricted there unless the entry lists allowed_hosts, and an anonymous client is the user its
  process runs as ("uid:N");
* sd_notify: a test-owned NOTIFY_SOCKET datagram socket receives READY=1 (after the address file
  exists and the port accepts), WATCHDOG=1 pings, RELOADING=1 ... READY=1 around a SIGHUP reload
  (applied or refused), then STOPPING=1 and nothing after it;
* shutdown_drain_ms: /health answers 503 "draining" while requests are still served.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend, request


def tcp_listeners(port):
    """Listening TCP sockets on `port` (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    n = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    n += 1
    return n


def curl_unix(path, url, data=None):
    """(status, body) of one request over the Unix domain socket `path`, with curl."""
    cmd = ["curl", "-s", "--max-time", "20", "--unix-socket", path, "-o", "-", "-w", "\n%{http_code}", url]
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(data)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    body, _, code = out.rpartition("\n")
    return int(code or 0), body


def raw_request(sock_or_port, host, path="/retrieve", body=b'{"queries":["paris"],"topk":1}', ip="127.0.0.1"):
    """(status, body) of one HTTP/1.1 request with this Host, over TCP (a port) or a Unix socket (a path)."""
    if isinstance(sock_or_port, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_or_port)
    else:
        s = socket.create_connection((ip, sock_or_port))
    with s:
        s.settimeout(sgtest.scaled(20))
        s.sendall(b"POST %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (path.encode(), host.encode(), len(body), body))
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest.decode("utf-8", "replace")


def listener_ports(gw, n):
    """The ports of the first `n` TCP listeners, from the log's "listening on" line."""
    line = gw.read_log().split("listening on ", 1)[1].split(" (", 1)[0]
    return [int(u.rsplit(":", 1)[1]) for u in line.split(", ") if u.startswith("http://")][:n]


def run_once(cfg, *args, timeout=60):
    """Runs the gateway with `cfg` and no --port; returns (exit status, output) of a start that must fail."""
    d = tempfile.mkdtemp(prefix="sglisten-")
    try:
        path = os.path.join(d, "gw.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([sgtest.binary("searchgate"), "--config", path] + list(args), capture_output=True, text=True,
                           timeout=sgtest.scaled(timeout))
        return p.returncode, p.stdout + p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Port0AndAddressFile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgaddr-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_address_file_written_when_ready_and_removed_on_exit(self):
        path = os.path.join(self.dir, "searchgate.addr")
        gw = Gateway({"backends": [example_backend()], "listen": {"host": "127.0.0.1", "port": 0}}, threads=3,
                     extra_args=["--address-file", path])
        try:
            with open(path) as f:
                text = f.read()
            self.assertEqual(text, "127.0.0.1:%d" % gw.port)
            # the kernel's port is shared by all three loops' SO_REUSEPORT listeners, and nothing else
            self.assertEqual(tcp_listeners(gw.port), 3)
            # written atomically: no temporary file is left beside it
            self.assertEqual(os.listdir(self.dir), ["searchgate.addr"])
            host, port = text.strip().rsplit(":", 1)
            r = request(int(port), "POST", "/retrieve", {"queries": ["paris"], "topk": 1}, host=host)
            self.assertEqual(r.status, 200, r)
            self.assertIn("address 127.0.0.1:%d written to %s" % (gw.port, path), gw.read_log())
        finally:
            gw.stop()
        self.assertFalse(os.path.exists(path), "the address file outlived the gateway")

    def test_config_key_relative_to_the_config_file(self):
        gw = Gateway({"backends": [example_backend()], "listen": {"port": 0, "address_file": "addr"}})
        path = os.path.join(gw.dir, "addr")
        try:
            with open(path) as f:
                self.assertEqual(f.read(), "127.0.0.1:%d" % gw.port)
        finally:
            gw.stop()
        self.assertFalse(os.path.exists(path))

    def test_address_file_of_another_gateway_is_left_alone(self):
        """A second gateway (or a restarted job) that wrote the same file after us owns it now."""
        path = os.path.join(self.dir, "addr")
        gw = Gateway({"backends": [example_backend()]}, extra_args=["--address-file", path])
        try:
            with open(path + ".new", "w") as f:
                f.write("10.1.2.3:8000")
            os.rename(path + ".new", path)
        finally:
            gw.stop()
        with open(path) as f:
            self.assertEqual(f.read(), "10.1.2.3:8000")

    def test_unwritable_address_file_fails_start_up(self):
        missing = os.path.join(self.dir, "no-such-dir", "addr")
        rc, out = run_once({"backends": [example_backend()]}, "--port", "0", "--address-file", missing)
        self.assertEqual(rc, 1, out)
        self.assertIn("address file %s: the directory %s does not exist" % (missing, os.path.dirname(missing)), out)
        self.assertNotIn("listening on", out)

    def test_ready_means_serving(self):
        """The moment the file appears, its address answers (it is written after every loop serves)."""
        path = os.path.join(self.dir, "addr")
        gw = Gateway({"backends": [example_backend()]}, extra_args=["--address-file", path], expect_fail=True)
        try:
            deadline = time.time() + sgtest.scaled(30)
            while not os.path.exists(path):
                self.assertIsNone(gw.proc.poll(), gw.read_log())
                self.assertLess(time.time(), deadline, "no address file:\n" + gw.read_log())
                time.sleep(0.005)
            with open(path) as f:
                host, port = f.read().strip().rsplit(":", 1)
            self.assertEqual(request(int(port), "GET", "/health", host=host).status, 200)
        finally:
            gw.proc.send_signal(signal.SIGTERM)
            self.assertEqual(gw.wait_exit(), 0)
        self.assertFalse(os.path.exists(path))


class SlurmRecipe(unittest.TestCase):
    """docs/deployment.md "SLURM": two jobs' gateways on one node, each started with
    `--host 0.0.0.0 --port 0 --address-file F`, at once. Each file holds gethostname():port (a
    wildcard listener publishes the node's name), the ports differ, and each address reaches its
    own gateway (each serves a document the other does not have)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgslurm-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_two_gateways_on_one_node(self):
        names = ("alpha", "beta")
        paths = [os.path.join(self.dir, "searchgate.job%d.addr" % i) for i in (1, 2)]
        gws = []
        try:
            for name, path in zip(names, paths):
                docs = [{"id": name, "contents": '"%s"\nthe %s job\'s document' % (name, name)}]
                gws.append(Gateway({"backends": [example_backend(documents=docs)]},
                                   extra_args=["--host", "0.0.0.0", "--address-file", path]))
            host = socket.gethostname()
            ports = []
            for gw, path in zip(gws, paths):
                with open(path) as f:
                    text = f.read()
                self.assertEqual(text, "%s:%d" % (host, gw.port))  # no newline, as the job script reads it
                ports.append(int(text.rsplit(":", 1)[1]))
            self.assertNotEqual(ports[0], ports[1])
            # the job's workers use the file's address; where this machine cannot resolve its own
            # name (some containers), the same port on loopback stands in for it: the listener is
            # on 0.0.0.0, so both reach the same socket
            try:
                socket.getaddrinfo(host, None, socket.AF_INET)
                via = host
            except socket.gaierror:
                via = "127.0.0.1"
            for name, port in zip(names, ports):
                r = request(port, "POST", "/retrieve", {"queries": ["job document"], "topk": 3, "return_scores": True}, host=via)
                self.assertEqual(r.status, 200, (via, r))
                self.assertEqual([h["document"]["id"] for h in r.json()["result"][0]], [name])
        finally:
            for gw in gws:
                gw.stop()
        for path in paths:
            self.assertFalse(os.path.exists(path), path)


class UnixSocket(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgunix-")
        self.sock = os.path.join(self.dir, "searchgate.sock")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_unix_socket_only(self):
        gw = Gateway({"backends": [example_backend()], "listen": {"unix": self.sock, "unix_mode": "0600"}}, port_arg=False)
        try:
            st = os.stat(self.sock)
            self.assertTrue(stat.S_ISSOCK(st.st_mode))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
            self.assertIn("listening on unix:%s (" % self.sock, gw.read_log())
            self.assertIsNone(gw.port)  # no TCP listener at all
            code, body = curl_unix(self.sock, "http://localhost/health")
            self.assertEqual(code, 200, body)
            code, body = curl_unix(self.sock, "http://localhost/retrieve", {"queries": ["capital of France"], "topk": 1})
            self.assertEqual(code, 200, body)
            self.assertIn("Paris", body)
            # every loop watches the one socket: concurrent requests are all served
            results = sgtest.parallel(lambda i: curl_unix(self.sock, "http://localhost/retrieve", {"queries": ["q%d" % i]})[0],
                                      [(i,) for i in range(16)])
            self.assertEqual(results, [200] * 16)
        finally:
            gw.stop()
        self.assertFalse(os.path.exists(self.sock), "the socket file outlived the gateway")

    def test_beside_tcp(self):
        gw = Gateway({"backends": [example_backend()], "listen": {"host": "127.0.0.1", "port": 0, "unix": self.sock}})
        try:
            self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o660)  # the default mode
            self.assertEqual(gw.get("/health").status, 200)
            self.assertEqual(curl_unix(self.sock, "http://localhost/health")[0], 200)
            self.assertRegex(gw.read_log(), r"listening on http://127\.0\.0\.1:%d, unix:%s " % (gw.port, re.escape(self.sock)))
        finally:
            gw.stop()

    def test_stale_socket_file_is_replaced(self):
        """A gateway killed with SIGKILL leaves its socket file behind; the next one takes the path."""
        first = Gateway({"backends": [example_backend()], "listen": {"unix": self.sock}}, port_arg=False)
        first.proc.kill()
        first.wait_exit()
        self.assertTrue(os.path.exists(self.sock))
        gw = Gateway({"backends": [example_backend()], "listen": {"unix": self.sock}}, port_arg=False)
        try:
            self.assertEqual(curl_unix(self.sock, "http://localhost/health")[0], 200)
        finally:
            gw.stop()
        shutil.rmtree(first.dir, ignore_errors=True)

    def test_socket_in_use_or_in_the_way(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(self.sock)
            s.listen(1)
            rc, out = run_once({"backends": [example_backend()], "listen": {"unix": self.sock}})
            self.assertEqual(rc, 1, out)
            self.assertIn("cannot listen on unix:%s: the socket is in use by pid %d" % (self.sock, os.getpid()), out)
        os.unlink(self.sock)
        with open(self.sock, "w") as f:
            f.write("not a socket")
        rc, out = run_once({"backends": [example_backend()], "listen": {"unix": self.sock}}, "--check")
        self.assertEqual(rc, 1, out)
        self.assertIn("cannot listen on unix:%s: the path exists and is not a socket" % self.sock, out)
        with open(self.sock) as f:
            self.assertEqual(f.read(), "not a socket")  # never removed


class SeveralListeners(unittest.TestCase):
    def test_two_entries_serve(self):
        """Loopback for clients and another address (127.0.0.2 here) for /metrics scraping."""
        cfg = {"backends": [example_backend()],
               "listen": [{"host": "127.0.0.1", "port": 0}, {"host": "127.0.0.2", "port": 0}]}
        gw = Gateway(cfg, threads=2)
        try:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+), http://127\.0\.0\.2:(\d+) \(", gw.read_log())
            self.assertIsNotNone(m, gw.read_log())
            ports = [int(m.group(1)), int(m.group(2))]
            self.assertEqual(ports[0], gw.port)
            for host, port in (("127.0.0.1", ports[0]), ("127.0.0.2", ports[1])):
                r = request(port, "POST", "/retrieve", {"queries": ["paris"], "topk": 1}, host=host)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(request(port, "GET", "/metrics", host=host).status, 200)
                self.assertEqual(tcp_listeners(port), 2)  # one per loop on each
            with self.assertRaises(OSError):  # the second entry is not on 127.0.0.1
                request(ports[1], "GET", "/health", host="127.0.0.1", timeout=5)
        finally:
            gw.stop()

    def test_check_lists_every_listener(self):
        port = sgtest.free_port()
        cfg = {"backends": [example_backend()], "listen": [{"host": "127.0.0.1", "port": port}, {"unix": "/tmp/sg-check-%d.sock" % port}]}
        rc, out = run_once(cfg, "--check")
        self.assertEqual(rc, 0, out)
        self.assertIn("is valid; 127.0.0.1:%d is free; unix:/tmp/sg-check-%d.sock is free; 1 backend(s) loaded" % (port, port), out)

    def test_overlapping_entries_refused(self):
        port = sgtest.free_port()
        cfg = {"backends": [example_backend()], "listen": [{"host": "127.0.0.1", "port": port}, {"host": "0.0.0.0", "port": port}]}
        for extra in (["--check"], []):
            rc, out = run_once(cfg, *extra)
            self.assertEqual(rc, 1, out)
            self.assertIn("listen[1] (0.0.0.0:%d) takes the connections of listen[0] (127.0.0.1:%d)" % (port, port), out)


class ListenerRules(unittest.TestCase):
    """Each listen entry has its own Host/Origin rules and h2c; the gate applies the rules of the
    listener a connection came through, on its first request (read by the gate) and on later ones
    (read by h2o, checked by the handler)."""

    def test_each_entry_has_its_own_host_rule(self):
        cfg = {"backends": [example_backend()],
               "listen": [{"host": "127.0.0.1", "port": 0},
                          {"host": "127.0.0.2", "port": 0, "allowed_hosts": ["gw.lab"], "allowed_origins": ["http://ui.lab"]}]}
        gw = Gateway(cfg)
        try:
            p0, p1 = listener_ports(gw, 2)
            st, body = raw_request(p0, "gw.lab")
            self.assertEqual(st, 403, body)
            self.assertIn("listen[0].allowed_hosts", body)
            self.assertEqual(raw_request(p1, "gw.lab:%d" % p1, ip="127.0.0.2")[0], 200)
            self.assertEqual(raw_request(p1, "evil.example", ip="127.0.0.2")[0], 403)
            # keep-alive: the second request of a connection is h2o's, judged by the same listener's rules
            for port, ip, host_ok, origin_ok in ((p0, "127.0.0.1", False, False), (p1, "127.0.0.2", True, True)):
                conn = http.client.HTTPConnection(ip, port, timeout=sgtest.scaled(20))
                conn.request("GET", "/health")
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
                conn.request("POST", "/retrieve", b'{"queries":["paris"]}', {"Host": "gw.lab", "Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 200 if host_ok else 403, (ip, "Host"))
                if host_ok:
                    conn.request("POST", "/retrieve", b'{"queries":["paris"]}', {"Origin": "http://ui.lab"})
                    r = conn.getresponse()
                    r.read()
                    self.assertEqual(r.status, 200 if origin_ok else 403, (ip, "Origin"))
                conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", p0, timeout=sgtest.scaled(20))
            conn.request("GET", "/health")
            conn.getresponse().read()
            conn.request("POST", "/retrieve", b'{"queries":["paris"]}', {"Origin": "http://ui.lab"})
            self.assertEqual(conn.getresponse().status, 403)  # listen[1]'s origin, not listen[0]'s
            conn.close()
        finally:
            gw.stop()

    def test_h2c_per_entry(self):
        cfg = {"backends": [example_backend()],
               "listen": [{"host": "127.0.0.1", "port": 0, "h2c": False}, {"host": "127.0.0.2", "port": 0}]}
        gw = Gateway(cfg)
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
        try:
            p0, p1 = listener_ports(gw, 2)
            for ip, port, http2 in (("127.0.0.1", p0, False), ("127.0.0.2", p1, True)):
                with socket.create_connection((ip, port), timeout=sgtest.scaled(10)) as s:
                    s.sendall(preface)
                    got = b""
                    while len(got) < 12:
                        chunk = s.recv(64)
                        if not chunk:
                            break
                        got += chunk
                if http2:  # the server's SETTINGS frame: type 4 on stream 0
                    self.assertEqual(got[3], 4, got)
                else:  # the HTTP/1 context does not speak HTTP/2
                    self.assertTrue(got.startswith(b"HTTP/1.1 400"), got)
        finally:
            gw.stop()

    def test_unix_socket_takes_any_host_and_names_the_user(self):
        """A Unix socket's clients send whatever Host their library makes of the URL (requests-unixsocket:
        the quoted path): no DNS rebinding reaches a socket file, so Host is not restricted there, while
        the loopback TCP listener of the same gateway still restricts it. An anonymous client on the
        socket is its peer's user (SO_PEERCRED), which a rate limit counts as one client."""
        d = tempfile.mkdtemp(prefix="sgunix-")
        path = os.path.join(d, "gw.sock")
        cfg = {"backends": [example_backend()],
               "clients": {"default": {"rate": 0.01, "burst": 1, "mode": "reject"}},
               "listen": [{"host": "127.0.0.1", "port": 0}, {"unix": path}]}
        gw = Gateway(cfg)
        try:
            quoted = path.replace("/", "%2F")
            st, body = raw_request(path, quoted)
            self.assertEqual(st, 200, body)
            st, body = raw_request(path, quoted)  # the same client: the burst of 1 is spent
            self.assertEqual(st, 429, body)
            self.assertIn("rate limit of client uid:%d exceeded" % os.getuid(), body)
            st, body = raw_request(gw.port, quoted)
            self.assertEqual(st, 403, body)  # loopback TCP: loopback names only
            st, body = raw_request(gw.port, "localhost")  # TCP peers are their address, another client
            self.assertEqual(st, 200, body)
            st, body = raw_request(gw.port, "localhost")
            self.assertIn("rate limit of client ip:127.0.0.1 exceeded", body)
        finally:
            gw.stop()
            shutil.rmtree(d, ignore_errors=True)

    def test_unix_entry_with_allowed_hosts_checks_host(self):
        d = tempfile.mkdtemp(prefix="sgunix-")
        path = os.path.join(d, "gw.sock")
        gw = Gateway({"backends": [example_backend()], "listen": {"unix": path, "allowed_hosts": ["gw.lab"]}}, port_arg=False)
        try:
            self.assertEqual(raw_request(path, "gw.lab")[0], 200)
            self.assertEqual(raw_request(path, "localhost")[0], 200)
            st, body = raw_request(path, "evil.example")
            self.assertEqual(st, 403, body)
            self.assertIn("listen.allowed_hosts", body)
        finally:
            gw.stop()
            shutil.rmtree(d, ignore_errors=True)


class SdNotify(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgnotify-")
        self.nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.npath = os.path.join(self.dir, "notify")
        self.nsock.bind(self.npath)

    def tearDown(self):
        self.nsock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def recv(self, timeout):
        self.nsock.settimeout(sgtest.scaled(timeout))
        return self.nsock.recv(4096).decode()

    def test_ready_watchdog_stopping(self):
        addr = os.path.join(self.dir, "addr")
        gw = Gateway({"backends": [example_backend()]}, extra_args=["--address-file", addr], expect_fail=True,
                     env={"NOTIFY_SOCKET": self.npath, "WATCHDOG_USEC": "400000"})
        try:
            ready = self.recv(30)
            # READY=1 comes once the gateway serves: the address file exists and its port answers
            self.assertIn("READY=1", ready.split("\n"))
            self.assertIn("MAINPID=%d" % gw.proc.pid, ready.split("\n"))
            self.assertRegex(ready, r"STATUS=serving on http://127\.0\.0\.1:\d+")
            with open(addr) as f:
                host, port = f.read().strip().rsplit(":", 1)
            self.assertEqual(request(int(port), "GET", "/health", host=host).status, 200)
            # WATCHDOG_USEC=400000: a ping every 200 ms while the loops go round
            pings = [self.recv(5) for _ in range(3)]
            self.assertEqual(pings, ["WATCHDOG=1"] * 3)
            gw.proc.send_signal(signal.SIGTERM)
            msgs = []
            while not any("STOPPING=1" in m for m in msgs):
                msgs.append(self.recv(10))
            self.assertEqual(gw.wait_exit(), 0)
        finally:
            if gw.proc.poll() is None:
                gw.proc.kill()
                gw.wait_exit()

    def test_reload_tells_systemd(self):
        """SIGHUP (systemd's ExecReload): RELOADING=1 (with MONOTONIC_USEC, for Type=notify-reload)
        when the reload begins, READY=1 when it is over -- applied, or refused with the old config
        serving on -- and nothing after STOPPING=1. A listen change is restart-only: reported, the
        listeners stay."""
        sock = os.path.join(self.dir, "gw.sock")
        gw = Gateway({"backends": [example_backend()]}, expect_fail=True, env={"NOTIFY_SOCKET": self.npath})
        try:
            self.assertIn("READY=1", self.recv(30).split("\n"))
            gw.port = listener_ports(gw, 1)[0]
            cfg = dict(gw.config, listen=[{"host": "127.0.0.1", "port": 0}, {"unix": sock}], log_level="debug")
            with open(gw.config_path, "w") as f:
                json.dump(cfg, f)
            before = time.clock_gettime(time.CLOCK_MONOTONIC)
            gw.proc.send_signal(signal.SIGHUP)
            reloading = self.recv(30).split("\n")
            self.assertIn("RELOADING=1", reloading)
            usec = [int(m.split("=", 1)[1]) for m in reloading if m.startswith("MONOTONIC_USEC=")]
            self.assertEqual(len(usec), 1, reloading)
            self.assertGreaterEqual(usec[0], int(before * 1e6))
            ready = self.recv(30).split("\n")
            self.assertIn("READY=1", ready)
            self.assertIn("STATUS=configuration reloaded: generation 2 serves new requests (some changes need a restart)", ready)
            self.assertIn("restart needed for listen", gw.read_log())
            self.assertFalse(os.path.exists(sock))  # restart-only: no new listener
            self.assertEqual(gw.retrieve(["paris"]).status, 200)
            # a refused reload is over too: READY=1, and the running configuration serves on
            with open(gw.config_path, "w") as f:
                f.write('{"backends": []}')
            gw.proc.send_signal(signal.SIGHUP)
            self.assertIn("RELOADING=1", self.recv(30).split("\n"))
            ready = self.recv(30).split("\n")
            self.assertIn("READY=1", ready)
            self.assertTrue(any(m.startswith("STATUS=configuration reload refused, the running configuration keeps serving: "
                                             "config %s: backends: expected a non-empty array" % gw.config_path) for m in ready), ready)
            self.assertEqual(gw.retrieve(["paris"]).status, 200)
            gw.proc.send_signal(signal.SIGTERM)
            self.assertIn("STOPPING=1", self.recv(10).split("\n"))
            self.assertEqual(gw.wait_exit(), 0)
            self.nsock.settimeout(0.5)
            with self.assertRaises(socket.timeout):
                self.fail("after STOPPING=1: %r" % self.nsock.recv(4096))
        finally:
            if gw.proc.poll() is None:
                gw.proc.kill()
                gw.wait_exit()

    def test_abstract_socket_and_foreign_watchdog(self):
        """NOTIFY_SOCKET=@name (the abstract namespace); WATCHDOG_PID of another process: no pings."""
        name = "sgtest-notify-%d" % os.getpid()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind("\0" + name)
            s.settimeout(sgtest.scaled(30))
            gw = Gateway({"backends": [example_backend()]},
                         env={"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
            try:
                self.assertIn("READY=1", s.recv(4096).decode())
                s.settimeout(1.0)
                with self.assertRaises(socket.timeout):
                    self.fail("unexpected %r" % s.recv(4096))
            finally:
                gw.stop()


class Shutdown(unittest.TestCase):
    def test_drain_reports_draining_while_serving(self):
        gw = Gateway({"backends": [example_backend()], "shutdown_drain_ms": 3000})
        try:
            self.assertEqual(gw.get("/health").json()["status"], "ok")
            gw.proc.send_signal(signal.SIGTERM)
            gw.wait_log("draining for 3000 ms", timeout=2)
            r = gw.get("/health")
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.json()["status"], "draining")
            r = gw.retrieve(["paris"])  # still served
            self.assertEqual(r.status, 200, r)
            started = time.time()
            self.assertEqual(gw.wait_exit(), 0)
            self.assertGreater(time.time() - started, 1.0)  # the drain lasts
        finally:
            gw.stop()

    def test_second_signal_ends_the_drain(self):
        gw = Gateway({"backends": [example_backend()], "shutdown_drain_ms": 60000})
        gw.proc.send_signal(signal.SIGTERM)
        gw.wait_log("draining for")
        gw.proc.send_signal(signal.SIGINT)
        self.assertEqual(gw.wait_exit(timeout=10), 0)
        self.assertIn("again: ending the drain now", gw.stop())

    def test_no_reload_while_draining(self):
        """A reload asked for while the gateway drains is refused (SIGHUP logged, POST /admin/reload
        503): a stopping gateway keeps the configuration it is finishing with."""
        os.environ["SG_LISTEN_ADMIN"] = "adm"
        gw = Gateway({"backends": [example_backend()], "shutdown_drain_ms": 60000, "clients": {"admin_key_env": "SG_LISTEN_ADMIN"}})
        try:
            gw.proc.send_signal(signal.SIGTERM)
            gw.wait_log("draining for")
            r = gw.post("/admin/reload", b"", headers={"X-API-Key": "adm"})
            self.assertEqual(r.status, 503, r)
            self.assertIn("shutting down", r.json()["error"]["message"])
            gw.proc.send_signal(signal.SIGHUP)
            gw.wait_log("SIGHUP while shutting down: not reloading")
            self.assertEqual(gw.retrieve(["paris"]).status, 200)  # still serving
            gw.proc.send_signal(signal.SIGINT)
            self.assertEqual(gw.wait_exit(timeout=10), 0)
        finally:
            gw.stop()


if __name__ == "__main__":
    sgtest.main()
