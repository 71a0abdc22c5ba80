/* cmd_plan.c - `llmsys plan` (serve planner, catalogs, indicators) and the plan demo
 * scenario. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* Errors in what the user gave (names, files, numbers) are usage errors: exit 2. */
static int fail_input(void) { return ls_cli_fail_rc(LS_EINVAL); }

static int plan_serve(int argc, char **argv) {
    const char *quality = "bits:4", *algo = "splitquant", *out = NULL, *report = NULL, *vllm = NULL;
    const char *select = "objective";
    /* -1: the cluster file's workload (a value a user could type: not given is LS_ARG_UNSET) */
    ls_plan_request rq = {.batch = LS_ARG_UNSET, .prompt = LS_ARG_UNSET, .gen = LS_ARG_UNSET, .time_limit_s = 10};
    int quiet = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &rq.model, "M",
         "catalog model (opt-30b, llama-2-70b, ...) or llmsys checkpoint path (default: the cluster file's)"},
        {"cluster", LS_ARG_STR, &rq.cluster, "C", "cluster JSON file or catalog name (llmpq-2, mixed-64, ...)", 1},
        {"batch", LS_ARG_INT, &rq.batch, "B", "sequences in the batch (default: cluster file's, else 32)"},
        {"prompt", LS_ARG_INT, &rq.prompt, "S", "prompt tokens (default: cluster file's, else 512)"},
        {"gen", LS_ARG_INT, &rq.gen, "N", "generated tokens (default: cluster file's, else 100)"},
        {"quality", LS_ARG_STR, &quality, "Q",
         "bits:B (no worse than all layers at B bits; default bits:4), max:X (total indicator), theta:X (trade-off "
         "weight, s per unit), none"},
        {"indicator", LS_ARG_PATH, &rq.indicator, "I",
         "default | variance | measured (checkpoint models) | FILE (llmsys-indicator JSON)"},
        {"algo", LS_ARG_STR, &algo, "A", "splitquant (default) | ilp | uniform | pipeedge | adabits", 0,
         LS_CHOICES(LS_PLAN_SERVE_ALGOS)},
        {"bits", LS_ARG_STR, &rq.bits, "LIST", "allowed bit widths, e.g. 4,8,16 (default 3,4,8,16)"},
        {"time-limit", LS_ARG_FLOAT, &rq.time_limit_s, "S",
         "ILP time limit in seconds over all candidates (default 10)"},
        {"select", LS_ARG_STR, &select, "HOW",
         "splitquant: objective (default; the LLM-PQ closed form) | replay (top plans re-ranked by the replay of "
         "serve's schedule on the cluster's host)",
         0, LS_CHOICES("objective|replay")},
        {"out", LS_ARG_PATH, &out, "FILE", "write the plan (llmsys-plan v1)"},
        {"report", LS_ARG_PATH, &report, "FILE", "write the plan with per-device memory, solve time and vLLM export"},
        {"export-vllm", LS_ARG_PATH, &vllm, "FILE", "write vLLM launch lines and the per-layer quantization map"},
        {"data", LS_ARG_PATH, &rq.data, "DIR", "catalog directory (default $LLMSYS_DATA or the source tree's data/)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "print nothing on success"},
    };
    int rc = ls_args("plan serve", "Plans stages, per-layer bits and micro-batches for serving a model on a cluster.",
                     spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (ls_args_given("plan serve", "batch", &rq.batch, 1, -1) ||
        ls_args_given("plan serve", "prompt", &rq.prompt, 1, -1) || ls_args_given("plan serve", "gen", &rq.gen, 1, -1))
        return 2;
    int a = ls_plan_algo_parse(algo); /* one of its names: the parser checked */
    if (!(rq.time_limit_s > 0) || rq.time_limit_s > 3600)
        return ls_usage_err("plan serve", "--time-limit must be in (0, 3600] seconds");
    rq.replay_select = strcmp(select, "replay") ? 0 : 16;
    if (ls_plan_qtarget_parse(quality, &rq.quality)) return fail_input();
    /* the outputs can be written: checked before the solve (an ILP may take --time-limit) */
    if ((out && ls_out_path_check("out", out)) || (report && ls_out_path_check("report", report)) ||
        (vllm && ls_out_path_check("export-vllm", vllm)))
        return ls_cli_fail();
    ls_plan_catalog *cat;
    ls_plan_cluster *cl;
    ls_plan_arch arch;
    ls_plan_problem *pb;
    ls_plan_result *pl = malloc(sizeof *pl);
    int kind, ret = 0;
    if ((rc = ls_plan_request_problem(&rq, &cat, &cl, &arch, &pb, &kind)))
        ret = kind == LS_PLAN_REQ_OPTION  ? ls_usage_err("plan serve", "%s", ls_errmsg())
              : kind == LS_PLAN_REQ_INPUT ? fail_input()
                                          : ls_cli_fail();
    else if (!pl)
        ret = ls_cli_fail();
    else if ((rc = ls_plan_solve(pb, (ls_plan_algo)a, pl))) /* nothing fits: the request (2) */
        ret = ls_cli_fail_rc(rc);
    if (!ret && !quiet) ls_plan_print(stdout, pb, pl);
    if (!ret && out && ls_plan_result_write(pb, pl, out)) ret = ls_cli_fail();
    if (!ret && report && ls_plan_report_write(pb, pl, report)) ret = ls_cli_fail();
    if (!ret && vllm && ls_plan_export_vllm(pb, pl, vllm)) ret = ls_cli_fail();
    free(pl);
    free(pb);
    ls_plan_cluster_free(cl);
    ls_plan_catalog_free(cat);
    return ret;
}

