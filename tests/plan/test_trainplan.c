/* test_trainplan.c - training precision plans (QSync): the replayer against hand-summed
 * costs, the allocator against brute force, the indicator against a float64 computation on
 * the tiny model, catalog support (T4 no bf16, V100 no int8), memory and the plan file. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "test.h"

static void test_replay_hand(void) {
    ls_tplan_device *d = calloc(1, sizeof *d);
    /* two layers: layer 0 fp32 GEMMs 10 ms, bf16 4 ms + casts 1 (in) + 0.5 (weight);
     * layer 1 fp32 6 ms, int8 2 ms + casts 2 + 1; other 20 ms */
    d->other_s = 0.020;
    d->lin_s[0][LS_PREC_FP32] = 0.010, d->lin_s[0][LS_PREC_BF16] = 0.004;
    d->cast_in_s[0][LS_PREC_BF16] = 0.001, d->cast_w_s[0][LS_PREC_BF16] = 0.0005;
    d->lin_s[1][LS_PREC_FP32] = 0.006, d->lin_s[1][LS_PREC_INT8] = 0.002;
    d->cast_in_s[1][LS_PREC_INT8] = 0.002, d->cast_w_s[1][LS_PREC_INT8] = 0.001;
    uint8_t a[2] = {LS_PREC_FP32, LS_PREC_FP32}, b[2] = {LS_PREC_BF16, LS_PREC_FP32},
            c[2] = {LS_PREC_BF16, LS_PREC_INT8};
    CHECK_NEAR(ls_tplan_replay(d, a, 2), 0.036, 1e-12);  /* 20 + 10 + 6 */
    CHECK_NEAR(ls_tplan_replay(d, b, 2), 0.0315, 1e-12); /* 20 + 4 + 1 + 0.5 + 6 */
    CHECK_NEAR(ls_tplan_replay(d, c, 2), 0.0305, 1e-12); /* 20 + 5.5 + 2 + 2 + 1 */
    free(d);
}

/* A plan's prediction by hand: rank 0 fp32 next to rank 1's bf16 and int8 layers (its
 * neighbour term weighted by rank 1's Linear time at each), then at the shares of a core the
 * ranks got in a run: profiled at 0.5 and 0.25 of a core, the run at 0.25 and 0.125. */
static void test_predict_hand(void) {
    ls_tplan *p = calloc(1, sizeof *p);
    ls_model_config_named("tiny", &p->cfg);
    p->ranks = 2, p->n_lin = 2, p->batch = 2, p->seq = 16, p->allreduce_s = 0.004;
    ls_tplan_device *d0 = &p->dev[0], *d1 = &p->dev[1];
    d0->other_s = 0.020, d0->lin_s[0][LS_PREC_FP32] = 0.010, d0->lin_s[1][LS_PREC_FP32] = 0.006;
    d0->neigh_s[LS_PREC_BF16] = 0.004, d0->neigh_s[LS_PREC_INT8] = 0.008;
    d1->other_s = 0.040, d1->lin_s[0][LS_PREC_FP32] = 0.020, d1->lin_s[1][LS_PREC_FP32] = 0.012;
    d1->lin_s[0][LS_PREC_BF16] = 0.008, d1->cast_in_s[0][LS_PREC_BF16] = 0.002, d1->cast_w_s[0][LS_PREC_BF16] = 0.001;
    d1->lin_s[1][LS_PREC_INT8] = 0.004, d1->cast_in_s[1][LS_PREC_INT8] = 0.004, d1->cast_w_s[1][LS_PREC_INT8] = 0.002;
    d1->neigh_s[LS_PREC_BF16] = 1; /* rank 1's neighbour runs fp32: never counted */
    d0->mem_bytes = d1->mem_bytes = 1e12;
    p->prec[1][0] = LS_PREC_BF16, p->prec[1][1] = LS_PREC_INT8, p->pred_iter_s = 0.123;
    double sh[2] = {0.25, 0.125}, st[2];
    CHECK_NEAR(ls_tplan_predict_at(p, sh, -1, st), 0.123, 1e-15); /* no profile shares: the plan's own */
    /* rank 1: 40 + 11 + 10 = 61 ms; rank 0: 36 + (4·11 + 8·10)/21 */
    double r0 = 0.036 + (0.004 * 11 + 0.008 * 10) / 21;
    CHECK_NEAR(ls_tplan_rank_step(p, 0), r0, 1e-12);
    CHECK_NEAR(ls_tplan_rank_step(p, 1), 0.061, 1e-12);
    CHECK(ls_tplan_predict(p) == LS_OK);
    CHECK_NEAR(p->target_s, 0.036, 1e-12);
    CHECK_NEAR(p->pred_s[0], r0, 1e-12);
    CHECK_NEAR(p->pred_iter_s, 0.061 + 0.004, 1e-12); /* no spread: the larger step + the all-reduce */
    CHECK(p->keeps_pace[0] && !p->keeps_pace[1]);
    d0->cpu_share = 0.5, d1->cpu_share = 0.25;
    /* each rank's step x 2 (profile share / run share); the all-reduce 4 x 0.25/0.125 */
    CHECK_NEAR(ls_tplan_predict_at(p, sh, -1, st), 0.122 + 0.008, 1e-12);
    CHECK_NEAR(st[0], 2 * r0, 1e-12);
    CHECK_NEAR(st[1], 0.122, 1e-12);
    CHECK_NEAR(ls_tplan_predict_at(p, sh, 0.030, NULL), 0.152, 1e-12); /* a measured 30 ms at the syncs */
    /* each rank holds batch / ranks sequences: one here */
    for (int r = 0; r < 2; r++) CHECK_NEAR(p->mem_need[r], ls_tplan_memory(&p->cfg, 1, 16, p->prec[r], 2), 0);
    d1->mem_bytes = 1;
    CHECK(ls_tplan_predict(p) == LS_EINFEASIBLE);
    free(p);
}

