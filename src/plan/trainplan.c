/* trainplan.c - precision plans for hybrid-device data-parallel training (after QSync,
 * IPDPS'24): the sensitivity indicator, the per-operator cost profile (measured here or
 * modelled from the GPU catalog), the replayer, the allocator and the plan file. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmsys/plan.h"
#include "llmsys/train.h"

/* ---------------------------------------------------------------- shapes */

/* Input and output width of Linear layer i (weight (OC, IC)). */
static void lin_shape(const ls_model_config *c, int i, int *IC, int *OC) {
    int C = c->d_model, F = c->d_ff;
    switch (i % LS_LIN_COUNT) {
    case LS_LIN_QKV:
        *IC = C, *OC = 3 * C;
        break;
    case LS_LIN_PROJ:
        *IC = C, *OC = C;
        break;
    case LS_LIN_FC:
        *IC = C, *OC = F;
        break;
    default:
        *IC = F, *OC = C;
        break;
    }
}

static const double prec_bytes[LS_PREC_COUNT] = {4, 2, 2, 1};

/* ---------------------------------------------------------------- replay and memory */

double ls_tplan_replay(const ls_tplan_device *d, const uint8_t *prec, int n_lin) {
    double t = d->other_s;
    for (int i = 0; i < n_lin; i++) {
        int p = prec[i];
        t += d->lin_s[i][p];
        /* Every Linear layer reads its input from an fp32 operator (LayerNorm, attention,
         * GELU) and hands its input gradient back to one; its output is fp32 (fp32
         * accumulation). So a cast sits on its edges exactly when it runs another precision. */
        const int neighbour = LS_PREC_FP32;
        if (p != neighbour) t += d->cast_in_s[i][p];
        if (p != LS_PREC_FP32) t += d->cast_w_s[i][p]; /* the master weight is fp32 */
    }
    return t;
}

double ls_tplan_expected_max(const double *mu, double cv, int n) {
    if (n < 1) return 0;
    double m = mu[0], v = cv * mu[0] * cv * mu[0];
    for (int k = 1; k < n; k++) {
        double a = mu[k], va = cv * a * cv * a, th = sqrt(v + va);
        if (!(th > 1e-12 * (fabs(m) + fabs(a)))) {
            if (a > m) m = a, v = va;
            continue;
        }
        double al = (m - a) / th, P = 0.5 * erfc(-al / sqrt(2)), Q = 1 - P, phi = exp(-0.5 * al * al) / sqrt(2 * M_PI);
        double m1 = m * P + a * Q + th * phi, m2 = (m * m + v) * P + (a * a + va) * Q + (m + a) * th * phi;
        m = m1, v = fmax(0, m2 - m1 * m1);
    }
    return m;
}

double ls_tplan_memory(const ls_model_config *c, int rows, int seq, const uint8_t *prec, int n_lin) {
    /* The scratch of ls_prec_gemm over a layer's three GEMMs (forward, input and weight
     * gradients): operand A is the input or dY, (N, max(IC, OC)); B the weight or the input;
     * int8 adds its int32 result and four arrays of scales. One scratch serves every layer,
     * each buffer grown to its largest. */
    double N = (double)rows * seq, a = 0, b = 0, acc = 0, sc = 0;
    for (int i = 0; prec && i < n_lin; i++) {
        if (prec[i] == LS_PREC_FP32) continue;
        int IC, OC;
        lin_shape(c, i, &IC, &OC);
        double mx = IC > OC ? IC : OC, by = prec_bytes[prec[i]];
        a = fmax(a, N * mx * by);
        b = fmax(b, fmax((double)IC * OC, N * IC) * by);
        if (prec[i] != LS_PREC_INT8) continue;
        acc = fmax(acc, 4.0 * fmax(N * mx, (double)IC * OC));
        sc = fmax(sc, 16.0 * fmax(N, mx));
    }
    return 16.0 * (double)ls_model_config_num_params(c) + 4.0 * (double)ls_model_acts_floats(c, rows, seq) + a + b +
           acc + sc;
}

/* ---------------------------------------------------------------- indicator */

/* Variance of one element's cast error: int8 from its per-tensor scale s (uniform rounding
 * error, s²/12), the 16-bit formats relative to the value squared, 2^(-2m)/12 for m
 * explicit mantissa bits (bf16 7, fp16 10). */
static double float_c(int p) { return p == LS_PREC_BF16 ? pow(2, -14) / 12 : pow(2, -20) / 12; }

/* Statistics of a (rows, cols) matrix a: per row the sum of squares (rs), per column
 * (cs, added to, may be NULL), the squares themselves (sq, may be NULL), the total (*tot);
 * returns max |a|. */
static double row_stats(const float *a, int rows, int cols, double *rs, float *sq, double *cs, double *tot) {
    double amax = 0;
    *tot = 0;
    for (int n = 0; n < rows; n++) {
        double s = 0;
        for (int k = 0; k < cols; k++) {
            double v = a[(size_t)n * cols + k];
            s += v * v;
            amax = fmax(amax, fabs(v));
            if (sq) sq[(size_t)n * cols + k] = (float)(v * v);
            if (cs) cs[k] += v * v;
        }
        rs[n] = s;
        *tot += s;
    }
    return amax;
}

void ls_tplan_indicator_observe(void *user, int lin, const float *x, const float *w, const float *dy, int N, int IC,
                                int OC) {
    ls_tplan_indicator *ind = user;
    if (lin < 0 || lin >= LS_TPLAN_MAX_LIN) return;
    if (lin + 1 > ind->n_lin) ind->n_lin = lin + 1;
    if (lin == 0) ind->passes++;
    double *xr = calloc((size_t)N * 2 + (size_t)OC * 2, sizeof(double));
    float *prod = malloc((size_t)N * OC * sizeof(float)), *x2 = calloc((size_t)N * IC, sizeof(float)),
          *w2 = calloc((size_t)OC * IC, sizeof(float));
    if (!xr || !prod || !x2 || !w2) {
        free(xr), free(prod), free(x2), free(w2);
        return; /* out of memory: this pass does not count (indicators are relative) */
    }
    double *gr = xr + N, *wr = gr + N, *gc = wr + OC;
    double ax, aw, ag, X2, W2, G2;
    ax = row_stats(x, N, IC, xr, x2, NULL, &X2);
    aw = row_stats(w, OC, IC, wr, w2, NULL, &W2);
    ag = row_stats(dy, N, OC, gr, NULL, gc, &G2);
    /* S = sum over (n,o) of dY² ⊙ (X²·W²ᵀ): the forward noise of the 16-bit formats */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, x2, IC, w2, IC, 0.0f, prod, OC);
    double S = 0, GW = 0, GX = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++) S += (double)dy[i] * dy[i] * prod[i];
    for (int o = 0; o < OC; o++) GW += gc[o] * wr[o];
    for (int n = 0; n < N; n++) GX += gr[n] * xr[n];
    for (int p = 1; p < LS_PREC_COUNT; p++) {
        double f, dx, dw;
        if (p == LS_PREC_INT8) {
            double vx = ax * ax / (127.0 * 127.0) / 12, vw = aw * aw / (127.0 * 127.0) / 12,
                   vg = ag * ag / (127.0 * 127.0) / 12;
            f = vx * GW + vw * GX;                                /* Σ dY²(vx|W_o|² + vw|X_n|²) */
            dx = (vg * N * W2 + vw * IC * G2) / ((double)N * IC); /* per element of dX */
            dw = vg * OC * X2 + vx * IC * G2;
        } else {
            double c = float_c(p);
            f = 2 * c * S;
            dx = 2 * c * GW / ((double)N * IC);
            dw = 2 * c * GX;
        }
        ind->fwd[lin][p] += f;
        ind->dx[lin][p] += dx;
        ind->dw[lin][p] += dw;
    }
    ind->xmass[lin] += OC * X2;
    free(xr), free(prod), free(x2), free(w2);
}

