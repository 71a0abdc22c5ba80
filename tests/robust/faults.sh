#!/usr/bin/env bash
# faults.sh - every injected fault kind recovered by `llmsys robust run` on 2 nodes x 2 ranks
# with warm standbys, the losses after recovery bit-identical to an uninterrupted 4-rank run
# of the same command; the status page; an agent losing its controller; then bad input: a
# command failing at once, malformed plans and flags (standbys exhausted: limits.sh).
# Small steps (batch 8 x seq 32, 24 steps): under load the run time is the steps' compute.
. "$(dirname "$0")/lib.sh" "$1"
corpus "$T/corpus.txt" 1500
TA=(--config tiny --data "$T/corpus.txt" --batch 8 --seq 32 --steps 24 --threads 1 --log-every 100)

# the slow-rank runs take larger steps (batch 16 x seq 64): a rank held to 2% of a core must
# need many CPU-quota periods per step to fall behind the others at every step
TS=(--config tiny --data "$T/corpus.txt" --batch 16 --seq 64 --steps 24 --threads 1 --log-every 100)

# the references: uninterrupted 4-rank runs of the same commands (the larger one meanwhile)
reference() {
  local name=$1
  shift
  timeout 90 mpirun -q -np 4 "${root[@]}" --oversubscribe --bind-to none "$BIN" train "$@" > /dev/null 2> "$T/$name.err" \
    || { echo "FAIL: reference run $name"; cat "$T/$name.err"; }
}
reference ref16 "${TS[@]}" --out "$T/ref16.st" --report "$T/ref16.json" > "$T/ref16.log" 2>&1 &
REF16=$!
reference ref "${TA[@]}" --out "$T/ref.st" --report "$T/ref.json" | tee -a "$T/ref.log"
fails=$((fails + $(grep -c '^FAIL' "$T/ref.log" 2> /dev/null || true)))

RUN_TA=("${TA[@]}")
RUN_REF=ref
losses() { tr -d ' \n\t' < "$1" | grep -o '"losses":\[[^]]*\]'; }
# what a report says happened (a failing case prints it: CI keeps no files)
summary() {
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
for f in j.get("faults", []):
    print("  fault:", f.get("kind"), "rank", f.get("rank"), "step", f.get("step"), "-", f.get("detail"))
for e in j.get("timeline", [])[-25:]:
    print("  timeline:", json.dumps(e)[:200])' "$1" 2>&1 | head -40
}
# check NAME PYTHON: PYTHON asserts on the report j of case NAME (its faults in fs, by kind in
# kinds); a failed assertion fails the case with its message
check() {
  python3 - "$T/$1.json" "$2" << 'EOF' || fail "$1: report check"
import json, sys
j = json.load(open(sys.argv[1]))
fs = j["faults"]
kinds = {}
for f in fs:
    kinds.setdefault(f["kind"], []).append(f)
try:
    exec(sys.argv[2])
except AssertionError as e:
    print("  report check:", e)
    sys.exit(1)
EOF
}
# every fault localized to a node reports the localization time its timeline line gave
# (localized - detected, printed to 0.01 s)
LOC_TIMES='
import re
loc = [e["detail"] for e in j["timeline"] if e["event"] == "localize"]
for f in fs:
    if f["node"] < 0:
        continue
    head = "%s: rank %d on node %d (" % (f["kind"], f["rank"], f["node"])
    ts = [float(re.search(r"\(([0-9.]+) s\)$", d).group(1)) for d in loc if d.startswith(head)]
    assert any(abs(t - f["localization_s"]) < 0.006 for t in ts), \
        "%s: localization_s %.3f, timeline says %s" % (head, f["localization_s"], ts)