/* E[max(X, Y)] of independent normals by integrating x·d(F_X F_Y) on a fine grid (Simpson),
 * the reference for Clark's closed form. */
static double emax_numeric(double m0, double s0, double m1, double s1) {
    double lo = fmin(m0 - 12 * s0, m1 - 12 * s1), hi = fmax(m0 + 12 * s0, m1 + 12 * s1), sum = 0;
    int n = 200000;
    double h = (hi - lo) / n;
    for (int i = 0; i <= n; i++) {
        double x = lo + i * h, z0 = (x - m0) / s0, z1 = (x - m1) / s1;
        double f = (exp(-0.5 * z0 * z0) / (s0 * sqrt(2 * M_PI)) * 0.5 * erfc(-z1 / sqrt(2)) +
                    exp(-0.5 * z1 * z1) / (s1 * sqrt(2 * M_PI)) * 0.5 * erfc(-z0 / sqrt(2)));
        sum += x * f * (i == 0 || i == n ? 1 : i % 2 ? 4 : 2);
    }
    return sum * h / 3;
}

/* The ranks' expected maximum: exact against numerical integration for two ranks, the plain
 * maximum without spread or far apart, and the prediction at a run's shares with it. */
static void test_expected_max(void) {
    const double cases[][3] = {{1.0, 1.0, 0.1}, {1.0, 1.1, 0.1}, {0.7, 1.0, 0.05}, {2.0, 1.0, 0.3}, {1.0, 1.0, 0.01}};
    for (int k = 0; k < 5; k++) {
        double mu[2] = {cases[k][0], cases[k][1]}, cv = cases[k][2];
        double ref = emax_numeric(mu[0], cv * mu[0], mu[1], cv * mu[1]);
        CHECK_NEAR(ls_tplan_expected_max(mu, cv, 2), ref, 1e-9 * ref);
    }
    double eq[2] = {1, 1}; /* equal means: mu + sigma·sqrt(2)/sqrt(2 pi) = mu + sigma/sqrt(pi) */
    CHECK_NEAR(ls_tplan_expected_max(eq, 0.1, 2), 1 + 0.1 / sqrt(M_PI), 1e-12);
    double three[3] = {0.5, 2.0, 0.7};
    CHECK_NEAR(ls_tplan_expected_max(three, 0, 3), 2.0, 1e-15);
    CHECK_NEAR(ls_tplan_expected_max(three, 0.01, 3), 2.0, 1e-9); /* 15 sigma apart */
    /* computes 72 and 144 ms at the run's shares with a 10% spread, all-reduce 8 */
    ls_tplan *p = calloc(1, sizeof *p);
    p->ranks = 2, p->n_lin = 1, p->allreduce_s = 0.004, p->step_cv = 0.1;
    p->dev[0].cpu_share = p->dev[1].cpu_share = 0.5;
    p->dev[0].other_s = 0.036, p->dev[1].other_s = 0.072;
    double sh[2] = {0.25, 0.25};
    CHECK_NEAR(ls_tplan_predict_at(p, sh, -1, NULL), emax_numeric(0.072, 0.0072, 0.144, 0.0144) + 0.008, 1e-10);
    free(p);
}

