/* test_units.c - data in the user's own units: the min-max scaler recorded by normalisation
 * (against a float64 recomputation), stored in victim.bin (version 2) and applied by the API
 * to raw rows (labels identical to predicting the scaled rows); a hand-written version-1 file
 * still loads and predicts as naive Bayes computed here; images carry no scaler (identity);
 * eval test sets (whole file vs split) and dataset names as the user gave them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <cjson/cJSON.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "steal/internal.h"
#include "test.h"

static char dir[128], csv[256];

/* A raw table on disk whose features are far from [0, 1] (digits-like 0..16 plus offsets). */
static void write_table(void) {
    ls_steal_data t;
    CHECK_EQ_INT(ls_steal_make_table("blobs", 600, 6, 3, 5, &t), LS_OK);
    for (int64_t i = 0; i < t.n; i++)
        for (int j = 0; j < t.d; j++) t.x[i * t.d + j] = t.x[i * t.d + j] * (float)(j + 2) + 10.0f * (float)j;
    CHECK_EQ_INT(ls_steal_csv_write(csv, &t), LS_OK);
    ls_steal_data_free(&t);
}

static void test_scaler_recorded(void) {
    ls_steal_data all, rtr, rte, tr, te;
    CHECK_EQ_INT(ls_steal_csv_load(csv, &all), LS_OK);
    CHECK_MSG(!strcmp(all.name, csv), "csv name '%s' is not the path", all.name);
    CHECK(all.raw_min == NULL); /* raw rows */
    CHECK_EQ_INT(ls_steal_data_split(&all, 0.2, 1234, &rtr, &rte), LS_OK);
    CHECK_EQ_INT(ls_steal_dataset_open(csv, 0, &tr, &te), LS_OK);
    CHECK_MSG(!strcmp(tr.name, csv) && !strcmp(te.name, csv), "dataset name '%s' is not the path '%s'", tr.name, csv);
    CHECK(tr.raw_min && tr.raw_max && te.raw_min && te.raw_max);
    if (!tr.raw_min || !te.raw_min) return;
    /* the scaler is the train split's per-feature min and max; scaling matches float64 */
    double worst = 0;
    for (int j = 0; j < tr.d; j++) {
        double mn = INFINITY, mx = -INFINITY;
        for (int64_t i = 0; i < rtr.n; i++) mn = fmin(mn, rtr.x[i * tr.d + j]), mx = fmax(mx, rtr.x[i * tr.d + j]);
        CHECK(tr.raw_min[j] == (float)mn && tr.raw_max[j] == (float)mx);
        CHECK(te.raw_min[j] == tr.raw_min[j] && te.raw_max[j] == tr.raw_max[j]);
        for (int64_t i = 0; i < te.n; i++) {
            double want = fmin(1.0, fmax(0.0, (rte.x[i * te.d + j] - mn) / (mx - mn)));
            worst = fmax(worst, fabs(te.x[i * te.d + j] - want));
        }
    }
    CHECK_MSG(worst < 1e-5, "scaled test rows differ from float64 min-max by %g", worst);
    /* unscale inverts scale (inside the range) */
    float *back = malloc(sizeof(float) * (size_t)(te.n * te.d));
    memcpy(back, te.x, sizeof(float) * (size_t)(te.n * te.d));
    ls_steal_unscale_rows(te.raw_min, te.raw_max, te.d, 0, 1, back, te.n);
    double err = 0;
    for (int64_t i = 0; i < te.n * te.d; i++) {
        int j = (int)(i % te.d);
        double clipped = fmin(te.raw_max[j], fmax(te.raw_min[j], rte.x[i]));
        err = fmax(err, fabs(back[i] - clipped) / (te.raw_max[j] - te.raw_min[j]));
    }
    CHECK_MSG(err < 1e-5, "unscale(scale(x)) off by %g of the range", err);
    free(back);
    /* steal.h: a constant feature maps to the middle of [lo, hi] and back to its value; the
     * other feature scales and clips as usual (3 -> -1 + 2 x 0.5 = 0, 9 -> 1 clipped) */
    {
        float cmin[2] = {4, 1}, cmax[2] = {4, 5}, row[4] = {4, 3, 7, 9};
        ls_steal_scale_rows(cmin, cmax, 2, -1, 1, row, 2);
        CHECK(row[0] == 0 && row[2] == 0 && row[1] == 0 && row[3] == 1);
        ls_steal_unscale_rows(cmin, cmax, 2, -1, 1, row, 2);
        CHECK(row[0] == 4 && row[2] == 4 && row[1] == 3 && row[3] == 5);
    }
    ls_steal_data_free(&all), ls_steal_data_free(&rtr), ls_steal_data_free(&rte);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
}