void ls_tplan_indicator_finish(const ls_tplan_indicator *ind, double omega[][LS_PREC_COUNT]) {
    int n = ind->n_lin;
    double sf = 0, sb = 0, before = 0;
    double *bwd = calloc((size_t)n * LS_PREC_COUNT + 1, sizeof(double));
    for (int i = 0; i < n; i++) {
        for (int p = 1; p < LS_PREC_COUNT; p++) bwd[i * LS_PREC_COUNT + p] = ind->dw[i][p] + ind->dx[i][p] * before;
        before += ind->xmass[i]; /* layers before i+1, in forward order */
        sf += ind->fwd[i][LS_PREC_INT8];
        sb += bwd[i * LS_PREC_COUNT + LS_PREC_INT8];
    }
    for (int i = 0; i < n; i++) {
        omega[i][LS_PREC_FP32] = 0;
        for (int p = 1; p < LS_PREC_COUNT; p++)
            omega[i][p] = (sf > 0 ? ind->fwd[i][p] / sf : 0) + (sb > 0 ? bwd[i * LS_PREC_COUNT + p] / sb : 0);
    }
    free(bwd);
}

/* ---------------------------------------------------------------- allocator */

/* Time layer i adds at precision q on device d (what the replay sums). */
static double lin_cost(const ls_tplan_device *d, int i, int q) {
    double t = d->lin_s[i][q];
    if (q != LS_PREC_FP32) t += d->cast_in_s[i][q] + d->cast_w_s[i][q];
    return t;
}

/* Whether layer i may run precision q on d: supported, and for a low precision measured
 * faster than fp32 (a precision that costs time here is never chosen, whatever its indicator). */
static int usable(const ls_tplan_device *d, int i, int q) {
    return d->supported[q] && (q == LS_PREC_FP32 || lin_cost(d, i, q) < lin_cost(d, i, LS_PREC_FP32));
}

/* Least total indicator with sum of layer costs <= budget (dynamic programme over Q time
 * bins, costs rounded up: the result is always within budget). Returns 0 when infeasible. */
static int dp_alloc(const ls_tplan *p, int r, double budget, uint8_t *out) {
    const ls_tplan_device *d = &p->dev[r];
    int n = p->n_lin, Q = 4000;
    if (budget <= 0) return 0;
    double step = budget / Q;
    double *best = malloc(sizeof(double) * (Q + 1)), *next = malloc(sizeof(double) * (Q + 1));
    uint8_t *choice = malloc((size_t)n * (Q + 1));
    if (!best || !next || !choice) {
        free(best), free(next), free(choice);
        return -1;
    }
    for (int b = 0; b <= Q; b++) best[b] = 0; /* no layers: any budget, indicator 0 */
    for (int i = 0; i < n; i++) {
        for (int b = 0; b <= Q; b++) {
            next[b] = INFINITY;
            choice[(size_t)i * (Q + 1) + b] = 255;
            for (int q = 0; q < LS_PREC_COUNT; q++) {
                if (!usable(d, i, q)) continue;
                long cb = (long)ceil(lin_cost(d, i, q) / step - 1e-9);
                if (cb > b) continue;
                double v = best[b - cb] + p->omega[i][q];
                if (v < next[b]) {
                    next[b] = v;
                    choice[(size_t)i * (Q + 1) + b] = (uint8_t)q;
                }
            }
        }
        double *t = best;
        best = next, next = t;
    }
    int ok = isfinite(best[Q]);
    if (ok) {
        int b = Q;
        for (int i = n - 1; i >= 0; i--) {
            int q = choice[(size_t)i * (Q + 1) + b];
            out[i] = (uint8_t)q;
            b -= (int)ceil(lin_cost(d, i, q) / step - 1e-9);
        }
    }
    free(best), free(next), free(choice);
    return ok;
}

double ls_tplan_brute_force(const ls_tplan *p, int r, double budget_s, uint8_t *best) {
    int n = p->n_lin;
    if (n > 10) return NAN;
    const ls_tplan_device *d = &p->dev[r];
    uint8_t cur[10] = {0};
    double bestv = INFINITY;
    long total = 1;
    for (int i = 0; i < n; i++) total *= LS_PREC_COUNT;
    for (long code = 0; code < total; code++) {
        long c = code;
        double t = 0, v = 0;
        int ok = 1;
        for (int i = 0; i < n; i++) {
            cur[i] = (uint8_t)(c % LS_PREC_COUNT);
            c /= LS_PREC_COUNT;
            if (!d->supported[cur[i]]) ok = 0;
            t += lin_cost(d, i, cur[i]);
            v += p->omega[i][cur[i]];
        }
        if (ok && t <= budget_s && v < bestv) {
            bestv = v;
            memcpy(best, cur, (size_t)n);
        }
    }
    return bestv;
}

static int fastest_prec(const ls_tplan_device *d, int i) {
    int bq = LS_PREC_FP32;
    for (int q = 0; q < LS_PREC_COUNT; q++)
        if (usable(d, i, q) && lin_cost(d, i, q) < lin_cost(d, i, bq)) bq = q;
    return bq;
}

/* QSync's greedy: every layer at its fastest supported precision, then, while some move
 * fits the budget, the move to a supported precision with a lower indicator that gains the
 * most indicator per second spent (moves that cost no time first). Returns 0 when even the
 * start does not fit (the start is kept). */
static int greedy_alloc(const ls_tplan *p, int r, double budget, uint8_t *out) {
    const ls_tplan_device *d = &p->dev[r];
    int n = p->n_lin;
    double used = 0;
    for (int i = 0; i < n; i++) {
        out[i] = (uint8_t)fastest_prec(d, i);
        used += lin_cost(d, i, out[i]);
    }
    if (used > budget) return 0;
    for (;;) {
        int bi = -1, bq = 0;
        double best = 0, best_gain = 0;
        for (int i = 0; i < n; i++) {
            double c0 = lin_cost(d, i, out[i]), w0 = p->omega[i][out[i]];
            for (int q = 0; q < LS_PREC_COUNT; q++) {
                if (!usable(d, i, q) || p->omega[i][q] >= w0) continue;
                double dt = lin_cost(d, i, q) - c0, gain = w0 - p->omega[i][q];
                if (used + dt > budget) continue;
                double score = dt > 0 ? gain / dt : INFINITY;
                if (bi < 0 || score > best || (score == best && gain > best_gain))
                    bi = i, bq = q, best = score, best_gain = gain;
            }
        }
        if (bi < 0) return 1;
        used += lin_cost(d, bi, bq) - lin_cost(d, bi, out[bi]);
        out[bi] = (uint8_t)bq;
    }
}

/* The share of the other ranks' Linear time (at their plans' precisions) spent at each precision. */
static void neigh_mix(const ls_tplan *p, int r, double f[LS_PREC_COUNT]) {
    double tot = 0;
    for (int q = 0; q < LS_PREC_COUNT; q++) f[q] = 0;
    for (int s = 0; s < p->ranks; s++)
        for (int i = 0; s != r && i < p->n_lin; i++) {
            double c = lin_cost(&p->dev[s], i, p->prec[s][i]);
            f[p->prec[s][i]] += c, tot += c;
        }
    for (int q = 0; q < LS_PREC_COUNT; q++) f[q] = tot > 0 ? f[q] / tot : 0;
}

double ls_tplan_rank_step(const ls_tplan *p, int r) {
    double t = ls_tplan_replay(&p->dev[r], p->prec[r], p->n_lin), f[LS_PREC_COUNT];
    neigh_mix(p, r, f);
    for (int q = 0; q < LS_PREC_COUNT; q++) t += f[q] * p->dev[r].neigh_s[q];
    return t;
}

int ls_tplan_predict(ls_tplan *p) {
    int R = p->ranks, n = p->n_lin;
    uint8_t fp32[LS_TPLAN_MAX_LIN] = {0};
    p->target_s = INFINITY;
    for (int r = 0; r < R; r++) {
        p->pred_fp32_s[r] = ls_tplan_replay(&p->dev[r], fp32, n);
        p->target_s = fmin(p->target_s, p->pred_fp32_s[r]);
    }
    p->quality = 0;
    for (int r = 0; r < R; r++) {
        const uint8_t *pr = p->prec[r];
        p->pred_s[r] = ls_tplan_rank_step(p, r);
        /* what the allocator promises: the rank's own work within the target */
        p->keeps_pace[r] = ls_tplan_replay(&p->dev[r], pr, n) <= p->target_s * (1 + 1e-9);
        for (int i = 0; i < n; i++) p->quality += p->omega[i][pr[i]];
        p->mem_need[r] = ls_tplan_memory(&p->cfg, p->batch / R, p->seq, pr, n);
        if (p->mem_need[r] > p->dev[r].mem_bytes)
            return ls_err(LS_EINFEASIBLE, "rank %d (%s) needs %.2f GB for this model and batch, it has %.2f GB", r,
                          p->dev[r].name, p->mem_need[r] / 1e9, p->dev[r].mem_bytes / 1e9);
    }
    p->pred_iter_s = ls_tplan_expected_max(p->pred_s, p->step_cv, R) + p->allreduce_s;
    return LS_OK;
}

