/* test.h - the llmsys test harness: each tests/<module>/test_*.c is one ctest case (a
 * process with a timeout). CHECK failures print file:line and values and make main fail.
 *
 *     static void test_roundtrip(void) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-6); }
 *     int main(void) { RUN(test_roundtrip); return TEST_RESULT(); }
 */
#ifndef LLMSYS_TEST_H
#define LLMSYS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmsys/core.h"

/* Every test binary runs OpenBLAS's kernels as the CLI does: where this OpenBLAS does not know
 * the CPU and falls back to its SSE3 kernels, the process re-executes itself once, before main,
 * with the OPENBLAS_CORETYPE the CLI would set (ls_runtime_reexec, core.h). Its arguments are
 * rebuilt from /proc; a command line too long to rebuild runs as it is. */
__attribute__((constructor)) static void test_blas_core_(void) {
    static char args[16384];
    char *argv[128];
    FILE *f = fopen("/proc/self/cmdline", "rb");
    size_t n = f ? fread(args, 1, sizeof args - 1, f) : 0;
    if (f) fclose(f);
    int argc = 0;
    for (size_t i = 0; i < n; i += strlen(args + i) + 1) {
        if (argc == 127) return;
        argv[argc++] = args + i;
    }
    if (argc == 0 || n == sizeof args - 1) return;
    argv[argc] = NULL;
    ls_runtime_reexec(argv, LS_REEXEC_BLAS_CORE);
}

static int test_failures_ = 0, test_checks_ = 0, test_ran_ = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        test_checks_++;                                                              \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            test_failures_++;                                                        \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        test_checks_++;                                                              \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            test_failures_++;                                                        \
        }                                                                            \
    } while (0)

/* |a-b| <= tol, printing both values when it fails. */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double ca_ = (double)(a), cb_ = (double)(b), ct_ = (double)(tol);                          \
        test_checks_++;                                                                            \
        if (!(fabs(ca_ - cb_) <= ct_)) {                                                           \
            fprintf(stderr, "  FAIL %s:%d: %s = %.9g vs %s = %.9g (|diff| %.3g > tol %.3g)\n",     \
                    __FILE__, __LINE__, #a, ca_, #b, cb_, fabs(ca_ - cb_), ct_);                   \
            test_failures_++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                   \
    do {                                                                                     \
        long long ca_ = (long long)(a), cb_ = (long long)(b);                                \
        test_checks_++;                                                                      \
        if (ca_ != cb_) {                                                                    \
            fprintf(stderr, "  FAIL %s:%d: %s = %lld, expected %s = %lld\n", __FILE__, __LINE__, \
                    #a, ca_, #b, cb_);                                                       \
            test_failures_++;                                                                \
        }                                                                                    \
    } while (0)

/* Seconds on the monotonic clock, for RUN's per-function times. */
static inline double test_now_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define RUN(fn)                                                                                                        \
    do {                                                                                                               \
        int before_ = test_failures_;                                                                                  \
        double t0_ = test_now_();                                                                                      \
        fn();                                                                                                          \
        test_ran_++;                                                                                                   \
        fprintf(stderr, "%s %s (%.2f s)\n", test_failures_ == before_ ? "ok  " : "FAIL", #fn, test_now_() - t0_);      \
    } while (0)

#define TEST_RESULT()                                                                         \
    (fprintf(stderr, "%d test functions, %d checks, %d failed\n", test_ran_, test_checks_,   \
             test_failures_),                                                                 \
     test_failures_ ? 1 : 0)

/* Removes the directory tree dir (a test's mkdtemp work directory); 0 on success. */
static inline int test_rmtree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) != 0;
}

/* The end of a main that worked under dir: removes it, then the result (1 when the removal
 * failed too). */
#define TEST_RESULT_RMTREE(dir) (test_rmtree(dir) | TEST_RESULT())

/* A "|"-separated list of names a CLI option takes (LS_CHOICES): every name passes parses(),
 * and the list has n of them (the library's table and its list agree). */
static inline void test_choice_list(const char *list, int n, int (*parses)(const char *)) {
    int k = 0;
    for (const char *p = list; *p; k++) {
        size_t len = strcspn(p, "|");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        CHECK_MSG(parses(name), "'%s' of \"%s\" does not parse", name, list);
        p += len + (p[len] == '|');
    }
    CHECK_MSG(k == n, "\"%s\": %d names, want %d", list, k, n);
}

#endif
