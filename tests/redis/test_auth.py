"""cache.redis as operators run it (docs/operations.md, "Redis in production"): an ACL user with the
minimal command set and a password from the environment, a database number; what a refusal looks
like at start-up, at run time, and to `searchgate --check`; the password shown nowhere.

Real redis-server processes on free loopback ports (tests/redis/redisutil.py)."""
import json
import os
import shutil
import tempfile
import threading
import time
import unittest

from sgtest import Gateway, example_backend, scaled
from redisutil import GATEWAY_ACL, DelayProxy, Server, resp, searchgate_check, wait_for

PASSWORD = "s3cret-redis-pw-71"  # must show up in no log line, page or error
ADMIN_PW = "adm1n-redis-pw-93"
ENV = {"SG_TEST_REDIS_PW": PASSWORD, "SG_TEST_CLIENT_KEY": "client-key-1"}


def acl_server(password=PASSWORD, extra=()):
    """A Redis whose default user needs the admin password and whose gateway user `sg` may run
    exactly the commands the docs list, on keys under the gateway's prefix."""
    return Server(["user default on >%s ~* &* +@all" % ADMIN_PW,
                   "user sg on >%s ~sg:* %s" % (password, GATEWAY_ACL)] + list(extra), admin=("default", ADMIN_PW))


def config(port, db=0, username="sg", password_env="SG_TEST_REDIS_PW", l1=0):
    redis = {"host": "127.0.0.1", "port": port, "timeout_ms": 200, "db": db}
    if username is not None:
        redis["username"] = username
    if password_env is not None:
        redis["password_env"] = password_env
    paid = example_backend("paid")
    paid["budget"] = {"queries": 1000000, "period": "day", "fail": "open"}
    return {
        "backends": [example_backend("example"), paid],
        # L1 off: every repeat is a Redis lookup, so hits prove the connection works
        "cache": {"l1_bytes": l1, "redis": redis},
        "clients": {"keys": [{"id": "job-1", "key_env": "SG_TEST_CLIENT_KEY", "rate": 100000, "global": True}]},
    }


def health(gw):
    return gw.get("/health").json()["cache"]["redis"]


class AclUser(unittest.TestCase):
    def test_acl_user_db_and_every_feature(self):
        """The gateway as the ACL user `sg` in db 5: cache reads and writes, the global rate limit
        and the budget scripts all work (no NOPERM), nothing lands in db 0, and the password is
        nowhere to be seen."""
        redis = acl_server()
        self.addCleanup(redis.close)  # also when the gateway does not start
        gw = Gateway(config(redis.port, db=5), env=ENV)
        key = {"X-API-Key": "client-key-1"}
        try:
            self.assertTrue(wait_for(lambda: health(gw) == "up", scaled(10)), gw.read_log())
            for path in ("/retrieve", "/retrieve/paid"):  # misses: written to Redis after the reply
                self.assertEqual(gw.retrieve(["who wrote hamlet", "tokyo"], path=path, headers=key).status, 200)
            count = "redis.call('SELECT', 5) return #redis.call('KEYS', 'sg:r1:*')"
            self.assertTrue(wait_for(lambda: resp(redis.port, "EVAL", count, 0, user="default", password=ADMIN_PW) == 4),
                            gw.read_log())
            for path in ("/retrieve", "/retrieve/paid"):  # Redis hits
                self.assertEqual(gw.retrieve(["who wrote hamlet", "tokyo"], path=path, headers=key).status, 200)
            self.assertEqual(gw.metric("searchgate_cache_hits_total", layer="redis"), 4)
            self.assertEqual(gw.metric("searchgate_cache_redis_errors_total"), 0, gw.read_log())
            self.assertEqual(redis.cmd("SELECT", 0), "OK")
            keys5 = resp(redis.port, "EVAL", "redis.call('SELECT', 5) return redis.call('KEYS', '*')", 0,
                         user="default", password=ADMIN_PW)
            keys5 = sorted(k.decode() for k in keys5)
            self.assertEqual(len([k for k in keys5 if k.startswith("sg:r1:")]), 4, keys5)  # 2 queries x 2 routes
            self.assertIn("sg:rl:job-1", keys5)  # the global rate limit's GCRA state
            self.assertTrue(any(k.startswith("sg:budget:route:paid:day:") for k in keys5), keys5)
            self.assertEqual(resp(redis.port, "DBSIZE", user="default", password=ADMIN_PW), 0)  # db 0 untouched
            self.assertEqual(gw.metric("searchgate_ratelimit_global_failopen_total"), 0)
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 0)
            # the password appears in no page and no log line; the variable's name may
            pages = [gw.get(p).body.decode() for p in ("/", "/stats", "/metrics", "/health")]
            stats = json.loads(pages[1])["cache"]["redis"]
            self.assertEqual(stats["up"], True)
            self.assertEqual(stats["auth_failed"], False)
            for text in pages + [gw.read_log()]:
                self.assertNotIn(PASSWORD, text)
            self.assertIn('db 5, user "sg", password from $SG_TEST_REDIS_PW', gw.read_log())
        finally:
            log = gw.stop()
            redis.close()
        self.assertNotIn(PASSWORD, log)


