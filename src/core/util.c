/* util.c - aligned memory, atomic file writes, timing and small system helpers. */
#include "llmsys/core.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
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

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "not a regular file";
}

int ls_file_input_status(int err) {
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return LS_ENOTFOUND;
    case EACCES:
    case EPERM:
    case ELOOP:
    case ENAMETOOLONG:
        return LS_EINVAL;
    default:
        return LS_EIO;
    }
}

/* O_NONBLOCK makes the open of a FIFO return at once instead of waiting for a writer
 * (forever, if none comes); fstat then refuses it, and the flag is cleared for real files. */
int ls_file_open_input(const char *path, int *fd, size_t *size) {
    *fd = -1;
    if (size) *size = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return ls_err(ls_file_input_status(errno), "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int rc = ls_err(LS_EIO, "%s: %s", path, strerror(errno));
        close(f);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ls_err(LS_EINVAL, "%s: is %s; only regular files are read as inputs", path, file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int rc = ls_err(LS_EIO, "%s: %s", path, strerror(errno));
        close(f);
        return rc;
    }
    *fd = f;
    if (size) *size = (size_t)st.st_size;
    return LS_OK;
}

int ls_file_read(const char *path, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    int fd;
    size_t size;
    LS_TRY(ls_file_open_input(path, &fd, &size));
    size_t cap = size > 0 ? size + 1 : 4096, n = 0;
    char *buf = malloc(cap);
    int rc = buf ? LS_OK : ls_err(LS_ENOMEM, "%s: out of memory reading %zu bytes", path, cap);
    while (rc == LS_OK) {
        if (n + 1 >= cap) { /* files that grow or report size 0 (procfs) */
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = ls_err(LS_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = ls_err(LS_EIO, "%s: read error: %s", path, strerror(errno));
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *data = buf;
    if (len) *len = n;
    return LS_OK;
}

int ls_is_binary(const void *data, size_t len) {
    const unsigned char *d = data;
    size_t ctrl = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = d[i];
        if (c == 0) return 1;
        if ((c < 32 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != '\b' && c != 27) ||
            c == 127)
            ctrl++;
    }
    return ctrl * 20 > len;
}

/* ---------------------------------------------------------------- atomic writes */

/* The temp file of a write to <dir>/<base> is <dir>/<base>.tmp.<pid>.<6 random chars>: the
 * pid lets a later writer tell a dead writer's leftover from a live one's, the random part
 * makes the name unguessable, and O_EXCL|O_NOFOLLOW means a file or link planted at that
 * name is never opened or followed: the open fails and another name is tried. */
#define TMP_TAG ".tmp."
#define TMP_RAND 6

static void split_path(const char *path, char *dir, size_t dn, const char **base) {
    const char *sl = strrchr(path, '/');
    *base = sl ? sl + 1 : path;
    if (!sl)
        snprintf(dir, dn, ".");
    else if (sl == path)
        snprintf(dir, dn, "/");
    else
        snprintf(dir, dn, "%.*s", (int)(sl - path), path);
}

/* Removes temp files that writers to the same destination left behind when they were
 * killed: names <base>.tmp.<pid>.<rand> whose pid no longer exists, regular files owned
 * by this user (a link or someone else's file is left alone). Each removal is logged. */
static void remove_stale_tmps(const char *path) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    size_t bl = strlen(base), tl = strlen(TMP_TAG);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, TMP_TAG, tl) != 0) continue;
        const char *p = n + bl + tl;
        char *end;
        errno = 0;
        long pid = strtol(p, &end, 10);
        if (errno || end == p || pid <= 0 || *end != '.' || strlen(end + 1) != TMP_RAND) continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (unlinkat(dirfd(d), n, 0) == 0)
            LS_WARN("%s/%s: removed the temp file of a dead writer (pid %ld)", dir, n, pid);
    }
    closedir(d);
}

