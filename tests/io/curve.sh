#!/usr/bin/env bash
# curve.sh - the loader service under ZeroMQ CURVE (llmsys keys gen, --keys, --curve): the
# same batches as without CURVE for the keyed client; a client with another deployment's
# keys, one with a client key off the allow list and one without keys get nothing and the
# service logs each refusal; a non-loopback bind without keys (0.0.0.0, ::) is refused with
# one line; --bind ::1 serves a client at tcp://[::1]:P, --bind :: with keys its source worker
# and keyed clients over [::1] and 127.0.0.1 (skipped where IPv6 is off).
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

# a non-loopback bind without keys is refused with one line and exit 2 (the flags); with keys it starts
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --bind 0.0.0.0 > "$T/out" 2> "$T/err"
rc=$?
[ $rc -eq 2 ] || die "non-loopback bind without keys: exit $rc"
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "refusing to bind tcp://0.0.0.0:\* without CURVE keys" "$T/err" ||
    die "non-loopback refusal message: $(cat "$T/err")"
# IPv6: --bind :: without keys is refused like 0.0.0.0; --bind ::1 (loopback, no keys) serves a
# client at tcp://[::1]:P the same batches (skipped only where IPv6 is off on loopback)
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --bind :: > "$T/out" 2> "$T/err"
rc=$?
[ $rc -eq 2 ] || die "--bind :: without keys: exit $rc"
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "refusing to bind tcp://\[::\]:\* without CURVE keys" "$T/err" ||
    die "--bind :: refusal message: $(cat "$T/err")"
v6=1 # 0: IPv6 off on loopback (disabled, or ::1 not assignable)
[ "$(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2> /dev/null)" = 1 ] && v6=0
python3 -c '
import errno, socket, sys
try: socket.socket(socket.AF_INET6).bind(("::1", 0))
except OSError as e: sys.exit(e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT))' 2> /dev/null || v6=0
if [ $v6 = 0 ]; then
    echo "SKIP: ::1 cannot be bound here (IPv6 off): no loader serve --bind ::1 check"
else
    rm -f "$T/port"
    "$LLMSYS" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --port-file "$T/port" --bind ::1 > "$T/serve6.log" 2>&1 &
    PIDS+=($!)
    wait_file "$T/port" "${PIDS[-1]}" || die "--bind ::1: service did not start: $(cat "$T/serve6.log")"
    A6="tcp://[::1]:$(cat "$T/port")"
    grep -qF "serving 1 ranks on $A6 " "$T/serve6.log" || die "--bind ::1: printed endpoint: $(cat "$T/serve6.log")"
    "$LLMSYS" loader fetch --addr "$A6" --count 3 > "$T/v6" || die "fetch over $A6"
    cmp -s "$T/plain" "$T/v6" || die "batches differ over IPv6"
    "$LLMSYS" loader control --addr "$A6" --shutdown > /dev/null || die "shutdown over $A6"
    wait "${PIDS[-1]}" || die "--bind ::1 service exit status"
    # --bind :: with keys: the source worker it starts reaches it over [::1], a keyed client gets
    # the same batches over [::1] and over 127.0.0.1 (libzmq's :: takes IPv4 too)
    rm -f "$T/port"
    "$LLMSYS" --keys "$T/a" loader serve --mix "$T/mix.json" --ranks 1 --port 0 --port-file "$T/port" --bind :: \
        --source-workers 1 > "$T/serve6a.log" 2>&1 &
    PIDS+=($!)
    wait_file "$T/port" "${PIDS[-1]}" || die "--bind :: with keys: service did not start: $(cat "$T/serve6a.log")"
    P6=$(cat "$T/port")
    "$LLMSYS" --keys "$T/a" --curve loader fetch --addr "tcp://[::1]:$P6" --count 2 > "$T/v6a" ||
        die "keyed fetch over [::1] from a :: bind: $(cat "$T/serve6a.log")"
    "$LLMSYS" --keys "$T/a" --curve loader fetch --addr "tcp://127.0.0.1:$P6" --step 2 >> "$T/v6a" ||
        die "keyed fetch over 127.0.0.1 from a :: bind"
    cmp -s "$T/plain" "$T/v6a" || die "batches differ from a :: bind"
    grep -q "to tcp://\[::1\]:" "$T/serve6a.log" || die "the source worker's link: $(cat "$T/serve6a.log")"
    "$LLMSYS" --keys "$T/a" --curve loader control --addr "tcp://[::1]:$P6" --shutdown > /dev/null || die "shutdown (::)"
    wait "${PIDS[-1]}" || die "--bind :: service exit status"
fi
# bad key paths: one line, exit 2 (an input the command line names)
"$LLMSYS" --keys "$T/missing" loader fetch --addr "$A" 2> "$T/err"; [ $? -eq 2 ] || die "missing key file exit"
grep -q "missing" "$T/err" || die "missing key file message"
"$LLMSYS" --keys 2> "$T/err"; [ $? -eq 2 ] || die "--keys without a path"
echo "curve.sh: ok"
