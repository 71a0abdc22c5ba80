/* trainexp.c - the hybrid-precision training experiment shared by `llmsys demo qsync` and
 * bench/bench_qsync.c: profile this machine once, write plans by strategy, run each plan as
 * a 2-rank `llmsys train` (one rank throttled), and evaluate held-out bits/byte. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

/* The share of one core this process gets now (CPU time over wall time of a busy loop):
 * on a loaded machine an unthrottled rank already gets less than a core, so the slow rank's
 * throttle is set relative to this. */
double ls_tplan_exp_cpu_fraction(void) {
    double c0 = ls_process_cpu_time(), t0 = ls_now();
    volatile double x = 0;
    while (ls_now() - t0 < 0.3)
        for (int i = 0; i < 100000; i++) x += i * 1e-9;
    double f = (ls_process_cpu_time() - c0) / (ls_now() - t0);
    return f > 1 ? 1 : f;
}

/* Runs av (this llmsys binary; MPI allowed as root) with its output to log and waits: LS_OK
 * when it exits 0, else LS_EIO naming `what` and the log. */
static int exp_spawn_wait(const char *bin, const char *const *av, const char *log, const char *what) {
    const char *env[] = {"OMPI_ALLOW_RUN_AS_ROOT", "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", NULL};
    ls_spawn_opts so = {.log = log, .env = env};
    pid_t pid;
    LS_TRY(ls_spawn_self(bin, av, &so, &pid));
    int ws;
    if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return ls_err(LS_EIO, "`%s` failed (see %s)", what, log);
    return LS_OK;
}


/* per run: median step, rank 0's and rank 1's share of a core while computing, the least sync
 * seconds per step of the ranks, rank 0's and rank 1's compute seconds per step, rank 0's and
 * rank 1's share of a core over the whole run */
enum { RUN_N = 8 };

/* Runs `bin train ...` on 2 ranks with plan, output to log; appends each step's wall time
 * after the first (rank 0's report, step_s) to st[*n] when st is not NULL (room for steps);
 * run (may be NULL) gets the median of those steps, each rank's share of a core and the
 * least of the ranks' time per step at the syncs (the rank that waited least: what the
 * synchronisations themselves cost). */
static int exp_train(const ls_tplan_exp *e, int steps, const char *plan, const char *out, const char *report,
                     const char *log, double *st, int *n, double run[RUN_N]) {
    char b[16], s[16], k[16];
    snprintf(b, sizeof b, "%d", e->batch);
    snprintf(s, sizeof s, "%d", e->seq);
    snprintf(k, sizeof k, "%d", steps);
    const char *av[] = {
        e->bin,     "train", "--config",    e->config, "--data",  e->data, "--batch",          b,    "--seq", s,
        "--steps",  k,       "--threads",   "1",       "--ranks", "2",     "--precision-plan", plan, "--out", out,
        "--report", report,  "--log-every", "1",       NULL};
    char what[4200];
    snprintf(what, sizeof what, "llmsys train --precision-plan %s", plan);
    LS_TRY(exp_spawn_wait(e->bin, av, log, what));
    cJSON *j;
    LS_TRY(ls_json_read_file(report, &j));
    const cJSON *arr = cJSON_GetObjectItem(j, "step_s"), *sh = cJSON_GetObjectItem(j, "cpu_share"),
                *sy = cJSON_GetObjectItem(j, "sync_s"), *co = cJSON_GetObjectItem(j, "compute_s"),
                *csh = cJSON_GetObjectItem(j, "compute_share");
    int m = cJSON_GetArraySize(arr), n0 = st ? *n : 0;
    for (int i = 1; st && i < m && i < steps; i++) st[(*n)++] = cJSON_GetArrayItem(arr, i)->valuedouble;
    if (run && st && *n > n0) {
        double *v = malloc(sizeof(double) * (size_t)(*n - n0));
        if (v) memcpy(v, st + n0, sizeof(double) * (size_t)(*n - n0));
        run[0] = v ? ls_quantile(v, *n - n0, 0.5) : 0;
        free(v);
        /* the share while computing: a rank that waits at a synchronisation gives its core away,
         * so its share over the whole run understates what it gets when it has work */
        for (int r = 0; r < 2; r++) {
            run[6 + r] = cJSON_GetArraySize(sh) == 2 ? cJSON_GetArrayItem(sh, r)->valuedouble : 0;
            run[1 + r] = cJSON_GetArraySize(csh) == 2 ? cJSON_GetArrayItem(csh, r)->valuedouble : run[6 + r];
        }
        run[3] = cJSON_GetArraySize(sy) == 2
                     ? fmin(cJSON_GetArrayItem(sy, 0)->valuedouble, cJSON_GetArrayItem(sy, 1)->valuedouble)
                     : -1;
        for (int r = 0; r < 2; r++)
            run[4 + r] = cJSON_GetArraySize(co) == 2 ? cJSON_GetArrayItem(co, r)->valuedouble : 0;
    }
    cJSON_Delete(j);
    return m == steps ? LS_OK : ls_err(LS_EFORMAT, "%s: %d step times for %d steps", report, m, steps);
}

