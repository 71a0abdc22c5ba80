#!/usr/bin/env python3
"""fuzz_seeds.py - writes the seed corpora of the libFuzzer targets (fuzz/corpus/<target>/):
small hand-made inputs in each format, plus copies of real configs the repository carries
(data/clusters, examples). Run from the repository root; rewrites the seed_* files only, so
regression inputs (regress_*) added after a fix stay."""
import json
import os
import shutil
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


def st_file(tensors, meta):
    """A safetensors file: u64 header length, JSON header, data (no checksum key)."""
    hdr, blob = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def safetensors():
    f32 = lambda n: struct.pack("<%df" % n, *[0.25 * i for i in range(n)])
    put("fuzz_safetensors", "small", st_file({"a": ("F32", [2, 3], f32(6)), "b": ("I8", [4], b"\x01\x02\x03\x04")},
                                             {"llmsys.step": "3"}))
    cfg = json.dumps({"vocab": 259, "n_ctx": 8, "n_layer": 1, "n_head": 1, "d_model": 4, "d_ff": 8})
    put("fuzz_safetensors", "config", st_file({"wte": ("F32", [2, 4], f32(8))}, {"llmsys.config": cfg}))
    put("fuzz_safetensors", "empty", st_file({}, None))
    put("fuzz_safetensors", "bf16", st_file({"x": ("BF16", [3], b"\x00\x3f" * 3), "y": ("I32", [1], b"\0\0\0\0")}, {}))
    # the crafted header of the duplicate-metadata overflow (fixed before fuzzing began)
    h = b'{"__metadata__":{"a":"1"},"__metadata__":{"b":"2","c":"3","d":"4"},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    h += b" " * (-len(h) % 8)
    put("fuzz_safetensors", "two_metadata", struct.pack("<Q", len(h)) + h + b"\0\0\0\0")


