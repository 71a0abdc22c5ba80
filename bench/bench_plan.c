/* bench_plan.c - every planner on every catalog cluster: predicted (modelled) throughput,
 * ratios to the uniform and PipeEdge baselines measured in the same run, objective gap
 * to the exact ILP, and solve time; then splitquant against the ILP (best objective found
 * and proven bound) on mixed clusters generated from the catalog by a seeded rule
 * (unseen_cluster). Usage: bench_plan [--quick] [--out FILE] [--ilp-limit S]
 * [--unseen-limit S] [--unseen N] [--seed N] [--ilp-cpu] [--only NAME | unseen-K | unseen].
 * --ilp-cpu: the ILP limits count CPU seconds of the solving thread (a loaded machine). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/plan.h"

/* The GPU kinds the unseen rule draws from: data/gpus.json as it stood when the rule was set.
 * Later catalog entries (H200-141G) stay out, so that case i of seed S stays the same case. */
static const char *const unseen_gpus[] = {"T4-16G",   "V100-16G", "V100-32G", "P100-12G", "P100-16G",
                                          "A10-24G",  "L4-24G",   "A100-40G", "A100-80G", "A800-80G",
                                          "H100-80G", "H800-80G", "RTX3090",  "RTX4090"};

/* The generation rule of the unseen clusters (docs/plan.md): case i of seed S draws from
 * ls_rng seeded with S * 1000 + i: 2 or 3 distinct GPU kinds of unseen_gpus (uniformly),
 * 1 to 3 devices of each on a node of their own (at most 8 devices), and a catalog model
 * (llmsys-* excluded), until the model needs more than the cluster's usable memory at 16
 * bits and at most 90% of it at 4 bits (workload batch 32, prompt 512, 128 generated
 * tokens), so that quantization decides; the quality target is bits:4. */
static int unseen_cluster(const ls_plan_catalog *cat, uint64_t seed, int i, const char *path, ls_plan_arch *arch) {
    enum { NG = sizeof unseen_gpus / sizeof unseen_gpus[0] };
    ls_plan_gpu gpu[NG];
    for (int k = 0; k < NG; k++)
        if (ls_plan_catalog_gpu(cat, unseen_gpus[k], &gpu[k])) return -1;
    int ng = NG, nm = ls_plan_catalog_num_models(cat);
    ls_rng r;
    ls_rng_seed(&r, seed * 1000 + (uint64_t)i);
    ls_plan_workload wl = {32, 512, 128};
    int rc = -1;
    for (int tries = 0; tries < 10000 && rc; tries++) {
        int nk = 2 + (int)ls_rng_below(&r, 2), kind[3], cnt[3], tot = 0;
        for (int k = 0; k < nk; k++) {
            int dup;
            do {
                kind[k] = (int)ls_rng_below(&r, (uint64_t)ng);
                dup = 0;
                for (int t = 0; t < k; t++) dup |= kind[t] == kind[k];
            } while (dup);
            cnt[k] = 1 + (int)ls_rng_below(&r, 3);
            tot += cnt[k];
        }
        const char *mname = ls_plan_catalog_model_name(cat, (int)ls_rng_below(&r, (uint64_t)nm));
        if (tot > 8 || !strncmp(mname, "llmsys-", 7) || ls_plan_catalog_model(cat, mname, arch)) continue;
        double have = 0;
        for (int k = 0; k < nk; k++) have += cnt[k] * ls_plan_usable_bytes(gpu[kind[k]].mem_bytes);
        double fixed = ls_plan_embed_bytes(arch) + ls_plan_head_bytes(arch) + arch->n_layer * ls_plan_layer_kv_bytes(arch, &wl);
        double need16 = fixed + arch->n_layer * ls_plan_layer_weight_bytes(arch, 16);
        double need4 = fixed + arch->n_layer * ls_plan_layer_weight_bytes(arch, 4);
        if (!(need16 > have && need4 <= 0.9 * have) || arch->n_layer < tot) continue;
        FILE *f = fopen(path, "w");
        if (!f) break;
        fprintf(f, "{\"format\":\"llmsys-cluster\",\"version\":1,\"name\":\"unseen-%d\",\"model\":\"%s\",", i, mname);
        fprintf(f, "\"workload\":{\"batch\":%d,\"prompt\":%d,\"gen\":%d},\"inter_node_GBps\":12.5,"
                   "\"inter_node_latency_us\":20,\"nodes\":[", wl.batch, wl.prompt, wl.gen);
        for (int k = 0; k < nk; k++)
            fprintf(f, "%s{\"gpu\":\"%s\",\"count\":%d}", k ? "," : "", unseen_gpus[kind[k]], cnt[k]);
        fprintf(f, "]}\n");
        rc = fclose(f) ? -1 : 0;
    }
    return rc;
}

