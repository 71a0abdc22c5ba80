#!/usr/bin/env bash
# faults.sh - every injected fault kind recovered by `llmsys robust run` on 2 nodes x 2 ranks
# with warm standbys, the losses after recovery bit-identical to an uninterrupted 4-rank run
# of the same command; then bad input: a command failing at once, standbys exhausted,
# malformed plans and flags.
set -u
BIN=$1
T=$(mktemp -d /tmp/llmsys-robust-XXXXXX)
cleanup() {
  # our process tree only: the runs started from this script
  for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
for i in $(seq 1 1500); do
  echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times; copy $((i % 5))."
done > "$T/corpus.txt"
TA=(--config tiny --data "$T/corpus.txt" --batch 16 --seq 64 --steps 30 --threads 1 --log-every 100)

# the reference: an uninterrupted 4-rank run of the same command
timeout 60 mpirun -q -np 4 "${root[@]}" --oversubscribe --bind-to none "$BIN" train "${TA[@]}" \
  --out "$T/ref.st" --report "$T/ref.json" > /dev/null 2> "$T/ref.err" || { fail "reference run"; cat "$T/ref.err"; }

losses() { tr -d ' \n\t' < "$1" | grep -o '"losses":\[[^]]*\]'; }
# run NAME PLAN EXPECTED_KINDS [robust options...]
run() {
  local name=$1 plan=$2 kinds=$3
  shift 3
  echo "$plan" > "$T/$name.plan.json"
  local t0=$SECONDS
  timeout 90 "$BIN" robust run --quiet --inject "$T/$name.plan.json" --report "$T/$name.json" "$@" \
    -- llmsys train "${TA[@]}" --out "$T/$name.st" > "$T/$name.out" 2> "$T/$name.err"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { fail "$name: exit $rc"; cat "$T/$name.err"; return; }
  grep -q '"completed":[[:space:]]*true' "$T/$name.json" || fail "$name: not completed"
  [ "$(losses "$T/$name.json")" = "$(losses "$T/ref.json")" ] || fail "$name: losses differ from the uninterrupted run"
  grep -q '"recomputed_loss_mismatches":[[:space:]]*0' "$T/$name.json" || fail "$name: a recomputed step's loss differs"
  for k in $kinds; do
    grep -q "\"kind\":[[:space:]]*\"$k\"" "$T/$name.json" || { fail "$name: no $k fault in the report"; cat "$T/$name.err"; }
  done
}

# crash (SIGKILL), NaN (poisoned gradient; replay does not repeat -> node), OOM: 3 standbys
run mixed '{"faults": [{"kind": "crash", "step": 5, "rank": 3}, {"kind": "nan", "step": 12, "rank": 1},
  {"kind": "oom", "step": 20, "rank": 2}]}' "crash nan oom" --standby 3 --disk-every 5
grep -q 'does not repeat: the node' "$T/mixed.json" || fail "mixed: NaN replay verdict missing"
# every restart promoted the pre-started world (MPI up, data open) instead of a fresh mpirun
[ "$(grep -c 'pre-started world [0-9]* promoted' "$T/mixed.json")" -eq 3 ] || fail "mixed: not every restart was warm"
# two faults at the same step on two nodes: whichever is detected first, the other (swallowed
# by the recovery, or not yet fired) fires again in the relaunched job and is handled on its
# own; a time-triggered crash due before the first step waits for it
run race '{"faults": [{"kind": "crash", "step": 6, "rank": 3}, {"kind": "hang", "step": 6, "rank": 1},
  {"kind": "crash", "time": 0.5, "rank": 0}]}' "crash hang" --standby 3 --hang-timeout 2
[ "$(grep -o '"detection_s"' "$T/race.json" | wc -l)" -eq 3 ] || fail "race: not 3 faults handled"
# hang (SIGSTOP): detected after the timeout, localized by grouped stack dumps
run hang '{"faults": [{"kind": "hang", "step": 6, "rank": 1}]}' "hang" --hang-timeout 2
tr -d '\n' < "$T/hang.json" | grep -q '"rank":[[:space:]]*1,[[:space:]]*"node":[[:space:]]*0' || fail "hang: rank 1 / node 0 not named"
# the stopped rank's stack is the odd one out, unless it was stopped inside the all-reduce
# too (then its process state names it)
grep -q -e '"outlier":[[:space:]]*true' -e 'process state (stopped)' "$T/hang.json" || fail "hang: neither an outlier stack group nor a stopped process"
grep -q 'PMPI_Allreduce' "$T/hang.json" || fail "hang: stacks not kept in the report"
# slow rank (CPU quota or duty cycle) under extra host-wide load (two busy loops, one per
# core): an outlier against the median rank in the 3 windows of 5 steps after the warm-up
# window (steps 6-20, named at the first report of step 21); a retry absorbs a window lost to
# the load
slow_plan='{"faults": [{"kind": "slow", "step": 2, "rank": 2, "share": 0.01}]}'
busy() { (while :; do :; done) & B1=$!; (while :; do :; done) & B2=$!; }
busy
# meanwhile the same load and no slow rank: nothing may be flagged at factor 3 (at 1.5, two
# parallel jobs, two busy loops and the rest of the suite on 2 cores made a rank 1.6x late in
# 3 windows running: preemption is not host-wide when jobs outnumber cores)
timeout 90 "$BIN" robust run --quiet --slow-window 3 --slow-factor 3 --report "$T/calm.json" -- llmsys train "${TA[@]}" \
  --out "$T/calm.st" > /dev/null 2> "$T/calm.err" &
