/* cmd_rl.c - `llmsys rl` (tasks, run, worker), `llmsys sim rl` and the rl demo scenario. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/model.h"
#include "llmsys/rl.h"
#include "llmsys/train.h"

static int input_error(int rc) { return rc == LS_EINVAL || rc == LS_ENOTFOUND || rc == LS_EFORMAT || rc == LS_ERANGE; }

static int rl_tasks(int argc, char **argv) {
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    const char *kind = "reverse", *out = NULL;
    double seed = 1;
    ls_arg spec[] = {
        {"kind", LS_ARG_STR, &kind, "K", "copy, reverse, sort or add (default reverse)"},
        {"n", LS_ARG_INT, &g.n, "N", "tasks to draw (default 256)"},
        {"mean-len", LS_ARG_FLOAT, &g.mean_len, "L", "mean input length (default 6)"},
        {"cv", LS_ARG_FLOAT, &g.cv, "C", "coefficient of variation of the log-normal length (default 1)"},
        {"min-len", LS_ARG_INT, &g.min_len, "N", "shortest input (default 1)"},
        {"max-len", LS_ARG_INT, &g.max_len, "N", "longest input (default 40)"},
        {"seed", LS_ARG_FLOAT, &seed, "S", "random seed (default 1)"},
        {"demo-noise", LS_ARG_FLOAT, &g.demo_noise, "P",
         "add imperfect demonstrations: drop the last byte with probability P"},
        {"out", LS_ARG_STR, &out, "PATH", "JSONL task file to write", 1},
    };
    int rc = ls_args_parse("rl tasks", "Writes a JSONL file of tasks with verifiable rewards", spec, 9, argc, argv,
                           NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    g.seed = (uint64_t)seed;
    ls_rl_task *t;
    int n;
    if (ls_rl_kind_parse(kind, &g.kind) || ls_rl_tasks_generate(&g, &t, &n)) {
        ls_cli_fail();
        return 2;
    }
    rc = ls_rl_tasks_write(out, t, n);
    if (rc == LS_OK) {
        double sum = 0, mx = 0;
        for (int i = 0; i < n; i++) sum += (double)strlen(t[i].answer), mx = fmax(mx, (double)strlen(t[i].answer));
        printf("wrote %d %s tasks to %s: answer length mean %.1f, max %.0f bytes\n", n, kind, out, sum / n, mx);
    }
    ls_rl_tasks_free(t, n);
    return rc ? ls_cli_fail() : 0;
}

/* Builds the starting checkpoint: --init as given, or a fresh "rl" model warmed up by SFT. */
static int make_init(const char *tasks, const char *workdir, int sft_steps, int sft_batch, double sft_lr, uint64_t seed,
                     char *out, size_t cap, int quiet) {
    ls_model_config c = ls_rl_model_config();
    ls_model *m;
    LS_TRY(ls_model_init(&m, &c, seed));
    ls_rl_task *t;
    int n, rc = ls_rl_tasks_read(tasks, &t, &n);
    float loss = NAN;
    double t0 = ls_now();
    if (rc == LS_OK && sft_steps > 0) rc = ls_rl_sft(m, t, n, sft_steps, sft_batch, (float)sft_lr, seed, &loss);
    if (rc == LS_OK) rc = ls_mkdirs(workdir);
    snprintf(out, cap, "%s/init.safetensors", workdir);
    if (rc == LS_OK) rc = ls_ckpt_save(out, m, sft_steps, NULL, LS_CKPT_WEIGHTS);
    if (rc == LS_OK && !quiet)
        printf("warm start: %d SFT steps of batch %d in %.1f s, final loss %.3f -> %s\n", sft_steps, sft_batch,
               ls_now() - t0, loss, out);
    ls_rl_tasks_free(t, rc == LS_OK || n > 0 ? n : 0);
    ls_model_free(m);
    return rc;
}

