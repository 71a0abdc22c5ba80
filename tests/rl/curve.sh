#!/usr/bin/env bash
# curve.sh - the rl job's ZeroMQ links under CURVE (llmsys --keys, --curve): a run with CURVE
# forced on loopback (manager, two relays in a chain, rollouts, trainer) finishes like one
# without; a worker with another deployment's keys, or none, never joins a CURVE manager and the
# manager logs the refusal; a manager or relay bound off loopback without keys is refused with
# one error line.
set -u
LLMSYS=$1
T=$(mktemp -d /tmp/llmsys-rlcurve.XXXXXX)
. "$(dirname "$0")/../wait.sh"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$LLMSYS" keys gen --out "$T/a" > /dev/null || fail "keys gen"
"$LLMSYS" keys gen --out "$T/b" > /dev/null || fail "keys gen b"
"$LLMSYS" rl tasks --kind sort --n 24 --out "$T/t.jsonl" > /dev/null || fail "rl tasks"

# every link of a run under CURVE: two relays make a chain (relay -> relay), rollouts and the
# trainer pull from them, everyone joins the manager
timeout 120 "$LLMSYS" --keys "$T/a" --curve rl run --tasks "$T/t.jsonl" --sft-steps 10 --updates 3 --group 2 \
    --batch-groups 2 --max-seqs 4 --max-new 8 --rollouts 2 --relays 2 --eval-n 4 --workdir "$T/run" --quiet \
    > "$T/run.out" 2> "$T/run.err" || fail "rl run under CURVE: $(tail -5 "$T/run.err")"
python3 -c "import json,sys; r=json.load(open('$T/run/report.json')); sys.exit(0 if r['updates'] == 3 else 1)" ||
    fail "rl run under CURVE: report without its 3 updates"

# a manager alone, CURVE forced, its config from that run
"$LLMSYS" --keys "$T/a" --curve rl worker --role manager --config "$T/run/config.json" \
    --port-file "$T/mgr.ep" > "$T/mgr.log" 2>&1 &
PIDS+=($!)
wait_file "$T/mgr.ep" "${PIDS[-1]}" || fail "manager did not start: $(cat "$T/mgr.log")"
M=$(cat "$T/mgr.ep")
# another deployment's keys, and no keys at all: the hello is never answered
timeout 30 "$LLMSYS" --keys "$T/b" --curve rl worker --role rollout --manager "$M" > "$T/out" 2> "$T/err" &&
    fail "a rollout with another deployment's keys joined"
grep -q "unreachable" "$T/err" || fail "stranger rollout's error: $(cat "$T/err")"
[ "$(wc -l < "$T/err")" = 1 ] || fail "stranger rollout: more than one error line: $(cat "$T/err")"
timeout 30 "$LLMSYS" rl worker --role relay --manager "$M" > "$T/out" 2> "$T/err" &&
    fail "a relay without keys joined"
grep -q "unreachable" "$T/err" || fail "keyless relay's error: $(cat "$T/err")"
grep -q "refused" "$T/mgr.log" || fail "the manager did not log the refusals: $(cat "$T/mgr.log")"
kill "${PIDS[-1]}" 2> /dev/null

# off loopback without keys: refused before anything binds, one line, exit 1
for role in manager relay; do
    extra=(--config "$T/run/config.json")
    [ $role = relay ] && extra=(--manager "$M")
    timeout 30 "$LLMSYS" rl worker --role $role --bind tcp://0.0.0.0:0 "${extra[@]}" > "$T/out" 2> "$T/err"
    rc=$?
    [ $rc = 1 ] || fail "$role bound off loopback without keys: exit $rc: $(cat "$T/err")"
    grep -q "without CURVE keys" "$T/err" || fail "$role off loopback: $(cat "$T/err")"
    [ "$(wc -l < "$T/err")" = 1 ] || fail "$role off loopback: more than one error line: $(cat "$T/err")"
done
echo "ok: rl under CURVE (run, strangers refused and logged, keyless off-loopback binds refused)"
