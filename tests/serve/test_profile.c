/* test_profile.c - the device profile has the docs/plan-format.md shape, one row per grid point,
 * positive timings, a measured link; a quantized checkpoint is refused; the host probes
 * give a capacity within (0, n] and a positive hop latency, NAN on bad input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "llmsys/serve.h"
#include "test.h"

/* "k=v,..." of row i of arr, for the keys given (absent: -1) */
static void row_str(const cJSON *arr, int i, const char *const *keys, int nk, char *out, size_t n) {
    const cJSON *r = cJSON_GetArrayItem(arr, i);
    size_t l = 0;
    out[0] = '\0';
    for (int k = 0; k < nk && l < n; k++) {
        const cJSON *x = r ? cJSON_GetObjectItem(r, keys[k]) : NULL;
        l += (size_t)snprintf(out + l, n - l, "%s%s=%d", k ? "," : "", keys[k], x ? x->valueint : -1);
    }
}

/* The grid's rows, in order, on an 8-layer model: a run of 4 middle layers by default (6 are
 * there), or as many as asked; a sequence of the whole context (32) kept, one beyond it skipped
 * by the layers and the head alike; a decode context of 32 clipped to the last position, 31. */
static void test_grid_rows(void) {
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/llmsys_test_profile8_%d.safetensors", (int)getpid());
    ls_model_config cfg = {.vocab = LS_VOCAB, .n_ctx = 32, .n_layer = 8, .n_head = 2, .d_model = 32, .d_ff = 64};
    ls_model *m = make_model(&cfg, 3, 1.0f);
    CHECK(m && write_model_ckpt(m, ckpt) == 0);
    ls_model_free(m);
    ls_profile_opts o = ls_profile_defaults();
    int bits[1] = {8}, batches[2] = {2, 1}, seqs[3] = {4, 32, 40}, ctxs[1] = {32};
    o.bits = bits, o.n_bits = 1, o.batches = batches, o.n_batches = 2, o.seqs = seqs, o.n_seqs = 3;
    o.ctxs = ctxs, o.n_ctxs = 1, o.reps = 1, o.no_link = 1;
    cJSON *j = NULL;
    CHECK(ls_profile_run(ckpt, &o, &j) == LS_OK);
    if (j) {
        static const char *const kp[3] = {"bits", "batch", "seq"}, *const kd[3] = {"bits", "batch", "ctx"},
                                 *const kh[2] = {"batch", "seq"};
        static const char *const want_pre[4] = {"bits=8,batch=2,seq=4", "bits=8,batch=2,seq=32", "bits=8,batch=1,seq=4",
                                                "bits=8,batch=1,seq=32"},
                                 *const want_dec[2] = {"bits=8,batch=2,ctx=31", "bits=8,batch=1,ctx=31"},
                                 *const want_hp[4] = {"batch=2,seq=4", "batch=2,seq=32", "batch=1,seq=4",
                                                      "batch=1,seq=32"};
        char s[128];
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "layers_timed")->valueint, 4);
        cJSON *pre = cJSON_GetObjectItem(j, "prefill"), *dec = cJSON_GetObjectItem(j, "decode");
        cJSON *h = cJSON_GetObjectItem(j, "head"), *hp = cJSON_GetObjectItem(h, "prefill");
        CHECK_EQ_INT(cJSON_GetArraySize(pre), 4);
        CHECK_EQ_INT(cJSON_GetArraySize(dec), 2);
        CHECK_EQ_INT(cJSON_GetArraySize(hp), 4);
        CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(h, "decode")), 2);
        for (int i = 0; i < 4; i++) {
            row_str(pre, i, kp, 3, s, sizeof s);
            CHECK_MSG(!strcmp(s, want_pre[i]), "prefill row %d: %s, want %s", i, s, want_pre[i]);
            row_str(hp, i, kh, 2, s, sizeof s);
            CHECK_MSG(!strcmp(s, want_hp[i]), "head prefill row %d: %s, want %s", i, s, want_hp[i]);
        }
        for (int i = 0; i < 2; i++) {
            row_str(dec, i, kd, 3, s, sizeof s);
            CHECK_MSG(!strcmp(s, want_dec[i]), "decode row %d: %s, want %s", i, s, want_dec[i]);
        }
        cJSON_Delete(j);
    }
    o.span = 2;
    CHECK(ls_profile_run(ckpt, &o, &j) == LS_OK);
    if (j) {
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "layers_timed")->valueint, 2);
        cJSON_Delete(j);
    }
    unlink(ckpt);
}

