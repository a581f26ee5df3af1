"""The MCP endpoint with raw JSON-RPC (docs/mcp.md): protocol errors as JSON-RPC 2.0 and the MCP
spec define them, batches per protocol version, sessions (unknown, missing, deleted, expired,
evicted, bound to their client), Accept negotiation, identity through the same API keys as
/retrieve (401, and one rate limit shared with /retrieve), body limits, and the HTTP+SSE transport
(GET /sse + POST /messages) including replies produced on another loop thread and a clean end of
the streams at shutdown. Tool results are compared with what /retrieve and /access answer."""
import json
import re
import socket
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend
from mcputil import (ACCEPT_BOTH, SSEStream, init_params, initialize, passages2string, post, rpc, sse_events_from_body)

ENV = {"SG_TEST_MCP_KEY_A": "key-a", "SG_TEST_MCP_KEY_B": "key-b", "SG_TEST_MCP_KEY_SLOW": "key-slow",
       "SG_TEST_MCP_KEY_SLOW2": "key-slow2"}
PAGES = [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet is a tragedy.", "title": "Hamlet"}]


def config(**extra):
    c = {"backends": [example_backend(), example_backend("wiki", pages=PAGES)]}
    c.update(extra)
    return c


def keyed_config(**extra):
    c = config(clients={"require_key": True,
                        "keys": [{"id": "job-a", "key_env": "SG_TEST_MCP_KEY_A"}, {"id": "job-b", "key_env": "SG_TEST_MCP_KEY_B"},
                                 # one query per 20 s: the second request is refused however slow the machine
                                 {"id": "slow", "key_env": "SG_TEST_MCP_KEY_SLOW", "rate": 0.05, "burst": 1, "mode": "reject"},
                                 {"id": "slow2", "key_env": "SG_TEST_MCP_KEY_SLOW2", "rate": 0.05, "burst": 1, "mode": "reject"}]})
    c.update(extra)
    return c


A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


class Protocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(config())

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def call(self, body, **kw):
        r = post(self.gw, body, **kw)
        return r, (r.json() if r.body else None)

    def test_initialize_negotiates_the_version(self):
        for asked, got in (("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"), ("2024-11-05", "2024-11-05"),
                           ("2025-11-25", "2025-06-18"), ("1999-01-01", "2025-06-18")):
            r, j = self.call(rpc("initialize", init_params(asked), id="init"))
            self.assertEqual(r.status, 200, r)
            self.assertEqual(j["id"], "init")
            self.assertEqual(j["result"]["protocolVersion"], got)
            self.assertEqual(j["result"]["serverInfo"]["name"], "searchgate")
            self.assertIn("tools", j["result"]["capabilities"])
            self.assertRegex(r.headers["mcp-session-id"], r"^[0-9a-f]{32}$")
            self.assertEqual(r.headers["content-type"], "application/json")
        r, j = self.call(rpc("initialize", {"capabilities": {}}))
        self.assertEqual(j["error"]["code"], -32602)
        self.assertNotIn("mcp-session-id", r.headers)

    def test_ping_and_unknown_method(self):
        r, j = self.call(rpc("ping", id=7))
        self.assertEqual((r.status, j), (200, {"jsonrpc": "2.0", "id": 7, "result": {}}))
        r, j = self.call(rpc("resources/list", id="r1"))
        self.assertEqual(r.status, 200)
        self.assertEqual(j["id"], "r1")
        self.assertEqual(j["error"]["code"], -32601)

    def test_tools_list(self):
        r, j = self.call(rpc("tools/list"))
        tools = {t["name"]: t for t in j["result"]["tools"]}
        self.assertEqual(sorted(tools), ["access_wiki", "search", "search_wiki"])  # the default route has no pages
        s = tools["search"]
        self.assertEqual(set(s["inputSchema"]["properties"]), {"query", "queries", "topk"})
        self.assertEqual(s["inputSchema"]["properties"]["topk"]["maximum"], 1000)
        # 0 and null (like no topk) are the route's default, as on /retrieve: the schema admits
        # exactly what tools/call accepts (docs/mcp.md)
        topk = s["inputSchema"]["properties"]["topk"]
        self.assertEqual((topk["type"], topk["minimum"]), (["integer", "null"], 0))

        def admits(v):
            kinds = {"integer": isinstance(v, int) and not isinstance(v, bool), "null": v is None}
            return any(kinds[t] for t in topk["type"]) and (v is None or topk["minimum"] <= v <= topk["maximum"])

        for v in (None, 0, 3, 1000, -1, 1.5, "3", 1001, True):
            _, j = self.call(rpc("tools/call", {"name": "search", "arguments": {"query": "paris", "topk": v}}))
            self.assertEqual(admits(v), "result" in j and not j["result"].get("isError"), (v, j))
        self.assertIn("result", s["outputSchema"]["required"])
        self.assertEqual(set(tools["access_wiki"]["inputSchema"]["properties"]), {"url", "urls"})

    def test_bad_params(self):
        bad = [({}, "params.name"), ({"name": 5}, "params.name"), ({"name": "nope", "arguments": {"query": "x"}}, "unknown tool"),
               ({"name": "search", "arguments": {}}, "exactly one"),
               ({"name": "search", "arguments": {"query": "a", "queries": ["b"]}}, "exactly one"),
               ({"name": "search", "arguments": {"query": 5}}, "must be a string"),
               ({"name": "search", "arguments": {"queries": []}}, "non-empty"),
               ({"name": "search", "arguments": {"queries": ["a", 3]}}, "queries[1]"),
               ({"name": "search", "arguments": {"query": "a", "topk": -1}}, "topk"),
               ({"name": "search", "arguments": {"query": "a", "topk": 1.5}}, "topk"),
               ({"name": "search", "arguments": {"query": "a", "topk": "3"}}, "topk"),
               ({"name": "search", "arguments": {"query": "a", "topk": 1001}}, "max_topk"),
               ({"name": "search", "arguments": {"query": "x" * 9000}}, "max_query_bytes"),
               ({"name": "search", "arguments": "paris"}, "arguments must be an object"),
               ({"name": "access_wiki", "arguments": {"query": "x"}}, "url")]
        for params, words in bad:
            r, j = self.call(rpc("tools/call", params, id=3))
            self.assertEqual(r.status, 200, params)
            self.assertEqual(j["error"]["code"], -32602, (params, j))
            self.assertIn(words, j["error"]["message"], params)
        r, j = self.call(rpc("tools/call", ["search"]))
        self.assertEqual((r.status, j["error"]["code"]), (400, -32600))  # params must be an object

    def test_parse_errors(self):
        for body in (b"{bad", b"", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"} trailing', b'{"a": "\xff"}'):
            r, j = self.call(body)
            self.assertEqual(r.status, 400, body)
            self.assertEqual(j["error"]["code"], -32700, body)
            self.assertIsNone(j["id"])

    def test_invalid_requests(self):
        for body in ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, {"id": 1, "method": "ping"}, [], "42", {"jsonrpc": "2.0"},
                     {"jsonrpc": "2.0", "id": 1, "method": 5}):
            r, j = self.call(body)
            self.assertEqual(r.status, 400, body)
            self.assertEqual(j["error"]["code"], -32600, body)

    def test_notifications_and_client_responses_are_accepted(self):
        for body in (rpc("notifications/initialized", id=None), rpc("notifications/cancelled", {"requestId": 1}, id=None),
                     {"jsonrpc": "2.0", "id": 5, "result": {}}, rpc("no/such/notification", id=None)):
            r = post(self.gw, body)
            self.assertEqual((r.status, r.body), (202, b""), body)

    def test_batch(self):
        """Without MCP-Protocol-Version and without a session the server assumes 2025-03-26, which has batches."""
        batch = [rpc("ping", id=1), rpc("nope", id="b"), rpc("notifications/initialized", id=None), rpc("tools/list", id=2),
                 {"jsonrpc": "2.0", "id": None, "method": "ping"}, 17, rpc("initialize", init_params(), id=3)]
        r, j = self.call(batch)
        self.assertEqual(r.status, 200)
        self.assertIsInstance(j, list)
        self.assertEqual([x.get("id") for x in j], [1, "b", 2, None, None, 3])
        self.assertEqual(j[0]["result"], {})
        self.assertEqual(j[1]["error"]["code"], -32601)
        self.assertIn("tools", j[2]["result"])
        self.assertEqual(j[3]["error"]["code"], -32600)  # id null
        self.assertEqual(j[4]["error"]["code"], -32600)  # not an object
        self.assertEqual(j[5]["error"]["code"], -32600)  # initialize must not be batched
        r = post(self.gw, [rpc("notifications/initialized", id=None), {"jsonrpc": "2.0", "id": 9, "result": {}}])
        self.assertEqual((r.status, r.body), (202, b""))
        # one version allows batches, the newest does not
        r = post(self.gw, [rpc("ping")], headers={"MCP-Protocol-Version": "2025-03-26"})
        self.assertEqual(r.status, 200)
        r = post(self.gw, [rpc("ping")], headers={"MCP-Protocol-Version": "2025-06-18"})
        self.assertEqual((r.status, r.json()["error"]["code"]), (400, -32600))
        sid, v = initialize(self.gw, "2025-06-18")
        r = post(self.gw, [rpc("ping")], headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 400)  # the session negotiated 2025-06-18
        sid, v = initialize(self.gw, "2025-03-26")
        r = post(self.gw, [rpc("ping")], headers={"Mcp-Session-Id": sid})
        self.assertEqual(r.status, 200)

    def test_protocol_version_header(self):
        r = post(self.gw, rpc("ping"), headers={"MCP-Protocol-Version": "2030-01-01"})
        self.assertEqual((r.status, r.json()["error"]["code"]), (400, -32600))
        r = post(self.gw, rpc("ping"), headers={"MCP-Protocol-Version": "2024-11-05"})
        self.assertEqual(r.status, 200)

    def test_accept(self):
        for accept in ("text/html", "application/json;q=0, text/event-stream;q=0", "image/*"):
            r = post(self.gw, rpc("ping"), accept=accept)
            self.assertEqual(r.status, 406, accept)
            self.assertEqual(r.json()["error"]["code"], -32600)
        for accept, ctype in ((None, "application/json"), ("application/json", "application/json"), ("*/*", "application/json"),
                              (ACCEPT_BOTH, "application/json"), ("text/event-stream", "text/event-stream"),
                              ("application/json;q=0.5, text/event-stream", "text/event-stream"),
                              ("*/*;q=0.1, application/json;q=0", "text/event-stream")):
            r = post(self.gw, rpc("ping", id=11), accept=accept)
            self.assertEqual((r.status, r.headers["content-type"]), (200, ctype), accept)
            if ctype == "text/event-stream":
                self.assertEqual(sse_events_from_body(r.body), [("message", '{"jsonrpc":"2.0","id":11,"result":{}}')])
            else:
                self.assertEqual(r.json()["result"], {})
        # a batch answered as an event stream: one event per response
        r = post(self.gw, [rpc("ping", id=1), rpc("ping", id=2)], accept="text/event-stream")
        self.assertEqual([json.loads(d)["id"] for _, d in sse_events_from_body(r.body)], [1, 2])

    def test_content_type_and_methods(self):
        r = post(self.gw, rpc("ping"), headers={"Content-Type": "text/plain"})
        self.assertEqual(r.status, 415)
        r = post(self.gw, rpc("ping"), headers={"Content-Type": "application/json; charset=utf-8"})
        self.assertEqual(r.status, 200)
        r = self.gw.get("/mcp")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.headers["allow"], "POST, DELETE")
        self.assertEqual(sgtest.request(self.gw.port, "PUT", "/messages?session_id=x").status, 405)
        self.assertEqual(sgtest.request(self.gw.port, "POST", "/sse", "{}").status, 405)
        # each path is exact (h2o registers prefixes): anything below them is no route
        for path in ("/mcp/x", "/sse/x", "/messages/x"):
            self.assertEqual(sgtest.request(self.gw.port, "POST", path, "{}").status, 404, path)

    def test_sessions(self):
        sid, _ = initialize(self.gw)
        h = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
        self.assertEqual(post(self.gw, rpc("ping"), headers=h).status, 200)
        # unknown session: 404, which tells the client to initialize again
        r = post(self.gw, rpc("ping"), headers={"Mcp-Session-Id": "0" * 32})
        self.assertEqual((r.status, r.json()["error"]["code"]), (404, -32001))
        self.assertEqual(post(self.gw, rpc("ping"), headers={"Mcp-Session-Id": "short"}).status, 404)
        # no session at all: served statelessly (verl opens a fresh session for every call anyway)
        self.assertEqual(post(self.gw, rpc("tools/list")).status, 200)
        # DELETE ends it
        self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp", headers=h).status, 200)
        self.assertEqual(post(self.gw, rpc("ping"), headers=h).status, 404)
        self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp", headers=h).status, 404)
        self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp").status, 400)
        # initialize with a stale session id opens a new session
        r = post(self.gw, rpc("initialize", init_params()), headers=h)
        self.assertEqual(r.status, 200)
        self.assertNotEqual(r.headers["mcp-session-id"], sid)

    def test_root_lists_the_endpoints(self):
        links = self.gw.get("/").json()["links"]
        self.assertEqual((links["mcp"], links["sse"]), ("/mcp", "/sse"))


