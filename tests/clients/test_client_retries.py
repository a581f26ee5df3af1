"""Client compatibility: for a successful answer, for each error status the gateway can give, and
for /access on a route without pages, what each framework's retrieval client makes of it: what it
returns or raises, how many requests it sends and how long it takes to return. The clients are
behavioural models (client_models.py: request, timeouts, failures, retry schedule, give-up, read
from each client's source at a pinned commit) run by one engine (client_engine.py) with the
client's HTTP library against a real gateway; their sleeps are counted in a ledger, not waited.

The models are restated from the clients' code, not the clients themselves (the frameworks cannot
be installed here). docs/protocols.md ("Which status each client survives") is this table in words
and describes each client's retry loop. Run: ctest -R clients_retries.
"""
import os
import shutil
import tempfile
import time
import unittest

import client_engine as ce
import client_models as cm
import sgtest
from sgtest import DOCS, Gateway, example_backend, scaled

PAGES = [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "Hamlet page"}]


class Outcome:
    """What one client call came to: `kind` (observation, error-text, empty, raised), the detail,
    the requests the gateway saw, the seconds the client slept (counted) and the wall time."""

    def __init__(self, kind, detail, requests, slept, wall):
        self.kind, self.detail, self.requests, self.slept, self.wall = kind, detail, requests, slept, wall

    @property
    def time_to_answer(self):
        return self.slept + self.wall

    def __repr__(self):
        return "Outcome(%s, %r, requests=%d, slept=%gs, wall=%.2fs)" % (self.kind, str(self.detail)[:160], self.requests,
                                                                      self.slept, self.wall)


def target(gw, client, operation, path="/retrieve"):
    """What the client is configured with to reach the gateway: the whole URL (ending in `path`),
    a host:port (the client adds /retrieve itself), or (ASearcher) nothing: it reads the address
    files the test writes."""
    kind = client.calls[operation].endpoint.kind
    return {"url": "http://127.0.0.1:%d%s" % (gw.port, path), "hostport": "127.0.0.1:%d" % gw.port, "files": None}[kind]


# The counter of the requests a client sends: answered ones, or those refused on their headers (401).
REQUESTS = ("searchgate_requests_total", {})


def run_model(gw, name, operation, items, path="/retrieve", counter=REQUESTS):
    """Runs client model `name` (client_models.py) once against the gateway (`path`: what a client
    configured with a URL is given; the default route's)."""
    client = cm.CLIENTS[name]
    before = gw.metric(counter[0], **counter[1])
    ledger = ce.Ledger()
    t0 = time.monotonic()
    try:
        answer = ce.call(client, operation, target(gw, client, operation, path), items, ledger)
        kind, detail = answer.kind, answer.value
    except Exception as e:  # noqa: BLE001 - what the client raises is the outcome
        kind, detail = "raised", e
    wall = time.monotonic() - t0
    return Outcome(kind, detail, int(gw.metric(counter[0], **counter[1]) - before), ledger.seconds, wall)


def run_client(gw, name, query="who wrote hamlet", **kw):
    return run_model(gw, name, "search", [query], **kw)


def run_access(gw, name, urls):
    return run_model(gw, name, "access", urls)


CLIENTS = ["verl", "skyrl", "search-r1", "slime", "rlinf-searchr1", "rlinf-wideseek", "asearcher"]

# What each client does with an error status (its model in client_models.py, docs/protocols.md):
#   retries 5xx: 10 attempts, sleeping 1, 2, ... 9 s between them (45 s), then an error text;
#                any 4xx: no retry, an error text at once
#   raises:      no retry, an exception out of the training step
#   empty:       no retry, an empty observation (nothing logged but a print)
#   10x10:       any error: 10 attempts 10 s apart (100 s), then RuntimeError
ON_4XX = {"verl": ("error-text", 1, 0), "skyrl": ("error-text", 1, 0), "search-r1": ("raised", 1, 0), "slime": ("empty", 1, 0),
          "rlinf-searchr1": ("raised", 10, 100), "rlinf-wideseek": ("raised", 10, 100), "asearcher": ("raised", 10, 100)}