/* A random two-rank problem on n_lin layers: rank 1 is slower by factor k. */
static void random_problem(ls_tplan *p, int n, double k, ls_rng *r) {
    memset(p, 0, sizeof *p);
    ls_model_config_named("tiny", &p->cfg);
    p->ranks = 2, p->n_lin = n, p->batch = 2, p->seq = 16;
    for (int q = 0; q < LS_PREC_COUNT; q++) p->dev[0].supported[q] = p->dev[1].supported[q] = 1;
    p->dev[1].supported[1 + (int)ls_rng_below(r, 3)] = 0; /* each case drops one low precision */
    for (int i = 0; i < n; i++) {
        double g = 1e-3 * (1 + ls_rng_uniform(r));
        const double speed[LS_PREC_COUNT] = {1, 0.35, 0.6, 0.25};
        for (int q = 0; q < LS_PREC_COUNT; q++) {
            double lin = g * speed[q] * (0.8 + 0.4 * ls_rng_uniform(r));
            double ci = q ? 1e-4 * ls_rng_uniform(r) : 0, cw = q ? 5e-5 * ls_rng_uniform(r) : 0;
            p->dev[0].lin_s[i][q] = lin, p->dev[0].cast_in_s[i][q] = ci, p->dev[0].cast_w_s[i][q] = cw;
            p->dev[1].lin_s[i][q] = k * lin, p->dev[1].cast_in_s[i][q] = k * ci, p->dev[1].cast_w_s[i][q] = k * cw;
        }
        p->omega[i][LS_PREC_BF16] = ls_rng_uniform(r);
        p->omega[i][LS_PREC_FP16] = 0.1 * ls_rng_uniform(r);
        p->omega[i][LS_PREC_INT8] = 1 + 2 * ls_rng_uniform(r);
    }
    p->dev[0].other_s = 2e-3, p->dev[1].other_s = 2e-3 * k;
    p->dev[0].mem_bytes = p->dev[1].mem_bytes = 1e12;
    snprintf(p->dev[0].name, sizeof p->dev[0].name, "fast");
    snprintf(p->dev[1].name, sizeof p->dev[1].name, "slow");
}

/* A hand problem for the allocators: rank 0 runs fp32 and sets the target, rank 1 runs fp32 and
 * int8 only (lin[i][0] fp32, lin[i][1] int8 seconds; om8 the int8 indicator, om32 fp32's). */
static void hand_problem(ls_tplan *p, int n, const double (*lin)[2], const double *om8, const double *om32,
                         double target) {
    memset(p, 0, sizeof *p);
    ls_model_config_named("tiny", &p->cfg);
    p->ranks = 2, p->n_lin = n, p->batch = 2, p->seq = 16;
    for (int q = 0; q < LS_PREC_COUNT; q++) p->dev[0].supported[q] = 1;
    p->dev[1].supported[LS_PREC_FP32] = p->dev[1].supported[LS_PREC_INT8] = 1;
    for (int i = 0; i < n; i++) {
        p->dev[0].lin_s[i][LS_PREC_FP32] = target / n;
        p->dev[1].lin_s[i][LS_PREC_FP32] = lin[i][0], p->dev[1].lin_s[i][LS_PREC_INT8] = lin[i][1];
        p->omega[i][LS_PREC_FP32] = om32 ? om32[i] : 0, p->omega[i][LS_PREC_INT8] = om8[i];
    }
    p->dev[0].mem_bytes = p->dev[1].mem_bytes = 1e12;
}

/* QSync's greedy moves by indicator gained per second spent, not by indicator gained: from
 * all-int8 (15 ms) with 10.5 ms to spend, layers 1 and 2 (0.6 and 0.5 for 1 ms each) beat
 * layer 0 (1.0 for 10 ms), which no longer fits after them; the exact programme agrees.
 * And a precision measured slower than fp32 is never chosen even where its indicator is
 * lower (an fp32 indicator above 0, as a hand-edited profile may give). */
