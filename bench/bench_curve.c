/* bench_curve.c - the cost of ZeroMQ CURVE (authentication + encryption) on the two services
 * that use it, plain and CURVE measured alternately in one run: the loader service's
 * tokens/s to one client over loopback TCP (fresh service per repeat), and serve's request
 * latency and ms per output token through a 2-stage pipeline (8-bit tiny model, every stage
 * link CURVE when on). Prints a table with min/median/max and the CURVE/plain ratios, writes
 * JSON (--out). Needs the llmsys binary next to this one (for the stage processes). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_bin.h"
#include "llmsys/loader.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"
#include "llmsys/zsec.h"

#define MAX_REPS 16

static char g_dir[96];

/* CPU seconds used so far by this process and its reaped children (the stage processes):
 * on a loaded machine a steadier measure of CURVE's work than wall time. */
static double cpu_s(void) {
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_CHILDREN, &b);
    return a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec +
           1e-6 * (a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec + b.ru_stime.tv_usec);
}

static void *run_service(void *srv) {
    ls_loader_server_run(srv);
    return NULL;
}

/* One loader measurement: tokens/s of `steps` batches fetched by one client. */
static int loader_once(const ls_loader_mix *mix, int steps, double *tps, double *cpu_mtok) {
    ls_loader_server *srv;
    ls_loader_serve_opts o = {4, 4, 1, NULL};
    LS_TRY(ls_loader_server_open(&srv, mix, 1, NULL, 0, &o, NULL, 0));
    pthread_t th;
    pthread_create(&th, NULL, run_service, srv);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ls_loader_server_port(srv));
    ls_loader_client *c;
    int rc = ls_loader_client_open(&c, ep, 0, 10000, 0);
    int64_t tokens = 0;
    double t0 = ls_now(), c0 = cpu_s();
    for (int s = 0; s < steps && rc == LS_OK; s++) {
        ls_loader_batch b;
        rc = ls_loader_client_batch(c, s, &b);
        if (rc == LS_OK) tokens += (int64_t)b.n_rows * b.n_ctx, ls_loader_batch_free(&b);
    }
    double dt = ls_now() - t0;
    *cpu_mtok = (cpu_s() - c0) / ((double)tokens / 1e6);
    if (c) ls_loader_client_shutdown(c), ls_loader_client_close(c);
    ls_loader_server_stop(srv);
    pthread_join(th, NULL);
    ls_loader_server_close(srv);
    *tps = tokens / dt;
    return rc;
}

/* One serve measurement: mean latency and ms/output token of n sequential requests. */
static int serve_once(const char *bin, const char *model, const ls_plan *two, int n, int max_tokens, double *lat,
                      double *tpot, double *cpu_req) {
    ls_server_opts o = ls_server_defaults();
    o.model = model;
    o.plan = two;
    o.self = bin;
    o.port = 0;
    o.max_seqs = 4;
    ls_server *s;
    double c0 = cpu_s(); /* start-up included: the same on both sides but for the handshakes */
    LS_TRY(ls_server_start(&s, &o));
    static const char *const prompts[] = {"The quick brown fox", "int main(void) {"};
    ls_load_result r;
    int rc = ls_http_load("127.0.0.1", ls_server_port(s), prompts, 2, 1, n, max_tokens, &r);
    ls_server_stop(s);
    *cpu_req = (cpu_s() - c0) / n;
    *lat = r.mean_latency_s;
    *tpot = r.mean_tpot_s;
    return rc;
}

static void stats3(double *v, int n, double out[3]) {
    double med = ls_median(v, n); /* sorts v */
    out[0] = v[0], out[1] = med, out[2] = v[n - 1];
}

static cJSON *row(cJSON *rows, const char *what, const char *side, const double s[3], const char *unit) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "measure", what);
    cJSON_AddStringToObject(o, "side", side);
    cJSON_AddStringToObject(o, "unit", unit);
    cJSON_AddNumberToObject(o, "min", s[0]);
    cJSON_AddNumberToObject(o, "median", s[1]);
    cJSON_AddNumberToObject(o, "max", s[2]);
    cJSON_AddItemToArray(rows, o);
    return o;
}

