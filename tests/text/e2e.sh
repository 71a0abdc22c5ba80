#!/bin/bash
# A model on a BPE vocabulary through the CLI: tokenizer train, train, resume, eval (fp32 and
# quantized give the same bits/byte), generate, serve (a text prompt is encoded, the answer
# decoded); bad tokenizer input refused with one line.
. "$(dirname "$0")/../lib.sh"
BIN=$(readlink -f "$BIN")
L=/usr/share/common-licenses
[ -d "$L" ] || { echo "SKIP: $L missing"; exit 77; }
cd "$T" || exit 1
expect 0 "tokenizer train" -- "$BIN" tokenizer train --input $L/GPL-3 $L/Apache-2.0 --vocab-size 600 --out tok.json
expect 0 "train on BPE" -- "$BIN" train --config tiny --tokenizer tok.json --data $L --steps 40 --save-every 20 --out m.safetensors
expect 0 "resume" -- "$BIN" train --data $L --resume m.safetensors --steps 50 --out m.safetensors
expect 2 "resume with another tokenizer" -- "$BIN" train --data $L --resume m.safetensors --tokenizer tok.json --out x.safetensors
echo '{"model": {"type": "Unigram"}}' > bad.json
expect 2 "foreign tokenizer.json" -- "$BIN" train --config tiny --tokenizer bad.json --data $L --steps 2 --out x.safetensors
[ ! -e x.safetensors ] || fail "a refused run wrote its output"
bpb() { "$BIN" eval --model "$1" --data $L | awk '/bits\/byte/ {print $2}'; }
f=$(bpb m.safetensors)
"$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors >/dev/null 2>&1 || fail "quantize"
q=$(bpb q.safetensors)
echo "bits/byte fp32 $f, int8 $q"
awk -v f="$f" -v q="$q" 'BEGIN {exit !(f > 0.5 && f < 7.5 && q - f < 0.05 && f - q < 0.05)}' ||
    fail "bits/byte fp32 '$f' vs int8 '$q' (bytes counted per token's text, below the 9.2 of a uniform guess)"
out=$("$BIN" generate --model m.safetensors --prompt "The licensee" --tokens 20 --seed 2)
case "$out" in "The licensee"*) ;; *) fail "generate: '$out'" ;; esac
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" serve --model q.safetensors --port "$port" >serve.log 2>&1 &
sp=$!
trap 'kill $sp 2>/dev/null; wait $sp 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 300); do curl -s "localhost:$port/health" >/dev/null && break; sleep 0.1; done
r=$(curl -s --max-time 20 "localhost:$port/v1/completions" -d '{"prompt": "The licensee", "max_tokens": 8, "seed": 1}')
python3 - "$r" <<'PY' || fail "serve: $r"
import json, sys
j = json.loads(sys.argv[1])
c = j["choices"][0]
# BOS + fewer BPE tokens than the 12 prompt bytes; 8 generated tokens, their text decoded
assert 2 <= j["usage"]["prompt_tokens"] < 12, j["usage"]
assert len(c["tokens"]) == 8 and isinstance(c["text"], str), c
assert any(t >= 259 for t in c["tokens"] + [0]) or len(c["text"]) >= 8, c
PY
echo "ok   serve: $r" | cut -c1-200
finish text.e2e
