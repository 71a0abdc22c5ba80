/* cmd_rl.c - `llmsys rl` (tasks, run, worker, plot), `llmsys sim rl` and the rl demo scenario. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/rl.h"

static int rl_tasks(int argc, char **argv) {
    ls_rl_gen_opts g = ls_rl_gen_defaults();
    g.kind = LS_RL_COPY, g.n = 2000, g.demo_noise = 0.5;
    const char *kind = "copy", *out = NULL;
    double mean, mx;
    ls_arg spec[] = {
        {"kind", LS_ARG_STR, &kind, "K", "copy, reverse, sort or add (default copy)"},
        {"n", LS_ARG_INT, &g.n, "N", "tasks to draw (default 2000)"},
        {"mean-len", LS_ARG_FLOAT, &g.mean_len, "L", "mean input length (default 6)"},
        {"cv", LS_ARG_FLOAT, &g.cv, "C", "coefficient of variation of the log-normal length (default 1)"},
        {"min-len", LS_ARG_INT, &g.min_len, "N", "shortest input (default 1)"},
        {"max-len", LS_ARG_INT, &g.max_len, "N", "longest input (default 40)"},
        {"seed", LS_ARG_I64, &g.seed, "S", "random seed (default 1)", 0, LS_RANGE(0, LS_RL_SEED_MAX)},
        {"demo-noise", LS_ARG_FLOAT, &g.demo_noise, "P",
         "imperfect demonstrations: drop the last byte with probability P (default 0.5; 0: none)"},
        {"out", LS_ARG_PATH, &out, "PATH", "JSONL task file to write", 1},
    };
    int rc =
        ls_args("rl tasks", "Writes a JSONL file of tasks with verifiable rewards", spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (ls_rl_kind_parse(kind, &g.kind)) return ls_cli_fail_rc(LS_EINVAL);
    if (ls_out_path_check("out", out)) return ls_cli_fail(); /* a runtime error (1), as for every command */
    rc = ls_rl_tasks_make(&g, out, &mean, &mx);
    if (rc) return ls_cli_fail_rc(rc);
    printf("wrote %d %s tasks to %s: answer length mean %.1f, max %.0f bytes\n", g.n, kind, out, mean, mx);
    return 0;
}

