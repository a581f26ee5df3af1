"""Shared helpers of the remote-backend tests: the fakes on sys.path, gateway configs for the
serper/qdrant/upstream plugins, and small polling utilities. Standard library only."""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fakes"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import sgtest  # noqa: E402
from sgtest import Gateway, scaled, free_port, parallel, request, DOCS  # noqa: E402,F401

SANITIZED = sgtest.SANITIZED


def backend(name, plugin, config, **route):
    """A gateway backend entry; the result cache is off unless the test turns it on."""
    entry = {"name": name, "plugin": plugin, "config": config, "cache": False}
    entry.update(route)
    return entry


def gateway(*backends, env=None, threads=2, **top):
    cfg = {"backends": list(backends)}
    cfg.update(top)
    return Gateway(cfg, threads=threads, env=env)


def wait_for(pred, timeout=5.0, step=0.02):
    end = time.time() + scaled(timeout)
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def closed_port():
    """A loopback port nothing listens on (connection refused)."""
    return free_port()


def docs_of(resp):
    """The per-query lists of DOCs whatever the shape."""
    out = []
    for lst in resp.json()["result"]:
        out.append([it["document"] if "document" in it else it for it in lst])
    return out


def stop_after_pending(gw):
    """Stops a gateway that still has requests waiting on a slow upstream: after its shutdown grace
    the gateway answers them 503, cancels the backend work and must exit cleanly (status 0, no
    sanitizer report)."""
    return gw.stop()


class FakeTestCase(unittest.TestCase):
    """A test case that starts fakes of `fake_class` with self.fake(...) and a gateway in self.gw,
    and stops them all afterwards."""

    fake_class = None

    def setUp(self):
        self.fakes = []
        self.gw = None

    def fake(self, **kw):
        f = self.fake_class(**kw)
        self.fakes.append(f)
        return f

    def tearDown(self):
        if self.gw is not None:
            self.gw.stop()
        for f in self.fakes:
            f.stop()
