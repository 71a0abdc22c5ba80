/* checkpoint.c - the checkpoint layout (tensor names and shapes, in parameter order) and
 * the one checkpoint opener (config, format version, quantization metadata) that train,
 * serve, quant and plan use. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/model.h"

static const char *const layer_suffix[LS_LT_COUNT] = {"ln1.w",    "ln1.b",    "attn.qkv.w", "attn.qkv.b",
                                                      "attn.proj.w", "attn.proj.b", "ln2.w",  "ln2.b",
                                                      "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"};
static const int lin_weight[LS_LIN_COUNT] = {LS_LT_QKVW, LS_LT_PROJW, LS_LT_FCW, LS_LT_FCPW};

int ls_model_layout_count(const ls_model_config *c) { return 2 + c->n_layer * LS_LT_COUNT + 2; }

int ls_model_layout_index(const ls_model_config *c, int layer, int kind) {
    if (layer >= 0) return 2 + layer * LS_LT_COUNT + kind;
    return kind <= LS_GT_WPE ? kind : 2 + c->n_layer * LS_LT_COUNT + (kind - LS_GT_LNFW);
}

int ls_model_linear_tensor(int lin) { return lin_weight[lin]; }

int ls_model_linear_of(int kind) {
    for (int i = 0; i < LS_LIN_COUNT; i++)
        if (lin_weight[i] == kind) return i;
    return -1;
}

void ls_model_linear_shape(const ls_model_config *c, int lin, int *rows, int *cols) {
    int C = c->d_model, F = c->d_ff;
    const int r[LS_LIN_COUNT] = {3 * C, C, F, C}, k[LS_LIN_COUNT] = {C, C, C, F};
    *rows = r[lin];
    *cols = k[lin];
}

int ls_model_layout(const ls_model_config *c, int i, ls_tensor_spec *s) {
    int n = ls_model_layout_count(c), C = c->d_model;
    if (i < 0 || i >= n) return ls_err(LS_EINVAL, "layout: tensor %d outside [0, %d)", i, n);
    memset(s, 0, sizeof *s);
    s->linear = -1;
    int64_t d0, d1 = 0;
    if (i < 2 || i >= n - 2) {
        static const char *const gname[4] = {"wte", "wpe", "lnf.w", "lnf.b"};
        s->layer = -1;
        s->kind = i < 2 ? i : LS_GT_LNFW + (i - (n - 2));
        snprintf(s->name, sizeof s->name, "%s", gname[s->kind]);
        d0 = s->kind == LS_GT_WTE ? c->vocab : s->kind == LS_GT_WPE ? c->n_ctx : C;
        if (s->kind <= LS_GT_WPE) d1 = C;
    } else {
        s->layer = (i - 2) / LS_LT_COUNT;
        s->kind = (i - 2) % LS_LT_COUNT;
        s->linear = ls_model_linear_of(s->kind);
        snprintf(s->name, sizeof s->name, "h.%d.%s", s->layer, layer_suffix[s->kind]);
        int lin = s->linear >= 0 ? s->linear : ls_model_linear_of(s->kind - 1); /* a bias follows its weight */
        if (lin >= 0) {
            int rows, cols;
            ls_model_linear_shape(c, lin, &rows, &cols);
            d0 = rows;
            if (s->linear >= 0) d1 = cols;
        } else {
            d0 = C; /* LayerNorm gain and shift */
        }
    }
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    return LS_OK;
}

int ls_model_layout_parse(const char *name, int *layer, int *kind) {
    int l, off = 0;
    if (sscanf(name, "h.%d.%n", &l, &off) != 1 || off == 0 || l < 0) return 0;
    for (int k = 0; k < LS_LT_COUNT; k++)
        if (!strcmp(name + off, layer_suffix[k])) {
            *layer = l;
            *kind = k;
            return 1;
        }
    return 0;
}

/* ---------------------------------------------------------------- files */

