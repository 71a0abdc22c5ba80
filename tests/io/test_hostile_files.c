/* test_hostile_files.c - crafted inputs that once crashed, hung, overflowed or were silently
 * accepted (issue 17, items 1-5): each is written here and must be refused cleanly. The
 * reliability table in docs/reliability.md names the function that keeps each case. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/loader.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/safetensors.h"
#include "llmsys/serve.h"
#include "llmsys/steal.h"
#include "llmsys/train.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-hostile-XXXXXX";

static const char *at(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A safetensors file from a header string and a data section. */
static void write_st(const char *path, const char *hdr, const void *data, size_t dlen) {
    size_t hl = strlen(hdr), n = 8 + hl + dlen;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    CHECK(ls_file_write_atomic(path, b, n) == LS_OK);
    free(b);
}

static int count_entries_with(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

/* ---------------------------------------------------------------- 1: two metadata objects */

static void test_duplicate_metadata(void) {
    float v[2] = {1, 2};
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)ls_hash64(v, sizeof v));
    /* The first object is the larger: the entries of the second were once written past a
     * buffer reallocated to the second's size while the count went on from the first's. */
    char hdr[4096];
    int o = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\"", sum);
    for (int i = 0; i < 60; i++) o += snprintf(hdr + o, sizeof hdr - (size_t)o, ",\"k%d\":\"v\"", i);
    snprintf(hdr + o, sizeof hdr - (size_t)o,
             "},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"__metadata__\":{\"a\":\"b\"}}");
    write_st(at("dupmeta.safetensors"), hdr, v, sizeof v);
    ls_st_file *f = NULL;
    CHECK(ls_st_open(at("dupmeta.safetensors"), &f) == LS_EFORMAT && f == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "'__metadata__' appears twice") != NULL, "%s", ls_errmsg());
    ls_st_close(f);
    /* the same tensor name twice, and a metadata key twice */
    snprintf(
        hdr, sizeof hdr,
        "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\"},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        sum);
    write_st(at("duptensor.safetensors"), hdr, v, sizeof v);
    CHECK(ls_st_open(at("duptensor.safetensors"), &f) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "'x' appears twice") != NULL);
    snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\",\"llmsys.xxh3\":\"0\"}}", sum);
    write_st(at("dupkey.safetensors"), hdr, v, sizeof v);
    CHECK(ls_st_open(at("dupkey.safetensors"), &f) == LS_EFORMAT);
    /* fractional data offsets */
    snprintf(
        hdr, sizeof hdr,
        "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\"},\"x\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0.5,1.5]}}",
        sum);
    write_st(at("fracoff.safetensors"), hdr, v, sizeof v);
    CHECK(ls_st_open(at("fracoff.safetensors"), &f) == LS_EFORMAT);
}

/* ---------------------------------------------------------------- 2: alignment, checksums */

/* Rewrites an llmsys file with `extra` spaces appended to its header: the data (and so the
 * checksum) are unchanged, but every tensor moves by `extra` bytes in the file. */
static void pad_header(const char *src, const char *dst, int extra) {
    char *d;
    size_t n;
    CHECK(ls_file_read(src, &d, &n) == LS_OK);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)d[i];
    unsigned char *b = malloc(n + (size_t)extra);
    uint64_t nl = hl + (uint64_t)extra;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(nl >> (8 * i));
    memcpy(b + 8, d + 8, hl);
    memset(b + 8 + hl, ' ', (size_t)extra);
    memcpy(b + 8 + hl + extra, d + 8 + hl, n - 8 - hl);
    CHECK(ls_file_write_atomic(dst, b, n + (size_t)extra) == LS_OK);
    free(b);
    free(d);
}

/* A tiny model's checkpoint as llmsys writes it (aligned, checksummed). */
static const char *tiny_ckpt(ls_model_config *cfg) {
    const char *ok = at("aligned.safetensors");
    CHECK(ls_model_config_named("tiny", cfg) == LS_OK);
    if (access(ok, F_OK) == 0) return ok;
    ls_model *m = NULL;
    CHECK(ls_model_init(&m, cfg, 7) == LS_OK);
    if (m) CHECK(ls_ckpt_save(ok, m, 3, NULL, 0) == LS_OK);
    ls_model_free(m);
    return ok;
}

