/* test_calib.c - the measured quality indicators: ls_plan_calib_var's per-feature variances of
 * every block Linear's input against a float64 forward written here (layer 0, where one-token
 * windows make attention the identity on V, and the LayerNorm input of longer windows), the
 * evaluation loss it reports against ls_eval_tokens, ls_plan_quality_calibrated's omega
 * against the variance term computed by hand from those variances and the weights;
 * ls_quant_layer_kl against a KL divergence computed here from two engines' logits, its NLL
 * against ls_engine_eval_tokens, and the kl indicator's shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"
#include "test.h"

static ls_model *m;
static ls_model_config cfg;

static const float *P(int l, int kind) { return ls_model_tensor(m, ls_model_layout_index(&cfg, l, kind)).data; }

/* LayerNorm of x (C) in double, as the model's (eps 1e-5, biased variance). */
static void ln(const double *x, const float *w, const float *b, int C, double *o) {
    double mu = 0, v = 0;
    for (int c = 0; c < C; c++) mu += x[c] / C;
    for (int c = 0; c < C; c++) v += (x[c] - mu) * (x[c] - mu) / C;
    for (int c = 0; c < C; c++) o[c] = (x[c] - mu) / sqrt(v + 1e-5) * w[c] + b[c];
}

/* The biased variance of the C entries of x (what a LayerNorm divides by). */
static double rowvar(const double *x, int C) {
    double mu = 0, v = 0;
    for (int c = 0; c < C; c++) mu += x[c] / C;
    for (int c = 0; c < C; c++) v += (x[c] - mu) * (x[c] - mu) / C;
    return v;
}

/* o (out) = W (out, in) x + b. */
static void lin(const float *w, const float *b, const double *x, int out, int in, double *o) {
    for (int r = 0; r < out; r++) {
        double s = b[r];
        for (int k = 0; k < in; k++) s += (double)w[(size_t)r * in + k] * x[k];
        o[r] = s;
    }
}

/* Per-feature population variance of rows (n, d). */
static void colvar(const double *x, int n, int d, double *v) {
    for (int k = 0; k < d; k++) {
        double s = 0, q = 0;
        for (int i = 0; i < n; i++) s += x[(size_t)i * d + k], q += x[(size_t)i * d + k] * x[(size_t)i * d + k];
        v[k] = q / n - (s / n) * (s / n);
    }
}

/* |got - want| within 1e-4 relative (float32 forward against float64), at every feature. */
static void check_var(const char *what, const double *got, const double *want, int d) {
    double worst = 0;
    for (int k = 0; k < d; k++) {
        double e = fabs(got[k] - want[k]) / (fabs(want[k]) + 1e-6);
        worst = e > worst ? e : worst;
    }
    CHECK_MSG(worst <= 1e-4, "%s: worst relative error %.3g", what, worst);
}

static uint16_t *tokens(size_t n, uint64_t seed) {
    uint16_t *t = malloc(n * sizeof *t);
    ls_rng r;
    ls_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)ls_rng_below(&r, 256); /* bytes: no BOS target skipped */
    return t;
}

