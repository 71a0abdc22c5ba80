/* test_plan.c - the serving planner: cost and memory terms against hand-computed values,
 * plan validity for every algorithm, ILP and splitquant against brute force, indicators,
 * profiles and bad input (plan files: test_plan_file.c). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/plan.h"
#include "llmsys/safetensors.h"
#include "plan/internal.h"
#include "test.h"

static char tmpdir[256];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

static ls_plan_catalog *cat;

static ls_plan_arch test_arch(void) {
    ls_plan_arch a;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "test-1k");
    a.n_layer = 4, a.d_model = 1024, a.n_head = 8, a.n_kv_head = 8, a.d_ff = 4096;
    a.vocab = 1000, a.n_ctx = 4096, a.tied = 1;
    return a;
}

/* n_layer layers of a 70B-sized block (d 8192, 64 heads, d_ff 28672) on small unequal GPUs
 * (TINY3: a T4, a V100-16G and a P100-12G; TINY2: a T4 and an A10): memory binds, so the
 * optimum mixes bit widths and uneven stages, and the brute force can still enumerate it. */
static ls_plan_arch block70b(int n_layer) {
    ls_plan_arch a = test_arch();
    a.d_model = 8192, a.n_head = 64, a.n_kv_head = 64, a.d_ff = 28672, a.vocab = 32000, a.n_layer = n_layer;
    return a;
}
static const char *const TINY3 = "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"tiny3\",\"nodes\":["
                                 "{\"gpu\":\"T4\",\"count\":1},{\"gpu\":\"V100-16G\",\"count\":1},"
                                 "{\"gpu\":\"P100-12G\",\"count\":1}]}";
static const char *const TINY2 = "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"tiny2\",\"nodes\":["
                                 "{\"gpu\":\"T4\",\"count\":1},{\"gpu\":\"A10\",\"count\":1}]}";

/* Two T4s on n_node nodes (1 or 2) joined by a 12.5 GB/s, 20 us network; the caller frees it. */
static ls_plan_cluster *two_t4(int n_node) {
    ls_plan_cluster *cl = calloc(1, sizeof *cl);
    cl->n_dev = 2, cl->n_node = n_node;
    cl->inter_Bps = 12.5e9, cl->inter_lat_s = 20e-6;
    CHECK(ls_plan_catalog_gpu(cat, "t4", &cl->dev[0].gpu) == LS_OK);
    cl->dev[0].prof = -1;
    cl->dev[1] = cl->dev[0];
    cl->dev[1].node = n_node - 1;
    return cl;
}

/* ---------------------------------------------------------------- terms */

static void test_terms_one_layer(void) {
    ls_plan_arch a = test_arch();
    /* params: qkv 1024*3072 + proj 1024*1024 + fc/proj 2*1024*4096 */
    double n = 1024.0 * 3072 + 1024.0 * 1024 + 2.0 * 1024 * 4096;
    CHECK_NEAR(ls_plan_layer_params(&a), 12582912.0, 0);
    CHECK_NEAR(n, 12582912.0, 0);
    CHECK_NEAR(ls_plan_layer_weight_bytes(&a, 16), 25165824.0 + 12288, 0);
    CHECK_NEAR(ls_plan_layer_weight_bytes(&a, 4), 6291456.0 + 196608 + 12288, 0);
    CHECK_NEAR(ls_plan_layer_weight_bytes(&a, 3), 4718592.0 + 196608 + 12288, 0);
    ls_plan_workload w = {8, 512, 100};
    CHECK_NEAR(ls_plan_layer_kv_bytes(&a, &w), 2.0 * 8 * 612 * 1024 * 2, 0);
    CHECK_NEAR(ls_plan_usable_bytes(16e9), 13.27e9, 1);
    CHECK_NEAR(ls_plan_embed_bytes(&a), 1000.0 * 1024 * 2, 0);

    /* times on a one-T4 cluster, every term written out */
    ls_plan_cluster *cl = two_t4(2);
    double f16 = 65e12 * 0.55, bw = 320e9 * 0.8;
    double pre16 = 2.0 * 4 * 512 * n / f16 + 2.0 * 4 * 512 * 512 * 1024 / f16 + (25165824.0 + 12288) / bw + 30e-6;
    CHECK_NEAR(ls_plan_layer_prefill_s(&a, cl, 0, 16, 4, 512), pre16, 1e-12);
    /* 8 bits on T4: W8A8 on the int8 tensor cores, no dequantization */
    double w8 = n + (1024 + 2048 + 8192) * 2.0 + 12288;
    double pre8 = 2.0 * 4 * 512 * n / (130e12 * 0.55) + 2.0 * 4 * 512 * 512 * 1024 / f16 + w8 / bw + 30e-6;
    CHECK_NEAR(ls_plan_layer_prefill_s(&a, cl, 0, 8, 4, 512), pre8, 1e-12);
    double ctx = 562;
    double w4 = 6291456.0 + 196608 + 12288;
    double dec4 = (w4 + 4 * ctx * 2 * 1024 * 2.0) / bw + 2.0 * 4 * n / f16 + 4.0 * 4 * ctx * 1024 / f16 +
                  n * 4 / (65e12 / 8) + 30e-6;
    CHECK_NEAR(ls_plan_layer_decode_s(&a, cl, 0, 4, 4, ctx), dec4, 1e-12);
    CHECK_NEAR(ls_plan_link_s(cl, 0, 1, 1e6), 20e-6 + 1e6 / 12.5e9, 1e-15);
    cl->dev[1].node = 0;
    CHECK_NEAR(ls_plan_link_s(cl, 0, 1, 1e6), 10e-6 + 1e6 / 12e9, 1e-15);
    /* decode is memory-bound: fewer bits are faster, prefill is not */
    CHECK(ls_plan_layer_decode_s(&a, cl, 0, 4, 1, ctx) < ls_plan_layer_decode_s(&a, cl, 0, 16, 1, ctx));
    free(cl);
}

/* Stage memory written out by hand for a two-stage plan (test_arch, batch 8, prompt 512, gen
 * 100): weights per layer at its bits, the KV cache of its layers, the embedding on the
 * first stage, the LM head on the last, and the activation workspace, whose prefill part
 * holds the attention scores mb x heads x prompt^2 in fp16. */
static void test_stage_memory(void) {
    ls_plan_arch a = test_arch();
    ls_plan_cluster *cl = two_t4(1);
    cl->dev[0].usable_bytes = cl->dev[1].usable_bytes = 1e12;
    ls_plan_workload w = {8, 512, 100};
    /* workspace, micro-batches 4 (prefill) and 8 (decode) */
    double pre_act = 4.0 * 512 * (4 * 1024 + 4096) * 2; /* 33554432 */
    double pre_att = 4.0 * 8 * 512 * 512 * 2;           /* 16777216: the attention scores */
    double dec_act = 8.0 * (4 * 1024 + 4096) * 2 + 8.0 * 8 * 612 * 2;
    double logits = 8.0 * 1000 * 4;
    CHECK(pre_act + pre_att > dec_act);
    double ws = pre_act + pre_att + logits;
    CHECK_NEAR(ws, 50363648.0, 0);
    CHECK_NEAR(ls_plan_workspace_bytes(&a, &w, 4, 8), ws, 0);
    /* a decode-bound workload: prompt 1, the decode workspace (scores over the context) wins */
    ls_plan_workload w1 = {8, 1, 100};
    CHECK_NEAR(ls_plan_workspace_bytes(&a, &w1, 1, 8), 8.0 * 8192 * 2 + 8.0 * 8 * 101 * 2 + logits, 0);
    double kv = 2.0 * 8 * 612 * 1024 * 2;
    double w16 = 25165824.0 + 12288, w4 = 6291456.0 + 196608 + 12288,
           w8 = 12582912.0 + (1024 + 2048 + 8192) * 2.0 + 12288;
    double embed = 1000.0 * 1024 * 2, head = 1000.0 * 1024 * 2 + 2.0 * 1024 * 2;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    pl->n_stage = 2;
    pl->dev[0] = 0;
    pl->dev[1] = 1;
    pl->begin[0] = 0;
    pl->begin[1] = 2;
    pl->begin[2] = 4;
    pl->bits[0] = pl->bits[1] = 16;
    pl->bits[2] = 4;
    pl->bits[3] = 8;
    pl->mb_prefill = 4;
    pl->mb_decode = 8;
    CHECK_MSG(ls_plan_evaluate(pb, pl) == LS_OK, "%s", ls_errmsg());
    CHECK_NEAR(pl->stage_mem[0], ws + 2 * w16 + 2 * kv + embed, 0.5);
    CHECK_NEAR(pl->stage_mem[1], ws + w4 + w8 + 2 * kv + head, 0.5);
    /* one stage with the tied head: one copy of the matrix, plus the final norm */
    pl->n_stage = 1;
    pl->begin[1] = 4;
    CHECK_MSG(ls_plan_evaluate(pb, pl) == LS_OK, "%s", ls_errmsg());
    CHECK_NEAR(pl->stage_mem[0], ws + 2 * w16 + w4 + w8 + 4 * kv + embed + 2.0 * 1024 * 2, 0.5);
    free(pb);
    free(pl);
    free(cl);
}

/* ---------------------------------------------------------------- validity */

