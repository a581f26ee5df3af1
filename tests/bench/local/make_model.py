#!/usr/bin/python3
"""Writes a Hugging Face style BERT model folder with random weights (config.json, vocab.txt copied
from the e5-tiny fixture, model.safetensors in F32 or F16), shaped like intfloat/e5-base-v2 by
default: hidden 768, 12 layers, 12 heads, intermediate 3072, 512 positions. Weights ~ N(0, 0.02)
like a fresh BERT, LayerNorm gain 1 and bias 0. Needs python3-numpy (the bench list of .ci/deps.sh).
With --labels N: a cross-encoder instead (BertForSequenceClassification: the BertModel tensors
under `bert.`, a `classifier` of N labels, config.json as the ms-marco cross-encoders have it);
cross-encoder/ms-marco-MiniLM-L-12-v2 is --hidden 384 --layers 12 --heads 12 --intermediate 1536
--labels 1.

    /usr/bin/python3 make_model.py OUT_DIR [--hidden 768 --layers 12 --heads 12 --intermediate 3072]
                                          [--dtype f32|f16] [--seed 1] [--labels N]
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "fixtures", "e5-tiny")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--positions", type=int, default=512)
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--labels", type=int, default=0, help="a cross-encoder with this many labels (0: a BertModel)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    vocab_lines = open(os.path.join(FIXTURE, "vocab.txt"), encoding="utf-8").read().split("\n")
    vocab = len(vocab_lines) - (1 if vocab_lines[-1] == "" else 0)
    shutil.copy(os.path.join(FIXTURE, "vocab.txt"), os.path.join(a.out, "vocab.txt"))
    for extra in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(FIXTURE, extra), os.path.join(a.out, extra))
    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    cfg.update({"hidden_size": a.hidden, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
                "intermediate_size": a.intermediate, "max_position_embeddings": a.positions, "vocab_size": vocab})
    if a.labels > 0:
        cfg.update({"architectures": ["BertForSequenceClassification"],
                    "id2label": {str(i): "LABEL_%d" % i for i in range(a.labels)},
                    "label2id": {"LABEL_%d" % i: i for i in range(a.labels)},
                    "sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rng = np.random.default_rng(a.seed)
    H, I = a.hidden, a.intermediate
    tensors = []

    def normal(name, *shape):
        tensors.append((name, rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)))

    def ln(name):
        tensors.append((name + ".weight", np.ones(H, dtype=np.float32)))
        tensors.append((name + ".bias", np.zeros(H, dtype=np.float32)))

    normal("embeddings.word_embeddings.weight", vocab, H)
    normal("embeddings.position_embeddings.weight", a.positions, H)
    normal("embeddings.token_type_embeddings.weight", 2, H)
    ln("embeddings.LayerNorm")
    for i in range(a.layers):
        p = "encoder.layer.%d." % i
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            normal(p + n + ".weight", H, H)
            normal(p + n + ".bias", H)
        ln(p + "attention.output.LayerNorm")
        normal(p + "intermediate.dense.weight", I, H)
        normal(p + "intermediate.dense.bias", I)
        normal(p + "output.dense.weight", H, I)
        normal(p + "output.dense.bias", H)
        ln(p + "output.LayerNorm")
    normal("pooler.dense.weight", H, H)
    normal("pooler.dense.bias", H)
    if a.labels > 0:
        tensors[:] = [("bert." + name, arr) for name, arr in tensors]
        normal("classifier.weight", a.labels, H)
        normal("classifier.bias", a.labels)
    dt, np_dt = ("F16", np.float16) if a.dtype == "f16" else ("F32", np.float32)
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, arr in tensors:
        n = arr.size * np.dtype(np_dt).itemsize
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, arr in tensors:
            f.write(arr.astype(np_dt).tobytes())
    print("wrote %s: hidden %d, %d layers, %d heads, %.1f M parameters" %
          (a.out, H, a.layers, a.heads, sum(t.size for _, t in tensors) / 1e6))


if __name__ == "__main__":
    main()