def configs():
    plan = {"format": "llmsys-plan", "version": 1, "model": {"name": "t", "n_layer": 4},
            "stages": [{"device": "cpu", "layers": [0, 2], "bits": [4, 8]},
                       {"device": "cpu", "layers": [2, 4], "bits": [3, 16], "address": "tcp://127.0.0.1:7000"}],
            "micro_batch": {"prefill": 2, "decode": 3}}
    put("fuzz_config_plan", "two_stages", json.dumps(plan))
    for c in ("llmpq-1.json", "demo-70b.json"):
        shutil.copy(os.path.join(ROOT, "data", "clusters", c), os.path.join(OUT, "fuzz_config_cluster", "seed_" + c))
    shutil.copy(os.path.join(ROOT, "examples", "mix-demo.json"), os.path.join(OUT, "fuzz_config_mix", "seed_demo.json"))
    put("fuzz_config_mix", "schedule", json.dumps(
        {"n_ctx": 64, "tokens_per_rank": 256, "micro_batches": 2, "seed": 3,
         "sources": [{"name": "docs", "path": "docs"}, {"name": "math", "type": "tokens", "path": "math.lstok"}],
         "schedule": [{"step": 0, "weights": {"docs": 0.8, "math": 0.2}}, {"step": 10, "weights": {"docs": 0.2, "math": 0.8}}]}))
    put("fuzz_config_tasks", "tasks.jsonl", "".join(json.dumps(t) + "\n" for t in [
        {"id": 0, "kind": "add", "prompt": "12+30=", "answer": "42", "len": 2},
        {"id": 1, "kind": "sort", "prompt": "sort 312=", "answer": "123", "len": 3, "demo": "sort 21=12"}]))
    put("fuzz_config_faults", "faults", json.dumps({"faults": [
        {"kind": "crash", "step": 5, "rank": 1}, {"kind": "slow", "step": 2, "rank": 0, "share": 0.25},
        {"kind": "nan", "step": 3, "rank": 1, "sticky": True}, {"kind": "hang", "step": 4, "rank": 0}]}))
    put("fuzz_config_rlconfig", "laminar", json.dumps(
        {"mode": "laminar", "tasks": "t.jsonl", "heldout": "h.jsonl", "init": "", "report": "r.json", "workdir": "w",
         "rollouts": 2, "relays": 2, "updates": 10, "group": 4, "batch_groups": 4, "max_seqs": 8, "max_new": 64,
         "staleness": 2, "repack": 1, "eval_n": 64, "ppo_epochs": 2, "lr": 1e-4, "clip_eps": 0.2, "is_cap": 5.0,
         "step_ms": 0, "train_ms": 0, "hb_timeout_s": 1.5, "seed": 1,
         "model": {"vocab": 259, "n_ctx": 128, "n_layer": 2, "n_head": 4, "d_model": 64, "d_ff": 256}}))
    put("fuzz_config_tplan", "empty", "{}")
    # a real training precision plan, when a built llmsys is at hand (modelled on catalog GPUs: fast)
    llmsys = os.path.join(ROOT, "build", "llmsys")
    if os.path.exists(llmsys):
        out = os.path.join(OUT, "fuzz_config_tplan", "seed_gpu_plan.json")
        subprocess.run([llmsys, "plan", "train", "--model", "tiny", "--cluster", "A100x2,T4x2", "--out", out],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, LLMSYS_PROGRESS="0"))
        # a small tokenizer.json trained on the GPL (vocab 300: a few dozen merges)
        d = os.path.join(OUT, "fuzz_tokenizer")
        os.makedirs(d, exist_ok=True)
        subprocess.run([llmsys, "tokenizer", "train", "--input", "/usr/share/common-licenses/GPL-3", "--vocab-size", "300",
                        "--out", os.path.join(d, "seed_gpl300.json")], check=True, stdout=subprocess.DEVNULL)
    put("fuzz_config_profile", "cpu", json.dumps(
        {"format": "llmsys-profile", "version": 1, "device": "cpu:test", "threads": 1, "layers_timed": 4,
         "model": {"vocab": 259, "n_ctx": 128, "n_layer": 7, "n_head": 8, "d_model": 256, "d_ff": 1024},
         "prefill": [{"bits": b, "batch": 1, "seq": q, "seconds": 1e-4 * q * (1 + b / 16)}
                     for b in (4, 16) for q in (8, 16, 32)],
         "decode": [{"bits": b, "batch": n, "ctx": 16, "seconds": 2e-5 * n * (1 + b / 16)}
                    for b in (4, 16) for n in (1, 2, 4)],
         "head": {"prefill": [{"batch": 1, "seq": q, "seconds": 1e-5 * q} for q in (8, 16, 32)],
                  "decode": [{"batch": n, "seconds": 1e-5 * n} for n in (1, 2, 4)]},
         "link": {"latency_s": 3e-5, "bandwidth_Bps": 5.2e9, "transport": "zeromq ipc"}}))
    put("fuzz_config_train", "small", json.dumps(
        {"steps": 10, "batch": 4, "seq": 32, "lr": 0.001, "seed": 1, "model": {"n_layer": 2, "d_model": 32}}))
    put("fuzz_config_model", "small", json.dumps(
        {"vocab": 259, "n_ctx": 64, "n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128}))


def wire():
    # serve stage message: header (magic, version, type, mb_id, nseq, ntok, stage, payload_bytes,
    # busy_s[16], checksum) then {slot,pos,n} per sequence and tokens (stage 0) or floats
    def msg(stage, seqs, body):
        ntok = sum(s[2] for s in seqs)
        payload = b"".join(struct.pack("<3i", *s) for s in seqs) + body
        return struct.pack("<IHHIIIiQ16dQ", 0x5750534C, 1, 1, 7, len(seqs), ntok, stage, len(payload),
                           *([0.0] * 16), 0) + payload
    put("fuzz_serve_wire", "tokens", msg(0, [(0, 0, 3), (1, 0, 1)], struct.pack("<4i", 65, 66, 67, 10)))
    put("fuzz_serve_wire", "acts", msg(1, [(2, 5, 1)], struct.pack("<8f", *[0.5] * 8)))
    put("fuzz_serve_wire", "decode", msg(0, [(3, 9, 1)], struct.pack("<i", 100)))
    # loader: mode byte, then (mode 2) type byte, step i64, rank i32, payload
    req = lambda t, step, rank, pl=b"": bytes([2, t]) + struct.pack("<qi", step, rank) + pl
    put("fuzz_loader_wire", "batch", req(0, 0, 1))
    put("fuzz_loader_wire", "control", req(1, 2, 0, b'{"weights": {"a": 1, "b": 3}, "step": 2}'))
    put("fuzz_loader_wire", "control_null", req(1, 0, 0, b'{"weights": null}'))
    put("fuzz_loader_wire", "info", req(2, 0, 0))
    put("fuzz_loader_wire", "raw", bytes([1]) + b"LSLQ\x01\x00\x01\x00" + b"\0" * 24)
    put("fuzz_loader_wire", "batch_reply", bytes([0]) + b"LSBATv01" + b"\0" * 64)
    # rl: a message's type byte and payload; then weight-chunk records: flags (1 small count and
    # index, 2 small extents, 4 a wrong chunk hash, 8 a whole-version hash that checks), version
    # + 1, count, index, total (3 bytes), offset (3), len, version hash (2), then len bytes
    def chunk(flags, ver, count, index, total, offset, n):
        return (bytes([flags, ver + 1]) + struct.pack("<HH", count, index) + total.to_bytes(3, "little") +
                offset.to_bytes(3, "little") + struct.pack("<HH", n, 0) + bytes(range(n)))
    put("fuzz_rl_wire", "message", bytes([3]) + struct.pack("<5i3di", 0, 1, 2, 3, 0, 1.5, 1.5, 1.5, 4) + b"abcd")
    put("fuzz_rl_wire", "versions", chunk(11, 0, 1, 0, 10, 0, 10) + chunk(11, 1, 1, 0, 12, 0, 12) +
        chunk(11, 2, 1, 0, 5, 0, 5) + chunk(11, 2, 1, 0, 5, 0, 5) + chunk(11, 0, 1, 0, 5, 0, 5))
    put("fuzz_rl_wire", "chunks", chunk(3, 3, 2, 0, 20, 0, 10) + chunk(3, 3, 2, 1, 20, 10, 10) +
        chunk(7, 4, 1, 0, 8, 0, 8) + chunk(3, 4, 2, 3, 8, 4, 9))


def http():
    put("fuzz_http_serve", "tokens", b"\0" + json.dumps({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}).encode())
    put("fuzz_http_serve", "text", b"\0" + json.dumps({"prompt": "hello", "stream": True, "top_p": 0.9, "seed": 7,
                                                      "stream_options": {"include_usage": True}}).encode())
    put("fuzz_http_serve", "chat", b"\1" + json.dumps({"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                                                            {"role": "user", "content": "hi"}],
                                                      "max_completion_tokens": 5}).encode())
    put("fuzz_http_victim", "two", json.dumps({"inputs": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [1, 0, 1, 0, 1, 0]]}))
    put("fuzz_http_victim", "bad", json.dumps({"inputs": [[0.1, "x"]]}))


def steal():
    # replica files (`steal --out`): hand-made and small (the CLI's replicas have 256 + 128 hidden
    # units, past the fuzzers' 64 KB inputs), no checksum key: one member; two members; a member
    # plus a CART stump (node 0 splits feature 0 at 0.5 into leaves 0 and 1)
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    i32 = lambda *v: struct.pack("<%di" % len(v), *v)
    def mlp(prefix, d, h, k):
        return {prefix + "fc0.w": ("F32", [h, d], f32(*[0.1 * (i % 7 - 3) for i in range(h * d)])),
                prefix + "fc0.b": ("F32", [h], f32(*[0.01] * h)),
                prefix + "fc1.w": ("F32", [k, h], f32(*[0.2 * (i % 5 - 2) for i in range(k * h)])),
                prefix + "fc1.b": ("F32", [k], f32(*[0.0] * k))}
    meta = lambda members, tree, shape=[1, 1, 4], cnn=0: json.dumps(
        {"layers": 2, "members": members, "tree": tree, **({"cnn": 1} if cnn else {}), "input_shape": shape,
         "input_range": [0, 1], "classes": 3})
    put("fuzz_replica_file", "one", st_file(mlp("", 4, 5, 3), {"llmsys.steal": meta(1, 0)}))
    put("fuzz_replica_file", "two", st_file({**mlp("", 4, 5, 3), **mlp("m1.", 4, 3, 3)}, {"llmsys.steal": meta(2, 0)}))
    stump = {"tree.feat": ("I32", [3], i32(0, -1, -1)), "tree.left": ("I32", [3], i32(1, 0, 1)),
             "tree.right": ("I32", [3], i32(2, 0, 0)), "tree.thr": ("F32", [3], f32(0.5, 0, 0)),
             "tree.probs": ("F32", [2, 3], f32(0.7, 0.2, 0.1, 0.1, 0.1, 0.8))}
    put("fuzz_replica_file", "tree", st_file({**mlp("", 4, 5, 3), **stump}, {"llmsys.steal": meta(1, 1)}))
    # a member plus a CNN on 1 x 4 x 4 images: two 3x3 convolutions of 2 channels, no hidden
    # layer (20 + 38 + 9 = 67 parameters)
    cnn = {"cnn.arch": ("I32", [4], i32(2, 2, 3, 0)), "cnn.params": ("F32", [67], f32(*[0.05 * (i % 9 - 4) for i in range(67)]))}
    put("fuzz_replica_file", "cnn", st_file({**mlp("", 16, 5, 3), **cnn}, {"llmsys.steal": meta(1, 0, [1, 4, 4], 1)}))
    # victim files (`victim train --out`), one per type, trained by the CLI at tiny sizes, without
    # their trailing 8-byte hash (fuzz_victim_file appends it to whatever it is given)
    llmsys = os.path.join(ROOT, "build", "llmsys")
    if not os.path.exists(llmsys):
        return
    tmp = tempfile.mkdtemp()
    run = lambda *a: subprocess.run([llmsys, *a], check=True, stdout=subprocess.DEVNULL,
                                    env=dict(os.environ, LLMSYS_PROGRESS="0"))
    csv = os.path.join(tmp, "t.csv")
    run("victim", "make-data", "--n", "60", "--features", "4", "--classes", "3", "--out", csv)
    kinds = {"logreg": ["--epochs", "1"], "svm": ["--epochs", "1"], "mlp": ["--epochs", "1", "--hidden", "4"],
             "tree": ["--max-depth", "3"], "forest": ["--trees", "2", "--max-depth", "2"],
             "knn": ["--knn-ref", "8"], "nb": []}
    for t, extra in kinds.items():
        out = os.path.join(tmp, t + ".bin")
        run("victim", "train", "--type", t, "--data", csv, "--out", out, "--quiet", *extra)
        put("fuzz_victim_file", t, open(out, "rb").read()[:-8])
    out = os.path.join(tmp, "cnn.bin")  # images (the 28x28 held-out task), a 1-channel 1x1 network
    run("victim", "train", "--type", "cnn", "--data", "shapes", "--train-n", "20", "--epochs", "1", "--conv1", "1",
        "--conv2", "1", "--kernel", "1", "--hidden", "0", "--out", out, "--quiet")
    put("fuzz_victim_file", "cnn", open(out, "rb").read()[:-8])
    shutil.rmtree(tmp)


if __name__ == "__main__":
    safetensors()
    configs()
    wire()
    http()
    steal()
