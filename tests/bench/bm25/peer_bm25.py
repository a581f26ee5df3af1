"""The peer of the bm25 benchmark: what a lab without pyserini would run -- the Search-R1
retrieval-server shape (FastAPI + uvicorn, POST /retrieve, a sync `def` handler) over a BM25
retriever in Python + numpy, with the same analysis recipe (lower-casing, Lucene's English stop
words, possessive removal, Porter stemming through PyStemmer = the same Snowball C code) and the
same scoring (Lucene BM25, k1=0.9, b=0.4, qtf boosts).

    /usr/bin/python3 peer_bm25.py CORPUS.jsonl PORT STATS.json

Builds the index in memory at start-up, writes build statistics (seconds, passages/s, peak RSS)
to STATS.json, then serves on 127.0.0.1:PORT until killed. Needs python3-fastapi,
python3-uvicorn, python3-numpy and python3-stemmer (.ci/deps.sh bench)."""
import json
import math
import re
import resource
import sys
import time
from typing import List, Optional

import numpy as np
import Stemmer
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

STOP = set("a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
           "this to was will with".split())
WORD = re.compile(r"\w+(?:['\u2019.:]\w+)*")
STEM = Stemmer.Stemmer("porter")


def analyze(text):
    toks = []
    for w in WORD.findall(text.lower()):
        if w.endswith(("'s", "\u2019s")):
            w = w[:-2]
        if w and w not in STOP:
            toks.append(w)
    return STEM.stemWords(toks)


class Index:
    def __init__(self, path, k1=0.9, b=0.4):
        t0 = time.time()
        self.docs = []
        postings = {}
        lengths = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                row = json.loads(line)
                contents = row["contents"]
                lines = contents.split("\n")
                self.docs.append({"id": str(row.get("id", i)), "title": lines[0].strip('"'), "text": "\n".join(lines[1:]),
                                  "contents": contents, "url": row.get("url", "")})
                counts = {}
                toks = analyze(contents)
                for t in toks:
                    counts[t] = counts.get(t, 0) + 1
                for t, c in counts.items():
                    postings.setdefault(t, []).append((i, c))
                lengths.append(len(toks))
        self.dl = np.array(lengths, dtype=np.float32)
        n = int((self.dl > 0).sum())
        avgdl = float(self.dl.sum()) / max(n, 1)
        self.norm = (k1 * (1 - b + b * self.dl / avgdl)).astype(np.float32)
        self.terms = {}
        for t, plist in postings.items():
            arr = np.array(plist, dtype=np.int64)
            df = len(plist)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            self.terms[t] = (arr[:, 0].astype(np.int32), arr[:, 1].astype(np.float32), idf)
        self.seconds = time.time() - t0

    def search(self, query, k):
        qtf = {}
        for t in analyze(query):
            qtf[t] = qtf.get(t, 0) + 1
        scores = np.zeros(len(self.docs), dtype=np.float32)
        for t, q in qtf.items():
            if t in self.terms:
                ids, tf, idf = self.terms[t]
                scores[ids] += (q * idf) * tf / (tf + self.norm[ids])
        nz = np.flatnonzero(scores)
        if len(nz) == 0:
            return [], []
        if len(nz) > k:
            nz = nz[np.argpartition(-scores[nz], k - 1)[:k]]
        order = sorted(nz.tolist(), key=lambda d: (-scores[d], d))
        return [self.docs[d] for d in order], [float(scores[d]) for d in order]


class QueryRequest(BaseModel):
    queries: List[str]
    topk: Optional[int] = None
    return_scores: bool = False


def main():
    corpus, port, stats_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    index = Index(corpus)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(stats_path, "w") as f:
        json.dump({"docs": len(index.docs), "seconds": index.seconds, "docs_per_s": len(index.docs) / index.seconds,
                   "peak_rss_kb": rss_kb, "terms": len(index.terms)}, f)
    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(request: QueryRequest):  # the Search-R1 server's handler shape
        topk = request.topk or 3
        resp = []
        for q in request.queries:
            docs, scores = index.search(q, topk)
            if request.return_scores:
                resp.append([{"document": d, "score": s} for d, s in zip(docs, scores)])
            else:
                resp.append(docs)
        return {"result": resp}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
