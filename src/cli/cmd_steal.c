/* cmd_steal.c - `llmsys victim` (train, serve, make-data), `llmsys steal` (attack, eval) and
 * the steal demo scenario. */
#include <cblas.h>
#include <cjson/cJSON.h>
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
    int64_t train_n = 0, knn_ref = 0;
    int epochs = 0, trees = 0, depth = 0, seed = 42, quiet = 0, hidden = -1, conv1 = 0, conv2 = 0, kernel = 0;
    ls_arg spec[] = {
        {"type", LS_ARG_STR, &type_s, "T", "logreg, svm, tree, forest, knn, nb, mlp or cnn (images only)", 1},
        {"data", LS_ARG_STR, &data, "D",
         "fmnist[:DIR], blobs, rings, wine, cancer, digits or a CSV path (features, label; .gz ok)", 1},
        {"out", LS_ARG_STR, &out, "FILE", "victim file to write (victim.bin)", 1},
        {"report", LS_ARG_STR, &report, "FILE", "JSON summary (test accuracy, timings)"},
        {"train-n", LS_ARG_I64, &train_n, "N", "use at most N training rows (default all)"},
        {"epochs", LS_ARG_INT, &epochs, "N", "passes for logreg/svm/mlp/cnn"},
        {"hidden", LS_ARG_INT, &hidden, "N",
         "mlp hidden width (default 256); cnn fc hidden width, 0 none (default 128)"},
        {"conv1", LS_ARG_INT, &conv1, "N", "cnn: channels of conv layer 1 (default 16)"},
        {"conv2", LS_ARG_INT, &conv2, "N", "cnn: channels of conv layer 2 (default 32)"},
        {"kernel", LS_ARG_INT, &kernel, "N", "cnn: odd kernel size of both conv layers (default 3)"},
        {"trees", LS_ARG_INT, &trees, "N", "forest size (default 40)"},
        {"max-depth", LS_ARG_INT, &depth, "N", "tree/forest depth limit"},
        {"knn-ref", LS_ARG_I64, &knn_ref, "N", "knn reference rows kept (default 10000)"},
        {"seed", LS_ARG_INT, &seed, "S", "random seed (default 42)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = ls_args_parse("victim train", "Trains a black-box victim classifier and reports its test accuracy.", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    int type = ls_victim_type_parse(type_s);
    if (type < 0) {
        fprintf(stderr, "llmsys victim train: unknown --type '%s' (logreg, svm, tree, forest, knn, nb, mlp, cnn)\n",
                type_s);
        return 2;
    }
    ls_steal_data tr, te;
    if (ls_steal_dataset_open(data, train_n, &tr, &te)) return ls_cli_fail();
    ls_victim_opts o;
    ls_victim_opts_default(&o, type);
    if (epochs > 0) o.epochs = epochs;
    if (trees > 0) o.trees = trees;
    if (depth > 0) o.max_depth = depth;
    if (knn_ref > 0) o.knn_ref = knn_ref;
    if (hidden >= 0) o.hidden = hidden;
    if (conv1 > 0) o.conv1 = conv1;
    if (conv2 > 0) o.conv2 = conv2;
    if (kernel > 0) o.kernel = kernel;
    o.seed = (uint64_t)seed;
    o.verbose = !quiet;
    double t0 = ls_now();
    ls_victim *v;
    if (ls_victim_train(&o, &tr, &v)) {
        ls_steal_data_free(&tr);
        ls_steal_data_free(&te);
        return ls_cli_fail();
    }
    double t_train = ls_now() - t0, acc = 0, tacc = 0;
    int fail = ls_victim_accuracy(v, &te, &acc) || ls_victim_accuracy(v, &tr, &tacc) || ls_victim_save(v, out);
    if (!fail) {
        printf("victim %s on %s: %lld train rows, %d features, %d classes; train accuracy %.4f, test accuracy %.4f "
               "(%lld test rows); trained in %.1f s -> %s\n",
               type_s, tr.name, (long long)tr.n, tr.d, tr.k, tacc, acc, (long long)te.n, t_train, out);
        if (tr.raw_min)
            printf("  (the train split's min-max scaler is stored in %s: the API takes %s's own units)\n", out, tr.name);
        if (type == LS_VICTIM_KNN)
            printf("  (knn keeps %lld reference rows, subsampled for prediction speed)\n",
                   (long long)(o.knn_ref < tr.n ? o.knn_ref : tr.n));
    }
    if (!fail && report) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "type", type_s);
        cJSON_AddStringToObject(j, "data", data);
        cJSON_AddNumberToObject(j, "train_rows", (double)tr.n);
        cJSON_AddNumberToObject(j, "test_rows", (double)te.n);
        cJSON_AddNumberToObject(j, "train_accuracy", tacc);
        cJSON_AddNumberToObject(j, "test_accuracy", acc);
        cJSON_AddNumberToObject(j, "train_seconds", t_train);
        cJSON_AddStringToObject(j, "out", out);
        fail = ls_json_write_file(report, j);
        cJSON_Delete(j);
    }
    ls_victim_free(v);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return fail ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- victim serve */

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { stop_flag = sig; }

