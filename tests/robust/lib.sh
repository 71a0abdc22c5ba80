# lib.sh - sourced by the robust test scripts (lib.sh BIN): the shell tests' lib.sh (BIN,
# T, cleanup of every process started under T, fail, freeport, root[], ...) and a corpus of N
# lines in $T/corpus.txt.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh" "$1"
corpus() {
  for i in $(seq 1 "$1"); do
    echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times; copy $((i % 5))."
  done > "$T/corpus.txt"
}
