"""Reloading the configuration without a restart (issue 20 item 2): POST /admin/reload, SIGHUP
through `searchgate --reload PIDFILE`, and what a reload keeps.

The real gateway with the real bm25 and mock plugins serves a steady load on keep-alive
connections while its config file is rewritten and reloaded again and again: keys added and
removed, a route added and removed, a route whose limits and default topk change, a route whose
plugin config changes (a new instance each time, while calls on the old one are in flight), a
trace added, and invalid configs that must be refused as a whole with --check's message. Then:
no request of the load failed, a removed key is refused 401 by the first request after the reload
returned, an added route and its MCP tool serve at once, the bm25 index and the kept mock route
were never loaded again, budgets and rate-limit state carried over, and every old generation was
disposed once its requests ended. RouteSettings: a changed rerank stage rebuilds its route (the
answers are the new stage's), a fusion route added, changed (legs, weights) and removed, log_level
switched to debug and back, and limits (max_topk, max_queries) applying to the next request.
"""
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest

ENV = {"SG_RL_ADMIN": "admin-secret", "SG_RL_LOAD": "load-key", "SG_RL_B": "b-key", "SG_RL_RATE": "rate-key",
       "SG_RL_BUDGET": "budget-key"}
ADMIN = {"X-API-Key": "admin-secret"}
LOAD = {"X-API-Key": "load-key"}
DOCS = ["Paris is the capital and largest city of France.", "Tokyo is the capital of Japan.",
        "FAISS is a library for efficient similarity search of dense vectors.",
        "Redis is an in-memory data store used as a cache.", "Hamlet is a tragedy written by William Shakespeare.",
        "Zurich is the largest city in Switzerland.", "Volcanoes erupt lava from a crater."]
ROUNDS = 6 if sgtest.SANITIZED else 12


