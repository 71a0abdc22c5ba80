/* test_core.c - status messages, RNG determinism and splitting, atomic files, JSON. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "test.h"

static void test_errors(void) {
    int rc = ls_err(LS_EINVAL, "steps must be > 0, got %d", -3);
    CHECK_EQ_INT(rc, LS_EINVAL);
    CHECK(strcmp(ls_errmsg(), "steps must be > 0, got -3") == 0);
    ls_err_wrap(rc, "config");
    CHECK(strcmp(ls_errmsg(), "config: steps must be > 0, got -3") == 0);
    ls_err(LS_ENOTFOUND, "%s", ""); /* no message yet: the wrap names the status */
    ls_err_wrap(LS_ENOTFOUND, "model.st");
    char want[128];
    snprintf(want, sizeof want, "model.st: %s", ls_strerror(LS_ENOTFOUND));
    CHECK_MSG(strcmp(ls_errmsg(), want) == 0 && strlen(want) > 12, "%s", ls_errmsg());
    CHECK(strcmp(ls_err_name(LS_ECHECKSUM), "ECHECKSUM") == 0);
    CHECK(strcmp(ls_strerror(LS_OK), "success") == 0);
}

static void test_rng(void) {
    ls_rng a, b;
    ls_rng_seed(&a, 42);
    ls_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHECK(ls_rng_u64(&a) == ls_rng_u64(&b));
    ls_rng c1 = ls_rng_split(&a, 1), c1b = ls_rng_split(&a, 1), c2 = ls_rng_split(&a, 2);
    uint64_t x = ls_rng_u64(&c1);
    CHECK(x == ls_rng_u64(&c1b));
    CHECK(x != ls_rng_u64(&c2));
    /* uniform mean and normal moments within 5 standard errors */
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) s += ls_rng_uniform(&a);
    CHECK_NEAR(s / n, 0.5, 5 * sqrt(1.0 / 12 / n));
    s = 0;
    for (int i = 0; i < n; i++) {
        double z = ls_rng_normal(&a);
        s += z;
        s2 += z * z;
    }
    CHECK_NEAR(s / n, 0.0, 5 / sqrt(n));
    CHECK_NEAR(s2 / n, 1.0, 5 * sqrt(2.0 / n));
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) counts[ls_rng_below(&a, 7)]++;
    for (int i = 0; i < 7; i++) CHECK_NEAR(counts[i], 10000, 500);
    /* shuffle: all 6 orders of 3 items equally likely (a Sattolo-style slip makes only the
     * 2 cyclic ones); 12000 shuffles, 2000 each, within 5 standard errors (~183) */
    int perm[6] = {0};
    for (int t = 0; t < 12000; t++) {
        int v[3] = {0, 1, 2};
        ls_rng_shuffle_int(&a, v, 3);
        perm[v[0] * 2 + (v[1] > v[2])]++;
    }
    for (int i = 0; i < 6; i++) CHECK_NEAR(perm[i], 2000, 5 * sqrt(12000 * (1.0 / 6) * (5.0 / 6)));
}

