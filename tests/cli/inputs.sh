#!/usr/bin/env bash
# inputs.sh - hostile input files and values through the CLI's commands: each refused with one
# stderr line and nothing written, exit 2 for what the command line names (a flag, a value, an
# input file) and 1 for what fails while running (an output it cannot write, a peer, the
# network): the rule of README.md, "Exit codes".
. "$(dirname "$0")/../lib.sh"
BIN=$(readlink -f "$BIN")
cd "$T" || exit 1
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $i times"; done > corpus.txt

# tokenizer decode --input: a file that is not a list of ids is a bad input (2, as --ids is) and
# names the file; a NUL byte does not end the list early
expect 0 "tokenizer train" -- "$BIN" tokenizer train --input corpus.txt --vocab-size 280 --out tok.json
printf 'one two\n' > ids.txt
expect 2 "decode: ids file of words" -- "$BIN" tokenizer decode --tokenizer tok.json --input ids.txt
grep -q "ids.txt" "$T/err" || fail "decode: the error does not name ids.txt"
printf '65 66\0zz' > nul.txt
expect 2 "decode: ids file with a NUL byte" -- "$BIN" tokenizer decode --tokenizer tok.json --input nul.txt
expect 2 "decode: --ids of words" -- "$BIN" tokenizer decode --tokenizer tok.json --ids "one two"
# a list that ends in a newline (as a file usually does) is a list; a character that is not a
# separator between two ids makes it none (not "65;66" read as 65 66)
printf '65 66\n' > ids-nl.txt
expect 0 "decode: ids file ending in a newline" -- "$BIN" tokenizer decode --tokenizer tok.json --input ids-nl.txt
[ "$(cat "$T/out")" = AB ] || fail "decode of 65 66: '$(cat "$T/out")'"
expect 2 "decode: --ids 65;66" -- "$BIN" tokenizer decode --tokenizer tok.json --ids "65;66"

# --threads beyond LS_MODEL_MAX_THREADS: a usage error, not OpenMP's stack overflow (once SIGSEGV)
expect 0 "train a tiny model" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out m.safetensors
expect 2 "train --threads 100000" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --threads 100000 --out x.safetensors
expect 2 "eval --threads 100000" -- "$BIN" eval --model m.safetensors --data corpus.txt --threads 100000
expect 2 "generate --threads 100000" -- "$BIN" generate --model m.safetensors --threads 100000
expect 2 "profile --threads 100000" -- "$BIN" profile --model m.safetensors --out x.json --threads 100000
expect 2 "profile --bits 5" -- "$BIN" profile --model m.safetensors --out x.json --bits 16,5
grep -q -- "--bits must be" "$T/err" || fail "profile --bits 5: $(cat "$T/err")"
expect 2 "profile --ctxs 0" -- "$BIN" profile --model m.safetensors --out x.json --ctxs 4,0
expect 2 "serve --threads 100000" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --threads 100000
# a pipeline stage started by hand (serve --worker) checks its plan against the checkpoint
# before it binds: stage 0 of a plan for a 4-layer model fits the 2-layer one's layers but is
# refused, naming both counts
printf '{"format":"llmsys-plan","version":1,"model":{"name":"x","n_layer":4},"stages":[{"layers":[0,2],"bits":[4,4]},{"layers":[2,4],"bits":[4,4]}]}' > plan4.json
expect 1 "serve --worker, a plan for another model" -- timeout 20 "$BIN" serve --worker --model m.safetensors \
    --plan plan4.json --stage 0 --in "tcp://127.0.0.1:$(freeport)" --out "tcp://127.0.0.1:$(freeport)"
grep -q "plan is for a model with 4 layers, but m.safetensors has 2" "$T/err" ||
    fail "serve --worker, other model: $(cat "$T/err")"
expect 2 "plan train --threads 100000" -- "$BIN" plan train --model tiny --cluster local:1 --threads 100000 --out x.json
ls x.* > /dev/null 2>&1 && fail "a refused command wrote x.*"

# train --out '' / --report '': refused before the first step (once trained, then failed to save);
# a usage error since an empty path is one (was: exit 1)
expect 2 "train --out ''" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out ''
grep -q "step 1" "$T/err" "$T/out" && fail "train --out '' ran a step"
expect 2 "train --report ''" -- "$BIN" train --config tiny --data corpus.txt --steps 1 --out x.safetensors --report ''
[ -e x.safetensors ] && fail "train --report '' wrote its checkpoint"

# eval --batch beyond the text's windows: buffers for the windows there are (was: out of memory)
expect 0 "eval --batch 2147483647" -- "$BIN" eval --model m.safetensors --data corpus.txt --batch 2147483647

# a quantized checkpoint where an fp32 one is needed: said so (was: "missing tensor 'h.0.attn.qkv.w'")
expect 0 "quantize" -- "$BIN" quantize --model m.safetensors --bits 4 --out q.safetensors
expect 2 "generate on a quantized checkpoint" -- "$BIN" generate --model q.safetensors --tokens 2
grep -q "a quantized checkpoint" "$T/err" || fail "generate: $(cat "$T/err")"
expect 2 "train --resume a quantized checkpoint" -- "$BIN" train --data corpus.txt --resume q.safetensors --steps 2 --out x.safetensors
grep -q "a quantized checkpoint" "$T/err" || fail "train --resume: $(cat "$T/err")"