def build_index(dirpath):
    corpus = os.path.join(dirpath, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for i, text in enumerate(DOCS):
            f.write(json.dumps({"id": "d%d" % i, "contents": '"%s"\n%s' % (text.split()[0], text)}) + "\n")
    out = os.path.join(dirpath, "bm25")
    subprocess.run([sgtest.binary("searchgate-index-bm25"), corpus, out, "--no-progress", "--quiet"], check=True,
                   capture_output=True, timeout=sgtest.scaled(120))
    return out


def config(index, trace_dir, odd, seed):
    """Generation variant `odd` (0/1): which keys, routes and settings it has. `seed` recreates mk2."""
    keys = [{"id": "load", "key_env": "SG_RL_LOAD"},
            {"id": "rate", "key_env": "SG_RL_RATE", "rate": 0.2, "burst": 1, "mode": "reject"},
            {"id": "budget", "key_env": "SG_RL_BUDGET", "budget": {"queries": 6, "period": "day"}}]
    if odd:
        keys.append({"id": "b", "key_env": "SG_RL_B"})
    mk = {"name": "mk", "plugin": "mock", "config": {"latency_ms": 15, "workers": 4}, "metered": True,
          "topk": 3 if odd else 2, "max_inflight": 64 if odd else 32, "max_queue": 100000}
    backends = [
        {"name": "bm", "plugin": "bm25", "config": {"index": index}},
        mk,
        # a new plugin config at every reload: a new instance, the old one disposed after its calls
        {"name": "mk2", "plugin": "mock", "config": {"seed": seed, "latency_ms": 40, "workers": 4}, "cache": False},
        {"name": "fu", "fusion": {"routes": ["bm", "mk"]}},
    ]
    if odd:
        backends.append({"name": "extra", "plugin": "mock", "config": {"seed": 7}})
        mk["trace"] = {"path": os.path.join(trace_dir, "mk.jsonl")}
    return {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 2, "log_level": "info",
            "clients": {"require_key": True, "admin_key_env": "SG_RL_ADMIN", "keys": keys},
            "backends": backends}


def write(path, cfg):
    """Atomically, as an operator's deploy tool would: a reload never reads half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f)
    os.rename(tmp, path)


class Load:
    """Threads posting /retrieve on keep-alive connections until stopped; every answer is kept."""

    def __init__(self, port, n=3):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses = {}
        self.failures = []
        self.count = 0
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=sgtest.scaled(30))
        paths = ["/retrieve/bm", "/retrieve/mk", "/retrieve/mk2", "/retrieve/fu", "/retrieve"]
        k = 0
        while not self.stop.is_set():
            path = paths[k % len(paths)]
            body = json.dumps({"queries": ["load %d %d capital" % (i, k), "city %d" % (k % 7)], "topk": 2})
            k += 1
            try:
                conn.request("POST", path, body=body, headers=dict(LOAD, **{"Content-Type": "application/json"}))
                r = conn.getresponse()
                data = r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                status, data = -1, repr(e).encode()
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=sgtest.scaled(30))
            with self.lock:
                self.count += 1
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status != 200:
                    self.failures.append((path, status, data[:300]))
        conn.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class ReloadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sgreload-")
        cls.index = build_index(cls.tmp)
        cls.pid_file = os.path.join(cls.tmp, "searchgate.pid")
        cls.seed = 1
        cls.gw = sgtest.Gateway(config(cls.index, cls.tmp, 0, cls.seed), env=ENV, extra_args=["--pid-file", cls.pid_file])
        cls.gw.metrics_headers = ADMIN
        write(cls.gw.config_path, config(cls.index, cls.tmp, 0, cls.seed))

    @classmethod
    def tearDownClass(cls):
        log = cls.gw.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert not os.path.exists(cls.pid_file), "the pid file outlived the gateway"
        assert "reload" in log

    def reload(self, cfg=None, headers=ADMIN):
        if cfg is not None:
            write(self.gw.config_path, cfg)
        return self.gw.post("/admin/reload", b"", headers=headers, timeout=sgtest.scaled(60))

    def post(self, path, queries, key, topk=None):
        body = {"queries": queries}
        if topk is not None:
            body["topk"] = topk
        return self.gw.post(path, body, headers={"X-API-Key": key})

    def check_generation(self, odd):
        """What the generation just published must serve, checked by the first requests after the reload."""
        b = self.post("/retrieve/mk", ["is b here"], "b-key")
        self.assertEqual(b.status, 200 if odd else 401, b)
        extra = self.post("/retrieve/extra", ["extra route"], "load-key")
        self.assertEqual(extra.status, 200 if odd else 404, extra)
        mk = self.post("/retrieve/mk", ["default topk %d" % self.seed], "load-key")
        self.assertEqual(len(mk.json()["result"][0]), 3 if odd else 2)  # the route's topk changed
        self.assertEqual(self.gw.metric("searchgate_backend_inflight_limit_queries", backend="mk"), 64 if odd else 32)

    def test_1_reload_loop_under_load(self):
        load = Load(self.gw.port)
        try:
            time.sleep(0.5)
            for rnd in range(ROUNDS):
                odd = rnd % 2 == 0
                self.seed += 1
                r = self.reload(config(self.index, self.tmp, odd, self.seed))
                self.assertEqual(r.status, 200, r)
                rep = r.json()
                self.assertEqual(rep["routes"]["recreated"], ["mk2"], rep)
                self.assertEqual(sorted(rep["routes"]["kept"]), ["bm", "mk"], rep)
                self.assertEqual(rep["routes"]["added" if odd else "removed"], ["extra"], rep)
                self.assertEqual(rep["clients"]["added" if odd else "removed"], ["b"], rep)
                self.assertEqual(rep["restart_required"], [])
                self.check_generation(odd)
                if rnd == 2:  # an invalid config in the middle: refused whole, the running one serves on
                    self.refused_config_keeps_serving(odd)
            time.sleep(0.3)
        finally:
            load.finish()
        self.assertGreater(load.count, 50)
        self.assertEqual(load.failures, [], "requests failed during reloads: %r" % load.failures[:5])
        # nothing of the kept routes was loaded again; the changed one once per reload
        self.assertEqual(self.gw.metric("searchgate_backend_instances_created_total", backend="bm"), 1)
        self.assertEqual(self.gw.metric("searchgate_backend_instances_created_total", backend="mk"), 1)
        # mk2: its first instance, one per reload, and one a refused reload created and destroyed again
        self.assertEqual(self.gw.metric("searchgate_backend_instances_created_total", backend="mk2"), ROUNDS + 2)
        self.assertEqual(len(re.findall(r"bm25 index \S+: \d+ documents", self.gw.read_log())), 1)
        self.assertEqual(self.gw.metric("searchgate_config_reloads_total", result="refused"), 2)
        # the old generations went once their requests ended (their plugin instances with them)
        deadline = time.time() + sgtest.scaled(10)
        while self.gw.metric("searchgate_config_generations_live") != 1 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.gw.metric("searchgate_config_generations_live"), 1)
        # a trace added by a reload writes its file
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "mk.jsonl")))

    def refused_config_keeps_serving(self, odd):
        before = self.gw.metric("searchgate_config_generation")
        for bad in (dict(config(self.index, self.tmp, odd, self.seed), limits={"max_topk": 0}),
                    dict(config(self.index, self.tmp, odd, self.seed + 1000),
                         backends=config(self.index, self.tmp, odd, self.seed + 1000)["backends"] +
                         [{"name": "broken", "plugin": "bm25", "config": {"index": os.path.join(self.tmp, "nope")}}])):
            write(self.gw.config_path, bad)
            check = subprocess.run([sgtest.binary("searchgate"), "--config", self.gw.config_path, "--check"],
                                   capture_output=True, text=True, env=dict(os.environ, **ENV), timeout=sgtest.scaled(60))
            self.assertEqual(check.returncode, 1)
            line = [ln for ln in check.stderr.splitlines() if ln.startswith("searchgate: ")][-1]
            r = self.reload()
            self.assertEqual(r.status, 422, r)
            self.assertEqual(r.json()["error"]["type"], "invalid_config")
            self.assertEqual("searchgate: " + r.json()["error"]["message"], line)
            self.assertEqual(self.gw.metric("searchgate_config_generation"), before)
            self.check_generation(odd)  # the running generation, untouched
        write(self.gw.config_path, config(self.index, self.tmp, odd, self.seed))

    def test_2_state_survives(self):
        # the rate limit: the client's one token is spent just before a reload and still spent after it
        self.assertEqual(self.post("/retrieve/mk", ["rate one"], "rate-key").status, 200)
        self.assertEqual(self.reload(config(self.index, self.tmp, 1, self.seed)).status, 200)
        r = self.post("/retrieve/mk", ["rate two"], "rate-key")
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.json()["error"]["type"], "rate_limited")
        # the budget: 4 of 6 queries spent, a reload, then a request of 3 misses does not fit
        self.assertEqual(self.post("/retrieve/mk", ["budget %d" % i for i in range(4)], "budget-key").status, 200)
        self.assertEqual(self.reload(config(self.index, self.tmp, 0, self.seed)).status, 200)
        stats = self.gw.get("/stats", headers=ADMIN).json()
        self.assertEqual(stats["budgets"]["clients"]["budget"]["used"], 4)
        r = self.post("/retrieve/mk", ["budget x", "budget y", "budget z"], "budget-key")
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.json()["error"]["type"], "budget_exhausted")
        self.assertEqual(self.post("/retrieve/mk", ["budget x", "budget y"], "budget-key").status, 200)

    def test_3_sighup_and_admin_guard(self):
        gen = self.gw.metric("searchgate_config_generation")
        write(self.gw.config_path, config(self.index, self.tmp, 1, self.seed))
        out = subprocess.run([sgtest.binary("searchgate"), "--reload", self.pid_file], capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        deadline = time.time() + sgtest.scaled(20)
        while self.gw.metric("searchgate_config_generation") == gen and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.gw.metric("searchgate_config_generation"), gen + 1)
        self.assertEqual(self.post("/retrieve/extra", ["after sighup"], "b-key").status, 200)
        tools = self.gw.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                             headers=dict(LOAD, Accept="application/json")).json()
        self.assertIn("search_extra", [t["name"] for t in tools["result"]["tools"]])
        # the admin key only: a client's key is refused, and so is a GET
        r = self.reload(headers=LOAD)
        self.assertEqual(r.status, 401, r)
        self.assertEqual(self.gw.get("/admin/reload", headers=ADMIN).status, 405)
        # --reload refuses a pid file that names another program
        other = os.path.join(self.tmp, "other.pid")
        with open(other, "w") as f:
            f.write("%d\n" % os.getpid())
        bad = subprocess.run([sgtest.binary("searchgate"), "--reload", other], capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("not a searchgate", bad.stderr)

    def test_4_restart_only_settings_are_named(self):
        cfg = config(self.index, self.tmp, 0, self.seed)
        cfg["threads"] = 3
        cfg["cache"] = {"l1_bytes": 1 << 20}
        r = self.reload(cfg)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(sorted(r.json()["restart_required"]), ["cache.l1_bytes", "threads"])
        self.assertTrue(any("threads changed" in w for w in r.json()["warnings"]))
        self.assertEqual(self.post("/retrieve/bm", ["paris"], "load-key").status, 200)
        write(self.gw.config_path, config(self.index, self.tmp, 0, self.seed))

    def test_5_listen_forms_are_restart_only(self):
        """Every form of listen (the array of entries, a Unix domain socket, an address file, an
        entry's policy) is a restart-only setting: named, and the running listeners stay as they are."""
        sock, addr = os.path.join(self.tmp, "gw.sock"), os.path.join(self.tmp, "gw.addr")
        running = {"host": "127.0.0.1", "port": 0}
        for listen in ([running],
                       dict(running, unix=sock),
                       dict(running, address_file=addr),
                       [running, {"host": "127.0.0.2", "port": 0}],
                       dict(running, allowed_hosts=["gw.lab"]),
                       dict(running, read_timeout_ms=2500)):
            cfg = config(self.index, self.tmp, 0, self.seed)
            cfg["listen"] = listen
            r = self.reload(cfg)
            self.assertEqual(r.status, 200, (listen, r))
            self.assertEqual(r.json()["restart_required"], ["listen"], listen)
            self.assertTrue(any(w.startswith("listen changed: it takes effect at a restart") for w in r.json()["warnings"]), r)
            self.assertEqual(self.post("/retrieve/bm", ["paris"], "load-key").status, 200)
        self.assertFalse(os.path.exists(sock), "a reload opened a listener")
        self.assertFalse(os.path.exists(addr), "a reload wrote an address file")
        self.assertNotIn("127.0.0.2", self.gw.read_log().split("listening on", 1)[1].split("\n", 1)[0])
        # and back to the running form: nothing to restart for
        r = self.reload(config(self.index, self.tmp, 0, self.seed))
        self.assertEqual(r.json()["restart_required"], [], r)


class RouteLimits(unittest.TestCase):
    """A kept route's new max_inflight governs its admission at once (the admission state is the
    route core's, shared by the two generations): four parallel calls run together, then one by one."""

    def test_max_inflight_applies_after_reload(self):
        def cfg(max_inflight):
            return {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 2, "clients": {"admin_key_env": "SG_RL_ADMIN"},
                    "backends": [{"name": "lim", "plugin": "mock", "config": {"latency_ms": 400, "workers": 8},
                                  "max_inflight": max_inflight, "cache": False}]}

        def four_at_once(tag):
            t0 = time.time()
            got = sgtest.parallel(lambda i: gw.post("/retrieve", {"queries": ["%s %d" % (tag, i)]}).status,
                                  [(i,) for i in range(4)])
            self.assertEqual(got, [200] * 4)
            return time.time() - t0

        gw = sgtest.Gateway(cfg(100), env=ENV)
        gw.metrics_headers = ADMIN
        try:
            together = four_at_once("before")
            write(gw.config_path, cfg(1))
            self.assertEqual(gw.post("/admin/reload", b"", headers=ADMIN).status, 200)
            one_by_one = four_at_once("after")
            self.assertGreaterEqual(one_by_one, 1.55)  # 4 x 400 ms: one call at a time
            self.assertLess(together, one_by_one / 2)
            self.assertEqual(gw.metric("searchgate_backend_instances_created_total", backend="lim"), 1)
        finally:
            gw.stop()


class RouteInfo(unittest.TestCase):
    """searchgate_route_info after a reload (docs/operations.md): 1 for each route served, 0 for a
    route (or fusion route) the reload removed and for the old fingerprint of a route it changed; a
    route added back is 1 again."""

    def test_removed_and_changed_routes_drop_to_0(self):
        def cfg(with_gone, docs):
            backends = [sgtest.example_backend("keep"), sgtest.example_backend("changed", documents=docs)]
            fusions = []
            if with_gone:
                backends.append(sgtest.example_backend("gone"))
                fusions = [{"name": "fu", "fusion": {"routes": ["keep", "gone"]}}]
            return {"listen": {"host": "127.0.0.1", "port": 0}, "clients": {"admin_key_env": "SG_RL_ADMIN"},
                    "backends": backends + fusions}

        def info(gw):
            root = {b["name"]: b["provenance"]["data"] for b in gw.get("/", headers=ADMIN).json()["backends"]}
            return root, {(r, d): gw.metric("searchgate_route_info", route=r, data=d) for r, d in seen}

        docs2 = sgtest.DOCS[:3]
        seen = set()
        gw = sgtest.Gateway(cfg(True, sgtest.DOCS), env=ENV)
        gw.metrics_headers = ADMIN
        try:
            first, _ = info(gw)
            self.assertEqual(sorted(first), ["changed", "fu", "gone", "keep"])
            seen |= set(first.items())
            write(gw.config_path, cfg(False, docs2))
            self.assertEqual(gw.post("/admin/reload", b"", headers=ADMIN).status, 200)
            second, _ = info(gw)
            self.assertEqual(sorted(second), ["changed", "keep"])
            self.assertEqual(second["keep"], first["keep"])
            self.assertNotEqual(second["changed"], first["changed"])
            seen |= set(second.items())
            _, got = info(gw)
            self.assertEqual(got, {("keep", first["keep"]): 1, ("changed", first["changed"]): 0, ("changed", second["changed"]): 1,
                                   ("gone", first["gone"]): 0, ("fu", first["fu"]): 0})
            write(gw.config_path, cfg(True, docs2))  # gone and fu come back, with the same data
            self.assertEqual(gw.post("/admin/reload", b"", headers=ADMIN).status, 200)
            third, got = info(gw)
            self.assertEqual((third["gone"], third["fu"]), (first["gone"], first["fu"]))
            self.assertEqual(got, {("keep", first["keep"]): 1, ("changed", first["changed"]): 0, ("changed", second["changed"]): 1,
                                   ("gone", first["gone"]): 1, ("fu", first["fu"]): 1})
        finally:
            gw.stop()


class SharedBudget(unittest.TestCase):
    """With Redis, a budget is one counter shared by the replicas: a reload keeps counting in the same
    key (the configured prefix's), and the new limit applies at once."""

    def test_budget_counter_survives_reload(self):
        redis = sgtest.Redis()
        tmp = tempfile.mkdtemp(prefix="sgreload-redis-")
        try:
            def cfg(limit):
                return {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 2,
                        "cache": {"redis": {"port": redis.port, "prefix": "rl:"}},
                        "clients": {"admin_key_env": "SG_RL_ADMIN",
                                    "keys": [{"id": "budget", "key_env": "SG_RL_BUDGET",
                                              "budget": {"queries": limit, "period": "day"}}]},
                        "backends": [{"name": "mk", "plugin": "mock", "metered": True}]}
            gw = sgtest.Gateway(cfg(5), env=ENV)
            key = {"X-API-Key": "budget-key"}
            self.assertEqual(gw.post("/retrieve", {"queries": ["s1", "s2", "s3"]}, headers=key).status, 200)
            write(gw.config_path, cfg(4))
            self.assertEqual(gw.post("/admin/reload", b"", headers=ADMIN).status, 200)
            day = int(time.time()) // 86400 * 86400
            self.assertEqual(redis.command("HGET", "rl:budget:client:budget:day:%d" % day, "used"), b"3")
            r = gw.post("/retrieve", {"queries": ["s4", "s5"]}, headers=key)  # 3 + 2 > the new 4
            self.assertEqual(r.status, 429, r)
            self.assertEqual(gw.post("/retrieve", {"queries": ["s4"]}, headers=key).status, 200)
            self.assertEqual(redis.command("HGET", "rl:budget:client:budget:day:%d" % day, "used"), b"4")
            gw.stop()
        finally:
            redis.close()
            shutil.rmtree(tmp, ignore_errors=True)


    def test_refund_outlives_removed_budget(self):
        """A budget's give-back still waiting for Redis when a reload removes the budget and its last
        generation goes: the reply must not touch a freed budget (ASan watches this run)."""
        redis = sgtest.Redis()
        try:
            def cfg(with_budget):
                keys = [{"id": "other", "key_env": "SG_RL_LOAD"}]
                if with_budget:
                    keys.append({"id": "budget", "key_env": "SG_RL_BUDGET", "budget": {"queries": 100, "period": "day"}})
                return {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 1,
                        "cache": {"redis": {"port": redis.port, "timeout_ms": 30000}},
                        "clients": {"admin_key_env": "SG_RL_ADMIN", "keys": keys},
                        "backends": [{"name": "slow", "plugin": "mock", "config": {"latency_ms": int(sgtest.scaled(1500))},
                                      "metered": True, "max_inflight": 1, "cache": False}]}
            gw = sgtest.Gateway(cfg(True), env=ENV)
            gw.metrics_headers = ADMIN
            hold = threading.Thread(target=gw.post, args=("/retrieve", {"queries": ["hold"]}, LOAD))
            hold.start()  # takes the route's one slot for 1.5 s
            time.sleep(sgtest.scaled(0.3))
            waited = []
            late = threading.Thread(target=lambda: waited.append(gw.post(
                "/retrieve", {"queries": ["queued"]}, {"X-API-Key": "budget-key", "X-Timeout-Ms": str(int(sgtest.scaled(600)))})))
            late.start()  # reserved in Redis, then queued behind "hold"
            time.sleep(sgtest.scaled(0.2))
            redis.pause()  # the give-back of the call dropped at its deadline waits for Redis
            late.join()
            self.assertEqual(waited[0].status, 504, waited[0])
            write(gw.config_path, cfg(False))
            self.assertEqual(gw.post("/admin/reload", b"", headers=ADMIN).status, 200)
            hold.join()
            deadline = time.time() + sgtest.scaled(10)
            while gw.metric("searchgate_config_generations_live") != 1 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(gw.metric("searchgate_config_generations_live"), 1)  # the budget is gone
            redis.resume()
            time.sleep(sgtest.scaled(0.5))  # the reply arrives
            self.assertEqual(gw.post("/retrieve", {"queries": ["after"]}, headers=LOAD).status, 200)
            gw.stop()
        finally:
            redis.resume()
            redis.close()


class RouteSettings(unittest.TestCase):
    """What a reload changes in a route's serving besides its plugin config: the rerank stage, the
    fusion routes, the log level and the request limits, each seen in the answers (and the admin
    reply) right after the reload. The example plugin keeps it cheap."""

    def setUp(self):
        self.gw = None

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()

    def start(self, backends, **top):
        cfg = dict({"listen": {"host": "127.0.0.1", "port": 0}, "threads": 2, "clients": {"admin_key_env": "SG_RL_ADMIN"},
                    "backends": backends}, **top)
        self.gw = sgtest.Gateway(cfg, env=ENV)
        self.gw.metrics_headers = ADMIN
        return cfg

    def reload(self, backends, **top):
        cfg = dict(self.gw.config, backends=backends, **top)
        write(self.gw.config_path, cfg)
        r = self.gw.post("/admin/reload", b"", headers=ADMIN, timeout=sgtest.scaled(60))
        self.assertEqual(r.status, 200, r)
        return r.json()

    def hits(self, path, query="capital city", topk=3):
        r = self.gw.retrieve([query], topk=topk, path=path)
        self.assertEqual(r.status, 200, r)
        return [(h["document"]["id"], h["score"]) for h in r.json()["result"][0]]

    def test_rerank_settings_rebuild_the_route(self):
        """rerank is part of the route's instance key (build.c): a changed stage is a new instance,
        and the answers are the new stage's -- here the same logits through a sigmoid."""
        def rr(activation):
            e = sgtest.example_backend("rr", cache=False)
            e["rerank"] = {"model": os.path.join(sgtest.FIXTURES, "xenc-tiny"), "candidates": 6, "activation": activation}
            return e
        self.start([rr("identity")])
        before = self.hits("/retrieve/rr")
        rep = self.reload([rr("sigmoid")])
        self.assertEqual((rep["routes"]["recreated"], rep["routes"]["kept"]), (["rr"], []), rep)
        after = self.hits("/retrieve/rr")
        self.assertEqual([i for i, _ in after], [i for i, _ in before])  # monotonic: the order stays
        for (_, logit), (_, score) in zip(before, after):
            self.assertAlmostEqual(score, 1 / (1 + math.exp(-logit)), delta=1e-5)
        self.assertEqual(self.gw.metric("searchgate_backend_instances_created_total", backend="rr"), 2)
        self.assertEqual(self.reload([rr("sigmoid")])["routes"]["kept"], ["rr"])  # unchanged: the same instance

    def test_fusion_route_added_changed_removed(self):
        def leg(name):
            return sgtest.example_backend(name, documents=[{"id": "%s%d" % (name, i), "contents": '"%s%d"\ncity' % (name, i)}
                                                           for i in range(3)])
        legs = [leg("a"), leg("b"), leg("c")]
        self.start(legs)
        self.assertEqual(self.gw.post("/retrieve/fu", {"queries": ["city"]}).status, 404)
        rep = self.reload(legs + [{"name": "fu", "fusion": {"routes": ["a", "b"]}}])
        self.assertEqual(rep["fusion_routes"], {"added": ["fu"], "removed": [], "kept": []}, rep)
        self.assertEqual(sorted(rep["routes"]["kept"]), ["a", "b", "c"], rep)
        got = self.hits("/retrieve/fu", "city", 6)
        self.assertEqual([i for i, _ in got], ["a0", "b0", "a1", "b1", "a2", "b2"])  # rrf, ties in leg order
        # other legs and a weight: the same query, answered from the new legs with the new weight
        rep = self.reload(legs + [{"name": "fu", "fusion": {"routes": ["a", "c"], "weights": {"c": 3}}}])
        self.assertEqual(rep["fusion_routes"], {"added": [], "removed": [], "kept": ["fu"]}, rep)
        got = self.hits("/retrieve/fu", "city", 6)
        self.assertEqual([i for i, _ in got], ["c0", "c1", "c2", "a0", "a1", "a2"])
        self.assertAlmostEqual(got[0][1], 3 * got[3][1])  # both rank 1 of their leg, weights 3 and 1
        rep = self.reload(legs)
        self.assertEqual(rep["fusion_routes"], {"added": [], "removed": ["fu"], "kept": []}, rep)
        self.assertEqual(self.gw.post("/retrieve/fu", {"queries": ["city"]}).status, 404)
        self.assertEqual(len(self.hits("/retrieve/a", "city")), 3)

    def test_log_level(self):
        line = " POST /retrieve backend=ex client="  # the per-query debug line
        self.start([sgtest.example_backend("ex", cache=False)], log_level="info")
        self.hits("/retrieve/ex")
        self.reload([sgtest.example_backend("ex", cache=False)], log_level="debug")
        self.hits("/retrieve/ex")
        self.assertEqual(self.gw.wait_log(line).count(line), 1)  # the request after the reload only
        self.reload([sgtest.example_backend("ex", cache=False)], log_level="warn")
        self.hits("/retrieve/ex")
        time.sleep(sgtest.scaled(0.3))  # a line would be written before the answer or just after it
        self.assertEqual(self.gw.read_log().count(line), 1)  # and back to quiet

    def test_limits(self):
        """limits.max_topk raised: a topk refused before is served; limits.max_queries lowered: a batch
        served before is refused."""
        ex = [sgtest.example_backend("ex")]
        self.start(ex, limits={"max_topk": 3, "max_queries": 10})
        r = self.gw.retrieve(["capital"], topk=5)
        self.assertEqual(r.status, 413, r)
        self.assertIn("limits.max_topk (3)", r.json()["error"]["message"])
        self.assertEqual(self.gw.retrieve(["q%d" % i for i in range(4)], topk=1).status, 200)
        rep = self.reload(ex, limits={"max_topk": 10, "max_queries": 3})
        self.assertEqual(rep["restart_required"], [], rep)
        self.assertEqual(len(self.hits("/retrieve", "capital", 5)), 5)
        r = self.gw.retrieve(["q%d" % i for i in range(4)], topk=1)
        self.assertEqual(r.status, 413, r)
        self.assertIn("limits.max_queries", r.json()["error"]["message"])


class NoAdminKey(unittest.TestCase):
    def test_refused_without_admin_key(self):
        gw = sgtest.Gateway({"backends": [sgtest.example_backend()]})
        try:
            r = gw.post("/admin/reload", b"")
            self.assertEqual(r.status, 403, r)
            self.assertIn("admin_key_env", r.json()["error"]["message"])
        finally:
            gw.stop()


if __name__ == "__main__":
    sgtest.main()
