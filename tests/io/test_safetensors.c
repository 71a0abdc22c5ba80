/* test_safetensors.c - round trip, checksum, and every kind of broken file refused cleanly. */
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "llmsys/core.h"
#include "llmsys/safetensors.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-st-XXXXXX";

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static void write_sample(const char *path, float *a, int8_t *b) {
    ls_st_writer *w;
    CHECK(ls_st_writer_init(&w) == LS_OK);
    int64_t sa[2] = {3, 5}, sb[1] = {7};
    CHECK(ls_st_writer_add(w, "a", LS_DT_F32, 2, sa, a) == LS_OK);
    CHECK(ls_st_writer_add(w, "b", LS_DT_I8, 1, sb, b) == LS_OK);
    CHECK(ls_st_writer_add(w, "a", LS_DT_F32, 2, sa, a) == LS_EINVAL); /* duplicate */
    CHECK(ls_st_writer_meta(w, "llmsys.step", "17") == LS_OK);
    CHECK(ls_st_writer_write(w, path) == LS_OK);
    ls_st_writer_free(w);
}

static void test_roundtrip(void) {
    float a[15];
    int8_t b[7];
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 7; i++) b[i] = (int8_t)(i * 37 - 100);
    char p[256];
    path_of(p, sizeof p, "ok.safetensors");
    write_sample(p, a, b);
    ls_st_file *f;
    CHECK(ls_st_open(p, &f) == LS_OK);
    if (!f) return;
    CHECK_EQ_INT(ls_st_count(f), 2);
    const ls_st_tensor *t;
    int64_t sa[2] = {3, 5};
    CHECK(ls_st_expect(f, "a", LS_DT_F32, 2, sa, &t) == LS_OK);
    CHECK(t && memcmp(t->data, a, sizeof a) == 0);
    CHECK(((uintptr_t)t->data % 4) == 0);
    t = ls_st_find(f, "b");
    CHECK(t && t->numel == 7 && memcmp(t->data, b, 7) == 0);
    CHECK(ls_st_meta(f, "llmsys.step") && !strcmp(ls_st_meta(f, "llmsys.step"), "17"));
    CHECK(ls_st_meta(f, "llmsys.xxh3") != NULL);
    int64_t wrong[2] = {5, 3};
    CHECK(ls_st_expect(f, "a", LS_DT_F32, 2, wrong, NULL) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "shape [3,5], expected [5,3]") != NULL);
    CHECK(ls_st_expect(f, "zz", LS_DT_F32, 2, sa, NULL) == LS_EFORMAT);
    ls_st_close(f);
}

static void mutate(const char *src, const char *dst, long off, int byte, long truncate_to) {
    char *d;
    size_t n;
    CHECK(ls_file_read(src, &d, &n) == LS_OK);
    if (off >= 0) d[off < (long)n ? off : (long)n - 1] ^= (char)byte;
    if (truncate_to >= 0 && (size_t)truncate_to < n) n = (size_t)truncate_to;
    CHECK(ls_file_write_atomic(dst, d, n) == LS_OK);
    free(d);
}

static void test_broken(void) {
    char ok[256], bad[256];
    path_of(ok, sizeof ok, "ok.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    ls_st_file *f = NULL;
    char *d;
    size_t n;
    CHECK(ls_file_read(ok, &d, &n) == LS_OK);
    free(d);
    mutate(ok, bad, (long)n - 3, 0x5a, -1); /* flip a data byte */
    CHECK(ls_st_open(bad, &f) == LS_ECHECKSUM && f == NULL);
    CHECK(strstr(ls_errmsg(), "bad.safetensors") != NULL);
    mutate(ok, bad, -1, 0, (long)n - 10); /* truncated */
    CHECK(ls_st_open(bad, &f) == LS_EFORMAT);
    mutate(ok, bad, -1, 0, 5); /* shorter than the length prefix */
    CHECK(ls_st_open(bad, &f) == LS_EFORMAT);
    mutate(ok, bad, 3, 0x10, -1); /* absurd header length */
    CHECK(ls_st_open(bad, &f) == LS_EFORMAT);
    mutate(ok, bad, 9, 0x7f, -1); /* broken JSON */
    CHECK(ls_st_open(bad, &f) == LS_EFORMAT);
    CHECK(ls_file_write_atomic(bad, "GIF89a this is not a checkpoint at all", 38) == LS_OK);
    CHECK(ls_st_open(bad, &f) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "bad.safetensors") != NULL);
    CHECK(ls_st_open("/nonexistent.safetensors", &f) == LS_ENOTFOUND);
    CHECK(ls_st_open(dir, &f) == LS_EINVAL);
}

