#!/usr/bin/env bash
# qsync_accuracy.sh - held-out bits/byte of the QSync plan vs uniform low precision (and fp32)
# on the slow rank, paired by seed, with a 95% confidence interval of each difference.
#
#   scripts/qsync_accuracy.sh [--share 0.8] [--steps 150] [--seeds "1 2 3"] [--plans "qsync int8 bf16 fp32"]
#
# Profiles this machine once (`llmsys plan train --cluster local:1,SHARE`), takes the qsync
# plan's rank-1 precisions and writes uniform bf16 / int8 / fp32 variants of it, then trains
# every plan for every seed (2 ranks, 1 thread each) and evaluates it. A run's numbers do not
# depend on the throttle (`train --precision-plan` is bit-reproducible across mechanisms), so
# the runs are unthrottled (share 1) to save time; where the qsync plan keeps pace, it and
# the uniform plans run at the fast rank's pace, so equal wall time is equal steps.
# Output: one line per run and the paired differences, in WORK (default /tmp/qsync-accuracy).
set -eu
BIN=${BIN:-$(dirname "$0")/../build/llmsys}
SHARE=0.8 STEPS=150 SEEDS="1 2 3" PLANS="qsync int8 bf16 fp32"
WORK=${WORK:-/tmp/qsync-accuracy}
DATA=/usr/share/common-licenses
while [ $# -gt 0 ]; do
  case $1 in
    --share) SHARE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --plans) PLANS=$2; shift 2 ;;
    *) echo "usage: $0 [--share S] [--steps N] [--seeds \"1 2 3\"] [--plans \"qsync int8 bf16 fp32\"]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "qsync_accuracy: $BIN not found (build the llmsys target)" >&2; exit 1; }
[ -d "$DATA" ] || DATA=$(dirname "$0")/../docs
mkdir -p "$WORK"
uptime
"$BIN" plan train --model small --cluster "local:1,$SHARE" --data "$DATA" --threads 1 --out "$WORK/plan.json"
/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
p = json.load(open(w + "/plan.json"))
for name, prec in (("qsync", None), ("bf16", "bf16"), ("int8", "int8"), ("fp32", "fp32")):
    q = json.loads(json.dumps(p))
    for rp in q["rank_plans"]:
        rp["share"] = 1.0
    if prec:
        q["rank_plans"][1]["precisions"] = [prec] * len(q["layers"])
    json.dump(q, open("%s/acc-%s.json" % (w, name), "w"))
PY
: > "$WORK/runs.txt"
for seed in $SEEDS; do
  for plan in $PLANS; do
    "$BIN" train --config small --data "$DATA" --batch 8 --seq 128 --steps "$STEPS" --threads 1 --ranks 2 \
      --seed "$seed" --precision-plan "$WORK/acc-$plan.json" --out "$WORK/ck-$plan-$seed.safetensors" \
      --report "$WORK/rep-$plan-$seed.json" > "$WORK/log-$plan-$seed.txt" 2>&1
    "$BIN" eval --model "$WORK/ck-$plan-$seed.safetensors" --data "$DATA" --threads 1 \
      --report "$WORK/ev-$plan-$seed.json" > /dev/null 2>&1
    /usr/bin/python3 -c 'import json, sys; print(sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))["bits_per_byte"])' \
      "$seed" "$plan" "$WORK/ev-$plan-$seed.json" | tee -a "$WORK/runs.txt"
  done
done
/usr/bin/python3 - "$WORK/runs.txt" <<'PY'
import collections, math, statistics, sys
b = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    s, plan, v = line.split()
    b[s][plan] = float(v)
t95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
for other in ("int8", "bf16", "fp32"):
    d = [b[s][other] - b[s]["qsync"] for s in b if "qsync" in b[s] and other in b[s]]
    if len(d) < 2:
        continue
    m, h = statistics.mean(d), t95.get(len(d) - 1, 2.0) * statistics.stdev(d) / math.sqrt(len(d))
    print("%s - qsync: %+.4f bits/byte, 95%% CI [%+.4f, %+.4f], %d seeds (positive: qsync better)"
          % (other, m, m - h, m + h, len(d)))
PY
uptime
