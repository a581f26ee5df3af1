#!/usr/bin/python3
"""Cost curves of the local backend: how start-up, memory, throughput and recall grow with the
corpus, for a Flat index and the indexes `searchgate-index convert` makes of it. Not a test.

For each N (--rows, repeatable) it makes, once, under --data:
  * a wiki-18 shaped corpus and its 768-d Flat IP index (local_bench_gen: clustered vectors, see
    gen_scale.c), and
  * the converted indexes of --kinds: ivfsq8 = "IVF<nl>,SQ8", ivfpq = "IVF<nl>,PQ<m>" re-ranked
    from the Flat file, hnsw = "HNSW32,SQ8" (nl = --nlist, by default 1024 up to 300k rows, else 4096), each with
    convert's recall report (1000 held-out rows; recall@3 in the table comes from it).
Then, for each index, searchgate with the e5-base-shaped random model (make_model.py):
  * start-up: process start -> "listening" and -> first answer, cold (the index, corpus and
    sidecar evicted from the page cache with posix_fadvise, only those files) and warm; the very
    first start of each N also builds the corpus sidecar (.sgrows);
  * memory: RssAnon / RssFile of the process when ready and after the load, and its peak (VmHWM);
  * load (wrk, every query distinct, result cache off): one query per request at c=64, and
    32-query requests at c=4; queries/s, p50/p99, and the backend's encode / FAISS ms per query.
--ref adds the Search-R1 style reference server (ref_server.py) on the Flat index of each N.
Results go to --out (JSON), and a table to stdout.

    /usr/bin/python3 scale.py --build BUILD --data DATA_DIR \\
        --rows 100000 --rows 1000000 --rows 4000000 [--kinds flat,ivfsq8,ivfpq,hnsw] [--ref 1000000] \\
        [--seconds 30] --out scale.json
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402

log = bench.log


NLIST = 0  # --nlist: 0 = by N (below)


def nlist_for(n):
    if NLIST:
        return NLIST
    return 1024 if n <= 300000 else 4096


def factory(kind, n, pq_m):
    nl = nlist_for(n)
    return {"ivfsq8": "IVF%d,SQ8" % nl, "ivfpq": "IVF%d,PQ%d" % (nl, pq_m), "hnsw": "HNSW32,SQ8"}[kind]


def run_timed(argv, out_path):
    """Runs argv under /usr/bin/time -v; returns (wall s, peak RSS bytes, stdout text)."""
    t0 = time.time()
    with open(out_path, "w") as out, open(out_path + ".err", "w") as err:
        rc = subprocess.run(["/usr/bin/time", "-v"] + argv, stdout=out, stderr=err).returncode
    wall = time.time() - t0
    with open(out_path + ".err") as f:
        e = f.read()
    if rc != 0:
        raise RuntimeError("%s failed (%d): %s" % (argv[0], rc, e[-2000:]))
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", e)
    with open(out_path) as f:
        return wall, int(m.group(1)) * 1024 if m else 0, f.read()


def ensure_data(build, data, n):
    corpus, flat = os.path.join(data, "wiki-%d.jsonl" % n), os.path.join(data, "flat-%d.index" % n)
    stats_path = os.path.join(data, "gen-%d.json" % n)
    if not (os.path.exists(corpus) and os.path.exists(flat) and os.path.exists(stats_path)):
        log("generating %d rows" % n)
        wall, peak, out = run_timed([os.path.join(build, "tests/bench/local/local_bench_gen"), "--rows", str(n), "--out-dir", data],
                                    os.path.join(data, "gen-%d.out" % n))
        stats = json.loads(out.strip().splitlines()[-1])
        stats["peak_rss"] = peak
        with open(stats_path, "w") as f:
            json.dump(stats, f)
    with open(stats_path) as f:
        return corpus, flat, json.load(f)


def ensure_index(build, data, n, kind, flat, pq_m, rerank, n_eval=1000, train_rows=0, blas_threads=0):
    if kind == "flat":
        return flat, {"size": os.path.getsize(flat)}
    f = factory(kind, n, pq_m)
    out = os.path.join(data, "idx", "%d-%s.index" % (n, f.replace(",", "_")))
    info_path = out + ".bench.json"
    if not os.path.exists(info_path):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        argv = [os.path.join(build, "searchgate-index-convert"), flat, out, "--factory", f, "--force", "--eval", str(n_eval)]
        if kind == "ivfpq" and rerank > 0:
            argv += ["--rerank", str(rerank)]
        if kind == "hnsw":
            argv += ["--ef-search", "16,32,64,128,256"]
        if train_rows > 0:
            argv += ["--train-rows", str(train_rows)]
        if blas_threads > 0:
            argv += ["--blas-threads", str(blas_threads)]
        log("converting %d rows to %s" % (n, f))
        wall, peak, report = run_timed(argv, out + ".report")
        with open(out + ".sgmeta") as fm:
            meta = json.load(fm)
        info = {"factory": f, "convert_wall_s": wall, "convert_peak_rss": peak, "size": os.path.getsize(out), "meta": meta,
                "report": report, "convert_build": build, "convert_argv": argv[1:]}
        with open(info_path, "w") as fi:
            json.dump(info, fi)
    with open(info_path) as fi:
        return out, json.load(fi)


def proc_mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            for k in ("RssAnon", "RssFile", "VmHWM", "VmRSS"):
                if line.startswith(k + ":"):
                    out[k] = int(line.split()[1]) * 1024
    return out


def evict(paths):
    """Drops these files (only) from the page cache."""
    for p in paths:
        if os.path.exists(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class Gateway:
    def __init__(self, build, cfg_path, log_path):
        self.log_path = log_path
        self.logf = open(log_path, "wb")
        self.t0 = time.time()
        self.proc = subprocess.Popen([os.path.join(build, "searchgate"), "--config", cfg_path], stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        self.port = None
        self.listening_s = None
        deadline = self.t0 + 1800
        while time.time() < deadline:
            text = self.text()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                self.listening_s = time.time() - self.t0
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError("searchgate exited during start-up:\n" + text[-3000:])
            time.sleep(0.005)
        if self.port is None:
            self.stop()
            raise RuntimeError("searchgate did not start")
        self.mem_ready = proc_mem(self.proc.pid)
        bench.post(self.port, {"queries": ["warm up"], "topk": 3, "return_scores": True}, timeout=600)
        self.first_answer_s = time.time() - self.t0

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def log_figures(text):
    """The backend's own start-up figures from its log."""
    out = {}
    for key, pat in (("index_read_ms", r"read in (\d+) ms"), ("corpus_ms", r"corpus opened in (\d+) ms"),
                     ("ready_ms", r"ready in (\d+) ms")):
        m = re.search(pat, text)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"offsets (reused from|built into|built \(in memory\))", text)
    if m:
        out["sidecar"] = m.group(1)
    m = re.search(r"expected recall against exact search: (.*?) \(", text)
    if m:
        out["expected"] = m.group(1)
    return out


