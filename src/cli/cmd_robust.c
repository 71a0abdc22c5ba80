/* cmd_robust.c - `llmsys robust run|agent`, `llmsys sim robust` and the robust demo scenario. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/plan.h"
#include "llmsys/robust.h"

static int robust_usage(void) {
    printf("usage: llmsys robust run [options] -- llmsys train <its options>\n"
           "       llmsys robust agent --id N --controller ENDPOINT   (started by run)\n\n"
           "Runs a training job under a controller and per-node agents that detect, localize and\n"
           "recover crashes, hangs, NaN/jumps and slow ranks (llmsys robust run --help).\n");
    return 0;
}

static void print_summary(const char *report) {
    cJSON *j;
    if (ls_json_read_file(report, &j) < 0) return;
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(j, "faults");
    printf("\n  %-13s %5s %5s %6s %9s %9s %9s %9s %8s\n", "fault", "rank", "node", "step", "detect s", "locate s",
           "restart s", "redo s", "resumed");
    const cJSON *e;
    cJSON_ArrayForEach(e, fa) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind"), *rf = cJSON_GetObjectItemCaseSensitive(e, "resumed_from");
        printf("  %-13s %5d %5d %6d %9.2f %9.2f %9.2f %9.2f %8s\n", k ? k->valuestring : "?",
               cJSON_GetObjectItemCaseSensitive(e, "rank")->valueint, cJSON_GetObjectItemCaseSensitive(e, "node")->valueint,
               cJSON_GetObjectItemCaseSensitive(e, "step")->valueint,
               cJSON_GetObjectItemCaseSensitive(e, "detection_s")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(e, "localization_s")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(e, "restart_s")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(e, "recompute_s")->valuedouble, rf ? rf->valuestring : "-");
    }
    printf("\n  wall %.1f s, productive %.1f s, ETTR %.3f, %d restart(s); report %s\n",
           cJSON_GetObjectItemCaseSensitive(j, "wall_s")->valuedouble,
           cJSON_GetObjectItemCaseSensitive(j, "productive_s")->valuedouble,
           cJSON_GetObjectItemCaseSensitive(j, "ettr")->valuedouble,
           cJSON_GetObjectItemCaseSensitive(j, "restarts")->valueint, report);
    cJSON_Delete(j);
}

static int robust_run_cmd(int argc, char **argv) {
    int split = argc;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            split = i;
            break;
        }
    ls_robust_opts o;
    ls_robust_opts_defaults(&o);
    int quiet = 0, cold = 0;
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
        {"slow-factor", LS_ARG_FLOAT, &o.slow_factor, "X", "slow rank: X x later than the other ranks' median (default 2)"},
        {"inject", LS_ARG_STR, &o.inject, "PLAN.json", "fault-injection plan (docs/robust.md)"},
        {"status-port", LS_ARG_INT, &o.status_port, "P", "serve a status page and /metrics on P (0: off, -1: any)"},
        {"status-bind", LS_ARG_STR, &o.status_bind, "ADDR", "status address (default 127.0.0.1)"},
        {"ckpt-dir", LS_ARG_STR, &o.ckpt_dir, "DIR", "disk checkpoints (default <report>.ckpt)"},
        {"report", LS_ARG_STR, &o.report, "FILE", "JSON report: faults, timeline, ETTR, losses", 1},
        {"cold", LS_ARG_FLAG, &cold, NULL, "cold restarts: a new node, state from disk (baseline)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "no timeline lines on stderr"},
    };
    int prc = ls_args_parse("robust run",
                            "Runs `llmsys train` under a robust controller: one agent per node plus warm standbys, "
                            "fault detection, localization and recovery. Example:\n  llmsys robust run --nodes 2 "
                            "--ranks-per-node 2 --standby 1 --report r.json -- llmsys train --config tiny --data "
                            "/usr/share/common-licenses --steps 100 --out m.safetensors",
                            spec, (int)(sizeof spec / sizeof spec[0]), split, argv, NULL, 0, NULL);
    if (prc) return LS_ARGS_EXIT(prc);
    o.quiet = quiet;
    o.cold = cold;
    o.argc = split < argc ? argc - split - 1 : 0;
    o.argv = argv + split + 1;
    o.self = ls_cli_self();
    if (o.status_port < -1 || o.status_port > 65535) {
        fprintf(stderr, "llmsys robust run: --status-port must be in [-1, 65535]\n");
        return 2;
    }
    if (ls_robust_opts_check(&o) < 0) {
        fprintf(stderr, "llmsys robust run: %s\n", ls_errmsg());
        return 2;
    }
    if (o.inject) { /* a malformed plan is a usage error, found before anything starts */
        ls_fault_plan p;
        if (ls_fault_plan_load(o.inject, o.nodes * o.ranks_per_node, &p) < 0) {
            fprintf(stderr, "llmsys robust run: %s\n", ls_errmsg());
            return 2;
        }
        ls_fault_plan_free(&p);
    }
    ls_robust_result r;
    int rc = ls_robust_run(&o, &r);
    if (rc < 0) return ls_cli_fail();
    print_summary(o.report);
    if (!r.completed) {
        fprintf(stderr, "llmsys robust run: stopped at step %" PRId64 ": %s\n", r.end_step, r.diagnosis);
        return 1;
    }
    return 0;
}