# quantize --out naming the --model checkpoint: refused, the fp32 file kept (was: replaced by
# the quantized one); a symlink as --out is replaced, not followed, so that one is fine
ln -s m.safetensors link.safetensors
sum=$(cksum < m.safetensors)
expect 2 "quantize --bits 5" -- "$BIN" quantize --model m.safetensors --bits 5 --out x.safetensors
grep -qF -- "--bits must be 16, 8, 4 or 3, got 5" "$T/err" || fail "quantize --bits 5: $(cat "$T/err")"
expect 2 "quantize without --bits or --bits-map" -- "$BIN" quantize --model m.safetensors --out x.safetensors
[ -e x.safetensors ] && fail "a refused quantize wrote x.safetensors"
expect 2 "quantize --out = --model" -- "$BIN" quantize --model m.safetensors --bits 4 --out ./m.safetensors
expect 2 "quantize --model through a link, --out the file" -- "$BIN" quantize --model link.safetensors --bits 4 --out "$T/m.safetensors"
[ "$(cksum < m.safetensors)" = "$sum" ] || fail "quantize replaced its fp32 input"
expect 0 "quantize --out a link to --model" -- "$BIN" quantize --model m.safetensors --bits 4 --out link.safetensors
[ "$(cksum < m.safetensors)" = "$sum" ] || fail "quantize wrote through the link"
# --heldout / --eval-tokens checked before the checkpoint is written (was: exit 1 after it)
expect 2 "quantize --heldout 0.9" -- "$BIN" quantize --model m.safetensors --bits 4 --out x.safetensors --eval corpus.txt --heldout 0.9
expect 2 "quantize --eval-tokens -1" -- "$BIN" quantize --model m.safetensors --bits 4 --out x.safetensors --eval corpus.txt --eval-tokens -1
[ -e x.safetensors ] && fail "a refused quantize wrote x.safetensors"
# quantize: an --eval corpus it cannot read or that is too short (2), or a --report it could not
# write (1), is found before the quantized checkpoint is written (was: the existing --out
# replaced, then exit 1)
qsum=$(cksum < q.safetensors)
expect 2 "quantize --eval of a missing file" -- "$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors --eval nosuch.txt
printf 'tiny' > tiny.txt
expect 2 "quantize --eval of a too short corpus" -- "$BIN" quantize --model m.safetensors --bits 8 --out q.safetensors --eval tiny.txt
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
# features past size_t), usage errors naming the flag (was: exit 1 from the library); an unknown
# --kind too; make-task: an unknown --task (was: exit 1)
expect 2 "make-data --classes 2^31-1" -- "$BIN" victim make-data --out x.csv --n 10 --classes 2147483647
grep -q -- "--classes" "$T/err" || fail "make-data --classes: $(cat "$T/err")"
expect 2 "make-data --n 2^62" -- "$BIN" victim make-data --out x.csv --n 4611686018427387904 --features 4
expect 2 "make-data --n 0" -- "$BIN" victim make-data --out x.csv --n 0
grep -q -- "--n must be" "$T/err" || fail "make-data --n 0: $(cat "$T/err")"
expect 2 "make-data --kind bogus" -- "$BIN" victim make-data --out x.csv --n 20 --kind bogus
expect 2 "make-task --task bogus" -- "$BIN" victim make-task --task bogus --out x.dir
[ -e x.csv ] || [ -e x.dir ] && fail "a refused make-data/make-task wrote x.csv or x.dir"

# loader tokenize: an unknown --type or --split is a usage error (was: exit 1 from the source parser)
expect 2 "loader tokenize --type bogus" -- "$BIN" loader tokenize --in corpus.txt --out t.lstok --type bogus
expect 2 "loader tokenize --split bogus" -- "$BIN" loader tokenize --in corpus.txt --out t.lstok --split bogus
expect 2 "loader tokenize --field ''" -- "$BIN" loader tokenize --in corpus.txt --out t.lstok --type jsonl --field ''
[ -e t.lstok ] && fail "a refused loader tokenize wrote t.lstok"

# outputs checked before the work (was: profile measured, plan serve wrote --out, plan validate
# served every plan, then each failed on the missing directory)
expect 1 "profile --out in a missing directory" -- "$BIN" profile --model m.safetensors --out nodir/p.json
grep -q -- "--out nodir/p.json" "$T/err" || fail "profile --out nodir: $(cat "$T/err")"
expect 1 "plan serve --report in a missing directory" -- "$BIN" plan serve --cluster llmpq-2 --model opt-30b --out x.json --report nodir/r.json
[ -e x.json ] && fail "plan serve wrote --out, then failed on --report"
expect 1 "plan validate --report in a missing directory" -- "$BIN" plan validate --config tiny --stages 1 --runs 1 --reps 1 --report nodir/r.json
grep -q -- "--report nodir/r.json" "$T/err" || fail "plan validate --report nodir: $(cat "$T/err")"
# plan train, rl run and sim rl: a missing output directory is exit 1 as for the commands above
# (was: 2 from plan train and rl run; sim rl found it after printing the table)
expect 1 "plan train --out in a missing directory" -- "$BIN" plan train --model tiny --cluster A100x2 --out nodir/p.json
expect 1 "sim rl --out in a missing directory" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --out nodir/s.json
[ -s "$T/out" ] && fail "sim rl printed its table before failing on --out"
# tokenizer train: a token added twice (was: two ids for it)
expect 2 "tokenizer train --special a a" -- "$BIN" tokenizer train --input corpus.txt --vocab-size 300 --special a a --out x.json
expect 2 "tokenizer train --special of a model special" -- "$BIN" tokenizer train --input corpus.txt --vocab-size 300 --special '<|eos|>' --out x.json
expect 2 "tokenizer train --vocab-size below the added tokens" -- "$BIN" tokenizer train --input corpus.txt --vocab-size 260 --special a b --out x.json
grep -qF "vocabulary size 260 outside [261," "$T/err" || fail "tokenizer train --vocab-size 260: $(cat "$T/err")"
[ -e x.json ] && fail "a refused command wrote x.json"
expect 2 "keys: an unknown subcommand in one line" -- "$BIN" keys bogus

# victim train: --out naming --data (was: the CSV replaced by the victim, exit 0), --out = --report,
# a size that is not one (was: --epochs -1 silently the default), --report checked before training
expect 0 "victim make-data" -- "$BIN" victim make-data --out t.csv --n 200 --features 4 --classes 3
cp t.csv t0.csv
expect 2 "victim train --out = --data" -- "$BIN" victim train --type logreg --data t.csv --out ./t.csv --quiet
cmp -s t.csv t0.csv || fail "victim train replaced its --data file"
expect 2 "victim train --out = --report" -- "$BIN" victim train --type logreg --data t.csv --out v.bin --report v.bin --quiet
expect 2 "victim train --epochs -1" -- "$BIN" victim train --type logreg --data t.csv --out v.bin --epochs -1 --quiet
expect 2 "victim train --trees 0" -- "$BIN" victim train --type forest --data t.csv --out v.bin --trees 0 --quiet
expect 1 "victim train --report in a missing directory" -- "$BIN" victim train --type logreg --data t.csv --out v.bin --report nodir/r.json --quiet
[ -e v.bin ] && fail "a refused victim train wrote v.bin"
expect 0 "victim train" -- "$BIN" victim train --type logreg --data t.csv --out v.bin --quiet
# victim serve: an empty --admin-key made an empty X-API-Key header the admin; a negative budget
# meant none
expect 2 "victim serve --admin-key ''" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --admin-key ''
expect 2 "victim serve --budget -5" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --budget -5
# each value the server refuses (ls_victim_serve_check, the library's own rule) is named by its flag
for bad in "--prada-delta 1:--prada-delta" "--burst 0.5:--burst" "--throttle -1:--throttle" "--monitor-z 0:--monitor-z" \
    "--monitor log:--monitor-data" "--rate 0:--rate" "--duration -1:--duration"; do
    # shellcheck disable=SC2086
    expect 2 "victim serve ${bad%%:*}" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 ${bad%%:*}
    grep -qF -- "${bad##*:}" "$T/err" || fail "victim serve ${bad%%:*}: $(cat "$T/err")"
