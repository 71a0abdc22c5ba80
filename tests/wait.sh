# wait.sh - sourced by the shell tests that start a server in the background.
# wait_file FILE [PID]: 0 once FILE is non-empty (a --port-file written), 1 after 30 s or once
# PID, the process that would write it, has exited. Start-up on a loaded machine (ASan, other
# tests beside it) can take seconds; the loop ends at the first success.
wait_file() {
  local i
  for i in $(seq 1 600); do
    [ -s "$1" ] && return 0
    [ -n "${2:-}" ] && ! kill -0 "$2" 2> /dev/null && break
    sleep 0.05
  done
  [ -s "$1" ]
}
