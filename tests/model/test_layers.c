/* test_layers.c - finite-difference gradient check of every layer alone. Each layer's
 * output is reduced to a scalar L = Σ r·out with fixed random r (in double), every input
 * element x is perturbed by ±eps, and (L(x+eps) - L(x-eps)) / 2eps is compared with the
 * analytical gradient from the layer's backward (called with dout = r). Also: the backward
 * passes that accumulate do (test_accumulate), and softmax against float64. */
#include "llmsys/core.h"
#include "model/layers.h"
#include "test.h"

#define EPS 1e-2f
/* |analytic - numeric| <= ATOL + RTOL·|numeric| for every checked element */
#define ATOL 1e-3
#define RTOL 5e-3

typedef void (*fwd_fn)(void *ctx);

typedef struct {
    fwd_fn fwd;
    void *ctx;
    const float *out;
    const float *r;
    int n_out;
} probe;

static double scalar(const probe *p) {
    p->fwd(p->ctx);
    double s = 0;
    for (int i = 0; i < p->n_out; i++) s += (double)p->r[i] * p->out[i];
    return s;
}

/* Checks every element of x (n) against grad; returns the max error seen. */
static double check_input(const char *what, const probe *p, float *x, const float *grad, int n) {
    double maxerr = 0, maxg = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float x0 = x[i];
        x[i] = x0 + EPS;
        double lp = scalar(p);
        x[i] = x0 - EPS;
        double lm = scalar(p);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * EPS);
        double err = fabs(num - grad[i]);
        maxerr = fmax(maxerr, err);
        maxg = fmax(maxg, fabs(num));
        if (err > ATOL + RTOL * fabs(num)) {
            if (bad++ < 3) fprintf(stderr, "    %s[%d]: analytic %.6g numeric %.6g\n", what, i, grad[i], num);
        }
    }
    fprintf(stderr, "  %-18s n=%-5d max|grad| %.3g  max err %.3g%s\n", what, n, maxg, maxerr, bad ? "  FAILED" : "");
    CHECK_MSG(bad == 0, "%s: %d of %d elements outside tolerance", what, bad, n);
    CHECK(maxg > 1e-3); /* the check must exercise a non-trivial gradient */
    return maxerr;
}

static float *rnd(ls_rng *r, int n, float scale) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) p[i] = scale * ls_rng_normal(r);
    return p;
}
static float *zeros(int n) { return calloc((size_t)n, sizeof(float)); }

/* ---------------------------------------------------------------- encoder */
typedef struct {
    float *out, *wte, *wpe;
    int *tok, B, T, C;
} enc_ctx;
static void enc_fwd(void *c) {
    enc_ctx *e = c;
    ls_encoder_forward(e->out, e->tok, e->wte, e->wpe, e->B, e->T, e->C);
}
static void test_encoder(void) {
    ls_rng r;
    ls_rng_seed(&r, 1);
    int B = 2, T = 5, C = 8, V = 6;
    int tok[10] = {1, 3, 1, 5, 0, 3, 3, 2, 1, 4}; /* repeats: scatter-add must accumulate */
    enc_ctx e = {zeros(B * T * C), rnd(&r, V * C, 1), rnd(&r, T * C, 1), tok, B, T, C};
    float *dout = rnd(&r, B * T * C, 1), *dwte = zeros(V * C), *dwpe = zeros(T * C);
    ls_encoder_backward(dwte, dwpe, dout, tok, B, T, C);
    probe p = {enc_fwd, &e, e.out, dout, B * T * C};
    check_input("encoder.wte", &p, e.wte, dwte, V * C);
    check_input("encoder.wpe", &p, e.wpe, dwpe, T * C);
    free(e.out), free(e.wte), free(e.wpe), free(dout), free(dwte), free(dwpe);
}