int ls_atomic_open(ls_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 48;
    if (!*path || path[strlen(path) - 1] == '/') return ls_err(LS_EINVAL, "'%s': not a file path", path);
    af->path = strdup(path);
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return ls_err(LS_ENOMEM, "out of memory");
    }
    remove_stale_tmps(path);
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    ls_rng r;
    ls_rng_seed(&r, (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(ls_wall_time() * 1e9) ^
                        (uint64_t)(uintptr_t)af);
    int fd = -1, err = 0;
    for (int tries = 0; tries < 64 && fd < 0; tries++) {
        char rnd[TMP_RAND + 1];
        for (int i = 0; i < TMP_RAND; i++) rnd[i] = al[ls_rng_below(&r, sizeof al - 1)];
        rnd[TMP_RAND] = '\0';
        snprintf(af->tmp, n, "%s" TMP_TAG "%ld.%s", path, (long)getpid(), rnd);
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd >= 0 && !(af->fp = fdopen(fd, "wb"))) {
        err = errno;
        close(fd);
        unlink(af->tmp);
        fd = -1;
    }
    if (fd < 0) {
        int rc = ls_err(LS_EIO, "%s: cannot create a temp file beside it: %s", path, strerror(err));
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return rc;
    }
    return LS_OK;
}

/* After the rename, the directory entry itself is made durable (best effort). */
static void sync_dir_of(const char *path) {
    char dir[4096];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int ls_atomic_commit(ls_atomic_file *af) {
    FILE *f = af->fp;
    int rc = LS_OK;
    if (!f) return ls_err(LS_ESTATE, "atomic commit without an open file");
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0)
        rc = ls_err(LS_EIO, "%s: write failed: %s", af->path, strerror(errno));
    if (fclose(f) != 0 && rc == LS_OK) rc = ls_err(LS_EIO, "%s: close failed: %s", af->path, strerror(errno));
    af->fp = NULL;
    if (rc == LS_OK && rename(af->tmp, af->path) != 0)
        rc = ls_err(LS_EIO, "%s: rename failed: %s", af->path, strerror(errno));
    if (rc != LS_OK)
        unlink(af->tmp);
    else
        sync_dir_of(af->path);
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

int ls_port_file_write(const char *path, int port) {
    char b[16];
    int n = snprintf(b, sizeof b, "%d\n", port);
    return ls_file_write_atomic(path, b, (size_t)n);
}

int ls_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ls_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ls_out_path_check(const char *flag, const char *path) {
    if (!*path) return ls_err(LS_EINVAL, "--%s '': not a file path", flag);
    if (ls_is_dir(path)) return ls_err(LS_EIO, "--%s %s is a directory", flag, path);
    char *dup = strdup(path);
    if (!dup) return ls_err(LS_ENOMEM, "out of memory");
    char *slash = strrchr(dup, '/');
    const char *parent = slash ? (slash == dup ? "/" : (*slash = '\0', dup)) : ".";
    int rc = LS_OK;
    if (!ls_is_dir(parent))
        rc = ls_err(LS_EIO, "--%s %s: directory %s does not exist", flag, path, parent);
    else if (access(parent, W_OK) != 0)
        rc = ls_err(LS_EIO, "--%s %s: directory %s is not writable", flag, path, parent);
    free(dup);
    return rc;
}

/* Where an atomic write to out lands: its directory resolved, its own name kept (a symlink
 * there is replaced, not followed). 0, or -1 when the directory does not resolve. */
static int out_target(const char *out, char *path, size_t n) {
    char *dir = strdup(out), *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash) *slash = '\0';
    char *rdir = dir ? realpath(slash ? (slash == dir ? "/" : dir) : ".", NULL) : NULL;
    int ok = rdir != NULL;
    if (ok) snprintf(path, n, "%s/%s", strcmp(rdir, "/") ? rdir : "", slash ? slash + 1 : out);
    free(dir);
    free(rdir);
    return ok ? 0 : -1;
}

int ls_path_replaces(const char *in, const char *out) {
    if (!in || !out) return 0;
    char a[8192], b[8192], *rin = realpath(in, NULL);
    if (rin) snprintf(a, sizeof a, "%s", rin);
    int same = (rin || out_target(in, a, sizeof a) == 0) && out_target(out, b, sizeof b) == 0 && !strcmp(a, b);
    free(rin);
    return same;
}