static void test_misaligned_checkpoint(void) {
    ls_model_config cfg;
    const char *ok = tiny_ckpt(&cfg), *odd = at("odd.safetensors");
    pad_header(ok, odd, 3); /* header length no longer a multiple of 4 */
    ls_st_file *a = NULL, *b = NULL;
    CHECK(ls_st_open(ok, &a) == LS_OK && ls_st_open(odd, &b) == LS_OK);
    if (!a || !b) return;
    int misplaced = 0;
    for (int i = 0; i < ls_st_count(b); i++) {
        const ls_st_tensor *t = ls_st_get(b, i), *u = ls_st_find(a, t->name);
        CHECK_MSG((uintptr_t)t->data % ls_dtype_size(t->dtype) == 0, "%s misaligned", t->name);
        CHECK(u && u->nbytes == t->nbytes && memcmp(u->data, t->data, t->nbytes) == 0);
        misplaced += ls_dtype_size(t->dtype) > 1;
    }
    CHECK(misplaced > 0);
    ls_st_close(a);
    ls_st_close(b);
    /* the callers that loaded floats from the mapping directly (UBSan reported them) */
    int bits[64];
    for (int l = 0; l < cfg.n_layer; l++) bits[l] = l % 2 ? 4 : 8;
    CHECK(ls_quant_checkpoint(odd, bits, cfg.n_layer, 64, at("odd-q.safetensors")) == LS_OK);
    ls_engine *e = NULL;
    CHECK(ls_engine_open(&e, odd, NULL) == LS_OK);
    ls_engine_free(e);
    ls_plan_arch arch;
    CHECK(ls_plan_resolve_model(NULL, odd, &arch) == LS_OK);
    double w_ok[64 * LS_PLAN_NBITS], w_odd[64 * LS_PLAN_NBITS];
    CHECK(ls_plan_quality_from_checkpoint(ok, &arch, w_ok) == LS_OK);
    CHECK(ls_plan_quality_from_checkpoint(odd, &arch, w_odd) == LS_OK);
    CHECK(memcmp(w_ok, w_odd, sizeof(double) * (size_t)arch.n_layer * LS_PLAN_NBITS) == 0);
}

/* Removes the "llmsys.xxh3" entry from an llmsys file's header (keeping its length). */
static void strip_checksum(const char *src, const char *dst, int corrupt) {
    char *d;
    size_t n;
    CHECK(ls_file_read(src, &d, &n) == LS_OK);
    char *k = strstr(d + 8, "\"llmsys.xxh3\":\"");
    CHECK(k != NULL);
    if (!k) return;
    /* "llmsys.xxh3":"<16 hex>" becomes "llmsys.xxhX":"<16 hex>": the key is gone */
    k[11] = 'X';
    if (corrupt) {
        float nan = NAN;
        memcpy(d + n - 4, &nan, 4); /* a NaN weight in the last tensor */
    }
    CHECK(ls_file_write_atomic(dst, d, n) == LS_OK);
    free(d);
}

static void test_checksum_required(void) {
    ls_model_config cfg;
    const char *ok = tiny_ckpt(&cfg), *bad = at("nosum.safetensors");
    strip_checksum(ok, bad, 1);
    ls_st_file *f = NULL;
    CHECK(ls_st_open(bad, &f) == LS_ECHECKSUM && f == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "no llmsys.xxh3 checksum") && strstr(ls_errmsg(), "LLMSYS_ALLOW_UNCHECKED"), "%s",
              ls_errmsg());
    ls_engine *e = NULL;
    CHECK(ls_engine_open(&e, bad, NULL) == LS_ECHECKSUM && e == NULL);
    /* the documented way to accept one: the flag, or the environment */
    CHECK(ls_st_open_ex(bad, LS_ST_ALLOW_UNCHECKED, &f) == LS_OK);
    ls_st_close(f);
    setenv("LLMSYS_ALLOW_UNCHECKED", "1", 1);
    CHECK(ls_st_open(bad, &f) == LS_OK);
    ls_st_close(f);
    setenv("LLMSYS_ALLOW_UNCHECKED", "0", 1);
    CHECK(ls_st_open(bad, &f) == LS_ECHECKSUM);
    unsetenv("LLMSYS_ALLOW_UNCHECKED");
    /* a present checksum is always verified, flag or not */
    char *d;
    size_t n;
    CHECK(ls_file_read(ok, &d, &n) == LS_OK);
    d[n - 2] ^= 0x40;
    CHECK(ls_file_write_atomic(bad, d, n) == LS_OK);
    free(d);
    CHECK(ls_st_open_ex(bad, LS_ST_ALLOW_UNCHECKED, &f) == LS_ECHECKSUM);
}