/* ---------------------------------------------------------------- layernorm */
typedef struct {
    float *out, *mean, *rstd, *inp, *w, *b;
    int N, C;
} ln_ctx;
static void ln_fwd(void *c) {
    ln_ctx *l = c;
    ls_layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->w, l->b, l->N, l->C);
}
static void test_layernorm(void) {
    ls_rng r;
    ls_rng_seed(&r, 2);
    int N = 6, C = 40; /* C > the 32-channel block: two blocks, one partial */
    ln_ctx l = {zeros(N * C), zeros(N), zeros(N), rnd(&r, N * C, 1), rnd(&r, C, 1), rnd(&r, C, 1), N, C};
    for (int i = 0; i < N * C; i++) l.inp[i] += 0.5f * (float)(i % 7); /* non-zero mean */
    float *dout = rnd(&r, N * C, 1), *dinp = zeros(N * C), *dw = zeros(C), *db = zeros(C);
    ln_fwd(&l);
    ls_layernorm_backward(dinp, dw, db, dout, l.inp, l.w, l.mean, l.rstd, N, C);
    probe p = {ln_fwd, &l, l.out, dout, N * C};
    check_input("layernorm.inp", &p, l.inp, dinp, N * C);
    check_input("layernorm.w", &p, l.w, dw, C);
    check_input("layernorm.b", &p, l.b, db, C);
    /* forward against a float64 recomputation */
    ln_fwd(&l);
    double maxd = 0;
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += l.inp[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (l.inp[n * C + c] - m) * (l.inp[n * C + c] - m);
        v /= C;
        for (int c = 0; c < C; c++) {
            double y = (l.inp[n * C + c] - m) / sqrt(v + 1e-5) * l.w[c] + l.b[c];
            maxd = fmax(maxd, fabs(y - l.out[n * C + c]));
        }
    }
    fprintf(stderr, "  forward vs float64: max |diff| %.3g\n", maxd);
    CHECK(maxd < 1e-5);
    free(l.out), free(l.mean), free(l.rstd), free(l.inp), free(l.w), free(l.b), free(dout), free(dinp), free(dw),
        free(db);
}

/* ---------------------------------------------------------------- matmul */
typedef struct {
    float *out, *inp, *w, *b, *base;
    int N, IC, OC, acc;
} mm_ctx;
static void mm_fwd(void *c) {
    mm_ctx *m = c;
    ls_matmul_forward(m->out, m->inp, m->w, m->b, m->acc ? m->base : NULL, m->N, m->IC, m->OC);
}
static void test_matmul(void) {
    ls_rng r;
    ls_rng_seed(&r, 3);
    int N = 7, IC = 9, OC = 35;
    for (int acc = 0; acc <= 1; acc++) {
        mm_ctx m = {
            zeros(N * OC), rnd(&r, N * IC, 1), rnd(&r, OC * IC, 1), rnd(&r, OC, 1), rnd(&r, N * OC, 1), N, IC, OC, acc};
        float *dout = rnd(&r, N * OC, 1), *dinp = zeros(N * IC), *dw = zeros(OC * IC), *db = zeros(OC);
        ls_matmul_backward(dinp, dw, db, dout, m.inp, m.w, N, IC, OC);
        probe p = {mm_fwd, &m, m.out, dout, N * OC};
        check_input(acc ? "matmul+res.inp" : "matmul.inp", &p, m.inp, dinp, N * IC);
        check_input(acc ? "matmul+res.w" : "matmul.w", &p, m.w, dw, OC * IC);
        check_input(acc ? "matmul+res.bias" : "matmul.bias", &p, m.b, db, OC);
        /* forward against a float64 loop */
        mm_fwd(&m);
        double maxd = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double y = m.b[o] + (acc ? m.base[n * OC + o] : 0);
                for (int i = 0; i < IC; i++) y += (double)m.inp[n * IC + i] * m.w[o * IC + i];
                maxd = fmax(maxd, fabs(y - m.out[n * OC + o]));
            }
        fprintf(stderr, "  forward vs float64: max |diff| %.3g\n", maxd);
        CHECK(maxd < 1e-5);
        free(m.out), free(m.inp), free(m.w), free(m.b), free(m.base), free(dout), free(dinp), free(dw), free(db);
    }
}

