/* app.c - what `llmsys rl`, `llmsys sim rl` and `llmsys demo rl` do beyond parsing options:
 * task files with a summary, the supervised warm start, the run report's summary, the
 * simulator's tables and its comparison with real runs, and the demo scenario. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "llmsys/rl.h"
#include "llmsys/train.h"
#include "rl/internal.h"

int ls_rl_tasks_make(const ls_rl_gen_opts *g, const char *path, double *mean_len, double *max_len) {
    ls_rl_task *t;
    int n;
    LS_TRY(ls_rl_tasks_generate(g, &t, &n));
    int rc = ls_rl_tasks_write(path, t, n);
    double sum = 0, mx = 0;
    for (int i = 0; i < n; i++) sum += (double)strlen(t[i].answer), mx = fmax(mx, (double)strlen(t[i].answer));
    if (mean_len) *mean_len = n ? sum / n : 0;
    if (max_len) *max_len = mx;
    ls_rl_tasks_free(t, n);
    return rc;
}

int ls_rl_warm_start(const ls_rl_task *t, int n, int hold_out, const char *workdir, int sft_steps, int sft_batch,
                     double sft_lr, uint64_t seed, char *out, size_t cap, int quiet) {
    ls_model_config c = ls_rl_model_config();
    ls_model *m;
    LS_TRY(ls_model_init(&m, &c, seed));
    int rc = LS_OK, ntrain = n - ls_rl_held_tail(n, hold_out); /* keep the held-out tail unseen */
    float loss = NAN;
    double t0 = ls_now();
    if (sft_steps > 0) rc = ls_rl_sft(m, t, ntrain, sft_steps, sft_batch, (float)sft_lr, seed, &loss);
    if (rc == LS_OK) rc = ls_mkdirs(workdir);
    snprintf(out, cap, "%s/init.safetensors", workdir);
    if (rc == LS_OK) rc = ls_ckpt_save(out, m, sft_steps, NULL, LS_CKPT_WEIGHTS);
    if (rc == LS_OK && !quiet) {
        printf("warm start: %d SFT steps of batch %d in %.1f s, final loss %.3f -> %s\n", sft_steps, sft_batch,
               ls_now() - t0, loss, out);
        fflush(stdout);
    }
    ls_model_free(m);
    return rc;
}

int ls_rl_report_print(const char *path) {
    cJSON *j;
    LS_TRY(ls_json_read_file(path, &j));
    double v[12];
    const char *k[12] = {"traj_per_s",     "tokens_per_s",      "rollout_idle_frac",    "kv_util",
                         "staleness_mean", "staleness_max",     "trainer_stall_mean_s", "trainer_wait_mean_s",
                         "repacks",        "trajectories_lost", "rollout_failures",     "relay_failures"};
    for (int i = 0; i < 12; i++) ls_json_get_double(j, k[i], 0, &v[i]);
    const char *mode = "?";
    ls_json_get_string(j, "mode", "?", &mode);
    printf("%s: %.2f traj/s, %.0f tok/s, rollout idle %.1f%%, KV util %.1f%%, staleness mean %.2f max %.0f\n", mode,
           v[0], v[1], 100 * v[2], 100 * v[3], v[4], v[5]);
    printf("  trainer stall %.4f s/update, wait %.3f s/update; repacks %.0f; failures: rollout %.0f relay %.0f; lost "
           "%.0f\n",
           v[6], v[7], v[8], v[10], v[11], v[9]);
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "trainer");
    static const char *const KEYS[2][4] = {
        {"heldout_reward_before", "heldout_reward_after", "heldout_exact_before", "heldout_exact_after"},
        {"heldout_sampled_reward_before", "heldout_sampled_reward_after", "heldout_sampled_exact_before",
         "heldout_sampled_exact_after"}};
    static const char *const WHAT[2] = {"greedy", "sampled at T=1 (4 per prompt)"};
    for (int s = 0; tr && s < 2; s++) {
        double x[4];
        for (int i = 0; i < 4; i++) ls_json_get_double(tr, KEYS[s][i], 0, &x[i]);
        printf("  held-out reward, %s: %.3f -> %.3f (exact %.1f%% -> %.1f%%)\n", WHAT[s], x[0], x[1], 100 * x[2],
               100 * x[3]);
    }
    cJSON_Delete(j);
    return LS_OK;
}

/* ---------------------------------------------------------------- micro-measurement */

