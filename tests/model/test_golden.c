/* test_golden.c - the C GPT against golden data from an independent PyTorch model
 * (scripts/golden_model.py, float64): logits, loss and every parameter gradient for one
 * batch of `tiny`, with the weights recomputed here from the script's formula. */
#include "llmsys/model.h"
#include "llmsys/safetensors.h"
#include "test.h"

#define FIXTURE LLMSYS_SOURCE_DIR "/tests/fixtures/model_golden.safetensors"
/* Tolerances (float32 C vs float64 torch): */
#define LOGIT_ATOL 2e-5 /* logits are O(1) */
#define LOSS_ATOL 1e-5
#define GRAD_RTOL 1e-4 /* per tensor: max |err| <= GRAD_RTOL·max|grad| + GRAD_ATOL */
#define GRAD_ATOL 1e-7

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The script's weight formula (same integer hash, same float64 arithmetic). */
static void golden_params(ls_model *m) {
    for (int ti = 0; ti < ls_model_num_tensors(m); ti++) {
        ls_param p = ls_model_tensor(m, ti);
        size_t len = strlen(p.name);
        int ln_w = (len >= 5 && (strcmp(p.name + len - 5, "ln1.w") == 0 || strcmp(p.name + len - 5, "ln2.w") == 0)) ||
                   strcmp(p.name, "lnf.w") == 0;
        double scale = ln_w ? 0.2 : p.ndim == 2 ? 0.1 : 0.05, offset = ln_w ? 1.0 : 0.0;
        for (size_t j = 0; j < p.numel; j++) {
            uint64_t h = splitmix64(((uint64_t)ti << 32) | j);
            double u = (double)(h >> 40) / 16777216.0;
            p.data[j] = (float)(offset + scale * (2.0 * u - 1.0));
        }
    }
}

static const float *f32(const ls_st_file *f, const char *name, int64_t numel) {
    const ls_st_tensor *t = ls_st_find(f, name);
    CHECK_MSG(t && t->dtype == LS_DT_F32 && t->numel == numel, "fixture tensor %s", name);
    return t && t->dtype == LS_DT_F32 && t->numel == numel ? t->data : NULL;
}

static void test_golden(void) {
    ls_st_file *f = NULL;
    /* written by PyTorch (scripts/golden_model.py), so it carries no llmsys checksum */
    int rc = ls_st_open_ex(FIXTURE, LS_ST_ALLOW_UNCHECKED, &f);
    CHECK_MSG(rc == LS_OK, "%s", ls_errmsg());
    if (rc != LS_OK) return;
    ls_model_config cfg;
    const char *cj = ls_st_meta(f, "llmsys.config");
    CHECK(cj && ls_model_config_from_json(cj, &cfg) == LS_OK);
    ls_model_config tiny;
    ls_model_config_named("tiny", &tiny);
    CHECK(memcmp(&cfg, &tiny, sizeof cfg) == 0);
    const ls_st_tensor *tt = ls_st_find(f, "tokens"), *tg = ls_st_find(f, "targets");
    CHECK(tt && tg && tt->dtype == LS_DT_I32 && tg->dtype == LS_DT_I32 && tt->ndim == 2 && tg->numel == tt->numel);
    if (!tt || !tg || tt->ndim != 2) {
        ls_st_close(f);
        return;
    }
    int B = (int)tt->shape[0], T = (int)tt->shape[1], V = cfg.vocab;
    ls_model *m = NULL;
    CHECK(ls_model_init(&m, &cfg, 1) == LS_OK);
    golden_params(m);
    ls_model_zero_grad(m);
    float loss = ls_model_forward(m, tt->data, tg->data, B, T);
    ls_model_backward(m);

    const float *gl = f32(f, "loss", 1), *glog = f32(f, "logits", (int64_t)B * T * V);
    if (gl && glog) {
        const float *lg = ls_model_logits(m);
        double maxa = 0, maxr = 0;
        for (int64_t i = 0; i < (int64_t)B * T * V; i++) {
            double d = fabs(lg[i] - glog[i]);
            maxa = fmax(maxa, d);
            maxr = fmax(maxr, d / fmax(fabs(glog[i]), 1e-3));
        }
        fprintf(stderr, "  loss C %.7f torch %.7f |diff| %.3g\n", loss, gl[0], fabs(loss - gl[0]));
        fprintf(stderr, "  logits max abs err %.3g, max rel err %.3g (tol abs %.0e)\n", maxa, maxr, LOGIT_ATOL);
        CHECK_NEAR(loss, gl[0], LOSS_ATOL);
        CHECK(maxa <= LOGIT_ATOL);
    }
    double worst_rel = 0;
    for (int ti = 0; ti < ls_model_num_tensors(m); ti++) {
        ls_param p = ls_model_tensor(m, ti);
        char nm[64];
        snprintf(nm, sizeof nm, "grad.%s", p.name);
        const float *g = f32(f, nm, (int64_t)p.numel);
        if (!g) continue;
        double maxa = 0, gmax = 0;
        for (size_t j = 0; j < p.numel; j++) {
            maxa = fmax(maxa, fabs(p.grad[j] - g[j]));
            gmax = fmax(gmax, fabs(g[j]));
        }
        double rel = maxa / fmax(gmax, 1e-30);
        worst_rel = fmax(worst_rel, rel);
        fprintf(stderr, "  %-22s max|grad| %.3g  max abs err %.3g  rel %.3g\n", nm, gmax, maxa, rel);
        CHECK_MSG(maxa <= GRAD_RTOL * gmax + GRAD_ATOL, "%s: max abs err %.3g > tol %.3g", nm, maxa,
                  GRAD_RTOL * gmax + GRAD_ATOL);
        CHECK_MSG(gmax > 0, "%s: golden gradient is all zero", nm);
    }
    fprintf(stderr, "  worst gradient error relative to the tensor's max |grad|: %.3g (tol %.0e)\n", worst_rel,
            GRAD_RTOL);
    ls_model_free(m);
    ls_st_close(f);
}

int main(void) {
    ls_model_set_threads(2);
    RUN(test_golden);
    return TEST_RESULT();
}