class Sessions(unittest.TestCase):
    def test_require_session(self):
        gw = Gateway(config(mcp={"require_session": True}))
        try:
            r = post(gw, rpc("tools/list"))
            self.assertEqual((r.status, r.json()["error"]["code"]), (400, -32600))
            sid, _ = initialize(gw)
            self.assertEqual(post(gw, rpc("tools/list"), headers={"Mcp-Session-Id": sid}).status, 200)
        finally:
            gw.stop()

    def test_capacity(self):
        gw = Gateway(config(mcp={"max_sessions": 2}))
        try:
            s1, _ = initialize(gw)
            s2, _ = initialize(gw)
            s3, _ = initialize(gw)  # the least recently used one (s1) makes room
            self.assertEqual(post(gw, rpc("ping"), headers={"Mcp-Session-Id": s1}).status, 404)
            self.assertEqual(post(gw, rpc("ping"), headers={"Mcp-Session-Id": s2}).status, 200)
            self.assertEqual(post(gw, rpc("ping"), headers={"Mcp-Session-Id": s3}).status, 200)
            self.assertEqual(gw.metric("searchgate_mcp_sessions_ended_total", reason="evicted"), 1)
            self.assertEqual(gw.metric("searchgate_mcp_sessions"), 2)
        finally:
            gw.stop()

    def test_idle_expiry(self):
        gw = Gateway(config(mcp={"session_idle_s": 1}))
        try:
            s1, _ = initialize(gw)
            initialize(gw)
            time.sleep(2.5)  # well past the idle limit
            self.assertEqual(post(gw, rpc("ping"), headers={"Mcp-Session-Id": s1}).status, 404)
            initialize(gw)  # a new session sweeps the other idle one
            self.assertEqual(gw.metric("searchgate_mcp_sessions"), 1)
            self.assertEqual(gw.metric("searchgate_mcp_sessions_ended_total", reason="idle"), 2)
        finally:
            gw.stop()

    def test_streams_are_sessions(self):
        """An open SSE stream's session is never evicted: with no room left, GET /sse is a 503."""
        gw = Gateway(config(mcp={"max_sessions": 1, "sse_keepalive_s": 1}))  # a closed stream is noticed at its next write
        try:
            st = SSEStream(gw.port)
            r = sgtest.request(gw.port, "GET", "/sse")
            self.assertEqual(r.status, 503)
            self.assertEqual(r.headers["retry-after"], "5")
            self.assertEqual(post(gw, rpc("initialize", init_params())).json()["error"]["code"], -32603)
            self.assertEqual(post(gw, rpc("ping"), path=st.endpoint).status, 202)  # the stream still works
            self.assertEqual(st.next_message()["result"], {})
            self.assertEqual(gw.metric("searchgate_mcp_sse_streams"), 1)
            st.close()
            deadline = time.time() + sgtest.scaled(10)
            while time.time() < deadline and gw.metric("searchgate_mcp_sse_streams") != 0:
                time.sleep(0.05)
            self.assertEqual(gw.metric("searchgate_mcp_sessions"), 0)
            initialize(gw)  # room again
        finally:
            gw.stop()

    def test_disabled(self):
        gw = Gateway(config(mcp={"enabled": False}))
        try:
            self.assertEqual(post(gw, rpc("ping")).status, 404)
            self.assertEqual(gw.get("/sse").status, 404)
            self.assertNotIn("mcp", gw.get("/").json()["links"])
        finally:
            gw.stop()