/* Held-out bits/byte of a checkpoint on the corpus's held-out split. */
int ls_tplan_exp_eval(const char *ckpt, const ls_corpus *c, int seq, double *bpb) {
    ls_model *m;
    LS_TRY(ls_ckpt_load(ckpt, LS_CKPT_WEIGHTS, &m, NULL));
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    ls_eval_result r;
    int rc = ls_eval_tokens(m, tok, n, seq, 8, 0, &r);
    ls_model_free(m);
    if (rc == LS_OK) *bpb = r.bits_per_byte;
    return rc;
}

/* Profiles this machine for a 2-rank cluster (rank 1 at e->share) with `bin plan train` (its
 * ranks under mpirun), the profile written to path, its log to path.log. */
static int exp_profile(const ls_tplan_exp *e, const char *path, double *profile_s) {
    char log[8192], b[16], s[16], sh[32], reps[16];
    snprintf(log, sizeof log, "%s.log", path);
    snprintf(b, sizeof b, "%d", e->batch), snprintf(s, sizeof s, "%d", e->seq), snprintf(reps, sizeof reps, "%d", e->reps);
    snprintf(sh, sizeof sh, "local:1,%.3f", e->share);
    const char *av[] = {e->bin, "plan",  "train", "--model", e->config, "--cluster", sh,   "--batch", b,      "--seq",
                        s,      "--reps", reps,   "--threads", "1",     "--data",    e->data, "--out", path, "--quiet",
                        NULL};
    char what[64];
    snprintf(what, sizeof what, "llmsys plan train --cluster %s", sh);
    double t0 = ls_now();
    LS_TRY(exp_spawn_wait(e->bin, av, log, what));
    *profile_s = ls_now() - t0;
    return LS_OK;
}
/* The profile (<dir>/plan-profile.json), then plan files <dir>/plan-<name>.json for each wanted
 * plan from that one profile; p receives the profile's qsync plan, plans[k] each plan. */
static int exp_plans(const ls_tplan_exp *e, ls_tplan *p, int n, const ls_tplan_exp_row *want, ls_tplan *plans,
                     double *profile_s) {
    char path[8192];
    snprintf(path, sizeof path, "%s/plan-profile.json", e->dir);
    LS_TRY(exp_profile(e, path, profile_s));
    LS_TRY(ls_tplan_load(path, p));
    int rc = LS_OK;
    for (int k = 0; rc == LS_OK && k < n; k++) {
        ls_tplan *q = &plans[k];
        memcpy(q, p, sizeof *q);
        if (want[k].fixed) { /* a fixed plan: rank 1's precision per Linear kind */
            memset(q->prec, LS_PREC_FP32, sizeof q->prec);
            for (int i = 0; i < q->n_lin; i++) q->prec[1][i] = (uint8_t)want[k].kinds[i % LS_LIN_COUNT];
            rc = ls_tplan_predict(q);
        } else {
            rc = ls_tplan_allocate(q, want[k].strategy, want[k].uniform);
        }
        snprintf(path, sizeof path, "%s/plan-%s.json", e->dir, want[k].name);
        if (rc == LS_OK) rc = ls_tplan_write(q, path);
        if (rc == LS_OK && !want[k].fixed && want[k].strategy == LS_TPLAN_QSYNC) memcpy(p, q, sizeof *q);
    }
    return rc;
}
/* Per run of plan q (runs of RUN_N numbers): predicted at the shares of a core the ranks got
 * in it, with the profiled synchronisation and with the sync time measured in the run, vs its
 * median step: the mean signed and max |error| of each into w. */
