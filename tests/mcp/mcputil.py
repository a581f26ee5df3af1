"""Helpers for the MCP tests: raw JSON-RPC over POST /mcp, an SSE reader for GET /sse, and the
Search-R1 observation format (Search-R1's `_passages2string`) to compare tool text against."""
import fcntl
import http.client
import json
import os
import shutil
import subprocess

import sgtest

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")

ACCEPT_BOTH = "application/json, text/event-stream"


def rpc(method, params=None, id=1):
    m = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        m["id"] = id
    if params is not None:
        m["params"] = params
    return m


def init_params(version="2025-06-18"):
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "sgtest", "version": "1"}}


def post(gw, body, headers=None, path="/mcp", accept=ACCEPT_BOTH):
    h = {"Content-Type": "application/json"}
    if accept is not None:
        h["Accept"] = accept
    h.update(headers or {})
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return sgtest.request(gw.port, "POST", path, body, h)


def initialize(gw, version="2025-06-18", headers=None):
    """Opens a session; returns (session id, negotiated version)."""
    r = post(gw, rpc("initialize", init_params(version)), headers)
    assert r.status == 200, r
    return r.headers["mcp-session-id"], r.json()["result"]["protocolVersion"]


def passages2string(retrieval_result):
    """The Search-R1 observation of one query's documents (search_r1/llm_agent/generation.py,
    _passages2string, as docs/protocols.md describes it): for document n, its contents split at the
    first newline into title and text, the line `Doc <n>(Title: <title>) <text>` and a newline."""
    lines = []
    for n, item in enumerate(retrieval_result, 1):
        title, _, text = item["document"]["contents"].partition("\n")
        lines.append("Doc %d(Title: %s) %s\n" % (n, title, text))
    return "".join(lines)


def sse_events_from_body(body):
    """Parses a complete text/event-stream body into [(event, data)]."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        ev, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        out.append((ev, "\n".join(data)))
    return out


class SSEStream:
    """GET /sse on its own connection; next_event() reads one event (comments skipped)."""

    def __init__(self, port, headers=None, timeout=30):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        h = {"Accept": "text/event-stream"}
        h.update(headers or {})
        self.conn.request("GET", "/sse", headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.buf = b""
        self.endpoint = None
        if self.status == 200:
            ev, data = self.next_event()
            assert ev == "endpoint", (ev, data)
            self.endpoint = data

    def next_event(self):
        """(event, data), or None at the end of the stream."""
        while True:
            while b"\n\n" not in self.buf:
                chunk = self.resp.read1(65536)
                if not chunk:
                    return None
                self.buf += chunk
            block, self.buf = self.buf.split(b"\n\n", 1)
            ev, data, has_data = "message", [], False
            for line in block.decode().split("\n"):
                if line.startswith("event:"):
                    ev = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                    has_data = True
            if has_data:
                return ev, "\n".join(data)

    def next_message(self):
        e = self.next_event()
        assert e is not None and e[0] == "message", e
        return json.loads(e[1])

    def close(self):
        self.conn.close()


def ensure_node_modules(package):
    """Returns None when the Node module `package` (pinned by node/package-lock.json) is installed,
    else the reason it cannot be: `npm ci --offline`, then `npm ci`, are tried first. The modules are
    installed by `make test` (.ci/deps.sh test runs `npm ci`); a test that gets a reason is skipped."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are not installed (.ci/deps.sh test installs them)"
    marker = os.path.join(NODE_DIR, "node_modules", *package.split("/"), "package.json")
    with open(os.path.join(NODE_DIR, "package-lock.json")) as f:
        want = json.load(f)["packages"]["node_modules/" + package]["version"]
    with open(os.path.join(NODE_DIR, ".install.lock"), "w") as lock:  # the plain and sanitizer suites may run at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):
            with open(marker) as f:
                if json.load(f)["version"] == want:
                    return None
        errors = []
        for args in (["ci", "--offline"], ["ci"]):
            p = subprocess.run([npm] + args + ["--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True,
                               timeout=600)
            if p.returncode == 0 and os.path.exists(marker):
                return None
            errors.append("npm %s: %s" % (" ".join(args), (p.stderr or p.stdout).strip()[-400:]))
        return "npm could not install %s %s (no registry access?):\n%s" % (package, want, "\n".join(errors))
