#!/usr/bin/env bash
# inputs.sh - hostile input files and values through the CLI's commands: each refused with
# exit 1 (a bad file) or 2 (a bad flag) and one stderr line, nothing written.
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $i times"; done > corpus.txt

# tokenizer decode --input: a file that is not a list of ids is a bad input (1), not a usage
# error (2), and names the file; a NUL byte does not end the list early
expect 0 "tokenizer train" -- "$BIN" tokenizer train --input corpus.txt --vocab-size 280 --out tok.json
printf 'one two\n' > ids.txt
expect 1 "decode: ids file of words" -- "$BIN" tokenizer decode --tokenizer tok.json --input ids.txt
grep -q "ids.txt" "$T/err" || fail "decode: the error does not name ids.txt"
printf '65 66\0zz' > nul.txt
expect 1 "decode: ids file with a NUL byte" -- "$BIN" tokenizer decode --tokenizer tok.json --input nul.txt
expect 2 "decode: --ids of words" -- "$BIN" tokenizer decode --tokenizer tok.json --ids "one two"

[ "$fails" -eq 0 ] && echo "cli.inputs: all passed"
exit "$fails"