/* The echoing side: a ROUTER answering n sealed messages like the manager answers polls. */
static int rtt_server(const char *ep, int n) {
    void *z = zmq_ctx_new(), *s = z ? rl_socket(z, ZMQ_ROUTER) : NULL;
    int rc = s && zmq_bind(s, ep) == 0 ? LS_OK : LS_ENET;
    for (int i = 0; rc == LS_OK && i < n; i++) {
        uint8_t id[64];
        size_t idn, len;
        void *msg;
        rl_rd r;
        rc = rl_recv_routed(s, 5000, id, &idn, &msg, &len);
        if (rc == LS_OK && rl_msg_open(msg, len, "rtt", &r) == LS_OK) {
            rl_buf b = {0};
            rl_msg_begin(&b, M_POLL_REPLY);
            rl_put(&b, r.p + r.off, r.n - r.off);
            if (rl_msg_end(&b) == LS_OK) rc = rl_send_routed(s, id, idn, b.p, b.n);
            rl_buf_free(&b);
        }
        free(msg);
    }
    if (s) zmq_close(s);
    if (z) zmq_ctx_term(z);
    return rc;
}

int ls_rl_measure_rtt(int n, double *mean_s) {
    char ep[128];
    snprintf(ep, sizeof ep, "ipc:///tmp/llmsys-rl-rtt-%d", (int)getpid());
    pid_t pid = fork();
    if (pid < 0) return ls_err(LS_EIO, "rtt: fork failed");
    if (pid == 0) _exit(rtt_server(ep, n + 1) == LS_OK ? 0 : 1);
    void *z = zmq_ctx_new(), *s = z ? rl_socket(z, ZMQ_DEALER) : NULL;
    int rc = s && zmq_connect(s, ep) == 0 ? LS_OK : ls_err(LS_ENET, "rtt: cannot connect");
    double sum = 0;
    int32_t payload[64] = {0}; /* about one poll of a 16-slot rollout */
    for (int i = 0; rc == LS_OK && i <= n; i++) { /* the first one waits for the connection: not counted */
        rl_buf b = {0};
        rl_msg_begin(&b, M_POLL);
        rl_put(&b, payload, sizeof payload);
        void *rep;
        size_t len;
        rl_rd r;
        double t0 = ls_now();
        rc = rl_call(s, &b, 5000, &rep, &len, &r, "rtt");
        if (i > 0) sum += ls_now() - t0;
        rl_buf_free(&b);
        free(rep);
    }
    if (s) zmq_close(s);
    if (z) zmq_ctx_term(z);
    if (rc) kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(ep + 6);
    *mean_s = rc == LS_OK && n > 0 ? sum / n : 0;
    return rc;
}

/* ---------------------------------------------------------------- sim rl */

static void add_nums(cJSON *j, const char *const *keys, const double *v, int n) {
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(j, keys[i], v[i]);
}

static int sim_rows(ls_rl_sim_opts *o, const int *gpus, int ng, cJSON *arr) {
    static const int order[4] = {LS_RL_MODE_SYNC, LS_RL_MODE_ONESTEP, LS_RL_MODE_AREAL, LS_RL_MODE_LAMINAR};
    static const char *const keys[12] = {"gpus",           "tp",           "replicas",      "traj_per_s",
                                         "tokens_per_s",   "idle_frac",    "staleness_mean", "staleness_max",
                                         "trainer_stall_s", "speedup_vs_sync", "speedup_vs_areal", "train_pct"};
    printf("%-12s %6s %-8s %4s %6s %10s %11s %7s %7s %8s %8s\n", "model", "gpus", "design", "tp", "train%", "traj/s",
           "tok/s", "idle%", "stale", "vs sync", "vs areal");
    for (int gi = 0; gi < ng; gi++) {
        double tps[4] = {0};
        for (int k = 0; k < 4; k++) {
            o->gpus = gpus[gi];
            o->mode = order[k];
            ls_rl_sim_result r;
            LS_TRY(ls_rl_simulate(o, &r));
            tps[k] = r.traj_per_s;
            double va = k == 3 && tps[2] > 0 ? r.traj_per_s / tps[2] : 0;
            char vs[16] = "";
            if (va > 0) snprintf(vs, sizeof vs, "%.2f", va);
            printf("%-12s %6d %-8s %4d %6d %10.2f %11.0f %7.1f %7.2f %8.2f %8s\n", o->model, o->gpus,
                   ls_rl_mode_name(order[k]), r.tp, r.train_pct, r.traj_per_s, r.tokens_per_s, 100 * r.idle_frac,
                   r.mean_staleness, r.traj_per_s / tps[0], vs);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "model", o->model);
            cJSON_AddStringToObject(j, "design", ls_rl_mode_name(order[k]));
            double v[12] = {o->gpus,           r.tp,     r.replicas, r.traj_per_s,
                            r.tokens_per_s,    r.idle_frac, r.mean_staleness, r.max_staleness,
                            r.stall_s,         tps[0] > 0 ? r.traj_per_s / tps[0] : 0, va, r.train_pct};
            add_nums(j, keys, v, 12);
            cJSON_AddItemToArray(arr, j);
        }
    }
    return LS_OK;
}