static void exp_errors(const ls_tplan *q, const double *run, int runs, ls_tplan_exp_row *w) {
    double pv[2][LS_TPLAN_EXP_ROUNDS], mean[2] = {0}, mx[2] = {0};
    w->share0 = w->share1 = w->sync_s = w->sync_pred_s = w->emax_s = w->run_share[0] = w->run_share[1] = 0;
    memset(w->comp_pred_s, 0, sizeof w->comp_pred_s), memset(w->comp_meas_s, 0, sizeof w->comp_meas_s);
    for (int r = 0; r < runs; r++) {
        const double *x = run + RUN_N * r;
        double sh[2] = {x[1], x[2]}, sync[2] = {-1, x[3]}, st[2];
        for (int v = 0; v < 2; v++) {
            pv[v][r] = ls_tplan_predict_at(q, sh, sync[v], st);
            double e = (pv[v][r] - x[0]) / x[0];
            mean[v] += e / runs, mx[v] = fmax(mx[v], fabs(e));
        }
        /* the decomposition of the prediction: each rank's compute, the ranks'
         * expected maximum over the larger, the profiled synchronisation */
        double sync_model = pv[0][r] - ls_tplan_expected_max(st, q->step_cv, 2);
        w->sync_pred_s += sync_model / runs;
        w->emax_s += (pv[0][r] - sync_model - fmax(st[0], st[1])) / runs;
        for (int k = 0; k < 2; k++) w->comp_pred_s[k] += st[k] / runs, w->comp_meas_s[k] += x[4 + k] / runs;
        w->share0 += x[1] / runs, w->share1 += x[2] / runs, w->sync_s += x[3] / runs;
        w->run_share[0] += x[6] / runs, w->run_share[1] += x[7] / runs;
    }
    w->pred_run_s = ls_quantile(pv[0], runs, 0.5), w->err_run = mean[0], w->err_run_max = mx[0];
    w->pred_sync_s = ls_quantile(pv[1], runs, 0.5), w->err_sync = mean[1], w->err_sync_max = mx[1];
}

int ls_tplan_exp_run(const ls_tplan_exp *e, const ls_corpus *c, int n, const ls_tplan_exp_row *want, ls_tplan *p,
                     ls_tplan_exp_row *rows, double *profile_s) {
    const char *names[LS_TPLAN_EXP_MAX];
    if (n < 1 || n > LS_TPLAN_EXP_MAX || e->steps < 2 || e->repeats < 1 ||
        e->repeats > LS_TPLAN_EXP_ROUNDS)
        return ls_err(LS_EINVAL, "experiment: 1..%d plans, >= 2 steps, 1..%d repeats", LS_TPLAN_EXP_MAX,
                      LS_TPLAN_EXP_ROUNDS);
    for (int k = 0; k < n; k++) {
        rows[k] = want[k];
        names[k] = want[k].name;
    }
    ls_tplan *plans = malloc(sizeof *plans * (size_t)n);
    int cap = e->repeats * e->steps;
    double *times = malloc(sizeof(double) * (size_t)cap * n), run[LS_TPLAN_EXP_MAX][RUN_N * LS_TPLAN_EXP_ROUNDS];
    int *cnt = calloc((size_t)n, sizeof(int));
    int rc = plans && times && cnt ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK)
        rc = exp_plans(e, p, n, want, plans, profile_s);
    char plan[4200], ck[4200], rep[4200], log[4200];
