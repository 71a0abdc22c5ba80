#!/usr/bin/env bash
# cli.sh - end-to-end CLI test of the steal module: make-data, victim train, victim serve
# (background, port 0), steal (budget respected, target budget exhausted keeps the replica),
# steal eval (whole file in raw units, or a split with baselines), the victim taking the CSV's own
# units, an image replica with its CART member saved and evaluated, and bad input.
# Usage: cli.sh path/to/llmsys
. "$(dirname "$0")/../lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1 LLMSYS_PROGRESS=0

"$BIN" victim make-data --kind blobs --n 2000 --features 12 --classes 4 --out "$T/t.csv" || die "make-data"
"$BIN" victim train --type forest --trees 8 --data "$T/t.csv" --out "$T/v.bin" --report "$T/train.json" --quiet \
  > "$T/train.out" || die "victim train"
grep -q '"test_accuracy"' "$T/train.json" || die "train report"
grep -q "test accuracy" "$T/train.out" || die "train output"
grep -q "on $T/t.csv:" "$T/train.out" || die "train output names the data path"

# usage errors (flags, input files) and runtime errors (the network): exit 2 / exit 1 with one line
"$BIN" victim train --type nope --data "$T/t.csv" --out "$T/x.bin" 2>"$T/err"; [ $? -eq 2 ] || die "bad type exit"
"$BIN" victim train --type tree --data "$T/missing.csv" --out "$T/x.bin" 2>"$T/err"; [ $? -eq 2 ] || die "missing data exit"
[ "$(wc -l < "$T/err")" -eq 1 ] || die "one error line"
[ ! -e "$T/x.bin" ] || die "half-written output"
"$BIN" victim train --type cnn --data "$T/t.csv" --out "$T/x.bin" 2>"$T/err"; [ $? -eq 2 ] || die "cnn on a table exit"
grep -q "cnn victim needs image-shaped data (C,H,W)" "$T/err" || die "cnn on a table message"
[ "$(wc -l < "$T/err")" -eq 1 ] || die "cnn: one error line"
[ ! -e "$T/x.bin" ] || die "cnn: output written"
"$BIN" victim train --help | grep -q "cnn" || die "victim train --help lists cnn"
printf 'garbage' > "$T/bad.bin"
"$BIN" victim serve --model "$T/bad.bin" --port 0 2>"$T/err"; [ $? -eq 2 ] || die "bad model exit"
grep -q "magic" "$T/err" || die "bad model message"
"$BIN" steal --target http://127.0.0.1:1/predict --input-shape 12 --classes 4 --budget 10 --out "$T/r0.st" \
  --timeout 2 --quiet 2>"$T/err"; [ $? -eq 1 ] || die "unreachable exit"
grep -q "unreachable" "$T/err" || die "unreachable message"
"$BIN" steal --target http://127.0.0.1:1/predict --input-shape 0 --classes 4 --budget 10 --out "$T/r0.st" 2>/dev/null
[ $? -eq 2 ] || die "bad shape exit"

"$BIN" victim serve --model "$T/v.bin" --port 0 --port-file "$T/port" --budget 500 --admin-key admin \
  --log "$T/q.log" --duration 60 > "$T/serve.out" 2>&1 &
SRV=$!
wait_file "$T/port" "$SRV" || die "server did not start"
URL="http://127.0.0.1:$(cat "$T/port")/predict"
grep -q "training data's units" "$T/serve.out" || die "serve says it takes the training data's units"

