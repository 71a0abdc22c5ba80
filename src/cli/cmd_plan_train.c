/* cmd_plan_train.c - `llmsys plan train`: per-rank, per-layer precision plans for
 * hybrid-device data-parallel training (QSync), and `llmsys demo qsync`. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/plan.h"

int plan_train(int argc, char **argv) {
    ls_tplan_opts o = ls_tplan_defaults();
    ls_strlist data = {0};
    int quiet = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &o.model, "CONFIG|CKPT", "llmsys config (tiny, small) or checkpoint (default small)"},
        {"cluster", LS_ARG_STR, &o.cluster, "C",
         "ranks: local:1,0.5 (CPU shares here, measured) or A100x2,T4x2 (catalog GPUs, modelled)", 1},
        {"out", LS_ARG_PATH, &o.out, "FILE", "plan to write (JSON)", 1},
        {"data", LS_ARG_PATH_LIST, &data, "PATH", "text for the profile and the indicator (default: the docs)"},
        {"batch", LS_ARG_INT, &o.batch, "B", "global batch over all ranks (default 8)"},
        {"seq", LS_ARG_INT, &o.seq, "T", "tokens per sequence (default: the model's context)"},
        {"strategy", LS_ARG_STR, &o.strategy, "S",
         "qsync (default, exact), greedy (QSync's), uniform (slow ranks all low), fp32"},
        {"uniform", LS_ARG_STR, &o.uniform, "P", "precision of --strategy uniform (default: each rank's fastest)"},
        {"int8", LS_ARG_STR, &o.int8, "SCALES", "int8 scales: channel (default) or tensor"},
        {"threads", LS_ARG_INT, &o.threads, "N", "threads per rank (local; default cores / ranks)"},
        {"reps", LS_ARG_INT, &o.reps, "N", "profile rounds on this machine's ranks (median; default 5, at least 3)"},
        {"mem-gb", LS_ARG_FLOAT, &o.mem_gb, "GB", "memory per rank (default: the device's, or RAM / ranks here)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "print nothing but errors"},
    };
    int prc = ls_args("plan train",
                      "Plans the precision of every Linear layer on every rank so slow ranks keep pace (QSync). "
                      "Example:\n  llmsys plan train --model small --cluster local:1,0.5 --out plan.json",
                      spec, LS_NARGS(spec), argc, argv);
    if (prc >= 0) {
        ls_strlist_free(&data);
        return prc;
    }
    o.data = (const char *const *)data.v;
    o.n_data = data.n;
    /* an output it could not write is a runtime error (1), as for every command (was 2) */
    if (ls_out_path_check("out", o.out)) {
        ls_strlist_free(&data);
        return ls_cli_fail();
    }
    int ranks = 0, rc = ls_tplan_check_opts(&o, &ranks), code = 0;
    ls_tplan *p = malloc(sizeof *p);
    if (rc == LS_OK && ranks > 1 && !getenv("OMPI_COMM_WORLD_SIZE")) {
        /* this machine's ranks are profiled together, one process each: hand over to mpirun */
        char lost[300];
        code = ls_cli_status(ls_dist_relaunch(ranks, ls_cli_self(), "plan", argc, argv, lost, sizeof lost));
        if (lost[0]) fprintf(stderr, "llmsys plan train: %s\n", lost);
        ls_strlist_free(&data);
        free(p);
        return code;
    }
    if (rc == LS_OK && ranks > 1) rc = ls_dist_init(&o.dist);
    int rank = o.dist ? ls_dist_rank(o.dist) : 0;
    if (rc == LS_OK) rc = p ? ls_tplan_make(&o, p) : ls_err(LS_ENOMEM, "out of memory");
    if (rc < 0) {
        code = ls_cli_input_error(rc) ? 2 : 1;          /* an infeasible request included */
        if (rank == 0 || rc != LS_EPEER) ls_cli_fail(); /* the rank that failed says why */
    } else if (!quiet && rank == 0)
        ls_tplan_print(stdout, p), printf("wrote %s\n", o.out);
    ls_dist_free(o.dist);
    ls_strlist_free(&data);
    free(p);
    return code;
}

int demo_qsync(const ls_demo_ctx *ctx) {
    return ls_tplan_demo(ls_cli_self(), ctx->workdir, ctx->quick, stdout) < 0 ? ls_cli_fail() : 0;
}
