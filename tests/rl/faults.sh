#!/bin/bash
# faults.sh - multi-process RL runs under faults (rollouts slower than the trainer, so rollout 0 is
# mid-batch when it is killed): a rollout killed and restarted (with
# corrupt weight chunks injected at the relays), and a relay killed mid-chain. Each must
# finish every update, lose and duplicate no trajectory, and record the failure.
. "$(dirname "$0")/../lib.sh" "$1"
"$BIN" rl tasks --kind copy --n 200 --mean-len 5 --cv 1 --max-len 20 --demo-noise 0 --out "$T/tasks.jsonl" >/dev/null || exit 1
check() { # check REPORT PYTHON-CONDITION DESCRIPTION
    if python3 -c "import json,sys; r=json.load(open('$1')); t=r['trainer']; sys.exit(0 if ($2) else 1)"; then
        echo "ok   $3"
    else
        echo "FAIL $3"; python3 -c "import json; r=json.load(open('$1')); print({k:v for k,v in r.items() if not isinstance(v,list)})"; fails=$((fails + 1))
    fi
}
COMMON=(--tasks "$T/tasks.jsonl" --sft-steps 0 --updates 16 --group 4 --batch-groups 2 --max-seqs 8 --max-new 40 --step-ms 50 --eval-n 8 --timeout 80 --quiet)
# 1. kill rollout 0 1.5 s after it joined the manager, restart it 0.5 s later; every 3rd chunk arriving at a relay is corrupted
if LLMSYS_RL_CORRUPT=3 "$BIN" rl run "${COMMON[@]}" --rollouts 3 --relays 2 --kill-rollout-at 1.5 --restart-after 0.5 \
        --workdir "$T/kr" 2>"$T/kr.err"; then
    R="$T/kr/report.json"
    check "$R" "r['updates'] == 16 and r['groups_consumed'] == 32" "kill rollout: every update done"
    check "$R" "r['trajectories_lost'] == 0 and t['duplicate_trajectories'] == 0" "kill rollout: no trajectory lost or doubled"
    check "$R" "r['rollout_failures'] >= 1 and r['rollout_joins'] >= 4" "kill rollout: failure seen, restarted rollout rejoined"
    check "$R" "r['resumed_trajectories'] >= 1" "kill rollout: partial responses resumed elsewhere"
    check "$R" "r['rejected_chunks'] >= 1" "corrupt chunks rejected by checksum"
    "$BIN" rl plot --report "$R" --out "$T/kr.svg" >/dev/null && grep -q "<polyline" "$T/kr.svg" && echo "ok   plot" ||
        fail "plot"
else
    echo "FAIL kill rollout run"; cat "$T/kr.err"; tail -n 5 "$T"/kr/logs/*.log; fails=$((fails + 1))
fi
# 2. kill relay 1 of a 3-relay chain 1 s after it joined: the chain is rebuilt around it
if "$BIN" rl run "${COMMON[@]}" --rollouts 2 --relays 3 --kill-relay-at 1.0 --workdir "$T/kl" 2>"$T/kl.err"; then
    R="$T/kl/report.json"
    check "$R" "r['updates'] == 16 and r['trajectories_lost'] == 0 and t['duplicate_trajectories'] == 0" "kill relay: every update, nothing lost"
    check "$R" "r['relay_failures'] == 1 and r['chain_rebuilds'] >= 1" "kill relay: chain rebuilt"
    check "$R" "r['relay_versions'][1] == -1 and r['relay_versions'][2] >= t['versions'] - 3" "kill relay: the relay after the dead one still gets new versions"
else
    echo "FAIL kill relay run"; cat "$T/kl.err"; tail -n 5 "$T"/kl/logs/*.log; fails=$((fails + 1))
fi
# 3. workers started by hand: the relay joins after the trainer, and the rollout starts only once
# the checkpoint is gone. The trainer hands its version 0 to the master relay once one is named,
# and the rollout takes its first weights from the relay: it reads no file. An AReaL-like run at
# staleness 0 needs every version at the rollouts before it issues more.
if [ -f "$T/kr/config.json" ]; then
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(mode='areal', staleness=0, rollouts=1,
relays=1, updates=3, max_new=8, step_ms=0, report=sys.argv[2], workdir=sys.argv[3], init=sys.argv[5]); json.dump(c, open(sys.argv[4], 'w'))" \
        "$T/kr/config.json" "$T/late.json" "$T/late" "$T/late.cfg" "$T/late-init.safetensors"
    cp "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['init'])" "$T/kr/config.json")" "$T/late-init.safetensors"
    mkdir -p "$T/late"
    "$BIN" rl worker --role manager --config "$T/late.cfg" --port-file "$T/late.ep" > "$T/late-m.log" 2>&1 &
    lm=$!
    if wait_file "$T/late.ep" $lm; then
        M=$(cat "$T/late.ep")
        timeout 60 "$BIN" rl worker --role trainer --manager "$M" > "$T/late-t.log" 2>&1 &
        lt=$!
        sleep 1
        "$BIN" rl worker --role relay --manager "$M" > "$T/late-r.log" 2>&1 &
        for i in $(seq 300); do grep -q "version 0 handed to the master relay" "$T/late-t.log" && break; sleep 0.1; done
        if grep -q "version 0 handed to the master relay" "$T/late-t.log"; then
            rm "$T/late-init.safetensors"
            "$BIN" rl worker --role rollout --manager "$M" > "$T/late-o.log" 2>&1 &
            if wait $lt && timeout 30 tail --pid=$lm -f /dev/null; then
                check "$T/late.json" "r['updates'] == 3 and r['relay_versions'][0] == 3 and r['rollout_joins'] == 1" "late relay, no checkpoint at the rollout: every update, the relay holds the last version"
                grep -q "rollout 0: version 0 from relay" "$T/late-o.log" && echo "ok   the rollout's first weights (version 0) came from its relay" ||
                    fail "the rollout never pulled version 0: $(cat "$T/late-o.log")"
            else
                echo "FAIL late relay: the run did not finish"; tail -n 3 "$T"/late-*.log; fails=$((fails + 1))
            fi
        else
            echo "FAIL late relay: the trainer never handed version 0 to the relay"; tail -n 3 "$T"/late-*.log; fails=$((fails + 1))
        fi
    else
        echo "FAIL late relay: manager did not start"; cat "$T/late-m.log"; fails=$((fails + 1))
    fi
fi
finish rl.faults
