#!/usr/bin/env python3
"""gpu_layer_profile.py - time one transformer layer of a catalog model on a CUDA GPU with
PyTorch and write the times as an llmsys device profile (docs/plan-format.md).

The planner prices a GPU from its datasheet (src/plan/cost.c); `llmsys profile` measures a CPU
stage. This script measures the GPU side the way `llmsys profile` measures a CPU: one layer of
the model in data/models.json at each bit width it has a kernel for, prefill of a micro-batch
from position 0 and decode of one token against a KV cache, plus the embedding + LM head. Its
output plugs into a cluster file (`"profile": FILE`), and `build/bench_costmodel` compares it
with the analytical model of the same GPU.

Prefill runs eagerly; decode is captured as a CUDA graph and replayed, as servers run it (rows
keep the eager time too, `eager_seconds`). Kernels (what PyTorch ships; no custom kernels):
  16  fp16 GEMMs (cuBLAS), scaled-dot-product attention (FlashAttention-style backends)
   8  W8A8: per-token int8 activations (quantized inside the timed region), per-channel int8
      weights, torch._int_mm (cuBLASLt int8 GEMM, int32 out), rescale to fp16
   4  weight-only int4, group 128 (torch._weight_int4pack_mm, the "tinygemm" kernel), bf16
      activations; skipped with a note when this PyTorch lacks it
   3  no kernel: not measured (the planner then never gives this device 3-bit layers)

Needs a CUDA GPU and PyTorch. It is not part of the build or the tests (CI has no GPU).
    python3 scripts/gpu_layer_profile.py --model llama-3-70b --out h200-llama-3-70b.json
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die(msg):
    print("gpu_layer_profile: " + msg, file=sys.stderr)
    sys.exit(1)


def load_arch(path, name):
    with open(path) as f:
        cat = json.load(f)
    for m in cat["models"]:
        if m["name"] == name:
            a = dict(m)
            a.setdefault("n_kv_head", a["n_head"])
            a.setdefault("gated", False)
            return a
    die("unknown model '%s' (known: %s)" % (name, ", ".join(m["name"] for m in cat["models"])))


def parse_ints(s):
    try:
        v = [int(t) for t in s.split(",")]
    except ValueError:
        die("'%s' is not a list of integers" % s)
    if not v or min(v) <= 0:
        die("'%s': every value must be > 0" % s)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a model of data/models.json")
    ap.add_argument("--out", required=True, help="the profile to write")
    ap.add_argument("--models-json", default=os.path.join(ROOT, "data", "models.json"))
    ap.add_argument("--bits", default="16,8,4")
    ap.add_argument("--prefill-batch", default="1,2,4,8,16,32")
    ap.add_argument("--prefill-seq", default="128,512")
    ap.add_argument("--decode-batch", default="1,4,16,32,64")
    ap.add_argument("--decode-ctx", default="128,512,1024")
    ap.add_argument("--seconds", type=float, default=0.4, help="timed seconds per point (at least 5 runs)")
    ap.add_argument("--layers", type=int, default=2, help="distinct layers run in turn (weights not in cache)")
    ap.add_argument("--link-GBps", type=float, default=450, help="GPU-to-GPU link, one direction (NVLink 4.0: 450)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        die("no CUDA device (this script measures a GPU)")
    dev = torch.device("cuda")
    torch.manual_seed(1)
    a = load_arch(args.models_json, args.model)
    d, H, Hkv, f, V = a["d_model"], a["n_head"], a["n_kv_head"], a["d_ff"], a["vocab"]
    hd, kv = d // H, d // H * Hkv
    bits_list = parse_ints(args.bits)
    for b in bits_list:
        if b not in (16, 8, 4):
            die("--bits: %d has no kernel here (16, 8, 4)" % b)
    pb, ps = parse_ints(args.prefill_batch), parse_ints(args.prefill_seq)
    db, dc = parse_ints(args.decode_batch), parse_ints(args.decode_ctx)

    def graphed(fn):
        """fn captured as a CUDA graph (as servers run decode: no launch gaps), or None"""
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            return g.replay
        except RuntimeError as e:
            print("graph capture failed (%s): eager only" % str(e).split("\n")[0][:200], flush=True)
            return None

    def timeit(fn):
        """Median seconds of fn() over >= 5 runs and about --seconds, after warm-up; CUDA events."""
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t0, 1e-6)
        reps = max(5, min(200, int(args.seconds / one)))
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in ev) / 1e3

    # ---- ceilings measured here (the datasheet's are leads): copy bandwidth, GEMM rates
    ceil = {}
    n = 1 << 28  # 512 MiB of fp16 each way
    src = torch.randn(n, device=dev, dtype=torch.float16)
    dst = torch.empty_like(src)
    ceil["copy_GBps"] = 2 * n * 2 / timeit(lambda: dst.copy_(src)) / 1e9
    del src, dst
    m = 8192
    x16 = torch.randn(m, m, device=dev, dtype=torch.float16)
    w16 = torch.randn(m, m, device=dev, dtype=torch.float16)
    ceil["fp16_gemm_tflops"] = 2 * m**3 / timeit(lambda: x16 @ w16) / 1e12
    del x16, w16
    try:
        x8 = torch.randint(-127, 128, (m, m), device=dev, dtype=torch.int8)
        w8 = torch.randint(-127, 128, (m, m), device=dev, dtype=torch.int8)
        ceil["int8_gemm_tops"] = 2 * m**3 / timeit(lambda: torch._int_mm(x8, w8.t())) / 1e12
        del x8, w8
    except (RuntimeError, AttributeError) as e:
        print("int8 GEMM ceiling: not measured (%s)" % str(e).split("\n")[0][:200], flush=True)

    # ---- linear layers per format: fn(x) -> x @ W^T in the activation dtype
    checks = {}

    def make_linear(n_out, n_in, bits):
        """fn(x) = x @ W^T in the format of `bits`; checked once against the dequantized W"""
        w = torch.randn(n_out, n_in, device=dev, dtype=torch.float16) / math.sqrt(n_in)
        if bits == 16:
            fn, ref, dt = (lambda x: F.linear(x, w)), w, torch.float16
        elif bits == 8:
            sw = w.abs().amax(dim=1).float() / 127
            wq = (w.float() / sw[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous()
            ref, dt = (wq.float() * sw[:, None]).half(), torch.float16

            def fn(x):
                rows = x.shape[0]
                sx = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-6) / 127
                xq = (x / sx).round().clamp(-127, 127).to(torch.int8)
                if rows <= 16:  # torch._int_mm takes more than 16 rows: pad to a tile
                    xq = F.pad(xq, (0, 0, 0, 32 - rows))
                y = torch._int_mm(xq, wq.t())[:rows]  # int32: would overflow fp16
                return (y.float() * sx * sw).half()
        else:
            group, tiles = 128, 8
            wf = w.float().reshape(n_out, n_in // group, group)
            lo, hi = wf.amin(dim=2), wf.amax(dim=2)
            scale = ((hi - lo) / 15).clamp(min=1e-6)
            q = ((wf - lo[..., None]) / scale[..., None]).round().clamp(0, 15)
            sc, zero = scale.bfloat16().float(), (lo + 8 * scale).bfloat16().float()
            ref = ((q - 8) * sc[..., None] + zero[..., None]).reshape(n_out, n_in)  # the kernel's dequantization
            q = q.to(torch.uint8).reshape(n_out, n_in)
            packed = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).contiguous(), tiles)
            sz = torch.stack([sc, zero], dim=2).transpose(0, 1).contiguous().to(torch.bfloat16)
            fn, dt = (lambda x: torch._weight_int4pack_mm(x, packed, group, sz)), torch.bfloat16
        # the format's kernel against a float32 product with its own dequantized weights
        xs = torch.randn(37, n_in, device=dev, dtype=dt)
        want = xs.float() @ ref.float().t()
        err = ((fn(xs).float() - want).norm() / want.norm()).item()
        tol = 2e-2 if bits == 8 else 1e-2  # int8 activations round; fp16/bf16 accumulate
        if not err < tol:
            raise RuntimeError("%dx%d kernel differs from its reference by %.3g (tolerance %g)" % (n_out, n_in, err, tol))
        checks[str(bits)] = max(checks.get(str(bits), 0.0), err)
        del ref, xs, want
        return fn

    def norm(x, g):
        return F.rms_norm(x, (d,), g) if a["gated"] else F.layer_norm(x, (d,), g)

    class Layer:
        def __init__(self, bits):
            self.dtype = torch.bfloat16 if bits == 4 else torch.float16
            self.g1 = torch.ones(d, device=dev, dtype=self.dtype)
            self.g2 = torch.ones(d, device=dev, dtype=self.dtype)
            self.qkv = make_linear(d + 2 * kv, d, bits)
            self.o = make_linear(d, d, bits)
            self.up = make_linear(2 * f if a["gated"] else f, d, bits)
            self.down = make_linear(d, f, bits)

        def mlp(self, h):
            u = self.up(h)
            if a["gated"]:
                g, u = u.chunk(2, dim=-1)
                return self.down(F.silu(g) * u)
            return self.down(F.gelu(u, approximate="tanh"))

        def prefill(self, x, B, S):
            """x: (B*S, d) -> (B*S, d); causal attention over the S new tokens"""
            qkv = self.qkv(norm(x, self.g1)).view(B, S, H + 2 * Hkv, hd).transpose(1, 2)
            q, k, v = qkv.split([H, Hkv, Hkv], dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
            x = x + self.o(y.transpose(1, 2).reshape(B * S, d))
            return x + self.mlp(norm(x, self.g2))

        def decode(self, x, kc, vc, ctx):
            """x: (B, d); kc, vc: (B, Hkv, ctx+1, hd), the new token written at ctx"""
            B = x.shape[0]
            qkv = self.qkv(norm(x, self.g1)).view(B, 1, H + 2 * Hkv, hd).transpose(1, 2)
            q, k, v = qkv.split([H, Hkv, Hkv], dim=1)
            kc[:, :, ctx : ctx + 1].copy_(k)
            vc[:, :, ctx : ctx + 1].copy_(v)
            y = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=Hkv != H)
            x = x + self.o(y.transpose(1, 2).reshape(B, d))
            return x + self.mlp(norm(x, self.g2))

    prof = {"format": "llmsys-profile", "version": 1,
            "device": "cuda:" + torch.cuda.get_device_name(0), "threads": 1, "act_bytes": 2,
            "layers_timed": args.layers,
            "model": {"name": a["name"], "vocab": V, "n_ctx": a["n_ctx"], "n_layer": a["n_layer"], "n_head": H,
                      "n_kv_head": Hkv, "d_model": d, "d_ff": f, "gated": a["gated"]},
            "software": {"torch": torch.__version__, "cuda": torch.version.cuda},
            "ceilings": ceil, "kernel_rel_err": checks, "skipped": {}, "prefill": [], "decode": []}
    t_start = time.time()
    def measure(bits):
        """(prefill rows, decode rows) of one format; raises when its kernel is missing or wrong"""
        layers = [Layer(bits) for _ in range(args.layers)]
        dt, rp, rd = layers[0].dtype, [], []
        for B in pb:
            for S in ps:
                x = torch.randn(B * S, d, device=dev, dtype=dt)

                def run():
                    for L in layers:
                        L.prefill(x, B, S)

                sec = timeit(run) / len(layers)
                rp.append({"bits": bits, "batch": B, "seq": S, "seconds": sec})
                print("bits %2d prefill batch %3d seq %5d  %9.3f ms" % (bits, B, S, sec * 1e3), flush=True)
        for B in db:
            for C in dc:
                x = torch.randn(B, d, device=dev, dtype=dt)
                caches = [(torch.randn(B, Hkv, C + 1, hd, device=dev, dtype=dt),
                           torch.randn(B, Hkv, C + 1, hd, device=dev, dtype=dt)) for _ in layers]

                def run():
                    for L, (kc, vc) in zip(layers, caches):
                        L.decode(x, kc, vc, C)

                eager = timeit(run) / len(layers)
                replay = graphed(run)
                sec = timeit(replay) / len(layers) if replay else eager
                rd.append({"bits": bits, "batch": B, "ctx": C, "seconds": sec, "eager_seconds": eager})
                print("bits %2d decode  batch %3d ctx %5d  %9.3f ms (eager %.3f)" % (bits, B, C, sec * 1e3, eager * 1e3),
                      flush=True)
                del replay
        return rp, rd

    for bits in bits_list:
        try:
            rp, rd = measure(bits)
        except (RuntimeError, AttributeError, TypeError) as e:  # a kernel this PyTorch lacks, or wrong
            prof["skipped"][str(bits)] = str(e).split("\n")[0][:200]
            print("bits %d: skipped (%s)" % (bits, prof["skipped"][str(bits)]), flush=True)
            rp, rd = [], []
        prof["prefill"] += rp
        prof["decode"] += rd
        torch.cuda.empty_cache()

    # ---- embedding + final norm + LM head (fp16), as `llmsys profile` times the head
    emb = torch.randn(V, d, device=dev, dtype=torch.float16) * 0.02
    g = torch.ones(d, device=dev, dtype=torch.float16)
    hp, hdec = [], []
    for B in pb:
        for S in ps:
            tok = torch.randint(0, V, (B, S), device=dev)

            def head():
                h = F.embedding(tok, emb)[:, -1]
                return F.linear(norm(h, g), emb)

            hp.append({"batch": B, "seq": S, "seconds": timeit(head)})
    for B in db:
        tok = torch.randint(0, V, (B, 1), device=dev)

        def head1():
            return F.linear(norm(F.embedding(tok, emb)[:, -1], g), emb)

        hdec.append({"batch": B, "seconds": timeit(head1)})
    prof["head"] = {"prefill": hp, "decode": hdec}
    ap_link = [args.link_GBps * 1e9, "one direction: given (--link-GBps), not measured (one GPU)"]
    prof["link"] = {"latency_s": 1e-5, "bandwidth_Bps": ap_link[0], "transport": ap_link[1]}
    prof["measure_s"] = time.time() - t_start
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fo:
        json.dump(prof, fo, indent=1)
        fo.write("\n")
    os.replace(tmp, args.out)
    print("wrote %s (%d prefill, %d decode rows; ceilings %s)" % (args.out, len(prof["prefill"]), len(prof["decode"]),
          ", ".join("%s %.0f" % kv_ for kv_ in ceil.items())), flush=True)


if __name__ == "__main__":
    main()