int ls_rl_trace_read(const char *path, int **trace, int *n) {
    ls_rl_task *t;
    LS_TRY(ls_rl_tasks_read(path, &t, n));
    *trace = malloc(sizeof(int) * (size_t)*n);
    if (*trace)
        for (int i = 0; i < *n; i++) (*trace)[i] = (int)strlen(t[i].answer) + 1;
    ls_rl_tasks_free(t, *n);
    return *trace ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
}

static int write_sim_json(const char *out, cJSON *rows, cJSON *cal, double worst) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "rows", rows ? rows : cJSON_CreateArray());
    cJSON_AddItemToObject(root, "calibration", cal ? cal : cJSON_CreateArray());
    if (cal) cJSON_AddNumberToObject(root, "max_abs_error", worst);
    int rc = out ? ls_json_write_file(out, root) : LS_OK;
    cJSON_Delete(root);
    return rc;
}

int ls_rl_sim_table(const ls_rl_sim_opts *o0, const char *models, const char *gpus, const char *trace,
                    const char *out) {
    ls_rl_sim_opts o = *o0;
    int *tr = NULL, ntr = 0, rc = LS_OK, gl[16], ng;
    LS_TRY(ls_rl_sim_check(&o, models, gpus, trace != NULL)); /* options and names before any work */
    if (out) LS_TRY(ls_out_path_check("out", out));           /* before the table, not after it */
    if ((ng = ls_rl_sim_gpus_parse(gpus, gl)) < 0) return ng;
    if (trace) LS_TRY(ls_rl_trace_read(trace, &tr, &ntr));
    o.trace = tr, o.n_trace = ntr;
    char buf[512];
    printf("modelled from data/gpus.json and data/models.json (%s, CV %.2f, mean %.0f tokens, batch %d)\n", o.gpu, o.cv,
           o.mean_len, o.batch);
    cJSON *rows = cJSON_CreateArray();
    snprintf(buf, sizeof buf, "%s", models);
    char *save = NULL;
    for (char *m = strtok_r(buf, ",", &save); rc == LS_OK && m; m = strtok_r(NULL, ",", &save)) {
        o.model = m;
        rc = sim_rows(&o, gl, ng, rows);
    }
    free(tr);
    if (rc) {
        cJSON_Delete(rows);
        return rc;
    }
    return write_sim_json(out, rows, NULL, 0);
}

/* The simulator's inputs for a real run: its design and sizes, its measured per-operation costs
 * (mean decode step, manager round trip, weight pull, train time, trainer stall), its workload (the
 * response lengths it consumed, else trace) and the runtime's poll periods; refill_s, a round trip
 * measured apart, stands in when the report has no round trip. */
