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
# every command's --help: a list option's metavar shows its "..." once; plan list names what it lists
for c in "tokenizer train" "rl plot" "sim rl" "train" "eval" "loader serve" "plan list"; do
    # shellcheck disable=SC2086
    "$bin" $c --help > "$T/help" 2>&1
    if grep -q '\.\.\.\.' "$T/help"; then fail "$c --help: $(grep '\.\.\.\.' "$T/help")"; fi
done
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
finish cli.args
