/* prada.c - the PRADA extraction detector (Juuti et al. 2019): per client, the growing set
 * of minimum distances between each new query and earlier ones of the same predicted
 * class, flagged when its Shapiro-Wilk W falls below a threshold; and W itself (Royston's
 * AS R94 approximation). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/steal.h"

/* ---------------------------------------------------------------- Shapiro-Wilk */

/* Inverse standard normal CDF: Acklam's rational approximation refined by one Halley step
 * (relative error ~1e-15 in double). */
static double qnorm(double p) {
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00};
    double x, q, r;
    if (p <= 0) return -INFINITY;
    if (p >= 1) return INFINITY;
    if (p < 0.02425) {
        q = sqrt(-2 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else if (p > 1 - 0.02425) {
        q = sqrt(-2 * log(1 - p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else {
        q = p - 0.5;
        r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    double e = 0.5 * erfc(-x / sqrt(2.0)) - p;
    double u = e * sqrt(2 * M_PI) * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

static double poly(const double *cc, int nord, double x) {
    double r = 0;
    for (int i = nord - 1; i >= 0; i--) r = r * x + cc[i];
    return r;
}

int ls_shapiro_wilk(const double *xin, int n, double *w_out, double *pval) {
    if (n < 3 || n > 5000) return ls_err(LS_EINVAL, "shapiro-wilk: n = %d outside 3..5000", n);
    double *x = malloc(sizeof(double) * (size_t)n), *a = malloc(sizeof(double) * (size_t)(n / 2 + 1));
    if (!x || !a) {
        free(x);
        free(a);
        return ls_err(LS_ENOMEM, "shapiro-wilk: out of memory");
    }
    memcpy(x, xin, sizeof(double) * (size_t)n);
    ls_sort_doubles(x, (size_t)n);
    int nn2 = n / 2;
    double an = n;
    /* Coefficients a[1..nn2] (Royston 1992): polynomial corrections in 1/sqrt(n) for the two
     * extreme coefficients, normal scores m_i for the rest. */
    static const double c1[6] = {0., .221157, -.147981, -2.07119, 4.434685, -2.706056};
    static const double c2[6] = {0., .042981, -.293762, -1.752461, 5.682633, -3.582633};
    if (n == 3) {
        a[1] = sqrt(0.5);
    } else {
        double *m = malloc(sizeof(double) * (size_t)(nn2 + 1));
        if (!m) {
            free(x);
            free(a);
            return ls_err(LS_ENOMEM, "shapiro-wilk: out of memory");
        }
        double summ2 = 0;
        for (int i = 1; i <= nn2; i++) {
            m[i] = qnorm((i - .375) / (an + .25));
            summ2 += m[i] * m[i];
        }
        summ2 *= 2;
        double ssumm2 = sqrt(summ2), rsn = 1 / sqrt(an);
        double a1 = poly(c1, 6, rsn) - m[1] / ssumm2, fac;
        int i1;
        if (n > 5) {
            i1 = 3;
            double a2 = -m[2] / ssumm2 + poly(c2, 6, rsn);
            fac = sqrt((summ2 - 2 * m[1] * m[1] - 2 * m[2] * m[2]) / (1 - 2 * a1 * a1 - 2 * a2 * a2));
            a[2] = a2;
        } else {
            i1 = 2;
            fac = sqrt((summ2 - 2 * m[1] * m[1]) / (1 - 2 * a1 * a1));
        }
        a[1] = a1;
        for (int i = i1; i <= nn2; i++) a[i] = -m[i] / fac;
        free(m);
    }
    double mean = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    double ssq = 0, num = 0;
    for (int i = 0; i < n; i++) ssq += (x[i] - mean) * (x[i] - mean);
    for (int i = 1; i <= nn2; i++) num += a[i] * (x[n - i] - x[i - 1]);
    free(x);
    free(a);
    if (!(ssq > 1e-300 * n)) return ls_err(LS_ERANGE, "shapiro-wilk: all %d values are equal", n);
    double w = num * num / ssq;
    if (w > 1) w = 1;
    *w_out = w;
    if (!pval) return LS_OK;
    if (n == 3) {
        double p = 6 / M_PI * (asin(sqrt(w)) - asin(sqrt(0.75)));
        *pval = p < 0 ? 0 : p;
        return LS_OK;
    }
    /* Royston's normalising transform of log(1 - W). */
    static const double g[2] = {-2.273, .459};
    static const double c3[4] = {.544, -.39978, .025054, -6.714e-4};
    static const double c4[4] = {1.3822, -.77857, .062767, -.0020322};
    static const double c5[4] = {-1.5861, -.31082, -.083751, .0038915};
    static const double c6[3] = {-.4803, -.082676, .0030302};
    double w1 = log(1 - w), mu, s;
    if (w >= 1) {
        *pval = 1;
        return LS_OK;
    }
    if (n <= 11) {
        double gamma = poly(g, 2, an);
        if (w1 >= gamma) {
            *pval = 1e-99;
            return LS_OK;
        }
        w1 = -log(gamma - w1);
        mu = poly(c3, 4, an);
        s = exp(poly(c4, 4, an));
    } else {
        double xx = log(an);
        mu = poly(c5, 4, xx);
        s = exp(poly(c6, 3, xx));
    }
    *pval = 0.5 * erfc((w1 - mu) / s / sqrt(2.0));
    return LS_OK;
}

/* ---------------------------------------------------------------- detector */

static const char *mode_names[] = {"off", "log", "throttle", "refuse"};

const char *ls_prada_mode_name(int m) { return m >= 0 && m <= LS_PRADA_REFUSE ? mode_names[m] : "?"; }

int ls_prada_mode_parse(const char *s) {
    for (int i = 0; i <= LS_PRADA_REFUSE; i++)
        if (!strcmp(s, mode_names[i])) return i;
    return -1;
}

void ls_prada_opts_default(ls_prada_opts *o) {
    o->delta = 0.95;
    o->min_dists = 100;
    o->window = 2000;
    o->max_set = 400;
}

struct ls_prada {
    ls_prada_opts o;
    int d, k;
    /* Growing sets of all classes in one matrix (rows tagged by class) so one sgemm gives
     * the distances of a whole request to every stored query. */
    float *g;               /* (k*max_set) x d */
    float *gsq;             /* squared norms */
    int *cls_rows;          /* k x max_set: row indices of each class's set (ring) */
    int *cls_n;             /* set size per class */
    int *cls_next;          /* ring position per class */
    double *thr;            /* per class: T_c */
    double *gd_sum, *gd_sq; /* per class: sum, sum of squares of distances that grew the set */
    int64_t *gd_n;
    int rows;             /* rows in use */
    unsigned char *stale; /* rows written during the current request */
    double *dist;         /* all minimum distances so far (ring of 'window') */
    int64_t ndist;
    int64_t queries, flagged_at;
    double last_w, min_w;
};

double ls_prada_min_w(const ls_prada *p) { return p->min_w; }

void ls_prada_state(const ls_prada *p, int64_t *queries, int64_t *flagged_at, double *last_w) {
    if (queries) *queries = p->queries;
    if (flagged_at) *flagged_at = p->flagged_at;
    if (last_w) *last_w = p->last_w;
}

int ls_prada_init(const ls_prada_opts *o, int d, int k, ls_prada **out) {
    *out = NULL;
    if (d <= 0 || k <= 0 || k > 64) return ls_err(LS_EINVAL, "prada: bad dims d=%d k=%d", d, k);
    ls_prada *p = calloc(1, sizeof *p);
    if (!p) return ls_err(LS_ENOMEM, "prada: out of memory");
    p->o = *o;
    if (p->o.window < 20) p->o.window = 20;
    if (p->o.window > 5000) p->o.window = 5000;
    if (p->o.max_set < 1) p->o.max_set = 1;
    if (p->o.min_dists < 20) p->o.min_dists = 20;
    p->d = d;
    p->k = k;
    size_t cap = (size_t)k * p->o.max_set;
    p->g = malloc(sizeof(float) * cap * d);
    p->gsq = malloc(sizeof(float) * cap);
    p->cls_rows = malloc(sizeof(int) * cap);
    p->cls_n = calloc((size_t)k, sizeof(int));
    p->cls_next = calloc((size_t)k, sizeof(int));
    p->thr = calloc((size_t)k, sizeof(double));
    p->gd_sum = calloc((size_t)k, sizeof(double));
    p->gd_sq = calloc((size_t)k, sizeof(double));
    p->gd_n = calloc((size_t)k, sizeof(int64_t));
    p->dist = malloc(sizeof(double) * (size_t)p->o.window);
    p->stale = calloc(cap, 1);
    if (!p->stale || !p->g || !p->gsq || !p->cls_rows || !p->cls_n || !p->cls_next || !p->thr || !p->gd_sum ||
        !p->gd_sq || !p->gd_n || !p->dist) {
        ls_prada_free(p);
        return ls_err(LS_ENOMEM, "prada: out of memory");
    }
    p->flagged_at = -1;
    p->last_w = 1.0;
    p->min_w = 1.0;
    *out = p;
    return LS_OK;
}

void ls_prada_free(ls_prada *p) {
    if (!p) return;
    free(p->g);
    free(p->gsq);
    free(p->cls_rows);
    free(p->cls_n);
    free(p->cls_next);
    free(p->thr);
    free(p->gd_sum);
    free(p->gd_sq);
    free(p->gd_n);
    free(p->dist);
    free(p->stale);
    free(p);
}

static void add_to_set(ls_prada *p, int c, const float *x, float xsq) {
    int row;
    if (p->cls_n[c] < p->o.max_set) {
        row = p->rows++;
        p->cls_rows[c * p->o.max_set + p->cls_n[c]++] = row;
    } else {
        /* Full: the oldest member of this class makes room (bounded memory and time). */
        row = p->cls_rows[c * p->o.max_set + p->cls_next[c]];
        p->cls_next[c] = (p->cls_next[c] + 1) % p->o.max_set;
    }
    memcpy(p->g + (size_t)row * p->d, x, sizeof(float) * (size_t)p->d);
    p->stale[row] = 1;
    p->gsq[row] = xsq;
}

static int test_now(ls_prada *p) {
    int n = (int)(p->ndist < p->o.window ? p->ndist : p->o.window);
    double *v = malloc(sizeof(double) * (size_t)n);
    if (!v) return ls_err(LS_ENOMEM, "prada: out of memory");
    double mean = 0, sd = 0;
    for (int i = 0; i < n; i++) mean += p->dist[i];
    mean /= n;
    for (int i = 0; i < n; i++) sd += (p->dist[i] - mean) * (p->dist[i] - mean);
    sd = sqrt(sd / n);
    /* PRADA drops low outliers (mean - 3 sd) before the test. */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p->dist[i] > mean - 3 * sd) v[m++] = p->dist[i];
    double w = 1.0;
    int rc = m >= 3 ? ls_shapiro_wilk(v, m, &w, NULL) : LS_OK;
    free(v);
    if (rc == LS_ERANGE)
        w = 0.0; /* all distances equal: as far from normal as it gets */
    else if (rc)
        return rc;
    p->last_w = w;
    if (w < p->min_w) p->min_w = w;
    return LS_OK;
}

int ls_prada_observe(ls_prada *p, const float *x, const int32_t *labels, int n) {
    if (n <= 0) return p->flagged_at >= 0;
    int d = p->d;
    /* Distances of every query in the request to every stored query (one sgemm); queries
     * added or replaced during this request are recomputed exactly (stale rows). */
    int rows0 = p->rows;
    float *dot = rows0 > 0 ? malloc(sizeof(float) * (size_t)n * rows0) : NULL;
    memset(p->stale, 0, (size_t)p->k * p->o.max_set);
    float *xsq = malloc(sizeof(float) * (size_t)n);
    if ((rows0 > 0 && !dot) || !xsq) {
        free(dot);
        free(xsq);
        return ls_err(LS_ENOMEM, "prada: out of memory");
    }
    if (rows0 > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows0, d, 1.0f, x, d, p->g, d, 0.0f, dot, rows0);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < d; j++) s += (double)x[(size_t)i * d + j] * x[(size_t)i * d + j];
        xsq[i] = (float)s;
    }
    for (int i = 0; i < n; i++) {
        int c = labels[i];
        if (c < 0 || c >= p->k) continue;
        const float *xi = x + (size_t)i * d;
        p->queries++;
        if (p->cls_n[c] == 0) {
            add_to_set(p, c, xi, xsq[i]);
            continue;
        }
        double best = INFINITY;
        const int *rows = p->cls_rows + (size_t)c * p->o.max_set;
        for (int r = 0; r < p->cls_n[c]; r++) {
            int row = rows[r];
            double d2;
            if (row < rows0 && !p->stale[row]) {
                /* Rows added or replaced during this request are computed exactly. */
                d2 = xsq[i] + p->gsq[row] - 2.0 * dot[(size_t)i * rows0 + row];
            } else {
                d2 = 0;
                const float *g = p->g + (size_t)row * d;
                for (int j = 0; j < d; j++) d2 += (double)(xi[j] - g[j]) * (xi[j] - g[j]);
            }
            if (d2 < best) best = d2;
        }
        double dmin = sqrt(best > 0 ? best : 0);
        p->dist[p->ndist % p->o.window] = dmin;
        p->ndist++;
        if (dmin > p->thr[c]) {
            add_to_set(p, c, xi, xsq[i]);
            p->gd_sum[c] += dmin;
            p->gd_sq[c] += dmin * dmin;
            p->gd_n[c]++;
            double mu = p->gd_sum[c] / p->gd_n[c], var = p->gd_sq[c] / p->gd_n[c] - mu * mu;
            double t = mu - sqrt(var > 0 ? var : 0);
            if (t > p->thr[c]) p->thr[c] = t;
        }
    }
    free(dot);
    free(xsq);
    if (p->ndist >= p->o.min_dists) {
        LS_TRY(test_now(p));
        if (p->last_w < p->o.delta && p->flagged_at < 0) p->flagged_at = p->queries;
    }
    return p->flagged_at >= 0;
}
