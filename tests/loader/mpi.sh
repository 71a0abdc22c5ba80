#!/usr/bin/env bash
# mpi.sh - `llmsys train --ranks 2 --loader`: two MPI ranks each fetch their own balanced
# share of every step from one loader service. The server is killed on exit, even on failure.
set -u
LLMSYS=$1
T=$(mktemp -d /tmp/llmsys-loader-mpi.XXXXXX)
SP=
cleanup() {
    [ -n "$SP" ] && { kill -9 "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; }
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "mpirun not installed: skipped"; exit 0; }
mkdir -p "$T/docs"
head -c 20000 /usr/share/common-licenses/GPL-3 > "$T/docs/gpl.txt"
head -c 8000 /usr/share/common-licenses/Apache-2.0 > "$T/docs/apache.txt"
echo '{"n_ctx": 32, "tokens_per_rank": 96, "seed": 2, "sources": [{"name": "docs", "path": "docs", "split": "blank"}]}' > "$T/mix.json"
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 2 --port 0 --port-file "$T/port" > "$T/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.05; done
[ -s "$T/port" ] || fail "server did not start: $(cat "$T/serve.log")"
A="tcp://127.0.0.1:$(cat "$T/port")"
"$LLMSYS" train --config tiny --ranks 2 --threads 1 --loader "$A" --seq 32 --batch 12 --steps 3 --out "$T/m.safetensors" > "$T/train.log" 2>&1 \
    || fail "train --ranks 2 --loader: $(tail -5 "$T/train.log")"
grep -q "trained steps 0..3" "$T/train.log" || fail "no training summary: $(tail -3 "$T/train.log")"
[ -s "$T/m.safetensors.loader-state" ] || fail "no loader state beside the checkpoint"
# both ranks fetched every step: the window's oldest step moved only once both had it
"$LLMSYS" loader control --addr "$A" --info | grep -q '"ranks":2' || fail "info"
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null || fail "shutdown"
wait "$SP" || fail "server exit status"
SP=
echo "loader mpi: ok"
