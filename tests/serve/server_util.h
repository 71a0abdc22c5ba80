/* server_util.h - test helper for the multi-process serve tests: the llmsys binary, a scratch
 * directory and the one server a test runs (killed on every way out); wait for a spawned
 * `llmsys serve` to publish its port, and stop it. */
#ifndef LLMSYS_TEST_SERVER_UTIL_H
#define LLMSYS_TEST_SERVER_UTIL_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"

static const char *llmsys_bin;
static char dir[128], port_path[256];
static pid_t server_pid = -1;

static inline void server_kill(void) {
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
}

/* main's first step: argv[1] is the llmsys binary (without it: usage on stderr, -1); the
 * server is killed at exit; dir is a fresh /tmp/llmsys_<name>_<pid>, port_path dir/port. */
static inline int server_test_begin(int argc, char **argv, const char *name) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/llmsys\n", name);
        return -1;
    }
    llmsys_bin = argv[1];
    atexit(server_kill);
    snprintf(dir, sizeof dir, "/tmp/llmsys_%s_%d", name, (int)getpid());
    ls_mkdirs(dir);
    snprintf(port_path, sizeof port_path, "%s/port", dir);
    return 0;
}

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

/* Stops the test's server, checking that it exits with status 0 within 5 s of SIGTERM
 * (killed otherwise). */
static inline void server_stop_checked(void) {
    int st = 0, rc = server_stop(&server_pid, &st);
    CHECK_MSG(rc != 0, "server exit status %d", st);
    CHECK_MSG(rc >= 0, "server did not stop within 5 s of SIGTERM");
    if (rc < 0) server_kill();
}

#endif