int ls_ckpt_open(const char *path, ls_st_file **out, ls_model_config *cfg) {
    ls_st_file *f;
    LS_TRY(ls_st_open(path, &f));
    const char *cj = ls_st_meta(f, "llmsys.config");
    int rc = LS_OK;
    if (!cj) {
        rc = ls_err(LS_EFORMAT, "%s: not an llmsys checkpoint (no llmsys.config in the metadata)", path);
        goto fail;
    }
    const char *ver = ls_st_meta(f, "llmsys.ckpt");
    if (ver && strcmp(ver, LS_CKPT_VERSION) != 0) {
        rc = ls_err(LS_EUNSUPPORTED, "%s: checkpoint format version %s, this build reads %s", path, ver,
                    LS_CKPT_VERSION);
        goto fail;
    }
    if ((rc = ls_model_config_from_json(cj, cfg)) < 0 || (rc = ls_model_config_validate(cfg)) < 0) {
        rc = ls_err_wrap(LS_EFORMAT, "%s: bad llmsys.config", path);
        goto fail;
    }
    *out = f;
    return LS_OK;
fail:
    ls_st_close(f);
    return rc;
}

int ls_ckpt_tokenizer(ls_st_file *f, const ls_model_config *cfg, ls_bpe **out) {
    *out = NULL;
    const char *tj = ls_st_meta(f, "llmsys.tokenizer");
    if (!tj) {
        if (cfg->vocab != LS_VOCAB)
            return ls_err(LS_EFORMAT, "%s: vocabulary of %d tokens but no llmsys.tokenizer in the metadata",
                          ls_st_path(f), cfg->vocab);
        return LS_OK;
    }
    int rc = ls_bpe_parse(tj, strlen(tj), out);
    if (rc) return ls_err_wrap(rc, "%s: llmsys.tokenizer", ls_st_path(f));
    if (ls_bpe_vocab_size(*out) != cfg->vocab) {
        rc = ls_err(LS_EFORMAT, "%s: tokenizer of %d tokens for a vocabulary of %d", ls_st_path(f),
                    ls_bpe_vocab_size(*out), cfg->vocab);
        ls_bpe_free(*out);
        *out = NULL;
    }
    return rc;
}

int ls_ckpt_tokenizer_load(const char *path, const ls_model_config *cfg, ls_bpe **out) {
    ls_st_file *f;
    ls_model_config c;
    *out = NULL;
    LS_TRY(ls_ckpt_open(path, &f, &c));
    int rc = ls_ckpt_tokenizer(f, cfg ? cfg : &c, out);
    ls_st_close(f);
    return rc;
}

int ls_ckpt_quant_meta(ls_st_file *f, int n_layer, int *group, int *bits) {
    const char *qj = ls_st_meta(f, "llmsys.quant");
    for (int l = 0; l < n_layer; l++) bits[l] = 32;
    *group = 64;
    if (!qj) return 0;
    cJSON *j = cJSON_Parse(qj);
    if (!j) return ls_err(LS_EFORMAT, "%s: \"llmsys.quant\" metadata is not JSON", ls_st_path(f));
    int rc = 1, ver = 0;
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bits");
    if (ls_json_get_int(j, "version", 0, &ver) || ver < 1 || ver > LS_QUANT_FORMAT_VERSION)
        rc = ls_err(LS_EFORMAT, "%s: llmsys.quant format version %d unsupported (this build reads versions 1 to %d)",
                    ls_st_path(f), ver, LS_QUANT_FORMAT_VERSION);
    else if (ls_json_get_int(j, "group", 64, group) || !ls_quant_group_valid(*group))
        rc = ls_err(LS_EFORMAT, "%s: llmsys.quant group %d unsupported", ls_st_path(f), *group);
    else if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != n_layer)
        rc = ls_err(LS_EFORMAT, "%s: llmsys.quant bits must list %d layers", ls_st_path(f), n_layer);
    else
        for (int l = 0; l < n_layer; l++) {
            cJSON *e = cJSON_GetArrayItem(b, l);
            if (!cJSON_IsNumber(e) || !ls_quant_bits_valid(e->valueint)) {
                rc = ls_err(LS_EFORMAT, "%s: llmsys.quant bits[%d] invalid", ls_st_path(f), l);
                break;
            }
            bits[l] = e->valueint;
        }
    cJSON_Delete(j);
    return rc;
}

int ls_ckpt_tensor(ls_st_file *f, const ls_model_config *c, int i, const float **data) {
    ls_tensor_spec s;
    LS_TRY(ls_model_layout(c, i, &s));
    const ls_st_tensor *t;
    LS_TRY(ls_st_expect(f, s.name, LS_DT_F32, s.ndim, s.shape, &t));
    *data = (const float *)t->data;
    return LS_OK;
}
