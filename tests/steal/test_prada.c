/* test_prada.c - Shapiro-Wilk W against reference values (tabled coefficients, the classic
 * 1965 example, the exact n=3 law, null calibration) and the PRADA detector on natural vs
 * synthetic traffic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"
#include "test.h"

/* W computed with the exact tabled coefficients of Shapiro & Wilk (1965), the reference the
 * Royston approximation must match to about 1e-3. */
static double w_tabled(const double *xin, int n, const double *a) {
    double x[64];
    memcpy(x, xin, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    double mean = 0, ss = 0, num = 0;
    for (int i = 0; i < n; i++) mean += x[i] / n;
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    for (int i = 0; i < n / 2; i++) num += a[i] * (x[n - 1 - i] - x[i]);
    return num * num / ss;
}

static void test_sw_reference(void) {
    /* Shapiro & Wilk (1965) example: weights of 11 men; published W = 0.79 (R: 0.7888, p = 0.0067). */
    double men[11] = {148, 154, 158, 160, 161, 162, 166, 170, 182, 195, 236};
    double w, p;
    CHECK_EQ_INT(ls_shapiro_wilk(men, 11, &w, &p), LS_OK);
    CHECK_NEAR(w, 0.7888, 0.0005);
    CHECK_NEAR(p, 0.0067, 0.0003);
    static const double a11[5] = {0.5601, 0.3315, 0.2260, 0.1429, 0.0695};
    CHECK_NEAR(w, w_tabled(men, 11, a11), 0.002);
    /* Tabled coefficients for n = 10 and n = 20 on pseudo-random data. */
    static const double a10[5] = {0.5739, 0.3291, 0.2141, 0.1224, 0.0399};
    static const double a20[10] = {0.4734, 0.3211, 0.2565, 0.2085, 0.1686, 0.1334, 0.1013, 0.0711, 0.0422, 0.0140};
    ls_rng r;
    ls_rng_seed(&r, 3);
    for (int rep = 0; rep < 20; rep++) {
        double x[20];
        for (int i = 0; i < 20; i++) x[i] = rep % 2 ? ls_rng_normal(&r) : exp(ls_rng_normal(&r));
        CHECK_EQ_INT(ls_shapiro_wilk(x, 10, &w, NULL), LS_OK);
        CHECK_NEAR(w, w_tabled(x, 10, a10), 0.002);
        CHECK_EQ_INT(ls_shapiro_wilk(x, 20, &w, NULL), LS_OK);
        CHECK_NEAR(w, w_tabled(x, 20, a20), 0.002);
    }
    /* n = 3: a1 = sqrt(1/2) exactly and p = 6/pi (asin(sqrt W) - asin(sqrt 3/4)). */
    double t3[3] = {1, 2, 4};
    CHECK_EQ_INT(ls_shapiro_wilk(t3, 3, &w, &p), LS_OK);
    double mean = 7.0 / 3, ss = (1 - mean) * (1 - mean) + (2 - mean) * (2 - mean) + (4 - mean) * (4 - mean);
    double w3 = 0.5 * 9 / ss;
    CHECK_NEAR(w, w3, 1e-12);
    CHECK_NEAR(p, 6 / M_PI * (asin(sqrt(w3)) - asin(sqrt(0.75))), 1e-12);
    /* Errors: too few, too many, constant. */
    CHECK_EQ_INT(ls_shapiro_wilk(t3, 2, &w, NULL), LS_EINVAL);
    double c[5] = {1, 1, 1, 1, 1};
    CHECK_EQ_INT(ls_shapiro_wilk(c, 5, &w, NULL), LS_ERANGE);
}

static void test_sw_calibration(void) {
    /* Under normality p is uniform: ~5% below 0.05 (n = 30 and n = 8); far from normal
     * (exponential, n = 200) W is low and p tiny; large normal samples have W near 1. */
    ls_rng r;
    ls_rng_seed(&r, 11);
    double x[5000], w, p;
    int ns[2] = {30, 8};
    for (int t = 0; t < 2; t++) {
        int rej = 0;
        for (int rep = 0; rep < 1000; rep++) {
            for (int i = 0; i < ns[t]; i++) x[i] = ls_rng_normal(&r);
            ls_shapiro_wilk(x, ns[t], &w, &p);
            rej += p < 0.05;
        }
        CHECK_MSG(rej >= 30 && rej <= 72, "n=%d: %d of 1000 rejected at 5%%", ns[t], rej);
    }
    for (int i = 0; i < 200; i++) x[i] = -log(1 - ls_rng_uniform_f64(&r));
    CHECK_EQ_INT(ls_shapiro_wilk(x, 200, &w, &p), LS_OK);
    CHECK(w < 0.9 && p < 1e-6);
    for (int i = 0; i < 5000; i++) x[i] = ls_rng_normal(&r);
    CHECK_EQ_INT(ls_shapiro_wilk(x, 5000, &w, &p), LS_OK);
    CHECK(w > 0.998 && p > 0.001);
}

/* Natural-like traffic: points of a smooth 20-dim mixture embedded in 64 dims; attack-like:
 * a few seeds each followed by tiny sign perturbations (Jacobian-style), many near-duplicates. */
static void test_detector(void) {
    int d = 64, k = 4, n = 1500;
    ls_prada_opts po;
    ls_prada_opts_default(&po);
    po.delta = 0.95;
    ls_prada *nat, *atk;
    CHECK_EQ_INT(ls_prada_init(&po, d, k, &nat), LS_OK);
    CHECK_EQ_INT(ls_prada_init(&po, d, k, &atk), LS_OK);
    ls_rng r;
    ls_rng_seed(&r, 5);
    float *x = malloc(sizeof(float) * (size_t)n * d), *seeds = malloc(sizeof(float) * 40 * d);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
    float basis[20][64];
    for (int b = 0; b < 20; b++)
        for (int j = 0; j < d; j++) basis[b][j] = ls_rng_normal(&r) / 8;
    for (int i = 0; i < n; i++) {
        int c = (int)ls_rng_below(&r, (uint64_t)k);
        lab[i] = c;
        for (int j = 0; j < d; j++) x[i * d + j] = 0.5f + 0.05f * c;
        for (int b = 0; b < 20; b++) {
            float z = ls_rng_normal(&r);
            for (int j = 0; j < d; j++) x[i * d + j] += 0.3f * z * basis[b][j];
        }
    }
    for (int s = 0; s < n; s += 100) CHECK(ls_prada_observe(nat, x + (size_t)s * d, lab + s, 100) >= 0);
    int64_t q, fa;
    double w;
    ls_prada_state(nat, &q, &fa, &w);
    fprintf(stderr, "  natural: %lld queries, W %.4f, flagged at %lld\n", (long long)q, w, (long long)fa);
    CHECK_EQ_INT(q, n);
    CHECK_EQ_INT(fa, -1);
    CHECK(w > 0.95);
    /* Attack: 40 seeds, then rounds of +-0.02 sign steps from the latest versions. */
    for (int i = 0; i < 40 * d; i++) seeds[i] = ls_rng_uniform(&r);
    for (int i = 0; i < n; i++) {
        int s = i % 40;
        for (int j = 0; j < d; j++) {
            float v = seeds[s * d + j] + (i >= 40 ? (ls_rng_below(&r, 2) ? 0.02f : -0.02f) : 0);
            seeds[s * d + j] = v < 0 ? 0 : v > 1 ? 1 : v;
            x[i * d + j] = seeds[s * d + j];
        }
        lab[i] = s % k;
    }
    for (int s = 0; s < n; s += 100) CHECK(ls_prada_observe(atk, x + (size_t)s * d, lab + s, 100) >= 0);
    ls_prada_state(atk, &q, &fa, &w);
    fprintf(stderr, "  attack: %lld queries, W %.4f, flagged at %lld\n", (long long)q, w, (long long)fa);
    CHECK(fa > 0 && fa <= 500);
    CHECK(w < 0.95);
    ls_prada_free(nat);
    ls_prada_free(atk);
    free(x);
    free(seeds);
    free(lab);
}

/* A float64 replay of the detector as documented (prada.c, Juuti et al.): per class a growing
 * set of at most max_set queries (the oldest replaced when full); each query's distance to the
 * nearest member of its class's set joins a window of the last `window` distances and, when
 * above the class threshold, the query joins the set and the threshold becomes the largest
 * mean - sd of the distances that grew it; after each request with >= min_dists distances, W
 * of the window without values <= mean - 3 sd. Coordinates are multiples of 1/16, so every
 * squared distance is exact in float and the replay's W must equal the detector's. */
typedef struct {
    double set[2][8][8], thr[2], gs[2], gq[2], win[50];
    int n_set[2], next[2], gn[2];
    long ndist;
} prada_ref;

static void ref_observe(prada_ref *r, const float *x, int c) {
    if (r->n_set[c] > 0) {
        double best = INFINITY;
        for (int m = 0; m < r->n_set[c]; m++) {
            double d2 = 0;
            for (int j = 0; j < 8; j++) d2 += (x[j] - r->set[c][m][j]) * (x[j] - r->set[c][m][j]);
            best = fmin(best, d2);
        }
        double dm = sqrt(best);
        r->win[r->ndist++ % 50] = dm;
        if (!(dm > r->thr[c])) return;
        r->gs[c] += dm, r->gq[c] += dm * dm, r->gn[c]++;
        double mu = r->gs[c] / r->gn[c], var = r->gq[c] / r->gn[c] - mu * mu;
        r->thr[c] = fmax(r->thr[c], mu - sqrt(fmax(var, 0)));
    }
    int slot;
    if (r->n_set[c] < 8) {
        slot = r->n_set[c]++;
    } else { /* full: the oldest member makes room */
        slot = r->next[c];
        r->next[c] = (slot + 1) % 8;
    }
    for (int j = 0; j < 8; j++) r->set[c][slot][j] = x[j];
}

static double ref_w(const prada_ref *r) {
    int n = r->ndist < 50 ? (int)r->ndist : 50, m = 0;
    double mean = 0, sd = 0, v[50], w = 1;
    for (int i = 0; i < n; i++) mean += r->win[i];
    mean /= n;
    for (int i = 0; i < n; i++) sd += (r->win[i] - mean) * (r->win[i] - mean);
    sd = sqrt(sd / n);
    for (int i = 0; i < n; i++)
        if (r->win[i] > mean - 3 * sd) v[m++] = r->win[i];
    if (m >= 3 && ls_shapiro_wilk(v, m, &w, NULL) == LS_ERANGE) w = 0;
    return w;
}

static void test_detector_replay(void) {
    ls_prada_opts po;
    ls_prada_opts_default(&po);
    po.max_set = 8, po.window = 50, po.min_dists = 20;
    ls_prada *p;
    CHECK_EQ_INT(ls_prada_init(&po, 8, 2, &p), LS_OK);
    static prada_ref ref;
    memset(&ref, 0, sizeof ref);
    ls_rng r;
    ls_rng_seed(&r, 3);
    float x[25 * 8];
    int32_t lab[25];
    int differ = 0;
    for (int req = 0; req < 24; req++) {
        for (int i = 0; i < 25; i++) {
            lab[i] = (int32_t)ls_rng_below(&r, 2);
            int near = i > 0 && ls_rng_below(&r, 4) == 0; /* a neighbour of the previous query */
            for (int j = 0; j < 8; j++) x[i * 8 + j] = near ? x[(i - 1) * 8 + j] : (float)ls_rng_below(&r, 17) / 16.0f;
            if (near) x[i * 8 + (int)ls_rng_below(&r, 8)] += 1.0f / 16;
        }
        CHECK(ls_prada_observe(p, x, lab, 25) >= 0);
        for (int i = 0; i < 25; i++) ref_observe(&ref, x + i * 8, lab[i]);
        double w;
        ls_prada_state(p, NULL, NULL, &w);
        if (ref.ndist >= 20 && fabs(w - ref_w(&ref)) > 1e-9 && differ++ < 3)
            fprintf(stderr, "  request %d: W %.9f, replay %.9f\n", req, w, ref_w(&ref));
    }
    CHECK_MSG(differ == 0, "%d of 24 requests: W differs from the float64 replay", differ);
    ls_prada_free(p);
}

int main(void) {
    openblas_set_num_threads(1); /* small matmuls; threads only spin on shared cores */
    RUN(test_sw_reference);
    RUN(test_sw_calibration);
    RUN(test_detector);
    RUN(test_detector_replay);
    return TEST_RESULT();
}