double ls_tplan_predict_at(const ls_tplan *p, const double *share, double sync_s, double *step_s) {
    double smin = INFINITY, pmin = INFINITY, st[LS_TPLAN_MAX_RANK];
    for (int r = 0; r < p->ranks; r++)
        if (p->dev[r].gpu || !(p->dev[r].cpu_share > 0) || !(share[r] > 0)) return p->pred_iter_s;
    for (int r = 0; r < p->ranks; r++) {
        st[r] = ls_tplan_rank_step(p, r) * p->dev[r].cpu_share / share[r];
        smin = fmin(smin, share[r]), pmin = fmin(pmin, p->dev[r].cpu_share);
        if (step_s) step_s[r] = st[r];
    }
    double it = ls_tplan_expected_max(st, p->step_cv, p->ranks);
    return it + (sync_s >= 0 ? sync_s : p->allreduce_s * pmin / smin); /* at the slowest pace */
}

int ls_tplan_allocate(ls_tplan *p, ls_tplan_strategy s, int uniform_prec) {
    double t0 = ls_now();
    int R = p->ranks, n = p->n_lin;
    uint8_t fp32[LS_TPLAN_MAX_LIN] = {0};
    p->strategy = s;
    p->target_s = INFINITY;
    for (int r = 0; r < R; r++) {
        p->pred_fp32_s[r] = ls_tplan_replay(&p->dev[r], fp32, n);
        p->target_s = fmin(p->target_s, p->pred_fp32_s[r]);
    }
    for (int r = 0; r < R; r++) {
        ls_tplan_device *d = &p->dev[r];
        uint8_t *pr = p->prec[r];
        memset(pr, LS_PREC_FP32, (size_t)n);
        int slow = p->pred_fp32_s[r] > p->target_s * (1 + 1e-9);
        if (slow && s == LS_TPLAN_UNIFORM) {
            if (uniform_prec >= 0 && !d->supported[uniform_prec])
                return ls_err(LS_EINVAL, "rank %d (%s) does not support %s", r, d->name, ls_prec_name(uniform_prec));
            if (uniform_prec >= 0) {
                memset(pr, uniform_prec, (size_t)n);
            } else { /* the supported precision with the least total time */
                int bq = LS_PREC_FP32;
                double bt = INFINITY;
                for (int q = 0; q < LS_PREC_COUNT; q++) {
                    if (!d->supported[q]) continue;
                    uint8_t u[LS_TPLAN_MAX_LIN];
                    memset(u, q, (size_t)n);
                    double t = ls_tplan_replay(d, u, n);
                    if (t < bt) bt = t, bq = q;
                }
                memset(pr, bq, (size_t)n);
            }
        } else if (slow && s == LS_TPLAN_GREEDY) {
            greedy_alloc(p, r, p->target_s - d->other_s, pr);
        } else if (slow && s == LS_TPLAN_QSYNC) {
            int ok = dp_alloc(p, r, p->target_s - d->other_s, pr);
            if (ok < 0) return ls_err(LS_ENOMEM, "plan: out of memory");
            if (!ok)
                for (int i = 0; i < n; i++) pr[i] = (uint8_t)fastest_prec(d, i);
        }
    }
    LS_TRY(ls_tplan_predict(p));
    p->solve_s = ls_now() - t0;
    return LS_OK;
}

/* ---------------------------------------------------------------- profile here */

/* The costs are means, not medians: on a shared machine a short operator often runs
 * without being preempted while a whole step never does, so medians of short runs
 * under-count what they cost inside a step. */
static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : 0;
}

enum { MAXREP = 64 };

/* The three GEMMs of a Linear layer at precision q, as the model runs them. */
static int lin_gemms(ls_prec_ctx *c, int q, int pc, int N, int IC, int OC, const float *X, const float *W,
                     const float *G, float *Y, float *DX, float *DW) {
    LS_TRY(ls_prec_gemm(c, (ls_prec)q, pc, 0, 1, N, OC, IC, X, IC, W, IC, 1.0f, Y, OC));
    LS_TRY(ls_prec_gemm(c, (ls_prec)q, pc, 0, 0, N, IC, OC, G, OC, W, IC, 1.0f, DX, IC));
    return ls_prec_gemm(c, (ls_prec)q, pc, 1, 0, OC, IC, N, G, OC, X, IC, 1.0f, DW, IC);
}

/* Per kind and precision: GEMMs with casts, casts of input + gradient, casts of the weight. */
static int profile_linears(ls_tplan *p, ls_tplan_device *d, int reps) {
    const ls_model_config *c = &p->cfg;
    int N = p->batch / p->ranks * p->seq, maxd = c->d_ff > 3 * c->d_model ? c->d_ff : 3 * c->d_model;
    size_t big = (size_t)N * maxd, wsz = (size_t)maxd * c->d_model;
    float *X = malloc(big * 4), *G = malloc(big * 4), *Y = malloc(big * 4), *DX = malloc(big * 4), *W = malloc(wsz * 4),
          *DW = malloc(wsz * 4);
    ls_prec_ctx *ctx = NULL;
    int rc = X && G && Y && DX && W && DW ? ls_prec_ctx_new(&ctx) : ls_err(LS_ENOMEM, "plan: out of memory");
    if (rc == LS_OK) {
        ls_rng r;
        ls_rng_seed(&r, 99);
        for (size_t i = 0; i < big; i++) X[i] = ls_rng_normal(&r), G[i] = 1e-3f * ls_rng_normal(&r), Y[i] = DX[i] = 0;
        for (size_t i = 0; i < wsz; i++) W[i] = 0.02f * ls_rng_normal(&r), DW[i] = 0;
    }
    double tot[LS_LIN_COUNT][LS_PREC_COUNT][MAXREP], cin[LS_LIN_COUNT][LS_PREC_COUNT][MAXREP],
        cw[LS_LIN_COUNT][LS_PREC_COUNT][MAXREP];
    if (reps > MAXREP) reps = MAXREP;
    /* one warm-up round (oneDNN builds its kernels), then reps rounds interleaving kinds and precisions */
    for (int rep = -1; rc == LS_OK && rep < reps; rep++) {
        for (int k = 0; rc == LS_OK && k < LS_LIN_COUNT; k++) {
            int IC, OC;
            lin_shape(c, k, &IC, &OC);
            for (int q = 0; rc == LS_OK && q < LS_PREC_COUNT; q++) {
                double t0 = ls_now();
                rc = lin_gemms(ctx, q, p->per_channel, N, IC, OC, X, W, G, Y, DX, DW);
                double t1 = ls_now();
                if (rc == LS_OK && q != LS_PREC_FP32) rc = ls_prec_cast(ctx, (ls_prec)q, X, N, IC);
                if (rc == LS_OK && q != LS_PREC_FP32) rc = ls_prec_cast(ctx, (ls_prec)q, G, N, OC);
                double t2 = ls_now();
                if (rc == LS_OK && q != LS_PREC_FP32) rc = ls_prec_cast(ctx, (ls_prec)q, W, OC, IC);
                double t3 = ls_now();
                if (rep >= 0) {
                    tot[k][q][rep] = t1 - t0;
                    cin[k][q][rep] = 2 * (t2 - t1); /* X in the forward and dW GEMMs, dY in both backward */
                    cw[k][q][rep] = 2 * (t3 - t2);  /* W in the forward and dX GEMMs */
                }
            }
        }
    }
    for (int k = 0; rc == LS_OK && k < LS_LIN_COUNT; k++) {
        for (int q = 0; q < LS_PREC_COUNT; q++) {
            double T = mean(tot[k][q], reps), ci = mean(cin[k][q], reps), cwt = mean(cw[k][q], reps);
            double g = T - ci - cwt;
            if (g < 0.1 * T) g = 0.1 * T; /* noise: never let the GEMM itself cost nothing */
            for (int i = k; i < p->n_lin; i += LS_LIN_COUNT) {
                d->lin_s[i][q] = g;
                d->cast_in_s[i][q] = ci;
                d->cast_w_s[i][q] = cwt;
            }
        }
    }
    ls_prec_ctx_free(ctx);
    free(X), free(G), free(Y), free(DX), free(W), free(DW);
    return rc;
}

