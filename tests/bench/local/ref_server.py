#!/usr/bin/python3
"""The benchmark peer: a server that does per request what Search-R1's retrieval server
(search_r1/search/retrieval_server.py, dense e5 path, at the commit of docs/protocols.md) does,
as it runs on a CPU machine. Written here from that behaviour, not copied; what Debian cannot
provide is replaced:

  * transformers' tokenizer -> tests/backends/encoder/ref_tokenizer.py (the same uncased WordPiece, checked
    against transformers' own ids), and its model -> a plain-torch BertModel loading the same
    model.safetensors (parsed with json + numpy; the safetensors package is not in Debian);
  * the datasets library -> the corpus as a Python list of dicts, read line by line;
  * .cuda()/.half() -> CPU and float32.

The work per request is Search-R1's: a synchronous FastAPI endpoint (run in Starlette's thread
pool), queries encoded in chunks of 512 (its retrieval_batch_size) with "query: " in front,
padded to the longest (at most 256 tokens), mean pooling over the attention mask, L2
normalisation, a search of the flat inner-product index per chunk, and the corpus rows looked
up by position. Run with Debian's /usr/bin/python3 (python3-torch, python3-faiss,
python3-fastapi, python3-uvicorn, python3-numpy):

    /usr/bin/python3 ref_server.py --model DIR --index e5_Flat.index --corpus wiki-18.jsonl --port 8000 [--topk 3]
"""
import argparse
import json
import math
import os
import struct
import sys
import time
from typing import List, Optional

T_START = time.time()

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "backends", "encoder"))  # ref_tokenizer.py
from ref_tokenizer import BertTokenizer, check_golden  # noqa: E402

# ---------------------------------------------------------------- tokenizer: ref_tokenizer.py


