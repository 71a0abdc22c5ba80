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
/* Activation element size on the wire: fp16 between GPUs, fp32 between llmsys CPU stages. */
double ls_plan_act_bytes(const ls_plan_cluster *cl, int dev);
/* The LLM-PQ MIP with CBC (ilp.c). */
int ls_plan_ilp(const ls_plan_problem *p, ls_plan_result *out);

#endif
