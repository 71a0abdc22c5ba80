#!/usr/bin/env bash
# cli_inputs.sh - hostile input files given to every loader of the `llmsys` CLI: a FIFO (once
# blocked forever), a checkpoint with two "__metadata__" objects (once a heap overflow) and
# a checkpoint whose checksum key was stripped and data corrupted (once accepted). Each must
# end at once with exit 2 (an input the command line names) and one clear line naming the
# file, leaving no output file.
. "$(dirname "$0")/../lib.sh"

# run PATTERN -- command...: exit 2 within 20 s, stderr's last line matches PATTERN, no $T/out*
run() {
  local pat=$1
  shift 2
  rm -f "$T"/out*
  timeout 20 "$@" > "$T/stdout" 2> "$T/stderr"
  local rc=$?
  [ "$rc" -eq 124 ] && { fail "hung: $*"; return; }
  [ "$rc" -eq 2 ] || { fail "exit $rc (want 2): $*"; tail -3 "$T/stderr"; }
  tail -1 "$T/stderr" | grep -q -- "$pat" || { fail "stderr lacks '$pat': $*"; tail -3 "$T/stderr"; }
  ls "$T"/out* > /dev/null 2>&1 && fail "output left behind: $*"
}

# each loader of a safetensors file, with the file as $1 (all: also the ones that share a path)
loaders() {
  local f=$1 pat=$2 all=$3
  run "$pat" -- "$BIN" eval --model "$f" --data "$T/corpus.txt"
  [ "$all" = all ] && run "$pat" -- "$BIN" generate --model "$f" --tokens 2
  run "$pat" -- "$BIN" quantize --model "$f" --bits 4 --out "$T/out.safetensors"
  run "$pat" -- "$BIN" profile --model "$f" --out "$T/out.json"
  run "$pat" -- "$BIN" serve --model "$f" --port 0
  [ "$all" = all ] && run "$pat" -- "$BIN" train --data "$T/corpus.txt" --resume "$f" --steps 1 --out "$T/out.safetensors"
  run "$pat" -- "$BIN" steal eval --replica "$f" --target http://127.0.0.1:9/predict --test-data fmnist
}

for i in $(seq 1 200); do echo "line $i of a small corpus for the loaders"; done > "$T/corpus.txt"

# 1. a FIFO where an input file belongs (also as a mix config, a victim and a corpus)
mkfifo "$T/fifo"
loaders "$T/fifo" "fifo: is a FIFO; only regular files" all
run "is a FIFO" -- "$BIN" victim serve --model "$T/fifo" --port 0
run "is a FIFO" -- "$BIN" loader stats --mix "$T/fifo" --ranks 2 --steps 2
run "is a FIFO" -- "$BIN" train --config tiny --data "$T/fifo" --steps 1 --out "$T/out.safetensors"

# 2. two "__metadata__" objects, the first the larger (8-byte little-endian header length first)
le64() { local n=$1; for _ in 1 2 3 4 5 6 7 8; do printf "\\$(printf '%03o' $((n & 255)))"; n=$((n >> 8)); done; }
h='{"__metadata__":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"z":"0"}}'
{ le64 ${#h}; printf '%s' "$h"; printf '\0\0\200\77'; } > "$T/dupmeta.safetensors"
loaders "$T/dupmeta.safetensors" "'__metadata__' appears twice" some

# 3. a real checkpoint with its checksum key renamed and a weight overwritten
"$BIN" train --config tiny --data "$T/corpus.txt" --steps 1 --out "$T/m.safetensors" > /dev/null 2>&1 \
  || fail "train for the checksum case"
/usr/bin/python3 - "$T/m.safetensors" "$T/nosum.safetensors" <<'PY' || fail "python rewrite"
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
i = b.index(b'"llmsys.xxh3"')
b[i + 11] = ord('X')                 # the key is gone, the header length unchanged
b[-4:] = struct.pack('<f', float('nan'))
open(sys.argv[2], 'wb').write(b)
PY
run "no llmsys.xxh3 checksum" -- "$BIN" eval --model "$T/nosum.safetensors" --data "$T/corpus.txt"
run "LLMSYS_ALLOW_UNCHECKED" -- "$BIN" quantize --model "$T/nosum.safetensors" --bits 4 --out "$T/out.safetensors"
# accepted on request (the NaN weight then shows in the result, as the user asked for)
LLMSYS_ALLOW_UNCHECKED=1 timeout 20 "$BIN" generate --model "$T/nosum.safetensors" --tokens 2 > /dev/null 2>&1 \
  || fail "LLMSYS_ALLOW_UNCHECKED=1 did not accept the file"

finish io.cli_inputs