static void test_foreign(void) {
    /* a hand-made file with no llmsys metadata and a shape that disagrees with its bytes */
    const char *hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const char *hbad = "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    /* a name holding a \u0000 escape, which would decode to "x" */
    const char *hnul = "{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    char p[256];
    path_of(p, sizeof p, "foreign.safetensors");
    for (int k = 0; k < 3; k++) {
        const char *h = k == 2 ? hnul : k ? hbad : hdr;
        size_t hl = strlen(h);
        unsigned char buf[256] = {0};
        for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        memcpy(buf + 8, h, hl);
        float v[2] = {1.5f, -2.0f};
        memcpy(buf + 8 + hl, v, 8);
        CHECK(ls_file_write_atomic(p, buf, 8 + hl + 8) == LS_OK);
        ls_st_file *f = NULL;
        int rc = ls_st_open_ex(p, LS_ST_ALLOW_UNCHECKED, &f);
        if (k == 0) {
            /* without the flag a checksum-less file is refused, with the way to accept it */
            ls_st_file *g = NULL;
            CHECK(ls_st_open(p, &g) == LS_ECHECKSUM && g == NULL);
            CHECK(strstr(ls_errmsg(), "LLMSYS_ALLOW_UNCHECKED") != NULL);
            CHECK(rc == LS_OK);
            const ls_st_tensor *t = f ? ls_st_find(f, "x") : NULL;
            float got[2] = {0, 0};
            CHECK(t && (uintptr_t)t->data % 4 == 0); /* header length 54: misaligned in the file */
            if (t) memcpy(got, t->data, sizeof got);
            CHECK(t && got[1] == -2.0f);
            ls_st_close(f);
        } else {
            CHECK(rc == LS_EFORMAT && f == NULL);
            if (k == 2) CHECK_MSG(strstr(ls_errmsg(), "u0000 escape") != NULL, "%s", ls_errmsg());
        }
    }
}

/* Offsets that point outside the data section or backwards, in files whose checksum is valid
 * (so the offset check, not the checksum, must refuse them): a negative begin, a reversed
 * pair, an end past the data, and an in-range control that opens. */
static void test_offsets(void) {
    struct {
        const char *offs, *shape;
        int ok;
    } cases[] = {{"[0,8]", "[2]", 1},  {"[-4,4]", "[2]", 0}, {"[8,0]", "[2]", 0}, {"[4,12]", "[2]", 0},
                 {"[8,16]", "[2]", 0}, {"[-8,0]", "[2]", 0}, {"[0,8]", "[1]", 0}, {"[0,4]", "[2]", 0}};
    char p[256];
    path_of(p, sizeof p, "offsets.safetensors");
    const float v[2] = {1.5f, -2.0f};
    char sum[17];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)XXH3_64bits(v, sizeof v));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char h[256];
        int hl = snprintf(h, sizeof h,
                          "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\"},\"x\":{\"dtype\":\"F32\",\"shape\":%s,"
                          "\"data_offsets\":%s}}",
                          sum, cases[i].shape, cases[i].offs);
        unsigned char buf[512] = {0};
        for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
        memcpy(buf + 8, h, (size_t)hl);
        memcpy(buf + 8 + hl, v, sizeof v);
        CHECK(ls_file_write_atomic(p, buf, 8 + (size_t)hl + sizeof v) == LS_OK);
        ls_st_file *f = NULL;
        int rc = ls_st_open(p, &f);
        if (cases[i].ok) {
            CHECK_MSG(rc == LS_OK, "offsets %s refused: %s", cases[i].offs, ls_errmsg());
            const ls_st_tensor *t = f ? ls_st_find(f, "x") : NULL;
            float got[2] = {0, 0};
            if (t) memcpy(got, t->data, sizeof got);
            CHECK(t && got[0] == 1.5f && got[1] == -2.0f);
        } else {
            CHECK_MSG(rc == LS_EFORMAT && (strstr(ls_errmsg(), "offsets") || strstr(ls_errmsg(), "bytes")),
                      "offsets %s shape %s: rc %d (%s)", cases[i].offs, cases[i].shape, rc, rc ? ls_errmsg() : "opened");
        }
        if (f) ls_st_close(f);
    }
    /* a header length beyond the file */
    unsigned char buf[64] = {0};
    buf[0] = 0xe8, buf[1] = 0x03; /* 1000 */
    memcpy(buf + 8, "{}", 2);
    CHECK(ls_file_write_atomic(p, buf, sizeof buf) == LS_OK);
    ls_st_file *f = NULL;
    CHECK(ls_st_open(p, &f) == LS_EFORMAT && strstr(ls_errmsg(), "header length"));
    if (f) ls_st_close(f);
}

