/* test_profile.c - the device profile has the FORMATS.md shape, one row per grid point,
 * positive timings, a measured link; a quantized checkpoint is refused. */
#include <cjson/cJSON.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "llmsys/serve.h"
#include "test.h"

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
    unlink(ckpt);
    unlink(q);
}

int main(void) {
    RUN(test_profile);
    return TEST_RESULT();
}
