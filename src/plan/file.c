/* file.c - the plan file (docs/plan-format.md, "llmsys-plan" version 1): the one reader,
 * writer and validator of ls_plan, and the conversions to and from a planner result. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "llmsys/plan.h"
#include "llmsys/quant.h"

/* Stage i's range against the stage before it (which ended at expect_begin) and the model. */
static int check_range(const ls_plan *p, int i, int expect_begin, const char *what) {
    const ls_plan_stage *s = &p->stages[i];
    if (s->layer_end <= s->layer_begin)
        return ls_err(LS_EINVAL, "%s: stage %d: empty or reversed layer range [%d, %d)", what, i, s->layer_begin,
                      s->layer_end);
    if (s->layer_begin < expect_begin)
        return ls_err(LS_EINVAL, "%s: stage %d: layers [%d, %d) overlap the previous stage (which ends at %d)", what, i,
                      s->layer_begin, s->layer_end, expect_begin);
    if (s->layer_begin > expect_begin)
        return ls_err(LS_EINVAL, "%s: stage %d: gap: layers [%d, %d) are in no stage", what, i, expect_begin,
                      s->layer_begin);
    if (s->layer_end > p->n_layer)
        return ls_err(LS_EINVAL, "%s: stage %d: layers [%d, %d) exceed the model's %d layers", what, i, s->layer_begin,
                      s->layer_end, p->n_layer);
    return LS_OK;
}

static int bad_bits(const char *what, int stage, int layer, int v, int not_number) {
    return ls_err(LS_EINVAL, "%s: stage %d: layer %d: unsupported bit width %s%d (use 3, 4, 8, 16 or 32)", what, stage,
                  layer, not_number ? "(not a number) " : "", v);
}

int ls_plan_validate(const ls_plan *p, const char *what) {
    if (p->n_layer < 1 || p->n_layer > LS_PLAN_MAX_LAYER)
        return ls_err(LS_EINVAL, "%s: the model must have 1..%d layers, not %d", what, LS_PLAN_MAX_LAYER, p->n_layer);
    if (p->n_stages < 1 || p->n_stages > LS_PLAN_MAX_DEV)
        return ls_err(LS_EINVAL, "%s: a plan has 1..%d stages, not %d", what, LS_PLAN_MAX_DEV, p->n_stages);
    int end = 0;
    for (int i = 0; i < p->n_stages; i++) {
        LS_TRY(check_range(p, i, end, what));
        end = p->stages[i].layer_end;
        for (int l = p->stages[i].layer_begin; l < end; l++)
            if (!ls_quant_bits_valid(p->bits[l])) return bad_bits(what, i, l, p->bits[l], 0);
    }
    if (end != p->n_layer) return ls_err(LS_EINVAL, "%s: gap: layers [%d, %d) are in no stage", what, end, p->n_layer);
    if (p->mb_prefill < 1 || p->mb_decode < 1 || p->mb_prefill > 1024 || p->mb_decode > 1024)
        return ls_err(LS_EINVAL, "%s: micro-batch sizes must be in [1, 1024] (prefill %d, decode %d)", what,
                      p->mb_prefill, p->mb_decode);
    if (p->group != 0 && p->group != 32 && p->group != 64 && p->group != 128 && p->group != 256)
        return ls_err(LS_EINVAL, "%s: quantization group %d unsupported (32, 64, 128 or 256)", what, p->group);
    return LS_OK;
}

static int get_range(const cJSON *st, const char *what, int i, int *b, int *e) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "layers");
    if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(r, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(r, 1)))
        return ls_err(LS_EFORMAT, "%s: stage %d: \"layers\" must be [begin, end]", what, i);
    /* ls_json_as_int range-checks before converting (a double beyond int is undefined to cast) */
    if (!ls_json_as_int(cJSON_GetArrayItem(r, 0), b) || !ls_json_as_int(cJSON_GetArrayItem(r, 1), e))
        return ls_err(LS_EFORMAT, "%s: stage %d: layer bounds must be integers", what, i);
    return LS_OK;
}