/* k training steps (warm-up, or the indicator's observed steps). */
static int run_steps(ls_trainer *t, ls_batch_source *src, int k) {
    for (int i = 0; i < k; i++) {
        float loss;
        LS_TRY(ls_trainer_step(t, src, &loss, NULL));
    }
    return LS_OK;
}

/* A trainer for the plan's global batch over d's ranks (d NULL: one rank's share of it, alone;
 * weights from ckpt when not NULL, else initialised from seed 1) and its corpus batch source;
 * both NULL on failure. */
static int rank_trainer(const ls_tplan *p, const ls_corpus *corpus, const char *ckpt, int threads, int warmup,
                        ls_dist *d, ls_trainer **t, ls_batch_source **src) {
    *t = NULL, *src = NULL;
    ls_model_set_threads(threads);
    ls_train_config tc = ls_train_defaults();
    tc.batch = d ? p->batch : p->batch / p->ranks;
    tc.seq = p->seq;
    tc.steps = 10000;
    tc.opt.warmup_steps = warmup;
    int rc = ls_trainer_init(t, &p->cfg, &tc, d);
    if (rc == LS_OK && ckpt) rc = ls_ckpt_load_into(ckpt, ls_trainer_model(*t), LS_CKPT_WEIGHTS, NULL);
    if (rc == LS_OK) rc = ls_batch_source_corpus(src, corpus, &tc, d ? ls_dist_size(d) : 1);
    if (rc < 0) {
        ls_batch_source_free(*src);
        ls_trainer_free(*t);
        *t = NULL, *src = NULL;
    }
    return rc;
}

/* What d's ranks observed, combined into the statistics of one pass over the global batch.
 * A rank's loss is its own rows' mean, so its dY is R times the global one (R ranks, equal
 * rows: the corpus source masks no targets): fwd and dw, sums of dY² terms over rows, are
 * summed and divided by R²; dx, a mean over the rank's rows of dY² terms, by R³; xmass, a sum
 * over rows without dY, is summed. */
static int indicator_sum(ls_dist *d, ls_tplan_indicator *ind) {
    int n = ind->n_lin, P = LS_PREC_COUNT;
    double R = ls_dist_size(d), a = 1 / (R * R), b = a / R;
    float *v = calloc((size_t)n * (3 * P + 1), sizeof(float));
    if (!v) return ls_err(LS_ENOMEM, "plan: out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        for (int q = 0; q < P; q++)
            v[k++] = (float)ind->fwd[i][q], v[k++] = (float)ind->dx[i][q], v[k++] = (float)ind->dw[i][q];
        v[k++] = (float)ind->xmass[i];
    }
    int rc = ls_dist_allreduce_sum(d, v, k);
    k = 0;
    for (int i = 0; rc == LS_OK && i < n; i++) {
        for (int q = 0; q < P; q++) ind->fwd[i][q] = a * v[k++], ind->dx[i][q] = b * v[k++], ind->dw[i][q] = a * v[k++];
        ind->xmass[i] = v[k++];
    }
    free(v);
    return rc;
}

int ls_tplan_indicator_run(ls_tplan *p, const ls_corpus *corpus, const char *ckpt, int threads, ls_dist *d,
                           ls_tplan_indicator *acc) {
    p->n_lin = p->cfg.n_layer * LS_LIN_COUNT;
    if (p->n_lin > LS_TPLAN_MAX_LIN) return ls_err(LS_ERANGE, "plan: at most %d Linear layers", LS_TPLAN_MAX_LIN);
    if (p->ranks < 1 || p->batch % p->ranks)
        return ls_err(LS_EINVAL, "plan: batch %d does not split over %d ranks", p->batch, p->ranks);
    ls_trainer *t = NULL;
    ls_batch_source *src = NULL;
    ls_tplan_indicator *ind = calloc(1, sizeof *ind);
    int rc = ind ? rank_trainer(p, corpus, ckpt, threads, 2, d, &t, &src) : ls_err(LS_ENOMEM, "plan: out of memory");
    if ((rc = ls_dist_agree(d, rc, NULL)) < 0) goto done;
    rc = run_steps(t, src, 2); /* past the first, untypical steps */
    /* then the indicator from two steps' real weights, activations and gradients */
    if (rc == LS_OK) rc = ls_model_set_linear_observer(ls_trainer_model(t), ls_tplan_indicator_observe, ind);
    if (rc == LS_OK) rc = run_steps(t, src, 2);
    if ((rc = ls_dist_agree(d, rc, NULL)) < 0) goto done;
    if (ls_dist_size(d) > 1) rc = indicator_sum(d, ind);
    if (rc == LS_OK) ls_tplan_indicator_finish(ind, p->omega);
    if (rc == LS_OK && acc) *acc = *ind;
done:
    ls_batch_source_free(src);
    ls_trainer_free(t);
    free(ind);
    return rc;
}

/* Seconds of the trainer's own work so far (data, forward/backward, update) and its CPU seconds. */
static double busy_s(const ls_trainer *t, double *cpu) {
    ls_train_timing tm;
    ls_trainer_timing(t, &tm);
    *cpu = tm.busy_cpu_s;
    return ls_train_timing_busy(&tm);
}

/* What one rank measured in the paired rounds, packed for the sum over ranks (floats: a
 * rank's slot is zero on every other rank). Per rank: lin, cast_in, cast_w (n_lin x
 * precisions each), other, neigh (precisions), cpu_share, the median fp32 step, step_cv,
 * the throttle (0 none, 1 cgroup, 2 duty cycle), then each round's synchronisation seconds. */
static size_t slot_size(int n, int rounds) { return (size_t)3 * n * LS_PREC_COUNT + LS_PREC_COUNT + 5 + rounds; }

static void slot_pack(float *s, const ls_tplan_device *d, int n, double fp32_s, double cv, int mech,
                      const double *sync, int rounds) {
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < LS_PREC_COUNT; q++)
            s[k++] = (float)d->lin_s[i][q], s[k++] = (float)d->cast_in_s[i][q], s[k++] = (float)d->cast_w_s[i][q];
    s[k++] = (float)d->other_s;
    for (int q = 0; q < LS_PREC_COUNT; q++) s[k++] = (float)d->neigh_s[q];
    s[k++] = (float)d->cpu_share, s[k++] = (float)fp32_s, s[k++] = (float)cv, s[k++] = (float)mech;
    for (int j = 0; j < rounds; j++) s[k++] = (float)sync[j];
}

static void slot_unpack(const float *s, ls_tplan_device *d, int n, double *fp32_s, double *cv, int *mech,
                        double *sync, int rounds) {
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int q = 0; q < LS_PREC_COUNT; q++)
            d->lin_s[i][q] = s[k++], d->cast_in_s[i][q] = s[k++], d->cast_w_s[i][q] = s[k++];
    d->other_s = s[k++];
    for (int q = 0; q < LS_PREC_COUNT; q++) d->neigh_s[q] = s[k++];
    d->cpu_share = s[k++], *fp32_s = s[k++], *cv = s[k++], *mech = (int)s[k++];
    for (int j = 0; j < rounds; j++) sync[j] = s[k++];
}

/* The paired rounds' step hook: records the step just done (its own work, CPU seconds and
 * Linear layers; round j = step / nq - 1, precision step % nq: the first nq steps warm up,
 * oneDNN builds its kernels there) and sets the precision of the next. */
typedef struct {
    const ls_tplan *p;
    int slow, nq, steps;
    double *lt, *acc, busy_prev, cpu_prev;
    double busy[LS_PREC_COUNT][MAXREP], rest[LS_PREC_COUNT][MAXREP], cpu_sum, busy_sum;
} rounds_ctx;