static int robust_agent_cmd(int argc, char **argv) {
    ls_agent_opts o = {.id = -1, .host = "localhost", .grace_s = 5};
    ls_arg spec[] = {
        {"id", LS_ARG_INT, &o.id, "N", "node id", 1},
        {"controller", LS_ARG_STR, &o.controller, "ENDPOINT", "controller endpoint (tcp://host:port)", 1},
        {"host", LS_ARG_STR, &o.host, "NAME", "this node's host name (default localhost)"},
        {"grace", LS_ARG_FLOAT, &o.grace_s, "S", "controller silent S seconds: stop ranks and exit (default 5)"},
    };
    int prc = ls_args_parse("robust agent", "A node agent (started by `llmsys robust run`).", spec, 4, argc, argv, NULL,
                            0, NULL);
    if (prc) return LS_ARGS_EXIT(prc);
    if (o.id < 0 || !(o.grace_s > 0)) {
        fprintf(stderr, "llmsys robust agent: --id must be >= 0 and --grace > 0\n");
        return 2;
    }
    return ls_agent_run(&o) < 0 ? ls_cli_fail() : 0;
}

int cmd_robust(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        robust_usage();
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "run")) return robust_run_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "agent")) return robust_agent_cmd(argc - 1, argv + 1);
    fprintf(stderr, "llmsys robust: unknown subcommand '%s' (run, agent)\n", argv[1]);
    return 2;
}

/* ---------------------------------------------------------------- sim robust */

/* Training state bytes of a catalog model: bf16 weights, fp32 master weights and two fp32
 * AdamW moments (16 bytes per parameter). */
static int model_state_bytes(const char *name, double *bytes, double *params) {
    ls_plan_catalog *cat;
    LS_TRY(ls_plan_catalog_load(NULL, &cat));
    ls_plan_arch a;
    int rc = ls_plan_catalog_model(cat, name, &a);
    ls_plan_catalog_free(cat);
    LS_TRY(rc);
    double d = a.d_model, kv = (double)a.n_kv_head / a.n_head;
    double per_layer = d * d * (2 + 2 * kv) + (a.gated ? 3.0 : 2.0) * d * a.d_ff;
    *params = a.n_layer * per_layer + (a.tied ? 1 : 2) * (double)a.vocab * d + (a.pos_embed ? a.n_ctx * d : 0);
    *bytes = *params * 16;
    return LS_OK;
}