static void print_report(const char *path) {
    cJSON *j;
    if (ls_json_read_file(path, &j) != LS_OK) return;
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
    double b = 0, a = 0, eb = 0, ea = 0;
    if (tr) {
        ls_json_get_double(tr, "heldout_reward_before", 0, &b), ls_json_get_double(tr, "heldout_reward_after", 0, &a);
        ls_json_get_double(tr, "heldout_exact_before", 0, &eb), ls_json_get_double(tr, "heldout_exact_after", 0, &ea);
        printf("  held-out reward, greedy: %.3f -> %.3f (exact %.1f%% -> %.1f%%)\n", b, a, 100 * eb, 100 * ea);
        ls_json_get_double(tr, "heldout_sampled_reward_before", 0, &b),
            ls_json_get_double(tr, "heldout_sampled_reward_after", 0, &a);
        ls_json_get_double(tr, "heldout_sampled_exact_before", 0, &eb),
            ls_json_get_double(tr, "heldout_sampled_exact_after", 0, &ea);
        printf("  held-out reward, sampled at T=1 (4 per prompt): %.3f -> %.3f (exact %.1f%% -> %.1f%%)\n", b, a,
               100 * eb, 100 * ea);
    }
    cJSON_Delete(j);
}

static int rl_run(int argc, char **argv) {
    ls_rl_run_opts o = ls_rl_run_defaults();
    const char *mode = "laminar";
    int sft_steps = 0, sft_batch = 16, no_repack = 0;
    double sft_lr = 3e-3, seed = 1;
    ls_arg spec[] = {
        {"tasks", LS_ARG_STR, &o.tasks, "PATH", "JSONL task file (llmsys rl tasks)", 1},
        {"heldout", LS_ARG_STR, &o.heldout, "PATH", "held-out tasks (default: the last --eval-n of --tasks)"},
        {"init", LS_ARG_STR, &o.init, "CKPT", "starting checkpoint (default: a fresh model, see --sft-steps)"},
        {"sft-steps", LS_ARG_INT, &sft_steps, "N", "supervised warm-start steps on --tasks before RL (default 0)"},
        {"sft-batch", LS_ARG_INT, &sft_batch, "B", "warm-start batch (default 16)"},
        {"sft-lr", LS_ARG_FLOAT, &sft_lr, "LR", "warm-start learning rate (default 3e-3)"},
        {"mode", LS_ARG_STR, &mode, "M", "laminar, sync, onestep or areal (default laminar)"},
        {"rollouts", LS_ARG_INT, &o.rollouts, "N", "rollout workers (default 3)"},
        {"relays", LS_ARG_INT, &o.relays, "N", "relay workers (default 2)"},
        {"updates", LS_ARG_INT, &o.updates, "N", "trainer updates (default 20)"},
        {"group", LS_ARG_INT, &o.group, "G", "samples per prompt (GRPO group, default 4)"},
        {"batch-groups", LS_ARG_INT, &o.batch_groups, "N", "groups per update (default 4)"},
        {"max-seqs", LS_ARG_INT, &o.max_seqs, "N", "KV slots per rollout (decode batch, default 8)"},
        {"max-new", LS_ARG_INT, &o.max_new, "N", "response cap in tokens (default 96)"},
        {"lr", LS_ARG_FLOAT, &o.lr, "LR", "RL learning rate (default 1e-4)"},
        {"clip", LS_ARG_FLOAT, &o.clip_eps, "E", "PPO clip epsilon (default 0.2)"},
        {"is-cap", LS_ARG_FLOAT, &o.is_cap, "C", "importance-weight truncation (default 5)"},
        {"staleness", LS_ARG_INT, &o.staleness, "N", "areal mode's staleness bound (default 2)"},
        {"no-repack", LS_ARG_FLAG, &no_repack, NULL, "laminar mode without dynamic repack"},
        {"step-ms", LS_ARG_FLOAT, &o.step_ms, "MS", "floor of a rollout decode step (emulated accelerator, default 0)"},
        {"train-ms", LS_ARG_FLOAT, &o.train_ms, "MS", "floor of a trainer update (default 0)"},
        {"eval-n", LS_ARG_INT, &o.eval_n, "N", "held-out prompts evaluated before and after (default 64)"},
        {"seed", LS_ARG_FLOAT, &seed, "S", "random seed (default 1)"},
        {"workdir", LS_ARG_STR, &o.workdir, "DIR", "config, logs, report (default rl-out)"},
        {"report", LS_ARG_STR, &o.report, "PATH", "JSON report (default WORKDIR/report.json)"},
        {"kill-rollout-at", LS_ARG_FLOAT, &o.kill_rollout_s, "S", "fault injection: kill rollout 0 after S seconds"},
        {"kill-relay-at", LS_ARG_FLOAT, &o.kill_relay_s, "S", "fault injection: kill relay 1 after S seconds"},
        {"restart-after", LS_ARG_FLOAT, &o.restart_s, "S", "restart the killed rollout S seconds later"},
        {"timeout", LS_ARG_FLOAT, &o.timeout_s, "S", "whole-run limit (default 600)"},
        {"quiet", LS_ARG_FLAG, &o.quiet, NULL, "no progress lines"},
    };
    int n = (int)(sizeof spec / sizeof spec[0]);
    int rc = ls_args_parse("rl run", "Runs trainer, relays, rollouts and manager as separate processes", spec, n, argc,
                           argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    if (ls_rl_mode_parse(mode, &o.mode)) {
        ls_cli_fail();
        return 2;
    }
    o.repack = !no_repack;
    o.seed = (uint64_t)seed;
    o.exe = ls_cli_self();
    char init[1200];
    if (!o.init) {
        rc = make_init(o.tasks, o.workdir, sft_steps, sft_batch, sft_lr, o.seed, init, sizeof init, o.quiet);
        if (rc) return input_error(rc) ? (ls_cli_fail(), 2) : ls_cli_fail();
        o.init = init;
    } else if (sft_steps > 0) {
        fprintf(stderr, "llmsys rl run: --sft-steps applies to a fresh model; drop it or --init\n");
        return 2;
    }
    if (!o.quiet) {
        printf("rl run: %s, %d rollouts, %d relays, %d updates of %d groups x %d\n", ls_rl_mode_name(o.mode),
               o.rollouts, o.relays, o.updates, o.batch_groups, o.group);
        fflush(stdout);
    }
    rc = ls_rl_run(&o);
    if (rc) return input_error(rc) ? (ls_cli_fail(), 2) : ls_cli_fail();
    char rp[1200];
    snprintf(rp, sizeof rp, "%s", o.report ? o.report : "");
    if (!o.report) snprintf(rp, sizeof rp, "%s/report.json", o.workdir);
    if (!o.quiet) {
        print_report(rp);
        printf("report: %s\n", rp);
    }
    return 0;
}

static int rl_worker(int argc, char **argv) {
    ls_rl_worker_opts w = {0};
    ls_arg spec[] = {
        {"role", LS_ARG_STR, &w.role, "R", "manager, trainer, rollout or relay", 1},
        {"manager", LS_ARG_STR, &w.manager, "EP", "the manager's endpoint, tcp://HOST:PORT"},
        {"id", LS_ARG_INT, &w.id, "N", "worker index within its role"},
        {"bind", LS_ARG_STR, &w.bind, "EP", "manager/relay bind address (default tcp://127.0.0.1:0)"},
        {"config", LS_ARG_STR, &w.config, "PATH", "manager: the run config (written by rl run)"},
        {"port-file", LS_ARG_STR, &w.port_file, "PATH", "manager: write the bound endpoint here"},
    };
    int rc = ls_args_parse("rl worker", "Runs one process of an RL job", spec, 6, argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    rc = ls_rl_worker(&w);
    if (rc) return rc == LS_EINVAL ? (ls_cli_fail(), 2) : ls_cli_fail();
    return 0;
}

static int rl_plot(int argc, char **argv) {
    ls_strlist reps = {0};
    const char *out = NULL;
    ls_arg spec[] = {
        {"report", LS_ARG_STR_LIST, &reps, "JSON...", "rl run reports (1 to 6)", 1},
        {"out", LS_ARG_STR, &out, "PATH", "SVG file to write", 1},
    };
    int rc = ls_args_parse("rl plot", "Plots reward per update and staleness of rl run reports as SVG", spec, 2, argc,
                           argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    rc = ls_rl_report_svg(reps.v, reps.n, out);
    ls_strlist_free(&reps);
    if (rc) return input_error(rc) ? (ls_cli_fail(), 2) : ls_cli_fail();
    printf("wrote %s\n", out);
    return 0;
}

int cmd_rl(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: llmsys rl SUBCOMMAND [options]\n"
                   "  tasks    write a JSONL task file (verifiable rewards, long-tailed lengths)\n"
                   "  run      start manager, relays, rollouts and trainer on this machine\n"
                   "  worker   start one process of a job (--role R --manager tcp://...)\n"
                   "  plot     SVG of run reports: reward per update, staleness\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "tasks")) return rl_tasks(argc - 1, argv + 1);
    if (!strcmp(argv[1], "run")) return rl_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "worker")) return rl_worker(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot")) return rl_plot(argc - 1, argv + 1);
    fprintf(stderr, "llmsys rl: unknown subcommand '%s' (tasks, run, worker, plot)\n", argv[1]);
    return 2;
}

/* ---------------------------------------------------------------- sim rl */

static int sim_row(ls_rl_sim_opts *o, const int *gpus, int ng, cJSON *arr) {
    static const int order[4] = {LS_RL_MODE_SYNC, LS_RL_MODE_ONESTEP, LS_RL_MODE_AREAL, LS_RL_MODE_LAMINAR};
    printf("%-12s %6s %-8s %4s %10s %11s %7s %7s %8s %8s\n", "model", "gpus", "design", "tp", "traj/s", "tok/s",
           "idle%", "stale", "vs sync", "vs areal");
    for (int gi = 0; gi < ng; gi++) {
        double tps[4] = {0};
        for (int k = 0; k < 4; k++) {
            o->gpus = gpus[gi];
            o->mode = order[k];
            ls_rl_sim_result r;
            LS_TRY(ls_rl_simulate(o, &r));
            tps[k] = r.traj_per_s;
            char va[16] = "";
            if (k == 3 && tps[2] > 0) snprintf(va, sizeof va, "%.2f", r.traj_per_s / tps[2]);
            printf("%-12s %6d %-8s %4d %10.2f %11.0f %7.1f %7.2f %8.2f %8s\n", o->model, o->gpus,
                   ls_rl_mode_name(order[k]), r.tp, r.traj_per_s, r.tokens_per_s, 100 * r.idle_frac, r.mean_staleness,
                   r.traj_per_s / tps[0], va);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "model", o->model);
            cJSON_AddNumberToObject(j, "gpus", o->gpus);
            cJSON_AddStringToObject(j, "design", ls_rl_mode_name(order[k]));
            cJSON_AddNumberToObject(j, "tp", r.tp);
            cJSON_AddNumberToObject(j, "replicas", r.replicas);
            cJSON_AddNumberToObject(j, "traj_per_s", r.traj_per_s);
            cJSON_AddNumberToObject(j, "tokens_per_s", r.tokens_per_s);
            cJSON_AddNumberToObject(j, "idle_frac", r.idle_frac);
            cJSON_AddNumberToObject(j, "staleness_mean", r.mean_staleness);
            cJSON_AddNumberToObject(j, "staleness_max", r.max_staleness);
            cJSON_AddNumberToObject(j, "trainer_stall_s", r.stall_s);
            cJSON_AddNumberToObject(j, "speedup_vs_sync", tps[0] > 0 ? r.traj_per_s / tps[0] : 0);
            cJSON_AddNumberToObject(j, "speedup_vs_areal", k == 3 && tps[2] > 0 ? r.traj_per_s / tps[2] : 0);
            cJSON_AddItemToArray(arr, j);
        }
    }
    return LS_OK;
}

/* Response lengths (answer + EOS) of a task file, as a trace. */
static int read_trace(const char *path, int **trace, int *n) {
    ls_rl_task *t;
    LS_TRY(ls_rl_tasks_read(path, &t, n));
    *trace = malloc(sizeof(int) * (size_t)*n);
    if (*trace)
        for (int i = 0; i < *n; i++) (*trace)[i] = (int)strlen(t[i].answer) + 1;
    ls_rl_tasks_free(t, *n);
    return *trace ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
}

/* Predicts a real run from its own measured costs; returns the relative error of traj/s. */
static int sim_compare(const char *report, const char *trace_path, cJSON *out, double *err) {
    cJSON *j;
    LS_TRY(ls_json_read_file(report, &j));
    const char *mode = "laminar";
    double step_ms = 0, train = 0, rollouts = 0, group = 0, bg = 0, tps = 0, upd = 0, maxs = 8, step_s = 0, pull = 0,
           rep = 1, stale = 2;
    ls_json_get_string(j, "mode", "laminar", &mode);
    ls_json_get_double(j, "step_ms", 0, &step_ms);
    ls_json_get_double(j, "train_mean_s", 0, &train);
    ls_json_get_double(j, "rollouts", 0, &rollouts);
    ls_json_get_double(j, "group", 4, &group);
    ls_json_get_double(j, "batch_groups", 4, &bg);
    ls_json_get_double(j, "traj_per_s", 0, &tps);
    ls_json_get_double(j, "updates", 0, &upd);
    ls_json_get_double(j, "max_seqs", 8, &maxs);
    ls_json_get_double(j, "decode_step_mean_s", 0, &step_s);
    ls_json_get_double(j, "pull_mean_s", 0, &pull);
    ls_json_get_double(j, "repack_enabled", 1, &rep);
    ls_json_get_double(j, "staleness_bound", 2, &stale);
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    int rc = ls_rl_mode_parse(mode, &o.mode);
    if (rc == LS_OK && (step_ms <= 0 || rollouts < 1 || upd < 1))
        rc = ls_err(LS_EINVAL, "%s: a report of a run with --step-ms > 0 is needed for calibration", report);
    int *trace = NULL, nt = 0;
    if (rc == LS_OK) rc = read_trace(trace_path, &trace, &nt);
    ls_rl_sim_result r;
    if (rc == LS_OK) {
        o.gpus = (int)rollouts + 1;
        o.step_s = step_s > 0 ? step_s : step_ms / 1000.0; /* the measured mean decode step */
        o.train_s = train;
        o.pull_s = pull;
        o.repack = rep != 0;
        o.staleness = (int)stale;
        o.batch = (int)(group * bg);
        o.updates = (int)upd;
        o.max_batch = (int)maxs;
        o.prompt_len = 8;
        o.trace = trace, o.n_trace = nt;
        o.repack_s = 0.1;
        rc = ls_rl_simulate(&o, &r);
    }
    if (rc == LS_OK) {
        *err = tps > 0 ? (r.traj_per_s - tps) / tps : 0;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "mode", mode);
        cJSON_AddNumberToObject(c, "measured_traj_per_s", tps);
        cJSON_AddNumberToObject(c, "predicted_traj_per_s", r.traj_per_s);
        cJSON_AddNumberToObject(c, "relative_error", *err);
        cJSON_AddItemToArray(out, c);
        printf("%-8s measured %.2f traj/s, simulated %.2f traj/s, error %+.1f%%\n", mode, tps, r.traj_per_s,
               100 * *err);
    }
    free(trace);
    cJSON_Delete(j);
    return rc;
}

