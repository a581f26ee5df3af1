"""The official MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned by tests/mcp/node/package-lock.json)
against the gateway with a Bearer key: streamable HTTP (JSON and SSE-framed replies) and HTTP+SSE,
tools listed and called, text and documents checked against POST /retrieve and /access, and the
sessions of verl-style clients (a fresh session per call) ended by their DELETE.

The Node modules are installed by `make test` (.ci/deps.sh test runs `npm ci` there); when they are
missing this test runs `npm ci --offline`, then `npm ci`, and is skipped (CTest exit 77) with the
reason when npm cannot install them (no registry access)."""
import json
import os
import subprocess
import sys
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend
from mcputil import NODE_DIR, ensure_node_modules, passages2string

SKIP = 77


def ensure_modules():
    """Returns None when the SDK is importable, else the reason it cannot be installed."""
    return ensure_node_modules("@modelcontextprotocol/sdk")


PAGES = [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet is a tragedy.", "title": "Hamlet"}]
ENV = {"SG_TEST_MCP_SDK_KEY": "sdk-key"}


class SDK(unittest.TestCase):
    def test_sdk_client(self):
        gw = Gateway({"backends": [example_backend(), example_backend("wiki", pages=PAGES)],
                      "clients": {"require_key": True, "keys": [{"id": "sdk", "key_env": "SG_TEST_MCP_SDK_KEY"}]},
                      "mcp": {"sse_keepalive_s": 1}},  # a stream the client closed is noticed at its next write
                     env=ENV, threads=2)
        gw.metrics_headers = {"Authorization": "Bearer sdk-key"}
        try:
            p = subprocess.run(["node", os.path.join(NODE_DIR, "sdk_test.mjs"), "http://127.0.0.1:%d" % gw.port, "sdk-key"],
                               cwd=NODE_DIR, capture_output=True, text=True, timeout=sgtest.scaled(120))
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            report = json.loads(p.stdout)
            h = {"Authorization": "Bearer sdk-key"}
            want = [gw.retrieve(["paris"], topk=3, headers=h).json()["result"],
                    gw.retrieve(["hamlet", "tokyo"], topk=2, headers=h).json()["result"],
                    gw.retrieve(["redis"], topk=1, path="/retrieve/wiki", headers=h).json()["result"]]
            page = gw.post("/access/wiki", {"urls": [PAGES[0]["url"]]}, headers=h).json()["result"]
            for kind in ("streamable", "streamable-sse", "sse"):
                r = report[kind]
                self.assertEqual(r["server"]["name"], "searchgate", kind)
                # the SDK asks for its newest version (2025-11-25); the gateway answers its own newest
                self.assertEqual(r["protocolVersion"], "2025-06-18", kind)
                self.assertEqual(sorted(r["tools"]), ["access_wiki", "search", "search_wiki"], kind)
                if kind != "sse":
                    self.assertRegex(r["sessionId"], r"^[0-9a-f]{32}$")
                for res, w in zip(r["results"][:3], want):
                    self.assertFalse(res.get("isError"), (kind, res))
                    self.assertEqual(res["structuredContent"]["result"], w, kind)
                    self.assertEqual([c["text"] for c in res["content"]], [passages2string(q) for q in w], kind)
                acc = r["results"][3]
                self.assertEqual(acc["structuredContent"]["result"], page)
                self.assertEqual(acc["content"][0]["text"], "Hamlet is a tragedy.")
                self.assertEqual(r["unknownTool"], -32602, kind)
            self.assertEqual(report["fresh"], [passages2string(gw.retrieve(["faiss"], headers=h).json()["result"][0])] * 3)
            self.assertTrue(report["fresh"][0].startswith('Doc 1(Title: "FAISS") FAISS is'), report["fresh"][0])
            # every session ended: the streamable ones by DELETE, the SSE one with its stream
            deadline = time.time() + sgtest.scaled(10)
            while time.time() < deadline and gw.metric("searchgate_mcp_sessions") != 0:
                time.sleep(0.05)
            self.assertEqual(gw.metric("searchgate_mcp_sessions"), 0)
            self.assertEqual(gw.metric("searchgate_mcp_sessions_ended_total", reason="deleted"), 5)
            self.assertEqual(gw.metric("searchgate_mcp_sessions_ended_total", reason="stream_closed"), 1)
            # the calls went through the client's own accounting, like its /retrieve calls
            self.assertGreaterEqual(gw.metric("searchgate_client_requests_total", client="sdk"), 3 * 4 + 3)
        finally:
            gw.stop()


if __name__ == "__main__":
    why = ensure_modules()
    if why is not None:
        print("SKIPPED: " + why)
        sys.exit(SKIP)
    sgtest.main()