class Identity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(keyed_config(), env=ENV)
        cls.gw.metrics_headers = A

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_401(self):
        for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer key-a", "X-API-Key": "key-b"}):
            r = post(self.gw, rpc("initialize", init_params()), headers=h)
            self.assertEqual(r.status, 401, h)
            self.assertEqual(r.headers["www-authenticate"], 'Bearer realm="searchgate"')
            self.assertIsNone(r.json()["id"])
            self.assertEqual(sgtest.request(self.gw.port, "GET", "/sse", headers=h).status, 401)
            self.assertEqual(post(self.gw, rpc("ping"), path="/messages?session_id=x", headers=h).status, 401)
            self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp", headers=h).status, 401)
        self.assertEqual(post(self.gw, rpc("ping"), headers={"X-API-Key": "key-a"}).status, 200)

    def test_session_is_bound_to_its_client(self):
        sid, _ = initialize(self.gw, headers=A)
        self.assertEqual(post(self.gw, rpc("ping"), headers=dict(A, **{"Mcp-Session-Id": sid})).status, 200)
        self.assertEqual(post(self.gw, rpc("ping"), headers=dict(B, **{"Mcp-Session-Id": sid})).status, 404)
        self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp", headers=dict(B, **{"Mcp-Session-Id": sid})).status, 404)
        self.assertEqual(sgtest.request(self.gw.port, "DELETE", "/mcp", headers=dict(A, **{"Mcp-Session-Id": sid})).status, 200)
        st = SSEStream(self.gw.port, A)
        try:
            r = post(self.gw, rpc("ping"), path=st.endpoint, headers=B)
            self.assertEqual((r.status, r.json()["error"]["code"]), (404, -32001))
        finally:
            st.close()

    def test_rate_limit_is_shared_with_retrieve(self):
        """One client, one query per 20 s in reject mode: /retrieve spends the token, tools/call is refused."""
        slow = {"Authorization": "Bearer key-slow"}
        before = self.gw.metric("searchgate_client_rate_limited_total", client="slow")
        self.assertEqual(self.gw.retrieve(["paris"], headers=slow).status, 200)
        r = post(self.gw, rpc("tools/call", {"name": "search", "arguments": {"query": "hamlet"}}), headers=slow)
        self.assertEqual(r.status, 200)
        res = r.json()["result"]
        self.assertTrue(res["isError"], res)
        self.assertIn("429", res["content"][0]["text"])
        self.assertIn("rate_limited", res["content"][0]["text"])
        self.assertRegex(res["content"][0]["text"], r"retry in (19|20) s")
        self.assertNotIn("structuredContent", res)
        self.assertEqual(self.gw.metric("searchgate_client_rate_limited_total", client="slow"), before + 1)
        self.assertEqual(self.gw.metric("searchgate_mcp_tool_calls_total", tool="search", outcome="error"), 1)
        # and the other way round (another client with the same quota): the tool call spends it, /retrieve is refused
        slow2 = {"Authorization": "Bearer key-slow2"}
        r = post(self.gw, rpc("tools/call", {"name": "search", "arguments": {"query": "hamlet"}}), headers=slow2)
        self.assertFalse(r.json()["result"]["isError"], r)
        self.assertEqual(self.gw.retrieve(["paris"], headers=slow2).status, 429)