static void test_files(void) {
    char dir[] = "/tmp/llmsys-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/x.txt", dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    CHECK(ls_mkdirs(sub) == LS_OK);
    CHECK(ls_file_write_atomic(path, "hello", 5) == LS_OK);
    char *data;
    size_t len;
    CHECK(ls_file_read(path, &data, &len) == LS_OK);
    CHECK(len == 5 && memcmp(data, "hello", 5) == 0 && data[5] == '\0');
    free(data);
    /* a failed atomic write leaves the old content */
    ls_atomic_file af;
    CHECK(ls_atomic_open(&af, path) == LS_OK);
    fputs("partial", af.fp);
    ls_atomic_abort(&af);
    CHECK(ls_file_read(path, &data, &len) == LS_OK && len == 5);
    free(data);
    CHECK(ls_file_read("/nonexistent/llmsys", &data, &len) == LS_ENOTFOUND);
    CHECK(strstr(ls_errmsg(), "/nonexistent/llmsys") != NULL);
    /* an input path the system refuses: missing or not there is LS_ENOTFOUND, one it may not read
     * LS_EINVAL (the input's fault, as a missing one), the system's own failures LS_EIO */
    CHECK_EQ_INT(ls_file_input_status(ENOENT), LS_ENOTFOUND);
    CHECK_EQ_INT(ls_file_input_status(ENOTDIR), LS_ENOTFOUND);
    CHECK_EQ_INT(ls_file_input_status(EACCES), LS_EINVAL);
    CHECK_EQ_INT(ls_file_input_status(EPERM), LS_EINVAL);
    CHECK_EQ_INT(ls_file_input_status(ELOOP), LS_EINVAL);
    CHECK_EQ_INT(ls_file_input_status(EIO), LS_EIO);
    CHECK_EQ_INT(ls_file_input_status(EMFILE), LS_EIO);
    /* a file of mode 000, read by a user who is not its owner (root reads it: a child that is
     * root reads it as nobody); the open's EACCES is LS_EINVAL naming the file */
    snprintf(path, sizeof path, "%s/noread.txt", dir);
    CHECK(ls_file_write_atomic(path, "x", 1) == LS_OK && chmod(path, 0) == 0 && chmod(dir, 0755) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(77);
        int rc = ls_file_read(path, &data, &len);
        _exit(rc == LS_EINVAL && strstr(ls_errmsg(), "noread.txt: Permission denied") ? 0 : 1);
    }
    int st = -1;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    CHECK_MSG(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 77, "child exit %d", WEXITSTATUS(st));
    if (WEXITSTATUS(st) == 77) printf("  (skipped the unreadable file: cannot become nobody)\n");

    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "steps", 12);
    cJSON_AddStringToObject(j, "name", "tiny");
    snprintf(path, sizeof path, "%s/r.json", dir);
    CHECK(ls_json_write_file(path, j) == LS_OK);
    cJSON_Delete(j);
    CHECK(ls_json_read_file(path, &j) == LS_OK);
    int steps;
    const char *name;
    CHECK(ls_json_get_int(j, "steps", 0, &steps) == LS_OK && steps == 12);
    CHECK(ls_json_get_string(j, "name", NULL, &name) == LS_OK && !strcmp(name, "tiny"));
    CHECK(ls_json_get_int(j, "name", 0, &steps) == LS_EINVAL);
    int64_t v = 7;
    CHECK(ls_json_as_i64(cJSON_GetObjectItem(j, "steps"), 0, LS_JSON_INT_MAX, &v) && v == 12);
    CHECK(!ls_json_as_i64(cJSON_GetObjectItem(j, "steps"), 13, LS_JSON_INT_MAX, &v) && v == 12);
    CHECK(!ls_json_as_i64(cJSON_GetObjectItem(j, "name"), 0, LS_JSON_INT_MAX, &v));
    cJSON_Delete(j);
    /* the JSON integer limit: 2^53 and -2^53 are in, one more or a fraction is out, NaN is out */
    const double two53 = 9007199254740992.0;
    CHECK(ls_f64_as_i64(two53, 0, LS_JSON_INT_MAX, &v) && v == LS_JSON_INT_MAX);
    CHECK(ls_f64_as_i64(-two53, -LS_JSON_INT_MAX, 0, &v) && v == -LS_JSON_INT_MAX);
    CHECK(!ls_f64_as_i64(two53 * 2, 0, LS_JSON_INT_MAX, &v) && !ls_f64_as_i64(1e300, 0, LS_JSON_INT_MAX, &v));
    CHECK(!ls_f64_as_i64(2.5, 0, 10, &v) && !ls_f64_as_i64(-1, 0, 10, &v) && !ls_f64_as_i64(NAN, 0, 10, &v));
    CHECK(ls_f64_as_i64(10, 0, 10, &v) && v == 10 && !ls_f64_as_i64(11, 0, 10, &v));
    CHECK(ls_file_write_atomic(path, "{\"a\": [1, 2", 11) == LS_OK);
    CHECK(ls_json_read_file(path, &j) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "r.json") != NULL);
    /* a \u0000 escape would end the decoded C string early: refused, naming its byte; an escaped
     * backslash before "u0000" is text and stays whole */
    const char *nul = "{\"a\":\"x\\u0000y\"}", *lit = "{\"a\":\"x\\\\u0000y\"}";
    CHECK(ls_json_nul_escape(nul, strlen(nul)) == 7);
    CHECK(ls_json_nul_escape(lit, strlen(lit)) == strlen(lit));
    CHECK(ls_json_nul_escape("\"\\\\\\u0000\"", 10) == 3); /* an escaped backslash, then the escape */
    CHECK(ls_json_nul_escape("\"\\u000", 6) == 6);         /* cut short: no escape */
    CHECK(ls_json_parse(nul, strlen(nul), "nul.json", &j) == LS_EFORMAT && j == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "nul.json: a \\u0000 escape at byte 7") != NULL, "%s", ls_errmsg());
    CHECK(ls_json_parse(lit, strlen(lit), "lit.json", &j) == LS_OK &&
          ls_json_get_string(j, "a", NULL, &name) == LS_OK && !strcmp(name, "x\\u0000y"));
    cJSON_Delete(j);
    CHECK(test_rmtree(dir) == 0);
}