static int rounds_set(rounds_ctx *c, ls_trainer *t, int step) {
    uint8_t prec[LS_TPLAN_MAX_LIN];
    memset(prec, c->slow ? step % c->nq : LS_PREC_FP32, (size_t)c->p->n_lin);
    memset(c->acc, 0, (size_t)c->p->n_lin * sizeof *c->acc);
    c->busy_prev = busy_s(t, &c->cpu_prev);
    return ls_model_set_precision(ls_trainer_model(t), prec, c->p->n_lin, c->p->per_channel);
}

static int rounds_after_step(void *ctx, ls_trainer *t, const ls_train_step_info *info) {
    (void)info;
    rounds_ctx *c = ctx;
    int k = c->steps++, q = k % c->nq, j = k / c->nq - 1, n = c->p->n_lin;
    double cpu, b = busy_s(t, &cpu) - c->busy_prev, lin = 0;
    if (j >= 0) {
        c->busy[q][j] = b, c->busy_sum += b, c->cpu_sum += cpu - c->cpu_prev;
        for (int i = 0; i < n; i++) c->lt[((size_t)i * LS_PREC_COUNT + q) * MAXREP + j] = c->acc[i], lin += c->acc[i];
        c->rest[q][j] = b - lin;
    }
    return rounds_set(c, t, k + 1) < 0 ? -1 : 0;
}

/* The paired rounds on this rank (every rank at once, each under its throttle): a warm-up
 * round then reps rounds of nq data-parallel steps, run by the training loop (ls_train_run,
 * its per-step agreement included), this rank at precision q when it is slow, else at fp32,
 * each step timed whole, in its own work (busy) and per Linear layer. Fills d (in-situ costs
 * per kind, split into GEMM and casts by d's isolated profile; other; neigh for a fast rank),
 * and *fp32_s (median busy step at fp32), *cv (the busy step's spread) and sync[round]. */
static int paired_rounds(ls_tplan *p, ls_trainer *t, ls_batch_source *src, ls_dist *dist, int reps, int nq, int slow,
                         ls_tplan_device *d, double *fp32_s, double *cv, double *sync) {
    ls_model *m = ls_trainer_model(t);
    int n = p->n_lin;
    rounds_ctx *c = calloc(1, sizeof *c);
    double *lt = calloc((size_t)n * LS_PREC_COUNT * MAXREP + n, sizeof(double));
    if (!c || !lt) {
        free(c), free(lt);
        return ls_err(LS_ENOMEM, "plan: out of memory");
    }
    *c = (rounds_ctx){.p = p, .slow = slow, .nq = nq, .lt = lt, .acc = lt + (size_t)n * LS_PREC_COUNT * MAXREP};
    ls_train_hooks h = {.ctx = c, .after_step = rounds_after_step};
    ls_train_run_opts ro = {.quiet = 1, .stop_at = ls_trainer_step_index(t) + (int64_t)(reps + 1) * nq};
    ls_train_run_result res = {0};
    int rc = ls_model_set_linear_timer(m, c->acc);
    if (rc == LS_OK) rc = rounds_set(c, t, 0);
    if (rc == LS_OK) ls_trainer_set_hooks(t, &h);
    if (rc == LS_OK) rc = ls_train_run(t, src, dist, &ro, &res);
    ls_trainer_set_hooks(t, NULL);
    if (rc == LS_OK && res.n_losses != (reps + 1) * nq)
        rc = ls_err(LS_EINVAL, "plan: the profile ran %d steps of %d", res.n_losses, (reps + 1) * nq);
    /* outside its own work: the step's all-reduce, the loop's agreement and the waits */
    for (int k = nq; rc == LS_OK && k < res.n_losses; k++) sync[k - nq] = res.step_s[k] - c->busy[k % nq][k / nq - 1];
    ls_train_run_result_free(&res);
    double(*busy)[MAXREP] = c->busy, (*rest)[MAXREP] = c->rest;
    ls_model_set_linear_timer(m, NULL);
    if (rc == LS_OK) rc = ls_model_set_precision(m, NULL, n, p->per_channel);
    d->cpu_share = c->busy_sum > 0 ? c->cpu_sum / c->busy_sum : 0;
    /* layers of one kind have one shape: per round the mean over them, then the median over
     * rounds (7 layers of noise averaged per sample instead of one) */
    double v[MAXREP * LS_PREC_COUNT];
    for (int kd = 0; kd < LS_LIN_COUNT; kd++)
        for (int q = 0; q < nq; q++) {
            int pq = slow ? q : LS_PREC_FP32;
            if (!slow && q > 0) break; /* a fast rank's fp32 costs: from the rounds its neighbours ran fp32 */
            for (int rep = 0; rep < reps; rep++) {
                double sum = 0;
                int cnt = 0;
                for (int i = kd; i < n; i += LS_LIN_COUNT, cnt++)
                    sum += lt[((size_t)i * LS_PREC_COUNT + q) * MAXREP + rep];
                v[rep] = cnt ? sum / cnt : 0;
            }
            double situ = ls_median(v, reps);
            for (int i = kd; i < n; i += LS_LIN_COUNT) {
                if (pq == LS_PREC_FP32) {
                    d->lin_s[i][pq] = situ, d->cast_in_s[i][pq] = d->cast_w_s[i][pq] = 0;
                    continue;
                }
                /* split the in-situ total by the isolated profile's casts (d holds them), keeping
                 * the total: the casts at most 90% of it */
                double cs = d->cast_in_s[i][pq] + d->cast_w_s[i][pq], f = cs > 0.9 * situ ? 0.9 * situ / cs : 1;
                d->cast_in_s[i][pq] *= f, d->cast_w_s[i][pq] *= f;
                d->lin_s[i][pq] = situ - d->cast_in_s[i][pq] - d->cast_w_s[i][pq];
            }
        }
    /* the rest of the step: a slow rank's neighbours always run fp32 (every round counts); a fast
     * rank's from its fp32 rounds, and what its step gains next to neighbours at q (medians) */
    int k = 0;
    for (int q = 0; q < (slow ? nq : 1); q++)
        for (int rep = 0; rep < reps; rep++) v[k++] = rest[q][rep];
    d->other_s = fmax(0, ls_median(v, k));
    *fp32_s = ls_median(busy[LS_PREC_FP32], reps);
    for (int q = 0; q < LS_PREC_COUNT; q++) d->neigh_s[q] = !slow && q > 0 && q < nq ? ls_median(busy[q], reps) - *fp32_s : 0;
    /* the spread of one step, not the drift of the load: the log ratios of a precision's
     * steps in consecutive rounds (a few seconds apart), pooled over the precisions; their
     * median absolute deviation x 1.4826 (a normal's standard deviation) over sqrt(2) */
    double lr[MAXREP * LS_PREC_COUNT], dev[MAXREP * LS_PREC_COUNT];
    int nd = 0;
    for (int q = 0; q < nq; q++)
        for (int rep = 1; rep < reps; rep++)
            if (busy[q][rep] > 0 && busy[q][rep - 1] > 0) lr[nd++] = log(busy[q][rep] / busy[q][rep - 1]);
    double md = nd ? ls_median(lr, nd) : 0;
    for (int i = 0; i < nd; i++) dev[i] = fabs(lr[i] - md);
    *cv = nd ? 1.4826 * ls_median(dev, nd) / sqrt(2) : 0;
    free(lt), free(c);
    return rc;
}

