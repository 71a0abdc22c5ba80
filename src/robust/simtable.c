/* simtable.c - `llmsys sim robust` as a library call: presets, checkpoint size from the model
 * catalog, every selected policy simulated, the table printed and optionally written as JSON. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/plan.h"
#include "llmsys/robust.h"

void ls_sim_table_defaults(ls_sim_table_opts *o) {
    memset(o, 0, sizeof *o);
    ls_sim_defaults(&o->c);
    o->c.trials = 20;
    o->repair_h = 6;
    o->policy = "all";
    o->model = "llama-3-70b";
}

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

int ls_sim_table(ls_sim_table_opts *o, FILE *f) {
    ls_sim_config *c = &o->c, def;
    ls_sim_defaults(&def);
    const char *model = o->model;
    double interruptions = o->interruptions;
    c->repair_s = o->repair_h * 3600;
    if (o->preset && !strcmp(o->preset, "llama3")) {
        /* Llama 3: 466 interruptions in 54 days on 16,384 GPUs (405B) */
        c->gpus = 16384;
        c->days = 54;
        interruptions = interruptions > 0 ? interruptions : 466;
        model = "405e9";
        /* its storage: 2 TB/s sustained over 2,048 machines, about 1 GB/s each */
        if (c->disk_GBps == def.disk_GBps) c->disk_GBps = 1.0;
    } else if (o->preset && strcmp(o->preset, "byterobust") != 0)
        return ls_err(LS_EINVAL, "--preset must be byterobust or llama3");
    if (c->warm_restart_s == def.warm_restart_s) c->warm_restart_s = c->requeue_s / 10.9;
    int pol = -1;
    static const char *const names[] = {"disk", "memory", "standby"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(o->policy, names[k])) pol = k;
    if (pol < 0 && strcmp(o->policy, "all") != 0) return ls_err(LS_EINVAL, "--policy must be disk, memory, standby or all");
    if (c->gpus < 1 || c->gpus_per_node < 1 || c->gpus % c->gpus_per_node || c->trials < 1 || c->trials > 10000)
        return ls_err(LS_EINVAL, "--gpus must be a positive multiple of --gpus-per-node; --trials in [1, 10000]");
    if (!(o->interruptions >= 0)) return ls_err(LS_EINVAL, "--interruptions must be >= 0");
    if (o->out) LS_TRY(ls_out_path_check("out", o->out)); /* before the table is printed */
    double params = 0;
    char *end;
    double p = strtod(model, &end);
    if (*model && !*end && p > 0) {
        params = p;
        c->ckpt_bytes = p * 16;
    } else if (model_state_bytes(model, &c->ckpt_bytes, &params) < 0)
        return LS_EINVAL;
    if (interruptions > 0)
        c->fail_per_1000_node_days = interruptions / ((double)c->gpus / c->gpus_per_node * c->days) * 1000;
    fprintf(f, "%d GPUs (%d machines), %.0f days, %.2f failures per 1000 machine-days; state %.2f TB (%.0fB params x 16 B)\n",
            c->gpus, c->gpus / c->gpus_per_node, c->days, c->fail_per_1000_node_days, c->ckpt_bytes / 1e12, params / 1e9);
    fprintf(f, "\n  %-8s %7s %9s %9s %9s %9s %9s %9s %8s\n", "policy", "ETTR", "failures", "detect h", "locate h",
            "restart h", "redo h", "ckpt h", "no-spare");
    cJSON *arr = cJSON_CreateArray();
    for (int k = 0; k < 3; k++) {
        if (pol >= 0 && k != pol) continue;
        c->policy = k;
        ls_sim_result r;
        if (ls_sim_run(c, &r) < 0) {
            cJSON_Delete(arr);
            return LS_EINVAL;
        }
        fprintf(f, "  %-8s %6.2f%% %9d %9.1f %9.1f %9.1f %9.1f %9.1f %8d\n", names[k], 100 * r.ettr, r.failures,
                r.lost_detect_s / 3600, r.lost_localize_s / 3600, r.lost_restart_s / 3600, r.lost_recompute_s / 3600,
                r.lost_ckpt_s / 3600, r.standby_misses);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "policy", names[k]);
        static const char *const keys[] = {"ettr", "failures", "lost_detect_s", "lost_localize_s",
                                           "lost_restart_s", "lost_recompute_s", "lost_ckpt_s", "standby_misses"};
        const double vals[] = {r.ettr, r.failures, r.lost_detect_s, r.lost_localize_s,
                               r.lost_restart_s, r.lost_recompute_s, r.lost_ckpt_s, r.standby_misses};
        for (int q = 0; q < 8; q++) cJSON_AddNumberToObject(e, keys[q], vals[q]);
        cJSON_AddItemToArray(arr, e);
    }
    int rc = LS_OK;
    if (o->out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "command", "sim robust");
        cJSON_AddNumberToObject(j, "gpus", c->gpus);
        cJSON_AddNumberToObject(j, "days", c->days);
        cJSON_AddNumberToObject(j, "fail_per_1000_node_days", c->fail_per_1000_node_days);
        cJSON_AddItemToObject(j, "policies", arr);
        arr = NULL;
        rc = ls_json_write_file(o->out, j);
        cJSON_Delete(j);
    }
    cJSON_Delete(arr);
    return rc;
}
