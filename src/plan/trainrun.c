/* trainrun.c - the entry points behind `llmsys plan train` (options to a written precision
 * plan), its printed summary, and `llmsys train --precision-plan`'s check and per-rank set-up. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

ls_tplan_opts ls_tplan_defaults(void) {
    ls_tplan_opts o = {0};
    o.model = "small";
    o.strategy = "qsync";
    o.int8 = "channel";
    o.batch = 8;
    o.reps = 5;
    return o;
}

int ls_tplan_parse_cluster(const char *s, double *shares, char names[][LS_PLAN_NAME], int *local) {
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

/* The options that need no profiling: strategy, precisions, numbers, the output's directory,
 * the model, the cluster and (for GPUs) the catalog names. Fills p's shape and *st, *uq. */
static int check_opts(const ls_tplan_opts *o, ls_tplan *p, ls_tplan_strategy *st, int *uq, double *shares,
                      char names[][LS_PLAN_NAME], int *local, ls_plan_catalog **cat) {
    static const char *const sn[] = {"qsync", "uniform", "fp32", "greedy"};
    int k = 0;
    while (k < 4 && strcmp(o->strategy, sn[k])) k++;
    if (k == 4) return ls_err(LS_EINVAL, "--strategy '%s': use qsync, greedy, uniform or fp32", o->strategy);
    *st = (ls_tplan_strategy)k;
    *uq = -1;
    if (o->uniform) {
        ls_prec q;
        LS_TRY(ls_prec_parse(o->uniform, &q));
        *uq = q;
    }
    if (strcmp(o->int8, "channel") && strcmp(o->int8, "tensor"))
        return ls_err(LS_EINVAL, "--int8 '%s': use channel or tensor", o->int8);
    if (o->reps < 1 || o->reps > 64) return ls_err(LS_EINVAL, "--reps must be in [1, 64]");
    if (o->threads < 0 || o->mem_gb < 0 || o->seq < 0) /* 0: the default; -1 once meant it too */
        return ls_err(LS_EINVAL, "--threads, --mem-gb and --seq must be >= 0");
    if (o->threads > LS_MODEL_MAX_THREADS)
        return ls_err(LS_EINVAL, "--threads must be at most %d, got %d", LS_MODEL_MAX_THREADS, o->threads);
    LS_TRY(ls_out_path_check("out", o->out)); /* fail before profiling when the plan could not be written */
    if (ls_is_file(o->model)) {
        ls_st_file *f;
        LS_TRY(ls_ckpt_open(o->model, &f, &p->cfg));
        ls_st_close(f);
    } else {
        LS_TRY(ls_model_config_named(o->model, &p->cfg));
    }
    int n = ls_tplan_parse_cluster(o->cluster, shares, names, local);
    if (n < 0) return n;
    p->ranks = n;
    p->batch = o->batch;
    p->seq = o->seq > 0 ? o->seq : p->cfg.n_ctx;
    p->per_channel = !strcmp(o->int8, "channel");
    snprintf(p->cluster, sizeof p->cluster, "%s", o->cluster);
    if (o->batch < 1 || o->batch % n) return ls_err(LS_EINVAL, "--batch %d does not split over %d ranks", o->batch, n);
    if (p->seq > p->cfg.n_ctx) return ls_err(LS_EINVAL, "--seq %d exceeds the context %d", p->seq, p->cfg.n_ctx);
    LS_TRY(ls_model_batch_fit(&p->cfg, o->batch, n, p->seq)); /* the profile's steps */
    if (p->cfg.n_layer * LS_LIN_COUNT > LS_TPLAN_MAX_LIN)
        return ls_err(LS_ERANGE, "the model has more than %d Linear layers", LS_TPLAN_MAX_LIN);
    if (*local) return LS_OK;
    LS_TRY(ls_plan_catalog_load(NULL, cat)); /* names first: a typo fails before any profiling */
    for (int r = 0; r < n; r++) {
        ls_plan_gpu g;
        LS_TRY(ls_plan_catalog_gpu(*cat, names[r], &g));
    }
    return LS_OK;
}

int ls_tplan_check_opts(const ls_tplan_opts *o, int *local_ranks) {
    ls_tplan *p = calloc(1, sizeof *p);
    double shares[LS_TPLAN_MAX_RANK] = {0};
    char names[LS_TPLAN_MAX_RANK][LS_PLAN_NAME];
    int local = 0, uq = -1;
    ls_tplan_strategy st;
    ls_plan_catalog *cat = NULL;
    int rc = p ? check_opts(o, p, &st, &uq, shares, names, &local, &cat) : ls_err(LS_ENOMEM, "out of memory");
    *local_ranks = rc == LS_OK && local ? p->ranks : 0;
    ls_plan_catalog_free(cat);
    free(p);
    return rc;
}

