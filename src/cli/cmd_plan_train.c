/* cmd_plan_train.c - `llmsys plan train`: per-rank, per-layer precision plans for
 * hybrid-device data-parallel training (QSync), and `llmsys train --precision-plan`'s
 * per-rank set-up. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

static int is_input_error(int rc) {
    return rc == LS_EINVAL || rc == LS_ENOTFOUND || rc == LS_EFORMAT || rc == LS_ERANGE || rc == LS_EINFEASIBLE;
}

/* "local:1,0.5" (CPU shares of the ranks here) or "A100x2,T4" (catalog GPUs). Fills either
 * shares or names; returns the rank count or a negative status. */
static int parse_cluster(const char *s, double *shares, char names[][LS_PLAN_NAME], int *local) {
    int n = 0;
    *local = !strncmp(s, "local:", 6);
    const char *p = *local ? s + 6 : s;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char tok[LS_PLAN_NAME];
        if (len == 0 || len >= sizeof tok) return ls_err(LS_EINVAL, "--cluster '%s': empty or long entry", s);
        memcpy(tok, p, len);
        tok[len] = '\0';
        int rep = 1;
        char *x = strrchr(tok, 'x');
        if (!*local && x && x != tok && x[1]) {
            char *end;
            long r = strtol(x + 1, &end, 10);
            if (!*end) {
                if (r < 1 || r > LS_TPLAN_MAX_RANK) return ls_err(LS_EINVAL, "--cluster '%s': bad count", s);
                rep = (int)r;
                *x = '\0';
            }
        }
        for (int k = 0; k < rep; k++) {
            if (n >= LS_TPLAN_MAX_RANK) return ls_err(LS_EINVAL, "--cluster: at most %d ranks", LS_TPLAN_MAX_RANK);
            if (*local) {
                char *end;
                shares[n] = strtod(tok, &end);
                if (*end || !(shares[n] > 0 && shares[n] <= 1024))
                    return ls_err(LS_EINVAL, "--cluster '%s': '%s' is not a CPU share > 0", s, tok);
            } else {
                snprintf(names[n], LS_PLAN_NAME, "%s", tok);
            }
            n++;
        }
        p += len + (e ? 1 : 0);
        if (e && !*p) return ls_err(LS_EINVAL, "--cluster '%s': trailing comma", s);
    }
    if (n < 1) return ls_err(LS_EINVAL, "--cluster '%s': no ranks", s);
    return n;
}