int ls_tplan_profile_here(ls_tplan *p, const ls_corpus *corpus, const char *ckpt, const double *shares, int threads,
                          int reps, ls_dist *d) {
    if (p->ranks < 1 || p->ranks > LS_TPLAN_MAX_RANK)
        return ls_err(LS_EINVAL, "plan: ranks must be in [1, %d], got %d", LS_TPLAN_MAX_RANK, p->ranks);
    if (p->batch % p->ranks)
        return ls_err(LS_EINVAL, "plan: batch %d does not split over %d ranks", p->batch, p->ranks);
    int R = p->ranks, me = d ? ls_dist_rank(d) : 0, size = d ? ls_dist_size(d) : 1;
    if (size != R)
        return ls_err(LS_EINVAL,
                      "plan: %d ranks are profiled by %d processes, one per rank (`plan train` starts them "
                      "under mpirun)",
                      R, size);
    p->n_lin = p->cfg.n_layer * LS_LIN_COUNT;
    if (p->n_lin > LS_TPLAN_MAX_LIN) return ls_err(LS_ERANGE, "plan: at most %d Linear layers", LS_TPLAN_MAX_LIN);
    if (reps < 3) reps = 3;
    if (reps > MAXREP) reps = MAXREP;
    /* the slow ranks: granted less than the most any rank is granted */
    double eff[LS_TPLAN_MAX_RANK], emax = 0;
    for (int r = 0; r < R; r++) {
        eff[r] = shares[r] > 0 && shares[r] < threads ? shares[r] : threads;
        emax = fmax(emax, eff[r]);
    }
    int any_slow = 0;
    for (int r = 0; r < R; r++) any_slow |= eff[r] < emax;
    int slow = eff[me] < emax, nq = any_slow ? LS_PREC_COUNT : 1, rounds = reps * nq, n = p->n_lin;
    size_t S = slot_size(n, rounds);
    ls_trainer *t = NULL;
    ls_batch_source *src = NULL;
    ls_throttle thr = {0};
    ls_tplan_device *base = calloc(1, sizeof *base);
    float *all = calloc((size_t)R * S, sizeof(float));
    double *sync = calloc((size_t)R * rounds, sizeof(double)), fp32_s = 0, cv = 0;
    /* the indicator first, unthrottled: each rank observes its own shard of the global batch */
    int rc = base && all && sync ? LS_OK : ls_err(LS_ENOMEM, "plan: out of memory");
    if ((rc = ls_dist_agree(d, rc, NULL)) == LS_OK) rc = ls_tplan_indicator_run(p, corpus, ckpt, threads, d, NULL);
    if (rc == LS_OK) rc = rank_trainer(p, corpus, ckpt, threads, 10, d, &t, &src);
    if ((rc = ls_dist_agree(d, rc, NULL)) < 0) goto done;
    rc = run_steps(t, src, 2); /* warm-up, every rank together */
    if (rc == LS_OK && slow) rc = ls_throttle_apply(&thr, shares[me], threads);
    int mech_me = !thr.active ? 0 : thr.dir[0] ? 1 : 2;
    if (rc == LS_OK) rc = profile_linears(p, base, reps); /* the casts' share of each layer, alone */
    if ((rc = ls_dist_agree(d, rc, NULL)) < 0) {
        if (slow) ls_throttle_release(&thr);
        goto done;
    }
    rc = paired_rounds(p, t, src, d, reps, nq, slow, base, &fp32_s, &cv, sync);
    if (slow) ls_throttle_release(&thr);
    if ((rc = ls_dist_agree(d, rc, NULL)) < 0) goto done;
    /* every rank's profile to every rank */
    slot_pack(all + (size_t)me * S, base, n, fp32_s, cv, mech_me, sync, rounds);
    if (d && R > 1) rc = ls_dist_allreduce_sum(d, all, (size_t)R * S);
    double f32[LS_TPLAN_MAX_RANK], fmin32 = INFINITY, cvs = 0;
    for (int r = 0; rc == LS_OK && r < R; r++) {
        ls_tplan_device *dv = &p->dev[r];
        memset(dv, 0, sizeof *dv);
        int mech;
        slot_unpack(all + (size_t)r * S, dv, n, &f32[r], &cv, &mech, sync + (size_t)r * rounds, rounds);
        const char *mn[3] = {"none", "cgroup v1 cpu.cfs_quota_us", "duty cycle SIGSTOP/SIGCONT"};
        if (r == 0) snprintf(p->throttle, sizeof p->throttle, "none");
        if (mech > 0) snprintf(p->throttle, sizeof p->throttle, "%s", mn[mech % 3]);
        fmin32 = fmin(fmin32, f32[r]), cvs += cv / R;
        dv->share = eff[r] < threads ? eff[r] : 0;
        snprintf(dv->name, sizeof dv->name, "cpu@%.2f", eff[r]);
        dv->mem_bytes = ls_mem_total() / R;
        for (int q = 0; q < LS_PREC_COUNT; q++) dv->supported[q] = 1;
    }
    for (int r = 0; rc == LS_OK && r < R; r++) p->dev[r].slowdown = fmin32 > 0 ? f32[r] / fmin32 : 1;
    /* the synchronisation: in each round the least any rank spent outside its own work (the
     * rank that waited least: the all-reduce and the stop agreement themselves), median over rounds */
    double mins[MAXREP * LS_PREC_COUNT];
    for (int j = 0; rc == LS_OK && j < rounds; j++) {
        mins[j] = INFINITY;
        for (int r = 0; r < R; r++) mins[j] = fmin(mins[j], sync[(size_t)r * rounds + j]);
    }
    if (rc == LS_OK) p->allreduce_s = R > 1 ? fmax(0, ls_median(mins, rounds)) : 0, p->step_cv = cvs;
done:
    ls_batch_source_free(src);
    ls_trainer_free(t);
    free(base), free(all), free(sync);
    return rc;
}

/* ---------------------------------------------------------------- catalog GPUs (modelled) */

/* Dense fp32 (non-tensor) TFLOPS from the vendor datasheets, which gpus.json does not carry,
 * and the parts without bf16 (pre-Ampere). */
static const struct {
    const char *prefix;
    double fp32_tflops;
    int bf16;
} gpu_extra[] = {
    {"T4", 8.1, 0},    {"V100", 15.7, 0}, {"P100", 9.3, 0},     {"A100", 19.5, 1},
    {"A800", 19.5, 1}, {"A10", 31.2, 1},  {"L4", 30.3, 1},      {"H100", 67.0, 1},
    {"H800", 67.0, 1}, {"H200", 67.0, 1}, {"RTX3090", 35.6, 1}, {"RTX4090", 82.6, 1},
};

/* Index into gpu_extra for a catalog GPU (longest matching prefix), -1 if none. */
static int gpu_extra_find(const char *name) {
    int e = -1;
    for (size_t k = 0; k < sizeof gpu_extra / sizeof gpu_extra[0]; k++)
        if (!strncasecmp(name, gpu_extra[k].prefix, strlen(gpu_extra[k].prefix)) &&
            (e < 0 || strlen(gpu_extra[k].prefix) > strlen(gpu_extra[e].prefix)))
            e = (int)k;
    return e;
}

/* Precisions a catalog GPU supports (QSync's table: T4 int8/fp16, V100 fp16, Ampere and
 * later also bf16; int8 where the part has int8 tensor cores). */
static void gpu_supported(const ls_plan_gpu *g, int e, int *sup) {
    sup[LS_PREC_FP32] = 1;
    sup[LS_PREC_FP16] = g->fp16_flops > 0;
    sup[LS_PREC_BF16] = e >= 0 && gpu_extra[e].bf16;
    sup[LS_PREC_INT8] = g->int8_ops > 0;
}

int ls_tplan_model_gpus(ls_tplan *p, const ls_plan_catalog *cat, char names[][LS_PLAN_NAME]) {
    p->n_lin = p->cfg.n_layer * LS_LIN_COUNT;
    if (p->n_lin > LS_TPLAN_MAX_LIN) return ls_err(LS_ERANGE, "plan: at most %d Linear layers", LS_TPLAN_MAX_LIN);
    if (p->batch % p->ranks)
        return ls_err(LS_EINVAL, "plan: batch %d does not split over %d ranks", p->batch, p->ranks);
    const ls_model_config *c = &p->cfg;
    double N = (double)p->batch / p->ranks * p->seq, link = INFINITY;
    for (int r = 0; r < p->ranks; r++) {
        ls_plan_gpu g;
        LS_TRY(ls_plan_catalog_gpu(cat, names[r], &g));
        int e = gpu_extra_find(g.name);
        if (e < 0) return ls_err(LS_ENOTFOUND, "plan: no fp32 throughput known for GPU %s", g.name);
        ls_tplan_device *d = &p->dev[r];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", g.name);
        d->gpu = 1;
        d->slowdown = 1;
        d->mem_bytes = g.mem_bytes;
        gpu_supported(&g, e, d->supported);
        double thr[LS_PREC_COUNT] = {gpu_extra[e].fp32_tflops * 1e12, g.fp16_flops, g.fp16_flops, g.int8_ops};
        for (int i = 0; i < p->n_lin; i++) {
            int IC, OC;
            lin_shape(c, i, &IC, &OC);
            for (int q = 0; q < LS_PREC_COUNT; q++) {
                if (!d->supported[q]) continue;
                d->lin_s[i][q] = 3 * 2 * N * IC * OC / thr[q];
                d->cast_in_s[i][q] = 2 * (N * IC + N * OC) * (4 + prec_bytes[q]) / g.bw_Bps;
                d->cast_w_s[i][q] = 2 * ((double)IC * OC) * (4 + prec_bytes[q]) / g.bw_Bps;
            }
        }
        /* the rest, modelled: attention products and the tied head at fp32 rate, and memory
         * passes over the activations (about 10 per layer) and the AdamW state */
        double rows = (double)p->batch / p->ranks, T = p->seq, C = c->d_model, F = c->d_ff;
        double att = 3 * 4 * rows * T * T * C * c->n_layer, head = 3 * 2 * N * C * c->vocab;
        double bytes = 4.0 * 10 * N * (C + F) * c->n_layer + 16.0 * 2 * (double)ls_model_config_num_params(c);
        d->other_s = (att + head) / thr[LS_PREC_FP32] + bytes / g.bw_Bps;
        link = fmin(link, g.link_Bps);
    }
    double grad = 4.0 * (double)ls_model_config_num_params(c);
    p->allreduce_s = p->ranks > 1 ? 2.0 * (p->ranks - 1) / p->ranks * grad / link : 0;
    snprintf(p->throttle, sizeof p->throttle, "modelled from the GPU catalog");
    for (int i = 0; i < p->n_lin; i++)
        for (int q = 0; q < LS_PREC_COUNT; q++)
            if (!isfinite(p->omega[i][q])) p->omega[i][q] = 0;
    return LS_OK;
}

