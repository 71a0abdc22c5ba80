/* test_throttle.c - the duty-cycle throttle (LLMSYS_THROTTLE=dutycycle): it holds a process
 * to its share of a core, and releasing it never leaves the process stopped, even when the
 * release lands on the instant the duty-cycle child sends its SIGSTOP. */
#include <signal.h>
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

int main(void) {
    setenv("LLMSYS_THROTTLE", "dutycycle", 1);
    RUN(test_limits_cpu);
    RUN(test_release_never_leaves_stopped);
    return TEST_RESULT();
}
