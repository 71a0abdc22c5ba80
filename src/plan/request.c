/* request.c - a planning request as `llmsys plan serve` states it (catalog, cluster, model,
 * workload, indicator, bits, quality, solver settings) turned into a planner problem. */
#include <stdlib.h>

#include "llmsys/plan.h"

/* Errors in what the user gave (names, files, numbers). */
static int input_error(int rc) {
    return rc == LS_EINVAL || rc == LS_ENOTFOUND || rc == LS_EFORMAT || rc == LS_ERANGE || rc == LS_ECHECKSUM;
}

static int fail(int *kind, int k, int rc) {
    *kind = k;
    return rc;
}

int ls_plan_request_problem(const ls_plan_request *r, ls_plan_catalog **cat, ls_plan_cluster **cl, ls_plan_arch *arch,
                            ls_plan_problem **out, int *kind) {
    *cat = NULL, *cl = NULL, *out = NULL, *kind = LS_PLAN_REQ_RUNTIME;
    int rc;
    if ((rc = ls_plan_catalog_load(r->data, cat)) || (rc = ls_plan_cluster_load(*cat, r->cluster, cl)))
        return fail(kind, LS_PLAN_REQ_INPUT, rc);
    const char *model = r->model ? r->model : (*cl)->model[0] ? (*cl)->model : NULL;
    if (!model)
        return fail(kind, LS_PLAN_REQ_OPTION,
                    ls_err(LS_EINVAL, "--model is required (cluster %s names no model)", (*cl)->name));
    if ((rc = ls_plan_resolve_model(*cat, model, arch))) return fail(kind, LS_PLAN_REQ_INPUT, rc);
    ls_plan_workload wl = ls_plan_cluster_workload(*cl, r->batch, r->prompt, r->gen);
    if (r->batch == 0 || r->prompt == 0 || r->gen == 0 || r->batch < -1 || r->prompt < -1 || r->gen < -1)
        return fail(kind, LS_PLAN_REQ_OPTION, ls_err(LS_EINVAL, "--batch, --prompt and --gen must be positive"));
    ls_plan_problem *pb = malloc(sizeof *pb);
    if (!pb) return ls_err(LS_ENOMEM, "out of memory");
    if ((rc = ls_plan_problem_init(pb, arch, *cl, wl)) || (rc = ls_plan_problem_validate(pb)) ||
        (rc = ls_plan_quality_load(r->indicator, model, pb->arch, pb->omega)))
        *kind = input_error(rc) ? LS_PLAN_REQ_INPUT : LS_PLAN_REQ_RUNTIME;
    else if (r->bits && (rc = ls_plan_bits_mask_parse(r->bits, &pb->bits_mask)))
        *kind = LS_PLAN_REQ_OPTION, ls_err_wrap(rc, "--bits");
    if (rc) {
        free(pb);
        return rc;
    }
    pb->time_limit_s = r->time_limit_s;
    pb->replay_select = r->replay_select;
    if ((rc = ls_plan_problem_set_quality(pb, r->quality))) {
        free(pb);
        return fail(kind, LS_PLAN_REQ_INPUT, rc);
    }
    *out = pb;
    return LS_OK;
}
