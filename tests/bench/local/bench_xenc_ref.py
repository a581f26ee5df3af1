#!/usr/bin/python3
"""The peer of bench_xenc.c: the same rerank load (30 candidates x 256 tokens, one query per call)
through the plain-torch BertForSequenceClassification of tests/backends/encoder/make_xenc_fixture.py (the
reference the cross-encoder goldens come from; transformers' eager BERT, float32, CPU), as
sentence-transformers' CrossEncoder.predict runs it on a CPU: one padded batch under no_grad.
Only the model is timed: CrossEncoder tokenises with the Rust `tokenizers` library, which Debian
lacks, so the Python tokenizer here (far slower) is left out of the figure.

    /usr/bin/python3 tests/bench/local/bench_xenc_ref.py MODEL_DIR [--seconds 5] [--threads 1]
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "backends", "encoder"))  # make_xenc_fixture.py
import make_xenc_fixture as ref  # noqa: E402

WORDS = ("the of and in to was is for on as by with he at from his an were are which this also be has first new one "
         "their after two who they city river church war school album season film team league world state county born "
         "known song history company series village england 1999 national population").split()


def passage(seed):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(350):
        out.append(WORDS[rng.integers(0, len(WORDS))] + ("." if i % 17 == 16 else ""))
    return " ".join(out)


def load_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[b:en], dtype=dt[e["dtype"]]).reshape(e["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "config.json")) as f:
        c = json.load(f)
    c.setdefault("layer_norm_eps", 1e-12)
    c.setdefault("type_vocab_size", 2)
    model = ref.load_model(c, load_tensors(os.path.join(a.model, "model.safetensors")), torch.float32)
    tok = ref.BertTokenizer(os.path.join(a.model, "vocab.txt"))
    query = "who was the first president of the united states"
    seqs = [tok.encode_pair(query, passage(i), 256, "fast") for i in range(30)]
    ids, types, mask = ref.batch(seqs)
    print("30 candidates x %.0f tokens, torch %s, %d thread(s)" % (float(mask.sum()) / 30, torch.__version__, a.threads))
    with torch.no_grad():
        model(ids, types, mask)  # warm-up
        calls, start = 0, time.perf_counter()
        while True:
            model(ids, types, mask)
            calls += 1
            end = time.perf_counter()
            if end - start >= a.seconds:
                break
    per = (end - start) / calls
    print("%.1f pairs/s; %.1f ms per query (30 pairs); %d calls" % (30 / per, per * 1000, calls))


if __name__ == "__main__":
    main()