static void test_allocator_hand(void) {
    ls_tplan *p = malloc(sizeof *p);
    const double lin[3][2] = {{0.015, 0.005}, {0.006, 0.005}, {0.006, 0.005}}, om8[3] = {1.0, 0.6, 0.5};
    for (int s = 0; s < 2; s++) {
        hand_problem(p, 3, lin, om8, NULL, 0.0255);
        CHECK_EQ_INT(ls_tplan_allocate(p, s ? LS_TPLAN_GREEDY : LS_TPLAN_QSYNC, -1), LS_OK);
        CHECK_EQ_INT(p->prec[1][0], LS_PREC_INT8);
        CHECK_EQ_INT(p->prec[1][1], LS_PREC_FP32);
        CHECK_EQ_INT(p->prec[1][2], LS_PREC_FP32);
        CHECK_NEAR(p->quality, 1.0, 1e-12);
    }
    /* Two moves gain as much per second: layer 0's 0.5 for 0.5 s, layer 1's 1 for 1 s. With 1 s
     * to spend the greedy takes the larger gain (in binary fractions, so the scores tie exactly). */
    const double lin3[2][2] = {{1.5, 1.0}, {2.0, 1.0}}, om8c[2] = {0.5, 1.0};
    hand_problem(p, 2, lin3, om8c, NULL, 3.0);
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_GREEDY, -1), LS_OK);
    CHECK_EQ_INT(p->prec[1][0], LS_PREC_INT8);
    CHECK_EQ_INT(p->prec[1][1], LS_PREC_FP32);
    CHECK_NEAR(p->quality, 0.5, 0);
    /* layer 0's int8 is 1 ms slower than its fp32 (indicator 0 against 0.5): fp32 stays */
    const double lin2[2][2] = {{0.010, 0.011}, {0.010, 0.002}}, om8b[2] = {0, 1}, om32b[2] = {0.5, 0};
    for (int s = 0; s < 2; s++) {
        hand_problem(p, 2, lin2, om8b, om32b, 0.015);
        CHECK_EQ_INT(ls_tplan_allocate(p, s ? LS_TPLAN_GREEDY : LS_TPLAN_QSYNC, -1), LS_OK);
        CHECK_EQ_INT(p->prec[1][0], LS_PREC_FP32);
        CHECK_EQ_INT(p->prec[1][1], LS_PREC_INT8);
    }
    free(p);
}

static void test_allocator_brute(void) {
    ls_rng r;
    ls_rng_seed(&r, 21);
    ls_tplan *p = malloc(sizeof *p);
    int feasible = 0, cases = 0;
    double greedy_sum = 0, dp_sum = 0;
    for (int t = 0; t < 40; t++) {
        random_problem(p, 8, 1.2 + 3.0 * ls_rng_uniform(&r), &r);
        CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_QSYNC, -1), LS_OK);
        double budget = p->target_s - p->dev[1].other_s, dp = 0;
        for (int i = 0; i < 8; i++) dp += p->omega[i][p->prec[1][i]];
        uint8_t best[10];
        double bf = ls_tplan_brute_force(p, 1, budget, best);
        /* the fast rank stays fp32 */
        for (int i = 0; i < 8; i++) CHECK_EQ_INT(p->prec[0][i], LS_PREC_FP32);
        cases++;
        if (!isfinite(bf)) { /* infeasible: the allocator runs each layer at its fastest */
            CHECK(!p->keeps_pace[1]);
            for (int i = 0; i < 8; i++) {
                const ls_tplan_device *d = &p->dev[1];
                int got = p->prec[1][i];
                double own = d->lin_s[i][got] + (got ? d->cast_in_s[i][got] + d->cast_w_s[i][got] : 0);
                CHECK(d->supported[got]);
                for (int q = 0; q < LS_PREC_COUNT; q++)
                    CHECK_MSG(!d->supported[q] ||
                                  own <= d->lin_s[i][q] + (q ? d->cast_in_s[i][q] + d->cast_w_s[i][q] : 0),
                              "case %d layer %d: %s is not its fastest", t, i, ls_prec_name(got));
            }
            continue;
        }
        feasible++;
        CHECK(p->keeps_pace[1]);
        CHECK(p->pred_s[1] <= p->target_s * (1 + 1e-9));
        /* costs are rounded up to 1/4000 of the budget: optimal over a budget shrunk by n bins */
        double bf_shrunk = ls_tplan_brute_force(p, 1, budget * (1 - 8.0 / 4000), best);
        CHECK_MSG(dp >= bf - 1e-12 && dp <= bf_shrunk + 1e-12, "case %d: dp %.6f, brute %.6f, shrunk %.6f", t, dp, bf,
                  bf_shrunk);
        for (int i = 0; i < 8; i++) CHECK(p->dev[1].supported[p->prec[1][i]]);
        /* QSync's greedy: within budget, never better than the exact programme's optimum */
        ls_tplan *g = malloc(sizeof *g);
        memcpy(g, p, sizeof *g);
        CHECK_EQ_INT(ls_tplan_allocate(g, LS_TPLAN_GREEDY, -1), LS_OK);
        double gv = 0;
        for (int i = 0; i < 8; i++) gv += g->omega[i][g->prec[1][i]];
        CHECK(g->keeps_pace[1]);
        CHECK_MSG(gv >= bf - 1e-12, "greedy %.6f below the brute-force optimum %.6f", gv, bf);
        greedy_sum += gv, dp_sum += dp;
        free(g);
    }
    printf("  allocator vs brute force: %d cases, %d feasible; total indicator: programme %.4f, greedy %.4f\n", cases,
           feasible, dp_sum, greedy_sum);
    CHECK(feasible >= 10 && feasible < cases); /* both kinds of case occur */
    /* a precision measured slower than fp32 is never chosen, even at indicator 0: layers 0-3
     * run int8 at 1.5x their fp32 time, the others at 0.25x */
    random_problem(p, 8, 2.0, &r);
    for (int q = 1; q < LS_PREC_COUNT; q++) p->dev[1].supported[q] = q == LS_PREC_INT8;
    for (int i = 0; i < 8; i++) {
        double f32 = p->dev[1].lin_s[i][LS_PREC_FP32];
        p->dev[1].lin_s[i][LS_PREC_INT8] = i < 4 ? 1.5 * f32 : 0.25 * f32;
        p->dev[1].cast_in_s[i][LS_PREC_INT8] = p->dev[1].cast_w_s[i][LS_PREC_INT8] = 0;
        p->omega[i][LS_PREC_INT8] = i < 4 ? 0 : 1;
    }
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_INT(ls_tplan_allocate(p, s ? LS_TPLAN_GREEDY : LS_TPLAN_QSYNC, -1), LS_OK);
        for (int i = 0; i < 8; i++) CHECK(i >= 4 || p->prec[1][i] == LS_PREC_FP32);
    }
    /* uniform and fp32 strategies */
    random_problem(p, 8, 1.5, &r);
    p->dev[1].supported[LS_PREC_BF16] = 1;
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_UNIFORM, LS_PREC_BF16), LS_OK);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(p->prec[1][i], LS_PREC_BF16);
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_FP32, -1), LS_OK);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(p->prec[1][i], LS_PREC_FP32);
    /* memory that cannot fit */
    p->dev[1].mem_bytes = 1e3;
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_QSYNC, -1), LS_EINFEASIBLE);
    free(p);
}