/* The API of a victim trained on the CSV takes the CSV's own rows. */
static void test_victim_raw_api(void) {
    ls_steal_data tr, te, all, rtr, rte;
    CHECK_EQ_INT(ls_steal_dataset_open(csv, 0, &tr, &te), LS_OK);
    CHECK_EQ_INT(ls_steal_csv_load(csv, &all), LS_OK);
    CHECK_EQ_INT(ls_steal_data_split(&all, 0.2, 1234, &rtr, &rte), LS_OK);
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_LOGREG);
    ls_victim *v0, *v;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v0), LS_OK);
    char path[300];
    snprintf(path, sizeof path, "%s/v.bin", dir);
    CHECK_EQ_INT(ls_victim_save(v0, path), LS_OK);
    CHECK_EQ_INT(ls_victim_load(path, &v), LS_OK);
    ls_victim_free(v0);
    const float *mn, *mx;
    ls_victim_scaler(v, &mn, &mx);
    CHECK(mn && mx);
    for (int j = 0; mn && j < tr.d; j++) CHECK(mn[j] == tr.raw_min[j] && mx[j] == tr.raw_max[j]);
    int32_t *want = malloc(sizeof(int32_t) * (size_t)te.n), *got = malloc(sizeof(int32_t) * (size_t)te.n);
    CHECK_EQ_INT(ls_victim_predict(v, te.x, te.n, want), LS_OK);
    for (int raw = 1; raw >= 0; raw--) {
        ls_victim_server_opts so;
        ls_victim_server_opts_default(&so);
        so.model_units = !raw;
        ls_victim_server *s;
        CHECK_EQ_INT(ls_victim_server_start(v, &so, &s), LS_OK);
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(s));
        ls_steal_client *c;
        CHECK_EQ_INT(ls_steal_client_init(url, NULL, 10, te.d, te.k, &c), LS_OK);
        const ls_steal_data *rows = raw ? &rte : &te;
        for (int64_t i = 0; i < rows->n; i += 100) {
            int b = (int)(rows->n - i < 100 ? rows->n - i : 100);
            CHECK_EQ_INT(ls_steal_client_query(c, rows->x + i * rows->d, b, got + i, NULL, NULL), LS_OK);
        }
        CHECK_MSG(!memcmp(got, want, sizeof(int32_t) * (size_t)te.n), "%s rows: API labels differ from the model's",
                  raw ? "raw" : "scaled");
        int st = 0;
        char *body = NULL;
        CHECK_EQ_INT(ls_steal_client_get(c, "/info", &st, &body), LS_OK);
        cJSON *j = body ? cJSON_Parse(body) : NULL;
        const cJSON *u = cJSON_GetObjectItem(j, "units"), *ir = cJSON_GetObjectItem(j, "input_range");
        CHECK(cJSON_IsString(u) && !strcmp(u->valuestring, raw ? "raw" : "model"));
        float lo = INFINITY, hi = -INFINITY;
        for (int f = 0; f < tr.d; f++) lo = fminf(lo, tr.raw_min[f]), hi = fmaxf(hi, tr.raw_max[f]);
        if (!raw) lo = 0, hi = 1;
        CHECK_MSG(cJSON_GetArraySize(ir) == 2 && fabs(cJSON_GetArrayItem(ir, 0)->valuedouble - lo) < 1e-4 * (hi - lo) &&
                      fabs(cJSON_GetArrayItem(ir, 1)->valuedouble - hi) < 1e-4 * (hi - lo),
                  "/info input_range %s, expected [%g, %g]", body ? body : "", lo, hi);
        const cJSON *fmin_ = cJSON_GetObjectItem(j, "feature_min");
        CHECK(cJSON_GetArraySize(fmin_) == tr.d &&
              fabs(cJSON_GetArrayItem(fmin_, 1)->valuedouble - tr.raw_min[1]) < 1e-4 * fabs(tr.raw_min[1]) + 1e-6);
        cJSON_Delete(j);
        free(body);
        /* raw values beyond the training range are clipped (as the test split was), not refused */
        float far[6] = {1e6f, -1e6f, 0, 0, 0, 0};
        int32_t l1;
        CHECK_EQ_INT(ls_steal_client_query(c, far, 1, &l1, NULL, NULL), raw ? LS_OK : LS_EPEER);
        ls_steal_client_free(c);
        ls_victim_server_stop(s);
    }
    free(want), free(got);
    ls_victim_free(v);
    ls_steal_data_free(&tr), ls_steal_data_free(&te), ls_steal_data_free(&all), ls_steal_data_free(&rtr),
        ls_steal_data_free(&rte);
}