static void test_layer0(void) {
    int C = cfg.d_model, F = cfg.d_ff, L = cfg.n_layer;
    size_t S = (size_t)3 * C + F, n = 301;
    uint16_t *tok = tokens(n, 5);
    double *var = malloc(sizeof(double) * L * S);
    ls_eval_result r, re;
    /* one-token windows: the attention output is V */
    double rs[2 * 2 + 1];
    CHECK(ls_plan_calib_var(m, tok, n, 1, 7, 0, var, rs, &r) == LS_OK);
    CHECK(ls_eval_tokens(m, tok, n, 1, 7, 0, &re) == LS_OK);
    CHECK_NEAR(r.loss, re.loss, 0);
    CHECK(r.tokens == re.tokens && r.tokens == n - 1);
    size_t avail, W = ls_eval_windows(n, 1, 0, &avail);
    double *x = malloc(sizeof(double) * C), *qkv = malloc(sizeof(double) * 3 * C), *res = malloc(sizeof(double) * C);
    double *a[4], *ref = malloc(sizeof(double) * S), want_rs[2] = {0, 0};
    for (int k = 0; k < 4; k++) a[k] = malloc(sizeof(double) * W * (k == 3 ? F : C));
    const float *wte = ls_model_tensor(m, 0).data, *wpe = ls_model_tensor(m, 1).data;
    for (size_t w = 0; w < W; w++) {
        int t = tok[ls_eval_window_start(w, W, avail, 1)];
        for (int c = 0; c < C; c++) x[c] = (double)wte[(size_t)t * C + c] + wpe[c];
        ln(x, P(0, LS_LT_LN1W), P(0, LS_LT_LN1B), C, a[0] + w * C);
        want_rs[0] += 1 / (rowvar(x, C) + 1e-5) / (double)W;
        lin(P(0, LS_LT_QKVW), P(0, LS_LT_QKVB), a[0] + w * C, 3 * C, C, qkv);
        memcpy(a[1] + w * C, qkv + 2 * C, sizeof(double) * C); /* softmax over one position */
        lin(P(0, LS_LT_PROJW), P(0, LS_LT_PROJB), a[1] + w * C, C, C, res);
        for (int c = 0; c < C; c++) res[c] += x[c];
        ln(res, P(0, LS_LT_LN2W), P(0, LS_LT_LN2B), C, a[2] + w * C);
        want_rs[1] += 1 / (rowvar(res, C) + 1e-5) / (double)W;
        double *h = a[3] + w * F;
        lin(P(0, LS_LT_FCW), P(0, LS_LT_FCB), a[2] + w * C, F, C, h);
        for (int k = 0; k < F; k++)
            h[k] = 0.5 * h[k] * (1 + tanh(0.7978845608028654 * (h[k] + 0.044715 * h[k] * h[k] * h[k])));
    }
    static const char *const names[4] = {"qkv input", "proj input", "fc input", "mproj input"};
    for (int k = 0, off = 0; k < 4; off += k == 3 ? F : C, k++) {
        colvar(a[k], (int)W, k == 3 ? F : C, ref);
        check_var(names[k], var + off, ref, k == 3 ? F : C);
    }
    /* the mean 1/σ² of layer 0's two LayerNorms' inputs; the others measured */
    CHECK_NEAR(rs[0], want_rs[0], 1e-4 * want_rs[0]);
    CHECK_NEAR(rs[1], want_rs[1], 1e-4 * want_rs[1]);
    for (int i = 2; i < 5; i++) CHECK(isfinite(rs[i]) && rs[i] > 0);
    int pos = 0;
    for (size_t i = S; i < L * S; i++) {
        CHECK(isfinite(var[i]) && var[i] >= 0);
        pos += var[i] > 0;
    }
    CHECK(pos > (int)S / 2); /* layer 1 measured too */

    /* windows of 5 tokens, 3 per forward, at most 100 tokens: the LayerNorm input of layer 0 */
    CHECK(ls_plan_calib_var(m, tok, n, 5, 3, 100, var, NULL, &r) == LS_OK);
    W = ls_eval_windows(n, 5, 100, &avail);
    CHECK(W == 20 && r.tokens == 100);
    double *b = malloc(sizeof(double) * W * 5 * C);
    for (size_t w = 0; w < W; w++)
        for (int p = 0; p < 5; p++) {
            int t = tok[ls_eval_window_start(w, W, avail, 5) + (size_t)p];
            for (int c = 0; c < C; c++) x[c] = (double)wte[(size_t)t * C + c] + wpe[(size_t)p * C + c];
            ln(x, P(0, LS_LT_LN1W), P(0, LS_LT_LN1B), C, b + (w * 5 + p) * C);
        }
    colvar(b, (int)W * 5, C, ref);
    check_var("qkv input, 5-token windows", var, ref, C);

    /* too little text: one clear error */
    CHECK(ls_plan_calib_var(m, tok, 3, 5, 1, 0, var, NULL, &r) == LS_EINVAL);
    for (int k = 0; k < 4; k++) free(a[k]);
    free(b);
    free(ref);
    free(x);
    free(qkv);
    free(res);
    free(var);
    free(tok);
}

