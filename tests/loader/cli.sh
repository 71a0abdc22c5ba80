#!/usr/bin/env bash
# cli.sh - `llmsys loader` end to end: tokenize, stats, serve on a free port, fetch,
# kill -9 mid-run, restart from the saved state (same batches), control messages and bad
# input. Every server started here is killed on exit, even on failure.
. "$(dirname "$0")/../lib.sh" "$1"
LLMSYS=$BIN
PIDS=()
[ -n "${LS_DEBUG_CLI:-}" ] && set -x

mkdir -p "$T/docs"
for i in $(seq 1 12); do head -c $((i * 300)) /usr/share/common-licenses/GPL-3 > "$T/docs/d$i.txt"; done
for i in $(seq 1 80); do echo "{\"text\": \"$i + $i = $((i + i))\"}"; done > "$T/math.jsonl"
echo 'this is not json' >> "$T/math.jsonl"

# tokenize: malformed line skipped with a warning; --strict makes it an error naming file:line
"$LLMSYS" loader tokenize --in "$T/math.jsonl" --type jsonl --out "$T/math.lstok" 2> "$T/warn" || die "tokenize"
grep -q "math.jsonl:81" "$T/warn" || die "no file:line warning: $(cat "$T/warn")"
"$LLMSYS" loader tokenize --in "$T/math.jsonl" --type jsonl --strict --out "$T/x.lstok" 2> "$T/err" && die "--strict accepted a bad line"
grep -q "math.jsonl:81" "$T/err" || die "strict error lacks file:line"
[ -e "$T/x.lstok" ] && die "half-written output left behind"

cat > "$T/mix.json" <<JSON
{"n_ctx": 64, "tokens_per_rank": 256, "micro_batches": 2, "seed": 3,
 "sources": [{"name": "docs", "path": "docs"}, {"name": "math", "type": "tokens", "path": "math.lstok"}],
 "schedule": [{"step": 0, "weights": {"docs": 0.8, "math": 0.2}}, {"step": 10, "weights": {"docs": 0.2, "math": 0.8}}]}
JSON
"$LLMSYS" loader stats --mix "$T/mix.json" --ranks 4 --steps 20 --svg "$T/c.svg" --report "$T/r.json" > "$T/stats" || die "stats"
grep -q "<svg" "$T/c.svg" && grep -q '"imbalance"' "$T/r.json" || die "stats output"
# the figures, parsed and bounded (observed here: kk mean 1.010, worst 1.019; naive 1.065 / 1.173;
# token shares within 0.2 points of the target): kk within 3x the observed excess over 1, better
# than naive, and every source within 0.6 points of its target share
awk '$1 == "naive" && NF == 3 { nm = $2; nw = $3 } $1 == "kk" && NF == 3 { km = $2; kw = $3 }
     $1 ~ /^(docs|math)$/ { d = $3 - $4; if (d < 0) d = -d; if (d > dmax) dmax = d; ns++ }
     END { if (km == "" || nm == "" || ns != 2 || km < 1 || nm < 1 || kw > 1.06 || km > kw || km >= nm || kw >= nw || dmax > 0.6) {
             printf "kk %s/%s, naive %s/%s, %d sources, worst share miss %.2f points\n", km, kw, nm, nw, ns, dmax; exit 1 } }' \
    "$T/stats" || die "stats figures out of bounds: $(cat "$T/stats")"
# the first and last fifths are steps [0, 4) and [16, 20): with docs' weight 0.9 to step 16, then
# linear to 0.1 at step 19, docs' target shares there are 90% and (0.9 + 0.633 + 0.367 + 0.1) / 4 = 50%
sed 's/"schedule": .*/"schedule": [{"step": 16, "weights": {"docs": 0.9, "math": 0.1}}, {"step": 19, "weights": {"docs": 0.1, "math": 0.9}}]}/' \
    "$T/mix.json" > "$T/mix2.json"
"$LLMSYS" loader stats --mix "$T/mix2.json" --ranks 4 --steps 20 > "$T/stats2" || die "stats, second schedule"
awk '$1 == "docs" { ok = $7 == "90.00%" && $10 == "50.00%" } END { exit !ok }' "$T/stats2" ||
    die "first and last fifths' targets: $(grep docs "$T/stats2")"

# bad input: clear one-line errors, exit 2 (a bad mix or flag) or 1 (the service, at run time)
echo '{"sources": [{"name": "a", "path": "docs", "weight": -1}]}' > "$T/neg.json"
"$LLMSYS" loader stats --mix "$T/neg.json" --ranks 2 2> "$T/err"; [ $? -eq 2 ] || die "negative weight"
grep -q "weight must be finite and >= 0, got -1" "$T/err" || die "negative weight message: $(cat "$T/err")"
echo '{"sources": [{"name": "a", "path": "missing-dir"}]}' > "$T/miss.json"
"$LLMSYS" loader stats --mix "$T/miss.json" --ranks 2 2> "$T/err"; [ $? -eq 2 ] || die "missing source"
grep -q "missing-dir" "$T/err" || die "missing source message"
"$LLMSYS" loader serve --mix "$T/mix.json" 2>/dev/null; [ $? -eq 2 ] || die "usage error exit code"

