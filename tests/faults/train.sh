#!/usr/bin/env bash
# train.sh - fault injection against `llmsys train --ranks 2`: kill -9 of a rank ends the
# job with one line naming the lost rank (was: a bare exit 137); SIGSTOP of a rank is
# reported while the others wait, and after SIGCONT the run ends with the same losses as an
# uninterrupted one.
. "$(dirname "$0")/lib.sh"
command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
corpus "$T/c.txt" 800
TA=(--config tiny --data "$T/c.txt" --batch 8 --seq 32 --threads 1 --log-every 1000 --ranks 2)
# the pid of rank R of the job whose output goes to $T/$NAME.st
rank_pid() {
  for p in $(pgrep -f -- "--out $T/$2.st"); do
    tr '\0' '\n' < /proc/"$p"/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
wait_rank() { for i in $(seq 1 300); do r=$(rank_pid "$1" "$2"); [ -n "$r" ] && { echo "$r"; return; }; sleep 0.1; done; }
losses() { tr -d ' \n\t' < "$1" | grep -o '"losses":\[[^]]*\]'; }

# --- kill -9 of rank 1: one line naming it, non-zero exit
"$BIN" train "${TA[@]}" --steps 100000 --out "$T/k.st" > "$T/k.out" 2> "$T/k.err" &
J=$!
R1=$(wait_rank 1 k)
[ -n "$R1" ] || fail "rank 1 not found"
for i in $(seq 1 300); do grep -q "^step 1/" "$T/k.err" && break; sleep 0.1; done
kill -9 "$R1"
wait $J; rc=$?
echo "kill -9 of rank 1: exit $rc: $(grep 'was lost' "$T/k.err")"
[ $rc -ne 0 ] || fail "job exit 0 after a rank was killed"
grep -q "rank 1 of 2 (pid $R1) was lost .*killed by signal 9" "$T/k.err" || { fail "no line naming the lost rank"; cat "$T/k.err"; }

# --- SIGSTOP of rank 0 for 3 s: reported, then the run completes with the uninterrupted losses
timeout 60 "$BIN" train "${TA[@]}" --steps 40 --out "$T/ref.st" --report "$T/ref.json" > /dev/null 2> "$T/ref.err" \
  || { fail "reference run"; cat "$T/ref.err"; }
timeout 90 "$BIN" train "${TA[@]}" --steps 40 --out "$T/s.st" --report "$T/s.json" > "$T/s.out" 2> "$T/s.err" &
J=$!
R0=$(wait_rank 0 s)
[ -n "$R0" ] || fail "rank 0 not found"
# stopped once training runs (the ranks have registered their pids by then)
for i in $(seq 1 300); do grep -q "^step 1/" "$T/s.err" && break; sleep 0.1; done
kill -STOP "$R0"
sleep 3
kill -CONT "$R0"
wait $J; rc=$?
echo "SIGSTOP of rank 0 for 3 s: exit $rc: $(grep 'is stopped' "$T/s.err")"
[ $rc -eq 0 ] || { fail "exit $rc after SIGSTOP/SIGCONT"; cat "$T/s.err"; }
grep -q "rank 0 of 2 (pid $R0) is stopped" "$T/s.err" || fail "the stopped rank was not reported"
[ -n "$(losses "$T/ref.json")" ] && [ "$(losses "$T/s.json")" = "$(losses "$T/ref.json")" ] || fail "losses differ from the uninterrupted run"
finish train
