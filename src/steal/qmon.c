/* qmon.c - the query-distribution monitor: a detector of model extraction that compares each
 * client's queries with the victim's own training data. A profile of the training rows (mean,
 * top principal subspace, Mahalanobis metric inside it, residual energy outside it) scores
 * every query; the q-quantile of the scores of rows the profile was not fitted on is the
 * outlier threshold, and a client whose share of outliers exceeds what natural data gives
 * (a one-sided binomial z-test against a generous null rate) is flagged.
 *
 * Images get a second view of the same kind: a profile of each image's intensity statistics
 * (quantiles of its pixel levels and of the differences between neighbouring pixels). Where
 * the training images spread over the whole pixel cube (full-frame textures at any phase), a
 * Gaussian of the pixels holds nearly any image, a dark frame with a few strokes included;
 * the level and edge statistics still tell such an image from the data. A query is an outlier
 * when either view's score exceeds that view's threshold. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

/* One view's profile: a Gaussian of d-wide rows, Mahalanobis inside the top-m subspace. */
typedef struct {
    int d, m;        /* row width, subspace rank */
    float *mean;     /* d */
    float *Q;        /* m x d, orthonormal rows */
    float *L;        /* m x m, lower Cholesky factor of the subspace covariance */
    double res_mean; /* mean squared residual outside the subspace (0: none, m == d) */
    double tau;      /* outlier threshold on the score */
} view;

#define NQ 16          /* quantiles of each statistic */
#define NSTAT (2 * NQ) /* the statistics view: pixel levels, neighbour differences */

struct ls_qmon_ref {
    int d;          /* input width */
    int c, h, w;    /* image shape (the statistics view when h, w > 1) */
    float lo, hi;   /* input range */
    view pix, stat; /* stat.d == 0: no statistics view */
    ls_qmon_opts o;
};

struct ls_qmon {
    const ls_qmon_ref *ref;
    int64_t n, k;   /* queries, outliers among them */
    double z, max_z;
    int64_t flagged;               /* first query count with z above the options' z (-1 never) */
    int64_t flag_at[LS_QMON_GRID]; /* first query count with z above each grid threshold (-1 never) */
};

const double ls_qmon_grid[LS_QMON_GRID] = {2, 3, 4, 6, 8, 12, 16, 24};

void ls_qmon_opts_default(ls_qmon_opts *o) {
    o->rank = 24;
    o->quantile = 0.99;
    o->null_rate = 0.05, o->z = 4, o->min_queries = 50; /* the z-test */
    o->max_rows = 4000;
    o->seed = 5;
    o->image_stats = 1;
}

/* Cholesky of the m x m SPD matrix A (row-major) into L (lower); 0 ok, -1 not positive. */
static int cholesky(const double *A, int m, float *L) {
    double *l = calloc((size_t)m * m, sizeof(double));
    if (!l) return -1;
    for (int i = 0; i < m; i++)
        for (int j = 0; j <= i; j++) {
            double s = A[i * m + j];
            for (int t = 0; t < j; t++) s -= l[i * m + t] * l[j * m + t];
            if (i == j) {
                if (s <= 0) {
                    free(l);
                    return -1;
                }
                l[i * m + i] = sqrt(s);
            } else
                l[i * m + j] = s / l[j * m + j];
        }
    for (int i = 0; i < m * m; i++) L[i] = (float)l[i];
    free(l);
    return 0;
}

/* Gram-Schmidt on the m rows of Q (d wide), twice for stability; a degenerate row is
 * replaced by a unit vector. */
static void orthonormalise(float *Q, int m, int d) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m; i++) {
            float *q = Q + (size_t)i * d;
            for (int j = 0; j < i; j++) {
                float dot = cblas_sdot(d, q, 1, Q + (size_t)j * d, 1);
                cblas_saxpy(d, -dot, Q + (size_t)j * d, 1, q, 1);
            }
            float nrm = cblas_snrm2(d, q, 1);
            if (nrm < 1e-12f) {
                memset(q, 0, sizeof(float) * (size_t)d);
                q[i % d] = 1;
                nrm = 1;
            }
            cblas_sscal(d, 1.0f / nrm, q, 1);
        }
}