/* float64 reference of the indicator statistics, by definition (no algebraic shortcuts) */
typedef struct {
    ls_tplan_indicator lib;
    double fwd[32][LS_PREC_COUNT], dx[32][LS_PREC_COUNT], dw[32][LS_PREC_COUNT], xmass[32];
    int n;
} both;

static double v_of(int p, double x, double amax) {
    if (p == LS_PREC_INT8) return amax * amax / (127.0 * 127.0) / 12;
    return x * x * (p == LS_PREC_BF16 ? pow(2, -14) : pow(2, -20)) / 12;
}

static void observe_both(void *u, int lin, const float *x, const float *w, const float *dy, int N, int IC, int OC) {
    both *b = u;
    ls_tplan_indicator_observe(&b->lib, lin, x, w, dy, N, IC, OC);
    if (lin + 1 > b->n) b->n = lin + 1;
    double ax = 0, aw = 0, ag = 0, X2 = 0;
    for (int i = 0; i < N * IC; i++) ax = fmax(ax, fabs(x[i])), X2 += (double)x[i] * x[i];
    for (int i = 0; i < OC * IC; i++) aw = fmax(aw, fabs(w[i]));
    for (int i = 0; i < N * OC; i++) ag = fmax(ag, fabs(dy[i]));
    for (int p = 1; p < LS_PREC_COUNT; p++) {
        double f = 0, dxs = 0, dws = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double vy = 0; /* var of the output element from casting x and w */
                for (int k = 0; k < IC; k++) {
                    double xv = x[n * IC + k], wv = w[o * IC + k];
                    vy += v_of(p, xv, ax) * wv * wv + xv * xv * v_of(p, wv, aw);
                }
                f += (double)dy[n * OC + o] * dy[n * OC + o] * vy;
            }
        for (int n = 0; n < N; n++)
            for (int k = 0; k < IC; k++)
                for (int o = 0; o < OC; o++) {
                    double g = dy[n * OC + o], wv = w[o * IC + k];
                    dxs += v_of(p, g, ag) * wv * wv + g * g * v_of(p, wv, aw);
                }
        for (int o = 0; o < OC; o++)
            for (int k = 0; k < IC; k++)
                for (int n = 0; n < N; n++) {
                    double g = dy[n * OC + o], xv = x[n * IC + k];
                    dws += v_of(p, g, ag) * xv * xv + g * g * v_of(p, xv, ax);
                }
        b->fwd[lin][p] += f;
        b->dx[lin][p] += dxs / ((double)N * IC);
        b->dw[lin][p] += dws;
    }
    b->xmass[lin] += OC * X2;
}

