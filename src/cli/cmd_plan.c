/* cmd_plan.c - `llmsys plan` (serve planner, catalogs, indicators) and the plan demo
 * scenario. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Loads the indicator chosen by --indicator into pb->omega. */
static int load_indicator(ls_plan_problem *pb, const char *how, const char *model_arg) {
    if (!how || !strcmp(how, "default")) {
        if (ls_is_file(model_arg)) return ls_plan_quality_from_checkpoint(model_arg, pb->arch, pb->omega);
        return ls_plan_quality_default(pb->arch, pb->omega);
    }
    if (!strcmp(how, "variance") || !strcmp(how, "measured")) {
        if (!ls_is_file(model_arg))
            return ls_err(LS_EINVAL, "--indicator %s needs --model to be an llmsys checkpoint path", how);
        return !strcmp(how, "variance") ? ls_plan_quality_from_checkpoint(model_arg, pb->arch, pb->omega)
                                        : ls_plan_quality_measured(model_arg, pb->arch, pb->omega);
    }
    return ls_plan_quality_from_file(how, pb->arch, pb->omega);
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
    ls_plan_workload wl = {batch >= 0 ? batch : (cl->batch ? cl->batch : 32),
                           prompt >= 0 ? prompt : (cl->prompt ? cl->prompt : 512),
                           gen >= 0 ? gen : (cl->gen ? cl->gen : 100)};
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
        (rc = load_indicator(pb, indicator, model))) {
        ret = is_input_error(rc) ? fail_input() : ls_cli_fail();
        free(pb);
        goto done;
    }
    if (bits) {
        pb->bits_mask = 0;
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s", bits);
        for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
            char *end;
            long b = strtol(t, &end, 10);
            int k = *end ? -1 : ls_plan_bits_index((int)b);
            if (k < 0) {
                fprintf(stderr, "llmsys plan serve: --bits: '%s' is not one of 3, 4, 8, 16\n", t);
                free(pb);
                ret = 2;
                goto done;
            }
            pb->bits_mask |= 1 << k;
        }
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
    ls_plan_gpu g;
    ls_plan_catalog_gpu(cat, "T4", &g);
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
        if (!strcmp(how, "default"))
            rc = ls_plan_quality_default(&arch, om);
        else if (!strcmp(how, "variance"))
            rc = ls_plan_quality_from_checkpoint(model, &arch, om);
        else if (!strcmp(how, "measured"))
            rc = ls_plan_quality_measured(model, &arch, om);
        else
            rc = ls_err(LS_EINVAL, "--method '%s': variance, measured or default", how);
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

/* `llmsys plan validate`: profiles this machine's CPU with `llmsys profile`'s measurement,
 * builds a virtual cluster of identical profiled CPU stages, plans the model on it, serves
 * each plan with the real multi-process pipeline (`llmsys serve`'s server) behind HTTP,
 * drives it with the planned workload (batch B requests of prompt S tokens, N generated
 * each, all submitted at once) and compares measured with predicted throughput. Also
 * compares per-stage busy seconds and micro-batch counts, which says which term is off. */

typedef struct {
    double seconds, tok_s;
    int tokens;
    double busy[LS_PLAN_MAX_STAGES];
    double mb_prefill, mb_decode;
} vrun;

/* An fp32 checkpoint with a named config and random (GPT-2 init) weights. The EOS row
 * of the tied embedding is zeroed: its logit is then 0 while the largest of the other
 * 258 is positive, so greedy generation never stops early and every request yields
 * exactly the planned number of tokens. */
static int validate_make_ckpt(const char *config, uint64_t seed, const char *path) {
    ls_model_config cfg;
    LS_TRY(ls_model_config_named(config, &cfg));
    ls_model *m;
    LS_TRY(ls_model_init(&m, &cfg, seed));
    int t = ls_model_find_tensor(m, "wte");
    if (t < 0) {
        ls_model_free(m);
        return ls_err(LS_ESTATE, "model has no wte tensor");
    }
    ls_param p = ls_model_tensor(m, t);
    memset(p.data + (size_t)LS_TOK_EOS * cfg.d_model, 0, sizeof(float) * (size_t)cfg.d_model);
    int rc = ls_ckpt_save(path, m, 0, NULL, 0);
    ls_model_free(m);
    return rc;
}

