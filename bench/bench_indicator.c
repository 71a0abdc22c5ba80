/* bench_indicator.c - how well each quality indicator of the planner ranks what quantization
 * really costs. The truth is measured here, through the serving engine's kernels: with one
 * layer at b bits and every other at 16, the mean KL divergence of the next-token
 * distribution from the all-16-bit model's, over held-out windows (and the change of the
 * held-out loss, which is reported but too small against its rounding to rank by), for every
 * layer and each b. Each indicator's omega[layer, b] is scored by its Spearman rank
 * correlation with the KL, per bit width (over the layers) and pooled (over every layer and
 * width), and by the Pearson correlation of their logarithms, pooled (the sizes, which the
 * planner adds up); the default profile, which reads no weights, is the baseline.
 *
 * Usage: bench_indicator [--model CKPT] [--data PATH ...] [--calib-tokens N] [--eval-tokens N]
 *                        [--threads N] [--quick] [--out FILE]
 * --threads: engine passes at a time for the KL indicator and the truth (default 1).
 * CKPT is an fp32 checkpoint trained on the corpus (default /usr/share/common-licenses).
 * Without it, the benchmark first trains one here: the small config for 400 steps (about
 * 10 minutes on 2 cores), or with --quick the tiny config (2 layers) for 100 steps, calibrated
 * and scored on 2 048 tokens (seconds: a smoke run, its ranks over 2 layers mean little). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/plan.h"
#include "llmsys/quant.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

#define NB LS_PLAN_NBITS
enum { NIND = 8, NTRUE = 2, MAXDATA = 16 };
static const int true_bits[NTRUE] = {3, 4}; /* where the planner's choices are */
static const char *const ind_name[NIND] = {"default profile",      "variance, propagated", "variance, calibrated",
                                           "measured, propagated", "measured, calibrated", "variance, relative",
                                           "measured, relative",   "KL, train split"};

/* Ranks of x[0..n) (ties share their mean rank). */
static void ranks(const double *x, int n, double *r) {
    for (int i = 0; i < n; i++) {
        int less = 0, same = 0;
        for (int j = 0; j < n; j++) less += x[j] < x[i], same += x[j] == x[i];
        r[i] = less + (same + 1) / 2.0;
    }
}

/* Spearman's rho: Pearson's correlation of the ranks. */
/* Pearson's correlation of log x and log y over the pairs where both are > 0: whether the
 * sizes agree (the planner sums omega), not only the order. */
static double log_pearson(const double *x, const double *y, int n) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > 0 && y[i] > 0) mx += log(x[i]), my += log(y[i]), m++;
    if (m < 2) return NAN;
    mx /= m, my /= m;
    for (int i = 0; i < n; i++)
        if (x[i] > 0 && y[i] > 0) {
            double a = log(x[i]) - mx, b = log(y[i]) - my;
            sxy += a * b, sxx += a * a, syy += b * b;
        }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

