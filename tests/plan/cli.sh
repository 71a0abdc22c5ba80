#!/bin/bash
# cli.sh - `llmsys plan` end to end: a plan, its report and vLLM export, and the exit code
# and single error line of each kind of bad input.
. "$(dirname "$0")/../lib.sh"
expect 0 "plan llmpq-2" -- "$BIN" plan serve --cluster llmpq-2 --out "$T/p.json" --report "$T/r.json" --export-vllm "$T/v.sh"
grep -q 'llmsys-plan' "$T/p.json" || fail "plan file"
grep -q 'VLLM_PP_LAYER_PARTITION' "$T/r.json" || fail "report vllm"
grep -q 'headroom_GB' "$T/r.json" || fail "report memory"
grep -q -- '--pipeline-parallel-size 4' "$T/v.sh" || fail "vllm export"
expect 0 "case-insensitive names" -- "$BIN" plan serve --cluster LLMPQ-8 --model OPT-30B --algo pipeedge --quiet
expect 0 "ilp" -- "$BIN" plan serve --cluster llmpq-2 --algo ilp --time-limit 2 --quiet
expect 2 "ilp time limit 0" -- "$BIN" plan serve --cluster llmpq-2 --algo ilp --time-limit 0 --quiet
# an output that cannot be written is found before the solve (this ILP alone runs its 20 s)
expect 1 "unwritable --out before the solve" -- timeout 10 "$BIN" plan serve --cluster mixed-64 --algo ilp \
    --time-limit 20 --quiet --out "$T/no/such/p.json"
grep -q -- "--out" "$T/err" || fail "unwritable --out: $(cat "$T/err")"
# --select replay re-ranks splitquant's best plans by the replay of serve's schedule: on llmpq-2
# (defaults) it picks one whose replay beats the objective's choice (160.3 and 172.4 tok/s here)
expect 0 "select replay" -- "$BIN" plan serve --cluster llmpq-2 --select replay
awk '/replay of serve/ { print $6 }' "$T/out" > "$T/rs"
expect 0 "select objective" -- "$BIN" plan serve --cluster llmpq-2
awk '/replay of serve/ { print $6 }' "$T/out" >> "$T/rs"
awk 'NR == 1 { r = $1 } NR == 2 { o = $1 } END { exit !(NR == 2 && r > o) }' "$T/rs" ||
    fail "--select replay: replay $(head -1 "$T/rs") tok/s, not above the objective's $(tail -1 "$T/rs")"
expect 2 "unknown model" -- "$BIN" plan serve --cluster llmpq-2 --model gpt-9
grep -q "opt-30b" "$T/err" || fail "unknown model lists known"
expect 2 "unknown cluster" -- "$BIN" plan serve --cluster nowhere-7
expect 2 "negative batch" -- "$BIN" plan serve --cluster llmpq-2 --batch -4
expect 2 "absurd prompt" -- "$BIN" plan serve --cluster llmpq-2 --prompt 100000000
expect 2 "bad algo" -- "$BIN" plan serve --cluster llmpq-2 --algo magic
expect 2 "bad quality" -- "$BIN" plan serve --cluster llmpq-2 --quality bits:5
echo '{"format":"llmsys-cluster","version":1,"nodes":[{"gpu":"T5","count":2}]}' >"$T/c1.json"
expect 2 "unknown GPU" -- "$BIN" plan serve --cluster "$T/c1.json" --model opt-13b
grep -q "T4-16G" "$T/err" || fail "unknown GPU lists known"
echo '{"format":"llmsys-cluster","version":1,"nodes":[]}' >"$T/c2.json"
expect 2 "zero devices" -- "$BIN" plan serve --cluster "$T/c2.json" --model opt-13b
echo '{"format":"llmsys-cluster","version":1,"nodes":[{"gpu":"T4"' >"$T/c3.json"
expect 2 "malformed JSON" -- "$BIN" plan serve --cluster "$T/c3.json" --model opt-13b
# --bits: an empty list (was exit 1 "no bit width allowed"), a width past 2^32 (was read as
# 4) and a bad entry past the 63rd character (was cut off unseen) are usage errors
expect 2 "bits empty" -- "$BIN" plan serve --cluster llmpq-2 --bits '' --quiet
expect 2 "bits 2^32+4" -- "$BIN" plan serve --cluster llmpq-2 --bits 4294967300 --quiet
expect 2 "bits long list, bad last" -- "$BIN" plan serve --cluster llmpq-2 --bits "$(printf '4,%.0s' $(seq 40))5" --quiet
# plan indicator on a catalog model: its default method needs a checkpoint, and says so (was:
# "opt-30b: No such file or directory")
expect 2 "indicator of a catalog model" -- "$BIN" plan indicator --model opt-30b --out "$T/i.json"
grep -q "needs --model to be an llmsys checkpoint" "$T/err" || fail "indicator message: $(cat "$T/err")"
expect 0 "indicator default of a catalog model" -- "$BIN" plan indicator --model opt-30b --method default --out "$T/i.json"
# --calib-data: input variances measured by forward passes of a checkpoint; the file it
# writes feeds plan serve; what it cannot use is refused before anything is written
"$BIN" train --config tiny --data /usr/share/common-licenses --steps 2 --out "$T/m.safetensors" >/dev/null 2>&1 ||
  fail "train a tiny checkpoint"