/* Sorted unique positive ints of v (n entries), clipped to [1, hi]; returns the count. */
static int uniq_grid(int *v, int n, int hi) {
    for (int i = 0; i < n; i++) v[i] = v[i] < 1 ? 1 : (v[i] > hi ? hi : v[i]);
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            int t = v[k];
            v[k] = v[k - 1], v[k - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || v[i] != v[m - 1]) v[m++] = v[i];
    return m;
}

/* Profiles the checkpoint over a grid that brackets the workload. */
static int validate_profile(const char *ckpt, const ls_plan_workload *wl, int n_ctx, int threads, int reps,
                            const char *out) {
    int batches[8] = {1, 2, 4, 8, wl->batch, (wl->batch + 1) / 2}, nb;
    int seqs[4] = {wl->prompt / 2, wl->prompt, wl->prompt * 2}, ns;
    int ctxs[4] = {wl->prompt, wl->prompt + wl->gen / 2, wl->prompt + wl->gen - 1}, nc;
    nb = uniq_grid(batches, 6, wl->batch);
    ns = uniq_grid(seqs, 3, n_ctx);
    nc = uniq_grid(ctxs, 3, n_ctx - 1);
    static const int bits[4] = {16, 8, 4, 3};
    ls_profile_opts o = ls_profile_defaults();
    o.bits = bits, o.n_bits = 4;
    o.batches = batches, o.n_batches = nb;
    o.seqs = seqs, o.n_seqs = ns;
    o.ctxs = ctxs, o.n_ctxs = nc;
    o.reps = reps, o.nthreads = threads;
    /* measured alone: the replay adds the sharing of the host (its measured capacity) */
    cJSON *j = NULL;
    int rc = ls_profile_run(ckpt, &o, &j);
    if (rc == LS_OK) rc = ls_json_write_file(out, j);
    cJSON_Delete(j);
    return rc;
}

/* Reads the counters validate compares from /metrics. */
static int scrape_metrics(int port, int ns, vrun *r) {
    int st;
    char *body = NULL;
    LS_TRY(ls_http_request("127.0.0.1", port, "GET", "/metrics", NULL, 10, &st, &body));
    if (st != 200) {
        free(body);
        return ls_err(LS_EPEER, "/metrics returned status %d", st);
    }
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        int stage;
        double v;
        if (sscanf(line, "llmsys_stage_busy_seconds_total{stage=\"%d\"} %lf", &stage, &v) == 2 && stage >= 0 &&
            stage < ns)
            r->busy[stage] = v;
        else if (sscanf(line, "llmsys_micro_batches_total{phase=\"prefill\"} %lf", &v) == 1)
            r->mb_prefill = v;
        else if (sscanf(line, "llmsys_micro_batches_total{phase=\"decode\"} %lf", &v) == 1)
            r->mb_decode = v;
    }
    free(body);
    return LS_OK;
}

/* Serves every plan of plan_paths at once (their idle workers sleep in their receive) and
 * times `runs` rounds of one batch per plan after a warm-up round, the plans alternating,
 * so that every plan meets the same load of this shared host. res[a * runs + r]. */