/* A version-1 victim.bin, written byte by byte: naive Bayes, d 2, k 2, no scaler. */
static void test_version1_loads(void) {
    unsigned char b[512];
    size_t n = 0;
#define PUT(p, len) (memcpy(b + n, (p), (len)), n += (len))
    PUT("LSVICTIM", 8);
    uint32_t hdr[8] = {1, LS_VICTIM_NB, 2, 2, 1, 1, 2, 0};
    PUT(hdr, sizeof hdr);
    float lo = 0, hi = 1;
    PUT(&lo, 4), PUT(&hi, 4);
    float mean[4] = {0.2f, 0.2f, 0.8f, 0.7f}, ivar[4] = {10, 12, 9, 10}, logc[2] = {-0.1f, 0.05f};
    int64_t c4 = 4, c2 = 2;
    PUT(&c4, 8), PUT(mean, 16), PUT(&c4, 8), PUT(ivar, 16), PUT(&c2, 8), PUT(logc, 8);
    uint64_t h = ls_hash64(b, n);
    PUT(&h, 8);
#undef PUT
    char path[300];
    snprintf(path, sizeof path, "%s/v1.bin", dir);
    CHECK_EQ_INT(ls_file_write_atomic(path, b, n), LS_OK);
    ls_victim *v;
    CHECK_EQ_INT(ls_victim_load(path, &v), LS_OK);
    if (!v) return;
    const float *mn, *mx;
    ls_victim_scaler(v, &mn, &mx);
    CHECK(mn == NULL && mx == NULL);
    float x[8] = {0.1f, 0.3f, 0.9f, 0.6f, 0.55f, 0.45f, 0.5f, 0.45f};
    int32_t got[4];
    CHECK_EQ_INT(ls_victim_predict(v, x, 4, got), LS_OK);
    for (int i = 0; i < 4; i++) {
        double s[2];
        for (int c = 0; c < 2; c++) {
            s[c] = logc[c];
            for (int j = 0; j < 2; j++) s[c] -= 0.5 * ivar[c * 2 + j] * pow(x[i * 2 + j] - mean[c * 2 + j], 2);
        }
        CHECK_EQ_INT(got[i], s[1] > s[0] ? 1 : 0);
    }
    /* the old file served: inputs in [0, 1], /info says model units */
    ls_victim_server_opts so;
    ls_victim_server_opts_default(&so);
    ls_victim_server *s;
    CHECK_EQ_INT(ls_victim_server_start(v, &so, &s), LS_OK);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(s));
    ls_steal_client *c;
    CHECK_EQ_INT(ls_steal_client_init(url, NULL, 10, 2, 2, &c), LS_OK);
    int32_t l2[4];
    CHECK_EQ_INT(ls_steal_client_query(c, x, 4, l2, NULL, NULL), LS_OK);
    CHECK(!memcmp(l2, got, sizeof got));
    ls_steal_client_free(c);
    ls_victim_server_stop(s);
    /* re-saved, it is a version-2 file */
    CHECK_EQ_INT(ls_victim_save(v, path), LS_OK);
    ls_victim_free(v);
    char *d;
    size_t len;
    CHECK_EQ_INT(ls_file_read(path, &d, &len), LS_OK);
    uint32_t ver;
    memcpy(&ver, d + 8, 4);
    CHECK_EQ_INT((int)ver, 2);
    free(d);
    CHECK_EQ_INT(ls_victim_load(path, &v), LS_OK);
    ls_victim_free(v);
    /* a future version is refused with the versions this build reads */
    hdr[0] = 3;
    memcpy(b + 8, hdr, 4);
    h = ls_hash64(b, n - 8);
    memcpy(b + n - 8, &h, 8);
    CHECK_EQ_INT(ls_file_write_atomic(path, b, n), LS_OK);
    CHECK_EQ_INT(ls_victim_load(path, &v), LS_EFORMAT);
    CHECK(strstr(ls_errmsg(), "reads 1 to 2") != NULL);
}

