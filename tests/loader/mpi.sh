#!/usr/bin/env bash
# mpi.sh - `llmsys train --ranks 2 --loader`: two MPI ranks each fetch their own balanced
# share of every step from one loader service. The server is killed on exit, even on failure.
. "$(dirname "$0")/../lib.sh" "$1"
LLMSYS=$BIN
# mpirun missing: reported to ctest as skipped (SKIP_RETURN_CODE 77), not as passed
command -v mpirun > /dev/null || { echo "mpirun not installed: skipped"; exit 77; }
mkdir -p "$T/docs"
head -c 20000 /usr/share/common-licenses/GPL-3 > "$T/docs/gpl.txt"
head -c 8000 /usr/share/common-licenses/Apache-2.0 > "$T/docs/apache.txt"
echo '{"n_ctx": 32, "tokens_per_rank": 96, "seed": 2, "sources": [{"name": "docs", "path": "docs", "split": "blank"}]}' > "$T/mix.json"
# a window of 2 steps (prefetch 1 + history 1): a step leaves it only once both ranks have it
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 2 --prefetch 1 --history 1 --port 0 --port-file "$T/port" > "$T/serve.log" 2>&1 &
SP=$!
wait_file "$T/port" "$SP" || die "server did not start: $(cat "$T/serve.log")"
A="tcp://127.0.0.1:$(cat "$T/port")"
"$LLMSYS" train --config tiny --ranks 2 --threads 1 --loader "$A" --seq 32 --batch 12 --steps 3 --out "$T/m.safetensors" > "$T/train.log" 2>&1 \
    || die "train --ranks 2 --loader: $(tail -5 "$T/train.log")"
grep -q "trained steps 0..3" "$T/train.log" || die "no training summary: $(tail -3 "$T/train.log")"
[ -s "$T/m.safetensors.loader-state" ] || die "no loader state beside the checkpoint"
# both ranks fetched every step: steps 0..2 were requested, so the service built step 2,
# which needs the window's oldest step at 1 or later, and it moves past a step only once
# both ranks have fetched it
lo=-1
for _ in $(seq 1 40); do
    lo=$("$LLMSYS" loader control --addr "$A" --info | sed -n 's/.*"lo":[[:space:]]*\([0-9]*\).*/\1/p')
    [ -n "$lo" ] && [ "$lo" -ge 1 ] && break
    sleep 0.05
done
[ -n "$lo" ] && [ "$lo" -ge 1 ] || die "window's oldest step is ${lo:-?} after 3 steps: a rank did not fetch its share"
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null || die "shutdown"
wait "$SP" || die "server exit status"
SP=
echo "loader mpi: ok (window's oldest step $lo after 3 steps)"