CALM=$!
slow_ok() { tr -d ' \n\t' < "$T/slow.json" | grep -Eq '"kind":"slow","rank":2,"node":1,"step":(1[0-9]|2[01]),'; }
before=$fails
run slow "$slow_plan" "slow" --hang-timeout 5 --slow-window 5 --slow-factor 1.5
slow_ok || fail "slow: rank 2 not named within 3 windows: $(tr -d ' \n\t' < "$T/slow.json" | grep -o '"kind":"slow"[^}]*' | head -c 120)"
if [ $fails -gt $before ]; then
  echo "slow: retrying once (load $(cut -d' ' -f1 /proc/loadavg))"
  fails=$before
  run slow "$slow_plan" "slow" --hang-timeout 5 --slow-window 5 --slow-factor 1.5
  slow_ok || fail "slow: rank 2 not named within 3 windows"
fi
wait "$CALM" || { fail "calm: exit $?"; cat "$T/calm.err"; }
grep -q '"completed":[[:space:]]*true' "$T/calm.json" || fail "calm: not completed"
grep -q '"kind"' "$T/calm.json" && fail "calm: a fault raised under load alone: $(grep -o '"detail":[^,]*' "$T/calm.json" | head -1)"
kill "$B1" "$B2" 2> /dev/null
wait "$B1" "$B2" 2> /dev/null
grep -q '"slow_method"' "$T/slow.json" || fail "slow: throttling method not stated"
# corrupt newest disk checkpoint, then a crash with disk checkpoints only: previous one used
run corrupt '{"faults": [{"kind": "corrupt-ckpt", "step": 16}, {"kind": "crash", "step": 18, "rank": 0}]}' \
  "corrupt-ckpt crash" --ckpt-every 0 --disk-every 5
grep -q '"resumed_step":[[:space:]]*10' "$T/corrupt.json" || fail "corrupt: did not fall back to step 10"

# a NaN that the data itself causes (sticky): the replay repeats it -> data or model, stopped
echo '{"faults": [{"kind": "nan", "step": 8, "rank": 1, "sticky": 1}]}' > "$T/sticky.plan.json"
timeout 60 "$BIN" robust run --quiet --inject "$T/sticky.plan.json" --ckpt-dir "$T/sck" --report "$T/sticky.json" \
  -- llmsys train "${TA[@]}" --out "$T/sticky.st" > /dev/null 2> "$T/sticky.err"
rc=$?
[ $rc -eq 1 ] || fail "sticky NaN: exit $rc, expected 1"
grep -q "repeats on replay" "$T/sticky.err" || { fail "sticky NaN: no data/model diagnosis"; cat "$T/sticky.err"; }
[ -f "$T/sck/ckpt-00000007.safetensors" ] || fail "sticky NaN: last good checkpoint (step 7) not on disk"

# status page and Prometheus /metrics while a job runs (127.0.0.1, a free port)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 90 "$BIN" robust run --quiet --status-port "$PORT" --report "$T/st.json" -- llmsys train "${TA[@]}" \
  --out "$T/st.st" > /dev/null 2> "$T/st.err" &
spid=$!
got=""
for _ in $(seq 1 300); do
  m=$(curl -s "http://127.0.0.1:$PORT/metrics" || true)
  if echo "$m" | grep -q '^llmsys_robust_step [1-9]'; then got=$m; break; fi
  sleep 0.1
done
[ -n "$got" ] || fail "status: no /metrics with progress on port $PORT"
for k in 'llmsys_robust_nodes{state="active"} 2' 'llmsys_robust_nodes{state="standby"} 1' 'llmsys_robust_ranks 4' \
  'llmsys_robust_faults_total{kind="crash"} 0' 'llmsys_robust_ettr '; do
  echo "$got" | grep -qF "$k" || fail "status: /metrics lacks '$k'"
done
curl -s "http://127.0.0.1:$PORT/" | grep -q "llmsys robust" || fail "status: no status page"
wait $spid || fail "status run: exit $?"