static void test_alloc(void) {
    float *p = ls_aligned_calloc(64, 1000 * sizeof(float));
    CHECK(p && ((uintptr_t)p % 64) == 0 && p[999] == 0.0f);
    ls_aligned_free(p);
    char buf[32];
    CHECK(strcmp(ls_fmt_bytes(1536, buf, sizeof buf), "1.5 KiB") == 0);
    CHECK(ls_rss_bytes() > 0);
}

static void test_median(void) {
    double odd[5] = {3, -1, 7, 2, 2}, even[4] = {10, 1, 4, 3}, one[1] = {5};
    CHECK_NEAR(ls_median(odd, 5), 2, 0);
    CHECK(odd[0] == -1 && odd[4] == 7); /* sorted in place: the extremes at the ends */
    CHECK_NEAR(ls_median(even, 4), 3.5, 0);
    CHECK_NEAR(ls_median(one, 1), 5, 0);
    CHECK(isnan(ls_median(one, 0)));
    /* quantiles: linear between order statistics (numpy's default), by hand */
    double q[5] = {4, 0, 3, 1, 2};
    CHECK_NEAR(ls_quantile(q, 5, 0.25), 1, 0);
    CHECK_NEAR(ls_quantile(q, 5, 0.6), 2.4, 1e-12);
    CHECK_NEAR(ls_quantile(q, 5, 1), 4, 0);
    CHECK_NEAR(ls_quantile(q, 5, 0), 0, 0);
    CHECK(isnan(ls_quantile(q, 0, 0.5)));
}