static void check_valid(const ls_plan_problem *pb, const ls_plan_result *pl, const char *what) {
    int L = pb->arch->n_layer;
    int seen[LS_PLAN_MAX_LAYER] = {0};
    CHECK_MSG(pl->begin[0] == 0 && pl->begin[pl->n_stage] == L, "%s: coverage", what);
    for (int s = 0; s < pl->n_stage; s++) {
        CHECK_MSG(pl->begin[s + 1] > pl->begin[s], "%s: stage %d empty", what, s);
        for (int i = pl->begin[s]; i < pl->begin[s + 1]; i++) seen[i]++;
        CHECK_MSG(pl->stage_mem[s] <= pb->cl->dev[pl->dev[s]].usable_bytes, "%s: stage %d memory %.3g > %.3g", what, s,
                  pl->stage_mem[s], pb->cl->dev[pl->dev[s]].usable_bytes);
        for (int t = 0; t < s; t++) CHECK_MSG(pl->dev[t] != pl->dev[s], "%s: device repeated", what);
    }
    for (int i = 0; i < L; i++) {
        CHECK_MSG(seen[i] == 1, "%s: layer %d held %d times", what, i, seen[i]);
        int k = ls_plan_bits_index(pl->bits[i]);
        CHECK_MSG(k >= 0 && (pb->bits_mask & (1 << k)), "%s: layer %d bits %d", what, i, pl->bits[i]);
    }
    CHECK_MSG(pl->quality <= pb->qmax, "%s: quality %.4g > %.4g", what, pl->quality, pb->qmax);
    /* devices of one node stay adjacent in the pipeline */
    for (int s = 1; s + 1 < pl->n_stage; s++) {
        int n0 = pb->cl->dev[pl->dev[s - 1]].node, n1 = pb->cl->dev[pl->dev[s]].node,
            n2 = pb->cl->dev[pl->dev[s + 1]].node;
        CHECK_MSG(!(n0 == n2 && n1 != n0), "%s: node split in the pipeline", what);
    }
    ls_plan_result copy = *pl;
    CHECK_MSG(ls_plan_evaluate(pb, &copy) == LS_OK, "%s: evaluate: %s", what, ls_errmsg());
    CHECK_NEAR(copy.objective, pl->objective, 1e-9 * pl->objective);
}

static void test_plans_valid(void) {
    const char *clusters[] = {"llmpq-2", "llmpq-4", "llmpq-10", "demo-70b", "mixed-32b"};
    for (int c = 0; c < 5; c++) {
        ls_plan_cluster *cl;
        ls_plan_arch a;
        CHECK(ls_plan_cluster_load(cat, clusters[c], &cl) == LS_OK);
        CHECK(ls_plan_catalog_model(cat, cl->model, &a) == LS_OK);
        ls_plan_problem *pb = malloc(sizeof *pb);
        ls_plan_result *pl = malloc(sizeof *pl);
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){cl->batch, cl->prompt, cl->gen}) == LS_OK);
        CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
        double sq = 0, pe = 0;
        for (int al = LS_PLAN_ALGO_SPLITQUANT; al <= LS_PLAN_ALGO_ADABITS; al++) {
            if (al == LS_PLAN_ALGO_ILP && cl->n_dev > 4) continue;
            pb->time_limit_s = 2;
            int rc = ls_plan_solve(pb, (ls_plan_algo)al, pl);
            if (rc == LS_EINFEASIBLE && (al == LS_PLAN_ALGO_UNIFORM || al == LS_PLAN_ALGO_ADABITS)) continue;
            CHECK_MSG(rc == LS_OK, "%s %s: %s", clusters[c], ls_plan_algo_name((ls_plan_algo)al), ls_errmsg());
            if (rc) continue;
            char what[64];
            snprintf(what, sizeof what, "%s/%s", clusters[c], ls_plan_algo_name((ls_plan_algo)al));
            if (al == LS_PLAN_ALGO_ADABITS || al == LS_PLAN_ALGO_UNIFORM) {
                /* baselines ignore the quality target by definition */
                ls_plan_problem q = *pb;
                q.qmax = INFINITY;
                check_valid(&q, pl, what);
            } else {
                check_valid(pb, pl, what);
            }
            if (al == LS_PLAN_ALGO_SPLITQUANT) sq = pl->objective;
            if (al == LS_PLAN_ALGO_PIPEEDGE) pe = pl->objective;
        }
        /* PipeEdge's space (one width, one micro-batch) is inside splitquant's */
        CHECK_MSG(sq <= pe * 1.02, "%s: splitquant %.4g worse than pipeedge %.4g", clusters[c], sq, pe);
        free(pb);
        free(pl);
        ls_plan_cluster_free(cl);
    }
}

/* On every catalog cluster, at the uniform plan's quality (bits:4 where the even split does
 * not fit), splitquant is at least as good as every baseline that meets that target. */
static void test_never_worse_than_baselines(void) {
    char **names;
    int n;
    CHECK(ls_plan_catalog_clusters(cat, &names, &n) == LS_OK);
    CHECK(n >= 15);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = malloc(sizeof *pl * 4);
    for (int c = 0; c < n; c++) {
        ls_plan_cluster *cl;
        ls_plan_arch a;
        CHECK(ls_plan_cluster_load(cat, names[c], &cl) == LS_OK);
        CHECK(ls_plan_catalog_model(cat, cl->model, &a) == LS_OK);
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){cl->batch, cl->prompt, cl->gen}) == LS_OK);
        if (ls_plan_solve(pb, LS_PLAN_ALGO_UNIFORM, &pl[0]) == LS_OK) {
            pb->qmax = pl[0].quality * (1 + 1e-9);
        } else {
            CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
            pl[0].objective = INFINITY;
        }
        int ra = ls_plan_solve(pb, LS_PLAN_ALGO_ADABITS, &pl[1]);
        int rp = ls_plan_solve(pb, LS_PLAN_ALGO_PIPEEDGE, &pl[2]);
        int rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, &pl[3]);
        CHECK_MSG(rs == LS_OK, "%s: splitquant: %s", names[c], ls_errmsg());
        if (ra != LS_OK || pl[1].quality > pb->qmax) pl[1].objective = INFINITY;
        if (rp != LS_OK) pl[2].objective = INFINITY;
        for (int t = 0; rs == LS_OK && t < 3; t++)
            CHECK_MSG(pl[3].objective <= pl[t].objective * (1 + 1e-9), "%s: splitquant %.6g worse than %s %.6g",
                      names[c], pl[3].objective,
                      t == 0   ? "uniform"
                      : t == 1 ? "adabits"
                               : "pipeedge",
                      pl[t].objective);
        ls_plan_cluster_free(cl);
    }
    free(pb);
    free(pl);
    ls_plan_names_free(names, n);
}

/* The baselines' own rules on llmpq-2 (3 T4s, then a V100; 48 layers; batch 30): one
 * micro-batch of ceil(30 / 4) = 8 for both phases; uniform splits the layers evenly at one
 * width, the highest that fits, whatever the quality target; AdaBits splits them in
 * proportion to each device's usable memory, rounded to the nearest layer. */
static void test_baselines(void) {
    ls_plan_cluster *cl;
    ls_plan_arch a;
    CHECK(ls_plan_cluster_load(cat, "llmpq-2", &cl) == LS_OK);
    CHECK(ls_plan_catalog_model(cat, "opt-30b", &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = malloc(sizeof *pl);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){30, 512, 100}) == LS_OK);
    CHECK_EQ_INT(cl->n_dev, 4);
    pb->qmax = 0; /* no plan below 16 bits meets it, and 16 bits do not fit */
    CHECK_EQ_INT(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl), LS_EINFEASIBLE);
    CHECK_MSG(ls_plan_solve(pb, LS_PLAN_ALGO_UNIFORM, pl) == LS_OK, "%s", ls_errmsg());
    CHECK(pl->n_stage == 4 && pl->mb_prefill == 8 && pl->mb_decode == 8);
    for (int j = 0; j <= 4; j++) CHECK_EQ_INT(pl->begin[j], 12 * j);
    for (int i = 1; i < 48; i++) CHECK_EQ_INT(pl->bits[i], pl->bits[0]);
    int uni = pl->bits[0];
    CHECK(uni == 3 || uni == 4 || uni == 8);
    fprintf(stderr, "  uniform: %d bits\n", uni);
    /* the next width up does not fit the even split */
    ls_plan_result *up = malloc(sizeof *up);
    *up = *pl;
    static const int next_width[17] = {[3] = 4, [4] = 8, [8] = 16};
    for (int i = 0; i < 48; i++) up->bits[i] = (unsigned char)next_width[uni];
    ls_plan_problem q = *pb;
    q.qmax = INFINITY;
    CHECK_EQ_INT(ls_plan_evaluate(&q, up), LS_EINFEASIBLE);
    free(up);
    pb->qmax = INFINITY;
    CHECK_MSG(ls_plan_solve(pb, LS_PLAN_ALGO_ADABITS, pl) == LS_OK, "%s", ls_errmsg());
    CHECK(pl->n_stage == 4 && pl->mb_prefill == 8 && pl->mb_decode == 8);
    double tot = 0, acc = 0;
    for (int j = 0; j < 4; j++) tot += cl->dev[j].usable_bytes;
    for (int j = 0; j < 4; j++) {
        acc += cl->dev[j].usable_bytes;
        int want = j == 3 ? 48 : (int)lround(48 * acc / tot);
        CHECK_MSG(pl->begin[j + 1] == want, "AdaBits stage %d ends at %d, want %d", j, pl->begin[j + 1], want);
    }
    free(pb);
    free(pl);
    ls_plan_cluster_free(cl);
}

/* llmpq-3 (OPT-30B on 3xP100 + V100): a hand-built plan of the kind the exact ILP proves
 * optimal there -- 30/6/6/6 layers, three layers of the V100 stage at 3 bits so that two
 * P100 stages can run 8 bits, micro-batches 1/8 -- and splitquant must come within 0.5% of
 * it (its threshold search once stopped at its own incumbent and ended 1.2% above). */
static void test_llmpq3_near_ilp(void) {
    ls_plan_cluster *cl;
    ls_plan_arch a;
    CHECK(ls_plan_cluster_load(cat, "llmpq-3", &cl) == LS_OK);
    CHECK(ls_plan_catalog_model(cat, cl->model, &a) == LS_OK);
    CHECK(a.n_layer == 48 && cl->n_dev == 4 && !strcmp(cl->dev[3].name, "V100-32G"));
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *ref = calloc(1, sizeof *ref), *sq = malloc(sizeof *sq);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){cl->batch, cl->prompt, cl->gen}) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
    ref->n_stage = 4;
    ref->mb_prefill = 1, ref->mb_decode = 8;
    const int dev[4] = {3, 0, 1, 2}, begin[5] = {0, 30, 36, 42, 48};
    for (int j = 0; j < 4; j++) ref->dev[j] = dev[j];
    for (int j = 0; j <= 4; j++) ref->begin[j] = begin[j];
    for (int i = 0; i < 48; i++) ref->bits[i] = (i >= 27 && i < 30) ? 3 : (i >= 30 && i < 42) || i == 47 ? 8 : 4;
    CHECK_MSG(ls_plan_evaluate(pb, ref) == LS_OK, "reference plan: %s", ls_errmsg());
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq) == LS_OK);
    CHECK_MSG(sq->objective <= ref->objective * 1.005, "splitquant %.6f, reference %.6f", sq->objective,
              ref->objective);
    free(pb), free(ref), free(sq);
    ls_plan_cluster_free(cl);
}