static int view_alloc(view *v, int d, int m) {
    v->d = d, v->m = m;
    v->mean = malloc(sizeof(float) * (size_t)d);
    v->Q = malloc(sizeof(float) * (size_t)m * d);
    v->L = malloc(sizeof(float) * (size_t)m * m);
    return v->mean && v->Q && v->L ? LS_OK : ls_err(LS_ENOMEM, "query monitor: out of memory");
}

static void view_free(view *v) { free(v->mean), free(v->Q), free(v->L); }

/* Fits view v to n rows of x (v->d wide): mean, Q, L, res_mean. */
static int fit_profile(const float *x, int64_t n, uint64_t seed, view *r) {
    int d = r->d, m = r->m;
    float *xc = calloc((size_t)n * d, sizeof(float)), *C = malloc(sizeof(float) * (size_t)d * d);
    float *T = malloc(sizeof(float) * (size_t)m * d);
    double *B = malloc(sizeof(double) * (size_t)m * m);
    if (!xc || !C || !T || !B) {
        free(xc), free(C), free(T), free(B);
        return ls_err(LS_ENOMEM, "query monitor: out of memory");
    }
    for (int j = 0; j < d; j++) r->mean[j] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < d; j++) r->mean[j] += x[i * d + j] / (float)n;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < d; j++) xc[i * d + j] = x[i * d + j] - r->mean[j];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, (int)n, 1.0f / (float)n, xc, d, xc, d, 0, C, d);
    double tr = 0;
    for (int j = 0; j < d; j++) tr += C[j * d + j];
    float ridge = (float)(1e-3 * tr / d + 1e-8);
    for (int j = 0; j < d; j++) C[j * d + j] += ridge;
    /* orthogonal (subspace) iteration for the top-m principal subspace */
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    for (int i = 0; i < m * d; i++) r->Q[i] = ls_rng_normal(&rng);
    orthonormalise(r->Q, m, d);
    for (int it = 0; it < (m == d ? 1 : 40); it++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, d, 1, r->Q, d, C, d, 0, T, d);
        memcpy(r->Q, T, sizeof(float) * (size_t)m * d);
        orthonormalise(r->Q, m, d);
    }
    /* B = Q C Q^T, the covariance inside the subspace */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, d, 1, r->Q, d, C, d, 0, T, d);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) B[i * m + j] = cblas_sdot(d, T + (size_t)i * d, 1, r->Q + (size_t)j * d, 1);
    int rc = cholesky(B, m, r->L) ? ls_err(LS_EINVAL, "query monitor: degenerate training data") : LS_OK;
    /* residual energy outside the subspace: trace(C) - trace(B) over d - m dimensions */
    double tb = 0;
    for (int i = 0; i < m; i++) tb += B[i * m + i];
    r->res_mean = m < d ? fmax(tr + ridge * d - tb, 1e-12) : 0;
    free(xc), free(C), free(T), free(B);
    return rc;
}

/* Scores n rows of v->d: Mahalanobis distance in the subspace over m, plus residual energy
 * over its training mean (each about 1 on training-like rows). */
static void score_rows(const view *r, const float *x, int64_t n, double *score) {
    int d = r->d, m = r->m;
    float *xc = malloc(sizeof(float) * (size_t)d), *z = malloc(sizeof(float) * (size_t)m);
    if (!xc || !z) {
        for (int64_t i = 0; i < n; i++) score[i] = 0;
        free(xc), free(z);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double e2 = 0;
        for (int j = 0; j < d; j++) {
            xc[j] = x[i * d + j] - r->mean[j];
            e2 += (double)xc[j] * xc[j];
        }
        cblas_sgemv(CblasRowMajor, CblasNoTrans, m, d, 1, r->Q, d, xc, 1, 0, z, 1);
        double p2 = 0, maha = 0;
        for (int a = 0; a < m; a++) p2 += (double)z[a] * z[a];
        for (int a = 0; a < m; a++) { /* forward substitution L w = z; maha = |w|^2 */
            double s = z[a];
            for (int b = 0; b < a; b++) s -= r->L[a * m + b] * z[b];
            z[a] = (float)(s / r->L[a * m + a]);
            maha += (double)z[a] * z[a];
        }
        score[i] = maha / m + (r->res_mean > 0 ? fmax(e2 - p2, 0) / r->res_mean : 0);
    }
    free(xc), free(z);
}

