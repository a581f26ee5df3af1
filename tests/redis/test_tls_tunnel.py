"""Redis over TLS through a local tunnel (docs/deployment.md, "Redis"): Debian 12's hiredis 0.14 has
no TLS, so the gateway talks plain RESP to a stunnel on loopback, which speaks TLS (server
certificate verified, client certificate presented) to a redis-server that accepts TLS only.

Skipped (CTest exit 77) with the reason when stunnel, or TLS in redis-server, is not available."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend, free_port, scaled
from redisutil import GATEWAY_ACL, Server, resp, wait_for

SKIP = 77
PASSWORD = "tls-tunnel-pw-28"
ENV = {"SG_TEST_REDIS_PW": PASSWORD}


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_certs(d):
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all signed by it."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj",
            "/CN=searchgate test CA", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr", "-subj",
                "/CN=" + ("localhost" if name == "server" else "searchgate"), cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
                name + ".crt", "-days", "2", *ext, cwd=d)


class Stunnel:
    """stunnel in client mode: plain RESP on 127.0.0.1:<port>, TLS to `connect`."""

    def __init__(self, d, connect_port, check_host="localhost"):
        self.port = free_port()
        self.conf = os.path.join(d, "stunnel-%d.conf" % self.port)
        self.log = os.path.join(d, "stunnel-%d.log" % self.port)
        with open(self.conf, "w") as f:
            f.write("foreground = yes\npid =\noutput = %s\ndebug = 5\n\n[redis]\nclient = yes\n"
                    "accept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\n"
                    "CAfile = %s\nverifyChain = yes\ncheckHost = %s\ncert = %s\nkey = %s\n" %
                    (self.log, self.port, connect_port, os.path.join(d, "ca.crt"), check_host,
                     os.path.join(d, "client.crt"), os.path.join(d, "client.key")))
        self.proc = subprocess.Popen([shutil.which("stunnel4") or shutil.which("stunnel"), self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: "Configuration successful" in self.read_log(), 10):
            self.close()
            raise RuntimeError("stunnel did not start:\n" + self.read_log())

    def read_log(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def why_skip():
    if not (shutil.which("stunnel4") or shutil.which("stunnel")):
        return "stunnel is not installed (Debian: apt-get install stunnel4; .ci/deps.sh test installs it)"
    if not shutil.which("openssl"):
        return "openssl is not installed"
    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True)
    if "libssl" not in ldd.stdout:
        return "this redis-server is built without TLS (it does not link libssl)"
    return None


class TlsTunnel(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgtls-")
        make_certs(self.dir)
        self.tls_port = free_port()
        d = self.dir
        # TLS only (no plain port), client certificates required, an ACL user for the gateway
        self.redis = Server(["port 0", "tls-port %d" % self.tls_port, "tls-cert-file %s/server.crt" % d,
                             "tls-key-file %s/server.key" % d, "tls-ca-cert-file %s/ca.crt" % d, "tls-auth-clients yes",
                             "user default on nopass ~* &* +@all", "user sg on >%s ~sg:* %s" % (PASSWORD, GATEWAY_ACL)],
                            port=self.tls_port, tunnel=lambda port: Stunnel(d, port))

    def tearDown(self):
        self.redis.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_gateway_through_stunnel(self):
        tunnel = self.redis.tunnel
        cfg = {"backends": [example_backend("example")],
               "cache": {"l1_bytes": 0, "redis": {"host": "127.0.0.1", "port": tunnel.port, "timeout_ms": 500,
                                                  "username": "sg", "password_env": "SG_TEST_REDIS_PW"}}}
        gw = Gateway(cfg, env=ENV)
        try:
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            self.assertEqual(gw.retrieve(["over tls", "tokyo"]).status, 200)
            self.assertTrue(wait_for(lambda: self.redis.cmd("DBSIZE") == 2), gw.read_log())  # written (after the reply)
            self.assertEqual(gw.retrieve(["over tls", "tokyo"]).status, 200)
            self.assertEqual(gw.metric("searchgate_cache_hits_total", layer="redis"), 2)
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total"), 0)
            self.assertIn("Certificate accepted", tunnel.read_log())
        finally:
            gw.stop()
        # the server speaks TLS only: a plain client gets nowhere
        with self.assertRaises((OSError, RuntimeError)):
            resp(self.tls_port, "PING", timeout=2)

    def test_tunnel_refuses_a_wrong_certificate(self):
        """The tunnel verifies the server: a certificate for another name is refused, and the gateway
        (which sees a connection that closes) bypasses Redis and serves every request."""
        bad = Stunnel(self.dir, self.tls_port, check_host="redis.example.org")
        self.addCleanup(bad.close)
        cfg = {"backends": [example_backend("example")],
               "cache": {"redis": {"host": "127.0.0.1", "port": bad.port, "timeout_ms": 500,
                                   "username": "sg", "password_env": "SG_TEST_REDIS_PW"}}}
        gw = Gateway(cfg, env=ENV)
        try:
            self.assertTrue(wait_for(lambda: "not reachable at start-up" in gw.read_log(), scaled(10)), gw.read_log())
            self.assertEqual(gw.retrieve(["refused tls"]).status, 200)
            self.assertNotEqual(gw.get("/health").json()["cache"]["redis"], "up")
            self.assertTrue(wait_for(lambda: "certificate verify failed" in bad.read_log(), 5), bad.read_log())
        finally:
            gw.stop()
            bad.close()


if __name__ == "__main__":
    why = why_skip()
    if why is not None:
        print("SKIPPED: " + why)
        sys.exit(SKIP)
    sgtest.main()
