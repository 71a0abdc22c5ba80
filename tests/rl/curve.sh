#!/usr/bin/env bash
# curve.sh - the rl job's ZeroMQ links under CURVE (llmsys --keys, --curve): a run with CURVE
# forced on loopback (manager, two relays in a chain, rollouts, trainer) finishes like one
# without; a worker with another deployment's keys, or none, never joins a CURVE manager and the
# manager logs the refusal; a manager or relay bound off loopback without keys is refused with
# one error line.
. "$(dirname "$0")/../lib.sh"

"$BIN" keys gen --out "$T/a" > /dev/null || fail "keys gen"
"$BIN" keys gen --out "$T/b" > /dev/null || fail "keys gen b"
"$BIN" rl tasks --kind sort --n 24 --out "$T/t.jsonl" > /dev/null || fail "rl tasks"

# every link of a run under CURVE: two relays make a chain (relay -> relay), rollouts and the
# trainer pull from them, everyone joins the manager
expect 0 "rl run under CURVE" -- timeout 120 "$BIN" --keys "$T/a" --curve rl run --tasks "$T/t.jsonl" \
    --sft-steps 10 --updates 3 --group 2 --batch-groups 2 --max-seqs 4 --max-new 8 --rollouts 2 --relays 2 \
    --eval-n 4 --workdir "$T/run" --quiet
python3 -c "import json,sys; r=json.load(open('$T/run/report.json')); sys.exit(0 if r['updates'] == 3 else 1)" ||
    fail "rl run under CURVE: report without its 3 updates"

# a manager alone, CURVE forced, its config from that run
"$BIN" --keys "$T/a" --curve rl worker --role manager --config "$T/run/config.json" \
    --port-file "$T/mgr.ep" > "$T/mgr.log" 2>&1 &
wait_file "$T/mgr.ep" $! || { fail "manager did not start: $(cat "$T/mgr.log")"; exit 1; }
M=$(cat "$T/mgr.ep")
# another deployment's keys, and no keys at all: the hello is never answered
expect 1 "a rollout with another deployment's keys" -- timeout 30 "$BIN" --keys "$T/b" --curve rl worker \
    --role rollout --manager "$M"
grep -q "unreachable" "$T/err" || fail "stranger rollout's error: $(cat "$T/err")"
expect 1 "a relay without keys" -- timeout 30 "$BIN" rl worker --role relay --manager "$M"
grep -q "unreachable" "$T/err" || fail "keyless relay's error: $(cat "$T/err")"
grep -q "refused" "$T/mgr.log" || fail "the manager did not log the refusals: $(cat "$T/mgr.log")"

# off loopback without keys: refused before anything binds, one line, exit 1
expect 1 "a manager off loopback without keys" -- timeout 30 "$BIN" rl worker --role manager \
    --bind tcp://0.0.0.0:0 --config "$T/run/config.json"
grep -q "without CURVE keys" "$T/err" || fail "manager off loopback: $(cat "$T/err")"
expect 1 "a relay off loopback without keys" -- timeout 30 "$BIN" rl worker --role relay --bind tcp://0.0.0.0:0 \
    --manager "$M"
grep -q "without CURVE keys" "$T/err" || fail "relay off loopback: $(cat "$T/err")"
finish rl.curve