static void test_profile(void) {
    char ckpt[128], q[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/llmsys_test_profile_%d.safetensors", (int)getpid());
    snprintf(q, sizeof q, "/tmp/llmsys_test_profile_q_%d.safetensors", (int)getpid());
    ls_model_config cfg = {.vocab = LS_VOCAB, .n_ctx = 32, .n_layer = 3, .n_head = 2, .d_model = 32, .d_ff = 64};
    ls_model *m = make_model(&cfg, 9, 1.0f);
    CHECK(m && write_model_ckpt(m, ckpt) == 0);
    ls_model_free(m);
    ls_profile_opts o = ls_profile_defaults();
    int bits[2] = {16, 4}, batches[2] = {1, 3}, seqs[2] = {8, 64}, ctxs[2] = {4, 40};
    o.bits = bits, o.n_bits = 2, o.batches = batches, o.n_batches = 2, o.seqs = seqs, o.n_seqs = 2;
    o.ctxs = ctxs, o.n_ctxs = 2, o.reps = 1;
    cJSON *j = NULL;
    /* the library refuses a bad grid itself, before it measures anything, naming the option */
    CHECK(ls_profile_opts_check(&o) == LS_OK);
    int bad5[2] = {16, 5}, bad32[1] = {32}, zero[2] = {1, 0};
    struct {
        const int **v;
        int *n;
        const int *val;
        int nval;
        const char *name;
    } bad[] = {{&o.bits, &o.n_bits, bad5, 2, "--bits"}, {&o.bits, &o.n_bits, bad32, 1, "--bits"},
               {&o.bits, &o.n_bits, bits, 0, "--bits"}, {&o.batches, &o.n_batches, zero, 2, "--batches"},
               {&o.seqs, &o.n_seqs, zero, 2, "--seqs"}, {&o.ctxs, &o.n_ctxs, zero, 2, "--ctxs"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int *keep = *bad[i].v;
        int keep_n = *bad[i].n;
        *bad[i].v = bad[i].val, *bad[i].n = bad[i].nval;
        CHECK_MSG(ls_profile_run(ckpt, &o, &j) == LS_EINVAL && !j && strstr(ls_errmsg(), bad[i].name), "case %zu: %s",
                  i, ls_errmsg());
        *bad[i].v = keep, *bad[i].n = keep_n;
    }
    o.reps = 0;
    CHECK(ls_profile_opts_check(&o) == LS_EINVAL && strstr(ls_errmsg(), "--reps"));
    o.reps = LS_PROFILE_MAX_REPS;
    CHECK(ls_profile_opts_check(&o) == LS_OK);
    o.reps = LS_PROFILE_MAX_REPS + 1;
    CHECK(ls_profile_opts_check(&o) == LS_EINVAL && strstr(ls_errmsg(), "--reps"));
    o.reps = 1, o.nthreads = 0;
    CHECK(ls_profile_opts_check(&o) == LS_EINVAL && strstr(ls_errmsg(), "--threads"));
    o.reps = 1, o.nthreads = LS_MODEL_MAX_THREADS + 1;
    CHECK(ls_profile_opts_check(&o) == LS_EINVAL);
    o.nthreads = 1;
    CHECK(ls_profile_opts_check(&o) == LS_OK);
    CHECK(ls_profile_run(ckpt, &o, &j) == LS_OK);
    if (j) {
        CHECK(!strcmp(cJSON_GetObjectItem(j, "format")->valuestring, "llmsys-profile"));
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "version")->valueint, 1);
        CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "n_layer")->valueint, 3);
        cJSON *pre = cJSON_GetObjectItem(j, "prefill"), *dec = cJSON_GetObjectItem(j, "decode"), *it;
        CHECK_EQ_INT(cJSON_GetArraySize(pre), 2 * 2 * 1); /* seq 64 > n_ctx is skipped */
        CHECK_EQ_INT(cJSON_GetArraySize(dec), 2 * 2 * 2);
        cJSON_ArrayForEach(it, pre) CHECK(cJSON_GetObjectItem(it, "seconds")->valuedouble > 0);
        cJSON_ArrayForEach(it, dec) {
            CHECK(cJSON_GetObjectItem(it, "seconds")->valuedouble > 0);
            CHECK(cJSON_GetObjectItem(it, "ctx")->valueint < 32);
        }
        cJSON *h = cJSON_GetObjectItem(j, "head");
        CHECK(h && cJSON_GetArraySize(cJSON_GetObjectItem(h, "decode")) == 2);
        cJSON *lk = cJSON_GetObjectItem(j, "link");
        CHECK(cJSON_GetObjectItem(lk, "latency_s")->valuedouble > 0);
        CHECK(cJSON_GetObjectItem(lk, "bandwidth_Bps")->valuedouble > 0);
        cJSON_Delete(j);
    }
    int b4[3] = {4, 4, 4};
    CHECK(ls_quant_checkpoint(ckpt, b4, 3, 32, q) == LS_OK);
    CHECK(ls_profile_run(q, &o, &j) == LS_EINVAL);
    /* the layers of the profile are a stage-sized run: a middle one here (3 layers) */
    o.no_link = 1;
    CHECK(ls_profile_run(ckpt, &o, &j) == LS_OK);
    if (j) {
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "layers_timed")->valueint, 1);
        CHECK(cJSON_GetObjectItem(j, "link") == NULL);
        cJSON_Delete(j);
    }
    /* host probes: one process shares nothing (capacity 1 up to timing noise, never above);
     * two report at most 2; a message to a sleeping process takes between 1 us and 50 ms */
    double c1 = ls_host_capacity(ckpt, 1), c2 = ls_host_capacity(ckpt, 2), hop = ls_host_hop_latency(5, 0.002);
    CHECK_MSG(c1 > 0.3 && c1 <= 1.0, "capacity for 1 process %.3f", c1);
    CHECK_MSG(c2 > 0.3 && c2 <= 2.0, "capacity for 2 processes %.3f", c2);
    CHECK_MSG(hop > 1e-6 && hop < 0.05, "hop %.6f s", hop);
    CHECK(isnan(ls_host_capacity("/nonexistent.safetensors", 2)));
    CHECK(isnan(ls_host_capacity(ckpt, 0)));
    unlink(ckpt);
    unlink(q);
}

int main(void) {
    RUN(test_profile);
    RUN(test_grid_rows);
    return TEST_RESULT();
}