#define EXP_PATHS(k, tag)                                                                                              \
    snprintf(plan, sizeof plan, "%s/plan-%s.json", e->dir, names[k]);                                                  \
    snprintf(ck, sizeof ck, "%s/%s%s.safetensors", e->dir, names[k], tag);                                             \
    snprintf(rep, sizeof rep, "%s/%s%s.json", e->dir, names[k], tag);                                                  \
    snprintf(log, sizeof log, "%s/%s%s.log", e->dir, names[k], tag)
    /* rounds interleaving the plans, so a change of the machine's speed hits all of them; each
     * round is also predicted from the profile taken just before it (the first round: the plan
     * files' own; later ones: a new profile when e->reprofile, the same plans predicted on it) */
    ls_tplan *fp = malloc(sizeof *fp);
    if (rc == LS_OK && !fp) rc = ls_err(LS_ENOMEM, "out of memory");
    for (int r = 0; rc == LS_OK && r < e->repeats; r++) {
        for (int k = 0; k < n; k++) rows[k].run_pred_s[r] = plans[k].pred_iter_s;
        if (r > 0 && e->reprofile) {
            char pp[8192];
            double secs;
            snprintf(pp, sizeof pp, "%s/plan-profile-%d.json", e->dir, r);
            rc = exp_profile(e, pp, &secs);
            if (rc == LS_OK) rc = ls_tplan_load(pp, fp);
            for (int k = 0; rc == LS_OK && k < n; k++) {
                memcpy(fp->prec, plans[k].prec, sizeof fp->prec);
                rc = ls_tplan_predict(fp);
                rows[k].run_pred_s[r] = fp->pred_iter_s;
            }
        }
        for (int j = 0; rc == LS_OK && j < n; j++) {
            int k = (j + r) % n; /* each round starts one plan later: no plan always runs last */
            EXP_PATHS(k, "");
            rc = exp_train(e, e->steps, plan, ck, rep, log, times + (size_t)k * cap, &cnt[k], run[k] + RUN_N * r);
            if (rc == LS_OK && r == 0) rc = ls_tplan_exp_eval(ck, c, e->seq, &rows[k].bpb);
        }
    }
    free(fp);
    for (int k = 0; rc == LS_OK && k < n; k++) {
        ls_tplan_exp_row *w = &rows[k];
        double *v = times + (size_t)k * cap;
        w->pred_s = plans[k].pred_iter_s;
        exp_errors(&plans[k], run[k], e->repeats, w);
        w->meas_s = ls_quantile(v, cnt[k], 0.5);
        w->meas_lo_s = ls_quantile(v, cnt[k], 0.25);
        w->meas_hi_s = ls_quantile(v, cnt[k], 0.75);
        w->pred_rounds_s = w->err_rounds_max = 0;
        for (int r = 0; r < e->repeats; r++) {
            double m = run[k][RUN_N * r];
            w->run_meas_s[r] = m;
            w->pred_rounds_s += w->run_pred_s[r] / e->repeats;
            w->err_rounds_max = fmax(w->err_rounds_max, fabs(w->run_pred_s[r] - m) / m);
        }
        w->err_rounds = (w->pred_rounds_s - w->meas_s) / w->meas_s;
        w->n_steps_timed = cnt[k];
        ls_tplan_mix(&plans[k], 1, w->mix, sizeof w->mix);
    }
    /* equal wall time: what the first plan needs for e->steps steps at its measured pace;
     * each other plan runs as many steps as fit at its own measured pace */
    double budget = rc == LS_OK ? rows[0].meas_s * e->steps : 0;
    for (int k = 0; rc == LS_OK && k < n; k++) {
        ls_tplan_exp_row *w = &rows[k];
        w->eq_steps = k == 0 ? e->steps : (int)floor(budget / w->meas_s);
        if (w->eq_steps < 2) w->eq_steps = 2;
        w->eq_bpb = w->bpb;
        if (!w->eq_time || w->eq_steps == e->steps) continue;
        EXP_PATHS(k, "-eqtime");
        rc = exp_train(e, w->eq_steps, plan, ck, rep, log, NULL, NULL, NULL);
        if (rc == LS_OK) rc = ls_tplan_exp_eval(ck, c, e->seq, &w->eq_bpb);
    }
#undef EXP_PATHS
    free(plans), free(times), free(cnt);
    return rc;
}