int cmd_sim_robust(int argc, char **argv) {
    ls_sim_config c;
    ls_sim_defaults(&c);
    const char *policy = "all", *model = "llama-3-70b", *preset = NULL, *out = NULL;
    double interruptions = 0;
    ls_arg spec[] = {
        {"preset", LS_ARG_STR, &preset, "NAME", "byterobust (9,600 GPUs, 90 days) or llama3 (16,384 GPUs, 54 days)"},
        {"gpus", LS_ARG_INT, &c.gpus, "N", "GPUs (default 9600)"},
        {"gpus-per-node", LS_ARG_INT, &c.gpus_per_node, "N", "GPUs per machine (default 8)"},
        {"days", LS_ARG_FLOAT, &c.days, "D", "length of the job (default 90)"},
        {"policy", LS_ARG_STR, &policy, "P", "disk, memory, standby or all (default all)"},
        {"model", LS_ARG_STR, &model, "NAME", "catalog model sizing the checkpoint (default llama-3-70b)"},
        {"fail-rate", LS_ARG_FLOAT, &c.fail_per_1000_node_days, "R", "failures per 1000 node-days (default 6.5)"},
        {"interruptions", LS_ARG_FLOAT, &interruptions, "N", "failures over the whole job instead of --fail-rate"},
        {"step-s", LS_ARG_FLOAT, &c.step_s, "S", "training step time (default 10)"},
        {"disk-gbps", LS_ARG_FLOAT, &c.disk_GBps, "B", "per-machine storage bandwidth, GB/s (default 0.1)"},
        {"host-gbps", LS_ARG_FLOAT, &c.host_GBps, "B", "per-machine device-to-host bandwidth, GB/s (default 50)"},
        {"requeue-s", LS_ARG_FLOAT, &c.requeue_s, "S", "cold restart: reschedule and re-initialise (default 600)"},
        {"warm-s", LS_ARG_FLOAT, &c.warm_restart_s, "S", "restart on a warm standby (default requeue / 10.9)"},
        {"standbys", LS_ARG_INT, &c.standbys, "N", "warm standby machines (default: P99 of failures in a repair)"},
        {"repair-h", LS_ARG_FLOAT, &c.repair_s, "H", "hours until an evicted machine returns (default 6)"},
        {"trials", LS_ARG_INT, &c.trials, "N", "independent runs averaged (default 20)"},
        {"seed", LS_ARG_I64, &c.seed, "S", "random seed (default 1)"},
        {"out", LS_ARG_STR, &out, "FILE", "write the table as JSON"},
    };
    c.repair_s = 6;
    c.trials = 20;
    double warm_default = c.warm_restart_s;
    int prc = ls_args_parse("sim robust",
                            "Discrete-event simulation of a long training job under failures: ETTR per recovery "
                            "policy (disk checkpoints + requeue; in-memory checkpoints + requeue; in-memory + warm "
                            "standbys). Assumptions: docs/robust.md.",
                            spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (prc) return LS_ARGS_EXIT(prc);
    c.repair_s *= 3600;
    if (preset && !strcmp(preset, "llama3")) {
        /* Llama 3: 466 interruptions in 54 days on 16,384 GPUs (405B) */
        c.gpus = 16384;
        c.days = 54;
        interruptions = interruptions > 0 ? interruptions : 466;
        model = "405e9";
        /* its storage: 2 TB/s sustained over 2,048 machines, about 1 GB/s each */
        if (c.disk_GBps == 0.1) c.disk_GBps = 1.0;
    } else if (preset && strcmp(preset, "byterobust") != 0) {
        fprintf(stderr, "llmsys sim robust: --preset must be byterobust or llama3\n");
        return 2;
    }
    if (c.warm_restart_s == warm_default) c.warm_restart_s = c.requeue_s / 10.9;
    int pol = -1;
    if (!strcmp(policy, "disk")) pol = LS_SIM_DISK;
    else if (!strcmp(policy, "memory")) pol = LS_SIM_MEMORY;
    else if (!strcmp(policy, "standby")) pol = LS_SIM_STANDBY;
    else if (strcmp(policy, "all") != 0) {
        fprintf(stderr, "llmsys sim robust: --policy must be disk, memory, standby or all\n");
        return 2;
    }
    if (c.gpus < 1 || c.gpus_per_node < 1 || c.gpus % c.gpus_per_node || c.trials < 1 || c.trials > 10000) {
        fprintf(stderr, "llmsys sim robust: --gpus must be a positive multiple of --gpus-per-node; --trials in [1, 10000]\n");
        return 2;
    }
    double params = 0;
    char *end;
    double p = strtod(model, &end);
    if (*model && !*end && p > 0) {
        params = p;
        c.ckpt_bytes = p * 16;
    } else if (model_state_bytes(model, &c.ckpt_bytes, &params) < 0) {
        fprintf(stderr, "llmsys sim robust: %s\n", ls_errmsg());
        return 2;
    }
    if (interruptions > 0) c.fail_per_1000_node_days = interruptions / ((double)c.gpus / c.gpus_per_node * c.days) * 1000;
    printf("%d GPUs (%d machines), %.0f days, %.2f failures per 1000 machine-days; state %.2f TB (%.0fB params x 16 B)\n",
           c.gpus, c.gpus / c.gpus_per_node, c.days, c.fail_per_1000_node_days, c.ckpt_bytes / 1e12, params / 1e9);
    printf("\n  %-8s %7s %9s %9s %9s %9s %9s %9s %8s\n", "policy", "ETTR", "failures", "detect h", "locate h",
           "restart h", "redo h", "ckpt h", "no-spare");
    cJSON *arr = cJSON_CreateArray();
    static const char *const names[] = {"disk", "memory", "standby"};
    for (int k = 0; k < 3; k++) {
        if (pol >= 0 && k != pol) continue;
        c.policy = k;
        ls_sim_result r;
        if (ls_sim_run(&c, &r) < 0) {
            cJSON_Delete(arr);
            fprintf(stderr, "llmsys sim robust: %s\n", ls_errmsg());
            return 2;
        }
        printf("  %-8s %6.2f%% %9d %9.1f %9.1f %9.1f %9.1f %9.1f %8d\n", names[k], 100 * r.ettr, r.failures,
               r.lost_detect_s / 3600, r.lost_localize_s / 3600, r.lost_restart_s / 3600, r.lost_recompute_s / 3600,
               r.lost_ckpt_s / 3600, r.standby_misses);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "policy", names[k]);
        cJSON_AddNumberToObject(e, "ettr", r.ettr);
        cJSON_AddNumberToObject(e, "failures", r.failures);
        cJSON_AddNumberToObject(e, "lost_detect_s", r.lost_detect_s);
        cJSON_AddNumberToObject(e, "lost_localize_s", r.lost_localize_s);
        cJSON_AddNumberToObject(e, "lost_restart_s", r.lost_restart_s);
        cJSON_AddNumberToObject(e, "lost_recompute_s", r.lost_recompute_s);
        cJSON_AddNumberToObject(e, "lost_ckpt_s", r.lost_ckpt_s);
        cJSON_AddNumberToObject(e, "standby_misses", r.standby_misses);
        cJSON_AddItemToArray(arr, e);
    }
    int rc = 0;
    if (out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "command", "sim robust");
        cJSON_AddNumberToObject(j, "gpus", c.gpus);
        cJSON_AddNumberToObject(j, "days", c.days);
        cJSON_AddNumberToObject(j, "fail_per_1000_node_days", c.fail_per_1000_node_days);
        cJSON_AddItemToObject(j, "policies", arr);
        arr = NULL;
        if (ls_json_write_file(out, j) < 0) rc = ls_cli_fail();
        cJSON_Delete(j);
    }
    cJSON_Delete(arr);
    return rc;
}

