#!/bin/bash
# Runs the fast command lines of docs/*.md exactly as the pages print them (each found by its prefix).
# usage: docs_commands.sh LLMSYS_BINARY SOURCE_DIR
set -u
BIN=$(readlink -f "$1"); SRC=$(readlink -f "$2")
W=$(mktemp -d /tmp/ls_docs_cmds.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/bin" "$W/run" && ln -s "$BIN" "$W/bin/llmsys"
export PATH="$W/bin:$PATH" B="$BIN" OPENBLAS_NUM_THREADS=1
cd "$W/run" || exit 1
fail=0
# doc PREFIX: the first line of docs/DOC.md starting with PREFIX, with its `\` continuation lines
run() {
    local doc=$1 prefix=$2 cmd
    cmd=$(awk -v p="$prefix" 'BEGIN{f=0} !f && index($0, p) == 1 {f=1} f {print; if ($0 !~ /\\$/) exit}' "$SRC/docs/$doc.md")
    if [ -z "$cmd" ]; then echo "FAIL docs/$doc.md: no line starts with: $prefix"; fail=1; return; fi
    local t0=$(date +%s.%N)
    if ! bash -e -c "$cmd" > out.txt 2>&1; then
        echo "FAIL docs/$doc.md: $cmd"; tail -5 out.txt; fail=1; return
    fi
    printf 'ok %5.1fs docs/%s.md: %s\n' "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')" "$doc" "$(head -1 <<< "$cmd")"
}
run training 'llmsys train --config tiny --data /usr/share/common-licenses --steps 300 --stop-at 100'
run training 'llmsys train --data /usr/share/common-licenses --resume run.safetensors'
run plan 'llmsys plan list'
run plan 'llmsys plan serve --cluster llmpq-2'
run plan 'llmsys plan serve --cluster demo-70b'
run loader 'llmsys demo loader'
run loader 'llmsys loader stats --mix demo-out/loader/mix-demo.json'
run loader 'printf '\''{"text"'
run loader 'llmsys loader tokenize --in data.jsonl'
run loader 'llmsys tokenizer train --input demo-out/loader/data/prose/'
run rl '$B rl tasks --kind copy --n 2000'
run rl '$B rl tasks --kind copy --n 64'
run qsync '$B plan train --model small --cluster A100x2,T4x2'
run robust 'llmsys sim robust --gpus 9600'
run tokenizer 'llmsys tokenizer train --input'
run tokenizer 'llmsys tokenizer encode --tokenizer tok.json --text'
run tokenizer 'llmsys tokenizer encode --tokenizer tok.json --input'
run tokenizer 'llmsys tokenizer decode --tokenizer tok.json --ids'
run tokenizer 'llmsys train --config tiny --tokenizer tok.json'
run tokenizer 'llmsys eval --model bpe.safetensors'
run steal 'llmsys victim make-data --kind blobs'
run steal 'llmsys victim train --type forest --data blobs.csv'
# the files the commands promise
for f in run.safetensors plan.json vllm.sh balance.svg stats.json data.lstok tasks.jsonl heldout.jsonl \
         gpu-plan.json blobs.csv v.bin tok.json; do
    [ -s "$f" ] || { echo "FAIL: $f not written"; fail=1; }
done
exit $fail
