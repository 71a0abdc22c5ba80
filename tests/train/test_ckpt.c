/* test_ckpt.c - checkpoint round trip (bit-exact weights and AdamW state) and every kind
 * of bad checkpoint refused with a message naming the file and the problem. */
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/safetensors.h"
#include "llmsys/train.h"
#include "test.h"

static char dir[] = "/tmp/llmsys-ckpt-XXXXXX";

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* A tiny model after two AdamW steps, so weights and both moments are non-trivial. */
static ls_model *trained_tiny(uint64_t seed) {
    ls_model_config cfg;
    CHECK(ls_model_config_named("tiny", &cfg) == LS_OK);
    ls_model *m = NULL;
    CHECK(ls_model_init(&m, &cfg, seed) == LS_OK);
    if (!m) return NULL;
    int B = 2, T = 16, tok[32], tgt[32];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 3) % 256;
        tgt[i] = (i * 7 + 10) % 256;
    }
    ls_adamw_config oc = ls_adamw_defaults();
    for (int s = 0; s < 2; s++) {
        ls_model_zero_grad(m);
        float l = ls_model_forward(m, tok, tgt, B, T);
        CHECK(!isnan(l));
        ls_model_backward(m);
        ls_model_adamw_step(m, &oc, s);
    }
    return m;
}

static int buffers_equal(ls_model *a, ls_model *b, int with_opt) {
    size_t n = ls_model_num_params(a);
    if (n != ls_model_num_params(b)) return 0;
    if (memcmp(ls_model_params(a), ls_model_params(b), n * sizeof(float))) return 0;
    if (with_opt && (memcmp(ls_model_adam_m(a), ls_model_adam_m(b), n * sizeof(float)) ||
                     memcmp(ls_model_adam_v(a), ls_model_adam_v(b), n * sizeof(float))))
        return 0;
    return 1;
}

static void test_roundtrip(void) {
    char p[256], pw[256];
    path_of(p, sizeof p, "full.safetensors");
    path_of(pw, sizeof pw, "weights.safetensors");
    ls_model *m = trained_tiny(5);
    if (!m) return;
    CHECK(ls_ckpt_save(p, m, 42, "{\"batch\":4}", LS_CKPT_WITH_OPT) == LS_OK);
    CHECK(ls_ckpt_save(pw, m, 42, NULL, LS_CKPT_WEIGHTS) == LS_OK);

    ls_model *r = NULL;
    ls_ckpt_state st = {0};
    CHECK(ls_ckpt_load(p, LS_CKPT_WITH_OPT, &r, &st) == LS_OK);
    CHECK(r && buffers_equal(m, r, 1));
    CHECK_EQ_INT(st.step, 42);
    CHECK(st.train_json && !strcmp(st.train_json, "{\"batch\":4}"));
    ls_ckpt_state_free(&st);
    if (r) ls_model_free(r);

    /* weights-only load of the full file ignores opt.*; of the weights file it works too */
    r = NULL;
    CHECK(ls_ckpt_load(pw, LS_CKPT_WEIGHTS, &r, &st) == LS_OK);
    CHECK(r && buffers_equal(m, r, 0));
    CHECK(st.train_json == NULL && st.step == 42);
    /* the weights-only file cannot resume an optimizer: clear error, model untouched */
    float before = r ? ls_model_params(r)[0] : 0;
    CHECK(r && ls_ckpt_load_into(pw, r, LS_CKPT_WITH_OPT, NULL) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "no optimizer state") && strstr(ls_errmsg(), "weights.safetensors"));
    CHECK(r && ls_model_params(r)[0] == before);

    /* every tensor of the file has its model.h name, F32, and the metadata is there */
    ls_st_file *f = NULL;
    ls_model_config cfg;
    CHECK(ls_ckpt_open(p, &f, &cfg) == LS_OK);
    if (f) {
        CHECK_EQ_INT(ls_st_count(f), 3 * ls_model_num_tensors(m));
        CHECK(ls_st_find(f, "wte") && ls_st_find(f, "h.1.attn.qkv.w") && ls_st_find(f, "opt.v.lnf.b"));
        CHECK(ls_st_find(f, "h.0.mlp.fc.w")->dtype == LS_DT_F32);
        CHECK(ls_st_meta(f, "llmsys.config") && ls_st_meta(f, "llmsys.xxh3"));
        CHECK_EQ_INT(cfg.d_model, ls_model_cfg(m)->d_model);
        ls_st_close(f);
    }
    if (r) ls_model_free(r);
    ls_model_free(m);
}

