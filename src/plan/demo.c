/* demo.c - the planner comparison of `llmsys demo plan`: every algorithm on one catalog
 * model and cluster at the uniform baseline's quality, as a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"

int ls_plan_demo_compare(FILE *f, const ls_plan_catalog *cat, const char *cluster, const char *model, int quick) {
    ls_plan_cluster *cl;
    ls_plan_arch arch;
    LS_TRY(ls_plan_cluster_load(cat, cluster, &cl));
    int ret = ls_plan_catalog_model(cat, model, &arch);
    if (ret) {
        ls_plan_cluster_free(cl);
        return ret;
    }
    ls_plan_workload wl = ls_plan_cluster_workload(cl, -1, -1, -1);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = malloc(sizeof *pl * LS_PLAN_ALGO_COUNT);
    if (!pb || !pl)
        ret = ls_err(LS_ENOMEM, "out of memory");
    else
        ret = ls_plan_problem_init(pb, &arch, cl, wl);
    if (ret) goto done;
    /* the quality target every algorithm must meet: that of the uniform baseline */
    if ((ret = ls_plan_solve(pb, LS_PLAN_ALGO_UNIFORM, &pl[LS_PLAN_ALGO_UNIFORM]))) goto done;
    pb->qmax = pl[LS_PLAN_ALGO_UNIFORM].quality * (1 + 1e-9);
    pb->time_limit_s = quick ? 1.0 : 8.0;
    fprintf(f, "\n%s on %s (%d GPUs), batch %d, prompt %d, gen %d; quality target: no worse than uniform (%.3g)\n",
            arch.name, cl->name, cl->n_dev, wl.batch, wl.prompt, wl.gen, pb->qmax);
    fprintf(f, "  %-10s %10s %8s %9s %9s %8s %9s  %s\n", "algo", "tok/s", "vs unif", "prefill s", "decode s", "quality",
            "solve ms", "stages (device:layers@bits)");
    ls_plan_algo order[] = {LS_PLAN_ALGO_UNIFORM, LS_PLAN_ALGO_ADABITS, LS_PLAN_ALGO_PIPEEDGE, LS_PLAN_ALGO_SPLITQUANT,
                            LS_PLAN_ALGO_ILP};
    for (int t = 0; t < 5; t++) {
        ls_plan_algo al = order[t];
        ls_plan_result *x = &pl[al];
        int rc = al == LS_PLAN_ALGO_UNIFORM ? 0 : ls_plan_solve(pb, al, x);
        if (rc) {
            fprintf(f, "  %-10s %s\n", ls_plan_algo_name(al), ls_errmsg());
            continue;
        }
        char st[256] = "";
        for (int s = 0; s < x->n_stage && strlen(st) < 200; s++) {
            int hi = 0, lo = 99;
            for (int i = x->begin[s]; i < x->begin[s + 1]; i++) {
                hi = x->bits[i] > hi ? x->bits[i] : hi;
                lo = x->bits[i] < lo ? x->bits[i] : lo;
            }
            size_t l = strlen(st);
            if (lo == hi)
                snprintf(st + l, sizeof st - l, "%s%s:%d@%d", s ? " " : "", cl->dev[x->dev[s]].name,
                         x->begin[s + 1] - x->begin[s], hi);
            else
                snprintf(st + l, sizeof st - l, "%s%s:%d@%d-%d", s ? " " : "", cl->dev[x->dev[s]].name,
                         x->begin[s + 1] - x->begin[s], lo, hi);
        }
        fprintf(f, "  %-10s %10.1f %7.2fx %9.2f %9.2f %8.3g %9.1f  %s\n", ls_plan_algo_name(al), x->throughput_tok_s,
                x->throughput_tok_s / pl[LS_PLAN_ALGO_UNIFORM].throughput_tok_s, x->prefill_s, x->decode_s, x->quality,
                x->solve_s * 1e3, st);
        if (al == LS_PLAN_ALGO_ILP)
            fprintf(f, "  %-10s ILP %s (gap %.2g%%)\n", "", x->ilp_optimal ? "proven optimal" : "hit its time limit",
                    x->ilp_gap * 100);
    }
done:
    free(pb);
    free(pl);
    ls_plan_cluster_free(cl);
    return ret;
}
