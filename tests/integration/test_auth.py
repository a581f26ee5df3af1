"""API keys and the operations routes: every presented key must be valid (in either header, in
any order, repeated or not), and with keys in use /, /metrics and /stats need the admin key (or,
without one configured, a client key) while /health stays open for probes."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import sgtest
from sgtest import Gateway, example_backend

ENV = {"SG_TEST_KEY_JOB_A": "key-a", "SG_TEST_KEY_JOB_B": "key-b", "SG_TEST_ADMIN": "adm1n"}
KEYS = [{"id": "job-a", "key_env": "SG_TEST_KEY_JOB_A"}, {"id": "job-b", "key_env": "SG_TEST_KEY_JOB_B"}]
GUARDED = ("/", "/metrics", "/stats")


def config(**clients):
    c = {"keys": KEYS}
    c.update(clients)
    return {"backends": [example_backend()], "clients": c}


class PresentedKeys(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(config(require_key=True), env=ENV)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def status(self, headers):
        return self.gw.retrieve(["paris"], headers=headers).status

    def test_one_valid_key(self):
        self.assertEqual(self.status({"Authorization": "Bearer key-a"}), 200)
        self.assertEqual(self.status({"X-API-Key": "key-b"}), 200)
        self.assertEqual(self.status({"Authorization": "Bearer key-a", "X-API-Key": "key-a"}), 200)
        self.assertEqual(self.status({"Authorization": "Basic dXNlcjpwdw==", "X-API-Key": "key-a"}), 200)  # not a key scheme

    def test_any_bad_key_is_401_in_both_orders(self):
        for headers in ({"Authorization": "Bearer key-a", "X-API-Key": "wrong"},
                        {"X-API-Key": "key-a", "Authorization": "Bearer wrong"},
                        {"Authorization": "Bearer key-a", "X-API-Key": "key-b"},  # two clients at once
                        {"Authorization": "Bearer wrong"}, {"X-API-Key": "wrong"}, {"X-API-Key": ""}, {}):
            r = self.gw.retrieve(["paris"], headers=headers)
            self.assertEqual(r.status, 401, headers)
            self.assertEqual(r.json()["error"]["type"], "unauthorized")
            self.assertEqual(r.headers["www-authenticate"], 'Bearer realm="searchgate"')

    def test_repeated_header(self):
        """A valid key followed by a bad one in a repeated header is no better than the bad one."""
        for name, good, bad in (("X-API-Key", "key-a", "wrong"), ("Authorization", "Bearer key-a", "Bearer wrong")):
            for first, second in ((good, bad), (bad, good)):
                body = '{"queries":["a"]}'
                req = ("POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s: %s\r\n%s: %s\r\n"
                       "Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (name, first, name, second, len(body), body))
                with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
                    s.sendall(req.encode())
                    got = s.makefile("rb").readline()
                self.assertIn(b" 401 ", got, (name, first, second))


class OperationsRoutes(unittest.TestCase):
    def check(self, gw, allowed, refused):
        for path in GUARDED:
            for headers in allowed:
                self.assertEqual(gw.get(path, headers=headers).status, 200, (path, headers))
            for headers in refused:
                r = gw.get(path, headers=headers)
                self.assertEqual(r.status, 401, (path, headers))
                self.assertEqual(r.headers["content-type"], "application/json")
                self.assertEqual(r.headers["www-authenticate"], 'Bearer realm="searchgate"')
                self.assertNotIn(b"job-a", r.body)
        # probes and the (data-free) dashboard page stay open
        self.assertEqual(gw.get("/health").status, 200)
        page = gw.get("/dashboard")
        self.assertEqual(page.status, 200)
        self.assertNotIn(b"job-a", page.body)

    def test_require_key_guards_with_client_keys(self):
        gw = Gateway(config(require_key=True), env=ENV)
        try:
            self.check(gw, allowed=[{"X-API-Key": "key-a"}, {"Authorization": "Bearer key-b"}],
                       refused=[{}, {"X-API-Key": "nope"}, {"X-API-Key": "key-a", "Authorization": "Bearer nope"}])
        finally:
            gw.stop()

    def test_admin_key(self):
        gw = Gateway(config(require_key=True, admin_key_env="SG_TEST_ADMIN"), env=ENV)
        gw.metrics_headers = {"X-API-Key": "adm1n"}
        try:
            self.check(gw, allowed=[{"X-API-Key": "adm1n"}, {"Authorization": "Bearer adm1n"}],
                       refused=[{}, {"X-API-Key": "key-a"}, {"Authorization": "Bearer adm1n", "X-API-Key": "key-a"}])
            self.assertIn(b"job-a", gw.get("/metrics", headers={"X-API-Key": "adm1n"}).body)
            # the admin key is not a client key
            self.assertEqual(gw.retrieve(["paris"], headers={"X-API-Key": "adm1n"}).status, 401)
            self.assertEqual(gw.retrieve(["paris"], headers={"X-API-Key": "key-a"}).status, 200)
            self.assertGreaterEqual(gw.metric("searchgate_http_requests_total", route="metrics", code="401"), 3)
        finally:
            gw.stop()

    def test_admin_key_without_require_key(self):
        gw = Gateway(config(admin_key_env="SG_TEST_ADMIN"), env=ENV)
        try:
            self.check(gw, allowed=[{"X-API-Key": "adm1n"}], refused=[{}, {"X-API-Key": "key-a"}])
            self.assertEqual(gw.retrieve(["paris"]).status, 200)  # anonymous /retrieve is still open
        finally:
            gw.stop()

    def test_open_without_keys(self):
        gw = Gateway({"backends": [example_backend()]})
        try:
            self.check(gw, allowed=[{}], refused=[])
        finally:
            gw.stop()

    def test_admin_key_must_not_be_a_client_key(self):
        d = tempfile.mkdtemp(prefix="sgauth-")
        try:
            path = os.path.join(d, "gw.json")
            with open(path, "w") as f:
                json.dump(config(admin_key_env="SG_TEST_KEY_JOB_B"), f)
            p = subprocess.run([sgtest.binary("searchgate"), "--check", "--port", "0", "--config", path], capture_output=True,
                               text=True, env=dict(os.environ, **ENV))
            self.assertEqual(p.returncode, 1)
            self.assertIn("clients.admin_key_env: the admin key must differ from every client key", p.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sgtest.main()