/* ---------------------------------------------------------------- plan file */

int ls_tplan_write(const ls_tplan *p, const char *path) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "out of memory");
    cJSON_AddStringToObject(j, "format", "llmsys-precision-plan");
    cJSON_AddNumberToObject(j, "version", 1);
    char *cfg = ls_model_config_to_json(&p->cfg);
    cJSON_AddItemToObject(j, "model", cfg ? cJSON_Parse(cfg) : cJSON_CreateNull());
    free(cfg);
    cJSON_AddNumberToObject(j, "batch", p->batch);
    cJSON_AddNumberToObject(j, "seq", p->seq);
    cJSON_AddNumberToObject(j, "ranks", p->ranks);
    cJSON_AddBoolToObject(j, "int8_per_channel", p->per_channel);
    cJSON_AddStringToObject(j, "cluster", p->cluster);
    cJSON_AddStringToObject(j, "throttle", p->throttle);
    const char *sn[] = {"qsync", "uniform", "fp32", "greedy"};
    cJSON_AddStringToObject(j, "strategy", sn[p->strategy]);
    cJSON *layers = cJSON_AddArrayToObject(j, "layers");
    char b[64];
    for (int i = 0; i < p->n_lin; i++) cJSON_AddItemToArray(layers, cJSON_CreateString(ls_linear_name(i, b, sizeof b)));
    cJSON *ranks = cJSON_AddArrayToObject(j, "rank_plans");
    for (int r = 0; r < p->ranks; r++) {
        const ls_tplan_device *d = &p->dev[r];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddStringToObject(o, "device", d->name);
        cJSON_AddBoolToObject(o, "modelled", d->gpu);
        cJSON_AddNumberToObject(o, "share", d->share);
        cJSON_AddNumberToObject(o, "slowdown", d->slowdown);
        cJSON *sup = cJSON_AddArrayToObject(o, "supported");
        for (int q = 0; q < LS_PREC_COUNT; q++)
            if (d->supported[q]) cJSON_AddItemToArray(sup, cJSON_CreateString(ls_prec_name(q)));
        cJSON *pr = cJSON_AddArrayToObject(o, "precisions");
        for (int i = 0; i < p->n_lin; i++) cJSON_AddItemToArray(pr, cJSON_CreateString(ls_prec_name(p->prec[r][i])));
        cJSON_AddNumberToObject(o, "predicted_step_s", p->pred_s[r]);
        cJSON_AddNumberToObject(o, "predicted_fp32_step_s", p->pred_fp32_s[r]);
        cJSON_AddNumberToObject(o, "memory_GB", p->mem_need[r] / 1e9);
        cJSON_AddNumberToObject(o, "memory_capacity_GB", d->mem_bytes / 1e9);
        if (d->cpu_share > 0) cJSON_AddNumberToObject(o, "cpu_share", d->cpu_share);
        cJSON_AddBoolToObject(o, "keeps_pace", p->keeps_pace[r]);
        /* the replayer's inputs, per Linear kind (all blocks alike): GEMMs, input casts, weight casts */
        cJSON *costs = cJSON_AddObjectToObject(o, "costs_ms");
        cJSON_AddNumberToObject(costs, "other", d->other_s * 1e3);
        double nb[LS_PREC_COUNT];
        for (int q = 0; q < LS_PREC_COUNT; q++) nb[q] = d->neigh_s[q] * 1e3;
        cJSON_AddItemToObject(costs, "neighbour", cJSON_CreateDoubleArray(nb, LS_PREC_COUNT));
        for (int k = 0; k < LS_LIN_COUNT && k < p->n_lin; k++) {
            char kn[64];
            const char *nm = ls_linear_name(k, kn, sizeof kn) + 4; /* drop "h.0." */
            cJSON *kk = cJSON_AddObjectToObject(costs, nm);
            for (int q = 0; q < LS_PREC_COUNT; q++) {
                double v[3] = {d->lin_s[k][q] * 1e3, d->cast_in_s[k][q] * 1e3, d->cast_w_s[k][q] * 1e3};
                cJSON_AddItemToObject(kk, ls_prec_name(q), cJSON_CreateDoubleArray(v, 3));
            }
        }
        cJSON_AddItemToArray(ranks, o);
    }
    cJSON_AddNumberToObject(j, "target_step_s", p->target_s);
    cJSON_AddNumberToObject(j, "allreduce_s", p->allreduce_s);
    cJSON_AddNumberToObject(j, "step_cv", p->step_cv);
    cJSON_AddNumberToObject(j, "predicted_iteration_s", p->pred_iter_s);
    cJSON_AddNumberToObject(j, "indicator_total", p->quality);
    cJSON_AddNumberToObject(j, "solve_s", p->solve_s);
    cJSON *om = cJSON_AddArrayToObject(j, "indicator");
    for (int i = 0; i < p->n_lin; i++) cJSON_AddItemToArray(om, cJSON_CreateDoubleArray(p->omega[i], LS_PREC_COUNT));
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

/* n finite numbers of a JSON array into v, each >= 0 unless signed. */
static int nums(const cJSON *a, double *v, int n, int sign, const char *path, const char *what) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return ls_err(LS_EFORMAT, "%s: \"%s\" entries must be arrays of %d numbers", path, what, n);
    for (int k = 0; k < n; k++) {
        const cJSON *e = cJSON_GetArrayItem(a, k);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || (!sign && e->valuedouble < 0))
            return ls_err(LS_EFORMAT, "%s: \"%s\" holds %s", path, what, sign ? "a non-number" : "a non-number or < 0");
        v[k] = e->valuedouble;
    }
    return LS_OK;
}

/* A rank's profile, when the file carries it (a plan re-allocated without profiling again):
 * slowdown, share of a core, memory capacity and costs_ms. Absent fields stay 0. */
static int load_profile(const cJSON *o, ls_tplan_device *d, int n_lin, const char *path, int r) {
    double gb = 0;
    int rc = ls_json_get_double(o, "slowdown", 1, &d->slowdown);
    if (rc == LS_OK) rc = ls_json_get_double(o, "cpu_share", 0, &d->cpu_share);
    if (rc == LS_OK) rc = ls_json_get_double(o, "memory_capacity_GB", 0, &gb);
    d->mem_bytes = gb * 1e9;
    const cJSON *costs = cJSON_GetObjectItem(o, "costs_ms");
    if (rc < 0 || !costs) return rc < 0 ? ls_err_wrap(rc, "%s: rank %d", path, r) : LS_OK;
    double v[LS_PREC_COUNT];
    rc = ls_json_get_double(costs, "other", 0, &d->other_s);
    d->other_s *= 1e-3;
    const cJSON *nb = cJSON_GetObjectItem(costs, "neighbour");
    if (rc == LS_OK && nb) rc = nums(nb, v, LS_PREC_COUNT, 1, path, "neighbour");
    for (int q = 0; rc == LS_OK && nb && q < LS_PREC_COUNT; q++) d->neigh_s[q] = v[q] * 1e-3;
    for (int k = 0; rc == LS_OK && k < LS_LIN_COUNT && k < n_lin; k++) {
        char kn[64];
        const cJSON *kk = cJSON_GetObjectItem(costs, ls_linear_name(k, kn, sizeof kn) + 4);
        for (int q = 0; rc == LS_OK && q < LS_PREC_COUNT; q++) {
            rc = nums(kk ? cJSON_GetObjectItem(kk, ls_prec_name(q)) : NULL, v, 3, 0, path, "costs_ms");
            for (int i = k; rc == LS_OK && i < n_lin; i += LS_LIN_COUNT)
                d->lin_s[i][q] = v[0] * 1e-3, d->cast_in_s[i][q] = v[1] * 1e-3, d->cast_w_s[i][q] = v[2] * 1e-3;
        }
    }
    return rc;
}

