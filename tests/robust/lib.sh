# lib.sh - sourced by the robust test scripts (lib.sh BIN NAME): BIN, a temporary directory $T
# removed with every process started under it on exit, fail() counting into $fails, a free
# port, mpirun's root flag in root[], and a corpus of N lines in $T/corpus.txt.
set -u
BIN=$1
T=$(mktemp -d "/tmp/llmsys-robust-$2-XXXXXX")
cleanup() {
  # our process tree only: the runs started from the script and whatever runs under $T
  for p in $(jobs -p); do kill -9 "$p" 2> /dev/null; done
  for p in $(pgrep -f "$T/" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
corpus() {
  for i in $(seq 1 "$1"); do
    echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times; copy $((i % 5))."
  done > "$T/corpus.txt"
}