/* ---------------------------------------------------------------- brute force */

/* A cluster from its JSON text (through a file, as users give it); NULL on failure. */
static ls_plan_cluster *tiny_cluster(const char *cluster_json) {
    char path[512];
    tmp_path(path, sizeof path, "tiny-cluster.json");
    write_text(path, cluster_json);
    ls_plan_cluster *cl = NULL;
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_OK);
    return cl;
}

static void brute_case(const char *cluster_json, ls_plan_arch a, ls_plan_workload w, ls_plan_qtarget q) {
    ls_plan_cluster *cl = tiny_cluster(cluster_json);
    if (!cl) return;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *bf = malloc(sizeof *bf), *il = malloc(sizeof *il), *sq = malloc(sizeof *sq);
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, q) == LS_OK);
    pb->time_limit_s = 20;
    int rb = ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, bf);
    int ri = ls_plan_solve(pb, LS_PLAN_ALGO_ILP, il);
    int rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq);
    CHECK_MSG(rb == LS_OK && ri == LS_OK && rs == LS_OK, "brute %d ilp %d sq %d: %s", rb, ri, rs, ls_errmsg());
    if (rb == LS_OK && ri == LS_OK && rs == LS_OK) {
        check_valid(pb, il, "ilp");
        check_valid(pb, sq, "splitquant");
        CHECK(il->ilp_optimal);
        CHECK_NEAR(il->objective, bf->objective, 1e-6 * bf->objective);
        CHECK_MSG(sq->objective <= bf->objective * 1.01, "splitquant %.6g vs optimum %.6g", sq->objective,
                  bf->objective);
        CHECK(sq->objective >= bf->objective * (1 - 1e-9));
        /* the brute force must have used mixed precision for the case to mean something */
        int mixed = 0;
        for (int i = 1; i < a.n_layer; i++) mixed |= bf->bits[i] != bf->bits[0];
        fprintf(stderr, "  brute %.6g s, ilp %.6g s, splitquant %.6g s, mixed bits %d\n", bf->objective, il->objective,
                sq->objective, mixed);
    }
    free(pb);
    free(bf);
    free(il);
    free(sq);
    ls_plan_cluster_free(cl);
}

static void test_agree_brute_force(void) {
    /* 4 layers of a 70B-sized block on three small unequal GPUs: memory binds, so the
     * optimum mixes bit widths and uneven stages */
    ls_plan_arch a = block70b(4);
    brute_case(TINY3, a, (ls_plan_workload){96, 1024, 64}, (ls_plan_qtarget){LS_PLAN_Q_BITS, 8});
    brute_case(TINY3, a, (ls_plan_workload){96, 1024, 64}, (ls_plan_qtarget){LS_PLAN_Q_THETA, 2.0});
    a.n_layer = 6;
    brute_case(TINY2, a, (ls_plan_workload){64, 1024, 32}, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4});
}

/* splitquant's DP where a weight on quality trades against time and memory binds: on two
 * and three small GPUs (5-6 layers of a 70B-sized block, the default indicator, explicit
 * usable memory), the DP alone (ls_plan_splitquant with no incumbent, the screening the ILP
 * also runs) and splitquant as ls_plan_solve runs it (seeded by the baselines) must
 * reach the brute force's optimum, both priced by ls_plan_evaluate (relative 1e-9). Its
 * labels must keep the quality: a label that is faster but of worse quality does not
 * dominate, and the partial objective that ranks and keeps the best labels includes
 * theta * Q (without either, the DP keeps fast low-quality prefixes, and polishing the
 * widths inside their stages cannot move the stage boundaries back). */
static void test_dp_quality_brute(void) {
    ls_plan_arch a = block70b(6);
    static const struct {
        int n_dev;
        ls_plan_workload w;
        double gb[3]; /* usable GB per device, in the cluster's order */
        double theta;
    } cases[] = {
        {2, {16, 1024, 32}, {4.35, 4.20}, 0.8},
        {2, {2, 1024, 8}, {4.40, 2.00}, 6},
        {3, {8, 512, 32}, {6.95, 1.45, 6.85}, 0.2},
        {3, {8, 1024, 8}, {4.45, 2.40, 3.90}, 1.9},
    };
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *bf = malloc(sizeof *bf), *dp = malloc(sizeof *dp), *sq = malloc(sizeof *sq),
                   *fast = malloc(sizeof *fast);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int N = cases[c].n_dev;
        ls_plan_cluster *cl = tiny_cluster(N == 2 ? TINY2 : TINY3);
        if (!cl) continue;
        for (int d = 0; d < N; d++) cl->dev[d].usable_bytes = cases[c].gb[d] * 1e9;
        a.n_layer = N == 2 ? 6 : 5;
        CHECK(ls_plan_problem_init(pb, &a, cl, cases[c].w) == LS_OK);
        CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_THETA, cases[c].theta}) == LS_OK);
        char what[64];
        snprintf(what, sizeof what, "case %d (theta %g)", (int)c, cases[c].theta);
        int rb = ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, bf);
        int rd = ls_plan_splitquant(pb, dp, 0, NULL, NULL, NULL, NULL, INFINITY);
        int rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq);
        CHECK_MSG(rb == LS_OK && rd == LS_OK && rs == LS_OK, "%s: brute %d dp %d splitquant %d: %s", what, rb, rd, rs,
                  ls_errmsg());
        if (rb == LS_OK && rd == LS_OK && rs == LS_OK) {
            check_valid(pb, dp, what);
            check_valid(pb, sq, what);
            CHECK_MSG(fabs(dp->objective - bf->objective) <= 1e-9 * bf->objective, "%s: DP %.9g, brute force %.9g",
                      what, dp->objective, bf->objective);
            CHECK_MSG(fabs(sq->objective - bf->objective) <= 1e-9 * bf->objective,
                      "%s: splitquant %.9g, brute force %.9g", what, sq->objective, bf->objective);
            /* the weight on quality moves the optimum: the fastest plan (theta 0) is another one */
            double theta = pb->theta;
            pb->theta = 0;
            CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, fast) == LS_OK);
            pb->theta = theta;
            CHECK(ls_plan_evaluate(pb, fast) == LS_OK);
            CHECK_MSG(fast->objective > bf->objective * (1 + 1e-9), "%s: the fastest plan %.9g is the optimum %.9g",
                      what, fast->objective, bf->objective);
            fprintf(stderr, "  %s: optimum %.6g s (theta * Q %.3g s; the fastest plan %.6g s), DP %.6g s\n", what,
                    bf->objective, pb->theta * bf->quality, fast->objective, dp->objective);
        }
        ls_plan_cluster_free(cl);
    }
    free(pb), free(bf), free(dp), free(sq), free(fast);
}

/* The ILP against the brute force on pb (the brute force's plan left in bf), then the exact
 * search alone, without a cutoff, on the optimum's candidate: its least is the optimum (with a
 * plan at it when exact; only a lower bound where it can only bound the quality). Returns 1
 * when both solvers found a plan, 0 otherwise (both failing alike passes). */
static int check_brute_ilp_exact(ls_plan_problem *pb, ls_plan_result *bf, int exact, double tol, const char *what) {
    ls_plan_result *il = malloc(sizeof *il);
    int rb = ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, bf), ri = ls_plan_solve(pb, LS_PLAN_ALGO_ILP, il), both = 0;
    CHECK_MSG(rb == ri, "%s: brute %d ilp %d: %s", what, rb, ri, ls_errmsg());
    if (rb == LS_OK && ri == LS_OK) {
        both = 1;
        check_valid(pb, il, what);
        CHECK_MSG(il->ilp_optimal, "%s: the ILP did not prove its plan", what);
        CHECK_NEAR(il->objective, bf->objective, tol * bf->objective);
        ls_plan_cand_cost cc;
        ls_plan_exact_result *ex = malloc(sizeof *ex);
        CHECK(ls_plan_cand_cost_init(pb, bf->dev, bf->mb_prefill, bf->mb_decode, &cc) == LS_OK);
        CHECK(ls_plan_exact(pb, &cc, INFINITY, ls_now() + 60, ls_now, ex) == LS_OK);
        CHECK_MSG(ex->done && ex->lb <= bf->objective * (1 + 1e-9), "%s: exact search %.9g above the optimum %.9g",
                  what, ex->lb, bf->objective);
        if (exact)
            CHECK_MSG(ex->has_plan && fabs(ex->lb - bf->objective) <= 1e-9 * bf->objective,
                      "%s: exact search %.9g, brute force %.9g", what, ex->lb, bf->objective);
        ls_plan_cand_cost_free(&cc);
        free(ex);
    }
    free(il);
    return both;
}

/* The exact candidate search (exact.c) that closes ILP candidates, against brute force on
 * tiny cases with indicators it prices exactly (per-layer scale times a width term) and
 * ones where it only bounds a stage's quality (random, not ordered by gains): the ILP with
 * it must still reach the brute-force optimum and prove it. */
