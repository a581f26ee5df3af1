"""The official MCP conformance suite (@modelcontextprotocol/conformance, pinned by
tests/mcp/node/package-lock.json; 0.1.13 is the newest that runs on Debian's Node 20) against a
gateway started here: the server scenarios that apply to a search server. The others exercise the
suite's reference tools, prompts, resources, logging, sampling and elicitation, which a retrieval
gateway does not offer.

dns-rebinding-protection sends `Host: evil.example.com` and `Origin: http://evil.example.com` to
/mcp and wants a 4xx, then the gateway's own Host and Origin and wants a 2xx (gate.c).

The Node modules are installed by `make test` (.ci/deps.sh test runs `npm ci`); when they are
missing and npm cannot install them, the test is skipped (CTest exit 77) with the reason."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

import sgtest
from sgtest import Gateway, example_backend
from mcputil import NODE_DIR, ensure_node_modules

SKIP = 77
PACKAGE = "@modelcontextprotocol/conformance"
SCENARIOS = ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]


def run_scenario(url, scenario):
    """Runs one scenario; returns (exit status, its checks, the tool's output)."""
    cli = os.path.join(NODE_DIR, "node_modules", *PACKAGE.split("/"), "dist", "index.js")
    out = tempfile.mkdtemp(prefix="sgconformance-")
    p = subprocess.run(["node", cli, "server", "--url", url, "--scenario", scenario, "-o", out], cwd=NODE_DIR,
                       capture_output=True, text=True, timeout=sgtest.scaled(120))
    checks = []
    for path in glob.glob(os.path.join(out, "**", "checks.json"), recursive=True):
        with open(path) as f:
            checks += json.load(f)
    return p.returncode, checks, p.stdout[-3000:] + p.stderr[-3000:]


class Conformance(unittest.TestCase):
    def test_server_scenarios(self):
        gw = Gateway({"backends": [example_backend(), example_backend("wiki")], "mcp": {"enabled": True}})
        try:
            url = "http://127.0.0.1:%d/mcp" % gw.port
            for scenario in SCENARIOS:
                with self.subTest(scenario=scenario):
                    rc, checks, output = run_scenario(url, scenario)
                    self.assertTrue(checks, "%s wrote no checks:\n%s" % (scenario, output))
                    failed = [c for c in checks if c["status"] == "FAILURE"]
                    self.assertEqual(failed, [], json.dumps(failed, indent=1)[-3000:])
                    self.assertEqual(rc, 0, output)
            # the rebinding attempt was refused by the Host check, before MCP saw it
            self.assertGreaterEqual(gw.metric("searchgate_http_refused_total", reason="host"), 1)
        finally:
            gw.stop()


if __name__ == "__main__":
    why = ensure_node_modules(PACKAGE)
    if why is not None:
        print("SKIPPED: " + why)
        sys.exit(SKIP)
    sgtest.main()
