"""Redis Sentinel failover under load (docs/deployment.md, "Redis"): one master, one replica, three
sentinels, all with passwords and ACL users, on free loopback ports. The gateway finds the master
through the sentinels; /retrieve load runs from a thread pool while the master is killed (or a
failover is asked for): no request fails (the cache is bypassed while there is no master), cache
writes and reads resume on the promoted replica within seconds, budgets and global rate limits
keep counting there, and nothing is ever written to a replica.

Prints the time without a cache (kill -> first cache write on the new master), measured on
whatever machine runs the test, under the test's own load.

Three tests isolate the ways a loop learns that the master moved, each with the others ruled out
by the gateway's own counters: a -READONLY reply (a node demoted with REPLICAOF, which keeps its
connections), a +switch-master message (SENTINEL FAILOVER, which leaves the old master up and its
connections open until failover-timeout), and the set-up's ROLE check (a stale sentinel naming a
replica)."""
import json
import os
import shutil
import tempfile
import threading
import time
import unittest

import sgtest
from sgtest import Gateway, example_backend, scaled
from redisutil import GATEWAY_ACL, SENTINEL_ACL, Server, Subscriber, searchgate_check, wait_for

PASSWORD = "s3ntinel-test-pw-55"  # the gateway's user "sg" on the data nodes
ADMIN_PW = "adm1n-pw-12"  # the default user: replication and the sentinels
SENTINEL_PW = "s3nt-client-pw-34"  # the gateway's user "sgw" on the sentinels
ENV = {"SG_TEST_REDIS_PW": PASSWORD, "SG_TEST_SENTINEL_PW": SENTINEL_PW, "SG_TEST_CLIENT_KEY": "client-key-1"}
MASTER = "mymaster"


def info(server, section):
    text = server.cmd("INFO", section).decode()
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)


class Group:
    """One master, one replica, three sentinels."""

    def __init__(self, sentinel_acl=SENTINEL_ACL):
        data_lines = ["user default on >%s ~* &* +@all" % ADMIN_PW, "user sg on >%s ~sg:* %s" % (PASSWORD, GATEWAY_ACL),
                      "masterauth %s" % ADMIN_PW]
        self.master = Server(data_lines, admin=("default", ADMIN_PW))
        self.replica = Server(data_lines + ["replicaof 127.0.0.1 %d" % self.master.port], admin=("default", ADMIN_PW))
        self.sentinels = []
        for _ in range(3):
            self.sentinels.append(Server([
                "sentinel monitor %s 127.0.0.1 %d 2" % (MASTER, self.master.port),
                "sentinel down-after-milliseconds %s 1000" % MASTER,
                "sentinel failover-timeout %s 10000" % MASTER,
                "sentinel parallel-syncs %s 1" % MASTER,
                "sentinel auth-pass %s %s" % (MASTER, ADMIN_PW),
                "requirepass %s" % ADMIN_PW,  # the sentinels' own default user (they share it)
                "user sgw on >%s %s" % (SENTINEL_PW, sentinel_acl),
            ], sentinel=True, admin=(None, ADMIN_PW)))
        ok = wait_for(self.settled, scaled(30), 0.2)
        if not ok:
            self.close()
            raise RuntimeError("the sentinels did not see each other and the replica in time")

    def settled(self):
        if info(self.replica, "replication").get("master_link_status") != "up":
            return False
        for s in self.sentinels:
            m = s.cmd("SENTINEL", "MASTER", MASTER)
            d = {m[i].decode(): m[i + 1].decode() for i in range(0, len(m), 2)}
            if d["num-other-sentinels"] != "2" or d["num-slaves"] != "1" or d["flags"] != "master":
                return False
        return True

    def gateway_config(self):
        paid = example_backend("paid")
        paid["budget"] = {"queries": 10000000, "period": "day", "fail": "open"}
        return {
            "backends": [example_backend("example"), paid],
            # L1 off: every repeat is a Redis lookup, so the hits count on the master of the moment
            "cache": {"l1_bytes": 0, "redis": {
                "sentinels": ["127.0.0.1:%d" % s.port for s in self.sentinels], "master": MASTER, "timeout_ms": 300,
                "username": "sg", "password_env": "SG_TEST_REDIS_PW",
                "sentinel_username": "sgw", "sentinel_password_env": "SG_TEST_SENTINEL_PW"}},
            "clients": {"keys": [{"id": "job-1", "key_env": "SG_TEST_CLIENT_KEY", "rate": 1000000, "global": True}]},
        }

    def close(self):
        for s in self.sentinels + [self.replica, self.master]:
            s.close()