/* At the limits: a tensor of LS_ST_MAX_DIMS dimensions opens and one of a dimension more is
 * refused; a file of metadata and no tensor (an empty data section) opens. */
static void test_limits(void) {
    char p[256];
    path_of(p, sizeof p, "limits.safetensors");
    const float v[2] = {1.5f, -2.0f};
    int64_t shape[LS_ST_MAX_DIMS];
    for (int i = 0; i < LS_ST_MAX_DIMS; i++) shape[i] = i == LS_ST_MAX_DIMS - 1 ? 2 : 1;
    ls_st_writer *w;
    CHECK(ls_st_writer_init(&w) == LS_OK);
    CHECK(ls_st_writer_add(w, "x", LS_DT_F32, LS_ST_MAX_DIMS, shape, v) == LS_OK);
    CHECK(ls_st_writer_write(w, p) == LS_OK);
    ls_st_writer_free(w);
    ls_st_file *f = NULL;
    CHECK_MSG(ls_st_open(p, &f) == LS_OK, "%d dims: %s", LS_ST_MAX_DIMS, ls_errmsg());
    const ls_st_tensor *t = f ? ls_st_find(f, "x") : NULL;
    CHECK(t && t->ndim == LS_ST_MAX_DIMS && t->numel == 2 && !memcmp(t->data, v, sizeof v));
    if (f) ls_st_close(f);
    char sum[17], h[256], dims[64] = "[";
    for (int i = 0; i <= LS_ST_MAX_DIMS; i++) strcat(dims, i == LS_ST_MAX_DIMS ? "2]" : "1,");
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)XXH3_64bits(v, sizeof v));
    int hl = snprintf(h, sizeof h,
                      "{\"__metadata__\":{\"llmsys.xxh3\":\"%s\"},\"x\":{\"dtype\":\"F32\",\"shape\":%s,"
                      "\"data_offsets\":[0,8]}}",
                      sum, dims);
    unsigned char buf[512] = {0};
    for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(buf + 8, h, (size_t)hl);
    memcpy(buf + 8 + hl, v, sizeof v);
    CHECK(ls_file_write_atomic(p, buf, 8 + (size_t)hl + sizeof v) == LS_OK);
    f = NULL;
    CHECK(ls_st_open(p, &f) == LS_EFORMAT && strstr(ls_errmsg(), "dims"));
    if (f) ls_st_close(f);
    CHECK(ls_st_writer_init(&w) == LS_OK);
    CHECK(ls_st_writer_meta(w, "note", "no tensors") == LS_OK);
    CHECK(ls_st_writer_write(w, p) == LS_OK);
    ls_st_writer_free(w);
    f = NULL;
    CHECK_MSG(ls_st_open(p, &f) == LS_OK, "metadata only: %s", ls_errmsg());
    CHECK(f && ls_st_count(f) == 0 && ls_st_meta(f, "note") && !strcmp(ls_st_meta(f, "note"), "no tensors"));
    if (f) ls_st_close(f);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_roundtrip);
    RUN(test_broken);
    RUN(test_foreign);
    RUN(test_offsets);
    RUN(test_limits);
    return TEST_RESULT_RMTREE(dir);
}