'
# run NAME PLAN EXPECTED_KINDS [robust options...]
run() {
  local name=$1 plan=$2 kinds=$3
  shift 3
  echo "$plan" > "$T/$name.plan.json"
  local t0=$SECONDS
  timeout 90 "$BIN" robust run --quiet --inject "$T/$name.plan.json" --report "$T/$name.json" "$@" \
    -- llmsys train "${RUN_TA[@]}" --out "$T/$name.st" > "$T/$name.out" 2> "$T/$name.err"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { fail "$name: exit $rc"; cat "$T/$name.err"; return; }
  grep -q '"completed":[[:space:]]*true' "$T/$name.json" || fail "$name: not completed"
  [ "$(losses "$T/$name.json")" = "$(losses "$T/$RUN_REF.json")" ] || fail "$name: losses differ from the uninterrupted run"
  grep -q '"recomputed_loss_mismatches":[[:space:]]*0' "$T/$name.json" || fail "$name: a recomputed step's loss differs"
  check "$name" "$LOC_TIMES"
  for k in $kinds; do
    grep -q "\"kind\":[[:space:]]*\"$k\"" "$T/$name.json" || {
      fail "$name: no $k fault in the report"
      cat "$T/$name.err"
      summary "$T/$name.json"
    }
  done
}

# crash (SIGKILL), NaN (poisoned gradient; replay does not repeat -> node), OOM: 3 standbys;
# the agents hold the NaN report 1.5 s, as a starved agent would, while the ranks' exits that
# it explains arrive (judged a crash when agents' silence counted as quiet: CI's ASan run)
LLMSYS_ROBUST_LAG_S=1.5 run mixed '{"faults": [{"kind": "crash", "step": 5, "rank": 3}, {"kind": "nan", "step": 12, "rank": 1},
  {"kind": "oom", "step": 20, "rank": 2}]}' "crash nan oom" --standby 3 --disk-every 5
grep -q 'does not repeat: the node' "$T/mixed.json" || fail "mixed: NaN replay verdict missing"
# each fault evicted its own node and promoted a different standby (nodes 2-4); the job ends
# on 2 active nodes, the 3 faulty ones evicted; the crash resumed from a snapshot in memory
check mixed '
for f in fs:
    assert f["evicted_node"] == f["node"] and f["promoted_node"] >= 2, "evicted/promoted: %s" % f
assert len({f["promoted_node"] for f in fs}) == len(fs), "a standby promoted twice"
st = j["node_states"]
assert st.count("active") == 2 and st.count("evicted") == 3, "node states %s" % st
assert kinds["crash"][0]["resumed_from"] == "memory", "crash resumed from %s" % kinds["crash"][0]["resumed_from"]
'
# every restart promoted the pre-started world (MPI up, data open) instead of a fresh mpirun
[ "$(grep -c 'pre-started world [0-9]* promoted' "$T/mixed.json")" -eq 3 ] || fail "mixed: not every restart was warm"
# two faults at the same step on two nodes: whichever is detected first, the other (swallowed
# by the recovery, or not yet fired) fires again in a relaunched job and is handled on its
# own; a time-triggered crash due before the first step waits for it (under load it can land
# at step 6 too: then two faults are re-armed, and fire one at a time)
run race '{"faults": [{"kind": "crash", "step": 6, "rank": 3}, {"kind": "hang", "step": 6, "rank": 1},
  {"kind": "crash", "time": 0.5, "rank": 0}]}' "crash hang" --standby 3 --hang-timeout 2
[ "$(grep -o '"detection_s"' "$T/race.json" | wc -l)" -eq 3 ] || fail "race: not 3 faults handled"
# every fault swallowed by a recovery fired again, by the controller
[ "$(grep -c 'fired into the stopped job' "$T/race.json")" -eq "$(grep -c '"rearm"' "$T/race.json")" ] \
  || fail "race: a swallowed fault was not fired again"
