/* test_plan_bits.c - every non-empty --bits subset of {3,4,8,16} with every planner on two
 * catalog clusters, without and with a quality target: a plan uses only allowed widths and
 * passes ls_plan_evaluate, splitquant is never worse than a baseline that succeeds and meets
 * the target, and a subset that cannot fit fails with an infeasibility error naming the
 * shortfall (GB, or the quality reached), never an internal one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/plan.h"
#include "test.h"

static ls_plan_catalog *cat;

static void one_cluster(const char *name, int expect_min_ok) {
    ls_plan_cluster *cl;
    ls_plan_arch a;
    CHECK(ls_plan_cluster_load(cat, name, &cl) == LS_OK);
    CHECK(ls_plan_catalog_model(cat, cl->model, &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb), *pq = malloc(sizeof *pq);
    ls_plan_result *pl = malloc(sizeof *pl);
    const ls_plan_algo algos[] = {LS_PLAN_ALGO_UNIFORM, LS_PLAN_ALGO_ADABITS, LS_PLAN_ALGO_PIPEEDGE,
                                  LS_PLAN_ALGO_ILP, LS_PLAN_ALGO_SPLITQUANT};
    int n_ok = 0;
    for (int mq = 0; mq < 30; mq++) {
        int mask = mq % 15 + 1, qk = mq / 15; /* every subset without, then with the target bits:4 */
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){cl->batch, cl->prompt, cl->gen}) == LS_OK);
        CHECK(ls_plan_problem_set_quality(pb, qk ? (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}
                                                 : (ls_plan_qtarget){LS_PLAN_Q_NONE, 0}) == LS_OK);
        pb->bits_mask = mask;
        pb->time_limit_s = 0.05;
        double best_base = INFINITY;
        for (size_t t = 0; t < sizeof algos / sizeof *algos; t++) {
            int rc = ls_plan_solve(pb, algos[t], pl);
            const char *an = ls_plan_algo_name(algos[t]);
            if (rc == LS_OK) {
                for (int i = 0; i < a.n_layer; i++) {
                    int k = ls_plan_bits_index(pl->bits[i]);
                    CHECK_MSG(k >= 0 && (mask & (1 << k)), "%s mask %d: layer %d at %d bits", name, mask, i,
                              pl->bits[i]);
                }
                double obj = pl->objective;
                /* uniform and adabits choose widths by memory alone: their plans may miss the target */
                ls_plan_problem *ev = pb;
                if (algos[t] == LS_PLAN_ALGO_UNIFORM || algos[t] == LS_PLAN_ALGO_ADABITS) {
                    *pq = *pb;
                    pq->qmax = INFINITY;
                    ev = pq;
                }
                CHECK_MSG(ls_plan_evaluate(ev, pl) == LS_OK, "%s mask %d %s: %s", name, mask, an, ls_errmsg());
                CHECK_NEAR(pl->objective, obj, 1e-9 * obj);
                if (algos[t] == LS_PLAN_ALGO_SPLITQUANT) {
                    n_ok++;
                    CHECK_MSG(obj <= best_base * (1 + 1e-9), "%s mask %d: splitquant %g worse than a baseline %g",
                              name, mask, obj, best_base);
                } else if (algos[t] != LS_PLAN_ALGO_ILP && obj < best_base && pl->quality <= pb->qmax) {
                    best_base = obj;
                }
            } else {
                /* infeasible, named with the GB missing or over or the quality reached; the ILP
                 * may also run out of time */
                int timed = algos[t] == LS_PLAN_ALGO_ILP && rc == LS_ETIMEDOUT;
                const char *msg = ls_errmsg();
                CHECK_MSG(rc == LS_EINFEASIBLE || timed, "%s mask %d %s: rc %d: %s", name, mask, an, rc, msg);
                CHECK_MSG(timed || strstr(msg, "GB") || (qk && strstr(msg, "quality")), "%s mask %d q %d %s: %s", name,
                          mask, qk, an, msg);
                CHECK_MSG(!strstr(msg, "has bits") && !strstr(msg, "split exceeds"), "%s mask %d %s: %s", name, mask,
                          an, msg);
                /* splitquant fails only when no baseline found a plan either */
                if (algos[t] == LS_PLAN_ALGO_SPLITQUANT)
                    CHECK_MSG(!isfinite(best_base), "%s mask %d: splitquant infeasible, a baseline was not", name,
                              mask);
            }
        }
    }
    CHECK_MSG(n_ok >= expect_min_ok, "%s: %d subsets x targets planned", name, n_ok);
    free(pb), free(pq), free(pl);
    ls_plan_cluster_free(cl);
}

/* A stage's widths are not restricted to two adjacent ones: on one device of 6 layers with
 * memory budgets that force mixes, splitquant reaches the exhaustive optimum (all 4^6 bit
 * assignments x every micro-batch pair), including optima with three widths. */
