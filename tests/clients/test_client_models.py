"""The client models (client_models.py) and their engine (client_engine.py) on answers the gateway
never gives but that define the models: a body that is not JSON, JSON labelled text/plain (requests
reads it, aiohttp refuses it), items without `url`, an empty body, a refused connection, a server
that recovers after two 503s, and ASearcher choosing another address after a failure. Each
expectation is what the client's source does (the file and function named in its model); a model
or engine change that alters a client's behaviour fails here. Run: ctest -R clients_models.
"""
import json
import os
import shutil
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import client_engine as ce
import client_models as cm
import sgtest

DOCS = [{"id": str(i), "contents": "\"Title %d\"\nline one\nline two" % i, "url": "https://x.example/%d" % i}
        for i in range(2)]


def answer_for(body, shape):
    """A /retrieve answer to `body`: one list per query, flat or scored as asked."""
    queries = body.get("queries") or [body.get("query")]
    docs = [dict(d) for d in DOCS]
    if shape == "nourl":
        for d in docs:
            del d["url"]
    items = [{"document": d, "score": 1.0} for d in docs] if body.get("return_scores") else docs
    return {"result": [items for _ in queries]}


class Stub:
    """A scripted HTTP server: each POST takes the next reply of `script` (the last repeats). A
    reply is (status, content type, body) where body is bytes, or "answer" / "nourl" for an answer
    to the request (on /access: a null page per URL)."""

    def __init__(self, script):
        self.script, self.requests = list(script), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                stub.requests.append((self.path, body, dict(self.headers)))
                status, ctype, out = stub.script[min(len(stub.requests), len(stub.script)) - 1]
                if out in ("answer", "nourl") and self.path == "/access":
                    out = json.dumps({"result": [None for _ in body["urls"]]}).encode()
                elif out in ("answer", "nourl"):
                    out = json.dumps(answer_for(body, out)).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


JSON = "application/json"
ALL = list(cm.CLIENTS)
RLINF_LIKE = ["rlinf-searchr1", "rlinf-wideseek", "asearcher"]


