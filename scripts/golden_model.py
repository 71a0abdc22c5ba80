#!/usr/bin/python3
"""golden_model.py - golden data for the llmsys GPT from an independent PyTorch model.

Builds the `tiny` config (see src/model/config.c) in PyTorch (float64), fills every
parameter from a formula the C test recomputes exactly (integer splitmix64 hashing, so no
weight file is needed), runs one batch with some targets ignored (-1), and writes the
tokens, targets, logits, loss and the gradient of every parameter to
tests/fixtures/model_golden.safetensors (float32/int32). tests/model/test_golden.c
loads it and compares the C forward/backward.

Run with Debian's python3-torch:   /usr/bin/python3 scripts/golden_model.py
Not run by CI; its output is committed.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

CFG = dict(vocab=259, n_ctx=64, n_layer=2, n_head=4, d_model=64, d_ff=256)
B, T = 2, 24
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "model_golden.safetensors")

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x):
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def formula(ti, numel, scale, offset):
    """Element j of tensor ti: offset + scale*(2u-1), u = top 24 bits of splitmix64(ti<<32 | j) / 2^24,
    evaluated in float64 and rounded to float32 (the C test does the same arithmetic)."""
    j = np.arange(numel, dtype=np.uint64)
    h = splitmix64((np.uint64(ti) << np.uint64(32)) | j)
    u = (h >> np.uint64(40)).astype(np.float64) / 16777216.0
    return (offset + scale * (2.0 * u - 1.0)).astype(np.float32)


def tensor_specs():
    V, C, Fd, L, Tc = CFG["vocab"], CFG["d_model"], CFG["d_ff"], CFG["n_layer"], CFG["n_ctx"]
    specs = [("wte", (V, C)), ("wpe", (Tc, C))]
    for l in range(L):
        specs += [(f"h.{l}.ln1.w", (C,)), (f"h.{l}.ln1.b", (C,)), (f"h.{l}.attn.qkv.w", (3 * C, C)),
                  (f"h.{l}.attn.qkv.b", (3 * C,)), (f"h.{l}.attn.proj.w", (C, C)), (f"h.{l}.attn.proj.b", (C,)),
                  (f"h.{l}.ln2.w", (C,)), (f"h.{l}.ln2.b", (C,)), (f"h.{l}.mlp.fc.w", (Fd, C)),
                  (f"h.{l}.mlp.fc.b", (Fd,)), (f"h.{l}.mlp.proj.w", (C, Fd)), (f"h.{l}.mlp.proj.b", (C,))]
    specs += [("lnf.w", (C,)), ("lnf.b", (C,))]
    return specs


def scale_offset(name, ndim):
    """Same rule as golden_params() in tests/model/test_golden.c."""
    if name.endswith("ln1.w") or name.endswith("ln2.w") or name == "lnf.w":
        return 0.2, 1.0
    if ndim == 2:
        return 0.1, 0.0
    return 0.05, 0.0


class GPT(torch.nn.Module):
    """A plain PyTorch GPT: pre-LN blocks, causal attention, tanh-GELU MLP, tied LM head."""

    def __init__(self, params):
        super().__init__()
        self.p = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v) for k, v in params.items()})

    def w(self, name):
        return self.p[name.replace(".", "_")]

    def forward(self, idx):
        Bn, Tn = idx.shape
        C, NH = CFG["d_model"], CFG["n_head"]
        hs = C // NH
        x = self.w("wte")[idx] + self.w("wpe")[:Tn][None]
        mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
        for l in range(CFG["n_layer"]):
            g = lambda s: self.w(f"h.{l}.{s}")
            h = F.layer_norm(x, (C,), g("ln1.w"), g("ln1.b"), eps=1e-5)
            qkv = F.linear(h, g("attn.qkv.w"), g("attn.qkv.b"))
            q, k, v = qkv.split(C, dim=2)
            q = q.view(Bn, Tn, NH, hs).transpose(1, 2)
            k = k.view(Bn, Tn, NH, hs).transpose(1, 2)
            v = v.view(Bn, Tn, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
            x = x + F.linear(y, g("attn.proj.w"), g("attn.proj.b"))
            h = F.layer_norm(x, (C,), g("ln2.w"), g("ln2.b"), eps=1e-5)
            h = F.gelu(F.linear(h, g("mlp.fc.w"), g("mlp.fc.b")), approximate="tanh")
            x = x + F.linear(h, g("mlp.proj.w"), g("mlp.proj.b"))
        x = F.layer_norm(x, (C,), self.w("lnf.w"), self.w("lnf.b"), eps=1e-5)
        return F.linear(x, self.w("wte"))  # tied head


def write_safetensors(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    params = {}
    for ti, (name, shape) in enumerate(tensor_specs()):
        s, o = scale_offset(name, len(shape))
        params[name] = torch.from_numpy(formula(ti, int(np.prod(shape)), s, o).reshape(shape)).double()
    model = GPT(params)
    rng = np.random.default_rng(1234)
    tokens = rng.integers(0, CFG["vocab"], size=(B, T)).astype(np.int32)
    targets = rng.integers(0, CFG["vocab"], size=(B, T)).astype(np.int32)
    targets[0, 3] = targets[1, 0] = targets[1, T - 1] = -1  # ignored positions
    logits = model(torch.from_numpy(tokens).long())
    loss = F.cross_entropy(logits.view(-1, CFG["vocab"]), torch.from_numpy(targets).long().view(-1), ignore_index=-1)
    loss.backward()
    out = [("tokens", tokens), ("targets", targets), ("loss", np.array([loss.item()], dtype=np.float32)),
           ("logits", logits.detach().numpy().astype(np.float32))]
    for name, _ in tensor_specs():
        out.append(("grad." + name, model.w(name).grad.numpy().astype(np.float32)))
    meta = {"llmsys.config": json.dumps(CFG, separators=(",", ":")), "generator": "scripts/golden_model.py",
            "torch": torch.__version__, "weights": "splitmix64 formula, see scripts/golden_model.py"}
    write_safetensors(OUT, out, meta)
    print(f"loss {loss.item():.6f}; wrote {os.path.relpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
