#!/usr/bin/python3
"""Writes the cross-encoder fixtures of tests/fixtures/ (README.md there) and their goldens: two tiny
random Hugging Face `BertForSequenceClassification` folders scored by a reference written here in
plain torch, on Debian's python3-torch (Debian has no `transformers`):

  * xenc-tiny/          1 label, like the ms-marco MiniLM cross-encoders (config.json names the
                        Identity activation, as theirs do); the real bert-base-uncased vocabulary
                        (vocab.txt links to ../e5-tiny/vocab.txt); golden.jsonl: ~30 (query,
                        passage) pairs with their ids, token types and logits.
  * xenc-tiny-3labels/  3 labels and no activation in config.json; the first 3000 lines of the
                        same vocabulary; golden.jsonl: a few pairs and their 3 logits.

The reference follows transformers 4.36 (the version the e5 fixtures were made with):

  * tokenizer: ref_tokenizer.py beside this script (BERT uncased WordPiece written from its rules,
    literal special tokens kept whole; shared with tests/bench/local/ref_server.py); before writing
    anything this script checks that it reproduces tests/fixtures/tokenizer_golden.jsonl (made
    with transformers itself) id for id. Pairs are `[CLS] A [SEP] B [SEP]` with token types 0 for
    `[CLS] A [SEP]` and 1 for `B [SEP]`, truncated `longest_first` to max_length. The two
    implementations of longest_first differ in one case (both segments cut, an odd budget):
    ref_tokenizer.truncate_pair states both rules, and a case's golden carries the ids of each
    where they differ. `fast` is the `tokenizers` library's (BertTokenizerFast: what
    AutoTokenizer, and so sentence-transformers' CrossEncoder, loads); `slow` is the pure-Python
    BertTokenizer's.
  * model: modules with the names and the forward of transformers' BertForSequenceClassification
    (eager attention, exact erf GELU, extended attention mask of finfo.min), so that the state dict
    keys are the Hugging Face parameter names and `load_state_dict(strict=True)` proves it.
    Logits in float32 (`logits`) and, with the same weights, float64 (`logits_f64`).

Each pair is scored alone; the script also scores all pairs as one padded batch, as CrossEncoder
does, and checks it agrees. It prints how far a few plausible mistakes (tanh GELU, token types all
0, no tanh in the pooler, the other truncation rule) move the logits, against the 1e-5 tolerance.

    /usr/bin/python3 tests/backends/encoder/make_xenc_fixture.py [--out tests/fixtures]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "fixtures")
sys.path.insert(0, HERE)
from ref_tokenizer import BertTokenizer, check_golden  # noqa: E402,F401 - BertTokenizer is used by importers too

# ---------------------------------------------------------------- tokenizer: ref_tokenizer.py


def check_tokenizer(tok):
    n, bad = check_golden(tok)
    for case in bad:
        print("tokenizer mismatch on case", case, file=sys.stderr)
    if bad:
        sys.exit("the reference tokenizer does not reproduce tokenizer_golden.jsonl (%d of %d)" % (len(bad), n))
    print("reference tokenizer: tokenizer_golden.jsonl reproduced (%d cases)" % n)


# ---------------------------------------------------------------- BertForSequenceClassification (transformers 4.36, eager)


class BertEmbeddings(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word_embeddings = torch.nn.Embedding(c["vocab_size"], h)
        self.position_embeddings = torch.nn.Embedding(c["max_position_embeddings"], h)
        self.token_type_embeddings = torch.nn.Embedding(c["type_vocab_size"], h)
        self.LayerNorm = torch.nn.LayerNorm(h, eps=c["layer_norm_eps"])

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.shape[1])[None, :]
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.LayerNorm(embeddings)


class BertSelfAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.head_size = h // self.heads
        self.query = torch.nn.Linear(h, h)
        self.key = torch.nn.Linear(h, h)
        self.value = torch.nn.Linear(h, h)

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_size)
        scores = scores + mask
        probs = torch.nn.functional.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.shape[0], ctx.shape[1], -1)


class BertSelfOutput(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = torch.nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = torch.nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x, inp):
        return self.LayerNorm(self.dense(x) + inp)


class BertAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class BertIntermediate(torch.nn.Module):
    def __init__(self, c, gelu):
        super().__init__()
        self.dense = torch.nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.gelu = gelu

    def forward(self, x):
        return torch.nn.functional.gelu(self.dense(x), approximate=self.gelu)


class BertOutput(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = torch.nn.Linear(c["intermediate_size"], c["hidden_size"])
        self.LayerNorm = torch.nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x, inp):
        return self.LayerNorm(self.dense(x) + inp)


class BertLayer(torch.nn.Module):
    def __init__(self, c, gelu):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c, gelu)
        self.output = BertOutput(c)

    def forward(self, x, mask):
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(torch.nn.Module):
    def __init__(self, c, gelu):
        super().__init__()
        self.layer = torch.nn.ModuleList(BertLayer(c, gelu) for _ in range(c["num_hidden_layers"]))

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(torch.nn.Module):
    def __init__(self, c, tanh=True):
        super().__init__()
        self.dense = torch.nn.Linear(c["hidden_size"], c["hidden_size"])
        self.tanh = tanh

    def forward(self, hidden):
        x = self.dense(hidden[:, 0])
        return torch.tanh(x) if self.tanh else x


class BertModel(torch.nn.Module):
    def __init__(self, c, gelu, tanh):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c, gelu)
        self.pooler = BertPooler(c, tanh)

    def forward(self, input_ids, token_type_ids, attention_mask, dtype):
        mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        return self.pooler(self.encoder(self.embeddings(input_ids, token_type_ids), mask))


class BertForSequenceClassification(torch.nn.Module):
    def __init__(self, c, gelu="none", tanh=True):
        super().__init__()
        self.num_labels = len(c["id2label"])
        self.bert = BertModel(c, gelu, tanh)
        self.classifier = torch.nn.Linear(c["hidden_size"], self.num_labels)  # dropout: identity in eval

    def forward(self, input_ids, token_type_ids, attention_mask):
        dtype = self.classifier.weight.dtype
        return self.classifier(self.bert(input_ids, token_type_ids, attention_mask, dtype))


def batch(seqs):
    """Padding to the longest, as the tokenizer's padding=True does (pad id 0, type 0, mask 0)."""
    longest = max(len(ids) for ids, _ in seqs)
    ids = torch.zeros((len(seqs), longest), dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, (s, t) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        types[i, :len(t)] = torch.tensor(t)
        mask[i, :len(s)] = 1
    return ids, types, mask


# ---------------------------------------------------------------- random weights, safetensors


def make_weights(c, rng, f16_words):
    """HF parameter names; variances larger than a fresh BERT's (as the e5-tiny fixture's) so that
    bias, LayerNorm, GELU, attention, token-type and pooler mistakes show in the logits."""
    H, I, L = c["hidden_size"], c["intermediate_size"], len(c["id2label"])
    t = {}

    def normal(name, std, *shape):
        t[name] = (rng.standard_normal(shape) * std).astype(np.float32)

    def ln(name):
        t[name + ".weight"] = rng.uniform(0.5, 1.5, H).astype(np.float32)
        t[name + ".bias"] = (rng.standard_normal(H) * 0.1).astype(np.float32)

    normal("bert.embeddings.word_embeddings.weight", 1.0, c["vocab_size"], H)
    if f16_words:  # stored as F16; the reference computes with the same rounded values
        t["bert.embeddings.word_embeddings.weight"] = t["bert.embeddings.word_embeddings.weight"].astype(np.float16)
    normal("bert.embeddings.position_embeddings.weight", 0.5, c["max_position_embeddings"], H)
    normal("bert.embeddings.token_type_embeddings.weight", 1.0, c["type_vocab_size"], H)
    ln("bert.embeddings.LayerNorm")
    for i in range(c["num_hidden_layers"]):
        p = "bert.encoder.layer.%d." % i
        for n, std in (("attention.self.query", 1.5), ("attention.self.key", 1.5), ("attention.self.value", 1.0),
                       ("attention.output.dense", 1.0)):
            normal(p + n + ".weight", std / math.sqrt(H), H, H)
            normal(p + n + ".bias", 0.1, H)
        ln(p + "attention.output.LayerNorm")
        normal(p + "intermediate.dense.weight", 1.5 / math.sqrt(H), I, H)
        normal(p + "intermediate.dense.bias", 0.3, I)
        normal(p + "output.dense.weight", 1.0 / math.sqrt(I), H, I)
        normal(p + "output.dense.bias", 0.1, H)
        ln(p + "output.LayerNorm")
    normal("bert.pooler.dense.weight", 1.0 / math.sqrt(H), H, H)
    normal("bert.pooler.dense.bias", 0.2, H)
    normal("classifier.weight", 1.5, L, H)
    normal("classifier.bias", 0.2, L)
    return t


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, arr in tensors.items():
        dt = {np.float32: "F32", np.float16: "F16"}[arr.dtype.type]
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for arr in tensors.values():
            f.write(arr.tobytes())


def load_model(c, tensors, dtype, **kw):
    m = BertForSequenceClassification(c, **kw)
    m.load_state_dict({k: torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()}, strict=True)
    return m.to(dtype).eval()


# ---------------------------------------------------------------- cases


def long_text(words, seed):
    rng = np.random.default_rng(seed)
    vocab = ("the of and in to was is for on as by with he at from his an were are which this also be has or had its "
             "first new one their after two who they her but she been other when time all during there would into "
             "city river church war school university population family album season film game team league world "
             "state county village born known song music history government national company series").split()
    return " ".join(vocab[i] for i in rng.integers(0, len(vocab), words)) + "."


def cases():
    """(tag, query, passage, max_length), in groups that share query and max_length so that the C
    test can score each group as one batch, as the gateway will (one query, its candidates)."""
    q = "who wrote the play hamlet"
    p = ("Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601. It is "
         "Shakespeare's longest play, with 29,551 words.")
    q20 = long_text(20, 4)  # 21 pieces
    c = [
        # one query, many kinds of passage (max_length 512)
        ("english", q, p, 512),
        ("english", q, "Macbeth is a tragedy by William Shakespeare.", 512),
        ("case", q, p.upper(), 512),
        ("empty-passage", q, "", 512),
        ("blank-passage", q, " \t\n  ", 512),
        ("punctuation-passage", q, "...!?;", 512),
        ("control-passage", q, "\u0000\u0007\u200b\ufffd", 512),
        ("accents", q, "Crème brûlée is served at the Café Zürich in Genève.", 512),
        ("cjk", q, "北京是中华人民共和国的首都。Beijing is the capital of China.", 512),
        ("greek", q, "Ο Οδυσσέας ΚΑΙ Η ΟΔΥΣΣΕΙΑ", 512),
        ("turkish-i", q, "İstanbul is the largest city in Türkiye.", 512),
        ("cyrillic-arabic", q, "Москва — столица России. القاهرة عاصمة مصر", 512),
        ("emoji", q, "The best 🍕 in town 😀👍", 512),
        ("special-tokens", q, "BERT puts [SEP] between segments and [CLS] in front [MASK].", 512),
        ("long-word", q, "x" * 150 + " is a very long word and so is " + "ab" * 60, 512),
        ("newlines", q, "first line\nsecond line\r\nthird\tline", 512),
        ("trunc-passage-512", q, long_text(700, 1), 512),
        # other queries
        ("english", "what is the capital of france", "Paris is the capital and most populous city of France.", 512),
        ("english", "how many moons does jupiter have", "Jupiter has 95 known moons as of 2023.", 512),
        ("case", "WHO WROTE THE PLAY HAMLET", p, 512),
        ("empty-query", "", p, 512),
        ("both-empty", "", "", 512),
        ("unicode-query", "北京 café ΟΔΥΣΣΕΥΣ İstanbul 🍕 [SEP]", p, 512),
        ("newlines-query", "multi\nline\tquery", p, 512),
        # truncation: only the longer segment is cut
        ("trunc-passage-64", q, long_text(120, 2), 64),
        ("trunc-query-64", long_text(90, 3), "a short passage about hamlet", 64),
        # both cut with an odd budget (29): the two implementations of longest_first differ unless
        # the query is the longer one
        ("trunc-both-tie-32", q20, long_text(20, 5), 32),
        ("trunc-both-passage-longer-32", q20, long_text(40, 7), 32),
        ("trunc-both-query-longer-32", q20, long_text(15, 9), 32),
        ("trunc-query-only-32", q20, long_text(10, 6), 32),
        ("trunc-both-even-33", long_text(20, 10), long_text(40, 11), 33),
        ("trunc-both-long-512", long_text(300, 12), long_text(800, 13), 512),
        # both longer than the whole budget: only their full lengths say which is longer
        ("trunc-both-over-query-longer-128", long_text(400, 14), long_text(300, 15), 128),
        ("trunc-both-over-passage-longer-128", long_text(400, 14), long_text(500, 17), 128),
        ("min-length-3", q, p, 3),
        ("length-4", q, p, 4),
    ]
    return c


# ---------------------------------------------------------------- main


def base_config(H, layers, heads, inter, vocab, labels):
    return {
        "architectures": ["BertForSequenceClassification"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "gradient_checkpointing": False,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": H,
        "id2label": {str(i): "LABEL_%d" % i for i in range(labels)},
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "label2id": {"LABEL_%d" % i: i for i in range(labels)},
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512,
        "model_type": "bert",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "transformers_version": "4.36.2",
        "type_vocab_size": 2,
        "use_cache": True,
        "vocab_size": vocab,
    }


def score_all(tok, models, pairs):
    """pairs: (tag, query, passage, max_length) -> golden dicts; models: name -> model."""
    out = []
    for i, (tag, a, b, ml) in enumerate(pairs):
        g = {"id": i, "tag": tag, "query": a, "passage": b, "max_length": ml}
        for rule in ("fast", "slow"):
            ids, types = tok.encode_pair(a, b, ml, rule)
            assert len(ids) <= ml
            with torch.no_grad():
                t = [torch.tensor([ids]), torch.tensor([types]), torch.ones((1, len(ids)), dtype=torch.long)]
                logits = models["f32"](*t)[0].tolist()
                logits64 = models["f64"](*t)[0].tolist()
            e = {"input_ids": ids, "token_type_ids": types, "logits": logits, "logits_f64": logits64}
            if rule == "fast":
                g.update(e)
            elif ids != g["input_ids"]:
                g["slow"] = e
        g["untruncated_len"] = [len(tok.ids(a)), len(tok.ids(b))]
        out.append(g)
    return out


def report(tok, models, golden, c, tensors):
    """The padded batch agrees with the single pairs; plausible mistakes move the logits far more
    than the 1e-5 tolerance."""
    seqs = [(g["input_ids"], g["token_type_ids"]) for g in golden]
    want = torch.tensor([g["logits"] for g in golden])
    with torch.no_grad():
        got = models["f32"](*batch(seqs))
        print("  padded batch of %d vs one at a time: max abs diff %.3g" % (len(seqs), (got - want).abs().max()))
        print("  float32 vs float64 reference: max abs diff %.3g" %
              max(abs(x - y) for g in golden for x, y in zip(g["logits"], g["logits_f64"])))
        wrong = {
            "tanh GELU": load_model(c, tensors, torch.float32, gelu="tanh")(*batch(seqs)),
            "no tanh in the pooler": load_model(c, tensors, torch.float32, tanh=False)(*batch(seqs)),
        }
        ids, types, mask = batch(seqs)
        wrong["token types all 0"] = models["f32"](ids, torch.zeros_like(types), mask)
    for name, w in wrong.items():
        print("  %s would move the logits by up to %.3g" % (name, (w - want).abs().max()))
    differ = [g["tag"] for g in golden if "slow" in g]
    if differ:
        worst = max(abs(x - y) for g in golden if "slow" in g for x, y in zip(g["logits"], g["slow"]["logits"]))
        print("  slow vs fast truncation differ in %d cases (%s): logits by up to %.3g" % (len(differ), ", ".join(differ), worst))


def write_fixture(out, name, c, tensors, vocab_src, vocab_link, golden, extra_config):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = dict(c)
    cfg.update(extra_config)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    vp = os.path.join(d, "vocab.txt")
    if os.path.lexists(vp):
        os.remove(vp)
    if vocab_link:
        os.symlink(vocab_src, vp)
    else:
        with open(vp, "w", encoding="utf-8") as f:
            f.write(vocab_src)
    for extra in ("tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(FIXTURES, "e5-tiny", extra), encoding="utf-8") as f:
            data = f.read()
        with open(os.path.join(d, extra), "w", encoding="utf-8") as f:
            f.write(data)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    with open(os.path.join(d, "golden.jsonl"), "w", encoding="utf-8") as f:
        for g in golden:
            f.write(json.dumps(g, ensure_ascii=False) + "\n")
    print("wrote %s: %d pairs, model.safetensors %d bytes" % (d, len(golden), os.path.getsize(os.path.join(d, "model.safetensors"))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=FIXTURES)
    a = ap.parse_args()
    torch.manual_seed(0)
    vocab_path = os.path.join(FIXTURES, "e5-tiny", "vocab.txt")
    tok = BertTokenizer(vocab_path)
    check_tokenizer(tok)
    n_vocab = len(tok.vocab)

    # xenc-tiny: 1 label, ms-marco style config; word embeddings in F16 keep the file small
    c = base_config(8, 2, 2, 256, n_vocab, 1)
    tensors = make_weights(c, np.random.default_rng(14), f16_words=True)
    models = {"f32": load_model(c, tensors, torch.float32), "f64": load_model(c, tensors, torch.float64)}
    golden = score_all(tok, models, cases())
    print("xenc-tiny:")
    report(tok, models, golden, c, tensors)
    write_fixture(a.out, "xenc-tiny", c, tensors, "../e5-tiny/vocab.txt", True, golden,
                  {"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"})

    # xenc-tiny-3labels: 3 labels, no activation named (CrossEncoder: Identity), a 3000-line vocabulary
    with open(vocab_path, encoding="utf-8") as f:
        lines = f.readlines()[:3000]
    small = "".join(lines)
    tmp = os.path.join(a.out, ".vocab3000.txt")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(small)
    tok3 = BertTokenizer(tmp)
    os.remove(tmp)
    c3 = base_config(8, 1, 2, 64, len(lines), 3)
    tensors3 = make_weights(c3, np.random.default_rng(15), f16_words=False)
    models3 = {"f32": load_model(c3, tensors3, torch.float32), "f64": load_model(c3, tensors3, torch.float64)}
    picked = [x for x in cases() if x[0] in ("english", "empty-passage", "accents", "trunc-both-tie-32",
                                              "trunc-both-passage-longer-32")]
    golden3 = score_all(tok3, models3, picked)
    print("xenc-tiny-3labels:")
    report(tok3, models3, golden3, c3, tensors3)
    write_fixture(a.out, "xenc-tiny-3labels", c3, tensors3, small, False, golden3, {})


if __name__ == "__main__":
    main()
