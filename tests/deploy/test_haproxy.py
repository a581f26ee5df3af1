"""Replicas behind a real load balancer (issue 20, item 4): HAProxy (Debian's) running the shipped
deploy/haproxy.cfg, three real gateways sharing one real redis-server, all on loopback.

Under a steady /retrieve load through HAProxy:
  * one gateway is SIGKILLed, then restarted: 0 failed requests, its share moves to the others
    while it is down, and it gets traffic again once HAProxy sees it healthy;
  * one gateway is SIGTERMed with shutdown_drain_ms: HAProxy's health check takes it out while it
    still serves (/health says "draining"), it exits cleanly, and it is restarted: 0 failures;
  * the cache is shared: a query answered by one replica is a Redis hit on another;
  * one gateway's config is reloaded in place (`searchgate --reload PIDFILE`, the SIGHUP systemd's
    ExecReload sends): 0 failures, the process and its connections stay, and it serves with the
    new config right after.
Each phase prints its figures (`ctest -R deploy_haproxy -V | grep FIGURES`).
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, Redis, example_backend, free_port, request

HAPROXY_CFG = os.path.join(sgtest.SOURCE_DIR, "deploy", "haproxy.cfg")
DRAIN_MS = 3000
QUERIES = ["question %d about paris" % i for i in range(150)]  # repeated: the load sees cache hits too


def haproxy_binary():
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(exe):
        raise AssertionError("haproxy is not installed: .ci/deps.sh test installs it (Debian package haproxy)")
    return exe


def gateway_config(redis_port, topk=3):
    return {"backends": [example_backend(delay_ms=5, topk=topk, workers=4)],
            "cache": {"redis": {"host": "127.0.0.1", "port": redis_port, "timeout_ms": 200}},
            "shutdown_drain_ms": DRAIN_MS}


class Replica:
    """A gateway on a fixed port (HAProxy's server line), restartable."""

    def __init__(self, name, redis_port):
        self.name, self.redis_port, self.port = name, redis_port, free_port()
        self.gw = None

    def start(self):
        self.pid_file = os.path.join(tempfile.gettempdir(), "sg-haproxy-%s-%d.pid" % (self.name, self.port))
        self.gw = Gateway(gateway_config(self.redis_port), extra_args=["--port", str(self.port), "--pid-file", self.pid_file])
        assert self.gw.port == self.port
        return self

    def served(self):
        """/retrieve requests this process answered with 200."""
        return self.gw.metric("searchgate_requests_total", code="200")


class HAProxy:
    def __init__(self, servers):
        self.dir = tempfile.mkdtemp(prefix="sghaproxy-")
        self.port, self.stats_port = free_port(), free_port()
        with open(HAPROXY_CFG) as f:
            text = f.read()
        # the shipped file with its four addresses moved to free loopback ports, nothing else changed
        repl = {"127.0.0.1:8000": self.port, "127.0.0.1:8404": self.stats_port}
        for i, srv in enumerate(servers):
            repl["127.0.0.1:%d" % (8001 + i)] = srv.port
        for old, port in repl.items():
            assert text.count(old) == 1, "deploy/haproxy.cfg: expected %s once" % old
            text = text.replace(old, "127.0.0.1:%d" % port)
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.log = open(os.path.join(self.dir, "haproxy.log"), "wb")
        self.proc = subprocess.Popen([haproxy_binary(), "-db", "-f", self.cfg], stdout=self.log, stderr=subprocess.STDOUT)

    def stats(self):
        """{server name: {"status", "stot", "wretr", "wredis", ...}} from the stats page's CSV."""
        r = request(self.stats_port, "GET", "/;csv", timeout=5)
        lines = r.body.decode().splitlines()
        names = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(names, line.split(",")))
            if row.get("pxname") == "searchgate_replicas" and row.get("svname") not in ("BACKEND", None):
                out[row["svname"]] = row
        return out

    def states(self):
        """{server name: status} ("UP", "DOWN", "UP 1/2", ...)."""
        return {k: v["status"] for k, v in self.stats().items()}

    def wait_state(self, server, want, timeout=20):
        """Waits until HAProxy reports `server` as `want`; returns the seconds it took."""
        started = time.time()
        deadline = started + sgtest.scaled(timeout)
        st = None
        while time.time() < deadline:
            try:
                st = self.states().get(server)
            except OSError:
                st = None
            if st == want:
                return time.time() - started
            time.sleep(0.02)
        raise AssertionError("haproxy: %s is %r, not %r" % (server, st, want))

    def read_log(self):
        with open(os.path.join(self.dir, "haproxy.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # soft stop
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Load:
    """Clients on keep-alive connections to HAProxy, like RL rollout workers; every request must get 200."""

    def __init__(self, port, clients=6):
        self.port = port
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]
        for t in self.threads:
            t.start()

    def run(self, idx):
        conn = None
        i = idx
        while not self.stop_flag.is_set():
            body = json.dumps({"queries": [QUERIES[i % len(QUERIES)], QUERIES[(i * 7) % len(QUERIES)]], "topk": 2})
            i += 1
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/retrieve", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                good = r.status == 200 and len(json.loads(data)["result"]) == 2
                with self.lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failures.append((time.time(), r.status, data[:200]))
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError) as e:
                with self.lock:
                    self.failures.append((time.time(), "exception", repr(e)))
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(0.002)
        if conn is not None:
            conn.close()

    def count(self):
        with self.lock:
            return self.ok

    def finish(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=60)
        return self.ok, self.failures