static void test_indicator_f64(void) {
    ls_model_config cfg;
    ls_model_config_named("tiny", &cfg);
    ls_model *m;
    CHECK_EQ_INT(ls_model_init(&m, &cfg, 3), LS_OK);
    both *b = calloc(1, sizeof *b);
    CHECK_EQ_INT(ls_model_set_linear_observer(m, observe_both, b), LS_OK);
    enum { B = 1, T = 16 };
    int tok[B * T], tgt[B * T];
    ls_rng r;
    ls_rng_seed(&r, 4);
    for (int i = 0; i < B * T; i++) tok[i] = (int)ls_rng_below(&r, 256), tgt[i] = (int)ls_rng_below(&r, 256);
    ls_model_zero_grad(m);
    ls_model_forward(m, tok, tgt, B, T);
    ls_model_backward(m);
    CHECK_EQ_INT(b->n, cfg.n_layer * LS_LIN_COUNT);
    CHECK_EQ_INT(b->lib.n_lin, b->n);
    double worst = 0;
    for (int i = 0; i < b->n; i++)
        for (int p = 1; p < LS_PREC_COUNT; p++) {
            double e1 = fabs(b->lib.fwd[i][p] - b->fwd[i][p]) / b->fwd[i][p];
            double e2 = fabs(b->lib.dx[i][p] - b->dx[i][p]) / b->dx[i][p];
            double e3 = fabs(b->lib.dw[i][p] - b->dw[i][p]) / b->dw[i][p];
            worst = fmax(worst, fmax(e1, fmax(e2, e3)));
            CHECK_MSG(e1 < 1e-4 && e2 < 1e-4 && e3 < 1e-4, "layer %d %s: rel err fwd %.2g dx %.2g dw %.2g", i,
                      ls_prec_name(p), e1, e2, e3);
        }
    printf("  indicator statistics vs float64: worst relative error %.2g\n", worst);
    /* the combination: omega from the reference statistics by the documented formula */
    double om[LS_TPLAN_MAX_LIN][LS_PREC_COUNT];
    ls_tplan_indicator_finish(&b->lib, om);
    double sf = 0, sb = 0, before = 0, bwd[32][LS_PREC_COUNT];
    for (int i = 0; i < b->n; i++) {
        for (int p = 1; p < LS_PREC_COUNT; p++) bwd[i][p] = b->dw[i][p] + b->dx[i][p] * before;
        before += b->xmass[i];
        sf += b->fwd[i][LS_PREC_INT8];
        sb += bwd[i][LS_PREC_INT8];
    }
    for (int i = 0; i < b->n; i++) {
        CHECK(om[i][LS_PREC_FP32] == 0);
        for (int p = 1; p < LS_PREC_COUNT; p++) {
            double ref = b->fwd[i][p] / sf + bwd[i][p] / sb;
            CHECK_MSG(fabs(om[i][p] - ref) <= 1e-4 * ref, "omega[%d][%s] %.6g vs %.6g", i, ls_prec_name(p), om[i][p],
                      ref);
        }
        /* coarser formats are more sensitive */
        CHECK(om[i][LS_PREC_FP16] < om[i][LS_PREC_BF16] && om[i][LS_PREC_BF16] < om[i][LS_PREC_INT8]);
    }
    ls_model_set_linear_observer(m, NULL, NULL);
    free(b);
    ls_model_free(m);
}

/* Writes plan p to path and reads the file into txt (1 MiB). */
static void plan_text(const ls_tplan *p, const char *path, char *txt) {
    CHECK_EQ_INT(ls_tplan_write(p, path), LS_OK);
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(txt, 1, (1 << 20) - 1, f) : 0;
    if (f) fclose(f);
    txt[len] = 0;
}

static void put_text(const char *path, const char *txt) {
    FILE *f = fopen(path, "w");
    if (f) fputs(txt, f), fclose(f);
}

