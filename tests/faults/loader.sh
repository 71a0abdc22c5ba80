#!/usr/bin/env bash
# loader.sh - fault injection against `llmsys loader serve`: SIGSTOP makes clients fail
# within their timeout with a line naming the service, and SIGCONT brings answers back;
# kill -9 then a restart from the state a client saved gives the uninterrupted batches.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/docs"
for i in $(seq 1 12); do
  for k in $(seq 1 $((i * 5))); do echo "document $i line $k: the quick brown fox $((i * k % 7))"; done > "$T/docs/d$i.txt"
done
echo '{"n_ctx": 32, "tokens_per_rank": 128, "seed": 3, "sources": [{"name": "docs", "path": "docs"}]}' > "$T/mix.json"
start() {
  rm -f "$T/port"
  "$BIN" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --port-file "$T/port" "$@" >> "$T/serve.log" 2>&1 &
  SRV=$!
  wait_file "$T/port" "$SRV" || { fail "loader serve did not start: $(cat "$T/serve.log")"; exit 1; }
  A=tcp://127.0.0.1:$(cat "$T/port")
}
fetch() { "$BIN" loader fetch --addr "$A" --rank 0 --timeout-ms 400 "$@"; }

# reference: steps 0..5 uninterrupted
start
for s in 0 1 2 3 4 5; do fetch --step $s >> "$T/ref" || fail "fetch $s"; done

# SIGSTOP: a fetch fails within its timeout (3 attempts x 0.4 s), naming the service
kill -STOP "$SRV"
t0=$SECONDS
fetch --step 0 > /dev/null 2> "$T/err"; rc=$?
echo "fetch from a stopped service: exit $rc in $((SECONDS - t0)) s: $(cat "$T/err")"
[ $rc -eq 1 ] || fail "fetch from a stopped service: exit $rc"
grep -q "loader service $A: no answer within 400 ms" "$T/err" || fail "message: $(cat "$T/err")"
[ $((SECONDS - t0)) -le 5 ] || fail "stopped service: the fetch took $((SECONDS - t0)) s"
kill -CONT "$SRV"
fetch --step 1 > /dev/null || fail "no answer after SIGCONT"
kill -9 "$SRV"
wait "$SRV" 2> /dev/null
SRV=

# kill -9 after step 2 (its state saved by the client), restart from it: steps 3..5 identical
start
for s in 0 1 2; do fetch --step $s --state-out "$T/state" >> "$T/got" || fail "fetch $s"; done
kill -9 "$SRV"
wait "$SRV" 2> /dev/null
fetch --step 3 > /dev/null 2> "$T/err" && fail "fetch from a killed service succeeded"
grep -q "loader service $A" "$T/err" || fail "killed service: message $(cat "$T/err")"
start --resume "$T/state"
for s in 3 4 5; do fetch --step $s >> "$T/got" || fail "fetch $s after the restart"; done
cmp -s "$T/ref" "$T/got" || { fail "batches after kill -9 and --resume differ from the uninterrupted run"; diff "$T/ref" "$T/got" | head; }
kill -TERM "$SRV"
wait "$SRV" 2> /dev/null
SRV=
finish loader