# the hang (SIGSTOP): detected after the timeout, localized by grouped stack dumps to rank 1;
# the stopped rank's stack is the odd one out, unless it was stopped inside the all-reduce
# too (then its process state names it)
tr -d ' \n\t' < "$T/race.json" | grep -q '"kind":"hang","rank":1,' || fail "race: the hang not localized to rank 1"
grep -q -e '"outlier":[[:space:]]*true' -e 'process state (stopped)' "$T/race.json" || fail "race: neither an outlier stack group nor a stopped process"
grep -q 'PMPI_Allreduce' "$T/race.json" || fail "race: stacks not kept in the report"
# the hang is counted from its injection: detection takes the 2 s timeout (from the last step
# report, at most a step before the rank stopped)
check race '
h = kinds["hang"][-1]
assert h["injected"] and h["detection_s"] >= 1.0, "hang detection_s %.3f (injected %s)" % (h["detection_s"], h["injected"])
'
# slow rank (CPU quota or duty cycle) under extra host-wide load (two busy loops, one per
# core): an outlier against the median rank in windows of 2 steps after the warm-up window;
# named at the first report of step 9 (3 windows: steps 3-8) when no window is lost to the
# load, and accepted up to step 15 (6 windows): this run checks that the right rank is named
# under load, test_robust that the rule takes exactly 3 windows; a retry absorbs a miss
slow_plan='{"faults": [{"kind": "slow", "step": 2, "rank": 2, "share": 0.02}]}'
wait "$REF16"
cat "$T/ref16.log"
fails=$((fails + $(grep -c '^FAIL' "$T/ref16.log")))
RUN_TA=("${TS[@]}")
RUN_REF=ref16
busy() { (while :; do :; done) & B1=$!; (while :; do :; done) & B2=$!; }
busy
# meanwhile the same load and no slow rank: nothing may be flagged at factor 3 (at 1.5, two
# parallel jobs, two busy loops and the rest of the suite on 2 cores made a rank 1.6x late in
# 3 windows running: preemption is not host-wide when jobs outnumber cores); this run also
# serves the status page and Prometheus /metrics (127.0.0.1, a free port), read while it trains
PORT=$(freeport)
timeout 90 "$BIN" robust run --quiet --slow-window 3 --slow-factor 3 --status-port "$PORT" --report "$T/calm.json" \
  -- llmsys train "${TS[@]}" --out "$T/calm.st" > /dev/null 2> "$T/calm.err" &
CALM=$!
status_poll() {
  for _ in $(seq 1 600); do
    m=$(curl -s -m 5 "http://127.0.0.1:$PORT/metrics" || true)
    if echo "$m" | grep -q '^llmsys_robust_step [1-9]'; then
      echo "$m" > "$T/metrics.txt"
      curl -s -m 5 "http://127.0.0.1:$PORT/" > "$T/page.html"
      return
    fi
    sleep 0.1
  done
}
status_poll &
POLL=$!
slow_ok() { tr -d ' \n\t' < "$T/slow.json" | grep -Eq '"kind":"slow","rank":2,"node":1,"step":(9|1[0-5]),'; }
before=$fails
run slow "$slow_plan" "slow" --hang-timeout 15 --slow-window 2 --slow-factor 1.5
slow_ok || fail "slow: rank 2 not named within 6 windows: $(tr -d ' \n\t' < "$T/slow.json" | grep -o '"kind":"slow"[^}]*' | head -c 120)"
if [ $fails -gt $before ]; then
  echo "slow: retrying once (load $(cut -d' ' -f1 /proc/loadavg))"
  fails=$before
  run slow "$slow_plan" "slow" --hang-timeout 15 --slow-window 2 --slow-factor 1.5
  slow_ok || fail "slow: rank 2 not named within 6 windows"
fi
wait "$CALM" || { fail "calm: exit $?"; cat "$T/calm.err"; }
wait "$POLL"
grep -q '"completed":[[:space:]]*true' "$T/calm.json" || fail "calm: not completed"
grep -q '"kind"' "$T/calm.json" && fail "calm: a fault raised under load alone: $(grep -o '"detail":[^,]*' "$T/calm.json" | head -1)"
kill "$B1" "$B2" 2> /dev/null
wait "$B1" "$B2" 2> /dev/null
[ -s "$T/metrics.txt" ] || fail "status: no /metrics with progress on port $PORT"
for k in 'llmsys_robust_nodes{state="active"} 2' 'llmsys_robust_nodes{state="standby"} 1' 'llmsys_robust_ranks 4' \
  'llmsys_robust_faults_total{kind="crash"} 0' 'llmsys_robust_ettr '; do
  grep -qF "$k" "$T/metrics.txt" 2> /dev/null || fail "status: /metrics lacks '$k'"
