"""Start-up of the gateway: a port already in use (a second gateway, or any other listener) must
fail start-up with a message naming the port and the holder, instead of joining the first
gateway's SO_REUSEPORT group and taking part of its traffic (and bypassing its API keys)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import sgtest
from sgtest import Gateway, example_backend, free_port


def keyed_config(require_key):
    cfg = {"backends": [example_backend()]}
    if require_key:
        cfg["clients"] = {"require_key": True, "keys": [{"id": "job", "key_env": "SG_TEST_KEY_START"}]}
    return cfg


class PortInUse(unittest.TestCase):
    def refused(self, cfg, port, **kw):
        gw = Gateway(cfg, extra_args=["--port", str(port)], expect_fail=True, **kw)
        try:
            rc = gw.wait_exit(timeout=10)
        except subprocess.TimeoutExpired:
            gw.proc.kill()
            gw.proc.wait()
            self.fail("a second gateway started on port %d:\n%s" % (port, gw.read_log()))
        log = gw.read_log()
        shutil.rmtree(gw.dir, ignore_errors=True)
        return rc, log

    def test_second_gateway_refused(self):
        port = free_port()
        first = Gateway({"backends": [example_backend()]}, extra_args=["--port", str(port)])
        try:
            self.assertEqual(first.port, port)
            rc, log = self.refused({"backends": [example_backend()]}, port)
            self.assertEqual(rc, 1, log)
            self.assertIn("cannot listen on 127.0.0.1:%d: port %d is already in use by pid %d (" % (port, port, first.proc.pid),
                          log)
            self.assertNotIn("listening on", log)
            # the wildcard address overlaps the first gateway's: refused as well
            rc, log = self.refused({"backends": [example_backend()], "listen": {"host": "0.0.0.0", "port": port}}, port)
            self.assertEqual(rc, 1, log)
            self.assertIn("port %d is already in use by pid %d" % (port, first.proc.pid), log)
            for _ in range(20):
                self.assertEqual(first.retrieve(["hamlet"]).status, 200)
        finally:
            first.stop()

    def test_no_key_bypass_through_a_second_instance(self):
        """A gateway that requires keys, and an intruder without keys started on its port: the
        intruder must not start, and every keyless request keeps getting 401."""
        port = free_port()
        env = {"SG_TEST_KEY_START": "s3cret-key"}
        guarded = Gateway(keyed_config(True), extra_args=["--port", str(port)], env=env)
        try:
            rc, log = self.refused(keyed_config(False), port)
            self.assertEqual(rc, 1, log)
            self.assertIn("port %d is already in use by pid %d" % (port, guarded.proc.pid), log)
            statuses = [guarded.retrieve(["hamlet"]).status for _ in range(20)]
            self.assertEqual(statuses, [401] * 20)
            ok = guarded.retrieve(["hamlet"], headers={"Authorization": "Bearer s3cret-key"})
            self.assertEqual(ok.status, 200)
        finally:
            guarded.stop()

    def test_foreign_listener_named(self):
        """Any process listening there, even one that set SO_REUSEPORT itself, is refused and named."""
        port = free_port()
        code = ("import socket,sys,time\n"
                "s=socket.socket()\n"
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
                "s.bind(('127.0.0.1', %d)); s.listen(8)\n"
                "print('ready', flush=True)\n"
                "time.sleep(120)\n" % port)
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "ready")
            rc, log = self.refused({"backends": [example_backend()]}, port)
            self.assertEqual(rc, 1, log)
            m = re.search(r"port %d is already in use by pid (\d+) \(([^)]*)\)" % port, log)
            self.assertIsNotNone(m, log)
            self.assertEqual(int(m.group(1)), holder.pid)
            self.assertIn("python", m.group(2))
        finally:
            holder.kill()
            holder.wait()

    def test_own_loops_share_the_port(self):
        """Four loop threads on one port: each has its own listener and they all serve."""
        gw = Gateway({"backends": [example_backend()]}, threads=4)
        try:
            results = sgtest.parallel(lambda i: gw.retrieve(["paris %d" % i]).status, [(i,) for i in range(40)])
            self.assertEqual(results, [200] * 40)
        finally:
            gw.stop()



class Check(unittest.TestCase):
    """--check must reject everything a real start would: the address, the port, the plugins and
    the keys that depend on one another."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgcheck-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_gateway(self, cfg, *args):
        """`cfg` is a dict, or the file's text as it is."""
        path = os.path.join(self.dir, "gw.json")
        with open(path, "w") as f:
            f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
        p = subprocess.run([sgtest.binary("searchgate"), "--config", path] + list(args), capture_output=True, text=True,
                           timeout=sgtest.scaled(60))
        return p.returncode, p.stdout + p.stderr

    def both_refuse(self, cfg, args, needle):
        """--check and a real start fail the same way."""
        for extra in (["--check"], []):
            rc, out = self.run_gateway(cfg, *(list(args) + extra))
            self.assertEqual(rc, 1, "%s: %s" % (extra, out))
            self.assertIn(needle, out)
            self.assertNotIn("is valid", out)
            self.assertNotIn("listening on", out)

    def test_valid(self):
        rc, out = self.run_gateway({"backends": [example_backend()]}, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)
        self.assertIn("is valid; 127.0.0.1 resolves (port 0: any free port); 1 backend(s) loaded", out)
        port = free_port()
        rc, out = self.run_gateway({"backends": [example_backend()]}, "--check", "--port", str(port))
        self.assertEqual(rc, 0, out)
        self.assertIn("127.0.0.1:%d is free" % port, out)

    def test_bad_host(self):
        self.both_refuse({"backends": [example_backend()]}, ["--host", "999.1.1.1", "--port", "0"], "listen.host 999.1.1.1")
        self.both_refuse({"backends": [example_backend()], "listen": {"host": "no-such-host.invalid", "port": 0}}, [],
                         "listen.host no-such-host.invalid")

    def test_port_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            self.both_refuse({"backends": [example_backend()]}, ["--port", str(port)],
                             "port %d is already in use by pid %d" % (port, os.getpid()))

    def test_global_needs_redis(self):
        cfg = {"backends": [example_backend()],
               "clients": {"keys": [{"id": "job", "key_env": "SG_TEST_KEY_CHECK", "rate": 10, "global": True}]}}
        os.environ["SG_TEST_KEY_CHECK"] = "k"
        self.both_refuse(cfg, ["--port", "0"], "clients.keys[0].global: needs cache.redis")
        cfg["cache"] = {"redis": {"port": free_port()}}
        rc, out = self.run_gateway(cfg, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)

    def test_strict_document(self):
        """The file is one strict JSON document: trailing garbage, a second document and a key given
        twice (anywhere, plugin configs included: cJSON read the first) are refused with where; so
        are two clients holding the same key (the first client's limits would never apply)."""
        cfg = {"backends": [example_backend()]}
        text = json.dumps(cfg)
        self.both_refuse(text + "\n}", ["--port", "0"], "not valid JSON at line 2, column 1 (byte %d): data after the end" % (len(text) + 1))
        self.both_refuse(text + "\n" + text, ["--port", "0"], "data after the end of the document (trailing garbage, or a second")
        self.both_refuse('{"threads": 1, ' + text[1:-1] + ', "threads": 2}', ["--port", "0"], "threads: duplicate key")
        dup_doc = text.replace('"documents": [', '"documents": [], "documents": [', 1)
        self.assertNotEqual(dup_doc, text)
        self.both_refuse(dup_doc, ["--port", "0"], "backends[0].config.documents: duplicate key")
        os.environ["SG_TEST_KEY_SAME_A"] = os.environ["SG_TEST_KEY_SAME_B"] = "the-same-key"
        twins = dict(cfg, clients={"keys": [{"id": "job-a", "key_env": "SG_TEST_KEY_SAME_A", "rate": 1},
                                            {"id": "job-b", "key_env": "SG_TEST_KEY_SAME_B", "rate": 1000}]})
        self.both_refuse(twins, ["--port", "0"], 'clients.keys[1].key_env: holds the same key as clients.keys[0] ("job-a")')
        rc, out = self.run_gateway(twins, "--check", "--port", "0")
        self.assertNotIn("the-same-key", out)
        os.environ["SG_TEST_KEY_SAME_B"] = "another-key"
        rc, out = self.run_gateway(twins, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)

    def test_plugin_config_errors(self):
        """Plugins are created with their config, so their own validation runs too."""
        self.both_refuse({"backends": [{"name": "b", "plugin": "example", "config": {"documents": []}}]}, ["--port", "0"],
                         "backend b")
        self.both_refuse({"backends": [{"name": "b", "plugin": "nonexistent"}]}, ["--port", "0"], "sg_nonexistent.so")

    def test_retries_bounds_and_routes_that_never_retry(self):
        """A route's retries is 0 to 10: -1 (once silently "the plugin's own") is refused; set on
        a route whose plugin makes no upstream requests it has no effect, and a warning says so."""
        self.both_refuse({"backends": [dict(example_backend(), retries=-1)]}, ["--port", "0"],
                         "backends[0].retries: expected an integer in [0, 10], got -1")
        rc, out = self.run_gateway({"backends": [dict(example_backend(), retries=2)]}, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)
        self.assertIn('backend example: "retries": 2 has no effect: plugin example sends no upstream requests', out)
        rc, out = self.run_gateway({"backends": [dict(example_backend(), retries=0)]}, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)
        self.assertNotIn("retries", out)

    def test_default_route_without_pages_warns(self):
        rc, out = self.run_gateway({"backends": [example_backend()]}, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)
        self.assertIn("default route example has no page store: POST /access answers a null page per URL", out)
        pages = [{"url": "https://example.org/a", "contents": "a"}]
        rc, out = self.run_gateway({"backends": [example_backend(pages=pages), example_backend("other")]}, "--check", "--port", "0")
        self.assertEqual(rc, 0, out)
        self.assertNotIn("page store", out)  # only the default route is what /access reaches without a name


if __name__ == "__main__":
    sgtest.main()