static void print_tplan(const ls_tplan *p) {
    const char *sn[] = {"qsync", "uniform", "fp32", "greedy"};
    printf("precision plan (%s) for %d layers x 4 Linear, global batch %d x seq %d on %s:\n", sn[p->strategy],
           p->cfg.n_layer, p->batch, p->seq, p->cluster);
    printf("  %-4s %-12s %8s %14s %14s %-24s %s\n", "rank", "device", "slowdown", "fp32 step ms", "plan step ms",
           "fp32/bf16/fp16/int8", "keeps pace");
    for (int r = 0; r < p->ranks; r++) {
        int cnt[LS_PREC_COUNT] = {0};
        for (int i = 0; i < p->n_lin; i++) cnt[p->prec[r][i]]++;
        char c[40];
        snprintf(c, sizeof c, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
        printf("  %-4d %-12s %8.2f %14.2f %14.2f %-24s %s\n", r, p->dev[r].name, p->dev[r].slowdown,
               p->pred_fp32_s[r] * 1e3, p->pred_s[r] * 1e3, c, p->keeps_pace[r] ? "yes" : "NO");
    }
    printf("  target (fastest rank, fp32) %.2f ms, all-reduce %.2f ms, predicted iteration %.2f ms\n",
           p->target_s * 1e3, p->allreduce_s * 1e3, p->pred_iter_s * 1e3);
    printf("  indicator total %.4g, allocated in %.2f ms; costs: %s\n", p->quality, p->solve_s * 1e3,
           p->dev[0].gpu ? "modelled from the GPU catalog" : "measured here");
    if (!p->dev[0].gpu) printf("  throttle: %s\n", p->throttle);
}

int plan_train(int argc, char **argv) {
    const char *model = "small", *cluster = NULL, *out = NULL, *strategy = "qsync", *uniform = NULL, *int8 = "channel";
    ls_strlist data = {0};
    int batch = 8, seq = 0, threads = 0, reps = 5, quiet = 0;
    double mem_gb = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "CONFIG|CKPT", "llmsys config (tiny, small) or checkpoint (default small)"},
        {"cluster", LS_ARG_STR, &cluster, "C",
         "ranks: local:1,0.5 (CPU shares here, measured) or A100x2,T4x2 (catalog GPUs, modelled)", 1},
        {"out", LS_ARG_STR, &out, "FILE", "plan to write (JSON)", 1},
        {"data", LS_ARG_STR_LIST, &data, "PATH", "text for the profile and the indicator (default: the docs)"},
        {"batch", LS_ARG_INT, &batch, "B", "global batch over all ranks (default 8)"},
        {"seq", LS_ARG_INT, &seq, "T", "tokens per sequence (default: the model's context)"},
        {"strategy", LS_ARG_STR, &strategy, "S",
         "qsync (default, exact), greedy (QSync's), uniform (slow ranks all low), fp32"},
        {"uniform", LS_ARG_STR, &uniform, "P", "precision of --strategy uniform (default: each rank's fastest)"},
        {"int8", LS_ARG_STR, &int8, "SCALES", "int8 scales: channel (default) or tensor"},
        {"threads", LS_ARG_INT, &threads, "N", "threads per rank (local; default cores / ranks)"},
        {"reps", LS_ARG_INT, &reps, "N", "profile repetitions (mean; default 5)"},
        {"mem-gb", LS_ARG_FLOAT, &mem_gb, "GB", "memory per rank (default: the device's, or RAM / ranks here)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "print nothing but errors"},
    };
    int prc = ls_args_parse("plan train",
                            "Plans the precision of every Linear layer on every rank so slow ranks keep pace (QSync). "
                            "Example:\n  llmsys plan train --model small --cluster local:1,0.5 --out plan.json",
                            spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (prc) {
        ls_strlist_free(&data);
        return LS_ARGS_EXIT(prc);
    }
    ls_tplan *p = calloc(1, sizeof *p);
    double shares[LS_TPLAN_MAX_RANK] = {0};
    char names[LS_TPLAN_MAX_RANK][LS_PLAN_NAME];
    int local = 0, rc = p ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    ls_tplan_strategy st = LS_TPLAN_QSYNC;
    int uq = -1;
    const char *ckpt = NULL;
    if (rc == LS_OK) {
        if (!strcmp(strategy, "qsync"))
            st = LS_TPLAN_QSYNC;
        else if (!strcmp(strategy, "uniform"))
            st = LS_TPLAN_UNIFORM;
        else if (!strcmp(strategy, "fp32"))
            st = LS_TPLAN_FP32;
        else if (!strcmp(strategy, "greedy"))
            st = LS_TPLAN_GREEDY;
        else
            rc = ls_err(LS_EINVAL, "--strategy '%s': use qsync, greedy, uniform or fp32", strategy);
    }
    if (rc == LS_OK && uniform) {
        ls_prec q;
        rc = ls_prec_parse(uniform, &q);
        uq = q;
    }
    if (rc == LS_OK && strcmp(int8, "channel") && strcmp(int8, "tensor"))
        rc = ls_err(LS_EINVAL, "--int8 '%s': use channel or tensor", int8);
    if (rc == LS_OK && (reps < 1 || reps > 64)) rc = ls_err(LS_EINVAL, "--reps must be in [1, 64]");
    if (rc == LS_OK && (threads < 0 || mem_gb < 0)) rc = ls_err(LS_EINVAL, "--threads and --mem-gb must be >= 0");
    if (rc == LS_OK) { /* fail before profiling when the plan could not be written */
        char *dup = strdup(out), *slash = dup ? strrchr(dup, '/') : NULL;
        const char *parent = slash ? (slash == dup ? "/" : (*slash = '\0', dup)) : ".";
        if (!dup)
            rc = ls_err(LS_ENOMEM, "out of memory");
        else if (ls_is_dir(out))
            rc = ls_err(LS_EINVAL, "--out %s is a directory", out);
        else if (!ls_is_dir(parent) || access(parent, W_OK) != 0)
            rc = ls_err(LS_EINVAL, "--out %s: directory %s does not exist or is not writable", out, parent);
        free(dup);
    }
    if (rc == LS_OK) {
        if (ls_is_file(model)) {
            ls_st_file *f;
            rc = ls_ckpt_open(model, &f, &p->cfg);
            if (rc == LS_OK) ls_st_close(f);
            ckpt = model;
        } else {
            rc = ls_model_config_named(model, &p->cfg);
        }
    }
    int n = rc == LS_OK ? parse_cluster(cluster, shares, names, &local) : rc;
    if (n < 0) rc = n;
    if (rc == LS_OK) {
        p->ranks = n;
        p->batch = batch;
        p->seq = seq > 0 ? seq : p->cfg.n_ctx;
        p->per_channel = !strcmp(int8, "channel");
        snprintf(p->cluster, sizeof p->cluster, "%s", cluster);
        if (batch < 1 || batch % n)
            rc = ls_err(LS_EINVAL, "--batch %d does not split over %d ranks", batch, n);
        else if (p->seq > p->cfg.n_ctx)
            rc = ls_err(LS_EINVAL, "--seq %d exceeds the context %d", p->seq, p->cfg.n_ctx);
        else if (p->cfg.n_layer * LS_LIN_COUNT > LS_TPLAN_MAX_LIN)
            rc = ls_err(LS_ERANGE, "the model has more than %d Linear layers", LS_TPLAN_MAX_LIN);
    }
    ls_plan_catalog *cat = NULL;
    if (rc == LS_OK && !local) { /* names first: a typo fails before any profiling */
        rc = ls_plan_catalog_load(NULL, &cat);
        for (int r = 0; rc == LS_OK && r < n; r++) {
            ls_plan_gpu g;
            rc = ls_plan_catalog_gpu(cat, names[r], &g);
        }
    }
    if (rc < 0) {
        int code = is_input_error(rc) ? 2 : 1;
        ls_cli_fail();
        ls_plan_catalog_free(cat);
        ls_strlist_free(&data);
        free(p);
        return code;
    }
    ls_corpus *corpus = NULL;
    const char *def[] = {LLMSYS_SOURCE_DIR "/docs"};
    ls_corpus_opts co = ls_corpus_defaults();
    co.max_bytes = 4u << 20;
    rc = ls_corpus_load(&corpus, data.n ? data.v : def, data.n ? data.n : 1, &co);
    int th = threads > 0 ? threads : (local ? ls_num_cores() / n : ls_num_cores());
    if (th < 1) th = 1;
    if (rc == LS_OK) {
        if (local)
            rc = ls_tplan_profile_here(p, corpus, ckpt, shares, th, reps);
        else {
            rc = ls_tplan_indicator_run(p, corpus, ckpt, th);
            if (rc == LS_OK) rc = ls_tplan_model_gpus(p, cat, names);
        }
    }
    if (rc == LS_OK && mem_gb > 0)
        for (int r = 0; r < n; r++) p->dev[r].mem_bytes = mem_gb * 1e9;
    if (rc == LS_OK) rc = ls_tplan_allocate(p, st, uq);
    if (rc == LS_OK) rc = ls_tplan_write(p, out);
    int code = 0;
    if (rc < 0)
        code = is_input_error(rc) ? 2 : 1, ls_cli_fail();
    else if (!quiet) {
        print_tplan(p);
        printf("wrote %s\n", out);
    }
    ls_corpus_free(corpus);
    ls_plan_catalog_free(cat);
    ls_strlist_free(&data);
    free(p);
    return code;
}

/* ---------------------------------------------------------------- train --precision-plan */

int train_precision_plan_check(const char *path, int ranks) {
    ls_tplan *p = calloc(1, sizeof *p);
    if (!p) return ls_err(LS_ENOMEM, "out of memory");
    int rc = ls_tplan_load(path, p);
    if (rc == LS_OK && p->ranks != ranks)
        rc = ls_err(LS_EINVAL, "%s plans %d ranks, this run has %d (--ranks)", path, p->ranks, ranks);
    free(p);
    return rc;
}

int train_precision_plan_apply(const char *path, ls_model *m, ls_dist *d, int batch, int seq, ls_throttle *thr,
                               char *summary, size_t n) {
    ls_tplan *p = calloc(1, sizeof *p);
    if (!p) return ls_err(LS_ENOMEM, "out of memory");
    int rc = ls_tplan_load(path, p), rank = ls_dist_rank(d), R = ls_dist_size(d);
    const ls_model_config *mc = ls_model_cfg(m);
    if (rc == LS_OK && p->ranks != R)
        rc = ls_err(LS_EINVAL, "%s plans %d ranks, this run has %d (--ranks)", path, p->ranks, R);
    if (rc == LS_OK && (p->cfg.n_layer != mc->n_layer || p->cfg.d_model != mc->d_model || p->cfg.d_ff != mc->d_ff))
        rc = ls_err(LS_EINVAL, "%s was planned for another model (%d layers, d_model %d)", path, p->cfg.n_layer,
                    p->cfg.d_model);
    if (rc == LS_OK && rank == 0 && (p->batch != batch || p->seq != seq))
        LS_WARN("%s was planned for batch %d x seq %d, this run is %d x %d: its predictions do not apply", path,
                p->batch, p->seq, batch, seq);
    if (rc == LS_OK) rc = ls_model_set_precision(m, p->prec[rank], p->n_lin, p->per_channel);
    if (rc == LS_OK && !p->dev[rank].gpu) rc = ls_throttle_apply(thr, p->dev[rank].share, omp_get_max_threads());
    /* every rank's mix and throttle, gathered by a sum over ranks so rank 0 can report them:
     * 6 numbers per rank (precision counts, share, mechanism 0 none / 1 cgroup / 2 duty cycle).
     * Collective: the ranks agree first, so a rank that failed does not leave the others waiting. */
    float *all = calloc((size_t)R * 6, sizeof(float));
    if (rc == LS_OK && !all) rc = ls_err(LS_ENOMEM, "out of memory");
    if (ls_dist_agree(d, rc, NULL) == LS_OK) {
        for (int i = 0; i < p->n_lin; i++) all[rank * 6 + p->prec[rank][i]] += 1;
        all[rank * 6 + 4] = (float)(thr->active ? thr->share : 0);
        all[rank * 6 + 5] = !thr->active ? 0.0f : thr->dir[0] ? 1.0f : 2.0f;
        rc = ls_dist_allreduce_sum(d, all, (size_t)R * 6);
    } else if (rc == LS_OK) {
        rc = ls_err(LS_EPEER, "another rank failed to apply the precision plan");
    }
    size_t len = 0;
    summary[0] = '\0';
    for (int r = 0; rc == LS_OK && r < R && len + 1 < n; r++) {
        const float *a = all + r * 6;
        const char *mech[3] = {"none", "cgroup v1 cpu.cfs_quota_us", "duty cycle SIGSTOP/SIGCONT"};
        int w = snprintf(summary + len, n - len,
                         "%srank %d: %d fp32 / %d bf16 / %d fp16 / %d int8 Linear layers, throttle: %s", r ? "; " : "",
                         r, (int)a[0], (int)a[1], (int)a[2], (int)a[3], mech[(int)a[5] % 3]);
        len += w > 0 ? (size_t)w : 0;
        if (a[5] > 0 && len + 1 < n) {
            w = snprintf(summary + len, n - len, " at %.3f core", a[4]);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    if (rc == LS_OK)
        LS_INFO("train: rank %d throttle: %s", rank, p->dev[rank].gpu ? "none (planned for a GPU)" : thr->mech);
    free(all);
    free(p);
    return rc;
}

/* ---------------------------------------------------------------- demo */


int demo_qsync(const ls_demo_ctx *ctx) {
    const char *config = ctx->quick ? "tiny" : "small";
    int batch = 8, steps = ctx->quick ? 4 : 30, seq = ctx->quick ? 32 : 128, reps = ctx->quick ? 2 : 5;
    const char *paths[1] = {"/usr/share/common-licenses"};
    if (!ls_is_dir(paths[0])) paths[0] = LLMSYS_SOURCE_DIR "/docs";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/qsync", ctx->workdir);
    ls_corpus *corpus = NULL;
    ls_tplan *p = malloc(sizeof *p);
    int rc = p ? ls_mkdirs(dir) : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) rc = ls_corpus_load(&corpus, paths, 1, NULL);
    double frac = ls_tplan_exp_cpu_fraction(), share = frac * 2 / 3 < 0.1 ? 0.1 : frac * 2 / 3;
    enum { NP = 3 };
    const char *names[NP] = {"fp32", "uniform", "qsync"};
    ls_tplan_strategy st[NP] = {LS_TPLAN_FP32, LS_TPLAN_UNIFORM, LS_TPLAN_QSYNC};
    int uni[NP] = {-1, -1, -1};
    double pred[NP], meas[NP], bpb[NP], prof_s = 0;
    printf("2 data-parallel ranks of the %s model on this machine; rank 1 throttled to %.2f of a core (2/3 of what "
           "an unthrottled process gets now, %.2f)\n",
           config, share, frac);
    if (rc == LS_OK) rc = ls_tplan_exp_plans(p, corpus, config, batch, seq, share, reps, dir, NP, names, st, uni, pred, &prof_s);
    if (rc == LS_OK) {
        printf("profiled in %.1f s (per-operator costs per precision, indicator from real tensors):\n", prof_s);
        print_tplan(p);
        printf("\ntraining each plan %d steps (llmsys train --ranks 2 --precision-plan ...):\n", steps);
        printf("  %-8s %-26s %12s %12s %8s %14s\n", "plan", "rank 1 fp32/bf16/fp16/int8", "predicted ms", "measured ms",
               "error", "held-out bpb");
    }
    const char *bin = ls_cli_self();
    for (int k = 0; rc == LS_OK && k < NP; k++) {
        char plan[4200], ck[4200], rep[4200], log[4200];
        snprintf(plan, sizeof plan, "%s/plan-%s.json", dir, names[k]);
        snprintf(ck, sizeof ck, "%s/%s.safetensors", dir, names[k]);
        snprintf(rep, sizeof rep, "%s/%s.json", dir, names[k]);
        snprintf(log, sizeof log, "%s/%s.log", dir, names[k]);
        rc = ls_tplan_exp_train(bin, config, paths[0], batch, seq, steps, plan, ck, rep, log, &meas[k]);
        if (rc == LS_OK) rc = ls_tplan_exp_eval(ck, corpus, seq, &bpb[k]);
        ls_tplan *q = rc == LS_OK ? malloc(sizeof *q) : NULL;
        int cnt[LS_PREC_COUNT] = {0};
        if (q && ls_tplan_load(plan, q) == LS_OK)
            for (int i = 0; i < q->n_lin; i++) cnt[q->prec[1][i]]++;
        free(q);
        char mix[40];
        snprintf(mix, sizeof mix, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
        if (rc == LS_OK)
            printf("  %-8s %-26s %12.1f %12.1f %+7.1f%% %14.4f\n", names[k], mix, pred[k] * 1e3, meas[k] * 1e3,
                   100 * (pred[k] - meas[k]) / meas[k], bpb[k]);
    }
    if (rc == LS_OK) {
        double budget = meas[0] * steps;
        printf("\nequal wall time (%.1f s, what fp32 at the slow rank's pace needs for %d steps):\n", budget, steps);
        printf("  %-8s %6s %14s\n", "plan", "steps", "held-out bpb");
        printf("  %-8s %6d %14.4f\n", names[0], steps, bpb[0]);
        for (int k = 1; rc == LS_OK && k < NP; k++) {
            int s = (int)floor(budget / meas[k]);
            if (s < 1) s = 1;
            double b = bpb[k], it;
            if (s != steps) {
                char plan[4200], ck[4200], rep[4200], log[4200];
                snprintf(plan, sizeof plan, "%s/plan-%s.json", dir, names[k]);
                snprintf(ck, sizeof ck, "%s/%s-eqtime.safetensors", dir, names[k]);
                snprintf(rep, sizeof rep, "%s/%s-eqtime.json", dir, names[k]);
                snprintf(log, sizeof log, "%s/%s-eqtime.log", dir, names[k]);
                rc = ls_tplan_exp_train(bin, config, paths[0], batch, seq, s, plan, ck, rep, log, &it);
                if (rc == LS_OK) rc = ls_tplan_exp_eval(ck, corpus, seq, &b);
            }
            if (rc == LS_OK) printf("  %-8s %6d %14.4f\n", names[k], s, b);
        }
        if (rc == LS_OK)
            printf("throughput of the qsync plan: %.2fx fp32 at the slow rank's pace; files in %s\n", meas[0] / meas[2],
                   dir);
    }
    ls_corpus_free(corpus);
    free(p);
    return rc < 0 ? ls_cli_fail() : 0;
}
