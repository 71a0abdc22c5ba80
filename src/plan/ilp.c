/* ilp.c - the exact LLM-PQ mixed-integer programme for one (device order, micro-batch)
 * candidate, solved with COIN-OR CBC through its C interface; the outer loop visits every
 * candidate under a total time limit and reports the optimality gap. */
#include <coin/Cbc_C_Interface.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"
#include "plan/internal.h"

#define NB LS_PLAN_NBITS

typedef struct {
    int *col; /* z[i][j][k] -> column or -1 */
    int L, N;
} zmap;

#define ZC(m, i, j, k) ((m)->col[((i) * (m)->N + (j)) * NB + (k)])

typedef struct {
    int n;
    int cap;
    int *idx;
    double *val;
} row_t;

static int row_add(row_t *r, int idx, double v) {
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 64;
        int *ni = realloc(r->idx, sizeof(int) * (size_t)nc);
        if (!ni) return ls_err(LS_ENOMEM, "ILP row");
        r->idx = ni;
        double *nv = realloc(r->val, sizeof(double) * (size_t)nc);
        if (!nv) return ls_err(LS_ENOMEM, "ILP row");
        r->val = nv;
        r->cap = nc;
    }
    r->idx[r->n] = idx;
    r->val[r->n++] = v;
    return LS_OK;
}

/* Width order of adjacent layers i, i+1 inside one stage: +1 when layer i gains at least
 * as much as i+1 from every step up among the allowed widths (then some optimal plan has
 * b_i >= b_{i+1} wherever both sit in one stage: swapping their widths keeps the stage's
 * time and memory, which depend only on its counts per width, and does not raise the
 * indicator), -1 for the mirror case, 0 when neither holds. */
static int width_order(const ls_plan_problem *p, int i) {
    const double *a = p->omega + i * NB, *b = p->omega + (i + 1) * NB;
    int up = 1, down = 1;
    for (int k = 0; k < NB; k++)
        for (int k2 = k + 1; k2 < NB; k2++) {
            if (!(p->bits_mask & (1 << k)) || !(p->bits_mask & (1 << k2))) continue;
            double ga = a[k] - a[k2], gb = b[k] - b[k2];
            if (ga < gb) up = 0;
            if (gb < ga) down = 0;
        }
    return up ? 1 : down ? -1 : 0;
}

/* Orders a plan's widths inside each stage as width_order asks (adjacent swaps; each keeps
 * the stage's counts and does not raise the indicator), so that it is a valid MIP start. */
static void order_widths(const ls_plan_problem *p, ls_plan_result *pl) {
    for (int j = 0; j < pl->n_stage; j++)
        for (int changed = 1; changed;) {
            changed = 0;
            for (int i = pl->begin[j]; i + 1 < pl->begin[j + 1]; i++) {
                int d = width_order(p, i);
                if ((d > 0 && pl->bits[i] < pl->bits[i + 1]) || (d < 0 && pl->bits[i] > pl->bits[i + 1])) {
                    unsigned char t = pl->bits[i];
                    pl->bits[i] = pl->bits[i + 1], pl->bits[i + 1] = t;
                    changed = 1;
                }
            }
        }
}

/* Adds z[i][j][k] for i in [i0, i1), j in [j0, j1), every width with a column, at
 * coefficient scale * (per_jk ? per_jk[j * jstride + k] : 1) * (per_ik ? per_ik[i * NB + k] : 1). */
static int add_z(row_t *r, const zmap *zm, int i0, int i1, int j0, int j1, const double *per_jk, int jstride,
                 const double *per_ik, double scale) {
    for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++)
            for (int k = 0; k < NB; k++) {
                if (ZC(zm, i, j, k) < 0) continue;
                double c = scale * (per_jk ? per_jk[j * jstride + k] : 1) * (per_ik ? per_ik[i * NB + k] : 1);
                LS_TRY(row_add(r, ZC(zm, i, j, k), c));
            }
    return LS_OK;
}

