#!/usr/bin/env bash
# fuzz.sh BUILD_DIR SECONDS [REGEX] - runs each libFuzzer target of BUILD_DIR/fuzz (those
# matching REGEX) for SECONDS, starting from its committed seed corpus fuzz/corpus/<target>
# (read-only: new inputs go to BUILD_DIR/fuzz-work/<target>). A crash leaves its input in
# BUILD_DIR/fuzz-crashes/<target>/ and makes the script fail after every target has run.
set -u
BUILD=${1:?usage: fuzz.sh BUILD_DIR SECONDS [REGEX]}
SECS=${2:-60}
RE=${3:-.}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
failed=()
n=0
for bin in "$BUILD"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    [[ $name =~ $RE ]] || continue
    work="$BUILD/fuzz-work/$name" crash="$BUILD/fuzz-crashes/$name"
    mkdir -p "$work" "$crash"
    seeds="$ROOT/fuzz/corpus/$name"
    [ -d "$seeds" ] || seeds=
    log="$BUILD/fuzz-work/$name.log"
    # -rss_limit_mb: a parser that allocates gigabytes on a small file is a finding too
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 "$bin" -max_total_time="$SECS" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crash/" "$work" $seeds > "$log" 2>&1
    rc=$?
    execs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        echo "FAIL $name (exit $rc; input in $crash/; log $log)"
        grep -m3 -E "ERROR: |runtime error|SUMMARY" "$log" | sed 's/^/    /'
        failed+=("$name")
    else
        echo "ok   $name: ${execs:-?} runs in ${SECS}s, ${cov:-cov ?}"
    fi
    n=$((n + 1))
done
[ $n -gt 0 ] || { echo "fuzz.sh: no fuzz targets in $BUILD/fuzz (build them: make fuzz)" >&2; exit 2; }
[ ${#failed[@]} -eq 0 ] || { echo "fuzz.sh: ${#failed[@]} of $n targets failed: ${failed[*]}"; exit 1; }
echo "fuzz.sh: $n targets, no crash"
