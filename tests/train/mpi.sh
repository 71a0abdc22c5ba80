#!/usr/bin/env bash
# mpi.sh - data parallelism over Open MPI: 2 ranks (through `--ranks 2` and through a
# plain `mpirun -np 2`) and 1 rank on the same global batch end with the same parameters
# after k steps, within float tolerance; more ranks than data shards is one clear error.
. "$(dirname "$0")/../lib.sh" "$1"
CMP=$2
MASK=$3
AGREE=$4
if ! command -v mpirun > /dev/null; then echo "mpirun not found (openmpi-bin)"; exit 1; fi

corpus "$T/corpus.txt" 1500

# Tolerance: the ranks sum their gradients in another order than one rank's single
# backward pass, so values differ in the last float bits; AdamW divides by sqrt(v) and
# can amplify that for coordinates whose gradient is ~0 (lr 1e-3, 6 steps: bounded by
# 6e-3; observed 1.2-1.5e-6). 1e-5 is 100x below one update (lr) in most coordinates.
TOL=1e-5
args=(train --config tiny --data "$T/corpus.txt" --batch 4 --seq 32 --steps 6 --lr 1e-3 --threads 1)
timeout 60 "$BIN" "${args[@]}" --log-every 1 --out "$T/one.st" --report "$T/one.json" > /dev/null 2> "$T/one.err" || { fail "1 rank"; cat "$T/one.err"; }
timeout 60 "$BIN" "${args[@]}" --log-every 1 --ranks 2 --out "$T/two.st" --report "$T/two.json" > /dev/null 2> "$T/two.err" || { fail "--ranks 2"; cat "$T/two.err"; }
# the all-reduced gradient is the global mean: its norm at every step is the 1-rank one
# (AdamW is nearly blind to a gradient's scale, so the parameters alone would not show a
# missing division by the target count)
paste <(grep -o 'grad-norm [0-9.]*' "$T/one.err") <(grep -o 'grad-norm [0-9.]*' "$T/two.err") |
  awk '{ n++; d = $2 - $4; if (d < 0) d = -d; if (d > 0.002 * ($2 > 1 ? $2 : 1)) bad++ } END { exit !(n == 6 && !bad) }' \
  || fail "grad norms of 1 and 2 ranks differ: $(grep -o 'grad-norm [0-9.]*' "$T/one.err" "$T/two.err" | tr '\n' ' ')"
timeout 60 mpirun -q -np 2 "${root[@]}" --oversubscribe --bind-to none "$BIN" "${args[@]}" --out "$T/mpi.st" > /dev/null 2> "$T/err" || { fail "mpirun -np 2"; cat "$T/err"; }
"$CMP" "$T/one.st" "$T/two.st" "$TOL" || fail "1 rank vs --ranks 2"
"$CMP" "$T/one.st" "$T/mpi.st" "$TOL" || fail "1 rank vs mpirun -np 2"
grep -q '"ranks":[[:space:]]*2' "$T/two.json" || fail "report of the 2-rank run does not say 2 ranks"
# the global-mean losses agree too (printed to 4 decimals in the reports' first entries)
l1=$(tr -d ' \n\t' < "$T/one.json" | grep -o '"final_loss":[0-9.]*' | cut -c14-19)
l2=$(tr -d ' \n\t' < "$T/two.json" | grep -o '"final_loss":[0-9.]*' | cut -c14-19)
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "final losses differ: $l1 vs $l2"

# unequal target counts per rank (masked targets): the all-reduce weights ranks by count
timeout 60 "$MASK" "$T/m1.st" > /dev/null 2> "$T/err" || { fail "mask, 1 rank"; cat "$T/err"; }
timeout 60 mpirun -q -np 2 "${root[@]}" --oversubscribe --bind-to none "$MASK" "$T/m2.st" > /dev/null 2> "$T/err" || { fail "mask, 2 ranks"; cat "$T/err"; }
"$CMP" "$T/m1.st" "$T/m2.st" "$TOL" || fail "masked targets: 1 rank vs 2 ranks"

# a failure on one rank reaches the other as the peer's, naming the rank that failed first
timeout 30 mpirun -q -np 2 "${root[@]}" --oversubscribe --bind-to none "$AGREE" > /dev/null 2> "$T/err" || { fail "agree"; cat "$T/err"; }

# a resumed 2-rank run ends where the uninterrupted 2-rank run did
timeout 60 "$BIN" "${args[@]}" --ranks 2 --stop-at 3 --out "$T/half.st" > /dev/null 2>&1 || fail "2 ranks, stop at 3"
timeout 60 "$BIN" train --data "$T/corpus.txt" --threads 1 --ranks 2 --resume "$T/half.st" --out "$T/res.st" > /dev/null 2>&1 || fail "2 ranks, resume"
cmp -s "$T/two.st" "$T/res.st" || fail "2-rank resume differs from the uninterrupted 2-rank run"

# SIGTERM to mpirun: it forwards the signal, the ranks agree to stop after the same step
# and rank 0 saves
timeout -s KILL 60 "$BIN" "${args[@]}" --steps 100000 --ranks 2 --log-every 1 --out "$T/sig.st" > /dev/null 2> "$T/sig.err" &
pid=$!
for _ in $(seq 1 300); do grep -q '^step 3/' "$T/sig.err" && break; sleep 0.1; done
kill -TERM "$pid" 2> /dev/null
wait "$pid"
grep -q "interrupted: saved step" "$T/sig.err" || { fail "2 ranks, SIGTERM: no save"; cat "$T/sig.err"; }
"$CMP" "$T/sig.st" "$T/sig.st" 0 > /dev/null || fail "2 ranks, SIGTERM: checkpoint does not load"

# more ranks than shards: one line on stderr, exit 2 (the data cannot be split as asked: every
# rank says so, mpirun passes it on), no checkpoint
head -c 150 "$T/corpus.txt" > "$T/small.txt"
timeout 60 "$BIN" train --config tiny --data "$T/small.txt" --steps 3 --batch 3 --ranks 3 --threads 1 --out "$T/x.st" > /dev/null 2> "$T/err"
rc=$?
[ "$rc" -eq 2 ] || fail "more ranks than shards: exit $rc, want 2"
[ "$(wc -l < "$T/err")" -eq 1 ] || { fail "more ranks than shards: want one line"; cat "$T/err"; }
grep -q "more ranks (3) than data shards" "$T/err" || { fail "message"; cat "$T/err"; }
[ -e "$T/x.st" ] && fail "checkpoint written despite the error"

finish train.mpi
