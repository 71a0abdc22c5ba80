/* cmd_serve.c - `llmsys quantize`, `serve`, `profile` and the serve demo scenario. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* ---------------------------------------------------------------- quantize */

int cmd_quantize(int argc, char **argv) {
    ls_quantize_opts o = ls_quantize_defaults();
    ls_strlist eval = {0};
    int64_t eval_tokens = 0;
    double bpb_f = 0, bpb_q = 0;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &o.model, "PATH", "fp32 checkpoint to quantize", 1},
        {"out", LS_ARG_PATH, &o.out, "PATH", "quantized checkpoint to write", 1},
        {"bits", LS_ARG_INT, &o.bits, "B", "one width for every layer: 16, 8, 4 or 3"},
        {"bits-map", LS_ARG_PATH, &o.bits_map, "FILE", "per-layer widths: JSON {\"bits\":[..]} or a list of integers"},
        {"group", LS_ARG_INT, &o.group, "G", "columns per quantization group: 32, 64, 128, 256 (default 64)"},
        {"eval", LS_ARG_PATH_LIST, &eval, "PATH", "also report held-out bits/byte on this corpus, fp32 vs quantized"},
        {"heldout", LS_ARG_FLOAT, &o.heldout, "FRAC", "held-out share of the corpus, as in training (default 0.05)"},
        {"eval-tokens", LS_ARG_I64, &eval_tokens, "N", "evaluate at most N tokens (default all)", 0, LS_MIN(0)},
        {"report", LS_ARG_PATH, &o.report, "FILE", "write a JSON summary"},
    };
    int rc = ls_args("quantize", "Quantizes a checkpoint, each layer at its own bit width (group-wise RTN).", spec,
                     LS_NARGS(spec), argc, argv);
    o.eval = (const char *const *)eval.v, o.n_eval = eval.n, o.eval_tokens = (size_t)eval_tokens;
    ls_quantize_result q = {0};
    int st = rc < 0 ? ls_quantize(&o, &q) : LS_OK; /* checks all first; reads --model, writes --out */
    if (st != LS_OK) rc = ls_cli_fail_rc(st);
    if (rc < 0) { /* quantized and written */
        rc = 0;
        printf("quantized %s -> %s in %.2f s: %d layers, group %d, bits [", o.model, o.out, q.seconds, q.n_layer,
               o.group);
        for (int l = 0; l < q.n_layer; l++) printf("%s%d", l ? "," : "", q.bits[l]);
        printf("], layer weights %.2f MiB (fp32 %.2f MiB)\n", q.weight_bytes / 1048576.0, q.fp32_bytes / 1048576.0);
        if (eval.n)
            rc = ls_quant_eval_heldout(o.model, o.out, o.eval, eval.n, o.heldout, o.eval_tokens, &bpb_f, &bpb_q);
        if (eval.n && rc == LS_OK)
            printf("held-out bits/byte: fp32 %.4f, quantized %.4f (%+.4f)\n", bpb_f, bpb_q, bpb_q - bpb_f);
        if (rc == LS_OK && o.report)
            rc = ls_quantize_report_write(o.report, o.model, o.out, o.group, &q, eval.n > 0, bpb_f, bpb_q);
        if (rc < 0) rc = ls_cli_fail(); /* after --out is written: the run's */
    }
    ls_quantize_result_free(&q);
    ls_strlist_free(&eval);
    return rc;
}

/* ---------------------------------------------------------------- serve */

