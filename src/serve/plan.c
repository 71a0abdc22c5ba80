/* plan.c - the plan file (docs/plan-format.md): stages with layer ranges and per-layer
 * bits, micro-batch sizes; parsed, validated with messages that name the problem. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/serve.h"

void ls_plan_free(ls_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_stages; i++) free(p->stages[i].bits);
    memset(p, 0, sizeof *p);
}

static int get_range(const cJSON *st, const char *what, int i, int *b, int *e) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "layers");
    if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(r, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(r, 1)))
        return ls_err(LS_EFORMAT, "%s: stage %d: \"layers\" must be [begin, end]", what, i);
    double db = cJSON_GetArrayItem(r, 0)->valuedouble, de = cJSON_GetArrayItem(r, 1)->valuedouble;
    if (db != (int)db || de != (int)de) return ls_err(LS_EFORMAT, "%s: stage %d: layer bounds must be integers", what, i);
    *b = (int)db;
    *e = (int)de;
    return LS_OK;
}

int ls_plan_parse(const char *json, size_t len, const char *what, int expect_n_layer, ls_plan *p) {
    memset(p, 0, sizeof *p);
    cJSON *j;
    LS_TRY(ls_json_parse(json, len, what, &j));
    int rc = LS_OK, ver = 0;
    const char *fmt = NULL;
    if (!cJSON_IsObject(j)) { rc = ls_err(LS_EFORMAT, "%s: a plan is a JSON object", what); goto done; }
    if (ls_json_get_string(j, "format", "", &fmt) || strcmp(fmt, "llmsys-plan") != 0) {
        rc = ls_err(LS_EFORMAT, "%s: not a plan file (\"format\" must be \"llmsys-plan\")", what);
        goto done;
    }
    if (ls_json_get_int(j, "version", 0, &ver) || ver != 1) {
        rc = ls_err(LS_EFORMAT, "%s: plan version %d unsupported (this build reads version 1)", what, ver);
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const char *name = "";
    if (!cJSON_IsObject(model) || ls_json_get_int(model, "n_layer", 0, &p->n_layer) || p->n_layer < 1) {
        rc = ls_err(LS_EFORMAT, "%s: \"model\" must be an object with n_layer >= 1", what);
        goto done;
    }
    if ((rc = ls_json_get_string(model, "name", "", &name))) goto done;
    snprintf(p->model_name, sizeof p->model_name, "%s", name);
    if (expect_n_layer > 0 && p->n_layer != expect_n_layer) {
        rc = ls_err(LS_EINVAL, "%s: plan is for a model with %d layers (\"%s\"), but the checkpoint has %d", what,
                    p->n_layer, p->model_name, expect_n_layer);
        goto done;
    }
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    int ns = cJSON_IsArray(stages) ? cJSON_GetArraySize(stages) : -1;
    if (ns < 1 || ns > LS_PLAN_MAX_STAGES) {
        rc = ls_err(LS_EFORMAT, "%s: \"stages\" must be an array of 1..%d stages", what, LS_PLAN_MAX_STAGES);
        goto done;
    }
    int expect_begin = 0;
    for (int i = 0; i < ns; i++) {
        const cJSON *st = cJSON_GetArrayItem(stages, i);
        ls_plan_stage *s = &p->stages[i];
        if (!cJSON_IsObject(st)) { rc = ls_err(LS_EFORMAT, "%s: stage %d is not an object", what, i); goto done; }
        const char *dev = "", *addr = "";
        if ((rc = ls_json_get_string(st, "device", "", &dev)) || (rc = ls_json_get_string(st, "address", "", &addr)))
            goto done;
        snprintf(s->device, sizeof s->device, "%s", dev);
        snprintf(s->address, sizeof s->address, "%s", addr);
        if ((rc = get_range(st, what, i, &s->layer_begin, &s->layer_end))) goto done;
        p->n_stages = i + 1;
        if (s->layer_end <= s->layer_begin) {
            rc = ls_err(LS_EINVAL, "%s: stage %d: empty or reversed layer range [%d, %d)", what, i, s->layer_begin, s->layer_end);
            goto done;
        }
        if (s->layer_begin < expect_begin) {
            rc = ls_err(LS_EINVAL, "%s: stage %d: layers [%d, %d) overlap the previous stage (which ends at %d)", what, i,
                        s->layer_begin, s->layer_end, expect_begin);
            goto done;
        }
        if (s->layer_begin > expect_begin) {
            rc = ls_err(LS_EINVAL, "%s: stage %d: gap: layers [%d, %d) are in no stage", what, i, expect_begin, s->layer_begin);
            goto done;
        }
        if (s->layer_end > p->n_layer) {
            rc = ls_err(LS_EINVAL, "%s: stage %d: layers [%d, %d) exceed the model's %d layers", what, i, s->layer_begin,
                        s->layer_end, p->n_layer);
            goto done;
        }
        expect_begin = s->layer_end;
        int nl = s->layer_end - s->layer_begin;
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(st, "bits");
        if (!cJSON_IsArray(bits) || cJSON_GetArraySize(bits) != nl) {
            rc = ls_err(LS_EINVAL, "%s: stage %d: \"bits\" must list one width per layer (%d)", what, i, nl);
            goto done;
        }
        s->bits = malloc(sizeof(int) * nl);
        if (!s->bits) { rc = ls_err(LS_ENOMEM, "out of memory"); goto done; }
        for (int k = 0; k < nl; k++) {
            const cJSON *b = cJSON_GetArrayItem(bits, k);
            int v = cJSON_IsNumber(b) ? b->valueint : -1;
            if (v != 3 && v != 4 && v != 8 && v != 16) {
                rc = ls_err(LS_EINVAL, "%s: stage %d: layer %d: unsupported bit width %s%d (use 3, 4, 8 or 16)", what, i,
                            s->layer_begin + k, cJSON_IsNumber(b) ? "" : "(not a number) ", v);
                goto done;
            }
            s->bits[k] = v;
        }
    }
    if (expect_begin != p->n_layer) {
        rc = ls_err(LS_EINVAL, "%s: gap: layers [%d, %d) are in no stage", what, expect_begin, p->n_layer);
        goto done;
    }
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "micro_batch");
    p->mb_prefill = 1;
    p->mb_decode = 8;
    if (mb) {
        if (!cJSON_IsObject(mb) || (rc = ls_json_get_int(mb, "prefill", 1, &p->mb_prefill)) ||
            (rc = ls_json_get_int(mb, "decode", 8, &p->mb_decode))) {
            if (!rc) rc = ls_err(LS_EFORMAT, "%s: \"micro_batch\" must be an object", what);
            else rc = ls_err_wrap(rc, "%s: micro_batch", what);
            goto done;
        }
        if (p->mb_prefill < 1 || p->mb_decode < 1 || p->mb_prefill > 1024 || p->mb_decode > 1024) {
            rc = ls_err(LS_EINVAL, "%s: micro-batch sizes must be in [1, 1024] (prefill %d, decode %d)", what, p->mb_prefill,
                        p->mb_decode);
            goto done;
        }
    }
done:
    cJSON_Delete(j);
    if (rc) ls_plan_free(p);
    return rc;
}

int ls_plan_read(const char *path, int expect_n_layer, ls_plan *p) {
    char *text;
    size_t len;
    memset(p, 0, sizeof *p);
    LS_TRY(ls_file_read(path, &text, &len));
    int rc = ls_plan_parse(text, len, path, expect_n_layer, p);
    free(text);
    return rc;
}

int ls_plan_single(ls_plan *p, int n_layer, const int *bits, int mb_prefill, int mb_decode) {
    memset(p, 0, sizeof *p);
    p->n_layer = n_layer;
    p->n_stages = 1;
    p->mb_prefill = mb_prefill;
    p->mb_decode = mb_decode;
    snprintf(p->stages[0].device, sizeof p->stages[0].device, "cpu");
    p->stages[0].layer_end = n_layer;
    p->stages[0].bits = malloc(sizeof(int) * n_layer);
    if (!p->stages[0].bits) return ls_err(LS_ENOMEM, "out of memory");
    memcpy(p->stages[0].bits, bits, sizeof(int) * n_layer);
    return LS_OK;
}

int ls_plan_write(const char *path, const ls_plan *p) {
    cJSON *j = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(j, "model"), *st = cJSON_AddArrayToObject(j, "stages");
    cJSON_AddStringToObject(j, "format", "llmsys-plan");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(m, "name", p->model_name);
    cJSON_AddNumberToObject(m, "n_layer", p->n_layer);
    for (int i = 0; i < p->n_stages; i++) {
        const ls_plan_stage *s = &p->stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "device", s->device);
        int r[2] = {s->layer_begin, s->layer_end};
        cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(r, 2));
        cJSON_AddItemToObject(o, "bits", cJSON_CreateIntArray(s->bits, s->layer_end - s->layer_begin));
        if (s->address[0]) cJSON_AddStringToObject(o, "address", s->address);
        cJSON_AddItemToArray(st, o);
    }
    cJSON *mb = cJSON_AddObjectToObject(j, "micro_batch");
    cJSON_AddNumberToObject(mb, "prefill", p->mb_prefill);
    cJSON_AddNumberToObject(mb, "decode", p->mb_decode);
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}
