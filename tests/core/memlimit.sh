#!/usr/bin/env bash
# memlimit.sh - sizes bounded by memory follow the process's memory cgroup, as in a container:
# under a 256 MiB limit `victim make-data` refuses rows that this machine's RAM would hold,
# naming the bound that 256 MiB gives. Needs root and a memory controller (cgroup v1, or v2
# with memory delegated to the root's children); exits 77 (skipped) without them.
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
limit=268435456
if [ -w /sys/fs/cgroup/memory ]; then # v1
    cg=/sys/fs/cgroup/memory/llmsys-memlimit-$$ file=memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null && [ -w /sys/fs/cgroup ]; then # v2
    cg=/sys/fs/cgroup/llmsys-memlimit-$$ file=memory.max
else
    echo "skipped: no writable memory cgroup here"
    exit 77
fi
mkdir "$cg" 2> /dev/null || { echo "skipped: cannot create $cg"; exit 77; }
trap 'rmdir "$cg" 2> /dev/null; cleanup' EXIT
echo $limit > "$cg/$file" || die "cannot set $cg/$file"

# one row of 20 features is 21 four-byte values: floor(2^28 / 84) rows fit in 256 MiB
want=$((limit / 84))
expect 2 "make-data --n 10^7 in 256 MiB" -- sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" victim make-data --kind blobs --n 10000000 --features 20 --out big.csv' sh "$cg" "$BIN"
grep -q -- "--n must be in \[2, $want\] for 20 features" "$T/err" || fail "bound not the cgroup's ($want rows): $(cat "$T/err")"
[ -e big.csv ] && fail "a refused make-data wrote big.csv"
# within the bound it runs there
expect 0 "make-data --n 1000 in 256 MiB" -- sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" victim make-data --kind blobs --n 1000 --features 20 --out small.csv' sh "$cg" "$BIN"
[ "$(wc -l < small.csv)" -ge 1000 ] || fail "small.csv has $(wc -l < small.csv) lines"
finish memlimit