expect 0 "indicator calibrated" -- "$BIN" plan indicator --model "$T/m.safetensors" --method measured \
  --calib-data /usr/share/common-licenses --calib-tokens 2000 --out "$T/ic.json"
grep -q "input variances measured on" "$T/out" || fail "calibrated indicator output: $(cat "$T/out")"
echo '{"format":"llmsys-cluster","version":1,"nodes":[{"gpu":"T4-16G","count":2}]}' >"$T/c4.json"
expect 0 "plan serve with it" -- "$BIN" plan serve --cluster "$T/c4.json" --model "$T/m.safetensors" --prompt 32 \
  --gen 16 --quality max:0.5 --indicator "$T/ic.json" --quiet
expect 0 "indicator kl" -- "$BIN" plan indicator --model "$T/m.safetensors" --method kl \
  --calib-data /usr/share/common-licenses --calib-tokens 500 --out "$T/ik.json"
grep -q "measured on the train split" "$T/out" || fail "kl indicator output: $(cat "$T/out")"
# on two engine threads: the same rows computed, split between threads; the same file
expect 0 "indicator kl, 2 threads" -- "$BIN" plan indicator --model "$T/m.safetensors" --method kl \
  --calib-data /usr/share/common-licenses --calib-tokens 500 --threads 2 --out "$T/ik2.json"
cmp -s "$T/ik.json" "$T/ik2.json" || fail "kl indicator on 2 threads differs from 1"
expect 0 "indicator relative" -- "$BIN" plan indicator --model "$T/m.safetensors" --method measured \
  --calib-data /usr/share/common-licenses \
  --calib-tokens 2000 --relative --out "$T/ir.json"
cmp -s "$T/ir.json" "$T/ic.json" && fail "--relative wrote the same indicator as without it"
expect 2 "relative without calib data" -- "$BIN" plan indicator --model "$T/m.safetensors" --relative --out "$T/ib.json"
expect 2 "kl without calib data" -- "$BIN" plan indicator --model "$T/m.safetensors" --method kl --out "$T/ib.json"
expect 2 "calib with method default" -- "$BIN" plan indicator --model "$T/m.safetensors" --method default \
  --calib-data /usr/share/common-licenses --out "$T/ib.json"
expect 2 "calib of a catalog model" -- "$BIN" plan indicator --model opt-30b --calib-data /usr/share/common-licenses \
  --out "$T/ib.json"
expect 2 "calib-tokens -1" -- "$BIN" plan indicator --model "$T/m.safetensors" --calib-data /usr/share/common-licenses \
  --calib-tokens -1 --out "$T/ib.json"
expect 2 "calib data missing" -- "$BIN" plan indicator --model "$T/m.safetensors" --calib-data "$T/none.txt" \
  --out "$T/ib.json"
[ ! -e "$T/ib.json" ] || fail "a refused indicator wrote $T/ib.json"
expect 0 "bits 8,16 adabits" -- "$BIN" plan serve --cluster llmpq-2 --bits 8,16 --algo adabits --quiet
expect 2 "bits 16 does not fit" -- "$BIN" plan serve --cluster llmpq-2 --bits 16 --quiet
grep -q "GB short" "$T/err" || fail "bits 16 message"
expect 2 "does not fit" -- "$BIN" plan serve --cluster llmpq-8 --model bloom-176b --out "$T/none.json"
grep -q "GB short" "$T/err" || fail "infeasible message"
[ ! -e "$T/none.json" ] || fail "infeasible plan left $T/none.json"
finish plan.cli