def padded_batch(tok, texts, max_length):
    """The model's input for `texts`: each [CLS] ids [SEP] (at most max_length tokens), padded
    with zeros to the longest, its attention mask, token types all 0."""
    seqs = [tok.encode(t, max_length) for t in texts]
    ids = torch.zeros((len(seqs), max(len(s) for s in seqs)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = torch.tensor(seq)
        mask[row, :len(seq)] = 1
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


# ---------------------------------------------------------------- BertModel (eager, as transformers runs it)


class Layer(torch.nn.Module):
    def __init__(self, h, inter, heads, eps):
        super().__init__()
        self.heads, self.dh = heads, h // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(h, h) for _ in range(4))
        self.ln1 = torch.nn.LayerNorm(h, eps=eps)
        self.inter = torch.nn.Linear(h, inter)
        self.out = torch.nn.Linear(inter, h)
        self.ln2 = torch.nn.LayerNorm(h, eps=eps)

    def forward(self, x, ext_mask):
        b, n, _ = x.shape

        def split(t):
            return t.view(b, n, self.heads, self.dh).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + ext_mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).reshape(b, n, -1)
        a = self.ln1(self.o(ctx) + x)
        return self.ln2(self.out(torch.nn.functional.gelu(self.inter(a))) + a)


class BertModel(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
        self.word = torch.nn.Embedding(cfg["vocab_size"], h)
        self.pos = torch.nn.Embedding(cfg["max_position_embeddings"], h)
        self.tok_type = torch.nn.Embedding(cfg.get("type_vocab_size", 2), h)
        self.ln = torch.nn.LayerNorm(h, eps=eps)
        self.layers = torch.nn.ModuleList(Layer(h, cfg["intermediate_size"], cfg["num_attention_heads"], eps)
                                          for _ in range(cfg["num_hidden_layers"]))
        self.pooler = torch.nn.Linear(h, h)

    def forward(self, input_ids, token_type_ids, attention_mask):
        n = input_ids.shape[1]
        x = self.word(input_ids) + self.tok_type(token_type_ids) + self.pos(torch.arange(n)[None, :])
        x = self.ln(x)
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # BertModel computes the pooler output too
        return x, pooled

    def load_safetensors(self, path):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        dt = {"F32": np.float32, "F16": np.float16}

        def t(name):
            e = header[name]
            b, en = e["data_offsets"]
            return torch.from_numpy(np.frombuffer(data[b:en], dtype=dt[e["dtype"]]).astype(np.float32).reshape(e["shape"]))

        sd = {"word.weight": "embeddings.word_embeddings.weight", "pos.weight": "embeddings.position_embeddings.weight",
              "tok_type.weight": "embeddings.token_type_embeddings.weight", "ln.weight": "embeddings.LayerNorm.weight",
              "ln.bias": "embeddings.LayerNorm.bias", "pooler.weight": "pooler.dense.weight", "pooler.bias": "pooler.dense.bias"}
        names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                 "o": "attention.output.dense", "ln1": "attention.output.LayerNorm", "inter": "intermediate.dense",
                 "out": "output.dense", "ln2": "output.LayerNorm"}
        for i in range(len(self.layers)):
            for mine, hf in names.items():
                for p in ("weight", "bias"):
                    sd["layers.%d.%s.%s" % (i, mine, p)] = "encoder.layer.%d.%s.%s" % (i, hf, p)
        self.load_state_dict({k: t(v) for k, v in sd.items()})


# ---------------------------------------------------------------- the retrieval server


def load_corpus(path):
    with open(path, "r") as f:
        return [json.loads(line) for line in f]


class DenseSearch:
    """The dense path: e5 query embeddings, the flat inner-product index, the corpus rows."""

    def __init__(self, model_dir, index_path, corpus_path, max_length=256, chunk=512):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.model = BertModel(json.load(f))
        self.model.load_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.model.eval()
        self.tok = BertTokenizer(os.path.join(model_dir, "vocab.txt"))
        self.index = faiss.read_index(index_path)
        self.corpus = load_corpus(corpus_path)
        self.max_length, self.chunk = max_length, chunk

    @torch.no_grad()
    def embed(self, queries):
        batch = padded_batch(self.tok, ["query: " + q for q in queries], self.max_length)
        hidden, _ = self.model(**batch)
        mask = batch["attention_mask"].unsqueeze(-1).float()
        mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1)
        return torch.nn.functional.normalize(mean, dim=-1).numpy().astype(np.float32, order="C")

    def search(self, queries, k):
        """(corpus rows, scores), one list of k each per query, best first."""
        rows, scores = [], []
        for at in range(0, len(queries), self.chunk):
            chunk_scores, chunk_idx = self.index.search(self.embed(queries[at:at + self.chunk]), k)
            rows += [[self.corpus[int(i)] for i in line] for line in chunk_idx.tolist()]
            scores += chunk_scores.tolist()
        return rows, scores


class QueryRequest(BaseModel):
    queries: List[str]
    topk: Optional[int] = None
    return_scores: bool = False


app = FastAPI()
SERVER = {"search": None, "topk": 3}


@app.post("/retrieve")
def retrieve_endpoint(request: QueryRequest):
    """A missing, null or 0 topk is the server's --topk; one list per query, scored or flat."""
    rows, scores = SERVER["search"].search(request.queries, request.topk or SERVER["topk"])
    if not request.return_scores:
        return {"result": rows}
    return {"result": [[{"document": row, "score": score} for row, score in zip(r, s)] for r, s in zip(rows, scores)]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--check-tokenizer", help="compare with a tokenizer_golden.jsonl and exit")
    a = ap.parse_args()
    if a.check_tokenizer:
        n, bad = check_golden(BertTokenizer(os.path.join(a.model, "vocab.txt")), a.check_tokenizer)
        for case in bad:
            print("tokenizer mismatch on case", case, file=sys.stderr)
        print("tokenizer: %d mismatches in %d cases" % (len(bad), n))
        sys.exit(1 if bad else 0)
    SERVER["search"] = DenseSearch(a.model, a.index, a.corpus)
    SERVER["topk"] = a.topk
    print("ref_server: loaded in %.2f s since process start" % (time.time() - T_START), file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
