/*
 * core.h - the shared substrate of llmsys: status codes, logging, RNG, memory,
 * files, JSON, timing, progress bars and child processes.
 *
 * Error model (after libuv): every function that can fail returns 0 (LS_OK) or a
 * negative LS_E* code, and records a one-line human message for the calling
 * thread, readable with ls_errmsg(). Library code never calls exit(); only
 * src/cli/ turns a status into an exit code. Typical use:
 *
 *     if (ls_file_read(path, &buf, &len) != LS_OK) {
 *         fprintf(stderr, "llmsys: %s\n", ls_errmsg());
 *         return 1;
 *     }
 *
 * Errors are raised with ls_err(), which formats the message and returns the code:
 *
 *     if (n <= 0) return ls_err(LS_EINVAL, "%s: steps must be > 0, got %d", path, n);
 */
#ifndef LLMSYS_CORE_H
#define LLMSYS_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status codes */

/* X(name, value, description). Values are only ever appended. */
#define LS_ERRNO_MAP(X)                                              \
    X(OK, 0, "success")                                              \
    X(EINVAL, -1, "invalid argument")                                \
    X(ENOMEM, -2, "out of memory")                                   \
    X(EIO, -3, "input/output error")                                 \
    X(EFORMAT, -4, "malformed or foreign file format")               \
    X(ECHECKSUM, -5, "checksum mismatch")                            \
    X(ENOTFOUND, -6, "not found")                                    \
    X(ERANGE, -7, "value out of range")                              \
    X(ETIMEDOUT, -8, "timed out")                                    \
    X(EMPI, -9, "MPI error")                                         \
    X(ENET, -10, "network or messaging error")                       \
    X(EINFEASIBLE, -11, "no feasible solution")                      \
    X(EUNSUPPORTED, -12, "unsupported")                              \
    X(ESTATE, -13, "invalid state")                                  \
    X(EBUSY, -14, "resource busy or budget exhausted")               \
    X(EPEER, -15, "peer process failed")

typedef enum {
#define LS_X_ENUM(name, val, desc) LS_##name = val,
    LS_ERRNO_MAP(LS_X_ENUM)
#undef LS_X_ENUM
} ls_status;

/* Records a formatted message for this thread and returns code (for `return ls_err(...)`). */
int ls_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ls_verr(int code, const char *fmt, va_list ap);
/* Prefixes the current message with "prefix: " and returns code (adds context on the way up). */
int ls_err_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). Valid until the next ls_err. */
const char *ls_errmsg(void);
/* Static description and symbolic name ("EINVAL") of a status code. */
const char *ls_strerror(int code);
const char *ls_err_name(int code);

/* Conditions that "cannot happen": checked in release builds too; aborts with file:line. */
#define LS_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) ls_panic(__FILE__, __LINE__, "assertion failed: " #cond); \
    } while (0)