int ls_list_ok(const char *list, size_t max) {
    size_t n = list ? strlen(list) : 0;
    return n > 0 && n < max && list[0] != ',' && list[n - 1] != ',' && !strstr(list, ",,");
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

/* Seconds on one of the kernel's clocks. */
static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ls_now(void) { return clock_s(CLOCK_MONOTONIC); }
double ls_wall_time(void) { return clock_s(CLOCK_REALTIME); }
double ls_thread_cpu_time(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }
double ls_process_cpu_time(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

void ls_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ls_sort_doubles(double *v, size_t n) { qsort(v, n, sizeof(double), cmp_double); }

double ls_median(double *v, int n) {
    if (n < 1) return NAN;
    ls_sort_doubles(v, (size_t)n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ls_quantile(double *v, int n, double q) {
    if (n < 1) return NAN;
    ls_sort_doubles(v, (size_t)n);
    double x = q * (n - 1);
    int i = (int)x;
    return i + 1 < n ? v[i] + (x - i) * (v[i + 1] - v[i]) : v[n - 1];
}

/* ---------------------------------------------------------------- misc */

int ls_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The smallest limit that file (a number of bytes, or "max") gives in cgroup dir/path and
 * each of its ancestors up to dir itself: a parent's limit holds for its children, and in a
 * container dir may be the container's own cgroup while path still names it from the host. */
static double cgroup_walk(const char *dir, const char *path, const char *file, double best) {
    char p[1024], f[2048];
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == '/') p[--n] = '\0';
    for (;;) {
        snprintf(f, sizeof f, "%s%s/%s", dir, p, file);
        FILE *fp = fopen(f, "r");
        char v[64];
        if (fp && fgets(v, sizeof v, fp)) {
            char *e;
            double x = strtod(v, &e);
            if (e != v && x > 0 && (best == 0 || x < best)) best = x;
        }
        if (fp) fclose(fp);
        if (n == 0) return best;
        while (n > 0 && p[n - 1] != '/') n--; /* up one level */
        if (n > 0) n--;
        p[n] = '\0';
    }
}

double ls_mem_cgroup_limit(const char *proc_cgroup, const char *root) {
    FILE *fp = fopen(proc_cgroup, "r");
    if (!fp) return 0;
    char line[1200], dir[1100];
    double best = 0;
    while (fgets(line, sizeof line, fp)) { /* "id:controllers:path" */
        char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
        if (!p) continue;
        *p++ = '\0';
        p[strcspn(p, "\n")] = '\0';
        char *ctl = c + 1, *save;
        if (!*ctl) { /* v2: the unified tree, at root or (hybrid layout) root/unified */
            best = cgroup_walk(root, p, "memory.max", best);
            snprintf(dir, sizeof dir, "%s/unified", root);
            best = cgroup_walk(dir, p, "memory.max", best);
        }
        for (char *t = strtok_r(ctl, ",", &save); t; t = strtok_r(NULL, ",", &save)) /* v1 */
            if (!strcmp(t, "memory")) {
                snprintf(dir, sizeof dir, "%s/memory", root);
                best = cgroup_walk(dir, p, "memory.limit_in_bytes", best);
            }
    }
    fclose(fp);
    return best;
}

double ls_mem_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    double phys = pages > 0 && psz > 0 ? (double)pages * psz : 1e9; /* unknown: a small machine's */
    double lim = ls_mem_cgroup_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    return lim > 0 && lim < phys ? lim : phys;
}

int64_t ls_mem_max_items(double item_bytes) {
    double n = floor(ls_mem_total() / (item_bytes > 1 ? item_bytes : 1));
    return n < 1 ? 1 : n > 9e18 ? (int64_t)9e18 : (int64_t)n;
}

/* Two libraries read their settings once, as they load (before main), so only a fresh start
 * can change them:
 * - libgomp's OMP_WAIT_POLICY (LS_REEXEC_OMP_PASSIVE). Its default spin-wait halves training
 *   speed when the cores are shared with other processes: spinning workers burn the time
 *   slices the thread they wait for needs (measured in docs/model.md and docs/training.md).
 *   We set it to passive.
 * - OpenBLAS's OPENBLAS_CORETYPE (LS_REEXEC_BLAS_CORE), where OpenBLAS fell back to its
 *   slowest kernels on a CPU it does not know (ls_cpu_blas_core; docs/training.md).
 * A setting the user made is kept. If exec fails we simply run as we are; the variables stay
 * set, so programs we start still get them. */
void ls_runtime_reexec(char **argv, unsigned what) {
    int again = 0;
    if ((what & LS_REEXEC_OMP_PASSIVE) && !getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = 1;
    }
    const char *core = !(what & LS_REEXEC_BLAS_CORE) || getenv("OPENBLAS_CORETYPE")
                           ? NULL
                           : ls_cpu_blas_core(ls_cpu_blas_core_picked(), ls_cpu_features());
    if (core) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        again = 1;
    }
    if (again) execv("/proc/self/exe", argv);
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

int ls_file_copy(const char *from, const char *to, size_t max) {
    char *d;
    size_t len;
    LS_TRY(ls_file_read(from, &d, &len));
    int rc = ls_file_write_atomic(to, d, len < max ? len : max);
    free(d);
    return rc;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int ls_dir_copy(const char *src, const char *dst, const char *ext, int max_files, size_t max_bytes, int *copied) {
    *copied = 0;
    DIR *d = opendir(src);
    if (!d) return ls_err(LS_ENOTFOUND, "%s: cannot open directory", src);
    char **names = NULL;
    int n = 0, rc = LS_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t L = strlen(e->d_name), el = ext ? strlen(ext) : 0;
        if (e->d_name[0] == '.' || (ext && (L <= el || strcmp(e->d_name + L - el, ext)))) continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn || !(nn[n] = strdup(e->d_name))) {
            if (nn) names = nn;
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        names = nn;
        n++;
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_names); /* sorted: a reproducible copy */
    for (int i = 0; i < n && *copied < max_files && rc == LS_OK; i++) {
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", src, names[i]);
        snprintf(b, sizeof b, "%s/%s", dst, names[i]);
        if (!ls_is_file(a)) continue;
        rc = ls_file_copy(a, b, max_bytes);
        if (rc == LS_OK) (*copied)++;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int ls_sched_realtime(void) {
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
        return ls_err(LS_EIO, "cannot switch to SCHED_FIFO: %s", strerror(errno));
    return LS_OK;
}

int ls_load_avg(double la[3]) {
    la[0] = la[1] = la[2] = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    int n = f ? fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) : 0;
    if (f) fclose(f);
    if (n == 3) return LS_OK;
    la[0] = la[1] = la[2] = -1;
    return ls_err(LS_EIO, "cannot read the load average from /proc/loadavg");
}

int ls_ip_parse(const char *host, unsigned char addr[16]) {
    static const unsigned char v4mapped[12] = {[10] = 0xff, [11] = 0xff};
    char in[INET6_ADDRSTRLEN + 16]; /* room for a zone or junk, refused by inet_pton */
    size_t n = strlen(host);
    if (inet_pton(AF_INET, host, addr) == 1) return 4;
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') { /* brackets only around IPv6 */
        if (n - 2 >= sizeof in) return 0;
        memcpy(in, host + 1, n - 2);
        in[n - 2] = '\0';
        host = in;
    }
    if (inet_pton(AF_INET6, host, addr) != 1) return 0;
    if (memcmp(addr, v4mapped, 12)) return 6;
    memmove(addr, addr + 12, 4); /* ::ffff:a.b.c.d is the IPv4 address a.b.c.d */
    return 4;
}

int ls_bind_check(const char *what, const char *addr) {
    unsigned char a[16];
    if (ls_ip_parse(addr, a)) return LS_OK;
    return ls_err(LS_EINVAL,
                  "%s: bad bind address '%s' (an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0, ::1 or ::)", what,
                  addr);
}

const char *ls_url_host(const char *host, char *out, size_t n) {
    snprintf(out, n, strchr(host, ':') && host[0] != '[' ? "[%s]" : "%s", host);
    return out;
}

int ls_host_is_loopback(const char *host) {
    static const unsigned char lo6[16] = {[15] = 1};
    unsigned char a[16];
    if (!strcmp(host, "localhost")) return 1;
    switch (ls_ip_parse(host, a)) {
    case 4:
        return a[0] == 127; /* 127.0.0.0/8 */
    case 6:
        return !memcmp(a, lo6, 16);
    default:
        return 0;
    }
}