static int run_worker(const ls_server_opts *o, const char *plan, int stage, const char *in, const char *out) {
    if (!plan || !in || !out) return ls_usage_err("serve --worker", "needs --plan FILE, --stage I, --in and --out");
    ls_worker_opts w = {o->model, plan, stage, o->max_seqs, o->nthreads, in, out};
    if (ls_serve_worker_run(&w) != LS_OK) {
        fprintf(stderr, "llmsys: stage %d: %s\n", stage, ls_errmsg());
        return 1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    ls_server_opts o = ls_server_defaults();
    o.port = 8080; /* the host: loopback, as every service by default */
    o.api_key = getenv("LLMSYS_API_KEY");
    if (o.api_key && !*o.api_key) o.api_key = NULL; /* an empty variable is no key; an empty --api-key is refused */
    const char *plan_path = NULL, *port_file = NULL, *w_in = NULL, *w_out = NULL;
    int worker = 0, stage = 0, conns = 0, per_ip = 0, load_timeout = (int)o.load_timeout_s;
    int64_t max_body = (int64_t)o.max_body;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &o.model, "PATH", "checkpoint to serve (fp32 or quantized)", 1},
        {"plan", LS_ARG_PATH, &plan_path, "FILE", "pipeline plan (docs/plan-format.md); default one stage"},
        {"port", LS_ARG_PORT, &o.port, "P", "HTTP port (default 8080; 0 picks a free one)"},
        {"bind", LS_ARG_BIND, &o.host, "ADDR",
         "HTTP bind address, IPv4 or IPv6 (default 127.0.0.1; ::1: IPv6 loopback)"},
        {"host", LS_ARG_BIND, &o.host, "ADDR", "same as --bind"},
        {"api-key", LS_ARG_STR, &o.api_key, "KEY",
         "require \"Authorization: Bearer KEY\" on /v1/ (default $LLMSYS_API_KEY; needed off loopback)"},
        {"max-conns", LS_ARG_INT, &conns, "N", "open HTTP connections in total (0: default 512)", 0, LS_MIN(0)},
        {"max-conns-per-ip", LS_ARG_INT, &per_ip, "N", "open HTTP connections per client address (0: default 64)", 0,
         LS_MIN(0)},
        {"port-file", LS_ARG_PATH, &port_file, "FILE", "write the bound port here once serving"},
        {"max-seqs", LS_ARG_INT, &o.max_seqs, "N", "concurrent sequences / KV slots per stage (default 16)", 0,
         LS_RANGE(1, 4096)},
        {"threads", LS_ARG_INT, &o.nthreads, "N", "kernel threads per stage (default 1)", 0,
         LS_RANGE(1, LS_MODEL_MAX_THREADS)},
        {"max-body", LS_ARG_I64, &max_body, "BYTES", "largest request body (default 65536)", 0, LS_MIN(16)},
        {"prefill-mb", LS_ARG_INT, &o.mb_prefill, "N", "prefill micro-batch without a plan (default 2)", 0,
         LS_RANGE(1, 1024)},
        {"decode-mb", LS_ARG_INT, &o.mb_decode, "N", "decode micro-batch without a plan (default 8)", 0,
         LS_RANGE(1, 1024)},
        {"stage-restarts", LS_ARG_INT, &o.stage_restarts, "N",
         "start a stage that dies again, up to N times per stage (default 3; 0: it stays dead)", 0,
         LS_RANGE(0, 1000000)},
        {"load-timeout", LS_ARG_INT, &load_timeout, "SECONDS",
         "a stage loads and answers a ping within this, at start and after a restart (a restarted one is killed "
         "past it) (default 120)",
         0, LS_RANGE(1, 86400)},
        {"served-model-name", LS_ARG_STR, &o.model_name, "NAME",
         "name in /v1/models and responses (default: the checkpoint's file stem)"},
        {"name", LS_ARG_STR, &o.model_name, "NAME", "same as --served-model-name"},
        {"worker", LS_ARG_FLAG, &worker, NULL, "(internal) run one pipeline stage"},
        {"stage", LS_ARG_INT, &stage, "I", "(worker) the stage of --plan to run"},
        {"in", LS_ARG_STR, &w_in, "ENDPOINT", "(worker) ZeroMQ endpoint to bind"},
        {"out", LS_ARG_STR, &w_out, "ENDPOINT", "(worker) ZeroMQ endpoint of the next stage"},
    };
    int rc = ls_args("serve", "Serves a model over HTTP (OpenAI-style /v1/completions), pipeline-parallel by plan.",
                     spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    if (worker) return run_worker(&o, plan_path, stage, w_in, w_out);
    if (port_file && ls_out_path_check("port-file", port_file)) return ls_cli_fail(); /* before the stages start */
    /* block the stop signals in every thread; the main thread waits for them below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    o.plan_path = plan_path;
    o.self = ls_cli_self();
    o.max_body = (size_t)max_body;
    o.max_conns = (unsigned)conns, o.max_conns_per_ip = (unsigned)per_ip;
    o.load_timeout_s = load_timeout;
    ls_server *s; /* start-up: the stages load the checked model, the HTTP port is bound (LS_EIO if taken) */
    if ((rc = ls_server_start(&s, &o)) != LS_OK) return ls_cli_fail_rc(rc);
    char uh[80];
    printf("llmsys serve: %s on http://%s:%d with %d stage(s) (POST /v1/completions, GET /health, GET /metrics)\n",
           o.model, ls_url_host(o.host, uh, sizeof uh), ls_server_port(s), ls_server_num_stages(s));
    fflush(stdout);
    printf("llmsys serve: served as '%s' (GET /v1/models, POST /v1/chat/completions)\n", ls_server_model_name(s));
    fflush(stdout);
    if (port_file && ls_port_file_write(port_file, ls_server_port(s)) != LS_OK) {
        ls_server_stop(s);
        return ls_cli_fail();
    }
    int sig = 0;
    sigwait(&set, &sig);
    printf("llmsys serve: signal %d, shutting down\n", sig);
    ls_server_stop(s);
    return 0;
}

