/* dist.c - data-parallel ranks over MPI: initialised only under mpirun, so a plain run
 * is one process that never touches MPI. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include "llmsys/train.h"

struct ls_dist {
    int rank, size, local_size;
    int owns_mpi; /* this handle called MPI_Init */
    MPI_Comm comm;
};

static int mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return ls_err(LS_EMPI, "%s failed: %s", what, msg);
}

#define MPI_CHECK(call)                                                                                                \
    do {                                                                                                               \
        int mpi_rc_ = (call);                                                                                          \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(mpi_rc_, #call);                                                   \
    } while (0)

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 1 || x > INT_MAX ? def : (int)x;
}

/* Under `train --ranks`: this rank's pid into $LLMSYS_RANK_DIR/<rank>, for the watcher. */
static void register_rank(void) {
    const char *dir = getenv("LLMSYS_RANK_DIR"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!dir || !rank || strlen(dir) > 200 || strlen(rank) > 10) return;
    char path[256], tmp[260], txt[32];
    snprintf(path, sizeof path, "%s/%s", dir, rank);
    snprintf(tmp, sizeof tmp, "%s/.%s", dir, rank);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    int n = snprintf(txt, sizeof txt, "%d\n", (int)getpid());
    int ok = write(fd, txt, (size_t)n) == n;
    close(fd);
    if (!ok || rename(tmp, path)) unlink(tmp);
}

int ls_dist_init(ls_dist **out) {
    register_rank();
    ls_dist *d = calloc(1, sizeof *d);
    if (!d) return ls_err(LS_ENOMEM, "out of memory");
    d->size = d->local_size = 1;
    d->comm = MPI_COMM_NULL;
    int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    if (launched) {
        int inited = 0, rc;
        MPI_Initialized(&inited);
        if (!inited) {
            if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) {
                free(d);
                return mpi_fail(rc, "MPI_Init");
            }
            d->owns_mpi = 1;
        }
        /* errors come back as codes (turned into messages) instead of aborting the job */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->comm)) != MPI_SUCCESS) {
            ls_dist_free(d);
            return mpi_fail(rc, "MPI_Comm_dup");
        }
        MPI_Comm_rank(d->comm, &d->rank);
        MPI_Comm_size(d->comm, &d->size);
        d->local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", d->size);
    }
    *out = d;
    return LS_OK;
}

void ls_dist_free(ls_dist *d) {
    if (!d) return;
    if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
    if (d->owns_mpi) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
    free(d);
}

int ls_dist_rank(const ls_dist *d) { return d ? d->rank : 0; }
int ls_dist_size(const ls_dist *d) { return d ? d->size : 1; }
int ls_dist_local_size(const ls_dist *d) { return d ? d->local_size : 1; }

int ls_dist_allreduce_sum(ls_dist *d, float *buf, size_t n) {
    if (!d || d->size == 1) return LS_OK;
    /* MPI counts are int: reduce in chunks */
    for (size_t off = 0; off < n;) {
        int cnt = n - off > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)(n - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, d->comm));
        off += (size_t)cnt;
    }
    return LS_OK;
}

int ls_dist_agree(ls_dist *d, int rc, int *first_bad) {
    if (!d || d->size == 1) {
        if (first_bad) *first_bad = rc < 0 ? 0 : -1;
        return rc;
    }
    int in[2] = {rc < 0 ? rc : 0, rc < 0 ? d->rank : INT_MAX}, worst, bad;
    MPI_CHECK(MPI_Allreduce(&in[0], &worst, 1, MPI_INT, MPI_MIN, d->comm));
    MPI_CHECK(MPI_Allreduce(&in[1], &bad, 1, MPI_INT, MPI_MIN, d->comm));
    if (first_bad) *first_bad = bad == INT_MAX ? -1 : bad;
    if (worst < 0 && rc >= 0) return ls_err(LS_EPEER, "rank %d failed", bad);
    return worst < 0 ? rc : LS_OK;
}

int ls_dist_bcast(ls_dist *d, void *buf, size_t n) {
    if (!d || d->size == 1) return LS_OK;
    if (n > INT_MAX) return ls_err(LS_ERANGE, "broadcast of %zu bytes is too large", n);
    MPI_CHECK(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, d->comm));
    return LS_OK;
}

