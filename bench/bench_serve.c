/* bench_serve.c - the pipeline server end to end over HTTP, in one run: throughput and time
 * per output token at 1, 8 and 32 concurrent requests, for the same 8-bit model served by
 * one process and by a 2-stage pipeline (two worker processes on this machine's cores).
 * Prints a table, writes JSON (--out). Needs the llmsys binary next to this one. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_bin.h"
#include "llmsys/serve.h"
#include "llmsys/train.h"

int main(int argc, char **argv) {
    const char *out = NULL, *bin = NULL;
    int quick = 0, max_tokens = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--llmsys") && i + 1 < argc) bin = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_serve [--out FILE] [--llmsys PATH] [--quick]\n");
            return 2;
        }
    }
    char llmsys[4200], dir[64], ckpt[128], q8[128];
    if (!(bin = bench_llmsys_bin("bench_serve", bin, llmsys, sizeof llmsys))) return 1;
    snprintf(dir, sizeof dir, "/tmp/llmsys-bench-serve-%d", (int)getpid());
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
    snprintf(q8, sizeof q8, "%s/q8.safetensors", dir);
    ls_model_config cfg;
    ls_plan two;
    int rc = ls_mkdirs(dir);
    if (rc == LS_OK) rc = bench_q8_two_stages(quick ? "tiny" : "small", ckpt, q8, 2, 16, &cfg, &two);
    if (rc != LS_OK) {
        fprintf(stderr, "bench_serve: %s\n", ls_errmsg());
        return 1;
    }
    static const char *const prompts[] = {"The quick brown fox", "int main(void) {", "Once upon a time", "#include <stdio.h>"};
    const int concs[3] = {1, 8, 32};
    int nconc = quick ? 2 : 3;
    printf("bench_serve: %s model (%d layers, d_model %d), 8-bit weights, %d tokens per request, greedy\n",
           quick ? "tiny" : "small", cfg.n_layer, cfg.d_model, max_tokens);
    printf("%-22s %6s %10s %10s %12s %12s\n", "server", "conc", "requests", "tokens/s", "ms/token", "latency s");
    cJSON *j = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(j, "runs");
    double tps[2][3] = {{0}};
    for (int cfgi = 0; cfgi < 2 && rc == LS_OK; cfgi++) {
        ls_server_opts o = ls_server_defaults();
        o.model = q8, o.plan = cfgi ? &two : NULL, o.self = bin;
        o.port = 0, o.max_seqs = 32, o.mb_prefill = 2, o.mb_decode = 16;
        ls_server *s;
        if ((rc = ls_server_start(&s, &o))) break;
        for (int k = 0; k < nconc && rc == LS_OK; k++) {
            int c = concs[k], nreq = c < 4 ? 4 : 2 * c;
            ls_load_result r;
            rc = ls_http_load("127.0.0.1", ls_server_port(s), prompts, 4, c, nreq, max_tokens, &r);
            if (rc) break;
            tps[cfgi][k] = r.tokens_per_s;
            const char *name = cfgi ? "2 stages (2 procs)" : "1 process";
            printf("%-22s %6d %10d %10.1f %12.2f %12.2f\n", name, c, nreq, r.tokens_per_s, r.mean_tpot_s * 1e3, r.mean_latency_s);
            cJSON *o2 = cJSON_CreateObject();
            cJSON_AddStringToObject(o2, "server", name);
            cJSON_AddNumberToObject(o2, "stages", cfgi ? 2 : 1);
            cJSON_AddNumberToObject(o2, "concurrency", c);
            cJSON_AddNumberToObject(o2, "requests", nreq);
            cJSON_AddNumberToObject(o2, "tokens_per_s", r.tokens_per_s);
            cJSON_AddNumberToObject(o2, "ms_per_output_token", r.mean_tpot_s * 1e3);
            cJSON_AddNumberToObject(o2, "mean_latency_s", r.mean_latency_s);
            cJSON_AddItemToArray(rows, o2);
        }
        ls_server_stop(s);
    }
    if (rc == LS_OK) {
        printf("\n2-stage / 1-process throughput:");
        for (int k = 0; k < nconc; k++) printf("  %.2fx at %d", tps[1][k] / (tps[0][k] > 0 ? tps[0][k] : 1), concs[k]);
        printf("\n");
    }
    unlink(ckpt);
    unlink(q8);
    rmdir(dir);
    if (rc != LS_OK) {
        fprintf(stderr, "bench_serve: %s\n", ls_errmsg());
        cJSON_Delete(j);
        return 1;
    }
    if (out && ls_json_write_file(out, j) != LS_OK) {
        fprintf(stderr, "bench_serve: %s\n", ls_errmsg());
        rc = 1;
    }
    cJSON_Delete(j);
    return rc ? 1 : 0;
}