done
# every HTTP service off loopback only with authentication (was: open to anyone reaching the port);
# the flags ask for what is refused: 2
expect 2 "victim serve --bind 0.0.0.0 without --keys" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --bind 0.0.0.0
grep -q "refusing to listen on 0.0.0.0 without authentication.*--keys" "$T/err" || fail "victim serve open bind: $(cat "$T/err")"
expect 2 "victim serve --bind :: without --keys" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --bind ::
grep -q "refusing to listen on :: without authentication.*--keys" "$T/err" || fail "victim serve open v6 bind: $(cat "$T/err")"
# a bind address that is not an IPv4 or IPv6 literal (was: IPv6 ones refused as these are): a
# usage error naming the flag (was: exit 1 from the HTTP server)
for b in 1.2.3 ::zz '[127.0.0.1]' localhost; do
    expect 2 "victim serve --bind $b" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --bind "$b"
    grep -qF -- "--bind: bad bind address '$b' (an IPv4 or IPv6 address" "$T/err" || fail "victim serve --bind $b: $(cat "$T/err")"
done
expect 2 "robust run --status-bind 0.0.0.0 without --status-key" -- timeout 20 "$BIN" robust run --nodes 1 --ranks-per-node 1 --standby 0 --quiet --status-port -1 --status-bind 0.0.0.0 --report rs.json -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out rs.safetensors
grep -q "without authentication.*--status-key" "$T/err" || fail "robust open status page: $(cat "$T/err")"
expect 2 "robust run --status-bind :: without --status-key" -- timeout 20 "$BIN" robust run --nodes 1 --ranks-per-node 1 --standby 0 --quiet --status-port -1 --status-bind :: --report rs.json -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out rs.safetensors
grep -q "refusing to listen on :: without authentication.*--status-key" "$T/err" || fail "robust open v6 status page: $(cat "$T/err")"
[ -e rs.json ] && fail "a refused robust run wrote its report"
# steal: outputs checked before any query is spent; a range that is not finite; --timeout past
# poll()'s int milliseconds (was: an undefined conversion)
S=(steal --target http://127.0.0.1:9/predict --input-shape 4 --classes 3 --budget 50 --quiet)
expect 1 "steal --out in a missing directory" -- "$BIN" "${S[@]}" --out nodir/r.st
grep -q -- "--out nodir/r.st" "$T/err" || fail "steal --out nodir: $(cat "$T/err")"
expect 2 "steal --report = --out" -- "$BIN" "${S[@]}" --out r.st --report ./r.st
expect 2 "steal --input-range 0,inf" -- "$BIN" "${S[@]}" --out r.st --input-range 0,inf
expect 2 "steal --timeout 1e30" -- "$BIN" "${S[@]}" --out r.st --timeout 1e30
cp v.bin rep.st
expect 2 "steal eval --report = --replica" -- "$BIN" steal eval --replica rep.st --target http://127.0.0.1:9/predict --test-data t.csv --report rep.st
expect 2 "steal eval --test-n -1" -- "$BIN" steal eval --replica rep.st --target http://127.0.0.1:9/predict --test-data t.csv --test-n -1
cmp -s rep.st v.bin || fail "steal eval replaced its --replica"

# rl: --seed outside [0, 2^53] (was: an undefined conversion; 1.5 read as 1); rl run: --report
# naming --tasks (was: the task file deleted before the run), values that mean nothing (was:
# --lr -1 ran, --step-ms 1e30 an undefined conversion)
expect 2 "rl tasks --seed -1" -- "$BIN" rl tasks --n 20 --seed -1 --out x.jsonl
expect 0 "rl tasks" -- "$BIN" rl tasks --n 20 --out tasks.jsonl
R=(rl run --tasks tasks.jsonl --sft-steps 1 --updates 1 --group 2 --batch-groups 1 --max-seqs 2 --max-new 4 --rollouts 1 --relays 1 --eval-n 2 --quiet --workdir rlw)
cp tasks.jsonl t2.jsonl
expect 2 "rl run --report = --tasks" -- timeout 60 "$BIN" "${R[@]}" --tasks t2.jsonl --report t2.jsonl
[ -s t2.jsonl ] || fail "rl run deleted its task file"
expect 2 "rl run --lr -1" -- timeout 60 "$BIN" "${R[@]}" --lr -1
expect 2 "rl run --step-ms 1e30" -- timeout 60 "$BIN" "${R[@]}" --step-ms 1e30
expect 2 "rl run --batch-groups 2^31-1" -- timeout 60 "$BIN" "${R[@]}" --batch-groups 2147483647
expect 1 "rl run --report in a missing directory" -- timeout 60 "$BIN" "${R[@]}" --report nodir/r.json
# --sft-batch past the rows a warm-start step draws (was: 2^31-1 an allocation of 512 GiB, an
# ASan abort; 300 a read past the step's 256 drawn rows); --eval-n 2^31-1 (was UBSan: 2 x --eval-n
# overflowed deciding the held-out tail, in rl run and in the manager)
expect 2 "rl run --sft-batch 300" -- timeout 60 "$BIN" "${R[@]}" --sft-batch 300
grep -qF -- "--sft-batch must be in [1, 256], got 300" "$T/err" || fail "rl run --sft-batch 300: $(cat "$T/err")"
rm -rf rlw
expect 0 "rl run --eval-n 2^31-1" -- timeout 120 "$BIN" "${R[@]}" --eval-n 2147483647
grep -rq "runtime error" "$T/err" rlw && fail "rl run --eval-n 2^31-1: $(grep -rh "runtime error" "$T/err" rlw | head -1)"
# an explicit value equal to an internal "not given" (was: -1 meant the default 1500 SFT steps, a
# rollout batch of 0 the decode slots, --standbys -1 the P99, plan serve --batch -1 the cluster
# file's, loader control --step -1 the next step, victim serve --budget 0 / --rate 0 no limit)
expect 2 "rl run --sft-steps -1" -- timeout 60 "$BIN" "${R[@]}" --sft-steps -1
expect 2 "rl run --rollout-batch 0" -- timeout 60 "$BIN" "${R[@]}" --rollout-batch 0
expect 2 "sim robust --standbys -1" -- "$BIN" sim robust --trials 1 --standbys -1
expect 0 "sim robust --standbys 0" -- "$BIN" sim robust --trials 1 --standbys 0
expect 2 "plan serve --batch -1" -- "$BIN" plan serve --cluster llmpq-2 --model opt-30b --batch -1 --quiet
expect 2 "plan serve --gen -1" -- "$BIN" plan serve --cluster llmpq-2 --model opt-30b --gen -1 --quiet
expect 2 "loader control --step -1" -- timeout 20 "$BIN" loader control --addr tcp://127.0.0.1:9 --weights '{"a": 1}' --step -1
expect 2 "victim serve --budget 0" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --budget 0
expect 2 "victim serve --rate 0" -- timeout 20 "$BIN" victim serve --model v.bin --port 0 --duration 0.1 --rate 0
# sim rl: --mean-len 1e30 or --prompt-len 2^31-1 (was: a hang); sim robust: a zero bandwidth (was:
# a table of NaN, exit 0). sim rl's values and names are usage errors, found before the table (was:
# exit 1, an unknown model after the rows of the ones before it)
expect 2 "sim rl --mean-len 1e30" -- timeout 20 "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --mean-len 1e30
# list values with a trailing separator or junk were cut short silently (`64x` read as 64, a 17th count dropped)
expect 2 "sim rl --gpus 64x" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64x --updates 2 --batch 256
expect 2 "sim rl --gpus of 17 counts" -- "$BIN" sim rl --models qwen2.5-7b --gpus 2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2 --updates 2 --batch 256
expect 2 "sim rl --models ,," -- "$BIN" sim rl --models ,, --gpus 64 --updates 2 --batch 256
expect 2 "sim rl --gpus 0" -- "$BIN" sim rl --models qwen2.5-7b --gpus 0 --updates 2 --batch 256
expect 2 "sim rl --batch 0" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 0
expect 2 "sim rl --gpu bogus" -- "$BIN" sim rl --models qwen2.5-7b --gpu bogus --gpus 64 --updates 2 --batch 256
expect 2 "sim rl --models with an unknown name" -- "$BIN" sim rl --models qwen2.5-7b,bogus --gpus 64 --updates 2 --batch 256
grep -q "unknown model 'bogus'" "$T/err" || fail "sim rl --models bogus: $(cat "$T/err")"
[ -s "$T/out" ] && fail "sim rl printed rows before refusing an unknown model"
expect 2 "plan validate --algos with an empty entry" -- "$BIN" plan validate --algos splitquant,,uniform
# an empty first or last entry is one too (was: the list taken without it), and a --models
# list one character over its 511 (was: cut to 511, its last entry "x" dropped, exit 0)
expect 2 "plan validate --algos with a trailing comma" -- "$BIN" plan validate --algos splitquant,
expect 2 "plan validate --algos with a leading comma" -- "$BIN" plan validate --algos ,splitquant
expect 2 "sim rl --models with a trailing comma" -- "$BIN" sim rl --models qwen2.5-7b, --gpus 64 --updates 2 --batch 256
expect 2 "sim rl --models with a leading comma" -- "$BIN" sim rl --models ,qwen2.5-7b --gpus 64 --updates 2 --batch 256
long=$(printf 'qwen2.5-7b,%.0s' $(seq 45))opt-13b,opt-13b,x
[ ${#long} = 512 ] || fail "the over-long --models list has ${#long} characters, not 512"
expect 2 "sim rl --models of 512 characters" -- "$BIN" sim rl --models "$long" --gpus 64 --updates 2 --batch 256
expect 2 "steal --input-shape 4x" -- "$BIN" steal --target http://127.0.0.1:9/predict --input-shape 4x --classes 2 --budget 10 --out x.st
expect 2 "sim rl --prompt-len 2^31-1" -- timeout 20 "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --prompt-len 2147483647
expect 2 "sim rl --seed 1e30" -- "$BIN" sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --seed 1e30
expect 2 "sim robust --disk-gbps 0" -- "$BIN" sim robust --trials 1 --disk-gbps 0
# robust run: a --report that is a directory (was: the job ran, the report failed, exit 0): an
# output it cannot write, 1 as for every command
mkdir -p rdir
expect 1 "robust run --report DIR" -- timeout 60 "$BIN" robust run --nodes 1 --ranks-per-node 1 --standby 0 --quiet --report rdir -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out rm.safetensors
# sim rl: values past the trajectory buffer (was UBSan: int overflow, then an allocation of
# 2^31 x batch); loader tokenize --in an empty directory (was UBSan: qsort of NULL); plan serve
# --bits with an empty entry (was: "4," and "4,,8" read as 4 and 4,8); plan train --seq -1 (was:
# the model's context, as for 0)
S2=(sim rl --models qwen2.5-7b --gpus 64)
expect 2 "sim rl --updates 2^31-1" -- "$BIN" "${S2[@]}" --batch 256 --updates 2147483647
expect 2 "sim rl --staleness 2^31-1" -- "$BIN" "${S2[@]}" --batch 256 --updates 2 --staleness 2147483647
expect 2 "sim rl --max-batch 2^31-1" -- "$BIN" "${S2[@]}" --batch 256 --updates 2 --max-batch 2147483647
mkdir -p emptydir
expect 2 "loader tokenize --in an empty directory" -- "$BIN" loader tokenize --in emptydir --out x.lstok
expect 2 "plan serve --bits 4,,8" -- "$BIN" plan serve --cluster llmpq-2 --model opt-30b --bits 4,,8 --quiet
expect 2 "plan train --seq -1" -- "$BIN" plan train --model tiny --cluster A100x2 --seq -1 --out x.json
# victim serve and steal name the value they refuse (was: one line listing every rule)
expect 2 "victim serve --port 70000" -- timeout 20 "$BIN" victim serve --model v.bin --port 70000 --duration 0.1
grep -qF -- "--port must be in [0, 65535], got 70000" "$T/err" || fail "victim serve --port: $(cat "$T/err")"
expect 2 "steal --members 9" -- "$BIN" "${S[@]}" --out r.st --members 9
grep -qF -- "--members must be in [1, 8], got 9" "$T/err" || fail "steal --members: $(cat "$T/err")"
expect 2 "serve --decode-mb 2000" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --decode-mb 2000
grep -qF -- "--decode-mb must be in [1, 1024], got 2000" "$T/err" || fail "serve --decode-mb: $(cat "$T/err")"
expect 2 "serve --stage-restarts -1" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --stage-restarts -1
grep -qF -- "--stage-restarts must be in [0, 1000000], got -1" "$T/err" || fail "serve --stage-restarts: $(cat "$T/err")"
expect 2 "serve --load-timeout 0" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --load-timeout 0
grep -qF -- "--load-timeout must be in [1, 86400], got 0" "$T/err" || fail "serve --load-timeout: $(cat "$T/err")"
# a --port-file that cannot be written: refused before serving (was: served, then exit 1)
expect 1 "serve --port-file DIR" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --port-file rdir
grep -q -- "--port-file rdir is a directory" "$T/err" || fail "serve --port-file DIR: $(cat "$T/err")"
# outputs checked before the work, naming the flag (was: loader stats replaced --svg, then failed
# on --report; the others did their work, then "rdir: rename failed")
echo keep > s.svg
expect 1 "loader stats --report DIR" -- "$BIN" loader stats --mix mix.json --ranks 2 --steps 2 --svg s.svg --report rdir
[ "$(cat s.svg)" = keep ] || fail "loader stats replaced --svg, then failed on --report"
for c in "tokenizer train --input corpus.txt --vocab-size 280 --out" "quantize --model m.safetensors --bits 4 --out" \
    "eval --model m.safetensors --data corpus.txt --report"; do
    read -ra a <<< "$c"
    expect 1 "$c DIR" -- "$BIN" "${a[@]}" rdir
    grep -q -- "--${a[-1]#--} rdir is a directory" "$T/err" || fail "$c DIR: $(cat "$T/err")"
done
# an explicitly empty --bind (was: exit 0 on loopback): below, with every other bad address;
# loader serve's port and outputs checked before binding (was: --port -1 exit 1, a directory
# refused once serving)
expect 2 "loader serve --port -1" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port -1
for f in port-file journal; do
    expect 1 "loader serve --$f DIR" -- timeout 20 "$BIN" loader serve --mix mix.json --ranks 1 --port 0 --$f rdir
    grep -q -- "--$f rdir is a directory" "$T/err" || fail "loader serve --$f DIR: $(cat "$T/err")"
done
# a ZeroMQ endpoint that is none: "bad endpoint" (was: "refusing ... without CURVE keys"), a bad
# flag value found before the work (was: exit 1), as from every command that takes an endpoint
expect 2 "rl worker --manager ''" -- timeout 20 "$BIN" rl worker --role rollout --manager ''
grep -qF "bad endpoint '' (tcp://HOST:PORT" "$T/err" || fail "rl worker --manager '': $(cat "$T/err")"
for c in "loader fetch --addr" "loader control --info --addr" "loader worker --role source --source a --constructor" \
    "robust agent --id 0 --controller" "rl worker --role relay --manager tcp://127.0.0.1:9 --bind" \
    "train --config tiny --steps 1 --out x.safetensors --loader"; do
    read -ra a <<< "$c"
    expect 2 "$c tcp://h" -- timeout 20 "$BIN" "${a[@]}" tcp://h
    grep -qF "bad endpoint 'tcp://h'" "$T/err" || fail "$c tcp://h: $(cat "$T/err")"
done
# plan validate: --memory-gb past the cluster file's bound and an empty --profile refused before the
# work (was: refused after profiling, naming a temporary cluster.json; the workdir read as the profile)
expect 2 "plan validate --memory-gb 1e20" -- "$BIN" plan validate --config tiny --memory-gb 1e20
expect 2 "plan validate --profile ''" -- "$BIN" plan validate --config tiny --profile ''
expect 2 "plan validate past the model context" -- "$BIN" plan validate --config tiny --prompt 4000 --gen 200
grep -qF "prompt + gen = 4200 exceeds the model context" "$T/err" || fail "plan validate --prompt 4000: $(cat "$T/err")"

# one rule for every bind address, port and path (the parser's: src/cli/args.c): refused before
# any work, the same line and exit 2 from each command (was: serve and victim serve exit 1 from the
# HTTP server for a bad address but 2 for '', loader serve took '*' and host names; an empty input
# path "llmsys: : No such file or directory", exit 1 or 2 by command). loader serve's --mix is not
# even read.
for c in "serve --model m.safetensors" "loader serve --mix nosuch.json --ranks 1" "victim serve --model v.bin --duration 0.1"; do
    read -ra a <<< "$c"
    for b in '' 1.2.3 localhost '*'; do
        expect 2 "$c --bind '$b'" -- timeout 20 "$BIN" "${a[@]}" --port 0 --bind "$b"
        grep -qF -- "--bind: bad bind address '$b' (an IPv4 or IPv6 address" "$T/err" || fail "$c --bind '$b': $(cat "$T/err")"
    done
    expect 2 "$c --port 70000" -- timeout 20 "$BIN" "${a[@]}" --port 70000
    grep -qF -- "--port must be in [0, 65535], got 70000" "$T/err" || fail "$c --port 70000: $(cat "$T/err")"
done
expect 2 "serve --host ::zz" -- timeout 20 "$BIN" serve --model m.safetensors --port 0 --host ::zz
expect 2 "robust run --status-bind 1.2.3" -- timeout 20 "$BIN" robust run --status-port -1 --status-bind 1.2.3 --report rs.json -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out rs.safetensors
grep -qF -- "--status-bind: bad bind address '1.2.3'" "$T/err" || fail "robust run --status-bind 1.2.3: $(cat "$T/err")"
# loopback by default and keys off it, as before: ::1 serves, 0.0.0.0 without a key is exit 2
expect 2 "serve --bind 0.0.0.0 without a key" -- env -u LLMSYS_API_KEY timeout 20 "$BIN" serve --model m.safetensors --port 0 --bind 0.0.0.0
grep -q "refusing to listen on 0.0.0.0 without authentication" "$T/err" || fail "serve --bind 0.0.0.0: $(cat "$T/err")"
empty() { # empty FLAG -- ARGS...: `llmsys ARGS FLAG ''` is a usage error naming FLAG
    local f=$1; shift 2
    expect 2 "$* $f ''" -- timeout 20 "$BIN" "$@" "$f" ''
    grep -qF -- "$f needs a path, got ''" "$T/err" || fail "$* $f '': $(cat "$T/err")"
}
empty --tasks -- rl run
empty --heldout -- rl run --tasks tasks.jsonl
empty --data -- train --config tiny --steps 1 --out x.safetensors --data corpus.txt
empty --model -- eval --data corpus.txt
empty --mix -- loader serve --ranks 1 --port 0
empty --tokenizer -- tokenizer encode --text hi
empty --data -- victim train --type logreg --out x.bin --quiet
empty --test-data -- steal eval --replica rep.st --target http://127.0.0.1:9/predict
empty --indicator -- plan serve --cluster llmpq-2 --model opt-30b --quiet
empty --state-out -- loader fetch --addr tcp://127.0.0.1:9 --timeout-ms 100
empty --out -- victim make-data --n 20
expect 2 "llmsys --keys ''" -- "$BIN" --keys '' keys gen --out kk
# sizes whose buffers cannot fit this machine's memory: refused naming the flag and the bound
# before anything is allocated or sent (was: "out of memory", exit 1; an abort under ASan). The
# shapes make each far past any machine's memory.
expect 2 "victim make-data --n 2^31-1" -- "$BIN" victim make-data --out x.csv --n 2147483647 --features 4096
grep -q -- "--n must be in \[2, [0-9]*\] for 4096 features here, got 2147483647" "$T/err" || fail "make-data --n: $(cat "$T/err")"
expect 2 "steal --budget 2^31-1" -- "$BIN" steal --target http://127.0.0.1:9/predict --input-shape 1,28,28 --classes 10 --budget 2147483647 --out r.st --quiet
grep -q -- "--budget must be at most [0-9]* here (every query kept in memory), got 2147483647" "$T/err" || fail "steal --budget: $(cat "$T/err")"
expect 2 "steal --batch 2^31-1" -- "$BIN" steal --target http://127.0.0.1:9/predict --input-shape 4 --classes 64 --budget 50 --batch 2147483647 --out r.st --quiet
grep -q -- "--batch must be at most [0-9]* here" "$T/err" || fail "steal --batch: $(cat "$T/err")"
expect 2 "train --batch 2^31-1" -- "$BIN" train --config small --data corpus.txt --steps 1 --batch 2147483647 --out x.safetensors
grep -q -- "--batch must be at most [0-9]* here (a rank's activations for 128-token sequences" "$T/err" || fail "train --batch: $(cat "$T/err")"
expect 2 "plan train --batch 2^31-2" -- "$BIN" plan train --model small --cluster A100x2 --batch 2147483646 --out x.json
grep -q -- "--batch must be at most" "$T/err" || fail "plan train --batch: $(cat "$T/err")"
expect 2 "victim train --trees 2^31-1" -- "$BIN" victim train --type forest --data t.csv --out x.bin --trees 2147483647 --quiet
grep -q -- "--trees must be at most [0-9]* here" "$T/err" || fail "victim train --trees: $(cat "$T/err")"
ls x.* r.st rm.safetensors > /dev/null 2>&1 && fail "a refused command wrote an output"

# ---------------------------------------------------------------- exit codes: one rule
# An input file or config the command line names that is missing, empty or not of its format:
# exit 2 and one line naming it, from every command that reads one, before any work (was: 1
# from train, eval, generate, quantize, serve, profile, loader, victim, steal eval, tokenizer,
# rl worker, sim rl --trace and --keys; 2 from plan, rl run and sim rl --calibrate)
: > empty.in
printf 'garbage\0\377{[ not any format\n' > garbage.in
"$BIN" victim serve --model v.bin --port 0 --port-file vport --duration 60 > /dev/null 2>&1 &
VPIDS=($!)
wait_file vport $! || fail "victim serve did not start"
VT=http://127.0.0.1:$(cat vport)/predict
"$BIN" steal --target "$VT" --input-shape 4 --classes 3 --budget 200 --epochs 2 --members 1 --out real.st --quiet \
    > /dev/null 2>&1 || fail "steal for a replica"
bad() { # bad WHICH NAME -- ARGS with @F@ for the file: exit 2, one line naming it, for each of WHICH (m e g)
    local which=$1 name=$2 f a x; shift 3
    for f in $which; do
        case $f in m) f=missing.in ;; e) f=empty.in ;; g) f=garbage.in ;; esac
        a=()
        for x in "$@"; do a+=("${x//@F@/$f}"); done
        expect 2 "$name $f" -- timeout 60 "$BIN" "${a[@]}"
        grep -q "${NAMED:-$f}" "$T/err" || fail "$name $f: the error does not name it: $(cat "$T/err")"
    done
}
R1=(--updates 1 --group 2 --batch-groups 1 --max-seqs 2 --max-new 4 --rollouts 1 --relays 1 --eval-n 2 --quiet --workdir xw)
bad "m e g" "train --data" -- train --config tiny --data @F@ --steps 1 --out x.safetensors
bad "m e g" "train --resume" -- train --data corpus.txt --resume @F@ --steps 2 --out x.safetensors
bad "m e g" "train --tokenizer" -- train --config tiny --data corpus.txt --tokenizer @F@ --steps 1 --out x.safetensors
bad "m e g" "train --precision-plan" -- train --config tiny --data corpus.txt --precision-plan @F@ --steps 1 --out x.safetensors
bad "m e g" "eval --model" -- eval --model @F@ --data corpus.txt
bad "m e g" "eval --data" -- eval --model m.safetensors --data @F@
bad "m e g" "generate --model" -- generate --model @F@ --tokens 2
bad "m e g" "quantize --model" -- quantize --model @F@ --bits 4 --out x.safetensors
bad "m e g" "quantize --bits-map" -- quantize --model m.safetensors --bits-map @F@ --out x.safetensors
bad "m e g" "quantize --eval" -- quantize --model m.safetensors --bits 4 --eval @F@ --out x.safetensors
bad "m e g" "serve --model" -- serve --model @F@ --port 0
bad "m e g" "serve --plan" -- serve --model m.safetensors --plan @F@ --port 0
bad "m e g" "profile --model" -- profile --model @F@ --out x.json --reps 1
bad "m e g" "plan serve --cluster" -- plan serve --cluster @F@ --model opt-30b --quiet
bad "m e g" "plan serve --indicator" -- plan serve --cluster llmpq-2 --model opt-30b --indicator @F@ --quiet
bad "m e g" "plan serve --model" -- plan serve --cluster llmpq-2 --model @F@ --quiet
bad "m e g" "plan train --model" -- plan train --model @F@ --cluster A100x2 --out x.json
bad "m e g" "plan train --data" -- plan train --model tiny --cluster A100x2 --data @F@ --out x.json
bad "m e g" "plan indicator --model" -- plan indicator --model @F@ --out x.json
bad "m e g" "plan list --data" -- plan list --data @F@
bad "m e g" "plan validate --model" -- plan validate --model @F@ --stages 1 --runs 1 --reps 1
bad "m e g" "plan validate --profile" -- plan validate --config tiny --profile @F@ --stages 1 --runs 1 --reps 1
bad "m e g" "loader serve --mix" -- loader serve --mix @F@ --ranks 1 --port 0
bad "m e g" "loader serve --resume" -- loader serve --mix mix.json --ranks 1 --port 0 --resume @F@
bad "m e g" "loader serve --tokenizer" -- loader serve --mix mix.json --ranks 1 --port 0 --tokenizer @F@
bad "m e g" "loader stats --mix" -- loader stats --mix @F@ --ranks 1 --steps 2
bad "m e g" "loader tokenize --in" -- loader tokenize --in @F@ --out x.lstok
bad "m e g" "victim train --data" -- victim train --type logreg --data @F@ --out x.bin --quiet
bad "m e g" "victim serve --model" -- victim serve --model @F@ --port 0 --duration 0.1
bad "m e g" "victim serve --keys" -- victim serve --model v.bin --keys @F@ --port 0 --duration 0.1
bad "m e g" "victim serve --monitor-data" -- victim serve --model v.bin --monitor log --monitor-data @F@ --port 0 --duration 0.1
bad "m e g" "steal eval --replica" -- steal eval --replica @F@ --target "$VT" --test-data t.csv
bad "m e g" "steal eval --test-data" -- steal eval --replica real.st --target "$VT" --test-data @F@
bad "m e g" "rl run --tasks" -- rl run --tasks @F@ --sft-steps 1 "${R1[@]}"
bad "m e g" "rl run --heldout" -- rl run --tasks tasks.jsonl --heldout @F@ --sft-steps 1 "${R1[@]}"
bad "m e g" "rl run --init" -- rl run --tasks tasks.jsonl --init @F@ "${R1[@]}"
bad "m e g" "rl worker --config" -- rl worker --role manager --config @F@
bad "m e g" "rl plot --report" -- rl plot --report @F@ --out x.svg
bad "m e g" "robust run --inject" -- robust run --nodes 1 --ranks-per-node 1 --standby 0 --quiet --inject @F@ --report x.json -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out x.safetensors
bad "m" "tokenizer train --input" -- tokenizer train --input @F@ --vocab-size 280 --out x.json
bad "m e g" "tokenizer encode --tokenizer" -- tokenizer encode --tokenizer @F@ --text hi
bad "m" "tokenizer encode --input" -- tokenizer encode --tokenizer tok.json --input @F@
bad "m e g" "tokenizer decode --tokenizer" -- tokenizer decode --tokenizer @F@ --ids "65 66"
bad "m g" "tokenizer decode --input" -- tokenizer decode --tokenizer tok.json --input @F@
bad "m e g" "llmsys --keys" -- --keys @F@ keys gen --out xk
bad "m e g" "sim rl --trace" -- sim rl --models qwen2.5-7b --gpus 64 --updates 2 --batch 256 --trace @F@
bad "m e g" "sim rl --calibrate" -- sim rl --calibrate @F@
# --profile names the user's path as given (was: a missing relative one named inside the work
# directory, /tmp/llmsys-validate-*/missing.in), before any work (nothing printed)
expect 2 "plan validate --profile nodir/p.json" -- "$BIN" plan validate --config tiny --stages 1 --runs 1 --reps 1 --profile nodir/p.json
grep -qx "llmsys: nodir/p.json: No such file or directory" "$T/err" && [ ! -s "$T/out" ] || fail "plan validate --profile nodir/p.json: $(cat "$T/err" "$T/out")"
echo '{"format": "llmsys-profile", "version": 1}' > rowless.json
expect 2 "plan validate --profile of no rows" -- "$BIN" plan validate --config tiny --stages 1 --runs 1 --reps 1 --profile rowless.json
grep -q "^llmsys: rowless.json: " "$T/err" && [ ! -s "$T/out" ] || fail "plan validate --profile rowless.json: $(cat "$T/err" "$T/out")"
# loader tokenize: a binary file (train --data's rule: a NUL byte, or more than 5% control bytes)
# named as the input is refused naming it, nothing written (was: tokenized byte by byte, exit 0);
# one met in a directory is skipped, as train --data skips it; text in any encoding is text
head -c 3000 "$BIN" > elf.in
printf 'caf\303\251 cr\350me\n' > mixed.in # UTF-8 and Latin-1
mkdir -p tokdir && cp elf.in tokdir/a.bin && cp corpus.txt tokdir/b.txt
for f in elf.in tokdir/a.bin; do
    expect 2 "loader tokenize --in $f (binary)" -- "$BIN" loader tokenize --in "$f" --out x.lstok
    grep -qF "$f: binary data (NUL or control bytes), expected text" "$T/err" || fail "loader tokenize $f: $(cat "$T/err")"
