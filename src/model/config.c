/* config.c - named GPT configurations, validation, parameter counting and the compact
 * JSON form stored in checkpoints ("llmsys.config"). */
#include "llmsys/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Named configs. "small" is sized for the core demo: ~5.6 M parameters, so that two
 * cores train it through a few hundred steps of 8x128 tokens in about two minutes
 * (see docs/model.md for the measured step time). */
int ls_model_config_named(const char *name, ls_model_config *cfg) {
    if (!name) return ls_err(LS_EINVAL, "model config name is NULL");
    if (strcmp(name, "tiny") == 0) {
        *cfg = (ls_model_config){.vocab = LS_VOCAB, .n_ctx = 64, .n_layer = 2, .n_head = 4, .d_model = 64, .d_ff = 256};
    } else if (strcmp(name, "small") == 0) {
        *cfg =
            (ls_model_config){.vocab = LS_VOCAB, .n_ctx = 128, .n_layer = 7, .n_head = 8, .d_model = 256, .d_ff = 1024};
    } else {
        return ls_err(LS_EINVAL, "unknown model config '%s' (known: tiny, small)", name);
    }
    return LS_OK;
}

int ls_model_config_validate(const ls_model_config *c) {
    if (!c) return ls_err(LS_EINVAL, "model config is NULL");
    if (c->vocab < LS_VOCAB || c->vocab > 65536) /* ids are stored as uint16 in corpora and token files */
        return ls_err(LS_EINVAL, "config: vocab must be in [%d, 65536], got %d", LS_VOCAB, c->vocab);
    if (c->n_ctx < 1 || c->n_ctx > 8192)
        return ls_err(LS_EINVAL, "config: n_ctx must be in [1, 8192], got %d", c->n_ctx);
    if (c->n_layer < 1 || c->n_layer > 256)
        return ls_err(LS_EINVAL, "config: n_layer must be in [1, 256], got %d", c->n_layer);
    if (c->d_model < 1 || c->d_model > 16384)
        return ls_err(LS_EINVAL, "config: d_model must be in [1, 16384], got %d", c->d_model);
    if (c->n_head < 1 || c->n_head > c->d_model)
        return ls_err(LS_EINVAL, "config: n_head must be in [1, d_model=%d], got %d", c->d_model, c->n_head);
    if (c->d_model % c->n_head != 0)
        return ls_err(LS_EINVAL, "config: d_model (%d) must be divisible by n_head (%d)", c->d_model, c->n_head);
    if (c->d_ff < 1 || c->d_ff > 65536) return ls_err(LS_EINVAL, "config: d_ff must be in [1, 65536], got %d", c->d_ff);
    /* Keep every buffer size comfortably inside size_t/int arithmetic. */
    if (ls_model_config_num_params(c) > ((size_t)1 << 31))
        return ls_err(LS_EINVAL, "config: too many parameters (%zu)", ls_model_config_num_params(c));
    return LS_OK;
}

size_t ls_model_config_num_params(const ls_model_config *c) {
    size_t V = (size_t)c->vocab, T = (size_t)c->n_ctx, L = (size_t)c->n_layer, C = (size_t)c->d_model,
           F = (size_t)c->d_ff;
    size_t per_layer = 2 * C               /* ln1 */
                       + 3 * C * C + 3 * C /* qkv */
                       + C * C + C         /* attn proj */
                       + 2 * C             /* ln2 */
                       + F * C + F         /* fc */
                       + C * F + C;        /* mlp proj */
    return V * C + T * C + L * per_layer + 2 * C;
}

cJSON *ls_model_config_json(const ls_model_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "vocab", c->vocab);
    cJSON_AddNumberToObject(j, "n_ctx", c->n_ctx);
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNumberToObject(j, "d_model", c->d_model);
    cJSON_AddNumberToObject(j, "d_ff", c->d_ff);
    return j;
}

char *ls_model_config_to_json(const ls_model_config *c) {
    cJSON *j = ls_model_config_json(c);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

int ls_model_config_from_json(const char *json, ls_model_config *cfg) {
    if (!json) return ls_err(LS_EINVAL, "model config JSON is NULL");
    cJSON *j = NULL;
    LS_TRY(ls_json_parse(json, strlen(json), "model config", &j));
    int rc = LS_OK;
    if (!cJSON_IsObject(j)) {
        rc = ls_err(LS_EFORMAT, "model config: expected a JSON object");
        goto out;
    }
    static const char *keys[] = {"vocab", "n_ctx", "n_layer", "n_head", "d_model", "d_ff"};
    int vals[6];
    for (int i = 0; i < 6; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(j, keys[i])) {
            rc = ls_err(LS_EFORMAT, "model config: missing key '%s'", keys[i]);
            goto out;
        }
        if (ls_json_get_int(j, keys[i], 0, &vals[i]) != LS_OK) {
            rc = ls_err_wrap(LS_EFORMAT, "model config");
            goto out;
        }
    }
    /* Unknown keys are an error too: a config from a newer format must not be half-read. */
    for (const cJSON *it = j->child; it; it = it->next) {
        int known = 0;
        for (int i = 0; i < 6; i++) known |= it->string && strcmp(it->string, keys[i]) == 0;
        if (!known) {
            rc = ls_err(LS_EFORMAT, "model config: unknown key '%s'", it->string ? it->string : "?");
            goto out;
        }
    }
    ls_model_config c = {
        .vocab = vals[0], .n_ctx = vals[1], .n_layer = vals[2], .n_head = vals[3], .d_model = vals[4], .d_ff = vals[5]};
    rc = ls_model_config_validate(&c);
    if (rc == LS_OK) *cfg = c;
out:
    cJSON_Delete(j);
    return rc;
}
