/* util.c - aligned memory, atomic file writes, timing and small system helpers. */
#include "llmsys/core.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- memory */

void *ls_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (size == 0) size = align;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    return p;
}

void *ls_aligned_calloc(size_t align, size_t size) {
    void *p = ls_aligned_alloc(align, size);
    if (p) memset(p, 0, size ? size : align);
    return p;
}

void ls_aligned_free(void *p) { free(p); }

/* ---------------------------------------------------------------- files */

int ls_file_read(const char *path, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ls_err(errno == ENOENT ? LS_ENOTFOUND : LS_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return ls_err(LS_EIO, "%s: not a regular file", path);
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return ls_err(LS_ENOMEM, "%s: out of memory reading %zu bytes", path, cap);
    }
    for (;;) {
        if (n + 1 >= cap) { /* files that grow or report size 0 (procfs) */
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return ls_err(LS_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return ls_err(LS_EIO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (len) *len = n;
    return LS_OK;
}

int ls_atomic_open(ls_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->path = strdup(path);
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        free(af->path);
        free(af->tmp);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->fp = fopen(af->tmp, "wb");
    if (!af->fp) {
        int rc = ls_err(LS_EIO, "%s: cannot create: %s", path, strerror(errno));
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return rc;
    }
    return LS_OK;
}

int ls_atomic_commit(ls_atomic_file *af) {
    FILE *f = af->fp;
    int rc = LS_OK;
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0)
        rc = ls_err(LS_EIO, "%s: write failed: %s", af->path, strerror(errno));
    if (fclose(f) != 0 && rc == LS_OK) rc = ls_err(LS_EIO, "%s: close failed: %s", af->path, strerror(errno));
    af->fp = NULL;
    if (rc == LS_OK && rename(af->tmp, af->path) != 0)
        rc = ls_err(LS_EIO, "%s: rename failed: %s", af->path, strerror(errno));
    if (rc != LS_OK) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return rc;
}

void ls_atomic_abort(ls_atomic_file *af) {
    if (af->fp) fclose(af->fp);
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}

int ls_file_write_atomic(const char *path, const void *data, size_t len) {
    ls_atomic_file af;
    LS_TRY(ls_atomic_open(&af, path));
    if (len && fwrite(data, 1, len, af.fp) != len) {
        int rc = ls_err(LS_EIO, "%s: write failed: %s", path, strerror(errno));
        ls_atomic_abort(&af);
        return rc;
    }
    return ls_atomic_commit(&af);
}

int ls_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ls_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ls_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return ls_err(LS_EINVAL, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return ls_err(LS_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    if (!ls_is_dir(path)) return ls_err(LS_EIO, "%s: exists and is not a directory", path);
    return LS_OK;
}

/* ---------------------------------------------------------------- timing */

double ls_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ls_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ls_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ls_median(double *v, int n) {
    if (n < 1) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------------- misc */

int ls_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* libgomp reads OMP_WAIT_POLICY once, as it loads (before main), so only a fresh start can
 * change it. Its default spin-wait halves training speed when the cores are shared with
 * other processes: spinning workers burn the time slices the thread they wait for needs
 * (measured in docs/model.md and docs/training.md). If exec fails we simply run as we
 * are; the variable stays set, so programs we start still get the passive policy. */
void ls_omp_passive_reexec(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return; /* the user chose a policy, or this is the re-exec */
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
}

const char *ls_fmt_bytes(double bytes, char *buf, size_t n) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

size_t ls_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages = 0, rss = 0;
    int ok = fscanf(f, "%ld %ld", &pages, &rss) == 2;
    fclose(f);
    return ok ? (size_t)rss * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

uint64_t ls_hash64(const void *data, size_t len) { return (uint64_t)XXH3_64bits(data, len); }