int ls_rl_sim_opts_from_report(const char *report, const int *trace, int nt, double refill_s, ls_rl_sim_opts *o,
                               int **lens, int *nl, double *measured) {
    cJSON *j;
    LS_TRY(ls_json_read_file(report, &j));
    const char *mode = "laminar";
    static const char *const keys[15] = {"step_ms",
                                         "train_mean_s",
                                         "rollouts",
                                         "group",
                                         "batch_groups",
                                         "traj_per_s",
                                         "updates",
                                         "max_seqs",
                                         "decode_step_mean_s",
                                         "pull_mean_s",
                                         "repack_enabled",
                                         "staleness_bound",
                                         "poll_rtt_mean_s",
                                         "trainer_stall_mean_s",
                                         "rollout_batch"};
    /* rollout_batch: absent in reports of runs without a waiting queue (0: the decode slots) */
    static const double defs[15] = {0, 0, 0, 4, 4, 0, 0, 8, 0, 0, 1, 2, 0, 0, 0};
    double v[15];
    for (int i = 0; i < 15; i++) ls_json_get_double(j, keys[i], defs[i], &v[i]);
    ls_json_get_string(j, "mode", "laminar", &mode);
    *o = ls_rl_sim_defaults();
    int rc = ls_rl_mode_parse(mode, &o->mode);
    if (rc == LS_OK && (v[0] <= 0 || v[2] < 1 || v[6] < 1))
        rc = ls_err(LS_EINVAL, "%s: a report of a run with --step-ms > 0 is needed for calibration", report);
    /* the run's workload in issue order (unfinished trajectories as far as they got), else what it consumed */
    const cJSON *rl = cJSON_GetObjectItemCaseSensitive(j, "issued_response_lengths");
    if (!cJSON_IsArray(rl) || cJSON_GetArraySize(rl) == 0) rl = cJSON_GetObjectItemCaseSensitive(j, "response_lengths");
    int n = cJSON_IsArray(rl) ? cJSON_GetArraySize(rl) : 0;
    *lens = NULL, *nl = 0;
    if (rc == LS_OK && n > 0) {
        *lens = malloc(sizeof(int) * (size_t)n);
        if (!*lens) rc = ls_err(LS_ENOMEM, "out of memory");
        for (int i = 0; rc == LS_OK && i < n; i++) {
            int x = (int)cJSON_GetArrayItem(rl, i)->valuedouble;
            (*lens)[(*nl)++] = x > 0 ? x : 1;
        }
    } else if (rc == LS_OK && !trace) {
        rc = ls_err(LS_EINVAL, "%s: no response lengths in the report; give --trace (the run's task file)", report);
    }
    if (rc == LS_OK) {
        o->gpus = (int)v[2] + 1;
        /* the manager round trip as the run measured it (its polls), else as measured apart */
        double rtt = v[12] > 0 ? v[12] : refill_s;
        /* the measured mean decode step, plus the manager round trip a rollout pays after every step */
        o->step_s = (v[8] > 0 ? v[8] : v[0] / 1000.0) + rtt;
        o->train_s = v[1], o->pull_s = v[9], o->repack = v[10] != 0, o->staleness = (int)v[11];
        o->batch = (int)(v[3] * v[4]), o->updates = (int)v[6], o->max_batch = (int)v[7];
        o->group = (int)v[3];
        o->rollout_batch = (int)v[14];
        o->prompt_len = 8;
        o->trace = *nl ? *lens : trace, o->n_trace = *nl ? *nl : nt;
        o->trace_replay = *nl > 0; /* the run's own responses, in the order they were issued */
        o->repack_s = o->step_s; /* the manager repacks on each poll: once a decode step */
        o->refill_s = rtt, o->batch_refill = 1;
        /* what the runtime adds: an idle rollout or a waiting trainer asks again after a fixed sleep
         * and a round trip; an update also pays handing the version to the master relay (measured)
         * and the round trip that brings the batch */
        o->idle_poll_s = RL_IDLE_POLL_MS * 1e-3 + rtt;
        o->trainer_poll_s = RL_TRAINER_POLL_MS * 1e-3 + rtt;
        o->trainer_extra_s = v[13] + rtt;
        *measured = v[5];
    }
    cJSON_Delete(j);
    return rc;
}

/* Predicts a real run; returns the relative error of traj/s. */
static int sim_compare(const char *report, const int *trace, int nt, double refill_s, cJSON *out, double *err) {
    ls_rl_sim_opts o;
    int *lens, nl;
    double tps = 0;
    ls_rl_sim_result r;
    LS_TRY(ls_rl_sim_opts_from_report(report, trace, nt, refill_s, &o, &lens, &nl, &tps));
    int rc = ls_rl_simulate(&o, &r);
    free(lens);
    LS_TRY(rc);
    *err = tps > 0 ? (r.traj_per_s - tps) / tps : 0;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "mode", ls_rl_mode_name(o.mode));
    cJSON_AddNumberToObject(c, "measured_traj_per_s", tps);
    cJSON_AddNumberToObject(c, "predicted_traj_per_s", r.traj_per_s);
    cJSON_AddNumberToObject(c, "relative_error", *err);
    cJSON_AddItemToArray(out, c);
    printf("%-8s measured %.2f traj/s, simulated %.2f traj/s, error %+.1f%%\n", ls_rl_mode_name(o.mode), tps,
           r.traj_per_s, 100 * *err);
    return LS_OK;
}

int ls_rl_sim_calibrate(const char *const *reports, int n, const char *trace, const char *out, double *worst) {
    int *tr = NULL, nt = 0;
    if (trace) LS_TRY(ls_rl_trace_read(trace, &tr, &nt));
    double rtt = 0;
    int rc = ls_rl_measure_rtt(200, &rtt);
    if (rc == LS_OK)
        printf("manager round trip measured apart from the runs: %.2f ms (the pause before each new batch)\n",
               1e3 * rtt);
    cJSON *cal = cJSON_CreateArray();
    double w = 0;
    for (int i = 0; rc == LS_OK && i < n; i++) {
        double e = 0;
        rc = sim_compare(reports[i], tr, nt, rtt, cal, &e);
        w = fmax(w, fabs(e));
    }
    free(tr);
    if (rc) {
        cJSON_Delete(cal);
        return rc;
    }
    printf("largest simulator error on the real runs: %.1f%%\n", 100 * w);
    if (worst) *worst = w;
    return write_sim_json(out, NULL, cal, w);
}

