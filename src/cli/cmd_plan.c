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
static int fail_input(void) {
    ls_cli_fail();
    return 2;
}

static int is_input_error(int rc) {
    return rc == LS_EINVAL || rc == LS_ENOTFOUND || rc == LS_EFORMAT || rc == LS_ERANGE || rc == LS_ECHECKSUM;
}

static void print_plan(const ls_plan_problem *pb, const ls_plan_result *pl) {
    printf("plan (%s) for %s on %s, batch %d, prompt %d, gen %d:\n", ls_plan_algo_name(pl->algo), pb->arch->name,
           pb->cl->name, pb->wl.batch, pb->wl.prompt, pb->wl.gen);
    printf("  %-5s %-12s %-9s %-22s %9s %9s %9s\n", "stage", "device", "layers", "bits (3/4/8/16)", "mem GB", "free GB",
           "decode ms");
    for (int s = 0; s < pl->n_stage; s++) {
        int cnt[LS_PLAN_NBITS] = {0};
        for (int i = pl->begin[s]; i < pl->begin[s + 1]; i++) cnt[ls_plan_bits_index(pl->bits[i])]++;
        char lay[24], bits[32];
        snprintf(lay, sizeof lay, "%d-%d", pl->begin[s], pl->begin[s + 1] - 1);
        snprintf(bits, sizeof bits, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
        printf("  %-5d %-12s %-9s %-22s %9.2f %9.2f %9.2f\n", s, pb->cl->dev[pl->dev[s]].name, lay, bits,
               pl->stage_mem[s] / 1e9, (pl->stage_usable[s] - pl->stage_mem[s]) / 1e9, pl->stage_decode_s[s] * 1e3);
    }
    printf("  micro-batch prefill %d, decode %d\n", pl->mb_prefill, pl->mb_decode);
    printf("  predicted (modelled): %.1f tok/s, prefill %.3f s, decode %.3f s, quality indicator %.4g\n",
           pl->throughput_tok_s, pl->prefill_s, pl->decode_s, pl->quality);
    ls_plan_sim_opts so = ls_plan_sim_for_cluster(pb->cl);
    ls_plan_sim_result sr;
    if (ls_plan_simulate(pb, pl, &so, &sr) == LS_OK)
        printf("  replay of serve's schedule (modelled): %.1f tok/s, %d prefill and %d decode micro-batches\n",
               sr.tok_s, sr.mb_prefill, sr.mb_decode);
    if (pl->algo == LS_PLAN_ALGO_ILP)
        printf("  ILP: %s, gap %.3g%%, %d candidates\n", pl->ilp_optimal ? "optimal" : "time limit", pl->ilp_gap * 100,
               pl->n_candidates);
    printf("  solved in %.1f ms\n", pl->solve_s * 1e3);
}

static int plan_serve(int argc, char **argv) {
    const char *model = NULL, *cluster = NULL, *quality = "bits:4", *algo = "splitquant", *out = NULL, *report = NULL;
    const char *indicator = NULL, *vllm = NULL, *data = NULL, *bits = NULL, *select = "objective";
    int batch = -1, prompt = -1, gen = -1, quiet = 0;
    double tlimit = 10;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "M",
         "catalog model (opt-30b, llama-2-70b, ...) or llmsys checkpoint path (default: the cluster file's)"},
        {"cluster", LS_ARG_STR, &cluster, "C", "cluster JSON file or catalog name (llmpq-2, mixed-64, ...)", 1},
        {"batch", LS_ARG_INT, &batch, "B", "sequences in the batch (default: cluster file's, else 32)"},
        {"prompt", LS_ARG_INT, &prompt, "S", "prompt tokens (default: cluster file's, else 512)"},
        {"gen", LS_ARG_INT, &gen, "N", "generated tokens (default: cluster file's, else 100)"},
        {"quality", LS_ARG_STR, &quality, "Q",
         "bits:B (no worse than all layers at B bits; default bits:4), max:X (total indicator), theta:X (trade-off "
         "weight, s per unit), none"},
        {"indicator", LS_ARG_STR, &indicator, "I",
         "default | variance | measured (checkpoint models) | FILE (llmsys-indicator JSON)"},
        {"algo", LS_ARG_STR, &algo, "A", "splitquant (default) | ilp | uniform | pipeedge | adabits"},
        {"bits", LS_ARG_STR, &bits, "LIST", "allowed bit widths, e.g. 4,8,16 (default 3,4,8,16)"},
        {"time-limit", LS_ARG_FLOAT, &tlimit, "S", "ILP time limit in seconds over all candidates (default 10)"},
        {"select", LS_ARG_STR, &select, "HOW",
         "splitquant: objective (default; the LLM-PQ closed form) | replay (top plans re-ranked by the replay of "
         "serve's schedule on the cluster's host)"},
        {"out", LS_ARG_STR, &out, "FILE", "write the plan (llmsys-plan v1)"},
        {"report", LS_ARG_STR, &report, "FILE", "write the plan with per-device memory, solve time and vLLM export"},
        {"export-vllm", LS_ARG_STR, &vllm, "FILE", "write vLLM launch lines and the per-layer quantization map"},
        {"data", LS_ARG_STR, &data, "DIR", "catalog directory (default $LLMSYS_DATA or the source tree's data/)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "print nothing on success"},
    };
    int rc =
        ls_args_parse("plan serve", "Plans stages, per-layer bits and micro-batches for serving a model on a cluster.",
                      spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    int a = ls_plan_algo_parse(algo);
    if (a < 0 || a == LS_PLAN_ALGO_BRUTE) {
        fprintf(stderr, "llmsys plan serve: unknown --algo '%s' (splitquant, ilp, uniform, pipeedge, adabits)\n", algo);
        return 2;
    }
    if (!(tlimit > 0) || tlimit > 3600) {
        fprintf(stderr, "llmsys plan serve: --time-limit must be in (0, 3600] seconds\n");
        return 2;
    }
    if (strcmp(select, "objective") && strcmp(select, "replay")) {
        fprintf(stderr, "llmsys plan serve: --select must be objective or replay, not '%s'\n", select);
        return 2;
    }
    ls_plan_qtarget qt;
    if (ls_plan_qtarget_parse(quality, &qt)) return fail_input();
    ls_plan_catalog *cat = NULL;
    ls_plan_cluster *cl = NULL;
    int ret = 0;
    if ((rc = ls_plan_catalog_load(data, &cat))) return fail_input();
    if ((rc = ls_plan_cluster_load(cat, cluster, &cl))) {
        ret = fail_input();
        goto done;
    }
    if (!model) model = cl->model[0] ? cl->model : NULL;
    if (!model) {
        fprintf(stderr, "llmsys plan serve: --model is required (cluster %s names no model)\n", cl->name);
        ret = 2;
        goto done;
    }
    ls_plan_arch arch;
    if ((rc = ls_plan_resolve_model(cat, model, &arch))) {
        ret = fail_input();
        goto done;
    }
    ls_plan_workload wl = ls_plan_cluster_workload(cl, batch, prompt, gen);
    if (batch == 0 || prompt == 0 || gen == 0 || batch < -1 || prompt < -1 || gen < -1) {
        fprintf(stderr, "llmsys plan serve: --batch, --prompt and --gen must be positive\n");
        ret = 2;
        goto done;
    }
    ls_plan_problem *pb = malloc(sizeof *pb);
    if (!pb) {
        ret = 1;
        goto done;
    }
    if ((rc = ls_plan_problem_init(pb, &arch, cl, wl)) || (rc = ls_plan_problem_validate(pb)) ||
        (rc = ls_plan_quality_load(indicator, model, pb->arch, pb->omega))) {
        ret = is_input_error(rc) ? fail_input() : ls_cli_fail();
        free(pb);
        goto done;
    }
    if (bits && ls_plan_bits_mask_parse(bits, &pb->bits_mask)) {
        fprintf(stderr, "llmsys plan serve: --bits: %s\n", ls_errmsg());
        free(pb);
        ret = 2;
        goto done;
    }
    pb->time_limit_s = tlimit;
    pb->replay_select = strcmp(select, "replay") ? 0 : 16;
    if ((rc = ls_plan_problem_set_quality(pb, qt))) {
        ret = fail_input();
        free(pb);
        goto done;
    }
    ls_plan_result *pl = malloc(sizeof *pl);
    if (!pl) {
        free(pb);
        ret = 1;
        goto done;
    }
    rc = ls_plan_solve(pb, (ls_plan_algo)a, pl);
    if (rc) {
        ret = ls_cli_fail();
    } else {
        if (!quiet) print_plan(pb, pl);
        if (out && (rc = ls_plan_result_write(pb, pl, out))) ret = ls_cli_fail();
        if (!ret && report) {
            cJSON *j = ls_plan_to_json(pb, pl, 1);
            rc = j ? ls_json_write_file(report, j) : ls_err(LS_ENOMEM, "report");
            cJSON_Delete(j);
            if (rc) ret = ls_cli_fail();
        }
        if (!ret && vllm && (rc = ls_plan_export_vllm(pb, pl, vllm))) ret = ls_cli_fail();
    }
    free(pl);
    free(pb);
done:
    ls_plan_cluster_free(cl);
    ls_plan_catalog_free(cat);
    return ret;
}

static int plan_list(int argc, char **argv) {
    const char *data = NULL;
    ls_arg spec[] = {{"data", LS_ARG_STR, &data, "DIR", "catalog directory"}};
    int rc =
        ls_args_parse("plan list", "Lists the catalog: GPUs, models, clusters.", spec, 1, argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(data, &cat)) return fail_input();
    printf("catalog %s\nmodels:", ls_plan_catalog_dir(cat));
    for (int i = 0; i < ls_plan_catalog_num_models(cat); i++) printf(" %s", ls_plan_catalog_model_name(cat, i));
    char **names;
    int n;
    printf("\nclusters:\n");
    if (ls_plan_catalog_clusters(cat, &names, &n) == LS_OK) {
        for (int i = 0; i < n; i++) {
            ls_plan_cluster *cl;
            if (ls_plan_cluster_load(cat, names[i], &cl) == LS_OK) {
                printf("  %-10s %3d devices  %s\n", names[i], cl->n_dev, cl->model);
                ls_plan_cluster_free(cl);
            }
        }
        ls_plan_names_free(names, n);
    }
    ls_plan_catalog_free(cat);
    return 0;
}

static int plan_indicator(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *how = "variance", *data = NULL;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "PATH", "llmsys checkpoint (or a catalog name for the default profile)", 1},
        {"method", LS_ARG_STR, &how, "M", "variance (LLM-PQ, default) | measured | default"},
        {"out", LS_ARG_STR, &out, "FILE", "write the indicator (llmsys-indicator JSON)", 1},
        {"data", LS_ARG_STR, &data, "DIR", "catalog directory"},
    };
    int rc = ls_args_parse("plan indicator", "Computes the per-layer, per-bit quality indicator of a model.", spec, 4,
                           argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(data, &cat)) return fail_input();
    ls_plan_arch arch;
    double *om = malloc(sizeof(double) * LS_PLAN_MAX_LAYER * LS_PLAN_NBITS);
    int ret = 0;
    if (!om) {
        ls_plan_catalog_free(cat);
        return 1;
    }
    if ((rc = ls_plan_resolve_model(cat, model, &arch))) {
        ret = fail_input();
    } else {
        rc = ls_plan_quality_method(how, model, &arch, om);
        if (!rc) rc = ls_plan_quality_write(out, &arch, om);
        if (rc)
            ret = is_input_error(rc) ? fail_input() : ls_cli_fail();
        else
            printf("indicator of %s (%d layers, %s) written to %s\n", arch.name, arch.n_layer, how, out);
    }
    free(om);
    ls_plan_catalog_free(cat);
    return ret;
}

