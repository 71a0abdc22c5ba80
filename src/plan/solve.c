/* solve.c - the planners: splitquant (label-setting dynamic programme over stages with
 * pruning, co-optimising device order, partition, bits and both micro-batch sizes), the
 * baselines uniform / pipeedge / adabits, and exhaustive search for tests. The exact
 * LLM-PQ MIP lives in ilp.c. Formulation: plan.h and docs/plan.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"
#include "plan/internal.h"

#define NB LS_PLAN_NBITS

const char *ls_plan_algo_name(ls_plan_algo a) {
    static const char *n[] = {"splitquant", "ilp", "uniform", "pipeedge", "adabits", "brute"};
    return a >= 0 && a < LS_PLAN_ALGO_COUNT ? n[a] : "?";
}

int ls_plan_algo_parse(const char *s) {
    for (int a = 0; a < LS_PLAN_ALGO_COUNT; a++)
        if (!strcmp(s, ls_plan_algo_name((ls_plan_algo)a))) return a;
    return -1;
}

int ls_plan_algos_parse(const char *list, int *algos, int max) {
    char tmp[128], *save = NULL;
    if (!ls_list_ok(list, sizeof tmp))
        return ls_err(LS_EINVAL, "'%.64s' is not a comma-separated list of planners (none empty)", list);
    snprintf(tmp, sizeof tmp, "%s", list);
    int n = 0;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int a = ls_plan_algo_parse(t);
        if (a < 0 || a == LS_PLAN_ALGO_BRUTE || n == max)
            return ls_err(LS_EINVAL, "'%s' is not splitquant, ilp, uniform, pipeedge or adabits", t);
        algos[n++] = a;
    }
    return n;
}

/* ---------------------------------------------------------------- outer candidates */

/* Device orders: permutations of node kinds (nodes of one kind kept together, devices of a
 * node contiguous so they talk over the node's link), deduplicated, at most max_orders. */
int ls_plan_orders(const ls_plan_cluster *cl, int max_orders, int (*orders)[LS_PLAN_MAX_DEV], int *n_orders) {
    int kinds[LS_PLAN_MAX_DEV], nk = 0;
    for (int n = 0; n < cl->n_node; n++) {
        int k = 0;
        while (k < nk && kinds[k] != cl->node_kind[n]) k++;
        if (k == nk) kinds[nk++] = cl->node_kind[n];
    }
    /* iterate permutations of kinds in lexicographic order of indices (Heap-free) */
    int perm[LS_PLAN_MAX_DEV];
    for (int k = 0; k < nk; k++) perm[k] = k;
    *n_orders = 0;
    for (;;) {
        int m = 0;
        for (int k = 0; k < nk; k++)
            for (int n = 0; n < cl->n_node; n++) {
                if (cl->node_kind[n] != kinds[perm[k]]) continue;
                for (int d = 0; d < cl->n_dev; d++)
                    if (cl->dev[d].node == n) orders[*n_orders][m++] = d;
            }
        LS_ASSERT(m == cl->n_dev);
        (*n_orders)++;
        if (*n_orders >= max_orders) break;
        /* next permutation */
        int i = nk - 2;
        while (i >= 0 && perm[i] > perm[i + 1]) i--;
        if (i < 0) break;
        int j = nk - 1;
        while (perm[j] < perm[i]) j--;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        for (int a = i + 1, b = nk - 1; a < b; a++, b--) t = perm[a], perm[a] = perm[b], perm[b] = t;
    }
    return LS_OK;
}

/* Micro-batch candidates (LLM-PQ): decode micro-batch ceil(B / #devices); prefill
 * micro-batches the divisors of it. fix_mb keeps one size for both phases. */
