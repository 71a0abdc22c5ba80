#!/usr/bin/env bash
# `llmsys eval` on a quantized checkpoint runs the serve engine and agrees with the fp32
# checkpoint within about 3x the error observed here (bits/byte 4.844 after 40 steps: int8
# 1.6e-5 away, 3-bit 5.5e-3 away), and the 3-bit model is further off than the int8 one.
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
data=$dir/text.txt
for i in $(seq 1 300); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13))"; done >"$data"
"$bin" train --config tiny --data "$data" --steps 40 --out "$dir/m.safetensors" >/dev/null 2>&1
"$bin" quantize --model "$dir/m.safetensors" --bits 8 --out "$dir/q8.safetensors" >/dev/null
"$bin" quantize --model "$dir/m.safetensors" --bits 3 --out "$dir/q3.safetensors" >/dev/null
bpb() { "$bin" eval --model "$1" --data "$data" --report "$dir/r.json" >/dev/null && sed -n 's/.*"bits_per_byte":[[:space:]]*\([0-9.]*\).*/\1/p' "$dir/r.json"; }
f=$(bpb "$dir/m.safetensors"); q8=$(bpb "$dir/q8.safetensors"); q3=$(bpb "$dir/q3.safetensors")
echo "bits/byte fp32 $f, int8 $q8, 3-bit $q3"
awk -v f="$f" -v a="$q8" -v b="$q3" 'BEGIN {
  d8 = a - f; if (d8 < 0) d8 = -d8; d3 = b - f; if (d3 < 0) d3 = -d3;
  if (f <= 0 || f > 6 || d8 > 5e-5 || d3 > 0.017 || d3 <= d8) {
    printf "FAIL: |int8 - fp32| %.3g (max 5e-5), |3-bit - fp32| %.3g (max 0.017, above int8), fp32 %.4f (0..6]\n", d8, d3, f; exit 1 }
}'
# a file that is not a checkpoint: one line, exit 1
if "$bin" eval --model "$data" --data "$data" 2>"$dir/err"; then echo "FAIL: eval accepted a text file"; exit 1; fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || { echo "FAIL: expected one error line"; cat "$dir/err"; exit 1; }
echo "1 passed, 0 failed"