done
grep -q "llmsys robust" "$T/page.html" 2> /dev/null || fail "status: no status page"
grep -q '"slow_method"' "$T/slow.json" || fail "slow: throttling method not stated"
RUN_TA=("${TA[@]}")
RUN_REF=ref
# disk checkpoints only: a NaN at step 10 (its poisoned state is already on disk as step 10) is
# replayed and resumed from step 5, the checkpoint before it; then the newest disk checkpoint
# is corrupted and a crash resumes from the previous one
run corrupt '{"faults": [{"kind": "nan", "step": 10, "rank": 1}, {"kind": "corrupt-ckpt", "step": 16},
  {"kind": "crash", "step": 18, "rank": 0}]}' "nan corrupt-ckpt crash" --ckpt-every 0 --disk-every 5 --standby 2
grep -q '"resumed_step":[[:space:]]*10' "$T/corrupt.json" || fail "corrupt: did not fall back to step 10"
# the crash redid exactly the steps after the checkpoint it resumed from
check corrupt '
n, c = kinds["nan"][0], kinds["crash"][0]
assert n["resumed_from"] == "disk" and n["resumed_step"] == 5 and n["localization"]["replay_from"] == 5, "nan: %s" % n
assert c["resumed_step"] == 10 and c["recomputed_steps"] == c["step"] - 10, "crash: %s" % c
'

# an agent that loses its controller keeps its ranks for the grace period (5 s), then stops
# them cleanly: they agree, save --out and exit; the agents exit too
# (no `timeout` wrapper: the kill must reach the controller itself); it runs in the
# background while the sticky NaN and the bad input are checked (mostly waiting)
lost_controller() {
  local lport
  lport=$(freeport)
  "$BIN" robust run --quiet --status-port "$lport" --report "$T/lost.json" -- llmsys train "${TA[@]}" --steps 100000 \
    --out "$T/lost.st" > /dev/null 2> "$T/lost.err" &
  cpid=$!
  # the job trains (a step reported; at most 120 s: ASan under load starts slowly)
  for _ in $(seq 1 1200); do
    curl -s -m 5 "http://127.0.0.1:$lport/metrics" 2> /dev/null | grep -q '^llmsys_robust_step [1-9]' && break
    sleep 0.1
  done
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
}
lost_controller > "$T/lost.log" 2>&1 &
LOST=$!

# a NaN that the data itself causes (sticky): the replay repeats it -> data or model, stopped.
# No standby: the state before the NaN comes from the active nodes' own memory (a standby's
# replica would stand in for a node that kept only the newest step)
echo '{"faults": [{"kind": "nan", "step": 8, "rank": 1, "sticky": 1}]}' > "$T/sticky.plan.json"
timeout 60 "$BIN" robust run --quiet --standby 0 --inject "$T/sticky.plan.json" --ckpt-dir "$T/sck" --report "$T/sticky.json" \
  -- llmsys train "${TA[@]}" --out "$T/sticky.st" > /dev/null 2> "$T/sticky.err"
rc=$?
[ $rc -eq 1 ] || fail "sticky NaN: exit $rc, expected 1"
grep -q "repeats on replay" "$T/sticky.err" || { fail "sticky NaN: no data/model diagnosis"; cat "$T/sticky.err"; }
[ -f "$T/sck/ckpt-00000007.safetensors" ] || fail "sticky NaN: last good checkpoint (step 7) not on disk"

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

wait "$LOST"
cat "$T/lost.log"
fails=$((fails + $(grep -c '^FAIL' "$T/lost.log")))

[ -z "$(ls /dev/shm | grep llmsys-robust- || true)" ] || echo "note: shared-memory directories left: $(ls /dev/shm | grep llmsys-robust-)"
echo "faults.sh: $fails failure(s)"
[ $fails -eq 0 ]