ON_5XX = dict(ON_4XX, verl=("error-text", 10, 45), skyrl=("error-text", 10, 45))


class ClientsAgainstStatuses(unittest.TestCase):
    """One gateway per answer the gateway can give; every client runs against each."""

    @classmethod
    def setUpClass(cls):
        cls.addr_dir = tempfile.mkdtemp(prefix="sgclients-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.addr_dir, ignore_errors=True)

    def gateway(self, backend, clients=None, limits=None, env=None):
        cfg = {"backends": [backend]}
        if clients is not None:
            cfg["clients"] = clients
        if limits is not None:
            cfg["limits"] = limits
        gw = Gateway(cfg, env=env)
        self.addCleanup(gw.stop)
        # ASearcher finds servers through address files: written as docs/clients.md says
        for f in os.listdir(self.addr_dir):
            os.unlink(os.path.join(self.addr_dir, f))
        with open(os.path.join(self.addr_dir, "Host127.0.0.1_IP%d.txt" % gw.port), "w") as f:
            f.write("127.0.0.1:%d" % gw.port)
        os.environ["RAG_SERVER_ADDR_DIR"] = self.addr_dir
        return gw

    def check(self, gw, expected, label, status=None, clients=CLIENTS, **kw):
        got = {}
        for name in clients:
            got[name] = run_client(gw, name, "query %s %s %d" % (label, name, time.time_ns()), **kw)
        for name in clients:
            o = got[name]
            kind, requests, slept = expected[name]
            self.assertEqual((o.kind, o.requests, o.slept), (kind, requests, slept), "%s on %s: %r" % (name, label, o))
            self.assertLess(o.wall, scaled(10), "%s on %s: %r" % (name, label, o))
            if status is not None and kind != "observation" and name in ("verl", "skyrl"):
                self.assertIn(str(status), str(o.detail))
        return got

    def test_ok(self):
        gw = self.gateway(example_backend("wiki"))
        got = self.check(gw, {n: ("observation", 1, 0) for n in CLIENTS}, "ok")
        self.assertIn("Doc 1 (Title: \\\"", got["verl"].detail)
        self.assertTrue(got["search-r1"].detail[0].startswith('Doc 1(Title: "'), got["search-r1"])
        self.assertEqual(len(got["slime"].detail), 3)
        self.assertTrue(got["slime"].detail[0]["document"]["contents"].startswith('"'))
        for n in ("rlinf-searchr1", "rlinf-wideseek", "asearcher"):
            self.assertEqual(got[n].detail[0]["urls"][0], "", n)  # url read on every item

    def test_429_rate_limited(self):
        # reject mode, one query per 1000 s: after the first request every one is refused
        gw = self.gateway(example_backend("wiki"), {"default": {"rate": 0.001, "burst": 1, "mode": "reject"}})
        self.assertEqual(gw.retrieve(["prime"]).status, 200)
        self.assertEqual(gw.retrieve(["x"]).status, 429)
        self.check(gw, ON_4XX, "429 rate_limited", 429)

    def test_503_rate_limited_with_reject_status(self):
        gw = self.gateway(example_backend("wiki"),
                          {"default": {"rate": 0.001, "burst": 1, "mode": "reject", "reject_status": 503}})
        self.assertEqual(gw.retrieve(["prime"]).status, 200)
        r = gw.retrieve(["x"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (503, "rate_limited"))
        self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        self.check(gw, ON_5XX, "503 rate_limited", 503)

    def test_429_budget_exhausted(self):
        wiki = example_backend("wiki")
        wiki["metered"] = True
        gw = self.gateway(wiki, {"default": {"budget": {"queries": 0, "period": "day"}}})
        self.assertEqual(gw.retrieve(["x"]).status, 429)
        self.check(gw, ON_4XX, "429 budget_exhausted", 429)

    def test_503_budget_exhausted_with_reject_status(self):
        wiki = example_backend("wiki")
        wiki["metered"] = True
        gw = self.gateway(wiki, {"default": {"budget": {"queries": 0, "period": "day"}, "reject_status": 503}})
        r = gw.retrieve(["x"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (503, "budget_exhausted"))
        self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        self.check(gw, ON_5XX, "503 budget_exhausted", 503)

    def test_503_unavailable(self):
        gw = self.gateway(example_backend("wiki", error={"status": "unavailable", "message": "index not loaded"}))
        self.check(gw, ON_5XX, "503 unavailable", 503)

    def test_502_upstream_error(self):
        gw = self.gateway(example_backend("wiki", error={"status": "upstream", "message": "the upstream answered 500"}))
        r = gw.retrieve(["x"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (502, "upstream_error"))
        self.check(gw, ON_5XX, "502 upstream_error", 502)

    def test_500_internal_error(self):
        gw = self.gateway(example_backend("wiki", error={"status": "internal", "message": "a backend bug"}))
        r = gw.retrieve(["x"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (500, "internal_error"))
        self.check(gw, ON_5XX, "500 internal_error", 500)  # verl and SkyRL retry 500 like 502-504

    def test_413_too_large(self):
        # every client sends one query longer than 8 bytes: refused before any backend work
        gw = self.gateway(example_backend("wiki"), limits={"max_query_bytes": 8})
        r = gw.retrieve(["a query of more than eight bytes"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (413, "too_large"))
        self.check(gw, ON_4XX, "413 too_large", 413)

    def test_401_unauthorized(self):
        # keys required: none of these clients can send one (none sets a header the gateway reads)
        env = {"SG_TEST_KEY_JOB": "job-key", "SG_TEST_ADMIN": "adm1n"}
        gw = self.gateway(example_backend("wiki"), {"require_key": True, "admin_key_env": "SG_TEST_ADMIN",
                                                    "keys": [{"id": "job", "key_env": "SG_TEST_KEY_JOB"}]}, env=env)
        gw.metrics_headers = {"X-API-Key": "adm1n"}
        r = gw.retrieve(["x"])
        self.assertEqual((r.status, r.json()["error"]["type"]), (401, "unauthorized"))
        self.check(gw, ON_4XX, "401 unauthorized", 401, counter=("searchgate_http_refused_total", {"reason": "key"}))

    def test_404_unknown_route(self):
        # a URL naming a route the gateway does not have (slime's /retrieve/<route> case, issue 24):
        # only the clients configured with a whole URL can name one; RLinf (host:port) and
        # ASearcher (address files) always reach /retrieve, the default route
        gw = self.gateway(example_backend("wiki"))
        r = gw.post("/retrieve/google", {"queries": ["x"]})
        self.assertEqual((r.status, r.json()["error"]["type"]), (404, "not_found"))
        url_clients = [n for n in CLIENTS if cm.CLIENTS[n].calls["search"].endpoint.kind == "url"]
        self.assertEqual(url_clients, ["verl", "skyrl", "search-r1", "slime"])
        got = self.check(gw, ON_4XX, "404 not_found", 404, clients=url_clients, path="/retrieve/google",
                         counter=("searchgate_http_requests_total", {"route": "other", "code": "404"}))
        self.assertEqual(got["slime"].detail, [])  # slime trains on an empty observation and reports nothing

    def test_504_timeout(self):
        gw = self.gateway(example_backend("wiki", hang=True, timeout_ms=200))
        got = {}
        for name in CLIENTS:
            got[name] = run_client(gw, name, "slow %s" % name)
            kind, requests, slept = ON_5XX[name]
            o = got[name]
            self.assertEqual((o.kind, o.requests, o.slept), (kind, requests, slept), "%s: %r" % (name, o))
            self.assertGreaterEqual(o.wall, 0.2 * requests * 0.9, o)  # each attempt waited for the deadline


class AccessWithoutPages(unittest.TestCase):
    """RLinf WideSeek and ASearcher call POST /access on the default route. A route without pages
    answers a null page per URL, which both clients turn into an empty page at once; any error
    status (the 404 of earlier versions included) cost them 10 attempts 10 s apart, then an
    exception."""

    def setUp(self):
        self.addr_dir = tempfile.mkdtemp(prefix="sgclients-")
        self.addCleanup(shutil.rmtree, self.addr_dir, True)

    def start(self, backends):
        gw = Gateway({"backends": backends})
        self.addCleanup(gw.stop)
        with open(os.path.join(self.addr_dir, "Host127.0.0.1_IP%d.txt" % gw.port), "w") as f:
            f.write("127.0.0.1:%d" % gw.port)
        os.environ["RAG_SERVER_ADDR_DIR"] = self.addr_dir
        return gw

    def test_no_page_store(self):
        gw = self.start([example_backend("wiki"), example_backend("paged", pages=PAGES)])
        urls = ["https://en.wikipedia.org/wiki/Hamlet"]
        o = run_access(gw, "rlinf-wideseek", urls)
        self.assertEqual((o.kind, o.detail, o.requests, o.slept), ("observation", "No More Information is Found for this URL.", 1, 0), o)
        self.assertLess(o.time_to_answer, scaled(5), o)
        o = run_access(gw, "asearcher", urls)
        self.assertEqual((o.kind, o.requests, o.slept), ("observation", 1, 0), o)
        self.assertEqual(o.detail, [{"page": "", "type": "access", "server_type": "async-search-browser"}])
        self.assertLess(o.time_to_answer, scaled(5), o)
        self.assertEqual(gw.metric("searchgate_access_no_page_store_total", backend="wiki"), 2)
        self.assertIn("default route wiki has no page store", gw.read_log())  # the start-up warning

    def test_page_store(self):
        gw = self.start([example_backend("paged", pages=PAGES)])
        self.assertNotIn("has no page store", gw.read_log())
        o = run_access(gw, "rlinf-wideseek", ["https://en.wikipedia.org/wiki/Hamlet"])
        self.assertEqual((o.kind, o.detail, o.requests, o.slept), ("observation", "Hamlet page", 1, 0), o)
        o = run_access(gw, "asearcher", ["https://en.wikipedia.org/wiki/Hamlet", "https://nowhere.example/"])
        self.assertEqual([p["page"] for p in o.detail], ["Hamlet page", ""], o)
        self.assertEqual((o.requests, o.slept), (1, 0), o)


class ASearcherAddressFile(unittest.TestCase):
    """ASearcher reads servers from $RAG_SERVER_ADDR_DIR/Host*_IP*.txt with readlines(): a line's
    newline stays in the address ("http://127.0.0.1:8000\n/retrieve"); its own server writes the
    file without one. URL parsing drops the newline, so the file docs/clients.md writes with echo
    works as well as one without; a file naming a port nothing listens on costs 100 s."""

    def test_address_file_with_and_without_newline(self):
        gw = Gateway({"backends": [example_backend("wiki")]})
        d = tempfile.mkdtemp(prefix="sgaddr-")
        try:
            path = os.path.join(d, "Host127.0.0.1_IP%d.txt" % gw.port)
            os.environ["RAG_SERVER_ADDR_DIR"] = d
            with open(path, "w") as f:  # printf 127.0.0.1:PORT > FILE
                f.write("127.0.0.1:%d" % gw.port)
            o = run_client(gw, "asearcher")
            self.assertEqual((o.kind, o.requests, o.slept), ("observation", 1, 0), o)
            with open(path, "w") as f:  # echo 127.0.0.1:PORT > FILE
                f.write("127.0.0.1:%d\n" % gw.port)
            o = run_client(gw, "asearcher")
            self.assertEqual((o.kind, o.requests, o.slept), ("observation", 1, 0), o)
            with open(path, "w") as f:  # a stale file: nothing listens there
                f.write("127.0.0.1:%d\n" % sgtest.free_port())
            o = run_client(gw, "asearcher")
            self.assertEqual((o.kind, o.requests, o.slept), ("raised", 0, 100), o)
        finally:
            gw.stop()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
