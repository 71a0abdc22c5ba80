#!/bin/bash
# validate.sh - `llmsys plan validate` reduced (tiny model, 2 CPU stages, one timed batch):
# parses the report and checks its figures against values computed here: the tokens the
# served run returned (batch x gen), tok/s from tokens and seconds, the errors from the
# measured, replayed and predicted rates, busy time on every stage, overlap in (0, stages] and
# from the busy times, micro-batch counts from the plan files, the ratios between the plans, the
# host probe's re-take rule (stage overlap measured vs replayed), and the front's cost.
. "$(dirname "$0")/../lib.sh" "$1"
"$BIN" plan validate --config tiny --stages 2 --batch 2 --prompt 8 --gen 4 --runs 1 --reps 1 --algos splitquant,uniform \
    --quality none --workdir "$T" --report "$T/r.json" > "$T/out" 2>&1 || { echo "FAIL plan validate:"; tail -5 "$T/out"; exit 1; }
# --profile: the file the user named, read before the work (its errors name that path), then used
# as read; a relative path that is missing is not looked up in the work directory (was: the
# work directory's profile.json used in its place, and a missing one named there)
mkdir -p "$T/elsewhere" "$T/w2"
cp "$T/profile.json" "$T/elsewhere/mine.json"
(cd "$T/elsewhere" && "$BIN" plan validate --config tiny --stages 1 --batch 2 --prompt 8 --gen 4 --runs 1 --algos uniform \
    --quality none --workdir "$T" --profile profile.json) > "$T/out2" 2> "$T/err2"
rc=$?
[ $rc = 2 ] && grep -qx "llmsys: profile.json: No such file or directory" "$T/err2" && [ ! -s "$T/out2" ] ||
    { echo "FAIL --profile missing here, present in --workdir: exit $rc: $(cat "$T/err2")"; exit 1; }
(cd "$T/elsewhere" && "$BIN" plan validate --config tiny --stages 1 --batch 2 --prompt 8 --gen 4 --runs 1 --algos uniform \
    --quality none --workdir "$T/w2" --profile mine.json) > "$T/out2" 2>&1 || { echo "FAIL --profile mine.json:"; tail -5 "$T/out2"; exit 1; }
python3 -c "import json, sys; sys.exit(json.load(open('$T/w2/cluster.json'))['nodes'][0]['profile'] != '$T/w2/profile.json')" &&
    cmp -s <(python3 -m json.tool "$T/w2/profile.json") <(python3 -m json.tool "$T/profile.json") ||
    { echo "FAIL the run's cluster does not name its copy of the given profile"; exit 1; }
/usr/bin/python3 - "$T/r.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
bad = []
def near(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)
plans = r["plans"]
if [p["algo"] for p in plans] != ["splitquant", "uniform"]:
    bad.append("algos %s" % [p["algo"] for p in plans])