int ls_dist_mpirun_args(char **av, char np[16], int ranks) {
    snprintf(np, 16, "%d", ranks);
    int n = 0;
    av[n++] = "mpirun";
    /* our ranks report their own errors (one line); mpirun's banners would bury it */
    av[n++] = "-q";
    av[n++] = "-np";
    av[n++] = np;
    if (getuid() == 0) av[n++] = "--allow-run-as-root";
    /* more ranks than cores is fine for us: they share the cores by design */
    av[n++] = "--oversubscribe";
    /* binding every rank to one core would serialise their OpenMP threads */
    av[n++] = "--bind-to";
    av[n++] = "none";
    return n;
}

int ls_dist_watch_open(char dir[64]) {
    snprintf(dir, 64, "/tmp/llmsys-ranks-XXXXXX");
    if (!mkdtemp(dir)) return ls_err(LS_EIO, "cannot create a directory in /tmp: %s", strerror(errno));
    setenv("LLMSYS_RANK_DIR", dir, 1);
    return LS_OK;
}

#define WATCH_MAX 256

/* A rank's process is gone: through its pidfd when it has one, else kill(pid, 0). */
static int rank_gone(int pid, int pfd) {
    if (pfd >= 0) {
        struct pollfd p = {pfd, POLLIN, 0};
        return poll(&p, 1, 0) == 1;
    }
    return kill(pid, 0) != 0 && errno == ESRCH;
}

/* 1 when the process is stopped (SIGSTOP, SIGTSTP: state T in /proc/<pid>/stat); *cpu is
 * its CPU time so far in clock ticks (utime + stime). */
