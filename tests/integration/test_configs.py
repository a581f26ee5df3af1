"""configs/shared-gateway.json, as shipped (only the listen port, the Redis port and the demo index
path are pointed at this test's own): several jobs with different quotas on the BM25 demo. And
every shipped config (configs/*.json, deploy/searchgate.json): each route's deadline is under the
shortest per-attempt timeout of the clients (docs/clients.md "Timeouts")."""
import glob
import json
import os
import re
import subprocess
import sys
import time
import unittest

import sgtest
from sgtest import Gateway, Redis, parallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
import client_models  # noqa: E402


def shortest_client_timeout_ms():
    """The shortest time any client model (tests/clients/client_models.py) waits for one answer
    before it gives the attempt up: requests' read timeout, aiohttp's total."""
    out = []
    for c in client_models.CLIENTS.values():
        for call in c.calls.values():
            t = call.transport.timeout
            t = t.get("total") if isinstance(t, dict) else t
            if t is not None:
                out.append((int(t * 1000), c.name))
    return min(out)


def documented_default_timeout_ms():
    """A route's timeout_ms when the config sets none (docs/configuration.md and docs/fusion.md:
    the lint_config_docs test holds the docs to the code)."""
    out = set()
    for page in ("configuration.md", "fusion.md"):
        with open(os.path.join(sgtest.SOURCE_DIR, "docs", page), encoding="utf-8") as f:
            row = r"^\| `timeout_ms` \| integer \| (\d+)[^|]*\|[^|]*\| (?:deadline of a request|the request's deadline)"
            out.update(int(v) for v in re.findall(row, f.read(), re.M))
    assert len(out) == 1, out
    return out.pop()


class ShippedDeadlines(unittest.TestCase):
    def test_every_route_answers_before_the_clients_give_up(self):
        limit, client = shortest_client_timeout_ms()
        self.assertEqual(limit, 30000, client)  # verl's SearchTool and SkyRL: 30 s per attempt
        default = documented_default_timeout_ms()
        files = sorted(glob.glob(os.path.join(sgtest.SOURCE_DIR, "configs", "*.json"))) + \
            [os.path.join(sgtest.SOURCE_DIR, "deploy", "searchgate.json")]
        self.assertGreaterEqual(len(files), 9)
        late = []
        for path in files:
            with open(path) as f:
                cfg = json.load(f)
            for b in cfg["backends"]:
                deadline = b.get("timeout_ms", default)
                # the 504 must reach the client before its own timeout, with time for the answer to travel
                if deadline >= limit - 1000:
                    late.append("%s: route %s: timeout_ms %d%s" % (os.path.relpath(path, sgtest.SOURCE_DIR), b["name"],
                                                                   deadline, "" if "timeout_ms" in b else " (the default)"))
        self.assertEqual(late, [], "routes whose deadline is not under %s's %d ms timeout" % (client, limit))


class SharedGateway(unittest.TestCase):
    def test_shared_gateway_config(self):
        prep = subprocess.run([sgtest.binary("prepare-default")], capture_output=True, text=True, timeout=sgtest.scaled(300))
        self.assertEqual(prep.returncode, 0, prep.stdout + prep.stderr)
        with open(os.path.join(sgtest.SOURCE_DIR, "configs", "shared-gateway.json")) as f:
            cfg = json.load(f)
        redis = Redis()
        cfg["listen"] = {"host": "127.0.0.1", "port": 0}
        cfg["cache"]["redis"]["port"] = redis.port
        cfg["backends"][0]["config"]["index"] = os.path.join(sgtest.BUILD_DIR, "demo", "bm25")
        env = {"SG_KEY_GRPO_MAIN": "k-grpo", "SG_KEY_PPO_ABLATION": "k-ppo", "SG_KEY_EVAL": "k-eval"}
        # --port 0: --check test-binds the address, and port 8000 may be taken on a shared machine
        check = subprocess.run([sgtest.binary("searchgate"), "--check", "--port", "0", "--config",
                                os.path.join(sgtest.SOURCE_DIR, "configs", "shared-gateway.json")],
                               capture_output=True, text=True, env=dict(os.environ, **env))
        # as shipped the config names ../build/demo (make run's build dir): valid when that exists, else a clear error
        if os.path.exists(os.path.join(sgtest.SOURCE_DIR, "build", "demo", "bm25", "bm25.meta")):
            self.assertEqual(check.returncode, 0, check.stderr)
            self.assertIn("shared-gateway.json is valid", check.stdout)
        else:
            self.assertEqual(check.returncode, 1)
            self.assertIn("build/demo/bm25", check.stderr)
        gw = Gateway(cfg, env=env)
        try:
            deadline = time.time() + sgtest.scaled(10)
            while time.time() < deadline and gw.get("/health").json()["cache"]["redis"] != "up":
                time.sleep(0.05)
            r = gw.retrieve(["what is a volcano"], headers={"X-API-Key": "k-grpo"})
            self.assertEqual(r.status, 200)
            self.assertIn("olcano", r.json()["result"][0][0]["document"]["contents"])
            self.assertEqual(gw.retrieve(["lava"], headers={"X-API-Key": "wrong"}).status, 401)
            # eval-nightly: 100 q/s, burst 200, queue mode -> a 250-query batch passes on a full
            # bucket and the next request waits for its turn instead of being refused (no client of
            # the family survives a 429: verl stops at it, slime returns nothing, docs/protocols.md)
            self.assertEqual(gw.retrieve(["eval %d" % i for i in range(250)], headers={"X-API-Key": "k-eval"}).status, 200)
            t0 = time.time()
            r = gw.retrieve(["eval again"], headers={"X-API-Key": "k-eval"})
            self.assertEqual(r.status, 200, r)
            self.assertGreater(time.time() - t0, 0.3)  # (250 - 199) / 100 s after the batch, less the time since
            self.assertEqual(gw.metric("searchgate_client_queued_total", client="eval-nightly"), 1)
            # no shipped client answers 429: every keyed client queues
            self.assertEqual({c.get("mode", "queue") for c in cfg["clients"]["keys"]} | {cfg["clients"]["default"]["mode"]},
                             {"queue"})
            # grpo-main's limit lives in Redis (shared by replicas)
            self.assertTrue(redis.command("EXISTS", "sg:rl:grpo-main"))
            # anonymous callers: the default quota (queue mode) still answers a burst
            self.assertEqual(parallel(lambda i: gw.retrieve(["anon %d" % i]).status, [(i,) for i in range(20)]), [200] * 20)
            self.assertEqual(gw.metric("searchgate_client_requests_total", client="ppo-ablation"), 0)
            self.assertGreaterEqual(gw.metric("searchgate_client_requests_total", client="ip:127.0.0.1"), 20)
        finally:
            gw.stop()
            redis.close()


if __name__ == "__main__":
    sgtest.main()