for p in plans:
    a = p["algo"]
    if len(p["stages"]) != 2:
        bad.append("%s: %d stages" % (a, len(p["stages"])))
    for i, s in enumerate(p["stages"]):
        if not (s["measured_busy_s"] > 0 and s["predicted_busy_s"] > 0 and s["replay_busy_s"] > 0):
            bad.append("%s stage %d: busy times %s" % (a, i, s))
    for run in p["runs"]:
        if run["tokens"] != 2 * 4:
            bad.append("%s: a run returned %s tokens, batch 2 x gen 4 = 8" % (a, run["tokens"]))
        if not (run["seconds"] > 0 and near(run["tok_s"], run["tokens"] / run["seconds"])):
            bad.append("%s: tok/s %s from %s tokens in %s s" % (a, run["tok_s"], run["tokens"], run["seconds"]))
    m, pr, rp = p["measured_tok_s"], p["predicted_tok_s"], p["replay_tok_s"]
    if not (m > 0 and pr > 0 and rp > 0 and all(math.isfinite(x) for x in (m, pr, rp))):
        bad.append("%s: rates measured %s predicted %s replay %s" % (a, m, pr, rp))
    elif not (near(p["error"], m / pr - 1, 1e-6) and near(p["replay_error"], m / rp - 1, 1e-6)):
        bad.append("%s: error %s / replay_error %s disagree with the rates" % (a, p["error"], p["replay_error"]))
    if not (p["measured_min_tok_s"] <= m <= p["measured_max_tok_s"]):
        bad.append("%s: median %s outside [min, max]" % (a, m))
    # summed busy over wall: above 1 when both stages computed at once (two micro-batches in
    # flight, as on a quiet machine), never above the number of stages
    if not (0 < p["stage_overlap"] <= 2 * 1.05):
        bad.append("%s: stage overlap %s" % (a, p["stage_overlap"]))
    if p["predicted_mb_prefill"] > 2 or p["predicted_mb_decode"] > 2 * 4 or p["predicted_mb_prefill"] < 1:
        bad.append("%s: micro-batches %s/%s for batch 2" % (a, p["predicted_mb_prefill"], p["predicted_mb_decode"]))
    # the plan file's micro-batch sizes: ceil(2 / prefill) prefill micro-batches, and ceil(2 / decode)
    # for each of gen - 1 = 3 decode steps, in the replay as in the closed form
    mb = json.load(open(p["plan"]))["micro_batch"]
    want = (-(-2 // mb["prefill"]), 3 * -(-2 // mb["decode"]))
    for k in ("predicted", "replay"):
        if (p[k + "_mb_prefill"], p[k + "_mb_decode"]) != want:
            bad.append("%s: %s micro-batches %s/%s, want %s/%s" % (a, k, p[k + "_mb_prefill"], p[k + "_mb_decode"], *want))
    # one run: the batch is its seconds, the overlap the stages' busy seconds summed over them
    busy = sum(s["measured_busy_s"] for s in p["stages"])
    if not (near(p["measured_batch_s"], p["runs"][0]["seconds"]) and near(p["stage_overlap"], busy / p["measured_batch_s"])):
        bad.append("%s: overlap %s, batch %s s; busy %s s over run %s s" % (a, p["stage_overlap"], p["measured_batch_s"], busy, p["runs"][0]["seconds"]))
# the first plan over the second, per rate: one run, so the measured ratio is that run's
first, second = plans
for k, get in (("predicted", lambda p: p["predicted_tok_s"]), ("replay", lambda p: p["replay_tok_s"]),
               ("measured", lambda p: p["runs"][0]["tok_s"])):
    if not near(second[k + "_ratio_first_over_this"], get(first) / get(second)):
        bad.append("%s ratio %s, want %s / %s" % (k, second[k + "_ratio_first_over_this"], get(first), get(second)))
# the probe check: without a re-take every plan's measured overlap is within 10% of its replay's;
# with one, the first probe and the first replays are kept beside the recomputed ones
if r["probe_retaken"] is False:
    if r["host_capacity_first_probe"] != r["host_capacity_cores"]:
        bad.append("no re-take, yet capacities %s / %s" % (r["host_capacity_first_probe"], r["host_capacity_cores"]))
    for p in plans:
        if abs(p["stage_overlap"] - p["replay_stage_overlap"]) > 0.10 * p["replay_stage_overlap"]:
            bad.append("%s: overlap %s vs replay %s without a re-take" % (p["algo"], p["stage_overlap"], p["replay_stage_overlap"]))
        if not near(p["replay_first_probe_tok_s"], p["replay_tok_s"]):
            bad.append("%s: first replay %s differs without a re-take" % (p["algo"], p["replay_first_probe_tok_s"]))
elif r["probe_retaken"] is not True or not (r["host_capacity_first_probe"] > 0 and all(p["replay_first_probe_tok_s"] > 0 for p in plans)):
    bad.append("probe fields %s %s" % (r.get("probe_retaken"), r.get("host_capacity_first_probe")))
# the front's CPU per micro-batch, measured in the warm-up, lengthens every replay
if not (r["front_s_per_microbatch"] > 0):
    bad.append("front %s s per micro-batch" % r.get("front_s_per_microbatch"))
for p in plans:
    if not (0 < p["replay_tok_s"] < p["replay_without_front_tok_s"]):
        bad.append("%s: replay %s with the front, %s without" % (p["algo"], p["replay_tok_s"], p["replay_without_front_tok_s"]))
if not (r["host_capacity_cores"] > 0 and r["idle_hop_s"] > 0):
    bad.append("host capacity %s, hop %s" % (r["host_capacity_cores"], r["idle_hop_s"]))
for b in bad:
    print("FAIL", b)
print("plan validate: %s" % ("ok" if not bad else "%d failure(s)" % len(bad)))
sys.exit(1 if bad else 0)
PY