POINTS = [("1 query/request, c=64", 64, 1, 1), ("32 queries/request, c=4", 4, 32, 2)]


def load(port, seconds, queries, offset, with_metrics=True):
    res = {}
    for i, (label, conns, per, mult) in enumerate(POINTS):
        before = bench.metrics(port) if with_metrics else None
        r = bench.wrk(port, conns, per, seconds * mult, queries, offset + i * 20000)
        after = bench.metrics(port) if with_metrics else None
        if before is not None and after is not None:
            d = {k: after[k] - before[k] for k in after}
            # the backend's own count: with requests of tens of seconds, wrk's count of the
            # requests completed inside its window says little
            r["backend_queries"] = d["batch_queries_total"]
            r["window_s"] = seconds * mult
            if d["batches_total"] > 0:
                r["mean_batch"] = d["batch_queries_total"] / d["batches_total"]
                r["encode_ms_per_query"] = 1000 * d["encode_seconds_total"] / d["batch_queries_total"]
                r["search_ms_per_query"] = 1000 * d["search_seconds_total"] / d["batch_queries_total"]
        log("    %-26s %7.1f q/s  p50 %7.0f ms  p99 %7.0f ms  non-2xx %d%s" % (
            label, r["qps"], r["p50_ms"] or -1, r["p99_ms"] or -1, r["non2xx"],
            "  (batch %.1f, encode %.1f + FAISS %.1f ms/query)" % (r["mean_batch"], r["encode_ms_per_query"],
                                                                   r["search_ms_per_query"]) if "mean_batch" in r else ""))
        res[label] = r
    return res