/* ---------------------------------------------------------------- 3: sizes before arithmetic */

static void test_json_int_range(void) {
    const char *js = "{\"a\":2147483647,\"b\":2147483648,\"c\":-2147483648,\"d\":-2147483649,\"e\":1e300,"
                     "\"f\":-1e300,\"g\":2.5,\"h\":\"7\"}";
    cJSON *j = NULL;
    CHECK(ls_json_parse(js, strlen(js), "t", &j) == LS_OK);
    int v = 0;
    CHECK(ls_json_get_int(j, "a", 0, &v) == LS_OK && v == 2147483647);
    CHECK(ls_json_get_int(j, "c", 0, &v) == LS_OK && v == -2147483647 - 1);
    const char *bad[] = {"b", "d", "e", "f", "g", "h"};
    for (int i = 0; i < 6; i++) {
        v = 12345;
        CHECK_MSG(ls_json_get_int(j, bad[i], 0, &v) == LS_EINVAL && v == 12345, "key %s", bad[i]);
    }
    CHECK(ls_json_get_int(j, "missing", 9, &v) == LS_OK && v == 9);
    cJSON_Delete(j);
    /* a plan file's layer bounds beyond int */
    const char *plan = "{\"format\":\"llmsys-plan\",\"version\":1,\"model\":{\"n_layer\":2},"
                       "\"stages\":[{\"layers\":[0,1e300],\"bits\":[8,8]}]}";
    ls_plan pl;
    CHECK(ls_plan_parse(plan, strlen(plan), "plan", 0, &pl) == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "layer bounds must be integers") != NULL, "%s", ls_errmsg());
}

static void test_mix_overflow(void) {
    ls_loader_mix mix;
    const char *cases[][2] = {
        {"{\"n_ctx\":2147483647,\"sources\":[{\"name\":\"a\",\"path\":\"/tmp\"}]}", "n_ctx"},
        {"{\"n_ctx\":1e300,\"sources\":[{\"name\":\"a\",\"path\":\"/tmp\"}]}", "n_ctx"},
        {"{\"seed\":1e300,\"sources\":[{\"name\":\"a\",\"path\":\"/tmp\"}]}", "seed"},
        {"{\"seed\":-1,\"sources\":[{\"name\":\"a\",\"path\":\"/tmp\"}]}", "seed"},
        {"{\"sources\":[{\"name\":\"a\",\"path\":\"/tmp\"}],\"schedule\":[{\"step\":1e300,\"weights\":{\"a\":1}}]}",
         "step"},
    };
    for (int i = 0; i < 5; i++) {
        int rc = ls_loader_mix_parse(cases[i][0], NULL, &mix);
        CHECK_MSG(rc == LS_EINVAL && strstr(ls_errmsg(), cases[i][1]), "case %d: rc %d: %s", i, rc, ls_errmsg());
        if (rc == LS_OK) ls_loader_mix_free(&mix);
    }
}

/* A victim.bin from its parts, with a valid trailing checksum (it is not a MAC: anyone can
 * recompute it, so the loader must survive whatever a valid-checksum file declares). */