# the victim answers the CSV's own rows (raw units); /info gives the raw range the attacker uses
python3 - "$URL" "$T/t.csv" "$T/range" <<'PY' || die "raw-unit request"
import json, sys, urllib.request
url, csv, out = sys.argv[1:4]
info = json.load(urllib.request.urlopen(url.replace("/predict", "/info"), timeout=10))
assert info["units"] == "raw" and len(info["feature_min"]) == 12, info
rows = [[float(v) for v in line.split(",")[:-1]] for line in open(csv).read().split("\n")[1:6] if line]
assert any(not 0 <= v <= 1 for r in rows for v in r), "test rows should lie outside [0, 1]"
req = urllib.request.Request(url, json.dumps({"inputs": rows}).encode(), {"X-API-Key": "admin"})
ans = json.load(urllib.request.urlopen(req, timeout=10))
assert len(ans["labels"]) == 5, ans
open(out, "w").write("%r,%r" % tuple(info["input_range"]))
PY

"$BIN" steal --target "$URL" --input-shape 12 --input-range "$(cat "$T/range")" --classes 4 --budget 300 --api-key eve \
  --out "$T/r.safetensors" --report "$T/r.json" --epochs 5 --quiet > "$T/steal.out" || die "steal"
q=$(python3 -c "import json;print(json.load(open('$T/r.json'))['queries'])" 2>/dev/null || \
    grep -o '"queries":[[:space:]]*[0-9]*' "$T/r.json" | grep -o '[0-9]*$')
[ "$q" -le 300 ] && [ "$q" -ge 290 ] || die "queries $q not within budget 300"
# the whole file handed as test data is the test set, sent in the victim's raw units
"$BIN" steal eval --replica "$T/r.safetensors" --target "$URL" --test-data "$T/t.csv" --api-key admin \
  > "$T/eval.out" || die "eval"
agree=$(sed -n 's/.*agreement with victim \([0-9.]*\).*/\1/p' "$T/eval.out")
echo "replica agreement with the victim: ${agree:-?}"
awk -v a="${agree:-0}" 'BEGIN { exit !(a >= 0.45 && a <= 1) }' || die "agreement ${agree:-?} below 0.45 (chance is 0.25 with 4 classes; observed 0.62)"
grep -q "eval on all 2000 rows of $T/t.csv, 2000 rows in raw units" "$T/eval.out" || die "eval names its rows"
# a split of it on request, with baselines (natural rows kept apart from the test rows)
"$BIN" steal eval --replica "$T/r.safetensors" --target "$URL" --test-data "$T/t.csv" --test-split 0.2 --api-key admin \
  --baselines --epochs 3 --report "$T/e.json" > "$T/eval.out" || die "eval split"
grep -q "400 of 2000 rows" "$T/eval.out" || die "eval split names its rows"
grep -q '"random"' "$T/e.json" && grep -q '"natural"' "$T/e.json" || die "eval baselines"
"$BIN" steal eval --replica "$T/r.safetensors" --target "$URL" --test-data blobs --test-split 0.2 2>/dev/null
[ $? -eq 2 ] || die "test split of a named dataset exit"

# the server's budget (500) runs out during a second attack by the same client: exit 1, replica kept
"$BIN" steal --target "$URL" --input-shape 12 --classes 4 --budget 1000 --api-key eve --out "$T/r2.safetensors" \
  --epochs 2 --quiet 2>"$T/err"; [ $? -eq 1 ] || die "budget exhausted exit"
grep -q "budget" "$T/err" || die "budget message"
[ -s "$T/r2.safetensors" ] || die "replica not kept"
grep -q '"status":403' "$T/q.log" || die "query log"
# a held-out task written to a directory; a victim on it served with the query monitor refusing:
# a natural client replaying the task's rows is served, the attack is refused after its first request
"$BIN" victim make-task --task moons --out "$T/moons" > "$T/mt.out" || die "make-task"
grep -q "12000 rows, 10 features, 3 classes" "$T/mt.out" || die "make-task output"
"$BIN" victim make-task --task nope --out "$T/nope" 2>"$T/err"; [ $? -eq 2 ] || die "make-task unknown exit"
"$BIN" victim train --type logreg --epochs 2 --data "$T/moons/moons.csv" --out "$T/m.bin" --quiet > /dev/null || die "train moons"
"$BIN" victim serve --model "$T/m.bin" --port 0 --monitor refuse 2>"$T/err"; [ $? -eq 2 ] || die "monitor without data exit"
"$BIN" victim serve --model "$T/m.bin" --port 0 --monitor refuse --monitor-data "$T/moons/moons.csv" --monitor-stats 2 \
  2>"$T/err"; [ $? -eq 2 ] || die "--monitor-stats 2 exit"