def measure_kind(a, n, kind, model, corpus, index, queries, first_of_n, offset):
    wd = os.path.join(a.data, "run")
    os.makedirs(wd, exist_ok=True)
    cfg_path = os.path.join(wd, "gw-%d-%s.json" % (n, kind))
    cfg = {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 1, "log_level": "info",
           "plugin_dir": os.path.join(a.build, "plugins"),
           "backends": [{"name": "local", "plugin": "local", "topk": 3, "cache": False, "timeout_ms": 600000,
                         "config": {"model": model, "index": index, "corpus": corpus}}]}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    side = corpus + ".sgrows"
    files = [index, corpus, side]
    if kind == "ivfpq":
        files.append(os.path.join(a.data, "flat-%d.index" % n))
    out = {}
    if first_of_n and "first" in a.starts:
        if os.path.exists(side):
            os.unlink(side)
        evict(files)
        g = Gateway(a.build, cfg_path, os.path.join(wd, "gw-%d-%s-first.log" % (n, kind)))
        out["first_start"] = {"listening_s": g.listening_s, "first_answer_s": g.first_answer_s, "mem": g.mem_ready,
                              "log": log_figures(g.text())}
        g.stop()
        log("  %s first start (builds the sidecar): listening %.2f s, first answer %.2f s" % (kind, g.listening_s,
                                                                                            g.first_answer_s))
    if "cold" in a.starts:
        evict(files)
        g = Gateway(a.build, cfg_path, os.path.join(wd, "gw-%d-%s-cold.log" % (n, kind)))
        out["cold_start"] = {"listening_s": g.listening_s, "first_answer_s": g.first_answer_s, "mem": g.mem_ready,
                             "log": log_figures(g.text())}
        g.stop()
    g = Gateway(a.build, cfg_path, os.path.join(wd, "gw-%d-%s.log" % (n, kind)))
    out["warm_start"] = {"listening_s": g.listening_s, "first_answer_s": g.first_answer_s, "mem": g.mem_ready,
                         "log": log_figures(g.text())}
    cold = out.get("cold_start", {})
    log("  %s start: cold %.2f s / warm %.2f s to listening (first answer %.2f / %.2f s); ready: anon %.0f MiB, file %.0f MiB" % (
        kind, cold.get("listening_s", -1), g.listening_s, cold.get("first_answer_s", -1), g.first_answer_s,
        g.mem_ready.get("RssAnon", 0) / 2**20, g.mem_ready.get("RssFile", 0) / 2**20))
    try:
        out["points"] = load(g.port, a.seconds, queries, offset)
        out["mem_after_load"] = proc_mem(g.proc.pid)
    finally:
        g.stop()
    m = out["mem_after_load"]
    log("  %s after load: anon %.0f MiB, file %.0f MiB, peak %.0f MiB" % (kind, m["RssAnon"] / 2**20, m["RssFile"] / 2**20,
                                                                         m["VmHWM"] / 2**20))
    return out


def measure_ref(a, n, model, corpus, flat, queries, offset):
    port = bench.free_port()
    argv = ["/usr/bin/python3", os.path.join(HERE, "ref_server.py"), "--model", model, "--index", flat, "--corpus", corpus,
            "--port", str(port)]
    wd = os.path.join(a.data, "run")
    evict([flat, corpus])
    log("  reference server: starting (cold)")
    r = bench.Server("reference", argv, port, logpath=os.path.join(wd, "ref-%d.log" % n))
    out = {"cold_start": {"first_answer_s": r.startup, "mem": proc_mem(r.proc.pid)}}
    r.stop()
    r = bench.Server("reference", argv, port, logpath=os.path.join(wd, "ref-%d-warm.log" % n))
    out["warm_start"] = {"first_answer_s": r.startup, "mem": proc_mem(r.proc.pid)}
    log("  reference start: cold %.2f s, warm %.2f s; anon %.0f MiB" % (out["cold_start"]["first_answer_s"], r.startup,
                                                                         out["warm_start"]["mem"]["RssAnon"] / 2**20))
    try:
        out["points"] = load(port, a.seconds, queries, offset, with_metrics=False)
        out["mem_after_load"] = proc_mem(r.proc.pid)
    finally:
        r.stop()
    return out