typedef struct {
    unsigned char b[4096];
    size_t n;
} vbuf;
static void vput(vbuf *v, const void *p, size_t n) {
    memcpy(v->b + v->n, p, n);
    v->n += n;
}
static void vput64(vbuf *v, int64_t x) { vput(v, &x, 8); }
static void vheader(vbuf *v, uint32_t type, int32_t d, int32_t k, int32_t c, int32_t h, int32_t w) {
    v->n = 0;
    vput(v, "LSVICTIM", 8);
    uint32_t hdr[8] = {1, type, (uint32_t)d, (uint32_t)k, (uint32_t)c, (uint32_t)h, (uint32_t)w, 0};
    vput(v, hdr, sizeof hdr);
    float lo = 0, hi = 1;
    vput(v, &lo, 4);
    vput(v, &hi, 4);
}
static int vload(vbuf *v, const char *name) {
    uint64_t h = ls_hash64(v->b, v->n);
    vput(v, &h, 8);
    CHECK(ls_file_write_atomic(at(name), v->b, v->n) == LS_OK);
    ls_victim *vic = NULL;
    int rc = ls_victim_load(at(name), &vic);
    ls_victim_free(vic);
    return rc;
}
static void vmlp(vbuf *v, int nl, const int *sizes) {
    vput64(v, nl);
    vput64(v, nl + 1);
    vput(v, sizes, sizeof(int) * (size_t)(nl + 1));
}

static long max_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A well-formed single-layer MLP body d -> k: the header alone must decide these cases. */
static void vmlp_body(vbuf *v, int d, int k) {
    int sizes[2] = {d, k};
    vmlp(v, 1, sizes);
    vput64(v, (int64_t)d * k + k);
    for (int i = 0; i < d * k + k + 1; i++) { /* weights, biases, then svm_scale */
        float x = i == d * k + k ? 1.0f : 0.01f * (float)(i % 7);
        vput(v, &x, 4);
    }
}

static void test_victim_headers(void) {
    vbuf v;
    vheader(&v, LS_VICTIM_MLP, 20, 2, 1, 1, 20); /* the valid form of the next case */
    vmlp_body(&v, 20, 2);
    CHECK_MSG(vload(&v, "good.bin") == LS_OK, "%s", ls_errmsg());
    /* negative dimensions whose product matches d (once served with shape [-1,-1,20]) */
    vheader(&v, LS_VICTIM_MLP, 20, 2, -1, -1, 20);
    vmlp_body(&v, 20, 2);
    CHECK(vload(&v, "neg.bin") == LS_EFORMAT);
    CHECK_MSG(strstr(ls_errmsg(), "bad header") != NULL, "%s", ls_errmsg());
    /* dimensions near 2^31: their product overflows int64 */
    vheader(&v, LS_VICTIM_MLP, 64, 2, 2147483647, 2147483647, 2147483647);
    vmlp_body(&v, 64, 2);
    CHECK(vload(&v, "huge.bin") == LS_EFORMAT);
    vheader(&v, LS_VICTIM_MLP, 16, 2, 65536, 65536, 16);
    vmlp_body(&v, 16, 2);
    CHECK(vload(&v, "wrap.bin") == LS_EFORMAT);
    /* a 96-byte MLP whose layer sizes imply 52M parameters: refused by the file length,
     * before any allocation (this once allocated and initialised them first) */
    long rss0 = max_rss_kb();
    int sizes[3] = {784, 1 << 16, 10};
    vheader(&v, LS_VICTIM_MLP, 784, 10, 1, 28, 28);
    vmlp(&v, 2, sizes);
    vput64(&v, (int64_t)784 * 65536 + 65536 + 655360 + 10);
    float zero[2] = {0, 0};
    vput(&v, zero, 4);
    int rc = vload(&v, "bomb.bin");
    CHECK_EQ_INT(v.n, 96);
    CHECK_MSG(rc == LS_EFORMAT && strstr(ls_errmsg(), "file holds at most"), "rc %d: %s", rc, ls_errmsg());
    long grew = max_rss_kb() - rss0;
    CHECK_MSG(grew < 64 * 1024, "peak RSS grew by %ld KiB", grew);
    /* 4 layers of 2^20: 2^41 parameters (8 TiB per buffer) declared in a few bytes */
    int big[5] = {784, 1 << 20, 1 << 20, 1 << 20, 10};
    vheader(&v, LS_VICTIM_MLP, 784, 10, 1, 28, 28);
    vmlp(&v, 4, big);
    vput64(&v, 3 * ((int64_t)1 << 40));
    CHECK(vload(&v, "tib.bin") == LS_EFORMAT);
    /* a CNN within ls_cnn_init's limits whose dense layer implies 2^38 parameters */
    vheader(&v, LS_VICTIM_CNN, 65536, 10, 1, 256, 256);
    int32_t arch[4] = {1, 1024, 3, 65536};
    vput64(&v, 4);
    vput(&v, arch, sizeof arch);
    vput64(&v, 1);
    vput(&v, zero, 4);
    CHECK(vload(&v, "cnnbomb.bin") == LS_EFORMAT);
    grew = max_rss_kb() - rss0;
    CHECK_MSG(grew < 64 * 1024, "peak RSS grew by %ld KiB", grew);
}

