/* internal.h - shared between the planner's source files (not a public API). */
#ifndef LLMSYS_PLAN_INTERNAL_H
#define LLMSYS_PLAN_INTERNAL_H

#include "llmsys/plan.h"

/* Device orders of a cluster (node kinds permuted, nodes of a kind together). */
int ls_plan_orders(const ls_plan_cluster *cl, int max_orders, int (*orders)[LS_PLAN_MAX_DEV], int *n_orders);
/* (prefill, decode) micro-batch candidates. */
int ls_plan_microbatches(const ls_plan_problem *p, int n_dev, int (*mb)[2], int *n);
/* The splitquant DP. With rank_only the candidates (order index, micro-batch index) are
 * also returned best first by their screening objective. cand_plans (optional, one entry
 * per candidate, at order index * #micro-batch pairs + micro-batch index) gets each
 * candidate's screening plan (objective INFINITY when it has none). Only plans with an
 * objective below incumbent are returned (LS_EINFEASIBLE when none; INFINITY: any plan). */
int ls_plan_splitquant(const ls_plan_problem *p, ls_plan_result *out, int rank_only, int *cand_order, int *cand_mb,
                       int *n_cand, ls_plan_result *cand_plans, double incumbent);
/* splitquant as ls_plan_solve runs it by the objective (baselines seed the incumbent). */
int ls_plan_splitquant_seeded(const ls_plan_problem *p, ls_plan_result *out);
/* Activation element size on the wire from dev: fp16 from a catalog GPU, a profiled device's
 * own (its profile's act_bytes). */
double ls_plan_act_bytes(const ls_plan_cluster *cl, int dev);
/* What stage j of n (on device order[j]) costs besides its layers and the workspace, as
 * every stage cost (evaluate, the DP, the ILP) prices it: mem, the embedding (first stage)
 * and head (last) bytes; pre_s / dec_s, the head's time on the last stage, else the link's
 * to order[j + 1] (activations of ls_plan_act_bytes) per prefill / decode micro-batch. */
void ls_plan_stage_fixed(const ls_plan_problem *p, const int *order, int n, int j, int mb_pre, int mb_dec, double *mem,
                         double *pre_s, double *dec_s);
/* One ILP candidate's costs (ilp.c builds them for the MIP and the exact search alike):
 * per position j (device order[j]) and width k the layer prefill / decode seconds, the
 * stage's fixed prefill / decode (link or head) and the GB left for layers; memk the GB of
 * one layer (weights and KV cache) at width k; ok[j][k] whether width k may sit at j. */
typedef struct {
    int L, N, mp, md, mb_pre, mb_dec;
    const int *order;
    double (*lp)[LS_PLAN_NBITS], (*ld)[LS_PLAN_NBITS];
    double *baseP, *baseD, *baseM, *cap;
    double memk[LS_PLAN_NBITS];
    unsigned char (*ok)[LS_PLAN_NBITS];
} ls_plan_cand_cost;

/* Builds cc for the candidate (order: N device indices, kept by pointer); free with
 * ls_plan_cand_cost_free. */
int ls_plan_cand_cost_init(const ls_plan_problem *p, const int *order, int mb_pre, int mb_dec, ls_plan_cand_cost *cc);
void ls_plan_cand_cost_free(ls_plan_cand_cost *cc);

typedef struct {
    int done;       /* the search finished: lb is exact (below) */
    int has_plan;   /* plan attains lb (it is the candidate's optimum below the cutoff) */
    double lb;      /* least objective below the cutoff; INFINITY: none */
    long long work; /* options, suffix entries and labels examined */
    int labels;     /* labels created */
    ls_plan_result plan;
} ls_plan_exact_result;

/* Exact search over one candidate (exact.c): every plan below cutoff * (1 - 1e-9) or a
 * proof that there is none, within a work budget and the deadline on clk; else done = 0. */
int ls_plan_exact(const ls_plan_problem *p, const ls_plan_cand_cost *cc, double cutoff, double deadline,
                  double (*clk)(void), ls_plan_exact_result *res);

/* The LLM-PQ MIP with CBC (ilp.c). */
int ls_plan_ilp(const ls_plan_problem *p, ls_plan_result *out);
/* One candidate's MIP alone, with no start and no cutoff (tests read the MIP's rows through
 * it): its plan, evaluated; whether CBC proved it optimal; and the MIP's own objective for
 * it, which equals the plan's objective where the rows price it exactly. */
int ls_plan_ilp_candidate(const ls_plan_problem *p, const ls_plan_cand_cost *cc, double limit_s, ls_plan_result *plan,
                          int *optimal, double *mip_obj);

#endif
