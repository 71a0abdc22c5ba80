/* test_throttle.c - the duty-cycle throttle (LLMSYS_THROTTLE=dutycycle): it holds a process
 * to its share of a core, and releasing it never leaves the process stopped, even when the
 * release lands on the instant the duty-cycle child sends its SIGSTOP; and the job watcher of
 * `train --ranks` does not take a duty-cycled rank for a stopped one, but does report a rank
 * stopped for two seconds. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/train.h"
#include "test.h"

static volatile sig_atomic_t conts;
static volatile double cont_at; /* CLOCK_MONOTONIC seconds of the last SIGCONT */

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_cont(int sig) {
    (void)sig;
    cont_at = mono();
    conts++;
}

static void spin_until(double t) {
    while (mono() < t) {
    }
}

static void test_limits_cpu(void) {
    ls_throttle t;
    CHECK_EQ_INT(ls_throttle_apply(&t, 0.25, 1), LS_OK);
    CHECK_MSG(strstr(t.mech, "duty cycle") != NULL, "mech %s", t.mech);
    CHECK(t.child > 0);
    spin_until(mono() + 0.6);
    double share = ls_throttle_cpu_share(&t);
    ls_throttle_release(&t);
    CHECK_MSG(share < 0.45, "a 0.25-core duty cycle ran at %.3f of a core", share);
    CHECK_EQ_INT(t.child, 0);
    ls_throttle_release(&t); /* idempotent */
}

/* The worker: 300 throttles of 0.05 core (running 0.5 ms of every 10 ms), each released
 * at a swept instant 0.40-0.60 ms after the process was last continued: around the
 * moment the child stops it again. Exits 0 when every release returned. */
static void release_worker(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cont;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCONT, &sa, NULL);
    for (int i = 0; i < 300; i++) {
        ls_throttle t;
        if (ls_throttle_apply(&t, 0.05, 1) != LS_OK || t.child <= 0) _exit(3);
        sig_atomic_t c0 = conts;
        double give_up = mono() + 1.0;
        while (conts == c0 && mono() < give_up) {
        }
        spin_until(cont_at + 400e-6 + 5e-6 * (i % 41));
        ls_throttle_release(&t);
        if (t.child != 0) _exit(4);
    }
    _exit(0);
}

static char proc_state(pid_t pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static void test_release_never_leaves_stopped(void) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid < 0) return;
    if (pid == 0) release_worker();
    int status = 0;
    double deadline = mono() + 60;
    pid_t w = 0;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && mono() < deadline) ls_sleep_ms(20);
    if (w == 0) {
        char st = proc_state(pid);
        CHECK_MSG(0, "the worker did not finish in 60 s (process state %c: T is stopped)", st);
        kill(pid, SIGKILL); /* its duty-cycle child dies with it */
        waitpid(pid, &status, 0);
        return;
    }
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker status %d", status);
}

/* The rank of a fake job: `stop` 0 runs 4 s at 0.1 core under the duty cycle; 1 runs 0.3 s,
 * then stops itself until the job continues it 2.8 s later, then runs 1.5 s more. */
static void fake_rank(int stop) {
    if (stop) {
        spin_until(mono() + 0.3);
        raise(SIGSTOP);
        spin_until(mono() + 1.5);
        _exit(0);
    }
    ls_throttle t;
    if (ls_throttle_apply(&t, 0.1, 1) != LS_OK) _exit(3);
    spin_until(mono() + 4.0);
    ls_throttle_release(&t);
    _exit(0);
}

/* A job of one rank, as mpirun would be: it starts the rank, publishes its pid where the
 * watcher looks, and ends with it. */
static void fake_job(const char *dir, int stop) {
    pid_t r = fork();
    if (r < 0) _exit(5);
    if (r == 0) fake_rank(stop);
    char tmp[128], path[128];
    snprintf(tmp, sizeof tmp, "%s/.0", dir);
    snprintf(path, sizeof path, "%s/0", dir);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", (int)r) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) _exit(6);
    if (stop) {
        ls_sleep_ms(2800);
        kill(r, SIGCONT);
    }
    int status;
    waitpid(r, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 7);
}

/* Runs a fake job under ls_dist_wait_job; what the watcher printed lands in `out`. */
static int watch_fake_job(int stop, char *out, size_t n) {
    char dir[64];
    if (ls_dist_watch_open(dir) != LS_OK) return -1;
    fflush(NULL);
    pid_t job = fork();
    if (job < 0) return -1;
    if (job == 0) fake_job(dir, stop);
    char errf[] = "/tmp/llmsys-watch-XXXXXX";
    int fd = mkstemp(errf), saved = dup(2);
    dup2(fd, 2);
    char lost[256];
    int code = ls_dist_wait_job((int)job, dir, 1, lost, sizeof lost);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t k = pread(fd, out, n - 1, 0);
    out[k > 0 ? k : 0] = '\0';
    close(fd);
    unlink(errf);
    return code;
}

static void test_watcher_duty_cycle_not_stopped(void) {
    char out[4096];
    CHECK_EQ_INT(watch_fake_job(0, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "is stopped") == NULL, "the watcher said: %s", out);
}

static void test_watcher_reports_stopped(void) {
    char out[4096];
    CHECK_EQ_INT(watch_fake_job(1, out, sizeof out), 0);
    CHECK_MSG(strstr(out, "rank 0 of 1") && strstr(out, "is stopped"), "the watcher said: %s", out);
    CHECK_MSG(strstr(out, "rank 0 (pid") && strstr(out, "continues"), "the watcher said: %s", out);
}

int main(void) {
    setenv("LLMSYS_THROTTLE", "dutycycle", 1);
    RUN(test_limits_cpu);
    RUN(test_release_never_leaves_stopped);
    RUN(test_watcher_duty_cycle_not_stopped);
    RUN(test_watcher_reports_stopped);
    return TEST_RESULT();
}