class ModelsAgainstAStub(unittest.TestCase):
    def setUp(self):
        self.addr_dir = tempfile.mkdtemp(prefix="sgmodels-")
        self.addCleanup(shutil.rmtree, self.addr_dir, True)
        os.environ["RAG_SERVER_ADDR_DIR"] = self.addr_dir

    def address_file(self, port, name=None):
        path = os.path.join(self.addr_dir, name or "Host127.0.0.1_IP%d.txt" % port)
        with open(path, "w") as f:
            f.write("127.0.0.1:%d" % port)
        return path

    def stub(self, script):
        s = Stub(script)
        self.addCleanup(s.stop)
        self.address_file(s.port)
        return s

    def run_model(self, name, port, operation="search", items=("who wrote hamlet",), ledger=None):
        """(kind, value, attempts, seconds slept); kind "raised" with the exception as value."""
        client = cm.CLIENTS[name]
        kind = client.calls[operation].endpoint.kind
        target = {"url": "http://127.0.0.1:%d/retrieve" % port, "hostport": "127.0.0.1:%d" % port, "files": None}[kind]
        ledger = ledger or ce.Ledger()
        try:
            a = ce.call(client, operation, target, list(items), ledger)
            return a.kind, a.value, ledger.attempts, ledger.seconds
        except Exception as e:  # noqa: BLE001 - what the client raises is the outcome
            return "raised", e, ledger.attempts, ledger.seconds

    def expect(self, port, table):
        for name, (kind, attempts, slept) in table.items():
            got = self.run_model(name, port)
            self.assertEqual((got[0], got[2], got[3]), (kind, attempts, slept), "%s: %r" % (name, got))

    def test_answer_and_request_shapes(self):
        s = self.stub([(200, JSON, "answer")])
        got = {name: self.run_model(name, s.port) for name in ALL}
        self.assertEqual({n: g[0] for n, g in got.items()}, {n: "observation" for n in ALL})
        bodies = {name: body for (_, body, _), name in zip(s.requests, ALL)}
        self.assertEqual(bodies["verl"], {"queries": ["who wrote hamlet"], "topk": 3, "return_scores": True})
        self.assertEqual(bodies["skyrl"], {"query": "who wrote hamlet", "topk": 3, "return_scores": True})
        self.assertEqual(bodies["slime"], {"queries": ["who wrote hamlet"], "topk": 3, "return_scores": False})
        self.assertEqual(bodies["asearcher"], {"queries": ["who wrote hamlet"], "topk": 5, "return_scores": False})
        self.assertEqual(s.requests[0][2].get("Accept"), "application/json")  # verl sets it
        self.assertEqual(json.loads(got["verl"][1])["result"],
                         'Doc 1 (Title: "Title 0")\nline one\nline two\n\nDoc 2 (Title: "Title 1")\nline one\nline two')
        self.assertEqual(json.loads(got["skyrl"][1])["result"],
                         'Doc 1: "Title 0"\nline one\nline two\nDoc 2: "Title 1"\nline one\nline two\n')
        self.assertEqual(got["search-r1"][1], ['Doc 1(Title: "Title 0") line one\nline two\nDoc 2(Title: "Title 1") line one\nline two\n'])
        self.assertEqual(got["slime"][1], [{"document": {"contents": d["contents"]}} for d in DOCS])
        self.assertEqual(got["asearcher"][1], [{"documents": [d["contents"] for d in DOCS], "urls": [d["url"] for d in DOCS],
                                                "server_type": "async-search-browser"}])

    def test_body_not_json(self):
        s = self.stub([(200, "text/html", b"<html>busy</html>")])
        self.expect(s.port, {"verl": ("error-text", 1, 0), "skyrl": ("error-text", 1, 0), "search-r1": ("raised", 1, 0),
                             "slime": ("empty", 1, 0), **{n: ("raised", 10, 100) for n in RLINF_LIKE}})
        kind, text, _, _ = self.run_model("verl", s.port)
        self.assertIn("Search error: API Call Failed: API Request Error: Expecting value", text)
        kind, text, _, _ = self.run_model("skyrl", s.port)
        self.assertRegex(json.loads(text)["result"], r"^Search error: \[Search Request ID: [0-9a-f-]{36}\] API Request Error")

    def test_json_labelled_text_plain(self):
        # requests parses any body; aiohttp's resp.json() refuses a type other than application/json
        s = self.stub([(200, "text/plain", "answer")])
        self.expect(s.port, {"verl": ("observation", 1, 0), "skyrl": ("observation", 1, 0), "search-r1": ("observation", 1, 0),
                             "slime": ("empty", 1, 0), **{n: ("raised", 10, 100) for n in RLINF_LIKE}})

    def test_items_without_url(self):
        # RLinf and ASearcher index r["url"] inside their retried block; slime reads only contents
        s = self.stub([(200, JSON, "nourl")])
        self.expect(s.port, {"slime": ("observation", 1, 0), **{n: ("raised", 10, 100) for n in RLINF_LIKE}})
        kind, exc, _, _ = self.run_model("rlinf-searchr1", s.port)
        self.assertEqual(str(exc), "Fail to post search query to RAG server")
        self.assertIsInstance(exc.__cause__, KeyError)

    def test_empty_bodies(self):
        s = self.stub([(200, JSON, b"{}")])
        for name in ("verl", "skyrl"):  # perform_single_search_batch / search: a falsy body
            kind, text, _, _ = self.run_model(name, s.port)
            self.assertEqual((kind, json.loads(text)["result"]), ("error-text", "Unknown API state (no response and no error message)."))
        s2 = self.stub([(200, JSON, b'{"result": []}')])
        kind, value, attempts, _ = self.run_model("verl", s2.port)
        self.assertEqual((kind, json.loads(value)["result"]), ("observation", "No search results found."))
        kind, exc, attempts, _ = self.run_model("slime", s2.port)  # read after its handler: [][0]
        self.assertEqual((kind, type(exc), attempts), ("raised", IndexError, 1))

    def test_connection_refused(self):
        port = sgtest.free_port()
        self.address_file(port)
        self.expect(port, {"verl": ("error-text", 10, 45), "skyrl": ("error-text", 10, 45), "search-r1": ("raised", 1, 0),
                           "slime": ("empty", 1, 0), **{n: ("raised", 10, 100) for n in RLINF_LIKE}})
        kind, text, _, _ = self.run_model("verl", port)
        self.assertIn("API Call Failed: Connection Error", text)

    def test_recovers_after_two_503s(self):
        for name, slept in (("verl", 3), ("skyrl", 3), ("rlinf-searchr1", 20), ("rlinf-wideseek", 20), ("asearcher", 20)):
            s = self.stub([(503, JSON, b'{"error": {"type": "overloaded"}}')] * 2 + [(200, JSON, "answer")])
            got = self.run_model(name, s.port)
            self.assertEqual((got[0], got[2], got[3]), ("observation", 3, slept), "%s: %r" % (name, got))
            self.assertEqual(len(s.requests), 3, name)
            os.unlink(self.address_file(s.port))

    def test_asearcher_chooses_again_after_a_failure(self):
        dead = self.address_file(sgtest.free_port())
        s = Stub([(200, JSON, "answer")])
        self.addCleanup(s.stop)

        def on_sleep(seconds):  # while the client sleeps, the dead server's file goes, a live one comes
            if os.path.exists(dead):
                os.unlink(dead)
                self.address_file(s.port)
        for operation, items in (("search", ["q"]), ("access", ["https://x.example/0"])):
            with open(dead, "w") as f:
                f.write("127.0.0.1:%d\n" % sgtest.free_port())
            for f in os.listdir(self.addr_dir):
                if os.path.join(self.addr_dir, f) != dead:
                    os.unlink(os.path.join(self.addr_dir, f))
            got = self.run_model("asearcher", s.port, operation, items, ce.Ledger(on_sleep=on_sleep))
            # attempt 1 fails on the dead address and re-reads the directory (still the dead one)
            # before sleeping; attempt 2 fails and re-reads it, now with the live one; attempt 3
            self.assertEqual((got[2], got[3]), (3, 20), got)
            if operation == "access":
                self.assertEqual(got[:2], ("observation", [{"page": "", "type": "access", "server_type": "async-search-browser"}]))

    def test_wideseek_access_view(self):
        s = self.stub([(200, JSON, json.dumps({"result": [{"url": "u", "contents": "p" * 30000}]}).encode())])
        kind, page, attempts, _ = self.run_model("rlinf-wideseek", s.port, "access", ["u"])
        self.assertEqual((kind, len(page), attempts), ("observation", 25000, 1))  # access_token 25000 (parsers.py)


if __name__ == "__main__":
    unittest.main(verbosity=2)