done
expect 0 "loader tokenize --in of Latin-1 and UTF-8 text" -- "$BIN" loader tokenize --in mixed.in --out tm.lstok
expect 0 "loader tokenize --in DIR with a binary file" -- "$BIN" loader tokenize --in tokdir --out td.lstok
grep -q "wrote td.lstok: 1 documents" "$T/out" || fail "loader tokenize DIR: $(cat "$T/out")"
# an input file or directory the command may not read (EACCES) is as bad as a missing one: exit 2,
# one line naming it (was: 1). Root reads any file, so as root the commands run without
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv); skipped where neither makes it unreadable
printf 'the text\n' > noread.in && mkdir -p noread.d && cp corpus.txt noread.d/ && chmod 000 noread.in noread.d
nocap=()
[ "$(id -u)" -eq 0 ] && nocap=(setpriv --bounding-set=-dac_override,-dac_read_search)
if ! "${nocap[@]}" true 2> /dev/null || "${nocap[@]}" cat noread.in > /dev/null 2>&1; then
    echo "skip  unreadable inputs: a mode-000 file is readable here"
else
    for c in "train --config tiny --steps 1 --out x.safetensors --data" "eval --model m.safetensors --data" \
        "eval --data corpus.txt --model" "tokenizer train --vocab-size 280 --out x.json --input" \
        "loader tokenize --out x.lstok --in" "rl run --quiet --workdir xw --tasks" "plan validate --config tiny --profile"; do
        read -ra a <<< "$c"
        for f in noread.in noread.d; do
            case "$c $f" in *"--data noread.d" | *"--in noread.d") ;; *noread.d) continue ;; esac
            expect 2 "$c $f (permission denied)" -- timeout 20 "${nocap[@]}" "$BIN" "${a[@]}" "$f"
            grep -qF "$f: " "$T/err" && grep -q "Permission denied" "$T/err" || fail "$c $f: $(cat "$T/err")"
        done
    done