def wait_for_requests(load, n, timeout=30):
    """Lets the load run until `n` more requests succeeded."""
    target = load.count() + n
    deadline = time.time() + sgtest.scaled(timeout)
    while load.count() < target:
        if time.time() > deadline:
            raise AssertionError("the load stalled at %d requests (wanted %d)" % (load.count(), target))
        time.sleep(0.02)


def retries(haproxy):
    """HAProxy's (retries, redispatches) so far, over the replicas."""
    st = haproxy.stats().values()
    return sum(int(v.get("wretr") or 0) for v in st), sum(int(v.get("wredis") or 0) for v in st)


def figures(phase, haproxy, load_ok, base, **times):
    """One line of figures per phase (`ctest -R deploy_haproxy -V | grep FIGURES`): requests
    served, HAProxy's retries and redispatches during the phase, how long each transition took."""
    now = retries(haproxy)
    retr, redis = now[0] - base[0], now[1] - base[1]
    print("FIGURES %s: %d requests ok, 0 failed; haproxy retries %d, redispatches %d; %s" %
          (phase, load_ok, retr, redis, ", ".join("%s %.2f s" % kv for kv in times.items())), flush=True)


def reload_gateway_config(replica, new_config, timeout=60):
    """Reloads `replica`'s config in place, as an operator does: the new file replaces the old one
    atomically, then `searchgate --reload PIDFILE` (SIGHUP to the process the pid file names, what
    systemd's ExecReload sends). Waits for the reload's log line; returns its (generation, seconds
    from the signal to the new generation serving)."""
    gw = replica.gw
    before = len(re.findall(r"configuration \S+ reloaded in", gw.read_log()))
    tmp = gw.config_path + ".new"
    with open(tmp, "w") as f:
        json.dump(dict(gw.config, **new_config), f)
    os.rename(tmp, gw.config_path)
    started = time.time()
    out = subprocess.run([sgtest.binary("searchgate"), "--reload", replica.pid_file], capture_output=True, text=True,
                         timeout=sgtest.scaled(30))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "asked process %d to reload" % gw.proc.pid in out.stdout, out.stdout
    deadline = started + sgtest.scaled(timeout)
    while True:
        done = re.findall(r"configuration \S+ reloaded in \d+ ms: generation (\d+) serves new requests", gw.read_log())
        if len(done) > before:
            return int(done[-1]), time.time() - started
        refused = "configuration reload refused" in gw.read_log()
        if refused or time.time() > deadline or gw.proc.poll() is not None:
            raise AssertionError("%s: no reload:\n%s" % (replica.name, gw.read_log()[-3000:]))
        time.sleep(0.01)


