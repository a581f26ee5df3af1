"""The dashboard page (GET /dashboard) loaded in headless Chromium: its script must fetch /stats
and render numbers for the hit rate, queries/s and latency, and a row per backend."""
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import unittest
import zlib

import sgtest
from sgtest import Gateway, example_backend

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Dashboard(unittest.TestCase):
    def render(self, profile):
        """A fresh gateway, 40 requests (8 distinct queries: 32 cache hits), then the page in
        Chromium. Returns the DOM and the seconds from the last request to the page's dump."""
        gw = Gateway({"backends": [example_backend()]})
        try:
            for i in range(40):
                self.assertEqual(gw.retrieve(["paris %d" % (i % 8)], topk=1).status, 200)
            last = time.time()
            time.sleep(1.2)  # the per-second series only shows whole seconds
            page = gw.get("/dashboard")
            self.assertEqual(page.status, 200)
            self.assertTrue(page.headers["content-type"].startswith("text/html"))
            self.assertNotIn(b"https://", page.body)  # no external CDN
            out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                  "--user-data-dir=" + profile, "--virtual-time-budget=5000", "--dump-dom",
                                  "http://127.0.0.1:%d/dashboard" % gw.port],
                                 capture_output=True, text=True, timeout=120)
            self.assertIn('id="hit-rate"', out.stdout, out.stderr[-2000:])
            return out.stdout, time.time() - last
        finally:
            gw.stop()

    def test_renders_numbers(self):
        self.assertTrue(shutil.which(CHROMIUM), "chromium is required (Debian package chromium; .ci/deps.sh test installs it)")
        profile = tempfile.mkdtemp(prefix="sgchromium-")
        try:
            # the queries/s card covers the last 10 s: on a machine so loaded that Chromium took
            # longer than that to show the page, the requests fell out of it; render again then
            for _ in range(3):
                dom, seconds = self.render(profile)
                if seconds < 9:
                    break

            def card(name):
                m = re.search(r'id="%s">([^<]*)<' % name, dom)
                self.assertIsNotNone(m, name)
                return m.group(1)

            hit = card("hit-rate")
            self.assertRegex(hit, r"^\d+(\.\d)? %$")
            self.assertAlmostEqual(float(hit.split()[0]), 80.0, delta=0.1)
            self.assertRegex(card("qps"), r"^\d+\.\d$")
            self.assertLess(seconds, 9, "Chromium took %.1f s to show the page, three times" % seconds)
            self.assertGreater(float(card("qps")), 0)
            self.assertRegex(card("p50"), r"^\d+\.\d\d ms$")
            self.assertRegex(card("p99"), r"^\d+\.\d\d ms$")
            self.assertRegex(card("uptime"), r"^\d+ s$")
            self.assertRegex(dom, r"<tr><td>example</td><td>40</td><td>40</td><td>32</td><td>0</td><td>8</td>")
            self.assertIn('id="error"></span>', dom)  # no fetch error shown
        finally:
            shutil.rmtree(profile, ignore_errors=True)


def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG (what Chromium's --screenshot writes) into rows
    of (r, g, b) tuples, with the standard library only."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return rows


class DashboardOneSecond(unittest.TestCase):
    """One second of traffic: hit rate and latency have a value in that second only (null in the
    seconds around it), which a line cannot show; the charts draw it as a dot. Checked on the
    rendered page: the hit-rate colour (#2a7, used by nothing else on a page without budgets) and
    the p99 colour (#c52) must be on screen."""

    def test_single_second_is_drawn(self):
        self.assertTrue(shutil.which(CHROMIUM), "chromium is required")
        gw = Gateway({"backends": [example_backend()]})
        profile = tempfile.mkdtemp(prefix="sgchromium-")
        try:
            self.assertEqual(gw.retrieve(["paris"], topk=1).status, 200)  # one request: one second
            time.sleep(1.2)  # the per-second series only shows whole seconds
            shot = os.path.join(profile, "shot.png")

            def count(rows, rgb):
                return sum(1 for row in rows for px in row if all(abs(px[i] - rgb[i]) <= 24 for i in range(3)))

            # on a loaded machine the page may be captured before /stats answered: take up to three
            # captures (the charts never show the lone second on a page that cannot draw it)
            for _ in range(3):
                out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                      "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                      "--hide-scrollbars", "--user-data-dir=" + profile, "--virtual-time-budget=5000",
                                      "--window-size=1400,1200", "--screenshot=" + shot, "http://127.0.0.1:%d/dashboard" % gw.port],
                                     capture_output=True, text=True, timeout=120)
                self.assertTrue(os.path.exists(shot), out.stderr[-2000:])
                rows = png_pixels(shot)
                hit, p99 = count(rows, (0x22, 0xaa, 0x77)), count(rows, (0xcc, 0x55, 0x22))
                if hit > 20 and p99 > 20:
                    break
            self.assertGreater(hit, 20, "the hit-rate chart shows nothing")
            self.assertGreater(p99, 20, "the latency chart shows nothing")
        finally:
            gw.stop()
            shutil.rmtree(profile, ignore_errors=True)