/* ---------------------------------------------------------------- validate (closing the loop) */

/* `llmsys plan validate` (ls_validate_*, serve.h): plan on profiled CPU stages, serve each
 * plan, compare measured with predicted. Exit 2 for what the user gave, 1 for the rest. */
static int validate_fail(int rc, int input) { return input || is_input_error(rc) ? fail_input() : ls_cli_fail(); }

static void validate_print(const ls_validate_result *r, const ls_validate_opts *o) {
    for (int a = 0; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        const ls_plan_result *x = &p->plan;
        char st[64] = "", mbs[16];
        for (int s = 0; s < x->n_stage && strlen(st) < 48; s++) {
            size_t l = strlen(st);
            int b0 = x->bits[x->begin[s]], mixed = 0;
            for (int i = x->begin[s]; i < x->begin[s + 1]; i++) mixed |= x->bits[i] != b0;
            snprintf(st + l, sizeof st - l, "%s%d@%s%d", s ? " " : "", x->begin[s + 1] - x->begin[s], mixed ? "~" : "",
                     b0);
        }
        snprintf(mbs, sizeof mbs, "%d/%d", x->mb_prefill, x->mb_decode);
        printf("  %-10s %-22s %5s %8.1f/s %8.1f/s %+7.1f%% %8.1f/s %+7.1f%% %6.1f%%\n", ls_plan_algo_name(x->algo), st,
               mbs, x->throughput_tok_s, p->tok_s, p->error * 100, p->replay.tok_s, p->replay_error * 100,
               (p->max_tok_s - p->min_tok_s) / p->tok_s * 100);
        printf("  %-10s micro-batches prefill %g (planner %d, replay %d), decode %g (planner %d, replay %d); busy s "
               "per stage (measured, planner, replay):",
               "", p->run[0].mb_prefill, p->pred_mb_prefill, p->replay.mb_prefill, p->run[0].mb_decode,
               p->pred_mb_decode, p->replay.mb_decode);
        for (int s = 0; s < x->n_stage; s++)
            printf(" %.3f/%.3f/%.3f", p->busy_s[s], p->pred_busy_s[s], p->replay.busy_s[s]);
        printf("; batch %.3f s (planner %.3f, replay %.3f); stage overlap %.2f\n", p->batch_s, x->total_s,
               p->replay.seconds, p->overlap);
    }
    for (int a = 1; a < r->n_plans; a++) {
        const ls_validate_plan *p = &r->plans[a];
        printf("  %s / %s: planner %.2fx, replay %.2fx, measured %.2fx (median of per-round ratios, range "
               "%.2f-%.2f)\n",
               ls_plan_algo_name(r->plans[0].plan.algo), ls_plan_algo_name(p->plan.algo), p->pred_ratio,
               p->replay_ratio, p->ratio, p->ratio_min, p->ratio_max);
    }
    (void)o;
}

