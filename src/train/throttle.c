/* throttle.c - slow ranks for real: a process limited to a share of the CPU through a
 * cgroup v1 CPU quota, or a duty cycle of SIGSTOP/SIGCONT where cgroups are not writable. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "llmsys/train.h"

#define CG_ROOT "/sys/fs/cgroup/cpu"
#define PERIOD_US 10000 /* short periods: a throttled rank runs in 10 ms slices, not 100 ms ones */

static int write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (!f) return ls_err(LS_EIO, "throttle: cannot open %s: %s", path, strerror(errno));
    int ok = fputs(s, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? LS_OK : ls_err(LS_EIO, "throttle: cannot write %s: %s", path, strerror(errno));
}

/* Removes the (empty) cgroups of llmsys processes that ended without releasing theirs. */
static void cgroup_sweep(void) {
    DIR *dir = opendir(CG_ROOT);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        char *end;
        if (strncmp(e->d_name, "llmsys-", 7) || !e->d_name[7]) continue;
        long pid = strtol(e->d_name + 7, &end, 10);
        if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[512];
        snprintf(path, sizeof path, CG_ROOT "/%s", e->d_name);
        rmdir(path); /* fails harmlessly if a task is still inside */
    }
    if (dir) closedir(dir);
}

static int cgroup_apply(ls_throttle *t, double share) {
    cgroup_sweep();
    snprintf(t->dir, sizeof t->dir, CG_ROOT "/llmsys-%d", (int)getpid());
    if (mkdir(t->dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        t->dir[0] = '\0';
        return ls_err(LS_EIO, "throttle: cannot create a cgroup under " CG_ROOT ": %s", strerror(e));
    }
    char path[192], v[32];
    long quota = lround(share * PERIOD_US);
    if (quota < 1000) quota = 1000; /* the kernel's minimum quota is 1 ms */
    int rc;
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", t->dir);
    snprintf(v, sizeof v, "%d", PERIOD_US);
    rc = write_str(path, v);
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", t->dir);
    snprintf(v, sizeof v, "%ld", quota);
    if (rc == LS_OK) rc = write_str(path, v);
    snprintf(path, sizeof path, "%s/cgroup.procs", t->dir);
    snprintf(v, sizeof v, "%d", (int)getpid());
    if (rc == LS_OK) rc = write_str(path, v);
    if (rc != LS_OK) {
        rmdir(t->dir);
        t->dir[0] = '\0';
        return rc;
    }
    snprintf(t->mech, sizeof t->mech, "cgroup v1 cpu.cfs_quota_us=%ld / cfs_period_us=%d", quota, PERIOD_US);
    return LS_OK;
}

/* The duty-cycle child: runs `on` µs of every period, stopped the rest; dies with the parent.
 * It ends only when told to (a byte or EOF on `quit`), and its last act is a SIGCONT: were
 * the parent to kill it instead, a SIGSTOP sent just before could leave the parent stopped
 * for good, with nobody left to continue it. */
static void duty_loop(pid_t parent, long on_us, int quit) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    struct timespec on = {0, on_us * 1000L}, off = {0, (PERIOD_US - on_us) * 1000L};
    struct pollfd p = {quit, POLLIN, 0};
    for (;;) {
        int q = ppoll(&p, 1, &on, NULL);
        if (q > 0 || (q < 0 && errno != EINTR)) break;
        if (kill(parent, SIGSTOP) != 0) _exit(0);
        q = ppoll(&p, 1, &off, NULL);
        if (q > 0 || (q < 0 && errno != EINTR)) break;
        if (kill(parent, SIGCONT) != 0) _exit(0);
    }
    kill(parent, SIGCONT);
    _exit(0);
}

static int duty_apply(ls_throttle *t, double frac) {
    long on_us = lround(frac * PERIOD_US);
    if (on_us < 500) on_us = 500;
    int fd[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) != 0)
        return ls_err(LS_EIO, "throttle: socketpair failed: %s", strerror(errno));
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd[0]), close(fd[1]);
        return ls_err(LS_EIO, "throttle: fork failed: %s", strerror(e));
    }
    if (pid == 0) {
        close(fd[1]);
        duty_loop(parent, on_us, fd[0]);
    }
    close(fd[0]);
    t->child = (int)pid;
    t->quit = fd[1];
    snprintf(t->mech, sizeof t->mech, "duty cycle SIGSTOP/SIGCONT, running %ld of every %d us", on_us, PERIOD_US);
    return LS_OK;
}

double ls_throttle_cpu_share(const ls_throttle *t) {
    double w = ls_now() - t->wall0;
    return w > 0 ? (ls_process_cpu_time() - t->cpu0) / w : 0;
}

int ls_throttle_apply(ls_throttle *t, double share, int threads) {
    memset(t, 0, sizeof *t);
    t->share = share;
    t->wall0 = ls_now(), t->cpu0 = ls_process_cpu_time();
    if (threads < 1) threads = 1;
    if (!(share > 0) || share >= threads) {
        snprintf(t->mech, sizeof t->mech, "none");
        return LS_OK;
    }
    const char *force = getenv("LLMSYS_THROTTLE");
    int rc = LS_EUNSUPPORTED;
    if (!(force && !strcmp(force, "dutycycle")) && access(CG_ROOT, W_OK) == 0) rc = cgroup_apply(t, share);
    if (rc != LS_OK) rc = duty_apply(t, share / threads);
    if (rc == LS_OK) t->active = 1;
    return rc;
}

void ls_throttle_release(ls_throttle *t) {
    if (!t->active) return;
    if (t->child > 0) {
        /* the child continues us and exits; we may be stopped once more while we wait */
        ssize_t w = send(t->quit, "q", 1, MSG_NOSIGNAL);
        (void)w; /* EOF on close tells it too, unless another fork still holds the socket */
        close(t->quit);
        while (waitpid(t->child, NULL, 0) < 0 && errno == EINTR) {
        }
        t->child = 0;
    }
    if (t->dir[0]) {
        char v[32];
        snprintf(v, sizeof v, "%d", (int)getpid());
        (void)write_str(CG_ROOT "/cgroup.procs", v); /* back to the root group, then remove ours */
        if (rmdir(t->dir) != 0) LS_WARN("throttle: cannot remove %s: %s", t->dir, strerror(errno));
        t->dir[0] = '\0';
    }
    t->active = 0;
}
