#!/usr/bin/env bash
# curve.sh - the loader service under ZeroMQ CURVE (llmsys keys gen, --keys, --curve): the
# same batches as without CURVE for the keyed client; a client with another deployment's
# keys, one with a client key off the allow list and one without keys get nothing and the
# service logs each refusal; a non-loopback bind without keys is refused with one line.
. "$(dirname "$0")/../lib.sh" "$1"
LLMSYS=$BIN
PIDS=()

mkdir -p "$T/docs"
for i in $(seq 1 6); do head -c $((i * 400)) /usr/share/common-licenses/GPL-3 > "$T/docs/d$i.txt"; done
cat > "$T/mix.json" <<JSON
{"n_ctx": 32, "tokens_per_rank": 128, "micro_batches": 1, "seed": 5, "sources": [{"name": "docs", "path": "docs"}]}
JSON
"$LLMSYS" keys gen --out "$T/a" > /dev/null || die "keys gen"
"$LLMSYS" keys gen --out "$T/b" > /dev/null || die "keys gen b"
[ "$(stat -c %a "$T/a/server.key")" = 600 ] && [ "$(stat -c %a "$T/a/client.key")" = 600 ] || die "key file modes"
"$LLMSYS" keys gen --out "$T/a" 2> "$T/err" && die "keys gen replaced existing keys"
# a client key that is not on a's allow list, with a's server public key
{ grep '^server-public' "$T/a/client.key"; grep '^client-' "$T/b/client.key"; } > "$T/stranger.key"
chmod 600 "$T/stranger.key"

start() { # start [global options]: a loader service on a free loopback port; sets PORT
    rm -f "$T/port"
    "$LLMSYS" "$@" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --port-file "$T/port" > "$T/serve.log" 2>&1 &
    PIDS+=($!)
    wait_file "$T/port" "${PIDS[-1]}" || die "service did not start: $(cat "$T/serve.log")"
    PORT=$(cat "$T/port")
}

# reference batches without CURVE
start
"$LLMSYS" loader fetch --addr "tcp://127.0.0.1:$PORT" --count 3 > "$T/plain" || die "plain fetch"
"$LLMSYS" loader control --addr "tcp://127.0.0.1:$PORT" --shutdown > /dev/null || die "shutdown"
wait "${PIDS[-1]}" || die "plain service exit status"

# CURVE forced on loopback: the keyed client gets the same batches
start --keys "$T/a" --curve
A="tcp://127.0.0.1:$PORT"
"$LLMSYS" --keys "$T/a" --curve loader fetch --addr "$A" --count 3 > "$T/curve" || die "keyed fetch: $(cat "$T/serve.log")"
cmp -s "$T/plain" "$T/curve" || die "batches differ under CURVE"
# strangers get nothing (exit 1 after the timeout) and each is logged
"$LLMSYS" loader fetch --addr "$A" --timeout-ms 400 > "$T/out" 2> "$T/err" && die "a client without keys got a batch"
[ -s "$T/out" ] && die "a client without keys got output"
grep -q "no answer" "$T/err" || die "no-keys client error: $(cat "$T/err")"
"$LLMSYS" --keys "$T/b" --curve loader fetch --addr "$A" --timeout-ms 400 > "$T/out" 2>&1 && die "another deployment's client got a batch"
"$LLMSYS" --keys "$T/stranger.key" --curve loader fetch --addr "$A" --timeout-ms 400 > "$T/out" 2>&1 &&
    die "a client key off the allow list got a batch"
timeout 3 "$LLMSYS" --keys "$T/stranger.key" --curve loader control --addr "$A" --shutdown > "$T/out" 2>&1 &&
    die "a stranger shut the service down"
sleep 0.3
grep -q "refused a .*without CURVE\|refused a client .*does not use CURVE" "$T/serve.log" || die "no-keys refusal not logged: $(cat "$T/serve.log")"
grep -q "refused a client .*does not hold this server's public key" "$T/serve.log" || die "wrong-server-key refusal not logged"
grep -q "refused a client from 127.0.0.1: its key .* is not on the allow list" "$T/serve.log" || die "allow-list refusal not logged"
# still serving its keyed client, which may stop it
"$LLMSYS" --keys "$T/a" --curve loader fetch --addr "$A" --step 3 > /dev/null || die "keyed fetch after strangers"
"$LLMSYS" --keys "$T/a/client.key" --curve loader control --addr "$A" --shutdown > /dev/null || die "keyed shutdown"
wait "${PIDS[-1]}" || die "curve service exit status"

# a non-loopback bind without keys is refused with one line and exit 1; with keys it starts
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --bind 0.0.0.0 > "$T/out" 2> "$T/err"
rc=$?
[ $rc -eq 1 ] || die "non-loopback bind without keys: exit $rc"
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "refusing to bind tcp://0.0.0.0:\* without CURVE keys" "$T/err" ||
    die "non-loopback refusal message: $(cat "$T/err")"
# bad key paths: one line, exit 1
"$LLMSYS" --keys "$T/missing" loader fetch --addr "$A" 2> "$T/err"; [ $? -eq 1 ] || die "missing key file exit"
grep -q "missing" "$T/err" || die "missing key file message"
"$LLMSYS" --keys 2> "$T/err"; [ $? -eq 2 ] || die "--keys without a path"
echo "curve.sh: ok"