/* The NQ quantiles ((q + 0.5) / NQ) of the cnt values counted in hist (bins over [0, 1]). */
enum { NBIN = 256 };
static void hist_quantiles(const int *hist, int64_t cnt, float *out) {
    int64_t acc = 0;
    for (int q = 0, b = 0; q < NQ; q++) {
        int64_t want = (int64_t)((q + 0.5) / NQ * (double)cnt);
        while (b < NBIN - 1 && acc + hist[b] <= want) acc += hist[b++];
        out[q] = ((float)b + 0.5f) / NBIN;
    }
}

/* The histogram bin of a share v of the input range (NaN or past 1: the last bin). */
static int bin_of(float v) { return v <= 0 ? 0 : v < 1 ? (int)(v * NBIN) : NBIN - 1; }

/* The statistics view of n image rows into f (n x NSTAT): quantiles of the pixel levels and
 * of |difference| between horizontally and vertically neighbouring pixels, both as shares of
 * the input range (256-bin histograms). */
static void image_stats(const ls_qmon_ref *r, const float *x, int64_t n, float *f) {
    int c = r->c, h = r->h, w = r->w;
    float sc = 1.0f / (r->hi - r->lo);
    for (int64_t i = 0; i < n; i++) {
        const float *row = x + i * r->d;
        int lev[NBIN] = {0}, dif[NBIN] = {0};
        int64_t nd = 0;
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int xx = 0; xx < w; xx++) {
                    const float *p = row + ((int64_t)ch * h + y) * w + xx;
                    float v = (*p - r->lo) * sc;
                    lev[bin_of(v)]++;
                    if (xx + 1 < w) dif[bin_of(fabsf(p[1] - *p) * sc)]++, nd++;
                    if (y + 1 < h) dif[bin_of(fabsf(p[w] - *p) * sc)]++, nd++;
                }
        hist_quantiles(lev, (int64_t)c * h * w, f + i * NSTAT);
        hist_quantiles(dif, nd, f + i * NSTAT + NQ);
    }
}

/* The q-quantile of n scores (sorted in place). */
static double quantile_of(double *sc, int64_t n, double q) {
    ls_sort_doubles(sc, (size_t)n);
    int64_t qi = (int64_t)ceil(q * (double)n) - 1;
    return sc[qi < 0 ? 0 : qi >= n ? n - 1 : qi];
}

/* Fits one view to the rows of x (n x v->d): the threshold from out-of-fold scores (4 folds,
 * rows each profile did not see), then the profile on every row. */
static int fit_view(const float *x, int64_t n, uint64_t seed, double q, view *v) {
    enum { FOLDS = 4 };
    int d = v->d;
    double *sc = malloc(sizeof(double) * (size_t)n);
    float *fx = malloc(sizeof(float) * (size_t)n * d);
    int rc = sc && fx ? LS_OK : ls_err(LS_ENOMEM, "query monitor: out of memory");
    for (int f = 0; !rc && f < FOLDS; f++) {
        int64_t nf = 0;
        for (int64_t i = 0; i < n; i++)
            if (i % FOLDS != f) memcpy(fx + nf++ * d, x + i * d, sizeof(float) * (size_t)d);
        rc = fit_profile(fx, nf, seed + (uint64_t)f, v);
        for (int64_t i = f; !rc && i < n; i += FOLDS) score_rows(v, x + i * d, 1, &sc[i]);
    }
    if (!rc) {
        v->tau = quantile_of(sc, n, q);
        rc = fit_profile(x, n, seed, v);
    }
    free(sc);
    free(fx);
    return rc;
}