/* Rewrites a checkpoint with one tensor changed (shape or dtype) or dropped. */
static void write_altered(const char *path, ls_model *m, const char *victim, int mode) {
    ls_st_writer *w;
    CHECK(ls_st_writer_init(&w) == LS_OK);
    char *cj = ls_model_config_to_json(ls_model_cfg(m));
    CHECK(ls_st_writer_meta(w, "llmsys.config", cj) == LS_OK);
    free(cj);
    static double f64[1 << 16];
    for (int i = 0; i < ls_model_num_tensors(m); i++) {
        ls_param p = ls_model_tensor(m, i);
        if (!strcmp(p.name, victim)) {
            if (mode == 0) continue; /* missing */
            if (mode == 1) {         /* wrong shape: transposed */
                int64_t sh[2] = {p.shape[1], p.shape[0]};
                CHECK(ls_st_writer_add(w, p.name, LS_DT_F32, 2, sh, p.data) == LS_OK);
                continue;
            }
            CHECK(p.numel <= sizeof f64 / sizeof f64[0]); /* wrong dtype */
            CHECK(ls_st_writer_add(w, p.name, LS_DT_F64, p.ndim, p.shape, f64) == LS_OK);
            continue;
        }
        CHECK(ls_st_writer_add(w, p.name, LS_DT_F32, p.ndim, p.shape, p.data) == LS_OK);
    }
    CHECK(ls_st_writer_write(w, path) == LS_OK);
    ls_st_writer_free(w);
}

static void mutate(const char *src, const char *dst, long off, long truncate_to) {
    char *d;
    size_t n;
    CHECK(ls_file_read(src, &d, &n) == LS_OK);
    if (off >= 0) d[off] ^= 0x40;
    if (truncate_to >= 0) n = (size_t)truncate_to;
    CHECK(ls_file_write_atomic(dst, d, n) == LS_OK);
    free(d);
}

static void expect_fail(const char *path, int flags, int code, const char *needle) {
    ls_model *r = NULL;
    int rc = ls_ckpt_load(path, flags, &r, NULL);
    CHECK_MSG(rc == code, "%s: rc %d (%s), expected %d", path, rc, ls_errmsg(), code);
    CHECK(r == NULL);
    CHECK_MSG(strstr(ls_errmsg(), path) != NULL, "message '%s' does not name %s", ls_errmsg(), path);
    CHECK_MSG(strstr(ls_errmsg(), needle) != NULL, "message '%s' lacks '%s'", ls_errmsg(), needle);
}

static void test_bad_files(void) {
    char ok[256], bad[256];
    path_of(ok, sizeof ok, "ok.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    ls_model *m = trained_tiny(9);
    if (!m) return;
    CHECK(ls_ckpt_save(ok, m, 3, NULL, LS_CKPT_WITH_OPT) == LS_OK);
    char *d;
    size_t n;
    CHECK(ls_file_read(ok, &d, &n) == LS_OK);
    free(d);

    mutate(ok, bad, -1, (long)n / 2); /* truncated */
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "");
    mutate(ok, bad, (long)n - 100, -1); /* one flipped data bit */
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_ECHECKSUM, "checksum");
    CHECK(ls_file_write_atomic(bad, "not a checkpoint, just some text\n", 33) == LS_OK);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "");
    CHECK(ls_file_write_atomic(bad, "", 0) == LS_OK);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "");
    expect_fail("/nonexistent/dir/x.safetensors", LS_CKPT_WEIGHTS, LS_ENOTFOUND, "");

    write_altered(bad, m, "h.1.attn.qkv.w", 1);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "tensor 'h.1.attn.qkv.w' has shape [64,192], expected [192,64]");
    write_altered(bad, m, "lnf.b", 0);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "missing tensor 'lnf.b'");
    write_altered(bad, m, "wpe", 2);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "dtype F64");

    /* a foreign safetensors file (valid, but no llmsys metadata) */
    ls_st_writer *w;
    CHECK(ls_st_writer_init(&w) == LS_OK);
    float x[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4};
    CHECK(ls_st_writer_add(w, "transformer.wte.weight", LS_DT_F32, 1, sh, x) == LS_OK);
    CHECK(ls_st_writer_write(w, bad) == LS_OK);
    ls_st_writer_free(w);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "not an llmsys checkpoint");

    /* a config that fails validation, and one that does not match the model loaded into */
    CHECK(ls_st_writer_init(&w) == LS_OK);
    CHECK(ls_st_writer_meta(w, "llmsys.config",
                            "{\"vocab\":259,\"n_ctx\":64,\"n_layer\":2,\"n_head\":5,\"d_model\":64,\"d_ff\":256}") ==
          LS_OK);
    CHECK(ls_st_writer_add(w, "x", LS_DT_F32, 1, sh, x) == LS_OK);
    CHECK(ls_st_writer_write(w, bad) == LS_OK);
    ls_st_writer_free(w);
    expect_fail(bad, LS_CKPT_WEIGHTS, LS_EFORMAT, "llmsys.config");

    ls_model_config small;
    CHECK(ls_model_config_named("small", &small) == LS_OK);
    small.n_layer = 1; /* keep it cheap */
    ls_model *other = NULL;
    CHECK(ls_model_init(&other, &small, 1) == LS_OK);
    CHECK(other && ls_ckpt_load_into(ok, other, LS_CKPT_WEIGHTS, NULL) == LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "does not match"));
    if (other) ls_model_free(other);

    /* a failed save leaves no file behind */
    CHECK(ls_ckpt_save("/nonexistent/dir/y.safetensors", m, 0, NULL, 0) < 0);
    CHECK(access("/nonexistent/dir/y.safetensors", F_OK) != 0);
    ls_model_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    ls_model_set_threads(1);
    RUN(test_roundtrip);
    RUN(test_bad_files);
    return TEST_RESULT_RMTREE(dir);
}
