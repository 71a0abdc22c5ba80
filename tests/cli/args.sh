#!/usr/bin/env bash
# args.sh - the argument parser's usage errors through real commands: exit 2 and one line
# naming the option and the bad value (an empty or partial number, a bare `--`), with
# nothing leaked.
. "$(dirname "$0")/../lib.sh" "$1"
bin=$BIN
expect2() { # expect2 MESSAGE -- command...
    local msg="$1"; shift 2
    "$@" > /dev/null 2> "$T/err"; local rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l < "$T/err")" -ne 1 ] || ! grep -qF -- "$msg" "$T/err"; then
        fail "$* -> exit $rc, stderr: $(cat "$T/err")"
    fi
}
expect2 "--ranks expects an integer, got ''" -- "$bin" loader stats --ranks ''
expect2 "--ranks expects an integer, got '2x'" -- "$bin" loader stats --ranks 2x
expect2 "--steps expects an integer, got '99999999999'" -- "$bin" train --steps 99999999999
expect2 "unexpected argument '--'" -- "$bin" train --
expect2 "unexpected argument 'extra'" -- "$bin" train extra
# what an option takes is checked by the parser itself, one rule and one line for every command
# (src/cli/args.c), before any work: an integer's range and a port's (was: a check per command,
# the port's written three times), a path that is empty (was: "llmsys: : No such file or
# directory", exit 1 or 2 by command), a bind address that is not an IPv4 or IPv6 address
# (ls_bind_check, the services' own rule; was: exit 1 from the HTTP server, '' alone exit 2)
for c in "serve --model m" "victim serve --model v" "loader serve --mix m.json --ranks 1"; do
    # shellcheck disable=SC2086
    expect2 "--port must be in [0, 65535], got 70000" -- "$bin" $c --port 70000
    # shellcheck disable=SC2086
    expect2 "--port must be in [0, 65535], got -1" -- "$bin" $c --port -1
    for b in '' 1.2.3 ::zz '[127.0.0.1]' localhost '*'; do
        # shellcheck disable=SC2086
        expect2 "--bind: bad bind address '$b' (an IPv4 or IPv6 address such as" -- "$bin" $c --bind "$b"
    done
    for b in 127.0.0.1 0.0.0.0 ::1 '[::1]' ::; do # taken: the port after it is the error
        # shellcheck disable=SC2086
        expect2 "--port must be in [0, 65535], got 70000" -- "$bin" $c --bind "$b" --port 70000
    done
done
expect2 "--host: bad bind address '1.2.3'" -- "$bin" serve --model m --host 1.2.3
expect2 "--status-bind: bad bind address 'nope'" -- "$bin" robust run --status-bind nope
expect2 "--members must be in [1, 8], got 9" -- "$bin" steal --members 9
expect2 "--timeout-ms must be >= 1, got -5" -- "$bin" loader fetch --timeout-ms -5
expect2 "--budget must be >= 1, got 0" -- "$bin" steal --budget 0
expect2 "--eval-tokens must be >= 0, got -1" -- "$bin" quantize --eval-tokens -1
expect2 "--tasks needs a path, got ''" -- "$bin" rl run --tasks ''
expect2 "--out needs a path, got ''" -- "$bin" train --out ''
expect2 "--data needs a path, got ''" -- "$bin" train --data a.txt '' # a list's second entry
expect2 "--report needs a path, got ''" -- "$bin" rl plot --report a.json --report ''
expect2 "--keys needs a path, got ''" -- "$bin" --keys '' keys gen --out k
# a string option with a fixed set of values (LS_CHOICES) refuses another by listing them, before
# its required options are looked for; a prefix, a longer word or '' is not one of them
expect2 "--output must be label or proba, got 'prob'" -- "$bin" victim serve --output prob
expect2 "--prada must be off, log, throttle or refuse, got 'logs'" -- "$bin" victim serve --prada=logs
expect2 "--monitor must be off, log, throttle or refuse, got ''" -- "$bin" victim serve --monitor ''
expect2 "--role must be source, got 'sourc'" -- "$bin" loader worker --role sourc
expect2 "--split must be file or blank, got 'blank|file'" -- "$bin" loader tokenize --split 'blank|file'
expect2 "--method must be variance, measured, default or kl, got 'KL'" -- "$bin" plan indicator --method KL
expect2 "--select must be replay or objective, got 'x'" -- "$bin" plan validate --select x
# every command's --help: a list option's metavar shows its "..." once; plan list names what it lists
for c in "tokenizer train" "rl plot" "sim rl" "train" "eval" "loader serve" "plan list"; do
    # shellcheck disable=SC2086
    "$bin" $c --help > "$T/help" 2>&1
    if grep -q '\.\.\.\.' "$T/help"; then fail "$c --help: $(grep '\.\.\.\.' "$T/help")"; fi
