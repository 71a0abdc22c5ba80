/* exact.c - an exact search over one ILP candidate (device order, micro-batch pair): a
 * label-setting DP over (stage, first layer) that keeps every non-dominated label, prices
 * every stage with every count vector of the allowed widths, and prunes by a lower bound
 * that knows the layer counts are integers and the quality target. It closes candidates
 * whose MIP bound does not move (the LP relaxation balances stages with fractions of a
 * layer); within its budgets it is exact, else it claims nothing (docs/plan.md, "ilp"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"
#include "plan/internal.h"

#define NB LS_PLAN_NBITS

typedef struct {
    double P, D, q;
    short n;
    unsigned char c[NB]; /* layers at each width */
} xopt;

typedef struct {
    double sP, mP, mD, sD, q;
    int parent; /* label of the previous stage, -1 at the start */
    int a, o;   /* this stage's first layer and option index in opts[j][a] */
} xlabel;

typedef struct {
    xopt *v;
    int n, cap;
} xopt_list;

typedef struct {
    int *v;
    int n, cap;
} xint_list;

enum { X_SP, X_MP, X_MD, X_SD, X_TYPES };

static int push_opt(xopt_list *l, const xopt *o) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 16;
        xopt *nv = realloc(l->v, sizeof *nv * (size_t)nc);
        if (!nv) return LS_ENOMEM;
        l->v = nv, l->cap = nc;
    }
    l->v[l->n++] = *o;
    return LS_OK;
}

static int push_int(xint_list *l, int x) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 16;
        int *nv = realloc(l->v, sizeof *nv * (size_t)nc);
        if (!nv) return LS_ENOMEM;
        l->v = nv, l->cap = nc;
    }
    l->v[l->n++] = x;
    return LS_OK;
}

/* Layer i gains at least as much as layer i2 from every step up among the allowed widths. */
static int gains_ge(const ls_plan_problem *p, int i, int i2) {
    const double *a = p->omega + i * NB, *b = p->omega + i2 * NB;
    for (int k = 0; k < NB; k++)
        for (int k2 = k + 1; k2 < NB; k2++) {
            if (!(p->bits_mask & (1 << k)) || !(p->bits_mask & (1 << k2))) continue;
            double ga = a[k] - a[k2], gb = b[k] - b[k2];
            if (ga < gb - 1e-12 * (fabs(ga) + fabs(gb))) return 0;
        }
    return 1;
}

static double layer_key(const ls_plan_problem *p, int i) {
    int lo = -1, hi = -1;
    for (int k = 0; k < NB; k++)
        if (p->bits_mask & (1 << k)) {
            if (lo < 0) lo = k;
            hi = k;
        }
    return p->omega[i * NB + lo] - p->omega[i * NB + hi];
}

static int cmp_opt(const void *x, const void *y) {
    const xopt *a = x, *b = y;
    if (a->P != b->P) return a->P < b->P ? -1 : 1;
    if (a->D != b->D) return a->D < b->D ? -1 : 1;
    return a->q < b->q ? -1 : a->q > b->q;
}

/* Sorting by a key without a global context: (key, index) pairs, ties by index. */
typedef struct {
    double k;
    int i;
} xkey;