class Limits(unittest.TestCase):
    def test_body_size(self):
        gw = Gateway(config(limits={"max_body_bytes": 1024}))
        try:
            big = rpc("tools/call", {"name": "search", "arguments": {"query": "x" * 1500}})
            r = post(gw, big)
            self.assertEqual((r.status, r.json()["error"]["code"]), (413, -32600))
            self.assertIn("max_body_bytes", r.json()["error"]["message"])
            r = post(gw, rpc("tools/call", {"name": "search", "arguments": {"query": "x" * 5000}}))
            self.assertEqual(r.status, 413)  # over twice the limit: h2o refuses it before reading
            self.assertEqual(post(gw, rpc("ping")).status, 200)
        finally:
            gw.stop()

    def test_tool_result_over_max_response_bytes(self):
        # the query's answer fits limits.max_response_bytes, but the tool result carries it twice
        # (the text content and structuredContent): it is a tool error naming the limit, not a
        # result over it
        docs = big_docs(10, 20000)
        call = tool_call("word1", topk=5)
        gw = Gateway({"backends": [example_backend(documents=docs)]})
        try:
            answer = len(gw.retrieve(["word1"], topk=5, return_scores=True).body)
            r = post(gw, call)
            self.assertFalse(r.json()["result"]["isError"], r)
            result = len(r.body) - len(b'{"jsonrpc":"2.0","id":1,"result":}')
        finally:
            gw.stop()
        self.assertGreater(result, answer * 3 // 2)
        limit = (answer + result) // 2
        gw = Gateway({"backends": [example_backend(documents=docs)], "limits": {"max_response_bytes": limit}})
        try:
            r = post(gw, call)
            self.assertEqual(r.status, 200, r)
            res = r.json()["result"]
            self.assertTrue(res["isError"], res)
            self.assertNotIn("structuredContent", res)
            text = res["content"][0]["text"]
            self.assertTrue(text.startswith("too_large: the result is %d bytes, over limits.max_response_bytes (%d)"
                                            % (result, limit)), text)
            # counted as what it is: an error result, an answer over the limit
            self.assertEqual(gw.metric("searchgate_mcp_tool_calls_total", tool="search", outcome="error"), 1)
            self.assertEqual(gw.metric("searchgate_mcp_tool_calls_total", tool="search", outcome="ok"), 0)
            self.assertEqual(gw.metric("searchgate_response_too_large_total", stage="exact"), 1)
            self.assertTrue(sgtest.wait_for(lambda: gw.metric("searchgate_response_bytes_held") == 0, 5))
            # a smaller one is answered
            r = post(gw, tool_call("word1", topk=1))
            self.assertFalse(r.json()["result"]["isError"], r)
        finally:
            gw.stop()


class Tools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(config())

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def tool(self, name, args, id=1, headers=None):
        r = post(self.gw, rpc("tools/call", {"name": name, "arguments": args}, id=id), headers=headers)
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["id"], id)
        return j["result"]

    def test_search_matches_retrieve(self):
        for args, queries, topk in (({"query": "paris"}, ["paris"], 3), ({"queries": ["hamlet", "tokyo", "hamlet"], "topk": 2},
                                                                           ["hamlet", "tokyo", "hamlet"], 2),
                                    ({"query": "zürich", "topk": None}, ["zürich"], 3),
                                    ({"query": "tokyo", "topk": 0}, ["tokyo"], 3)):
            res = self.tool("search", args)
            self.assertFalse(res["isError"])
            want = self.gw.retrieve(queries, topk=topk).json()["result"]
            self.assertEqual(res["structuredContent"]["result"], want)
            self.assertEqual([c["type"] for c in res["content"]], ["text"] * len(queries))
            self.assertEqual([c["text"] for c in res["content"]], [passages2string(x) for x in want])
            self.assertTrue(res["content"][0]["text"].startswith('Doc 1(Title: "'), res["content"][0]["text"])
        # another route
        res = self.tool("search_wiki", {"query": "redis", "topk": 1})
        self.assertEqual(res["structuredContent"]["result"], self.gw.retrieve(["redis"], topk=1, path="/retrieve/wiki").json()["result"])

    def test_access_matches_access(self):
        urls = [PAGES[0]["url"], "https://nowhere.example/x"]
        res = self.tool("access_wiki", {"urls": urls})
        self.assertFalse(res["isError"])
        want = self.gw.post("/access/wiki", {"urls": urls}).json()["result"]
        self.assertEqual(res["structuredContent"]["result"], want)
        self.assertEqual(res["content"][0]["text"], "Hamlet is a tragedy.")
        self.assertIn("No page found for https://nowhere.example/x", res["content"][1]["text"])

    def test_batch_of_calls_runs_concurrently(self):
        batch = [rpc("tools/call", {"name": "search", "arguments": {"query": "q%d" % i}}, id=i) for i in range(6)]
        r = post(self.gw, batch)
        self.assertEqual([x["id"] for x in r.json()], list(range(6)))
        self.assertTrue(all(not x["result"]["isError"] for x in r.json()))

    def test_metrics(self):
        self.tool("search", {"query": "metrics"})
        self.assertGreaterEqual(self.gw.metric("searchgate_mcp_tool_calls_total", tool="search", outcome="ok"), 1)
        self.assertGreaterEqual(self.gw.metric("searchgate_mcp_messages_total", method="tools/call"), 1)
        self.assertGreaterEqual(self.gw.metric("searchgate_client_requests_total"), 1)  # the pipeline counts the call


