#!/usr/bin/env bash
# Token-for-token agreement of `llmsys tokenizer` with independent implementations run by Node.js:
# GPT-2's real ranks through js-tiktoken, and Hugging Face's tokenizers.js on GPT-2's vocabulary and
# on a vocabulary trained here; decode(encode(x)) == x byte for byte. Skips (77) without Node or
# without the oracle packages (scripts/setup.sh installs them under tests/text/oracle when npm is present).
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
oracle=$here/oracle
if ! command -v node >/dev/null || [ ! -d "$oracle/node_modules/js-tiktoken" ] ||
   [ ! -d "$oracle/node_modules/@huggingface/tokenizers" ]; then
  echo "SKIP: node or the oracle packages are missing (npm install in tests/text/oracle)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# texts: the Unicode sample, every doc page, and C sources (code, long punctuation runs)
cp "$here/data/unicode.txt" "$work/t0.txt"
cat "$src"/docs/*.md > "$work/t1.txt"
cat "$src"/src/text/*.c "$src"/src/model/gpt.c > "$work/t2.txt"
printf 'x' > "$work/t3.txt"
printf '   ' > "$work/t4.txt"
texts=("$work"/t*.txt)

node "$oracle/oracle.mjs" gpt2-json "$work/gpt2.json"
"$bin" tokenizer train --input "$work/t1.txt" --vocab-size 3000 --special '<|endoftext|>' --out "$work/ours.json" >/dev/null

fail=0
compare() { # name, expected file, actual file
  if ! cmp -s "$2" "$3"; then
    echo "FAIL: $1: ids differ (expected $(wc -w < "$2"), got $(wc -w < "$3") tokens)"
    diff <(tr ' ' '\n' < "$2") <(tr ' ' '\n' < "$3") | head -5
    fail=1
  fi
}
total=0
for t in "${texts[@]}"; do
  n=$(basename "$t" .txt)
  "$bin" tokenizer encode --tokenizer "$work/gpt2.json" --input "$t" > "$work/$n.ours-gpt2"
  node "$oracle/oracle.mjs" tiktoken-gpt2 "$t" > "$work/$n.tiktoken"
  node "$oracle/oracle.mjs" hf "$work/gpt2.json" "$t" > "$work/$n.hf-gpt2"
  "$bin" tokenizer encode --tokenizer "$work/ours.json" --input "$t" > "$work/$n.ours"
  node "$oracle/oracle.mjs" hf "$work/ours.json" "$t" > "$work/$n.hf-ours"
  compare "$n gpt2 vs js-tiktoken" "$work/$n.tiktoken" "$work/$n.ours-gpt2"
  compare "$n gpt2 vs tokenizers.js" "$work/$n.hf-gpt2" "$work/$n.ours-gpt2"
  compare "$n trained vocab vs tokenizers.js" "$work/$n.hf-ours" "$work/$n.ours"
  vs=ours; [ "$n" = t0 ] && vs="gpt2 ours"   # GPT-2's 1.3 MB vocabulary loads slowly under ASan: once
  for v in $vs; do
    f=$work/$n.ours-gpt2; [ $v = ours ] && f=$work/$n.ours
    "$bin" tokenizer decode --tokenizer "$work/$v.json" --input "$f" > "$work/$n.back-$v"
    cmp -s "$t" "$work/$n.back-$v" || { echo "FAIL: $n: decode(encode) differs with $v"; fail=1; }
  done
  total=$((total + $(wc -w < "$work/$n.tiktoken")))
done
[ $fail -eq 0 ] || exit 1
echo "ok: ${#texts[@]} texts, $total GPT-2 tokens: identical to js-tiktoken and tokenizers.js; trained vocab identical to tokenizers.js; round trips exact"
