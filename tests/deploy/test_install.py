"""`make install` (issue 20, item 5): the install rules of deploy/CMakeLists.txt into a staging
root (DESTDIR) with a prefix other than /usr, then the installed tree used as it is: the index tool
finds its builder beside it, the gateway finds its plugins in ../lib/searchgate from its own
location (nothing points it there) and serves, a mock route's trace is read by the installed
searchgate-trace, and a second install keeps an edited config. Every program and plugin the build
made is installed, but the example plugin (a test plugin).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import sgtest
from sgtest import Gateway

PREFIX = "/opt/searchgate"
NOT_INSTALLED = {"sg_example.so"}  # the plugin ABI's worked example, built for the tests


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dest = tempfile.mkdtemp(prefix="sginstall-")
        cls.install()
        cls.top = cls.dest + PREFIX

    @classmethod
    def install(cls):
        env = dict(os.environ, DESTDIR=cls.dest, SG_SYSCONFDIR=PREFIX + "/etc")
        p = subprocess.run(["cmake", "--install", sgtest.BUILD_DIR, "--prefix", PREFIX], env=env, capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0:
            raise AssertionError("cmake --install failed:\n" + p.stdout[-3000:] + p.stderr[-3000:])
        return p.stdout

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dest, ignore_errors=True)

    def test_layout(self):
        for path in ("bin/searchgate", "bin/searchgate-index", "bin/searchgate-index-bm25", "bin/searchgate-index-dense",
                     "bin/searchgate-index-convert", "bin/searchgate-encode", "bin/searchgate-gcide-corpus",
                     "bin/searchgate-trace", "lib/searchgate/sg_bm25.so", "lib/searchgate/sg_local.so",
                     "lib/searchgate/sg_upstream.so", "lib/searchgate/sg_serper.so", "lib/searchgate/sg_mock.so",
                     "lib/searchgate/rerank_xenc.so", "lib/searchgate/prepare-demo", "etc/searchgate/searchgate.json",
                     "share/doc/searchgate/README.md", "share/doc/searchgate/deployment.md",
                     "share/doc/searchgate/configuration.md", "share/doc/searchgate/examples/haproxy.cfg",
                     "share/doc/searchgate/examples/configs/default.json", "lib/systemd/system/searchgate.service"):
            self.assertTrue(os.path.exists(os.path.join(self.top, path)), path)
        self.assertFalse(os.path.exists(os.path.join(self.top, "lib/searchgate/sg_example.so")))  # a test plugin
        # whatever the build made (plugins/, the searchgate* programs), a new one included
        plugins = set(os.listdir(os.path.join(sgtest.BUILD_DIR, "plugins"))) - NOT_INSTALLED
        self.assertEqual(plugins - set(os.listdir(os.path.join(self.top, "lib/searchgate"))), set())
        tools = {f for f in os.listdir(sgtest.BUILD_DIR)
                 if f.startswith("searchgate") and os.access(os.path.join(sgtest.BUILD_DIR, f), os.X_OK)
                 and os.path.isfile(os.path.join(sgtest.BUILD_DIR, f))}
        self.assertEqual(tools - set(os.listdir(os.path.join(self.top, "bin"))), set())
        with open(os.path.join(self.top, "lib/systemd/system/searchgate.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=%s/bin/searchgate --config %s/etc/searchgate/searchgate.json\n" % (PREFIX, PREFIX), unit)
        with open(os.path.join(self.top, "lib/searchgate/prepare-demo")) as f:
            self.assertIn("TOOLS_DIR='%s/bin'" % PREFIX, f.read())
        with open(os.path.join(self.top, "etc/searchgate/searchgate.json")) as f:
            self.assertEqual(json.load(f)["backends"][0]["config"]["index"], "/var/lib/searchgate/demo/bm25")

    def test_installed_tree_serves(self):
        work = tempfile.mkdtemp(prefix="sginstalled-")
        try:
            corpus = os.path.join(work, "corpus.jsonl")
            with open(corpus, "w") as f:
                for d in sgtest.DOCS:
                    f.write(json.dumps(d) + "\n")
            index = os.path.join(work, "bm25")
            p = subprocess.run([os.path.join(self.top, "bin", "searchgate-index"), "bm25", corpus, index], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            out = subprocess.run([os.path.join(self.top, "bin", "searchgate"), "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
            line = [ln for ln in out.splitlines() if ln.startswith("plugins ")][0]
            self.assertTrue(line.startswith("plugins      %s/lib/searchgate:" % self.top), line)
            built = {f[3:-3] for f in os.listdir(os.path.join(sgtest.BUILD_DIR, "plugins"))
                     if f.startswith("sg_") and f not in NOT_INSTALLED}
            self.assertEqual(set(line.split(":", 1)[1].split()), built)  # mock among them
            saved = sgtest.BUILD_DIR
            sgtest.BUILD_DIR = os.path.join(self.top, "bin")  # Gateway() runs BUILD_DIR/searchgate
            try:
                gw = Gateway({"backends": [{"name": "bm25", "plugin": "bm25", "config": {"index": index}}]})
            finally:
                sgtest.BUILD_DIR = saved
            try:
                r = gw.retrieve(["capital of France"], topk=1)
                self.assertEqual(r.status, 200, r)
                self.assertIn("Paris", r.json()["result"][0][0]["document"]["contents"])
            finally:
                gw.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_installed_mock_and_trace_tool(self):
        """The mock route (a framework's CI) from the installed tree, its trace read by the installed
        searchgate-trace (docs/traces.md)."""
        work = tempfile.mkdtemp(prefix="sginstalled-")
        try:
            trace = os.path.join(work, "mock.jsonl")
            saved = sgtest.BUILD_DIR
            sgtest.BUILD_DIR = os.path.join(self.top, "bin")
            try:
                gw = Gateway({"backends": [{"name": "mock", "plugin": "mock", "config": {"seed": 0}, "trace": {"path": trace}}]})
            finally:
                sgtest.BUILD_DIR = saved
            try:
                r = gw.retrieve(["who wrote hamlet", "capital of france"], topk=2)
                self.assertEqual(r.status, 200, r)
                self.assertEqual([len(hits) for hits in r.json()["result"]], [2, 2])
                self.assertTrue(r.json()["result"][0][0]["document"]["id"].startswith("mock-"), r)
            finally:
                gw.stop()  # the trace's writer flushes on exit
            p = subprocess.run([os.path.join(self.top, "bin", "searchgate-trace"), "summary", "--json", trace],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            group = json.loads(p.stdout)["traces"][0]["groups"][0]
            self.assertEqual((group["route"], group["queries"], group["requests"]), ("mock", 2, 1))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_reinstall_keeps_the_config(self):
        conf = os.path.join(self.top, "etc/searchgate/searchgate.json")
        with open(conf, "w") as f:
            f.write('{"backends": [{"name": "mine", "plugin": "bm25", "config": {"index": "/srv/idx"}}]}\n')
        out = self.install()
        self.assertIn("Keeping: %s" % conf, out)
        with open(conf) as f:
            self.assertIn('"mine"', f.read())


if __name__ == "__main__":
    sgtest.main()