static int fail_oracle(void *ctx, const float *x, int n, int32_t *labels, float *proba, int *got_proba) {
    (void)ctx, (void)x, (void)n, (void)labels, (void)proba, (void)got_proba;
    return ls_err(LS_ENET, "test oracle: never answers");
}

static void test_replica_shapes(void) {
    /* input shape products that overflow 32 (and 64) bits */
    ls_steal_opts o;
    ls_steal_opts_default(&o);
    o.k = 2;
    o.budget = 10;
    int shapes[][3] = {{65536, 65536, 1}, {2147483647, 2147483647, 2147483647}, {-1, -1, 4}};
    for (int i = 0; i < 3; i++) {
        o.c = shapes[i][0], o.h = shapes[i][1], o.w = shapes[i][2];
        ls_steal_oracle orc = {NULL, fail_oracle};
        ls_replica *r = NULL;
        ls_steal_result res;
        CHECK_MSG(ls_steal_run(&o, orc, &r, &res) == LS_EINVAL && r == NULL, "shape %d: %s", i, ls_errmsg());
        CHECK(strstr(ls_errmsg(), "input shape") != NULL);
    }
    /* a replica file declaring such a shape */
    const char *metas[] = {"{\"layers\":1,\"input_shape\":[2147483647,2147483647,2147483647],\"input_range\":[0,1]}",
                           "{\"layers\":1,\"input_shape\":[65536,65536,1],\"input_range\":[0,1]}",
                           "{\"layers\":1,\"input_shape\":[-1,-1,4],\"input_range\":[0,1]}"};
    float w[8] = {0}, b[2] = {0};
    int64_t ws[2] = {2, 4}, bs[1] = {2};
    for (int i = 0; i < 3; i++) {
        ls_st_writer *wr;
        CHECK(ls_st_writer_init(&wr) == LS_OK);
        CHECK(ls_st_writer_add(wr, "fc0.w", LS_DT_F32, 2, ws, w) == LS_OK);
        CHECK(ls_st_writer_add(wr, "fc0.b", LS_DT_F32, 1, bs, b) == LS_OK);
        CHECK(ls_st_writer_meta(wr, "llmsys.steal", metas[i]) == LS_OK);
        CHECK(ls_st_writer_write(wr, at("replica.safetensors")) == LS_OK);
        ls_st_writer_free(wr);
        ls_replica *r = NULL;
        CHECK_MSG(ls_replica_load(at("replica.safetensors"), &r) == LS_EFORMAT && r == NULL, "meta %d", i);
    }
    /* an input range that is empty, reversed, not numbers or out of float's range, and a
     * network of one class, against a file that differs only there and loads */
    struct {
        const char *meta;
        int k, ok;
    } bad[] = {{"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[0,1]}", 2, 1},
               {"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[1,1]}", 2, 0},
               {"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[1,0]}", 2, 0},
               {"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[0,\"1\"]}", 2, 0},
               {"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[0,1e39]}", 2, 0},
               {"{\"layers\":1,\"input_shape\":[1,1,4],\"input_range\":[0,1]}", 1, 0}};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        int64_t wk[2] = {bad[i].k, 4}, bk[1] = {bad[i].k};
        ls_st_writer *wr;
        CHECK(ls_st_writer_init(&wr) == LS_OK);
        CHECK(ls_st_writer_add(wr, "fc0.w", LS_DT_F32, 2, wk, w) == LS_OK);
        CHECK(ls_st_writer_add(wr, "fc0.b", LS_DT_F32, 1, bk, b) == LS_OK);
        CHECK(ls_st_writer_meta(wr, "llmsys.steal", bad[i].meta) == LS_OK);
        CHECK(ls_st_writer_write(wr, at("replica.safetensors")) == LS_OK);
        ls_st_writer_free(wr);
        ls_replica *r = NULL;
        int rc = ls_replica_load(at("replica.safetensors"), &r);
        CHECK_MSG(bad[i].ok ? rc == LS_OK && r : rc == LS_EFORMAT && !r, "range/classes case %d: rc %d %s", i, rc,
                  ls_errmsg());
        ls_replica_free(r);
    }
}