int ls_tplan_load(const char *path, ls_tplan *p) {
    memset(p, 0, sizeof *p);
    cJSON *j;
    LS_TRY(ls_json_read_format(path, "llmsys-precision-plan", 0, &j));
    cJSON *model = cJSON_GetObjectItem(j, "model"), *layers = cJSON_GetObjectItem(j, "layers"),
          *ranks = cJSON_GetObjectItem(j, "rank_plans");
    char *ms = model ? cJSON_PrintUnformatted(model) : NULL;
    int rc = ms ? ls_model_config_from_json(ms, &p->cfg) : ls_err(LS_EFORMAT, "%s: no \"model\" config", path);
    free(ms);
    if (rc == LS_OK) rc = ls_model_config_validate(&p->cfg);
    if (rc == LS_OK) rc = ls_json_get_int(j, "batch", 0, &p->batch);
    if (rc == LS_OK) rc = ls_json_get_int(j, "seq", 0, &p->seq);
    if (rc == LS_OK) rc = ls_json_get_int(j, "ranks", 0, &p->ranks);
    cJSON *pc = cJSON_GetObjectItem(j, "int8_per_channel");
    p->per_channel = cJSON_IsTrue(pc);
    const char *cl = "";
    if (rc == LS_OK) rc = ls_json_get_string(j, "cluster", "", &cl);
    snprintf(p->cluster, sizeof p->cluster, "%s", cl);
    const char *th = "";
    if (rc == LS_OK) rc = ls_json_get_string(j, "throttle", "", &th);
    snprintf(p->throttle, sizeof p->throttle, "%s", th);
    p->n_lin = p->cfg.n_layer * LS_LIN_COUNT;
    if (rc == LS_OK && (p->ranks < 1 || p->ranks > LS_TPLAN_MAX_RANK))
        rc = ls_err(LS_EFORMAT, "%s: ranks must be in [1, %d]", path, LS_TPLAN_MAX_RANK);
    if (rc == LS_OK && p->n_lin > LS_TPLAN_MAX_LIN) rc = ls_err(LS_ERANGE, "%s: too many layers", path);
    if (rc == LS_OK && (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != p->n_lin))
        rc = ls_err(LS_EFORMAT, "%s: \"layers\" must list the model's %d Linear layers", path, p->n_lin);
    /* column c of the file's precision lists is layer idx[c] of the model */
    int idx[LS_TPLAN_MAX_LIN];
    for (int c = 0; rc == LS_OK && c < p->n_lin; c++) {
        cJSON *e = cJSON_GetArrayItem(layers, c);
        idx[c] = cJSON_IsString(e) ? ls_linear_find(e->valuestring, p->cfg.n_layer) : -1;
        if (idx[c] < 0)
            rc = ls_err(LS_EINVAL,
                        "%s: unknown layer '%s' (the model's Linear layers are h.0.attn.qkv ... h.%d.mlp.proj)", path,
                        cJSON_IsString(e) ? e->valuestring : "?", p->cfg.n_layer - 1);
        for (int k = 0; rc == LS_OK && k < c; k++)
            if (idx[k] == idx[c]) rc = ls_err(LS_EINVAL, "%s: layer '%s' listed twice", path, e->valuestring);
    }
    if (rc == LS_OK && (!cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) != p->ranks))
        rc = ls_err(LS_EFORMAT, "%s: \"rank_plans\" must have %d entries", path, p->ranks);
    for (int r = 0; rc == LS_OK && r < p->ranks; r++) {
        cJSON *o = cJSON_GetArrayItem(ranks, r), *pr = cJSON_GetObjectItem(o, "precisions"),
              *sup = cJSON_GetObjectItem(o, "supported");
        ls_tplan_device *d = &p->dev[r];
        const char *dn = "";
        rc = ls_json_get_string(o, "device", "?", &dn);
        snprintf(d->name, sizeof d->name, "%s", dn);
        double share = 0;
        if (rc == LS_OK) rc = ls_json_get_double(o, "share", 0, &share);
        d->share = share;
        d->gpu = cJSON_IsTrue(cJSON_GetObjectItem(o, "modelled"));
        for (int q = 0; q < LS_PREC_COUNT; q++) d->supported[q] = sup ? 0 : 1;
        for (int k = 0; rc == LS_OK && sup && k < cJSON_GetArraySize(sup); k++) {
            ls_prec q;
            cJSON *e = cJSON_GetArrayItem(sup, k);
            rc = ls_prec_parse(cJSON_IsString(e) ? e->valuestring : "?", &q);
            if (rc == LS_OK) d->supported[q] = 1;
        }
        /* a catalog GPU supports what the catalog says, whatever the file claims */
        if (rc == LS_OK && d->gpu) {
            ls_plan_catalog *cat = NULL;
            ls_plan_gpu g;
            rc = ls_plan_catalog_load(NULL, &cat);
            if (rc == LS_OK) rc = ls_plan_catalog_gpu(cat, d->name, &g);
            if (rc == LS_OK) gpu_supported(&g, gpu_extra_find(g.name), d->supported);
            ls_plan_catalog_free(cat);
            if (rc < 0) ls_err_wrap(rc, "%s: rank %d", path, r);
        }
        if (rc == LS_OK && (!cJSON_IsArray(pr) || cJSON_GetArraySize(pr) != p->n_lin))
            rc = ls_err(LS_EFORMAT, "%s: rank %d: \"precisions\" must have %d entries", path, r, p->n_lin);
        for (int c = 0; rc == LS_OK && c < p->n_lin; c++) {
            cJSON *e = cJSON_GetArrayItem(pr, c);
            ls_prec q;
            rc = ls_prec_parse(cJSON_IsString(e) ? e->valuestring : "?", &q);
            if (rc < 0)
                ls_err_wrap(rc, "%s: rank %d", path, r);
            else if (!d->supported[q])
                rc = ls_err(LS_EINVAL, "%s: rank %d (%s) does not support %s", path, r, d->name, ls_prec_name(q));
            else
                p->prec[r][idx[c]] = (uint8_t)q;
        }
        if (rc == LS_OK) rc = load_profile(o, d, p->n_lin, path, r);
    }
    cJSON *om = cJSON_GetObjectItem(j, "indicator");
    if (rc == LS_OK && om && (!cJSON_IsArray(om) || cJSON_GetArraySize(om) != p->n_lin))
        rc = ls_err(LS_EFORMAT, "%s: \"indicator\" must have %d entries", path, p->n_lin);
    for (int c = 0; rc == LS_OK && om && c < p->n_lin; c++) {
        double v[LS_PREC_COUNT];
        rc = nums(cJSON_GetArrayItem(om, c), v, LS_PREC_COUNT, 0, path, "indicator");
        for (int q = 0; rc == LS_OK && q < LS_PREC_COUNT; q++) p->omega[idx[c]][q] = v[q];
    }
    if (rc == LS_OK) rc = ls_json_get_double(j, "allreduce_s", 0, &p->allreduce_s);
    if (rc == LS_OK) rc = ls_json_get_double(j, "step_cv", 0, &p->step_cv);
    if (rc == LS_OK && (!(p->allreduce_s >= 0) || !(p->step_cv >= 0)))
        rc = ls_err(LS_EFORMAT, "%s: allreduce_s and step_cv must be >= 0", path);
    cJSON_Delete(j);
    return rc;
}