static void test_exact_random_brute(void) {
    ls_plan_arch a = block70b(5);
    ls_plan_cluster *cl = tiny_cluster(TINY3);
    if (!cl) return;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *bf = malloc(sizeof *bf);
    ls_rng r;
    ls_rng_seed(&r, 7);
    for (int trial = 0; trial < 8; trial++) {
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){96, 1024, 64}) == LS_OK);
        for (int i = 0; i < a.n_layer; i++) {
            double s = 0.5 + ls_rng_uniform(&r);
            for (int k = 0; k < LS_PLAN_NBITS; k++) {
                double base = 1.0 / ((1 << (ls_plan_bits[k] - 1)) - 1.0);
                /* odd trials: widths scaled per layer and width at random (no gains order) */
                pb->omega[i * LS_PLAN_NBITS + k] = s * base * base * (trial & 1 ? 0.3 + ls_rng_uniform(&r) : 1);
            }
        }
        /* bits:16 makes the quality target tiny against a 3-bit layer's omega (the exact
         * search's quality grid must not overflow) */
        ls_plan_qtarget q = trial % 4 == 2 ? (ls_plan_qtarget){LS_PLAN_Q_THETA, 0.5 + trial}
                                           : (ls_plan_qtarget){LS_PLAN_Q_BITS, trial % 4 == 3 ? 16
                                                                               : trial % 4    ? 8
                                                                                              : 4};
        CHECK(ls_plan_problem_set_quality(pb, q) == LS_OK);
        pb->time_limit_s = 20;
        char what[32];
        snprintf(what, sizeof what, "trial %d", trial);
        check_brute_ilp_exact(pb, bf, !(trial & 1), 1e-6, what);
    }
    free(pb);
    free(bf);
    ls_plan_cluster_free(cl);
}

/* One candidate's MIP alone: proven optimal, its plan priced by the MIP exactly as
 * ls_plan_evaluate prices it, and (optimum finite) at the optimum. */
static void mip_alone(const ls_plan_problem *pb, const int *order, int mb_pre, int mb_dec, double optimum,
                      const char *what) {
    ls_plan_cand_cost cc;
    ls_plan_result *pl = malloc(sizeof *pl);
    int optimal = 0;
    double mip = NAN;
    CHECK(ls_plan_cand_cost_init(pb, order, mb_pre, mb_dec, &cc) == LS_OK);
    int rc = ls_plan_ilp_candidate(pb, &cc, 20, pl, &optimal, &mip);
    CHECK_MSG(rc == LS_OK || (rc == LS_EINFEASIBLE && isnan(optimum)), "%s: the MIP alone: %s", what, ls_errmsg());
    if (rc == LS_OK) {
        CHECK_MSG(optimal, "%s: the MIP alone did not prove its plan", what);
        CHECK_MSG(fabs(mip - pl->objective) <= 1e-6 * pl->objective,
                  "%s: the MIP priced its plan at %.9g, it costs %.9g", what, mip, pl->objective);
        if (!isnan(optimum))
            CHECK_MSG(fabs(pl->objective - optimum) <= 1e-6 * optimum, "%s: the MIP alone %.9g, brute force %.9g", what,
                      pl->objective, optimum);
    }
    ls_plan_cand_cost_free(&cc);
    free(pl);
}

/* The MIP's own rows (ilp.c) where CBC must solve candidates: indicators with no gains
 * order (the exact search then only bounds a stage's quality and closes no candidate with a
 * plan) on three small GPUs with 15-21% of their memory usable; batch 4, so the decode
 * micro-batch is 2 and m_d = 2 < 3 stages: a decode round costs the sum of the stages'
 * decode times (the row R >= sum_j D_j, the stages' link and head times in its right-hand
 * side). Trials with a weight on quality (theta) where memory binds (twice the memory gives
 * a better optimum), and with a quality target that binds (without it the optimum is
 * faster). The ILP must prove the brute force's optimum with a plan that fits memory and
 * meets the target (check_brute_ilp_exact). */
static void test_ilp_rows_brute(void) {
    ls_plan_arch a = block70b(5);
    ls_plan_cluster *cl = tiny_cluster(TINY3);
    if (!cl) return;
    double cap[3];
    for (int d = 0; d < 3; d++) cap[d] = cl->dev[d].usable_bytes;
    static const struct {
        int seed;     /* of the indicator */
        double share; /* of each device's usable memory */
        double theta; /* the weight on quality, or 0 and */
        double qfrac; /* the target: this fraction of the indicator of all layers at 4 bits */
    } trials[] = {{1, 0.15, 3, 0},   {2, 0.18, 10, 0},  {3, 0.21, 3, 0},
                  {1, 0.18, 0, 0.8}, {2, 0.21, 0, 0.5}, {3, 0.18, 0, 1.1}};
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *bf = malloc(sizeof *bf), *rx = malloc(sizeof *rx);
    int n_sum = 0;
    for (int t = 0; t < (int)(sizeof trials / sizeof *trials); t++) {
        for (int d = 0; d < 3; d++) cl->dev[d].usable_bytes = trials[t].share * cap[d];
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){4, 1024, 64}) == LS_OK);
        ls_rng r;
        ls_rng_seed(&r, trials[t].seed);
        double q4 = 0; /* all layers at 4 bits */
        for (int i = 0; i < a.n_layer; i++) {
            double s = 0.5 + ls_rng_uniform(&r);
            for (int k = 0; k < LS_PLAN_NBITS; k++) {
                double base = 1.0 / ((1 << (ls_plan_bits[k] - 1)) - 1.0);
                pb->omega[i * LS_PLAN_NBITS + k] = s * base * base * (0.3 + ls_rng_uniform(&r));
            }
            q4 += pb->omega[i * LS_PLAN_NBITS + ls_plan_bits_index(4)];
        }
        int weigh = trials[t].theta > 0;
        CHECK(ls_plan_problem_set_quality(pb, weigh ? (ls_plan_qtarget){LS_PLAN_Q_THETA, trials[t].theta}
                                                    : (ls_plan_qtarget){LS_PLAN_Q_MAX, trials[t].qfrac * q4}) == LS_OK);
        pb->time_limit_s = 20;
        char what[32];
        snprintf(what, sizeof what, "rows trial %d", t);
        if (!check_brute_ilp_exact(pb, bf, 0, 1e-6, what)) {
            CHECK_MSG(0, "%s: no plan: %s", what, ls_errmsg());
            continue;
        }
        /* the MIP alone on the optimum's candidate (no start from the DP, no cutoff): it must
         * find and prove the optimum itself, and price its plan exactly */
        mip_alone(pb, bf->dev, bf->mb_prefill, bf->mb_decode, bf->objective, what);
        double sumD = 0, maxD = 0;
        for (int j = 0; j < bf->n_stage; j++) {
            sumD += bf->stage_decode_s[j];
            if (bf->stage_decode_s[j] > maxD) maxD = bf->stage_decode_s[j];
        }
        int md = (pb->wl.batch + bf->mb_decode - 1) / bf->mb_decode;
        n_sum += md < 3 && sumD > md * maxD;
        /* the constraint the trial is about binds: relaxed, the brute force finds a better plan */
        if (weigh)
            for (int d = 0; d < 3; d++) cl->dev[d].usable_bytes *= 2;
        else
            pb->qmax = INFINITY;
        CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_BRUTE, rx) == LS_OK);
        CHECK_MSG(rx->objective < bf->objective * (1 - 1e-9), "%s: the %s does not bind (%.9g relaxed, %.9g)", what,
                  weigh ? "memory" : "quality target", rx->objective, bf->objective);
        fprintf(stderr, "  %s: optimum %.6g s (with %s relaxed %.6g s), m_d %d, decode round %s\n", what, bf->objective,
                weigh ? "memory" : "the target", rx->objective, md,
                sumD > md * maxD ? "the sum of the stages" : "m_d x the slowest");
    }
    CHECK_MSG(n_sum > 0, "no optimum where a decode round is the sum of the stages: the case means nothing");
    /* batch 5: the prefill micro-batch of 2 runs 3 rounds, the last one short; every candidate */
    for (int d = 0; d < 3; d++) cl->dev[d].usable_bytes = 0.21 * cap[d];
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){5, 1024, 64}) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_THETA, 3}) == LS_OK);
    int orders[6][LS_PLAN_MAX_DEV], mbs[8][2], no, nm;
    ls_plan_orders(cl, 6, orders, &no);
    ls_plan_microbatches(pb, 3, mbs, &nm);
    CHECK(no >= 1 && nm == 2 && mbs[1][0] == 2);
    for (int o = 0; o < no; o++)
        for (int q = 0; q < nm; q++) mip_alone(pb, orders[o], mbs[q][0], mbs[q][1], NAN, "batch 5");
    free(pb), free(bf), free(rx);
    ls_plan_cluster_free(cl);
}

/* The exact search never cuts off a known plan: on catalog clusters, each candidate's
 * screening plan (splitquant's DP) within 0.3% of the best, with the cutoff just above it,
 * must be found or beaten, and the search must finish on these sizes (quality no worse
 * than all layers at 4 bits, as the bench's target on these clusters). */
static void test_exact_keeps_known_plans(void) {
    const char *names[] = {"llmpq-2", "llmpq-6", "llmpq-7"};
    for (int c = 0; c < 3; c++) {
        ls_plan_cluster *cl;
        ls_plan_arch arch;
        CHECK(ls_plan_cluster_load(cat, names[c], &cl) == LS_OK);
        if (!cl) continue;
        CHECK(ls_plan_catalog_model(cat, cl->model, &arch) == LS_OK);
        ls_plan_problem *pb = malloc(sizeof *pb);
        CHECK(ls_plan_problem_init(pb, &arch, cl, (ls_plan_workload){32, 512, 100}) == LS_OK);
        CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
        int orders[24][LS_PLAN_MAX_DEV], mbs[64][2], no, nm, co[24 * 64], cm[24 * 64], nc = 0;
        ls_plan_orders(cl, 24, orders, &no);
        ls_plan_microbatches(pb, cl->n_dev, mbs, &nm);
        ls_plan_result *cp = malloc(sizeof *cp * (size_t)(no * nm)), tmp;
        ls_plan_exact_result *ex = malloc(sizeof *ex);
        CHECK(ls_plan_splitquant(pb, &tmp, 1, co, cm, &nc, cp, INFINITY) == LS_OK);
        int checked = 0;
        for (int t = 0; t < no * nm; t++) {
            /* the candidates near the best plan (where a proof is asked for; far above it the
             * search may run out of its budgets, and then claims nothing) */
            if (!isfinite(cp[t].objective) || cp[t].objective > tmp.objective * 1.003) continue;
            ls_plan_cand_cost cc;
            CHECK(ls_plan_cand_cost_init(pb, orders[t / nm], mbs[t % nm][0], mbs[t % nm][1], &cc) == LS_OK);
            double known = cp[t].objective;
            CHECK(ls_plan_exact(pb, &cc, known * (1 + 1e-6), ls_now() + 60, ls_now, ex) == LS_OK);
            CHECK_MSG(ex->done && ex->lb <= known * (1 + 1e-9),
                      "%s candidate %d: done %d, lb %.9g over the plan's %.9g", names[c], t, ex->done, ex->lb, known);
            /* the default indicator is priced exactly: the bound comes with its plan */
            CHECK(ex->has_plan && fabs(ex->plan.objective - ex->lb) <= 1e-9 * known);
            /* out of time: no claim */
            CHECK(ls_plan_exact(pb, &cc, known * (1 + 1e-6), ls_now() - 1, ls_now, ex) == LS_OK);
            CHECK(!ex->done);
            ls_plan_cand_cost_free(&cc);
            checked++;
        }
        CHECK(checked > 0);
        free(cp);
        free(ex);
        free(pb);
        ls_plan_cluster_free(cl);
    }
}