# an agent that loses its controller keeps its ranks for the grace period (5 s), then stops
# them cleanly: they agree, save --out and exit; the agents exit too
# (no `timeout` wrapper: the kill must reach the controller itself)
"$BIN" robust run --quiet --report "$T/lost.json" -- llmsys train "${TA[@]}" --steps 100000 \
  --out "$T/lost.st" > /dev/null 2> "$T/lost.err" &
cpid=$!
for _ in $(seq 1 200); do pgrep -f "$T/lost.st" > /dev/null && break; sleep 0.1; done
sleep 2
kill -9 $cpid 2> /dev/null
wait $cpid 2> /dev/null
sleep 3
pgrep -f "train .*$T/lost.st" > /dev/null || fail "lost controller: the ranks stopped before the grace period"
for _ in $(seq 1 150); do pgrep -f "$T/lost.st" > /dev/null || break; sleep 0.1; done
if pgrep -f "$T/lost.st" > /dev/null; then
  fail "lost controller: ranks still running"
  for p in $(pgrep -f "$T/lost.st"); do kill -9 "$p" 2> /dev/null; done
fi
[ -f "$T/lost.st" ] || { fail "lost controller: the ranks did not save"; cat "$T/lost.err"; }
grep -q "controller silent" "$T/lost.err" || fail "lost controller: the agents did not say why they stopped"
rm -rf "/dev/shm/llmsys-robust-$cpid" # the killed controller's launch logs

# bad input: one line, exit 2, nothing started
echo '{"faults": [{"kind": "boom", "step": 3}]}' > "$T/bad.json"
for args in "--inject $T/bad.json" "--inject $T/missing.json" "--nodes 0" "--standby -1" "--hang-timeout 0" \
  "--ckpt-every -1"; do
  # shellcheck disable=SC2086
  timeout 20 "$BIN" robust run $args --report "$T/b.json" -- llmsys train "${TA[@]}" --out "$T/b.st" > /dev/null 2> "$T/b.err"
  rc=$?
  [ $rc -eq 2 ] || fail "'$args': exit $rc, expected 2"
  [ "$(wc -l < "$T/b.err")" -eq 1 ] || { fail "'$args': not one line"; cat "$T/b.err"; }
done
timeout 20 "$BIN" robust run --report "$T/b.json" -- llmsys eval --model x > /dev/null 2> "$T/b.err"
[ $? -eq 2 ] || fail "a non-train command is not a usage error"
timeout 20 "$BIN" robust run --report "$T/b.json" -- llmsys train "${TA[@]}" --ranks 2 --out x > /dev/null 2> "$T/b.err"
[ $? -eq 2 ] || fail "--ranks in the train command is not a usage error"
[ -e "$T/b.json" ] && fail "a usage error wrote a report"

# a command that fails at once: stopped after its first failure, its stderr shown, no loop
timeout 60 "$BIN" robust run --quiet --report "$T/f.json" -- llmsys train --config nope --data "$T/corpus.txt" \
  --steps 5 --out "$T/f.st" > /dev/null 2> "$T/f.err"
rc=$?
[ $rc -eq 1 ] || fail "failing command: exit $rc, expected 1"
grep -q "unknown model config 'nope'" "$T/f.err" || { fail "failing command: its stderr not shown"; cat "$T/f.err"; }
grep -q "not restarted" "$T/f.err" || fail "failing command: no diagnosis"

# standbys exhausted: diagnosis, exit 1, the last good state on disk (loads, step 6)
echo '{"faults": [{"kind": "crash", "step": 6, "rank": 0}]}' > "$T/x.plan.json"
timeout 60 "$BIN" robust run --quiet --standby 0 --inject "$T/x.plan.json" --ckpt-dir "$T/xck" --report "$T/x.json" \
  -- llmsys train "${TA[@]}" --out "$T/x.st" > /dev/null 2> "$T/x.err"
rc=$?
[ $rc -eq 1 ] || fail "standbys exhausted: exit $rc, expected 1"
grep -q "standbys exhausted" "$T/x.err" || { fail "standbys exhausted: no diagnosis"; cat "$T/x.err"; }
[ -f "$T/xck/ckpt-00000006.safetensors" ] || { fail "standbys exhausted: last good checkpoint missing"; ls "$T/xck"; }
timeout 30 "$BIN" train --data "$T/corpus.txt" --threads 1 --resume "$T/xck/ckpt-00000006.safetensors" --stop-at 7 \
  --out "$T/x2.st" > /dev/null 2>&1 || fail "standbys exhausted: the saved checkpoint does not resume"

[ -z "$(ls /dev/shm | grep llmsys-robust- || true)" ] || echo "note: shared-memory directories left: $(ls /dev/shm | grep llmsys-robust-)"
echo "faults.sh: $fails failure(s)"
[ $fails -eq 0 ]