class Refusals(unittest.TestCase):
    def lines(self, gw, needle):
        return [l for l in gw.read_log().splitlines() if needle in l]

    def test_wrong_password_at_start_then_fixed_on_the_server(self):
        """A wrong password: one clear start-up line naming the user and the variable, the state
        and the metric say so, requests are served from the backend meanwhile; once the server
        accepts the password, the gateway heals without a restart."""
        redis = acl_server(password="the-servers-idea")
        self.addCleanup(redis.close)  # also when the gateway does not start
        gw = Gateway(config(redis.port), env=ENV)
        try:
            self.assertTrue(wait_for(lambda: self.lines(gw, "refused the gateway's connection set-up at start-up"), scaled(10)),
                            gw.read_log())
            line = self.lines(gw, "refused the gateway's connection set-up at start-up")
            self.assertEqual(len(line), 1, gw.read_log())
            self.assertIn('refused AUTH as user "sg" (password from $SG_TEST_REDIS_PW): WRONGPASS', line[0])
            self.assertIn(" error [redis] ", line[0])
            self.assertEqual(health(gw), "set-up refused (bypassed)")
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 1)
            self.assertGreaterEqual(gw.metric("searchgate_cache_redis_errors_total", kind="auth"), 1)
            self.assertEqual(gw.get("/stats").json()["cache"]["redis"]["auth_failed"], True)
            for i in range(5):
                self.assertEqual(gw.retrieve(["refused %d" % i]).status, 200)
            self.assertEqual(gw.get("/health").status, 200)  # Redis is optional: the gateway is healthy
            # the operator fixes the ACL: the next attempt (back-off <= 2 s) succeeds
            redis.cmd("ACL", "SETUSER", "sg", "resetpass", ">" + PASSWORD)
            self.assertTrue(wait_for(lambda: health(gw) == "up", scaled(10)), gw.read_log())
            self.assertTrue(wait_for(lambda: self.lines(gw, "is answering again after")), gw.read_log())
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 0)
            self.assertEqual(gw.retrieve(["healed"]).status, 200)
            self.assertTrue(wait_for(lambda: redis.cmd("DBSIZE") >= 1))
        finally:
            log = gw.stop()
            redis.close()
        self.assertNotIn(PASSWORD, log)
        self.assertNotIn("the-servers-idea", log)

    def test_auth_failure_at_run_time(self):
        """The password is changed on the server and the gateway's connections are killed (what a
        credential rotation looks like): a state change in the log and the metric, 0 failed
        requests, and back up once the old password is accepted again."""
        redis = acl_server()
        self.addCleanup(redis.close)  # also when the gateway does not start
        gw = Gateway(config(redis.port), env=ENV)
        stop = []
        failures = []

        def load(i):
            n = 0
            while not stop:
                r = gw.retrieve(["rotation %d %d" % (i, n % 7)])
                if r.status != 200:
                    failures.append(r)
                n += 1

        try:
            self.assertTrue(wait_for(lambda: health(gw) == "up", scaled(10)), gw.read_log())
            threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.5)
            redis.cmd("ACL", "SETUSER", "sg", "resetpass", ">rotated-elsewhere")
            redis.cmd("CLIENT", "KILL", "USER", "sg")
            self.assertTrue(wait_for(lambda: self.lines(gw, "refuses the gateway's connection set-up"), scaled(15)),
                            gw.read_log())
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 1)
            self.assertEqual(health(gw), "set-up refused (bypassed)")
            redis.cmd("ACL", "SETUSER", "sg", "resetpass", ">" + PASSWORD)
            self.assertTrue(wait_for(lambda: health(gw) == "up", scaled(10)), gw.read_log())
            time.sleep(0.3)
            stop.append(1)
            for t in threads:
                t.join()
            self.assertEqual(failures, [])
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 0)
            line = self.lines(gw, "refuses the gateway's connection set-up")[0]
            self.assertIn("WRONGPASS", line)
        finally:
            stop.append(1)
            log = gw.stop()
            redis.close()
        self.assertNotIn(PASSWORD, log)

    def test_password_required_but_none_configured(self):
        redis = Server(["requirepass " + ADMIN_PW], admin=(None, ADMIN_PW))
        self.addCleanup(redis.close)  # also when the gateway does not start
        gw = Gateway(config(redis.port, username=None, password_env=None), env=ENV)
        try:
            self.assertTrue(wait_for(lambda: self.lines(gw, "requires a password (NOAUTH"), scaled(10)), gw.read_log())
            self.assertIn("cache.redis has no password_env", self.lines(gw, "requires a password")[0])
            self.assertEqual(health(gw), "set-up refused (bypassed)")
            self.assertEqual(gw.retrieve(["no password"]).status, 200)
        finally:
            gw.stop()
            redis.close()

    def test_database_out_of_range(self):
        redis = acl_server()
        self.addCleanup(redis.close)  # also when the gateway does not start
        gw = Gateway(config(redis.port, db=99), env=ENV)
        try:
            self.assertTrue(wait_for(lambda: self.lines(gw, "refused SELECT 99 (cache.redis.db): ERR DB index is out of range"),
                                     scaled(10)), gw.read_log())
            self.assertEqual(gw.metric("searchgate_cache_redis_auth_failed"), 1)
            self.assertEqual(gw.retrieve(["db 99"]).status, 200)
        finally:
            gw.stop()
            redis.close()


