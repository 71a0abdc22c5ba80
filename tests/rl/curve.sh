#!/usr/bin/env bash
# curve.sh - the rl job's ZeroMQ links under CURVE (llmsys --keys, --curve): a run with CURVE
# forced on loopback (manager, two relays in a chain, rollouts, trainer) finishes like one
# without; a worker with another deployment's keys, or none, never joins a CURVE manager and the
# manager logs the refusal; a job over the IPv6 loopback (tcp://[::1]) completes without keys; a
# manager or relay bound off loopback without keys, or on an IPv6 address without brackets, is
# refused with one error line.
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
# each relay's first whole version is version 0, the second's through the chain (a relay that
# learns its successor while a version is half received sends that version whole once complete);
# the relays start before the trainer, which hands version 0 over only after its warm start
for r in 0 1; do
    first=$(grep -m 1 "relay $r: version .* whole" "$T/run/logs/relay-$r.log")
    case "$first" in *"relay $r: version 0 whole") ;; *) fail "relay $r's first whole version was not 0: '$first'" ;; esac
done
# every rollout got weights from its relay (a rollout slow to start may first see a later version)
for r in 0 1; do
    grep -q "rollout $r: version [0-9]* from relay" "$T/run/logs/rollout-$r.log" ||
        fail "rollout $r never got weights: $(head -n 2 "$T/run/logs/rollout-$r.log")"
done

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

# over IPv6 loopback, no keys: a manager and a relay bound on tcp://[::1]:0, a rollout and the
# trainer joining through the manager's [::1] endpoint; the job's 2 updates reported
if [ "$(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2> /dev/null || echo 1)" = 0 ]; then
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(rollouts=1, relays=1, updates=2,
report=sys.argv[2], workdir=sys.argv[3]); json.dump(c, open(sys.argv[4], 'w'))" \
      "$T/run/config.json" "$T/v6.json" "$T/v6" "$T/v6.cfg"
  mkdir -p "$T/v6"
  "$BIN" rl worker --role manager --bind 'tcp://[::1]:0' --config "$T/v6.cfg" --port-file "$T/v6.ep" \
      > "$T/v6m.log" 2>&1 &
  v6m=$!
  if wait_file "$T/v6.ep" $v6m; then
    M6=$(cat "$T/v6.ep")
    case "$M6" in tcp://\[::1\]:*) ;; *) fail "IPv6 manager endpoint '$M6'" ;; esac
    "$BIN" rl worker --role relay --bind 'tcp://[::1]:0' --manager "$M6" > "$T/v6r.log" 2>&1 &
    "$BIN" rl worker --role rollout --manager "$M6" > "$T/v6o.log" 2>&1 &
    timeout 120 "$BIN" rl worker --role trainer --manager "$M6" > "$T/v6t.log" 2>&1 ||
      fail "IPv6 trainer: $(tail -n 3 "$T/v6t.log")"
    timeout 30 tail --pid=$v6m -f /dev/null || fail "IPv6 manager did not stop"
    python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['updates'] == 2 else 1)" "$T/v6.json" ||
      fail "IPv6 run: no report with its 2 updates: $(tail -n 3 "$T/v6m.log")"
  else
    fail "IPv6 manager did not start: $(cat "$T/v6m.log")"
  fi
else
  echo "SKIP: IPv6 loopback disabled (rl over tcp://[::1])"
fi

# off loopback without keys: refused before anything binds, one line, exit 2 (the flags)
expect 2 "a manager off loopback without keys" -- timeout 30 "$BIN" rl worker --role manager \
    --bind tcp://0.0.0.0:0 --config "$T/run/config.json"
grep -q "without CURVE keys" "$T/err" || fail "manager off loopback: $(cat "$T/err")"
expect 2 "a relay off loopback without keys" -- timeout 30 "$BIN" rl worker --role relay --bind tcp://0.0.0.0:0 \
    --manager "$M"
grep -q "without CURVE keys" "$T/err" || fail "relay off loopback: $(cat "$T/err")"
# an IPv6 address without brackets: refused naming what was typed and its bracket form
expect 2 "a relay bound on an IPv6 address without brackets" -- timeout 30 "$BIN" rl worker --role relay \
    --bind tcp://::1:0 --manager "$M"
grep -q "tcp://::1:0 needs brackets: tcp://\[::1\]:0" "$T/err" || fail "relay on tcp://::1:0: $(cat "$T/err")"
finish rl.curve