def fit(points):
    """Least-squares y = a + b*n over [(n, y)]; returns (a, b)."""
    k = len(points)
    sx = sum(n for n, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(n * n for n, _ in points)
    sxy = sum(n * y for n, y in points)
    den = k * sxx - sx * sx
    b = (k * sxy - sx * sy) / den if den else 0.0
    return (sy - b * sx) / k, b


KIND_NAMES = {"flat": "Flat", "ivfsq8": "IVF-SQ8", "ivfpq": "IVF-PQ + re-rank", "hnsw": "HNSW32,SQ8", "reference": "reference (Flat)"}


def kind_name(kind):
    base, _, tag = kind.partition("-")
    return KIND_NAMES[base] + (" (%s)" % tag if tag else "")


def expected_recall3(entry):
    """recall@3 convert measured at the setting the server used (its recommendation)."""
    meta = entry.get("index", {}).get("meta")
    if not meta:
        return None
    rec = meta.get("recommended")
    if not rec:
        return None
    return rec.get("recall@3")


def report(results, project=21000000):
    """Markdown tables of the measured figures and of the linear fits projected to `project` rows."""
    gib = 2.0**30
    ns = sorted(int(k) for k in results if k.isdigit())
    lines = ["| rows | index | setting | recall@3 | index file | start cold / warm (s) | first start, builds .sgrows (s) | "
             "RSS private / mapped after load (GiB) | peak (GiB) | q/s 1 query, c=64 | q/s 32-query requests, c=4 | "
             "encode + FAISS ms/query (c=64) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    series = {}
    for n in ns:
        r = results[str(n)]
        for kind in [k for k in r if k.split("-")[0] in KIND_NAMES]:
            e = r.get(kind)
            if not e or "serve" not in e and kind != "reference":
                continue
            sv = e if kind == "reference" else e["serve"]
            meta = e.get("index", {}).get("meta") if kind != "reference" else None
            setting = "exact"
            if meta and meta.get("recommended"):
                rec = meta["recommended"]
                setting = ", ".join("%s %s" % (k, v) for k, v in rec.items() if k in ("nprobe", "efSearch"))
                if rec.get("rerank"):
                    setting += ", rerank x%d" % rec["rerank"]
            r3 = expected_recall3(e) if kind != "reference" else None
            size = e.get("index", {}).get("size") if kind != "reference" else None
            cold = sv.get("cold_start", {}).get("listening_s", sv.get("cold_start", {}).get("first_answer_s"))
            warm = sv.get("warm_start", {}).get("listening_s", sv.get("warm_start", {}).get("first_answer_s"))
            first = sv.get("first_start", {}).get("listening_s")
            m = sv.get("mem_after_load", {})
            pts = sv.get("points", {})
            p1, p32 = pts.get(POINTS[0][0], {}), pts.get(POINTS[1][0], {})
            ms = ("%.0f + %.1f" % (p1["encode_ms_per_query"], p1["search_ms_per_query"])) if "encode_ms_per_query" in p1 else "-"
            lines.append("| %s | %s | %s | %s | %s | %s / %s | %s | %.2f / %.2f | %.2f | %.1f | %.1f | %s |" % (
                "{:,}".format(n), kind_name(kind), setting, "%.3f" % r3 if r3 is not None else ("1 (exact)" if kind.split("-")[0] in ("flat", "reference") else "-"),
                "%.2f GiB" % (size / gib) if size else "-", "%.2f" % cold if cold is not None else "-",
                "%.2f" % warm if warm is not None else "-", "%.2f" % first if first else "-",
                m.get("RssAnon", 0) / gib, m.get("RssFile", 0) / gib, m.get("VmHWM", 0) / gib, p1.get("qps", 0), p32.get("qps", 0), ms))
            sr = series.setdefault(kind, {})
            if size:
                sr.setdefault("index file (GiB)", []).append((n, size / gib))
            sr.setdefault("RSS private + mapped after load (GiB)", []).append((n, (m.get("RssAnon", 0) + m.get("RssFile", 0)) / gib))
            sr.setdefault("peak RSS (GiB)", []).append((n, m.get("VmHWM", 0) / gib))
            if cold is not None:
                sr.setdefault("cold start (s)", []).append((n, cold))
            if warm is not None:
                sr.setdefault("warm start (s)", []).append((n, warm))
            if p1.get("qps"):
                sr.setdefault("1/q/s at c=64 (ms per query)", []).append((n, 1000.0 / p1["qps"]))
            if p32.get("qps"):
                sr.setdefault("1/q/s, 32-query requests (ms per query)", []).append((n, 1000.0 / p32["qps"]))
            if "search_ms_per_query" in p1:
                sr.setdefault("FAISS ms/query (c=64)", []).append((n, p1["search_ms_per_query"]))
    lines.append("")
    lines.append("| index | quantity | fit y = a + b·N (N in millions) | projected at %s rows |" % "{:,}".format(project))
    lines.append("|---|---|---|---|")
    for kind, sr in series.items():
        for q, pts in sr.items():
            if len(pts) < 2:
                continue
            a, b = fit(pts)
            y = a + b * project
            if q.startswith("1/q/s"):
                proj = "%.1f ms → %.1f q/s" % (y, 1000.0 / y if y > 0 else float("nan"))
            else:
                proj = "%.2f" % y
            lines.append("| %s | %s | %.3g + %.3g·N | %s |" % (kind_name(kind), q, a, b * 1e6, proj))
    lines.append("")
    lines += against_flat(results)
    return "\n".join(lines)


def against_flat(results):
    """Each index against the Flat index of the same N, measured in the same run of this script,
    and issue 12's goal: at most 1/4 of Flat's memory, recall@3 >= 0.95, >= 3x Flat's q/s on
    32-query requests, a start under 5 s with the sidecar present (the warm start)."""
    lines = ["| rows | index | file / Flat's | resident after load / Flat's (private + mapped) | recall@3 | "
             "q/s 32-query requests / Flat's | q/s 1 query c=64 / Flat's | FAISS ms/query / Flat's (32-query / c=64) | "
             "start, sidecar present (s) | goal |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(int(k) for k in results if k.isdigit()):
        r = results[str(n)]
        flat = r.get("flat", {})
        if "serve" not in flat:
            continue
        fs = flat["serve"]
        if not all(fs.get("points", {}).get(label, {}).get("qps") for label, _, _, _ in POINTS):
            continue
        fmem = fs["mem_after_load"]["RssAnon"] + fs["mem_after_load"]["RssFile"]
        fp = fs["points"]
        for kind in [k for k in r if k.split("-")[0] in KIND_NAMES and k.split("-")[0] != "flat"]:
            e = r[kind]
            if "serve" not in e:
                continue
            sv = e["serve"]
            if "mem_after_load" not in sv or "warm_start" not in sv:
                continue
            m = sv["mem_after_load"]
            pts = sv["points"]
            mem_ratio = (m["RssAnon"] + m["RssFile"]) / fmem
            file_ratio = e["index"]["size"] / flat["index"]["size"]
            q32 = pts[POINTS[1][0]]["qps"] / fp[POINTS[1][0]]["qps"]
            q1 = pts[POINTS[0][0]]["qps"] / fp[POINTS[0][0]]["qps"]
            def faiss_ratio(label):
                p, f = pts[label], fp[label]
                if "search_ms_per_query" in p and f.get("search_ms_per_query"):
                    return "%.3f" % (p["search_ms_per_query"] / f["search_ms_per_query"])
                return "-"

            r3 = expected_recall3(e)
            warm = sv["warm_start"]["listening_s"]
            ok = [("memory", file_ratio <= 0.25), ("recall", r3 is not None and r3 >= 0.95),
                  ("q/s", q32 >= 3.0), ("start", warm < 5.0)]
            goal = "met" if all(v for _, v in ok) else "not met: " + ", ".join(k for k, v in ok if not v)
            lines.append("| %s | %s | %.3f | %.3f | %s | %.2f× | %.2f× | %s | %.2f | %s |" % (
                "{:,}".format(n), kind_name(kind), file_ratio, mem_ratio, "%.3f" % r3 if r3 is not None else "-", q32, q1,
                faiss_ratio(POINTS[1][0]) + " / " + faiss_ratio(POINTS[0][0]), warm, goal))
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--rows", type=int, action="append", default=[])
    ap.add_argument("--kinds", default="flat,ivfsq8,ivfpq,hnsw")
    ap.add_argument("--pq-m", type=int, default=64)
    ap.add_argument("--rerank", type=int, default=8)
    ap.add_argument("--ref", type=int, action="append", default=[], help="rows at which to run the reference server too")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--starts", default="first,cold,warm",
                    help="starts to measure besides the warm one that serves the load: first (deletes the sidecar), cold")
    ap.add_argument("--only-build", action="store_true", help="make data and indexes, measure nothing")
    ap.add_argument("--convert-build", help="the build whose searchgate-index-convert makes the indexes (default: --build)")
    ap.add_argument("--eval", type=int, default=1000, help="held-out rows of convert's recall report")
    ap.add_argument("--nlist", type=int, default=0, help="IVF lists (default: 1024 up to 300k rows, else 4096)")
    ap.add_argument("--train-rows", type=int, default=0, help="convert's --train-rows (default: convert's own)")
    ap.add_argument("--blas-threads", type=int, default=0, help="convert's --blas-threads (default: convert's own)")
    ap.add_argument("--tag", default="", help="suffix of the result keys (e.g. -avx2 for another FAISS build)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--report", action="store_true", help="only print the tables of --out")
    a = ap.parse_args()
    if a.report:
        with open(a.out) as f:
            print(report(json.load(f)))
        return
    global NLIST
    NLIST = a.nlist
    a.build = os.path.abspath(a.build)
    a.data = os.path.abspath(a.data)
    os.makedirs(a.data, exist_ok=True)
    model = os.path.join(a.data, "e5-base-random")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_model.py"), model], check=True)
    queries = os.path.join(a.data, "queries.txt")
    if not os.path.exists(queries):
        bench.make_queries(queries)
    results = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            results = json.load(f)
    results.setdefault("machine", {"nproc": os.cpu_count(), "cpu": bench.cpu_name()})
    for n in a.rows:
        key = str(n)
        corpus, flat, stats = ensure_data(a.build, a.data, n)
        res = results.setdefault(key, {})
        res["data"] = stats
        kinds = [k for k in a.kinds.split(",") if k]  # "" with --ref: the reference server only
        cb = os.path.abspath(a.convert_build or a.build)
        idx = {k: ensure_index(cb, a.data, n, k, flat, a.pq_m, a.rerank, a.eval, a.train_rows, a.blas_threads) for k in kinds}
        for k in kinds:
            res.setdefault(k + a.tag, {})["index"] = {kk: vv for kk, vv in idx[k][1].items() if kk != "report"}
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
        if a.only_build:
            continue
        log("N = %d: load average %.2f" % (n, os.getloadavg()[0]))
        for i, k in enumerate(kinds):
            load_before = os.getloadavg()[0]
            # starts not measured again (--starts) keep their earlier figures
            res[k + a.tag].setdefault("serve", {}).update(
                measure_kind(a, n, k, model, corpus, idx[k][0], queries, i == 0 and not a.tag, i * 40000))
            res[k + a.tag]["serve"]["loadavg_before"] = load_before
            res[k + a.tag]["serve"]["build"] = a.build
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
        if n in a.ref:
            res["reference"] = measure_ref(a, n, model, corpus, flat, queries, 0)
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)
    print(report(results))


if __name__ == "__main__":
    main()