static int victim_serve(int argc, char **argv) {
    const char *model = NULL, *output = "label", *log = NULL, *prada = "log", *admin = NULL, *port_file = NULL;
    const char *bind = "127.0.0.1", *keys = NULL;
    int port = 8090, max_batch = 512, model_units = 0, conns = 0, per_ip = 0;
    int64_t budget = 0;
    double rate = 0, burst = 1024, delta = 0.95, duration = 0, throttle = 0.2;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "FILE", "victim file (from victim train)", 1},
        {"port", LS_ARG_INT, &port, "P", "TCP port (default 8090; 0 = any free port)"},
        {"port-file", LS_ARG_STR, &port_file, "FILE", "write the bound port here (for scripts)"},
        {"bind", LS_ARG_STR, &bind, "ADDR", "address to listen on (default 127.0.0.1; 0.0.0.0 = all)"},
        {"keys", LS_ARG_STR, &keys, "FILE", "API keys, one per line: NAME SECRET [BUDGET]; only these may query"},
        {"max-conns", LS_ARG_INT, &conns, "N", "open connections in total (default 512)"},
        {"max-conns-per-ip", LS_ARG_INT, &per_ip, "N", "open connections per client address (default 64)"},
        {"output", LS_ARG_STR, &output, "KIND", "label (default) or proba"},
        {"budget", LS_ARG_I64, &budget, "Q", "query budget per key (--keys) or per address (default unlimited)"},
        {"rate", LS_ARG_FLOAT, &rate, "QPS", "per-client rate limit in inputs/s (default unlimited)"},
        {"burst", LS_ARG_FLOAT, &burst, "N", "rate-limit bucket size in inputs (default 1024)"},
        {"max-batch", LS_ARG_INT, &max_batch, "N", "inputs per request (default 512)"},
        {"log", LS_ARG_STR, &log, "FILE", "query log (JSON lines)"},
        {"prada", LS_ARG_STR, &prada, "MODE", "extraction detector: off, log (default), throttle, refuse"},
        {"prada-delta", LS_ARG_FLOAT, &delta, "W", "flag when Shapiro-Wilk W < W (default 0.95)"},
        {"throttle", LS_ARG_FLOAT, &throttle, "S", "throttle: seconds per input for a flagged client (default 0.2)"},
        {"admin-key", LS_ARG_STR, &admin, "KEY", "X-API-Key for GET /stats, exempt from budget, rate, detector"},
        {"model-units", LS_ARG_FLAG, &model_units, NULL,
         "take inputs already scaled into the model's range instead of the training data's units"},
        {"duration", LS_ARG_FLOAT, &duration, "S", "stop after S seconds (default: until SIGINT/SIGTERM)"},
    };
    int rc = ls_args_parse("victim serve", "Serves a victim as a black-box prediction API: POST /predict.", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    ls_victim_server_opts so;
    ls_victim_server_opts_default(&so);
    if (!strcmp(output, "proba"))
        so.output_proba = 1;
    else if (strcmp(output, "label")) {
        fprintf(stderr, "llmsys victim serve: --output must be label or proba, got '%s'\n", output);
        return 2;
    }
    so.prada_mode = ls_prada_mode_parse(prada);
    if (so.prada_mode < 0) {
        fprintf(stderr, "llmsys victim serve: --prada must be off, log, throttle or refuse, got '%s'\n", prada);
        return 2;
    }
    if (port < 0 || port > 65535 || max_batch < 1 || !(delta > 0 && delta < 1) || conns < 0 || per_ip < 0) {
        fprintf(stderr,
                "llmsys victim serve: --port 0..65535, --max-batch >= 1, --prada-delta in (0,1), --max-conns* >= 0 (0: default)\n");
        return 2;
    }
    so.port = port;
    so.budget = budget;
    so.rate_qps = rate;
    so.burst = burst;
    so.max_batch = max_batch;
    so.log_path = log;
    so.prada.delta = delta;
    so.throttle_s = throttle;
    so.admin_key = admin;
    so.model_units = model_units;
    so.bind = bind;
    so.max_conns = (unsigned)conns;
    so.max_conns_per_ip = (unsigned)per_ip;
    so.keys_path = keys;
    ls_victim *v;
    if (ls_victim_load(model, &v)) return ls_cli_fail();
    ls_victim_server *srv;
    if (ls_victim_server_start(v, &so, &srv)) {
        ls_victim_free(v);
        return ls_cli_fail();
    }
    int d, k, shape[3];
    float lo, hi;
    ls_victim_info(v, &d, &k, &lo, &hi, shape);
    const char *units =
        ls_victim_server_input_range(srv, &lo, &hi) ? "the training data's units, per-feature ranges in GET /info" : "";
    printf("victim %s serving on http://%s:%d/predict (input %dx%dx%d in [%g,%g]%s%s, %d classes, output %s, "
           "PRADA %s)\n",
           ls_victim_type_name(ls_victim_kind(v)), bind, ls_victim_server_port(srv), shape[0], shape[1], shape[2], lo, hi,
           units[0] ? ", " : "", units, k, output, prada);
    fflush(stdout);
    if (port_file) {
        char b[32];
        int n = snprintf(b, sizeof b, "%d\n", ls_victim_server_port(srv));
        if (ls_file_write_atomic(port_file, b, (size_t)n)) {
            ls_victim_server_stop(srv);
            ls_victim_free(v);
            return ls_cli_fail();
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    double t0 = ls_now();
    while (!stop_flag && (duration <= 0 || ls_now() - t0 < duration)) ls_sleep_ms(50);
    cJSON *st = ls_victim_server_stats(srv);
    char *txt = cJSON_PrintUnformatted(st);
    printf("victim serve: stopping; stats %s\n", txt ? txt : "{}");
    free(txt);
    cJSON_Delete(st);
    ls_victim_server_stop(srv);
    ls_victim_free(v);
    return 0;
}

static int victim_make_data(int argc, char **argv) {
    const char *kind = "blobs", *out = NULL;
    int64_t n = 12000;
    int d = 20, k = 5, seed = 11;
    ls_arg spec[] = {
        {"kind", LS_ARG_STR, &kind, "K", "blobs (make_classification-style) or rings (nonlinear)"},
        {"n", LS_ARG_I64, &n, "N", "rows (default 12000)"},
        {"features", LS_ARG_INT, &d, "D", "features (default 20)"},
        {"classes", LS_ARG_INT, &k, "K", "classes (default 5)"},
        {"seed", LS_ARG_INT, &seed, "S", "seed (default 11)"},
        {"out", LS_ARG_STR, &out, "FILE", "CSV to write", 1},
    };
    int rc = ls_args_parse("victim make-data", "Writes a reproducible synthetic CSV table (features, label).", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    ls_steal_data t;
    if (ls_steal_make_table(kind, n, d, k, (uint64_t)seed, &t)) return ls_cli_fail();
    rc = ls_steal_csv_write(out, &t);
    ls_steal_data_free(&t);
    if (rc) return ls_cli_fail();
    printf("wrote %s: %lld rows, %d features, %d classes (%s)\n", out, (long long)n, d, k, kind);
    return 0;
}

int cmd_victim(int argc, char **argv) {
    blas_one_thread();
    if (argc >= 2 && !strcmp(argv[1], "train")) return victim_train(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "serve")) return victim_serve(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "make-data")) return victim_make_data(argc - 1, argv + 1);
    FILE *f = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout : stderr;
    fprintf(f, "usage: llmsys victim train|serve|make-data [options]   (--help on each)\n"
               "  train      train logreg/svm/tree/forest/knn/nb/mlp/cnn on a dataset, write victim.bin\n"
               "  serve      serve a victim over HTTP (POST /predict) with budget, rate limit, PRADA\n"
               "  make-data  write a reproducible synthetic CSV table\n");
    return f == stdout ? 0 : 2;
}

/* ---------------------------------------------------------------- steal */

static int steal_eval(int argc, char **argv);

int cmd_steal(int argc, char **argv) {
    blas_one_thread();
    if (argc >= 2 && !strcmp(argv[1], "eval")) return steal_eval(argc - 1, argv + 1);
    const char *target = NULL, *shape_s = NULL, *range_s = "0,1", *out = NULL, *report = NULL, *key = NULL;
    const char *strategy = "synth";
    int k = 0, epochs = 30, seed = 1, batch = 256, no_proba = 0, quiet = 0, members = 3;
    int64_t budget = 0;
    double timeout = 30;
    ls_arg spec[] = {
        {"target", LS_ARG_STR, &target, "URL", "victim API, e.g. http://127.0.0.1:8090/predict", 1},
        {"input-shape", LS_ARG_STR, &shape_s, "C,H,W", "declared input shape (1,28,28 or 784)", 1},
        {"input-range", LS_ARG_STR, &range_s, "LO,HI", "declared input range (default 0,1)"},
        {"classes", LS_ARG_INT, &k, "K", "number of classes", 1},
        {"budget", LS_ARG_I64, &budget, "Q", "queries to spend (never exceeded)", 1},
        {"out", LS_ARG_STR, &out, "FILE", "replica (safetensors)", 1},
        {"report", LS_ARG_STR, &report, "FILE", "JSON summary"},
        {"api-key", LS_ARG_STR, &key, "KEY", "sent as X-API-Key"},
        {"strategy", LS_ARG_STR, &strategy, "S", "synth (default) or random (baseline)"},
        {"label-only", LS_ARG_FLAG, &no_proba, NULL, "ignore probabilities even if the API gives them"},
        {"epochs", LS_ARG_INT, &epochs, "N", "final replica epochs (default 30)"},
        {"members", LS_ARG_INT, &members, "N", "replica networks averaged at prediction (default 3)"},
        {"batch", LS_ARG_INT, &batch, "N", "inputs per request (default 256)"},
        {"timeout", LS_ARG_FLOAT, &timeout, "S", "per-request network timeout (default 30)"},
        {"seed", LS_ARG_INT, &seed, "S", "random seed (default 1)"},
        {"quiet", LS_ARG_FLAG, &quiet, NULL, "no progress bar"},
    };
    int rc = ls_args_parse("steal",
                           "Extracts a replica of a black-box classifier over HTTP (llmsys steal eval --help for "
                           "evaluation).",
                           spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    ls_steal_opts o;
    ls_steal_opts_default(&o);
    double lo, hi;
    char *e;
    if (ls_args_shape(shape_s, &o.c, &o.h, &o.w)) {
        fprintf(stderr, "llmsys steal: --input-shape expects C,H,W or N, got '%s'\n", shape_s);
        return 2;
    }
    lo = strtod(range_s, &e);
    if (*e != ',' || (hi = strtod(e + 1, &e), *e) || !(hi > lo)) {
        fprintf(stderr, "llmsys steal: --input-range expects LO,HI with LO < HI, got '%s'\n", range_s);
        return 2;
    }
    if (k < 2 || k > 64 || budget < 1 || batch < 1 || epochs < 1 || members < 1 || members > LS_REPLICA_MAX_MEMBERS) {
        fprintf(stderr,
                "llmsys steal: need --classes 2..64, --budget >= 1, --batch >= 1, --epochs >= 1, --members 1..%d\n",
                LS_REPLICA_MAX_MEMBERS);
        return 2;
    }
    if (strcmp(strategy, "synth") && strcmp(strategy, "random")) {
        fprintf(stderr, "llmsys steal: --strategy must be synth or random, got '%s'\n", strategy);
        return 2;
    }
    o.lo = (float)lo;
    o.hi = (float)hi;
    o.k = k;
    o.budget = budget;
    o.strategy = strcmp(strategy, "random") ? LS_STEAL_SYNTH : LS_STEAL_RANDOM;
    o.seed = (uint64_t)seed;
    o.batch = batch;
    o.final_epochs = epochs;
    o.members = members;
    o.use_proba = !no_proba;
    o.verbose = !quiet;
    ls_steal_client *cl;
    if (ls_steal_client_init(target, key, timeout, o.c * o.h * o.w, k, &cl)) return ls_cli_fail();
    ls_replica *r = NULL;
    ls_steal_result res;
    rc = ls_steal_run(&o, ls_steal_client_oracle(cl), &r, &res);
    ls_steal_client_free(cl);
    if (rc) return ls_cli_fail();
    cJSON *j = ls_steal_result_json(target, strategy, &o, &res);
    char *meta = cJSON_PrintUnformatted(j);
    rc = ls_replica_save(r, out, meta);
    free(meta);
    ls_replica_free(r);
    if (!rc && report) rc = ls_json_write_file(report, j);
    cJSON_Delete(j);
    if (rc) return ls_cli_fail();
    printf("steal: %lld queries (budget %lld) in %d rounds, %s answers, %.1f s -> %s\n", (long long)res.queries,
           (long long)budget, res.rounds, res.used_proba ? "probability" : "label-only", res.seconds, out);
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
    const char *replica = NULL, *target = NULL, *data = NULL, *key = NULL, *report = NULL;
    int64_t test_n = 0, budget = 0;
    int baselines = 0, epochs = 30;
    double timeout = 30, test_split = 0;
    ls_arg spec[] = {
        {"replica", LS_ARG_STR, &replica, "FILE", "replica from llmsys steal", 1},
        {"target", LS_ARG_STR, &target, "URL", "the victim API", 1},
        {"test-data", LS_ARG_STR, &data, "D",
         "a CSV file (all its rows are the test set) or a named dataset (its held-out test split)", 1},
        {"test-split", LS_ARG_FLOAT, &test_split, "F",
         "CSV only: evaluate on a fraction F of the file instead (0.2 = the rows victim train held out)"},
        {"test-n", LS_ARG_I64, &test_n, "N", "use N test rows (default all)"},
        {"api-key", LS_ARG_STR, &key, "KEY", "X-API-Key for the evaluation queries"},
        {"baselines", LS_ARG_FLAG, &baselines, NULL, "also train random-query and natural-data replicas (same budget)"},
        {"budget", LS_ARG_I64, &budget, "Q", "baseline budget (default: the replica's own query count)"},
        {"epochs", LS_ARG_INT, &epochs, "N", "baseline replica epochs (default 30)"},
        {"timeout", LS_ARG_FLOAT, &timeout, "S", "network timeout (default 30)"},
        {"report", LS_ARG_STR, &report, "FILE", "JSON summary"},
    };
    int rc = ls_args_parse("steal eval",
                           "Agreement of a replica with the victim on held-out natural test data, and its accuracy.",
                           spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    if (test_split < 0 || test_split >= 1 || (test_split > 0 && ls_steal_dataset_is_named(data))) {
        fprintf(stderr, "llmsys steal eval: --test-split takes a fraction in (0, 1) and a CSV file (%s has its own "
                        "held-out split)\n", data);
        return 2;
    }
    ls_replica *r;
    if (ls_replica_load(replica, &r)) return ls_cli_fail();
    ls_steal_data tr, te_full, te;
    char desc[1200];
    if (ls_steal_testset_open(data, test_split, &tr, &te_full, desc, sizeof desc)) {
        ls_replica_free(r);
        return ls_cli_fail();
    }
    int fail = ls_steal_data_subset(&te_full, test_n, 3, &te);
    int64_t full_n = te_full.n;
    ls_steal_data_free(&te_full);
    if (!fail && te.n < full_n) {
        size_t l = strlen(desc);
        snprintf(desc + l, sizeof desc - l, ", %lld of them by --test-n", (long long)te.n);
    }
    int d, k;
    ls_replica_info(r, &d, &k);
    if (!fail && (d != te.d || k != te.k))
        fail = ls_err(LS_EINVAL, "replica is %d features / %d classes but %s has %d / %d", d, k, data, te.d, te.k);
    ls_steal_client *cl = NULL;
    int32_t *vlab = NULL;
    double agree = 0, acc = 0, vacc = 0;
    const char *units = "as given";
    if (!fail) fail = ls_steal_client_init(target, key, timeout, te.d, te.k, &cl);
    if (!fail) {
        ls_steal_data *sets[2] = {&te, &tr};
        fail = ls_steal_match_units(cl, sets, 2, &units);
    }
    if (!fail) {
        vlab = malloc(sizeof(int32_t) * (size_t)te.n);
        fail = vlab ? ls_steal_client_labels(cl, &te, vlab) : ls_err(LS_ENOMEM, "out of memory");
    }
    if (!fail) fail = ls_steal_agreement(r, &te, vlab, &agree, &acc);
    if (!fail) {
        vacc = ls_steal_label_accuracy(vlab, &te);
        printf("eval on %s, %lld rows in %s: agreement with victim %.4f, replica accuracy %.4f (victim accuracy "
               "%.4f)\n",
               desc, (long long)te.n, units, agree, acc, vacc);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "test_data", desc);
    cJSON_AddStringToObject(j, "units", units);
    cJSON_AddNumberToObject(j, "test_rows", (double)te.n);
    cJSON_AddNumberToObject(j, "agreement", agree);
    cJSON_AddNumberToObject(j, "accuracy", acc);
    cJSON_AddNumberToObject(j, "victim_accuracy", vacc);
    if (!fail && baselines) {
        if (budget <= 0) budget = ls_replica_recorded_queries(replica);
        if (budget <= 0) fail = ls_err(LS_EINVAL, "baselines need --budget (the replica records no query count)");
        const char *names[2] = {"random", "natural"};
        int strat[2] = {LS_STEAL_RANDOM, LS_STEAL_NATURAL};
        for (int b = 0; b < 2 && !fail; b++) {
            if (strat[b] == LS_STEAL_NATURAL && tr.n == 0) {
                /* natural queries must not be the test rows themselves */
                printf("  baseline natural skipped: the whole file is the test set (give --test-split to keep "
                       "natural rows apart)\n");
                continue;
            }
            ls_steal_opts o;
            ls_steal_opts_default(&o);
            ls_steal_opts_for_data(&o, &te);
            o.budget = budget;
            o.strategy = strat[b];
            o.natural = &tr;
            o.final_epochs = epochs;
            o.use_proba = 0;
            o.verbose = 1;
            ls_replica *br;
            ls_steal_result res;
            fail = ls_steal_run(&o, ls_steal_client_oracle(cl), &br, &res);
            double ba = 0, bacc = 0;
            if (!fail) fail = ls_steal_agreement(br, &te, vlab, &ba, &bacc);
            if (!fail) {
                printf("  baseline %-8s (%lld queries): agreement %.4f, accuracy %.4f\n", names[b],
                       (long long)res.queries, ba, bacc);
                cJSON *bj = cJSON_AddObjectToObject(j, names[b]);
                cJSON_AddNumberToObject(bj, "queries", (double)res.queries);
                cJSON_AddNumberToObject(bj, "agreement", ba);
                cJSON_AddNumberToObject(bj, "accuracy", bacc);
                ls_replica_free(br);
            }
        }
    }
    if (!fail && report) fail = ls_json_write_file(report, j);
    cJSON_Delete(j);
    free(vlab);
    ls_steal_client_free(cl);
    ls_replica_free(r);
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    return fail ? ls_cli_fail() : 0;
}

/* ---------------------------------------------------------------- demo */

int demo_steal(const ls_demo_ctx *ctx) {
    char dir[1024];
    blas_one_thread();
    snprintf(dir, sizeof dir, "%s/steal", ctx->workdir);
    if (ls_mkdirs(dir)) return ls_cli_fail();
    int64_t train_n = ctx->quick ? 1500 : 20000, test_n = ctx->quick ? 500 : 5000;
    int64_t budgets_full[2] = {1000, 5000}, budgets_quick[1] = {300};
    const int64_t *budgets = ctx->quick ? budgets_quick : budgets_full;
    int nb = ctx->quick ? 1 : 2;
    int types[2] = {LS_VICTIM_LOGREG, LS_VICTIM_MLP};
    ls_steal_data tr, te_full, te;
    if (ls_steal_dataset_open("fmnist", train_n, &tr, &te_full)) return ls_cli_fail();
    if (ls_steal_data_subset(&te_full, test_n, 3, &te)) return ls_cli_fail();
    ls_steal_data_free(&te_full);
    printf("Fashion-MNIST: %lld train rows for the victims, %lld held-out test rows for agreement\n", (long long)tr.n,
           (long long)te.n);
    printf("%-7s %8s %7s %10s %10s %9s %s\n", "victim", "v.acc", "budget", "agreement", "random", "time", "PRADA");
    int fail = 0;
    for (int t = 0; t < 2 && !fail; t++) {
        ls_victim_opts vo;
        ls_victim_opts_default(&vo, types[t]);
        if (ctx->quick) {
            vo.epochs = 3;
            vo.hidden = 64;
        }
        ls_victim *v;
        if (ls_victim_train(&vo, &tr, &v)) return ls_cli_fail();
        char path[1100];
        snprintf(path, sizeof path, "%s/%s.bin", dir, ls_victim_type_name(types[t]));
        ls_victim *vl = NULL;
        double vacc = 0;
        fail = ls_victim_save(v, path) || ls_victim_load(path, &vl) || ls_victim_accuracy(vl, &te, &vacc);
        ls_victim_free(v);
        if (fail) break;
        ls_victim_server_opts so;
        ls_victim_server_opts_default(&so);
        so.admin_key = "auditor";
        so.prada_mode = LS_PRADA_LOG;
        /* the two attackers of each budget are told apart by their keys (secret = name) */
        ls_victim_key keys[4] = {{{0}}};
        for (int b = 0; b < nb; b++)
            for (int s = 0; s < 2; s++) {
                ls_victim_key *kk = &keys[2 * b + s];
                snprintf(kk->name, sizeof kk->name, "%s-%lld", s ? "random" : "attacker", (long long)budgets[b]);
                memcpy(kk->secret, kk->name, sizeof kk->name);
            }
        so.keys = keys;
        so.n_keys = 2 * nb;
        snprintf(path, sizeof path, "%s/%s-queries.log", dir, ls_victim_type_name(types[t]));
        so.log_path = path;
        ls_victim_server *srv;
        if (ls_victim_server_start(vl, &so, &srv)) {
            ls_victim_free(vl);
            return ls_cli_fail();
        }
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/predict", ls_victim_server_port(srv));
        ls_steal_client *aud = NULL;
        int32_t *vlab = malloc(sizeof(int32_t) * (size_t)te.n);
        fail = !vlab || ls_steal_client_init(url, "auditor", 30, te.d, te.k, &aud) ||
               ls_steal_client_labels(aud, &te, vlab);
        ls_steal_client_free(aud);
        for (int b = 0; b < nb && !fail; b++) {
            double ag[2] = {0, 0};
            int64_t flagged[2] = {-1, -1};
            double secs = 0;
            for (int s = 0; s < 2 && !fail; s++) {
                char key[64];
                snprintf(key, sizeof key, "%s-%lld", s ? "random" : "attacker", (long long)budgets[b]);
                ls_steal_client *cl;
                fail = ls_steal_client_init(url, key, 30, te.d, te.k, &cl);
                if (fail) break;
                ls_steal_opts o;
                ls_steal_opts_default(&o);
                o.budget = budgets[b];
                o.strategy = s ? LS_STEAL_RANDOM : LS_STEAL_SYNTH;
                o.use_proba = 0;
                o.final_epochs = ctx->quick ? 15 : 20;
                o.members = 1; /* one network keeps the demo quick; `llmsys steal` averages 3 */
                if (ctx->quick) o.hidden1 = 64, o.hidden2 = 32;
                o.seed = 7;
                ls_replica *r;
                ls_steal_result res;
                fail = ls_steal_run(&o, ls_steal_client_oracle(cl), &r, &res);
                ls_steal_client_free(cl);
                if (fail) break;
                if (!s) secs = res.seconds;
                fail = ls_steal_agreement(r, &te, vlab, &ag[s], NULL);
                if (!s && !fail && b == nb - 1) {
                    snprintf(path, sizeof path, "%s/%s-replica.safetensors", dir, ls_victim_type_name(types[t]));
                    fail = ls_replica_save(r, path, NULL);
                }
                ls_replica_free(r);
                char id[80];
                snprintf(id, sizeof id, "key:%s", key);
                ls_victim_server_client(srv, id, NULL, &flagged[s], NULL);
            }
            if (fail) break;
            char fl[64];
            if (flagged[0] >= 0)
                snprintf(fl, sizeof fl, "flagged after %lld queries", (long long)flagged[0]);
            else
                snprintf(fl, sizeof fl, "not flagged");
            printf("%-7s %8.3f %7lld %10.3f %10.3f %8.1fs %s\n", ls_victim_type_name(types[t]), vacc,
                   (long long)budgets[b], ag[0], ag[1], secs, fl);
            fflush(stdout);
        }
        free(vlab);
        ls_victim_server_stop(srv);
        ls_victim_free(vl);
    }
    ls_steal_data_free(&tr);
    ls_steal_data_free(&te);
    if (fail) return ls_cli_fail();
    printf("agreement = label agreement with the victim on held-out natural test images (the published metric);\n"
           "random = a replica from the same number of uniform random queries. Files under %s\n",
           dir);
    return 0;
}