int cmd_sim_rl(int argc, char **argv) {
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    const char *models = "qwen2.5-7b,qwen2.5-32b,qwen2.5-72b", *gpus_s = "64,256,1024", *out = NULL, *trace = NULL;
    ls_strlist cal = {0};
    double seed = 1;
    ls_arg spec[] = {
        {"models", LS_ARG_STR, &models, "LIST", "catalog models, comma separated (default qwen2.5-7b,32b,72b)"},
        {"gpu", LS_ARG_STR, &o.gpu, "NAME", "catalog GPU (default H800-80G)"},
        {"gpus", LS_ARG_STR, &gpus_s, "LIST", "cluster sizes (default 64,256,1024)"},
        {"mean-len", LS_ARG_FLOAT, &o.mean_len, "N", "mean response tokens (default 2000)"},
        {"cv", LS_ARG_FLOAT, &o.cv, "C", "coefficient of variation of the log-normal length (default 1.5)"},
        {"prompt-len", LS_ARG_INT, &o.prompt_len, "N", "prompt tokens (default 256)"},
        {"batch", LS_ARG_INT, &o.batch, "N", "trajectories per update (default 2048)"},
        {"updates", LS_ARG_INT, &o.updates, "N", "updates simulated (default 10)"},
        {"max-batch", LS_ARG_INT, &o.max_batch, "N", "decode batch per replica (default 64)"},
        {"staleness", LS_ARG_INT, &o.staleness, "N", "AReaL-like staleness bound (default 2)"},
        {"trace", LS_ARG_STR, &trace, "PATH", "take response lengths from a task file (answer + EOS)"},
        {"calibrate", LS_ARG_STR_LIST, &cal, "REPORT...",
         "predict real runs (rl run reports) from their measured costs"},
        {"seed", LS_ARG_FLOAT, &seed, "S", "random seed (default 1)"},
        {"out", LS_ARG_STR, &out, "PATH", "JSON results"},
    };
    int rc = ls_args_parse("sim rl", "Simulates sync, one-step, AReaL-like and Laminar-style RL at cluster scale", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    o.seed = (uint64_t)seed;
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_CreateArray(), *cmp = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "rows", rows);
    cJSON_AddItemToObject(root, "calibration", cmp);
    int *tr = NULL, ntr = 0;
    if (cal.n > 0) {
        if (!trace) {
            fprintf(stderr, "llmsys sim rl: --calibrate needs --trace (the run's task file)\n");
            rc = 2;
        }
        double worst = 0;
        for (int i = 0; rc == 0 && i < cal.n; i++) {
            double e;
            if (sim_compare(cal.v[i], trace, cmp, &e)) rc = 1;
            worst = fmax(worst, fabs(e));
        }
        if (rc == 0) {
            printf("largest simulator error on the real runs: %.1f%%\n", 100 * worst);
            cJSON_AddNumberToObject(root, "max_abs_error", worst);
        }
    } else {
        if (trace && read_trace(trace, &tr, &ntr)) rc = 1;
        o.trace = tr, o.n_trace = ntr;
        int gl[16], ng = 0;
        for (const char *p = gpus_s; *p && ng < 16;) {
            gl[ng++] = atoi(p);
            p = strchr(p, ',');
            if (!p) break;
            p++;
        }
        printf("modelled from data/gpus.json and data/models.json (%s, CV %.2f, mean %.0f tokens, batch %d)\n", o.gpu,
               o.cv, o.mean_len, o.batch);
        char buf[512];
        snprintf(buf, sizeof buf, "%s", models);
        for (char *m = strtok(buf, ","); rc == 0 && m; m = strtok(NULL, ",")) {
            o.model = m;
            if (sim_row(&o, gl, ng, rows)) rc = 1;
        }
    }
    if (rc == 0 && out && ls_json_write_file(out, root)) rc = 1;
    if (rc == 1) ls_cli_fail();
    cJSON_Delete(root);
    free(tr);
    ls_strlist_free(&cal);
    return rc;
}