/* The variance term of one linear from its weights (out, in) and input variances. */
static double term(const float *w, int out, int in, const double *v) {
    double range = 0, sv = 0;
    for (int r = 0; r < out; r++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int k = 0; k < in; k++) lo = fminf(lo, w[(size_t)r * in + k]), hi = fmaxf(hi, w[(size_t)r * in + k]);
        range = fmax(range, hi - lo);
    }
    for (int k = 0; k < in; k++) sv += v[k];
    return range * range * sv;
}

/* A scratch directory dir with the model saved in ck and txt's path beside it. */
static void scratch(char *dir, char ck[128], char txt[128]) {
    CHECK(mkdtemp(dir) != NULL);
    snprintf(ck, 128, "%s/m.safetensors", dir);
    snprintf(txt, 128, "%s/t.txt", dir);
    CHECK(ls_ckpt_save(ck, m, 0, NULL, LS_CKPT_WEIGHTS) == LS_OK);
}

static void test_indicator(void) {
    char dir[] = "/tmp/ls_calib_XXXXXX", ck[128], txt[128];
    scratch(dir, ck, txt);
    FILE *f = fopen(txt, "w");
    ls_rng r;
    ls_rng_seed(&r, 9);
    for (int i = 0; i < 6000; i++) fputc("abcdefgh ijklmnop\n"[ls_rng_below(&r, 18)], f);
    fclose(f);
    ls_plan_arch a;
    ls_plan_catalog *cat;
    CHECK(ls_plan_catalog_load(NULL, &cat) == LS_OK);
    CHECK(ls_plan_resolve_model(cat, ck, &a) == LS_OK);
    double om[2 * LS_PLAN_NBITS], om0[2 * LS_PLAN_NBITS];
    const char *paths[1] = {txt};
    ls_eval_result er, re;
    CHECK(ls_plan_quality_calibrated(ck, paths, 1, 2000, &a, om, 0, &er) == LS_OK);
    CHECK(ls_plan_quality_from_checkpoint(ck, &a, om0) == LS_OK);

    /* by hand: the same windows of the train split, the variance term per linear */
    ls_corpus *c;
    CHECK(ls_corpus_load(&c, paths, 1, NULL) == LS_OK);
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &n);
    int C = cfg.d_model, F = cfg.d_ff, k4 = ls_plan_bits_index(4), k3 = ls_plan_bits_index(3);
    size_t S = (size_t)3 * C + F;
    double *var = malloc(sizeof(double) * 2 * S), w[2], wr[2], sum = 0, sumr = 0, rs[5], omr[2 * LS_PLAN_NBITS];
    CHECK(ls_plan_calib_var(m, tok, n, cfg.n_ctx, 8, 2000, var, rs, &re) == LS_OK);
    CHECK_NEAR(er.loss, re.loss, 0);
    CHECK(ls_plan_quality_calibrated(ck, paths, 1, 2000, &a, omr, LS_PLAN_QUALITY_RELATIVE, &er) == LS_OK);
    for (int l = 0; l < 2; l++) {
        const double *v = var + l * S;
        double att = term(P(l, LS_LT_QKVW), 3 * C, C, v) + term(P(l, LS_LT_PROJW), C, C, v + C);
        double mlp = term(P(l, LS_LT_FCW), F, C, v + 2 * C) + term(P(l, LS_LT_FCPW), C, F, v + 3 * C);
        w[l] = att + mlp, sum += w[l];
        /* every LayerNorm after it: attention ln2 of l onwards, the MLP ln1 of l+1 onwards (rs[4]: lnf) */
        double ra = l == 0 ? (rs[1] + rs[2] + rs[3] + rs[4]) / 4 : (rs[3] + rs[4]) / 2;
        double rm = l == 0 ? (rs[2] + rs[3] + rs[4]) / 3 : rs[4];
        wr[l] = att * ra + mlp * rm, sumr += wr[l];
    }
    for (int l = 0; l < 2; l++) {
        CHECK_NEAR(om[l * LS_PLAN_NBITS + k4], w[l] / sum, 1e-9);
        CHECK_NEAR(om[l * LS_PLAN_NBITS + k3] / om[l * LS_PLAN_NBITS + k4], 49.0 / 9.0, 1e-9); /* (7/3)^2 */
        CHECK_NEAR(omr[l * LS_PLAN_NBITS + k4], wr[l] / sumr, 1e-9);
    }
    /* measured, not propagated: the two differ on this model */
    CHECK(fabs(om[k4] - om0[k4]) > 1e-3);
    /* ls_indicator_compute (`plan indicator`) is these functions, chosen by its options */
    double oc[2 * LS_PLAN_NBITS];
    ls_indicator_opts io = {.model = ck, .method = "variance", .calib = paths, .n_calib = 1, .calib_tokens = 2000};
    CHECK(ls_indicator_compute(&io, &a, oc, &re) == LS_OK);
    CHECK(memcmp(oc, om, sizeof oc) == 0 && re.tokens == er.tokens);
    io.relative = 1;
    CHECK(ls_indicator_compute(&io, &a, oc, &re) == LS_OK && memcmp(oc, omr, sizeof oc) == 0);
    io.relative = 0, io.n_calib = 0;
    CHECK(ls_indicator_compute(&io, &a, oc, &re) == LS_OK && memcmp(oc, om0, sizeof oc) == 0 && re.tokens == 0);
    const struct {
        const char *method, *flag;
        int n_calib, relative;
    } bad[] = {{"kl", "--calib-data", 0, 0},
               {"default", "--calib-data", 1, 0},
               {"variance", "--relative", 0, 1},
               {"kl", "--relative", 1, 1}};
    for (int i = 0; i < 4; i++) {
        io.method = bad[i].method, io.n_calib = bad[i].n_calib, io.relative = bad[i].relative;
        CHECK(ls_indicator_check(&io) == LS_EINVAL && strstr(ls_errmsg(), bad[i].flag));
        CHECK(ls_indicator_compute(&io, &a, oc, &re) == LS_EINVAL);
    }
    io = (ls_indicator_opts){.model = "opt-30b", .method = "variance", .calib = paths, .n_calib = 1};
    CHECK(ls_indicator_check(&io) == LS_EINVAL && strstr(ls_errmsg(), "checkpoint path"));
    /* a quantized checkpoint, and a file that is no checkpoint, are refused */
    char q8[140];
    snprintf(q8, sizeof q8, "%s/q8.safetensors", dir);
    ls_quantize_result qr;
    ls_quantize_opts qo = ls_quantize_defaults(), qb;
    qo.model = ck, qo.out = q8, qo.bits = 8;
    /* each refusal names its flag and comes before anything is written */
    struct {
        int bits, group;
        const char *map, *out, *report, *flag;
        double heldout;
    } qbad[] = {{0, 64, NULL, q8, NULL, "exactly one of --bits", 0.05},
                {8, 64, txt, q8, NULL, "exactly one of --bits", 0.05},
                {5, 64, NULL, q8, NULL, "--bits must be", 0.05},
                {8, 48, NULL, q8, NULL, "--group must be", 0.05},
                {8, 64, NULL, q8, NULL, "--heldout must be", 0.6},
                {8, 64, NULL, ck, NULL, "--out", 0.05},
                {8, 64, NULL, q8, "/nonexistent/r.json", "--report", 0.05},
                {8, 64, NULL, "/nonexistent/q.safetensors", NULL, "--out", 0.05}};
    for (size_t i = 0; i < sizeof qbad / sizeof qbad[0]; i++) {
        qb = qo, qb.bits = qbad[i].bits, qb.group = qbad[i].group, qb.bits_map = qbad[i].map, qb.out = qbad[i].out;
        qb.report = qbad[i].report, qb.heldout = qbad[i].heldout;
        CHECK_MSG(ls_quantize(&qb, &qr) != LS_OK && strstr(ls_errmsg(), qbad[i].flag) && !qr.bits && !ls_is_file(q8),
                  "quantize refusal %zu: %s", i, ls_errmsg());
    }
    qb = qo, qb.eval = paths, qb.n_eval = 1, qb.heldout = 1e-6; /* no whole window held out */
    CHECK(ls_quantize(&qb, &qr) == LS_EINVAL && strstr(ls_errmsg(), "too little held-out") && !ls_is_file(q8));
    CHECK(ls_quantize(&qo, &qr) == LS_OK && qr.n_layer > 0 && qr.bits[0] == 8);
    ls_quantize_result_free(&qr);
    CHECK(ls_plan_quality_calibrated(q8, paths, 1, 2000, &a, om, 0, &er) != LS_OK);
    CHECK(ls_plan_quality_calibrated(txt, paths, 1, 2000, &a, om, 0, &er) != LS_OK);
    unlink(q8);
    ls_corpus_free(c);
    free(var);
    ls_plan_catalog_free(cat);
    unlink(ck);
    unlink(txt);
    rmdir(dir);
}

