#!/usr/bin/env bash
# limits.sh - `llmsys robust run` at its limits: standbys exhausted by two node faults (and
# waited for with --repair), the restart bound with its back-off, a SIGKILLed agent (and one
# whose node's only other copy of the state is the standby's replica), SIGTERM to
# the controller, a step report of an earlier launch (forged: limits.sh BIN FORGE_STEP),
# malformed plans and flags.
# Tiny model, 1 rank per node, few steps; every run under `timeout`, every process ours killed.
. "$(dirname "$0")/lib.sh" "$1"
FORGE=$2
# the /metrics value of NAME on PORT (empty when not served)
# (the page's host is MHOST: 127.0.0.1 unless a case binds it elsewhere)
metric() { curl -g -s -m 5 "http://${MHOST:-127.0.0.1}:$1/metrics" 2> /dev/null | awk -v k="$2" '$1 == k {print $2}'; }
# waits until the job on PORT has reported step >= N (at most 120 s: ASan under load is slow)
wait_step() {
  for _ in $(seq 1 1200); do
    v=$(metric "$1" llmsys_robust_step)
    [ -n "$v" ] && [ "${v%.*}" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# waits for the background job PID of case NAME (started at t0): its exit status must be WANT,
# else ERRFILE is shown; the status stays in rc
reap() { # PID NAME WANT ERRFILE
  wait "$1"
  rc=$?
  echo "$2: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq "$3" ] || { fail "$2: exit $rc, expected $3"; cat "$4"; }
}
# the training ranks (not mpirun, not the controller) whose command line holds PATTERN
ranks_of() {
  for p in $(pgrep -f "$1"); do
    c=$(tr '\0' ' ' < /proc/$p/cmdline 2> /dev/null)
    case "$c" in *"robust run"* | *mpirun* | timeout*) ;; *--robust-agent*) echo "$p" ;; esac
  done
}
# the llmsys.step of a checkpoint, from its safetensors header
ckpt_step() {
  python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; print(json.loads(f.read(n))["__metadata__"]["llmsys.step"])' "$1"
}
corpus "$T/corpus.txt" 600
TA=(--config tiny --data "$T/corpus.txt" --batch 8 --seq 32 --threads 1 --log-every 100000)

# 1. standbys exhausted by two node faults (2 nodes x 1 rank, 1 standby): the first crash
#    takes the standby, the second (step 20) has none -> one diagnosis line, exit 1, the last
#    good state (the step it stopped at, >= 20) on disk; it passes its checksum and resumes
echo '{"faults": [{"kind": "crash", "step": 4, "rank": 0}, {"kind": "crash", "step": 20, "rank": 1}]}' > "$T/x.plan"
t0=$SECONDS
timeout 60 "$BIN" robust run --quiet --nodes 2 --ranks-per-node 1 --standby 1 --inject "$T/x.plan" \
  --ckpt-dir "$T/xck" --report "$T/x.json" -- llmsys train "${TA[@]}" --steps 40 --out "$T/x.st" \
  > /dev/null 2> "$T/x.err"
rc=$?
echo "exhausted: exit $rc in $((SECONDS - t0)) s"
[ $rc -eq 1 ] || { fail "exhausted: exit $rc, expected 1"; cat "$T/x.err"; }
[ "$(grep -c 'standbys exhausted' "$T/x.err")" -eq 1 ] || { fail "exhausted: not one diagnosis line"; cat "$T/x.err"; }
S=$(sed -n 's/.*stopped at step \([0-9]*\): standbys exhausted: node [0-9]* is faulty (crash on rank 1).*/\1/p' "$T/x.err")
{ [ -n "$S" ] && [ "$S" -ge 20 ] && [ "$S" -lt 40 ]; } || { fail "exhausted: diagnosis does not name a step in [20, 40) / rank 1"; cat "$T/x.err"; }
grep -q '"completed":[[:space:]]*false' "$T/x.json" || fail "exhausted: report does not say not completed"
[ -e "$T/x.st" ] && fail "exhausted: a final --out was written for an unfinished job"
X=$(printf '%s/xck/ckpt-%08d.safetensors' "$T" "${S:-0}")
if [ -f "$X" ]; then
  [ "$(ckpt_step "$X")" = "$S" ] || fail "exhausted: checkpoint step is $(ckpt_step "$X"), expected $S"
  # --resume verifies the XXH3 checksum; it must train on one more step
  timeout 30 "$BIN" train --data "$T/corpus.txt" --threads 1 --resume "$X" --stop-at $((S + 1)) --out "$T/x9.st" \
    > /dev/null 2> "$T/x9.err" || { fail "exhausted: the saved checkpoint does not resume"; cat "$T/x9.err"; }
  [ "$(ckpt_step "$T/x9.st" 2> /dev/null)" = $((S + 1)) ] || fail "exhausted: resumed run did not reach step $((S + 1))"
  # a flipped byte in it is refused (the checksum is really checked)
  cp "$X" "$T/bad.st"
  python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(-64,2); b=f.read(1); f.seek(-64,2); f.write(bytes([b[0]^255]))' "$T/bad.st"
  timeout 30 "$BIN" train --data "$T/corpus.txt" --threads 1 --resume "$T/bad.st" --stop-at $((S + 1)) --out "$T/xb.st" \
    > /dev/null 2> "$T/xb.err" && fail "exhausted: a corrupted copy of the checkpoint resumed"
  grep -q 'checksum mismatch' "$T/xb.err" || fail "exhausted: corrupted copy not refused by its checksum"