class Load:
    """A pool of clients sending /retrieve requests (a repeated query: a cache hit; a new one: a miss
    and a cache write), on both routes, as the keyed client (global limit, budget)."""

    def __init__(self, gw, threads=8):
        self.gw = gw
        self.stop = threading.Event()
        self.results = []  # (time, status)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, i):
        n = 0
        while not self.stop.is_set():
            path = "/retrieve/paid" if n % 2 else "/retrieve"
            try:
                r = self.gw.retrieve(["repeat %d" % (n % 10), "new %d %d %f" % (i, n, time.time())], path=path,
                                     headers={"X-API-Key": "client-key-1"}, topk=2)
                status = r.status
            except OSError as e:  # a connection error is a failed request too
                status = repr(e)
            with self.lock:
                self.results.append((time.time(), status))
            n += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        return self.results


class Failover(unittest.TestCase):
    def test_master_killed_under_load(self):
        g = Group()
        gw = None
        try:
            gw = Gateway(g.gateway_config(), env=ENV)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            old = "127.0.0.1:%d" % g.master.port
            new = "127.0.0.1:%d" % g.replica.port
            self.assertEqual(gw.get("/stats").json()["cache"]["redis"]["master"], old)
            load = Load(gw)
            time.sleep(2)
            # budgets and the global limit are counted on the master
            budget_key = [k for k in g.master.cmd("KEYS", "sg:budget:route:paid:*")][0]
            used_before = int(g.master.cmd("HGET", budget_key, "used"))
            self.assertGreater(used_before, 0)
            self.assertIsNotNone(g.master.cmd("GET", "sg:rl:job-1"))
            hits_before = gw.metric("searchgate_cache_hits_total", layer="redis")
            self.assertGreater(hits_before, 0)

            watch = Subscriber(g.sentinels[0].port, "+switch-master", password=ADMIN_PW)  # when Sentinel announces it
            t_kill = time.time()
            g.master.kill()
            keys_at_kill = g.replica.cmd("DBSIZE")  # replication stopped with the master
            t_promoted = t_write = None
            deadline = time.time() + scaled(30)
            while time.time() < deadline and t_write is None:
                now = time.time()
                try:  # the sentinels kill the promoted replica's client connections (ours too)
                    if t_promoted is None and g.replica.cmd("ROLE")[0] == b"master":
                        t_promoted = now
                    if t_promoted is not None and g.replica.cmd("DBSIZE") > keys_at_kill:
                        t_write = now
                except (OSError, RuntimeError):
                    pass
                time.sleep(0.02)
            self.assertIsNotNone(t_promoted, "the replica was not promoted")
            self.assertIsNotNone(t_write, "no cache write reached the new master:\n" + gw.read_log()[-3000:])
            wait_for(lambda: watch.first is not None, scaled(5))
            watch.close()
            announced = "+switch-master %.2f s; " % (watch.first - t_kill) if watch.first is not None else ""
            print("\nSentinel failover under load (%d client threads, down-after-milliseconds 1000), after the kill: "
                  "promotion (ROLE master) %.2f s; %sfirst cache write on the new master %.2f s = the time without a "
                  "cache" % (len(load.threads), t_promoted - t_kill, announced, t_write - t_kill), flush=True)
            # Sentinel announces the new master (+switch-master) once it has seen the promotion
            # (its INFO polling adds up to a few seconds); the gateway's part starts there
            self.assertIsNotNone(watch.first, "no +switch-master from sentinel 0")
            self.assertLess(t_write - watch.first, scaled(2), "cache writes resume right after +switch-master")
            self.assertLess(t_write - t_promoted, scaled(10), "cache writes resume within seconds of the promotion")
            # reads too: hits on the new master (it served none as a replica: the gateway never reads there)
            self.assertTrue(wait_for(lambda: int(info(g.replica, "stats")["keyspace_hits"]) > 0, scaled(5)), gw.read_log())
            used_at_switch = int(g.replica.cmd("HGET", budget_key, "used") or 0)
            tat_at_switch = int(g.replica.cmd("GET", "sg:rl:job-1") or 0)
            time.sleep(2)
            results = load.finish()

            failed = [r for r in results if r[1] != 200]
            after = [r for r in results if r[0] > t_kill]
            log = gw.read_log()
            self.assertEqual(failed, [], "failed requests during the failover:\n" + log[-3000:])
            self.assertGreater(len(after), 50)
            # budgets and the global limit keep counting on the new master
            used_end = int(g.replica.cmd("HGET", budget_key, "used"))
            self.assertGreater(used_end, max(used_at_switch, used_before), (used_before, used_at_switch, used_end))
            self.assertGreater(int(g.replica.cmd("GET", "sg:rl:job-1") or 0), tat_at_switch)
            stats = gw.get("/stats").json()["cache"]["redis"]
            self.assertEqual(stats["master"], new)
            self.assertTrue(stats["up"])
            self.assertEqual(gw.metric("searchgate_cache_redis_master_changes_total"), 1, log[-3000:])
            self.assertGreater(gw.metric("searchgate_cache_hits_total", layer="redis"), hits_before)
            self.assertIn('Redis master "%s" moved from %s to %s (failover)' % (MASTER, old, new), log)
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 0)
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="auth"), 0)

            # the old master comes back: the sentinels make it a replica, and the gateway never
            # connects to it (nothing is written to a replica)
            g.master.start()
            self.assertTrue(wait_for(lambda: g.master.cmd("ROLE")[0] == b"slave", scaled(20), 0.2))
            for i in range(20):
                self.assertEqual(gw.retrieve(["after return %d" % i]).status, 200)
            clients = g.master.cmd("CLIENT", "LIST").decode()
            self.assertNotIn("user=sg ", clients)
            for text in (log, gw.get("/stats").body.decode(), gw.get("/metrics").body.decode()):
                self.assertNotIn(PASSWORD, text)
                self.assertNotIn(SENTINEL_PW, text)
        finally:
            if gw is not None:
                gw.stop()
            g.close()

    def check(self, g):
        """searchgate --check asks the sentinels and sets up a connection to the master they name."""
        d = tempfile.mkdtemp(prefix="sgcheck-")
        try:
            path = os.path.join(d, "check.json")
            cfg = g.gateway_config()
            with open(path, "w") as f:
                json.dump(cfg, f)
            rc, out, err = searchgate_check(path, ENV)
            self.assertEqual(rc, 0, out + err)
            self.assertIn('Redis master "%s" is 127.0.0.1:%d (sentinel 127.0.0.1:%d); it answers as master' %
                          (MASTER, g.master.port, g.sentinels[0].port), out)
            cfg["cache"]["redis"]["master"] = "othermaster"
            with open(path, "w") as f:
                json.dump(cfg, f)
            rc, out, err = searchgate_check(path, ENV)
            self.assertEqual(rc, 1, out + err)
            self.assertIn('does not know a master named "othermaster"', err)
            rc, out, err = searchgate_check(path, dict(ENV, SG_TEST_SENTINEL_PW="wrong"))
            self.assertEqual(rc, 1, out + err)
            self.assertIn('sentinel 127.0.0.1:%d refused AUTH as user "sgw"' % g.sentinels[0].port, err)
            for text in (out, err):
                self.assertNotIn(SENTINEL_PW, text)
                self.assertNotIn(PASSWORD, text)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_requested_failover_moves_at_once(self):
        """SENTINEL FAILOVER with both nodes alive: the old master is demoted (its clients killed,
        +switch-master published); the gateway follows, no request fails, and the demoted node gets
        no gateway connection afterwards."""
        g = Group()
        gw = None
        try:
            self.check(g)
            gw = Gateway(g.gateway_config(), env=ENV, threads=3)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            load = Load(gw, threads=4)
            time.sleep(1)
            self.assertEqual(g.sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER), "OK")
            new = "127.0.0.1:%d" % g.replica.port
            self.assertTrue(wait_for(lambda: gw.get("/stats").json()["cache"]["redis"].get("master") == new, scaled(20)),
                            gw.read_log())
            self.assertTrue(wait_for(lambda: g.master.cmd("ROLE")[0] == b"slave", scaled(20), 0.2))
            time.sleep(1.5)
            results = load.finish()
            self.assertEqual([r for r in results if r[1] != 200], [])
            self.assertTrue(wait_for(lambda: int(info(g.replica, "stats")["keyspace_hits"]) > 0, scaled(5)))
            self.assertNotIn("user=sg ", g.master.cmd("CLIENT", "LIST").decode())
            self.assertEqual(gw.metric("searchgate_cache_redis_master_changes_total"), 1)
        finally:
            if gw is not None:
                gw.stop()
            g.close()

    def test_readonly_reply_alone_moves(self):
        """-READONLY as the only signal: the sentinels come to name the replica (re-monitored, so no
        +switch-master is published), the replica is promoted and the old master demoted with
        REPLICAOF, which keeps its client connections open (Redis 7 drops only blocked clients).
        The gateway's next write there is answered -READONLY; it asks the sentinels again and moves,
        with no connection lost, no +switch-master and its subscriptions intact."""
        g = Group()
        gw = None
        watches = []
        try:
            gw = Gateway(g.gateway_config(), env=ENV, threads=2)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            old = "127.0.0.1:%d" % g.master.port
            new = "127.0.0.1:%d" % g.replica.port
            watches = [Subscriber(s.port, "+switch-master", password=ADMIN_PW) for s in g.sentinels]
            load = Load(gw, threads=4)
            time.sleep(1)
            counts = {k: gw.metric("searchgate_cache_redis_errors_total", kind=k) for k in ("readonly", "disconnect", "sentinel")}
            # the sentinels name the replica, which becomes a master; nothing tells the gateway
            g.replica.cmd("REPLICAOF", "NO", "ONE")
            for s in g.sentinels:
                s.cmd("SENTINEL", "REMOVE", MASTER)
                s.cmd("SENTINEL", "MONITOR", MASTER, "127.0.0.1", g.replica.port, 2)
                s.cmd("SENTINEL", "SET", MASTER, "auth-pass", ADMIN_PW)
                self.assertEqual(s.cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1], str(g.replica.port).encode())
            time.sleep(0.5)
            self.assertEqual(gw.get("/stats").json()["cache"]["redis"]["master"], old, "moved before any signal")
            self.assertIn("user=sg ", g.master.cmd("CLIENT", "LIST").decode())
            # the demotion keeps the gateway's connections: only the write's -READONLY can move it
            t_demote = time.time()
            g.master.cmd("REPLICAOF", "127.0.0.1", g.replica.port)
            self.assertTrue(wait_for(lambda: gw.get("/stats").json()["cache"]["redis"]["master"] == new, scaled(5), 0.01),
                            gw.read_log()[-3000:])
            t_move = time.time()
            # every loop left the demoted node (the gateway closed its connections itself)
            self.assertTrue(wait_for(lambda: "user=sg " not in g.master.cmd("CLIENT", "LIST").decode(), scaled(5)))
            self.assertTrue(wait_for(lambda: g.replica.cmd("DBSIZE") > 0 and
                                     int(info(g.replica, "stats")["keyspace_hits"]) > 0, scaled(5)))
            time.sleep(0.5)
            results = load.finish()
            log = gw.read_log()
            print("\n-READONLY alone: the gateway moved %.3f s after the demotion" % (t_move - t_demote), flush=True)
            self.assertEqual([r for r in results if r[1] != 200], [], log[-3000:])
            self.assertGreater(gw.metric("searchgate_cache_redis_errors_total", kind="readonly"), counts["readonly"])
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="disconnect"), counts["disconnect"],
                             "a server closed a gateway connection: the move is not READONLY's alone\n" + log[-3000:])
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="sentinel"), counts["sentinel"],
                             "a subscription was lost (its re-query could explain the move)\n" + log[-3000:])
            self.assertEqual([w.first for w in watches], [None] * len(watches), "a sentinel published +switch-master")
            self.assertIn("READONLY You can't write against a read only replica", log)
            self.assertIn('Redis master "%s" moved from %s to %s (failover)' % (MASTER, old, new), log)
            self.assertEqual(gw.metric("searchgate_cache_redis_master_changes_total"), 1)
            self.assertEqual(gw.retrieve(["after readonly"]).status, 200)
        finally:
            for w in watches:
                w.close()
            if gw is not None:
                gw.stop()
            g.close()

    def test_switch_master_alone_moves_at_once(self):
        """+switch-master as the only signal: SENTINEL FAILOVER promotes the replica (its clients
        are killed: the gateway has none there) and announces it; the old master is still a master
        with the gateway's connection open (it is demoted, its clients killed, only later). The
        gateway moves within 1 s of the announcement on the sentinel it subscribes through, far
        under the 2 s reconnect back-off, with no connection lost, no -READONLY, no subscription
        lost (whose re-query could also move it)."""
        g = Group()
        gw = None
        watch = None
        try:
            gw = Gateway(g.gateway_config(), env=ENV, threads=1)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            old = "127.0.0.1:%d" % g.master.port
            new = "127.0.0.1:%d" % g.replica.port

            def subscribed(s):
                return any("user=sgw " in l and " sub=1 " in l for l in s.cmd("CLIENT", "LIST").decode().splitlines())

            self.assertTrue(wait_for(lambda: sum(subscribed(s) for s in g.sentinels) == 1, scaled(5)))
            sen = [s for s in g.sentinels if subscribed(s)][0]
            watch = Subscriber(sen.port, "+switch-master", password=ADMIN_PW)
            load = Load(gw, threads=4)
            time.sleep(1)
            counts = {k: gw.metric("searchgate_cache_redis_errors_total", kind=k) for k in ("readonly", "disconnect", "sentinel")}
            self.assertEqual(g.sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER), "OK")
            self.assertTrue(wait_for(lambda: gw.get("/stats").json()["cache"]["redis"]["master"] == new, scaled(20), 0.005),
                            gw.read_log()[-3000:])
            t_move = time.time()
            self.assertTrue(wait_for(lambda: watch.first is not None, scaled(5)))
            time.sleep(0.5)
            results = load.finish()
            log = gw.read_log()
            print("\n+switch-master alone: the gateway moved %.3f s after the announcement" % (t_move - watch.first), flush=True)
            self.assertEqual([r for r in results if r[1] != 200], [], log[-3000:])
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="disconnect"), counts["disconnect"],
                             "a server closed the gateway's connection: the move is not +switch-master's alone\n" + log[-3000:])
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="readonly"), counts["readonly"], log[-3000:])
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total", kind="sentinel"), counts["sentinel"], log[-3000:])
            self.assertLess(t_move - watch.first, scaled(1), "moved on the announcement, not after a back-off")
            self.assertIn('Redis master "%s" moved from %s to %s (failover)' % (MASTER, old, new), log)
            self.assertEqual(gw.metric("searchgate_cache_redis_master_changes_total"), 1)
            self.assertTrue(wait_for(lambda: int(info(g.replica, "stats")["keyspace_hits"]) > 0, scaled(5)))
        finally:
            if watch is not None:
                watch.close()
            if gw is not None:
                gw.stop()
            g.close()

    def test_sentinel_naming_a_replica_is_refused(self):
        """A sentinel whose view is stale (here one cut off from the group: it monitors the replica's
        address and cannot authenticate to the data nodes, so it never learns better) names a node
        that answers ROLE slave. The gateway's set-up refuses it (a warning naming the sentinel, the
        readonly metric), asks the next sentinel and uses the real master; it never writes to the
        replica. --check says the same."""
        g = Group()
        stale = Server(["sentinel monitor %s 127.0.0.1 %d 2" % (MASTER, g.replica.port),
                        "requirepass %s" % ADMIN_PW, "user sgw on >%s %s" % (SENTINEL_PW, SENTINEL_ACL)],
                       sentinel=True, admin=(None, ADMIN_PW))
        gw = None
        d = tempfile.mkdtemp(prefix="sgcheck-")
        try:
            self.assertEqual(stale.cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1], str(g.replica.port).encode())
            self.assertEqual(g.replica.cmd("ROLE")[0], b"slave")
            cfg = g.gateway_config()
            cfg["cache"]["redis"]["sentinels"].insert(0, "127.0.0.1:%d" % stale.port)  # loop 0 asks it first
            replica = "127.0.0.1:%d" % g.replica.port
            path = os.path.join(d, "check.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            rc, out, err = searchgate_check(path, ENV)
            self.assertEqual(rc, 0, out + err)
            self.assertIn('Redis master "%s" is 127.0.0.1:%d (sentinel 127.0.0.1:%d); it answers as master' %
                          (MASTER, g.master.port, g.sentinels[0].port), out)
            self.assertIn("; but sentinel 127.0.0.1:%d named %s: Redis %s, which the sentinels name as master \"%s\", is not a "
                          "master (ROLE: slave)" % (stale.port, replica, replica, MASTER), out)
            # a server that refuses the set-up (here: everywhere) is what a failed check names
            rc, out, err = searchgate_check(path, dict(ENV, SG_TEST_REDIS_PW="wrong"))
            self.assertEqual(rc, 1, out + err)
            self.assertIn('refused AUTH as user "sg"', err)
            self.assertNotIn("no sentinel named the master", err)

            gw = Gateway(cfg, env=ENV, threads=1)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            self.assertEqual(gw.get("/stats").json()["cache"]["redis"]["master"], "127.0.0.1:%d" % g.master.port)
            log = gw.read_log()
            line = [l for l in log.splitlines() if "answers ROLE slave" in l]
            self.assertTrue(line, log)
            self.assertIn(" warn  [redis] ", line[0])
            self.assertIn('Redis master "%s": sentinel 127.0.0.1:%d named %s, which answers ROLE slave' %
                          (MASTER, stale.port, replica), line[0])
            self.assertGreaterEqual(gw.metric("searchgate_cache_redis_errors_total", kind="readonly"), 1)
            for i in range(10):
                self.assertEqual(gw.retrieve(["stale sentinel %d" % i]).status, 200)
            self.assertTrue(wait_for(lambda: g.master.cmd("DBSIZE") > 0, scaled(5)))
            self.assertNotIn("user=sg ", g.replica.cmd("CLIENT", "LIST").decode())
        finally:
            shutil.rmtree(d, ignore_errors=True)
            if gw is not None:
                gw.stop()
            stale.close()
            g.close()

    def test_subscription_refused_is_a_warning(self):
        """A sentinel user without the channel permission: the master is found and used, and the
        log says (once per 10 s) why failovers would only be seen late."""
        g = Group(sentinel_acl=SENTINEL_ACL.replace(" &+switch-master", ""))
        gw = None
        try:
            gw = Gateway(g.gateway_config(), env=ENV)
            self.assertTrue(wait_for(lambda: gw.get("/health").json()["cache"]["redis"] == "up", scaled(10)), gw.read_log())
            self.assertTrue(wait_for(lambda: "refused the +switch-master subscription" in gw.read_log(), scaled(10)))
            line = [l for l in gw.read_log().splitlines() if "refused the +switch-master subscription" in l][0]
            self.assertIn("NOPERM", line, line)
            self.assertIn(" warn  [redis] ", line)
            self.assertEqual(gw.retrieve(["subscription refused"]).status, 200)
            # each loop keeps trying to subscribe (a fixed ACL is picked up), with back-off up to 2 s,
            # not in a tight loop
            before = gw.metric("searchgate_cache_redis_errors_total", kind="sentinel")
            self.assertGreaterEqual(before, 1)
            time.sleep(4)
            retries = gw.metric("searchgate_cache_redis_errors_total", kind="sentinel") - before
            self.assertGreaterEqual(retries, 2, "re-subscriptions in 4 s over 2 loops")
            self.assertLessEqual(retries, 2 * 6, "re-subscriptions in 4 s over 2 loops")
            self.assertEqual(len([l for l in gw.read_log().splitlines() if "refused the +switch-master" in l]), 1)
        finally:
            if gw is not None:
                gw.stop()
            g.close()

    def test_no_sentinel_reachable_at_start(self):
        """Sentinels configured but none up: a clear start-up line, the cache bypassed, requests served."""
        ports = [sgtest.free_port() for _ in range(2)]
        cfg = {"backends": [example_backend("example")],
               "cache": {"redis": {"sentinels": ["127.0.0.1:%d" % p for p in ports], "master": MASTER}}}
        gw = Gateway(cfg)
        try:
            self.assertTrue(wait_for(lambda: "is configured but not reachable at start-up" in gw.read_log(), scaled(10)))
            line = [l for l in gw.read_log().splitlines() if "not reachable at start-up" in l][0]
            self.assertIn('Redis master "%s" is configured but not reachable at start-up (no sentinel named master' % MASTER, line)
            self.assertEqual(gw.get("/health").json()["cache"]["redis"], "down (bypassed)")
            self.assertEqual(gw.retrieve(["no sentinel"]).status, 200)
            self.assertGreaterEqual(gw.metric("searchgate_cache_redis_errors_total", kind="sentinel"), 2)
        finally:
            gw.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
