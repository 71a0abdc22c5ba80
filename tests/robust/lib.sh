# lib.sh - sourced by the robust test scripts (lib.sh BIN): the shell tests' lib.sh (BIN, T,
# cleanup of every process started under T, fail, corpus, freeport, root[], ...).
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh" "$1"