int main(int argc, char **argv) {
    const char *out = NULL, *bin = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--llmsys") && i + 1 < argc)
            bin = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench_curve [--out FILE] [--llmsys PATH] [--quick]\n");
            return 2;
        }
    }
    char llmsys[4200], keys[128], ckpt[160], q8[160], f[200];
    if (!(bin = bench_llmsys_bin("bench_curve", bin, llmsys, sizeof llmsys))) return 1;
    ls_log_set_level(LS_LOG_WARN);
    int reps = quick ? 3 : 7, steps = quick ? 40 : 200, nreq = quick ? 3 : 8, max_tokens = quick ? 16 : 32;
    snprintf(g_dir, sizeof g_dir, "/tmp/llmsys-bench-curve-%d", (int)getpid());
    snprintf(keys, sizeof keys, "%s/keys", g_dir);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", g_dir);
    snprintf(q8, sizeof q8, "%s/q8.safetensors", g_dir);
    int rc = ls_mkdirs(g_dir);
    if (rc == LS_OK) rc = ls_zsec_keygen(keys, 0);
    /* loader data: 16 text documents of 4-40 KB */
    for (int i = 0; i < 16 && rc == LS_OK; i++) {
        snprintf(f, sizeof f, "%s/d%02d.txt", g_dir, i);
        FILE *fp = fopen(f, "w");
        if (!fp) rc = ls_err(LS_EIO, "%s", f);
        for (int k = 0; fp && k < 100 * (i + 1); k++)
            fprintf(fp, "line %d of document %d: some words to tokenize\n", k, i);
        if (fp) fclose(fp);
    }
    ls_loader_mix mix;
    char js[512];
    snprintf(js, sizeof js,
             "{\"n_ctx\": 512, \"tokens_per_rank\": 8192, \"micro_batches\": 2, \"seed\": 1,"
             " \"sources\": [{\"name\": \"docs\", \"path\": \".\"}]}");
    if (rc == LS_OK) rc = ls_loader_mix_parse(js, g_dir, &mix);
    /* serve model: tiny, 8-bit, split in two stages */
    ls_model_config cfg;
    ls_plan two;
    if (rc == LS_OK) rc = bench_q8_two_stages("tiny", ckpt, q8, 1, 4, &cfg, &two);
    if (rc != LS_OK) {
        fprintf(stderr, "bench_curve: %s\n", ls_errmsg());
        return 1;
    }

    double ld[2][MAX_REPS], lat[2][MAX_REPS], tp[2][MAX_REPS], lcpu[2][MAX_REPS], scpu[2][MAX_REPS];
    for (int r = 0; r < reps && rc == LS_OK; r++) {
        for (int k = 0; k < 2 && rc == LS_OK; k++) {
            int curve = (r + k) % 2; /* alternate which side goes first */
            rc = ls_zsec_configure(curve ? keys : NULL, curve);
            if (rc == LS_OK) rc = loader_once(&mix, steps, &ld[curve][r], &lcpu[curve][r]);
            if (rc == LS_OK)
                rc = serve_once(bin, q8, &two, nreq, max_tokens, &lat[curve][r], &tp[curve][r], &scpu[curve][r]);
        }
    }
    ls_loader_mix_free(&mix);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_curve: could not remove %s\n", g_dir);
    if (rc != LS_OK) {
        fprintf(stderr, "bench_curve: %s\n", ls_errmsg());
        return 1;
    }
    double load[3];
    FILE *la = fopen("/proc/loadavg", "r");
    if (!la || fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = load[1] = load[2] = -1;
    if (la) fclose(la);
    printf("bench_curve: CURVE vs plain ZeroMQ over loopback, %d repeats alternated, load %.2f %.2f %.2f, %ld cores\n",
           reps, load[0], load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN));
    printf("  loader: 1 client fetching %d steps of 8192 tokens; serve: 2 stages, tiny 8-bit model, %d requests of %d "
           "tokens, one at a time\n",
           steps, nreq, max_tokens);
    printf("%-28s %-6s %12s %12s %12s\n", "measure", "side", "min", "median", "max");
    cJSON *j = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(j, "rows");
    cJSON_AddNumberToObject(j, "load1", load[0]);
    cJSON_AddNumberToObject(j, "repeats", reps);
    const char *names[5] = {"loader tokens/s", "loader CPU ms/1M tokens", "serve latency ms", "serve ms/output token",
                            "serve CPU ms/request"};
    const char *units[5] = {"tokens/s", "ms", "ms", "ms", "ms"};
    double med[5][2];
    for (int q = 0; q < 5; q++) {
        for (int side = 0; side < 2; side++) {
            double v[MAX_REPS], s[3];
            for (int r = 0; r < reps; r++)
                v[r] = q == 0   ? ld[side][r]
                       : q == 1 ? lcpu[side][r] * 1e3
                       : q == 2 ? lat[side][r] * 1e3
                       : q == 3 ? tp[side][r] * 1e3
                                : scpu[side][r] * 1e3;
            stats3(v, reps, s);
            med[q][side] = s[1];
            printf("%-28s %-6s %12.1f %12.1f %12.1f\n", names[q], side ? "curve" : "plain", s[0], s[1], s[2]);
            row(rows, names[q], side ? "curve" : "plain", s, units[q]);
        }
    }
    double r_ld = med[0][1] / med[0][0], r_lc = med[1][1] / med[1][0], r_lat = med[2][1] / med[2][0],
           r_tp = med[3][1] / med[3][0], r_sc = med[4][1] / med[4][0];
    printf("\nCURVE / plain (medians): loader tokens/s %.3fx, loader CPU/token %.3fx; serve latency %.3fx, ms/token "
           "%.3fx, CPU/request %.3fx\n",
           r_ld, r_lc, r_lat, r_tp, r_sc);
    printf("(wall-time figures swing with the machine's load; the CPU figures count only this work)\n");
    cJSON_AddNumberToObject(j, "loader_cpu_per_token_ratio", r_lc);
    cJSON_AddNumberToObject(j, "serve_cpu_per_request_ratio", r_sc);
    cJSON_AddNumberToObject(j, "loader_tokens_per_s_ratio", r_ld);
    cJSON_AddNumberToObject(j, "serve_latency_ratio", r_lat);
    cJSON_AddNumberToObject(j, "serve_ms_per_token_ratio", r_tp);
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_curve: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    return rc ? 1 : 0;
}