/* ---------------------------------------------------------------- demo */

int ls_rl_demo(const char *workdir, int quick, const char *exe) {
    char wd[1100], tasks[1200], ho[1200], w[2][1200], rep[2][2500], init[1200];
    snprintf(wd, sizeof wd, "%s/rl", workdir);
    LS_TRY(ls_mkdirs(wd));
    snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", wd);
    snprintf(ho, sizeof ho, "%s/heldout.jsonl", wd);
    /* half the demonstrations drop the answer's last byte: the warm start imitates them,
     * the reward checks the answer, and RL corrects what the demonstrations got wrong */
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    g.kind = LS_RL_COPY, g.n = quick ? 256 : 2000, g.mean_len = 6, g.cv = 1, g.max_len = 40, g.demo_noise = 0.5;
    double mean, mx;
    LS_TRY(ls_rl_tasks_make(&g, tasks, &mean, &mx));
    printf("wrote %d copy tasks to %s: answer length mean %.1f, max %.0f bytes\n", g.n, tasks, mean, mx);
    g.n = 64, g.seed = 99, g.demo_noise = 0;
    LS_TRY(ls_rl_tasks_make(&g, ho, &mean, &mx));
    printf("wrote 64 copy tasks to %s: answer length mean %.1f, max %.0f bytes\n", ho, mean, mx);
    int sft = quick ? 60 : 1500;
    printf("supervised warm start (%d steps), then RL on separate processes:\n", sft);
    fflush(stdout);
    ls_rl_task *t;
    int nt;
    LS_TRY(ls_rl_tasks_read(tasks, &t, &nt));
    int rc = ls_rl_warm_start(t, nt, 0, wd, sft, 16, 3e-3, 1, init, sizeof init, 0);
    ls_rl_tasks_free(t, nt);
    LS_TRY(rc);
    double tps[2] = {0};
    for (int k = 0; k < 2; k++) { /* the same run, Laminar-style then synchronous */
        snprintf(w[k], sizeof w[k], "%s/%s", wd, k ? "sync" : "laminar");
        snprintf(rep[k], sizeof rep[k], "%s/report.json", w[k]);
        ls_rl_run_opts o = ls_rl_run_defaults();
        o.exe = exe, o.tasks = tasks, o.heldout = ho, o.init = init, o.workdir = w[k], o.sft_steps = 0;
        o.mode = k ? LS_RL_MODE_SYNC : LS_RL_MODE_LAMINAR;
        o.group = o.batch_groups = quick ? 4 : 8, o.max_seqs = quick ? 8 : 16, o.updates = quick ? 3 : 20;
        o.step_ms = 20, o.lr = 3e-4, o.eval_n = 64, o.timeout_s = 300;
        LS_TRY(ls_rl_run(&o, NULL));
        LS_TRY(ls_rl_report_print(rep[k]));
        printf("report: %s\n", rep[k]);
        cJSON *j;
        LS_TRY(ls_json_read_file(rep[k], &j));
        ls_json_get_double(j, "traj_per_s", 0, &tps[k]);
        cJSON_Delete(j);
    }
    printf("\nMEASURED here: laminar-style %.2f traj/s vs synchronous %.2f traj/s: %.2fx on the same processes\n",
           tps[0], tps[1], tps[1] > 0 ? tps[0] / tps[1] : 0);
    char svg[1200];
    snprintf(svg, sizeof svg, "%s/reward.svg", wd);
    const char *reps[2] = {rep[0], rep[1]};
    if (ls_rl_report_svg(reps, 2, svg) == LS_OK) printf("reward per update and staleness: %s\n", svg);
    printf("\nSimulator (MODELLED) predicting these two runs from their measured step costs:\n");
    fflush(stdout);
    LS_TRY(ls_rl_sim_calibrate(reps, 2, tasks, NULL, NULL));
    printf("\nSimulator (MODELLED) at cluster scale, qwen2.5-7b on H800:\n");
    fflush(stdout);
    ls_rl_sim_opts s = ls_rl_sim_defaults();
    s.updates = quick ? 3 : 8;
    return ls_rl_sim_table(&s, "qwen2.5-7b", quick ? "64" : "64,1024", NULL, NULL);
}