start() { # start [--resume FILE]: launches a server for $RANKS (default 2) ranks on a free port, sets PORT
    rm -f "$T/port"
    "$LLMSYS" loader serve --mix "$T/mix.json" --ranks "${RANKS:-2}" --port 0 --port-file "$T/port" --prefetch 2 --history 2 "$@" > "$T/serve.log" 2>&1 &
    PIDS+=($!)
    wait_file "$T/port" "${PIDS[-1]}" || die "server did not start: $(cat "$T/serve.log")"
    PORT=$(cat "$T/port")
}

# uninterrupted run: steps 0..11 for both ranks
start
A="tcp://127.0.0.1:$PORT"
# (ranks advance together, as synchronous trainers do: the service holds a bounded window)
for s in $(seq 0 11); do
    "$LLMSYS" loader fetch --addr "$A" --rank 0 --step "$s" >> "$T/ref0" || die "fetch"
    "$LLMSYS" loader fetch --addr "$A" --rank 1 --step "$s" >> "$T/ref1" || die "fetch"
done
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null || die "shutdown"
wait "${PIDS[-1]}" || die "server exit status"

# the same batches with the sources read by 3 worker processes the service starts; kill -9 of one
# of them mid-run: the service starts another, batches unchanged; none is left after the shutdown
start --source-workers 3
A="tcp://127.0.0.1:$PORT"
for s in $(seq 0 11); do
    [ "$s" = 6 ] && { W=$(pgrep -P "${PIDS[-1]}" | head -1); [ -n "$W" ] || die "no worker processes"; kill -9 "$W"; }
    "$LLMSYS" loader fetch --addr "$A" --rank 0 --step "$s" >> "$T/w0" || die "fetch from workers"
    "$LLMSYS" loader fetch --addr "$A" --rank 1 --step "$s" >> "$T/w1" || die "fetch from workers"
done
diff "$T/ref0" "$T/w0" > /dev/null && diff "$T/ref1" "$T/w1" > /dev/null || die "batches from source workers differ"
"$LLMSYS" loader control --addr "$A" --info | grep -q '"workers_lost":1' || die "the killed worker was not noticed"
KIDS=$(pgrep -P "${PIDS[-1]}")
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null || die "shutdown"
wait "${PIDS[-1]}" || die "server with workers: exit status"
for k in $KIDS; do kill -0 "$k" 2>/dev/null && die "worker $k outlived the service"; done
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 2 --port 0 --source-workers 0 2>/dev/null; [ $? -eq 2 ] || die "--source-workers 0"
"$LLMSYS" loader worker --role sink --source docs --constructor "$A" 2>/dev/null; [ $? -eq 2 ] || die "--role sink"

# interrupted: fetch 0..4, save the state with step 4, kill -9, restart, fetch 5..11
start --journal "$T/journal"
A="tcp://127.0.0.1:$PORT"
for s in $(seq 0 4); do
    "$LLMSYS" loader fetch --addr "$A" --rank 1 --step "$s" >> "$T/b1" || die "fetch"
    "$LLMSYS" loader fetch --addr "$A" --rank 0 --step "$s" --state-out "$T/state" >> "$T/b0" || die "fetch"
done
# bad requests do not kill the service
"$LLMSYS" loader control --addr "$A" --weights '{"nosuch": 1}' 2> "$T/err"; [ $? -eq 1 ] || die "unknown source accepted"
grep -q "unknown source 'nosuch'" "$T/err" || die "unknown source message"
"$LLMSYS" loader control --addr "$A" --weights '{"docs": 0, "math": 0}' 2> /dev/null && die "all-zero weights accepted"
"$LLMSYS" loader fetch --addr "$A" --rank 0 --step 500 2> "$T/err"; grep -q "too far ahead" "$T/err" || die "far ahead"
"$LLMSYS" loader fetch --addr "$A" --rank 5 --step 0 2> "$T/err"; grep -q "rank 5 out of range" "$T/err" || die "bad rank"
"$LLMSYS" loader control --addr "$A" --info | grep -q '"ranks":2' || die "info after bad requests"
tr -d ' \n\t' < "$T/journal" | grep -q '"changes":\[\]' || die "a refused weight change was journaled"
kill -9 "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null
start --resume "$T/state" --journal "$T/journal"
A="tcp://127.0.0.1:$PORT"
for s in $(seq 5 11); do
    "$LLMSYS" loader fetch --addr "$A" --rank 0 --step "$s" >> "$T/b0" || die "fetch after restart"
    "$LLMSYS" loader fetch --addr "$A" --rank 1 --step "$s" >> "$T/b1" || die "fetch after restart"
