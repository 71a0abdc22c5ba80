/* cmd_robust.c - `llmsys robust run|agent`, `llmsys sim robust` and the robust demo scenario. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/robust.h"
#include "llmsys/zsec.h"

static int robust_run_cmd(int argc, char **argv) {
    int split = argc;
    for (int i = 1; i < argc && split == argc; i++)
        if (!strcmp(argv[i], "--")) split = i;
    ls_robust_opts o;
    ls_robust_opts_defaults(&o);
    ls_arg spec[] = {
        {"nodes", LS_ARG_INT, &o.nodes, "N", "nodes holding ranks (default 2)"},
        {"ranks-per-node", LS_ARG_INT, &o.ranks_per_node, "R", "ranks per node (default 2)"},
        {"standby", LS_ARG_INT, &o.standby, "K", "warm standby nodes (default 1)"},
        {"hang-timeout", LS_ARG_FLOAT, &o.hang_timeout, "S", "no step for S seconds is a hang (default 10)"},
        {"ckpt-every", LS_ARG_INT, &o.ckpt_every, "STEPS", "in-memory snapshot period (default 1; 0: disk only)"},
        {"disk-every", LS_ARG_INT, &o.disk_every, "STEPS", "disk checkpoint period (default 10)"},
        {"keep", LS_ARG_INT, &o.keep_disk, "N", "disk checkpoints kept (default 2)"},
        {"max-restarts", LS_ARG_INT, &o.max_restarts, "N", "relaunches before giving up (default 10)"},
        {"repair", LS_ARG_FLOAT, &o.repair_s, "S", "an evicted node rejoins the standbys after S s (default 0: never)"},
        {"jump-factor", LS_ARG_FLOAT, &o.jump_factor, "X", "loss/grad-norm jump vs running median (default 5; 0: off)"},
        {"slow-window", LS_ARG_INT, &o.slow_window, "STEPS", "slow-rank window (default 20; 0: off)"},
        {"slow-factor", LS_ARG_FLOAT, &o.slow_factor, "X",
         "slow rank: X x later than the other ranks' median (default 2)"},
        {"inject", LS_ARG_PATH, &o.inject, "PLAN.json", "fault-injection plan (docs/robust.md)"},
        {"status-port", LS_ARG_INT, &o.status_port, "P", "serve a status page and /metrics on P (0: off, -1: any)"},
        {"status-bind", LS_ARG_BIND, &o.status_bind, "ADDR",
         "status address, IPv4 or IPv6 (default 127.0.0.1; off loopback needs --status-key)"},
        {"status-key", LS_ARG_STR, &o.status_key, "KEY", "the status page answers only \"Authorization: Bearer KEY\""},
        {"ckpt-dir", LS_ARG_PATH, &o.ckpt_dir, "DIR", "disk checkpoints (default <report>.ckpt)"},
        {"report", LS_ARG_PATH, &o.report, "FILE", "JSON report: faults, timeline, ETTR, losses", 1},
        {"cold", LS_ARG_FLAG, &o.cold, NULL, "cold restarts: a new node, state from disk (baseline)"},
        {"no-prestart", LS_ARG_FLAG, &o.no_prestart, NULL, "no pre-started world: restarts start a fresh mpirun"},
        {"quiet", LS_ARG_FLAG, &o.quiet, NULL, "no timeline lines on stderr"},
    };
    int prc = ls_args("robust run",
                      "Runs `llmsys train` under a robust controller: one agent per node plus warm standbys, "
                      "fault detection, localization and recovery. Example:\n  llmsys robust run --nodes 2 "
                      "--ranks-per-node 2 --standby 1 --report r.json -- llmsys train --config tiny --data "
                      "/usr/share/common-licenses --steps 100 --out m.safetensors",
                      spec, LS_NARGS(spec), split, argv);
    if (prc >= 0) return prc;
    o.argc = split < argc ? argc - split - 1 : 0;
    o.argv = argv + split + 1;
    o.self = ls_cli_self();
    int rc = ls_robust_opts_check(&o); /* flags and the injection plan, before anything starts */
    if (rc < 0) return ls_cli_fail_rc(rc);
    ls_robust_result r;
    if (ls_robust_run(&o, &r) < 0) return ls_cli_fail(); /* the agents, the ranks: the run's */
    ls_robust_print_summary(o.report, stdout);
    if (r.completed) return 0;
    fprintf(stderr, "llmsys robust run: stopped at step %" PRId64 ": %s\n", r.end_step, r.diagnosis);
    return 1;
}