/* ---------------------------------------------------------------- attention */
typedef struct {
    float *out, *att, *qkv;
    int B, T, C, NH;
} at_ctx;
static void at_fwd(void *c) {
    at_ctx *a = c;
    ls_attention_forward(a->out, a->att, a->qkv, a->B, a->T, a->C, a->NH);
}
static void test_attention(void) {
    ls_rng r;
    ls_rng_seed(&r, 4);
    int B = 2, T = 5, C = 8, NH = 2;
    at_ctx a = {zeros(B * T * C), zeros(B * NH * T * T), rnd(&r, B * T * 3 * C, 1), B, T, C, NH};
    float *dout = rnd(&r, B * T * C, 1), *dqkv = zeros(B * T * 3 * C), *scratch = zeros(B * NH * T * T);
    at_fwd(&a);
    ls_attention_backward(dqkv, scratch, dout, a.qkv, a.att, B, T, C, NH);
    probe p = {at_fwd, &a, a.out, dout, B * T * C};
    check_input("attention.qkv", &p, a.qkv, dqkv, B * T * 3 * C);
    /* forward against a float64 loop, and causality of the probabilities */
    at_fwd(&a);
    int hs = C / NH;
    double maxd = 0, above = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double s[16], mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += (double)a.qkv[(b * T + t) * 3 * C + h * hs + i] *
                             a.qkv[(b * T + j) * 3 * C + C + h * hs + i];
                    s[j] = d / sqrt(hs);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                for (int i = 0; i < hs; i++) {
                    double y = 0;
                    for (int j = 0; j <= t; j++) y += s[j] / sum * a.qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
                    maxd = fmax(maxd, fabs(y - a.out[(b * T + t) * C + h * hs + i]));
                }
                for (int j = t + 1; j < T; j++) above = fmax(above, fabs(a.att[((b * NH + h) * T + t) * T + j]));
            }
    fprintf(stderr, "  forward vs float64: max |diff| %.3g\n", maxd);
    CHECK(maxd < 1e-5);
    CHECK(above == 0.0);
    free(a.out), free(a.att), free(a.qkv), free(dout), free(dqkv), free(scratch);
}

/* ---------------------------------------------------------------- gelu */
typedef struct {
    float *out, *inp;
    int N;
} ge_ctx;
static void ge_fwd(void *c) {
    ge_ctx *g = c;
    ls_gelu_forward(g->out, g->inp, g->N);
}
static void test_gelu(void) {
    ls_rng r;
    ls_rng_seed(&r, 5);
    int N = 64;
    ge_ctx g = {zeros(N), rnd(&r, N, 2), N};
    float *dout = rnd(&r, N, 1), *dinp = zeros(N);
    ls_gelu_backward(dinp, g.inp, dout, N);
    probe p = {ge_fwd, &g, g.out, dout, N};
    check_input("gelu.inp", &p, g.inp, dinp, N);
    /* the in-place variant gives the same numbers */
    float *dip = malloc((size_t)N * sizeof(float));
    memcpy(dip, dout, (size_t)N * sizeof(float));
    ls_gelu_backward_inplace(dip, g.inp, N);
    for (int i = 0; i < N; i++) CHECK_NEAR(dip[i], dinp[i], 1e-6 * (1 + fabs(dinp[i])));
    free(dip);
    ge_fwd(&g);
    double maxd = 0;
    for (int i = 0; i < N; i++) {
        double x = g.inp[i], y = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        maxd = fmax(maxd, fabs(y - g.out[i]));
    }
    fprintf(stderr, "  forward vs float64: max |diff| %.3g\n", maxd);
    CHECK(maxd < 1e-5);
    free(g.out), free(g.inp), free(dout), free(dinp);
}

/* ---------------------------------------------------------------- softmax + cross-entropy */
typedef struct {
    float *probs, *losses, *logits, loss;
    int *tgt, N, V;
} xe_ctx;
static void xe_fwd(void *c) {
    xe_ctx *x = c;
    x->loss = ls_softmax_xent_forward(x->probs, x->losses, x->logits, x->tgt, x->N, x->V, NULL);
}
static void test_softmax_xent(void) {
    ls_rng r;
    ls_rng_seed(&r, 6);
    int N = 5, V = 11, tgt[5] = {3, -1, 10, 0, 3};
    xe_ctx x = {zeros(N * V), zeros(N), rnd(&r, N * V, 2), 0, tgt, N, V};
    int nv = 0;
    float loss = ls_softmax_xent_forward(x.probs, x.losses, x.logits, tgt, N, V, &nv);
    CHECK_EQ_INT(nv, 4);
    CHECK(x.losses[1] == 0.0f);
    double ref = 0;
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        double z = 0;
        for (int i = 0; i < V; i++) z += exp(x.logits[n * V + i]);
        ref += log(z) - x.logits[n * V + tgt[n]];
    }
    CHECK_NEAR(loss, ref / 4, 1e-5);
    float *dl = zeros(N * V), one = 1.0f;
    ls_softmax_xent_backward(dl, x.probs, tgt, 1.0f / (float)nv, N, V);
    for (int i = 0; i < V; i++) CHECK(dl[1 * V + i] == 0.0f); /* ignored row */
    probe p = {xe_fwd, &x, &x.loss, &one, 1};
    check_input("softmax_xent.logits", &p, x.logits, dl, N * V);
    free(x.probs), free(x.losses), free(x.logits), free(dl);
}