class FusionTools(unittest.TestCase):
    """A fusion route (docs/fusion.md) is a route like the others: its search tool fans the query out
    to the legs through the same pipeline and answers what POST /retrieve/<fusion> answers; its access
    tool reads the first leg with a page store."""

    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway({"backends": [example_backend(), example_backend("wiki", pages=PAGES),
                                       {"name": "hybrid", "fusion": {"routes": ["example", "wiki"], "method": "rrf"},
                                        "topk": 4}]})

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_tools_are_listed(self):
        r = post(self.gw, rpc("tools/list", {}))
        names = [t["name"] for t in r.json()["result"]["tools"]]
        self.assertIn("search_hybrid", names)
        self.assertIn("access_hybrid", names)  # through its leg "wiki", which has pages

    def test_search_matches_retrieve(self):
        for args, queries, topk in (({"query": "paris"}, ["paris"], 4), ({"queries": ["hamlet", "tokyo"], "topk": 2},
                                                                           ["hamlet", "tokyo"], 2)):
            r = post(self.gw, rpc("tools/call", {"name": "search_hybrid", "arguments": args}))
            res = r.json()["result"]
            self.assertFalse(res["isError"], res)
            want = self.gw.retrieve(queries, topk=topk, path="/retrieve/hybrid").json()["result"]
            self.assertEqual(res["structuredContent"]["result"], want)
            self.assertEqual([c["text"] for c in res["content"]], [passages2string(x) for x in want])
        self.assertGreaterEqual(self.gw.metric("searchgate_mcp_tool_calls_total", tool="search_hybrid", outcome="ok"), 2)

    def test_access_reads_the_leg_with_pages(self):
        r = post(self.gw, rpc("tools/call", {"name": "access_hybrid", "arguments": {"url": PAGES[0]["url"]}}))
        res = r.json()["result"]
        self.assertFalse(res["isError"], res)
        self.assertEqual(res["content"][0]["text"], "Hamlet is a tragedy.")