/* The exact search on every candidate, not only the optimum's, against that candidate's own
 * brute force (every stage split and every width of every layer, through ls_plan_evaluate):
 * three unequal GPUs, five layers of a 70B-sized block, the micro-batch pairs that make
 * m_p = 1 (prefill cost the sum of the stages), m_d = 1 and 2 (< 3 stages: a decode round
 * the sum of the stages) and a pipelined one; indicators priced exactly (per-layer scale
 * times a width term), with a bits target and with a weight on quality, the last also
 * prefill-heavy (2 tokens generated). */
static void test_exact_each_candidate(void) {
    ls_plan_arch a = block70b(5);
    ls_plan_cluster *cl = tiny_cluster(TINY3);
    if (!cl) return;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    ls_plan_exact_result *ex = malloc(sizeof *ex);
    const int mbs[4][2] = {{32, 32}, {32, 16}, {16, 32}, {4, 8}};
    int orders[24][LS_PLAN_MAX_DEV], no, L = a.n_layer, n_plans = 0, n_checked = 0;
    ls_rng r;
    ls_rng_seed(&r, 11);
    for (int trial = 0; trial < 3; trial++) {
        /* the last prefill-heavy: a decode step or two beside 32 x 1024 prompt tokens */
        ls_plan_workload w = trial < 2 ? (ls_plan_workload){32, 512, 32} : (ls_plan_workload){32, 1024, 2};
        CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
        for (int i = 0; i < L; i++) {
            double s = 0.5 + ls_rng_uniform(&r);
            for (int k = 0; k < LS_PLAN_NBITS; k++) {
                double base = 1.0 / ((1 << (ls_plan_bits[k] - 1)) - 1.0);
                pb->omega[i * LS_PLAN_NBITS + k] = s * base * base;
            }
        }
        CHECK(ls_plan_problem_set_quality(pb, trial ? (ls_plan_qtarget){LS_PLAN_Q_THETA, 2.0}
                                                    : (ls_plan_qtarget){LS_PLAN_Q_BITS, 8}) == LS_OK);
        ls_plan_orders(cl, 24, orders, &no);
        for (int o = 0; o < no; o++)
            for (int m = 0; m < 4; m++) {
                double ref = INFINITY;
                pl->n_stage = 3, pl->mb_prefill = mbs[m][0], pl->mb_decode = mbs[m][1];
                for (int j = 0; j < 3; j++) pl->dev[j] = orders[o][j];
                pl->begin[0] = 0, pl->begin[3] = L;
                for (int b1 = 1; b1 <= L - 2; b1++)
                    for (int b2 = b1 + 1; b2 <= L - 1; b2++)
                        for (int code = 0; code < 1 << (2 * L); code++) {
                            pl->begin[1] = b1, pl->begin[2] = b2;
                            for (int i = 0; i < L; i++)
                                pl->bits[i] = (unsigned char)ls_plan_bits[(code >> (2 * i)) & 3];
                            if (ls_plan_evaluate(pb, pl) == LS_OK && pl->objective < ref) ref = pl->objective;
                        }
                ls_plan_cand_cost cc;
                CHECK(ls_plan_cand_cost_init(pb, orders[o], mbs[m][0], mbs[m][1], &cc) == LS_OK);
                CHECK(ls_plan_exact(pb, &cc, INFINITY, ls_now() + 60, ls_now, ex) == LS_OK);
                CHECK_MSG(ex->done &&
                              (ref == INFINITY ? ex->lb == INFINITY : ex->has_plan && fabs(ex->lb - ref) <= 1e-9 * ref),
                          "trial %d order %d mb %d/%d: done %d plan %d, exact search %.9g, brute force %.9g", trial, o,
                          mbs[m][0], mbs[m][1], ex->done, ex->has_plan, ex->lb, ref);
                ls_plan_cand_cost_free(&cc);
                n_checked++;
                n_plans += ref < INFINITY;
            }
    }
    CHECK_MSG(n_plans >= n_checked / 2, "%d of %d candidates have a plan", n_plans, n_checked);
    fprintf(stderr, "  %d of %d candidates have a plan\n", n_plans, n_checked);
    free(pb), free(pl), free(ex);
    ls_plan_cluster_free(cl);
}

/* Stages as long as memory allows: two T4s whose memory holds 4 and 2 layers of llama-2-7b
 * at 3 bits and nothing more (at micro-batches of the whole batch), so that plan, all 3-bit
 * and split 4 + 2, is the candidate's only one; the exact search must find it at its
 * evaluated objective. */
static void test_exact_full_stage(void) {
    ls_plan_cluster *cl = tiny_cluster("{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"t4x2\",\"nodes\":["
                                       "{\"gpu\":\"T4\",\"count\":2}]}");
    if (!cl) return;
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, "llama-2-7b", &a) == LS_OK);
    a.n_layer = 6;
    ls_plan_workload w = {16, 512, 8};
    double ws = ls_plan_workspace_bytes(&a, &w, 16, 16),
           lay = ls_plan_layer_weight_bytes(&a, 3) + ls_plan_layer_kv_bytes(&a, &w);
    cl->dev[0].usable_bytes = ws + ls_plan_embed_bytes(&a) + 4 * lay + 1.0;
    cl->dev[1].usable_bytes = ws + ls_plan_head_bytes(&a) + 2 * lay + 1.0;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_NONE, 0}) == LS_OK);
    pl->n_stage = 2, pl->dev[0] = 0, pl->dev[1] = 1, pl->begin[0] = 0, pl->begin[1] = 4, pl->begin[2] = 6;
    pl->mb_prefill = pl->mb_decode = 16;
    for (int i = 0; i < 6; i++) pl->bits[i] = 3;
    pl->bits[3] = 4;
    CHECK(ls_plan_evaluate(pb, pl) == LS_EINFEASIBLE); /* one layer wider does not fit */
    pl->bits[3] = 3, pl->bits[5] = 4;
    CHECK(ls_plan_evaluate(pb, pl) == LS_EINFEASIBLE);
    pl->bits[5] = 3;
    CHECK(ls_plan_evaluate(pb, pl) == LS_OK);
    int order[2] = {0, 1};
    ls_plan_cand_cost cc;
    ls_plan_exact_result *ex = malloc(sizeof *ex);
    CHECK(ls_plan_cand_cost_init(pb, order, 16, 16, &cc) == LS_OK);
    CHECK(ls_plan_exact(pb, &cc, INFINITY, ls_now() + 60, ls_now, ex) == LS_OK);
    CHECK_MSG(ex->done && ex->has_plan && fabs(ex->lb - pl->objective) <= 1e-9 * pl->objective,
              "done %d, plan %d, exact search %.9g, the 4 + 2 all-3-bit plan %.9g", ex->done, ex->has_plan, ex->lb,
              pl->objective);
    ls_plan_cand_cost_free(&cc);
    free(ex), free(pb), free(pl);
    ls_plan_cluster_free(cl);
}

/* A synthetic llmsys-profile: the header, empty prefill / decode arrays (returned in pre,
 * dec) and a link of 0.1 ms and 1 GB/s; rows go in with profile_row. */
static cJSON *profile_json(const char *device, cJSON **pre, cJSON **dec) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "llmsys-profile");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "device", device);
    *pre = cJSON_AddArrayToObject(j, "prefill"), *dec = cJSON_AddArrayToObject(j, "decode");
    cJSON *link = cJSON_AddObjectToObject(j, "link");
    cJSON_AddNumberToObject(link, "latency_s", 1e-4);
    cJSON_AddNumberToObject(link, "bandwidth_Bps", 1e9);
    return j;
}

/* One measured point: len is the prompt ("seq") of a prefill row, the context ("ctx") of a
 * decode one. */
static void profile_row(cJSON *rows, int prefill, int bits, int batch, int len, double seconds) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "bits", bits);
    cJSON_AddNumberToObject(r, "batch", batch);
    cJSON_AddNumberToObject(r, prefill ? "seq" : "ctx", len);
    cJSON_AddNumberToObject(r, "seconds", seconds);
    cJSON_AddItemToArray(rows, r);
}

/* A measured profile may trade the phases: here 8-bit layers prefill in half the time of
 * fp16 ones and decode in twice the time (an int8 GEMM beside a slow dequantising GEMV), so
 * an all-8-bit stage is better than an all-fp16 one in prefill only, worse in decode and in
 * quality. On two such devices, prefill-heavy, the exact search and the ILP must still
 * reach the brute force's optimum (4 layers of test_arch). */