/* Images already in [0, 1] carry no scaler: the API takes them as they are. */
static void test_images_identity(void) {
    ls_steal_data tr, te;
    const char *fm = "/usr/share/datasets/fashion-mnist";
    char spec[300];
    snprintf(spec, sizeof spec, "fmnist:%s", fm);
    char probe[400];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", fm);
    if (!ls_is_file(probe)) {
        printf("  (Fashion-MNIST not installed: image checks skipped)\n");
        return;
    }
    int rc = ls_steal_dataset_open(spec, 300, &tr, &te);
    CHECK_MSG(rc == LS_OK, "%s: %s", spec, ls_errmsg());
    if (rc != LS_OK) return;
    CHECK_MSG(!strcmp(tr.name, fm) && !strcmp(te.name, fm), "fmnist:DIR reported as '%s'", tr.name);
    CHECK(tr.raw_min == NULL && te.raw_min == NULL);
    ls_victim_opts o;
    ls_victim_opts_default(&o, LS_VICTIM_NB);
    ls_victim *v;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    float *x = malloc(sizeof(float) * (size_t)(10 * te.d));
    memcpy(x, te.x, sizeof(float) * (size_t)(10 * te.d));
    ls_victim_scale_inputs(v, x, 10);
    CHECK(!memcmp(x, te.x, sizeof(float) * (size_t)(10 * te.d)));
    free(x);
    ls_victim_free(v);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
}

/* Gini impurity (n_c - sum cnt^2 / n_c over both children) of the split x[f] < thr of rows
 * idx, or INFINITY when a side has fewer than min_leaf rows. */
static double gini_split(const ls_steal_data *t, const int *idx, int n, int f, float thr, int min_leaf) {
    double l[64] = {0}, r[64] = {0}, nl = 0, nr = 0, sl = 0, sr = 0;
    for (int i = 0; i < n; i++) {
        int y = t->y[idx[i]];
        if (t->x[(int64_t)idx[i] * t->d + f] < thr)
            l[y]++, nl++;
        else
            r[y]++, nr++;
    }
    if (nl < min_leaf || nr < min_leaf) return INFINITY;
    for (int c = 0; c < t->k; c++) sl += l[c] * l[c], sr += r[c] * r[c];
    return (nl - sl / nl) + (nr - sr / nr);
}

/* Trained victims against float64 recomputations on blobs: naive Bayes from per-class means
 * and variances (variance smoothed by 0.05 x the largest one, victim.c); k-NN (every training
 * row kept) by brute force, votes 1 + 0.001 x (k - rank) so ties go to the nearest; the tree's
 * leaves hold the class shares of the training rows that reach them (x < thr goes left) and
 * its root split is the best Gini split over the 32 uniform bin edges of [lo, hi] (victim.c's
 * NBINS). */