def verl_mcp_search_parse(content):
    """verl's MCPSearchTool._parse_tool_result (verl/tools/mcp_search_tool.py): regular expressions
    over each text part, after turning ' into \"."""
    res, count, queries = "", 0, []
    for part in content:
        if part["type"] != "text":
            continue
        text = part["text"].replace("'", '"')
        m = re.search(r'query"\s*:\s*"([^"]+)"', text)
        queries.append(m.group(1) if m else "")
        count += len(re.findall(r'"title"\s*:', text))
        m = re.search(r'"results"\s*:\s*(\[.*?\])', text, re.DOTALL)
        res += m.group(1) if m else ""
    return res, count, queries


class ResultsJsonText(unittest.TestCase):
    """mcp.text_format "results-json": what verl's MCPSearchTool can read, even with ' and ] in a text."""

    def test_verl_parser_reads_it(self):
        docs = [{"id": "0", "contents": "\"It's [1]\"\nThe band's first album [1] ] and 'quotes'.", "url": "https://x.example/1"},
                {"id": "1", "contents": "\"Plain\"\nplain words here", "url": ""}]
        gw = Gateway({"backends": [example_backend(documents=docs)], "mcp": {"text_format": "results-json"}})
        try:
            r = post(gw, rpc("tools/call", {"name": "search", "arguments": {"query": "band's album", "topk": 2}}))
            res = r.json()["result"]
            self.assertFalse(res["isError"])
            hits = gw.retrieve(["band's album"], topk=2).json()["result"][0]
            self.assertEqual(res["structuredContent"]["result"], [hits])
            results, count, queries = verl_mcp_search_parse(res["content"])
            self.assertEqual(queries, ["band\\u0027s album"])  # the raw text verl's regex takes
            self.assertEqual(count, len(hits))
            want = []
            for h in hits:
                first, _, rest = h["document"]["contents"].partition("\n")
                want.append({"title": first.strip('"'), "url": h["document"]["url"], "content": rest, "score": h["score"]})
            self.assertEqual(json.loads(results), want)
            self.assertEqual(json.loads(res["content"][0]["text"])["results"], want)  # and it is plain JSON
        finally:
            gw.stop()