int ls_tplan_make(const ls_tplan_opts *o, ls_tplan *p) {
    memset(p, 0, sizeof *p);
    double shares[LS_TPLAN_MAX_RANK] = {0};
    char names[LS_TPLAN_MAX_RANK][LS_PLAN_NAME];
    int local = 0, uq = -1;
    ls_tplan_strategy st = LS_TPLAN_QSYNC;
    ls_plan_catalog *cat = NULL;
    ls_corpus *corpus = NULL;
    int rc = check_opts(o, p, &st, &uq, shares, names, &local, &cat);
    if (rc == LS_OK) {
        const char *def[] = {LLMSYS_SOURCE_DIR "/docs"};
        ls_corpus_opts co = ls_corpus_defaults();
        co.max_bytes = 4u << 20;
        rc = ls_corpus_load(&corpus, o->n_data ? o->data : def, o->n_data ? o->n_data : 1, &co);
    }
    const char *ckpt = ls_is_file(o->model) ? o->model : NULL;
    int th = o->threads > 0 ? o->threads : (local && p->ranks > 0 ? ls_num_cores() / p->ranks : ls_num_cores());
    if (th < 1) th = 1;
    if (local && o->dist) rc = ls_dist_agree(o->dist, rc, NULL); /* the ranks profile together */
    if (rc == LS_OK) {
        if (local)
            rc = ls_tplan_profile_here(p, corpus, ckpt, shares, th, o->reps, o->dist);
        else {
            rc = ls_tplan_indicator_run(p, corpus, ckpt, th, NULL, NULL);
            if (rc == LS_OK) rc = ls_tplan_model_gpus(p, cat, names);
        }
    }
    if (rc == LS_OK && o->mem_gb > 0)
        for (int r = 0; r < p->ranks; r++) p->dev[r].mem_bytes = o->mem_gb * 1e9;
    if (rc == LS_OK) rc = ls_tplan_allocate(p, st, uq);
    if (rc == LS_OK && (!o->dist || ls_dist_rank(o->dist) == 0)) rc = ls_tplan_write(p, o->out);
    ls_corpus_free(corpus);
    ls_plan_catalog_free(cat);
    return rc;
}

void ls_tplan_print(FILE *f, const ls_tplan *p) {
    const char *sn[] = {"qsync", "uniform", "fp32", "greedy"};
    fprintf(f, "precision plan (%s) for %d layers x 4 Linear, global batch %d x seq %d on %s:\n", sn[p->strategy],
            p->cfg.n_layer, p->batch, p->seq, p->cluster);
    fprintf(f, "  %-4s %-12s %8s %14s %14s %-24s %s\n", "rank", "device", "slowdown", "fp32 step ms", "plan step ms",
            "fp32/bf16/fp16/int8", "keeps pace");
    for (int r = 0; r < p->ranks; r++) {
        char c[40];
        fprintf(f, "  %-4d %-12s %8.2f %14.2f %14.2f %-24s %s\n", r, p->dev[r].name, p->dev[r].slowdown,
                p->pred_fp32_s[r] * 1e3, p->pred_s[r] * 1e3, ls_tplan_mix(p, r, c, sizeof c),
                p->keeps_pace[r] ? "yes" : "NO");
    }
    fprintf(f, "  target (fastest rank, fp32) %.2f ms, all-reduce %.2f ms, predicted iteration %.2f ms\n",
            p->target_s * 1e3, p->allreduce_s * 1e3, p->pred_iter_s * 1e3);
    fprintf(f, "  indicator total %.4g, allocated in %.2f ms; costs: %s\n", p->quality, p->solve_s * 1e3,
            p->dev[0].gpu ? "modelled from the GPU catalog" : "measured here");
    if (p->dev[0].gpu) return;
    fprintf(f, "  throttle: %s\n", p->throttle);
    for (int r = 0; r < p->ranks; r++) {
        const double *nb = p->dev[r].neigh_s;
        fprintf(f, "  rank %d: %.2f of a core while computing", r, p->dev[r].cpu_share);
        if (nb[1] != 0 || nb[2] != 0 || nb[3] != 0)
            fprintf(f, "; its step next to ranks at bf16 / fp16 / int8 instead of fp32: %+.1f / %+.1f / %+.1f ms",
                    nb[1] * 1e3, nb[2] * 1e3, nb[3] * 1e3);
        fprintf(f, "\n");
    }
}

const char *ls_tplan_mix(const ls_tplan *p, int rank, char *buf, size_t n) {
    int cnt[LS_PREC_COUNT] = {0};
    for (int i = 0; i < p->n_lin; i++) cnt[p->prec[rank][i]]++;
    snprintf(buf, n, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
    return buf;
}

/* ---------------------------------------------------------------- train --precision-plan */

int ls_tplan_check(const char *path, int ranks) {
    ls_tplan *p = calloc(1, sizeof *p);
    if (!p) return ls_err(LS_ENOMEM, "out of memory");
    int rc = ls_tplan_load(path, p);
    if (rc == LS_OK && p->ranks != ranks)
        rc = ls_err(LS_EINVAL, "%s plans %d ranks, this run has %d (--ranks)", path, p->ranks, ranks);
    free(p);
    return rc;
}

int ls_tplan_apply(const char *path, ls_model *m, ls_dist *d, int batch, int seq, ls_throttle *thr, char *summary,
                   size_t n) {
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
        LS_INFO("train: rank %d throttle: %s (pid %d)", rank, p->dev[rank].gpu ? "none (planned for a GPU)" : thr->mech,
                (int)getpid());
    free(all);
    free(p);
    return rc;
}
