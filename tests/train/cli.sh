#!/usr/bin/env bash
# cli.sh - `llmsys train/eval/generate` from the outside: bad input gives one clear line
# and exit 2 (a flag or an input file) or 1 (runtime: an output it cannot write) and leaves no
# output file; same seed gives the same
# losses; an interrupted and resumed run ends bit-identical to an uninterrupted one.
. "$(dirname "$0")/../lib.sh"

# a small text corpus (about 100 KB of varied lines)
corpus "$T/corpus.txt" 1500
head -c 3000 "$BIN" > "$T/binary.dat"  # an ELF header: NUL bytes
: > "$T/empty.txt"

# expect_out CODE OUTFILE PATTERN -- command...: checks the exit code, that stderr is one line
# matching PATTERN, and that OUTFILE was not created.
expect_out() {
  local code=$1 out=$2 pat=$3
  shift 4
  rm -f "$out"
  "$@" > "$T/stdout" 2> "$T/stderr"
  local rc=$?
  local lines
  lines=$(grep -vc '^\[llmsys' "$T/stderr")
  if [ "$rc" -ne "$code" ]; then fail "exit $rc (want $code): $*"; cat "$T/stderr"; fi
  if [ "$lines" -ne 1 ]; then fail "want one error line, got $lines: $*"; cat "$T/stderr"; fi
  if ! grep -q -- "$pat" "$T/stderr"; then fail "stderr lacks '$pat': $*"; cat "$T/stderr"; fi
  if [ -e "$out" ]; then fail "$out left behind: $*"; fi
  if ls "$T"/*.tmp.* > /dev/null 2>&1; then fail "temp file left behind: $*"; fi
}

tr_args=(train --config tiny --data "$T/corpus.txt" --batch 4 --seq 32 --threads 1)
o=$T/out.safetensors
expect_out 2 "$o" "unknown option '--bogus'" -- "$BIN" "${tr_args[@]}" --steps 5 --out "$o" --bogus
expect_out 2 "$o" "steps must be >= 1" -- "$BIN" "${tr_args[@]}" --steps 0 --out "$o"
expect_out 2 "$o" "missing --steps" -- "$BIN" "${tr_args[@]}" --out "$o"
expect_out 2 "$o" "expects an integer" -- "$BIN" "${tr_args[@]}" --steps ten --out "$o"
expect_out 2 "$o" "unknown model config 'huge'" -- "$BIN" train --config huge --data "$T/corpus.txt" --steps 5 --out "$o"
expect_out 2 "$o" "batch must be >= 1" -- "$BIN" "${tr_args[@]}" --steps 5 --batch 0 --out "$o"
expect_out 2 "$o" "seq must be in" -- "$BIN" "${tr_args[@]}" --steps 5 --seq 100000 --out "$o"
expect_out 2 "$o" "lr must be in" -- "$BIN" "${tr_args[@]}" --steps 5 --lr -1 --out "$o"
expect_out 2 "$o" "does not split evenly" -- "$BIN" "${tr_args[@]}" --steps 5 --batch 3 --ranks 2 --out "$o"
expect_out 2 "$o" "missing required option --out" -- "$BIN" "${tr_args[@]}" --steps 5
expect_out 2 "$o" "missing --data" -- "$BIN" train --config tiny --steps 5 --out "$o"
expect_out 2 "$o" "/nonexistent/corpus.txt" -- "$BIN" "${tr_args[@]}" --data /nonexistent/corpus.txt --steps 5 --out "$o"
expect_out 2 "$o" "binary data" -- "$BIN" train --config tiny --data "$T/binary.dat" --steps 5 --out "$o"
expect_out 2 "$o" "no data" -- "$BIN" train --config tiny --data "$T/empty.txt" --steps 5 --out "$o"
expect_out 2 "$o" "too little training data" -- "$BIN" train --config tiny --data "$T/corpus.txt" --max-bytes 40 --steps 5 --out "$o"
expect_out 1 "$o" "is a directory" -- "$BIN" "${tr_args[@]}" --steps 2 --out "$T"
expect_out 1 "$o" "directory /nonexistent/dir does not exist" -- "$BIN" "${tr_args[@]}" --steps 2 --out "$o" --report /nonexistent/dir/r.json
"$BIN" train --help > /dev/null || fail "train --help"

# determinism: two runs, same seed -> the same loss sequence and the same checkpoint
"$BIN" "${tr_args[@]}" --steps 12 --out "$T/a.st" --report "$T/a.json" > /dev/null 2>&1 || fail "run a"
"$BIN" "${tr_args[@]}" --steps 12 --out "$T/b.st" --report "$T/b.json" > /dev/null 2>&1 || fail "run b"
la=$(tr -d ' \n\t' < "$T/a.json" | grep -o '"losses":\[[^]]*\]')
lb=$(tr -d ' \n\t' < "$T/b.json" | grep -o '"losses":\[[^]]*\]')
[ -n "$la" ] && [ "$la" = "$lb" ] || fail "same seed, different losses: $la vs $lb"
cmp -s "$T/a.st" "$T/b.st" || fail "same seed, different checkpoints"
for k in params initial_loss final_loss tokens_per_s wall_s steps ranks; do
  grep -q "\"$k\"" "$T/a.json" || fail "report lacks $k"
done
"$BIN" "${tr_args[@]}" --steps 12 --seed 2 --out "$T/c.st" > /dev/null 2>&1 || fail "run c"
cmp -s "$T/a.st" "$T/c.st" && fail "another seed, same checkpoint"

# resume: stop at 5 of 12, resume, and end exactly where the uninterrupted run ended
"$BIN" "${tr_args[@]}" --steps 12 --stop-at 5 --out "$T/h.st" --report "$T/h1.json" > /dev/null 2>&1 || fail "run h"
"$BIN" train --data "$T/corpus.txt" --threads 1 --resume "$T/h.st" --out "$T/r.st" --report "$T/h2.json" > /dev/null 2>&1 || fail "resume"
cmp -s "$T/a.st" "$T/r.st" || fail "resumed run differs from the uninterrupted one"
l1=$(tr -d ' \n\t' < "$T/h1.json" | grep -o '"losses":\[[^]]*\]' | sed 's/.*\[//; s/\]//')
l2=$(tr -d ' \n\t' < "$T/h2.json" | grep -o '"losses":\[[^]]*\]' | sed 's/.*\[//; s/\]//')
[ "\"losses\":[$l1,$l2]" = "$la" ] || fail "resumed losses differ: [$l1 | $l2] vs $la"
expect_out 2 "$o" "come from the checkpoint" -- "$BIN" train --data "$T/corpus.txt" --resume "$T/h.st" --batch 8 --out "$o"
expect_out 2 "$o" "not an llmsys checkpoint\|malformed\|safetensors\|header" -- "$BIN" train --data "$T/corpus.txt" --resume "$T/corpus.txt" --out "$o"

# SIGTERM mid-run: the current step finishes, the checkpoint is saved, exit 130, and the
# run continues from there with --resume
timeout -s KILL 60 "$BIN" "${tr_args[@]}" --steps 100000 --log-every 1 --out "$T/sig.st" > /dev/null 2> "$T/sig.err" &
pid=$!
for _ in $(seq 1 300); do grep -q '^step 3/' "$T/sig.err" && break; sleep 0.1; done
kill -TERM "$pid" 2> /dev/null
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || { fail "SIGTERM: exit $rc, want 130"; cat "$T/sig.err"; }
k=$(grep -o 'interrupted: saved step [0-9]*' "$T/sig.err" | grep -o '[0-9]*$')
if [ -n "$k" ] && [ -s "$T/sig.st" ]; then
  "$BIN" train --data "$T/corpus.txt" --threads 1 --resume "$T/sig.st" --stop-at $((k + 2)) --out "$T/sig2.st" 2>&1 |
    grep -q "trained steps $k..$((k + 2)) of 100000" || fail "resume after SIGTERM"
else
  fail "SIGTERM: no checkpoint or message"
  cat "$T/sig.err"
fi

# eval: numbers on the held-out split; bad input
"$BIN" eval --threads 1 --model "$T/a.st" --data "$T/corpus.txt" --report "$T/e.json" > "$T/eval.txt" 2>&1 || fail "eval"
grep -q "bits/byte" "$T/eval.txt" || fail "eval prints no bits/byte"
grep -q '"perplexity"' "$T/e.json" || fail "eval report lacks perplexity"
expect_out 2 "$T/e2.json" "--split must be" -- "$BIN" eval --model "$T/a.st" --data "$T/corpus.txt" --split dev --report "$T/e2.json"
expect_out 2 "$T/e2.json" "--heldout must be in (0, 0.5], got 0.7" -- "$BIN" eval --model "$T/a.st" --data "$T/corpus.txt" --heldout 0.7 --report "$T/e2.json"
expect_out 2 "$T/e2.json" "/nonexistent.st" -- "$BIN" eval --model /nonexistent.st --data "$T/corpus.txt" --report "$T/e2.json"
head -c 5000 "$T/a.st" > "$T/trunc.st"
expect_out 2 "$T/e2.json" "trunc.st" -- "$BIN" eval --model "$T/trunc.st" --data "$T/corpus.txt" --report "$T/e2.json"

# generate: greedy is deterministic and continues the prompt; bad values are usage errors
g1=$("$BIN" generate --threads 1 --model "$T/a.st" --prompt "line 1" --tokens 150 --temperature 0 2> /dev/null) || fail "generate"
g2=$("$BIN" generate --threads 1 --model "$T/a.st" --prompt "line 1" --tokens 150 --temperature 0 --seed 9 2> /dev/null)
[ "$g1" = "$g2" ] || fail "greedy generation differs between seeds"
case "$g1" in "line 1"*) ;; *) fail "generate does not start with the prompt: $g1" ;; esac
s1=$("$BIN" generate --threads 1 --model "$T/a.st" --tokens 100 --top-k 5 --top-p 0.9 --seed 3 2> /dev/null) || fail "sample"
s2=$("$BIN" generate --threads 1 --model "$T/a.st" --tokens 100 --top-k 5 --top-p 0.9 --seed 3 2> /dev/null)
[ "$s1" = "$s2" ] || fail "sampling with one seed is not reproducible"
expect_out 2 "$o" "--top-p must be" -- "$BIN" generate --model "$T/a.st" --top-p 0
expect_out 2 "$o" "--temperature must be" -- "$BIN" generate --model "$T/a.st" --temperature -1
expect_out 2 "$o" "--tokens must be" -- "$BIN" generate --model "$T/a.st" --tokens 0
expect_out 2 "$o" "binary.dat" -- "$BIN" generate --model "$T/binary.dat"

# LLMSYS_LOG: the info line a run starts with is shown by default and at debug, hidden at warn
# (in any case) and above
for lv in "" debug warn WARN error off; do
  LLMSYS_LOG=$lv "$BIN" train --config tiny --data "$T/corpus.txt" --steps 1 --batch 2 --seq 16 \
    --out "$T/log.st" > /dev/null 2> "$T/log.err" || fail "LLMSYS_LOG=$lv: train failed"
  n=$(grep -c '^\[llmsys \(info\|debug\|warn\|error\)' "$T/log.err")
  case "$lv" in
    "") grep -q '^\[llmsys info\] train: ' "$T/log.err" || fail "LLMSYS_LOG unset: no info line" ;;
    debug) grep -q '^\[llmsys info\] train: ' "$T/log.err" || fail "LLMSYS_LOG=debug: no info line" ;;
    *) [ "$n" -eq 0 ] || fail "LLMSYS_LOG=$lv: $n log lines: $(head -2 "$T/log.err")" ;;
  esac
done

finish train.cli
