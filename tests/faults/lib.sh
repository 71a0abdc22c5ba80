# lib.sh - sourced by the fault scripts: the shell tests' lib.sh (BIN, T, cleanup, fail,
# finish, corpus, ...).
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh" "$1"
