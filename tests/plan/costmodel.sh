#!/usr/bin/env bash
# costmodel.sh - the GPU layer profiles in data/profiles (measured on an H200) through the
# planner: bench_costmodel reads each, and the checks hold the code to the measurements.
# - the profile's own least-squares fit (what the planner uses for a profiled device)
#   reproduces the measured rows: median ratio within 5 %, every row within a factor 2;
# - the analytical model from the datasheet (src/plan/cost.c) predicts the fp16 decode rows
#   (weight streaming) within 15 % at the median, and the fp16 prefill rows within 30 %;
# - planned from the measurements, a plan scores no worse on them than the datasheet's plan
#   (both scored by the measured costs): the search does use a profile's costs.
# A profile with a bad act_bytes is refused with one line.
. "$(dirname "$0")/../lib.sh"
BENCH=$2
expect 0 "bench_costmodel on data/profiles" -- "$BENCH" --quiet --out "$T/cm.json"
/usr/bin/python3 - "$T/cm.json" << 'PY' || fail "the measurements and the cost model disagree (above)"
import json, sys
d = json.load(open(sys.argv[1]))
bad = 0
if len(d["profiles"]) < 3:
    print("expected 3 profiles, got", len(d["profiles"])); bad += 1
for p in d["profiles"]:
    for s in p["summary"]:
        lo, med, hi = s["fit_over_measured"]
        if not (0.95 <= med <= 1.05 and lo >= 0.5 and hi <= 2.0):
            print(p["model"], s["phase"], s["bits"], "fit/measured", s["fit_over_measured"]); bad += 1
        m = s["model_over_measured"][1]
        if s["bits"] == 16 and not (0.85 <= m <= 1.15 if s["phase"] == "decode" else 0.77 <= m <= 1.30):
            print(p["model"], s["phase"], "16-bit model/measured median", m); bad += 1
    if not p["measured_plan_gain"] >= 1.0:
        print(p["model"], "measured plan gain", p["measured_plan_gain"]); bad += 1
    print("ok  ", p["model"], "plan gain %.2f" % p["measured_plan_gain"])
sys.exit(1 if bad else 0)
PY
sed 's/"act_bytes": 2/"act_bytes": 3/' "$(dirname "$0")/../../data/profiles/h200-opt-30b.json" > "$T/bad.json"
expect 1 "a profile with act_bytes 3" -- "$BENCH" --quiet --profile "$T/bad.json"
grep -q act_bytes "$T/err" || fail "the error does not name act_bytes"
finish plan.costmodel