static void stage_exact(const char *gpu) {
    ls_plan_cluster *cl;
    ls_plan_arch a;
    CHECK(ls_plan_cluster_load(cat, "llmpq-2", &cl) == LS_OK);
    CHECK(ls_plan_catalog_model(cat, "llama-2-7b", &a) == LS_OK);
    a.n_layer = 6;
    cl->n_dev = 1;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *sq = malloc(sizeof *sq), *bf = malloc(sizeof *bf);
    ls_plan_workload w = {16, 512, 8}; /* prefill-heavy: int8 tensor cores make 8 bits fastest */
    CHECK(ls_plan_catalog_gpu(cat, gpu, &cl->dev[0].gpu) == LS_OK);
    double lw16 = ls_plan_layer_weight_bytes(&a, 16), lw3 = ls_plan_layer_weight_bytes(&a, 3);
    double fixed = ls_plan_embed_bytes(&a) + ls_plan_head_bytes(&a) + ls_plan_workspace_bytes(&a, &w, 8, 8) +
                   a.n_layer * ls_plan_layer_kv_bytes(&a, &w);
    int n_cases = 0, n_mixed = 0;
    for (int f = 1; f < 6; f++) {
        /* memory for all layers at 3 bits plus f/16 of the way to all at 16 */
        cl->dev[0].usable_bytes = fixed + a.n_layer * (lw3 + (lw16 - lw3) * f / 16.0) + 1.0;
        for (int qk = 0; qk < 2; qk++) {
            CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
            CHECK(ls_plan_problem_set_quality(pb, qk ? (ls_plan_qtarget){LS_PLAN_Q_THETA, 0.05}
                                                     : (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
            int rb = ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, bf);
            int rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq);
            CHECK(rb == rs);
            if (rb || rs) continue;
            n_cases++;
            CHECK_MSG(sq->objective <= bf->objective * (1 + 1e-9), "f %d q %d: splitquant %.9g brute %.9g", f, qk,
                      sq->objective, bf->objective);
            /* the optimum mixes three widths, or two that are not adjacent */
            int cnt[4] = {0}, used = 0;
            for (int i = 0; i < a.n_layer; i++) cnt[ls_plan_bits_index(bf->bits[i])]++;
            for (int k = 0; k < 4; k++) used += cnt[k] > 0;
            n_mixed += used >= 3 || (cnt[0] && cnt[2] && !cnt[1]);
        }
    }
    CHECK(n_cases >= 8);
    CHECK_MSG(n_mixed >= 1, "%s: %d cases need a mix beyond two adjacent widths", gpu, n_mixed);
    free(pb), free(sq), free(bf);
    ls_plan_cluster_free(cl);
}

static void test_stage_exact(void) {
    stage_exact("A100-80G");
    stage_exact("T4-16G");
}

/* Two devices, five layers, memory binding on both: the widths of both stages (and the
 * quality moved between them) reach the exhaustive optimum. */
static void test_two_stage_exact(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/llmsys-plan-bits-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"two\",\"nodes\":["
          "{\"gpu\":\"A100-80G\",\"count\":1},{\"gpu\":\"T4-16G\",\"count\":1}]}",
          f);
    fclose(f);
    ls_plan_cluster *cl;
    int rc = ls_plan_cluster_load(cat, path, &cl);
    remove(path);
    CHECK(rc == LS_OK);
    if (rc) return;
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, "llama-2-7b", &a) == LS_OK);
    a.n_layer = 5;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *sq = malloc(sizeof *sq), *bf = malloc(sizeof *bf);
    ls_plan_workload w = {16, 512, 8};
    double lw16 = ls_plan_layer_weight_bytes(&a, 16), lw3 = ls_plan_layer_weight_bytes(&a, 3);
    double fixed = ls_plan_workspace_bytes(&a, &w, 8, 8) + 3 * ls_plan_layer_kv_bytes(&a, &w);
    int n_cases = 0;
    for (int fr = 1; fr < 6; fr++) {
        double lay = 3 * (lw3 + (lw16 - lw3) * fr / 16.0) + 1.0;
        cl->dev[0].usable_bytes = fixed + ls_plan_embed_bytes(&a) + lay;
        cl->dev[1].usable_bytes = fixed + ls_plan_head_bytes(&a) + lay;
        for (int qk = 0; qk < 2; qk++) {
            CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
            CHECK(ls_plan_problem_set_quality(pb, qk ? (ls_plan_qtarget){LS_PLAN_Q_THETA, 0.05}
                                                     : (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
            int rb = ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, bf), rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq);
            CHECK(rb == rs);
            if (rb || rs) continue;
            n_cases++;
            CHECK_MSG(sq->objective <= bf->objective * (1 + 1e-9), "fr %d q %d: splitquant %.9g brute %.9g", fr, qk,
                      sq->objective, bf->objective);
        }
    }
    CHECK(n_cases >= 8);
    free(pb), free(sq), free(bf);
    ls_plan_cluster_free(cl);
}

static void test_subsets(void) {
    one_cluster("llmpq-2", 12);
    one_cluster("llmpq-8", 12);
}

int main(void) {
    if (ls_plan_catalog_load(NULL, &cat) != LS_OK) {
        fprintf(stderr, "catalog: %s\n", ls_errmsg());
        return 1;
    }
    RUN(test_subsets);
    RUN(test_stage_exact);
    RUN(test_two_stage_exact);
    ls_plan_catalog_free(cat);
    return TEST_RESULT();
}
