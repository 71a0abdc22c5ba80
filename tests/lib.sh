# lib.sh - sourced by the shell tests (`. "$(dirname "$0")/../lib.sh"`): BIN (the llmsys
# binary, the script's $1), a work directory T removed on exit with the script's background
# jobs killed, a failure count `fails` with fail(), and expect().
set -u
BIN=$1
T=$(mktemp -d /tmp/llmsys-test-XXXXXX)
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
    wait 2> /dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect CODE DESCRIPTION -- command...: exits CODE, and (CODE != 0) says so in one stderr line
expect() {
    local want="$1" what="$2"; shift 3
    "$@" >"$T/out" 2>"$T/err"; local rc=$?
    if [ "$rc" != "$want" ]; then echo "FAIL $what: exit $rc, expected $want"; cat "$T/err"; fails=$((fails + 1)); return; fi
    if [ "$want" != 0 ] && [ "$(wc -l <"$T/err")" != 1 ]; then echo "FAIL $what: expected one error line"; cat "$T/err"; fails=$((fails + 1)); fi
    echo "ok   $what"
}