int ls_qmon_fit(const ls_steal_data *ref, const ls_qmon_opts *o, ls_qmon_ref **out) {
    *out = NULL;
    if (ref->n < 20 || ref->d < 1) return ls_err(LS_EINVAL, "query monitor: need at least 20 reference rows");
    if (!(o->quantile > 0.5 && o->quantile < 1) || !(o->null_rate > 0 && o->null_rate < 1) || o->rank < 1)
        return ls_err(LS_EINVAL, "query monitor: quantile in (0.5, 1), null rate in (0, 1), rank >= 1");
    ls_steal_data sub;
    LS_TRY(ls_steal_data_subset(ref, o->max_rows, o->seed, &sub));
    int d = ref->d;
    ls_qmon_ref *r = calloc(1, sizeof *r);
    int rc = r ? LS_OK : ls_err(LS_ENOMEM, "query monitor: out of memory");
    if (!rc) {
        r->d = d, r->c = ref->c, r->h = ref->h, r->w = ref->w, r->lo = ref->lo, r->hi = ref->hi, r->o = *o;
        rc = view_alloc(&r->pix, d, o->rank < d ? o->rank : d);
    }
    if (!rc) rc = fit_view(sub.x, sub.n, o->seed, o->quantile, &r->pix);
    if (!rc && o->image_stats && r->h > 1 && r->w > 1 && (int64_t)r->c * r->h * r->w == d && r->hi > r->lo) {
        float *f = malloc(sizeof(float) * (size_t)sub.n * NSTAT);
        rc = f ? view_alloc(&r->stat, NSTAT, NSTAT) : ls_err(LS_ENOMEM, "query monitor: out of memory");
        if (!rc) {
            image_stats(r, sub.x, sub.n, f);
            rc = fit_view(f, sub.n, o->seed + 100, o->quantile, &r->stat);
        }
        free(f);
    }
    ls_steal_data_free(&sub);
    if (rc) {
        ls_qmon_ref_free(r);
        return rc;
    }
    *out = r;
    return LS_OK;
}

void ls_qmon_ref_free(ls_qmon_ref *r) {
    if (!r) return;
    view_free(&r->pix), view_free(&r->stat);
    free(r);
}

int ls_qmon_ref_dim(const ls_qmon_ref *r) { return r->d; }

int ls_qmon_score(const ls_qmon_ref *r, const float *x, int64_t n, double *score, int *outlier) {
    score_rows(&r->pix, x, n, score);
    if (!outlier) return LS_OK;
    for (int64_t i = 0; i < n; i++) outlier[i] = score[i] > r->pix.tau;
    if (!r->stat.d || n < 1) return LS_OK;
    float *f = malloc(sizeof(float) * (size_t)n * NSTAT);
    double *st = malloc(sizeof(double) * (size_t)n);
    if (!f || !st) {
        free(f), free(st);
        return ls_err(LS_ENOMEM, "query monitor: out of memory");
    }
    image_stats(r, x, n, f);
    score_rows(&r->stat, f, n, st);
    for (int64_t i = 0; i < n; i++) outlier[i] |= st[i] > r->stat.tau;
    free(f), free(st);
    return LS_OK;
}

int ls_qmon_init(const ls_qmon_ref *ref, ls_qmon **out) {
    ls_qmon *q = calloc(1, sizeof *q);
    if (!q) return ls_err(LS_ENOMEM, "query monitor: out of memory");
    q->ref = ref;
    q->flagged = -1;
    for (int g = 0; g < LS_QMON_GRID; g++) q->flag_at[g] = -1;
    *out = q;
    return LS_OK;
}

void ls_qmon_free(ls_qmon *q) { free(q); }

int ls_qmon_observe(ls_qmon *q, const float *x, int n) {
    double *sc = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    int *out = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int rc = sc && out ? ls_qmon_score(q->ref, x, n, sc, out) : ls_err(LS_ENOMEM, "query monitor: out of memory");
    for (int i = 0; !rc && i < n; i++) q->k += out[i];
    free(sc), free(out);
    if (rc) return rc;
    q->n += n;
    const ls_qmon_opts *o = &q->ref->o;
    if (q->n >= o->min_queries) {
        double p = o->null_rate;
        q->z = ((double)q->k - (double)q->n * p) / sqrt((double)q->n * p * (1 - p));
        if (q->z > q->max_z) q->max_z = q->z;
        for (int g = 0; g < LS_QMON_GRID; g++)
            if (q->flag_at[g] < 0 && q->z > ls_qmon_grid[g]) q->flag_at[g] = q->n;
        if (q->flagged < 0 && q->z > o->z) q->flagged = q->n;
    }
    return q->flagged >= 0;
}

int64_t ls_qmon_flagged_at(const ls_qmon *q, double z) {
    if (z <= 0 || z == q->ref->o.z) return q->flagged;
    for (int g = 0; g < LS_QMON_GRID; g++)
        if (fabs(ls_qmon_grid[g] - z) < 1e-9) return q->flag_at[g];
    return q->max_z > z ? q->n : -1; /* off the grid: only whether, not when */
}

void ls_qmon_state(const ls_qmon *q, int64_t *queries, int64_t *outliers, double *z, double *max_z) {
    if (queries) *queries = q->n;
    if (outliers) *outliers = q->k;
    if (z) *z = q->z;
    if (max_z) *max_z = q->max_z;
}