/* The fused fc+GELU forward and mlp.proj+GELU backward against the unfused layers. */
static void test_fused_mlp(void) {
    ls_rng r;
    ls_rng_seed(&r, 7);
    int N = 40, IC = 24, OC = 72; /* small: serial paths; then N = 1200: threaded paths */
    for (int big = 0; big <= 1; big++) {
        if (big) N = 1200; /* large enough for the threaded paths */
        float *x = rnd(&r, N * IC, 1), *w = rnd(&r, OC * IC, 0.3f), *b = rnd(&r, OC, 0.3f);
        float *pre = zeros(N * OC), *act = zeros(N * OC), *pre2 = zeros(N * OC), *act2 = zeros(N * OC);
        ls_matmul_gelu_forward(pre, act, x, w, b, N, IC, OC);
        ls_matmul_forward(pre2, x, w, b, NULL, N, IC, OC);
        ls_gelu_forward(act2, pre2, N * OC);
        double d1 = 0, d2 = 0;
        for (int i = 0; i < N * OC; i++) d1 = fmax(d1, fabs(pre[i] - pre2[i])), d2 = fmax(d2, fabs(act[i] - act2[i]));
        CHECK(d1 < 1e-5 && d2 < 1e-5);
        /* backward of y = act·w2ᵀ + b2 (w2: (IC2=OC) -> OC2) */
        int OC2 = 20;
        float *w2 = rnd(&r, OC2 * OC, 0.3f), *dy = rnd(&r, N * OC2, 1);
        float *dpre = rnd(&r, N * OC, 5), *dw = zeros(OC2 * OC), *db = zeros(OC2); /* garbage: must be overwritten */
        float *dpre2 = zeros(N * OC), *dw2 = zeros(OC2 * OC), *db2 = zeros(OC2);
        ls_matmul_gelu_backward(dpre, dw, db, dy, act, w2, pre, N, OC, OC2);
        ls_matmul_backward(dpre2, dw2, db2, dy, act, w2, N, OC, OC2);
        ls_gelu_backward_inplace(dpre2, pre, N * OC);
        double e1 = 0, e2 = 0, e3 = 0;
        for (int i = 0; i < N * OC; i++) e1 = fmax(e1, fabs(dpre[i] - dpre2[i]));
        for (int i = 0; i < OC2 * OC; i++) e2 = fmax(e2, fabs(dw[i] - dw2[i]));
        for (int i = 0; i < OC2; i++) e3 = fmax(e3, fabs(db[i] - db2[i]));
        fprintf(stderr, "  fused vs unfused (N=%d): fwd %.2g %.2g, bwd %.2g %.2g %.2g\n", N, d1, d2, e1, e2, e3);
        CHECK(e1 < 1e-5 && e2 < 1e-4 && e3 < 1e-4);
        free(x), free(w), free(b), free(pre), free(act), free(pre2), free(act2), free(w2), free(dy), free(dpre),
            free(dw), free(db), free(dpre2), free(dw2), free(db2);
    }
}

/* The backward passes add to the gradients they are given (dinp, dw, dbias of a matmul, GELU's
 * dinp, the cross-entropy's dlogits: gradient accumulation over micro-batches relies on it); a
 * matmul forward with a residual but no bias starts from the residual; softmax probabilities to
 * float64 within 1e-6 relative, down to e^-86 and at the points where the exponential's
 * polynomial is least exact (r = ±ln2 / 2), and finite when the largest logit is last and far
 * above the rest. */
