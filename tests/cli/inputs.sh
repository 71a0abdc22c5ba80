#!/usr/bin/env bash
# inputs.sh - hostile input files and values through the CLI's commands: each refused with
# exit 1 (a bad file) or 2 (a bad flag) and one stderr line, nothing written.
. "$(dirname "$0")/../lib.sh"
BIN=$(readlink -f "$BIN")
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

# --threads beyond LS_MODEL_MAX_THREADS: a usage error, not OpenMP's stack overflow (once SIGSEGV)
expect 0 "train a tiny model" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out m.safetensors
expect 2 "train --threads 100000" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --threads 100000 --out x.safetensors
expect 2 "eval --threads 100000" -- "$BIN" eval --model m.safetensors --data corpus.txt --threads 100000
expect 2 "generate --threads 100000" -- "$BIN" generate --model m.safetensors --threads 100000
expect 2 "profile --threads 100000" -- "$BIN" profile --model m.safetensors --out x.json --threads 100000
expect 2 "serve --threads 100000" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --threads 100000
expect 2 "plan train --threads 100000" -- "$BIN" plan train --model tiny --cluster local:1 --threads 100000 --out x.json
ls x.* > /dev/null 2>&1 && fail "a refused command wrote x.*"

# train --out '' / --report '': refused before the first step (once trained, then failed to save)
expect 1 "train --out ''" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out ''
grep -q "step 1" "$T/err" "$T/out" && fail "train --out '' ran a step"
expect 1 "train --report ''" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out x.safetensors --report ''
[ -e x.safetensors ] && fail "train --report '' wrote its checkpoint"

# eval --batch beyond the text's windows: buffers for the windows there are (was: out of memory)
expect 0 "eval --batch 2147483647" -- "$BIN" eval --model m.safetensors --data corpus.txt --batch 2147483647

# a quantized checkpoint where an fp32 one is needed: said so (was: "missing tensor 'h.0.attn.qkv.w'")
expect 0 "quantize" -- "$BIN" quantize --model m.safetensors --bits 4 --out q.safetensors
expect 1 "generate on a quantized checkpoint" -- "$BIN" generate --model q.safetensors --tokens 2
grep -q "a quantized checkpoint" "$T/err" || fail "generate: $(cat "$T/err")"
expect 1 "train --resume a quantized checkpoint" -- "$BIN" train --data corpus.txt --resume q.safetensors --steps 2 --out x.safetensors
grep -q "a quantized checkpoint" "$T/err" || fail "train --resume: $(cat "$T/err")"

# quantize --out naming the --model checkpoint: refused, the fp32 file kept (was: replaced by
# the quantized one); a symlink as --out is replaced, not followed, so that one is fine
ln -s m.safetensors link.safetensors
sum=$(cksum < m.safetensors)
expect 2 "quantize --out = --model" -- "$BIN" quantize --model m.safetensors --bits 4 --out ./m.safetensors
expect 2 "quantize --model through a link, --out the file" -- "$BIN" quantize --model link.safetensors --bits 4 --out "$T/m.safetensors"
[ "$(cksum < m.safetensors)" = "$sum" ] || fail "quantize replaced its fp32 input"
expect 0 "quantize --out a link to --model" -- "$BIN" quantize --model m.safetensors --bits 4 --out link.safetensors
[ "$(cksum < m.safetensors)" = "$sum" ] || fail "quantize wrote through the link"
# --heldout / --eval-tokens checked before the checkpoint is written (was: exit 1 after it)
expect 2 "quantize --heldout 0.9" -- "$BIN" quantize --model m.safetensors --bits 4 --out x.safetensors --eval corpus.txt --heldout 0.9
expect 2 "quantize --eval-tokens -1" -- "$BIN" quantize --model m.safetensors --bits 4 --out x.safetensors --eval corpus.txt --eval-tokens -1
[ -e x.safetensors ] && fail "a refused quantize wrote x.safetensors"
# quantize: an --eval corpus it cannot read or that is too short, or a --report it could not
# write, is found before the quantized checkpoint is written (was: the existing --out replaced,
# then exit 1)
qsum=$(cksum < q.safetensors)
expect 1 "quantize --eval of a missing file" -- "$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors --eval nosuch.txt
printf 'tiny' > tiny.txt
expect 1 "quantize --eval of a too short corpus" -- "$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors --eval tiny.txt
grep -q "too little held-out data" "$T/err" || fail "quantize --eval tiny: $(cat "$T/err")"
expect 1 "quantize --report in a missing directory" -- "$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors --report nodir/r.json
[ "$(cksum < q.safetensors)" = "$qsum" ] || fail "a failed quantize replaced its earlier --out"
expect 0 "quantize --eval that reads" -- "$BIN" quantize --model m.safetensors --bits 8 --out q8.safetensors --eval corpus.txt

# loader serve/stats: --prefetch/--history past the window (was UBSan: int overflow), a
# --source-workers that is not a count (was atoi: "2x" served with 2, 99999999999 overflowed),
# --ranks past 4096 (was exit 1)
cat > mix.json <<'JSON'
{"n_ctx": 64, "tokens_per_rank": 512, "micro_batches": 1, "seed": 1,
 "sources": [{"name": "a", "type": "text", "path": "corpus.txt"}],
 "schedule": [{"step": 0, "weights": {"a": 1}}]}
JSON
expect 2 "loader serve --prefetch 2^31-1" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port 0 --prefetch 2147483647
expect 2 "loader serve --history 2^31-1" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port 0 --history 2147483647
expect 2 "loader serve --source-workers 2x" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port 0 --source-workers 2x
expect 2 "loader serve --source-workers 99999999999" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port 0 --source-workers 99999999999
expect 2 "loader serve --ranks 4097" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 4097 --port 0
expect 2 "loader stats --ranks 4097" -- "$BIN" loader stats --mix mix.json --ranks 4097 --steps 2
expect 0 "loader stats" -- "$BIN" loader stats --mix mix.json --ranks 2 --steps 2
# loader fetch: a negative --timeout-ms waited forever; --count 0 or -1 printed nothing, exit 0
expect 2 "loader fetch --timeout-ms -5" -- timeout 20 "$BIN" loader fetch --addr tcp://127.0.0.1:9 --timeout-ms -5
expect 2 "loader fetch --count -1" -- "$BIN" loader fetch --addr tcp://127.0.0.1:9 --count -1

# victim make-data: sizes past the bounds refused (was UBSan: 2 * --classes overflowed; rows x
# features past size_t)
expect 1 "make-data --classes 2^31-1" -- "$BIN" victim make-data --out x.csv --n 10 --classes 2147483647
grep -q "make_table: at most" "$T/err" || fail "make-data --classes: $(cat "$T/err")"
expect 1 "make-data --n 2^62" -- "$BIN" victim make-data --out x.csv --n 4611686018427387904 --features 4
[ -e x.csv ] && fail "a refused make-data wrote x.csv"

# loader tokenize: an unknown --type or --split is a usage error (was: exit 1 from the source parser)
expect 2 "loader tokenize --type bogus" -- "$BIN" loader tokenize --in corpus.txt --out t.lstok --type bogus
expect 2 "loader tokenize --split bogus" -- "$BIN" loader tokenize --in corpus.txt --out t.lstok --split bogus
[ -e t.lstok ] && fail "a refused loader tokenize wrote t.lstok"

[ "$fails" -eq 0 ] && echo "cli.inputs: all passed"
exit "$fails"
