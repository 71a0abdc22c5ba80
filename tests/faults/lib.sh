# lib.sh - sourced by the fault scripts: the shell tests' lib.sh (BIN, T, cleanup, fail,
# finish, ...) and a small text corpus.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh" "$1"
# corpus FILE LINES
corpus() { for i in $(seq 1 "$2"); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7 % 13)) times."; done > "$1"; }
