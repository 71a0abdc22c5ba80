/* bench_rl.c - RL post-training designs, measured and modelled. Real, on this machine: one
 * warm-started model and one long-tailed task file, then Laminar-style (as it is, without
 * repack, and with a waiting queue), synchronous, one-step-stale and AReaL-like runs on the
 * same processes, interleaved and repeated: trajectories/s, rollout idle fraction, staleness,
 * trainer stall per update vs the time until every rollout holds a new version, each ratio
 * against the synchronous run of the same repeat, Laminar-style's against AReaL-like's, and the
 * queue's against none. Modelled: the simulator at 1024 GPUs (speedups vs sync and
 * AReaL-like) and its error predicting the real runs from their measured step costs. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmsys/core.h"
#include "llmsys/rl.h"
#include "llmsys/train.h"

enum { NCONF = 6 };
/* laminar-norepack: without dynamic repack; laminar-queue: a rollout batch of twice its decode
 * slots, a waiting queue refilling them */
static const char *const CONF[NCONF] = {"sync", "onestep", "areal", "laminar", "laminar-norepack", "laminar-queue"};
static int use[NCONF] = {1, 1, 1, 1, 1, 1}; /* --designs */

typedef struct {
    double tps, tok, idle, stall, bcast, kv, stale, repacks, moved;
} fig;

static int read_fig(const char *wd, fig *f);

/* One real run of design conf in wd (reuse: only read the report a run left there). */
static int one_run(const char *exe, const char *tasks, const char *init, const char *wd, int conf, int updates,
                   int bgroups, double step_ms, int reuse, fig *f) {
    if (reuse) return read_fig(wd, f);
    ls_rl_run_opts o = ls_rl_run_defaults();
    o.exe = exe, o.tasks = tasks, o.init = init, o.workdir = wd;
    o.rollouts = 3, o.relays = 2, o.updates = updates, o.group = 4, o.batch_groups = bgroups, o.max_seqs = 8;
    o.max_new = 96, o.step_ms = step_ms, o.eval_n = 0, o.quiet = 1, o.timeout_s = 300, o.lr = 1e-4;
    o.repack = conf != 4;
    o.rollout_batch = conf == 5 ? 2 * o.max_seqs : 0;
    LS_TRY(ls_rl_mode_parse(conf >= 4 ? "laminar" : CONF[conf], &o.mode));
    LS_TRY(ls_rl_run(&o, NULL));
    return read_fig(wd, f);
}

static int read_fig(const char *wd, fig *f) {
    char rp[1200];
    snprintf(rp, sizeof rp, "%s/report.json", wd);
    cJSON *j;
    LS_TRY(ls_json_read_file(rp, &j));
    static const char *const keys[9] = {"traj_per_s",     "tokens_per_s", "rollout_idle_frac",
                                        "trainer_stall_mean_s", "all_rollouts_updated_mean_s", "kv_util",
                                        "staleness_mean", "repacks", "moved_trajectories"};
    double *dst[9] = {&f->tps, &f->tok, &f->idle, &f->stall, &f->bcast, &f->kv, &f->stale, &f->repacks, &f->moved};
    for (int i = 0; i < 9; i++) ls_json_get_double(j, keys[i], 0, dst[i]);
    cJSON_Delete(j);
    return LS_OK;
}