static int cmp_xkey(const void *x, const void *y) {
    const xkey *a = x, *b = y;
    if (a->k != b->k) return a->k < b->k ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

typedef struct {
    const ls_plan_problem *p;
    const ls_plan_cand_cost *cc;
    int L, N, exact_q;
    int rank[LS_PLAN_MAX_LAYER]; /* layers by gains, largest first */
    xopt_list *opts;             /* [j * (L + 1) + a] */
    long long work, work_max, calls;
    int stop; /* a budget ran out: the search claims nothing */
    double deadline;
    double (*clk)(void);
} xctx;

/* Layers of [a, b) in rank order. */
static int range_sorted(const xctx *x, int a, int b, int *out) {
    int m = 0;
    for (int t = 0; t < x->L; t++)
        if (x->rank[t] >= a && x->rank[t] < b) out[m++] = x->rank[t];
    return m;
}

/* Quality of a stage with counts c: the least over the ways to give the widths to its
 * layers. With exact_q (every two layers comparable by gains_ge) the widest widths to the
 * layers that gain most is that least (exchange argument), else a lower bound (each width
 * at the least omega of the stage). pre[t * NB + k]: sum of omega at width k over the
 * stage's first t layers in rank order. */
static double stage_q(const xctx *x, const double *pre, const double *mins, const unsigned char *c) {
    double q = 0;
    if (x->exact_q) {
        int t = 0;
        for (int k = NB - 1; k >= 0; k--) q += pre[(t + c[k]) * NB + k] - pre[t * NB + k], t += c[k];
    } else {
        for (int k = 0; k < NB; k++) q += c[k] * mins[k];
    }
    return q;
}

/* Once over a budget, always: a caller that sees it after a stage's options were cut
 * short must not take them as complete. */
static int over_budget(xctx *x) {
    if (x->work > x->work_max || (++x->calls % 64 == 0 && x->clk() > x->deadline)) x->stop = 1;
    return x->stop;
}

/* Stage lengths [*nlo, *nhi] of position j from layer a (memory, and one layer left for
 * every later position); 0 when no width fits there. */
static int stage_lengths(const ls_plan_cand_cost *cc, int j, int a, int *nlo, int *nhi) {
    int L = cc->L, N = cc->N;
    *nlo = j == N - 1 ? L - a : 1, *nhi = L - a - (N - 1 - j);
    double mmin = INFINITY, cap = cc->cap[j] * (1 + 1e-12) + 1e-12;
    for (int k = 0; k < NB; k++)
        if (cc->ok[j][k] && cc->memk[k] < mmin) mmin = cc->memk[k];
    if (!isfinite(mmin)) return 0;
    if (mmin > 0 && *nhi > cap / mmin) *nhi = (int)(cap / mmin);
    return 1;
}

/* Count vectors the options of every (position, first layer) would enumerate. */
static double n_vectors(const ls_plan_cand_cost *cc) {
    double tot = 0;
    for (int j = 0; j < cc->N; j++) {
        int w = 0, nlo, nhi;
        for (int k = 0; k < NB; k++) w += cc->ok[j][k];
        for (int a = j; a <= cc->L - (cc->N - j); a++) {
            if (!stage_lengths(cc, j, a, &nlo, &nhi)) continue;
            for (int n = nlo; n <= nhi; n++) {
                double v = 1; /* C(n + w - 1, w - 1) */
                for (int t = 1; t < w; t++) v = v * (n + t) / t;
                tot += v;
            }
        }
    }
    return tot;
}

/* Options of position j starting at layer a: every count vector of the allowed widths that
 * fits in memory, Pareto-filtered on (P, D, q) per stage length. */
static int build_opts(xctx *x, int j, int a) {
    const ls_plan_cand_cost *cc = x->cc;
    int L = x->L;
    xopt_list *ol = &x->opts[j * (L + 1) + a];
    int nlo, nhi;
    double cap = cc->cap[j] * (1 + 1e-12) + 1e-12;
    if (!stage_lengths(cc, j, a, &nlo, &nhi)) return LS_OK;
    int srt[LS_PLAN_MAX_LAYER];
    double pre[(LS_PLAN_MAX_LAYER + 1) * NB];
    xopt *cand = NULL;
    int ncand = 0, capc = 0, rc = LS_OK, capr = 0, *rk = NULL;
    double *fw = NULL;
    xkey *byd = NULL;
    for (int n = nlo; n <= nhi; n++) {
        range_sorted(x, a, a + n, srt);
        for (int k = 0; k < NB; k++) pre[k] = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < NB; k++) pre[(t + 1) * NB + k] = pre[t * NB + k] + x->p->omega[srt[t] * NB + k];
        double mins[NB];
        for (int k = 0; k < NB; k++) {
            mins[k] = INFINITY;
            for (int i = a; i < a + n; i++)
                if (x->p->omega[i * NB + k] < mins[k]) mins[k] = x->p->omega[i * NB + k];
        }
        ncand = 0;
        unsigned char c[NB];
        /* count vectors: c[0] + c[1] + c[2] + c[3] = n over the allowed widths */
        for (int c0 = 0; c0 <= (cc->ok[j][0] ? n : 0); c0++)
            for (int c1 = 0; c1 <= (cc->ok[j][1] ? n - c0 : 0); c1++)
                for (int c2 = 0; c2 <= (cc->ok[j][2] ? n - c0 - c1 : 0); c2++) {
                    int c3 = n - c0 - c1 - c2;
                    if (c3 && !cc->ok[j][3]) continue;
                    c[0] = (unsigned char)c0, c[1] = (unsigned char)c1, c[2] = (unsigned char)c2,
                    c[3] = (unsigned char)c3;
                    double mem = 0, P = cc->baseP[j], D = cc->baseD[j];
                    for (int k = 0; k < NB; k++)
                        if (c[k]) mem += c[k] * cc->memk[k], P += c[k] * cc->lp[j][k], D += c[k] * cc->ld[j][k];
                    if (mem > cap) continue;
                    if (ncand == capc) {
                        capc = capc ? 2 * capc : 256;
                        xopt *nv = realloc(cand, sizeof *nv * (size_t)capc);
                        if (!nv) {
                            rc = LS_ENOMEM;
                            goto done;
                        }
                        cand = nv;
                    }
                    xopt *o = &cand[ncand++];
                    o->P = P, o->D = D, o->q = stage_q(x, pre, mins, c), o->n = (short)n;
                    memcpy(o->c, c, NB);
                }
        x->work += ncand;
        /* Pareto filter: sorted by P, keep what no kept option beats in D and q */
        if (ncand > 1) qsort(cand, (size_t)ncand, sizeof *cand, cmp_opt); /* (cand may be NULL at 0) */
        /* kept[s] iff no option before it (in P order) has D <= and q <=: a Fenwick tree over
         * the ranks of D holds the least q seen per prefix of D */
        if (ncand > capr) {
            capr = ncand;
            int *nr = realloc(rk, sizeof(int) * (size_t)capr);
            double *nf = realloc(fw, sizeof(double) * ((size_t)capr + 1));
            xkey *nk = realloc(byd, sizeof(xkey) * (size_t)capr);
            if (nr) rk = nr;
            if (nf) fw = nf;
            if (nk) byd = nk;
            if (!nr || !nf || !nk) {
                rc = LS_ENOMEM;
                goto done;
            }
        }
        for (int t = 0; t < ncand; t++) byd[t] = (xkey){cand[t].D, t};
        if (ncand > 1) qsort(byd, (size_t)ncand, sizeof *byd, cmp_xkey);
        for (int t = 0; t < ncand; t++) {
            /* equal D share the last rank, so "D <= d" covers them */
            int e = t;
            while (e + 1 < ncand && byd[e + 1].k == byd[t].k) e++;
            for (int u = t; u <= e; u++) rk[byd[u].i] = e + 1;
            t = e;
        }
        for (int t = 0; t <= ncand; t++) fw[t] = INFINITY;
        for (int t = 0; t < ncand; t++) {
            double mq = INFINITY;
            for (int i = rk[t]; i > 0; i -= i & -i)
                if (fw[i] < mq) mq = fw[i];
            if (mq <= cand[t].q) continue;
            if ((rc = push_opt(ol, &cand[t]))) goto done;
            for (int i = rk[t]; i <= ncand; i += i & -i)
                if (cand[t].q < fw[i]) fw[i] = cand[t].q;
        }
        if (over_budget(x)) break;
    }
done:
    free(cand);
    free(rk);
    free(fw);
    free(byd);
    return rc;
}