static int plan_list(int argc, char **argv) {
    const char *data = NULL;
    ls_arg spec[] = {{"data", LS_ARG_PATH, &data, "DIR", "catalog directory"}};
    int rc = ls_args("plan list", "Lists the catalog: models, clusters.", spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(data, &cat)) return fail_input();
    ls_plan_catalog_print(stdout, cat);
    ls_plan_catalog_free(cat);
    return 0;
}

static int plan_indicator(int argc, char **argv) {
    const char *out = NULL, *data = NULL;
    ls_strlist calib = {0};
    ls_indicator_opts o = {.method = "variance", .calib_tokens = LS_ARG_UNSET64};
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &o.model, "PATH", "llmsys checkpoint (or a catalog name for the default profile)", 1},
        {"method", LS_ARG_STR, &o.method, "M",
         "variance (LLM-PQ, default) | measured | default | kl (each layer quantized alone, the KL divergence of "
         "the output measured on --calib-data)",
         0, LS_CHOICES("variance|measured|default|kl")},
        {"out", LS_ARG_PATH, &out, "FILE", "write the indicator (llmsys-indicator JSON)", 1},
        {"data", LS_ARG_PATH, &data, "DIR", "catalog directory"},
        {"calib-data", LS_ARG_PATH_LIST, &calib, "PATH",
         "text (its train split) the indicator is measured on: variance, measured: the Linear inputs' variances, by "
         "forward passes of the fp32 checkpoint, instead of propagated from the weights; kl: the KL divergences"},
        {"relative", LS_ARG_FLAG, &o.relative, NULL,
         "with --calib-data: each layer's error relative to the residual stream it stays in (the mean measured "
         "1/sigma^2 of the LayerNorms after it)"},
        {"calib-tokens", LS_ARG_I64, &o.calib_tokens, "N",
         "calibration tokens (default 16384, kl 4096; 0: the whole split)", 0, LS_MIN(0)},
        {"threads", LS_ARG_INT, &o.nthreads, "N", "kl: engine passes run N at a time, one per thread (default 1)", 0,
         LS_RANGE(1, LS_MODEL_MAX_THREADS)},
    };
    int rc = ls_args("plan indicator", "Computes the per-layer, per-bit quality indicator of a model.", spec,
                     LS_NARGS(spec), argc, argv);
    o.calib = (const char *const *)calib.v, o.n_calib = calib.n;
    if (o.calib_tokens == LS_ARG_UNSET64) o.calib_tokens = -1; /* the method's default */
    if (rc < 0 && ls_indicator_check(&o))
        rc = ls_usage_err("plan indicator", "%s", ls_errmsg());
    else if (rc < 0 && ls_out_path_check("out", out)) /* before the work */
        rc = ls_cli_fail();
    ls_plan_catalog *cat = NULL;
    ls_plan_arch arch;
    double *om = rc < 0 ? malloc(sizeof(double) * LS_PLAN_MAX_LAYER * LS_PLAN_NBITS) : NULL;
    ls_eval_result cr;
    int st = rc >= 0 ? LS_OK : !om ? ls_err(LS_ENOMEM, "indicator") : ls_plan_catalog_load(data, &cat);
    if (rc < 0 && st == LS_OK) st = ls_plan_resolve_model(cat, o.model, &arch);
    if (rc < 0 && st == LS_OK) st = ls_indicator_compute(&o, &arch, om, &cr);
    if (rc < 0 && st == LS_OK) st = ls_plan_quality_write(out, &arch, om);
    if (rc < 0 && st == LS_OK) {
        rc = 0;
        printf("indicator of %s (%d layers, %s) written to %s", arch.name, arch.n_layer, o.method, out);
        if (cr.tokens) printf("; input variances measured on %zu tokens (loss %.4f)", cr.tokens, cr.loss);
        if (!strcmp(o.method, "kl")) printf("; measured on the train split of --calib-data");
        printf("\n");
    } else if (rc < 0) {
        rc = ls_cli_fail_rc(st);
    }
    free(om);
    ls_plan_catalog_free(cat);
    ls_strlist_free(&calib);
    return rc;
}