else
  fail "exhausted: last good checkpoint $X missing"
  ls "$T/xck"
fi

# 1b. with --repair 6 and the second crash a few steps after the first restart (so before the
#     node evicted at the first is back from repair, even under ASan): the second finds no
#     standby; the controller waits for that node (one "wait" event, then its "repair", then it
#     takes the free slot) and the job completes: exit 0, the final --out at step 40
#     The checkpoint directory holds a checkpoint of a later step from an earlier run: the
#     job's own disk checkpoints (every 10 steps, --keep 2) are pruned to steps 30 and 40, and
#     that file is neither taken nor counted among them.
echo '{"faults": [{"kind": "crash", "step": 4, "rank": 0}, {"kind": "crash", "step": 10, "rank": 1}]}' > "$T/r.plan"
mkdir -p "$T/rck" && echo "an earlier run's" > "$T/rck/ckpt-00000999.safetensors"
t0=$SECONDS
timeout 60 "$BIN" robust run --quiet --nodes 2 --ranks-per-node 1 --standby 1 --repair 6 --inject "$T/r.plan" \
  --ckpt-dir "$T/rck" --report "$T/r.json" -- llmsys train "${TA[@]}" --steps 40 --out "$T/r.st" \
  > /dev/null 2> "$T/r.err"
rc=$?
echo "repair wait: exit $rc in $((SECONDS - t0)) s"
[ $rc -eq 0 ] || { fail "repair wait: exit $rc, expected 0"; cat "$T/r.err"; }
kept=$(cd "$T/rck" && echo ckpt-*.safetensors)
[ "$kept" = "ckpt-00000030.safetensors ckpt-00000040.safetensors ckpt-00000999.safetensors" ] ||
  fail "repair wait: checkpoints kept: $kept"
rm -f "$T/rck/ckpt-00000999.safetensors"
grep -q 'standbys exhausted' "$T/r.err" && fail "repair wait: stopped for want of a standby"
[ "$(ckpt_step "$T/r.st" 2> /dev/null)" = 40 ] || fail "repair wait: final --out is not at step 40"
python3 - "$T/r.json" << 'PY' || fail "repair wait: report's timeline (above) is not wait for node N -> its repair -> it takes a slot"
import json, re, sys
r = json.load(open(sys.argv[1]))
ev = [(e["event"], e["detail"]) for e in r["timeline"]]
w = [i for i, (k, d) in enumerate(ev) if k == "wait"]
ok = r["completed"] and r["restarts"] == 2 and len(w) == 1
if ok:
    m = re.search(r"waiting ([0-9.]+) s for node ([0-9]+) ", ev[w[0]][1])
    nxt = [e for e in ev[w[0] + 1 :] if e[0] in ("repair", "evict")][:2]  # (a world may park meanwhile)
    ok = (m is not None and 0 <= float(m.group(1)) <= 6 and len(nxt) == 2
          and nxt[0] == ("repair", "node %s repaired: back among the warm standbys" % m.group(2))
          and nxt[1][0] == "evict" and "warm standby node %s takes slot" % m.group(2) in nxt[1][1])
if not ok:
    print("\n".join("%s %s" % e for e in ev), file=sys.stderr)
sys.exit(0 if ok else 1)
PY

