/* plan.c - fault-injection plans: JSON lists of (step or time, rank, kind). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llmsys/robust.h"

void ls_fault_plan_free(ls_fault_plan *p) {
    free(p->f);
    p->f = NULL;
    p->n = 0;
}

static int injectable(int k) {
    return k == LS_FAULT_CRASH || k == LS_FAULT_HANG || k == LS_FAULT_NAN || k == LS_FAULT_SLOW ||
           k == LS_FAULT_OOM || k == LS_FAULT_CORRUPT_CKPT;
}

/* The plan of a parsed document (j is the caller's). */
static int plan_from_json(const cJSON *j, const char *what, int ranks, ls_fault_plan *p) {
    int rc = LS_OK;
    const cJSON *arr = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "faults") : NULL;
    if (!cJSON_IsArray(arr)) return ls_err(LS_EINVAL, "%s: expected an object with a \"faults\" array", what);
    int n = cJSON_GetArraySize(arr);
    p->f = calloc((size_t)(n > 0 ? n : 1), sizeof *p->f);
    if (!p->f) return ls_err(LS_ENOMEM, "out of memory");
    for (int i = 0; i < n && rc == LS_OK; i++) {
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        ls_fault_spec *f = &p->f[i];
        const char *kind = NULL;
        double step = -1, time = -1, share = 0.25;
        int rank = 0, sticky = 0;
        if (!cJSON_IsObject(e)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d is not an object", what, i);
            break;
        }
        for (const cJSON *k = e->child; k && rc == LS_OK; k = k->next)
            if (strcmp(k->string, "kind") && strcmp(k->string, "step") && strcmp(k->string, "time") &&
                strcmp(k->string, "rank") && strcmp(k->string, "share") && strcmp(k->string, "sticky"))
                rc = ls_err(LS_EINVAL, "%s: fault %d: unknown field \"%s\"", what, i, k->string);
        if (rc == LS_OK) rc = ls_json_get_string(e, "kind", NULL, &kind);
        if (rc == LS_OK) rc = ls_json_get_double(e, "step", -1, &step);
        if (rc == LS_OK) rc = ls_json_get_double(e, "time", -1, &time);
        if (rc == LS_OK) rc = ls_json_get_int(e, "rank", 0, &rank);
        if (rc == LS_OK) rc = ls_json_get_double(e, "share", 0.25, &share);
        if (rc == LS_OK) rc = ls_json_get_int(e, "sticky", 0, &sticky);
        if (rc < 0) {
            rc = ls_err_wrap(LS_EINVAL, "%s: fault %d", what, i);
            break;
        }
        if (!kind) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: missing \"kind\"", what, i);
        } else if ((f->kind = ls_fault_parse(kind)) < 0 || !injectable(f->kind)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: unknown kind \"%s\" (crash, hang, nan, slow, oom, corrupt-ckpt)",
                        what, i, kind);
        } else if ((step >= 0) == (time >= 0)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: give exactly one of \"step\" (>= 1) or \"time\" (>= 0 s)", what, i);
        } else if (step >= 0 && (step < 1 || step != floor(step) || step > 1e12)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: step must be an integer >= 1", what, i);
        } else if (time >= 0 && !(time <= 1e7)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: time out of range", what, i);
        } else if (rank < 0 || (ranks > 0 && rank >= ranks)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: rank %d outside [0, %d)", what, i, rank, ranks);
        } else if (!(share > 0 && share < 1)) {
            rc = ls_err(LS_EINVAL, "%s: fault %d: share must be in (0, 1)", what, i);
        }
        if (rc < 0) break; /* a refused step may be out of int64's range: never convert it */
        f->step = step >= 0 ? (int64_t)step : -1;
        f->time = time;
        f->rank = rank;
        f->share = share;
        f->sticky = sticky != 0;
        p->n = i + 1;
    }
    if (rc < 0) ls_fault_plan_free(p);
    return rc;
}

/* The plan of a parsed document j (NULL: its reading failed with rc); frees j. */
static int plan_take(int rc, cJSON *j, const char *what, int ranks, ls_fault_plan *p) {
    if (rc == LS_OK) rc = plan_from_json(j, what, ranks, p);
    cJSON_Delete(j);
    return rc;
}

int ls_fault_plan_parse(const char *json, size_t len, const char *what, int ranks, ls_fault_plan *p) {
    memset(p, 0, sizeof *p);
    cJSON *j = NULL;
    int rc = ls_json_parse(json, len, what, &j);
    return plan_take(rc, j, what, ranks, p);
}

int ls_fault_plan_load(const char *path, int ranks, ls_fault_plan *p) {
    memset(p, 0, sizeof *p);
    cJSON *j = NULL;
    int rc = ls_json_read_file(path, &j);
    return plan_take(rc, j, path, ranks, p);
}