void ls_tplan_exp_errors(const ls_tplan_exp_row *rows, int n, double err[4][2]) {
    memset(err, 0, sizeof(double) * 8);
    for (int k = 0; k < n; k++) {
        const ls_tplan_exp_row *w = &rows[k];
        double e[4][2] = {{fabs(w->pred_s - w->meas_s) / w->meas_s, fabs(w->pred_s - w->meas_s) / w->meas_s},
                          {fabs(w->err_rounds), w->err_rounds_max},
                          {fabs(w->err_run), w->err_run_max},
                          {fabs(w->err_sync), w->err_sync_max}};
        for (int v = 0; v < 4; v++) err[v][0] += e[v][0] / n, err[v][1] = fmax(err[v][1], e[v][1]);
    }
}

void ls_tplan_exp_print(FILE *f, const ls_tplan_exp *e, const ls_tplan_exp_row *rows, int n, const ls_tplan *p) {
    fprintf(f, "  %-13s %-13s %8s %8s %15s %7s | %9s %7s %6s | %11s %7s | %8s %7s %6s | %8s %7s %6s %9s\n", "plan",
            "r1 fp/bf/16/i8", "pred ms", "meas ms", "quartiles ms", "error", "rounds ms", "error", "max",
            "share r0/r1", "sync ms", "@run ms", "error", "max", "@sync ms", "error", "max", "bits/byte");
    for (int k = 0; k < n; k++) {
        const ls_tplan_exp_row *w = &rows[k];
        fprintf(f,
                "  %-13s %-13s %8.1f %8.1f %7.1f-%-7.1f %+6.1f%% | %9.1f %+6.1f%% %5.1f%% | %5.2f/%-5.2f %7.1f | %8.1f "
                "%+6.1f%% %5.1f%% | %8.1f %+6.1f%% %5.1f%% %9.4f\n",
                w->name, w->mix, w->pred_s * 1e3, w->meas_s * 1e3, w->meas_lo_s * 1e3, w->meas_hi_s * 1e3,
                100 * (w->pred_s - w->meas_s) / w->meas_s, w->pred_rounds_s * 1e3, 100 * w->err_rounds,
                100 * w->err_rounds_max, w->share0, w->share1, w->sync_s * 1e3, w->pred_run_s * 1e3, 100 * w->err_run,
                100 * w->err_run_max, w->pred_sync_s * 1e3, 100 * w->err_sync, 100 * w->err_sync_max, w->bpb);
    }
    double err[4][2];
    ls_tplan_exp_errors(rows, n, err);
    fprintf(f, "  measured: median of %d steps per plan (%d interleaved rounds x %d steps, the first of each left out)\n",
            rows[0].n_steps_timed, e->repeats, e->steps);
    fprintf(f,
            "  pred: the plan file's prediction (costs measured in the paired profile before the first round, ranks at "
            "%.2f / %.2f of a core while computing, the ranks' expected maximum, the synchronisation measured there)\n"
            "  rounds: the mean of each round's prediction from %s; max: the largest |error| of one round's "
            "prediction vs that round's median step\n"
            "  per run, each rank's compute rescaled to the share of a core it got in that run while computing "
            "(share r0/r1), their expected maximum, plus: @run the profiled synchronisation (at the slowest rank's "
            "share); @sync the run's own time at the synchronisations (sync: the rank that waited least, per step); "
            "error: mean over a plan's runs, max: the largest |error| of one run\n",
            p->dev[0].cpu_share, p->dev[1].cpu_share,
            e->reprofile ? "the profile taken just before it (the same plans predicted on a new profile)"
                         : "the one profile before the first round");
    fprintf(f,
            "  mean |error| (max): pred %.1f%% (%.1f%%), rounds %.1f%% (%.1f%% in one round), @run %.1f%% (%.1f%%), "
            "@sync %.1f%% (%.1f%%); goal < 5%%\n",
            100 * err[0][0], 100 * err[0][1], 100 * err[1][0], 100 * err[1][1], 100 * err[2][0], 100 * err[2][1],
            100 * err[3][0], 100 * err[3][1]);
    fprintf(f,
            "\n  the @run error by part (means over a plan's runs, ms per step): each rank's compute (data, "
            "forward/backward, update; the first step left out) predicted at its run's share vs measured, the "
            "ranks' expected maximum over the larger (step spread %.1f%% in the profile), the synchronisation "
            "profiled vs measured (the rank that waited least)\n",
            100 * p->step_cv);
    fprintf(f, "  %-13s %17s %17s %8s %17s %9s %8s %19s\n", "plan", "r0 compute p/m", "r1 compute p/m", "E[max]+",
            "sync p/m", "meas ms", "@run", "whole-run share r0/r1");
    for (int k = 0; k < n; k++) {
        const ls_tplan_exp_row *w = &rows[k];
        fprintf(f, "  %-13s %8.1f/%-8.1f %8.1f/%-8.1f %8.1f %8.1f/%-8.1f %9.1f %+7.1f%% %9.2f/%-9.2f\n", w->name,
                w->comp_pred_s[0] * 1e3, w->comp_meas_s[0] * 1e3, w->comp_pred_s[1] * 1e3, w->comp_meas_s[1] * 1e3,
                w->emax_s * 1e3, w->sync_pred_s * 1e3, w->sync_s * 1e3, w->meas_s * 1e3, 100 * w->err_run,
                w->run_share[0], w->run_share[1]);
    }
    fprintf(f, "\nequal wall time (%.1f s: %s's %d steps at its measured pace): held-out bits/byte\n",
            rows[0].meas_s * e->steps, rows[0].name, e->steps);
    for (int k = 0; k < n; k++)
        if (k == 0 || rows[k].eq_time)
            fprintf(f, "  %-14s %6d steps %10.4f\n", rows[k].name, rows[k].eq_steps, rows[k].eq_bpb);
}

