/* loader_util.h - loader services for the service tests, each in a forked child that is always
 * killed and reaped (on exit, and from the alarm that bounds a test). */
#ifndef LLMSYS_TEST_LOADER_UTIL_H
#define LLMSYS_TEST_LOADER_UTIL_H

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/loader.h"

#define LU_SLOTS 8
static pid_t lu_kid[LU_SLOTS] = {-1, -1, -1, -1, -1, -1, -1, -1};

/* Kills and reaps the service in slot i (if any). */
static void lu_kill(int i) {
    if (lu_kid[i] > 0) {
        kill(lu_kid[i], SIGKILL);
        waitpid(lu_kid[i], NULL, 0);
        lu_kid[i] = -1;
    }
}

static void lu_kill_all(void) {
    for (int i = 0; i < LU_SLOTS; i++) lu_kill(i);
}

static void lu_on_alarm(int sig) {
    (void)sig;
    for (int i = 0; i < LU_SLOTS; i++)
        if (lu_kid[i] > 0) kill(lu_kid[i], SIGKILL);
    _exit(3);
}

/* Bounds the whole test to seconds and cleans up on any exit. */
static void lu_guard(unsigned seconds) {
    signal(SIGALRM, lu_on_alarm);
    alarm(seconds);
    atexit(lu_kill_all);
}

/* Forks a service into slot i (state may be NULL: a fresh start); returns its port, -1 when it
 * did not start. */
static int lu_start(int i, const ls_loader_mix *mix, int ranks, const ls_loader_serve_opts *o, const uint8_t *state,
                    size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    lu_kid[i] = fork();
    if (lu_kid[i] == 0) {
        close(fd[0]);
        ls_loader_server *srv;
        int port = -1;
        if (ls_loader_server_open(&srv, mix, ranks, "127.0.0.1", 0, o, state, len) == 0) port = ls_loader_server_port(srv);
        else fprintf(stderr, "server: %s\n", ls_errmsg());
        if (write(fd[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
        close(fd[1]);
        if (port < 0) _exit(1);
        int rc = ls_loader_server_run(srv);
        ls_loader_server_close(srv);
        _exit(rc == 0 ? 0 : 1);
    }
    close(fd[1]);
    int port = -1;
    if (read(fd[0], &port, sizeof port) != (ssize_t)sizeof port) port = -1;
    close(fd[0]);
    return port;
}

/* Forks a source worker for the hub at endpoint into slot i (ls_loader_worker_run). */
static inline void lu_worker(int i, const char *endpoint, const char *source) {
    lu_kid[i] = fork();
    if (lu_kid[i] == 0) _exit(ls_loader_worker_run(endpoint, source) == 0 ? 0 : 1);
}

/* The info JSON of the service on 127.0.0.1:port (malloc'd), or NULL when it does not answer. */
static inline char *lu_info(int port) {
    char ep[64], *reply = NULL;
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    ls_loader_client *c;
    if (ls_loader_client_open(&c, ep, 0, 5000, 0) != LS_OK) return NULL;
    if (ls_loader_client_control(c, NULL, &reply) != LS_OK) free(reply), reply = NULL;
    ls_loader_client_close(c);
    return reply;
}

/* A TCP port free on 127.0.0.1 a moment ago (for a link whose workers start before it binds). */
static inline int lu_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {0};
    socklen_t n = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* Rank r's batch of step from the client equals rank r's of the in-process step st, byte for
 * byte; without_state leaves their resume blobs out of the comparison. */
static inline int lu_same_batch(ls_loader_client *c, ls_loader_step *st, int r, int64_t step, int without_state) {
    ls_loader_batch a = {0}, b = {0};
    uint8_t *ea = NULL, *eb = NULL;
    size_t la = 0, lb = 0;
    int ok = ls_loader_client_batch(c, step, &a) == LS_OK;
    if (!ok) fprintf(stderr, "step %lld rank %d: %s\n", (long long)step, r, ls_errmsg());
    ok = ok && ls_loader_step_batch(st, r, &b) == LS_OK;
    if (without_state) a.state_len = b.state_len = 0;
    ok = ok && ls_loader_batch_encode(&a, &ea, &la) == LS_OK && ls_loader_batch_encode(&b, &eb, &lb) == LS_OK;
    ok = ok && la == lb && !memcmp(ea, eb, la);
    free(ea);
    free(eb);
    ls_loader_batch_free(&a);
    ls_loader_batch_free(&b);
    return ok;
}

#endif