static void add_nums(cJSON *j, const char *const *keys, const double *v, int n) {
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(j, keys[i], v[i]);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stats(double *v, int n, double *mn, double *md, double *mx) {
    double c[64];
    memcpy(c, v, sizeof(double) * (size_t)n);
    *md = ls_median(c, n);
    *mn = c[0], *mx = c[n - 1];
}

int main(int argc, char **argv) {
    ls_runtime_reexec(argv, LS_REEXEC_ALL);
    ls_model_set_threads(1);
    int quick = 0, reps = 5, updates = 48, keep = 0, bgroups = 3, noscale = 0;
    const char *out = NULL, *reuse = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else if (!strcmp(argv[i], "--no-scale"))
            noscale = 1;
        else if (!strcmp(argv[i], "--reuse") && i + 1 < argc)
            reuse = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--updates") && i + 1 < argc)
            updates = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch-groups") && i + 1 < argc)
            bgroups = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--designs") && i + 1 < argc) {
            const char *l = argv[++i];
            for (int c = 0; c < NCONF; c++) {
                const char *p = strstr(l, CONF[c]);
                size_t k = strlen(CONF[c]);
                use[c] = p && (p == l || p[-1] == ',') && (p[k] == 0 || p[k] == ',');
            }
        }
        else {
            fprintf(stderr, "usage: bench_rl [--quick] [--reps N] [--updates N] [--designs a,b] [--batch-groups N] [--keep] [--no-scale] [--reuse DIR] [--out PATH]\n");
            return 2;
        }
    }
    if (quick) reps = 1, updates = 4;
    if (reps < 1 || reps > 60) reps = 5;
    char self[4096], exe[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    snprintf(exe, sizeof exe, "%s/llmsys", dirname(self));
    if (access(exe, X_OK) != 0) {
        fprintf(stderr, "bench_rl: %s not found (build the llmsys target)\n", exe);
        return 1;
    }
    double load = 0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = 0;
        fclose(lf);
    }
    char wd[4096] = "/tmp/bench_rl_XXXXXX";
    if (reuse) /* the runs a --keep run left: tables and models again, no new runs */
        snprintf(wd, sizeof wd, "%s", reuse), keep = 1;
    else if (!mkdtemp(wd))
        return 1;
    char tasks[4200], init[4200];
    snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", wd);
    snprintf(init, sizeof init, "%s/init.safetensors", wd);
    /* a long-tailed workload: copy with log-normal input lengths, CV 1.5 */
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    g.kind = LS_RL_COPY, g.n = 1000, g.mean_len = 8, g.cv = 1.5, g.max_len = 56;
    ls_rl_task *t;
    int nt;
    if (ls_rl_tasks_generate(&g, &t, &nt) || ls_rl_tasks_write(tasks, t, nt)) {
        fprintf(stderr, "bench_rl: %s\n", ls_errmsg());
        return 1;
    }
    int *trace = malloc(sizeof(int) * (size_t)nt);
    double lsum = 0, q[5], *sorted = malloc(sizeof(double) * (size_t)nt);
    for (int i = 0; i < nt; i++) trace[i] = (int)strlen(t[i].answer) + 1, lsum += trace[i], sorted[i] = trace[i];
    qsort(sorted, (size_t)nt, sizeof(double), cmp_dbl);
    const double qs[5] = {0.5, 0.9, 0.99, 1.0, 0.0};
    for (int i = 0; i < 4; i++) q[i] = sorted[(int)fmin(nt - 1, floor(qs[i] * nt))];
    free(sorted);
    ls_model_config mc = ls_rl_model_config();
    ls_model *m;
    double t0 = ls_now();
    int sft = quick ? 150 : 400;
    if (!reuse && (ls_model_init(&m, &mc, 1) || ls_rl_sft(m, t, nt, sft, 16, 3e-3f, 1, NULL) ||
                   ls_ckpt_save(init, m, sft, NULL, LS_CKPT_WEIGHTS))) {
        fprintf(stderr, "bench_rl: %s\n", ls_errmsg());
        return 1;
    }
    if (!reuse) ls_model_free(m);
    ls_rl_tasks_free(t, nt);
    double step_ms = 20;
    printf("workload: response tokens (answer + EOS) median %.0f, p90 %.0f, p99 %.0f, max %.0f, mean %.1f "
           "(p99 / median %.1f; a batch of 8 lasts as long as its longest)\n",
           q[0], q[1], q[2], q[3], lsum / nt, q[2] / q[0]);
    printf("bench_rl: 3 rollouts + 2 relays + manager + trainer processes, model \"rl\" (%zu params, scalar/OpenBLAS "
           "engine, 1 thread each), copy tasks mean response %.1f tokens (CV 1.5), %d SFT steps (%.1f s), decode-step "
           "floor %.0f ms, %d updates x %d trajectories, interleaved, %d repeat(s), %d cores, load average %.2f at start\n\n",
           ls_model_config_num_params(&mc), lsum / nt, sft, ls_now() - t0, step_ms, updates, 4 * bgroups, reps, ls_num_cores(),
           load);
    fflush(stdout);
    fig f[NCONF][64];
    int rc = 0;
    double rtt[64] = {0};
    for (int r = 0; r < reps && !rc; r++) {
        if (ls_rl_measure_rtt(200, &rtt[r])) rtt[r] = 0; /* micro-measurement, apart from the runs */
        for (int c0 = 0; c0 < NCONF && !rc; c0++) {
            int c = (c0 + r) % NCONF; /* interleaved, rotating order */
            if (!use[c]) continue;
            char w[4400];
            snprintf(w, sizeof w, "%s/%s-%d", wd, CONF[c], r);
            if (one_run(exe, tasks, init, w, c, updates, bgroups, step_ms, reuse != NULL, &f[c][r])) {
                fprintf(stderr, "bench_rl: %s: %s\n", CONF[c], ls_errmsg());
                rc = 1;
            }
        }
    }
    if (rc) return 1;
    cJSON *root = cJSON_CreateObject(), *real = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "bench", "rl");
    cJSON_AddNumberToObject(root, "load_average_at_start", load);
    cJSON_AddNumberToObject(root, "reps", reps);
    cJSON_AddNumberToObject(root, "step_ms", step_ms);
    cJSON_AddItemToObject(root, "real", real);
    printf("MEASURED (min / median / max over repeats; ratio = this design's traj/s over sync's in the same repeat)\n");
    printf("%-17s %22s %20s %18s %10s %8s %6s %14s %14s\n", "design", "traj/s", "ratio vs sync", "rollout idle %",
           "tok/s", "KV %", "stale", "stall s/update", "all-updated s");
    double med_tps[NCONF] = {0};
    (void)med_tps;
    for (int c = 0; c < NCONF; c++) {
        if (!use[c]) continue;
        double v[64], ra[64], id[64], tk[64], kv[64], st[64], bc[64], sl[64], mn, md, mx, rmn, rmd, rmx, imn, imd, imx,
            x, y;
        for (int r = 0; r < reps; r++) {
            v[r] = f[c][r].tps, ra[r] = f[0][r].tps > 0 ? f[c][r].tps / f[0][r].tps : 0, id[r] = 100 * f[c][r].idle;
            tk[r] = f[c][r].tok, kv[r] = 100 * f[c][r].kv, st[r] = f[c][r].stall, bc[r] = f[c][r].bcast;
            sl[r] = f[c][r].stale;
        }
        stats(v, reps, &mn, &md, &mx);
        med_tps[c] = md;
        stats(ra, reps, &rmn, &rmd, &rmx);
        stats(id, reps, &imn, &imd, &imx);
        double tkm, kvm, stm, bcm, slm;
        stats(sl, reps, &x, &slm, &y);
        stats(tk, reps, &x, &tkm, &y);
        stats(kv, reps, &x, &kvm, &y);
        stats(st, reps, &x, &stm, &y);
        stats(bc, reps, &x, &bcm, &y);
        double rps[64], mvs[64], rpm, mvm;
        for (int r = 0; r < reps; r++) rps[r] = f[c][r].repacks, mvs[r] = f[c][r].moved;
        stats(rps, reps, &x, &rpm, &y);
        stats(mvs, reps, &x, &mvm, &y);
        printf("%-17s %6.2f/%6.2f/%6.2f %5.2f/%5.2f/%5.2fx %5.1f/%5.1f/%5.1f %10.0f %8.1f %6.2f %14.4f %14.3f  repacks "
               "%.0f "
               "moved %.0f\n",
               CONF[c], mn, md, mx, rmn, rmd, rmx, imn, imd, imx, tkm, kvm, slm, stm, bcm, rpm, mvm);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "design", CONF[c]);
        static const char *const kk[12] = {
            "traj_per_s_min",       "traj_per_s_median",      "traj_per_s_max",
            "ratio_vs_sync_median", "idle_frac_median",       "tokens_per_s_median",
            "kv_util_median",       "trainer_stall_s_median", "all_rollouts_updated_s_median",
            "repacks_median",       "moved_median",           "staleness_mean_median"};
        double kv_[12] = {mn, md, mx, rmd, imd / 100, tkm, kvm / 100, stm, bcm, rpm, mvm, slm};
        add_nums(j, kk, kv_, 12);
        cJSON_AddItemToArray(real, j);
    }
    double rg[64], rt[64], gmn = 0, gmd = 0, gmx = 0, tmn, tmd = 0, tmx;
    for (int c = 3; c == 3 && use[3] && use[4]; c++) {
        for (int r = 0; r < reps; r++) {
            rg[r] = f[4][r].tok > 0 ? f[c][r].tok / f[4][r].tok : 0;
            rt[r] = f[4][r].tps > 0 ? f[c][r].tps / f[4][r].tps : 0;
        }
        stats(rg, reps, &gmn, &gmd, &gmx);
        stats(rt, reps, &tmn, &tmd, &tmx);
        printf("\nrepack gain (%s / laminar-norepack, same repeat, min/median/max): generation tokens/s "
               "%.2f/%.2f/%.2fx, trajectories/s %.2f/%.2f/%.2fx (Laminar reports 1.26x generation throughput)\n",
               CONF[c], gmn, gmd, gmx, tmn, tmd, tmx);
    }
    cJSON_AddNumberToObject(root, "repack_gain_min", gmn);
    cJSON_AddNumberToObject(root, "repack_gain_median", gmd);
    cJSON_AddNumberToObject(root, "repack_gain_max", gmx);
    cJSON_AddNumberToObject(root, "repack_traj_gain_median", tmd);
    /* trajectories/s over another design's in the same repeat: Laminar-style over AReaL-like (the
     * fastest of the others here), Laminar-style with the waiting queue over without */
    static const int num[2] = {3, 5}, den[2] = {2, 3};
    static const char *const vs_key[2] = {"laminar_over_areal", "queue_gain"};
    for (int q = 0; q < 2; q++) {
        if (!use[num[q]] || !use[den[q]]) continue;
        double rr[64], a, b, c;
        for (int r = 0; r < reps; r++) rr[r] = f[den[q]][r].tps > 0 ? f[num[q]][r].tps / f[den[q]][r].tps : 0;
        stats(rr, reps, &a, &b, &c);
        printf("%s%s / %s, trajectories/s, same repeat (min/median/max): %.2f/%.2f/%.2fx\n", q ? "" : "\n",
               CONF[num[q]], CONF[den[q]], a, b, c);
        char key[64];
        snprintf(key, sizeof key, "%s_min", vs_key[q]);
        cJSON_AddNumberToObject(root, key, a);
        snprintf(key, sizeof key, "%s_median", vs_key[q]);
        cJSON_AddNumberToObject(root, key, b);
        snprintf(key, sizeof key, "%s_max", vs_key[q]);
        cJSON_AddNumberToObject(root, key, c);
    }
    /* the simulator on the real runs: each run's measured decode step, pull and train time and the
     * response lengths it consumed, plus a manager round trip measured apart (between repeats) */
    double rttm, x0, x1;
    stats(rtt, reps, &x0, &rttm, &x1);
    printf("\nMODELLED: simulator predicting every real run from what it measured (mean decode step, manager round\n"
           "trip, weight pull, train time, trainer hand-over), the response lengths it issued, and the runtime's\n"
           "poll periods (a round trip micro-measured apart, %.2f ms median of %d, only where a report has none)\n",
           1e3 * rttm, reps);
    cJSON *cal = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "sim_vs_real", cal);
    cJSON_AddNumberToObject(root, "rtt_s_median", rttm);
    double worst = 0;
    for (int c = 0; c < NCONF; c++) {
        if (!use[c]) continue;
        double pr[64], ms[64], er[64], pmd, mmd, emn, emd, emx;
        int k = 0;
        for (int r = 0; r < reps; r++) {
            char rp[4400];
            snprintf(rp, sizeof rp, "%s/%s-%d/report.json", wd, CONF[c], r);
            ls_rl_sim_opts o;
            int *lens, nl;
            double meas;
            ls_rl_sim_result sr;
            if (ls_rl_sim_opts_from_report(rp, trace, nt, rttm, &o, &lens, &nl, &meas)) continue;
            int bad = ls_rl_simulate(&o, &sr);
            free(lens);
            if (bad || meas <= 0) continue;
            pr[k] = sr.traj_per_s, ms[k] = meas, er[k] = (sr.traj_per_s - meas) / meas, k++;
        }
        if (!k) continue;
        stats(pr, k, &x0, &pmd, &x1);
        stats(ms, k, &x0, &mmd, &x1);
        stats(er, k, &emn, &emd, &emx);
        double e = (pmd - mmd) / mmd; /* medians of the repeats */
        worst = fmax(worst, fabs(e));
        printf("  %-17s measured %6.2f  simulated %6.2f traj/s (medians)  error %+6.1f%%  (per run %+.0f/%+.0f/%+.0f%%)\n",
               CONF[c], mmd, pmd, 100 * e, 100 * emn, 100 * emd, 100 * emx);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "design", CONF[c]);
        static const char *const kk[5] = {"measured_median", "simulated_median", "error", "error_per_run_min",
                                          "error_per_run_max"};
        double v5[5] = {mmd, pmd, e, emn, emx};
        add_nums(x, kk, v5, 5);
        cJSON_AddItemToArray(cal, x);
    }
    printf("  largest |error| %.1f%% (goal <= 15%%)\n", 100 * worst);
    cJSON_AddNumberToObject(root, "sim_max_abs_error", worst);
    /* what repack can gain on these runs' workload and costs: each no-repack run replayed without
     * repack, with it, and with repack free to mix weight versions (an upper bound Laminar forbids) */
    double gs[2][64];
    int kg = 0;
    for (int r = 0; r < reps && use[4]; r++) {
        char rp[4400];
        snprintf(rp, sizeof rp, "%s/%s-%d/report.json", wd, CONF[4], r);
        ls_rl_sim_opts o;
        int *lens, nl, bad = 0;
        double meas, v[3];
        if (ls_rl_sim_opts_from_report(rp, trace, nt, rttm, &o, &lens, &nl, &meas)) continue;
        for (int k = 0; k < 3 && !bad; k++) {
            ls_rl_sim_result sr;
            o.repack = k > 0, o.repack_any_version = k == 2;
            bad = ls_rl_simulate(&o, &sr);
            v[k] = sr.traj_per_s;
        }
        free(lens);
        if (!bad && v[0] > 0) gs[0][kg] = v[1] / v[0], gs[1][kg] = v[2] / v[0], kg++;
    }
    if (kg) {
        double a0, a1, a2, b0, b1, b2;
        stats(gs[0], kg, &a0, &a1, &a2);
        stats(gs[1], kg, &b0, &b1, &b2);
        printf("  repack on the no-repack runs (MODELLED, traj/s over none, min/median/max): same version %.2f/%.2f/%.2fx, "
               "across versions %.2f/%.2f/%.2fx\n", a0, a1, a2, b0, b1, b2);
        cJSON_AddNumberToObject(root, "sim_repack_gain_median", a1);
        cJSON_AddNumberToObject(root, "sim_repack_gain_any_version_median", b1);
    }
    /* cluster scale: the disaggregated designs with 25 % of the GPUs training, then with the split
     * that suits each design best (searched to 2 points); the synchronous baseline is colocated */
    printf("\nMODELLED at 1024 H800 GPUs (catalog costs), log-normal responses mean 2000 tokens CV 1.3 (cap 16384), "
           "batch 8192\n");
    printf("%-12s %-10s %10s %10s %10s %10s %9s %9s\n", "model", "train GPUs", "sync", "onestep", "areal", "laminar",
           "vs sync", "vs areal");
    cJSON *cl = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "sim_1024", cl);
    const char *models[3] = {"qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b"};
    for (int k = 0; k < (quick ? 1 : 3) && !noscale; k++)
        for (int split = 0; split < 2; split++) {
            double tp[4];
            int pct[4];
            for (int c = 0; c < 4; c++) {
                ls_rl_sim_opts o = ls_rl_sim_defaults();
                o.model = models[k];
                o.mode = c == 0   ? LS_RL_MODE_SYNC
                         : c == 1 ? LS_RL_MODE_ONESTEP
                         : c == 2 ? LS_RL_MODE_AREAL
                                  : LS_RL_MODE_LAMINAR;
                o.updates = quick ? 3 : 8;
                o.train_frac_pct = split ? 0 : 25;
                ls_rl_sim_result s;
                if (ls_rl_simulate(&o, &s)) {
                    fprintf(stderr, "bench_rl: %s\n", ls_errmsg());
                    return 1;
                }
                tp[c] = s.traj_per_s, pct[c] = s.train_pct;
            }
            char sp[32];
            snprintf(sp, sizeof sp, split ? "best %d/%d/%d" : "25%%", pct[1], pct[2], pct[3]);
            printf("%-12s %-10s %10.2f %10.2f %10.2f %10.2f %8.2fx %8.2fx\n", models[k], sp, tp[0], tp[1], tp[2],
                   tp[3], tp[3] / tp[0], tp[3] / tp[2]);
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "model", models[k]);
            cJSON_AddStringToObject(x, "train_split", split ? "best" : "25%");
            double v[8] = {tp[0], tp[1], tp[2], tp[3], tp[3] / tp[0], tp[3] / tp[2], pct[2], pct[3]};
            const char *kk[8] = {"sync", "onestep", "areal", "laminar", "speedup_vs_sync", "speedup_vs_areal",
                                 "areal_train_pct", "laminar_train_pct"};
            add_nums(x, kk, v, 8);
            cJSON_AddItemToArray(cl, x);
        }
    printf("(goal: >= 5x vs sync; Laminar reports up to 5.48x vs verl and 1.39x vs AReaL on average)\n");
    if (out && ls_json_write_file(out, root)) fprintf(stderr, "bench_rl: %s\n", ls_errmsg());
    cJSON_Delete(root);
    free(trace);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", wd);
    if (keep)
        printf("run directories kept in %s\n", wd);
    else if (system(cmd) != 0)
        fprintf(stderr, "bench_rl: could not remove %s\n", wd);
    return 0;
}
