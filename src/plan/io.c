/* io.c - a planner result as a plan file (through the codec of file.c) with its predicted
 * figures, the planner report and the vLLM export. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"

/* vLLM's per-stage layer counts "a,b,c". */
static void partition_str(const ls_plan_result *pl, char *buf, size_t n) {
    buf[0] = 0;
    for (int j = 0; j < pl->n_stage; j++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%d", j ? "," : "", pl->begin[j + 1] - pl->begin[j]);
    }
}

/* The plan file's JSON of a planner result (the codec's), or an error saying why not. */
static int encode_result(const ls_plan_problem *p, const ls_plan_result *pl, cJSON **out) {
    ls_plan *file = malloc(sizeof *file);
    int rc = file ? ls_plan_from_result(p, pl, file) : ls_err(LS_ENOMEM, "out of memory");
    *out = rc == LS_OK ? ls_plan_encode(file) : NULL;
    free(file);
    return rc == LS_OK && !*out ? ls_err(LS_ENOMEM, "plan JSON") : rc;
}

cJSON *ls_plan_to_json(const ls_plan_problem *p, const ls_plan_result *pl, int report) {
    const ls_plan_cluster *cl = p->cl;
    cJSON *j, *o;
    if (encode_result(p, pl, &j)) return NULL;
    if (report) {
        int s = 0;
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(j, "stages")) {
            cJSON_AddNumberToObject(o, "device_index", pl->dev[s]);
            cJSON_AddNumberToObject(o, "node", cl->dev[pl->dev[s]].node);
            s++;
        }
    }
    cJSON *pr = cJSON_AddObjectToObject(j, "predicted");
    cJSON_AddNumberToObject(pr, "throughput_tok_s", pl->throughput_tok_s);
    cJSON_AddNumberToObject(pr, "prefill_s", pl->prefill_s);
    cJSON_AddNumberToObject(pr, "decode_s", pl->decode_s);
    cJSON_AddNumberToObject(pr, "total_s", pl->total_s);
    cJSON_AddNumberToObject(pr, "quality_indicator", pl->quality);
    cJSON_AddStringToObject(pr, "algo", ls_plan_algo_name(pl->algo));
    cJSON_AddStringToObject(pr, "cluster", cl->name);
    /* the replay of serve's schedule over the same cost terms (docs/plan.md) */
    ls_plan_sim_opts so = ls_plan_sim_for_cluster(cl);
    ls_plan_sim_result sr;
    if (ls_plan_simulate(p, pl, &so, &sr) == LS_OK) { /* absent when too large to replay */
        cJSON_AddNumberToObject(pr, "replay_tok_s", sr.tok_s);
        cJSON_AddNumberToObject(pr, "replay_s", sr.seconds);
    }
    cJSON *wl = cJSON_AddObjectToObject(pr, "workload");
    cJSON_AddNumberToObject(wl, "batch", p->wl.batch);
    cJSON_AddNumberToObject(wl, "prompt", p->wl.prompt);
    cJSON_AddNumberToObject(wl, "gen", p->wl.gen);
    if (!report) return j;
    cJSON_AddNumberToObject(pr, "objective", pl->objective);
    cJSON_AddNumberToObject(pr, "solve_s", pl->solve_s);
    cJSON_AddNumberToObject(pr, "candidates", pl->n_candidates);
    if (pl->algo == LS_PLAN_ALGO_ILP) {
        cJSON_AddBoolToObject(pr, "ilp_optimal", pl->ilp_optimal);
        cJSON_AddNumberToObject(pr, "ilp_gap", pl->ilp_gap);
    }
    if (isfinite(p->qmax)) cJSON_AddNumberToObject(pr, "quality_max", p->qmax);
    cJSON_AddNumberToObject(pr, "theta", p->theta);
    cJSON *devs = cJSON_AddArrayToObject(j, "devices");
    for (int s = 0; s < pl->n_stage; s++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "stage", s);
        cJSON_AddStringToObject(o, "device", cl->dev[pl->dev[s]].name);
        cJSON_AddNumberToObject(o, "memory_GB", pl->stage_mem[s] / 1e9);
        cJSON_AddNumberToObject(o, "usable_GB", pl->stage_usable[s] / 1e9);
        cJSON_AddNumberToObject(o, "headroom_GB", (pl->stage_usable[s] - pl->stage_mem[s]) / 1e9);
        cJSON_AddNumberToObject(o, "prefill_stage_s", pl->stage_prefill_s[s]);
        cJSON_AddNumberToObject(o, "decode_stage_s", pl->stage_decode_s[s]);
        cJSON_AddItemToArray(devs, o);
    }
    /* deployment export */
    cJSON *v = cJSON_AddObjectToObject(j, "vllm");
    char part[4 * LS_PLAN_MAX_DEV + 8];
    partition_str(pl, part, sizeof part);
    cJSON_AddNumberToObject(v, "pipeline_parallel_size", pl->n_stage);
    cJSON_AddStringToObject(v, "VLLM_PP_LAYER_PARTITION", part);
    char cmd[4 * LS_PLAN_MAX_DEV + 160];
    snprintf(cmd, sizeof cmd, "VLLM_PP_LAYER_PARTITION=%s vllm serve %s --pipeline-parallel-size %d", part,
             p->arch->name, pl->n_stage);
    cJSON_AddStringToObject(v, "command", cmd);
    int bits[LS_PLAN_MAX_LAYER];
    for (int i = 0; i < p->arch->n_layer; i++) bits[i] = pl->bits[i];
    cJSON_AddItemToObject(v, "layer_bits", cJSON_CreateIntArray(bits, p->arch->n_layer));
    return j;
}