_Noreturn void ls_panic(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Propagates a failing status: LS_TRY(ls_file_read(...)); */
#define LS_TRY(expr)              \
    do {                          \
        int ls_try_rc_ = (expr);  \
        if (ls_try_rc_ < 0) return ls_try_rc_; \
    } while (0)

/* A macro's value as a string literal, for help texts: LS_STR(LS_STEAL_CNN_EPOCHS) is "15". */
#define LS_STR_(x) #x
#define LS_STR(x) LS_STR_(x)

/* ---------------------------------------------------------------- logging */

typedef enum { LS_LOG_DEBUG = 0, LS_LOG_INFO = 1, LS_LOG_WARN = 2, LS_LOG_ERROR = 3, LS_LOG_OFF = 4 } ls_log_level;

/* Level defaults to INFO, or LLMSYS_LOG=debug|info|warn|error|off from the environment. */
void ls_log_set_level(ls_log_level level);
ls_log_level ls_log_get_level(void);
/* Writes "[llmsys LEVEL] message" to stderr when level passes the threshold. Thread-safe. */
void ls_log(ls_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define LS_DEBUG(...) ls_log(LS_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define LS_INFO(...) ls_log(LS_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define LS_WARN(...) ls_log(LS_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define LS_ERROR(...) ls_log(LS_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/* ---------------------------------------------------------------- RNG */

/* xoshiro256** seeded through splitmix64. Deterministic across platforms.
 * ls_rng_split derives an independent stream (per rank, per worker) from a parent
 * without advancing it: split(r, 3) is the same stream every time. */
typedef struct {
    uint64_t s[4];
} ls_rng;

void ls_rng_seed(ls_rng *r, uint64_t seed);
ls_rng ls_rng_split(const ls_rng *r, uint64_t stream);
uint64_t ls_rng_u64(ls_rng *r);
/* Uniform in [0, n); n > 0. Unbiased (rejection). */
uint64_t ls_rng_below(ls_rng *r, uint64_t n);
/* Uniform float in [0, 1). */
float ls_rng_uniform(ls_rng *r);
double ls_rng_uniform_f64(ls_rng *r);
/* Standard normal (Box-Muller). */
float ls_rng_normal(ls_rng *r);
/* Fisher-Yates shuffle of n ints. */
void ls_rng_shuffle_int(ls_rng *r, int *a, size_t n);

/* ---------------------------------------------------------------- memory */

/* Aligned allocation (align: power of two >= sizeof(void*)). NULL on failure
 * (size 0 returns a valid pointer). Free with ls_aligned_free. */
void *ls_aligned_alloc(size_t align, size_t size);
/* Same, zero-filled. */
void *ls_aligned_calloc(size_t align, size_t size);
void ls_aligned_free(void *p);

/* ---------------------------------------------------------------- files */

/* Status of an input path (a file or directory a command reads) that the system refused with
 * errno err: LS_ENOTFOUND when it is not there (ENOENT, ENOTDIR), LS_EINVAL when it may not be
 * read or names no file (EACCES, EPERM, ELOOP, ENAMETOOLONG): both the input's fault, exit 2 at
 * start-up; LS_EIO for the rest (the system's: EIO, EMFILE, ENOMEM, ...). */
int ls_file_input_status(int err);
/* Opens an input file read-only (*fd, close-on-exec; *size its length, size may be NULL).
 * Only regular files are accepted: a FIFO, socket, device or directory is refused at once
 * with LS_EINVAL (never waited on); an open that fails gets ls_file_input_status (a missing
 * file LS_ENOTFOUND, one it may not read LS_EINVAL). Every loader opens its inputs through
 * this or ls_file_read. */
int ls_file_open_input(const char *path, int *fd, size_t *size);
/* 1 when data[0, len) is no text: a NUL byte, or more than 5% control bytes other than
 * whitespace, backspace and escape (bytes >= 0x80, UTF-8 or not, count as text). The one rule
 * of the commands that read text files (train --data, the loader's text sources). */
int ls_is_binary(const void *data, size_t len);
/* Reads a whole regular file (as ls_file_open_input); *data is NUL-terminated (not counted
 * in *len), owned by the caller (free()). Errors name the path. */
int ls_file_read(const char *path, char **data, size_t *len);
/* Writes atomically: temp file in the same directory, fsync, rename. On failure the
 * destination is untouched and the temp file removed. */
int ls_file_write_atomic(const char *path, const void *data, size_t len);
/* Writes "PORT\n" to path atomically: a service's `--port-file`, which scripts wait for. */
int ls_port_file_write(const char *path, int port);
/* Atomic writer for streamed output: open creates "<path>.tmp.<pid>.<6 random chars>" in
 * the destination's directory exclusively (O_EXCL|O_NOFOLLOW: a planted file or link is
 * never opened or followed) and returns a FILE* on it; commit fsyncs, closes and renames
 * (then syncs the directory); abort closes and removes. Every failure removes the temp
 * file. open also removes, with a warning, the temp files that killed writers to the same
 * destination left behind (their pid is gone; same host, same user, regular files only). */
typedef struct {
    void *fp; /* FILE* */
    char *path;
    char *tmp;
} ls_atomic_file;
int ls_atomic_open(ls_atomic_file *af, const char *path);
int ls_atomic_commit(ls_atomic_file *af);
void ls_atomic_abort(ls_atomic_file *af);
/* 1 when host names this machine only: "localhost", an IPv4 address in 127.0.0.0/8
 * ("127.x.com" is not) or the IPv6 loopback "::1" (also "[::1]", and ::ffff:127.x.x.x).
 * Services that listen anywhere else authenticate. */
int ls_host_is_loopback(const char *host);
/* What IP address literal host is: 4 for IPv4 ("127.0.0.1"), 6 for IPv6 ("::1", or in
 * brackets "[::1]"), with its 4 or 16 bytes (network order) in addr; 0 for anything else (a
 * name, garbage). An IPv4-mapped address (::ffff:a.b.c.d) is the IPv4 address a.b.c.d. */
int ls_ip_parse(const char *host, unsigned char addr[16]);
/* LS_OK when addr is an address a service may listen on: an IPv4 or IPv6 literal
 * (ls_ip_parse); else LS_EINVAL "<what>: bad bind address '<addr>' (an IPv4 or IPv6 address
 * such as ...)". The one rule for every listening service (HTTP, the loader's ZeroMQ sockets)
 * and every bind option of the CLI, which refuses a bad one before any work (exit 2). */
int ls_bind_check(const char *what, const char *addr);
/* host as a URL writes it before ":port": an IPv6 literal in brackets ("[::1]"), anything
 * else as it is. Returns out (n bytes). */
const char *ls_url_host(const char *host, char *out, size_t n);
/* 1 if path exists and is a regular file / directory. */
int ls_is_file(const char *path);
int ls_is_dir(const char *path);
/* Whether an output could be written at path, checked before the work that produces it: not
 * empty (LS_EINVAL), not a directory, its directory present and writable (else LS_EIO: an
 * output that cannot be written is an I/O failure, exit 1, found early or not). Errors name the
 * option ("--flag path: ..."). */
int ls_out_path_check(const char *flag, const char *path);
/* 1 when writing out (atomically: a new file renamed over the name) would replace the file
 * in names, also through a symlink or another spelling of its path; when in does not exist
 * (another output), 1 when both name the same new file. 0 when either is NULL. */
int ls_path_replaces(const char *in, const char *out);
/* 1 when list is a comma-separated list of non-empty entries shorter than max characters in
 * all (what strtok would split without silently dropping an entry), else 0. */
int ls_list_ok(const char *list, size_t max);
/* mkdir -p. */
int ls_mkdirs(const char *path);
/* Copies the first max bytes of file from to to (atomically). */
int ls_file_copy(const char *from, const char *to, size_t max);
/* Copies up to max_files regular files of directory src whose names end in ext (NULL: any;
 * dot files skipped), in name order, each cut at max_bytes, into dst; *copied counts them. */
int ls_dir_copy(const char *src, const char *dst, const char *ext, int max_files, size_t max_bytes, int *copied);
/* Switches the calling process (and the processes it starts later) to real-time priority
 * (SCHED_FIFO 1; needs root or CAP_SYS_NICE). */
int ls_sched_realtime(void);

/* ---------------------------------------------------------------- JSON (cJSON) */

struct cJSON;
/* Parses a JSON file; errors name the file and the byte offset of the syntax error. */
int ls_json_read_file(const char *path, struct cJSON **out);
/* Parses a string; what names the source in error messages. */
int ls_json_parse(const char *text, size_t len, const char *what, struct cJSON **out);
/* Byte offset of the first \u0000 escape in the JSON text [text, text + len), or len when there
 * is none. cJSON decodes the escape into a NUL, which ends the C string it lands in: a string
 * holding one would be cut short without a word, so readers refuse it. An escaped backslash
 * before "u0000" is text, not an escape. */
size_t ls_json_nul_escape(const char *text, size_t len);
/* Pretty-prints and writes atomically. */
int ls_json_write_file(const char *path, const struct cJSON *j);
/* Checks that j is an object whose "format" is format and, when version > 0, whose "version" is
 * version; otherwise LS_EFORMAT with a message that names what (the file). */
int ls_json_check_format(const struct cJSON *j, const char *what, const char *format, int version);
/* ls_json_read_file, then ls_json_check_format (*out is NULL when either fails). */
int ls_json_read_format(const char *path, const char *format, int version, struct cJSON **out);
/* Typed getters with defaults: missing key -> def; wrong type -> LS_EINVAL with message. */
int ls_json_get_int(const struct cJSON *obj, const char *key, int def, int *out);
/* 1 (and *out set) when v is a number holding an integer within int's range, else 0: the
 * range check comes before any conversion (a double outside int's range cannot be cast). */
int ls_json_as_int(const struct cJSON *v, int *out);
/* JSON numbers are doubles, exact for integers up to 2^53: the widest integer a JSON field
 * (a seed, a step, an id) may hold. */
#define LS_JSON_INT_MAX ((int64_t)1 << 53)
/* 1 (and *out set) when d is an integer in [lo, hi], else 0 (NaN included); the range check
 * comes before the cast. For integers read as doubles: lo and hi within ±LS_JSON_INT_MAX. */
int ls_f64_as_i64(double d, int64_t lo, int64_t hi, int64_t *out);
/* ls_f64_as_i64 of v's value when v is a number, else 0. */
int ls_json_as_i64(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);
int ls_json_get_double(const struct cJSON *obj, const char *key, double def, double *out);
int ls_json_get_string(const struct cJSON *obj, const char *key, const char *def, const char **out);

/* ---------------------------------------------------------------- timing */

/* Monotonic seconds. */
double ls_now(void);
/* Wall-clock seconds since the epoch. */
double ls_wall_time(void);
/* CPU seconds the calling thread has used. */
double ls_thread_cpu_time(void);
/* CPU seconds the calling process has used (all its threads). */
double ls_process_cpu_time(void);
void ls_sleep_ms(int ms);
/* The median of v[0..n) (mean of the two middle values for even n), sorting v in place
 * (so v[0] and v[n-1] are then its extremes); NAN when n < 1. */
double ls_median(double *v, int n);
/* Quantile q in [0, 1] of v[0..n), linear between order statistics, sorting v in place; NAN when n < 1. */
double ls_quantile(double *v, int n, double q);
/* Sorts v[0..n) ascending. */
void ls_sort_doubles(double *v, size_t n);

/* ---------------------------------------------------------------- progress bar */

/* A one-line progress bar redrawn in place on a TTY (stderr); silent when stderr is not
 * a TTY or LLMSYS_PROGRESS=0, so logs and CI output stay clean. */
typedef struct {
    char label[32];
    int64_t total;
    int64_t done;
    double t0, last_draw;
    int enabled;
    int width;
} ls_progress;

void ls_progress_start(ls_progress *p, const char *label, int64_t total);
/* Updates to `done` of total; fmt (may be NULL) adds a status such as "loss 2.31". */
void ls_progress_update(ls_progress *p, int64_t done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ls_progress_end(ls_progress *p);

/* ---------------------------------------------------------------- misc */

/* Number of CPU cores available to this process. */
int ls_num_cores(void);
/* Bytes of memory this process may use: the machine's physical memory, or less where a memory
 * cgroup of the process (v1 memory.limit_in_bytes or v2 memory.max, its own or an ancestor's)
 * sets a lower limit, as in a container. */
double ls_mem_total(void);
/* The lowest memory limit in bytes that the cgroups listed in proc_cgroup (the format of
 * /proc/self/cgroup) set under root (the cgroup mount, /sys/fs/cgroup), or 0 when none does. */
double ls_mem_cgroup_limit(const char *proc_cgroup, const char *root);
/* How many items of item_bytes each the memory this process may use (ls_mem_total) holds (at least 1): the bound of a
 * size whose buffers grow with it, checked before they are allocated (past it an allocation
 * can only fail, or be killed, or abort under a sanitizer). */
int64_t ls_mem_max_items(double item_bytes);
/* The 1-, 5- and 15-minute load averages of the machine (/proc/loadavg) into la; LS_EIO with
 * all three -1 when they cannot be read. (Benchmarks state the load with their figures.) */
int ls_load_avg(double la[3]);

/* ---------------------------------------------------------------- CPU features (cpu.c) */

/* Feature bits of ls_cpu_features(). */
enum {
    LS_CPU_AVX2 = 1u << 0,
    LS_CPU_FMA = 1u << 1,
    LS_CPU_F16C = 1u << 2,
    LS_CPU_AVX512F = 1u << 3,
    LS_CPU_AVX512BW = 1u << 4,
    LS_CPU_AVX512VL = 1u << 5,
    LS_CPU_AVX512VNNI = 1u << 6,
    LS_CPU_AVX512BF16 = 1u << 7,
    LS_CPU_AMXINT8 = 1u << 8 /* AMX-TILE + AMX-INT8, and the OS lets this process use them */
};
/* SIMD levels of kernel families: avx2 = AVX2+FMA+F16C; avx512 = that plus AVX-512
 * F/BW/VL/VNNI; amx = avx512 plus AMX-INT8 tiles (usable by this process). */
typedef enum { LS_ISA_SCALAR = 0, LS_ISA_AVX2 = 1, LS_ISA_AVX512 = 2, LS_ISA_AMX = 3 } ls_isa;
/* The CPU's feature bits (cpuid, probed once). */
unsigned ls_cpu_features(void);
/* Comma-separated names of the bits in f ("none" when empty), written to buf. */
const char *ls_cpu_features_str(unsigned f, char *buf, size_t n);
/* 1 if this CPU can run kernels of level isa. */
int ls_cpu_isa_supported(ls_isa isa);
/* Level top if this CPU has it, else the best lower level it has. */
ls_isa ls_cpu_isa_upto(ls_isa top);
/* The best level this CPU has, or a lower one named by LLMSYS_ISA=scalar|avx2|avx512|amx
 * (a level the CPU lacks falls back to the best it has). */
ls_isa ls_cpu_isa(void);
/* "scalar", "avx2", "avx512" or "amx". */
const char *ls_isa_name(ls_isa isa);
/* The OpenBLAS kernels to force (OPENBLAS_CORETYPE) when OpenBLAS picked PICKED on a CPU
 * with features F: "SkylakeX" or "Haswell" where it fell back to "Prescott" (SSE3) on a CPU
 * with AVX-512 (F, BW, VL) or AVX2 + FMA; else NULL (its pick stands). */
const char *ls_cpu_blas_core(const char *picked, unsigned f);
/* The kernels OpenBLAS runs in this process (its core name, e.g. "Haswell"). */
const char *ls_cpu_blas_core_picked(void);
/* What ls_runtime_reexec sets. */
enum {
    LS_REEXEC_OMP_PASSIVE = 1u << 0, /* OMP_WAIT_POLICY=passive: OpenMP workers sleep between
                                      * parallel regions instead of spinning */
    LS_REEXEC_BLAS_CORE = 1u << 1,   /* OPENBLAS_CORETYPE, where ls_cpu_blas_core names one */
    LS_REEXEC_ALL = LS_REEXEC_OMP_PASSIVE | LS_REEXEC_BLAS_CORE
};
/* Re-executes this program (/proc/self/exe, same argv and PID) with the settings of WHAT that
 * libraries read only as they load, unless the user set them. Call first thing in main;
 * returns only when no re-exec happened. */
void ls_runtime_reexec(char **argv, unsigned what);

/* ---------------------------------------------------------------- child processes */

/* How ls_spawn_self starts a child; all zero: as fork + exec, nothing changed. */
typedef struct {
    int death_signal;       /* signal the child gets when this process dies (0: none, it may outlive us) */
    int unblock_signals;    /* the child starts with no signal blocked (for a parent that blocks them to sigwait) */
    const char *log;        /* the child's stdout and stderr go to this file (NULL: this process's) */
    int log_append;         /* append to log instead of truncating it */
    const char *const *env; /* NAME, VALUE, NAME, VALUE, ..., NULL: set (overwritten) in the child only */
} ls_spawn_opts;

/* Starts exe (an llmsys binary; argv NULL-terminated, argv[0] included) as a child as o (may be
 * NULL) says, after flushing stdio; *pid gets its id. The child exits 1 if this process died before
 * its death signal was set, 127 (with a line on its stderr) if exec fails. */
int ls_spawn_self(const char *exe, const char *const *argv, const ls_spawn_opts *o, pid_t *pid);

/* Human-readable byte count into buf ("12.3 MiB"). Returns buf. */
const char *ls_fmt_bytes(double bytes, char *buf, size_t n);
/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
size_t ls_rss_bytes(void);
/* 64-bit xxHash (XXH3) of a buffer, used for every checksum on disk and on the wire. */
uint64_t ls_hash64(const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* LLMSYS_CORE_H */
