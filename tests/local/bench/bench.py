#!/usr/bin/python3
"""Local dense backend vs the Search-R1 reference server, measured in one run on one machine.

Data (made once under --workdir, reused later): an e5-base-shaped BERT with random weights
(make_model.py), a 100k-row wiki-18 style corpus of random vocabulary words, a Flat IP FAISS index
of 100k random unit vectors (building it with the 110M-parameter encoder would take hours on 2
cores; both servers load the very same file, so the search work is the same), and a list of
distinct synthetic questions.

For each server: start-up time (process start to the first answered /retrieve; for searchgate
also the first start that builds the corpus offsets), then wrk load: one-query requests at
concurrency 1, 16 and 64, and 32-query requests at concurrency 4; queries/s and p50/p99 latency.
Then identical top-k: the same 256 queries (topk 10) sent to both, ids compared. The result
cache of the gateway is off for the benchmark so every query reaches the backend.

    /usr/bin/python3 bench.py --build BUILD_DIR [--workdir DIR] [--seconds 20] [--rows 100000]
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_VOCAB = os.path.join(HERE, "..", "..", "fixtures", "e5-tiny", "vocab.txt")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def words():
    out = []
    with open(FIXTURE_VOCAB, encoding="utf-8") as f:
        for w in f.read().split("\n"):
            if len(w) >= 3 and w.isascii() and w.isalpha():
                out.append(w)
    return out


def make_data(wd, rows, dim):
    os.makedirs(wd, exist_ok=True)
    model = os.path.join(wd, "e5-base-random")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_model.py"), model], check=True)
    vocab = words()
    corpus = os.path.join(wd, "wiki-18-%d.jsonl" % rows)
    if not os.path.exists(corpus):
        log("writing %s" % corpus)
        rnd = random.Random(7)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f:
            for i in range(rows):
                title = " ".join(rnd.choice(vocab).capitalize() for _ in range(rnd.randint(1, 3)))
                body = " ".join(rnd.choice(vocab) for _ in range(100))
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s %s" % (title, title, body)}) + "\n")
        os.rename(corpus + ".tmp", corpus)
    index = os.path.join(wd, "e5_Flat-%d.index" % rows)
    if not os.path.exists(index):
        log("writing %s" % index)
        import faiss
        import numpy as np
        rng = np.random.default_rng(3)
        ix = faiss.IndexFlatIP(dim)
        for s in range(0, rows, 10000):
            x = rng.standard_normal((min(10000, rows - s), dim), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            ix.add(x)
        faiss.write_index(ix, index + ".tmp")
        os.rename(index + ".tmp", index)
    queries = os.path.join(wd, "queries.txt")
    if not os.path.exists(queries):
        rnd = random.Random(11)
        forms = ["what is the %s of %s", "who %s the %s", "when did %s %s", "where is %s %s", "how many %s in %s",
                 "%s %s definition", "why does %s %s"]
        seen = set()
        with open(queries, "w") as f:
            while len(seen) < 60000:
                q = rnd.choice(forms) % (rnd.choice(vocab), " ".join(rnd.choice(vocab) for _ in range(rnd.randint(1, 3))))
                if q not in seen:
                    seen.add(q)
                    f.write(json.dumps(q) + "\n")
    return model, corpus, index, queries


def post(port, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d/retrieve" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    def __init__(self, name, argv, port, env=None, logpath=None):
        self.name, self.port = name, port
        self.logf = open(logpath, "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.t0 = time.time()
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        self.startup = None
        deadline = self.t0 + 900
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited during start-up; see %s" % (name, logpath))
            try:
                post(port, {"queries": ["warm up"], "topk": 3, "return_scores": True}, timeout=120)
                self.startup = time.time() - self.t0
                break
            except OSError:
                time.sleep(0.01)
        if self.startup is None:
            self.stop()
            raise RuntimeError("%s did not start" % name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def parse_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    v, u = float(m.group(1)), m.group(2)
    return v * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[u]


def wrk(port, conns, per, seconds, queries, offset):
    env = dict(os.environ, SG_BENCH_QUERIES=queries, SG_BENCH_PER_REQUEST=str(per), SG_BENCH_OFFSET=str(offset))
    out = subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "600s", "--latency", "-s",
                          os.path.join(HERE, "post.lua"), "http://127.0.0.1:%d/retrieve" % port],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True).stdout.decode()
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    dur = re.search(r"requests in ([\d.]+\w+),", out).group(1)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"requests": reqs, "duration": dur, "qps": rps * per, "p50_ms": parse_ms(lat["50"]) if "50" in lat else None,
            "p99_ms": parse_ms(lat["99"]) if "99" in lat else None, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(1) if errors else ""}


POINTS = [("1 query/request, c=1", 1, 1), ("1 query/request, c=16", 16, 1), ("1 query/request, c=64", 64, 1),
          ("32 queries/request, c=4", 4, 32)]


def metrics(port):
    """searchgate's local backend counters (None for the reference, which has no /metrics)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for name in ("batches_total", "batch_queries_total", "encode_seconds_total", "search_seconds_total"):
        m = re.search(r"^searchgate_backend_local_%s\{[^}]*\} (\S+)$" % name, text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def run_points(srv, seconds, queries, offset0):
    res = {}
    for i, (label, conns, per) in enumerate(POINTS):
        before = metrics(srv.port)
        r = wrk(srv.port, conns, per, seconds * (2 if per > 1 else 1), queries, offset0 + i * 10000)
        after = metrics(srv.port)
        extra = ""
        if before is not None and after is not None:
            d = {k: after[k] - before[k] for k in after}
            if d["batches_total"] > 0:
                r["mean_batch"] = d["batch_queries_total"] / d["batches_total"]
                r["encode_ms_per_query"] = 1000 * d["encode_seconds_total"] / d["batch_queries_total"]
                r["search_ms_per_query"] = 1000 * d["search_seconds_total"] / d["batch_queries_total"]
                extra = "; mean batch %.1f, encode %.1f + FAISS %.1f ms/query" % (
                    r["mean_batch"], r["encode_ms_per_query"], r["search_ms_per_query"])
        log("  %-26s %8.1f q/s  p50 %8.1f ms  p99 %8.1f ms  (%d requests, non-2xx %d%s%s)" % (
            label, r["qps"], r["p50_ms"] or -1, r["p99_ms"] or -1, r["requests"], r["non2xx"],
            ", socket errors " + r["socket_errors"] if r["socket_errors"] else "", extra))
        res[label] = r
    return res


def topk_ids(port, qs, k):
    ids, scores = [], []
    for s in range(0, len(qs), 16):
        for lst in post(port, {"queries": qs[s:s + 16], "topk": k, "return_scores": True})["result"]:
            ids.append([it["document"]["id"] for it in lst])
            scores.append([it["score"] for it in lst])
    return ids, scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--workdir", default="/tmp/sglocal-bench")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--skip-ref", action="store_true")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    model, corpus, index, queries = make_data(a.workdir, a.rows, 768)
    with open(queries) as f:
        qlist = [json.loads(line) for line in f]
    results = {"machine": {"nproc": os.cpu_count(), "loadavg_before": os.getloadavg()[0]}}
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        results["machine"]["cpu"] = m.group(1) if m else "?"

    # ---- searchgate ----
    gw_port = free_port()
    cfg = {"listen": {"host": "127.0.0.1", "port": gw_port}, "threads": 1, "log_level": "info",
           "plugin_dir": os.path.join(build, "plugins"),
           "backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False,
                         "config": {"model": model, "index": index, "corpus": corpus}}]}
    cfg_path = os.path.join(a.workdir, "searchgate-bench.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    side = corpus + ".sgrows"
    if os.path.exists(side):
        os.unlink(side)
    argv = [os.path.join(build, "searchgate"), "--config", cfg_path]
    log("searchgate: first start (builds the corpus offsets)")
    g = Server("searchgate", argv, gw_port, logpath=os.path.join(a.workdir, "searchgate-cold.log"))
    cold = g.startup
    g.stop()
    g = Server("searchgate", argv, gw_port, logpath=os.path.join(a.workdir, "searchgate.log"))
    log("searchgate: start-up %.2f s (first start %.2f s)" % (g.startup, cold))
    results["searchgate"] = {"startup_s": g.startup, "startup_first_s": cold, "points": run_points(g, a.seconds, queries, 0)}
    sample = qlist[50000:50256]
    gw_ids, gw_scores = topk_ids(gw_port, sample, 10)
    g.stop()

    if a.skip_ref:
        print(json.dumps(results, indent=2))
        return
    # ---- the Search-R1 style reference ----
    ref_port = free_port()
    argv = ["/usr/bin/python3", os.path.join(HERE, "ref_server.py"), "--model", model, "--index", index, "--corpus", corpus,
            "--port", str(ref_port)]
    log("reference: starting")
    r = Server("reference", argv, ref_port, logpath=os.path.join(a.workdir, "reference.log"))
    log("reference: start-up %.2f s" % r.startup)
    results["reference"] = {"startup_s": r.startup, "points": run_points(r, a.seconds, queries, 0)}
    ref_ids, ref_scores = topk_ids(ref_port, sample, 10)
    r.stop()

    same = sum(1 for x, y in zip(gw_ids, ref_ids) if x == y)
    same_set = sum(1 for x, y in zip(gw_ids, ref_ids) if set(x) == set(y))
    dmax = max(abs(s1 - s2) for a1, b1 in zip(gw_scores, ref_scores) for s1, s2 in zip(a1, b1))
    results["topk_check"] = {"queries": len(sample), "k": 10, "identical_lists": same, "identical_sets": same_set,
                             "max_abs_score_diff": dmax}

    # ---- report ----
    print("\nlocal dense backend vs Search-R1 reference (same machine, same run; e5-base-shaped random model, "
          "%d-row corpus, Flat IP index)" % a.rows)
    print("%-26s %28s %28s %8s" % ("", "searchgate q/s (p50/p99 ms)", "reference q/s (p50/p99 ms)", "q/s ratio"))

    def ms(v):
        return "%6.0f" % v if v is not None else "     ?"

    for label, _, _ in POINTS:
        x, y = results["searchgate"]["points"][label], results["reference"]["points"][label]
        ratio = "%7.1fx" % (x["qps"] / y["qps"]) if y["qps"] > 0 else "      -"
        print("%-26s %12.1f (%s/%s) %12.1f (%s/%s) %s" % (label, x["qps"], ms(x["p50_ms"]), ms(x["p99_ms"]), y["qps"],
                                                          ms(y["p50_ms"]), ms(y["p99_ms"]), ratio))
    print("start-up: searchgate %.2f s (first start, building offsets: %.2f s), reference %.2f s: %.1fx faster" % (
        results["searchgate"]["startup_s"], cold, r.startup, r.startup / results["searchgate"]["startup_s"]))
    print("top-10 ids identical for %d of %d queries (same sets: %d); max |score difference| %.2g" % (
        same, len(sample), same_set, dmax))
    print("machine: %s, %d CPUs, load average before the run %.2f" % (results["machine"]["cpu"], results["machine"]["nproc"],
                                                                        results["machine"]["loadavg_before"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