/* ---------------------------------------------------------------- demo */

static int run_cmd(char **av) {
    int ac = 0;
    while (av[ac]) ac++;
    return cmd_rl(ac, av);
}

int demo_rl(const ls_demo_ctx *ctx) {
    char wd[1100], tasks[1200], ho[1200], w1[1200], w2[1200], r1[1300], r2[1300];
    snprintf(wd, sizeof wd, "%s/rl", ctx->workdir);
    if (ls_mkdirs(wd)) return ls_cli_fail();
    snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", wd);
    snprintf(ho, sizeof ho, "%s/heldout.jsonl", wd);
    snprintf(w1, sizeof w1, "%s/laminar", wd);
    snprintf(w2, sizeof w2, "%s/sync", wd);
    snprintf(r1, sizeof r1, "%s/report.json", w1);
    snprintf(r2, sizeof r2, "%s/report.json", w2);
    const char *n = ctx->quick ? "256" : "2000", *upd = ctx->quick ? "3" : "20", *sft = ctx->quick ? "60" : "1500";
    /* groups of 8 samples, 8 groups an update (4 x 4 in the quick run) */
    char *G = ctx->quick ? "4" : "8", *slots = ctx->quick ? "8" : "16";
    /* half the demonstrations drop the answer's last byte: the warm start imitates them,
     * the reward checks the answer, and RL corrects what the demonstrations got wrong */
    char *g1[] = {"rl",  "tasks",     "--kind", "copy",         "--n", (char *)n, "--mean-len", "6", "--cv",
                  "1.0", "--max-len", "40",     "--demo-noise", "0.5", "--out",   tasks,        NULL};
    char *g2[] = {"rl",  "tasks",     "--kind", "copy",   "--n", "64",    "--mean-len", "6", "--cv",
                  "1.0", "--max-len", "40",     "--seed", "99",  "--out", ho,           NULL};
    if (run_cmd(g1) || run_cmd(g2)) return 1;
    char init[1200];
    printf("supervised warm start (%s steps), then RL on separate processes:\n", sft);
    fflush(stdout);
    if (make_init(tasks, wd, atoi(sft), 16, 3e-3, 1, init, sizeof init, 0)) return ls_cli_fail();
    /* clang-format off */
    char *a1[] = {"rl", "run", "--tasks", tasks, "--heldout", ho, "--init", init, "--mode", "laminar",
                  "--workdir", w1, "--group", G, "--batch-groups", G, "--max-seqs", slots, "--updates", (char *)upd,
                  "--step-ms", "20", "--lr", "3e-4", "--eval-n", "64", "--timeout", "300", NULL};
    /* clang-format on */
    char *a2[sizeof a1 / sizeof *a1];
    memcpy(a2, a1, sizeof a1);
    a2[9] = "sync", a2[11] = w2; /* the same run, synchronous */
    if (run_cmd(a1) || run_cmd(a2)) return 1;
    cJSON *j1, *j2;
    if (ls_json_read_file(r1, &j1)) return ls_cli_fail();
    if (ls_json_read_file(r2, &j2)) {
        cJSON_Delete(j1);
        return ls_cli_fail();
    }
    double t1 = 0, t2 = 0;
    ls_json_get_double(j1, "traj_per_s", 0, &t1);
    ls_json_get_double(j2, "traj_per_s", 0, &t2);
    cJSON_Delete(j1), cJSON_Delete(j2);
    printf("\nMEASURED here: laminar-style %.2f traj/s vs synchronous %.2f traj/s: %.2fx on the same processes\n", t1,
           t2, t2 > 0 ? t1 / t2 : 0);
    char svg[1200];
    snprintf(svg, sizeof svg, "%s/reward.svg", wd);
    const char *reps[2] = {r1, r2};
    if (ls_rl_report_svg(reps, 2, svg) == LS_OK) printf("reward per update and staleness: %s\n", svg);
    printf("\nSimulator (MODELLED) predicting these two runs from their measured step costs:\n");
    fflush(stdout);
    char *c1[] = {"rl", "--calibrate", r1, r2, "--trace", tasks, NULL};
    if (cmd_sim_rl(6, c1)) return 1;
    printf("\nSimulator (MODELLED) at cluster scale, qwen2.5-7b on H800:\n");
    fflush(stdout);
    char *s1[] = {
        "rl", "--models", "qwen2.5-7b", "--gpus", ctx->quick ? "64" : "64,1024", "--updates", ctx->quick ? "3" : "8",
        NULL};
    return cmd_sim_rl(7, s1) ? 1 : 0;
}
