#!/bin/bash
# cli.sh - `llmsys rl` and `llmsys sim rl` end to end: task files, the simulator, and the
# exit code and single error line of each kind of bad input (malformed task files,
# unreachable manager, unknown names); the manager's issue rule on its runs' reports.
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
# each row's speed-ups are its traj/s over the sync and (Laminar-style only) the AReaL-like row's at its GPU count
python3 -c "
import json
r = json.load(open('$T/s.json'))['rows']
by = {(x['gpus'], x['design']): x['traj_per_s'] for x in r}
for x in r:
    g = x['gpus']
    assert abs(x['speedup_vs_sync'] - x['traj_per_s'] / by[(g, 'sync')]) < 1e-9 * x['speedup_vs_sync'], x
    want = x['traj_per_s'] / by[(g, 'areal')] if x['design'] == 'laminar' else 0
    assert abs(x['speedup_vs_areal'] - want) <= 1e-9 * want, x" || fail "sim speed-ups"
expect 2 "plot of a non-report" -- "$BIN" rl plot --report "$T/t.jsonl" --out "$T/p.svg"
expect 2 "sim unknown model" -- "$BIN" sim rl --models gpt-9 --gpus 64
expect 2 "sim calibrate on a non-report" -- "$BIN" sim rl --calibrate "$T/t.jsonl"
expect 0 "sim at each design's best split" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --train-pct 0 --out "$T/b.json"
python3 -c "import json; r=json.load(open('$T/b.json'))['rows']; assert all(5 <= x['train_pct'] <= 95 or x['train_pct'] == 100 for x in r)" ||
    fail "best-split rows"
expect 2 "sim unknown system" -- "$BIN" sim juggling
# Each run below bounds itself with --timeout 40 (they take 2-6 s), inside the test's own limit, so
# a run that stalls fails with the manager's and the trainer's last log lines in its error.
# AReaL-like at staleness bound 0: issue capacity is counted on the version the asking rollout
# holds (as AReaL's rollout controller counts it), so nearly every trajectory is trained on by
# the version that generated it; a group that finishes after a later one can be one version old
expect 0 "areal run, staleness 0" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" --mode areal --staleness 0 \
    --sft-steps 30 --updates 8 --group 4 --batch-groups 2 --max-seqs 4 --max-new 16 --rollouts 3 --relays 1 \
    --eval-n 8 --timeout 40 --workdir "$T/ar" --quiet
python3 -c "import json,sys; h=json.load(open('$T/ar/report.json'))['staleness_hist']; print('  staleness hist', h[:4]); sys.exit(0 if sum(h) == 64 and sum(h[2:]) == 0 and h[0] >= 32 else 1)" ||
    fail "areal staleness at bound 0"
# the rollouts record each sampled token's log-probability under the weights that sampled it, so
# where a trajectory is trained on by that same version the importance weight is 1 (observed
# 0.99999997 with every trajectory at staleness 0; a version-old one moves it by about 1 %)
python3 -c "import json,sys; w=json.load(open('$T/ar/report.json'))['is_weight_mean']; print('  is_weight_mean', w); sys.exit(0 if 0.95 <= w <= 1.05 else 1)" ||
    fail "importance weight at staleness 0"
# the run config names the model the rollouts build (they read no checkpoint): a trainer whose
# init is not that model is refused before the run starts
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['model']['d_ff'] *= 2; json.dump(c, open(sys.argv[2], 'w'))" \
    "$T/ar/config.json" "$T/mm.cfg"
"$BIN" rl worker --role manager --config "$T/mm.cfg" --port-file "$T/mm.ep" > "$T/mm.log" 2>&1 &
mm=$!
if wait_file "$T/mm.ep" $mm; then
    expect 1 "a trainer whose init is not the config's model" -- timeout 20 "$BIN" rl worker --role trainer --manager "$(cat "$T/mm.ep")"
    grep -q "is not the model the run config names" "$T/err" || fail "model mismatch message: $(cat "$T/err")"
else
    fail "manager (model mismatch) did not start: $(cat "$T/mm.log")"
fi
kill $mm 2> /dev/null
# RL tasks, prompts and rewards are bytes: a BPE model is refused as --init and as a config's model
"$BIN" tokenizer train --input "$T/t.jsonl" --vocab-size 300 --out "$T/tok.json" > /dev/null 2>&1 || fail "tokenizer train"
"$BIN" train --config tiny --tokenizer "$T/tok.json" --data "$T/t.jsonl" --steps 1 --batch 2 --seq 16 \
    --out "$T/bpe.safetensors" > /dev/null 2>&1 || fail "train a BPE model"
expect 2 "a BPE --init" -- "$BIN" rl run --tasks "$T/t.jsonl" --init "$T/bpe.safetensors" --workdir "$T/wb" --quiet
grep -q "bpe.safetensors: a model of 300 tokens (a BPE vocabulary)" "$T/err" || fail "BPE --init message: $(cat "$T/err")"
[ -e "$T/wb" ] && fail "a refused BPE --init left its workdir"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['model']['vocab'] = 300; json.dump(c, open(sys.argv[2], 'w'))" \
    "$T/ar/config.json" "$T/mb.cfg"
