/* ref_gpt.h - an independent float64 reference of the GPT forward pass for tests: plain
 * loops, no BLAS, its own parameter offsets (computed here from the documented tensor
 * order, not taken from the model), so it checks the layout too; and the tiny model the
 * gradient checks compare against it. */
#ifndef LLMSYS_TEST_REF_GPT_H
#define LLMSYS_TEST_REF_GPT_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/model.h"

static void ref_layernorm(double *out, const double *x, const double *w, const double *b, int C) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    double s = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * s * w[c] + b[c];
}

/* y (OC) = W (OC,IC) · x (IC) + b */
static void ref_linear(double *y, const double *x, const double *W, const double *b, int IC, int OC) {
    for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < IC; i++) s += W[(size_t)o * IC + i] * x[i];
        y[o] = s;
    }
}

/* Mean cross-entropy over targets != -1 (0 if none); logits (B,T,V) out if non-NULL. */
static double ref_gpt_forward(const ls_model_config *cfg, const double *params, const int *tok, const int *tgt, int B,
                              int T, double *logits_out) {
    int V = cfg->vocab, C = cfg->d_model, F = cfg->d_ff, L = cfg->n_layer, NH = cfg->n_head, hs = C / NH;
    /* offsets in the documented order */
    const double *wte = params, *wpe = wte + (size_t)V * C;
    const double *p = wpe + (size_t)cfg->n_ctx * C;
    size_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + (size_t)F * C + F + (size_t)C * F + C;
    const double *lnfw = p + L * per_layer, *lnfb = lnfw + C;
    int N = B * T;
    double *x = malloc(sizeof(double) * N * C), *h = malloc(sizeof(double) * C),
           *qkv = malloc(sizeof(double) * N * 3 * C), *y = malloc(sizeof(double) * C), *f = malloc(sizeof(double) * F),
           *a = malloc(sizeof(double) * N * C), *s = malloc(sizeof(double) * T), *lg = malloc(sizeof(double) * V);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[n * C + c] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)(n % T) * C + c];
    for (int l = 0; l < L; l++) {
        const double *q = p + l * per_layer;
        const double *ln1w = q, *ln1b = ln1w + C, *qkvw = ln1b + C, *qkvb = qkvw + 3 * C * C, *pw = qkvb + 3 * C,
                     *pb = pw + C * C, *ln2w = pb + C, *ln2b = ln2w + C, *fw = ln2b + C, *fb = fw + (size_t)F * C,
                     *mw = fb + F, *mb = mw + (size_t)C * F;
        for (int n = 0; n < N; n++) {
            ref_layernorm(h, x + n * C, ln1w, ln1b, C);
            ref_linear(qkv + (size_t)n * 3 * C, h, qkvw, qkvb, C, 3 * C);
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int hd = 0; hd < NH; hd++) {
                    const double *qq = qkv + (size_t)(b * T + t) * 3 * C + hd * hs;
                    double mx = -1e300, sum = 0;
                    for (int j = 0; j <= t; j++) {
                        const double *kk = qkv + (size_t)(b * T + j) * 3 * C + C + hd * hs;
                        double d = 0;
                        for (int i = 0; i < hs; i++) d += qq[i] * kk[i];
                        s[j] = d / sqrt((double)hs);
                        if (s[j] > mx) mx = s[j];
                    }
                    for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                    for (int i = 0; i < hs; i++) {
                        double acc = 0;
                        for (int j = 0; j <= t; j++)
                            acc += s[j] / sum * qkv[(size_t)(b * T + j) * 3 * C + 2 * C + hd * hs + i];
                        a[(b * T + t) * C + hd * hs + i] = acc;
                    }
                }
        for (int n = 0; n < N; n++) {
            ref_linear(y, a + n * C, pw, pb, C, C);
            for (int c = 0; c < C; c++) x[n * C + c] += y[c];
            ref_layernorm(h, x + n * C, ln2w, ln2b, C);
            ref_linear(f, h, fw, fb, C, F);
            for (int i = 0; i < F; i++) {
                double u = f[i];
                f[i] = 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
            }
            ref_linear(y, f, mw, mb, F, C);
            for (int c = 0; c < C; c++) x[n * C + c] += y[c];
        }
    }
    double total = 0;
    int cnt = 0;
    for (int n = 0; n < N; n++) {
        ref_layernorm(h, x + n * C, lnfw, lnfb, C);
        ref_linear(lg, h, wte, NULL, C, V); /* tied head */
        if (logits_out) memcpy(logits_out + (size_t)n * V, lg, sizeof(double) * V);
        if (tgt[n] < 0) continue;
        double mx = lg[0], z = 0;
        for (int i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) z += exp(lg[i] - mx);
        total += log(z) + mx - lg[tgt[n]];
        cnt++;
    }
    free(x), free(h), free(qkv), free(y), free(f), free(a), free(s), free(lg);
    return cnt ? total / cnt : 0.0;
}

/* A tiny model from init seed with every parameter moved by 0.05·N(0,1) drawn from r (off
 * the zero biases and unit LayerNorm gains, so every term of a gradient matters); *cfg its
 * config and *pd (malloc'd) its parameters in float64 for ref_gpt_forward. NULL on failure. */
static inline ls_model *ref_tiny_nudged(uint64_t seed, ls_rng *r, ls_model_config *cfg, double **pd) {
    ls_model *m = NULL;
    *pd = NULL;
    if (ls_model_config_named("tiny", cfg) != LS_OK || ls_model_init(&m, cfg, seed) != LS_OK) return NULL;
    size_t np = ls_model_num_params(m);
    float *pf = ls_model_params(m);
    for (size_t i = 0; i < np; i++) pf[i] += 0.05f * ls_rng_normal(r);
    if (!(*pd = malloc(np * sizeof(double)))) {
        ls_model_free(m);
        return NULL;
    }
    for (size_t i = 0; i < np; i++) (*pd)[i] = pf[i];
    return m;
}

#endif