static int rl_run(int argc, char **argv) {
    ls_rl_run_opts o = ls_rl_run_defaults();
    const char *mode = "laminar";
    int no_repack = 0;
    o.sft_steps = o.rollout_batch = LS_ARG_UNSET; /* their defaults are values a user could type */
    ls_arg spec[] = {
        {"tasks", LS_ARG_PATH, &o.tasks, "PATH", "JSONL task file (llmsys rl tasks)", 1},
        {"heldout", LS_ARG_PATH, &o.heldout, "PATH", "held-out tasks (default: the last --eval-n of --tasks, unused)"},
        {"init", LS_ARG_PATH, &o.init, "CKPT", "starting checkpoint (default: a fresh model, see --sft-steps)"},
        {"sft-steps", LS_ARG_INT, &o.sft_steps, "N", "supervised warm-start steps of a fresh model (default 1500)"},
        {"sft-batch", LS_ARG_INT, &o.sft_batch, "B", "warm-start batch (default 16)"},
        {"sft-lr", LS_ARG_FLOAT, &o.sft_lr, "LR", "warm-start learning rate (default 3e-3)"},
        {"mode", LS_ARG_STR, &mode, "M", "laminar, sync, onestep or areal (default laminar)"},
        {"rollouts", LS_ARG_INT, &o.rollouts, "N", "rollout workers (default 3)"},
        {"relays", LS_ARG_INT, &o.relays, "N", "relay workers (default 2)"},
        {"updates", LS_ARG_INT, &o.updates, "N", "trainer updates (default 20)"},
        {"group", LS_ARG_INT, &o.group, "G", "samples per prompt (GRPO group, default 8)"},
        {"batch-groups", LS_ARG_INT, &o.batch_groups, "N", "groups per update (default 8)"},
        {"max-seqs", LS_ARG_INT, &o.max_seqs, "N", "KV slots per rollout (decode batch, default 16)"},
        {"max-new", LS_ARG_INT, &o.max_new, "N", "response cap in tokens (default 96)"},
        {"lr", LS_ARG_FLOAT, &o.lr, "LR", "RL learning rate (default 3e-4)"},
        {"clip", LS_ARG_FLOAT, &o.clip_eps, "E", "PPO clip epsilon (default 0.2)"},
        {"is-cap", LS_ARG_FLOAT, &o.is_cap, "C", "importance-weight truncation (default 5)"},
        {"staleness", LS_ARG_INT, &o.staleness, "N", "areal mode's staleness bound (default 2)"},
        {"no-repack", LS_ARG_FLAG, &no_repack, NULL, "laminar mode without dynamic repack"},
        {"rollout-batch", LS_ARG_INT, &o.rollout_batch, "N",
         "laminar: trajectories a rollout takes per weight version, its slots and a waiting queue (default "
         "max-seqs: no queue)"},
        {"step-ms", LS_ARG_FLOAT, &o.step_ms, "MS", "floor of a rollout decode step (emulated accelerator, default 0)"},
        {"train-ms", LS_ARG_FLOAT, &o.train_ms, "MS", "floor of a trainer update (default 0)"},
        {"eval-n", LS_ARG_INT, &o.eval_n, "N", "held-out prompts evaluated before and after (default 64)"},
        {"seed", LS_ARG_I64, &o.seed, "S", "random seed (default 1)", 0, LS_RANGE(0, LS_RL_SEED_MAX)},
        {"workdir", LS_ARG_PATH, &o.workdir, "DIR", "config, logs, report (default rl-out)"},
        {"report", LS_ARG_PATH, &o.report, "PATH", "JSON report (default WORKDIR/report.json)"},
        {"kill-rollout-at", LS_ARG_FLOAT, &o.kill_rollout_s, "S",
         "fault injection: kill rollout 0 S seconds after it joined"},
        {"kill-relay-at", LS_ARG_FLOAT, &o.kill_relay_s, "S",
         "fault injection: kill relay 1 S seconds after it joined"},
        {"restart-after", LS_ARG_FLOAT, &o.restart_s, "S", "restart the killed rollout S seconds later"},
        {"timeout", LS_ARG_FLOAT, &o.timeout_s, "S", "whole-run limit (default 600)"},
        {"quiet", LS_ARG_FLAG, &o.quiet, NULL, "no progress lines"},
    };
    int rc = ls_args("rl run", "Runs trainer, relays, rollouts and manager as separate processes", spec, LS_NARGS(spec),
                     argc, argv);
    if (rc >= 0) return rc;
    if (ls_rl_mode_parse(mode, &o.mode)) return ls_cli_fail_rc(LS_EINVAL);
    if (ls_args_given("rl run", "sft-steps", &o.sft_steps, 0, ls_rl_run_defaults().sft_steps) ||
        ls_args_given("rl run", "rollout-batch", &o.rollout_batch, 1, ls_rl_run_defaults().rollout_batch))
        return 2;
    o.repack = !no_repack, o.exe = ls_cli_self();
    ls_rl_inputs *in;
    if ((rc = ls_rl_run_check(&o, &in))) return ls_cli_fail_rc(rc); /* the values and the input files, read */
    rc = ls_rl_run(&o, in); /* an unwritable --report is found first: a runtime error (1), as for every command */
    ls_rl_inputs_free(in);
    if (rc) return ls_cli_fail();
    char rp[1200];
    snprintf(rp, sizeof rp, "%s", o.report ? o.report : "");
    if (!o.report) snprintf(rp, sizeof rp, "%s/report.json", o.workdir);
    if (!o.quiet && ls_rl_report_print(rp) == LS_OK) printf("report: %s\n", rp);
    return 0;
}