/* ---------------------------------------------------------------- validate (closing the loop) */

/* `llmsys plan validate` (ls_validate_*, serve.h): plan on profiled CPU stages, serve each
 * plan, compare measured with predicted. Exit 2 for what the user gave, 1 for the rest. */
static int validate_fail(int rc, int input) { return input ? fail_input() : ls_cli_fail_rc(rc); }

static int plan_validate(int argc, char **argv) {
    ls_validate_opts o = ls_validate_defaults();
    const char *report = NULL, *quality = "bits:8", *algos = "splitquant,uniform", *select = "replay";
    int realtime = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &o.model, "CKPT",
         "fp32 llmsys checkpoint (default: a random one of --config, EOS suppressed)"},
        {"config", LS_ARG_STR, &o.config, "NAME", "config of the random checkpoint: tiny or small (default small)"},
        {"stages", LS_ARG_INT, &o.stages, "N", "CPU stages in the virtual cluster (default 2)", 0,
         LS_RANGE(1, LS_SERVE_MAX_STAGES)},
        {"batch", LS_ARG_INT, &o.wl.batch, "B", "requests submitted together (default 8)", 0, LS_RANGE(1, 256)},
        {"prompt", LS_ARG_INT, &o.wl.prompt, "S", "prompt tokens per request (default 32)", 0, LS_MIN(2)},
        {"gen", LS_ARG_INT, &o.wl.gen, "N", "generated tokens per request (default 32)", 0, LS_MIN(1)},
        {"quality", LS_ARG_STR, &quality, "Q", "quality target as for plan serve (default bits:8)"},
        {"algos", LS_ARG_STR, &algos, "LIST", "planners whose plans are served (default splitquant,uniform)"},
        {"select", LS_ARG_STR, &select, "HOW",
         "how splitquant picks its plan: replay (default: top plans re-ranked by the replay on this host) | "
         "objective (the closed form alone)",
         0, LS_CHOICES("replay|objective")},
        {"threads", LS_ARG_INT, &o.threads, "N", "kernel threads per stage (default 1)", 0, LS_RANGE(1, 64)},
        {"runs", LS_ARG_INT, &o.runs, "R", "timed batches per plan after one warm-up (default 5)", 0,
         LS_RANGE(1, LS_VALIDATE_MAX_RUNS)},
        {"reps", LS_ARG_INT, &o.reps, "R", "profile repetitions per point (default 5)", 0, LS_RANGE(1, 100)},
        {"memory-gb", LS_ARG_FLOAT, &o.mem_gb, "GB", "memory each CPU stage offers the planner (default 2)"},
        {"profile", LS_ARG_PATH, &o.profile, "FILE", "reuse this device profile instead of measuring one"},
        {"realtime", LS_ARG_FLAG, &realtime, NULL,
         "run this command and the stages it starts at real-time priority (SCHED_FIFO 1; needs root or "
         "CAP_SYS_NICE) so other jobs on a shared machine do not preempt the measurement"},
        {"workdir", LS_ARG_PATH, &o.workdir, "DIR",
         "keep checkpoint, profile, cluster and plans here (default: a /tmp dir removed at exit)"},
        {"report", LS_ARG_PATH, &report, "FILE", "JSON summary: predicted vs measured per plan and stage"},
    };
    int rc = ls_args("plan validate",
                     "Plans a model on a virtual cluster of profiled CPU stages, serves the plan with llmsys serve "
                     "and compares measured with predicted throughput.",
                     spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    o.replay_select = strcmp(select, "replay") ? 0 : 16;
    if (realtime && ls_sched_realtime() != LS_OK) { /* inherited by the profile, probes and stages */
        fprintf(stderr, "llmsys plan validate: --realtime: %s\n", ls_errmsg());
        return 1;
    }
    if (ls_plan_qtarget_parse(quality, &o.quality)) return fail_input();
    if ((o.n_algos = ls_plan_algos_parse(algos, o.algos, LS_PLAN_ALGO_COUNT)) < 0)
        return ls_usage_err("plan validate", "--algos: %s", ls_errmsg());
    if (report && ls_out_path_check("report", report)) return ls_cli_fail(); /* before the measurements */
    o.self = ls_cli_self();
    ls_validate *v = NULL;
    int ret = 0;
    /* 1. the options, the model, the workload within its context */
    if ((rc = ls_validate_open(&v, &o))) {
        ret = validate_fail(rc, o.model != NULL);
        goto done;
    }
    int in_cluster = 0;
    if ((rc = ls_validate_all(v, stdout, &in_cluster))) {
        ret = in_cluster ? validate_fail(rc, 0) : ls_cli_fail();
        goto done;
    }
    if (report) {
        cJSON *j = ls_validate_report(v);
        if ((j ? ls_json_write_file(report, j) : ls_err(LS_ENOMEM, "report"))) ret = ls_cli_fail();
        cJSON_Delete(j);
    }
done:
    ls_validate_free(v);
    return ret;
}