int ls_tplan_demo(const char *bin, const char *workdir, int quick, FILE *out) {
    ls_tplan_exp e = {.bin = bin,
                      .config = quick ? "tiny" : "small",
                      .data = "/usr/share/common-licenses",
                      .batch = 8,
                      .seq = quick ? 32 : 128,
                      .steps = quick ? 4 : 10,
                      .repeats = quick ? 1 : 3,
                      .reps = quick ? 2 : 5};
    if (!ls_is_dir(e.data)) e.data = LLMSYS_SOURCE_DIR "/docs";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/qsync", workdir);
    e.dir = dir;
    double frac = ls_tplan_exp_cpu_fraction();
    e.share = frac * 2 / 3 < 0.1 ? 0.1 : frac * 2 / 3;
    ls_corpus *corpus = NULL;
    ls_tplan *p = malloc(sizeof *p);
    int rc = p ? ls_mkdirs(dir) : ls_err(LS_ENOMEM, "out of memory");
    if (rc == LS_OK) rc = ls_corpus_load(&corpus, &e.data, 1, NULL);
    const ls_tplan_exp_row want[] = {{.name = "fp32", .strategy = LS_TPLAN_FP32, .uniform = -1},
                                     {.name = "uniform", .strategy = LS_TPLAN_UNIFORM, .uniform = -1, .eq_time = 1},
                                     {.name = "qsync", .strategy = LS_TPLAN_QSYNC, .uniform = -1, .eq_time = 1}};
    enum { NP = 3 };
    ls_tplan_exp_row rows[NP];
    double prof_s = 0;
    fprintf(out,
            "2 data-parallel ranks of the %s model on this machine; rank 1 throttled to %.2f of a core (2/3 of what "
            "an unthrottled process gets now, %.2f)\n",
            e.config, e.share, frac);
    if (rc == LS_OK) rc = ls_tplan_exp_run(&e, corpus, NP, want, p, rows, &prof_s);
    if (rc == LS_OK) {
        fprintf(out, "profiled in %.1f s (per-operator costs per precision, indicator from real tensors):\n", prof_s);
        ls_tplan_print(out, p);
        fprintf(out,
                "\neach plan trained %d steps, %d runs interleaved (llmsys train --ranks 2 --precision-plan ...):\n",
                e.steps, e.repeats);
        ls_tplan_exp_print(out, &e, rows, NP, p);
        fprintf(out, "throughput of the qsync plan: %.2fx fp32 at the slow rank's pace; files in %s\n",
                rows[0].meas_s / rows[2].meas_s, dir);
    }
    ls_corpus_free(corpus);
    free(p);
    return rc;
}
