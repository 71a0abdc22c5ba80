/* eval.c - the evaluator's side of model stealing: the victim's labels on a test set
 * through its API, test rows put into the units the API takes, replica metadata. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "llmsys/safetensors.h"
#include "llmsys/steal.h"

int ls_steal_client_labels(ls_steal_client *cl, const ls_steal_data *d, int32_t *lab) {
    for (int64_t s = 0; s < d->n; s += 256) {
        int b = (int)(d->n - s < 256 ? d->n - s : 256);
        LS_TRY(ls_steal_client_query(cl, d->x + s * d->d, b, lab + s, NULL, NULL));
    }
    return LS_OK;
}

int ls_steal_match_units(ls_steal_client *cl, ls_steal_data **sets, int nsets, const char **units) {
    int status = 0;
    char *body = NULL;
    *units = "as given";
    if (ls_steal_client_get(cl, "/info", &status, &body) != LS_OK || status != 200) {
        free(body);
        return LS_OK;
    }
    cJSON *j = cJSON_Parse(body);
    free(body);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "units"),
                *ir = cJSON_GetObjectItemCaseSensitive(j, "input_range");
    const cJSON *fmin = cJSON_GetObjectItemCaseSensitive(j, "feature_min");
    const cJSON *fmax = cJSON_GetObjectItemCaseSensitive(j, "feature_max");
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(j, "model_range");
    int rc = LS_OK, raw = cJSON_IsString(u) && !strcmp(u->valuestring, "raw");
    float lo = cJSON_GetArraySize(ir) == 2 ? (float)cJSON_GetArrayItem(ir, 0)->valuedouble : sets[0]->lo;
    float hi = cJSON_GetArraySize(ir) == 2 ? (float)cJSON_GetArrayItem(ir, 1)->valuedouble : sets[0]->hi;
    int d = sets[0]->d, have = cJSON_GetArraySize(fmin) == d && cJSON_GetArraySize(fmax) == d;
    float *mn = malloc(sizeof(float) * (size_t)d), *mx = malloc(sizeof(float) * (size_t)d);
    if (!mn || !mx) rc = ls_err(LS_ENOMEM, "out of memory");
    for (int f = 0; !rc && have && f < d; f++) {
        mn[f] = (float)cJSON_GetArrayItem(fmin, f)->valuedouble;
        mx[f] = (float)cJSON_GetArrayItem(fmax, f)->valuedouble;
    }
    for (int i = 0; !rc && i < nsets; i++) {
        ls_steal_data *t = sets[i];
        if (!t->n) continue;
        if (raw && t->raw_min) {
            ls_steal_unscale_rows(t->raw_min, t->raw_max, t->d, t->lo, t->hi, t->x, t->n);
            free(t->raw_min), free(t->raw_max);
            t->raw_min = t->raw_max = NULL;
        } else if (!raw && !t->raw_min && have && cJSON_GetArraySize(mr) == 2) {
            ls_steal_scale_rows(mn, mx, d, (float)cJSON_GetArrayItem(mr, 0)->valuedouble,
                                (float)cJSON_GetArrayItem(mr, 1)->valuedouble, t->x, t->n);
        } else if (!raw && !t->raw_min) {
            /* rows in their own units for an API that takes [lo, hi] and knows no scaler */
            for (int64_t k = 0; k < t->n * t->d; k++)
                if (t->x[k] < lo - 1e-4f * (hi - lo) || t->x[k] > hi + 1e-4f * (hi - lo)) {
                    rc = ls_err(LS_EINVAL,
                                "%s: value %g outside the target's input range [%g, %g], and the target stores no "
                                "scaler (a victim file from before format version 2?): retrain the victim, or "
                                "evaluate on its scaled held-out rows with --test-split 0.2",
                                t->name, t->x[k], lo, hi);
                    break;
                }
        }
        t->lo = lo;
        t->hi = hi;
    }
    if (!rc) *units = raw ? "raw units" : "model units";
    free(mn), free(mx);
    cJSON_Delete(j);
    return rc;
}

int64_t ls_replica_recorded_queries(const char *path) {
    int64_t n = 0;
    ls_st_file *f;
    if (ls_st_open(path, &f) != LS_OK) return 0;
    const char *m = ls_st_meta(f, "llmsys.steal.report");
    cJSON *rj = m ? cJSON_Parse(m) : NULL;
    const cJSON *q = rj ? cJSON_GetObjectItemCaseSensitive(rj, "queries") : NULL;
    if (cJSON_IsNumber(q) && q->valuedouble >= 1 && q->valuedouble <= 1e15)
        n = (int64_t)q->valuedouble; /* range before the cast */
    cJSON_Delete(rj);
    ls_st_close(f);
    return n;
}

void ls_steal_opts_for_data(ls_steal_opts *o, const ls_steal_data *d) {
    o->c = d->c;
    o->h = d->h;
    o->w = d->w;
    o->lo = d->lo;
    o->hi = d->hi;
    o->k = d->k;
}

double ls_steal_label_accuracy(const int32_t *labels, const ls_steal_data *d) {
    int64_t ok = 0;
    for (int64_t i = 0; i < d->n; i++) ok += labels[i] == d->y[i];
    return d->n ? (double)ok / (double)d->n : 0;
}