static int plan_validate(int argc, char **argv) {
    ls_validate_opts o = ls_validate_defaults();
    const char *report = NULL, *quality = "bits:8", *algos = "splitquant,uniform", *select = "replay";
    int realtime = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &o.model, "CKPT",
         "fp32 llmsys checkpoint (default: a random one of --config, EOS suppressed)"},
        {"config", LS_ARG_STR, &o.config, "NAME", "config of the random checkpoint: tiny or small (default small)"},
        {"stages", LS_ARG_INT, &o.stages, "N", "CPU stages in the virtual cluster (default 2)"},
        {"batch", LS_ARG_INT, &o.wl.batch, "B", "requests submitted together (default 8)"},
        {"prompt", LS_ARG_INT, &o.wl.prompt, "S", "prompt tokens per request (default 32)"},
        {"gen", LS_ARG_INT, &o.wl.gen, "N", "generated tokens per request (default 32)"},
        {"quality", LS_ARG_STR, &quality, "Q", "quality target as for plan serve (default bits:8)"},
        {"algos", LS_ARG_STR, &algos, "LIST", "planners whose plans are served (default splitquant,uniform)"},
        {"select", LS_ARG_STR, &select, "HOW",
         "how splitquant picks its plan: replay (default: top plans re-ranked by the replay on this host) | "
         "objective (the closed form alone)"},
        {"threads", LS_ARG_INT, &o.threads, "N", "kernel threads per stage (default 1)"},
        {"runs", LS_ARG_INT, &o.runs, "R", "timed batches per plan after one warm-up (default 5)"},
        {"reps", LS_ARG_INT, &o.reps, "R", "profile repetitions per point (default 5)"},
        {"memory-gb", LS_ARG_FLOAT, &o.mem_gb, "GB", "memory each CPU stage offers the planner (default 2)"},
        {"profile", LS_ARG_STR, &o.profile, "FILE", "reuse this device profile instead of measuring one"},
        {"realtime", LS_ARG_FLAG, &realtime, NULL,
         "run this command and the stages it starts at real-time priority (SCHED_FIFO 1; needs root or "
         "CAP_SYS_NICE) so other jobs on a shared machine do not preempt the measurement"},
        {"workdir", LS_ARG_STR, &o.workdir, "DIR",
         "keep checkpoint, profile, cluster and plans here (default: a /tmp dir removed at exit)"},
        {"report", LS_ARG_STR, &report, "FILE", "JSON summary: predicted vs measured per plan and stage"},
    };
    int rc =
        ls_args_parse("plan validate",
                      "Plans a model on a virtual cluster of profiled CPU stages, serves the plan with llmsys serve "
                      "and compares measured with predicted throughput.",
                      spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    const ls_plan_workload *wl = &o.wl;
    if (o.stages < 1 || o.stages > LS_SERVE_MAX_STAGES || wl->batch < 1 || wl->batch > 256 || wl->prompt < 2 ||
        wl->gen < 1 || o.threads < 1 || o.threads > 64 || o.runs < 1 || o.runs > LS_VALIDATE_MAX_RUNS || o.reps < 1 ||
        o.reps > 100 || !(o.mem_gb > 0)) {
        fprintf(stderr,
                "llmsys plan validate: --stages in [1, %d], --batch in [1, 256], --prompt >= 2, --gen >= 1, "
                "--threads in [1, 64], --runs/--reps in [1, 100], --memory-gb > 0\n",
                LS_SERVE_MAX_STAGES);
        return 2;
    }
    if (strcmp(select, "objective") && strcmp(select, "replay")) {
        fprintf(stderr, "llmsys plan validate: --select must be objective or replay, not '%s'\n", select);
        return 2;
    }
    o.replay_select = strcmp(select, "replay") ? 0 : 16;
    if (realtime && ls_sched_realtime() != LS_OK) { /* inherited by the profile, probes and stages */
        fprintf(stderr, "llmsys plan validate: --realtime: %s\n", ls_errmsg());
        return 1;
    }
    if (ls_plan_qtarget_parse(quality, &o.quality)) return fail_input();
    if ((o.n_algos = ls_plan_algos_parse(algos, o.algos, LS_PLAN_ALGO_COUNT)) < 0) {
        fprintf(stderr, "llmsys plan validate: --algos: %s\n", ls_errmsg());
        return 2;
    }
    if (!o.n_algos) {
        fprintf(stderr, "llmsys plan validate: --algos is empty\n");
        return 2;
    }
    o.self = ls_cli_self();
    ls_validate *v = NULL;
    int ret = 0;
    /* 1. the model */
    if ((rc = ls_validate_open(&v, &o))) {
        ret = validate_fail(rc, o.model != NULL);
        goto done;
    }
    const ls_validate_result *r = ls_validate_get(v);
    if (wl->prompt + wl->gen > r->cfg.n_ctx) {
        fprintf(stderr, "llmsys plan validate: prompt + gen = %d exceeds the model context %d\n", wl->prompt + wl->gen,
                r->cfg.n_ctx);
        ret = 2;
        goto done;
    }
    printf("closing the loop in %s: %s (%d layers, d_model %d), %d CPU stages x %d thread(s), batch %d, prompt %d, gen "
           "%d\n",
           r->dir, r->ckpt, r->cfg.n_layer, r->cfg.d_model, o.stages, o.threads, wl->batch, wl->prompt, wl->gen);
    /* 2. the device profile (same machine, measured now unless given) */
    if ((rc = ls_validate_profile(v))) {
        ret = ls_cli_fail();
        goto done;
    }
    if (!o.profile) printf("profile: %s (%.1f s)\n", r->profile, r->profile_s);
    /* 3. the virtual cluster, 4. the plans, 5. serving them */
    if ((rc = ls_validate_cluster(v))) {
        ret = validate_fail(rc, 0);
        goto done;
    }
    printf("host: parallel capacity for %d stage processes %.2f cores (1 = one process alone); idle ZeroMQ hop "
           "%.0f us median (profile link: %.0f us)\n",
           o.stages, r->host_capacity, r->hop_s * 1e6, r->link_lat_s * 1e6);
    printf("\n  %-10s %-22s %5s %10s %10s %8s %10s %8s %7s\n", "plan", "stages (layers@bits)", "mb", "planner",
           "measured", "error", "replay", "error", "spread");
    if ((rc = ls_validate_solve(v)) || (rc = ls_validate_measure(v))) {
        ret = ls_cli_fail();
        goto done;
    }
    validate_print(r, &o);
    if (report) {
        cJSON *j = ls_validate_report(v);
        rc = j ? ls_json_write_file(report, j) : ls_err(LS_ENOMEM, "report");
        cJSON_Delete(j);
        if (rc) ret = ls_cli_fail();
    }
done:
    ls_validate_free(v);
    return ret;
}