class DashboardBudgets(unittest.TestCase):
    """Spend budgets (docs/configuration.md): one row per budget with used, limit, remaining and the
    share used, amber from 80%."""

    def test_budget_rows(self):
        self.assertTrue(shutil.which(CHROMIUM), "chromium is required")
        gw = Gateway({"backends": [example_backend(), dict(example_backend("paid"),
                                                           budget={"queries": 10, "period": "hour"})]})
        profile = tempfile.mkdtemp(prefix="sgchromium-")
        try:
            self.assertEqual(gw.retrieve(["b%d" % i for i in range(8)], topk=1, path="/retrieve/paid").status, 200)
            self.assertEqual(gw.retrieve(["b0", "b1"], topk=1, path="/retrieve/paid").status, 200)  # cache hits: free
            out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                  "--user-data-dir=" + profile, "--virtual-time-budget=5000", "--dump-dom",
                                  "http://127.0.0.1:%d/dashboard" % gw.port],
                                 capture_output=True, text=True, timeout=120)
            dom = out.stdout
            self.assertIn('<table id="budgets">', dom, out.stderr[-2000:])  # shown once there are budgets
            self.assertRegex(dom, r'<tr class="warn"><td>route paid</td><td>hour</td><td>8</td><td>10</td><td>2</td>'
                                  r'<td>80\.0 %</td><td class="bar"><span style="width: 7\.2em;"></span></td>'
                                  r'<td>(\d+ min)</td></tr>')
        finally:
            gw.stop()
            shutil.rmtree(profile, ignore_errors=True)

    def test_hidden_without_budgets(self):
        page = Gateway({"backends": [example_backend()]})
        try:
            self.assertEqual(page.get("/stats").json()["budgets"], {"clients": {}, "routes": {}})
        finally:
            page.stop()


class DashboardWithKeys(unittest.TestCase):
    """With keys in use /stats needs the admin key: the page asks for it, or takes it from the
    URL fragment (never sent to the server), and then renders as usual."""

    def dom(self, gw, profile, url_suffix):
        out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                              "--disable-background-networking", "--disable-component-update", "--disable-sync",
                              "--user-data-dir=" + profile, "--virtual-time-budget=5000", "--dump-dom",
                              "http://127.0.0.1:%d/dashboard%s" % (gw.port, url_suffix)],
                             capture_output=True, text=True, timeout=120)
        return out.stdout

    def test_admin_key(self):
        self.assertTrue(shutil.which(CHROMIUM), "chromium is required")
        gw = Gateway({"backends": [example_backend()],
                      "clients": {"require_key": True, "admin_key_env": "SG_TEST_DASH_ADMIN",
                                  "keys": [{"id": "job", "key_env": "SG_TEST_DASH_JOB"}]}},
                     env={"SG_TEST_DASH_ADMIN": "adm-key", "SG_TEST_DASH_JOB": "job-key"})
        profile = tempfile.mkdtemp(prefix="sgchromium-")
        try:
            for i in range(10):
                self.assertEqual(gw.retrieve(["paris %d" % (i % 2)], topk=1, headers={"X-API-Key": "job-key"}).status, 200)
            time.sleep(1.2)
            dom = self.dom(gw, profile, "")
            self.assertIn("/stats needs the admin key", dom)
            self.assertRegex(dom, r'<form id="keyform">')  # shown (no "hidden" attribute)
            self.assertNotIn("<td>example</td>", dom)
            dom = self.dom(gw, profile, "#key=adm-key")
            self.assertRegex(dom, r'<form id="keyform" hidden="">')
            self.assertIn('id="error"></span>', dom)
            self.assertRegex(dom, r"<tr><td>example</td><td>10</td><td>10</td><td>8</td><td>0</td><td>2</td>")
            self.assertNotIn("adm-key", dom)  # the fragment is gone from the address and the page
        finally:
            gw.stop()
            shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sgtest.main()