/* The report of a member test that adds a model's softmax to the MLP's (the CNN's, the linear
 * member's): object `name` of j with whether it was kept, the sum's held-back accuracy under
 * `acc_key`, the rows won and lost, and the MLP's held-back accuracy. */
static cJSON *sum_test_json(cJSON *j, const char *name, const char *acc_key, int kept, double acc, int64_t better,
                            int64_t worse, double mlp_acc) {
    cJSON *t = cJSON_AddObjectToObject(j, name);
    cJSON_AddBoolToObject(t, "kept", kept);
    cJSON_AddNumberToObject(t, acc_key, acc);
    cJSON_AddNumberToObject(t, "rows_better", (double)better);
    cJSON_AddNumberToObject(t, "rows_worse", (double)worse);
    cJSON_AddNumberToObject(t, "mlp_holdout_accuracy", mlp_acc);
    return t;
}

cJSON *ls_steal_result_json(const char *target, const char *strategy, const ls_steal_opts *o,
                            const ls_steal_result *res) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", target);
    cJSON_AddStringToObject(j, "strategy", strategy);
    cJSON_AddNumberToObject(j, "budget", (double)o->budget);
    cJSON_AddNumberToObject(j, "queries", (double)res->queries);
    cJSON_AddNumberToObject(j, "rounds", res->rounds);
    cJSON_AddBoolToObject(j, "used_proba", res->used_proba);
    cJSON_AddBoolToObject(j, "stopped_early", res->stopped_early);
    if (res->stopped_early) cJSON_AddStringToObject(j, "error", res->error);
    cJSON_AddNumberToObject(j, "seconds", res->seconds);
    if (res->tree_tested) { /* the tree member's test (images) and whether the CART was kept */
        cJSON *t = cJSON_AddObjectToObject(j, "tree_member");
        cJSON_AddBoolToObject(t, "kept", res->tree_kept);
        cJSON_AddNumberToObject(t, "cart_holdout_accuracy", res->tree_acc);
        cJSON_AddNumberToObject(t, "mlp_holdout_accuracy", res->mlp_acc);
    }
    if (res->cnn_tested) { /* the CNN member's test (images) and whether the CNN was kept */
        cJSON *t = sum_test_json(j, "cnn_member", "mlp_plus_cnn_holdout_accuracy", res->cnn_kept, res->cnn_acc,
                                 res->cnn_better, res->cnn_worse, res->mlp_acc);
        cJSON_AddNumberToObject(t, "shift", o->cnn_shift);
        cJSON_AddNumberToObject(t, "epochs", o->cnn_epochs > 0 ? o->cnn_epochs : LS_STEAL_CNN_EPOCHS);
        cJSON_AddNumberToObject(t, "weight", o->cnn_weight > 0 ? o->cnn_weight : LS_STEAL_CNN_WEIGHT);
    }
    if (res->cnn_rank_tested || res->cnn_rank_cart_tested) { /* opts.cnn_rank: the tests after the seeds */
        cJSON *t;
        if (res->cnn_rank_tested)
            t = sum_test_json(j, "cnn_rank", "mlp_plus_cnn_holdout_accuracy", res->cnn_rank_kept, res->cnn_rank_acc,
                              res->cnn_rank_better, res->cnn_rank_worse, res->cnn_rank_mlp_acc);
        else { /* the CART won: the CNN's test did not run */
            t = cJSON_AddObjectToObject(j, "cnn_rank");
            cJSON_AddBoolToObject(t, "kept", 0);
            cJSON_AddNumberToObject(t, "mlp_holdout_accuracy", res->cnn_rank_mlp_acc);
        }
        if (res->cnn_rank_cart_tested) {
            cJSON_AddNumberToObject(t, "cart_holdout_accuracy", res->cnn_rank_cart_acc);
            cJSON_AddBoolToObject(t, "cart_won", res->cnn_rank_cart_won);
        }
        cJSON_AddNumberToObject(t, "answers", (double)res->cnn_rank_answers);
        cJSON_AddNumberToObject(t, "epochs", o->cnn_rank);
        cJSON_AddNumberToObject(t, "rounds", res->cnn_rank_rounds);
    }
    if (res->linear_tested) /* the linear member's test (images) and whether it was kept */
        sum_test_json(j, "linear_member", "mlp_plus_linear_holdout_accuracy", res->linear_kept, res->linear_acc,
                      res->linear_better, res->linear_worse, res->mlp_acc);
    if (o->strategy == LS_STEAL_SYNTH && o->h > 1 && o->w > 1) { /* the image prior's queries over its styles */
        cJSON_AddBoolToObject(j, "distilled", res->distilled);
        cJSON *st = cJSON_AddObjectToObject(j, "style_share");
        for (int i = 0; i < LS_STEAL_NSTYLE; i++)
            cJSON_AddNumberToObject(st, ls_steal_style_names[i], res->style_share[i]);
        cJSON_AddNumberToObject(j, "blend_share", res->blend_share);
    }
    cJSON *cc = cJSON_AddArrayToObject(j, "answers_per_class");
    for (int i = 0; i < o->k && i < 64; i++) cJSON_AddItemToArray(cc, cJSON_CreateNumber((double)res->class_count[i]));
    return j;
}