static void test_exact_profile_tradeoff(void) {
    char path[512], cpath[512], json[1024];
    tmp_path(path, sizeof path, "tradeoff-prof.json");
    cJSON *pre, *dec, *j = profile_json("cpu:tradeoff", &pre, &dec);
    for (int bits = 8; bits <= 16; bits += 8)
        for (int b = 1; b <= 4; b *= 2)
            for (int s = 16; s <= 64; s *= 2) {
                profile_row(pre, 1, bits, b, s, (bits == 8 ? 0.5e-5 : 1e-5) * b * s);
                profile_row(dec, 0, bits, b, s, (bits == 8 ? 2e-4 : 1e-4) * b);
            }
    CHECK(ls_json_write_file(path, j) == LS_OK);
    cJSON_Delete(j);
    snprintf(json, sizeof json,
             "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"tradeoff\",\"nodes\":["
             "{\"profile\":\"%s\",\"memory_GB\":16,\"count\":2}]}",
             path);
    tmp_path(cpath, sizeof cpath, "tradeoff-cluster.json");
    write_text(cpath, json);
    ls_plan_cluster *cl = NULL;
    CHECK(ls_plan_cluster_load(cat, cpath, &cl) == LS_OK);
    if (!cl) return;
    ls_plan_arch a = test_arch();
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *bf = malloc(sizeof *bf);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){8, 256, 4}) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_THETA, 1e-3}) == LS_OK);
    pb->time_limit_s = 20;
    if (check_brute_ilp_exact(pb, bf, 1, 1e-9, "tradeoff profile")) {
        int n8 = 0;
        for (int i = 0; i < a.n_layer; i++) n8 += bf->bits[i] == 8;
        CHECK_MSG(n8 > 0, "the optimum uses no 8-bit layer: the case means nothing");
    } else
        CHECK_MSG(0, "tradeoff profile: no plan: %s", ls_errmsg());
    free(pb), free(bf);
    ls_plan_cluster_free(cl);
}

/* Profiled devices send activations of the profile's own element size (act_bytes: 2 in the
 * H200 profiles, fp16): the link term of a stage written out by hand, doubled at 4 bytes;
 * and the exact search and the ILP, which price the stages themselves, reach the brute
 * force's optimum on such a cluster (4 layers of llama-2-7b on two profiled H200s). */
static void test_profiled_links(void) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"h200x2\",\"nodes\":["
             "{\"profile\":\"%s/data/profiles/h200-llama-2-7b.json\",\"memory_GB\":80,\"count\":2}]}",
             LLMSYS_SOURCE_DIR);
    ls_plan_cluster *cl = tiny_cluster(json);
    if (!cl) return;
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, "llama-2-7b", &a) == LS_OK);
    a.n_layer = 4;
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl), *bf = malloc(sizeof *bf);
    ls_plan_workload w = {16, 512, 8};
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    CHECK(cl->n_dev == 2 && cl->dev[0].prof == 0 && cl->prof[0].act_bytes == 2);
    pl->n_stage = 2, pl->dev[0] = 0, pl->dev[1] = 1, pl->begin[0] = 0, pl->begin[1] = 2, pl->begin[2] = 4;
    for (int i = 0; i < 4; i++) pl->bits[i] = 16;
    pl->mb_prefill = pl->mb_decode = 8;
    for (int ab = 2; ab <= 4; ab += 2) {
        cl->prof[0].act_bytes = ab;
        CHECK(ls_plan_evaluate(pb, pl) == LS_OK);
        double P = 0, D = 0, ctx = w.prompt + w.gen / 2.0;
        for (int i = 0; i < 2; i++) {
            P += ls_plan_layer_prefill_s(&a, cl, 0, 16, 8, w.prompt);
            D += ls_plan_layer_decode_s(&a, cl, 0, 16, 8, ctx);
        }
        /* 8 x 512 x 4096 activations of ab bytes for prefill, 8 x 4096 for a decode step */
        double lat = cl->prof[0].link_lat_s, bps = cl->prof[0].link_Bps;
        CHECK_NEAR(pl->stage_prefill_s[0], P + lat + 8.0 * 512 * 4096 * ab / bps, 1e-12 * P);
        CHECK_NEAR(pl->stage_decode_s[0], D + lat + 8.0 * 4096 * ab / bps, 1e-12 * D);
    }
    cl->prof[0].act_bytes = 2;
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 8}) == LS_OK);
    pb->time_limit_s = 20;
    if (!check_brute_ilp_exact(pb, bf, 1, 1e-9, "profiled H200s"))
        CHECK_MSG(0, "profiled H200s: no plan: %s", ls_errmsg());
    free(pb), free(pl), free(bf);
    ls_plan_cluster_free(cl);
}

/* ---------------------------------------------------------------- indicators */

static void write_checkpoint(const char *path, int L, int C, int F, uint64_t seed) {
    ls_st_writer *w;
    LS_ASSERT(ls_st_writer_init(&w) == LS_OK);
    ls_rng r;
    ls_rng_seed(&r, seed);
    float *bufs[8 * 8];
    int nb = 0;
    char names[8 * 8][64];
    for (int l = 0; l < L; l++) {
        const char *nm[6] = {"ln1.w", "attn.qkv.w", "attn.proj.w", "ln2.w", "mlp.fc.w", "mlp.proj.w"};
        int64_t sh[6][2] = {{C, 0}, {3 * C, C}, {C, C}, {C, 0}, {F, C}, {C, F}};
        for (int t = 0; t < 6; t++) {
            int64_t n = sh[t][0] * (sh[t][1] ? sh[t][1] : 1);
            float *b = malloc(sizeof(float) * (size_t)n);
            /* later layers get larger weights, so the indicator must rank them higher */
            for (int64_t i = 0; i < n; i++)
                b[i] = sh[t][1] ? 0.02f * (1 + l) * ls_rng_normal(&r) : 1.0f + 0.1f * ls_rng_normal(&r);
            snprintf(names[nb], 64, "h.%d.%s", l, nm[t]);
            LS_ASSERT(ls_st_writer_add(w, names[nb], LS_DT_F32, sh[t][1] ? 2 : 1, sh[t], b) == LS_OK);
            bufs[nb++] = b;
        }
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"vocab\":259,\"n_ctx\":64,\"n_layer\":%d,\"n_head\":4,\"d_model\":%d,\"d_ff\":%d}", L,
             C, F);
    LS_ASSERT(ls_st_writer_meta(w, "llmsys.config", cfg) == LS_OK);
    LS_ASSERT(ls_st_writer_write(w, path) == LS_OK);
    ls_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
}

static void test_indicators(void) {
    char ck[512], ind[512];
    tmp_path(ck, sizeof ck, "ck.safetensors");
    tmp_path(ind, sizeof ind, "ind.json");
    write_checkpoint(ck, 3, 32, 128, 7);
    ls_plan_arch a;
    CHECK(ls_plan_resolve_model(cat, ck, &a) == LS_OK);
    CHECK_EQ_INT(a.n_layer, 3);
    CHECK_EQ_INT(a.d_model, 32);
    /* an llmsys GPT: the LM head is the token embedding, positions a learned table, no GQA */
    CHECK(a.tied == 1 && a.pos_embed == 1 && !a.gated && a.n_kv_head == a.n_head);
    double om[3 * 4], om2[3 * 4], ms[3 * 4];
    CHECK(ls_plan_quality_from_checkpoint(ck, &a, om) == LS_OK);
    CHECK(ls_plan_quality_measured(ck, &a, ms) == LS_OK);
    double s4 = 0;
    for (int i = 0; i < 3; i++) {
        s4 += om[i * 4 + 1];
        /* variance indicator: s_w^2 scales as 1/(2^(b-1)-1)^2 exactly */
        CHECK_NEAR(om[i * 4 + 0] / om[i * 4 + 1], 49.0 / 9.0, 1e-9);
        CHECK_NEAR(om[i * 4 + 2] / om[i * 4 + 1], 49.0 / (127.0 * 127.0), 1e-9);
        for (int k = 0; k + 1 < 4; k++) CHECK(ms[i * 4 + k] > ms[i * 4 + k + 1]);
        /* measured error: one more bit roughly quarters the squared error */
        CHECK(ms[i * 4 + 1] / ms[i * 4 + 2] > 50 && ms[i * 4 + 1] / ms[i * 4 + 2] < 1000);
        if (i) CHECK(om[i * 4 + 1] > om[(i - 1) * 4 + 1]);
        if (i) CHECK(ms[i * 4 + 1] > ms[(i - 1) * 4 + 1]);
    }
    CHECK_NEAR(s4, 1.0, 1e-12);
    CHECK(ls_plan_quality_write(ind, &a, om) == LS_OK);
    CHECK(ls_plan_quality_from_file(ind, &a, om2) == LS_OK);
    for (int i = 0; i < 12; i++) CHECK_NEAR(om2[i], om[i], 1e-12 * om[i] + 1e-300);
    /* default profile: first layer most sensitive, normalised */
    ls_plan_arch o;
    CHECK(ls_plan_catalog_model(cat, "OPT-30B", &o) == LS_OK);
    double *d = malloc(sizeof(double) * 48 * 4), t = 0;
    CHECK(ls_plan_quality_default(&o, d) == LS_OK);
    for (int i = 0; i < 48; i++) t += d[i * 4 + 1];
    CHECK_NEAR(t, 1.0, 1e-12);
    CHECK(d[0 * 4 + 1] > d[24 * 4 + 1] && d[47 * 4 + 1] > d[24 * 4 + 1]);
    free(d);
}

/* ---------------------------------------------------------------- profiles and files */

static void test_profile_fit(void) {
    char path[512];
    tmp_path(path, sizeof path, "prof.json");
    /* rows generated from known coefficients; the fit must recover them */
    cJSON *pre, *dec, *j = profile_json("cpu:test", &pre, &dec);
    int bits[2] = {8, 16};
    for (int bi = 0; bi < 2; bi++)
        for (int b = 1; b <= 4; b *= 2)
            for (int s = 16; s <= 64; s *= 2) {
                double bs = (double)b * s;
                profile_row(pre, 1, bits[bi], b, s, 1e-4 * (bi + 1) + 2e-6 * bs + 3e-9 * bs * s);
                profile_row(dec, 0, bits[bi], b, s, 5e-5 + 1e-5 * b + 4e-8 * b * s);
            }
    CHECK(ls_json_write_file(path, j) == LS_OK);
    ls_plan_profile p;
    CHECK_MSG(ls_plan_profile_load(path, &p) == LS_OK, "%s", ls_errmsg());
    CHECK(p.has_bits[2] && p.has_bits[3] && !p.has_bits[0]);
    CHECK_NEAR(p.pre[3][0], 2e-4, 1e-10);
    CHECK_NEAR(p.pre[3][1], 2e-6, 1e-12);
    CHECK_NEAR(p.pre[3][2], 3e-9, 1e-14);
    CHECK_NEAR(p.dec[2][1], 1e-5, 1e-11);
    CHECK_NEAR(p.dec[2][2], 4e-8, 1e-13);
    CHECK_NEAR(p.link_Bps, 1e9, 0);
    CHECK(p.act_bytes == 4); /* a CPU stage's fp32 activations unless the profile says */
    /* a GPU profile's fp16 activations; anything else refused */
    cJSON_AddNumberToObject(j, "act_bytes", 2);
    CHECK(ls_json_write_file(path, j) == LS_OK);
    CHECK_MSG(ls_plan_profile_load(path, &p) == LS_OK, "%s", ls_errmsg());
    CHECK(p.act_bytes == 2);
    cJSON_ReplaceItemInObject(j, "act_bytes", cJSON_CreateNumber(3));
    CHECK(ls_json_write_file(path, j) == LS_OK);
    CHECK(ls_plan_profile_load(path, &p) == LS_EFORMAT && strstr(ls_errmsg(), "act_bytes"));
    cJSON_Delete(j);
}