expect 2 "a config naming a BPE model" -- timeout 20 "$BIN" rl worker --role manager --config "$T/mb.cfg" --port-file "$T/mb.ep"
grep -q '"model": a model of 300 tokens' "$T/err" || fail "BPE config message: $(cat "$T/err")"
# Laminar-style with a waiting queue (a rollout batch of 2 x max-seqs): a running rollout takes new
# groups into the slots its finished trajectories free; with the default batch (max-seqs) it never does
for rb in 0 8; do # 0: not given (the default, max-seqs)
    rbo=(); [ $rb -ne 0 ] && rbo=(--rollout-batch $rb)
    expect 0 "laminar run, rollout batch $rb" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" "${rbo[@]}" \
        --sft-steps 30 --updates 6 --group 2 --batch-groups 4 --max-seqs 4 --max-new 16 --rollouts 2 --relays 1 \
        --eval-n 8 --timeout 40 --workdir "$T/lq$rb" --quiet
    python3 -c "import json,sys; r=json.load(open('$T/lq$rb/report.json')); print('  rollout_batch', r['rollout_batch'], 'topup_groups', r['topup_groups']); sys.exit(0 if (r['rollout_batch'], r['topup_groups'] > 0) == ((4, False) if $rb == 0 else (8, True)) else 1)" ||
        fail "laminar waiting queue at rollout batch $rb"
done
# one-step-stale: batch k + 1 is issued to rollouts holding version k (its trajectories' staleness
# when trained on is no stable check: a group that completes late is trained on by a later batch)
expect 0 "onestep run" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" --mode onestep \
    --sft-steps 30 --updates 8 --group 4 --batch-groups 2 --max-seqs 4 --max-new 16 --rollouts 3 --relays 1 \
    --eval-n 8 --timeout 40 --workdir "$T/os" --quiet
# the manager's issue rule read off the four reports (issued.py): AReaL-like group g generated by a
# version no older than g / B - s, one-step-stale no older than g / B - 1, Laminar-style never more
# than its window issued and not consumed
python3 "$(dirname "$0")/issued.py" "$T"/{ar,os,lq0,lq8}/report.json || fail "issue rule"
# a run that fails (here: its timeout) leaves the report of the run before it in place
cp "$T/ar/report.json" "$T/ar-report.json"
expect 1 "a run past its timeout" -- timeout 120 "$BIN" rl run --tasks "$T/t.jsonl" --mode areal --sft-steps 1 \
    --updates 50 --group 4 --batch-groups 2 --max-seqs 4 --max-new 16 --rollouts 1 --relays 1 --timeout 3 \
    --workdir "$T/ar" --quiet
cmp -s "$T/ar/report.json" "$T/ar-report.json" || fail "the failed run lost the earlier report"
# its one error line quotes the manager's last log line (its rollout joined within the 3 s),
# the trainer's, and names the log directory
grep -q "not finished within 3 s (manager: \"[^\"]*rollout 0 joined[^\"]*\"; trainer: .*; logs in $T/ar/logs)" "$T/err" ||
    fail "the failed run does not say why and where it waited: $(cat "$T/err")"
expect 2 "negative rollout batch" -- "$BIN" rl run --tasks "$T/t.jsonl" --rollout-batch -1 --workdir "$T/w5" --quiet
# rl run reads --tasks once, at its start-up: the warm start uses what it read and the workers the
# run's copy of it (WORKDIR/tasks.jsonl), so a task file replaced once the run has begun changes
# nothing (was: read again by the warm start, the manager and the trainer, which failed on it)
cp "$T/t.jsonl" "$T/t2.jsonl"
timeout 120 "$BIN" rl run --tasks "$T/t2.jsonl" --sft-steps 100 --updates 1 --group 2 --batch-groups 1 --max-seqs 2 \
    --max-new 4 --rollouts 1 --relays 1 --eval-n 2 --timeout 40 --quiet --workdir "$T/once" > "$T/once.out" 2>&1 &
run=$!
for i in $(seq 1 600); do [ -d "$T/once" ] || ! kill -0 $run 2> /dev/null && break; sleep 0.05; done
echo "not a task file" > "$T/t2.jsonl"
wait $run
rc=$?
[ $rc = 0 ] || fail "rl run, its task file replaced once begun: exit $rc: $(tail -2 "$T/once.out")"
cmp -s "$T/t.jsonl" "$T/once/tasks.jsonl" || fail "the run's copy of its tasks is not what it read"
# the copies never replace an input (rewritten from what was read, a file would lose what the
# reader ignores): an input naming WORKDIR/tasks.jsonl or WORKDIR/heldout.jsonl is refused, kept
mkdir -p "$T/w6" && cp "$T/a.jsonl" "$T/w6/tasks.jsonl"
expect 2 "--heldout where the run keeps its copy of --tasks" -- "$BIN" rl run --tasks "$T/t.jsonl" \
    --heldout "$T/w6/tasks.jsonl" --workdir "$T/w6" --quiet
grep -qF -- "--heldout $T/w6/tasks.jsonl is where the run keeps its copy of --tasks" "$T/err" || fail "copy message: $(cat "$T/err")"
expect 2 "--tasks where the run keeps its copy of --tasks" -- "$BIN" rl run --tasks "$T/w6/tasks.jsonl" --workdir "$T/w6" --quiet
cmp -s "$T/a.jsonl" "$T/w6/tasks.jsonl" || fail "a refused run replaced its input"
finish rl.cli
