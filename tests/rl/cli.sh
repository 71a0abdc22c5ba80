#!/bin/bash
# cli.sh - `llmsys rl` and `llmsys sim rl` end to end: task files, the simulator, and the
# exit code and single error line of each kind of bad input (malformed task files,
# unreachable manager, unknown names).
. "$(dirname "$0")/../lib.sh" "$1"
expect 0 "tasks sort" -- "$BIN" rl tasks --kind sort --n 40 --out "$T/t.jsonl"
[ "$(wc -l <"$T/t.jsonl")" = 40 ] || fail "task count"
expect 0 "tasks add" -- "$BIN" rl tasks --kind add --n 10 --mean-len 3 --max-len 8 --out "$T/a.jsonl"
grep -q '"kind":"add"' "$T/a.jsonl" || fail "add kind"
expect 2 "unknown kind" -- "$BIN" rl tasks --kind juggle --out "$T/x.jsonl"
expect 2 "bad count" -- "$BIN" rl tasks --n 0 --out "$T/x.jsonl"
[ -e "$T/x.jsonl" ] && fail "half-written task file"
printf '{"prompt":"copy:ab=","answer":"ab"}\n{"prompt":"copy:ab="\n' >"$T/bad.jsonl"
expect 2 "malformed task file" -- "$BIN" rl run --tasks "$T/bad.jsonl" --workdir "$T/w1" --quiet
grep -q "bad.jsonl:2" "$T/err" || fail "message names the line"
expect 2 "missing task file" -- "$BIN" rl run --tasks "$T/none.jsonl" --workdir "$T/w2" --quiet
echo "not a checkpoint" >"$T/junk.safetensors"
expect 2 "bad initial checkpoint" -- "$BIN" rl run --tasks "$T/t.jsonl" --init "$T/junk.safetensors" --workdir "$T/w3" --quiet
expect 2 "unknown mode" -- "$BIN" rl run --tasks "$T/t.jsonl" --mode lockstep --workdir "$T/w4"
expect 2 "unknown role" -- "$BIN" rl worker --role juggler --manager tcp://127.0.0.1:9
expect 1 "unreachable manager (rollout)" -- timeout 20 "$BIN" rl worker --role rollout --manager tcp://127.0.0.1:9
grep -q "unreachable" "$T/err" || fail "unreachable message"
expect 1 "unreachable manager (relay)" -- timeout 20 "$BIN" rl worker --role relay --manager tcp://127.0.0.1:9
expect 0 "sim rl" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64,256 --updates 2 --batch 256 --out "$T/s.json"
python3 -c "import json; r=json.load(open('$T/s.json'))['rows']; assert len(r) == 8 and all(x['traj_per_s'] > 0 for x in r)" ||
    fail "sim rows"
expect 2 "plot of a non-report" -- "$BIN" rl plot --report "$T/t.jsonl" --out "$T/p.svg"
expect 2 "sim unknown model" -- "$BIN" sim rl --models gpt-9 --gpus 64
expect 2 "sim calibrate on a non-report" -- "$BIN" sim rl --calibrate "$T/t.jsonl"
expect 0 "sim at each design's best split" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --train-pct 0 --out "$T/b.json"
python3 -c "import json; r=json.load(open('$T/b.json'))['rows']; assert all(5 <= x['train_pct'] <= 95 or x['train_pct'] == 100 for x in r)" ||
    fail "best-split rows"
expect 2 "sim unknown system" -- "$BIN" sim juggling
# AReaL-like at staleness bound 0: issue capacity is counted on the version the asking rollout
# holds (as AReaL's rollout controller counts it), so nearly every trajectory is trained on by
# the version that generated it; a group that finishes after a later one can be one version old
expect 0 "areal run, staleness 0" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" --mode areal --staleness 0 \
    --sft-steps 30 --updates 8 --group 4 --batch-groups 2 --max-seqs 4 --max-new 16 --rollouts 3 --relays 1 \
    --eval-n 8 --workdir "$T/ar" --quiet
python3 -c "import json,sys; h=json.load(open('$T/ar/report.json'))['staleness_hist']; print('  staleness hist', h[:4]); sys.exit(0 if sum(h) == 64 and sum(h[2:]) == 0 and h[0] >= 32 else 1)" ||
    fail "areal staleness at bound 0"
# Laminar-style with a waiting queue (a rollout batch of 2 x max-seqs): a running rollout takes new
# groups into the slots its finished trajectories free; with the default batch (max-seqs) it never does
for rb in 0 8; do # 0: not given (the default, max-seqs)
    rbo=(); [ $rb -ne 0 ] && rbo=(--rollout-batch $rb)
    expect 0 "laminar run, rollout batch $rb" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" "${rbo[@]}" \
        --sft-steps 30 --updates 6 --group 2 --batch-groups 4 --max-seqs 4 --max-new 16 --rollouts 2 --relays 1 \
        --eval-n 8 --workdir "$T/lq$rb" --quiet
    python3 -c "import json,sys; r=json.load(open('$T/lq$rb/report.json')); print('  rollout_batch', r['rollout_batch'], 'topup_groups', r['topup_groups']); sys.exit(0 if (r['rollout_batch'], r['topup_groups'] > 0) == ((4, False) if $rb == 0 else (8, True)) else 1)" ||
        fail "laminar waiting queue at rollout batch $rb"
done
# a run that fails (here: its timeout) leaves the report of the run before it in place
cp "$T/ar/report.json" "$T/ar-report.json"
expect 1 "a run past its timeout" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" --mode areal --sft-steps 1 \
    --updates 50 --group 4 --batch-groups 2 --max-seqs 4 --max-new 16 --rollouts 1 --relays 1 --timeout 1 \
    --workdir "$T/ar" --quiet
cmp -s "$T/ar/report.json" "$T/ar-report.json" || fail "the failed run lost the earlier report"
grep -q "not finished within 1 s" "$T/err" || fail "the failed run does not say why: $(cat "$T/err")"
expect 2 "negative rollout batch" -- "$BIN" rl run --tasks "$T/t.jsonl" --rollout-batch -1 --workdir "$T/w5" --quiet
finish rl.cli