static int rl_worker(int argc, char **argv) {
    ls_rl_worker_opts w = {0};
    ls_arg spec[] = {
        {"role", LS_ARG_STR, &w.role, "R", "manager, trainer, rollout or relay", 1},
        {"manager", LS_ARG_STR, &w.manager, "EP", "the manager's endpoint, tcp://HOST:PORT"},
        {"id", LS_ARG_INT, &w.id, "N", "worker index within its role"},
        {"bind", LS_ARG_STR, &w.bind, "EP",
         "manager/relay bind address (default tcp://127.0.0.1:0; another needs llmsys --keys DIR)"},
        {"config", LS_ARG_PATH, &w.config, "PATH", "manager: the run config (written by rl run)"},
        {"port-file", LS_ARG_PATH, &w.port_file, "PATH", "manager: write the bound endpoint here"},
    };
    int rc = ls_args("rl worker", "Runs one process of an RL job", spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    ls_rl_inputs *in;
    if ((rc = ls_rl_worker_check(&w, &in))) return ls_cli_fail_rc(rc); /* the role's options, a manager's --config */
    rc = ls_rl_worker(&w, in); /* what the manager or a peer sends is the run's */
    ls_rl_inputs_free(in);
    return rc ? ls_cli_fail() : 0;
}

static int rl_plot(int argc, char **argv) {
    ls_strlist reps = {0};
    const char *out = NULL;
    ls_arg spec[] = {
        {"report", LS_ARG_PATH_LIST, &reps, "JSON", "rl run reports (1 to 6)", 1},
        {"out", LS_ARG_PATH, &out, "PATH", "SVG file to write", 1},
    };
    int rc = ls_args("rl plot", "Plots reward per update and staleness of rl run reports as SVG", spec, LS_NARGS(spec),
                     argc, argv);
    if (rc >= 0) return rc;
    if (ls_out_path_check("out", out)) {
        ls_strlist_free(&reps);
        return ls_cli_fail();
    }
    rc = ls_rl_report_svg((const char *const *)reps.v, reps.n, out);
    ls_strlist_free(&reps);
    if (rc) return ls_cli_fail_rc(rc);
    printf("wrote %s\n", out);
    return 0;
}

int cmd_rl(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"tasks", rl_tasks}, {"run", rl_run}, {"worker", rl_worker}, {"plot", rl_plot}};
    return ls_args_subcommand("rl", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys rl SUBCOMMAND [options]\n"
                              "  tasks    write a JSONL task file (verifiable rewards, long-tailed lengths)\n"
                              "  run      start manager, relays, rollouts and trainer on this machine\n"
                              "  worker   start one process of a job (--role R --manager tcp://...)\n"
                              "  plot     SVG of run reports: reward per update, staleness\n");
}

int cmd_sim_rl(int argc, char **argv) {
    ls_rl_sim_opts o = ls_rl_sim_defaults();
    const char *models = "qwen2.5-7b,qwen2.5-32b,qwen2.5-72b", *gpus = "64,256,1024", *out = NULL, *trace = NULL;
    ls_strlist cal = {0};
    ls_arg spec[] = {
        {"models", LS_ARG_STR, &models, "LIST", "catalog models, comma separated (default qwen2.5-7b,32b,72b)"},
        {"gpu", LS_ARG_STR, &o.gpu, "NAME", "catalog GPU (default H800-80G)"},
        {"gpus", LS_ARG_STR, &gpus, "LIST", "cluster sizes (default 64,256,1024)"},
        {"mean-len", LS_ARG_FLOAT, &o.mean_len, "N", "mean response tokens (default 2000)"},
        {"cv", LS_ARG_FLOAT, &o.cv, "C", "coefficient of variation of the log-normal length (default 1.3)"},
        {"prompt-len", LS_ARG_INT, &o.prompt_len, "N", "prompt tokens (default 256)"},
        {"batch", LS_ARG_INT, &o.batch, "N", "trajectories per update (default 8192)"},
        {"updates", LS_ARG_INT, &o.updates, "N", "updates simulated (default 10)"},
        {"max-batch", LS_ARG_INT, &o.max_batch, "N", "decode batch per replica (default 64)"},
        {"staleness", LS_ARG_INT, &o.staleness, "N", "AReaL-like staleness bound (default 2)"},
        {"train-pct", LS_ARG_INT, &o.train_frac_pct, "P", "% of GPUs training if disaggregated (default 25; 0: best)"},
        {"trace", LS_ARG_PATH, &trace, "PATH", "take response lengths from a task file (answer + EOS)"},
        {"calibrate", LS_ARG_PATH_LIST, &cal, "REPORT",
         "predict real runs (rl run reports) from their measured costs and workload"},
        {"seed", LS_ARG_I64, &o.seed, "S", "random seed (default 1)", 0, LS_RANGE(0, LS_RL_SEED_MAX)},
        {"out", LS_ARG_PATH, &out, "PATH", "JSON results"},
    };
    int rc = ls_args("sim rl", "Simulates sync, one-step, AReaL-like and Laminar-style RL at cluster scale", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (cal.n > 0)
        rc = (rc = ls_rl_sim_calibrate((const char *const *)cal.v, cal.n, trace, out, NULL)) ? ls_cli_fail_rc(rc) : 0;
    else if ((rc = ls_rl_sim_check(&o, models, gpus, trace != NULL))) /* values and names: usage errors */
        rc = ls_cli_fail_rc(rc);
    else /* reads --trace, simulates here, writes --out (LS_EIO) */
        rc = (rc = ls_rl_sim_table(&o, models, gpus, trace, out)) ? ls_cli_fail_rc(rc) : 0;
    ls_strlist_free(&cal);
    return rc;
}

int demo_rl(const ls_demo_ctx *ctx) { return ls_rl_demo(ctx->workdir, ctx->quick, ls_cli_self()) ? ls_cli_fail() : 0; }