printf 'nat natsecret1\neve evesecret1\n' > "$T/keys"
"$BIN" victim serve --model "$T/m.bin" --port 0 --port-file "$T/port2" --prada off --monitor refuse \
  --monitor-data "$T/moons/moons.csv" --keys "$T/keys" --duration 60 > "$T/serve2.out" 2>&1 &
SRV2=$!
wait_file "$T/port2" "$SRV2" || { kill $SRV2; die "monitored server did not start"; }
URL2="http://127.0.0.1:$(cat "$T/port2")/predict"
python3 - "$URL2" "$T/moons/moons.csv" <<'PY' || { kill $SRV2; die "natural client refused"; }
import json, sys, urllib.request
url, csv = sys.argv[1:3]
rows = [[float(v) for v in l.split(",")[:-1]] for l in open(csv).read().split("\n")[1:] if l]
for s in range(0, 2000, 200):
    req = urllib.request.Request(url, json.dumps({"inputs": rows[s:s + 200]}).encode(), {"X-API-Key": "natsecret1"})
    assert len(json.load(urllib.request.urlopen(req, timeout=10))["labels"]) == 200
PY
"$BIN" steal --target "$URL2" --input-shape 10 --input-range "$(python3 -c "import json,urllib.request;print(','.join(map(repr,json.load(urllib.request.urlopen('${URL2%/predict}/info'))['input_range'])))")" \
  --classes 3 --budget 2000 --api-key evesecret1 --out "$T/r3.st" --epochs 2 --quiet 2>"$T/err"
[ $? -eq 1 ] || { kill $SRV2; die "attack on the monitored victim not stopped"; }
grep -q "refused" "$T/err" || { kill $SRV2; die "refusal message"; }
kill $SRV2; wait $SRV2 2>/dev/null
grep -q "client key:eve flagged by the query monitor after" "$T/serve2.out" || die "monitor flag logged"
# images (digits, 8x8): against a tree victim the replica keeps its CART member (the attacker's
# own test), writes it into the replica file, and steal eval loads and evaluates it; the CNN
# member (on by default) is tested, its test is in the report, and a kept CNN is in the file
"$BIN" victim train --type tree --data digits --out "$T/d.bin" --quiet > /dev/null || die "train digits"
"$BIN" victim serve --model "$T/d.bin" --port 0 --port-file "$T/port3" --model-units --duration 60 \
  > "$T/serve3.out" 2>&1 &
SRV3=$!
wait_file "$T/port3" "$SRV3" || die "digits server did not start"
URL3="http://127.0.0.1:$(cat "$T/port3")/predict"
"$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 1500 --out "$T/rd.st" --report "$T/rd.json" \
  --epochs 3 --quiet > /dev/null || die "steal digits"