static void test_victim_references(void) {
    ls_steal_data tr, te;
    CHECK_EQ_INT(ls_steal_dataset_open("blobs", 500, &tr, &te), LS_OK);
    int d = tr.d, k = tr.k;
    int64_t n = tr.n, nt = te.n < 100 ? te.n : 100;
    float *p = malloc(sizeof(float) * (size_t)(nt * k));
    ls_victim_opts o;
    ls_victim *v;
    /* naive Bayes */
    ls_victim_opts_default(&o, LS_VICTIM_NB);
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    CHECK_EQ_INT(ls_victim_predict_proba(v, te.x, nt, p), LS_OK);
    ls_victim_free(v);
    {
        double cnt[64] = {0}, *mu = calloc((size_t)(k * d), sizeof(double)),
               *var = calloc((size_t)(k * d), sizeof(double));
        double maxvar = 0, worst = 0;
        for (int64_t i = 0; i < n; i++) {
            cnt[tr.y[i]]++;
            for (int j = 0; j < d; j++) mu[tr.y[i] * d + j] += tr.x[i * d + j];
        }
        for (int c = 0; c < k; c++)
            for (int j = 0; j < d; j++) mu[c * d + j] /= cnt[c];
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < d; j++) var[tr.y[i] * d + j] += pow(tr.x[i * d + j] - mu[tr.y[i] * d + j], 2);
        for (int c = 0; c < k * d; c++) var[c] /= cnt[c / d], maxvar = fmax(maxvar, var[c]);
        for (int64_t i = 0; i < nt; i++) {
            double sc[64], mx = -INFINITY, z = 0;
            for (int c = 0; c < k; c++) {
                sc[c] = log(cnt[c] / (double)n);
                for (int j = 0; j < d; j++) {
                    double vv = var[c * d + j] + 0.05 * maxvar + 1e-9;
                    sc[c] -= 0.5 * log(vv) + 0.5 * pow(te.x[i * d + j] - mu[c * d + j], 2) / vv;
                }
                mx = fmax(mx, sc[c]);
            }
            for (int c = 0; c < k; c++) z += exp(sc[c] - mx);
            for (int c = 0; c < k; c++) worst = fmax(worst, fabs(p[i * k + c] - exp(sc[c] - mx) / z));
        }
        CHECK_MSG(worst < 1e-4, "naive Bayes probabilities differ from float64 by %g", worst);
        free(mu), free(var);
    }
    /* k-NN over every training row */
    ls_victim_opts_default(&o, LS_VICTIM_KNN);
    o.knn_k = 5, o.knn_ref = n;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    CHECK_EQ_INT(ls_victim_predict_proba(v, te.x, nt, p), LS_OK);
    ls_victim_free(v);
    {
        double *dist = malloc(sizeof(double) * (size_t)n), worst = 0;
        int checked = 0;
        for (int64_t i = 0; i < nt; i++) {
            for (int64_t r = 0; r < n; r++) {
                dist[r] = 0;
                for (int j = 0; j < d; j++) dist[r] += pow((double)te.x[i * d + j] - tr.x[r * d + j], 2);
            }
            int nb[6], near_tie = 0;
            for (int q = 0; q < 6; q++) { /* the 6 nearest, lower index first on equal distance */
                nb[q] = -1;
                for (int64_t r = 0; r < n; r++) {
                    int used = 0;
                    for (int u = 0; u < q; u++) used |= nb[u] == r;
                    if (!used && (nb[q] < 0 || dist[r] < dist[nb[q]])) nb[q] = (int)r;
                }
                if (q > 0 && dist[nb[q]] - dist[nb[q - 1]] < 1e-4 * (dist[nb[q]] + 1e-6)) near_tie = 1;
            }
            if (near_tie) continue; /* float32 distances may order these otherwise */
            double pr[64] = {0}, z = 0;
            for (int q = 0; q < 5; q++) pr[tr.y[nb[q]]] += 1.0 + 1e-3 * (5 - q), z += 1.0 + 1e-3 * (5 - q);
            for (int c = 0; c < k; c++) worst = fmax(worst, fabs(p[i * k + c] - pr[c] / z));
            checked++;
        }
        CHECK_MSG(worst < 1e-5, "k-NN probabilities differ from brute force by %g", worst);
        CHECK(checked > nt / 2);
        free(dist);
    }
    /* one tree */
    ls_victim_opts_default(&o, LS_VICTIM_TREE);
    o.max_depth = 4;
    CHECK_EQ_INT(ls_victim_train(&o, &tr, &v), LS_OK);
    ls_tree_view tv;
    CHECK_EQ_INT(ls_victim_tree_view(v, &tv), LS_OK);
    {
        double *share = calloc((size_t)tv.nleaves * k, sizeof(double)), worst = 0;
        for (int64_t i = 0; i < n; i++) {
            int nd = 0;
            while (tv.feat[nd] >= 0) nd = tr.x[i * d + tv.feat[nd]] < tv.thr[nd] ? tv.left[nd] : tv.right[nd];
            share[(size_t)tv.left[nd] * k + tr.y[i]]++;
        }
        for (int l = 0; l < tv.nleaves; l++) {
            double m = 0;
            for (int c = 0; c < k; c++) m += share[(size_t)l * k + c];
            for (int c = 0; c < k && m > 0; c++)
                worst = fmax(worst, fabs(tv.probs[(size_t)l * k + c] - share[(size_t)l * k + c] / m));
        }
        CHECK_MSG(worst < 1e-6, "tree leaves differ from their training rows' class shares by %g", worst);
        int *idx = malloc(sizeof(int) * (size_t)n);
        for (int64_t i = 0; i < n; i++) idx[i] = (int)i;
        float bw = (tr.hi - tr.lo) / 32;
        double best = INFINITY;
        for (int f = 0; f < d; f++)
            for (int b = 1; b < 32; b++)
                best = fmin(best, gini_split(&tr, idx, (int)n, f, tr.lo + (float)b * bw, o.min_leaf));
        CHECK(tv.feat[0] >= 0);
        if (tv.feat[0] >= 0) {
            double root = gini_split(&tr, idx, (int)n, tv.feat[0], tv.thr[0], o.min_leaf);
            CHECK_MSG(root <= best + 1e-9, "root split Gini %.6f, best over the bin edges %.6f", root, best);
        }
        free(idx), free(share);
    }
    ls_victim_free(v);
    free(p);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
}