done
# every command's and subcommand's --help exits 0 and names every value an option with a fixed
# list takes in its own words: the printer shows a value its help leaves out as "(also: ...)"
# (a command with subcommands lists them as "  name   what it does"; three the lists leave out)
pages=("steal eval" "keys gen" "robust run")
for c in $("$bin" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1}'); do
    pages+=("$c")
    "$bin" "$c" --help 2> /dev/null | head -1 | grep -q "^usage: llmsys $c \[options\]" && continue
    for s in $("$bin" "$c" --help 2> /dev/null | awk '/^  [a-z][a-z-]*  +[^ -]/ {print $1}'); do pages+=("$c $s"); done
done
for p in "${pages[@]}"; do
    # shellcheck disable=SC2086
    "$bin" $p --help > "$T/help" 2>&1 || fail "$p --help: exit $?"
    if grep -q '(also: ' "$T/help"; then fail "$p --help leaves values unnamed: $(grep '(also: ' "$T/help")"; fi
done
[ "${#pages[@]}" -ge 43 ] || fail "only ${#pages[@]} --help pages found: ${pages[*]}"
"$bin" plan list > "$T/list" 2>&1
if "$bin" plan list --help | grep -qi 'gpu' && ! grep -qi 'gpu' "$T/list"; then
    fail "plan list --help promises GPUs that plan list does not print"
fi
# --reps of profile and plan train keeps the median of its timings (src/serve/profile.c, src/plan/trainplan.c);
# profile's help once said "minimum kept"
for c in "profile" "plan train"; do
    # shellcheck disable=SC2086
    "$bin" $c --help 2>&1 | grep -e '--reps' | grep -q 'median' \
      || { fail "$c --help: --reps does not say the median is kept"; }
done
# a list option's values freed after a later usage error or --help (once leaked: ASan's report)
expect2 "--out needs a value" -- "$bin" tokenizer train --input a b --vocab-size 300 --out
expect2 "missing required option --vocab-size" -- "$bin" tokenizer train --input a --special x --out t.json
"$bin" tokenizer train --input a --help > /dev/null 2> "$T/err" && [ ! -s "$T/err" ] \
  || { fail "tokenizer train --input a --help: $(cat "$T/err")"; }
# with no policy set, the CLI re-execs itself with the passive one: libgomp, loaded twice, says
# its spin count at each load (OMP_DISPLAY_ENV), 300000 and then 0
env -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$bin" --help > /dev/null 2> "$T/omp"
spins=$(grep -o "GOMP_SPINCOUNT = '[0-9]*'" "$T/omp" | tr -dc "0-9\n" | paste -sd, -)
[ "${spins##*,}" = 0 ] && [ "$spins" != 0 ] || fail "no re-exec with OMP_WAIT_POLICY=passive: spin counts '$spins'"
# OpenBLAS's kernels: the user's choice is kept and named by --version; with none, a CPU with
# AVX2 + FMA never runs the Prescott (SSE3) fallback (OpenBLAS picked better, or the CLI
# re-executed itself with better: a CPU newer than the OpenBLAS)
OPENBLAS_CORETYPE=Sandybridge "$bin" --version > "$T/ver" 2>&1
grep -q "OpenBLAS kernels: Sandybridge$" "$T/ver" || fail "--version with OPENBLAS_CORETYPE=Sandybridge: $(cat "$T/ver")"
env -u OPENBLAS_CORETYPE "$bin" --version > "$T/ver" 2>&1
grep -q "^cpu: [a-z0-9,-]*; llmsys kernels: [a-z0-9]*; OpenBLAS kernels: [A-Za-z0-9]*$" "$T/ver" \
  || fail "--version: no cpu/kernels line: $(cat "$T/ver")"
if grep -q "avx2,fma" "$T/ver" && grep -q "OpenBLAS kernels: Prescott" "$T/ver"; then
  fail "--version: OpenBLAS runs its Prescott fallback on a CPU with AVX2 + FMA"
fi
finish cli.args
