#!/usr/bin/python3
"""The benchmark peer: Search-R1's search_r1/search/retrieval_server.py (dense e5 path) as it runs
on a CPU machine, with only what Debian cannot provide replaced (platform.md section 5):

  * transformers' AutoTokenizer/AutoModel -> BertTokenizer re-done in Python below (the same
    BasicTokenizer + WordPiece algorithm, same special-token handling) and a plain-torch BertModel
    loading the same model.safetensors (parsed with json + numpy; the safetensors package is not
    in Debian);
  * datasets.load_dataset("json") -> the corpus as a Python list of dicts (SR1's own read_jsonl);
  * .cuda()/.half() -> CPU and float32.

Everything else follows the original: a sync FastAPI endpoint (run in Starlette's thread pool),
encoding in chunks of retrieval_batch_size=512 queries per call with padding to the longest,
mean pooling, L2 normalisation, faiss.read_index + index.search on the flat IP index, and
corpus[idx] lookups. Run with Debian's /usr/bin/python3 (python3-torch, python3-faiss,
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
import unicodedata
from typing import List, Optional

T_START = time.time()

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

# ---------------------------------------------------------------- tokenizer (transformers 4.36 BertTokenizer)


def _is_whitespace(c):
    if c in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(c) == "Zs"


def _is_control(c):
    if c in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(c).startswith("C")


def _is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class BertTokenizer:
    SPECIAL = ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"]

    def __init__(self, vocab_file):
        self.vocab = {}
        with open(vocab_file, "r", encoding="utf-8") as f:
            for i, tok in enumerate(f.readlines()):
                self.vocab[tok.rstrip("\n")] = i
        self.unk = self.vocab["[UNK]"]

    def _basic(self, text):
        out = []
        for c in text:
            cp = ord(c)
            if cp == 0 or cp == 0xFFFD or _is_control(c):
                continue
            out.append(" " if _is_whitespace(c) else c)
        text = "".join(out)
        out = []
        for c in text:
            if _is_chinese_char(ord(c)):
                out += [" ", c, " "]
            else:
                out.append(c)
        text = unicodedata.normalize("NFC", "".join(out))
        split = []
        for tok in text.strip().split():
            tok = tok.lower()
            tok = "".join(c for c in unicodedata.normalize("NFD", tok) if unicodedata.category(c) != "Mn")
            cur = []
            for c in tok:
                if _is_punctuation(c):
                    if cur:
                        split.append("".join(cur))
                        cur = []
                    split.append(c)
                else:
                    cur.append(c)
            if cur:
                split.append("".join(cur))
        return " ".join(split).split()

    def _wordpiece(self, token):
        if len(token) > 100:
            return [self.unk]
        out, start = [], 0
        while start < len(token):
            end, cur = len(token), None
            while start < end:
                sub = token[start:end]
                if start > 0:
                    sub = "##" + sub
                if sub in self.vocab:
                    cur = self.vocab[sub]
                    break
                end -= 1
            if cur is None:
                return [self.unk]
            out.append(cur)
            start = end
        return out

    def encode(self, text, max_length):
        ids = []
        # literal special tokens are kept whole (PreTrainedTokenizer's added-token split)
        pos = 0
        while pos <= len(text):
            nxt, which = len(text), None
            for s in self.SPECIAL:
                i = text.find(s, pos)
                if i != -1 and i < nxt:
                    nxt, which = i, s
            for tok in self._basic(text[pos:nxt]):
                ids += self._wordpiece(tok)
            if which is None:
                break
            ids.append(self.vocab[which])
            pos = nxt + len(which)
        ids = ids[:max_length - 2]
        return [self.vocab["[CLS]"]] + ids + [self.vocab["[SEP]"]]

    def __call__(self, texts, max_length=256, padding=True, truncation=True, return_tensors="pt"):
        seqs = [self.encode(t, max_length) for t in texts]
        longest = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), longest), dtype=torch.long)
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
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


# ---------------------------------------------------------------- Search-R1 retrieval_server.py (dense path)


def read_jsonl(file_path):
    data = []
    with open(file_path, "r") as f:
        for line in f:
            data.append(json.loads(line))
    return data


def load_docs(corpus, doc_idxs):
    return [corpus[int(idx)] for idx in doc_idxs]


def pooling(pooler_output, last_hidden_state, attention_mask=None, pooling_method="mean"):
    if pooling_method == "mean":
        last_hidden = last_hidden_state.masked_fill(~attention_mask[..., None].bool(), 0.0)
        return last_hidden.sum(dim=1) / attention_mask.sum(dim=1)[..., None]
    raise NotImplementedError("Pooling method not implemented!")


class Encoder:
    def __init__(self, model_name, model_path, pooling_method, max_length, use_fp16):
        self.model_name, self.pooling_method, self.max_length = model_name, pooling_method, max_length
        with open(os.path.join(model_path, "config.json")) as f:
            cfg = json.load(f)
        self.model = BertModel(cfg)
        self.model.load_safetensors(os.path.join(model_path, "model.safetensors"))
        self.model.eval()
        self.tokenizer = BertTokenizer(os.path.join(model_path, "vocab.txt"))

    @torch.no_grad()
    def encode(self, query_list: List[str], is_query=True) -> np.ndarray:
        if isinstance(query_list, str):
            query_list = [query_list]
        if "e5" in self.model_name.lower():
            query_list = ["query: %s" % q for q in query_list] if is_query else ["passage: %s" % q for q in query_list]
        inputs = self.tokenizer(query_list, max_length=self.max_length, padding=True, truncation=True, return_tensors="pt")
        last_hidden, pooled = self.model(**inputs)
        query_emb = pooling(pooled, last_hidden, inputs["attention_mask"], self.pooling_method)
        query_emb = torch.nn.functional.normalize(query_emb, dim=-1)
        query_emb = query_emb.detach().cpu().numpy()
        return query_emb.astype(np.float32, order="C")


class DenseRetriever:
    def __init__(self, config):
        self.topk = config.retrieval_topk
        self.index = faiss.read_index(config.index_path)
        self.corpus = read_jsonl(config.corpus_path)
        self.encoder = Encoder(config.retrieval_method, config.retrieval_model_path, "mean", config.retrieval_query_max_length,
                               True)
        self.batch_size = config.retrieval_batch_size

    def _batch_search(self, query_list: List[str], num: int = None, return_score=False):
        if isinstance(query_list, str):
            query_list = [query_list]
        if num is None:
            num = self.topk
        results, scores = [], []
        for start_idx in range(0, len(query_list), self.batch_size):
            query_batch = query_list[start_idx:start_idx + self.batch_size]
            batch_emb = self.encoder.encode(query_batch)
            batch_scores, batch_idxs = self.index.search(batch_emb, k=num)
            batch_scores, batch_idxs = batch_scores.tolist(), batch_idxs.tolist()
            flat_idxs = sum(batch_idxs, [])
            batch_results = load_docs(self.corpus, flat_idxs)
            batch_results = [batch_results[i * num:(i + 1) * num] for i in range(len(batch_idxs))]
            results.extend(batch_results)
            scores.extend(batch_scores)
        if return_score:
            return results, scores
        return results


class Config:
    pass


class QueryRequest(BaseModel):
    queries: List[str]
    topk: Optional[int] = None
    return_scores: bool = False


app = FastAPI()
config = Config()
retriever = None


@app.post("/retrieve")
def retrieve_endpoint(request: QueryRequest):
    if not request.topk:
        request.topk = config.retrieval_topk
    tmp = retriever._batch_search(query_list=request.queries, num=request.topk, return_score=request.return_scores)
    results, scores = tmp if request.return_scores else (tmp, None)  # the SLIME fix of the 2-query bug
    resp = []
    for i, single_result in enumerate(results):
        if request.return_scores:
            resp.append([{"document": doc, "score": score} for doc, score in zip(single_result, scores[i])])
        else:
            resp.append(single_result)
    return {"result": resp}


def main():
    global retriever
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--topk", type=int, default=3)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--check-tokenizer", help="compare with a tokenizer_golden.jsonl and exit")
    a = ap.parse_args()
    if a.check_tokenizer:
        tok = BertTokenizer(os.path.join(a.model, "vocab.txt"))
        bad = 0
        with open(a.check_tokenizer) as f:
            for line in f:
                case = json.loads(line)
                if tok.encode("query: " + case["text"], 256) != case["input_ids"]:
                    bad += 1
                    print("tokenizer mismatch on case", case["id"], file=sys.stderr)
        print("tokenizer: %d mismatches" % bad)
        sys.exit(1 if bad else 0)
    config.retrieval_method = "e5"
    config.retrieval_topk = a.topk
    config.index_path = a.index
    config.corpus_path = a.corpus
    config.retrieval_model_path = a.model
    config.retrieval_query_max_length = 256
    config.retrieval_batch_size = 512
    retriever = DenseRetriever(config)
    print("ref_server: loaded in %.2f s since process start" % (time.time() - T_START), file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