/* The body of ls_plan_parse over a parsed document. */
static int parse_doc(const cJSON *j, const char *what, int expect_n_layer, ls_plan *p) {
    const char *fmt = NULL, *name = "";
    int ver = 0;
    if (!cJSON_IsObject(j)) return ls_err(LS_EFORMAT, "%s: a plan is a JSON object", what);
    if (ls_json_get_string(j, "format", "", &fmt) || strcmp(fmt, "llmsys-plan") != 0)
        return ls_err(LS_EFORMAT, "%s: not a plan file (\"format\" must be \"llmsys-plan\")", what);
    if (ls_json_get_int(j, "version", 0, &ver) || ver != 1)
        return ls_err(LS_EFORMAT, "%s: plan version %d unsupported (this build reads version 1)", what, ver);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsObject(model) || ls_json_get_int(model, "n_layer", 0, &p->n_layer) || p->n_layer < 1 ||
        p->n_layer > LS_PLAN_MAX_LAYER)
        return ls_err(LS_EFORMAT, "%s: \"model\" must be an object with n_layer in [1, %d]", what, LS_PLAN_MAX_LAYER);
    LS_TRY(ls_json_get_string(model, "name", "", &name));
    snprintf(p->model_name, sizeof p->model_name, "%s", name);
    if (expect_n_layer > 0 && p->n_layer != expect_n_layer)
        return ls_err(LS_EINVAL, "%s: plan is for a model with %d layers (\"%s\"), but the checkpoint has %d", what,
                      p->n_layer, p->model_name, expect_n_layer);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    int ns = cJSON_IsArray(stages) ? cJSON_GetArraySize(stages) : -1;
    if (ns < 1 || ns > LS_PLAN_MAX_DEV)
        return ls_err(LS_EFORMAT, "%s: \"stages\" must be an array of 1..%d stages", what, LS_PLAN_MAX_DEV);
    int end = 0;
    for (int i = 0; i < ns; i++) {
        const cJSON *st = cJSON_GetArrayItem(stages, i);
        ls_plan_stage *s = &p->stages[i];
        const char *dev = "", *addr = "";
        if (!cJSON_IsObject(st)) return ls_err(LS_EFORMAT, "%s: stage %d is not an object", what, i);
        LS_TRY(ls_json_get_string(st, "device", "", &dev));
        LS_TRY(ls_json_get_string(st, "address", "", &addr));
        snprintf(s->device, sizeof s->device, "%s", dev);
        snprintf(s->address, sizeof s->address, "%s", addr);
        LS_TRY(get_range(st, what, i, &s->layer_begin, &s->layer_end));
        p->n_stages = i + 1;
        LS_TRY(check_range(p, i, end, what));
        end = s->layer_end;
        int nl = s->layer_end - s->layer_begin;
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(st, "bits");
        if (!cJSON_IsArray(bits) || cJSON_GetArraySize(bits) != nl)
            return ls_err(LS_EINVAL, "%s: stage %d: \"bits\" must list one width per layer (%d)", what, i, nl);
        for (int k = 0; k < nl; k++) {
            const cJSON *b = cJSON_GetArrayItem(bits, k);
            int v = cJSON_IsNumber(b) ? b->valueint : -1;
            if (!ls_quant_bits_valid(v)) return bad_bits(what, i, s->layer_begin + k, v, !cJSON_IsNumber(b));
            p->bits[s->layer_begin + k] = v;
        }
    }
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "micro_batch");
    p->mb_prefill = 1;
    p->mb_decode = 8;
    if (mb) {
        int rc;
        if (!cJSON_IsObject(mb)) return ls_err(LS_EFORMAT, "%s: \"micro_batch\" must be an object", what);
        if ((rc = ls_json_get_int(mb, "prefill", 1, &p->mb_prefill)) ||
            (rc = ls_json_get_int(mb, "decode", 8, &p->mb_decode)))
            return ls_err_wrap(rc, "%s: micro_batch", what);
    }
    LS_TRY(ls_json_get_int(j, "group", 0, &p->group));
    return ls_plan_validate(p, what);
}

int ls_plan_parse(const char *json, size_t len, const char *what, int expect_n_layer, ls_plan *p) {
    memset(p, 0, sizeof *p);
    cJSON *j;
    LS_TRY(ls_json_parse(json, len, what, &j));
    int rc = parse_doc(j, what, expect_n_layer, p);
    cJSON_Delete(j);
    if (rc) memset(p, 0, sizeof *p);
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

cJSON *ls_plan_encode(const ls_plan *p) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "format", "llmsys-plan");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON *m = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(m, "name", p->model_name);
    cJSON_AddNumberToObject(m, "n_layer", p->n_layer);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (int i = 0; i < p->n_stages; i++) {
        const ls_plan_stage *s = &p->stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "device", s->device);
        int r[2] = {s->layer_begin, s->layer_end};
        cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(r, 2));
        cJSON_AddItemToObject(o, "bits", cJSON_CreateIntArray(p->bits + s->layer_begin, s->layer_end - s->layer_begin));
        if (s->address[0]) cJSON_AddStringToObject(o, "address", s->address);
        cJSON_AddItemToArray(st, o);
    }
    cJSON *mb = cJSON_AddObjectToObject(j, "micro_batch");
    cJSON_AddNumberToObject(mb, "prefill", p->mb_prefill);
    cJSON_AddNumberToObject(mb, "decode", p->mb_decode);
    if (p->group) cJSON_AddNumberToObject(j, "group", p->group);
    return j;
}