static int robust_agent_cmd(int argc, char **argv) {
    ls_agent_opts o = {.id = -1, .host = "localhost", .grace_s = 5};
    ls_arg spec[] = {
        {"id", LS_ARG_INT, &o.id, "N", "node id", 1},
        {"controller", LS_ARG_STR, &o.controller, "ENDPOINT", "controller endpoint (tcp://host:port)", 1},
        {"host", LS_ARG_STR, &o.host, "NAME", "this node's host name (default localhost)"},
        {"grace", LS_ARG_FLOAT, &o.grace_s, "S", "controller silent S seconds: stop ranks and exit (default 5)"},
    };
    int prc =
        ls_args("robust agent", "A node agent (started by `llmsys robust run`).", spec, LS_NARGS(spec), argc, argv);
    if (prc >= 0) return prc;
    if (o.id < 0 || !(o.grace_s > 0)) return ls_usage_err("robust agent", "--id must be >= 0 and --grace > 0");
    int rc = ls_zsec_check(o.controller, 0, "robust"); /* --controller, before the work */
    if (rc) return ls_cli_fail_rc(rc);
    return ls_agent_run(&o) < 0 ? ls_cli_fail() : 0; /* the controller's messages: the run's */
}

int cmd_robust(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"run", robust_run_cmd}, {"agent", robust_agent_cmd}};
    return ls_args_subcommand("robust", subs, LS_NARGS(subs), argc, argv,
                              "usage: llmsys robust run [options] -- llmsys train <its options>\n"
                              "       llmsys robust agent --id N --controller ENDPOINT   (started by run)\n\n"
                              "Runs a training job under a controller and per-node agents that detect, localize and\n"
                              "recover crashes, hangs, NaN/jumps and slow ranks (llmsys robust run --help).\n");
}

int cmd_sim_robust(int argc, char **argv) {
    ls_sim_table_opts o;
    ls_sim_table_defaults(&o);
    ls_sim_config *c = &o.c;
    int standbys_def = c->standbys; /* -1: P99 of the failures in a repair; a given count is >= 0 */
    c->standbys = LS_ARG_UNSET;
    ls_arg spec[] = {
        {"preset", LS_ARG_STR, &o.preset, "NAME", "byterobust (9,600 GPUs, 90 days) or llama3 (16,384 GPUs, 54 days)"},
        {"gpus", LS_ARG_INT, &c->gpus, "N", "GPUs (default 9600)"},
        {"gpus-per-node", LS_ARG_INT, &c->gpus_per_node, "N", "GPUs per machine (default 8)"},
        {"days", LS_ARG_FLOAT, &c->days, "D", "length of the job (default 90)"},
        {"policy", LS_ARG_STR, &o.policy, "P", "disk, memory, standby or all (default all)"},
        {"model", LS_ARG_STR, &o.model, "NAME", "catalog model sizing the checkpoint (default llama-3-70b)"},
        {"fail-rate", LS_ARG_FLOAT, &c->fail_per_1000_node_days, "R", "failures per 1000 node-days (default 6.5)"},
        {"interruptions", LS_ARG_FLOAT, &o.interruptions, "N", "failures over the whole job instead of --fail-rate"},
        {"step-s", LS_ARG_FLOAT, &c->step_s, "S", "training step time (default 10)"},
        {"disk-gbps", LS_ARG_FLOAT, &c->disk_GBps, "B", "per-machine storage bandwidth, GB/s (default 0.1)"},
        {"host-gbps", LS_ARG_FLOAT, &c->host_GBps, "B", "per-machine device-to-host bandwidth, GB/s (default 50)"},
        {"requeue-s", LS_ARG_FLOAT, &c->requeue_s, "S", "cold restart: reschedule and re-initialise (default 600)"},
        {"warm-s", LS_ARG_FLOAT, &c->warm_restart_s, "S", "restart on a warm standby (default requeue / 10.9)"},
        {"standbys", LS_ARG_INT, &c->standbys, "N", "warm standby machines (default: P99 of failures in a repair)"},
        {"repair-h", LS_ARG_FLOAT, &o.repair_h, "H", "hours until an evicted machine returns (default 6)"},
        {"trials", LS_ARG_INT, &c->trials, "N", "independent runs averaged (default 20)"},
        {"seed", LS_ARG_I64, &c->seed, "S", "random seed (default 1)"},
        {"out", LS_ARG_PATH, &o.out, "FILE", "write the table as JSON"},
    };
    int prc = ls_args("sim robust",
                      "Discrete-event simulation of a long training job under failures: ETTR per recovery "
                      "policy (disk checkpoints + requeue; in-memory checkpoints + requeue; in-memory + warm "
                      "standbys). Assumptions: docs/robust.md.",
                      spec, LS_NARGS(spec), argc, argv);
    if (prc >= 0) return prc;
    if (ls_args_given("sim robust", "standbys", &c->standbys, 0, standbys_def)) return 2;
    int rc = ls_sim_table(&o, stdout); /* checks the values, simulates here, writes --out (LS_EIO) */
    return rc < 0 ? ls_cli_fail_rc(rc) : 0;
}

/* 4 ranks on 2 nodes plus a warm standby survive a crash, a hang and a NaN (docs/robust.md). */
int demo_robust(const ls_demo_ctx *ctx) {
    int ok;
    if (ls_robust_demo(ctx->workdir, ls_cli_self(), ctx->quick, stdout, &ok) < 0) return ls_cli_fail();
    return ok ? 0 : 1;
}