python3 - "$T/rd.json" "$T/rd.st" <<'PY' || die "tree member in the report and the replica file"
import json, struct, sys
t = json.load(open(sys.argv[1]))["tree_member"]
print("  digits tree victim, 1500 queries: tree member", t)
assert t["kept"] and t["cart_holdout_accuracy"] > t["mlp_holdout_accuracy"], t
assert json.load(open(sys.argv[1]))["distilled"] is False  # the CART kept: members as trained
raw = open(sys.argv[2], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert head["tree.feat"]["dtype"] == "I32" and head["tree.probs"]["shape"][1] == 10, head.keys()
assert json.loads(head["__metadata__"]["llmsys.steal"])["tree"] == 1
c = json.load(open(sys.argv[1]))["cnn_member"]
print("  digits tree victim, 1500 queries: cnn member", c)
assert (c["shift"], c["epochs"], c["weight"]) == (0, 15, 1), c  # the defaults
b, w = c["rows_better"], c["rows_worse"]
assert c["kept"] == (b - w > 2 * (b + w) ** 0.5), c
meta = json.loads(head["__metadata__"]["llmsys.steal"])
assert ("cnn.params" in head) == c["kept"] and meta["cnn"] == c["kept"]
assert meta.get("cnn_weight") == (1 if c["kept"] else None), meta  # written with a CNN only
l = json.load(open(sys.argv[1]))["linear_member"]  # tested by default too, by the same rule
print("  digits tree victim, 1500 queries: linear member", l)
b, w = l["rows_better"], l["rows_worse"]
assert l["kept"] == (b - w > 2 * (b + w) ** 0.5), l
assert ("lin.w" in head) == l["kept"] and meta["linear"] == l["kept"], meta
PY
# --cnn-rank 1: the tests after the seeds (450 answers) in the report, by their rules: the CART's
# first, and the CNN's only when the CART did not win
"$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 1500 --out "$T/rr.st" --report "$T/rr.json" \
  --epochs 3 --cnn-rank 1 --quiet > /dev/null || die "steal digits --cnn-rank 1"
python3 - "$T/rr.json" <<'PY' || die "cnn_rank in the report"
import json, sys
j = json.load(open(sys.argv[1]))
r = j["cnn_rank"]
print("  digits tree victim, 1500 queries, --cnn-rank 1:", r)
assert r["answers"] == 450 and r["epochs"] == 1, r
assert r["cart_won"] == (r["cart_holdout_accuracy"] > r["mlp_holdout_accuracy"]), r
if r["cart_won"]:
    assert "rows_better" not in r and not r["kept"] and r["rounds"] == 0, r
else:
    b, w = r["rows_better"], r["rows_worse"]
    assert r["kept"] == (b - w > 2 * (b + w) ** 0.5), r
    assert r["rounds"] == (j["rounds"] - 1 if r["kept"] else 0), (r, j["rounds"])
PY
"$BIN" steal eval --replica "$T/rd.st" --target "$URL3" --test-data digits > "$T/evald.out" || die "eval digits"
grep -q "agreement with victim" "$T/evald.out" || die "eval digits output"
# --cnn-member 0: no CNN tested, none in the report or the file
"$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 1500 --out "$T/rc.st" --report "$T/rc.json" \
  --epochs 3 --cnn-member 0 --quiet > /dev/null || die "steal digits --cnn-member 0"
python3 - "$T/rc.json" "$T/rc.st" <<'PY' || die "no cnn member with --cnn-member 0"
import json, struct, sys
assert "cnn_member" not in json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert "cnn.params" not in head and json.loads(head["__metadata__"]["llmsys.steal"])["cnn"] == 0
PY
# a linear victim on digits: the linear member is kept, in the report and the file (lin.w, lin.b),
# and steal eval loads it; --linear-member 0: none tested, none in the file
"$BIN" victim train --type logreg --data digits --out "$T/dl.bin" --quiet > /dev/null || die "train digits logreg"
"$BIN" victim serve --model "$T/dl.bin" --port 0 --port-file "$T/port4" --model-units --duration 60 \
  > "$T/serve4.out" 2>&1 &
SRV4=$!
wait_file "$T/port4" "$SRV4" || die "digits logreg server did not start"
URL4="http://127.0.0.1:$(cat "$T/port4")/predict"
for lm in 1 0; do
  "$BIN" steal --target "$URL4" --input-shape 1,8,8 --classes 10 --budget 1500 --out "$T/rl$lm.st" \
    --report "$T/rl$lm.json" --epochs 3 --cnn-member 0 --linear-member $lm --quiet > /dev/null || die "steal digits logreg"
done
python3 - "$T/rl1.json" "$T/rl1.st" "$T/rl0.json" "$T/rl0.st" <<'PY' || die "linear member in the report and the file"
import json, struct, sys
def head(p):
    raw = open(p, "rb").read()
    return json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
l = json.load(open(sys.argv[1]))["linear_member"]
print("  digits logreg victim, 1500 queries: linear member", l)
assert l["kept"] and l["rows_better"] - l["rows_worse"] > 2 * (l["rows_better"] + l["rows_worse"]) ** 0.5, l
h = head(sys.argv[2])
assert h["lin.w"]["shape"] == [10, 64] and h["lin.b"]["shape"] == [10], h.keys()
assert json.loads(h["__metadata__"]["llmsys.steal"])["linear"] == 1
assert "linear_member" not in json.load(open(sys.argv[3]))
h = head(sys.argv[4])
assert "lin.w" not in h and json.loads(h["__metadata__"]["llmsys.steal"])["linear"] == 0
PY
"$BIN" steal eval --replica "$T/rl1.st" --target "$URL4" --test-data digits > "$T/evall.out" || die "eval digits logreg"
grep -q "agreement with victim" "$T/evall.out" || die "eval digits logreg output"
kill $SRV4; wait $SRV4 2>/dev/null
"$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 10 --out "$T/bad.st" --cnn-member 2 \
  --quiet 2>"$T/err"
[ $? -eq 2 ] && grep -q -- "--cnn-member" "$T/err" && [ ! -e "$T/bad.st" ] || die "--cnn-member 2 refused"
for bad in "--linear-member 2" "--linear-member -1" "--cnn-shift 9" "--cnn-shift -1" "--cnn-epochs 0" "--cnn-weight 0" "--cnn-weight 10.5" "--cnn-weight nan" "--cnn-rank 101" "--cnn-rank -1" "--cnn-rank 2 --cnn-member 0"; do
  # shellcheck disable=SC2086 # flag and value
  "$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 10 --out "$T/bad.st" $bad --quiet 2>"$T/err"
  [ $? -eq 2 ] && grep -q -- "${bad%% *}" "$T/err" && [ ! -e "$T/bad.st" ] || die "$bad refused"
done
for bad in -1 8.5 nan; do
  "$BIN" steal --target "$URL3" --input-shape 1,8,8 --classes 10 --budget 10 --out "$T/bad.st" --distill $bad \
    --quiet 2>"$T/err"
  [ $? -eq 2 ] && grep -q -- "--distill" "$T/err" && [ ! -e "$T/bad.st" ] || die "--distill $bad refused"
done

# IPv6 loopback: victim serve --bind ::1 gives its URL as http://[::1]:PORT, answers curl and an
# attack whose --target is that URL (skipped where IPv6 is off or ::1 cannot be bound)
if [ "$(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2> /dev/null || echo 1)" != 0 ] ||
  ! python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2> /dev/null; then
  echo "SKIP: ::1 cannot be bound here: no IPv6 serving check"
else
  "$BIN" victim serve --model "$T/v.bin" --bind ::1 --port 0 --port-file "$T/port6" --duration 60 > "$T/serve6.out" 2>&1 &
  SRV6=$!
  wait_file "$T/port6" "$SRV6" || die "victim serve --bind ::1 did not start: $(cat "$T/serve6.out")"
  P6=$(cat "$T/port6")
  grep -qF "serving on http://[::1]:$P6/predict" "$T/serve6.out" || die "--bind ::1 URL: $(cat "$T/serve6.out")"
  if command -v curl > /dev/null; then
    curl -g -s -m 10 "http://[::1]:$P6/info" | grep -q '"classes":4' || die "curl over ::1"
  fi
  "$BIN" steal --target "http://[::1]:$P6/predict" --input-shape 12 --classes 4 --budget 50 --out "$T/r6.st" \
    --epochs 1 --quiet > /dev/null 2> "$T/err" || die "steal over ::1: $(cat "$T/err")"
  kill "$SRV6"; wait "$SRV6" 2> /dev/null
fi
echo "cli ok"