done
diff "$T/ref0" "$T/b0" > /dev/null || die "rank 0 batches differ after kill/restart"
diff "$T/ref1" "$T/b1" > /dev/null || die "rank 1 batches differ after kill/restart"
# a corrupt state blob is refused at start, naming its file (was: "loader state: ..." alone); so is
# a state whose bytes changed (its checksum)
printf 'garbage' > "$T/bad.state"
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 2 --port 0 --resume "$T/bad.state" 2> "$T/err"; [ $? -eq 2 ] || die "bad state accepted"
grep -q "bad.state: loader state" "$T/err" || die "bad state message: $(cat "$T/err")"
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[12] ^= 1; open(sys.argv[2], 'wb').write(b)" "$T/state" "$T/flip.state"
"$LLMSYS" loader serve --mix "$T/mix.json" --ranks 2 --port 0 --resume "$T/flip.state" 2> "$T/err"; [ $? -eq 2 ] || die "changed state accepted"
grep -q "flip.state: loader state: checksum mismatch" "$T/err" || die "changed state message: $(cat "$T/err")"

# llmsys train --loader: 2 steps from the service, the loader state saved beside the
# checkpoint, service restarted from it, training resumed to step 4
cat > "$T/mixt.json" <<JSON
{"n_ctx": 32, "tokens_per_rank": 96, "seed": 2, "sources": [{"name": "docs", "path": "docs", "split": "blank"}]}
JSON
cp "$T/mixt.json" "$T/mix.json"
start   # 2 ranks: a 1-rank run is refused before training
A="tcp://127.0.0.1:$PORT"
"$LLMSYS" train --config tiny --loader "$A" --seq 32 --batch 6 --steps 4 --out "$T/y.safetensors" 2> "$T/err"; [ $? -eq 1 ] || die "rank mismatch accepted"
grep -q "serves 2 ranks but this run has 1" "$T/err" || die "rank mismatch message: $(cat "$T/err")"
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null
wait "${PIDS[-1]}"
RANKS=1
start
A="tcp://127.0.0.1:$PORT"
"$LLMSYS" train --config tiny --loader "$A" --seq 32 --batch 6 --steps 4 --stop-at 2 --out "$T/m.safetensors" > "$T/train.log" 2>&1 || die "train --loader: $(tail -3 "$T/train.log")"
[ -s "$T/m.safetensors.loader-state" ] || die "no loader state beside the checkpoint"
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null
wait "${PIDS[-1]}"
start --resume "$T/m.safetensors.loader-state"
A="tcp://127.0.0.1:$PORT"
"$LLMSYS" train --loader "$A" --resume "$T/m.safetensors" --out "$T/m.safetensors" > "$T/train.log" 2>&1 || die "resumed train --loader: $(tail -3 "$T/train.log")"
grep -q "trained steps 2..4" "$T/train.log" || die "resume did not continue at step 2: $(tail -2 "$T/train.log")"
"$LLMSYS" train --config tiny --loader "$A" --data "$T/docs" --steps 1 --out "$T/x.safetensors" 2>/dev/null; [ $? -eq 2 ] || die "--data with --loader"
# a BPE run: the service encodes with the run's tokenizer.json; a byte-token model is refused
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null
wait "${PIDS[-1]}"
"$LLMSYS" tokenizer train --input "$T"/docs/d*.txt --vocab-size 300 --out "$T/tok.json" > /dev/null 2>&1 || die "tokenizer train"
start --tokenizer "$T/tok.json"
A="tcp://127.0.0.1:$PORT"
"$LLMSYS" loader control --addr "$A" --info | grep -q '"vocab":300' || die "the service does not report the tokenizer"
"$LLMSYS" train --config tiny --loader "$A" --seq 32 --batch 6 --steps 2 --out "$T/z.safetensors" 2> "$T/err"; [ $? -eq 1 ] || die "a byte model took BPE batches"
grep -q "tokenizes with a BPE tokenizer but this run.s model uses byte tokens" "$T/err" || die "tokenizer mismatch message: $(cat "$T/err")"
"$LLMSYS" train --config tiny --loader "$A" --tokenizer "$T/tok.json" --seq 32 --batch 6 --steps 2 --out "$T/b.safetensors" > "$T/train.log" 2>&1 || die "train --loader --tokenizer: $(tail -3 "$T/train.log")"
[ -s "$T/b.safetensors.loader-state" ] || die "no loader state beside the BPE checkpoint"
# a run whose BPE tokenizer is not the service's (another vocabulary size) is refused too
"$LLMSYS" tokenizer train --input "$T"/docs/d*.txt --vocab-size 320 --out "$T/tok2.json" > /dev/null 2>&1 || die "tokenizer train 2"
"$LLMSYS" train --config tiny --loader "$A" --tokenizer "$T/tok2.json" --seq 32 --batch 6 --steps 2 --out "$T/c.safetensors" 2> "$T/err"; [ $? -eq 1 ] || die "another tokenizer's run took the service's batches"
grep -q "tokenizes with another tokenizer" "$T/err" || die "other tokenizer message: $(cat "$T/err")"
"$LLMSYS" loader control --addr "$A" --shutdown > /dev/null
echo "loader cli: ok"