/* ---------------------------------------------------------------- profile */

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *bits_s = "16,8,4,3", *batch_s = "1,2,4,8", *seq_s = "16,32,64",
               *ctx_s = "16,64,128";
    int reps = 3, threads = 1;
    ls_arg spec[] = {
        {"model", LS_ARG_PATH, &model, "PATH", "fp32 checkpoint whose layer shapes are profiled", 1},
        {"out", LS_ARG_PATH, &out, "FILE", "device profile to write (JSON, docs/plan-format.md)", 1},
        {"bits", LS_ARG_STR, &bits_s, "LIST", "bit widths (default 16,8,4,3)"},
        {"batches", LS_ARG_STR, &batch_s, "LIST", "micro-batch sizes (default 1,2,4,8)"},
        {"seqs", LS_ARG_STR, &seq_s, "LIST", "prefill lengths (default 16,32,64)"},
        {"ctxs", LS_ARG_STR, &ctx_s, "LIST", "decode context lengths (default 16,64,128)"},
        {"reps", LS_ARG_INT, &reps, "N", "timings per point after a warm-up, median kept (default 3)"},
        {"threads", LS_ARG_INT, &threads, "N", "kernel threads (default 1, as one serve stage)"},
    };
    int rc = ls_args("profile", "Measures per-layer prefill/decode latency per bit width for the planner.", spec, LS_NARGS(spec), argc, argv);
    if (rc >= 0) return rc;
    int *lists[4] = {NULL, NULL, NULL, NULL}, counts[4];
    const char *srcs[4] = {bits_s, batch_s, seq_s, ctx_s};
    for (int i = 0; i < 4; i++) counts[i] = ls_args_int_list(srcs[i], ",", &lists[i]);
    ls_profile_opts o = ls_profile_defaults();
    o.bits = lists[0], o.n_bits = counts[0];
    o.batches = lists[1], o.n_batches = counts[1];
    o.seqs = lists[2], o.n_seqs = counts[2];
    o.ctxs = lists[3], o.n_ctxs = counts[3];
    o.reps = reps, o.nthreads = threads;
    rc = 0;
    if (ls_profile_opts_check(&o)) {
        fprintf(stderr, "llmsys profile: %s\n", ls_errmsg());
        rc = 2;
    } else if (ls_out_path_check("out", out)) { /* before the measurement, not after it */
        rc = ls_cli_fail();
    }
    if (rc) {
        for (int k = 0; k < 4; k++) free(lists[k]);
        return rc;
    }
    cJSON *j = NULL;
    double t0 = ls_now();
    rc = ls_profile_run(model, &o, &j);
    for (int k = 0; k < 4; k++) free(lists[k]);
    if (rc != LS_OK) return ls_cli_fail_rc(rc); /* --model read, then measured here */
    rc = ls_json_write_file(out, j);
    if (rc == LS_OK) {
        cJSON *lk = cJSON_GetObjectItem(j, "link");
        printf("profile of %s written to %s in %.1f s: %d prefill and %d decode points; link %.1f us, %.2f GB/s\n", model, out,
               ls_now() - t0, cJSON_GetArraySize(cJSON_GetObjectItem(j, "prefill")),
               cJSON_GetArraySize(cJSON_GetObjectItem(j, "decode")), cJSON_GetObjectItem(lk, "latency_s")->valuedouble * 1e6,
               cJSON_GetObjectItem(lk, "bandwidth_Bps")->valuedouble / 1e9);
    }
    cJSON_Delete(j);
    return rc == LS_OK ? 0 : ls_cli_fail();
}

/* ---------------------------------------------------------------- demo */

int demo_serve(const ls_demo_ctx *ctx) {
    return ls_serve_demo(stdout, ctx->workdir, ls_cli_self(), ctx->quick) < 0 ? ls_cli_fail() : 0;
}
