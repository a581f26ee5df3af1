"""Shared helpers of the bm25 tests: build an index with the real tool, get the analyzer's tokens
from it (so a brute-force BM25 here sees exactly the tokens the index saw), and score by brute
force with Lucene's BM25 (pyserini's defaults k1=0.9, b=0.4)."""
import json
import math
import random
import subprocess

import sgtest

INDEX_TOOL = sgtest.binary("searchgate-index-bm25")


def build_index(corpus_path, out_dir, *args):
    r = subprocess.run([INDEX_TOOL, corpus_path, out_dir, "--no-progress", "--quiet", "--stats-json"] + list(args),
                       capture_output=True, text=True, timeout=sgtest.scaled(120))
    if r.returncode != 0:
        raise RuntimeError("searchgate-index-bm25 failed: %s" % r.stderr)
    return json.loads(r.stdout)


def analyze(texts, *args):
    """Tokens of each text, from `searchgate-index-bm25 --analyze` (one JSON string per line)."""
    data = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    r = subprocess.run([INDEX_TOOL, "--analyze"] + list(args), input=data.encode(), capture_output=True,
                       timeout=sgtest.scaled(120))
    if r.returncode != 0:
        raise RuntimeError("--analyze failed: %s" % r.stderr.decode())
    lines = r.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1, (len(lines), len(texts))
    return [line.split() if line else [] for line in lines[:-1]]


def write_corpus(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


VOCAB = ("volcano volcanoes volcanic lava crater eruption mountain mountains river lake city cities capital france paris "
         "tokyo japan running runs ran quickly bridge ancient roman empire science music theory history war peace king "
         "queen island ocean sea ship sailor star planet moon sun light dark forest tree bird birds fish zürich café naïve "
         "東京 京都 3.14 1,000 can't john's u.s.a the a an of to and in is it not such that").split()


def random_corpus(n, seed):
    """n passages in the wiki-18 convention, over a small vocabulary (so terms repeat and scores tie)."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        title = " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(1, 3)))
        body = " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(0, 60)))
        row = {"id": "d%d" % i, "contents": '"%s"\n%s' % (title, body)}
        if i % 7 == 0:
            row["url"] = "https://example.org/%d" % i
        rows.append(row)
    rows.append({"id": "punct", "contents": "!!! ... ???"})  # no token: not part of N or avgdl
    rows.append({"id": "multi", "contents": '"Multi line"\nfirst line\nsecond "quoted" line\\ with backslash'})
    return rows


class BruteForce:
    def __init__(self, rows, k1=0.9, b=0.4, analyzer_args=()):
        self.rows = rows
        self.k1, self.b = k1, b
        self.args = analyzer_args
        self.doc_tokens = analyze([r["contents"] for r in rows], *analyzer_args)
        self.tf = []
        self.df = {}
        for toks in self.doc_tokens:
            counts = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            self.tf.append(counts)
            for t in counts:
                self.df[t] = self.df.get(t, 0) + 1
        self.N = sum(1 for t in self.doc_tokens if t)
        self.avgdl = sum(len(t) for t in self.doc_tokens) / self.N

    def idf(self, t):
        df = self.df[t]
        return math.log(1 + (self.N - df + 0.5) / (df + 0.5))

    def search(self, query_tokens, k):
        """[(row, score)] best first; equal scores in row order."""
        qtf = {}
        for t in query_tokens:
            qtf[t] = qtf.get(t, 0) + 1
        scores = []
        for row, counts in enumerate(self.tf):
            s = 0.0
            dl = len(self.doc_tokens[row])
            for t, q in qtf.items():
                tf = counts.get(t, 0)
                if tf:
                    s += q * self.idf(t) * tf / (tf + self.k1 * (1 - self.b + self.b * dl / self.avgdl))
            if s > 0:
                scores.append((row, s))
        scores.sort(key=lambda x: (-x[1], x[0]))
        return scores[:k]


def expected_doc(row, index):
    """The DOC the backend must serve for a corpus row (docs/backends/bm25.md, "What a hit looks like")."""
    contents = row["contents"]
    lines = contents.split("\n")
    return {"id": str(row.get("id", index)), "title": lines[0].strip('"'), "text": "\n".join(lines[1:]),
            "contents": contents, "url": row.get("url", "")}


def same_ranking(got, want, all_scores, rel=1e-5):
    """got: [(doc_id, score)] from the server; want: the brute-force top k [(doc_id, score)];
    all_scores: {doc_id: brute-force score} of every matching document. The score at each rank
    must agree with the brute force, and each returned document must have (within float
    rounding) the score it was returned with, so only near-ties may swap places."""
    if len(got) != len(want):
        return "got %d hits, expected %d" % (len(got), len(want))
    if len(set(g[0] for g in got)) != len(got):
        return "duplicate documents in %s" % got
    for i, ((gid, gs), (wid, ws)) in enumerate(zip(got, want)):
        tol = rel * max(1.0, abs(ws))
        if abs(gs - ws) > tol:
            return "rank %d: score %.7f, expected %.7f (%s vs %s)" % (i, gs, ws, gid, wid)
        if gid not in all_scores or abs(all_scores[gid] - gs) > tol:
            return "rank %d: %s returned with score %.7f, but its BM25 score is %s (expected %s)" % (
                i, gid, gs, all_scores.get(gid), wid)
    return None