/* ---------------------------------------------------------------- demo */

/* 4 ranks on 2 nodes plus a warm standby; a crash, a hang and a NaN injected and recovered
 * without help; evicted nodes come back after a short "repair". Then the simulator's view
 * of the same policies at 9,600 GPUs. */
int demo_robust(const ls_demo_ctx *ctx) {
    int quick = ctx->quick;
    char dir[4096], corpus[4200], plan[4200], report[4200], out[4200];
    snprintf(dir, sizeof dir, "%s/robust", ctx->workdir);
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(plan, sizeof plan, "%s/faults.json", dir);
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    if (ls_mkdirs(dir) < 0) return ls_cli_fail();
    /* text: generated lines, so the scenario needs nothing from the machine */
    size_t cap = 200000, n = 0;
    char *text = malloc(cap);
    if (!text) return ls_cli_fail();
    for (int i = 1; n + 120 < cap; i++)
        n += (size_t)snprintf(text + n, cap - n, "line %d: the quick brown fox jumps over the lazy dog %d times; copy %d.\n",
                              i, i * 7 % 13, i % 5);
    int rc = ls_file_write_atomic(corpus, text, n);
    free(text);
    int steps = quick ? 36 : 450;
    int a = steps / 4, b = steps / 2, cst = 3 * steps / 4;
    char pj[512];
    snprintf(pj, sizeof pj,
             "{\"faults\": [{\"kind\": \"crash\", \"step\": %d, \"rank\": 3},\n"
             "            {\"kind\": \"hang\", \"step\": %d, \"rank\": 1},\n"
             "            {\"kind\": \"nan\", \"step\": %d, \"rank\": 2}]}\n",
             a, b, cst);
    if (rc == LS_OK) rc = ls_file_write_atomic(plan, pj, strlen(pj));
    if (rc < 0) return ls_cli_fail();
    char stepsb[16];
    snprintf(stepsb, sizeof stepsb, "%d", steps);
    char *argv[] = {"llmsys", "train", "--config", "tiny", "--data", corpus, "--batch", "16", "--seq", "64",
                    "--steps", stepsb, "--threads", "1", "--log-every", "1000000", "--out", out, NULL};
    ls_robust_opts o;
    ls_robust_opts_defaults(&o);
    o.nodes = 2;
    o.ranks_per_node = 2;
    o.standby = 1;
    o.hang_timeout = quick ? 2 : 5;
    o.repair_s = quick ? 0.5 : 5;
    o.inject = plan;
    o.report = report;
    o.self = ls_cli_self();
    o.argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    o.argv = argv;
    printf("training the tiny GPT for %d steps on 4 ranks (2 nodes x 2) + 1 warm standby;\n"
           "injected: crash of rank 3 at step %d, hang of rank 1 at step %d, NaN on rank 2 at step %d\n\n",
           steps, a, b, cst);
    fflush(stdout);
    ls_robust_result r;
    rc = ls_robust_run(&o, &r);
    if (rc < 0) return ls_cli_fail();
    cJSON *j;
    if (ls_json_read_file(report, &j) == LS_OK) {
        printf("timeline:\n");
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "timeline")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "t"), *ev = cJSON_GetObjectItemCaseSensitive(e, "event"),
                        *d = cJSON_GetObjectItemCaseSensitive(e, "detail");
            printf("  %7.2f s  %-9s %s\n", t->valuedouble, ev->valuestring, d->valuestring);
        }
        cJSON_Delete(j);
    }
    print_summary(report);
    printf("\n  %d fault(s) detected, %d restart(s), %s; ETTR %.3f over %.1f s "
           "(short runs pay the start-up and every restart in full)\n",
           r.faults, r.restarts, r.completed ? "training completed" : r.diagnosis, r.ettr, r.wall_s);
    /* the same policies at cluster scale */
    ls_sim_config sc;
    ls_sim_defaults(&sc);
    sc.trials = quick ? 2 : 10;
    printf("\nsimulated, 9,600 GPUs for 90 days (llmsys sim robust):");
    static const char *const pn[] = {"disk + requeue", "memory + requeue", "memory + warm standby"};
    for (int k = 0; k < 3; k++) {
        sc.policy = k;
        ls_sim_result sr;
        if (ls_sim_run(&sc, &sr) == LS_OK) printf("%s %s %.1f%%", k ? "," : "", pn[k], 100 * sr.ettr);
    }
    printf("\n");
    return r.completed && r.faults >= 3 ? 0 : 1;
}
