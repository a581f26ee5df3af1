"""The reference a rerank route is checked against: what Search-R1's retrieve-then-rerank server
computes for a query and its first-stage documents, in plain torch (Debian's python3-torch).

* passages as its reranker builds them (`search_r1/search/rerank_server.py`, _passage_to_string):
  title = contents.split("\\n")[0], text = "\\n".join(contents.split("\\n")[1:]),
  passage = f"(Title: {title}) {text}";
* scores as sentence-transformers' CrossEncoder.predict: the BertForSequenceClassification of
  tests/backends/encoder/make_xenc_fixture.py (Hugging Face's architecture and parameter names, loaded with
  strict=True from the folder's model.safetensors), the reference tokenizer
  (tests/backends/encoder/ref_tokenizer.py) with "longest_first" truncation as the fast tokenizer does it,
  then the activation config.json names;
* order: sorted(..., key=score, reverse=True), a stable sort, so ties keep the first-stage order.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "backends", "encoder"))

import make_xenc_fixture as fx  # noqa: E402


def passage(doc):
    if isinstance(doc.get("contents"), str):
        parts = doc["contents"].split("\n")
        return "(Title: %s) %s" % (parts[0], "\n".join(parts[1:]))
    title = doc.get("title") if isinstance(doc.get("title"), str) else ""
    text = doc.get("text") if isinstance(doc.get("text"), str) else ""
    return "(Title: %s) %s" % (title, text)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F16": np.float16}[meta["dtype"]]
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(meta["shape"])
    return out


class CrossEncoder:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        self.tok = fx.BertTokenizer(os.path.join(folder, "vocab.txt"))
        self.model = fx.load_model(self.config, read_safetensors(os.path.join(folder, "model.safetensors")), torch.float32)
        act = self.config.get("sbert_ce_default_activation_function") or (
            self.config.get("sentence_transformers") or {}).get("activation_fn")
        labels = len(self.config["id2label"])
        if act is None:
            act = "torch.nn.modules.activation.Sigmoid" if labels == 1 else "torch.nn.modules.linear.Identity"
        self.activation = {"torch.nn.modules.linear.Identity": lambda x: x,
                           "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
                           "torch.nn.modules.activation.Tanh": torch.tanh}[act]
        self.labels = labels

    def scores(self, query, passages, max_length):
        out = []
        for p in passages:
            ids, types = self.tok.encode_pair(query.strip(), p.strip(), max_length, "fast")
            with torch.no_grad():
                logits = self.model(torch.tensor([ids]), torch.tensor([types]), torch.ones((1, len(ids)), dtype=torch.long))[0]
                s = self.activation(logits)
                if self.labels > 1:
                    s = torch.softmax(s, dim=0)[1]
                else:
                    s = s[0]
            out.append(float(s))
        return out

    def rerank(self, query, docs, topk, max_length):
        """[(doc, score)] best first, the topk best, as the reference server returns them."""
        s = self.scores(query, [passage(d) for d in docs], max_length)
        ranked = sorted(zip(docs, s), key=lambda x: x[1], reverse=True)
        return ranked[:topk]