static void test_catalog_and_file(void) {
    ls_plan_catalog *cat;
    CHECK_EQ_INT(ls_plan_catalog_load(NULL, &cat), LS_OK);
    ls_tplan *p = calloc(1, sizeof *p), *q = calloc(1, sizeof *q);
    ls_model_config_named("tiny", &p->cfg);
    p->ranks = 3, p->batch = 6, p->seq = 32;
    char names[3][LS_PLAN_NAME] = {"A100", "V100", "T4"};
    for (int i = 0; i < 8; i++)
        for (int k = 1; k < LS_PREC_COUNT; k++) p->omega[i][k] = k * (i + 1);
    CHECK_EQ_INT(ls_tplan_model_gpus(p, cat, names), LS_OK);
    CHECK(p->dev[0].supported[LS_PREC_BF16] && p->dev[0].supported[LS_PREC_INT8]);
    CHECK(!p->dev[1].supported[LS_PREC_INT8] && p->dev[1].supported[LS_PREC_FP16]); /* V100: no int8 */
    CHECK(!p->dev[2].supported[LS_PREC_BF16] && p->dev[2].supported[LS_PREC_INT8]); /* T4: no bf16 */
    CHECK(p->dev[2].lin_s[0][LS_PREC_FP32] > p->dev[0].lin_s[0][LS_PREC_FP32]);
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_UNIFORM, LS_PREC_BF16), LS_EINVAL); /* T4 is slow, no bf16 */
    CHECK_EQ_INT(ls_tplan_allocate(p, LS_TPLAN_QSYNC, -1), LS_OK);
    for (int i = 0; i < 8; i++) {
        CHECK(p->prec[2][i] != LS_PREC_BF16);
        CHECK(p->prec[1][i] != LS_PREC_INT8);
    }
    char path[] = "/tmp/llmsys-tplan-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    p->dev[0].neigh_s[LS_PREC_INT8] = -0.0005; /* a neighbour term may be negative */
    CHECK_EQ_INT(ls_tplan_predict(p), LS_OK);
    CHECK_EQ_INT(ls_tplan_write(p, path), LS_OK);
    CHECK_EQ_INT(ls_tplan_load(path, q), LS_OK);
    CHECK_EQ_INT(q->ranks, 3);
    CHECK(!memcmp(q->prec, p->prec, sizeof p->prec));
    /* the file carries the whole profile: the same predictions, and the same plan again */
    CHECK_EQ_INT(ls_tplan_predict(q), LS_OK);
    CHECK_NEAR(q->pred_iter_s, p->pred_iter_s, 1e-9 * p->pred_iter_s);
    CHECK_NEAR(q->pred_s[0], p->pred_s[0], 1e-9 * p->pred_s[0]);
    CHECK_NEAR(q->quality, p->quality, 1e-9 * p->quality);
    CHECK_EQ_INT(ls_tplan_allocate(q, LS_TPLAN_QSYNC, -1), LS_OK);
    CHECK(!memcmp(q->prec, p->prec, sizeof p->prec));
    /* a hand-edited plan: bf16 on the T4 (the file's own support list claims it) */
    char *txt = calloc(1, 1 << 20);
    plan_text(p, path, txt);
    char *t4 = strstr(txt, "\"T4-16G\"");
    CHECK(t4 != NULL);
    char *pr = t4 ? strstr(t4, "\"precisions\"") : NULL;
    char *first = pr ? strchr(pr, '"') : NULL;
    first = first ? strchr(first + 1, '"') : NULL; /* end of the key */
    first = first ? strchr(first + 1, '"') : NULL; /* opening quote of the first value */
    char *sup = t4 ? strstr(t4, "\"supported\"") : NULL;
    if (first && sup) {
        memcpy(first + 1, "bf16", 4);
        put_text(path, txt);
        CHECK_EQ_INT(ls_tplan_load(path, q), LS_EINVAL);
        CHECK(strstr(ls_errmsg(), "does not support bf16") != NULL);
    }
    /* unknown layer name, unknown precision */
    plan_text(p, path, txt);
    char *lay = strstr(txt, "h.1.mlp.fc\"");
    if (lay) memcpy(lay, "h.9", 3);
    put_text(path, txt);
    CHECK_EQ_INT(ls_tplan_load(path, q), LS_EINVAL);
    CHECK(strstr(ls_errmsg(), "unknown layer") != NULL);
    plan_text(p, path, txt);
    char *fp = strstr(txt, "\"fp32\"");
    fp = fp ? strstr(fp + 1, "\"fp32\"") : NULL; /* past the supported list */
    if (fp) memcpy(fp + 1, "fp8 ", 4);
    put_text(path, txt);
    CHECK(ls_tplan_load(path, q) < 0);
    unlink(path);
    free(txt);
    free(p);
    free(q);
    ls_plan_catalog_free(cat);
}

/* --cluster lists: catalog names with xN repeats, local:SHARE,..., and every malformed list
 * refused (LS_EINVAL), the trailing comma included. */
static void test_cluster_lists(void) {
    double sh[LS_TPLAN_MAX_RANK];
    char nm[LS_TPLAN_MAX_RANK][LS_PLAN_NAME];
    int local = -1;
    CHECK_EQ_INT(ls_tplan_parse_cluster("A100x3,T4", sh, nm, &local), 4);
    CHECK(local == 0 && !strcmp(nm[0], "A100") && !strcmp(nm[2], "A100") && !strcmp(nm[3], "T4"));
    CHECK_EQ_INT(ls_tplan_parse_cluster("local:1,0.5", sh, nm, &local), 2);
    CHECK(local == 1 && sh[0] == 1.0 && sh[1] == 0.5);
    const char *bad[] = {"", "A100,T4,", ",A100", "A100,,T4", "A100x0", "A100x17", "local:1,0", "local:", "local:1,x"};
    for (int i = 0; i < (int)(sizeof bad / sizeof *bad); i++)
        CHECK_MSG(ls_tplan_parse_cluster(bad[i], sh, nm, &local) == LS_EINVAL, "'%s' accepted", bad[i]);
}