typedef struct {
    double obj;   /* best objective found (INFINITY if none) */
    double bound; /* proven lower bound */
    int optimal;  /* proven optimal or proven no better than the cutoff */
    int has_sol;
    double mip_obj; /* the MIP's own objective for plan (CBC's, with the stages' fixed prefill) */
    ls_plan_result plan;
} ilp_result;

/* Whether plan pl is of the candidate (device order, micro-batch pair). */
static int of_candidate(const ls_plan_result *pl, const int *order, const int *mb, int N) {
    return pl->n_stage == N && pl->mb_prefill == mb[0] && pl->mb_decode == mb[1] &&
           !memcmp(pl->dev, order, sizeof(int) * (size_t)N);
}

void ls_plan_cand_cost_free(ls_plan_cand_cost *cc) {
    free(cc->lp);
    free(cc->ld);
    free(cc->baseP);
    free(cc->ok);
    memset(cc, 0, sizeof *cc);
}

int ls_plan_cand_cost_init(const ls_plan_problem *p, const int *order, int mb_pre, int mb_dec, ls_plan_cand_cost *cc) {
    const ls_plan_arch *a = p->arch;
    const ls_plan_cluster *cl = p->cl;
    int L = a->n_layer, N = cl->n_dev;
    double ctx = p->wl.prompt + p->wl.gen / 2.0;
    double kv = ls_plan_layer_kv_bytes(a, &p->wl), ws = ls_plan_workspace_bytes(a, &p->wl, mb_pre, mb_dec);
    double lw[NB];
    memset(cc, 0, sizeof *cc);
    cc->L = L, cc->N = N, cc->order = order, cc->mb_pre = mb_pre, cc->mb_dec = mb_dec;
    cc->mp = (p->wl.batch + mb_pre - 1) / mb_pre, cc->md = (p->wl.batch + mb_dec - 1) / mb_dec;
    cc->lp = malloc(sizeof(double[NB]) * (size_t)N);
    cc->ld = malloc(sizeof(double[NB]) * (size_t)N);
    cc->baseP = malloc(sizeof(double) * 4 * (size_t)N);
    cc->ok = malloc(sizeof(unsigned char[NB]) * (size_t)N);
    if (!cc->lp || !cc->ld || !cc->baseP || !cc->ok) {
        ls_plan_cand_cost_free(cc);
        return ls_err(LS_ENOMEM, "ILP");
    }
    cc->baseD = cc->baseP + N, cc->baseM = cc->baseD + N, cc->cap = cc->baseM + N;
    for (int k = 0; k < NB; k++) {
        lw[k] = ls_plan_layer_weight_bytes(a, ls_plan_bits[k]);
        cc->memk[k] = (lw[k] + kv) / 1e9;
    }
    for (int j = 0; j < N; j++) {
        int d = order[j];
        for (int k = 0; k < NB; k++) {
            cc->lp[j][k] = ls_plan_layer_prefill_s(a, cl, d, ls_plan_bits[k], mb_pre, p->wl.prompt);
            cc->ld[j][k] = ls_plan_layer_decode_s(a, cl, d, ls_plan_bits[k], mb_dec, ctx);
        }
        double fm;
        ls_plan_stage_fixed(p, order, N, j, mb_pre, mb_dec, &fm, &cc->baseP[j], &cc->baseD[j]);
        cc->baseM[j] = ws + fm;
        cc->cap[j] = (cl->dev[d].usable_bytes - cc->baseM[j]) / 1e9;
        /* width k at j: allowed, priced, and one layer fits beside the stage's fixed memory */
        for (int k = 0; k < NB; k++)
            cc->ok[j][k] = (p->bits_mask & (1 << k)) && isfinite(cc->lp[j][k]) && isfinite(cc->ld[j][k]) &&
                           !(lw[k] + kv + cc->baseM[j] > cl->dev[d].usable_bytes);
    }
    return LS_OK;
}

