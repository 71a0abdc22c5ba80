# lib.sh - sourced by the fault scripts: BIN, a private temp dir $T, a cleanup that kills
# this script's own background jobs (and $SRV) on exit, fail/finish, a small text corpus.
set -u
BIN=$1
T=$(mktemp -d "/tmp/llmsys-faults-$(basename "$0" .sh)-XXXXXX")
SRV=
cleanup() {
  [ -n "$SRV" ] && kill -9 "$SRV" 2> /dev/null
  for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
  wait 2> /dev/null
  rm -rf "$T"
}
trap cleanup EXIT
fails=0
. "$(dirname "${BASH_SOURCE[0]}")/../wait.sh"
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
finish() {
  # a sanitizer report from any process (stages and ranks included) in what they wrote
  grep -l -e "AddressSanitizer" -e "runtime error:" "$T"/*.err "$T"/*.log "$T"/*.out 2> /dev/null | while read -r f; do
    echo "FAIL: sanitizer report in $(basename "$f")"; grep -m3 -e "AddressSanitizer" -e "runtime error:" "$f"; done | tee "$T/san"
  [ -s "$T/san" ] && fails=$((fails + 1))
  [ $fails = 0 ] && echo "$1 faults ok" || echo "$fails failure(s)"
  exit $((fails > 0))
}
# corpus FILE LINES
corpus() { for i in $(seq 1 "$2"); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times."; done > "$1"; }
