/* cmd_steal.c - `llmsys victim` (train, serve, make-data, make-task), `llmsys steal` (attack, eval), demo steal. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/steal.h"

/* The steal module's matmuls are small (batches of 128-512 rows): on shared cores
 * OpenBLAS's threads spin more than they help, so these commands run BLAS on one thread. */
static void blas_one_thread(void) { openblas_set_num_threads(1); }

/* ---------------------------------------------------------------- victim train */

static int victim_train(int argc, char **argv) {
    const char *type_s = NULL, *data = NULL, *out = NULL, *report = NULL;
    int64_t train_n = 0;
    int seed = 42, quiet = 0;
    /* what was given, for ls_victim_opts_given (not given: 0, --hidden LS_ARG_UNSET); the ranges
     * below refuse a given size under its minimum */
    ls_victim_opts g = {.hidden = LS_ARG_UNSET};
    ls_arg spec[] = {
        {"type", LS_ARG_STR, &type_s, "T", "logreg, svm, tree, forest, knn, nb, mlp or cnn (images only)", 1,
         LS_CHOICES(LS_VICTIM_TYPES)},
        {"data", LS_ARG_PATH, &data, "D",
         "fmnist[:DIR], blobs, rings, wine, cancer, digits or a CSV path (features, label; .gz ok)", 1},
        {"out", LS_ARG_PATH, &out, "FILE", "victim file to write (victim.bin)", 1},
        {"report", LS_ARG_PATH, &report, "FILE", "JSON summary (test accuracy, timings)"},
        {"train-n", LS_ARG_I64, &train_n, "N", "use at most N training rows (default all)", 0, LS_MIN(0)},
        {"epochs", LS_ARG_INT, &g.epochs, "N", "passes for logreg/svm/mlp/cnn", 0, LS_MIN(1)},
        {"hidden", LS_ARG_INT, &g.hidden, "N",
         "mlp hidden width (default 256); cnn fc hidden width, 0 none (default 128)", 0, LS_MIN(0)},
        {"conv1", LS_ARG_INT, &g.conv1, "N", "cnn: channels of conv layer 1 (default 16)", 0, LS_MIN(1)},
        {"conv2", LS_ARG_INT, &g.conv2, "N", "cnn: channels of conv layer 2 (default 32)", 0, LS_MIN(1)},
        {"kernel", LS_ARG_INT, &g.kernel, "N", "cnn: odd kernel size of both conv layers (default 3)", 0, LS_MIN(1)},
        {"trees", LS_ARG_INT, &g.trees, "N", "forest size (default 40)", 0, LS_MIN(1)},
        {"max-depth", LS_ARG_INT, &g.max_depth, "N", "tree/forest depth limit", 0, LS_MIN(1)},
        {"knn-ref", LS_ARG_I64, &g.knn_ref, "N", "knn reference rows kept (default 10000)", 0, LS_MIN(1)},
        {"seed", LS_ARG_INT, &seed, "S", "random seed (default 42)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = ls_args("victim train", "Trains a black-box victim classifier and reports its test accuracy.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    int type = ls_victim_type_parse(type_s); /* one of its names: the parser checked */
    ls_victim_opts o;
    ls_victim_opts_given(&o, type, &g);
    o.seed = (uint64_t)seed;
    o.verbose = !quiet;
    ls_victim_train_summary sm; /* checks, reads --data, trains here, writes --out and --report (LS_EIO) */
    if ((rc = ls_victim_train_file(&o, data, train_n, out, report, &sm))) return ls_cli_fail_rc(rc);
    printf("victim %s on %s: %lld train rows, %d features, %d classes; train accuracy %.4f, test accuracy %.4f "
           "(%lld test rows); trained in %.1f s -> %s\n",
           type_s, sm.data_name, (long long)sm.train_rows, sm.d, sm.k, sm.train_acc, sm.test_acc,
           (long long)sm.test_rows, sm.seconds, out);
    if (sm.has_scaler)
        printf("  (the train split's min-max scaler is stored in %s: the API takes %s's own units)\n", out,
               sm.data_name);
    if (type == LS_VICTIM_KNN) printf("  (knn keeps %lld reference rows, subsampled for prediction speed)\n", (long long)sm.knn_ref);
    return 0;
}

/* ---------------------------------------------------------------- victim serve */

static volatile int stop_flag;
static void on_signal(int sig) { stop_flag = sig; }

static int victim_serve(int argc, char **argv) {
    const char *model = NULL, *output = "label", *prada = "log", *port_file = NULL, *monitor = "off", *monitor_data = NULL;
    double duration = 0;
    ls_qmon_opts mo;
    ls_qmon_opts_default(&mo);
    ls_victim_server_opts so;
    ls_victim_server_opts_default(&so);
    so.port = 8090;
    so.budget = LS_ARG_UNSET64, so.rate_qps = NAN; /* not given: no budget, no limit (0 is not "none") */
    int conns = 0, per_ip = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &model, "FILE", "victim file (from victim train)", 1},
        {"port", LS_ARG_PORT, &so.port, "P", "TCP port (default 8090; 0 = any free port)"},
        {"port-file", LS_ARG_PATH, &port_file, "FILE", "write the bound port here (for scripts)"},
        {"bind", LS_ARG_BIND, &so.bind, "ADDR",
         "address to listen on, IPv4 or IPv6 (default 127.0.0.1; 0.0.0.0 / :: = all IPv4 / IPv6)"},
        {"keys", LS_ARG_PATH, &so.keys_path, "FILE",
         "API keys, one per line: NAME SECRET [BUDGET]; only these may query"},
        {"max-conns", LS_ARG_INT, &conns, "N", "open connections in total (default 512)", 0, LS_MIN(0)},
        {"max-conns-per-ip", LS_ARG_INT, &per_ip, "N", "open connections per client address (default 64)", 0,
         LS_MIN(0)},
        {"output", LS_ARG_STR, &output, "KIND", "label (default) or proba", 0, LS_CHOICES("label|proba")},
        {"budget", LS_ARG_I64, &so.budget, "Q", "query budget per key (--keys) or per address (default unlimited)"},
        {"rate", LS_ARG_FLOAT, &so.rate_qps, "QPS", "per-client rate limit in inputs/s (default unlimited)"},
        {"burst", LS_ARG_FLOAT, &so.burst, "N", "rate-limit bucket size in inputs (default 1024)"},
        {"max-batch", LS_ARG_INT, &so.max_batch, "N", "inputs per request (default 512)", 0, LS_MIN(1)},
        {"log", LS_ARG_PATH, &so.log_path, "FILE", "query log (JSON lines)"},
        {"prada", LS_ARG_STR, &prada, "MODE", "extraction detector: off, log (default), throttle, refuse", 0,
         LS_CHOICES(LS_DETECTOR_MODES)},
        {"prada-delta", LS_ARG_FLOAT, &so.prada.delta, "W", "flag when Shapiro-Wilk W < W (default 0.95)"},
        {"monitor", LS_ARG_STR, &monitor, "MODE", "query-distribution monitor: off (default), log, throttle, refuse", 0,
         LS_CHOICES(LS_DETECTOR_MODES)},
        {"monitor-data", LS_ARG_PATH, &monitor_data, "D", "the victim's training data (as victim train --data)"},
        {"monitor-z", LS_ARG_FLOAT, &mo.z, "Z", "monitor: flag when the outlier z-score exceeds Z (default 4)"},
        {"monitor-stats", LS_ARG_INT, &mo.image_stats, "0|1",
         "monitor, images: also profile each image's level and edge statistics (default 1; 0 = pixels only)", 0,
         LS_RANGE(0, 1)},
        {"throttle", LS_ARG_FLOAT, &so.throttle_s, "S",
         "throttle: seconds per input for a flagged client (default 0.2)"},
        {"admin-key", LS_ARG_STR, &so.admin_key, "KEY", "X-API-Key for GET /stats, exempt from budget, rate, detector"},
        {"model-units", LS_ARG_FLAG, &so.model_units, NULL,
         "take inputs already scaled into the model's range instead of the training data's units"},
        {"duration", LS_ARG_FLOAT, &duration, "S", "stop after S seconds (default: until SIGINT/SIGTERM)"},
    };
    int rc = ls_args("victim serve", "Serves a victim as a black-box prediction API: POST /predict.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    so.output_proba = !strcmp(output, "proba");
    so.prada_mode = ls_prada_mode_parse(prada);
    so.monitor_mode = ls_prada_mode_parse(monitor);
    const char *vs = "victim serve";
    if (ls_args_given64(vs, "budget", &so.budget, 1, 0)) return 2;
    if (!isnan(so.rate_qps) && !(so.rate_qps > 0)) /* the library's 0 is "unlimited" */
        return ls_usage_err(vs, "--rate must be > 0 inputs/s, got %g", so.rate_qps);
    so.rate_qps = isnan(so.rate_qps) ? 0 : so.rate_qps;
    if (duration < 0) return ls_usage_err(vs, "--duration must be >= 0, got %g", duration);
    if (ls_victim_serve_check(&so, monitor_data, &mo)) return ls_usage_err(vs, "%s", ls_errmsg());
    if (port_file && ls_out_path_check("port-file", port_file)) return ls_cli_fail(); /* before it serves */
    so.max_conns = (unsigned)conns, so.max_conns_per_ip = (unsigned)per_ip;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* start-up: --model, --keys and --monitor-data read, the port bound; then it only serves (a
     * client's bad request is answered, never the exit code) and writes --port-file (LS_EIO) */
    rc = ls_victim_serve_file(model, &so, monitor_data, &mo, port_file, duration, &stop_flag, stdout);
    return rc ? ls_cli_fail_rc(rc) : 0;
}

static int victim_make_data(int argc, char **argv) {
    const char *kind = "blobs", *out = NULL;
    int64_t n = 12000;
    int d = 20, k = 5, seed = 11;
    ls_arg spec[] = {
        {"kind", LS_ARG_STR, &kind, "K", "blobs (make_classification-style) or rings (nonlinear)", 0,
         LS_CHOICES("blobs|rings")},
        {"n", LS_ARG_I64, &n, "N", "rows (default 12000)"},
        {"features", LS_ARG_INT, &d, "D", "features (default 20)", 0, LS_RANGE(2, LS_TABLE_MAX_DIM)},
        {"classes", LS_ARG_INT, &k, "K", "classes (default 5)", 0, LS_RANGE(2, LS_TABLE_MAX_DIM)},
        {"seed", LS_ARG_INT, &seed, "S", "seed (default 11)"},
        {"out", LS_ARG_PATH, &out, "FILE", "CSV to write", 1},
    };
    int rc = ls_args("victim make-data", "Writes a reproducible synthetic CSV table (features, label).", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    /* the sizes checked before any work (2: --n past the bound), then the CSV written (1) */
    if ((rc = ls_steal_write_table(kind, n, d, k, (uint64_t)seed, out))) return ls_cli_fail_rc(rc);
    printf("wrote %s: %lld rows, %d features, %d classes (%s)\n", out, (long long)n, d, k, kind);
    return 0;
}

static int victim_make_task(int argc, char **argv) {
    const char *task = NULL, *out = NULL;
    int seed = 1;
    ls_arg spec[] = {
        {"task", LS_ARG_STR, &task, "T", "glyphs, shapes, textures, fmnist-inv (images); moons, checker, skewed", 1},
        {"seed", LS_ARG_INT, &seed, "S", "seed (default 1: the rows `--data T` trains on)"},
        {"out", LS_ARG_PATH, &out, "DIR", "directory to write (idx images for fmnist:DIR, or DIR/T.csv)", 1},
    };
    int rc = ls_args("victim make-task", "Writes a held-out task of the extraction audit to a directory.", spec,
                     LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (ls_steal_task_check(task)) return ls_usage_err("victim make-task", "--task: %s", ls_errmsg());
    char desc[2400];
    if (ls_steal_write_task(task, (uint64_t)seed, out, desc, sizeof desc)) return ls_cli_fail();
    printf("wrote %s\n", desc);
    return 0;
}

int cmd_victim(int argc, char **argv) {
    static const ls_subcmd subs[] = {{"train", victim_train},
                                     {"serve", victim_serve},
                                     {"make-data", victim_make_data},
                                     {"make-task", victim_make_task}};
    blas_one_thread();
    return ls_args_subcommand(
        "victim", subs, LS_NARGS(subs), argc, argv,
        "usage: llmsys victim train|serve|make-data|make-task [options]   (--help on each)\n"
        "  train      train logreg/svm/tree/forest/knn/nb/mlp/cnn on a dataset, write victim.bin\n"
        "  serve      serve a victim over HTTP (POST /predict) with budget, rate limit, PRADA\n"
        "  make-data  write a reproducible synthetic CSV table\n"
        "  make-task  write a held-out task (images or a table) to a directory\n");
}

/* ---------------------------------------------------------------- steal */

static int steal_eval(int argc, char **argv);

int cmd_steal(int argc, char **argv) {
    blas_one_thread();
    if (argc >= 2 && !strcmp(argv[1], "eval")) return steal_eval(argc - 1, argv + 1);
    const char *target = NULL, *shape_s = NULL, *range_s = "0,1", *out = NULL, *report = NULL, *key = NULL;
    const char *strategy = "synth";
    int seed = 1, no_proba = 0, quiet = 0;
    double timeout = 30;
    ls_steal_opts o;
    ls_steal_opts_default(&o);
    ls_arg spec[] = {
        {"target", LS_ARG_STR, &target, "URL",
         "victim API, e.g. http://127.0.0.1:8090/predict (IPv6: http://[::1]:8090/predict)", 1},
        {"input-shape", LS_ARG_STR, &shape_s, "C,H,W", "declared input shape (1,28,28 or 784)", 1},
        {"input-range", LS_ARG_STR, &range_s, "LO,HI", "declared input range (default 0,1)"},
        {"classes", LS_ARG_INT, &o.k, "K", "number of classes", 1, LS_RANGE(2, 64)},
        {"budget", LS_ARG_I64, &o.budget, "Q", "queries to spend (never exceeded)", 1, LS_MIN(1)},
        {"out", LS_ARG_PATH, &out, "FILE", "replica (safetensors)", 1},
        {"report", LS_ARG_PATH, &report, "FILE", "JSON summary"},
        {"api-key", LS_ARG_STR, &key, "KEY", "sent as X-API-Key"},
        {"strategy", LS_ARG_STR, &strategy, "S", "synth (default) or random (baseline)", 0, LS_CHOICES("synth|random")},
        {"label-only", LS_ARG_FLAG, &no_proba, NULL, "ignore probabilities even if the API gives them"},
        {"epochs", LS_ARG_INT, &o.final_epochs, "N", "final replica epochs (default 30)", 0, LS_MIN(1)},
        {"members", LS_ARG_INT, &o.members, "N", "replica networks averaged at prediction (default 3)", 0,
         LS_RANGE(1, LS_REPLICA_MAX_MEMBERS)},
        {"cnn-member", LS_ARG_INT, &o.cnn_member, "0|1",
         "images: 1 = add a small CNN of the answers when the attacker's own test keeps it (default 1; 0 = none, "
         "faster)",
         0, LS_RANGE(0, 1)},
        {"cnn-shift", LS_ARG_INT, &o.cnn_shift, "N",
         "images: the CNN member trained on answers moved by up to N pixels each way (default 0)", 0, LS_RANGE(0, 8)},
        {"cnn-epochs", LS_ARG_INT, &o.cnn_epochs, "N",
         "images: the CNN member's training epochs (default " LS_STR(LS_STEAL_CNN_EPOCHS) ")", 0, LS_RANGE(1, 1000)},
        {"cnn-weight", LS_ARG_FLOAT, &o.cnn_weight, "W",
         "images: the CNN member's softmax counts W times in the replica's sum and its test (default " LS_STR(
             LS_STEAL_CNN_WEIGHT) ")"},
        {"cnn-rank", LS_ARG_INT, &o.cnn_rank, "E",
         "images: when the CNN's test after the seeds keeps it, rank the rounds' queries with the MLP plus that "
         "CNN, refitted E epochs a round, unless the tree member's CART wins its test there first (default 0 = off)",
         0, LS_RANGE(0, LS_STEAL_CNN_RANK_MAX)},
        {"linear-member", LS_ARG_INT, &o.linear_member, "0|1",
         "images: 1 = add a softmax regression of the answers when the attacker's own test keeps it (default 1; "
         "0 = none)",
         0, LS_RANGE(0, 1)},
        {"distill", LS_ARG_FLOAT, &o.distill, "R",
         "images: unlabeled prior draws per answer the members are distilled on (default 1, 0 = off)"},
        {"batch", LS_ARG_INT, &o.batch, "N", "inputs per request (default 256)", 0, LS_MIN(1)},
        {"timeout", LS_ARG_FLOAT, &timeout, "S", "per-request network timeout (default 30)"},
        {"seed", LS_ARG_INT, &seed, "S", "random seed (default 1)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = ls_args("steal", "Extracts a replica of a black-box classifier over HTTP (steal eval --help: evaluation).",
                     spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    char *e;
    double hi = 0, lo = strtod(range_s, &e);
    if (ls_args_shape(shape_s, &o.c, &o.h, &o.w))
        return ls_usage_err("steal", "--input-shape expects C,H,W or N, got '%s'", shape_s);
    if (*e != ',' || (hi = strtod(e + 1, &e), *e) || !(fabs(lo) <= FLT_MAX && fabs(hi) <= FLT_MAX) ||
        !((float)hi > (float)lo))
        return ls_usage_err("steal", "--input-range expects finite LO,HI with LO < HI, got '%s'", range_s);
    if (!(timeout > 0 && timeout <= 86400)) return ls_usage_err("steal", "--timeout must be in (0, 86400] s");
    if (ls_path_replaces(out, report))
        return ls_usage_err("steal", "--report %s would replace the replica --out", report);
    /* each value refused by name (was: one line listing every rule) */
    if (ls_steal_opts_fit(&o)) return ls_usage_err("steal", "%s", ls_errmsg());
    if (ls_steal_target_check(target)) return ls_usage_err("steal", "--%s", ls_errmsg());
    o.lo = (float)lo;
    o.hi = (float)hi;
    o.strategy = strcmp(strategy, "random") ? LS_STEAL_SYNTH : LS_STEAL_RANDOM;
    o.seed = (uint64_t)seed;
    o.use_proba = !no_proba;
    o.verbose = !quiet;
    ls_steal_result res; /* all queries: a failure is the run's */
    if (ls_steal_attack_url(&o, target, key, timeout, out, report, &res)) return ls_cli_fail();
    printf("steal: %lld queries (budget %lld) in %d rounds, %s answers, %.1f s -> %s\n", (long long)res.queries,
           (long long)o.budget, res.rounds, res.used_proba ? "probability" : "label-only", res.seconds, out);
    if (res.stopped_early) {
        fprintf(stderr,
                "llmsys steal: target failed after %lld queries: %s (replica trained on what was gathered "
                "saved to %s)\n",
                (long long)res.queries, res.error, out);
        return 1;
    }
    return 0;
}

static int steal_eval(int argc, char **argv) {
    ls_steal_eval_opts eo;
    ls_steal_eval_opts_default(&eo);
    ls_arg spec[] = {
        {"replica", LS_ARG_PATH, &eo.replica, "FILE", "replica from llmsys steal", 1},
        {"target", LS_ARG_STR, &eo.target, "URL", "the victim API", 1},
        {"test-data", LS_ARG_PATH, &eo.data, "D",
         "a CSV file (all its rows are the test set) or a named dataset (its held-out test split)", 1},
        {"test-split", LS_ARG_FLOAT, &eo.test_split, "F",
         "CSV only: evaluate on a fraction F of the file instead (0.2 = the rows victim train held out)"},
        {"test-n", LS_ARG_I64, &eo.test_n, "N", "use N test rows (default all)", 0, LS_MIN(0)},
        {"api-key", LS_ARG_STR, &eo.api_key, "KEY", "X-API-Key for the evaluation queries"},
        {"baselines", LS_ARG_FLAG, &eo.baselines, NULL,
         "also train random-query and natural-data replicas (same budget)"},
        {"budget", LS_ARG_I64, &eo.budget, "Q", "baseline budget (default: the replica's own query count)", 0,
         LS_MIN(0)},
        {"epochs", LS_ARG_INT, &eo.epochs, "N", "baseline replica epochs (default 30)", 0, LS_MIN(1)},
        {"timeout", LS_ARG_FLOAT, &eo.timeout_s, "S", "network timeout (default 30)"},
        {"report", LS_ARG_PATH, &eo.report, "FILE", "JSON summary"},
    };
    int rc =
        ls_args("steal eval", "Agreement of a replica with the victim on held-out natural test data, and its accuracy.",
                spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (ls_steal_eval_opts_check(&eo)) return ls_usage_err("steal eval", "%s", ls_errmsg());
    ls_steal_eval_result r;
    int fail = ls_steal_eval(&eo, &r);
    if (r.evaluated)
        printf("eval on %s, %lld rows in %s: agreement with victim %.4f, replica accuracy %.4f (victim accuracy "
               "%.4f)\n",
               r.desc, (long long)r.test_rows, r.units, r.agreement, r.accuracy, r.victim_accuracy);
    for (int b = 0; b < 2; b++)
        if (r.has_base[b])
            printf("  baseline %-8s (%lld queries): agreement %.4f, accuracy %.4f\n", b ? "natural" : "random",
                   (long long)r.base_queries[b], r.base_agree[b], r.base_acc[b]);
        else if (b && r.natural_skipped)
            printf("  baseline natural skipped: the whole file is the test set (give --test-split to keep "
                   "natural rows apart)\n");
    return !fail ? 0 : r.queried ? ls_cli_fail() : ls_cli_fail_rc(fail);
}

/* ---------------------------------------------------------------- demo */

int demo_steal(const ls_demo_ctx *ctx) {
    char dir[1024];
    blas_one_thread();
    snprintf(dir, sizeof dir, "%s/steal", ctx->workdir);
    return ls_steal_demo(dir, ctx->quick, stdout) ? ls_cli_fail() : 0;
}