static int validate_measure(const char *ckpt, char (*plan_paths)[1300], int n_plans, int n_layer,
                            const ls_plan_workload *wl, int threads, int runs, vrun *res) {
    ls_plan *sp = calloc((size_t)n_plans, sizeof *sp);
    ls_server **sv = calloc((size_t)n_plans, sizeof *sv);
    char **prompts = calloc((size_t)wl->batch, sizeof(char *));
    int rc = sp && sv && prompts ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    int n_read = 0;
    for (; rc == LS_OK && n_read < n_plans; n_read++)
        if ((rc = ls_plan_read(plan_paths[n_read], n_layer, &sp[n_read]))) break;
    /* B distinct prompts of exactly S tokens (BOS + S-1 bytes) */
    static const char text[] = "the planner predicts what the pipeline measures; ";
    for (int i = 0; rc == LS_OK && i < wl->batch; i++) {
        prompts[i] = malloc((size_t)wl->prompt);
        if (!prompts[i]) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        for (int k = 0; k < wl->prompt - 1; k++) prompts[i][k] = text[(i * 7 + k) % (sizeof text - 1)];
        prompts[i][wl->prompt - 1] = '\0';
    }
    for (int a = 0; rc == LS_OK && a < n_plans; a++) {
        ls_server_opts o = ls_server_defaults();
        o.model = ckpt;
        o.plan = &sp[a];
        o.self = ls_cli_self();
        o.port = 0;
        o.max_seqs = wl->batch;
        o.nthreads = threads;
        rc = ls_server_start(&sv[a], &o);
    }
    for (int r = -1; rc == LS_OK && r < runs; r++)
        for (int a = 0; rc == LS_OK && a < n_plans; a++) {
            int port = ls_server_port(sv[a]);
            vrun before = {0}, after = {0};
            ls_load_result lr;
            rc = scrape_metrics(port, sp[a].n_stages, &before);
            if (rc == LS_OK)
                rc = ls_http_load("127.0.0.1", port, (const char *const *)prompts, wl->batch, wl->batch, wl->batch,
                                  wl->gen, &lr);
            if (rc == LS_OK) rc = scrape_metrics(port, sp[a].n_stages, &after);
            if (rc == LS_OK && lr.tokens != wl->batch * wl->gen)
                LS_WARN("run %d generated %d tokens, not %d (a request stopped at EOS)", r, lr.tokens,
                        wl->batch * wl->gen);
            if (rc == LS_OK && r >= 0) {
                vrun *x = &res[(size_t)a * runs + r];
                x->seconds = lr.seconds, x->tokens = lr.tokens, x->tok_s = lr.tokens_per_s;
                for (int i = 0; i < sp[a].n_stages; i++) x->busy[i] = after.busy[i] - before.busy[i];
                x->mb_prefill = after.mb_prefill - before.mb_prefill;
                x->mb_decode = after.mb_decode - before.mb_decode;
            }
        }
    for (int a = 0; sv && a < n_plans; a++)
        if (sv[a]) ls_server_stop(sv[a]);
    for (int i = 0; prompts && i < wl->batch; i++) free(prompts[i]);
    for (int a = 0; sp && a < n_read; a++) ls_plan_free(&sp[a]);
    free(prompts);
    free(sv);
    free(sp);
    return rc;
}

/* Removes what validate writes into its own temporary directory, then the directory. */
static void validate_cleanup(const char *dir) {
    char f[1400];
    static const char *names[] = {"model.safetensors", "profile.json", "cluster.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        unlink(f);
    }
    for (int a = 0; a < LS_PLAN_ALGO_COUNT; a++) {
        snprintf(f, sizeof f, "%s/plan-%s.json", dir, ls_plan_algo_name((ls_plan_algo)a));
        unlink(f);
    }
    rmdir(dir);
}