/* Scratch bytes a fresh tiny model holds after one step of (B, T) with plan pl. */
static double measured_scratch(const ls_model_config *cfg, const uint8_t *pl, int pc, int B, int T) {
    ls_model *m;
    CHECK_EQ_INT(ls_model_init(&m, cfg, 7), LS_OK);
    int n = cfg->n_layer * LS_LIN_COUNT, *tok = malloc(sizeof(int) * B * T * 2), *tgt = tok + B * T;
    CHECK_EQ_INT(ls_model_set_precision(m, pl, n, pc), LS_OK);
    for (int i = 0; i < B * T; i++) tok[i] = i % 251, tgt[i] = (i * 7) % 251;
    ls_model_zero_grad(m);
    ls_model_forward(m, tok, tgt, B, T);
    ls_model_backward(m);
    double got = (double)ls_model_prec_scratch_bytes(m);
    ls_model_free(m);
    free(tok);
    return got;
}

/* A rank's memory: with every layer fp32, exactly fp32 weights, gradients and both AdamW
 * moments (16 bytes a parameter) and the model's own activation buffers; each low-precision
 * plan adds what the model's GEMM scratch grows to in a real step, at a batch smaller and
 * one larger than the layers' widths (the tiny model: QKV 64 -> 192, proj 64 -> 64, FC
 * 64 -> 256, its projection 256 -> 64). */
static void test_memory(void) {
    ls_model_config cfg;
    ls_model_config_named("tiny", &cfg);
    enum { NL = 2 * LS_LIN_COUNT };
    uint8_t fp32[NL] = {0}, pl[NL];
    double base = 16.0 * (double)ls_model_config_num_params(&cfg) + 4.0 * (double)ls_model_acts_floats(&cfg, 3, 20);
    CHECK_NEAR(ls_tplan_memory(&cfg, 3, 20, NULL, NL), base, 0);
    CHECK_NEAR(ls_tplan_memory(&cfg, 3, 20, fp32, NL), base, 0);
    ls_prec_ctx *c;
    CHECK_EQ_INT(ls_prec_ctx_new(&c), LS_OK);
    int bf16_kernel = !strncmp(ls_prec_kernel(c, LS_PREC_BF16), "onednn", 6);
    ls_prec_ctx_free(c);
    const int shapes[2][2] = {{1, 32}, {5, 64}};
    for (int k = 0; k < 2 * LS_LIN_COUNT + 4; k++) {
        memset(pl, LS_PREC_FP32, NL);
        const char *what = "int8 at one layer";
        if (k < LS_LIN_COUNT) { /* int8 at one layer of each kind */
            pl[k] = LS_PREC_INT8;
        } else if (k < 2 * LS_LIN_COUNT) { /* the same in the second block */
            pl[k] = LS_PREC_INT8;
        } else if (k == 2 * LS_LIN_COUNT) {
            what = "int8 at the FC layer and the last projection";
            pl[LS_LIN(0, LS_LIN_FC)] = pl[LS_LIN(1, LS_LIN_MPROJ)] = LS_PREC_INT8;
        } else if (k == 2 * LS_LIN_COUNT + 1) {
            what = "int8 everywhere";
            memset(pl, LS_PREC_INT8, NL);
        } else if (!bf16_kernel) {
            continue; /* emulated 16-bit formats round in fp32 buffers: not what the model counts */
        } else if (k == 2 * LS_LIN_COUNT + 2) {
            what = "bf16 everywhere";
            memset(pl, LS_PREC_BF16, NL);
        } else {
            what = "bf16 at QKV, int8 at the FC layer";
            pl[LS_LIN(0, LS_LIN_QKV)] = LS_PREC_BF16, pl[LS_LIN(1, LS_LIN_FC)] = LS_PREC_INT8;
        }
        for (int s = 0; s < 2; s++) {
            int B = shapes[s][0], T = shapes[s][1];
            double model = ls_tplan_memory(&cfg, B, T, pl, NL) - ls_tplan_memory(&cfg, B, T, NULL, NL);
            double got = measured_scratch(&cfg, pl, k & 1, B, T);
            CHECK_MSG(model == got, "%s (case %d), %d x %d tokens: modelled %.0f bytes of scratch, the step held %.0f",
                      what, k, B, T, model, got);
        }
    }
}

int main(void) {
    ls_model_set_threads(1);
    RUN(test_cluster_lists);
    RUN(test_replay_hand);
    RUN(test_predict_hand);
    RUN(test_expected_max);
    RUN(test_allocator_hand);
    RUN(test_allocator_brute);
    RUN(test_memory);
    RUN(test_indicator_f64);
    RUN(test_catalog_and_file);
    return TEST_RESULT();
}
