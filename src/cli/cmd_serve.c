/* cmd_serve.c - `llmsys quantize`, `serve`, `profile` and the serve demo scenario. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "llmsys/core.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

/* ---------------------------------------------------------------- quantize */

static int quantize_main(const char *model, const char *out, const char *bits_map, int bits, int group,
                         const ls_strlist *evalp, double heldout, int64_t eval_tokens, const char *report) {
    const ls_strlist eval = *evalp;
    if ((bits != 0) == (bits_map != NULL)) {
        fprintf(stderr, "llmsys quantize: give exactly one of --bits B or --bits-map FILE\n");
        return 2;
    }
    if (bits && bits != 16 && bits != 8 && bits != 4 && bits != 3) {
        fprintf(stderr, "llmsys quantize: --bits must be 16, 8, 4 or 3, got %d\n", bits);
        return 2;
    }
    if (!ls_quant_group_valid(group)) {
        fprintf(stderr, "llmsys quantize: --group must be 32, 64, 128 or 256, got %d\n", group);
        return 2;
    }
    ls_quantize_result q;
    if (ls_quantize(model, out, bits_map, bits, group, &q) != LS_OK) return ls_cli_fail();
    const int *map = q.bits, n = q.n_layer;
    printf("quantized %s -> %s in %.2f s: %d layers, group %d, bits [", model, out, q.seconds, n, group);
    for (int l = 0; l < n; l++) printf("%s%d", l ? "," : "", map[l]);
    printf("], layer weights %.2f MiB (fp32 %.2f MiB)\n", q.weight_bytes / 1048576.0, q.fp32_bytes / 1048576.0);
    double bpb_q = 0, bpb_f = 0;
    if (eval.n) {
        if (ls_quant_eval_heldout(model, out, eval.v, eval.n, heldout, (size_t)eval_tokens, &bpb_f, &bpb_q) != LS_OK) {
            ls_quantize_result_free(&q);
            return ls_cli_fail();
        }
        printf("held-out bits/byte: fp32 %.4f, quantized %.4f (%+.4f)\n", bpb_f, bpb_q, bpb_q - bpb_f);
    }
    if (report) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model);
        cJSON_AddStringToObject(j, "out", out);
        cJSON_AddNumberToObject(j, "group", group);
        cJSON_AddItemToObject(j, "bits", cJSON_CreateIntArray(map, n));
        cJSON_AddNumberToObject(j, "weight_bytes", (double)q.weight_bytes);
        cJSON_AddNumberToObject(j, "seconds", q.seconds);
        if (eval.n) {
            cJSON_AddNumberToObject(j, "bpb_fp32", bpb_f);
            cJSON_AddNumberToObject(j, "bpb_quantized", bpb_q);
        }
        int wrc = ls_json_write_file(report, j);
        cJSON_Delete(j);
        if (wrc != LS_OK) {
            ls_quantize_result_free(&q);
            return ls_cli_fail();
        }
    }
    ls_quantize_result_free(&q);
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *bits_map = NULL, *report = NULL;
    ls_strlist eval = {0};
    int bits = 0, group = 64;
    int64_t eval_tokens = 0;
    double heldout = 0.05;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "PATH", "fp32 checkpoint to quantize", 1},
        {"out", LS_ARG_STR, &out, "PATH", "quantized checkpoint to write", 1},
        {"bits", LS_ARG_INT, &bits, "B", "one width for every layer: 16, 8, 4 or 3"},
        {"bits-map", LS_ARG_STR, &bits_map, "FILE", "per-layer widths: JSON {\"bits\":[..]} or a list of integers"},
        {"group", LS_ARG_INT, &group, "G", "columns per quantization group: 32, 64, 128, 256 (default 64)"},
        {"eval", LS_ARG_STR_LIST, &eval, "PATH", "also report held-out bits/byte on this corpus, fp32 vs quantized"},
        {"heldout", LS_ARG_FLOAT, &heldout, "FRAC", "held-out share of the corpus, as in training (default 0.05)"},
        {"eval-tokens", LS_ARG_I64, &eval_tokens, "N", "evaluate at most N tokens (default all)"},
        {"report", LS_ARG_STR, &report, "FILE", "write a JSON summary"},
    };
    int rc = ls_args_parse("quantize", "Quantizes a checkpoint, each layer at its own bit width (group-wise RTN).", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) {
        ls_strlist_free(&eval);
        return LS_ARGS_EXIT(rc);
    }
    rc = quantize_main(model, out, bits_map, bits, group, &eval, heldout, eval_tokens, report);
    ls_strlist_free(&eval);
    return rc;
}