/* ---------------------------------------------------------------- 4: non-regular inputs */

static void test_fifo_inputs(void) {
    const char *fifo = at("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    char *d = NULL;
    size_t n;
    int fd;
    /* Each of these once blocked forever in open(): the alarm in main bounds a regression. */
    CHECK(ls_file_read(fifo, &d, &n) == LS_EINVAL && d == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "FIFO") && strstr(ls_errmsg(), "regular"), "%s", ls_errmsg());
    CHECK(ls_file_open_input(fifo, &fd, NULL) == LS_EINVAL && fd == -1);
    CHECK(ls_file_open_input(dir, &fd, NULL) == LS_EINVAL && strstr(ls_errmsg(), "directory"));
    CHECK(ls_file_open_input("/dev/null", &fd, NULL) == LS_EINVAL && strstr(ls_errmsg(), "character device"));
    CHECK(ls_file_open_input(at("absent"), &fd, NULL) == LS_ENOTFOUND);
    ls_st_file *f = NULL;
    CHECK(ls_st_open(fifo, &f) == LS_EINVAL);
    ls_engine *e = NULL;
    CHECK(ls_engine_open(&e, fifo, NULL) == LS_EINVAL);
    cJSON *j = NULL;
    CHECK(ls_json_read_file(fifo, &j) == LS_EINVAL);
    ls_victim *v = NULL;
    CHECK(ls_victim_load(fifo, &v) == LS_EINVAL);
    ls_loader_mix mix;
    CHECK(ls_loader_mix_load(fifo, &mix) == LS_EINVAL);
    char js[700];
    snprintf(js, sizeof js, "{\"n_ctx\":16,\"sources\":[{\"name\":\"f\",\"path\":\"%s\"}]}", fifo);
    CHECK(ls_loader_mix_parse(js, NULL, &mix) == LS_OK);
    ls_loader *ld = NULL;
    CHECK(ls_loader_open(&ld, &mix, 1, NULL) == LS_EINVAL && strstr(ls_errmsg(), "FIFO"));
    ls_loader_close(ld);
    ls_loader_mix_free(&mix);
    ls_steal_data tr, te;
    CHECK(ls_steal_dataset_open(fifo, 0, &tr, &te) < 0);
}

/* ---------------------------------------------------------------- 5: the atomic writer */