int ls_plan_result_write(const ls_plan_problem *p, const ls_plan_result *pl, const char *path) {
    cJSON *j = ls_plan_to_json(p, pl, 0);
    if (!j) return ls_err_wrap(LS_EINVAL, "%s", path);
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

int ls_plan_export_vllm(const ls_plan_problem *p, const ls_plan_result *pl, const char *path) {
    char part[4 * LS_PLAN_MAX_DEV + 8];
    partition_str(pl, part, sizeof part);
    size_t cap = 4096 + (size_t)p->arch->n_layer * 64;
    char *buf = malloc(cap);
    if (!buf) return ls_err(LS_ENOMEM, "vLLM export");
    int n = snprintf(buf, cap,
                     "# vLLM launch for %s on %s, written by `llmsys plan serve` (predicted %.1f tok/s).\n"
                     "# Stages in pipeline order: start one vLLM worker per device in this order.\n"
                     "export VLLM_PP_LAYER_PARTITION=%s\n"
                     "vllm serve %s --pipeline-parallel-size %d\n"
                     "# per-layer quantization map (layer: bits, device)\n",
                     p->arch->name, p->cl->name, pl->throughput_tok_s, part, p->arch->name, pl->n_stage);
    for (int s = 0; s < pl->n_stage; s++)
        for (int i = pl->begin[s]; i < pl->begin[s + 1] && (size_t)n < cap - 80; i++)
            n += snprintf(buf + n, cap - (size_t)n, "#   layer %d: %d bits, stage %d (%s)\n", i, pl->bits[i], s,
                          p->cl->dev[pl->dev[s]].name);
    int rc = ls_file_write_atomic(path, buf, (size_t)n);
    free(buf);
    return rc;
}

int ls_plan_result_read(const char *path, const ls_plan_problem *p, ls_plan_result *out) {
    ls_plan *file = malloc(sizeof *file);
    if (!file) return ls_err(LS_ENOMEM, "out of memory");
    int rc = ls_plan_read(path, 0, file);
    if (rc == LS_OK) rc = ls_plan_to_result(p, file, path, out);
    free(file);
    return rc;
}

void ls_plan_print(FILE *f, const ls_plan_problem *pb, const ls_plan_result *pl) {
    fprintf(f, "plan (%s) for %s on %s, batch %d, prompt %d, gen %d:\n", ls_plan_algo_name(pl->algo), pb->arch->name,
            pb->cl->name, pb->wl.batch, pb->wl.prompt, pb->wl.gen);
    int dw = 12; /* the device column: as wide as its longest name (a CPU's profile names its model) */
    for (int s = 0; s < pl->n_stage; s++) {
        int n = (int)strlen(pb->cl->dev[pl->dev[s]].name);
        if (n > dw) dw = n;
    }
    fprintf(f, "  %-5s %-*s %-9s %-15s %9s %9s %9s\n", "stage", dw, "device", "layers", "bits (3/4/8/16)", "mem GB",
            "free GB", "decode ms");
    for (int s = 0; s < pl->n_stage; s++) {
        int cnt[LS_PLAN_NBITS] = {0};
        for (int i = pl->begin[s]; i < pl->begin[s + 1]; i++) cnt[ls_plan_bits_index(pl->bits[i])]++;
        char lay[24], bits[32];
        snprintf(lay, sizeof lay, "%d-%d", pl->begin[s], pl->begin[s + 1] - 1);
        snprintf(bits, sizeof bits, "%d/%d/%d/%d", cnt[0], cnt[1], cnt[2], cnt[3]);
        fprintf(f, "  %-5d %-*s %-9s %-15s %9.3f %9.3f %9.2f\n", s, dw, pb->cl->dev[pl->dev[s]].name, lay, bits,
                pl->stage_mem[s] / 1e9, (pl->stage_usable[s] - pl->stage_mem[s]) / 1e9, pl->stage_decode_s[s] * 1e3);
    }
    fprintf(f, "  micro-batch prefill %d, decode %d\n", pl->mb_prefill, pl->mb_decode);
    fprintf(f, "  predicted (modelled): %.1f tok/s, prefill %.3f s, decode %.3f s, quality indicator %.4g\n",
            pl->throughput_tok_s, pl->prefill_s, pl->decode_s, pl->quality);
    ls_plan_sim_opts so = ls_plan_sim_for_cluster(pb->cl);
    ls_plan_sim_result sr;
    if (ls_plan_simulate(pb, pl, &so, &sr) == LS_OK)
        fprintf(f, "  replay of serve's schedule (modelled): %.1f tok/s, %d prefill and %d decode micro-batches\n",
                sr.tok_s, sr.mb_prefill, sr.mb_decode);
    if (pl->algo == LS_PLAN_ALGO_ILP)
        fprintf(f, "  ILP: %s, gap %.3g%%, %d candidates\n", pl->ilp_optimal ? "optimal" : "time limit",
                pl->ilp_gap * 100, pl->n_candidates);
    fprintf(f, "  solved in %.1f ms\n", pl->solve_s * 1e3);
}

int ls_plan_report_write(const ls_plan_problem *p, const ls_plan_result *plan, const char *path) {
    cJSON *j = ls_plan_to_json(p, plan, 1);
    if (!j) return ls_err(LS_ENOMEM, "report");
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}