static void test_testset(void) {
    ls_steal_data tr, te, dtr, dte;
    char desc[512];
    CHECK_EQ_INT(ls_steal_testset_open(csv, 0, &tr, &te, desc, sizeof desc), LS_OK);
    CHECK_EQ_INT((int)te.n, 600);
    CHECK_EQ_INT((int)tr.n, 0);
    CHECK(te.raw_min == NULL);
    CHECK_MSG(strstr(desc, "all 600 rows of") && strstr(desc, csv), "desc '%s'", desc);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
    CHECK_EQ_INT(ls_steal_testset_open(csv, 0.2, &tr, &te, desc, sizeof desc), LS_OK);
    CHECK_EQ_INT(ls_steal_dataset_open(csv, 0, &dtr, &dte), LS_OK);
    CHECK_EQ_INT((int)te.n, 120);
    CHECK(te.n == dte.n && !memcmp(te.x, dte.x, sizeof(float) * (size_t)(te.n * te.d)) &&
          !memcmp(te.y, dte.y, sizeof(int32_t) * (size_t)te.n));
    CHECK_MSG(strstr(desc, "120 of 600 rows"), "desc '%s'", desc);
    ls_steal_data_free(&tr), ls_steal_data_free(&te), ls_steal_data_free(&dtr), ls_steal_data_free(&dte);
    CHECK_EQ_INT(ls_steal_testset_open("blobs", 0.2, &tr, &te, desc, sizeof desc), LS_EINVAL);
    CHECK_EQ_INT(ls_steal_testset_open(csv, 1.5, &tr, &te, desc, sizeof desc), LS_EINVAL);
    CHECK_EQ_INT(ls_steal_testset_open("blobs", 0, &tr, &te, desc, sizeof desc), LS_OK);
    CHECK_MSG(strstr(desc, "held-out test split of blobs"), "desc '%s'", desc);
    ls_steal_data_free(&tr), ls_steal_data_free(&te);
}

static int victim_type_parses(const char *s) { return ls_victim_type_parse(s) >= 0; }

int main(void) {
    openblas_set_num_threads(1);
    snprintf(dir, sizeof dir, "/tmp/llmsys-steal-units-%d", (int)getpid());
    ls_mkdirs(dir);
    snprintf(csv, sizeof csv, "%s/table.csv", dir);
    write_table();
    test_choice_list(LS_VICTIM_TYPES, LS_VICTIM_COUNT, victim_type_parses);
    RUN(test_scaler_recorded);
    RUN(test_victim_raw_api);
    RUN(test_version1_loads);
    RUN(test_images_identity);
    RUN(test_victim_references);
    RUN(test_testset);
    char p[300];
    const char *files[] = {"table.csv", "v.bin", "v1.bin"};
    for (int i = 0; i < 3; i++) snprintf(p, sizeof p, "%s/%s", dir, files[i]), unlink(p);
    rmdir(dir);
    return TEST_RESULT();
}