int ls_plan_write(const char *path, const ls_plan *p) {
    LS_TRY(ls_plan_validate(p, path));
    cJSON *j = ls_plan_encode(p);
    if (!j) return ls_err(LS_ENOMEM, "plan JSON");
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

int ls_plan_single(ls_plan *p, int n_layer, const int *bits, int mb_prefill, int mb_decode) {
    memset(p, 0, sizeof *p);
    if (n_layer < 1 || n_layer > LS_PLAN_MAX_LAYER)
        return ls_err(LS_EINVAL, "plan: the model must have 1..%d layers, not %d", LS_PLAN_MAX_LAYER, n_layer);
    p->n_layer = n_layer;
    p->n_stages = 1;
    p->mb_prefill = mb_prefill;
    p->mb_decode = mb_decode;
    snprintf(p->stages[0].device, sizeof p->stages[0].device, "cpu");
    p->stages[0].layer_end = n_layer;
    memcpy(p->bits, bits, sizeof(int) * (size_t)n_layer);
    return ls_plan_validate(p, "one-stage plan");
}

int ls_plan_from_result(const ls_plan_problem *pb, const ls_plan_result *r, ls_plan *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->model_name, sizeof out->model_name, "%s", pb->arch->name);
    out->n_layer = pb->arch->n_layer;
    out->n_stages = r->n_stage;
    for (int s = 0; s < r->n_stage && s < LS_PLAN_MAX_DEV; s++) {
        snprintf(out->stages[s].device, sizeof out->stages[s].device, "%s", pb->cl->dev[r->dev[s]].name);
        out->stages[s].layer_begin = r->begin[s];
        out->stages[s].layer_end = r->begin[s + 1];
    }
    for (int i = 0; i < out->n_layer && i < LS_PLAN_MAX_LAYER; i++) out->bits[i] = r->bits[i];
    out->mb_prefill = r->mb_prefill;
    out->mb_decode = r->mb_decode;
    return ls_plan_validate(out, "planner result");
}

int ls_plan_to_result(const ls_plan_problem *pb, const ls_plan *p, const char *what, ls_plan_result *out) {
    memset(out, 0, sizeof *out);
    if (p->n_layer != pb->arch->n_layer)
        return ls_err(LS_EFORMAT, "%s: plan is for a model with %d layers, %s has %d", what, p->n_layer, pb->arch->name,
                      pb->arch->n_layer);
    if (p->n_stages > pb->cl->n_dev)
        return ls_err(LS_EFORMAT, "%s: %d stages, but cluster %s has %d devices", what, p->n_stages, pb->cl->name,
                      pb->cl->n_dev);
    unsigned char used[LS_PLAN_MAX_DEV] = {0};
    for (int s = 0; s < p->n_stages; s++) {
        /* first unused device of that name */
        int d = 0;
        while (d < pb->cl->n_dev && (used[d] || strcasecmp(pb->cl->dev[d].name, p->stages[s].device))) d++;
        if (d == pb->cl->n_dev)
            return ls_err(LS_EFORMAT, "%s: stage %d: no free device named '%s' in cluster %s", what, s,
                          p->stages[s].device, pb->cl->name);
        used[d] = 1;
        out->dev[s] = d;
        out->begin[s] = p->stages[s].layer_begin;
        out->begin[s + 1] = p->stages[s].layer_end;
    }
    out->n_stage = p->n_stages;
    for (int i = 0; i < p->n_layer; i++) out->bits[i] = (unsigned char)p->bits[i];
    out->mb_prefill = p->mb_prefill;
    out->mb_decode = p->mb_decode;
    int rc = ls_plan_evaluate(pb, out);
    return rc == LS_EINVAL ? ls_err_wrap(LS_EFORMAT, "%s", what) : rc;
}