static int plan_validate(int argc, char **argv) {
    const char *model = NULL, *config = "small", *workdir = NULL, *profile = NULL, *report = NULL, *quality = "bits:8";
    const char *algos = "splitquant,uniform", *select = "replay";
    int stages = 2, batch = 8, prompt = 32, gen = 32, threads = 1, runs = 5, reps = 5, realtime = 0;
    double mem_gb = 2.0;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "CKPT",
         "fp32 llmsys checkpoint (default: a random one of --config, EOS suppressed)"},
        {"config", LS_ARG_STR, &config, "NAME", "config of the random checkpoint: tiny or small (default small)"},
        {"stages", LS_ARG_INT, &stages, "N", "CPU stages in the virtual cluster (default 2)"},
        {"batch", LS_ARG_INT, &batch, "B", "requests submitted together (default 8)"},
        {"prompt", LS_ARG_INT, &prompt, "S", "prompt tokens per request (default 32)"},
        {"gen", LS_ARG_INT, &gen, "N", "generated tokens per request (default 32)"},
        {"quality", LS_ARG_STR, &quality, "Q", "quality target as for plan serve (default bits:8)"},
        {"algos", LS_ARG_STR, &algos, "LIST", "planners whose plans are served (default splitquant,uniform)"},
        {"select", LS_ARG_STR, &select, "HOW",
         "how splitquant picks its plan: replay (default: top plans re-ranked by the replay on this host) | "
         "objective (the closed form alone)"},
        {"threads", LS_ARG_INT, &threads, "N", "kernel threads per stage (default 1)"},
        {"runs", LS_ARG_INT, &runs, "R", "timed batches per plan after one warm-up (default 5)"},
        {"reps", LS_ARG_INT, &reps, "R", "profile repetitions per point (default 5)"},
        {"memory-gb", LS_ARG_FLOAT, &mem_gb, "GB", "memory each CPU stage offers the planner (default 2)"},
        {"profile", LS_ARG_STR, &profile, "FILE", "reuse this device profile instead of measuring one"},
        {"realtime", LS_ARG_FLAG, &realtime, NULL,
         "run this command and the stages it starts at real-time priority (SCHED_FIFO 1; needs root or "
         "CAP_SYS_NICE) so other jobs on a shared machine do not preempt the measurement"},
        {"workdir", LS_ARG_STR, &workdir, "DIR",
         "keep checkpoint, profile, cluster and plans here (default: a /tmp dir removed at exit)"},
        {"report", LS_ARG_STR, &report, "FILE", "JSON summary: predicted vs measured per plan and stage"},
    };
    int rc =
        ls_args_parse("plan validate",
                      "Plans a model on a virtual cluster of profiled CPU stages, serves the plan with llmsys serve "
                      "and compares measured with predicted throughput.",
                      spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    if (stages < 1 || stages > LS_PLAN_MAX_STAGES || batch < 1 || batch > 256 || prompt < 2 || gen < 1 || threads < 1 ||
        threads > 64 || runs < 1 || runs > 100 || reps < 1 || reps > 100 || !(mem_gb > 0)) {
        fprintf(stderr,
                "llmsys plan validate: --stages in [1, %d], --batch in [1, 256], --prompt >= 2, --gen >= 1, "
                "--threads in [1, 64], --runs/--reps in [1, 100], --memory-gb > 0\n",
                LS_PLAN_MAX_STAGES);
        return 2;
    }
    if (strcmp(select, "objective") && strcmp(select, "replay")) {
        fprintf(stderr, "llmsys plan validate: --select must be objective or replay, not '%s'\n", select);
        return 2;
    }
    if (realtime) { /* inherited by every process validate forks: profile, probes, stages */
        struct sched_param sp = {.sched_priority = 1};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            fprintf(stderr, "llmsys plan validate: --realtime: cannot switch to SCHED_FIFO: %s\n", strerror(errno));
            return 1;
        }
    }
    ls_plan_qtarget qt;
    if (ls_plan_qtarget_parse(quality, &qt)) return fail_input();
    int algo_list[LS_PLAN_ALGO_COUNT], n_algo = 0;
    {
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%s", algos);
        for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
            int a = ls_plan_algo_parse(t);
            if (a < 0 || a == LS_PLAN_ALGO_BRUTE || n_algo == LS_PLAN_ALGO_COUNT) {
                fprintf(stderr,
                        "llmsys plan validate: --algos: '%s' is not splitquant, ilp, uniform, pipeedge or adabits\n",
                        t);
                return 2;
            }
            algo_list[n_algo++] = a;
        }
        if (!n_algo) {
            fprintf(stderr, "llmsys plan validate: --algos is empty\n");
            return 2;
        }
    }
    char dir[1024], ckpt[1200], prof[1200], clpath[1200], paths[LS_PLAN_ALGO_COUNT][1300];
    if (workdir) {
        snprintf(dir, sizeof dir, "%s", workdir);
        if (ls_mkdirs(dir)) return ls_cli_fail();
    } else {
        snprintf(dir, sizeof dir, "/tmp/llmsys-validate-XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "llmsys: mkdtemp %s failed\n", dir);
            return 1;
        }
    }
    /* from here on every exit goes through `done`, which removes a temporary directory */
    ls_plan_catalog *cat = NULL;
    ls_plan_cluster *cl = NULL;
    ls_plan_problem *pb = NULL;
    ls_plan_result *pl = NULL;
    vrun *meas = NULL;
    cJSON *rep = NULL, *rplans = NULL;
    int ret = 0;
    /* 1. the model */
    if (model) {
        snprintf(ckpt, sizeof ckpt, "%s", model);
    } else {
        snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
        if ((rc = validate_make_ckpt(config, 1, ckpt))) {
            ret = is_input_error(rc) ? fail_input() : ls_cli_fail();
            goto done;
        }
    }
    ls_model_config mc;
    int *fbits = NULL;
    if ((rc = ls_ckpt_info(ckpt, &mc, &fbits, NULL))) {
        ret = fail_input();
        goto done;
    }
    free(fbits);
    if (prompt + gen > mc.n_ctx) {
        fprintf(stderr, "llmsys plan validate: prompt + gen = %d exceeds the model context %d\n", prompt + gen,
                mc.n_ctx);
        ret = 2;
        goto done;
    }
    ls_plan_workload wl = {batch, prompt, gen};
    printf("closing the loop in %s: %s (%d layers, d_model %d), %d CPU stages x %d thread(s), batch %d, prompt %d, gen "
           "%d\n",
           dir, ckpt, mc.n_layer, mc.d_model, stages, threads, batch, prompt, gen);
    /* 2. the device profile (same machine, measured now unless given) */
    double t0 = ls_now();
    if (profile) {
        snprintf(prof, sizeof prof, "%s", profile);
    } else {
        snprintf(prof, sizeof prof, "%s/profile.json", dir);
        if ((rc = validate_profile(ckpt, &wl, mc.n_ctx, threads, reps, prof))) {
            ret = ls_cli_fail();
            goto done;
        }
        printf("profile: %s (%.1f s)\n", prof, ls_now() - t0);
    }
    /* 3. the virtual cluster: `stages` identical profiled CPU devices on one host, whose
     * parallel capacity and message latency are measured now */
    double cap = ls_host_capacity(ckpt, stages), hop = ls_host_hop_latency(40, 0.005);
    snprintf(clpath, sizeof clpath, "%s/cluster.json", dir);
    {
        cJSON *j = cJSON_CreateObject(), *nodes = cJSON_AddArrayToObject(j, "nodes"), *n = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "format", "llmsys-cluster");
        cJSON_AddNumberToObject(j, "version", 1);
        cJSON_AddStringToObject(j, "name", "cpu-virtual");
        cJSON *h = cJSON_AddObjectToObject(j, "host");
        cJSON_AddNumberToObject(h, "capacity", isfinite(cap) ? cap : 0);
        cJSON_AddNumberToObject(h, "hop_us", isfinite(hop) ? hop * 1e6 : -1);
        cJSON_AddStringToObject(n, "profile", prof);
        cJSON_AddNumberToObject(n, "count", stages);
        cJSON_AddNumberToObject(n, "memory_GB", mem_gb);
        cJSON_AddItemToArray(nodes, n);
        rc = ls_json_write_file(clpath, j);
        cJSON_Delete(j);
        if (rc) {
            ret = ls_cli_fail();
            goto done;
        }
    }
    pb = malloc(sizeof *pb);
    pl = malloc(sizeof *pl * (size_t)n_algo);
    meas = calloc((size_t)n_algo * (size_t)runs, sizeof *meas);
    rep = cJSON_CreateObject();
    rplans = rep ? cJSON_AddArrayToObject(rep, "plans") : NULL;
    ls_plan_arch arch;
    if (!pb || !pl || !meas || !rplans) {
        ret = 1;
        goto done;
    }
    if ((rc = ls_plan_catalog_load(NULL, &cat)) || (rc = ls_plan_cluster_load(cat, clpath, &cl)) ||
        (rc = ls_plan_resolve_model(cat, ckpt, &arch)) || (rc = ls_plan_problem_init(pb, &arch, cl, wl)) ||
        (rc = ls_plan_problem_validate(pb)) || (rc = ls_plan_quality_from_checkpoint(ckpt, &arch, pb->omega)) ||
        (rc = ls_plan_problem_set_quality(pb, qt))) {
        ret = is_input_error(rc) ? fail_input() : ls_cli_fail();
        goto done;
    }
    pb->replay_select = strcmp(select, "replay") ? 0 : 16;
    printf("host: parallel capacity for %d stage processes %.2f cores (1 = one process alone); idle ZeroMQ hop "
           "%.0f us median (profile link: %.0f us)\n",
           stages, cap, hop * 1e6, cl->prof[0].link_lat_s * 1e6);
    if (isfinite(cap)) cJSON_AddNumberToObject(rep, "host_capacity_cores", cap);
    if (isfinite(hop)) cJSON_AddNumberToObject(rep, "idle_hop_s", hop);
    printf("\n  %-10s %-22s %5s %10s %10s %8s %10s %8s %7s\n", "plan", "stages (layers@bits)", "mb", "planner",
           "measured", "error", "replay", "error", "spread");
    for (int a = 0; a < n_algo; a++) {
        if ((rc = ls_plan_solve(pb, (ls_plan_algo)algo_list[a], &pl[a]))) {
            ret = ls_cli_fail();
            goto done;
        }
        snprintf(paths[a], sizeof paths[a], "%s/plan-%s.json", dir, ls_plan_algo_name(pl[a].algo));
        if ((rc = ls_plan_result_write(pb, &pl[a], paths[a]))) {
            ret = ls_cli_fail();
            goto done;
        }
    }
    if ((rc = validate_measure(ckpt, paths, n_algo, mc.n_layer, &wl, threads, runs, meas))) {
        ret = ls_cli_fail();
        goto done;
    }
    double replay_tps[LS_PLAN_ALGO_COUNT];
    for (int a = 0; a < n_algo; a++) {
        ls_plan_result *x = &pl[a];
        const char *path = paths[a];
        vrun *m = meas + (size_t)a * runs;
        double tps[100], med, lo, hi;
        for (int r = 0; r < runs; r++) tps[r] = m[r].tok_s;
        med = ls_median(tps, runs);
        lo = tps[0], hi = tps[runs - 1];
        double err = (med - x->throughput_tok_s) / x->throughput_tok_s;
        char st[64] = "";
        for (int s = 0; s < x->n_stage && strlen(st) < 48; s++) {
            size_t l = strlen(st);
            int b0 = x->bits[x->begin[s]], mixed = 0;
            for (int i = x->begin[s]; i < x->begin[s + 1]; i++) mixed |= x->bits[i] != b0;
            snprintf(st + l, sizeof st - l, "%s%d@%s%d", s ? " " : "", x->begin[s + 1] - x->begin[s], mixed ? "~" : "",
                     b0);
        }
        char mbs[16];
        snprintf(mbs, sizeof mbs, "%d/%d", x->mb_prefill, x->mb_decode);
        /* the replay of serve's schedule on this host (the cluster's measured "host") */
        ls_plan_sim_opts so = ls_plan_sim_for_cluster(cl);
        ls_plan_sim_result sr;
        if ((rc = ls_plan_simulate(pb, x, &so, &sr))) {
            ret = ls_cli_fail();
            goto done;
        }
        double ha = sr.tok_s, herr = (med - ha) / ha;
        replay_tps[a] = ha;
        printf("  %-10s %-22s %5s %8.1f/s %8.1f/s %+7.1f%% %8.1f/s %+7.1f%% %6.1f%%\n", ls_plan_algo_name(x->algo), st,
               mbs, x->throughput_tok_s, med, err * 100, ha, herr * 100, (hi - lo) / med * 100);
        /* where the time goes: predicted vs measured busy seconds per stage, micro-batch counts */
        int mp = (batch + x->mb_prefill - 1) / x->mb_prefill, md = (batch + x->mb_decode - 1) / x->mb_decode;
        cJSON *o = cJSON_CreateObject(), *ost = cJSON_AddArrayToObject(o, "stages");
        cJSON_AddStringToObject(o, "algo", ls_plan_algo_name(x->algo));
        if (workdir) cJSON_AddStringToObject(o, "plan", path);
        cJSON_AddNumberToObject(o, "predicted_tok_s", x->throughput_tok_s);
        cJSON_AddNumberToObject(o, "predicted_s", x->total_s);
        cJSON_AddNumberToObject(o, "measured_tok_s", med);
        cJSON_AddNumberToObject(o, "measured_min_tok_s", lo);
        cJSON_AddNumberToObject(o, "measured_max_tok_s", hi);
        cJSON_AddNumberToObject(o, "error", err);
        cJSON_AddNumberToObject(o, "replay_tok_s", ha);
        cJSON_AddNumberToObject(o, "replay_error", herr);
        cJSON_AddNumberToObject(o, "predicted_mb_prefill", mp);
        cJSON_AddNumberToObject(o, "predicted_mb_decode", (double)md * (gen - 1));
        cJSON_AddNumberToObject(o, "replay_mb_prefill", sr.mb_prefill);
        cJSON_AddNumberToObject(o, "replay_mb_decode", sr.mb_decode);
        cJSON_AddNumberToObject(o, "measured_mb_prefill", m[0].mb_prefill);
        cJSON_AddNumberToObject(o, "measured_mb_decode", m[0].mb_decode);
        cJSON *rs = cJSON_AddArrayToObject(o, "runs");
        for (int r = 0; r < runs; r++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "seconds", m[r].seconds);
            cJSON_AddNumberToObject(e, "tokens", m[r].tokens);
            cJSON_AddNumberToObject(e, "tok_s", m[r].tok_s);
            cJSON_AddItemToArray(rs, e);
        }
        printf("  %-10s micro-batches prefill %g (planner %d, replay %d), decode %g (planner %d, replay %d); busy s "
               "per stage (measured, planner, replay):",
               "", m[0].mb_prefill, mp, sr.mb_prefill, m[0].mb_decode, md * (gen - 1), sr.mb_decode);
        for (int s = 0; s < x->n_stage; s++) {
            /* compute only: the stage's layers (and head), without the send to the next stage */
            int d = x->dev[s];
            double lp = 0, ld = 0;
            if (s + 1 < x->n_stage) {
                lp = ls_plan_link_s(cl, d, x->dev[s + 1], (double)x->mb_prefill * prompt * arch.d_model * 4.0);
                ld = ls_plan_link_s(cl, d, x->dev[s + 1], (double)x->mb_decode * arch.d_model * 4.0);
            }
            double pred = mp * (x->stage_prefill_s[s] - lp) + (double)(gen - 1) * md * (x->stage_decode_s[s] - ld);
            double mb = 0;
            for (int r = 0; r < runs; r++) mb += m[r].busy[s] / runs;
            printf(" %.3f/%.3f/%.3f", mb, pred, sr.busy_s[s]);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "predicted_busy_s", pred);
            cJSON_AddNumberToObject(e, "replay_busy_s", sr.busy_s[s]);
            cJSON_AddNumberToObject(e, "measured_busy_s", mb);
            cJSON_AddItemToArray(ost, e);
        }
        double mean_s = 0, busy = 0;
        for (int r = 0; r < runs; r++) {
            mean_s += m[r].seconds / runs;
            for (int s = 0; s < x->n_stage; s++) busy += m[r].busy[s] / runs;
        }
        /* stage overlap: summed busy time over wall time (1 = the stages never computed at
         * the same time, n_stage = always all at once) */
        printf("; batch %.3f s (planner %.3f, replay %.3f); stage overlap %.2f\n", mean_s, x->total_s, sr.seconds,
               busy / mean_s);
        cJSON_AddNumberToObject(o, "measured_batch_s", mean_s);
        cJSON_AddNumberToObject(o, "stage_overlap", busy / mean_s);
        cJSON_AddItemToArray(rplans, o);
    }
    /* the planner's decision, checked with both plans under the same load: predicted and
     * measured throughput of each plan relative to the first (paired by round) */
    for (int a = 1; a < n_algo; a++) {
        double rr[100];
        for (int r = 0; r < runs; r++) rr[r] = meas[r].tok_s / meas[(size_t)a * runs + r].tok_s;
        double mr = ls_median(rr, runs);
        double pr = pl[0].throughput_tok_s / pl[a].throughput_tok_s;
        double sr = replay_tps[0] / replay_tps[a];
        printf("  %s / %s: planner %.2fx, replay %.2fx, measured %.2fx (median of per-round ratios, range "
               "%.2f-%.2f)\n",
               ls_plan_algo_name(pl[0].algo), ls_plan_algo_name(pl[a].algo), pr, sr, mr, rr[0], rr[runs - 1]);
        cJSON *o = cJSON_GetArrayItem(rplans, a);
        if (o) {
            cJSON_AddNumberToObject(o, "predicted_ratio_first_over_this", pr);
            cJSON_AddNumberToObject(o, "replay_ratio_first_over_this", sr);
            cJSON_AddNumberToObject(o, "measured_ratio_first_over_this", mr);
        }
    }
    if (report) {
        if (workdir) cJSON_AddStringToObject(rep, "workdir", dir);
        cJSON_AddStringToObject(rep, "model", ckpt);
        cJSON_AddNumberToObject(rep, "stages", stages);
        cJSON_AddNumberToObject(rep, "threads", threads);
        cJSON *w = cJSON_AddObjectToObject(rep, "workload");
        cJSON_AddNumberToObject(w, "batch", batch);
        cJSON_AddNumberToObject(w, "prompt", prompt);
        cJSON_AddNumberToObject(w, "gen", gen);
        cJSON_AddNumberToObject(rep, "runs", runs);
        if ((rc = ls_json_write_file(report, rep))) ret = ls_cli_fail();
    }
done:
    if (!workdir) validate_cleanup(dir);
    cJSON_Delete(rep);
    free(meas);
    free(pl);
    free(pb);
    ls_plan_cluster_free(cl);
    ls_plan_catalog_free(cat);
    return ret;
}

int cmd_plan(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: llmsys plan SUBCOMMAND [options]\n\n"
                   "  serve      plan stages, per-layer bits and micro-batches (LLM-PQ / SplitQuant)\n"
                   "  indicator  per-layer quality indicator of a checkpoint\n"
                   "  validate   plan on profiled CPU stages, serve the plan, compare measured with predicted\n"
                   "  list       the GPU / model / cluster catalogs\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve")) return plan_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "list")) return plan_list(argc - 1, argv + 1);
    if (!strcmp(argv[1], "indicator")) return plan_indicator(argc - 1, argv + 1);
    if (!strcmp(argv[1], "validate")) return plan_validate(argc - 1, argv + 1);
    fprintf(stderr, "llmsys plan: unknown subcommand '%s' (serve, indicator, list, validate)\n", argv[1]);
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
    ls_plan_workload wl = {cl->batch ? cl->batch : 32, cl->prompt ? cl->prompt : 512, cl->gen ? cl->gen : 100};
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