int ls_plan_exact(const ls_plan_problem *p, const ls_plan_cand_cost *cc, double cutoff, double deadline,
                  double (*clk)(void), ls_plan_exact_result *res) {
    int L = cc->L, N = cc->N, G = 0;
    memset(res, 0, sizeof *res);
    res->lb = -INFINITY;
    /* too many stage shapes to price each (e.g. 80 layers on an 80 GB device): no claim */
    if (N < 1 || N > L || n_vectors(cc) > 3e7) return LS_OK;
    xctx x = {.p = p, .cc = cc, .L = L, .N = N, .work_max = 400000000LL, .deadline = deadline, .clk = clk};
    xkey keys[LS_PLAN_MAX_LAYER];
    for (int i = 0; i < L; i++) keys[i] = (xkey){-layer_key(p, i), i}; /* largest gain first */
    qsort(keys, (size_t)L, sizeof *keys, cmp_xkey);
    for (int i = 0; i < L; i++) x.rank[i] = keys[i].i;
    x.exact_q = 1;
    for (int t = 0; t + 1 < L && x.exact_q; t++) x.exact_q = gains_ge(p, x.rank[t], x.rank[t + 1]);
    double qmax = p->qmax, delta = 1;
    int use_sd = cc->md < N; /* else sum D <= N max D <= m_d max D */
    if (isfinite(qmax) && qmax > 0) G = 256, delta = qmax / G;
    size_t nst = (size_t)N * (L + 1), nF = nst * (size_t)(G + 1);
    x.opts = calloc(nst, sizeof *x.opts);
    double *F = malloc(sizeof(double) * nF * X_TYPES), *QS = malloc(sizeof(double) * (nst + L + 1));
    xint_list *S = calloc((size_t)(L + 1), sizeof *S), *S2 = calloc((size_t)(L + 1), sizeof *S2);
    xlabel *pool = NULL;
    xkey *lk = NULL; /* labels by sum P */
    int cks = 0;
    int npool = 0, cpool = 0, rc = LS_OK, aborted = 0;
    if (!x.opts || !F || !QS || !S || !S2) {
        rc = LS_ENOMEM;
        goto done;
    }
    for (int j = 0; j < N && !aborted; j++)
        for (int a = j; a <= L - (N - j) && !aborted; a++) {
            if ((rc = build_opts(&x, j, a))) goto done;
            aborted = over_budget(&x);
        }
    if (aborted) goto done;
        /* suffix bounds: for positions j.. holding layers [b, L) with quality (rounded down to
         * the grid of qmax / G, which only loosens them) at most u: least sum P, max P, max D,
         * sum D, each on its own; QS the least quality */
#define FX(t, j, b, u) F[(((size_t)(t)*N + (j)) * (L + 1) + (b)) * (G + 1) + (u)]
#define QSX(j, b) QS[(size_t)(j) * (L + 1) + (b)]
    for (size_t s = 0; s < nF * X_TYPES; s++) F[s] = INFINITY;
    for (size_t s = 0; s < nst + L + 1; s++) QS[s] = INFINITY;
    QSX(N, L) = 0;
    for (int j = N - 1; j >= 0; j--)
        for (int b = j; b <= L - (N - j); b++) {
            xopt_list *ol = &x.opts[j * (L + 1) + b];
            for (int s = 0; s < ol->n; s++) {
                const xopt *o = &ol->v[s];
                int b2 = b + o->n;
                if (j < N - 1 && b2 > L - (N - 1 - j)) continue;
                double qn = j < N - 1 ? QSX(j + 1, b2) : 0;
                if (o->q + qn < QSX(j, b)) QSX(j, b) = o->q + qn;
                double uq = G ? floor(o->q / delta) : 0; /* compared before the cast: q / delta may be huge */
                if (!(uq <= G)) continue;
                int uo = uq > 0 ? (int)uq : 0;
                double X[X_TYPES] = {o->P, o->P, o->D, o->D};
                for (int t = 0; t < X_TYPES; t++) {
                    if (t == X_SD && !use_sd) continue;
                    int mx = t == X_MP || t == X_MD;
                    if (j == N - 1) {
                        if (X[t] < FX(t, j, b, uo)) FX(t, j, b, uo) = X[t];
                        continue;
                    }
                    for (int u = 0; u + uo <= G; u++) {
                        double v = FX(t, j + 1, b2, u);
                        if (v == INFINITY) continue;
                        double cmb = mx ? (X[t] > v ? X[t] : v) : X[t] + v;
                        if (cmb < FX(t, j, b, u + uo)) FX(t, j, b, u + uo) = cmb;
                    }
                }
                x.work += G + 1;
            }
            for (int t = 0; t < X_TYPES; t++)
                for (int u = 1; u <= G; u++)
                    if (FX(t, j, b, u - 1) < FX(t, j, b, u)) FX(t, j, b, u) = FX(t, j, b, u - 1);
            if (over_budget(&x)) goto done;
        }
    /* forward: labels (sum P, max P, max D, sum D, quality) at each stage boundary */
    double qtol = isfinite(qmax) ? qmax * (1 + 1e-12) + 1e-15 : INFINITY;
    double cut = isfinite(cutoff) ? cutoff * (1 - 1e-9) : INFINITY;
    double best = INFINITY;
    int best_parent = -1, best_o = -1, best_a = -1;
    int gen1 = p->wl.gen - 1, mp1 = cc->mp - 1, md = cc->md;
    cpool = 1024;
    pool = malloc(sizeof *pool * (size_t)cpool);
    if (!pool) {
        rc = LS_ENOMEM;
        goto done;
    }
    pool[npool++] = (xlabel){0, 0, 0, 0, 0, -1, 0, -1};
    if ((rc = push_int(&S[0], 0))) goto done;
    for (int j = 0; j < N; j++) {
        for (int b = 0; b <= L; b++) S2[b].n = 0;
        for (int a = j; a <= L - (N - j); a++) {
            xopt_list *ol = &x.opts[j * (L + 1) + a];
            for (int li = 0; li < S[a].n; li++) {
                int lab = S[a].v[li];
                for (int s = 0; s < ol->n; s++) {
                    const xopt *o = &ol->v[s];
                    int b = a + o->n;
                    if (j < N - 1 && b > L - (N - 1 - j)) continue;
                    const xlabel *l = &pool[lab];
                    double q2 = l->q + o->q;
                    if (q2 + QSX(j + 1, b) > qtol) continue;
                    double sP = l->sP + o->P, mP = l->mP > o->P ? l->mP : o->P;
                    double mD = l->mD > o->D ? l->mD : o->D, sD = l->sD + o->D;
                    x.work++;
                    if (j == N - 1) {
                        double r = md * mD > sD ? md * mD : sD;
                        double obj = sP + mp1 * mP + gen1 * r + p->theta * q2;
                        if (obj < cut && obj < best) best = obj, best_parent = lab, best_o = s, best_a = a;
                        continue;
                    }
                    int u = G;
                    if (G) {
                        double ub = (qmax - q2) / delta * (1 + 1e-12);
                        u = ub < 0 ? 0 : ub >= G ? G : (int)floor(ub);
                    }
                    double SP = FX(X_SP, j + 1, b, u), MP = FX(X_MP, j + 1, b, u), MD = FX(X_MD, j + 1, b, u);
                    double SD = use_sd ? FX(X_SD, j + 1, b, u) : 0;
                    if (SP == INFINITY || MP == INFINITY || MD == INFINITY || SD == INFINITY) continue;
                    double mP2 = mP > MP ? mP : MP, mD2 = mD > MD ? mD : MD;
                    double r = md * mD2 > sD + SD ? md * mD2 : sD + SD;
                    double lb = sP + SP + mp1 * mP2 + gen1 * r + p->theta * (q2 + QSX(j + 1, b));
                    if (lb >= cut || lb >= best) continue;
                    if (npool == cpool) {
                        if (cpool >= 2000000) {
                            aborted = 1;
                            goto done;
                        }
                        cpool *= 2;
                        xlabel *nv = realloc(pool, sizeof *nv * (size_t)cpool);
                        if (!nv) {
                            rc = LS_ENOMEM;
                            goto done;
                        }
                        pool = nv;
                    }
                    pool[npool] = (xlabel){sP, mP, mD, use_sd ? sD : 0, q2, lab, a, s};
                    if ((rc = push_int(&S2[b], npool++))) goto done;
                }
                if (over_budget(&x)) goto done;
            }
        }
        if (j == N - 1) break;
        /* dominance: a label no better in any of the five is dropped */
        for (int b = 0; b <= L; b++) {
            xint_list *st = &S2[b];
            S[b].n = 0;
            if (st->n > cks) {
                xkey *nk = realloc(lk, sizeof *nk * (size_t)st->n);
                if (!nk) {
                    rc = LS_ENOMEM;
                    goto done;
                }
                lk = nk, cks = st->n;
            }
            for (int s = 0; s < st->n; s++) lk[s] = (xkey){pool[st->v[s]].sP, st->v[s]};
            if (st->n > 1) qsort(lk, (size_t)st->n, sizeof *lk, cmp_xkey); /* (lk may be NULL at 0) */
            for (int s = 0; s < st->n; s++) st->v[s] = lk[s].i;
            for (int s = 0; s < st->n; s++) {
                const xlabel *l = &pool[st->v[s]];
                int dom = 0;
                for (int t = 0; t < S[b].n && !dom; t++) {
                    const xlabel *k = &pool[S[b].v[t]];
                    dom = k->mP <= l->mP && k->mD <= l->mD && k->sD <= l->sD && k->q <= l->q;
                }
                x.work += S[b].n + 1;
                if (!dom && (rc = push_int(&S[b], st->v[s]))) goto done;
            }
            if (over_budget(&x)) goto done;
        }
    }
    res->done = 1;
    res->lb = best;
    res->labels = npool;
    if (best < INFINITY) { /* rebuild the plan and check it (exact_q: it is the optimum) */
        ls_plan_result *pl = &res->plan;
        memset(pl, 0, sizeof *pl);
        pl->n_stage = N;
        pl->mb_prefill = cc->mb_pre;
        pl->mb_decode = cc->mb_dec;
        int lab = best_parent, a = best_a, o = best_o;
        for (int j = N - 1; j >= 0; j--) {
            const xopt *op = &x.opts[j * (L + 1) + a].v[o];
            int srt[LS_PLAN_MAX_LAYER], m = range_sorted(&x, a, a + op->n, srt), t = 0;
            for (int k = NB - 1; k >= 0; k--)
                for (int u = 0; u < op->c[k] && t < m; u++) pl->bits[srt[t++]] = (unsigned char)ls_plan_bits[k];
            pl->begin[j] = a;
            pl->dev[j] = cc->order[j];
            if (j > 0) a = pool[lab].a, o = pool[lab].o, lab = pool[lab].parent;
        }
        pl->begin[N] = L;
        if (ls_plan_evaluate(p, pl) == LS_OK && pl->objective <= best * (1 + 1e-9) + 1e-12) res->has_plan = 1;
    }
done:
    if (x.opts)
        for (size_t s = 0; s < nst; s++) free(x.opts[s].v);
    free(x.opts);
    free(F);
    free(QS);
    for (int b = 0; S && b <= L; b++) free(S[b].v);
    for (int b = 0; S2 && b <= L; b++) free(S2[b].v);
    free(S);
    free(S2);
    free(pool);
    free(lk);
    res->work = x.work;
    return rc == LS_ENOMEM ? ls_err(LS_ENOMEM, "exact candidate search") : rc;
#undef FX
#undef QSX
}