int ls_plan_microbatches(const ls_plan_problem *p, int n_dev, int (*mb)[2], int *n) {
    int B = p->wl.batch, dec = (B + n_dev - 1) / n_dev;
    *n = 0;
    if (p->fix_mb) {
        mb[0][0] = mb[0][1] = dec;
        *n = 1;
        return LS_OK;
    }
    for (int pre = 1; pre <= dec; pre++) {
        if (dec % pre) continue;
        mb[*n][0] = pre;
        mb[*n][1] = dec;
        (*n)++;
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- the DP */

typedef struct {
    double sumP, maxP, sumD, maxD, q;
    double f;   /* partial objective (partial_obj), cached for the label cap */
    int parent; /* label index at the previous stage boundary, -1 at the start */
    short a, b; /* the last stage's layers [a, b) */
    signed char lo, hi;
    short c_hi; /* layers of [a, b) at bits hi: those with the largest omega[lo]-omega[hi] */
} label;

typedef struct {
    label *pool;
    int n, cap;
} label_pool;

enum { K_LABELS = 4 };

typedef struct {
    int idx[K_LABELS];
    int n;
} label_set;

typedef struct {
    const ls_plan_problem *p;
    int L, N;
    const int *order;
    int mb_pre, mb_dec, mp, md;
    double lp[LS_PLAN_MAX_DEV][NB], ld[LS_PLAN_MAX_DEV][NB], lw[NB];
    double baseP[LS_PLAN_MAX_DEV], baseD[LS_PLAN_MAX_DEV], baseM[LS_PLAN_MAX_DEV], cap[LS_PLAN_MAX_DEV];
    double kv;
    double qtail[LS_PLAN_MAX_LAYER + 1]; /* least quality cost of layers i.. */
    double minP, minD;                   /* least prefill / decode time of one layer on any position and width */
    double incumbent;
} dp_ctx;

static double partial_obj(const dp_ctx *c, const label *l) {
    double r = c->md * l->maxD > l->sumD ? c->md * l->maxD : l->sumD;
    return l->sumP + (c->mp - 1) * l->maxP + (c->p->wl.gen - 1) * r + c->p->theta * l->q;
}

static int dominated(const label *x, const label *y) { /* y dominates x */
    return y->sumP <= x->sumP && y->maxP <= x->maxP && y->sumD <= x->sumD && y->maxD <= x->maxD && y->q <= x->q;
}

static int pool_push(label_pool *lp, const label *l) {
    if (lp->n == lp->cap) {
        int nc = lp->cap ? lp->cap * 2 : 4096;
        label *np = realloc(lp->pool, (size_t)nc * sizeof *np);
        if (!np) return ls_err(LS_ENOMEM, "planner labels");
        lp->pool = np;
        lp->cap = nc;
    }
    lp->pool[lp->n] = *l;
    return lp->n++;
}

/* Inserts a candidate label into a state's set: drops it when dominated, evicts labels it
 * dominates, and keeps the K best by partial objective. Returns 1 when the label was
 * dropped because no completion of it can beat the incumbent, else 0 (or an error). */
static int insert_label(dp_ctx *c, label_pool *lp, label_set *s, label *l) {
    if (l->q + c->qtail[l->b] > c->p->qmax) return LS_OK;
    double f = partial_obj(c, l);
    l->f = f;
    if (f >= c->incumbent) return 1;
    /* lower bound of any completion: the remaining layers cost at least the cheapest
     * layer time each, the N stages' maxima are at least their means, the remaining
     * layers' quality at least their best widths */
    if (isfinite(c->incumbent)) {
        int rem = c->L - l->b;
        double sP = l->sumP + rem * c->minP, sD = l->sumD + rem * c->minD;
        double mP = l->maxP > sP / c->N ? l->maxP : sP / c->N, mD = l->maxD > sD / c->N ? l->maxD : sD / c->N;
        double r = c->md * mD > sD ? c->md * mD : sD;
        double lb = sP + (c->mp - 1) * mP + (c->p->wl.gen - 1) * r + c->p->theta * (l->q + c->qtail[l->b]);
        if (lb >= c->incumbent) return 1;
    }
    for (int i = 0; i < s->n; i++)
        if (dominated(l, &lp->pool[s->idx[i]])) return LS_OK;
    int w = 0;
    for (int i = 0; i < s->n; i++)
        if (!dominated(&lp->pool[s->idx[i]], l)) s->idx[w++] = s->idx[i];
    s->n = w;
    if (s->n == K_LABELS) {
        int worst = 0;
        double fw = -1;
        for (int i = 0; i < s->n; i++) {
            double fi = lp->pool[s->idx[i]].f;
            if (fi > fw) fw = fi, worst = i;
        }
        if (f >= fw) return LS_OK;
        s->idx[worst] = s->idx[--s->n];
    }
    int id = pool_push(lp, l);
    if (id < 0) return id;
    s->idx[s->n++] = id;
    return LS_OK;
}

/* Builds the per-position constants of one (order, micro-batch) candidate. */
static void dp_setup(dp_ctx *c, const ls_plan_problem *p, const int *order, int mb_pre, int mb_dec) {
    const ls_plan_arch *a = p->arch;
    const ls_plan_cluster *cl = p->cl;
    c->p = p;
    c->L = a->n_layer;
    c->N = cl->n_dev;
    c->order = order;
    c->mb_pre = mb_pre;
    c->mb_dec = mb_dec;
    c->mp = (p->wl.batch + mb_pre - 1) / mb_pre;
    c->md = (p->wl.batch + mb_dec - 1) / mb_dec;
    double ctx = p->wl.prompt + p->wl.gen / 2.0;
    c->kv = ls_plan_layer_kv_bytes(a, &p->wl);
    double ws = ls_plan_workspace_bytes(a, &p->wl, mb_pre, mb_dec);
    for (int k = 0; k < NB; k++) c->lw[k] = ls_plan_layer_weight_bytes(a, ls_plan_bits[k]);
    for (int j = 0; j < c->N; j++) {
        int d = order[j];
        for (int k = 0; k < NB; k++) {
            int ok = p->bits_mask & (1 << k);
            c->lp[j][k] = ok ? ls_plan_layer_prefill_s(a, cl, d, ls_plan_bits[k], mb_pre, p->wl.prompt) : INFINITY;
            c->ld[j][k] = ok ? ls_plan_layer_decode_s(a, cl, d, ls_plan_bits[k], mb_dec, ctx) : INFINITY;
        }
        double fm;
        ls_plan_stage_fixed(p, order, c->N, j, mb_pre, mb_dec, &fm, &c->baseP[j], &c->baseD[j]);
        c->baseM[j] = ws + fm;
        c->cap[j] = cl->dev[d].usable_bytes;
    }
    c->minP = c->minD = INFINITY;
    for (int j = 0; j < c->N; j++)
        for (int k = 0; k < NB; k++) {
            if (c->lp[j][k] < c->minP) c->minP = c->lp[j][k];
            if (c->ld[j][k] < c->minD) c->minD = c->ld[j][k];
        }
    c->qtail[c->L] = 0;
    for (int i = c->L - 1; i >= 0; i--) {
        double m = INFINITY;
        for (int k = 0; k < NB; k++)
            if ((p->bits_mask & (1 << k)) && p->omega[i * NB + k] < m) m = p->omega[i * NB + k];
        c->qtail[i] = c->qtail[i + 1] + m;
    }
}

static void polish_stages(const dp_ctx *c, ls_plan_result *pl);

/* One DP for a candidate under the decode-stage threshold tau (seconds). Every device of
 * the order holds one stage of >= 1 layer. A stage [a, b) on position j mixes two bit
 * widths lo < hi (or one): as many layers at hi as memory and tau allow (best quality),
 * or none. Writes the best complete plan into best when it beats best->objective. */
static int dp_run(dp_ctx *c, double tau, label_pool *lp, label_set *sets, ls_plan_result *best, int *found) {
    int L = c->L, N = c->N;
    /* no stage may decode slower than the incumbent allows: T >= (gen-1)*m_d*max_j D_j */
    double tau_inc = c->incumbent / ((c->p->wl.gen > 1 ? c->p->wl.gen - 1 : 1) * (double)c->md);
    if (c->p->wl.gen > 1 && tau_inc < tau) tau = tau_inc;
    lp->n = 0;
    for (int i = 0; i < (N + 1) * (L + 1); i++) sets[i].n = 0;
#define SET(j, i) sets[(j) * (L + 1) + (i)]
    label root = {0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0};
    int rid = pool_push(lp, &root);
    if (rid < 0) return rid;
    SET(0, 0).idx[0] = rid;
    SET(0, 0).n = 1;
    const double *om = c->p->omega;
    double slack = c->p->qmax - c->qtail[0] + 1e-12;
    double delta[LS_PLAN_MAX_LAYER], prefix[LS_PLAN_MAX_LAYER + 1];
    for (int a = 0; a < L; a++) {
        int jlo = 0, jhi = N - 1;
        /* position j starts at layer a only if j <= a and the rest fits N - j stages */
        if (jhi > a) jhi = a;
        if (L - a < N - jlo) jlo = N - (L - a);
        if (jlo < 0) jlo = 0;
        int any = 0;
        for (int j = jlo; j <= jhi; j++) any |= SET(j, a).n > 0;
        if (!any) continue;
        for (int lo = 0; lo < NB; lo++) {
            if (!(c->p->bits_mask & (1 << lo))) continue;
            /* a stage mixes at most two adjacent allowed widths (or uses one) */
            int next = lo + 1;
            while (next < NB && !(c->p->bits_mask & (1 << next))) next++;
            /* one width alone is the c_hi = 0 option of the pair with the next width */
            for (int hi = next < NB ? next : lo; hi < NB; hi = NB) {
                int nd = 0;
                double qlo = 0;
                /* longest stage any position could hold at lo within memory and tau */
                int kmax = 0;
                for (int j = jlo; j <= jhi; j++) {
                    double km = floor((c->cap[j] - c->baseM[j]) / (c->kv + c->lw[lo]));
                    if (c->ld[j][lo] > 0 && isfinite(tau)) {
                        double kd = floor((tau - c->baseD[j]) / c->ld[j][lo]);
                        if (kd < km) km = kd;
                    }
                    if (km > kmax) kmax = km > L ? L : (int)km;
                }
                int bend = a + kmax < L ? a + kmax : L;
                for (int b = a + 1; b <= bend; b++) {
                    /* a longer stage only costs more: once every extension at this b is
                     * out of memory/tau or bounded by the incumbent, stop lengthening */
                    int live = 0, dead = 0;
                    /* insert delta of layer b-1 keeping delta sorted descending */
                    double dl = om[(b - 1) * NB + lo] - om[(b - 1) * NB + hi];
                    int pos = nd;
                    while (pos > 0 && delta[pos - 1] < dl) {
                        delta[pos] = delta[pos - 1];
                        pos--;
                    }
                    delta[pos] = dl;
                    nd++;
                    qlo += om[(b - 1) * NB + lo];
                    int k = b - a;
                    int prefix_ok = 0;
                    for (int j = jlo; j <= jhi; j++) {
                        if (!SET(j, a).n) continue;
                        if ((j == N - 1 && b != L) || (j < N - 1 && L - b < N - 1 - j)) {
                            live = 1;
                            continue;
                        }
                        /* largest count at hi within memory and tau */
                        double m0 = c->baseM[j] + k * (c->kv + c->lw[lo]);
                        double d0 = c->baseD[j] + k * c->ld[j][lo];
                        if (m0 > c->cap[j] || d0 > tau || !isfinite(d0)) {
                            dead = 1;
                            continue;
                        }
                        int cmax = k;
                        if (hi != lo) {
                            double dw = c->lw[hi] - c->lw[lo];
                            if (dw > 0) {
                                double cm = floor((c->cap[j] - m0) / dw + 1e-9);
                                if (cm < cmax) cmax = cm < 0 ? 0 : (int)cm;
                            }
                            double dd = c->ld[j][hi] - c->ld[j][lo];
                            if (!isfinite(c->ld[j][hi]))
                                cmax = 0;
                            else if (dd > 0) {
                                double cm = floor((tau - d0) / dd + 1e-9);
                                if (cm < cmax) cmax = cm < 0 ? 0 : (int)cm;
                            }
                        } else {
                            cmax = 0;
                        }
                        if (!prefix_ok) {
                            prefix[0] = 0;
                            for (int t = 0; t < nd; t++) prefix[t + 1] = prefix[t] + delta[t];
                            prefix_ok = 1;
                        }
                        int cands[2] = {cmax, 0};
                        int nc = (cmax > 0 && hi != lo) ? 2 : 1;
                        for (int ci = 0; ci < nc; ci++) {
                            int ch = cands[ci];
                            double P = c->baseP[j] + (k - ch) * c->lp[j][lo] + ch * c->lp[j][hi];
                            double D = d0 + ch * (c->ld[j][hi] - c->ld[j][lo]);
                            double q = qlo - prefix[ch];
                            /* quality spent beyond the best widths cannot exceed the slack */
                            if (q - (c->qtail[a] - c->qtail[b]) > slack) {
                                live = 1;
                                continue;
                            }
                            label_set *src = &SET(j, a);
                            for (int s = 0; s < src->n; s++) {
                                const label *pl = &lp->pool[src->idx[s]];
                                label nl;
                                nl.sumP = pl->sumP + P;
                                nl.maxP = pl->maxP > P ? pl->maxP : P;
                                nl.sumD = pl->sumD + D;
                                nl.maxD = pl->maxD > D ? pl->maxD : D;
                                nl.q = pl->q + q;
                                nl.parent = src->idx[s];
                                nl.a = (short)a;
                                nl.b = (short)b;
                                nl.lo = (signed char)lo;
                                nl.hi = (signed char)hi;
                                nl.c_hi = (short)ch;
                                int ir = insert_label(c, lp, &SET(j + 1, b), &nl);
                                if (ir < 0) return ir;
                                if (ir == 0)
                                    live = 1;
                                else
                                    dead = 1;
                                src = &SET(j, a); /* the pool may have moved; sets did not */
                            }
                        }
                    }
                    if (dead && !live) break;
                }
            }
        }
    }
    /* best complete label */
    label_set *fin = &SET(N, L);
    int bi = -1;
    double bo = INFINITY;
    for (int s = 0; s < fin->n; s++) {
        double f = partial_obj(c, &lp->pool[fin->idx[s]]);
        if (f < bo) bo = f, bi = fin->idx[s];
    }
    if (bi < 0) return LS_OK;
    /* rebuild the plan */
    ls_plan_result pl;
    memset(&pl, 0, sizeof pl);
    pl.n_stage = N;
    pl.mb_prefill = c->mb_pre;
    pl.mb_decode = c->mb_dec;
    int j = N;
    for (int id = bi; id > 0 && lp->pool[id].parent >= 0; id = lp->pool[id].parent) {
        const label *l = &lp->pool[id];
        j--;
        pl.dev[j] = c->order[j];
        pl.begin[j] = l->a;
        pl.begin[j + 1] = l->b;
        /* the c_hi layers with the largest omega[lo] - omega[hi] get hi */
        int idx[LS_PLAN_MAX_LAYER], n = 0;
        for (int i = l->a; i < l->b; i++) idx[n++] = i;
        for (int x = 1; x < n; x++) {
            int v = idx[x], y = x;
            double dv = om[v * NB + l->lo] - om[v * NB + l->hi];
            while (y > 0 && om[idx[y - 1] * NB + l->lo] - om[idx[y - 1] * NB + l->hi] < dv) {
                idx[y] = idx[y - 1];
                y--;
            }
            idx[y] = v;
        }
        for (int x = 0; x < n; x++) pl.bits[idx[x]] = (unsigned char)ls_plan_bits[x < l->c_hi ? l->hi : l->lo];
    }
    LS_ASSERT(j == 0);
    /* exact widths inside the stages; the DP's own assignment stands if that fails to evaluate */
    unsigned char dp_bits[LS_PLAN_MAX_LAYER];
    memcpy(dp_bits, pl.bits, sizeof dp_bits);
    polish_stages(c, &pl);
    int rc = ls_plan_evaluate(c->p, &pl);
    if (rc == LS_EINFEASIBLE) {
        memcpy(pl.bits, dp_bits, sizeof dp_bits);
        rc = ls_plan_evaluate(c->p, &pl);
    }
    if (rc == LS_OK && pl.objective < best->objective) {
        *best = pl;
        *found = 1;
        if (pl.objective < c->incumbent) c->incumbent = pl.objective;
    } else if (rc < 0 && rc != LS_EINFEASIBLE) {
        return rc;
    }
#undef SET
    return LS_OK;
}

/* Exact bit widths inside stages. A stage's time and memory depend only on its count
 * vector (n_3, n_4, n_8, n_16) of the allowed widths; its layers are ranked by how much
 * quality they gain from more bits (omega at the lowest minus the highest allowed width)
 * and the widest formats go to the first. For indicators of the form s_i * g(b) (the
 * default and the variance profile) that order is the best assignment for any counts.
 * One stage at a time, then every pair of stages (so that quality can move between
 * them), every combination of count vectors is tried with the other stages fixed,
 * keeping memory and the quality target and minimising the full objective; repeated
 * until nothing improves (at most 4 rounds). A pair is skipped above 4M combinations. */
typedef struct {
    double P, D, Q;
    unsigned char n[NB];
} stage_vec;

enum { POLISH_MAX_VEC = 1 << 18, POLISH_MAX_PAIR = 4 << 20 };

/* Every memory-feasible count vector of stage j (layers idx, prefix sums pre per allowed width). */
static int stage_vectors(const dp_ctx *c, int j, int k, const int *al, int na, double (*pre)[LS_PLAN_MAX_LAYER + 1],
                         stage_vec *v) {
    double room = c->cap[j] - c->baseM[j] - k * c->kv;
    int n[NB] = {0}, m = 0;
    for (;;) {
        int used = 0;
        for (int w = 0; w + 1 < na; w++) used += n[w];
        if (used <= k) {
            n[na - 1] = k - used;
            double mem = 0, P = c->baseP[j], D = c->baseD[j], Q = 0;
            int at = 0;
            for (int w = 0; w < na; w++) {
                mem += n[w] * c->lw[al[w]];
                if (n[w]) P += n[w] * c->lp[j][al[w]], D += n[w] * c->ld[j][al[w]];
                Q += pre[w][at + n[w]] - pre[w][at];
                at += n[w];
            }
            if (mem <= room && isfinite(P) && isfinite(D)) {
                if (m == POLISH_MAX_VEC) return -1;
                v[m].P = P, v[m].D = D, v[m].Q = Q;
                for (int w = 0; w < NB; w++) v[m].n[w] = (unsigned char)(w < na ? n[w] : 0);
                m++;
            }
        }
        int w = 0; /* odometer over the first na-1 widths, each 0..k */
        while (w + 1 < na && ++n[w] > k) n[w++] = 0;
        if (w + 1 >= na) break;
    }
    return m;
}

static void polish_stages(const dp_ctx *c, ls_plan_result *pl) {
    const ls_plan_problem *p = c->p;
    const double *om = p->omega;
    int N = pl->n_stage, gen = p->wl.gen;
    int al[NB], na = 0;
    for (int k = NB - 1; k >= 0; k--)
        if (p->bits_mask & (1 << k)) al[na++] = k; /* widest first */
    int klo = al[na - 1], khi = al[0];
    for (int j = 0; j < N; j++)
        if (pl->begin[j + 1] - pl->begin[j] > 250) return; /* counts kept in unsigned char */
    double P[LS_PLAN_MAX_DEV], D[LS_PLAN_MAX_DEV], Q[LS_PLAN_MAX_DEV];
    int *idx = malloc(sizeof(int) * LS_PLAN_MAX_LAYER);
    double(*pre)[NB][LS_PLAN_MAX_LAYER + 1] = malloc(sizeof(double[NB][LS_PLAN_MAX_LAYER + 1]) * (size_t)N);
    stage_vec *v1 = malloc(sizeof(stage_vec) * POLISH_MAX_VEC), *v2 = malloc(sizeof(stage_vec) * POLISH_MAX_VEC);
    if (!idx || !pre || !v1 || !v2) goto done;
    /* layer order (by gain, descending, stable) and prefix sums of omega per width, per stage */
    for (int j = 0; j < N; j++) {
        int a = pl->begin[j], k = pl->begin[j + 1] - a;
        int *ix = idx + a;
        for (int x = 0; x < k; x++) ix[x] = a + x;
        for (int x = 1; x < k; x++) {
            int vv = ix[x], y = x;
            double g = om[vv * NB + klo] - om[vv * NB + khi];
            while (y > 0 && om[ix[y - 1] * NB + klo] - om[ix[y - 1] * NB + khi] < g) ix[y] = ix[y - 1], y--;
            ix[y] = vv;
        }
        for (int w = 0; w < na; w++) {
            pre[j][w][0] = 0;
            for (int x = 0; x < k; x++) pre[j][w][x + 1] = pre[j][w][x] + om[ix[x] * NB + al[w]];
        }
        P[j] = c->baseP[j], D[j] = c->baseD[j], Q[j] = 0;
        for (int i = a; i < a + k; i++) {
            int kb = ls_plan_bits_index(pl->bits[i]);
            P[j] += c->lp[j][kb], D[j] += c->ld[j][kb], Q[j] += om[i * NB + kb];
        }
    }
    for (int round = 0; round < 4; round++) {
        int improved = 0;
        /* span 0: one stage (j1 == j2); span 1: every pair */
        for (int span = 0; span < 2 && !(span == 1 && N < 2); span++)
            for (int j1 = 0; j1 < N; j1++)
                for (int j2 = span ? j1 + 1 : j1; j2 < (span ? N : j1 + 1); j2++) {
                    double sPo = 0, mPo = 0, sDo = 0, mDo = 0, qo = 0;
                    for (int t = 0; t < N; t++) {
                        if (t == j1 || t == j2) continue;
                        sPo += P[t], sDo += D[t], qo += Q[t];
                        if (P[t] > mPo) mPo = P[t];
                        if (D[t] > mDo) mDo = D[t];
                    }
                    int k1 = pl->begin[j1 + 1] - pl->begin[j1], k2 = pl->begin[j2 + 1] - pl->begin[j2];
                    int m1 = stage_vectors(c, j1, k1, al, na, pre[j1], v1);
                    int m2 = span ? stage_vectors(c, j2, k2, al, na, pre[j2], v2) : 1;
                    if (m1 <= 0 || m2 <= 0 || (double)m1 * m2 > POLISH_MAX_PAIR) continue;
                    stage_vec zero = {0, 0, 0, {0}};
                    double cur = 0;
                    int b1 = -1, b2 = -1;
                    for (int pass = 0; pass < 2; pass++) /* pass 0: the current objective */
                        for (int x = pass ? 0 : -1; x < (pass ? m1 : 0); x++)
                            for (int y = pass ? 0 : -1; y < (pass ? m2 : 0); y++) {
                                double Pa, Da, Qa, Pb, Db, Qb;
                                if (!pass) {
                                    Pa = P[j1], Da = D[j1], Qa = Q[j1];
                                    Pb = span ? P[j2] : 0, Db = span ? D[j2] : 0, Qb = span ? Q[j2] : 0;
                                } else {
                                    const stage_vec *w2 = span ? &v2[y] : &zero;
                                    Pa = v1[x].P, Da = v1[x].D, Qa = v1[x].Q, Pb = w2->P, Db = w2->D, Qb = w2->Q;
                                    if (qo + Qa + Qb > p->qmax) continue;
                                }
                                double mP = Pa > mPo ? Pa : mPo, mD = Da > mDo ? Da : mDo;
                                if (span && Pb > mP) mP = Pb;
                                if (span && Db > mD) mD = Db;
                                double sD = sDo + Da + Db, r = c->md * mD > sD ? c->md * mD : sD;
                                double f = sPo + Pa + Pb + (c->mp - 1) * mP + (gen - 1) * r + p->theta * (qo + Qa + Qb);
                                if (!pass)
                                    cur = f * (1 - 1e-12);
                                else if (f < cur)
                                    cur = f, b1 = x, b2 = y;
                            }
                    if (b1 < 0) continue;
                    for (int s2 = 0; s2 <= span; s2++) {
                        int j = s2 ? j2 : j1;
                        const stage_vec *w = s2 ? &v2[b2] : &v1[b1];
                        int at = pl->begin[j];
                        for (int ww = 0; ww < na; ww++)
                            for (int x = 0; x < w->n[ww]; x++) pl->bits[idx[at++]] = (unsigned char)ls_plan_bits[al[ww]];
                        P[j] = w->P, D[j] = w->D, Q[j] = w->Q;
                    }
                    improved = 1;
                }
        if (!improved) break;
    }
done:
    free(idx);
    free(pre);
    free(v1);
    free(v2);
}

/* Runs the DP for one candidate over a descending grid of decode thresholds, then refines
 * around the best. Returns the best objective found (INFINITY when none). */
static int dp_candidate(dp_ctx *c, label_pool *lp, label_set *sets, ls_plan_result *best, int *found, int coarse) {
    ls_plan_result local;
    memset(&local, 0, sizeof local);
    local.objective = INFINITY;
    int lf = 0;
    LS_TRY(dp_run(c, INFINITY, lp, sets, &local, &lf));
    /* the threshold search starts from the bottleneck of this candidate's best plan: the
     * unbounded run's, or the incumbent's when that plan is of this candidate (then the
     * unbounded run finds nothing better, yet a lower threshold may) */
    const ls_plan_result *from = &local;
    if (!lf) {
        int same = !coarse && *found && best->mb_prefill == c->mb_pre && best->mb_decode == c->mb_dec;
        for (int j = 0; same && j < c->N; j++) same = best->dev[j] == c->order[j];
        if (!same) return LS_OK;
        from = best;
    }
    double tau0 = 0;
    for (int j = 0; j < from->n_stage; j++)
        if (from->stage_decode_s[j] > tau0) tau0 = from->stage_decode_s[j];
    double best_tau = tau0, tau = tau0;
    int steps = coarse ? 2 : 8;
    double ratio = coarse ? 0.8 : 0.93;
    for (int s = 0; s < steps; s++) {
        tau *= ratio;
        int f = 0;
        double before = local.objective;
        LS_TRY(dp_run(c, tau, lp, sets, &local, &f));
        if (f && local.objective < before) best_tau = tau;
        if (!f && tau < best_tau * 0.6) break;
    }
    if (!coarse) {
        /* refine: the tight threshold of the best plan, and a few steps either side */
        for (double r = 0.99; r >= 0.975; r -= 0.01) {
            int f = 0;
            LS_TRY(dp_run(c, best_tau * r, lp, sets, &local, &f));
            LS_TRY(dp_run(c, best_tau / r, lp, sets, &local, &f));
        }
    }
    if (local.objective < best->objective) {
        *best = local;
        *found = 1;
    }
    return LS_OK;
}

typedef struct {
    int order, mb;
    double obj;
} cand;

static int cmp_cand(const void *x, const void *y) {
    double a = ((const cand *)x)->obj, b = ((const cand *)y)->obj;
    return a < b ? -1 : a > b;
}

int ls_plan_splitquant(const ls_plan_problem *p, ls_plan_result *out, int rank_only, int *cand_order, int *cand_mb,
                       int *n_cand_out, ls_plan_result *cand_plans, double incumbent) {
    enum { MAX_ORDERS = 24 };
    int(*orders)[LS_PLAN_MAX_DEV] = malloc(sizeof(int[LS_PLAN_MAX_DEV]) * MAX_ORDERS);
    int mbs[64][2], n_orders, n_mb;
    dp_ctx *c = calloc(1, sizeof *c);
    int L = p->arch->n_layer, N = p->cl->n_dev;
    label_set *sets = malloc(sizeof(label_set) * (size_t)(N + 1) * (L + 1));
    label_pool lp = {0};
    cand *cs = NULL;
    int rc = LS_OK;
    if (!orders || !c || !sets) {
        rc = ls_err(LS_ENOMEM, "planner");
        goto done;
    }
    if (N > L) {
        rc = ls_err(LS_EINFEASIBLE, "%d devices but only %d layers: every device holds at least one layer", N, L);
        goto done;
    }
    ls_plan_orders(p->cl, MAX_ORDERS, orders, &n_orders);
    ls_plan_microbatches(p, N, mbs, &n_mb);
    int nc = n_orders * n_mb;
    cs = calloc((size_t)nc, sizeof *cs);
    if (!cs) {
        rc = ls_err(LS_ENOMEM, "planner");
        goto done;
    }
    ls_plan_result best;
    memset(&best, 0, sizeof best);
    best.objective = incumbent; /* only plans that beat the caller's incumbent count */
    int found = 0;
    /* screening: a coarse threshold grid for every candidate */
    for (int o = 0; o < n_orders; o++)
        for (int m = 0; m < n_mb; m++) {
            cand *x = &cs[o * n_mb + m];
            x->order = o;
            x->mb = m;
            dp_setup(c, p, orders[o], mbs[m][0], mbs[m][1]);
            /* prune by the best plan so far, except when the ILP wants every candidate ranked */
            c->incumbent = rank_only ? INFINITY : best.objective * (1 + 1e-12);
            ls_plan_result one;
            memset(&one, 0, sizeof one);
            one.objective = INFINITY;
            int f = 0;
            if ((rc = dp_candidate(c, &lp, sets, &one, &f, 1))) goto done;
            x->obj = f ? one.objective : INFINITY;
            if (cand_plans) cand_plans[o * n_mb + m] = one; /* objective INFINITY: none */
            if (f && one.objective < best.objective) best = one, found = 1;
        }
    qsort(cs, (size_t)nc, sizeof *cs, cmp_cand);
    if (rank_only) {
        for (int i = 0; i < nc; i++) {
            cand_order[i] = cs[i].order;
            cand_mb[i] = cs[i].mb;
        }
        *n_cand_out = nc;
    }
    /* refinement of the most promising candidates */
    int n_refine = nc < 2 ? nc : 2;
    for (int i = 0; i < n_refine && isfinite(cs[i].obj); i++) {
        dp_setup(c, p, orders[cs[i].order], mbs[cs[i].mb][0], mbs[cs[i].mb][1]);
        c->incumbent = best.objective * (1 + 1e-12);
        if ((rc = dp_candidate(c, &lp, sets, &best, &found, 0))) goto done;
    }
    /* replay-verified selection: the closed form ranks the candidates, the replay of
     * serve's schedule picks among the best plans of the top few (it sees partial
     * micro-batches, hops and shared hosts that the closed form leaves out) */
    if (p->replay_select > 0 && !rank_only) {
        ls_plan_sim_opts so = ls_plan_sim_for_cluster(p->cl);
        ls_plan_sim_result sr;
        double best_tps = found && ls_plan_simulate(p, &best, &so, &sr) == LS_OK ? sr.tok_s : -1;
        for (int i = 0; i < p->replay_select && i < nc && isfinite(cs[i].obj); i++) {
            dp_setup(c, p, orders[cs[i].order], mbs[cs[i].mb][0], mbs[cs[i].mb][1]);
            c->incumbent = INFINITY;
            ls_plan_result one;
            memset(&one, 0, sizeof one);
            one.objective = INFINITY;
            int f = 0;
            if ((rc = dp_candidate(c, &lp, sets, &one, &f, 0))) goto done;
            if (f && ls_plan_simulate(p, &one, &so, &sr) == LS_OK && sr.tok_s > best_tps) {
                best = one, best_tps = sr.tok_s;
                found = 1;
            }
        }
    }
    if (!found) {
        rc = LS_EINFEASIBLE;
        goto done;
    }
    best.n_candidates = nc;
    *out = best;
done:
    free(orders);
    free(c);
    free(sets);
    free(lp.pool);
    free(cs);
    return rc;
}

/* ---------------------------------------------------------------- baselines */

/* Evaluates a fixed partition for every uniform bit width from high to low; keeps the first
 * that fits memory (and, unless ignore_q, the quality target). */
static int try_uniform_bits(const ls_plan_problem *p, ls_plan_result *pl, int ignore_q) {
    for (int k = NB - 1; k >= 0; k--) {
        if (!(p->bits_mask & (1 << k))) continue;
        for (int i = 0; i < p->arch->n_layer; i++) pl->bits[i] = (unsigned char)ls_plan_bits[k];
        ls_plan_problem q = *p;
        if (ignore_q) q.qmax = INFINITY;
        int rc = ls_plan_evaluate(&q, pl);
        if (rc == LS_OK) {
            ls_plan_evaluate(p, pl); /* objective with the real quality term */
            return LS_OK;
        }
        if (rc != LS_EINFEASIBLE) return rc;
    }
    return LS_EINFEASIBLE;
}

/* The start of a fixed-split baseline: one stage per device in file order, one micro-batch
 * ceil(B / #devices) for both phases. */
static int baseline_init(const ls_plan_problem *p, ls_plan_result *pl) {
    int L = p->arch->n_layer, N = p->cl->n_dev;
    if (N > L) return ls_err(LS_EINFEASIBLE, "%d devices but only %d layers", N, L);
    memset(pl, 0, sizeof *pl);
    pl->n_stage = N;
    pl->mb_prefill = pl->mb_decode = (p->wl.batch + N - 1) / N;
    for (int j = 0; j < N; j++) pl->dev[j] = j;
    return LS_OK;
}

static int plan_uniform(const ls_plan_problem *p, ls_plan_result *out) {
    int L = p->arch->n_layer, N = p->cl->n_dev;
    ls_plan_result pl;
    LS_TRY(baseline_init(p, &pl));
    for (int j = 0; j <= N; j++) pl.begin[j] = (int)((long)L * j / N);
    int rc = try_uniform_bits(p, &pl, 1);
    if (rc) return rc;
    pl.n_candidates = 1;
    *out = pl;
    return LS_OK;
}

/* PipeEdge: the best partition and device order at one bit width (the DP restricted to a
 * single width), one micro-batch size for both phases. */
static int plan_pipeedge(const ls_plan_problem *p, ls_plan_result *out) {
    ls_plan_result best;
    int found = 0;
    memset(&best, 0, sizeof best);
    best.objective = INFINITY;
    for (int k = NB - 1; k >= 0; k--) {
        if (!(p->bits_mask & (1 << k))) continue;
        ls_plan_problem q = *p;
        q.bits_mask = 1 << k;
        q.fix_mb = 1;
        ls_plan_result pl;
        /* each width only has to beat the best of the widths before it */
        int rc = ls_plan_splitquant(&q, &pl, 0, NULL, NULL, NULL, NULL, best.objective * (1 + 1e-12));
        if (rc == LS_EINFEASIBLE) continue;
        if (rc) return rc;
        ls_plan_evaluate(p, &pl);
        if (pl.objective < best.objective) best = pl, found = 1;
    }
    if (!found) return LS_EINFEASIBLE;
    *out = best;
    return LS_OK;
}

/* AdaBits: layers split in proportion to usable memory, then on every device the highest
 * bits its memory allows (two adjacent widths mixed to fill it); quality is not consulted. */
static int plan_adabits(const ls_plan_problem *p, ls_plan_result *out) {
    int L = p->arch->n_layer, N = p->cl->n_dev;
    ls_plan_result pl;
    LS_TRY(baseline_init(p, &pl));
    double tot = 0, acc = 0;
    for (int j = 0; j < N; j++) tot += p->cl->dev[j].usable_bytes > 0 ? p->cl->dev[j].usable_bytes : 0;
    pl.begin[0] = 0;
    for (int j = 0; j < N; j++) {
        acc += p->cl->dev[j].usable_bytes > 0 ? p->cl->dev[j].usable_bytes : 0;
        int e = tot > 0 ? (int)floor(L * acc / tot + 0.5) : L * (j + 1) / N;
        if (e <= pl.begin[j]) e = pl.begin[j] + 1;
        if (e > L - (N - 1 - j)) e = L - (N - 1 - j);
        pl.begin[j + 1] = j == N - 1 ? L : e;
    }
    ls_plan_problem q = *p;
    q.qmax = INFINITY;
    int kmin = 0; /* the lowest allowed width fills layers not yet decided */
    while (kmin < NB - 1 && !(p->bits_mask & (1 << kmin))) kmin++;
    unsigned char bmin = (unsigned char)ls_plan_bits[kmin];
    for (int i = 0; i < L; i++) pl.bits[i] = bmin;
    for (int j = 0; j < N; j++) {
        int a = pl.begin[j], b = pl.begin[j + 1], done = 0;
        /* highest mix that fits this stage: try c layers at hi over lo for descending widths */
        for (int hi = NB - 1; hi >= 0 && !done; hi--) {
            if (!(p->bits_mask & (1 << hi))) continue;
            int lo = hi - 1;
            while (lo >= 0 && !(p->bits_mask & (1 << lo))) lo--;
            for (int ch = b - a; ch >= 0 && !done; ch--) {
                if (ch < b - a && lo < 0) break;
                for (int i = a; i < b; i++) pl.bits[i] = (unsigned char)ls_plan_bits[i - a < ch ? hi : lo];
                for (int i = b; i < L; i++) pl.bits[i] = bmin;
                int rc = ls_plan_evaluate(&q, &pl);
                if (rc == LS_OK || (rc == LS_EINFEASIBLE && pl.stage_mem[j] <= pl.stage_usable[j])) done = 1;
            }
        }
        if (!done) {
            for (int i = a; i < b; i++) pl.bits[i] = bmin;
        }
    }
    int rc = ls_plan_evaluate(p, &pl);
    if (rc) return rc;
    pl.n_candidates = 1;
    *out = pl;
    return LS_OK;
}

/* splitquant as the user runs it: the baselines' plans that meet the quality target seed
 * the incumbent, so the DP prunes from the start and the answer is never worse than any
 * baseline (the DP's label cap can otherwise lose a single-width plan). */
static int plan_splitquant_seeded(const ls_plan_problem *p, ls_plan_result *out) {
    ls_plan_result seed, base[3];
    int base_ok[3] = {0};
    memset(&seed, 0, sizeof seed);
    seed.objective = INFINITY;
    int (*fn[3])(const ls_plan_problem *, ls_plan_result *) = {plan_uniform, plan_adabits, plan_pipeedge};
    for (int t = 0; t < 3; t++) {
        int rc = fn[t](p, &base[t]);
        if (rc == LS_OK) rc = ls_plan_evaluate(p, &base[t]); /* uniform/adabits ignore the quality target */
        base_ok[t] = rc == LS_OK;
        if (rc == LS_OK && base[t].objective < seed.objective)
            seed = base[t];
        else if (rc < 0 && rc != LS_EINFEASIBLE)
            return rc;
    }
    if (p->replay_select > 0) {
        /* the DP's re-ranked plan and every baseline plan that meets the target compete by
         * replay; when the workload is too large to replay, selection falls back to the
         * objective below */
        ls_plan_sim_opts so = ls_plan_sim_for_cluster(p->cl);
        ls_plan_sim_result sr;
        int rc = ls_plan_splitquant(p, out, 0, NULL, NULL, NULL, NULL, INFINITY);
        if (rc != LS_OK && rc != LS_EINFEASIBLE) return rc;
        if (rc == LS_EINFEASIBLE && isfinite(seed.objective)) {
            int nc = out->n_candidates;
            *out = seed;
            out->n_candidates = nc;
            rc = LS_OK;
        }
        if (rc != LS_OK) return rc;
        if (ls_plan_simulate(p, out, &so, &sr) == LS_OK) {
            int nc = out->n_candidates;
            double best_tps = sr.tok_s;
            for (int t = 0; t < 3; t++)
                if (base_ok[t] && ls_plan_simulate(p, &base[t], &so, &sr) == LS_OK && sr.tok_s > best_tps)
                    *out = base[t], best_tps = sr.tok_s;
            out->n_candidates = nc;
            return LS_OK;
        }
    }
    ls_plan_problem q = *p; /* by the objective alone */
    q.replay_select = 0;
    int rc = ls_plan_splitquant(&q, out, 0, NULL, NULL, NULL, NULL, seed.objective * (1 + 1e-12));
    if (rc == LS_EINFEASIBLE && isfinite(seed.objective)) {
        int nc = out->n_candidates;
        *out = seed;
        out->n_candidates = nc;
        return LS_OK;
    }
    return rc;
}

int ls_plan_splitquant_seeded(const ls_plan_problem *p, ls_plan_result *out) {
    ls_plan_problem q = *p;
    q.replay_select = 0;
    return plan_splitquant_seeded(&q, out);
}

/* ---------------------------------------------------------------- exhaustive (tests) */

static int brute_rec(const ls_plan_problem *p, ls_plan_result *pl, int j, int i, ls_plan_result *best, int *found) {
    int L = p->arch->n_layer, N = p->cl->n_dev;
    if (j == N) {
        if (i != L) return LS_OK;
        /* every bit assignment */
        long total = 1;
        for (int t = 0; t < L; t++) total *= NB;
        for (long code = 0; code < total; code++) {
            long x = code;
            int ok = 1;
            for (int t = 0; t < L; t++) {
                int k = (int)(x % NB);
                x /= NB;
                if (!(p->bits_mask & (1 << k))) ok = 0;
                pl->bits[t] = (unsigned char)ls_plan_bits[k];
            }
            if (!ok) continue;
            int rc = ls_plan_evaluate(p, pl);
            if (rc == LS_OK && pl->objective < best->objective) *best = *pl, *found = 1;
        }
        return LS_OK;
    }
    for (int b = i + 1; b <= L - (N - 1 - j); b++) {
        pl->begin[j + 1] = b;
        LS_TRY(brute_rec(p, pl, j + 1, b, best, found));
    }
    return LS_OK;
}

static int plan_brute(const ls_plan_problem *p, ls_plan_result *out) {
    int L = p->arch->n_layer, N = p->cl->n_dev;
    if (L > 8 || N > 4) return ls_err(LS_EINVAL, "brute force is for tiny problems (<= 8 layers, <= 4 devices)");
    if (N > L) return LS_EINFEASIBLE;
    enum { MAX_ORDERS = 24 };
    int orders[MAX_ORDERS][LS_PLAN_MAX_DEV], mbs[64][2], n_orders, n_mb;
    ls_plan_orders(p->cl, MAX_ORDERS, orders, &n_orders);
    ls_plan_microbatches(p, N, mbs, &n_mb);
    ls_plan_result best, pl;
    memset(&best, 0, sizeof best);
    best.objective = INFINITY;
    int found = 0;
    for (int o = 0; o < n_orders; o++)
        for (int m = 0; m < n_mb; m++) {
            memset(&pl, 0, sizeof pl);
            pl.n_stage = N;
            for (int j = 0; j < N; j++) pl.dev[j] = orders[o][j];
            pl.mb_prefill = mbs[m][0];
            pl.mb_decode = mbs[m][1];
            pl.begin[0] = 0;
            LS_TRY(brute_rec(p, &pl, 0, 0, &best, &found));
        }
    if (!found) return LS_EINFEASIBLE;
    best.n_candidates = n_orders * n_mb;
    *out = best;
    return LS_OK;
}

/* ---------------------------------------------------------------- dispatch */

/* Explains an infeasible request: memory short at the lowest bits, or the best quality. */
static int explain_infeasible(const ls_plan_problem *p, ls_plan_algo algo, const char *why) {
    const ls_plan_arch *a = p->arch;
    const ls_plan_cluster *cl = p->cl;
    int L = a->n_layer, N = cl->n_dev;
    if (N > L)
        return ls_err(LS_EINFEASIBLE, "%d devices but %s has only %d layers (every device holds at least one)", N,
                      a->name, L);
    int kmin = -1;
    for (int k = 0; k < NB; k++)
        if (p->bits_mask & (1 << k)) {
            kmin = k;
            break;
        }
    int mb = (p->wl.batch + N - 1) / N;
    double fixed = L * ls_plan_layer_kv_bytes(a, &p->wl) + ls_plan_embed_bytes(a) + ls_plan_head_bytes(a) +
                   N * ls_plan_workspace_bytes(a, &p->wl, 1, mb);
    double need = fixed + L * ls_plan_layer_weight_bytes(a, ls_plan_bits[kmin]);
    double have = 0;
    for (int d = 0; d < N; d++) have += cl->dev[d].usable_bytes > 0 ? cl->dev[d].usable_bytes : 0;
    if (need > have) {
        char buf[512] = "";
        for (int d = 0; d < N && strlen(buf) < 400; d++) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "%s%s %.1f GB", d ? ", " : "", cl->dev[d].name,
                     cl->dev[d].usable_bytes / 1e9);
        }
        return ls_err(LS_EINFEASIBLE,
                      "%s does not fit on %s even at %d bits: needs %.1f GB (weights + KV cache for batch %d x %d "
                      "tokens + embeddings + workspace), the devices offer %.1f GB usable (%s): %.1f GB short",
                      a->name, cl->name, ls_plan_bits[kmin], need / 1e9, p->wl.batch, p->wl.prompt + p->wl.gen,
                      have / 1e9, buf, (need - have) / 1e9);
    }
    if (isfinite(p->qmax)) {
        /* best reachable quality: the plan with the quality target lifted but theta huge */
        ls_plan_problem q = *p;
        q.qmax = INFINITY;
        q.theta = 1e9;
        ls_plan_result pl;
        if (ls_plan_splitquant(&q, &pl, 0, NULL, NULL, NULL, NULL, INFINITY) == LS_OK && pl.quality > p->qmax)
            return ls_err(LS_EINFEASIBLE,
                          "quality target unreachable: at most %.4g allowed, the best plan that fits memory reaches "
                          "%.4g (add memory or relax --quality)",
                          p->qmax, pl.quality);
    }
    /* pipeedge keeps one width for all layers: why each allowed width fails */
    if (algo == LS_PLAN_ALGO_PIPEEDGE) {
        char buf[512] = "";
        for (int k = 0; k < NB && strlen(buf) < 400; k++) {
            if (!(p->bits_mask & (1 << k))) continue;
            double q = 0, nk = fixed + L * ls_plan_layer_weight_bytes(a, ls_plan_bits[k]);
            for (int i = 0; i < L; i++) q += p->omega[i * NB + k];
            size_t l = strlen(buf);
            if (q > p->qmax)
                snprintf(buf + l, sizeof buf - l, "; at %d bits the indicator is %.4g, %.4g allowed", ls_plan_bits[k], q,
                         p->qmax);
            else if (nk > have)
                snprintf(buf + l, sizeof buf - l, "; at %d bits it needs %.1f GB, %.1f GB more than the %.1f GB usable",
                         ls_plan_bits[k], nk / 1e9, (nk - have) / 1e9, have / 1e9);
            else
                snprintf(buf + l, sizeof buf - l, "; at %d bits (%.1f GB of %.1f GB usable) no split fits every device",
                         ls_plan_bits[k], nk / 1e9, have / 1e9);
        }
        return ls_err(LS_EINFEASIBLE, "no pipeedge plan (one width for all layers) fits %s on %s%s (try another --algo "
                      "or --bits)", a->name, cl->name, buf);
    }
    /* a fixed split (uniform, adabits) names its stage and the GB it is over, or the quality
     * its widths (chosen by memory) reach */
    const char *qual = strstr(why, "plan: quality indicator ");
    if (qual)
        return ls_err(LS_EINFEASIBLE, "the %s plan for %s on %s misses the quality target: %s (try another --algo, "
                      "--bits or --quality)", ls_plan_algo_name(algo), a->name, cl->name, qual + 6);
    const char *over = strstr(why, "plan: stage ");
    if (over && strstr(over, "GB over"))
        return ls_err(LS_EINFEASIBLE, "no %s plan fits %s on %s with the allowed widths: %s (try another --algo, "
                      "--bits, a smaller --batch or more devices)",
                      ls_plan_algo_name(algo), a->name, cl->name, over + 6);
    return ls_err(LS_EINFEASIBLE,
                  "no %s plan fits %s on %s: some stage of its split exceeds a device's memory (try another --algo, "
                  "a smaller --batch or more devices)",
                  ls_plan_algo_name(algo), a->name, cl->name);
}