int cmd_plan(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: llmsys plan SUBCOMMAND [options]\n\n"
                   "  serve      plan stages, per-layer bits and micro-batches (LLM-PQ / SplitQuant)\n"
                   "  train      per-rank, per-layer precisions so slow training ranks keep pace (QSync)\n"
                   "  indicator  per-layer quality indicator of a checkpoint\n"
                   "  validate   plan on profiled CPU stages, serve the plan, compare measured with predicted\n"
                   "  list       the GPU / model / cluster catalogs\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve")) return plan_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "list")) return plan_list(argc - 1, argv + 1);
    if (!strcmp(argv[1], "indicator")) return plan_indicator(argc - 1, argv + 1);
    if (!strcmp(argv[1], "validate")) return plan_validate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return plan_train(argc - 1, argv + 1);
    fprintf(stderr, "llmsys plan: unknown subcommand '%s' (serve, train, indicator, list, validate)\n", argv[1]);
    return 2;
}

/* ---------------------------------------------------------------- demo */

static int demo_case(ls_plan_catalog *cat, const char *cluster, const char *model, int quick) {
    ls_plan_cluster *cl;
    ls_plan_arch arch;
    if (ls_plan_cluster_load(cat, cluster, &cl)) return ls_cli_fail();
    if (ls_plan_catalog_model(cat, model, &arch)) {
        ls_plan_cluster_free(cl);
        return ls_cli_fail();
    }
    ls_plan_workload wl = ls_plan_cluster_workload(cl, -1, -1, -1);
    ls_plan_problem *pb = malloc(sizeof *pb);
    ls_plan_result *pl = malloc(sizeof *pl * LS_PLAN_ALGO_COUNT);
    int ret = 0;
    if (!pb || !pl || ls_plan_problem_init(pb, &arch, cl, wl)) {
        ret = 1;
        goto done;
    }
    /* the quality target every algorithm must meet: that of the uniform baseline */
    if (ls_plan_solve(pb, LS_PLAN_ALGO_UNIFORM, &pl[LS_PLAN_ALGO_UNIFORM])) {
        ret = ls_cli_fail();
        goto done;
    }
    pb->qmax = pl[LS_PLAN_ALGO_UNIFORM].quality * (1 + 1e-9);
    pb->time_limit_s = quick ? 1.0 : 8.0;
    printf("\n%s on %s (%d GPUs), batch %d, prompt %d, gen %d; quality target: no worse than uniform (%.3g)\n",
           arch.name, cl->name, cl->n_dev, wl.batch, wl.prompt, wl.gen, pb->qmax);
    printf("  %-10s %10s %8s %9s %9s %8s %9s  %s\n", "algo", "tok/s", "vs unif", "prefill s", "decode s", "quality",
           "solve ms", "stages (device:layers@bits)");
    ls_plan_algo order[] = {LS_PLAN_ALGO_UNIFORM, LS_PLAN_ALGO_ADABITS, LS_PLAN_ALGO_PIPEEDGE, LS_PLAN_ALGO_SPLITQUANT,
                            LS_PLAN_ALGO_ILP};
    for (int t = 0; t < 5; t++) {
        ls_plan_algo al = order[t];
        ls_plan_result *x = &pl[al];
        int rc = al == LS_PLAN_ALGO_UNIFORM ? 0 : ls_plan_solve(pb, al, x);
        if (rc) {
            printf("  %-10s %s\n", ls_plan_algo_name(al), ls_errmsg());
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
        printf("  %-10s %10.1f %7.2fx %9.2f %9.2f %8.3g %9.1f  %s\n", ls_plan_algo_name(al), x->throughput_tok_s,
               x->throughput_tok_s / pl[LS_PLAN_ALGO_UNIFORM].throughput_tok_s, x->prefill_s, x->decode_s, x->quality,
               x->solve_s * 1e3, st);
        if (al == LS_PLAN_ALGO_ILP)
            printf("  %-10s ILP %s (gap %.2g%%)\n", "", x->ilp_optimal ? "proven optimal" : "hit its time limit",
                   x->ilp_gap * 100);
    }
done:
    free(pb);
    free(pl);
    ls_plan_cluster_free(cl);
    return ret;
}

int demo_plan(const ls_demo_ctx *ctx) {
    ls_plan_catalog *cat;
    if (ls_plan_catalog_load(NULL, &cat)) return ls_cli_fail();
    printf("All throughputs are modelled from datasheet figures (data/gpus.json), not measured.\n");
    int rc = demo_case(cat, "llmpq-2", "opt-30b", ctx->quick);
    if (!rc) rc = demo_case(cat, "demo-70b", "llama-2-70b", ctx->quick);
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