class ReplicasBehindHAProxy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        haproxy_binary()
        cls.redis = Redis()
        cls.replicas = [Replica("gw%d" % (i + 1), cls.redis.port).start() for i in range(3)]
        cls.haproxy = HAProxy(cls.replicas)
        for r in cls.replicas:
            cls.haproxy.wait_state(r.name, "UP")

    @classmethod
    def tearDownClass(cls):
        cls.haproxy.stop()
        for r in cls.replicas:
            if r.gw is not None:
                r.gw.stop(check=False)
                shutil.rmtree(r.gw.dir, ignore_errors=True)
        cls.redis.close()

    def assert_no_failures(self, load, what):
        ok, failures = load.finish()
        self.assertGreater(ok, 0)
        # HAProxy's log lines of requests that did not end normally (termination state other than ----)
        odd = [line for line in self.haproxy.read_log().splitlines() if "searchgate_replicas" in line and " ---- " not in line]
        self.assertEqual(failures, [], "%s: %d of %d requests failed: %r\nhaproxy log (unusual lines):\n%s" %
                         (what, len(failures), ok + len(failures), failures[:5], "\n".join(odd[-40:])))
        return ok

    def test_1_kill_and_restart(self):
        """SIGKILL one replica under load, then restart it on the same port."""
        gw1, gw2, gw3 = self.replicas
        base = retries(self.haproxy)
        load = Load(self.haproxy.port)
        times = {}
        try:
            wait_for_requests(load, 150)
            before = [r.served() for r in self.replicas]
            self.assertTrue(all(b > 0 for b in before), "every replica serves: %r" % before)
            gw2.gw.proc.kill()  # no drain, no goodbye: requests in flight on it die with it
            gw2.gw.wait_exit()
            times["kill to DOWN"] = self.haproxy.wait_state("gw2", "DOWN")
            # while gw2 is down its share goes to gw1 and gw3: they answered everything the clients
            # got between these two readings (their counters read first, the clients' count last,
            # so the window on the replicas' side is the wider one; less at most one request per
            # client, which may count a response before the replica counts it)
            mid = [gw1.served(), gw3.served()]
            done = load.count()
            wait_for_requests(load, 300)
            answered = load.count() - done
            after = [gw1.served(), gw3.served()]
            self.assertGreaterEqual(after[0] - mid[0] + after[1] - mid[1], answered - len(load.threads))
            self.assertGreater(after[0] - mid[0], 0)
            self.assertGreater(after[1] - mid[1], 0)
            shutil.rmtree(gw2.gw.dir, ignore_errors=True)
            started = time.time()
            gw2.start()
            self.haproxy.wait_state("gw2", "UP")
            times["restart to UP"] = time.time() - started
            wait_for_requests(load, 300)
            self.assertGreater(gw2.served(), 0, "the restarted replica gets traffic again")
        finally:
            ok = self.assert_no_failures(load, "SIGKILL + restart")
        figures("SIGKILL + restart", self.haproxy, ok, base, **times)

    def test_2_sigterm_drains(self):
        """SIGTERM one replica under load: HAProxy takes it out while it still serves; it exits 0."""
        gw3 = self.replicas[2]
        base = retries(self.haproxy)
        load = Load(self.haproxy.port)
        times = {}
        try:
            wait_for_requests(load, 150)
            started = time.time()
            gw3.gw.proc.send_signal(signal.SIGTERM)
            # the health check takes it out of the rotation before it stops accepting
            times["SIGTERM to DOWN"] = self.haproxy.wait_state("gw3", "DOWN", timeout=DRAIN_MS / 1000.0)
            self.assertIsNone(gw3.gw.proc.poll(), "HAProxy should see the drain, not a closed port")
            r = request(gw3.port, "GET", "/health")
            self.assertEqual((r.status, r.json()["status"]), (503, "draining"))
            self.assertEqual(gw3.gw.wait_exit(), 0)
            times["SIGTERM to exit"] = time.time() - started
            text = gw3.gw.read_log()
            self.assertIn("draining for %d ms" % DRAIN_MS, text)
            wait_for_requests(load, 200)
            shutil.rmtree(gw3.gw.dir, ignore_errors=True)
            started = time.time()
            gw3.start()
            self.haproxy.wait_state("gw3", "UP")
            times["restart to UP"] = time.time() - started
            wait_for_requests(load, 200)
        finally:
            ok = self.assert_no_failures(load, "SIGTERM drain + restart")
        figures("SIGTERM drain + restart", self.haproxy, ok, base, **times)

    def test_3_cache_is_shared(self):
        """A query answered by one replica is a Redis hit on another (they share cache.redis)."""
        gw1, gw2, gw3 = self.replicas
        q = "shared cache probe %d" % os.getpid()
        r = gw1.gw.retrieve([q], topk=2)
        self.assertEqual(r.status, 200, r)
        hits = gw3.gw.metric("searchgate_cache_hits_total", layer="redis")
        deadline = time.time() + sgtest.scaled(5)
        while True:  # the first replica stores its result in Redis after answering (fire and forget)
            r3 = gw3.gw.retrieve([q], topk=2)
            self.assertEqual(r3.status, 200, r3)
            if gw3.gw.metric("searchgate_cache_hits_total", layer="redis") == hits + 1:
                break
            self.assertLess(time.time(), deadline, "no Redis hit on the second replica")
            time.sleep(0.05)
        self.assertEqual(r3.json(), r.json())
        # and through HAProxy, whichever replica it picks: a Redis or L1 hit, never a backend call
        live = [g for g in self.replicas if g.gw.proc.poll() is None]
        calls = sum(g.gw.metric("searchgate_backend_calls_total") for g in live)
        r = request(self.haproxy.port, "POST", "/retrieve", {"queries": [q], "topk": 2})
        self.assertEqual(r.status, 200)
        self.assertEqual(sum(g.gw.metric("searchgate_backend_calls_total") for g in live), calls)

    def test_4_reload_one_gateway_under_load(self):
        """Reload one replica's config under load: 0 failures, the same process keeps serving its
        share, and it answers with the new config right after."""
        gw1 = self.replicas[0]
        pid = gw1.gw.proc.pid
        base = retries(self.haproxy)
        load = Load(self.haproxy.port)
        times = {}
        try:
            wait_for_requests(load, 150)
            served = gw1.served()
            r = gw1.gw.post("/retrieve", {"queries": ["reload probe"]})  # no topk: the route's default
            self.assertEqual(len(r.json()["result"][0]), 3)
            generation, times["signal to new generation"] = reload_gateway_config(gw1, gateway_config(self.redis.port, topk=1))
            self.assertEqual(generation, 2)
            r = gw1.gw.post("/retrieve", {"queries": ["reload probe 2"]})  # the route's new default topk
            self.assertEqual(r.status, 200)
            self.assertEqual(len(r.json()["result"][0]), 1)
            self.assertEqual(self.haproxy.states()["gw1"], "UP")  # never out of the rotation
            wait_for_requests(load, 300)
            self.assertGreater(gw1.served(), served + 1, "the reloaded replica keeps its share")
            self.assertEqual(gw1.gw.proc.pid, pid)
            self.assertEqual(self.haproxy.states()["gw1"], "UP")
        finally:
            ok = self.assert_no_failures(load, "reload")
        figures("config reload of one replica", self.haproxy, ok, base, **times)


if __name__ == "__main__":
    sgtest.main()
