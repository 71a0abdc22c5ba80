/* io.c - the plan file (FORMATS.md "llmsys-plan" v1), the planner report and the vLLM
 * export. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llmsys/plan.h"

/* vLLM's per-stage layer counts "a,b,c". */
static void partition_str(const ls_plan_result *pl, char *buf, size_t n) {
    buf[0] = 0;
    for (int j = 0; j < pl->n_stage; j++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%d", j ? "," : "", pl->begin[j + 1] - pl->begin[j]);
    }
}

cJSON *ls_plan_to_json(const ls_plan_problem *p, const ls_plan_result *pl, int report) {
    const ls_plan_cluster *cl = p->cl;
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "format", "llmsys-plan");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON *m = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(m, "name", p->arch->name);
    cJSON_AddNumberToObject(m, "n_layer", p->arch->n_layer);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (int s = 0; s < pl->n_stage; s++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "device", cl->dev[pl->dev[s]].name);
        int lay[2] = {pl->begin[s], pl->begin[s + 1]};
        cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(lay, 2));
        int bits[LS_PLAN_MAX_LAYER];
        for (int i = lay[0]; i < lay[1]; i++) bits[i - lay[0]] = pl->bits[i];
        cJSON_AddItemToObject(o, "bits", cJSON_CreateIntArray(bits, lay[1] - lay[0]));
        if (report) {
            cJSON_AddNumberToObject(o, "device_index", pl->dev[s]);
            cJSON_AddNumberToObject(o, "node", cl->dev[pl->dev[s]].node);
        }
        cJSON_AddItemToArray(st, o);
    }
    cJSON *mb = cJSON_AddObjectToObject(j, "micro_batch");
    cJSON_AddNumberToObject(mb, "prefill", pl->mb_prefill);
    cJSON_AddNumberToObject(mb, "decode", pl->mb_decode);
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
    if (!j) return ls_err(LS_ENOMEM, "plan JSON");
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
    cJSON *j;
    LS_TRY(ls_json_read_file(path, &j));
    memset(out, 0, sizeof *out);
    int rc = LS_OK;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "micro_batch");
    unsigned char used[LS_PLAN_MAX_DEV] = {0};
    if (!cJSON_IsString(f) || strcmp(f->valuestring, "llmsys-plan") || !cJSON_IsNumber(v) || v->valueint != 1) {
        rc = ls_err(LS_EFORMAT, "%s: not an llmsys-plan version 1 file", path);
        goto done;
    }
    if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) < 1 || cJSON_GetArraySize(st) > p->cl->n_dev) {
        rc = ls_err(LS_EFORMAT, "%s: \"stages\" must list 1..%d stages", path, p->cl->n_dev);
        goto done;
    }
    if ((rc = ls_json_get_int(mb, "prefill", 1, &out->mb_prefill)) || (rc = ls_json_get_int(mb, "decode", 1, &out->mb_decode)))
        goto done;
    const cJSON *s;
    cJSON_ArrayForEach(s, st) {
        int idx = out->n_stage;
        const char *dev;
        const cJSON *lay = cJSON_GetObjectItemCaseSensitive(s, "layers");
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(s, "bits");
        if ((rc = ls_json_get_string(s, "device", "", &dev))) goto done;
        if (!cJSON_IsArray(lay) || cJSON_GetArraySize(lay) != 2 || !cJSON_IsArray(bits)) {
            rc = ls_err(LS_EFORMAT, "%s: stage %d needs \"layers\" [begin, end) and \"bits\"", path, idx);
            goto done;
        }
        int b0 = cJSON_GetArrayItem(lay, 0)->valueint, b1 = cJSON_GetArrayItem(lay, 1)->valueint;
        if (b0 != (idx ? out->begin[idx] : 0) || b1 <= b0 || b1 > p->arch->n_layer ||
            cJSON_GetArraySize(bits) != b1 - b0) {
            rc = ls_err(LS_EFORMAT, "%s: stage %d: layers [%d, %d) not contiguous or bits count wrong", path, idx, b0, b1);
            goto done;
        }
        out->begin[idx] = b0;
        out->begin[idx + 1] = b1;
        for (int i = b0; i < b1; i++) out->bits[i] = (unsigned char)cJSON_GetArrayItem(bits, i - b0)->valueint;
        /* first unused device of that name */
        int d = 0;
        while (d < p->cl->n_dev && (used[d] || strcasecmp(p->cl->dev[d].name, dev))) d++;
        if (d == p->cl->n_dev) {
            rc = ls_err(LS_EFORMAT, "%s: stage %d: no free device named '%s' in cluster %s", path, idx, dev, p->cl->name);
            goto done;
        }
        used[d] = 1;
        out->dev[idx] = d;
        out->n_stage++;
    }
    rc = ls_plan_evaluate(p, out);
    if (rc == LS_EINVAL) rc = ls_err_wrap(LS_EFORMAT, "%s", path);
done:
    cJSON_Delete(j);
    return rc;
}
