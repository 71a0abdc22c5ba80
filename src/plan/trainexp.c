/* trainexp.c - the hybrid-precision training experiment shared by `llmsys demo qsync` and
 * bench/bench_qsync.c: profile this machine once, write plans by strategy, run each plan as
 * a 2-rank `llmsys train` (one rank throttled), and evaluate held-out bits/byte. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

/* The share of one core this process gets now (CPU time over wall time of a busy loop):
 * on a loaded machine an unthrottled rank already gets less than a core, so the slow rank's
 * throttle is set relative to this. */
double ls_tplan_exp_cpu_fraction(void) {
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    double t0 = ls_now();
    volatile double x = 0;
    while (ls_now() - t0 < 0.3)
        for (int i = 0; i < 100000; i++) x += i * 1e-9;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    double f = cpu / (ls_now() - t0);
    return f > 1 ? 1 : f;
}

/* Runs `bin train ...` on 2 ranks with plan, output to log; *iter_s is the mean iteration
 * time after the first step (wall / steps when the log has too few lines). */
int ls_tplan_exp_train(const char *bin, const char *config, const char *data, int batch, int seq, int steps,
                       const char *plan, const char *out, const char *report, const char *log, double *iter_s) {
    char b[16], s[16], n[16];
    snprintf(b, sizeof b, "%d", batch);
    snprintf(s, sizeof s, "%d", seq);
    snprintf(n, sizeof n, "%d", steps);
    const char *av[] = {
        bin,        "train", "--config",    config, "--data",  data, "--batch",          b,    "--seq", s,
        "--steps",  n,       "--threads",   "1",    "--ranks", "2",  "--precision-plan", plan, "--out", out,
        "--report", report,  "--log-every", "1",    NULL};
    pid_t pid = fork();
    if (pid < 0) return ls_err(LS_EIO, "fork failed");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        execv(bin, (char *const *)av);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return ls_err(LS_EIO, "`llmsys train --precision-plan %s` failed (see %s)", plan, log);
    cJSON *j;
    LS_TRY(ls_json_read_file(report, &j));
    double wall = 0;
    int rc = ls_json_get_double(j, "wall_s", 0, &wall);
    cJSON_Delete(j);
    LS_TRY(rc);
    *iter_s = wall / steps;
    /* without the first step (oneDNN builds its kernels there): from the log's running
     * tokens/s, elapsed(k) = k·batch·seq / tok_s(k) */
    FILE *f = fopen(log, "r");
    char line[512];
    long k1 = 0, kn = 0;
    double e1 = 0, en = 0;
    while (f && fgets(line, sizeof line, f)) {
        long k;
        int tot;
        if (sscanf(line, "step %ld/%d", &k, &tot) != 2) continue;
        char *t = strstr(line, "tok/s");
        if (!t) continue;
        while (t > line && t[-1] == ' ') t--;
        while (t > line && (t[-1] == '.' || (t[-1] >= '0' && t[-1] <= '9'))) t--;
        double tps = atof(t);
        if (!(tps > 0)) continue;
        double el = (double)k * batch * seq / tps;
        if (!k1) k1 = k, e1 = el;
        kn = k, en = el;
    }
    if (f) fclose(f);
    if (kn > k1) *iter_s = (en - e1) / (double)(kn - k1);
    return LS_OK;
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

/* Profiles this machine for a 2-rank cluster (rank 1 at share) and writes plan files
 * <dir>/plan-<name>.json for each strategy; p receives the qsync plan, pred_iter_s each
 * plan's predicted iteration time. names/strats/uniform/pred_iter_s have n entries. */
int ls_tplan_exp_plans(ls_tplan *p, const ls_corpus *c, const char *config, int batch, int seq, double share, int reps,
                       const char *dir, int n, const char *const *names, const ls_tplan_strategy *strats,
                    const int *uniform, double *pred_iter_s, double *profile_s) {
    memset(p, 0, sizeof *p);
    LS_TRY(ls_model_config_named(config, &p->cfg));
    p->ranks = 2, p->batch = batch, p->seq = seq, p->per_channel = 1;
    snprintf(p->cluster, sizeof p->cluster, "local:1,%.3f", share);
    double shares[2] = {0, share}, t0 = ls_now();
    LS_TRY(ls_tplan_profile_here(p, c, NULL, shares, 1, reps));
    *profile_s = ls_now() - t0;
    ls_tplan *q = malloc(sizeof *q);
    if (!q) return ls_err(LS_ENOMEM, "out of memory");
    int rc = LS_OK;
    for (int k = 0; rc == LS_OK && k < n; k++) {
        memcpy(q, p, sizeof *q);
        rc = ls_tplan_allocate(q, strats[k], uniform[k]);
        char path[8192];
        snprintf(path, sizeof path, "%s/plan-%s.json", dir, names[k]);
        if (rc == LS_OK) rc = ls_tplan_write(q, path);
        if (rc == LS_OK) pred_iter_s[k] = q->pred_iter_s;
        if (rc == LS_OK && strats[k] == LS_TPLAN_QSYNC) memcpy(p, q, sizeof *q);
    }
    free(q);
    return rc;
}
int ls_tplan_demo(const char *bin, const char *workdir, int quick, FILE *out) {
    const char *config = quick ? "tiny" : "small";
    int batch = 8, steps = quick ? 4 : 30, seq = quick ? 32 : 128, reps = quick ? 2 : 5;
    const char *paths[1] = {"/usr/share/common-licenses"};
    if (!ls_is_dir(paths[0])) paths[0] = LLMSYS_SOURCE_DIR "/docs";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/qsync", workdir);
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
    fprintf(out, "2 data-parallel ranks of the %s model on this machine; rank 1 throttled to %.2f of a core (2/3 of what "
           "an unthrottled process gets now, %.2f)\n",
           config, share, frac);
    if (rc == LS_OK) rc = ls_tplan_exp_plans(p, corpus, config, batch, seq, share, reps, dir, NP, names, st, uni, pred, &prof_s);
    if (rc == LS_OK) {
        fprintf(out, "profiled in %.1f s (per-operator costs per precision, indicator from real tensors):\n", prof_s);
        ls_tplan_print(out, p);
        fprintf(out, "\ntraining each plan %d steps (llmsys train --ranks 2 --precision-plan ...):\n", steps);
        fprintf(out, "  %-8s %-26s %12s %12s %8s %14s\n", "plan", "rank 1 fp32/bf16/fp16/int8", "predicted ms", "measured ms",
               "error", "held-out bpb");
    }
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
            fprintf(out, "  %-8s %-26s %12.1f %12.1f %+7.1f%% %14.4f\n", names[k], mix, pred[k] * 1e3, meas[k] * 1e3,
                   100 * (pred[k] - meas[k]) / meas[k], bpb[k]);
    }
    if (rc == LS_OK) {
        double budget = meas[0] * steps;
        fprintf(out, "\nequal wall time (%.1f s, what fp32 at the slow rank's pace needs for %d steps):\n", budget, steps);
        fprintf(out, "  %-8s %6s %14s\n", "plan", "steps", "held-out bpb");
        fprintf(out, "  %-8s %6d %14.4f\n", names[0], steps, bpb[0]);
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
            if (rc == LS_OK) fprintf(out, "  %-8s %6d %14.4f\n", names[k], s, b);
        }
        if (rc == LS_OK)
            fprintf(out, "throughput of the qsync plan: %.2fx fp32 at the slow rank's pace; files in %s\n", meas[0] / meas[2],
                   dir);
    }
    ls_corpus_free(corpus);
    free(p);
    return rc;
}