/* ---------------------------------------------------------------- bad input */

static void test_bad_input(void) {
    ls_plan_gpu g;
    ls_plan_arch a;
    CHECK(ls_plan_catalog_gpu(cat, "Z80", &g) == LS_ENOTFOUND);
    CHECK(strstr(ls_errmsg(), "T4-16G") != NULL); /* lists the known names */
    CHECK(ls_plan_catalog_model(cat, "gpt-5", &a) == LS_ENOTFOUND);
    CHECK(strstr(ls_errmsg(), "opt-30b") != NULL);
    CHECK(ls_plan_catalog_model(cat, "Qwen2.5-72B", &a) == LS_OK);
    char path[512];
    tmp_path(path, sizeof path, "bad.json");
    ls_plan_cluster *cl = NULL;
    write_text(path, "{\"format\":\"llmsys-cluster\",\"version\":1,\"nodes\":[]}");
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_EINVAL && cl == NULL);
    write_text(path, "{\"format\":\"llmsys-cluster\",\"version\":1,\"nodes\":[{\"gpu\":\"T4\",\"count\":0}]}");
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_EINVAL);
    write_text(path, "{\"format\":\"llmsys-cluster\",\"version\":1,\"nodes\":[{\"gpu\":\"T4\",\"count\":-2}]}");
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_EFORMAT);
    write_text(path, "{\"format\":\"llmsys-cluster\",\"version\":1,\"nodes\":[{\"gpu\":\"B300\",\"count\":2}]}");
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_ENOTFOUND);
    write_text(path, "{\"format\":\"llmsys-cluster\", \"nodes\": [");
    CHECK(ls_plan_cluster_load(cat, path, &cl) == LS_EFORMAT);
    CHECK(ls_plan_cluster_load(cat, "no-such-cluster", &cl) == LS_ENOTFOUND);
    ls_plan_qtarget q;
    CHECK(ls_plan_qtarget_parse("bits:5", &q) == LS_EINVAL);
    CHECK(ls_plan_qtarget_parse("max:-1", &q) == LS_EINVAL);
    CHECK(ls_plan_qtarget_parse("theta:1e-3", &q) == LS_OK && q.kind == LS_PLAN_Q_THETA);
    /* workload numbers */
    CHECK(ls_plan_cluster_load(cat, "llmpq-8", &cl) == LS_OK);
    CHECK(ls_plan_catalog_model(cat, "opt-30b", &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = malloc(sizeof *pl);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){-3, 512, 100}) == LS_OK);
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl) == LS_EINVAL);
    pb->wl = (ls_plan_workload){32, 4000, 100};
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl) == LS_EINVAL); /* beyond n_ctx 2048 */
    /* does not fit: the message says how many GB short */
    CHECK(ls_plan_catalog_model(cat, "bloom-176b", &a) == LS_OK);
    pb->wl = (ls_plan_workload){32, 512, 100};
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl) == LS_EINFEASIBLE);
    CHECK_MSG(strstr(ls_errmsg(), "GB short") != NULL, "%s", ls_errmsg());
    /* quality unreachable: 16 bits everywhere on 4 T4s for OPT-30B */
    CHECK(ls_plan_catalog_model(cat, "opt-30b", &a) == LS_OK);
    CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 16}) == LS_OK);
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl) == LS_EINFEASIBLE);
    CHECK_MSG(strstr(ls_errmsg(), "quality target unreachable") != NULL, "%s", ls_errmsg());
    free(pb);
    free(pl);
    ls_plan_cluster_free(cl);
}

/* ---------------------------------------------------------------- simulation */

/* One stage, whole batch per micro-batch: the replay is prefill + one decode per token,
 * each at its own context, from the same cost terms, summed by hand. */
static void test_sim_one_stage(void) {
    ls_plan_cluster *cl;
    CHECK(ls_plan_cluster_load(cat, "llmpq-1", &cl) == LS_OK);
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, "opt-13b", &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    ls_plan_workload w = {4, 64, 5};
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    pl->n_stage = 1, pl->dev[0] = 0, pl->begin[0] = 0, pl->begin[1] = a.n_layer;
    for (int i = 0; i < a.n_layer; i++) pl->bits[i] = i % 2 ? 8 : 16;
    pl->mb_prefill = pl->mb_decode = 4;
    CHECK(ls_plan_evaluate(pb, pl) == LS_OK);
    double want = ls_plan_head_prefill_s(&a, cl, 0, 4, 64);
    for (int i = 0; i < a.n_layer; i++) want += ls_plan_layer_prefill_s(&a, cl, 0, pl->bits[i], 4, 64);
    for (int t = 0; t < w.gen - 1; t++) {
        want += ls_plan_head_decode_s(&a, cl, 0, 4);
        for (int i = 0; i < a.n_layer; i++) want += ls_plan_layer_decode_s(&a, cl, 0, pl->bits[i], 4, 64 + t);
    }
    ls_plan_sim_opts o = ls_plan_sim_defaults();
    o.hop_s = 0;
    ls_plan_sim_result r;
    CHECK(ls_plan_simulate(pb, pl, &o, &r) == LS_OK);
    CHECK_NEAR(r.seconds, want, 1e-12 * want);
    CHECK_NEAR(r.busy_s[0], want, 1e-12 * want);
    CHECK_EQ_INT(r.mb_prefill, 1);
    CHECK_EQ_INT(r.mb_decode, w.gen - 1);
    CHECK_NEAR(r.tok_s, 4.0 * 5 / want, 1e-9 * r.tok_s);
    /* each hop of the ring (front -> stage -> front) adds its latency per micro-batch */
    o.hop_s = 1e-3;
    ls_plan_sim_result r2;
    CHECK(ls_plan_simulate(pb, pl, &o, &r2) == LS_OK);
    CHECK_NEAR(r2.seconds, want + 2e-3 * w.gen, 1e-9);
    /* the front's work lies on the ring too: one micro-batch in flight, so each of the gen
     * micro-batches waits for it in full; on one shared core the front and the stage never
     * work at once here, so sharing changes nothing */
    o.front_s = 5e-4;
    CHECK(ls_plan_simulate(pb, pl, &o, &r2) == LS_OK);
    CHECK_NEAR(r2.seconds, want + 2.5e-3 * w.gen, 1e-9);
    CHECK_NEAR(r2.busy_s[0], want, 1e-12 * want);
    o.capacity = 1;
    CHECK(ls_plan_simulate(pb, pl, &o, &r2) == LS_OK);
    CHECK_NEAR(r2.seconds, want + 2.5e-3 * w.gen, 1e-9);
    free(pb), free(pl);
    ls_plan_cluster_free(cl);
}

/* serve's scheduler on a small case worked through by hand: B = 2, one stage, prefill
 * micro-batch 1, decode 2, 3 tokens each, one micro-batch in flight. Sent in order:
 * P(r0); D(r0) (decode after a prefill); P(r1); D(r0, r1) (r0 done); D(r1) (done):
 * 2 prefill and 3 decode micro-batches. Then two stages sharing one core take at least
 * the sum of their work, and longer than on devices of their own. */
/* Two stages, whole batch per micro-batch (one in flight, so the replay is serial): as
 * above, plus the activations' time on the link between the stages, 4 x 64 (prefill) or
 * 4 x 1 (decode) vectors of d_model fp16 elements at the T4's link bandwidth, by hand
 * (hops 0, so the link's latency is the hop's). */
static void test_sim_two_stages(void) {
    ls_plan_cluster *cl = two_t4(1);
    cl->dev[0].usable_bytes = cl->dev[1].usable_bytes = 14e9;
    ls_plan_arch a = test_arch();
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    ls_plan_workload w = {4, 64, 5};
    CHECK(ls_plan_problem_init(pb, &a, cl, w) == LS_OK);
    pl->n_stage = 2, pl->dev[0] = 0, pl->dev[1] = 1, pl->begin[0] = 0, pl->begin[1] = 1, pl->begin[2] = 4;
    for (int i = 0; i < a.n_layer; i++) pl->bits[i] = i % 2 ? 8 : 16;
    pl->mb_prefill = pl->mb_decode = 4;
    CHECK_MSG(ls_plan_evaluate(pb, pl) == LS_OK, "%s", ls_errmsg());
    double bps = cl->dev[0].gpu.link_Bps;
    double want = ls_plan_head_prefill_s(&a, cl, 1, 4, 64) + 4.0 * 64 * a.d_model * 2 / bps;
    for (int i = 0; i < a.n_layer; i++) want += ls_plan_layer_prefill_s(&a, cl, i < 1 ? 0 : 1, pl->bits[i], 4, 64);
    for (int t = 0; t < w.gen - 1; t++) {
        want += ls_plan_head_decode_s(&a, cl, 1, 4) + 4.0 * a.d_model * 2 / bps;
        for (int i = 0; i < a.n_layer; i++)
            want += ls_plan_layer_decode_s(&a, cl, i < 1 ? 0 : 1, pl->bits[i], 4, 64 + t);
    }
    ls_plan_sim_opts o = ls_plan_sim_defaults();
    o.hop_s = 0;
    ls_plan_sim_result r;
    CHECK(ls_plan_simulate(pb, pl, &o, &r) == LS_OK);
    CHECK_NEAR(r.seconds, want, 1e-12 * want);
    free(pb), free(pl), free(cl);
}