typedef struct {
    int ok;
    double tput, obj, solve_s, gap, quality;
    int optimal;
    double cpu_s;  /* CPU time of the solving thread (the machine is shared: wall time is noisy) */
    double replay; /* the plan's replay of serve's schedule (tok/s), ls_plan_simulate */
} res_t;

int main(int argc, char **argv) {
    const char *out = NULL, *only = NULL;
    double ilp_limit = 6.0, unseen_limit = 60.0;
    int quick = 0, n_unseen = 6, seed = 1, ilp_cpu = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1, ilp_limit = 1.0, unseen_limit = 5.0;
        else if (!strcmp(argv[i], "--unseen-limit") && i + 1 < argc)
            unseen_limit = atof(argv[++i]);
        else if (!strcmp(argv[i], "--unseen") && i + 1 < argc)
            n_unseen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ilp-limit") && i + 1 < argc)
            ilp_limit = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ilp-cpu"))
            ilp_cpu = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_plan [--quick] [--out FILE] [--ilp-limit S] [--unseen-limit S] [--unseen N] "
                            "[--seed N] [--ilp-cpu] [--only CLUSTER]\n");
            return 2;
        }
    }
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(NULL, &cat)) {
        fprintf(stderr, "bench_plan: %s\n", ls_errmsg());
        return 1;
    }
    char **names;
    int n;
    if (ls_plan_catalog_clusters(cat, &names, &n)) {
        fprintf(stderr, "bench_plan: %s\n", ls_errmsg());
        return 1;
    }
    const ls_plan_algo algos[] = {LS_PLAN_ALGO_UNIFORM, LS_PLAN_ALGO_ADABITS, LS_PLAN_ALGO_PIPEEDGE,
                                  LS_PLAN_ALGO_SPLITQUANT, LS_PLAN_ALGO_ILP};
    enum { NA = 5 };
    cJSON *jr = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(jr, "cases");
    cJSON_AddStringToObject(jr, "bench", "plan");
    cJSON_AddStringToObject(jr, "note", "throughputs are modelled from datasheet figures, solve times measured here");
    printf("Planner benchmark: throughput is MODELLED (tok/s from data/gpus.json figures); solve times measured.\n");
    double la[3];
    ls_load_avg(la);
    printf("Load average at start: %.2f %.2f %.2f (solve times are CPU of the solving thread where marked cpu)\n",
           la[0], la[1], la[2]);
    cJSON_AddNumberToObject(jr, "load_avg_1m", la[0]);
    printf("Quality target of every algorithm: no worse than the uniform baseline's indicator.\n\n");
    printf("%-10s %4s %-12s %9s %9s %9s %9s %9s %7s %7s %7s %7s %9s %9s %9s %9s %8s\n", "cluster", "gpus", "model",
           "uniform", "adabits", "pipeedge", "splitq", "ilp", "sq/uni", "sq/pe", "rp s/u", "rs s/u", "gap%", "sq ms",
           "sq cpu", "ilp s", "ilp gap%");
    double sum_rratio = 0, sum_sratio = 0;
    double sum_ratio = 0, max_gap = 0, max_ms8 = 0, max_ms64 = 0, max_cpu8 = 0, max_cpu64 = 0;
    int n_llmpq = 0, n_opt = 0, failures = 0, n_worse = 0;
    double t_start = ls_now();
    for (int c = 0; c < n; c++) {
        if (only && strcmp(only, names[c])) continue;
        if (quick && strncmp(names[c], "llmpq-", 6) && strcmp(names[c], "demo-70b")) continue;
        ls_plan_cluster *cl;
        ls_plan_arch arch;
        if (ls_plan_cluster_load(cat, names[c], &cl) || ls_plan_catalog_model(cat, cl->model, &arch)) {
            fprintf(stderr, "bench_plan: %s: %s\n", names[c], ls_errmsg());
            failures++;
            continue;
        }
        ls_plan_problem *pb = malloc(sizeof *pb);
        ls_plan_result *pl = malloc(sizeof *pl);
        res_t r[NA];
        memset(r, 0, sizeof r);
        ls_plan_workload wl = {cl->batch ? cl->batch : 32, cl->prompt ? cl->prompt : 512, cl->gen ? cl->gen : 100};
        ls_plan_problem_init(pb, &arch, cl, wl);
        pb->time_limit_s = ilp_limit;
        pb->time_limit_cpu = ilp_cpu;
        for (int t = 0; t < NA; t++) {
            /* when even the uniform split does not fit, the target is "no worse than all at 4 bits" */
            if (t == 1 && !r[0].ok) ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4});
            double c0 = ls_thread_cpu_time();
            int rc = ls_plan_solve(pb, algos[t], pl);
            double cpu = ls_thread_cpu_time() - c0;
            if (rc) {
                fprintf(stderr, "  %s %s: %s\n", names[c], ls_plan_algo_name(algos[t]), ls_errmsg());
                continue;
            }
            ls_plan_sim_opts so = ls_plan_sim_for_cluster(cl);
            ls_plan_sim_result sr;
            double rep = ls_plan_simulate(pb, pl, &so, &sr) == LS_OK ? sr.tok_s : NAN;
            r[t] = (res_t){1,           pl->throughput_tok_s, pl->objective, pl->solve_s, pl->ilp_gap,
                           pl->quality, pl->ilp_optimal,      cpu,           rep};
            /* everyone else must match the uniform plan's quality */
            if (algos[t] == LS_PLAN_ALGO_UNIFORM) pb->qmax = pl->quality * (1 + 1e-9);
        }
        res_t *u = &r[0], *pe = &r[2], *sq = &r[3], *ilp = &r[4];
        double ru = u->ok && sq->ok ? sq->tput / u->tput : NAN, rp = pe->ok && sq->ok ? sq->tput / pe->tput : NAN;
        double gap = sq->ok && ilp->ok ? (sq->obj - ilp->obj) / ilp->obj : NAN;
        /* the same ratio by the replay of serve's schedule (partial micro-batches, hops), for
         * splitquant's plan and for splitquant re-ranking its best plans by the replay */
        double rr = u->ok && sq->ok ? sq->replay / u->replay : NAN, rs = NAN;
        pb->replay_select = 16;
        if (u->ok && ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, pl) == LS_OK) {
            ls_plan_sim_opts so = ls_plan_sim_for_cluster(cl);
            ls_plan_sim_result sr;
            if (ls_plan_simulate(pb, pl, &so, &sr) == LS_OK) rs = sr.tok_s / u->replay;
        }
        pb->replay_select = 0;
        printf("%-10s %4d %-12s", names[c], cl->n_dev, arch.name);
        for (int t = 0; t < NA; t++) r[t].ok ? printf(" %9.1f", r[t].tput) : printf(" %9s", "-");
        printf(" %6.2fx %6.2fx %6.2fx %6.2fx %8.3f%s %9.2f %9.2f %9.2f %8.3f\n", ru, rp, rr, rs, gap * 100,
               ilp->ok ? (ilp->optimal ? "*" : " ") : " ", sq->solve_s * 1e3, sq->cpu_s * 1e3, ilp->solve_s,
               ilp->ok ? ilp->gap * 100 : NAN);
        /* splitquant must never lose to a baseline that meets the same target */
        for (int t = 0; t < 3; t++)
            if (sq->ok && r[t].ok && r[t].quality <= pb->qmax && r[t].obj < sq->obj * (1 - 1e-9)) {
                printf("  ^ splitquant worse than %s\n", ls_plan_algo_name(algos[t]));
                n_worse++;
            }
        if (!strncmp(names[c], "llmpq-", 6) && isfinite(ru))
            sum_ratio += ru, sum_rratio += rr, sum_sratio += rs, n_llmpq++;
        if (ilp->ok && ilp->optimal && isfinite(gap)) {
            n_opt++;
            if (gap > max_gap) max_gap = gap;
        }
        if (cl->n_dev <= 8 && sq->solve_s * 1e3 > max_ms8) max_ms8 = sq->solve_s * 1e3;
        if (cl->n_dev > 8 && sq->solve_s * 1e3 > max_ms64) max_ms64 = sq->solve_s * 1e3;
        if (cl->n_dev <= 8 && sq->cpu_s * 1e3 > max_cpu8) max_cpu8 = sq->cpu_s * 1e3;
        if (cl->n_dev > 8 && sq->cpu_s * 1e3 > max_cpu64) max_cpu64 = sq->cpu_s * 1e3;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cluster", names[c]);
        cJSON_AddStringToObject(o, "model", arch.name);
        cJSON_AddNumberToObject(o, "gpus", cl->n_dev);
        for (int t = 0; t < NA; t++) {
            cJSON *a = cJSON_AddObjectToObject(o, ls_plan_algo_name(algos[t]));
            cJSON_AddBoolToObject(a, "ok", r[t].ok);
            if (!r[t].ok) continue;
            cJSON_AddNumberToObject(a, "throughput_tok_s", r[t].tput);
            if (isfinite(r[t].replay)) cJSON_AddNumberToObject(a, "replay_tok_s", r[t].replay);
            cJSON_AddNumberToObject(a, "objective_s", r[t].obj);
            cJSON_AddNumberToObject(a, "quality", r[t].quality);
            cJSON_AddNumberToObject(a, "solve_s", r[t].solve_s);
            cJSON_AddNumberToObject(a, "solve_cpu_s", r[t].cpu_s);
            if (algos[t] == LS_PLAN_ALGO_ILP) {
                cJSON_AddBoolToObject(a, "optimal", r[t].optimal);
                cJSON_AddNumberToObject(a, "gap", r[t].gap);
            }
        }
        if (isfinite(ru)) cJSON_AddNumberToObject(o, "splitquant_over_uniform", ru);
        if (isfinite(rp)) cJSON_AddNumberToObject(o, "splitquant_over_pipeedge", rp);
        if (isfinite(rr)) cJSON_AddNumberToObject(o, "splitquant_over_uniform_replay", rr);
        if (isfinite(rs)) cJSON_AddNumberToObject(o, "replay_selected_over_uniform_replay", rs);
        if (isfinite(gap)) cJSON_AddNumberToObject(o, "splitquant_gap_to_ilp", gap);
        cJSON_AddItemToArray(rows, o);
        free(pb);
        free(pl);
        ls_plan_cluster_free(cl);
    }
    /* splitquant against the ILP on generated clusters */
    printf("\nUnseen mixed clusters (seed %d, rule in docs/plan.md; quality bits:4; ILP limit %.0f s each):\n", seed,
           unseen_limit);
    printf("%-9s %-34s %-12s %11s %11s %11s %8s %8s %4s %8s %7s\n", "case", "gpus", "model", "splitq obj", "ilp best",
           "ilp bound", "sq-best%", "sq-bnd%", "opt", "sq ms", "ilp s");
    cJSON *urows = cJSON_AddArrayToObject(jr, "unseen");
    double max_best = 0, max_bound = 0;
    int n_closed = 0, n_u = 0;
    for (int i = 0; i < n_unseen; i++) {
        char path[256];
        snprintf(path, sizeof path, "unseen-%d", i);
        if (only && strcmp(only, path) && strcmp(only, "unseen")) continue;
        snprintf(path, sizeof path, "/tmp/bench_plan_unseen_%d_%d.json", (int)getpid(), i);
        ls_plan_arch arch;
        ls_plan_cluster *cl;
        if (unseen_cluster(cat, (uint64_t)seed, i, path, &arch) || ls_plan_cluster_load(cat, path, &cl)) {
            fprintf(stderr, "bench_plan: unseen case %d: %s\n", i, ls_errmsg());
            failures++;
            remove(path);
            continue;
        }
        remove(path);
        char desc[128] = "";
        for (int d = 0; d < cl->n_dev; d++) {
            int same = 1;
            while (d + same < cl->n_dev && !strcmp(cl->dev[d + same].name, cl->dev[d].name)) same++;
            size_t l = strlen(desc);
            snprintf(desc + l, sizeof desc - l, "%s%dx%s", l ? "+" : "", same, cl->dev[d].name);
            d += same - 1;
        }
        ls_plan_problem *pb = malloc(sizeof *pb);
        ls_plan_result *sq = malloc(sizeof *sq), *il = malloc(sizeof *il);
        ls_plan_problem_init(pb, &arch, cl, (ls_plan_workload){cl->batch, cl->prompt, cl->gen});
        ls_plan_problem_set_quality(pb, (ls_plan_qtarget){LS_PLAN_Q_BITS, 4});
        pb->time_limit_s = unseen_limit;
        pb->time_limit_cpu = ilp_cpu;
        double c0 = ls_thread_cpu_time();
        int rs = ls_plan_solve(pb, LS_PLAN_ALGO_SPLITQUANT, sq);
        double cpu = ls_thread_cpu_time() - c0;
        int ri = ls_plan_solve(pb, LS_PLAN_ALGO_ILP, il);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "case", cl->name);
        cJSON_AddStringToObject(o, "gpus", desc);
        cJSON_AddStringToObject(o, "model", arch.name);
        if (rs || ri) {
            printf("%-9s %-34s %-12s  %s\n", cl->name, desc, arch.name, rs ? "splitquant: no plan" : "ILP: no plan");
            if (rs && ri == LS_OK) failures++;
        } else {
            /* gap 1: some candidate was never visited, no bound */
            double bound = il->ilp_gap < 1 ? il->objective * (1 - il->ilp_gap) : NAN;
            double gb = (sq->objective - il->objective) / il->objective, gl = (sq->objective - bound) / bound;
            printf("%-9s %-34s %-12s %11.5f %11.5f %11.5f %8.3f %8.3f %4s %8.1f %7.1f\n", cl->name, desc, arch.name,
                   sq->objective, il->objective, bound, gb * 100, gl * 100, il->ilp_optimal ? "yes" : "no",
                   cpu * 1e3, il->solve_s);
            n_u++;
            if (gb > max_best) max_best = gb;
            if (il->ilp_optimal) {
                n_closed++;
                if (gl > max_bound) max_bound = gl;
            }
            cJSON_AddNumberToObject(o, "splitquant_objective_s", sq->objective);
            cJSON_AddNumberToObject(o, "ilp_best_objective_s", il->objective);
            if (isfinite(bound)) cJSON_AddNumberToObject(o, "ilp_bound_s", bound);
            cJSON_AddBoolToObject(o, "ilp_optimal", il->ilp_optimal);
            cJSON_AddNumberToObject(o, "splitquant_over_best", gb);
            cJSON_AddNumberToObject(o, "splitquant_over_bound", gl);
            cJSON_AddNumberToObject(o, "splitquant_cpu_s", cpu);
            cJSON_AddNumberToObject(o, "ilp_solve_s", il->solve_s);
        }
        cJSON_AddItemToArray(urows, o);
        free(pb), free(sq), free(il);
        ls_plan_cluster_free(cl);
    }
    printf("(sq-best%%: splitquant's objective over the best ILP plan, which starts from splitquant's; sq-bnd%%: over "
           "the ILP's proven lower bound; opt: the ILP closed its gap)\n");
    printf("unseen: max splitquant over best ILP %.3f%% on %d cases (goal <= 0.5%%); max over the bound %.3f%% on the %d "
           "the ILP closed (goal <= 1%%)\n",
           max_best * 100, n_u, max_bound * 100, n_closed);
    double mean = n_llmpq ? sum_ratio / n_llmpq : NAN;
    printf("\n(* = ILP proven optimal; gap = splitquant objective over the ILP's, positive = worse; ilp gap = (ILP best - proven bound) / ILP best)\n");
    printf("mean splitquant/uniform over the LLM-PQ cases: %.2fx (goal >= 1.6x); by the replay of serve's schedule "
           "%.2fx, replay-selected splitquant %.2fx\n",
           mean, n_llmpq ? sum_rratio / n_llmpq : NAN, n_llmpq ? sum_sratio / n_llmpq : NAN);
    printf("max gap to ILP where ILP optimal (%d cases): %.3f%% (goal <= 1%%)\n", n_opt, max_gap * 100);
    printf("max splitquant solve time (wall, shared machine): %.1f ms on <= 8 GPUs, %.1f ms on 16-64 GPUs\n", max_ms8,
           max_ms64);
    printf("max splitquant solve time (CPU of the solving thread): %.1f ms on <= 8 GPUs (goal 100 ms), %.1f ms on "
           "16-64 GPUs (goal 2000 ms)\n",
           max_cpu8, max_cpu64);
    printf("cases where splitquant is worse than a baseline meeting the same target: %d\n", n_worse);
    printf("bench wall time %.1f s\n", ls_now() - t_start);
    cJSON *s = cJSON_AddObjectToObject(jr, "summary");
    cJSON_AddNumberToObject(s, "mean_splitquant_over_uniform_llmpq", mean);
    if (n_llmpq) {
        cJSON_AddNumberToObject(s, "mean_splitquant_over_uniform_llmpq_replay", sum_rratio / n_llmpq);
        cJSON_AddNumberToObject(s, "mean_replay_selected_over_uniform_llmpq_replay", sum_sratio / n_llmpq);
    }
    cJSON_AddNumberToObject(s, "max_gap_to_optimal_ilp", max_gap);
    cJSON_AddNumberToObject(s, "ilp_optimal_cases", n_opt);
    cJSON_AddNumberToObject(s, "max_solve_ms_le8", max_ms8);
    cJSON_AddNumberToObject(s, "max_solve_ms_gt8", max_ms64);
    cJSON_AddNumberToObject(s, "max_solve_cpu_ms_le8", max_cpu8);
    cJSON_AddNumberToObject(s, "max_solve_cpu_ms_gt8", max_cpu64);
    cJSON_AddNumberToObject(s, "splitquant_worse_than_baseline", n_worse);
    cJSON_AddNumberToObject(s, "ilp_limit_s", ilp_limit);
    cJSON_AddBoolToObject(s, "ilp_limit_cpu", ilp_cpu);
    cJSON_AddNumberToObject(s, "unseen_seed", seed);
    cJSON_AddNumberToObject(s, "unseen_ilp_limit_s", unseen_limit);
    cJSON_AddNumberToObject(s, "unseen_max_over_best_ilp", max_best);
    cJSON_AddNumberToObject(s, "unseen_max_over_bound_closed", max_bound);
    cJSON_AddNumberToObject(s, "unseen_ilp_closed_cases", n_closed);
    if (out && ls_json_write_file(out, jr)) {
        fprintf(stderr, "bench_plan: %s\n", ls_errmsg());
        failures++;
    }
    cJSON_Delete(jr);
    ls_plan_names_free(names, n);
    ls_plan_catalog_free(cat);
    return failures ? 1 : 0;
}
