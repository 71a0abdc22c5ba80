/* server_util.h - test helper: wait for a spawned `llmsys serve` to publish its port, and stop
 * it, for the multi-process serve tests. */
#ifndef LLMSYS_TEST_SERVER_UTIL_H
#define LLMSYS_TEST_SERVER_UTIL_H

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "llmsys/core.h"

/* Polls port_path (every poll_ms, 300 times) until the server at *pid writes its port there.
 * 0 and *port on success; -1 when it exited (then *pid = -1) or never wrote the file. */
static int server_wait_port(pid_t *pid, const char *port_path, int poll_ms, int *port) {
    for (int i = 0; i < 300; i++) {
        char *t;
        size_t n;
        if (ls_is_file(port_path) && ls_file_read(port_path, &t, &n) == LS_OK) {
            *port = atoi(t);
            free(t);
            return *port > 0 ? 0 : -1;
        }
        int st;
        if (waitpid(*pid, &st, WNOHANG) == *pid) {
            *pid = -1;
            return -1;
        }
        ls_sleep_ms(poll_ms);
    }
    return -1;
}

/* SIGTERM to *pid and up to 5 s for it to exit. 1 when it exited with status 0, 0 when it
 * exited otherwise (*status receives the wait status), -1 when it did not stop. *pid = -1
 * once it exited. */
static int server_stop(pid_t *pid, int *status) {
    if (*pid <= 0) return 1;
    kill(*pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(*pid, status, WNOHANG) == *pid) {
            *pid = -1;
            return WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
        }
        ls_sleep_ms(50);
    }
    return -1;
}

#endif
