/* test_spawn.c - ls_spawn_self: environment, output file, exec failure, signal mask, death signal. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-test-spawn-XXXXXX";

/* Waits for pid; its exit status, or 128 + the signal that ended it, or -1. */
static int wait_status(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

static char *slurp(const char *path) {
    char *d = NULL;
    size_t n;
    return ls_file_read(path, &d, &n) == LS_OK ? d : NULL;
}

/* The child's environment is this one's plus env, and its stdout and stderr go to the log,
 * truncated or appended to. */
static void test_env_and_log(void) {
    char log[256];
    snprintf(log, sizeof log, "%s/log.txt", dir);
    CHECK(ls_file_write_atomic(log, "old contents\n", 13) == LS_OK);
    setenv("LS_SPAWN_KEEP", "kept", 1);
    setenv("LS_SPAWN_B", "the parent's", 1); /* env overrides what this process has */
    const char *env[] = {"LS_SPAWN_A", "one", "LS_SPAWN_B", "two words", NULL};
    const char *argv[] = {"sh", "-c", "echo \"$LS_SPAWN_A|$LS_SPAWN_B|$LS_SPAWN_KEEP\"; echo to-stderr >&2", NULL};
    ls_spawn_opts o = {.log = log, .env = env};
    pid_t pid = -1;
    CHECK_MSG(ls_spawn_self("/bin/sh", argv, &o, &pid) == LS_OK, "%s", ls_errmsg());
    CHECK_EQ_INT(wait_status(pid), 0);
    char *d = slurp(log);
    CHECK_MSG(d && !strcmp(d, "one|two words|kept\nto-stderr\n"), "log: %s", d ? d : "(none)");
    free(d);
    CHECK(getenv("LS_SPAWN_A") == NULL); /* set in the child only */
    CHECK(getenv("LS_SPAWN_B") && !strcmp(getenv("LS_SPAWN_B"), "the parent's"));
    unsetenv("LS_SPAWN_B");
    o.log_append = 1;
    const char *argv2[] = {"sh", "-c", "echo again", NULL};
    CHECK(ls_spawn_self("/bin/sh", argv2, &o, &pid) == LS_OK);
    CHECK_EQ_INT(wait_status(pid), 0);
    d = slurp(log);
    CHECK_MSG(d && !strcmp(d, "one|two words|kept\nto-stderr\nagain\n"), "log: %s", d ? d : "(none)");
    free(d);
    unsetenv("LS_SPAWN_KEEP");
}

/* A program that cannot be run: the child says so on its stderr and exits 127; a log that cannot
 * be opened: an error, and no child. */
static void test_failures(void) {
    char log[256], bad[256];
    snprintf(log, sizeof log, "%s/exec.txt", dir);
    snprintf(bad, sizeof bad, "%s/no-such-dir/log.txt", dir);
    const char *argv[] = {"llmsys", "serve", NULL};
    ls_spawn_opts o = {.log = log};
    pid_t pid = -1;
    CHECK(ls_spawn_self("/nonexistent/llmsys", argv, &o, &pid) == LS_OK);
    CHECK_EQ_INT(wait_status(pid), 127);
    char *d = slurp(log);
    CHECK_MSG(d && strstr(d, "exec /nonexistent/llmsys: No such file"), "log: %s", d ? d : "(none)");
    free(d);
    o.log = bad;
    pid = -1;
    CHECK(ls_spawn_self("/bin/true", argv, &o, &pid) == LS_EIO);
    CHECK(strstr(ls_errmsg(), "no-such-dir") != NULL);
    CHECK_EQ_INT(pid, -1);
}

/* A parent that blocks SIGUSR1: the child inherits the mask unless unblock_signals is set. */
static void test_signal_mask(void) {
    sigset_t s, old;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigprocmask(SIG_BLOCK, &s, &old);
    /* SigBlk of /proc/self/status: SIGUSR1 (10) is bit 9, 0x200 (grep runs without a shell:
     * a shell changes the mask of what it starts) */
    const char *argv[] = {"grep", "-q", "^SigBlk:.*200$", "/proc/self/status", NULL};
    for (int unblock = 0; unblock < 2; unblock++) {
        ls_spawn_opts o = {.unblock_signals = unblock};
        pid_t pid;
        CHECK(ls_spawn_self("/bin/grep", argv, &o, &pid) == LS_OK);
        CHECK_EQ_INT(wait_status(pid), unblock ? 1 : 0);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* 1 once process pid runs the program name (it has exec'd, so its death signal is set), after
 * at most 10 s. */
static int runs(pid_t pid, const char *name) {
    char path[64], *comm = NULL;
    size_t n;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    for (int t = 0; t < 1000; t++, ls_sleep_ms(10)) {
        int ok = ls_file_read(path, &comm, &n) == LS_OK && !strncmp(comm, name, strlen(name));
        free(comm);
        comm = NULL;
        if (ok) return 1;
    }
    return 0;
}

/* The death signal: a middle process starts a long sleeper and exits once it runs; the sleeper
 * gets SIGKILL (this process, a subreaper, inherits and reaps it). Without the signal it keeps
 * sleeping. */
static void test_death_signal(void) {
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    for (int sig = 0; sig < 2; sig++) {
        int fd[2];
        CHECK(pipe(fd) == 0);
        pid_t mid = fork();
        if (mid == 0) {
            const char *argv[] = {"sleep", "30", NULL};
            ls_spawn_opts o = {.death_signal = sig ? SIGKILL : 0};
            pid_t p = -1;
            ls_spawn_self("/bin/sleep", argv, &o, &p);
            _exit(runs(p, "sleep") && write(fd[1], &p, sizeof p) == sizeof p ? 0 : 1);
        }
        pid_t sleeper = -1;
        close(fd[1]);
        CHECK(read(fd[0], &sleeper, sizeof sleeper) == sizeof sleeper);
        close(fd[0]);
        CHECK_EQ_INT(wait_status(mid), 0);
        if (sleeper <= 0) continue;
        if (!sig) {
            ls_sleep_ms(200);
            CHECK(waitpid(sleeper, NULL, WNOHANG) == 0); /* still sleeping */
            kill(sleeper, SIGTERM);
        }
        CHECK_EQ_INT(wait_status(sleeper), sig ? 128 + SIGKILL : 128 + SIGTERM);
    }
}

int main(void) {
    RUN(test_signal_mask);
    RUN(test_death_signal);
    if (!mkdtemp(dir)) return 1; /* for the tests with an output file */
    RUN(test_env_and_log);
    RUN(test_failures);
    return TEST_RESULT_RMTREE(dir);
}