/* What counts as this machine only, for the ZeroMQ CURVE policy and the HTTP services' binds. */
static void test_loopback(void) {
    static const char *const yes[] = {"127.0.0.1", "127.1.2.3",       "127.255.255.255",  "localhost",         "[::1]",
                                      "::1",       "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "[::ffff:127.9.8.7]"};
    static const char *const no[] = {
        "0.0.0.0", "128.0.0.1", "126.255.255.255", "10.0.0.1", "127.x.com", "127.0.0.1.nip.io", "localhost2", "", "1"};
    static const char *const no6[] = {"::",          "[::]",        "::2",  "fe80::1", "::ffff:10.0.0.1",
                                      "::127.0.0.1", "[127.0.0.1]", "[::1", "::1]",    "[[::1]]",
                                      "::zz",        "::1%lo"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK_MSG(ls_host_is_loopback(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) CHECK_MSG(!ls_host_is_loopback(no[i]), "%s", no[i]);
    for (size_t i = 0; i < sizeof no6 / sizeof no6[0]; i++) CHECK_MSG(!ls_host_is_loopback(no6[i]), "%s", no6[i]);
}

/* IP literals: the family and bytes of what the HTTP services bind, and how a URL writes them. */
static void test_ip_parse(void) {
    static const char *const v4[] = {"127.0.0.1", "0.0.0.0", "::ffff:10.1.2.3"}; /* IPv4-mapped is IPv4 */
    static const char *const v6[] = {"::1", "[::1]", "::", "[::]", "fe80::1", "2001:db8::8a2e:370:7334"};
    static const char *const none[] = {"1.2.3", "1.2.3.256", "::zz", "[127.0.0.1]", "[::1",      "::1]",
                                       "[]",    "",          " ::1", "localhost",   "fe80::1%lo"};
    unsigned char a[16];
    for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++) CHECK_MSG(ls_ip_parse(v4[i], a) == 4, "%s", v4[i]);
    for (size_t i = 0; i < sizeof v6 / sizeof v6[0]; i++) CHECK_MSG(ls_ip_parse(v6[i], a) == 6, "%s", v6[i]);
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) CHECK_MSG(ls_ip_parse(none[i], a) == 0, "%s", none[i]);
    static const unsigned char lo6[16] = {[15] = 1}, ten[4] = {10, 1, 2, 3};
    CHECK(ls_ip_parse("[::1]", a) == 6 && !memcmp(a, lo6, 16));
    CHECK(ls_ip_parse("::ffff:10.1.2.3", a) == 4 && !memcmp(a, ten, 4));
    char b[64];
    CHECK_MSG(!strcmp(ls_url_host("::1", b, sizeof b), "[::1]"), "%s", b);
    CHECK_MSG(!strcmp(ls_url_host("[::1]", b, sizeof b), "[::1]"), "%s", b);
    CHECK_MSG(!strcmp(ls_url_host("127.0.0.1", b, sizeof b), "127.0.0.1"), "%s", b);
    CHECK_MSG(!strcmp(ls_url_host("localhost", b, sizeof b), "localhost"), "%s", b);
}

/* Writes text to dir/rel, making its directories. */
static void put(const char *dir, const char *rel, const char *text) {
    char path[512], sub[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    snprintf(sub, sizeof sub, "%s", path);
    *strrchr(sub, '/') = '\0';
    CHECK(ls_mkdirs(sub) == LS_OK);
    CHECK(ls_file_write_atomic(path, text, strlen(text)) == LS_OK);
}

/* The memory limit of a process's cgroups, on a fake /proc/self/cgroup and cgroup mount. */
static void test_mem_cgroup(void) {
    char dir[] = "/tmp/llmsys-test-XXXXXX", proc[256], root[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(proc, sizeof proc, "%s/cgroup", dir);
    snprintf(root, sizeof root, "%s/fs", dir);
    /* v1 (hybrid layout): the process's own cgroup is unlimited, its parent is not, the mount's
     * root is unlimited; the v2 line's memory.max says "max" */
    put(dir, "cgroup", "9:name=systemd:/\n4:cpuacct,memory:/svc/job-1/\n1:cpu:/\n0::/svc\n");
    put(dir, "fs/memory/svc/job-1/memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "fs/memory/svc/memory.limit_in_bytes", "268435456\n");
    put(dir, "fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(dir, "fs/unified/svc/memory.max", "max\n");
    put(dir, "fs/cpu/svc/job-1/memory.limit_in_bytes", "1000\n"); /* not the memory controller */
    CHECK(ls_mem_cgroup_limit(proc, root) == 268435456.0);
    /* a lower v2 limit (pure v2 layout: the unified tree is the mount itself) wins */
    put(dir, "fs/svc/memory.max", "134217728\n");
    CHECK(ls_mem_cgroup_limit(proc, root) == 134217728.0);
    /* no limit anywhere, a missing file, an empty or garbage one: 0 */
    put(dir, "cgroup", "3:cpu,cpuacct:/a\n0::/\nnonsense\n");
    CHECK(ls_mem_cgroup_limit(proc, root) == 0);
    put(dir, "cgroup", "4:memory:/nowhere\n");
    put(dir, "fs/memory/memory.limit_in_bytes", "garbage\n");
    CHECK(ls_mem_cgroup_limit(proc, root) == 0);
    snprintf(proc, sizeof proc, "%s/missing", dir);
    CHECK(ls_mem_cgroup_limit(proc, root) == 0);
    /* this process: at least one byte, at most the machine's memory */
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE), m = ls_mem_total();
    CHECK(m >= 1 && m <= phys);
    CHECK(test_rmtree(dir) == 0);
}

/* OpenBLAS's Prescott fallback is replaced by the best kernels the features run; any other
 * pick, and a CPU without AVX2 + FMA, are left alone */
static void test_blas_core(void) {
    unsigned avx2 = LS_CPU_AVX2 | LS_CPU_FMA | LS_CPU_F16C;
    unsigned avx512 = avx2 | LS_CPU_AVX512F | LS_CPU_AVX512BW | LS_CPU_AVX512VL;
    CHECK(!strcmp(ls_cpu_blas_core("Prescott", avx512 | LS_CPU_AVX512VNNI | LS_CPU_AVX512BF16), "SkylakeX"));
    CHECK(!strcmp(ls_cpu_blas_core("Prescott", avx512), "SkylakeX"));
    CHECK(!strcmp(ls_cpu_blas_core("Prescott", avx2 | LS_CPU_AVX512F), "Haswell")); /* no BW/VL */
    CHECK(!strcmp(ls_cpu_blas_core("Prescott", avx2), "Haswell"));
    CHECK(ls_cpu_blas_core("Prescott", LS_CPU_AVX2) == NULL); /* AVX2 without FMA */
    CHECK(ls_cpu_blas_core("Prescott", 0) == NULL);
    CHECK(ls_cpu_blas_core("Haswell", avx512) == NULL);
    CHECK(ls_cpu_blas_core("Zen", avx2) == NULL);
    CHECK(ls_cpu_blas_core("SkylakeX", avx512) == NULL);
    CHECK(ls_cpu_blas_core(NULL, avx512) == NULL);
    /* this process: OpenBLAS names its kernels */
    const char *k = ls_cpu_blas_core_picked();
    CHECK(k && *k);
    /* test binaries run the kernels the CLI runs (test.h): a Prescott fallback was replaced */
    fprintf(stderr, "  OpenBLAS kernels in this test: %s\n", k ? k : "?");
    CHECK_MSG(getenv("OPENBLAS_CORETYPE") || ls_cpu_blas_core(k, ls_cpu_features()) == NULL,
              "OpenBLAS runs %s here; the CLI would run %s", k, ls_cpu_blas_core(k, ls_cpu_features()));
}

int main(void) {
    RUN(test_errors);
    RUN(test_rng);
    RUN(test_files);
    RUN(test_alloc);
    RUN(test_median);
    RUN(test_loopback);
    RUN(test_ip_parse);
    RUN(test_mem_cgroup);
    RUN(test_blas_core);
    return TEST_RESULT();
}