static void test_accumulate(void) {
    ls_rng r;
    ls_rng_seed(&r, 8);
    int N = 6, IC = 10, OC = 12;
    float *inp = rnd(&r, N * IC, 1), *w = rnd(&r, OC * IC, 1), *dout = rnd(&r, N * OC, 1), *base = rnd(&r, N * OC, 1);
    float *out = zeros(N * OC);
    ls_matmul_forward(out, inp, w, NULL, base, N, IC, OC);
    double maxd = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double y = base[n * OC + o];
            for (int i = 0; i < IC; i++) y += (double)inp[n * IC + i] * w[o * IC + i];
            maxd = fmax(maxd, fabs(y - out[n * OC + o]));
        }
    CHECK_MSG(maxd < 1e-5, "matmul with a residual and no bias: max |diff| %.3g", maxd);
    /* each gradient once from zeros, once on top of g0: the second is g0 + the first */
    float *g0[3] = {rnd(&r, N * IC, 1), rnd(&r, OC * IC, 1), rnd(&r, OC, 1)};
    float *z[3] = {zeros(N * IC), zeros(OC * IC), zeros(OC)}, *a[3];
    int len[3] = {N * IC, OC * IC, OC};
    for (int k = 0; k < 3; k++)
        a[k] = malloc(sizeof(float) * (size_t)len[k]), memcpy(a[k], g0[k], sizeof(float) * (size_t)len[k]);
    ls_matmul_backward(z[0], z[1], z[2], dout, inp, w, N, IC, OC);
    ls_matmul_backward(a[0], a[1], a[2], dout, inp, w, N, IC, OC);
    double e = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < len[k]; i++) e = fmax(e, fabs(a[k][i] - (g0[k][i] + z[k][i])));
    CHECK_MSG(e < 1e-5, "matmul backward does not accumulate: %.3g", e);
    float *gz = zeros(N * IC), *ga = malloc(sizeof(float) * (size_t)(N * IC));
    memcpy(ga, g0[0], sizeof(float) * (size_t)(N * IC));
    ls_gelu_backward(gz, inp, inp, N * IC);
    ls_gelu_backward(ga, inp, inp, N * IC);
    e = 0;
    for (int i = 0; i < N * IC; i++) e = fmax(e, fabs(ga[i] - (g0[0][i] + gz[i])));
    CHECK_MSG(e < 1e-6, "GELU backward does not accumulate: %.3g", e);
    int tgt[6] = {0, 3, -1, 11, 5, 2};
    float *probs = zeros(N * OC), *losses = zeros(N), *dz = zeros(N * OC),
          *da = malloc(sizeof(float) * (size_t)(N * OC));
    memcpy(da, base, sizeof(float) * (size_t)(N * OC));
    ls_softmax_xent_forward(probs, losses, out, tgt, N, OC, NULL);
    ls_softmax_xent_backward(dz, probs, tgt, 0.2f, N, OC);
    ls_softmax_xent_backward(da, probs, tgt, 0.2f, N, OC);
    e = 0;
    for (int i = 0; i < N * OC; i++) e = fmax(e, fabs(da[i] - (base[i] + dz[i])));
    CHECK_MSG(e < 1e-6, "cross-entropy backward does not accumulate: %.3g", e);
    /* softmax accuracy */
    const double h = 0.5 * log(2.0);
    float lg[2][12] = {{0, -h, -3 * h, -7 * h, -1, -5, -20, -40, -60, -80, -86, -11 * h},
                       {0, 1, 2, -3, 0.5f, 1.5f, -1, 0, 0, 0, 0, 200}};
    int t2[2] = {4, 11};
    float p2[24], l2[2];
    ls_softmax_xent_forward(p2, l2, &lg[0][0], t2, 2, 12, NULL);
    double worst = 0;
    for (int row = 0; row < 2; row++) {
        double mx = -INFINITY, zsum = 0;
        for (int i = 0; i < 12; i++) mx = fmax(mx, lg[row][i]);
        for (int i = 0; i < 12; i++) zsum += exp((double)lg[row][i] - mx);
        for (int i = 0; i < 12; i++) {
            double want = exp((double)lg[row][i] - mx) / zsum;
            CHECK_MSG(isfinite(p2[row * 12 + i]), "softmax row %d entry %d: %g", row, i, p2[row * 12 + i]);
            if (want > 1e-37)
                worst = fmax(worst, fabs(p2[row * 12 + i] - want) / want);
            else
                CHECK(p2[row * 12 + i] < 1e-37f);
        }
        CHECK_NEAR(l2[row], log(zsum) + mx - lg[row][t2[row]], 1e-5);
    }
    fprintf(stderr, "  softmax vs float64: worst relative error %.3g\n", worst);
    CHECK_MSG(worst < 1e-6, "softmax relative error %.3g", worst);
    for (int k = 0; k < 3; k++) free(g0[k]), free(z[k]), free(a[k]);
    free(inp), free(w), free(dout), free(base), free(out), free(gz), free(ga), free(probs), free(losses), free(dz),
        free(da);
}

int main(void) {
    RUN(test_encoder);
    RUN(test_layernorm);
    RUN(test_matmul);
    RUN(test_attention);
    RUN(test_gelu);
    RUN(test_softmax_xent);
    RUN(test_fused_mlp);
    RUN(test_accumulate);
    return TEST_RESULT();
}