# 1c. the same with --repair 60, and SIGTERM to the controller while it waits: it stops at once
#     (not after the repair) with the interrupt's diagnosis, exit 1
t0=$SECONDS
timeout 90 "$BIN" robust run --nodes 2 --ranks-per-node 1 --standby 1 --repair 60 --inject "$T/r.plan" \
  --ckpt-dir "$T/wck" --report "$T/w.json" -- llmsys train "${TA[@]}" --steps 40 --out "$T/w.st" \
  > /dev/null 2> "$T/w.err" &
wpid=$!
for _ in $(seq 1 600); do grep -q '\] wait ' "$T/w.err" && break; sleep 0.1; done
grep -q '\] wait ' "$T/w.err" || fail "repair wait, interrupted: no wait within 60 s"
kill -TERM "$(pgrep -P $wpid -f 'robust run')"
reap $wpid "repair wait, interrupted" 1 "$T/w.err"
[ $((SECONDS - t0)) -lt 50 ] || fail "repair wait, interrupted: took $((SECONDS - t0)) s: the wait ignored SIGTERM"
grep -q 'stopped at step [0-9]*: interrupted (signal 15)' "$T/w.err" || { fail "repair wait, interrupted: no interrupt diagnosis"; cat "$T/w.err"; }

# 2. restart bound and back-off: the data disappears after a few steps and a rank is killed;
#    every relaunch then fails before its first step. --max-restarts 3: restart 1 at once,
#    then 0.5 s and 1 s of back-off (doubling), then the limit: exit 1, last good state on disk.
#    (--no-prestart: a world pre-started before the data went would still have it open.)
# SN steps: a Release rank takes about 12 ms a step, so the window between its first checkpoint
# and its last step, in which this script must stop it, is SN x 12 ms; the rank stays stopped a
# few seconds, under load more, which --hang-timeout 60 keeps from being taken for a hang
SN=120
PORT=$(freeport)
t0=$SECONDS
timeout 90 "$BIN" robust run --nodes 1 --ranks-per-node 1 --standby 4 --max-restarts 3 --no-prestart \
  --status-port "$PORT" --ckpt-dir "$T/bck" --report "$T/r.json" \
  -- llmsys train "${TA[@]}" --data "$T/corpus2.txt" --steps 100000 --out "$T/r.st" > /dev/null 2> "$T/r.err" &
rpid=$!
cp "$T/corpus.txt" "$T/corpus2.txt"
if wait_step "$PORT" 3; then
  rm -f "$T/corpus2.txt"
  rk=$(ranks_of "$T/r.st")
  [ -n "$rk" ] || fail "restarts: no rank found"
  for p in $rk; do kill -9 "$p" 2> /dev/null; done
else
  fail "restarts: the job never reached step 3"
fi
reap $rpid restarts 1 "$T/r.err"
grep -q 'restart limit reached (3 restarts' "$T/r.err" || { fail "restarts: no restart-limit diagnosis"; cat "$T/r.err"; }
# the back-off delays, in timeline order: 0.5 then 1.0 (non-decreasing, doubling)
bo=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
tl = r["timeline"]
b = [float(e["detail"].split()[0]) for e in tl if e["event"] == "backoff"]
ok = all(x <= y for x, y in zip(b, b[1:]))
# each back-off really waited: the next relaunch comes at least that much later
for i, e in enumerate(tl):
    if e["event"] == "backoff":
        nxt = [f for f in tl[i + 1:] if f["event"] == "relaunch"]
        if not nxt or nxt[0]["t"] - e["t"] < float(e["detail"].split()[0]) - 0.01: ok = False
print(" ".join("%g" % x for x in b), "ok" if ok else "BAD")' "$T/r.json" 2>&1)
[ "$bo" = "0.5 1 ok" ] || fail "restarts: back-off delays '$bo', expected '0.5 1 ok'"
# (its own directory: case 1b's checkpoints of steps 30 and 40 would pass this check by themselves)
n=$(ls "$T/bck"/ckpt-*.safetensors 2> /dev/null | tail -1)
[ -n "$n" ] && [ "$(ckpt_step "$n")" -ge 3 ] || { fail "restarts: no last good checkpoint (step >= 3) on disk"; ls "$T/bck"; }