int cmd_plan(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"serve", plan_serve}, {"train", plan_train}, {"indicator", plan_indicator},
                                     {"list", plan_list}, {"validate", plan_validate}};
    return ls_args_subcommand("plan", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys plan SUBCOMMAND [options]\n\n"
                              "  serve      plan stages, per-layer bits and micro-batches (LLM-PQ / SplitQuant)\n"
                              "  train      per-rank, per-layer precisions so slow training ranks keep pace (QSync)\n"
                              "  indicator  per-layer quality indicator of a checkpoint\n"
                              "  validate   plan on profiled CPU stages, serve the plan, compare measured with "
                              "predicted\n"
                              "  list       the model and cluster catalogs\n");
}

/* ---------------------------------------------------------------- demo */

int demo_plan(const ls_demo_ctx *ctx) {
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(NULL, &cat)) return ls_cli_fail();
    printf("All throughputs are modelled from datasheet figures (data/gpus.json), not measured.\n");
    int rc = ls_cli_status(ls_plan_demo_compare(stdout, cat, "llmpq-2", "opt-30b", ctx->quick));
    if (!rc) rc = ls_cli_status(ls_plan_demo_compare(stdout, cat, "demo-70b", "llama-2-70b", ctx->quick));
    ls_plan_catalog_free(cat);
    if (rc || ctx->quick) return rc;
    /* closing the loop: plan on this machine's profiled CPU stages, serve, measure */
    char wd[1100];
    snprintf(wd, sizeof wd, "%s/plan-validate", ctx->workdir);
    printf("\nClosing the loop on this machine (MEASURED): `llmsys plan validate --stages 2 --runs 3`\n");
    fflush(stdout);
    char *av[] = {"validate", "--stages", "2", "--runs", "3", "--workdir", wd, NULL};
    return plan_validate(7, av) ? 1 : 0;
}