class StartUp(unittest.TestCase):
    def test_ready_means_redis_is_set_up(self):
        """A Redis slow to answer new connections (300 ms): the gateway reports that it listens
        only once its connections are set up, so a budget that fails closed admits the very first
        request instead of answering 503 budget_unavailable."""
        redis = acl_server()
        self.addCleanup(redis.close)  # also when the gateway does not start
        proxy = DelayProxy(redis.port, 0.3)
        self.addCleanup(proxy.close)
        cfg = config(proxy.port)
        cfg["cache"]["redis"]["timeout_ms"] = 2000
        cfg["backends"][1]["budget"]["fail"] = "closed"
        gw = Gateway(cfg, env=ENV)
        try:
            r = gw.retrieve(["first request"], path="/retrieve/paid", headers={"X-API-Key": "client-key-1"})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(gw.metric("searchgate_budget_unavailable_total"), 0)
        finally:
            gw.stop()
            proxy.close()
            redis.close()


class Check(unittest.TestCase):
    """`searchgate --check` connects: a refusal fails the check, an unreachable Redis only warns
    (a start would run and bypass it)."""

    def run_check(self, cfg, env=ENV):
        path = os.path.join(self.dir, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return searchgate_check(path, env)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sgcheck-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_check(self):
        redis = acl_server()
        self.addCleanup(redis.close)  # also when the gateway does not start
        try:
            rc, out, err = self.run_check(config(redis.port, db=2))
            self.assertEqual(rc, 0, out + err)
            self.assertIn("Redis 127.0.0.1:%d answers and accepts the gateway's connection set-up" % redis.port, out)

            env = dict(ENV, SG_TEST_REDIS_PW="not-the-password")
            rc, out, err = self.run_check(config(redis.port), env)
            self.assertEqual(rc, 1, out + err)
            self.assertIn('cache.redis: Redis 127.0.0.1:%d refused AUTH as user "sg" (WRONGPASS' % redis.port, err)
            self.assertIn("check cache.redis.username and $SG_TEST_REDIS_PW", err)
            self.assertNotIn("not-the-password", out + err)

            rc, out, err = self.run_check(config(redis.port, db=99))
            self.assertEqual(rc, 1, out + err)
            self.assertIn("refused SELECT 99 (ERR DB index is out of range)", err)

            rc, out, err = self.run_check(config(redis.port, username=None, password_env=None))
            self.assertEqual(rc, 1, out + err)
            self.assertIn("requires a password", err)

            sentinel_cfg = config(redis.port)
            sentinel_cfg["cache"]["redis"] = {"sentinels": ["127.0.0.1:%d" % redis.port], "master": "m"}
            rc, out, err = self.run_check(sentinel_cfg)  # a plain Redis is no sentinel: it refuses the SENTINEL command
            self.assertEqual(rc, 1, out + err)
            self.assertIn("sentinel 127.0.0.1:%d answered" % redis.port, err)
        finally:
            redis.close()
        for text in (out, err):
            self.assertNotIn(PASSWORD, text)
        # unreachable: a warning, and the check passes (a start would run, bypassing Redis)
        rc, out, err = self.run_check(config(redis.port))
        self.assertEqual(rc, 0, out + err)
        self.assertIn("warning: cache.redis: Redis 127.0.0.1:%d is not reachable" % redis.port, err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
