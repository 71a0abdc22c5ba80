/* spawn.c - starting a child llmsys process: fork, death signal, environment, output, exec. */
#include "llmsys/core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int ls_spawn_self(const char *exe, const char *const *argv, const ls_spawn_opts *o, pid_t *pid) {
    static const ls_spawn_opts none = {0};
    if (!o) o = &none;
    int log = -1;
    if (o->log) {
        log = open(o->log, O_WRONLY | O_CREAT | O_CLOEXEC | (o->log_append ? O_APPEND : O_TRUNC), 0644);
        if (log < 0) return ls_err(LS_EIO, "%s: %s", o->log, strerror(errno));
    }
    fflush(NULL); /* what this process buffered is written once, not again by the child */
    pid_t parent = getpid(), p = fork();
    if (p < 0) {
        int e = errno;
        if (log >= 0) close(log);
        return ls_err(LS_EIO, "fork: %s", strerror(e));
    }
    if (p == 0) {
        if (o->unblock_signals) {
            sigset_t empty;
            sigemptyset(&empty);
            sigprocmask(SIG_SETMASK, &empty, NULL);
        }
        if (o->death_signal) {
            prctl(PR_SET_PDEATHSIG, o->death_signal);
            if (getppid() != parent) _exit(1); /* the parent died before the death signal was set */
        }
        if (log >= 0) dup2(log, 1), dup2(log, 2);
        for (const char *const *e = o->env; e && e[0] && e[1]; e += 2) setenv(e[0], e[1], 1);
        execv(exe, (char *const *)argv);
        fprintf(stderr, "llmsys: exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    if (log >= 0) close(log);
    *pid = p;
    return LS_OK;
}