# 3. a SIGKILLed agent: silent for 3 s -> its node is lost, evicted, the standby promoted,
#    the job resumed and completed with the losses of an uninterrupted run. Rank 1 runs at 5%
#    of a core (an injected slow rank, its detector off) so that the job outlasts the detection;
#    the relaunched ranks run at full speed. No in-memory snapshots (--ckpt-every 0): the
#    standby receives no replicas, so only its heartbeats keep it from being taken for lost
#    before it is needed. A disk checkpoint every step (--disk-every 1): while the lost agent
#    goes unnoticed the ranks save steps whose reports never arrive, and the restart must not
#    resume from one of those (its loss would be missing from the report).
echo '{"faults": [{"kind": "slow", "step": 1, "rank": 1, "share": 0.05}]}' > "$T/a.plan"
timeout 180 mpirun -q -np 2 "${root[@]}" --oversubscribe --bind-to none "$BIN" train "${TA[@]}" --steps 100 \
  --out "$T/ref.st" --report "$T/ref.json" > /dev/null 2> "$T/ref.err" || { fail "reference run"; cat "$T/ref.err"; }
# kill_agent NAME STEP ERRFILE -- ROBUST-RUN-ARGS...: the job in the background with a status
# page; once it has reported STEP, the agent of node 0 is SIGKILLed; the job must exit 0
kill_agent() {
  local name=$1 step=$2 err=$3 apid cpid ag
  shift 4
  PORT=$(freeport)
  t0=$SECONDS
  timeout 240 "$BIN" robust run --status-port "$PORT" "$@" > /dev/null 2> "$err" &
  apid=$!
  if wait_step "$PORT" "$step"; then
    cpid=$(pgrep -P $apid -f 'robust run')
    ag=$(pgrep -P "$cpid" -f 'robust agent --id 0 ')
    [ -n "$ag" ] && kill -9 "$ag" || fail "$name: agent of node 0 not found"
  else
    fail "$name: the job never reached step $step"
  fi
  reap $apid "$name" 0 "$err"
}
kill_agent agent 2 "$T/a.err" -- --nodes 2 --ranks-per-node 1 --standby 1 --inject "$T/a.plan" --slow-window 0 \
  --ckpt-every 0 --disk-every 1 --ckpt-dir "$T/ack" --report "$T/a.json" -- llmsys train "${TA[@]}" --steps 100 --out "$T/a.st"
python3 - "$T/a.json" "$T/ref.json" << 'EOF' || { fail "agent: report check"; cat "$T/a.err"; }
import json, sys
a, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
f = [x for x in a["faults"] if x["kind"] == "agent"]
assert a["completed"], "not completed"
assert len(f) == 1 and f[0]["node"] == 0, "no agent fault on node 0: %s" % a["faults"]
ev = [e["detail"] for e in a["timeline"] if "node 0" in e["detail"] and "silent" in e["detail"]]
assert ev, "timeline lacks the lost agent"
assert f[0]["promoted_node"] == 2, "standby 2 not promoted: %s" % f[0]
lost = [e["detail"] for e in a["timeline"] if "silent" in e["detail"] and "node 0" not in e["detail"]]
assert not lost and a["node_states"] == ["evicted", "active", "active"], "%s, node states %s" % (lost, a["node_states"])
la, lr = a["losses"], ref["losses"]
assert len(la) == 100 and la == lr, "losses differ from the uninterrupted run: %d vs %d steps, first difference at index %s; recomputed mismatches %s" % (len(la), len(lr), next((i for i, (x, y) in enumerate(zip(la, lr)) if x != y), None), a.get("recomputed_loss_mismatches"))
EOF

# 3b. a node's own snapshots lost with it: 1 node x 2 ranks and 1 standby, a snapshot in memory
#    every step and no disk checkpoints. The agent of node 0 is SIGKILLed (its ranks go with
#    it); the only state left is the replica node 0 sent the standby, so the job must resume
#    on the standby from memory at a step past 0 (not from scratch), with the losses of the
#    uninterrupted run (the same 2 ranks as case 3's reference).
kill_agent replica 3 "$T/rep.err" -- --nodes 1 --ranks-per-node 2 --standby 1 --inject "$T/a.plan" --slow-window 0 \
  --ckpt-every 1 --disk-every 0 --ckpt-dir "$T/repck" --report "$T/rep.json" -- llmsys train "${TA[@]}" --steps 100 --out "$T/rep.st"