int ls_plan_solve(const ls_plan_problem *p, ls_plan_algo algo, ls_plan_result *out) {
    LS_TRY(ls_plan_problem_validate(p));
    memset(out, 0, sizeof *out);
    double t0 = ls_now();
    static int (*const fn[LS_PLAN_ALGO_COUNT])(const ls_plan_problem *, ls_plan_result *) = {
        plan_splitquant_seeded, ls_plan_ilp, plan_uniform, plan_pipeedge, plan_adabits, plan_brute};
    if (algo < 0 || algo >= LS_PLAN_ALGO_COUNT) return ls_err(LS_EINVAL, "unknown planner algorithm %d", (int)algo);
    int rc = fn[algo](p, out);
    if (rc == LS_ETIMEDOUT && algo == LS_PLAN_ALGO_ILP) {
        /* the ILP ran out of time; where splitquant finds the request infeasible, say why */
        char t[256], why[512];
        snprintf(t, sizeof t, "%s", ls_errmsg());
        if (plan_splitquant_seeded(p, out) != LS_EINFEASIBLE) return ls_err(LS_ETIMEDOUT, "%s", t);
        explain_infeasible(p, LS_PLAN_ALGO_SPLITQUANT, "");
        snprintf(why, sizeof why, "%s", ls_errmsg());
        return ls_err(LS_ETIMEDOUT, "%s; splitquant finds none either: %s", t, why);
    }
    if (rc == LS_EINFEASIBLE) {
        int keep = strstr(ls_errmsg(), "devices but") != NULL;
        char why[512];
        snprintf(why, sizeof why, "%s", ls_errmsg());
        return keep ? rc : explain_infeasible(p, algo, why);
    }
    if (rc) return rc;
    out->algo = algo;
    out->solve_s = ls_now() - t0;
    if (algo != LS_PLAN_ALGO_ILP) {
        out->ilp_gap = 0;
        out->ilp_optimal = 0;
    }
    return LS_OK;
}