/* Builds and solves the MIP for one candidate. cutoff: only solutions below it matter. */
static int solve_one(const ls_plan_problem *p, const ls_plan_cand_cost *cc, double limit_s, double cutoff,
                     const ls_plan_result *start, ilp_result *res) {
    const int *order = cc->order;
    int mb_pre = cc->mb_pre, mb_dec = cc->mb_dec;
    int L = cc->L, N = cc->N, n = p->wl.gen, mp = cc->mp, md = cc->md;
    double(*lp)[NB] = cc->lp, (*ld)[NB] = cc->ld;
    const double *baseP = cc->baseP, *baseD = cc->baseD;
    memset(res, 0, sizeof *res);
    res->obj = INFINITY;
    res->bound = -INFINITY;
    zmap zm = {malloc(sizeof(int) * (size_t)L * N * NB), L, N};
    row_t r = {0};
    Cbc_Model *m = NULL;
    int rc = LS_OK;
    if (!zm.col) {
        rc = ls_err(LS_ENOMEM, "ILP");
        goto done;
    }
    double sumBaseP = 0, sumBaseD = 0;
    for (int j = 0; j < N; j++) sumBaseP += baseP[j], sumBaseD += baseD[j];
    m = Cbc_newModel();
    if (!m) {
        rc = ls_err(LS_ENOMEM, "CBC model");
        goto done;
    }
    Cbc_setLogLevel(m, 0);
    int ncol = 0;
    /* (0) integer aggregates, branched on before the z: F_j = number of layers on positions
     * before j (the stage boundaries) and c_jk = layers at width k on position j (a stage's
     * time and memory depend only on these). In the LP the z split layers fractionally so
     * that every stage is exactly balanced; branching on a single z barely moves that bound,
     * branching on a boundary or a count does. Up to 16 devices, as the symmetry rows. */
    int aux = N <= 16, cF = ncol, cC[LS_PLAN_MAX_DEV][NB];
    for (int j = 0; j < N; j++)
        for (int k = 0; k < NB; k++) cC[j][k] = -1;
    if (aux) {
        for (int j = 1; j < N; j++) {
            char nm[32];
            snprintf(nm, sizeof nm, "F_%d", j);
            Cbc_addCol(m, nm, j, L - (N - j), 0, 1, 0, NULL, NULL);
            ncol++;
        }
        for (int j = 0; j < N; j++)
            for (int k = 0; k < NB; k++) {
                if (!(p->bits_mask & (1 << k))) continue;
                char nm[32];
                snprintf(nm, sizeof nm, "c_%d_%d", j, k);
                Cbc_addCol(m, nm, 0, L, 0, 1, 0, NULL, NULL);
                cC[j][k] = ncol++;
            }
    }
    for (int i = 0; i < L; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < NB; k++) {
                ZC(&zm, i, j, k) = -1;
                /* position j can hold layer i only if j <= i and the later layers fill the rest */
                if (j > i || N - 1 - j > L - 1 - i) continue;
                if (!cc->ok[j][k]) continue;
                double c = lp[j][k] + p->theta * p->omega[i * NB + k];
                char nm[48];
                snprintf(nm, sizeof nm, "z_%d_%d_%d", i, j, k); /* CBC maps MIP starts by name */
                Cbc_addCol(m, nm, 0, 1, c, 1, 0, NULL, NULL);
                ZC(&zm, i, j, k) = ncol++;
            }
    int cPmax = ncol++, cR = ncol++;
    if (aux) {
        for (int j = 1; j < N; j++) {
            r.n = 0;
            if ((rc = row_add(&r, cF + j - 1, 1)) || (rc = add_z(&r, &zm, 0, L, 0, j, NULL, 0, NULL, -1))) goto done;
            Cbc_addRow(m, "", r.n, r.idx, r.val, 'E', 0);
        }
        for (int j = 0; j < N; j++)
            for (int k = 0; k < NB; k++) {
                if (cC[j][k] < 0) continue;
                r.n = 0;
                if ((rc = row_add(&r, cC[j][k], 1))) goto done;
                for (int i = 0; i < L; i++)
                    if (ZC(&zm, i, j, k) >= 0 && (rc = row_add(&r, ZC(&zm, i, j, k), -1))) goto done;
                Cbc_addRow(m, "", r.n, r.idx, r.val, 'E', 0);
            }
        Cbc_setParameter(m, "costStrategy", "01last");
    }
    Cbc_addCol(m, "Pmax", 0, 1e9, mp - 1, 0, 0, NULL, NULL);
    Cbc_addCol(m, "R", 0, 1e9, n - 1, 0, 0, NULL, NULL);
    /* (1) every layer exactly once */
    for (int i = 0; i < L; i++) {
        r.n = 0;
        if ((rc = add_z(&r, &zm, i, i + 1, 0, N, NULL, 0, NULL, 1))) goto done;
        if (r.n == 0) {
            rc = LS_EINFEASIBLE;
            goto done;
        }
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'E', 1);
    }
    /* (2) contiguous stages in device order: position of layer i+1 >= position of layer i */
    for (int i = 0; i + 1 < L; i++)
        for (int j = 0; j + 1 < N; j++) {
            r.n = 0;
            if ((rc = add_z(&r, &zm, i, i + 1, 0, j + 1, NULL, 0, NULL, 1)) ||
                (rc = add_z(&r, &zm, i + 1, i + 2, 0, j + 1, NULL, 0, NULL, -1)))
                goto done;
            if (r.n) Cbc_addRow(m, "", r.n, r.idx, r.val, 'G', 0);
        }
    for (int j = 0; j < N; j++) {
        /* (3) every device holds a stage; (4) memory in GB */
        r.n = 0;
        if ((rc = add_z(&r, &zm, 0, L, j, j + 1, NULL, 0, NULL, 1))) goto done;
        if (r.n == 0) {
            rc = LS_EINFEASIBLE;
            goto done;
        }
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'G', 1);
        r.n = 0;
        if ((rc = add_z(&r, &zm, 0, L, j, j + 1, cc->memk, 0, NULL, 1))) goto done;
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'L', cc->cap[j]);
        /* (5) Pmax >= P_j; (6) R >= m_d * D_j */
        r.n = 0;
        if ((rc = row_add(&r, cPmax, 1)) || (rc = add_z(&r, &zm, 0, L, j, j + 1, &lp[0][0], NB, NULL, -1))) goto done;
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'G', baseP[j]);
        r.n = 0;
        if ((rc = row_add(&r, cR, 1)) || (rc = add_z(&r, &zm, 0, L, j, j + 1, &ld[0][0], NB, NULL, -md))) goto done;
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'G', md * baseD[j]);
    }
    /* (6') R >= sum_j D_j */
    r.n = 0;
    if ((rc = row_add(&r, cR, 1)) || (rc = add_z(&r, &zm, 0, L, 0, N, &ld[0][0], NB, NULL, -1))) goto done;
    Cbc_addRow(m, "", r.n, r.idx, r.val, 'G', sumBaseD);
    /* (7) quality target */
    if (isfinite(p->qmax)) {
        r.n = 0;
        if ((rc = add_z(&r, &zm, 0, L, 0, N, NULL, 0, p->omega, 1))) goto done;
        Cbc_addRow(m, "", r.n, r.idx, r.val, 'L', p->qmax);
    }
    /* (8) symmetry: inside a stage the widths follow width_order. For adjacent layers i, i+1
     * and a threshold t among the allowed widths: layer i on position j below t and layer
     * i+1 on j at t or above exclude each other (mirrored for -1). Without these rows every
     * permutation of a stage's widths over its layers is a distinct solution to the MIP.
     * Up to 16 devices (as the warm start): on 24-64 the rows only slowed the model's setup. */
    for (int i = 0; i + 1 < L && N <= 16; i++) {
        int d = width_order(p, i);
        if (!d) continue;
        int wide = d > 0 ? i : i + 1, narrow = d > 0 ? i + 1 : i; /* wide's width >= narrow's */
        for (int j = 0; j < N; j++)
            for (int t = 1; t < NB; t++) {
                if (!(p->bits_mask & (1 << t)) || !(p->bits_mask & ((1 << t) - 1))) continue;
                r.n = 0;
                for (int k = 0; k < NB; k++) {
                    int col = ZC(&zm, k >= t ? narrow : wide, j, k);
                    if (col >= 0 && (rc = row_add(&r, col, 1))) goto done;
                }
                if (r.n > 1) Cbc_addRow(m, "", r.n, r.idx, r.val, 'L', 1);
            }
    }
    /* warm start from a plan of the same candidate (the DP's), when it has one */
    double start_obj = INFINITY; /* objective of the MIP start given to CBC */
    int same = start && of_candidate(start, order, (const int[2]){mb_pre, mb_dec}, N);
    /* CBC's MIP-start repair stalled on the 24-64 device models: warm start up to 16 devices */
    ls_plan_result *st = same && N <= 16 ? malloc(sizeof *st) : NULL;
    if (st) {
        *st = *start;
        order_widths(p, st);
        if (ls_plan_evaluate(p, st) != LS_OK) *st = *start;
        start = st;
        int *idx = malloc(sizeof(int) * (size_t)ncol);
        double *val = malloc(sizeof(double) * (size_t)ncol);
        if (idx && val) {
            int cnt = 0, ok = 1;
            for (int j = 0; j < N; j++)
                for (int i = start->begin[j]; i < start->begin[j + 1]; i++) {
                    int col = ZC(&zm, i, j, ls_plan_bits_index(start->bits[i]));
                    if (col < 0)
                        ok = 0;
                    else
                        idx[cnt] = col, val[cnt++] = 1;
                }
            double maxP = 0, maxD = 0, sumD = 0;
            for (int j = 0; j < N; j++) {
                maxP = start->stage_prefill_s[j] > maxP ? start->stage_prefill_s[j] : maxP;
                maxD = start->stage_decode_s[j] > maxD ? start->stage_decode_s[j] : maxD;
                sumD += start->stage_decode_s[j];
            }
            for (int j = 0; aux && j < N; j++) {
                if (j > 0) idx[cnt] = cF + j - 1, val[cnt++] = start->begin[j];
                int cnt_k[NB] = {0};
                for (int i = start->begin[j]; i < start->begin[j + 1]; i++) cnt_k[ls_plan_bits_index(start->bits[i])]++;
                for (int k = 0; k < NB; k++)
                    if (cC[j][k] >= 0) idx[cnt] = cC[j][k], val[cnt++] = cnt_k[k];
            }
            idx[cnt] = cPmax, val[cnt++] = maxP;
            idx[cnt] = cR, val[cnt++] = md * maxD > sumD ? md * maxD : sumD;
            if (ok) Cbc_setMIPStartI(m, cnt, idx, val), start_obj = start->objective;
        }
        free(idx);
        free(val);
        free(st);
    }
    /* CBC 2.10's preprocessing (CglPreProcess) can dereference NULL in postProcess when the
     * time limit stops the search early (seen under ASan in `llmsys demo --quick plan`), so
     * it is switched off: the models are small enough that it saves little. */
    Cbc_setParameter(m, "preprocess", "off");
    /* the limit is wall time, also on a loaded machine, unless the caller asks for CPU time */
    Cbc_setParameter(m, "timeMode", p->time_limit_cpu ? "cpu" : "elapsed");
    Cbc_setMaximumSeconds(m, limit_s > 0.05 ? limit_s : 0.05);
    Cbc_setAllowableFractionGap(m, 1e-6);
    /* A candidate whose own plan (the start) is no better than the cutoff: without a
     * solution CBC searches depth first for one and its bound stays at the root's. With the
     * start as its incumbent and "increment" = start - cutoff, it accepts only solutions
     * below the cutoff, prunes at the cutoff and searches best bound first; the allowable
     * gap of the same size stops it once its bound reaches the cutoff. */
    int lift = isfinite(cutoff) && isfinite(start_obj) && start_obj >= cutoff;
    if (lift) {
        char inc[32];
        snprintf(inc, sizeof inc, "%.17g", start_obj - cutoff);
        Cbc_setParameter(m, "increment", inc);
        Cbc_setAllowableGap(m, start_obj - cutoff);
        Cbc_setCutoff(m, start_obj * (1 + 1e-9) - sumBaseP);
    } else if (isfinite(cutoff)) {
        Cbc_setCutoff(m, cutoff - sumBaseP);
    }
    Cbc_solve(m);
    double off = sumBaseP;
    if (Cbc_isProvenOptimal(m)) {
        res->optimal = 1;
    } else if (Cbc_isProvenInfeasible(m)) {
        /* infeasible, or nothing below the cutoff: proven either way */
        res->optimal = 1;
        res->bound = isfinite(cutoff) ? cutoff : INFINITY;
    }
    const double *x = Cbc_bestSolution(m);
    if (x && !Cbc_isProvenInfeasible(m)) {
        ls_plan_result *pl = &res->plan;
        memset(pl, 0, sizeof *pl);
        pl->n_stage = N;
        pl->mb_prefill = mb_pre;
        pl->mb_decode = mb_dec;
        int pos[LS_PLAN_MAX_LAYER];
        int ok = 1;
        for (int i = 0; i < L; i++) {
            pos[i] = -1;
            for (int j = 0; j < N; j++)
                for (int k = 0; k < NB; k++)
                    if (ZC(&zm, i, j, k) >= 0 && x[ZC(&zm, i, j, k)] > 0.5) {
                        pos[i] = j;
                        pl->bits[i] = (unsigned char)ls_plan_bits[k];
                    }
            if (pos[i] < 0 || (i > 0 && pos[i] < pos[i - 1])) ok = 0;
        }
        if (ok) {
            for (int j = 0; j < N; j++) pl->dev[j] = order[j];
            pl->begin[0] = 0;
            for (int j = 1; j < N; j++) {
                int b = 0;
                while (b < L && pos[b] < j) b++;
                pl->begin[j] = b;
            }
            pl->begin[N] = L;
            if (ls_plan_evaluate(p, pl) == LS_OK) {
                res->has_sol = 1;
                res->obj = pl->objective;
                res->mip_obj = Cbc_getObjValue(m) + off;
            }
        }
        double bp = Cbc_getBestPossibleObjValue(m) + off;
        if (res->optimal) bp = res->obj;
        res->bound = bp;
    } else if (!res->optimal) {
        res->bound = Cbc_getBestPossibleObjValue(m) + off;
    }
    if (lift) {
        /* what is proven: nothing below the cutoff while CBC's incumbent stayed at or above it
         * (then a finished search closes the candidate, as an infeasible one); after a better
         * plan, nothing below that plan minus the increment outside the open nodes */
        double inc = start_obj - cutoff, bp = Cbc_getBestPossibleObjValue(m) + off;
        double io = Cbc_bestSolution(m) ? Cbc_getObjValue(m) + off : INFINITY; /* CBC's incumbent */
        if (io >= start_obj * (1 - 1e-9)) { /* every node was pruned at the cutoff or above */
            res->has_sol = 0;
            res->optimal = Cbc_isProvenOptimal(m) || Cbc_isProvenInfeasible(m);
            res->bound = res->optimal || bp > cutoff ? cutoff : bp;
        } else { /* after a plan below the start, nodes were pruned at that plan minus inc */
            res->optimal = 0;
            res->bound = bp < io - inc ? bp : io - inc;
        }
    }
