# lib.sh - sourced by the shell tests (`. "$(dirname "$0")/../lib.sh" "$1"`): BIN (the llmsys
# binary, the script's $1); a work directory T (/tmp/llmsys-DIR-SCRIPT-*) removed on exit, after
# the script's background jobs and every process still running from under T (ranks an mpirun
# left behind) are killed, even on failure; a failure count
# `fails` with fail(), die() for a failure nothing after can survive, expect(), finish() to end
# the script, corpus, freeport, mpirun's root flag in root[], wait_file (wait.sh).
set -u
BIN=$1
# the CLI re-execs itself once to set OMP_WAIT_POLICY=passive before libgomp loads (src/core/
# util.c); set here, each of a script's many starts loads its libraries once, not twice
# (cli.args checks the re-exec itself)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# named from the script's path only: a script that sources this file without arguments passes
# its own, so $2 is no name
T=$(mktemp -d "/tmp/llmsys-$(basename "$(dirname "$0")")-$(basename "$0" .sh)-XXXXXX")
# cleanup kills whatever runs from under T: it must be this script's own directory
case "$T" in /tmp/llmsys-*-*) [ -d "$T" ] || exit 1 ;; *) echo "FAIL: no work directory" >&2; exit 1 ;; esac
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
    for p in $(pgrep -f "$T/" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
    wait 2> /dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
die() {
    echo "FAIL: $*" >&2
    exit 1
}
# expect CODE DESCRIPTION -- command...: exits CODE, and (CODE != 0) says so in one stderr line
expect() {
    local want="$1" what="$2"; shift 3
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL $what: exit $rc, expected $want"; cat "$T/err"; fails=$((fails + 1)); return; fi
    if [ "$want" != 0 ] && [ "$(wc -l <"$T/err")" != 1 ]; then echo "FAIL $what: expected one error line"; cat "$T/err"; fails=$((fails + 1)); fi
    echo "ok   $what"
}
# finish NAME: a sanitizer report in any file a process wrote to T (stages and ranks included)
# is one more failure; then the count, and exit 1 when anything failed
finish() {
    grep -l -e "AddressSanitizer" -e "runtime error:" "$T"/*.err "$T"/*.log "$T"/*.out 2> /dev/null | while read -r f; do
        echo "FAIL: sanitizer report in $(basename "$f")"
        grep -m3 -e "AddressSanitizer" -e "runtime error:" "$f"
    done | tee "$T/san"
    [ -s "$T/san" ] && fails=$((fails + 1))
    if [ "$fails" -eq 0 ]; then echo "$1: all passed"; else echo "$1: $fails failure(s)"; fi
    exit $((fails > 0))
}
# corpus FILE LINES: a small text corpus of varied lines (1500 lines: about 100 KB)
corpus() {
    for i in $(seq 1 "$2"); do
        echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times; copy $((i % 5))."
    done > "$1"
}
# a TCP port free on loopback now
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