static void log_softmax(const float *x, int V, double *y) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, x[v]);
    for (int v = 0; v < V; v++) s += exp(x[v] - mx);
    for (int v = 0; v < V; v++) y[v] = x[v] - mx - log(s);
}

static void test_layer_kl(void) {
    char dir[] = "/tmp/ls_calib_XXXXXX", ck[128], txt[128];
    scratch(dir, ck, txt);
    int L = cfg.n_layer, T = cfg.n_ctx, V = cfg.vocab;
    size_t n = 301;
    uint16_t *tok = tokens(n, 7);
    const int bits[3] = {16, 3, 8};
    double kl[2 * 3], nll[2 * 3 + 1];
    CHECK(ls_quant_layer_kl(ck, tok, n, 0, 1, bits, 3, kl, nll) == LS_OK);
    for (int l = 0; l < L; l++) {
        CHECK(kl[l * 3] == 0); /* at 16 bits the layer is the reference's */
        CHECK_MSG(kl[l * 3 + 1] > kl[l * 3 + 2] && kl[l * 3 + 2] > 0, "layer %d: KL at 3 bits %g, at 8 %g", l,
                  kl[l * 3 + 1], kl[l * 3 + 2]);
        CHECK_NEAR(nll[l * 3], nll[L * 3], 0);
    }
    /* the reference's NLL: the evaluator's loss on the same windows (no BOS among bytes) */
    int all16[2] = {16, 16}, one3[2] = {16, 3};
    ls_engine_opts eo = ls_engine_defaults();
    eo.bits = all16;
    ls_engine *e16, *e3;
    CHECK(ls_engine_open(&e16, ck, &eo) == LS_OK);
    ls_eval_result r;
    CHECK(ls_engine_eval_tokens(e16, tok, n, T, 0, &r) == LS_OK);
    CHECK_NEAR(nll[L * 3], r.loss, 1e-5);
    /* one window, by hand: layer 1 at 3 bits against all at 16 */
    double k1;
    CHECK(ls_quant_layer_kl(ck, tok, n, (size_t)T, 2, one3 + 1, 1, kl, NULL) == LS_OK);
    k1 = kl[1];
    eo.bits = one3;
    CHECK(ls_engine_open(&e3, ck, &eo) == LS_OK);
    size_t avail, W = ls_eval_windows(n, T, (size_t)T, &avail), p0 = ls_eval_window_start(0, W, avail, T);
    CHECK(W == 1);
    int *in = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) in[t] = tok[p0 + t];
    ls_engine_seq sq = {0, 0, T};
    float *la = malloc(sizeof(float) * T * V), *lb = malloc(sizeof(float) * T * V);
    double *ya = malloc(sizeof(double) * V), *yb = malloc(sizeof(double) * V), want = 0;
    CHECK(ls_engine_forward(e16, &sq, 1, in, NULL, la, 1) == LS_OK);
    CHECK(ls_engine_forward(e3, &sq, 1, in, NULL, lb, 1) == LS_OK);
    for (int t = 0; t < T; t++) {
        log_softmax(la + (size_t)t * V, V, ya);
        log_softmax(lb + (size_t)t * V, V, yb);
        for (int v = 0; v < V; v++) want += exp(ya[v]) * (ya[v] - yb[v]) / T;
    }
    CHECK_NEAR(k1, want, 1e-9 + 1e-6 * want);
    CHECK(want > 0);
    /* too little text: one clear error */
    CHECK(ls_quant_layer_kl(ck, tok, 10, 0, 1, bits, 3, kl, NULL) == LS_EINVAL);
    /* a pass that fails mid-run (a width the engine refuses, every other job) fails the call with
     * that pass's error, on one thread and with passes in parallel */
    const int bad[2] = {8, 5};
    for (int th = 1; th <= 2; th++) {
        CHECK_MSG(ls_quant_layer_kl(ck, tok, n, (size_t)T, th, bad, 2, kl, NULL) == LS_EINVAL, "%d thread(s)", th);
        CHECK_MSG(strstr(ls_errmsg(), "unsupported bit width 5"), "%d thread(s): %s", th, ls_errmsg());
    }

    /* the kl indicator: 0 at 16 bits, normalised, cheaper with more bits */
    FILE *f = fopen(txt, "w");
    for (int i = 0; i < 3000; i++) fputc('a' + (int)tok[i % n] % 20, f);
    fclose(f);
    ls_plan_arch a;
    ls_plan_catalog *cat;
    CHECK(ls_plan_catalog_load(NULL, &cat) == LS_OK);
    CHECK(ls_plan_resolve_model(cat, ck, &a) == LS_OK);
    double om[2 * LS_PLAN_NBITS], sum4 = 0;
    const char *paths[1] = {txt};
    CHECK(ls_quant_indicator_kl(ck, paths, 1, 1000, 1, &a, om) == LS_OK);
    for (int l = 0; l < L; l++) {
        const double *o = om + l * LS_PLAN_NBITS; /* 3, 4, 8, 16 bits */
        CHECK(o[3] == 0 && o[0] > o[1] && o[1] > o[2] && o[2] > 0);
        sum4 += o[1];
    }
    CHECK_NEAR(sum4, 1, 1e-12);
    ls_plan_catalog_free(cat);
    free(in);
    free(la);
    free(lb);
    free(ya);
    free(yb);
    free(tok);
    ls_engine_free(e16);
    ls_engine_free(e3);
    unlink(ck);
    unlink(txt);
    rmdir(dir);
}

int main(void) {
    CHECK(ls_model_config_named("tiny", &cfg) == LS_OK);
    CHECK(ls_model_init(&m, &cfg, 3) == LS_OK);
    /* LayerNorm gains and every bias away from their initial 1 and 0, so that a misplaced
     * buffer or term shows */
    ls_rng r;
    ls_rng_seed(&r, 4);
    for (int l = 0; l < cfg.n_layer; l++) {
        static const int kinds[] = {LS_LT_LN1W, LS_LT_LN1B, LS_LT_QKVB, LS_LT_PROJB,
                                    LS_LT_LN2W, LS_LT_LN2B, LS_LT_FCB,  LS_LT_FCPB};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            ls_param p = ls_model_tensor(m, ls_model_layout_index(&cfg, l, kinds[k]));
            for (size_t i = 0; i < p.numel; i++) p.data[i] += 0.5f * (float)(ls_rng_uniform(&r) - 0.5);
        }
    }
    RUN(test_layer0);
    RUN(test_indicator);
    RUN(test_layer_kl);
    ls_model_free(m);
    return TEST_RESULT();
}
