/* error.c - per-thread error messages, status names, panics and leveled logging. */
#include "llmsys/core.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local char errbuf[1024];

int ls_verr(int code, const char *fmt, va_list ap) {
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    return code;
}

int ls_err(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ls_verr(code, fmt, ap);
    va_end(ap);
    return code;
}

int ls_err_wrap(int code, const char *fmt, ...) {
    char prefix[512], old[sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errbuf, sizeof old);
    const char *rest = old[0] ? old : ls_strerror(code);
    size_t pl = strlen(prefix);
    /* truncation is fine here: messages are one line for humans */
    memcpy(errbuf, prefix, pl);
    memcpy(errbuf + pl, ": ", 3);
    snprintf(errbuf + pl + 2, sizeof errbuf - pl - 2, "%.*s", (int)(sizeof errbuf - pl - 3), rest);
    return code;
}

const char *ls_errmsg(void) { return errbuf; }

const char *ls_strerror(int code) {
    switch (code) {
#define LS_X_STR(name, val, desc) \
    case val: return desc;
        LS_ERRNO_MAP(LS_X_STR)
#undef LS_X_STR
    }
    return "unknown error";
}

const char *ls_err_name(int code) {
    switch (code) {
#define LS_X_NAME(name, val, desc) \
    case val: return #name;
        LS_ERRNO_MAP(LS_X_NAME)
#undef LS_X_NAME
    }
    return "EUNKNOWN";
}

_Noreturn void ls_panic(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "llmsys: panic at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    void *frames[32];
    int n = backtrace(frames, 32);
    backtrace_symbols_fd(frames, n, 2);
    abort();
}

/* ---------------------------------------------------------------- logging */

static int log_level = -1; /* -1: not yet read from the environment */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static ls_log_level level_from_env(void) {
    const char *s = getenv("LLMSYS_LOG");
    if (!s) return LS_LOG_INFO;
    if (!strcasecmp(s, "debug")) return LS_LOG_DEBUG;
    if (!strcasecmp(s, "warn")) return LS_LOG_WARN;
    if (!strcasecmp(s, "error")) return LS_LOG_ERROR;
    if (!strcasecmp(s, "off")) return LS_LOG_OFF;
    return LS_LOG_INFO;
}

void ls_log_set_level(ls_log_level level) { __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED); }

ls_log_level ls_log_get_level(void) {
    int l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = (int)level_from_env();
        __atomic_store_n(&log_level, l, __ATOMIC_RELAXED);
    }
    return (ls_log_level)l;
}

/* One line goes out in one write: processes sharing a pipe (MPI ranks, a server and its
 * workers) then never split each other's lines. A line longer than the buffer is cut. */
void ls_log(ls_log_level level, const char *file, int line, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < ls_log_get_level() || level >= LS_LOG_OFF) return;
    char buf[2048];
    int n = level == LS_LOG_DEBUG ? snprintf(buf, sizeof buf, "[llmsys %s %s:%d] ", names[level], file, line)
                                  : snprintf(buf, sizeof buf, "[llmsys %s] ", names[level]);
    if (n < 0 || (size_t)n > sizeof buf - 2) n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2) len = sizeof buf - 2;
    buf[len++] = '\n';
    pthread_mutex_lock(&log_mu);
    fwrite(buf, 1, len, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}