python3 - "$T/rep.json" "$T/ref.json" << 'EOF' || { fail "replica: report check"; cat "$T/rep.err"; }
import json, sys
a, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
f = [x for x in a["faults"] if x["kind"] == "agent"]
assert a["completed"], "not completed"
assert len(f) == 1 and f[0]["node"] == 0 and f[0]["promoted_node"] == 1, "no agent fault on node 0 with node 1 promoted: %s" % a["faults"]
assert f[0]["resumed_from"] == "memory" and f[0]["resumed_step"] >= 3, "resumed from %s at step %s, not from the standby's replica" % (f[0].get("resumed_from"), f[0].get("resumed_step"))
assert a["node_states"] == ["evicted", "active"], "node states %s" % a["node_states"]
assert a["losses"] == ref["losses"], "losses differ from the uninterrupted run"
EOF

# 4. SIGTERM to the controller (Ctrl-C alike): the job stopped, exit 1, one diagnosis line,
#    the last good state on disk at the step it stopped, nothing left running, no /dev/shm dir.
#    Its status page is on the IPv6 loopback where lo has IPv6: watched at http://[::1]:PORT,
#    and the report's timeline names that URL.
PORT=$(freeport)
SB=127.0.0.1 MHOST=127.0.0.1
[ "$(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2> /dev/null || echo 1)" = 0 ] && SB=::1 MHOST='[::1]'
t0=$SECONDS
timeout 60 "$BIN" robust run --quiet --nodes 2 --ranks-per-node 1 --ckpt-dir "$T/ick" --report "$T/i.json" \
  --status-port "$PORT" --status-bind "$SB" -- llmsys train "${TA[@]}" --steps 100000 --out "$T/i.st" > /dev/null 2> "$T/i.err" &
ipid=$!
wait_step "$PORT" 2 || fail "interrupt: the job never reached step 2 (status page on $MHOST)" # a state to save (slow under ASan)
icpid=$(pgrep -P $ipid -f 'robust run')
kill -TERM "$icpid"
reap $ipid interrupt 1 "$T/i.err"
S=$(sed -n 's/.*stopped at step \([0-9]*\): interrupted (signal 15).*/\1/p' "$T/i.err")
[ -n "$S" ] || { fail "interrupt: no diagnosis"; cat "$T/i.err"; }
[ -f "$(printf '%s/ick/ckpt-%08d.safetensors' "$T" "${S:-0}")" ] || { fail "interrupt: no checkpoint of step $S"; ls "$T/ick"; }
grep -q '"completed":[[:space:]]*false' "$T/i.json" || fail "interrupt: no report"
grep -qF "http://$MHOST:$PORT/" "$T/i.json" || fail "interrupt: the timeline lacks the status URL http://$MHOST:$PORT/"
MHOST=127.0.0.1
[ -n "$(ranks_of "$T/i.st")" ] && fail "interrupt: ranks still running"
[ -e "/dev/shm/llmsys-robust-$icpid" ] && fail "interrupt: /dev/shm/llmsys-robust-$icpid left behind"

# 5. a step report of an earlier launch (one that reached its agent before a kill and the
#    controller after the next launch began) is dropped. That race cannot be timed, so such a
#    report is forged (forge_step): rank 0, the last step, loss 0.25, a process id that is no
#    rank's (this script's), sent to the controller's endpoint (the agent's --controller
#    argument: loopback, no CURVE) while the only rank, stopped once it has saved its first
#    step, cannot move the job. The job's step must stay short of SN, and the run end as an
#    uninterrupted one: no fault, every loss the rank's own (a taken report's loss, replaced
#    by the rank's at step SN, would count as a recomputed mismatch). Then an exit report of
#    that earlier launch ("signal 9", same process id): taken, it would be a crash to recover.
# SN steps: a Release rank takes about 12 ms a step, so the window between its first checkpoint
# and its last step, in which this script must stop it, is SN x 12 ms; the rank stays stopped a
# few seconds, under load more, which --hang-timeout 60 keeps from being taken for a hang
SN=120
PORT=$(freeport)
t0=$SECONDS
timeout 90 "$BIN" robust run --quiet --nodes 1 --ranks-per-node 1 --standby 0 --no-prestart --status-port "$PORT" \
  --hang-timeout 60 --disk-every 1 --ckpt-dir "$T/sck" --report "$T/s.json" -- llmsys train "${TA[@]}" --steps $SN \
  --out "$T/s.st" > /dev/null 2> "$T/s.err" &
spid=$!
rk=
for _ in $(seq 1 3000); do
  [ -z "$rk" ] && rk=$(ranks_of "$T/s.st")
  ck=("$T"/sck/ckpt-*.safetensors)
  [ -n "$rk" ] && [ -e "${ck[0]}" ] && break
  if [ -n "$rk" ]; then sleep 0.005; else sleep 0.02; fi