class LegacySSE(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(config(), threads=2)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_round_trip(self):
        st = SSEStream(self.gw.port)
        try:
            self.assertEqual(st.status, 200)
            self.assertEqual(st.headers["content-type"], "text/event-stream")
            self.assertRegex(st.endpoint, r"^/messages\?session_id=[0-9a-f]{32}$")
            r = post(self.gw, rpc("initialize", init_params("2024-11-05"), id=0), path=st.endpoint)
            self.assertEqual((r.status, r.body), (202, b""))
            self.assertEqual(st.next_message()["result"]["protocolVersion"], "2024-11-05")
            self.assertEqual(post(self.gw, rpc("notifications/initialized", id=None), path=st.endpoint).status, 202)
            r = post(self.gw, rpc("tools/call", {"name": "search", "arguments": {"query": "tokyo"}}, id=1), path=st.endpoint)
            self.assertEqual(r.status, 202)
            m = st.next_message()
            self.assertEqual(m["id"], 1)
            self.assertEqual(m["result"]["structuredContent"]["result"], self.gw.retrieve(["tokyo"]).json()["result"])
            # errors travel on the stream too; a batch gives one event per response
            post(self.gw, [rpc("nope", id=2), rpc("ping", id=3)], path=st.endpoint)
            self.assertEqual(st.next_message()["error"]["code"], -32601)
            self.assertEqual(st.next_message()["id"], 3)
            # batches follow the session's version: 2024-11-05 has them, 2025-06-18 not
            r = post(self.gw, [rpc("ping")], path=st.endpoint, headers={"MCP-Protocol-Version": "2025-06-18"})
            self.assertEqual((r.status, r.json()["error"]["code"]), (400, -32600))
            # a parse error is answered on the POST itself
            r = post(self.gw, b"{oops", path=st.endpoint)
            self.assertEqual((r.status, r.json()["error"]["code"]), (400, -32700))
        finally:
            st.close()

    def test_replies_from_other_loops(self):
        """POSTs on fresh connections land on either loop thread; every reply reaches the stream."""
        st = SSEStream(self.gw.port)
        try:
            for i in range(24):
                self.assertEqual(post(self.gw, rpc("tools/call", {"name": "search", "arguments": {"query": "x%d" % i}}, id=i),
                                      path=st.endpoint).status, 202)
            got = sorted(st.next_message()["id"] for _ in range(24))
            self.assertEqual(got, list(range(24)))
        finally:
            st.close()

    def test_session_ends_with_its_stream(self):
        st = SSEStream(self.gw.port)
        ep = st.endpoint
        self.assertEqual(post(self.gw, rpc("ping"), path=ep).status, 202)
        st.close()
        deadline = time.time() + sgtest.scaled(10)
        while time.time() < deadline and post(self.gw, rpc("ping"), path=ep).status != 404:
            time.sleep(0.05)
        self.assertEqual(post(self.gw, rpc("ping"), path=ep).status, 404)
        self.assertEqual(post(self.gw, rpc("ping"), path="/messages").status, 400)
        self.assertEqual(post(self.gw, rpc("ping"), path="/messages?session_id=" + "f" * 32).status, 404)

    def test_keepalive(self):
        gw = Gateway(config(mcp={"sse_keepalive_s": 1}))
        try:
            st = SSEStream(gw.port)
            while b": keepalive" not in st.buf:
                chunk = st.resp.read1(4096)
                self.assertTrue(chunk)
                st.buf += chunk
            st.close()
        finally:
            gw.stop()


class Shutdown(unittest.TestCase):
    def test_streams_end_cleanly(self):
        gw = Gateway(config(shutdown_grace_ms=120000), threads=2)
        streams = [SSEStream(gw.port) for _ in range(3)]
        t0 = time.time()
        text = gw.stop()  # a clean exit (status 0, no sanitizer report)
        self.assertLess(time.time() - t0, sgtest.scaled(10))  # not held for the 120 s grace
        for st in streams:
            self.assertIsNone(st.next_event())  # the stream ended with its final chunk
            st.close()
        self.assertNotIn("connections still open", text)


def big_docs(n, size):
    """n documents of about `size` bytes each: every search of the example plugin returns min(topk, n)."""
    return [{"id": str(i), "contents": "\"Doc %d\"\n" % i + ("word%d " % i) * (size // 6)} for i in range(n)]


def stalled(gw, head, body=b""):
    """A raw connection with a tiny receive buffer that sends one request and then reads nothing."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", gw.port))
    s.sendall(head.encode() + body)
    return s


def dechunked(body):
    """The data of the complete chunks at the start of an HTTP/1.1 chunked body."""
    out = b""
    while b"\r\n" in body:
        size, rest = body.split(b"\r\n", 1)
        n = int(size, 16)
        if len(rest) < n + 2:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


def drained_to_eof(s, timeout):
    """Reads what the gateway sent until the connection ends; the bytes read, or None if it stays open."""
    s.settimeout(timeout)
    got = 0
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                return got
            got += len(b)
    except ConnectionResetError:
        return got
    except socket.timeout:
        return None
    finally:
        s.close()


def tool_call(query, id=1, topk=10):
    return rpc("tools/call", {"name": "search", "arguments": {"query": query, "topk": topk}}, id=id)


class SlowReaders(unittest.TestCase):
    """An MCP answer is built whole (a tool result of at most limits.max_response_bytes): while a
    reader takes it, its memory is in the response budget (searchgate_response_bytes_held), and a
    reader that takes nothing for limits.write_timeout_ms is disconnected -- for a POST's answer
    and for a GET /sse stream alike -- after which the memory is back."""

    def held(self):
        return self.gw.metric("searchgate_response_bytes_held")

    def wait(self, pred, seconds, what):
        end = time.time() + sgtest.scaled(seconds)
        while time.time() < end:
            if pred():
                return
            time.sleep(0.05)
        self.fail(what)

    def tearDown(self):
        self.gw.stop()

    def test_a_post_answer_nobody_reads(self):
        self.gw = Gateway({"backends": [example_backend(documents=big_docs(10, 400000))],
                           "limits": {"write_timeout_ms": 1000}})
        body = json.dumps(tool_call("word1")).encode()
        s = stalled(self.gw, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                             "Accept: %s\r\nContent-Length: %d\r\n\r\n" % (self.gw.port, ACCEPT_BOTH, len(body)), body)
        # the ~8 MB answer is held while it waits for the reader, and counted
        self.wait(lambda: self.held() >= 4e6, 10, "the answer being written is not in the response budget")
        self.wait(lambda: self.gw.metric("searchgate_response_write_timeouts_total") >= 1, 10,
                  "a reader that takes nothing was not disconnected")
        got = drained_to_eof(s, sgtest.scaled(10))
        self.assertIsNotNone(got, "the connection stayed open")
        self.assertLess(got, 8e6)
        self.wait(lambda: self.held() == 0, 5, "the answer's memory was not given back")
        self.assertIn("closing a connection whose reader took no bytes for 1000 ms", self.gw.read_log())
        # a reader that reads gets the whole answer
        r = post(self.gw, tool_call("word2"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(r.json()["result"]["structuredContent"]["result"][0]), 10)

    def test_an_sse_stream_nobody_reads(self):
        self.gw = Gateway({"backends": [example_backend(documents=big_docs(10, 100000))],
                           "limits": {"write_timeout_ms": 1000}})
        s = stalled(self.gw, "GET /sse HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n\r\n" % self.gw.port)
        s.settimeout(sgtest.scaled(10))
        head = b""
        while re.search(rb"session_id=([0-9a-f]{32})", head) is None:
            head += s.recv(4096)
        sid = re.search(rb"session_id=([0-9a-f]{32})", head).group(1).decode()
        self.assertEqual(self.gw.metric("searchgate_mcp_sse_streams"), 1)
        # ~1 MB replies until what the kernel cannot take any more waits in the gateway, counted
        for i in range(7):
            r = post(self.gw, tool_call("word%d" % i, id=i), path="/messages?session_id=" + sid)
            self.assertEqual(r.status, 202, r)
            time.sleep(0.3)
            if self.held() >= 5e5:
                break
        self.assertGreaterEqual(self.held(), 5e5, "the replies waiting for the stream's reader are not in the response budget")
        self.wait(lambda: self.gw.metric("searchgate_response_write_timeouts_total") >= 1, 10,
                  "a stream whose reader takes nothing was not disconnected")
        self.wait(lambda: self.gw.metric("searchgate_mcp_sse_streams") == 0, 5, "the stream did not end")
        self.wait(lambda: self.held() == 0, 5, "the stream's memory was not given back")
        self.assertIsNotNone(drained_to_eof(s, sgtest.scaled(10)), "the connection stayed open")
        self.assertIn("an SSE stream", self.gw.read_log())

    def test_a_quiet_sse_stream_is_not_cut(self):
        # the minimum rate (limits.min_write_bytes_per_s) is for answers: an event stream waits
        # for events, so one quiet for many times the grace is not behind any rate. After 3 s of
        # quiet (grace 400 ms, a minimum of 16 MiB/s: an answer would owe 40 MB by then), an
        # ~8 MB reply, more than the kernel's send buffer takes (4 MiB at most), is read through
        # a tiny receive buffer: it waits in the gateway for several checks, and is not cut
        self.gw = Gateway({"backends": [example_backend(documents=big_docs(10, 400000))],
                           "limits": {"write_timeout_ms": 400, "min_write_bytes_per_s": 16 << 20}})
        s = stalled(self.gw, "GET /sse HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n\r\n" % self.gw.port)
        s.settimeout(sgtest.scaled(10))
        got = b""
        while re.search(rb"session_id=([0-9a-f]{32})", got) is None:
            got += s.recv(4096)
        sid = re.search(rb"session_id=([0-9a-f]{32})", got).group(1).decode()
        time.sleep(3)
        r = post(self.gw, tool_call("word3", id=7), path="/messages?session_id=" + sid)
        self.assertEqual(r.status, 202, r)
        parts, tail, seen = [got], got, False
        while not (seen and tail.endswith(b"\n\n\r\n")):
            chunk = s.recv(65536)
            self.assertTrue(chunk, "the stream was closed")
            parts.append(chunk)
            tail = tail[-64:] + chunk
            seen = seen or b'"id":7' in tail
            time.sleep(0.001)
        got = b"".join(parts)
        events = dechunked(got.split(b"\r\n\r\n", 1)[1]).split(b"\n\n")
        reply = json.loads([e for e in events if b'"id":7' in e][0].split(b"data: ", 1)[1])
        self.assertEqual(reply["id"], 7)
        self.assertEqual(len(reply["result"]["structuredContent"]["result"][0]), 10)
        self.assertEqual(self.gw.metric("searchgate_response_write_timeouts_total"), 0, "a quiet stream was cut")
        self.assertEqual(self.gw.metric("searchgate_mcp_sse_streams"), 1)
        s.close()

if __name__ == "__main__":
    sgtest.main()