static void test_atomic_symlink(void) {
    const char *victim = at("precious.txt"), *out = at("out.json");
    CHECK(ls_file_write_atomic(victim, "keep", 4) == LS_OK);
    /* the name the writer used to create, predictable from the pid */
    char old_tmp[600];
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp.%ld", out, (long)getpid());
    CHECK(symlink(victim, old_tmp) == 0);
    CHECK(ls_file_write_atomic(out, "new", 3) == LS_OK);
    char *d = NULL;
    size_t n = 0;
    CHECK(ls_file_read(victim, &d, &n) == LS_OK && n == 4 && !memcmp(d, "keep", 4));
    free(d);
    CHECK(ls_file_read(out, &d, &n) == LS_OK && n == 3 && !memcmp(d, "new", 3));
    free(d);
    struct stat st;
    CHECK(lstat(out, &st) == 0 && S_ISREG(st.st_mode));
    unlink(old_tmp);
    /* the temp name: in the destination's directory, random, a fresh regular file */
    ls_atomic_file a, b;
    CHECK(ls_atomic_open(&a, out) == LS_OK && ls_atomic_open(&b, out) == LS_OK);
    char pre[600];
    snprintf(pre, sizeof pre, "%s.tmp.%ld.", out, (long)getpid());
    CHECK(a.tmp && b.tmp && !strncmp(a.tmp, pre, strlen(pre)) && strlen(a.tmp) == strlen(pre) + 6);
    CHECK(a.tmp && b.tmp && strcmp(a.tmp, b.tmp) != 0);
    CHECK(lstat(a.tmp, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
    ls_atomic_abort(&a);
    ls_atomic_abort(&b);
    CHECK(count_entries_with("out.json.tmp.") == 0);
}

static void test_atomic_cleanup(void) {
    /* rename onto a directory fails: no temp file may stay behind */
    const char *sub = at("adir");
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(ls_file_write_atomic(sub, "x", 1) == LS_EIO);
    CHECK(count_entries_with("adir.tmp.") == 0);
    ls_st_writer *w;
    float x[3] = {1, 2, 3};
    int64_t s[1] = {3};
    CHECK(ls_st_writer_init(&w) == LS_OK && ls_st_writer_add(w, "x", LS_DT_F32, 1, s, x) == LS_OK);
    CHECK(ls_st_writer_write(w, sub) == LS_EIO);
    ls_st_writer_free(w);
    CHECK(count_entries_with("adir.tmp.") == 0);
    /* a destination in a missing directory: a clear error, nothing created */
    CHECK(ls_file_write_atomic(at("missing/x.json"), "x", 1) == LS_EIO);
    CHECK(strstr(ls_errmsg(), "missing/x.json") != NULL);
}

static void test_atomic_stale(void) {
    const char *out = at("ckpt.safetensors");
    /* a writer killed during its save leaves its temp file */
    pid_t pid = fork();
    if (pid == 0) {
        ls_atomic_file af;
        if (ls_atomic_open(&af, out) == LS_OK) fputs("half a checkpoint", af.fp), fflush(af.fp);
        raise(SIGKILL);
        _exit(1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    CHECK_EQ_INT(count_entries_with("ckpt.safetensors.tmp."), 1);
    /* a live writer's temp file (our parent is alive) and a link with a dead pid stay */
    char live[600], link[600];
    snprintf(live, sizeof live, "%s.tmp.%ld.abcdef", out, (long)getppid());
    snprintf(link, sizeof link, "%s.tmp.%ld.ghijkl", out, (long)pid);
    CHECK(ls_file_write_atomic(live, "", 0) == LS_OK); /* (its own temp name does not match) */
    CHECK(symlink(at("precious.txt"), link) == 0);
    CHECK_EQ_INT(count_entries_with("ckpt.safetensors.tmp."), 3);
    CHECK(ls_file_write_atomic(out, "ok", 2) == LS_OK);
    CHECK(access(live, F_OK) == 0);
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_EQ_INT(count_entries_with("ckpt.safetensors.tmp."), 2);
    unlink(live);
    unlink(link);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "  FAIL: timed out (an input open blocked?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* Runs every test, or only the one named by argv[1]. */
#define RUN_IF(fn)                                                                                                     \
    if (argc < 2 || !strcmp(argv[1], #fn)) RUN(fn)

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    signal(SIGALRM, on_alarm);
    alarm(60);
    ls_log_set_level(LS_LOG_ERROR);
    RUN_IF(test_duplicate_metadata);
    RUN_IF(test_misaligned_checkpoint);
    RUN_IF(test_checksum_required);
    RUN_IF(test_json_int_range);
    RUN_IF(test_mix_overflow);
    RUN_IF(test_victim_headers);
    RUN_IF(test_replica_shapes);
    RUN_IF(test_fifo_inputs);
    RUN_IF(test_atomic_symlink);
    RUN_IF(test_atomic_cleanup);
    RUN_IF(test_atomic_stale);
    return TEST_RESULT_RMTREE(dir);
}