done
if [ -n "$rk" ] && [ -e "${ck[0]}" ] && kill -STOP "$rk"; then
  sleep 1 # the reports on their way arrive; the status page (every 0.5 s) shows the last
  k=$(metric "$PORT" llmsys_robust_step)
  ag=$(pgrep -P "$(pgrep -P $spid -f 'robust run')" -f 'robust agent --id 0 ')
  ep=$(tr '\0' '\n' < "/proc/$ag/cmdline" 2> /dev/null | sed -n '/^--controller$/{n;p;q}')
  if [ -z "$ep" ] || [ "${k:-$SN}" -ge $SN ]; then
    fail "stale report: controller endpoint '$ep', job step '$k'"
  elif timeout 20 "$FORGE" "$ep" step 0 $SN $$ 0.25; then
    echo "stale: a report of step $SN forged while the rank is stopped at step $k"
    sleep 1.2 # read by the controller within milliseconds, shown on the page within 0.5 s
    v=$(metric "$PORT" llmsys_robust_step)
    # (a report of the stopped rank still on its way under load may move it a step or two)
    [ -n "$v" ] && [ "${v%.*}" -lt $SN ] ||
      fail "stale report: job step '$v' after a forged report of step $SN (rank stopped at step $k)"
    timeout 20 "$FORGE" "$ep" exit 0 0 $$ 0 || fail "stale report: forge_step exit failed"
    sleep 0.5
  else
    fail "stale report: forge_step failed"
  fi
  kill -CONT "$rk"
else
  fail "stale report: no rank stopped after its first checkpoint (rank '$rk')"
fi
reap $spid stale 0 "$T/s.err"
python3 - "$T/s.json" $SN << 'EOF' || fail "stale report: report check"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["completed"] and not j["faults"], "completed %s, faults %s" % (j["completed"], j["faults"])
assert j["recomputed_loss_mismatches"] == 0, "%d recomputed loss mismatch(es)" % j["recomputed_loss_mismatches"]
assert len(j["losses"]) == int(sys.argv[2]), "%d losses" % len(j["losses"])
EOF

# 6. bad input: one line, exit 2, nothing started
printf '{"faults": [{"kind": "crash", "step": 3' > "$T/trunc.json"
echo '{"faults": [{"kind": "crash", "step": 3, "rank": 4}]}' > "$T/rank.json"
echo '{"faults": [{"kind": "crash", "step": 0}]}' > "$T/step0.json"
echo '{"faults": [{"kind": "slow", "step": 2, "share": 1.5}]}' > "$T/share.json"
echo '{"faults": [{"kind": "crash", "step": 2, "bogus": 1}]}' > "$T/field.json"
for args in "--inject $T/trunc.json" "--inject $T/rank.json" "--inject $T/step0.json" "--inject $T/share.json" \
  "--inject $T/field.json" "--max-restarts -1" "--bogus-flag" "--nodes x"; do
  # shellcheck disable=SC2086
  timeout 20 "$BIN" robust run $args --report "$T/b.json" -- llmsys train "${TA[@]}" --steps 5 --out "$T/b.st" \
    > /dev/null 2> "$T/b.err"
  rc=$?
  [ $rc -eq 2 ] || fail "'$args': exit $rc, expected 2"
  [ "$(wc -l < "$T/b.err")" -eq 1 ] || { fail "'$args': not one line"; cat "$T/b.err"; }
done
[ -e "$T/b.json" ] && fail "a usage error wrote a report"
# an empty --status-bind (was: taken for 127.0.0.1)
timeout 20 "$BIN" robust run --status-port -1 --status-bind '' --report "$T/b.json" -- llmsys train "${TA[@]}" \
  --steps 5 --out "$T/b.st" > /dev/null 2> "$T/b.err"
[ $? -eq 2 ] && grep -q "bad bind address ''" "$T/b.err" || { fail "--status-bind ''"; cat "$T/b.err"; }
[ -e "$T/b.json" ] && fail "--status-bind '' wrote a report"
# an agent's --controller that is not an endpoint (was: "refusing ... without CURVE keys"): a
# bad flag value, exit 2
timeout 20 "$BIN" robust agent --id 0 --controller abc > /dev/null 2> "$T/b.err"
[ $? -eq 2 ] && grep -q "bad endpoint 'abc'" "$T/b.err" || { fail "agent --controller abc"; cat "$T/b.err"; }

echo "limits.sh: $fails failure(s)"
[ $fails -eq 0 ]