static int rank_stopped(int pid, unsigned long *cpu) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    *cpu = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    unsigned long ut = 0, st = 0;
    if (sscanf(p + 3, " %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) *cpu = ut + st;
    return p[2] == 'T' || p[2] == 't';
}

int ls_dist_wait_job(int job, const char *dir, int ranks, char *lost, size_t n) {
    if (n) lost[0] = '\0';
    int nr = ranks < WATCH_MAX ? ranks : WATCH_MAX;
    int pid[WATCH_MAX] = {0}, pfd[WATCH_MAX], first = -1;
    double t0 = ls_now(), t_first = 0, t_check = 0, stop_since[WATCH_MAX] = {0};
    unsigned long stop_cpu[WATCH_MAX] = {0};
    for (int r = 0; r < WATCH_MAX; r++) pfd[r] = -1;
    int status = 0;
    for (;;) {
        pid_t w = waitpid((pid_t)job, &status, WNOHANG);
        if (w == (pid_t)job || (w < 0 && errno != EINTR)) break;
        struct pollfd pf[WATCH_MAX];
        int np = 0;
        for (int r = 0; r < nr; r++) {
            if (!pid[r] && dir) {
                char path[256];
                snprintf(path, sizeof path, "%s/%d", dir, r);
                FILE *f = fopen(path, "r");
                if (f) {
                    if (fscanf(f, "%d", &pid[r]) != 1 || pid[r] <= 0) pid[r] = 0;
                    fclose(f);
#ifdef SYS_pidfd_open
                    if (pid[r]) pfd[r] = (int)syscall(SYS_pidfd_open, pid[r], 0);
#endif
                }
            }
            if (pid[r] && first < 0 && rank_gone(pid[r], pfd[r])) {
                first = r;
                t_first = ls_now() - t0;
            }
            if (pfd[r] >= 0) pf[np++] = (struct pollfd){pfd[r], POLLIN, 0};
        }
        /* a stopped rank stalls the others in the all-reduce: say so (once), not silently hang.
         * Stopped means found stopped for a second with no CPU time gained: a rank held to a
         * share of a core by a duty cycle of SIGSTOP/SIGCONT is often found stopped too. */
        double now = ls_now();
        for (int r = 0; first < 0 && now - t_check > 0.5 && r < nr; r++) {
            if (!pid[r]) continue;
            unsigned long cpu;
            int st = rank_stopped(pid[r], &cpu);
            if (st && stop_since[r] > 0 && cpu != stop_cpu[r]) stop_since[r] = 0; /* it ran meanwhile */
            if (st && stop_since[r] == 0) stop_since[r] = now, stop_cpu[r] = cpu;
            if (st && stop_since[r] > 0 && now - stop_since[r] >= 1.0) {
                LS_WARN("rank %d of %d (pid %d) is stopped (SIGSTOP?); the other ranks wait for it (SIGCONT resumes)", r,
                        ranks, pid[r]);
                stop_since[r] = -1;
            }
            if (!st && stop_since[r] < 0) LS_WARN("rank %d (pid %d) continues", r, pid[r]);
            if (!st) stop_since[r] = 0;
        }
        if (now - t_check > 0.5) t_check = now;
        /* a pidfd wakes us the moment a rank ends, before mpirun stops the others */
        if (first < 0 && np) poll(pf, (nfds_t)np, 100);
        else ls_sleep_ms(first < 0 ? 20 : 50);
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* a rank that fails by itself prints its own error and the job exits 1; a killed one
     * says nothing, and mpirun (quiet) only passes on 128 + its signal */
    if (code > 128 && first >= 0 && n)
        snprintf(lost, n,
                 "rank %d of %d (pid %d) was lost after %.1f s: it ended while the other ranks ran (killed by "
                 "signal %d, per mpirun's exit status %d); mpirun stopped the job",
                 first, ranks, pid[first], t_first, code - 128, code);
    for (int r = 0; r < WATCH_MAX; r++)
        if (pfd[r] >= 0) close(pfd[r]);
    if (dir) {
        for (int r = 0; r < nr; r++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%d", dir, r);
            unlink(path);
            snprintf(path, sizeof path, "%s/.%d", dir, r);
            unlink(path);
        }
        rmdir(dir);
    }
    return code;
}

/* ---------------------------------------------------------------- re-launch under mpirun */

static volatile pid_t mpirun_pid = 0;

static void forward_stop_signal(int sig) {
    (void)sig;
    if (mpirun_pid > 0) kill(mpirun_pid, SIGUSR1);
}

int ls_dist_relaunch(int ranks, const char *self, const char *prefix, int argc, char **argv, char *lost, size_t nlost) {
    if (nlost) lost[0] = '\0';
    char np[16];
    char **av = calloc((size_t)argc + LS_DIST_MPIRUN_ARGC + 3, sizeof *av);
    if (!av) return ls_err(LS_ENOMEM, "out of memory");
    int n = ls_dist_mpirun_args(av, np, ranks);
    av[n++] = (char *)self;
    if (prefix) av[n++] = (char *)prefix;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--ranks=", 8)) continue;
        av[n++] = argv[i];
    }
    av[n] = NULL;
    /* each rank gets its share of the cores (the child re-computes it too) */
    int per = ls_num_cores() / ranks;
    char thr[16];
    snprintf(thr, sizeof thr, "%d", per < 1 ? 1 : per);
    setenv("OMP_NUM_THREADS", thr, 0);
    setenv("OPENBLAS_NUM_THREADS", thr, 0);
    /* ranks share the cores: spinning OpenMP workers would steal them from each other */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    fflush(NULL);
    /* mpirun is a child, not an exec: mpirun answers SIGINT/SIGTERM by tearing the job down
     * (SIGKILL after a short grace), which loses the save the ranks would make. So this
     * process catches those signals and passes them on as SIGUSR1, which mpirun forwards
     * to the ranks as an ordinary stop request (finish the step, agree, save). */
    pid_t parent = getpid();
    char watch[64];
    int wrc = ls_dist_watch_open(watch);
    if (wrc) {
        free(av);
        return wrc;
    }
    pid_t pid = fork();
    if (pid < 0) {
        free(av);
        rmdir(watch);
        return ls_err(LS_EIO, "cannot fork for --ranks %d: %s", ranks, strerror(errno));
    }
    if (pid == 0) {
        /* mpirun gets a process group of its own, so a Ctrl-C on the terminal (or a signal
         * to our process group, as `timeout` sends) reaches only us; and it is told to stop
         * if we die without forwarding anything. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        execvp("mpirun", av);
        fprintf(stderr, "llmsys: cannot run mpirun for --ranks %d: %s (install openmpi-bin)\n", ranks, strerror(errno));
        _exit(127);
    }
    free(av);
    mpirun_pid = pid;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int code = ls_dist_wait_job(pid, watch, ranks, lost, nlost);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    mpirun_pid = 0;
    return code;
}
