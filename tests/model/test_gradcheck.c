/* test_gradcheck.c - the whole tiny model: float32 forward against an independent
 * float64 reference (ref_gpt.h), and the float32 backward against central finite
 * differences of the float64 reference for a sample of parameters in every tensor. */
#include "llmsys/model.h"
#include "ref_gpt.h"
#include "test.h"

#define SAMPLES_PER_TENSOR 8
#define FD_EPS 1e-4 /* in float64 the truncation error ~eps² is far below the tolerance */
/* |analytic - numeric| <= GC_ATOL + GC_RTOL·|numeric| */
#define GC_ATOL 1e-6
#define GC_RTOL 1e-3

static void test_whole_model(void) {
    ls_model_config cfg;
    ls_rng r;
    ls_rng_seed(&r, 99);
    double *pd;
    ls_model *m = ref_tiny_nudged(11, &r, &cfg, &pd);
    CHECK(m != NULL);
    if (!m) return;
    const float *pf = ls_model_params(m);

    enum { B = 2, T = 12 };
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)ls_rng_below(&r, LS_VOCAB);
        tgt[i] = i % 5 == 3 ? -1 : (int)ls_rng_below(&r, LS_VOCAB);
    }
    ls_model_zero_grad(m);
    float loss = ls_model_forward(m, tok, tgt, B, T);
    ls_model_backward(m);
    double *rl = malloc(sizeof(double) * B * T * LS_VOCAB);
    double rloss = ref_gpt_forward(&cfg, pd, tok, tgt, B, T, rl);
    const float *lg = ls_model_logits(m);
    double maxd = 0;
    for (int i = 0; i < B * T * LS_VOCAB; i++) maxd = fmax(maxd, fabs(lg[i] - rl[i]));
    fprintf(stderr, "  loss %.7f vs float64 %.7f; logits max |diff| %.3g\n", loss, rloss, maxd);
    CHECK_NEAR(loss, rloss, 1e-5);
    CHECK(maxd < 1e-4);

    const float *g = ls_model_grads(m);
    int nt = ls_model_num_tensors(m), bad = 0, checked = 0;
    double worst = 0;
    for (int ti = 0; ti < nt; ti++) {
        ls_param p = ls_model_tensor(m, ti);
        size_t off = (size_t)(p.data - pf);
        /* the entry with the largest gradient, then random ones */
        size_t pick[SAMPLES_PER_TENSOR], best = 0;
        for (size_t j = 1; j < p.numel; j++)
            if (fabs(g[off + j]) > fabs(g[off + best])) best = j;
        pick[0] = best;
        for (int k = 1; k < SAMPLES_PER_TENSOR; k++) pick[k] = (size_t)ls_rng_below(&r, p.numel);
        double terr = 0, tmax = 0;
        for (int k = 0; k < SAMPLES_PER_TENSOR; k++) {
            size_t i = off + pick[k];
            double x0 = pd[i];
            pd[i] = x0 + FD_EPS;
            double lp = ref_gpt_forward(&cfg, pd, tok, tgt, B, T, NULL);
            pd[i] = x0 - FD_EPS;
            double lm = ref_gpt_forward(&cfg, pd, tok, tgt, B, T, NULL);
            pd[i] = x0;
            double num = (lp - lm) / (2 * FD_EPS), err = fabs(num - g[i]);
            terr = fmax(terr, err);
            tmax = fmax(tmax, fabs(num));
            checked++;
            if (err > GC_ATOL + GC_RTOL * fabs(num)) {
                bad++;
                fprintf(stderr, "    %s[%zu]: analytic %.7g numeric %.7g\n", p.name, pick[k], g[i], num);
            }
        }
        worst = fmax(worst, terr);
        fprintf(stderr, "  %-16s max|grad| %.3g  max err %.3g\n", p.name, tmax, terr);
        CHECK_MSG(tmax > 1e-6, "%s: gradient sample is all zero", p.name);
    }
    fprintf(stderr, "  %d parameters checked in %d tensors, worst abs err %.3g\n", checked, nt, worst);
    CHECK_EQ_INT(bad, 0);
    free(pd);
    free(rl);
    ls_model_free(m);
}

int main(void) {
    ls_model_set_threads(2);
    RUN(test_whole_model);
    return TEST_RESULT();
}