/* ---------------------------------------------------------------- serve */

static int run_worker(const char *model, const char *plan, int stage, int max_seqs, int threads, const char *in,
                      const char *out) {
    if (!plan || !in || !out) {
        fprintf(stderr, "llmsys serve --worker: needs --plan FILE, --stage I, --in and --out\n");
        return 2;
    }
    ls_worker_opts o = {model, plan, stage, max_seqs, threads, in, out};
    if (ls_serve_worker_run(&o) != LS_OK) {
        fprintf(stderr, "llmsys: stage %d: %s\n", stage, ls_errmsg());
        return 1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *plan_path = NULL, *host = "127.0.0.1", *port_file = NULL, *name = NULL;
    const char *w_in = NULL, *w_out = NULL;
    int port = 8080, max_seqs = 16, threads = 1, worker = 0, stage = 0, mbp = 2, mbd = 8, conns = 0, per_ip = 0;
    int64_t max_body = 64 * 1024;
    ls_arg spec[] = {
        {"model", LS_ARG_STR, &model, "PATH", "checkpoint to serve (fp32 or quantized)", 1},
        {"plan", LS_ARG_STR, &plan_path, "FILE", "pipeline plan (docs/plan-format.md); default one stage"},
        {"port", LS_ARG_INT, &port, "P", "HTTP port (default 8080; 0 picks a free one)"},
        {"bind", LS_ARG_STR, &host, "ADDR", "HTTP bind address (default 127.0.0.1)"},
        {"host", LS_ARG_STR, &host, "ADDR", "same as --bind"},
        {"max-conns", LS_ARG_INT, &conns, "N", "open HTTP connections in total (0: default 512)"},
        {"max-conns-per-ip", LS_ARG_INT, &per_ip, "N", "open HTTP connections per client address (0: default 64)"},
        {"port-file", LS_ARG_STR, &port_file, "FILE", "write the bound port here once serving"},
        {"max-seqs", LS_ARG_INT, &max_seqs, "N", "concurrent sequences / KV slots per stage (default 16)"},
        {"threads", LS_ARG_INT, &threads, "N", "kernel threads per stage (default 1)"},
        {"max-body", LS_ARG_I64, &max_body, "BYTES", "largest request body (default 65536)"},
        {"prefill-mb", LS_ARG_INT, &mbp, "N", "prefill micro-batch without a plan (default 2)"},
        {"decode-mb", LS_ARG_INT, &mbd, "N", "decode micro-batch without a plan (default 8)"},
        {"served-model-name", LS_ARG_STR, &name, "NAME", "name in /v1/models and responses (default: the checkpoint's file stem)"},
        {"name", LS_ARG_STR, &name, "NAME", "same as --served-model-name"},
        {"worker", LS_ARG_FLAG, &worker, NULL, "(internal) run one pipeline stage"},
        {"stage", LS_ARG_INT, &stage, "I", "(worker) the stage of --plan to run"},
        {"in", LS_ARG_STR, &w_in, "ENDPOINT", "(worker) ZeroMQ endpoint to bind"},
        {"out", LS_ARG_STR, &w_out, "ENDPOINT", "(worker) ZeroMQ endpoint of the next stage"},
    };
    int rc = ls_args_parse("serve", "Serves a model over HTTP (OpenAI-style /v1/completions), pipeline-parallel by plan.",
                           spec, (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    if (worker) return run_worker(model, plan_path, stage, max_seqs, threads, w_in, w_out);
    if (port < 0 || port > 65535 || max_seqs < 1 || max_seqs > 4096 || threads < 1 || max_body < 16 || mbp < 1 || mbd < 1 ||
        conns < 0 || per_ip < 0) {
        fprintf(stderr, "llmsys serve: --port in [0, 65535], --max-seqs in [1, 4096], --threads/--prefill-mb/--decode-mb >= 1, --max-body >= 16, --max-conns* >= 0 (0: default)\n");
        return 2;
    }
    ls_model_config cfg;
    int *bits = NULL;
    if (ls_ckpt_info(model, &cfg, &bits, NULL) != LS_OK) return ls_cli_fail();
    free(bits);
    ls_plan plan;
    if (plan_path && ls_plan_read(plan_path, cfg.n_layer, &plan) != LS_OK) return ls_cli_fail();
    /* block the stop signals in every thread; the main thread waits for them below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    ls_server_opts o = ls_server_defaults();
    o.model = model;
    o.plan = plan_path ? &plan : NULL;
    o.self = ls_cli_self();
    o.host = host;
    o.port = port;
    o.max_seqs = max_seqs;
    o.nthreads = threads;
    o.max_body = (size_t)max_body;
    o.mb_prefill = mbp;
    o.mb_decode = mbd;
    o.model_name = name;
    o.max_conns = (unsigned)conns;
    o.max_conns_per_ip = (unsigned)per_ip;
    ls_server *s;
    if (ls_server_start(&s, &o) != LS_OK) return ls_cli_fail();
    printf("llmsys serve: %s on http://%s:%d with %d stage(s) (POST /v1/completions, GET /health, GET /metrics)\n", model,
           host, ls_server_port(s), ls_server_num_stages(s));
    fflush(stdout);
    printf("llmsys serve: served as '%s' (GET /v1/models, POST /v1/chat/completions)\n", ls_server_model_name(s));
    fflush(stdout);
    if (port_file) {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%d\n", ls_server_port(s));
        if (ls_file_write_atomic(port_file, buf, (size_t)n) != LS_OK) {
            ls_server_stop(s);
            return ls_cli_fail();
        }
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
        {"model", LS_ARG_STR, &model, "PATH", "fp32 checkpoint whose layer shapes are profiled", 1},
        {"out", LS_ARG_STR, &out, "FILE", "device profile to write (JSON, docs/plan-format.md)", 1},
        {"bits", LS_ARG_STR, &bits_s, "LIST", "bit widths (default 16,8,4,3)"},
        {"batches", LS_ARG_STR, &batch_s, "LIST", "micro-batch sizes (default 1,2,4,8)"},
        {"seqs", LS_ARG_STR, &seq_s, "LIST", "prefill lengths (default 16,32,64)"},
        {"ctxs", LS_ARG_STR, &ctx_s, "LIST", "decode context lengths (default 16,64,128)"},
        {"reps", LS_ARG_INT, &reps, "N", "timings per point, minimum kept (default 3)"},
        {"threads", LS_ARG_INT, &threads, "N", "kernel threads (default 1, as one serve stage)"},
    };
    int rc = ls_args_parse("profile", "Measures per-layer prefill/decode latency per bit width for the planner.", spec,
                           (int)(sizeof spec / sizeof spec[0]), argc, argv, NULL, 0, NULL);
    if (rc) return LS_ARGS_EXIT(rc);
    int *lists[4] = {NULL, NULL, NULL, NULL}, counts[4];
    const char *srcs[4] = {bits_s, batch_s, seq_s, ctx_s}, *names[4] = {"--bits", "--batches", "--seqs", "--ctxs"};
    for (int i = 0; i < 4; i++) {
        counts[i] = ls_args_int_list(srcs[i], ",", &lists[i]);
        int ok = counts[i] > 0;
        for (int k = 0; ok && k < counts[i]; k++)
            ok = i == 0 ? (lists[i][k] == 16 || lists[i][k] == 8 || lists[i][k] == 4 || lists[i][k] == 3) : lists[i][k] >= 1;
        if (!ok) {
            fprintf(stderr, "llmsys profile: %s must be a comma-separated list of %s\n", names[i],
                    i == 0 ? "widths in {16, 8, 4, 3}" : "positive integers");
            for (int k = 0; k < 4; k++) free(lists[k]);
            return 2;
        }
    }
    if (reps < 1 || threads < 1) {
        fprintf(stderr, "llmsys profile: --reps and --threads must be >= 1\n");
        for (int k = 0; k < 4; k++) free(lists[k]);
        return 2;
    }
    ls_profile_opts o = ls_profile_defaults();
    o.bits = lists[0], o.n_bits = counts[0];
    o.batches = lists[1], o.n_batches = counts[1];
    o.seqs = lists[2], o.n_seqs = counts[2];
    o.ctxs = lists[3], o.n_ctxs = counts[3];
    o.reps = reps, o.nthreads = threads;
    cJSON *j = NULL;
    double t0 = ls_now();
    rc = ls_profile_run(model, &o, &j);
    for (int k = 0; k < 4; k++) free(lists[k]);
    if (rc != LS_OK) return ls_cli_fail();
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

/* Stops a training run once its time budget is spent. */
typedef struct {
    double t0, budget_s;
} budget_stop;

static int stop_at_budget(void *ctx, ls_trainer *t, const ls_train_step_info *info) {
    (void)t, (void)info;
    const budget_stop *b = ctx;
    return ls_now() - b->t0 >= b->budget_s;
}

/* Trains a small model on this repository's own text for budget_s seconds (used when
 * the core scenario's model is absent). */
static int demo_train(const char *ckpt, ls_corpus *c, int quick, double budget_s) {
    ls_model_config mc;
    LS_TRY(ls_model_config_named(quick ? "tiny" : "small", &mc));
    ls_train_config tc = ls_train_defaults();
    tc.batch = 8;
    tc.seq = mc.n_ctx;
    tc.steps = quick ? 60 : 400;
    tc.opt.lr = 3e-3f;
    tc.opt.warmup_steps = 5;
    ls_trainer *t = NULL;
    ls_batch_source *src = NULL;
    int rc = ls_trainer_init(&t, &mc, &tc, NULL);
    if (rc == LS_OK) rc = ls_batch_source_corpus(&src, c, &tc, 1);
    double t0 = ls_now();
    budget_stop bs = {t0, budget_s};
    ls_train_hooks hk = {.ctx = &bs, .after_step = stop_at_budget};
    ls_train_run_opts ro = {.quiet = 1};
    ls_train_run_result r = {0};
    if (rc == LS_OK) {
        ls_trainer_set_hooks(t, &hk);
        rc = ls_train_run(t, src, NULL, &ro, &r);
    }
    if (rc == LS_OK) {
        int s = r.n_losses;
        printf("trained a %s model for %d steps (%.1f s), last loss %.3f\n", quick ? "tiny" : "small", s, ls_now() - t0,
               s ? r.losses[s - 1] : 0.0f);
        rc = ls_ckpt_save(ckpt, ls_trainer_model(t), s, NULL, LS_CKPT_WEIGHTS);
    }
    ls_train_run_result_free(&r);
    ls_batch_source_free(src);
    ls_trainer_free(t);
    return rc;
}

typedef struct {
    const char *name;
    int kind; /* 0 uniform bits, 1 ends at 8 / rest 4, 2 alternate 8/4, 3 ends at 4 / rest 3 */
    int bits;
} demo_map;

static void fill_map(const demo_map *d, int L, int *b) {
    for (int l = 0; l < L; l++) {
        int end = l == 0 || l == L - 1;
        switch (d->kind) {
        case 0: b[l] = d->bits; break;
        case 1: b[l] = end ? 8 : 4; break;
        case 2: b[l] = l % 2 ? 4 : 8; break;
        default: b[l] = end ? 4 : 3; break;
        }
    }
}

static int serve_and_load(const char *model, const ls_plan *plan, const char *const *prompts, int np, int conc,
                          int nreq, int max_tokens, ls_load_result *res, char *sample, size_t ns, int *sample_tokens) {
    ls_server_opts o = ls_server_defaults();
    o.model = model;
    o.plan = plan;
    o.self = ls_cli_self();
    o.port = 0;
    o.max_seqs = conc > 8 ? conc : 8;
    ls_server *s;
    LS_TRY(ls_server_start(&s, &o));
    int port = ls_server_port(s);
    int rc = ls_http_load("127.0.0.1", port, prompts, np, conc, nreq, max_tokens, res);
    if (rc == LS_OK && sample)
        rc = ls_http_complete("127.0.0.1", port, prompts[0], max_tokens, 60, sample, ns, sample_tokens);
    ls_server_stop(s);
    return rc;
}

static void printable(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\t' || *s == '\r') *s = ' ';
}

int demo_serve(const ls_demo_ctx *ctx) {
    int quick = ctx->quick;
    char dir[4096], ckpt[4200], qckpt[4200], plan_path[4200], core[4200];
    snprintf(dir, sizeof dir, "%s/serve", ctx->workdir);
    snprintf(core, sizeof core, "%s/core/model.safetensors", ctx->workdir);
    snprintf(qckpt, sizeof qckpt, "%s/mixed.safetensors", dir);
    snprintf(plan_path, sizeof plan_path, "%s/plan.json", dir);
    if (ls_mkdirs(dir) != LS_OK) return ls_cli_fail();
    /* held-out text: this repository's own sources and docs */
    const char *paths[3] = {LLMSYS_SOURCE_DIR "/include", LLMSYS_SOURCE_DIR "/docs", LLMSYS_SOURCE_DIR "/src"};
    ls_corpus_opts co = ls_corpus_defaults();
    co.max_bytes = quick ? (size_t)200 << 10 : (size_t)1 << 20;
    ls_corpus *c;
    if (ls_corpus_load(&c, paths, 3, &co) != LS_OK) return ls_cli_fail();
    int rc = LS_OK;
    if (ls_is_file(core)) {
        snprintf(ckpt, sizeof ckpt, "%s", core);
        printf("model: %s (from the core scenario)\n", ckpt);
    } else {
        snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
        printf("model: no %s; training one on the repository's text\n", core);
        fflush(stdout);
        rc = demo_train(ckpt, c, quick, quick ? 3.0 : 25.0);
    }
    ls_model_config cfg;
    int *fb = NULL;
    if (rc == LS_OK) rc = ls_ckpt_info(ckpt, &cfg, &fb, NULL);
    free(fb);
    if (rc != LS_OK) {
        ls_corpus_free(c);
        return ls_cli_fail();
    }
    int L = cfg.n_layer;
    size_t ntok;
    const uint16_t *held = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &ntok);
    size_t cap = quick ? 1500 : 8000;
    /* 1. quality: held-out bits/byte per bits map (engine eval == `llmsys eval`) */
    static const demo_map maps[] = {{"fp32", 0, 32},   {"16 uniform", 0, 16}, {"8 uniform", 0, 8},
                                    {"4 uniform", 0, 4}, {"3 uniform", 0, 3},  {"8 ends, 4 middle", 1, 0},
                                    {"8/4 alternating", 2, 0}, {"4 ends, 3 middle", 3, 0}};
    int nmaps = (int)(sizeof maps / sizeof maps[0]);
    int *bits = malloc(sizeof(int) * L);
    double bpb[8] = {0}, mib[8] = {0};
    printf("\nheld-out bits/byte (%zu tokens of the repository's text, group 64, round-to-nearest):\n", ntok < cap ? ntok : cap);
    printf("  %-18s %10s %10s %8s\n", "bits map", "weights", "bits/byte", "vs fp32");
    for (int i = 0; i < nmaps && rc == LS_OK; i++) {
        fill_map(&maps[i], L, bits);
        ls_engine_opts eo = ls_engine_defaults();
        eo.bits = bits;
        ls_engine *e;
        ls_eval_result r;
        rc = ls_engine_open(&e, ckpt, &eo);
        if (rc == LS_OK) {
            rc = ls_engine_eval_tokens(e, held, ntok, cfg.n_ctx, cap, &r);
            mib[i] = ls_engine_weight_bytes(e) / 1048576.0;
            ls_engine_free(e);
        }
        if (rc == LS_OK) {
            bpb[i] = r.bits_per_byte;
            printf("  %-18s %7.2f MiB %10.4f %+8.4f\n", maps[i].name, mib[i], bpb[i], bpb[i] - bpb[0]);
        }
    }
    /* 2. the mixed plan: two stages, first/last layers at 8 bits, the rest at 4 */
    ls_plan plan;
    if (rc == LS_OK) {
        fill_map(&maps[5], L, bits);
        rc = ls_quant_checkpoint(ckpt, bits, L, 64, qckpt);
    }
    int split = (L + 1) / 2;
    if (rc == LS_OK) rc = ls_plan_single(&plan, L, bits, 2, 4);
    if (rc == LS_OK) {
        snprintf(plan.model_name, sizeof plan.model_name, "%.200s", ckpt);
        plan.n_stages = L > 1 ? 2 : 1;
        for (int sidx = 0; sidx < plan.n_stages; sidx++) {
            ls_plan_stage *st = &plan.stages[sidx];
            snprintf(st->device, sizeof st->device, "cpu%d", sidx);
            st->layer_begin = sidx == 0 ? 0 : split;
            st->layer_end = plan.n_stages == 1 || sidx == 1 ? L : split;
        }
        rc = ls_plan_write(plan_path, &plan);
        if (rc == LS_OK) printf("\nplan %s: %d stages, layers [0,%d) and [%d,%d), bits 8 at the ends, 4 inside\n", plan_path,
                                plan.n_stages, split, split, L);
    }
    /* 3. serve fp32 (one process) and the mixed plan (two stages) over HTTP */
    static const char *const prompts[] = {"#include <", "int ls_", "/* The ", "The model ", "static void ", "return "};
    int conc = quick ? 4 : 8, nreq = quick ? 4 : 16, mt = quick ? 8 : 32;
    ls_load_result rf = {0}, rq = {0};
    char sf[512] = "", sq[512] = "";
    int tf[64] = {0}, tq[64] = {0};
    if (rc == LS_OK) rc = serve_and_load(ckpt, NULL, prompts, 6, conc, nreq, mt, &rf, sf, sizeof sf, tf);
    if (rc == LS_OK) rc = serve_and_load(qckpt, &plan, prompts, 6, conc, nreq, mt, &rq, sq, sizeof sq, tq);
    /* 4. the pipelined server's greedy tokens == single-process generation, same bits */
    int same = 0;
    if (rc == LS_OK) {
        ls_engine *e;
        rc = ls_engine_open(&e, qckpt, NULL);
        int prompt[64], np = 0, out[64], no = 0;
        prompt[np++] = LS_TOK_BOS;
        for (const char *p = prompts[0]; *p; p++) prompt[np++] = (unsigned char)*p;
        if (rc == LS_OK) rc = ls_engine_generate(e, prompt, np, mt, out, &no);
        same = rc == LS_OK && !memcmp(out, tq, sizeof(int) * no);
        ls_engine_free(e);
    }
    if (rc == LS_OK) {
        printable(sf);
        printable(sq);
        printf("\nserving %d requests x %d tokens, %d concurrent, through HTTP:\n", nreq, mt, conc);
        printf("  %-26s %10s %10s %12s %12s\n", "server", "bits/byte", "weights", "tokens/s", "ms/token");
        printf("  %-26s %10.4f %6.2f MiB %12.1f %12.2f\n", "fp32, 1 process", bpb[0], mib[0], rf.tokens_per_s, rf.mean_tpot_s * 1e3);
        printf("  %-26s %10.4f %6.2f MiB %12.1f %12.2f\n", "mixed 8/4, 2 stages", bpb[5], mib[5], rq.tokens_per_s, rq.mean_tpot_s * 1e3);
        printf("  sample (fp32):  \"%s\" -> \"%s\"\n", prompts[0], sf);
        printf("  sample (mixed): \"%s\" -> \"%s\"\n", prompts[0], sq);
        printf("  pipelined greedy output identical to single-process generation: %s\n", same ? "yes" : "NO");
        if (!same) rc = ls_err(LS_ESTATE, "pipelined output differs from single-process generation");
    }
    free(bits);
    ls_corpus_free(c);
    return rc == LS_OK ? 0 : ls_cli_fail();
}