fi
chmod 700 noread.d && chmod 600 noread.in
# a directory where an input file belongs is no file of its format either (was: exit 1)
mkdir -p adir
for c in "eval --data corpus.txt --model" "victim serve --port 0 --duration 0.1 --model" "loader stats --ranks 1 --mix"; do
    read -ra a <<< "$c"
    expect 2 "$c DIR" -- timeout 20 "$BIN" "${a[@]}" adir
    grep -q "adir: is a directory; only regular files" "$T/err" || fail "$c DIR: $(cat "$T/err")"
done
ls x.* xk xw > /dev/null 2>&1 && fail "a refused command wrote an output"

# sizes past what the command can hold: refused naming the flag, exit 2, before any work (was:
# exit 1 from the library, out of memory, or a vocabulary size that named no flag)
expect 2 "tokenizer train --vocab-size 2^31-1" -- timeout 60 "$BIN" tokenizer train --input corpus.txt --vocab-size 2147483647 --out x.json
grep -qF -- "--vocab-size must be in [259, 4194304], got 2147483647" "$T/err" || fail "--vocab-size: $(cat "$T/err")"
expect 2 "eval --seq 2^31-1" -- timeout 60 "$BIN" eval --model m.safetensors --data corpus.txt --seq 2147483647
grep -q "eval seq 2147483647 outside \[1, 64\]" "$T/err" || fail "eval --seq: $(cat "$T/err")"
expect 2 "victim train --hidden 10^8" -- timeout 60 "$BIN" victim train --type mlp --data t.csv --out x.bin --hidden 100000000 --quiet
grep -qF -- "--hidden must be at most 1048576 for an mlp, got 100000000" "$T/err" || fail "--hidden: $(cat "$T/err")"
expect 2 "profile --reps 2^31-1" -- timeout 60 "$BIN" profile --model m.safetensors --out x.json --reps 2147483647
grep -qF -- "--reps must be in [1, 1000], got 2147483647" "$T/err" || fail "profile --reps: $(cat "$T/err")"
expect 2 "loader stats --steps 2^31-1" -- timeout 60 "$BIN" loader stats --mix mix.json --ranks 1 --steps 2147483647
grep -q -- "--steps must be in \[1, [0-9]*\] for 1 ranks here" "$T/err" || fail "loader stats --steps: $(cat "$T/err")"
# robust run: a sum or product past int (was: --standby 2^31-1 passed the check by overflow)
RB=(--quiet --report x.json -- "$BIN" train --config tiny --data corpus.txt --steps 2 --out x.safetensors)
expect 2 "robust run --standby 2^31-1" -- timeout 60 "$BIN" robust run --nodes 1 --ranks-per-node 1 --standby 2147483647 "${RB[@]}"
grep -qF -- "--standby must be in [0, 63]" "$T/err" || fail "robust --standby: $(cat "$T/err")"
expect 2 "robust run --ranks-per-node 2^31-1" -- timeout 60 "$BIN" robust run --nodes 2 --ranks-per-node 2147483647 --standby 0 "${RB[@]}"
# a schedule of 2^31-1 steps allocates nothing up front (was: 24 GiB of per-step records, out
# of memory at once): it trains until stopped, then saves (130); under a sanitizer the
# address-space limit cannot apply
if ! ldd "$BIN" | grep -q libasan; then
    (ulimit -v 4000000; timeout --preserve-status -s TERM 8 "$BIN" train --config tiny --data corpus.txt --steps 2147483647 \
        --out xs.safetensors) > /dev/null 2> "$T/err"
    rc=$?
    [ $rc = 130 ] && grep -q "interrupted: saved step" "$T/err" || fail "train --steps 2^31-1: exit $rc: $(tail -1 "$T/err")"
fi
ls x.* > /dev/null 2>&1 && fail "a refused command wrote an output"

# what fails once the work has started is 1, whatever its status code: a victim answering with
# another class count is a malformed answer (LS_EFORMAT), not a bad input of the command line
"$BIN" victim make-data --out t2.csv --n 200 --features 4 --classes 2 > /dev/null 2>&1
"$BIN" victim train --type logreg --data t2.csv --out v2.bin --quiet > /dev/null 2>&1 || fail "victim train (2 classes)"
"$BIN" victim serve --model v2.bin --port 0 --port-file vport2 --output proba --duration 60 > /dev/null 2>&1 &
VPIDS+=($!)
wait_file vport2 $! || fail "victim serve (2 classes) did not start"
expect 1 "steal eval: an answer of another class count" -- timeout 60 "$BIN" steal eval --replica real.st \
    --target "http://127.0.0.1:$(cat vport2)/predict" --test-data t.csv
grep -q "target returned 2 class probabilities, expected 3" "$T/err" || fail "steal eval, 2 classes: $(cat "$T/err")"
kill "${VPIDS[@]}" 2> /dev/null
wait "${VPIDS[@]}" 2> /dev/null

finish cli.inputs