static double spearman(const double *x, const double *y, int n) {
    double *rx = malloc(sizeof(double) * (size_t)n * 2), *ry = rx + n, mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    ranks(x, n, rx);
    ranks(y, n, ry);
    for (int i = 0; i < n; i++) mx += rx[i] / n, my += ry[i] / n;
    for (int i = 0; i < n; i++)
        sxy += (rx[i] - mx) * (ry[i] - my), sxx += (rx[i] - mx) * (rx[i] - mx), syy += (ry[i] - my) * (ry[i] - my);
    free(rx);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* Trains config for steps on data into out, in this process (one rank). */
static int train(const char *config, int steps, const char *const *data, int nd, const char *out) {
    ls_train_job j = ls_train_job_defaults();
    j.config = config, j.data = data, j.n_data = nd, j.steps = steps, j.out = out;
    LS_TRY(ls_train_job_check(&j, 0));
    ls_dist *d;
    LS_TRY(ls_dist_init(&d));
    ls_train_job_result r;
    int rc = ls_train_job_run(&j, d, &r);
    ls_dist_free(d);
    if (rc == LS_OK)
        printf("trained %s %d steps in %.0f s: loss %.4f -> %.4f, saved %s\n", config, steps, r.wall_s, r.first_loss,
               r.last_loss, out);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL, *out = "bench-out/bench_indicator.json", *data[MAXDATA];
    int nd = 0, quick = 0, threads = 1;
    size_t calib_tokens = 16384, eval_tokens = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc && nd < MAXDATA)
            data[nd++] = argv[++i];
        else if (!strcmp(argv[i], "--calib-tokens") && i + 1 < argc)
            calib_tokens = (size_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--eval-tokens") && i + 1 < argc)
            eval_tokens = (size_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1, calib_tokens = eval_tokens = 2048;
        else {
            fprintf(stderr, "usage: bench_indicator [--model CKPT] [--data PATH ...] [--calib-tokens N] "
                            "[--eval-tokens N] [--threads N] [--quick] [--out FILE]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (!nd) data[nd++] = "/usr/share/common-licenses";
    char trained[1200];
    if (!model) { /* beside the report */
        snprintf(trained, sizeof trained, "%.*s-model.safetensors", (int)(strlen(out) > 5 ? strlen(out) - 5 : 0), out);
        if (train(quick ? "tiny" : "small", quick ? 100 : 400, data, nd, trained) != LS_OK) {
            fprintf(stderr, "bench_indicator: training: %s\n", ls_errmsg());
            return 1;
        }
        model = trained;
    }
    ls_plan_catalog *cat = NULL;
    ls_plan_arch a;
    ls_model_config mc;
    ls_bpe *bpe = NULL;
    ls_corpus *c = NULL;
    ls_corpus_opts co = ls_corpus_defaults();
    int rc = ls_plan_catalog_load(NULL, &cat);
    if (rc == LS_OK) rc = ls_plan_resolve_model(cat, model, &a);
    if (rc == LS_OK) rc = ls_ckpt_tokenizer_load(model, NULL, &bpe);
    int *qbits = NULL;
    if (rc == LS_OK) rc = ls_ckpt_info(model, &mc, &qbits, NULL);
    free(qbits);
    co.tokenizer = bpe;
    if (rc == LS_OK) rc = ls_corpus_load(&c, data, nd, &co);
    if (rc != LS_OK) {
        fprintf(stderr, "bench_indicator: %s\n", ls_errmsg());
        return 1;
    }
    int L = a.n_layer;
    char feat[256];
    double la[3] = {-1, -1, -1};
    if (getloadavg(la, 3) < 0) la[0] = -1;
    printf("bench_indicator: %s (%d layers, d_model %d); kernels %s; CPU %s; load %.2f %.2f %.2f\n", model, L,
           a.d_model, ls_quant_impl_name(), ls_cpu_features_str(ls_cpu_features(), feat, sizeof feat), la[0], la[1],
           la[2]);

    /* the indicators */
    double *om = calloc((size_t)NIND * L * NB, sizeof(double)), secs[NIND] = {0};
    ls_eval_result cr = {0};
    for (int k = 0; k < NIND && rc == LS_OK; k++) {
        double t0 = ls_now(), *o = om + (size_t)k * L * NB;
        rc = k == 0   ? ls_plan_quality_default(&a, o)
             : k == 1 ? ls_plan_quality_from_checkpoint(model, &a, o)
             : k == 3 ? ls_plan_quality_measured(model, &a, o)
             : k == 7 ? ls_quant_indicator_kl(model, data, nd, calib_tokens, threads, &a, o)
                      : ls_plan_quality_calibrated(model, data, nd, calib_tokens, &a, o,
                                                   (k == 4 || k == 6 ? LS_PLAN_QUALITY_MEASURED : 0) |
                                                       (k >= 5 ? LS_PLAN_QUALITY_RELATIVE : 0),
                                                   &cr);
        secs[k] = ls_now() - t0;
    }

    /* the truth: one layer at a time quantized, on the held-out split */
    size_t n, avail;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    size_t windows = ls_eval_windows(n, mc.n_ctx, eval_tokens, &avail);
    double *kl = calloc((size_t)L * NTRUE, sizeof(double)), *dl = calloc((size_t)L * NTRUE + 1, sizeof(double));
    double t0 = ls_now();
    if (rc == LS_OK) rc = ls_quant_layer_kl(model, tok, n, eval_tokens, threads, true_bits, NTRUE, kl, dl);
    double truth_s = ls_now() - t0, base = dl[L * NTRUE];
    for (int i = 0; i < L * NTRUE; i++) dl[i] -= base;
    if (rc != LS_OK) {
        fprintf(stderr, "bench_indicator: %s\n", ls_errmsg());
        return 1;
    }
    printf("held-out, every layer at 16 bits: next-token NLL %.4f nats over %zu windows of %d tokens; calibration on "
           "%zu train tokens (loss %.4f); truth measured in %.1f s\n\n",
           base, windows, mc.n_ctx, cr.tokens, cr.loss, truth_s);

    printf("%-6s", "layer");
    for (int j = 0; j < NTRUE; j++) printf("   KL@%d     dloss@%d  ", true_bits[j], true_bits[j]);
    static const char *const shortn[NIND] = {"default",  "var prop", "var cal",  "meas prop",
                                             "meas cal", "var rel",  "meas rel", "KL train"};
    for (int k = 0; k < NIND; k++) printf(" %9s", shortn[k]);
    printf("   (the indicators: omega at 3 bits)\n");
    int k3 = ls_plan_bits_index(3);
    for (int l = 0; l < L; l++) {
        printf("%-6d", l);
        for (int j = 0; j < NTRUE; j++) printf(" %9.2e %+9.5f", kl[l * NTRUE + j], dl[l * NTRUE + j]);
        for (int k = 0; k < NIND; k++) printf(" %9.4f", om[((size_t)k * L + l) * NB + k3]);
        printf("\n");
    }

    /* the scores */
    cJSON *j = cJSON_CreateObject(), *ja = cJSON_AddArrayToObject(j, "indicators");
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddNumberToObject(j, "n_layer", L);
    cJSON_AddStringToObject(j, "kernels", ls_quant_impl_name());
    cJSON_AddStringToObject(j, "cpu_features", feat);
    cJSON_AddNumberToObject(j, "load1", la[0]);
    cJSON_AddNumberToObject(j, "heldout_loss_16bit", base);
    cJSON_AddNumberToObject(j, "heldout_tokens", (double)n);
    cJSON_AddNumberToObject(j, "truth_seconds", truth_s);
    cJSON_AddNumberToObject(j, "calib_tokens", (double)cr.tokens);
    cJSON_AddNumberToObject(j, "kl_threads", threads); /* KL passes at a time */
    cJSON_AddNumberToObject(j, "heldout_windows", (double)windows);
    cJSON_AddItemToObject(j, "truth_bits", cJSON_CreateIntArray(true_bits, NTRUE));
    cJSON *jk = cJSON_AddArrayToObject(j, "kl"), *jd = cJSON_AddArrayToObject(j, "dloss");
    for (int l = 0; l < L; l++) {
        cJSON_AddItemToArray(jk, cJSON_CreateDoubleArray(kl + l * NTRUE, NTRUE));
        cJSON_AddItemToArray(jd, cJSON_CreateDoubleArray(dl + l * NTRUE, NTRUE));
    }
    printf("\n%-22s %9s %9s %9s %9s %9s\n", "indicator", "rho@3", "rho@4", "pooled", "log r", "seconds");
    double *x = malloc(sizeof(double) * (size_t)L * NTRUE), *y = malloc(sizeof(double) * (size_t)L * NTRUE);
    for (int k = 0; k < NIND; k++) {
        const double *o = om + (size_t)k * L * NB;
        double rho[NTRUE + 1];
        for (int jb = 0; jb < NTRUE; jb++) {
            int kb = ls_plan_bits_index(true_bits[jb]);
            for (int l = 0; l < L; l++) x[l] = o[l * NB + kb], y[l] = kl[l * NTRUE + jb];
            rho[jb] = spearman(x, y, L);
        }
        for (int l = 0; l < L; l++)
            for (int jb = 0; jb < NTRUE; jb++)
                x[l * NTRUE + jb] = o[l * NB + ls_plan_bits_index(true_bits[jb])],
                              y[l * NTRUE + jb] = kl[l * NTRUE + jb];
        rho[NTRUE] = spearman(x, y, L * NTRUE);
        double logr = log_pearson(x, y, L * NTRUE);
        printf("%-22s %9.3f %9.3f %9.3f %9.3f %9.2f\n", ind_name[k], rho[0], rho[1], rho[2], logr, secs[k]);
        cJSON *ji = cJSON_CreateObject();
        cJSON_AddStringToObject(ji, "name", ind_name[k]);
        cJSON_AddNumberToObject(ji, "rho_3bit", rho[0]);
        cJSON_AddNumberToObject(ji, "rho_4bit", rho[1]);
        cJSON_AddNumberToObject(ji, "rho_pooled", rho[2]);
        cJSON_AddNumberToObject(ji, "log_pearson_pooled", logr);
        cJSON_AddNumberToObject(ji, "seconds", secs[k]);
        cJSON *jo = cJSON_AddArrayToObject(ji, "omega");
        for (int l = 0; l < L; l++) cJSON_AddItemToArray(jo, cJSON_CreateDoubleArray(o + l * NB, NB));
        cJSON_AddItemToArray(ja, ji);
    }
    rc = ls_json_write_file(out, j);
    if (rc == LS_OK) printf("\nwrote %s\n", out);
    cJSON_Delete(j);
    free(x);
    free(y);
    free(om);
    free(dl);
    free(kl);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    ls_plan_catalog_free(cat);
    return rc == LS_OK ? 0 : 1;
}