done:
    if (m) Cbc_deleteModel(m);
    free(zm.col);
    free(r.idx);
    free(r.val);
    return rc;
}

int ls_plan_ilp_candidate(const ls_plan_problem *p, const ls_plan_cand_cost *cc, double limit_s, ls_plan_result *plan,
                          int *optimal, double *mip_obj) {
    ilp_result *res = malloc(sizeof *res);
    if (!res) return ls_err(LS_ENOMEM, "ILP");
    int rc = solve_one(p, cc, limit_s, INFINITY, NULL, res);
    /* solve_one returns a bare LS_EINFEASIBLE when a layer or a device has no placement */
    if (rc == LS_EINFEASIBLE || (rc == LS_OK && !res->has_sol))
        rc = ls_err(LS_EINFEASIBLE, "ILP: the candidate's MIP has no plan");
    if (rc == LS_OK) *plan = res->plan, *optimal = res->optimal, *mip_obj = res->mip_obj;
    free(res);
    return rc;
}

int ls_plan_ilp(const ls_plan_problem *p, ls_plan_result *out) {
    enum { MAX_ORDERS = 24 };
    int L = p->arch->n_layer, N = p->cl->n_dev;
    if (N > L) return ls_err(LS_EINFEASIBLE, "%d devices but only %d layers", N, L);
    int(*orders)[LS_PLAN_MAX_DEV] = malloc(sizeof(int[LS_PLAN_MAX_DEV]) * MAX_ORDERS);
    int mbs[64][2], n_orders, n_mb;
    if (!orders) return ls_err(LS_ENOMEM, "ILP");
    ls_plan_orders(p->cl, MAX_ORDERS, orders, &n_orders);
    ls_plan_microbatches(p, N, mbs, &n_mb);
    int nc = n_orders * n_mb;
    int *co = malloc(sizeof(int) * (size_t)nc), *cm = malloc(sizeof(int) * (size_t)nc);
    ls_plan_result *cp = NULL; /* per candidate: the DP's screening plan */
    int rc = LS_OK;
    if (!co || !cm) {
        rc = ls_err(LS_ENOMEM, "ILP");
        goto done;
    }
    /* visit candidates best first (a cheap screening by the DP; each MIP is still exact) */
    int ncr = 0;
    ls_plan_result tmp;
    /* each candidate's own screening plan: its MIP start when it is not splitquant's (up to
     * 16 devices, as every warm start) */
    cp = N <= 16 ? malloc(sizeof *cp * (size_t)nc) : NULL;
    for (int t = 0; cp && t < nc; t++) cp[t].objective = INFINITY;
    int have_start = ls_plan_splitquant(p, &tmp, 1, co, cm, &ncr, cp, INFINITY) == LS_OK;
    if (!have_start || ncr != nc) {
        for (int o = 0, t = 0; o < n_orders; o++)
            for (int q = 0; q < n_mb; q++, t++) co[t] = o, cm[t] = q;
    }
    double (*clk)(void) = p->time_limit_cpu ? ls_thread_cpu_time : ls_now;
    double t0 = clk(), best = INFINITY, lb = INFINITY;
    int all_opt = 1, found = 0, visited = 0;
    /* splitquant's plan is the incumbent from the start: it is the MIP start of its own
     * candidate (visited first) and every candidate's cutoff, so a candidate that cannot
     * beat it is closed as soon as its bound reaches it */
    ls_plan_result *sq = malloc(sizeof *sq);
    if (!sq) {
        rc = ls_err(LS_ENOMEM, "ILP");
        goto done;
    }
    if (ls_plan_splitquant_seeded(p, sq) == LS_OK) {
        best = sq->objective;
        *out = *sq;
        found = 1;
        for (int t = 0; t < nc; t++) {
            int same = sq->mb_prefill == mbs[cm[t]][0] && sq->mb_decode == mbs[cm[t]][1];
            for (int j = 0; same && j < N; j++) same = sq->dev[j] == orders[co[t]][j];
            if (!same) continue;
            for (int u = t; u > 0; u--) { /* move it to the front, keeping the rest in order */
                int x = co[u];
                co[u] = co[u - 1], co[u - 1] = x;
                x = cm[u], cm[u] = cm[u - 1], cm[u - 1] = x;
            }
            tmp = *sq, have_start = 1;
            break;
        }
    }
    free(sq);
    ilp_result *res = malloc(sizeof *res);
    ls_plan_exact_result *ex = malloc(sizeof *ex);
    double *cb = malloc(sizeof(double) * (size_t)nc); /* per candidate: lower bound, -inf unvisited */
    char *closed = calloc((size_t)nc, 1);
    if (!res || !cb || !closed || !ex) {
        free(res), free(cb), free(closed), free(ex);
        rc = ls_err(LS_ENOMEM, "ILP");
        goto done;
    }
    for (int t = 0; t < nc; t++) cb[t] = -INFINITY;
    double setup = 0;
    /* pass 0 gives every candidate a share of the time left; pass 1 re-solves the ones that
     * hit their share with what the easy ones left over (a fresh search, now cut off at
     * the best plan found, and lifted by the candidate's own plan: see solve_one; in pass 0
     * that start would only cost the candidates whose root bound closes them at once) */
    int retried = -1;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        int todo = 0;
        for (int t = 0; t < nc; t++) todo += !closed[t];
        for (int t = 0; t < nc && !rc; t++) {
            if (closed[t]) continue;
            double left = p->time_limit_s - (clk() - t0);
            /* unvisited or unproven candidates keep their bound; a MIP's setup (seconds on
             * 64 devices) is outside CBC's limit, so one is not started without the time
             * the last one took beyond its limit */
            if (left <= 0.02 + setup) break;
            double lim = left / todo-- * (pass == 0 && t == 0 ? 2.0 : 1.0);
            if (lim > left) lim = left;
            double ts = clk();
            /* the MIP start: the best plan so far when it is of this candidate, else in pass
             * 1 the candidate's own DP plan (solve_one ignores a plan of another candidate) */
            const ls_plan_result *st = have_start ? &tmp : NULL;
            if (found && of_candidate(out, orders[co[t]], mbs[cm[t]], N))
                st = out;
            else if (pass == 1 && cp && isfinite(cp[co[t] * n_mb + cm[t]].objective) &&
                     !(st && of_candidate(st, orders[co[t]], mbs[cm[t]], N)))
                st = &cp[co[t] * n_mb + cm[t]];
            double before = best;
            ls_plan_cand_cost cc;
            if ((rc = ls_plan_cand_cost_init(p, orders[co[t]], mbs[cm[t]][0], mbs[cm[t]][1], &cc))) break;
            /* first the exact search (exact.c), within a quarter of this candidate's share:
             * where it finishes, the candidate is closed without CBC */
            if (pass == 0) {
                /* a failure of the search (memory) only leaves the candidate to CBC */
                if (ls_plan_exact(p, &cc, best, ts + lim / 4, clk, ex) != LS_OK) ex->done = 0;
                if (ex->done && (ex->lb == INFINITY || ex->has_plan)) {
                    ls_plan_cand_cost_free(&cc);
                    visited++;
                    closed[t] = 1;
                    cb[t] = ex->lb;
                    if (ex->has_plan && ex->plan.objective < best) {
                        best = ex->plan.objective;
                        *out = ex->plan;
                        found = 1;
                    }
                    continue;
                }
                if (ex->done && ex->lb > cb[t]) cb[t] = ex->lb; /* a bound, no plan */
                lim -= clk() - ts, ts = clk();                  /* CBC gets the rest of the share */
            }
            rc = solve_one(p, &cc, lim, best, st, res);
            ls_plan_cand_cost_free(&cc);
            if (clk() - ts - lim > setup) setup = clk() - ts - lim;
            if (rc == LS_EINFEASIBLE) {
                rc = LS_OK;
                if (pass == 0) visited++;
                closed[t] = 1, cb[t] = INFINITY;
                continue;
            }
            if (rc) break;
            if (pass == 0) visited++;
            if (res->has_sol && res->obj < best) {
                best = res->obj;
                *out = res->plan;
                found = 1;
            }
            double b = res->optimal ? (res->has_sol ? res->obj : INFINITY) : res->bound;
            closed[t] = (char)res->optimal;
            if (b > cb[t]) cb[t] = b;
            /* a lifted candidate that found a plan below the cutoff proved only up to the
             * increment: solved once more, from that plan, in what is left of its share */
            if (pass == 1 && !res->optimal && res->has_sol && res->obj < before && retried != t) {
                retried = t, todo++, t--;
                continue;
            }
        }
    }
    for (int t = 0; t < nc; t++) {
        if (!closed[t]) all_opt = 0;
        if (cb[t] < lb) lb = cb[t];
    }
    free(cb);
    free(closed);
    free(res);
    free(ex);
    if (rc) goto done;
    if (!found) {
        rc = all_opt ? LS_EINFEASIBLE : ls_err(LS_ETIMEDOUT, "ILP found no plan within %.1f s", p->time_limit_s);
        goto done;
    }
    if (lb > best) lb = best;
    out->ilp_optimal = all_opt;
    out->ilp_gap = all_opt ? 0 : (isfinite(lb) ? (best - lb) / best : 1.0);
    out->n_candidates = visited;
done:
    free(orders);
    free(co);
    free(cm);
    free(cp);
    return rc;
}
