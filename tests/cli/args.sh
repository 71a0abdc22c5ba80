#!/usr/bin/env bash
# args.sh - the argument parser's usage errors through real commands: exit 2 and one line
# naming the option and the bad value (an empty or partial number, a bare `--`), with
# nothing leaked.
set -u
bin=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
expect2() { # expect2 MESSAGE -- command...
    local msg="$1"; shift 2
    "$@" > /dev/null 2> "$T/err"; local rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l < "$T/err")" -ne 1 ] || ! grep -qF -- "$msg" "$T/err"; then
        echo "FAIL: $* -> exit $rc, stderr: $(cat "$T/err")"; fails=$((fails + 1))
    fi
}
expect2 "--ranks expects an integer, got ''" -- "$bin" loader stats --ranks ''
expect2 "--ranks expects an integer, got '2x'" -- "$bin" loader stats --ranks 2x
expect2 "--steps expects an integer, got '99999999999'" -- "$bin" train --steps 99999999999
expect2 "unexpected argument '--'" -- "$bin" train --
expect2 "unexpected argument 'extra'" -- "$bin" train extra
# a list option's values freed after a later usage error or --help (once leaked: ASan's report)
expect2 "--out needs a value" -- "$bin" tokenizer train --input a b --vocab-size 300 --out
expect2 "missing required option --vocab-size" -- "$bin" tokenizer train --input a --special x --out t.json
"$bin" tokenizer train --input a --help > /dev/null 2> "$T/err" && [ ! -s "$T/err" ] \
  || { echo "FAIL: tokenizer train --input a --help: $(cat "$T/err")"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] || exit 1
echo "cli.args: ok"
