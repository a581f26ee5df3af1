#!/usr/bin/python3
"""int8 quality study: what decides whether an int8 encoder's top-k lists match float32's, and which
quantisation schemes change it (docs/backends/local.md, "The study"). A model of the BERT forward in
torch (python3-torch, python3-numpy) that simulates the encoder's int8 arithmetic: operands
quantised as the encoder quantises them, then multiplied dequantised in float32 (the integer sums
up to float32 rounding, ~1e-7, far below the quantisation error). The C encoder is the reference:
--check compares this model's float32 and int8 with searchgate-encode's (float32 identical top-3
for 100 %, plain int8 81.6 % against the encoder's 81.5 %). Quality only: for speed, bench_int8.c.

    /usr/bin/python3 int8_study.py --model DIR --queries Q.jsonl --index FLAT --encode BUILD/searchgate-encode
        [--gaps] [--aniso PASSAGES.jsonl] [--inputs] [--check] [--calib Q2.jsonl] [--calib-passages P.jsonl]
        [--scheme SPEC ...] [--sweep [--base SPEC]]

--gaps: the float32 score gaps at the top, plain int8's score noise, and the share of top-3 lists
kept if that noise were scaled down; --aniso: mean pairwise cosines (queries, passages, index rows);
--inputs: per layer and product, the shared part of the input and max/rms of a token row.

A scheme SPEC is comma-separated key=value pairs (defaults: plain per-channel / per-token int8):
    w=8            weight bits (8: |q| <= 127; 7: |q| <= 63)
    g=0            weight group along k (0: one scale per output channel; 128: one per 128 inputs)
    a=8            activation bits per token (0: float32 activations)
    ag=0           activation group along k (0: one scale per token row)
    clip=0         1: per-channel scale chosen to minimise the rounding MSE (grid over 0.5..1 of max)
    bc=0           bias correction of each channel's mean weight error (W_q - W) E[x]: 1 = E[x] from the
                   studied queries themselves, 2 = from other queries (--calib), 3 = from --calib passages
    ctr=0          centring: the layer's input minus the same E[x] (1, 2, 3 as bc) is quantised, W E[x] is
                   added to the bias in float32 (bias correction plus a narrower activation range)
    keep=          matrices left in float32: qkv, o, inter, out, or L3:inter (layer 3 only), L0-5:*
    bf16=          matrices run in bf16 instead (same syntax)
    asym=          matrices whose input is quantised asymmetrically per token (u8 and a zero point), e.g. out
    af=            matrices whose input stays float32 (weight-only int8 there)
    aclip=1        activations clipped at this share of each row's max|x| (on the matrices of acl=, default all)
    agsel=all      the matrices ag= applies to
    ares=          matrices whose input gets a second int8 residual term (x ~ s1 q1 + s2 q2: two products)
    rot=           matrices whose input (after centring) and weights are rotated along k by a block
                   Hadamard transform with random signs (x' = H D x, W' = W D H^T: the product is unchanged,
                   outliers are spread over the block before both are quantised)
    gptq=0         GPTQ rounding of the weights (1, 2, 3: the calibration inputs, as bc), with the
                   per-channel scales of round-to-nearest; damp=0.01 (of H's mean diagonal); gb=N: H kept
                   block-diagonal, blocks of N inputs (0: whole)
    rb=64          the rotation's block (a power of 2; the encoder's is 64; capped at k)
    res=           matrices whose weights get a second int8 residual term (w ~ s1 q1 + s2 q2)
E.g. --scheme "" (plain int8) --scheme "ctr=2,rot=all" (what the encoder runs, calibrated with --calib)
--scheme "ctr=2,rot=all,ares=out" (the split scheme) --scheme "keep=out" --scheme "a=0".
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch

TYPES = ("qkv", "o", "inter", "out")


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F16": np.float16}[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(mm[base + a:base + b], dtype=dt).astype(np.float32).reshape(info["shape"]))
    return out


def load_flat(path):
    with open(path, "rb") as f:
        head = f.read(45)
    assert head[:4] == b"IxFI", "an IndexFlatIP file"
    d, ntotal = struct.unpack("<iq", head[4:16])
    x = np.fromfile(path, dtype="<f4", offset=45, count=ntotal * d).reshape(ntotal, d)
    return torch.from_numpy(x)


def token_ids(encode, model, queries, prefix):
    out = subprocess.run([encode, "--model", model, "--ids", "--prefix", prefix], stdin=open(queries), capture_output=True,
                         check=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def c_embeddings(encode, model, queries, precision, prefix):
    out = subprocess.run([encode, "--model", model, "--precision", precision, "--prefix", prefix], stdin=open(queries),
                         capture_output=True, check=True, text=True).stdout
    return torch.tensor([json.loads(line) for line in out.splitlines() if line.strip()], dtype=torch.float32)


# ---- schemes ----

def parse_scheme(spec):
    s = {"w": 8, "g": 0, "a": 8, "ag": 0, "clip": 0, "bc": 0, "ctr": 0, "keep": "", "bf16": "", "asym": "", "af": "", "res": "", "aclip": 1.0, "acl": "all", "agsel": "all",
         "ares": "", "rot": "", "rb": 64, "gptq": 0, "damp": 0.01, "gb": 0}
    for kv in filter(None, spec.split(",")):
        k, v = kv.split("=", 1)
        assert k in s, "unknown scheme key %s" % k
        s[k] = v if k in ("keep", "bf16", "res", "asym", "af", "acl", "agsel", "ares", "rot") else float(v) if k in ("aclip", "damp") else int(v)
    return s


def matches(sel, layer, typ):
    """sel: 'qkv+out', 'L0-3:inter', 'L11:*', 'all' ('+' separates items)."""
    for item in filter(None, sel.split("+")):
        if item == "all":
            return True
        if ":" in item:
            lr, t = item.split(":")
            lo, _, hi = lr[1:].partition("-")
            lo = int(lo)
            hi = int(hi) if hi else lo
            if lo <= layer <= hi and (t == "*" or t == typ):
                return True
        elif item == typ:
            return True
    return False


def bf16(x):
    return (x.view(torch.int32) + 0x7FFF + ((x.view(torch.int32) >> 16) & 1)).bitwise_and(-65536).view(torch.float32)


def quant_rows(x, levels, group):
    """Symmetric per-row (per group of `group` columns) quantisation: (q, scale), q integers as floats."""
    n, k = x.shape
    if group and group < k:
        xg = x.reshape(n, k // group, group)
        mx = xg.abs().amax(dim=2, keepdim=True)
        sc = mx / levels
        q = torch.where(mx > 0, torch.round(xg / torch.where(mx > 0, sc, torch.ones_like(sc))), torch.zeros_like(xg))
        return q.clamp(-levels, levels), sc
    mx = x.abs().amax(dim=1, keepdim=True)
    sc = mx / levels
    q = torch.where(mx > 0, torch.round(x * torch.where(mx > 0, levels / mx, torch.zeros_like(mx))), torch.zeros_like(x))
    return q.clamp(-levels, levels), sc


def hadamard(n):
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / np.sqrt(n)


def rotation(k, block, seed=5):
    """x -> H D x per block of `block` columns (rows of a matrix are rotated alike): orthogonal."""
    gen = torch.Generator().manual_seed(seed + k)
    d = (torch.randint(0, 2, (k,), generator=gen) * 2 - 1).float()
    block = min(block, k)
    assert k % block == 0, "the rotation's block must divide k"
    h = hadamard(block)

    def f(x):
        y = (x * d).reshape(x.shape[0], k // block, block) @ h.T
        return y.reshape(x.shape[0], k)
    return f


def gptq(w, xcal, mu, rot, levels, damp, gb=0):
    """GPTQ (Frantar et al. 2022) with the per-channel scales of round-to-nearest: the columns are
    quantised in order and each one's rounding error is spread over the columns not yet quantised,
    weighted by the inverse of the calibration inputs' second moment H = X^T X (X centred, rotated)."""
    x = xcal - mu if mu is not None else xcal
    if rot is not None:
        x = rot(x)
    x = x.double()
    h = x.T @ x
    k = h.shape[0]
    if gb and gb < h.shape[0]:  # block-diagonal H: only the correlations within blocks of gb inputs
        mask = torch.block_diag(*[torch.ones(gb, gb, dtype=h.dtype)] * (h.shape[0] // gb))
        h = h * mask
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    h += damp * torch.mean(torch.diag(h)) * torch.eye(k, dtype=h.dtype)
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    w = w.double().clone()
    sc = (w.abs().amax(dim=1, keepdim=True) / levels)
    sc = torch.where(sc > 0, sc, torch.ones_like(sc))
    q = torch.zeros_like(w)
    blk = 128
    for i0 in range(0, k, blk):
        i1 = min(i0 + blk, k)
        wb = w[:, i0:i1].clone()
        eb = torch.zeros_like(wb)
        ub = u[i0:i1, i0:i1]
        for j in range(i1 - i0):
            col = wb[:, j]
            qc = torch.round(col / sc[:, 0]).clamp(-levels, levels)
            q[:, i0 + j] = qc
            err = (col - qc * sc[:, 0]) / ub[j, j]
            wb[:, j:] -= err.unsqueeze(1) * ub[j, j:].unsqueeze(0)
            eb[:, j] = err
        w[:, i1:] -= eb @ u[i0:i1, i1:]
    return q.float().reshape(w.shape[0], 1, k), sc.float().reshape(w.shape[0], 1, 1)


def quant_rows_clipped(x, levels, ratio):
    mx = x.abs().amax(dim=1, keepdim=True) * ratio
    sc = mx / levels
    q = torch.where(mx > 0, torch.round(x / torch.where(mx > 0, sc, torch.ones_like(sc))), torch.zeros_like(x))
    return q.clamp(-levels, levels), sc


def mse_scale(w, levels, group):
    """Per row (group): the clipping ratio in 0.50..1.00 of max|w| that minimises the rounding MSE."""
    n, k = w.shape
    wg = w.reshape(n, k // group, group) if group and group < k else w.reshape(n, 1, k)
    mx = wg.abs().amax(dim=2, keepdim=True)
    best = mx / levels
    best_err = None
    for r in torch.arange(1.0, 0.499, -0.01):
        sc = mx * r / levels
        q = torch.round(wg / sc).clamp(-levels, levels)
        err = ((q * sc - wg) ** 2).sum(dim=2, keepdim=True)
        if best_err is None:
            best_err = err
        else:
            better = err < best_err
            best = torch.where(better, sc, best)
            best_err = torch.where(better, err, best_err)
    return best


class QLinear:
    """One product of the encoder (weights [n, k]) under a scheme."""

    def __init__(self, w, b, mode, s, xmean=None, xcal=None):
        self.mode, self.s, self.b = mode, s, b.clone()
        self.w = w
        if mode == "bf16":
            self.wq = bf16(w)
            return
        if mode == "f32":
            return
        levels = 63 if s["w"] == 7 else 127
        g = s["g"]
        k = w.shape[1]
        self.rot = None
        if s.get("_rot"):
            self.rot = rotation(k, s["rb"])
            w = self.rot(w)  # W D H^T: each row rotated like an input row
        if xcal is not None and s["gptq"]:
            q, sc = gptq(w, xcal, xmean if s["ctr"] else None, self.rot, levels, s["damp"], s["gb"])
        elif s["clip"]:
            sc = mse_scale(w, levels, g)
            wg = w.reshape(w.shape[0], -1, g if g and g < k else k)
            q = torch.round(wg / sc).clamp(-levels, levels)
        else:
            q, sc = quant_rows(w, levels, g)
            if sc.dim() == 2:
                q, sc = q.reshape(w.shape[0], 1, k), sc.reshape(w.shape[0], 1, 1)
        deq = (q * sc).reshape(w.shape)
        if s.get("_res_here"):
            r = w - deq
            q2, sc2 = quant_rows(r, levels, g)
            deq = deq + (q2.reshape(w.shape[0], -1, g if g and g < k else k) * sc2.reshape(w.shape[0], -1, 1)).reshape(w.shape)
        self.deq = deq
        self.mu = None
        if s["bc"] and xmean is not None:
            # E[y_q - y] = (W_q - W) E[x]: subtract it from the bias
            self.b = self.b - (deq - w) @ xmean
        if s["ctr"] and xmean is not None:
            # y = W_q (x - mu) + (W mu + b): only the centred input meets the quantised weights
            self.mu = xmean
            self.b = self.b + self.w @ xmean

    def __call__(self, x):
        if self.mode == "f32":
            return x @ self.w.T + self.b
        if self.mode == "bf16":
            return bf16(x) @ self.wq.T + self.b
        s = self.s
        if self.mu is not None:
            x = x - self.mu
        if self.rot is not None:
            x = self.rot(x)
        if s["a"] == 0 or s.get("_af"):
            return x @ self.deq.T + self.b
        levels_a = 127 if s["a"] == 8 else (1 << (s["a"] - 1)) - 1
        if s.get("_asym"):
            lo = x.amin(dim=1, keepdim=True)
            hi = x.amax(dim=1, keepdim=True)
            sc = (hi - lo) / 255
            zp = torch.round(-lo / sc)
            q = torch.round(x / sc + zp).clamp(0, 255)
            return ((q - zp) * sc) @ self.deq.T + self.b
        if s["_aclip"] < 1.0:
            q, sc = quant_rows_clipped(x, levels_a, s["_aclip"])
        else:
            q, sc = quant_rows(x, levels_a, s["_ag"])
        xq = (q * sc).reshape(x.shape)
        if s["_ares"]:
            q2, sc2 = quant_rows(x - xq, levels_a, 0)
            xq = xq + q2 * sc2
        return xq @ self.deq.T + self.b


class Encoder:
    def __init__(self, t, cfg, scheme, xmeans=None, xcals=None):
        self.t, self.cfg = t, cfg
        H = cfg["hidden_size"]
        self.H, self.heads, self.eps = H, cfg["num_attention_heads"], cfg["layer_norm_eps"]
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = "encoder.layer.%d." % i
            ws = {
                "qkv": (torch.cat([t[p + "attention.self.%s.weight" % n] for n in ("query", "key", "value")]),
                        torch.cat([t[p + "attention.self.%s.bias" % n] for n in ("query", "key", "value")])),
                "o": (t[p + "attention.output.dense.weight"], t[p + "attention.output.dense.bias"]),
                "inter": (t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"]),
                "out": (t[p + "output.dense.weight"], t[p + "output.dense.bias"]),
            }
            L = {}
            for typ, (w, b) in ws.items():
                if scheme is None or matches(scheme["keep"], i, typ):
                    mode = "f32"
                elif matches(scheme["bf16"], i, typ):
                    mode = "bf16"
                else:
                    mode = "int8"
                s = dict(scheme or {})
                if scheme is not None:
                    s["_res_here"] = matches(scheme["res"], i, typ)
                    s["_asym"] = matches(scheme["asym"], i, typ)
                    s["_af"] = matches(scheme["af"], i, typ)
                    s["_aclip"] = scheme["aclip"] if matches(scheme["acl"], i, typ) else 1.0
                    s["_ag"] = scheme["ag"] if matches(scheme["agsel"], i, typ) else 0
                    s["_ares"] = matches(scheme["ares"], i, typ)
                    s["_rot"] = matches(scheme["rot"], i, typ)
                xm = xmeans[i][typ] if xmeans is not None else None
                xc = xcals[i][typ] if xcals is not None else None
                L[typ] = QLinear(w, b, mode, s, xm, xc) if scheme is not None else QLinear(w, b, "f32", {})
            L["ln1"] = (t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"])
            L["ln2"] = (t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"])
            self.layers.append(L)

    def ln(self, x, gb):
        return torch.nn.functional.layer_norm(x, (self.H,), gb[0], gb[1], self.eps)

    def forward_group(self, ids, record=None):
        """ids: [B, L] of one length; returns the mean-pooled, normalised [B, H] embeddings."""
        t, H = self.t, self.H
        B, Ls = ids.shape
        x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.token_type_embeddings.weight"][0] + \
            t["embeddings.position_embeddings.weight"][:Ls]
        x = self.ln(x, (t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])).reshape(B * Ls, H)
        dh = H // self.heads
        for i, L in enumerate(self.layers):
            if record is not None:
                record[i]["qkv"].append(x)
            qkv = L["qkv"](x).reshape(B, Ls, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
            att = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) / np.sqrt(dh), dim=-1) @ qkv[2]
            ctx = att.permute(0, 2, 1, 3).reshape(B * Ls, H)
            if record is not None:
                record[i]["o"].append(ctx)
            x = self.ln(L["o"](ctx) + x, L["ln1"])
            if record is not None:
                record[i]["inter"].append(x)
            inter = torch.nn.functional.gelu(L["inter"](x))
            if record is not None:
                record[i]["out"].append(inter)
            x = self.ln(L["out"](inter) + x, L["ln2"])
        e = x.reshape(B, Ls, H).mean(dim=1)
        return e / e.norm(dim=1, keepdim=True)

    def encode(self, seqs, record=None):
        out = torch.empty(len(seqs), self.H)
        by_len = {}
        for i, s in enumerate(seqs):
            by_len.setdefault(len(s), []).append(i)
        with torch.no_grad():
            for _, idx in sorted(by_len.items()):
                out[idx] = self.forward_group(torch.tensor([seqs[i] for i in idx]), record)
        return out


def input_means(t, cfg, seqs):
    """Per layer and product: the mean input row over the queries' tokens (for bias correction)."""
    rec = [{k: [] for k in TYPES} for _ in range(cfg["num_hidden_layers"])]
    Encoder(t, cfg, None).encode(seqs, rec)
    return [{k: torch.cat(v).mean(dim=0) for k, v in r.items()} for r in rec]


def input_rows(t, cfg, seqs):
    """Per layer and product: every input row over the sequences' tokens (GPTQ's calibration)."""
    rec = [{k: [] for k in TYPES} for _ in range(cfg["num_hidden_layers"])]
    Encoder(t, cfg, None).encode(seqs, rec)
    return [{k: torch.cat(v) for k, v in r.items()} for r in rec]


def input_stats(t, cfg, seqs):
    """How anisotropic each product's input is: |E[x]|^2 / E[|x|^2] over the queries' tokens, and the
    mean pairwise cosine of the token rows."""
    rec = [{k: [] for k in TYPES} for _ in range(cfg["num_hidden_layers"])]
    Encoder(t, cfg, None).encode(seqs, rec)
    print("inputs of the products: share of E|x|^2 in |E[x]|^2 (the common part of every token), per layer")
    for typ in TYPES:
        row = []
        for i, r in enumerate(rec):
            x = torch.cat(r[typ])
            mu = x.mean(dim=0)
            row.append("%.2f" % (mu.dot(mu) / (x * x).sum(dim=1).mean()).item())
        print("  %-6s %s" % (typ, " ".join(row)))
    print("max|x - E[x]| / rms(x - E[x]) of a token row (what per-token quantisation pays for), per layer")
    for typ in TYPES:
        row = []
        for i, r in enumerate(rec):
            x = torch.cat(r[typ])
            c = x - x.mean(dim=0)
            row.append("%.1f" % (c.abs().amax(dim=1) / c.pow(2).mean(dim=1).sqrt()).mean().item())
        print("  %-6s %s" % (typ, " ".join(row)))


# ---- measures ----

def topk(index, e, k=10):
    sc = []
    ids = []
    for s in range(0, e.shape[0], 250):
        v, i = torch.topk(e[s:s + 250] @ index.T, k, dim=1)
        sc.append(v)
        ids.append(i)
    return torch.cat(sc), torch.cat(ids)


def agreement(ref_ids, ids):
    n = ref_ids.shape[0]
    out = {}
    for k in (1, 3, 10):
        same = (ref_ids[:, :k] == ids[:, :k]).all(dim=1).float().mean().item()
        rec = sum(len(set(ref_ids[i, :k].tolist()) & set(ids[i, :k].tolist())) for i in range(n)) / (n * k)
        out[k] = (same, rec)
    return out


def cosines(a, b):
    return (a * b).sum(dim=1)


def report(name, ref, e, ref_ids, index):
    c = cosines(ref, e)
    _, ids = topk(index, e)
    ag = agreement(ref_ids, ids)
    print("%-44s cos min %.6f mean %.6f | 1-err %.2e | top1 %5.1f%% top3 %5.1f%% top10 %5.1f%% | r@3 %.4f" %
          (name, c.min().item(), c.mean().item(), (1 - c).mean().item(), 100 * ag[1][0], 100 * ag[3][0], 100 * ag[10][0], ag[3][1]),
          flush=True)
    return ag[3][0]


def gaps(index, e, ref_ids=None, other=None):
    sc, _ = topk(index, e, 11)
    d = sc[:, :-1] - sc[:, 1:]
    q = torch.tensor([0.01, 0.05, 0.1, 0.25, 0.5])
    print("float32 scores: top-1 mean %.4f (sd %.4f), rank 10 mean %.4f; all-row score sd %.4f" %
          (sc[:, 0].mean(), sc[:, 0].std(), sc[:, 9].mean(), (e[:50] @ index[:20000].T).std()))
    for r in (0, 1, 2, 9):
        qs = torch.quantile(d[:, r], q)
        print("  gap rank %d-%d: median %.5f, mean %.5f; quantiles 1/5/10/25%%: %s; relative to top-1 score: median %.4f" %
              (r + 1, r + 2, d[:, r].median(), d[:, r].mean(), " ".join("%.5f" % v for v in qs[:4]),
               (d[:, r] / sc[:, 0]).median()))
    m3 = d[:, :3].min(dim=1).values
    print("  smallest of the gaps 1-2, 2-3, 3-4 per query: median %.5f, quantiles 1/5/10/25%%: %s" %
          (m3.median(), " ".join("%.5f" % v for v in torch.quantile(m3, q)[:4])))
    if other is not None:
        # score noise: the int8 embedding's score of the same rows minus float32's
        _, ids = topk(index, e, 10)
        rows = index[ids[:, :4]]
        noise = torch.einsum("qkd,qd->qk", rows, other - e)
        dn = noise[:, :-1] - noise[:, 1:]
        print("  score noise of the other embedding at ranks 1-4: sd %.6f; sd of the pairwise difference %.6f; "
              "gap / that sd median %.1f" % (noise.std(), dn.std(), (d[:, :3].min(dim=1).values / dn.std()).median()))
        swaps = (dn + d[:, :3] < 0).any(dim=1).float().mean()
        print("  share of queries where the noise reverses one of the gaps 1-2, 2-3, 3-4: %.1f%%" % (100 * swaps))
        curve = []
        for lam in (1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.125, 0.09, 0.0625):
            same = 1 - (lam * dn + d[:, :3] < 0).any(dim=1).float().mean().item()
            curve.append("x%.3g: %.1f%%" % (lam, 100 * same))
        print("  top-3 kept (gaps 1-4 only) with the noise scaled by: " + ", ".join(curve))


def anisotropy(name, e):
    g = e @ e.T
    n = e.shape[0]
    off = (g.sum() - g.diag().sum()) / (n * (n - 1))
    mu = e.mean(dim=0)
    print("%s: mean pairwise cosine %.4f; |mean vector| %.4f (1 = all identical); share of variance in the top "
          "principal component of the centred set %.3f" % (name, off, mu.norm(),
                                                             (torch.linalg.svdvals(e - mu)[0] ** 2 / ((e - mu) ** 2).sum())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--encode", required=True, help="BUILD/searchgate-encode (token ids, and the C embeddings of --check)")
    ap.add_argument("--prefix", default="query: ")
    ap.add_argument("--gaps", action="store_true", help="the float32 score gaps at the top and the int8 score noise")
    ap.add_argument("--aniso", help="passages (one JSON string a line): mean pairwise cosine of queries and passages")
    ap.add_argument("--check", action="store_true", help="this model against the C encoder (fp32 and int8)")
    ap.add_argument("--scheme", action="append", default=[])
    ap.add_argument("--sweep", action="store_true", help="one matrix type / layer range at a time in int8, the rest float32")
    ap.add_argument("--base", default="", help="the scheme the sweep varies (default: the plain one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib", help="other queries (one JSON string a line): the E[x] of bc=2 / ctr=2")
    ap.add_argument("--calib-passages", help="passages: the E[x] of bc=3 / ctr=3 (encoded with \"passage: \")")
    ap.add_argument("--inputs", action="store_true", help="per layer and product: how much of the input is its mean")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t = load_safetensors(os.path.join(a.model, "model.safetensors"))
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    seqs = token_ids(a.encode, a.model, a.queries, a.prefix)
    index = load_flat(a.index)
    print("%d queries (%.1f tokens each), %d x %d index" % (len(seqs), sum(map(len, seqs)) / len(seqs), index.shape[0],
                                                          index.shape[1]), flush=True)
    ref = Encoder(t, cfg, None).encode(seqs)
    _, ref_ids = topk(index, ref)
    shipped = Encoder(t, cfg, parse_scheme("")).encode(seqs)
    if a.check:
        c32 = c_embeddings(a.encode, a.model, a.queries, "fp32", a.prefix)
        c8 = c_embeddings(a.encode, a.model, a.queries, "int8", a.prefix)
        report("C float32 vs this model's float32", ref, c32, ref_ids, index)
        report("C int8 vs this model's float32", ref, c8, ref_ids, index)
        report("C int8 vs this model's int8", shipped, c8, topk(index, shipped)[1], index)
        report("this model's int8 vs C float32", c32, shipped, topk(index, c32)[1], index)
    if a.gaps:
        gaps(index, ref, ref_ids, shipped)
    if a.aniso:
        anisotropy("queries", ref)
        psg = token_ids(a.encode, a.model, a.aniso, "passage: ")
        anisotropy("passages", Encoder(t, cfg, None).encode(psg))
        anisotropy("index rows (first 2000)", index[:2000])
    calib = {1: seqs}
    if a.calib:
        calib[2] = token_ids(a.encode, a.model, a.calib, a.prefix)
    if a.calib_passages:
        calib[3] = token_ids(a.encode, a.model, a.calib_passages, "passage: ")
    means = {}
    if a.inputs:
        input_stats(t, cfg, seqs)
    specs = list(a.scheme)
    if a.sweep:
        nl = cfg["num_hidden_layers"]
        third = nl // 3
        base = a.base + "," if a.base else ""
        sweep = ["", "a=0"]
        sweep += ["keep=" + "+".join(x for x in TYPES if x != typ) for typ in TYPES]  # one type alone in int8
        sweep += ["keep=" + typ for typ in TYPES]  # all but one type
        sweep += ["keep=L%d-%d:*" % (third, nl - 1), "keep=L0-%d:*+L%d-%d:*" % (third - 1, 2 * third, nl - 1),
                  "keep=L0-%d:*" % (2 * third - 1)]  # early, middle, late layers alone in int8
        specs += [(base + x).strip(",") for x in sweep]
    for spec in specs:
        s = parse_scheme(spec)
        src = s["bc"] or s["ctr"]
        if src and src not in means:
            means[src] = input_means(t, cfg, calib[src])
        if s["gptq"] and ("rows", s["gptq"]) not in means:
            means[("rows", s["gptq"])] = input_rows(t, cfg, calib[s["gptq"]])
        e = Encoder(t, cfg, s, means.get(src), means.get(("rows", s["gptq"]))).encode(seqs)
        report("int8 [%s]" % (spec or "plain"), ref, e, ref_ids, index)


if __name__ == "__main__":
    sys.exit(main())