static void test_sim_scheduler(void) {
    ls_plan_cluster *cl;
    CHECK(ls_plan_cluster_load(cat, "llmpq-8", &cl) == LS_OK); /* 4 x T4 */
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, "opt-13b", &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = calloc(1, sizeof *pl);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){2, 32, 3}) == LS_OK);
    pl->n_stage = 1, pl->dev[0] = 0, pl->begin[0] = 0, pl->begin[1] = a.n_layer;
    for (int i = 0; i < a.n_layer; i++) pl->bits[i] = 4;
    pl->mb_prefill = 1, pl->mb_decode = 2;
    ls_plan_sim_opts o = ls_plan_sim_defaults();
    ls_plan_sim_result r;
    CHECK(ls_plan_simulate(pb, pl, &o, &r) == LS_OK);
    CHECK_EQ_INT(r.mb_prefill, 2);
    CHECK_EQ_INT(r.mb_decode, 3);

    pb->wl = (ls_plan_workload){8, 32, 16};
    pl->n_stage = 2, pl->dev[1] = 1, pl->begin[1] = a.n_layer / 2, pl->begin[2] = a.n_layer;
    pl->mb_prefill = 2, pl->mb_decode = 4;
    CHECK(ls_plan_evaluate(pb, pl) == LS_OK);
    ls_plan_sim_result own, shared;
    CHECK(ls_plan_simulate(pb, pl, &o, &own) == LS_OK);
    o.capacity = 1;
    CHECK(ls_plan_simulate(pb, pl, &o, &shared) == LS_OK);
    /* work at full speed, stage by stage, from the replay on devices of their own */
    double work = own.busy_s[0] + own.busy_s[1];
    CHECK_MSG(shared.seconds >= work * (1 - 1e-9), "shared %.6f s < work %.6f s", shared.seconds, work);
    CHECK_MSG(own.seconds < 0.9 * shared.seconds, "own devices %.6f s, one shared core %.6f s", own.seconds,
              shared.seconds);
    /* the front's work on a shared core: at least all work done one piece at a time */
    ls_plan_sim_result fr;
    o.front_s = 1e-3;
    CHECK(ls_plan_simulate(pb, pl, &o, &fr) == LS_OK);
    double fwork = work + 1e-3 * (fr.mb_prefill + fr.mb_decode);
    CHECK_MSG(fr.seconds >= fwork * (1 - 1e-9), "with front %.6f s < work %.6f s", fr.seconds, fwork);
    o.front_s = 0;
    /* full micro-batches through two balanced stages: close to the closed form */
    CHECK_MSG(fabs(own.seconds - pl->total_s) < 0.15 * pl->total_s, "replay %.6f s, closed form %.6f s", own.seconds,
              pl->total_s);
    CHECK_EQ_INT(own.mb_prefill, 4);
    /* at least the closed form's 2 x 15; a few more while the prefills return one by one */
    CHECK_MSG(own.mb_decode >= 2 * 15 && own.mb_decode <= 2 * 15 + 4, "%d decode micro-batches", own.mb_decode);
    free(pb), free(pl);
    ls_plan_cluster_free(cl);
}

/* Replay-verified selection never picks a plan the replay rates below the objective's
 * choice or a baseline meeting the target; the cluster's "host" object reaches the replay. */
static void test_replay_select(void) {
    char path[300];
    tmp_path(path, sizeof path, "host-cluster.json");
    write_text(path, "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"shared\","
                     "\"host\":{\"capacity\":1.5,\"hop_us\":120,\"front_us\":80},"
                     "\"nodes\":[{\"gpu\":\"T4\",\"count\":2},{\"gpu\":\"V100-32G\",\"count\":1}]}");
    char bad[300];
    tmp_path(bad, sizeof bad, "bad-host.json");
    ls_plan_cluster *bcl = NULL;
    write_text(bad,
               "{\"format\":\"llmsys-cluster\",\"version\":1,\"host\":3,\"nodes\":[{\"gpu\":\"T4\",\"count\":1}]}");
    CHECK(ls_plan_cluster_load(cat, bad, &bcl) == LS_EFORMAT && bcl == NULL);
    write_text(bad, "{\"format\":\"llmsys-cluster\",\"version\":1,\"host\":{\"capacity\":-2},"
                    "\"nodes\":[{\"gpu\":\"T4\",\"count\":1}]}");
    CHECK(ls_plan_cluster_load(cat, bad, &bcl) != LS_OK && bcl == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "capacity") != NULL, "%s", ls_errmsg());
    write_text(bad, "{\"format\":\"llmsys-cluster\",\"version\":1,\"host\":{\"front_us\":-1},"
                    "\"nodes\":[{\"gpu\":\"T4\",\"count\":1}]}");
    CHECK(ls_plan_cluster_load(cat, bad, &bcl) != LS_OK && bcl == NULL);
    CHECK_MSG(strstr(ls_errmsg(), "front_us") != NULL, "%s", ls_errmsg());
    const char *clusters[] = {"llmpq-2", path};
    for (int c = 0; c < 2; c++) {
        ls_plan_cluster *cl;
        CHECK(ls_plan_cluster_load(cat, clusters[c], &cl) == LS_OK);
        if (c == 1) {
            CHECK_NEAR(cl->host_capacity, 1.5, 0);
            CHECK_NEAR(cl->host_hop_s, 120e-6, 1e-15);
            CHECK_NEAR(cl->host_front_s, 80e-6, 1e-15);
            CHECK_NEAR(ls_plan_sim_for_cluster(cl).front_s, 80e-6, 1e-15);
        } else {
            CHECK_NEAR(cl->host_capacity, 0, 0);
        }
        ls_plan_arch a;
        CHECK(ls_plan_catalog_model(cat, c ? "opt-13b" : "opt-30b", &a) == LS_OK);
        ls_plan_problem *pb = malloc(sizeof *pb);
        ls_plan_result *obj = malloc(sizeof *obj), *rep = malloc(sizeof *rep), *uni = malloc(sizeof *uni);
        CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){16, 256, 32}) == LS_OK);
        CHECK(ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4}) == LS_OK);
        CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, obj) == LS_OK);
        pb->replay_select = 16;
        CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, rep) == LS_OK);
        check_valid(pb, rep, "replay-selected");
        ls_plan_sim_opts so = ls_plan_sim_for_cluster(cl);
        ls_plan_sim_result ro, rr, ru;
        CHECK(ls_plan_simulate(pb, obj, &so, &ro) == LS_OK);
        CHECK(ls_plan_simulate(pb, rep, &so, &rr) == LS_OK);
        CHECK_MSG(rr.tok_s >= ro.tok_s * (1 - 1e-9), "%s: replay-selected %.2f tok/s < objective's %.2f", clusters[c],
                  rr.tok_s, ro.tok_s);
        if (ls_plan_solve(pb, LS_PLAN_ALGO_UNIFORM, uni) == LS_OK && ls_plan_evaluate(pb, uni) == LS_OK) {
            CHECK(ls_plan_simulate(pb, uni, &so, &ru) == LS_OK);
            CHECK_MSG(rr.tok_s >= ru.tok_s * (1 - 1e-9), "%s: replay-selected %.2f tok/s < uniform's %.2f", clusters[c],
                      rr.tok_s, ru.tok_s);
        }
        free(pb), free(obj), free(rep), free(uni);
        ls_plan_cluster_free(cl);
    }
    /* too large to replay (1024 x 2000 tokens over 64 stages): selection falls back to the
     * objective and gives the objective's plan */
    ls_plan_cluster *cl;
    CHECK(ls_plan_cluster_load(cat, "mixed-64", &cl) == LS_OK);
    ls_plan_arch a;
    CHECK(ls_plan_catalog_model(cat, cl->model, &a) == LS_OK);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *obj = malloc(sizeof *obj), *rep = malloc(sizeof *rep);
    CHECK(ls_plan_problem_init(pb, &a, cl, (ls_plan_workload){1024, 64, 2000}) == LS_OK);
    ls_plan_sim_opts so = ls_plan_sim_defaults();
    ls_plan_sim_result sr;
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, obj) == LS_OK);
    CHECK(ls_plan_simulate(pb, obj, &so, &sr) == LS_EINVAL);
    pb->replay_select = 16;
    CHECK(ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, rep) == LS_OK);
    CHECK_NEAR(rep->objective, obj->objective, 1e-12 * obj->objective);
    free(pb), free(obj), free(rep);
    ls_plan_cluster_free(cl);
}

/* the serving planners: every one but brute */
static int serve_algo_parses(const char *s) {
    int a = ls_plan_algo_parse(s);
    return a >= 0 && a != LS_PLAN_ALGO_BRUTE;
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/llmsys-plan-test-%d", (int)getpid());
    LS_ASSERT(ls_mkdirs(tmpdir) == LS_OK);
    if (ls_plan_catalog_load(NULL, &cat) != LS_OK) {
        fprintf(stderr, "catalog: %s\n", ls_errmsg());
        return 1;
    }
    test_choice_list(LS_PLAN_SERVE_ALGOS, LS_PLAN_ALGO_COUNT - 1, serve_algo_parses);
    RUN(test_terms_one_layer);
    RUN(test_stage_memory);
    RUN(test_plans_valid);
    RUN(test_never_worse_than_baselines);
    RUN(test_baselines);
    RUN(test_llmpq3_near_ilp);
    RUN(test_agree_brute_force);
    RUN(test_dp_quality_brute);
    RUN(test_exact_random_brute);
    RUN(test_ilp_rows_brute);
    RUN(test_exact_keeps_known_plans);
    RUN(test_exact_each_candidate);
    RUN(test_exact_full_stage);
    RUN(test_exact_profile_tradeoff);
    RUN(test_profiled_links);
    RUN(test_indicators);
    RUN(test_profile_fit);
    RUN(test_bad_input);
    RUN(test_sim_one_stage);
    RUN(test_sim_two_stages);
    RUN(test_sim_scheduler);
    RUN(test_replay_select);
    ls_plan_catalog_free(cat);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_RESULT();
}
