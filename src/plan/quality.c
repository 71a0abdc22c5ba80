/* quality.c - per-layer, per-bit-width quality indicators: the documented default
 * profile, LLM-PQ's variance indicator and a quantization-error variant computed from an
 * llmsys checkpoint, and user indicator files. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/model.h"
#include "llmsys/plan.h"
#include "llmsys/train.h"

#define NB LS_PLAN_NBITS

/* Squared quantization step of a b-bit grid relative to the weight range, the g(b) of
 * the variance indicator: s_w = range / (2^(b-1) - 1). */
static double step2(int bits) {
    double q = ldexp(1.0, bits - 1) - 1.0;
    return 1.0 / (q * q);
}

int ls_plan_quality_normalise(const ls_plan_arch *a, double *omega) {
    double s = 0;
    int k4 = ls_plan_bits_index(4);
    for (int i = 0; i < a->n_layer; i++) s += omega[i * NB + k4];
    if (!(s > 0) || !isfinite(s)) return ls_err(LS_EINVAL, "quality indicator of %s is zero or not finite", a->name);
    for (int i = 0; i < a->n_layer * NB; i++) omega[i] /= s;
    return LS_OK;
}

int ls_plan_quality_default(const ls_plan_arch *a, double *omega) {
    int L = a->n_layer;
    for (int i = 0; i < L; i++) {
        /* first layers are the most sensitive to quantization, the last ones somewhat more
         * than the middle (docs/plan.md "Default indicator profile") */
        double s = 1.0 + 1.5 * exp(-i / 1.5) + 0.5 * exp(-(L - 1 - i) / 1.5);
        for (int k = 0; k < NB; k++) omega[i * NB + k] = s * step2(ls_plan_bits[k]);
    }
    return ls_plan_quality_normalise(a, omega);
}

/* ---------------------------------------------------------------- from a checkpoint */

typedef struct {
    const float *w;
    int out, in;
    const double *var_in; /* variance of each input feature (in) */
} linear_t;

/* Variance of W x per output row given independent inputs of variance var_in. */
static void propagate(const float *w, int out, int in, const double *var_in, double *var_out) {
    for (int c = 0; c < out; c++) {
        double s = 0;
        for (int k = 0; k < in; k++) s += (double)w[(size_t)c * in + k] * w[(size_t)c * in + k] * var_in[k];
        var_out[c] = s;
    }
}

/* LLM-PQ variance term of one linear for every bit width: s_w^2 * sum Var(x). */
static void variance_term(const linear_t *l, double *acc) {
    double range = 0, sv = 0;
    for (int c = 0; c < l->out; c++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int k = 0; k < l->in; k++) {
            float v = l->w[(size_t)c * l->in + k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (hi - lo > range) range = hi - lo;
    }
    for (int k = 0; k < l->in; k++) sv += l->var_in[k];
    for (int b = 0; b < NB; b++) acc[b] += range * range * step2(ls_plan_bits[b]) * sv;
}

/* Expected squared output error of one linear when its weights are round-tripped through
 * b-bit asymmetric min-max quantization (groups of 128 inputs per row; fp16 for 16):
 * E|dW x|^2 = sum_{c,k} dW[c,k]^2 Var(x_k). */
static void error_term(const linear_t *l, double *acc) {
    enum { G = 128 };
    for (int b = 0; b < NB; b++) {
        int bits = ls_plan_bits[b];
        double levels = ldexp(1.0, bits) - 1.0, e = 0;
        for (int c = 0; c < l->out; c++) {
            const float *row = l->w + (size_t)c * l->in;
            for (int g0 = 0; g0 < l->in; g0 += G) {
                int g1 = g0 + G < l->in ? g0 + G : l->in;
                float lo = INFINITY, hi = -INFINITY;
                for (int k = g0; k < g1; k++) {
                    lo = row[k] < lo ? row[k] : lo;
                    hi = row[k] > hi ? row[k] : hi;
                }
                double scale = (hi - lo) / levels;
                for (int k = g0; k < g1; k++) {
                    double d;
                    if (bits == 16) {
                        /* fp16 keeps 11 significant bits: uniform rounding error */
                        double ulp = ldexp(fabs(row[k]), -11);
                        d = ulp / sqrt(12.0);
                    } else if (scale > 0) {
                        double q = nearbyint((row[k] - lo) / scale);
                        d = row[k] - (q * scale + lo);
                    } else {
                        d = 0;
                    }
                    e += d * d * l->var_in[k];
                }
            }
        }
        acc[b] += e;
    }
}

/* Walks every layer's four linears. Their input variances are calib's where given (per layer
 * 3C + F: the inputs of qkv, proj, fc, mproj; ls_plan_calib_var), else propagated from the
 * weights: after a LayerNorm Var(x_k) = gain_k^2; the attention output mixes values, so
 * Var = Var(W_v x); the MLP's second linear sees GELU(W_fc x), Var ~ 0.425 Var(W_fc x)
 * (GELU of a zero-mean Gaussian). */
static int checkpoint_indicator(const char *path, const ls_plan_arch *a, double *omega, int measured,
                                const double *calib) {
    ls_st_file *f;
    ls_model_config mc;
    LS_TRY(ls_ckpt_open(path, &f, &mc));
    int C = a->d_model, F = a->d_ff, rc = LS_OK;
    double *v_ln = malloc(sizeof(double) * (size_t)C), *v_att = malloc(sizeof(double) * (size_t)C);
    double *v_mlp = malloc(sizeof(double) * (size_t)F);
    if (mc.n_layer != a->n_layer || mc.d_model != C || mc.d_ff != F) {
        rc = ls_err(LS_EINVAL, "%s: checkpoint (%d layers, d_model %d, d_ff %d) does not match %s", path, mc.n_layer,
                    mc.d_model, mc.d_ff, a->name);
        goto done;
    }
    if (!v_ln || !v_att || !v_mlp) {
        rc = ls_err(LS_ENOMEM, "indicator buffers");
        goto done;
    }
    for (int l = 0; l < a->n_layer && rc == LS_OK; l++) {
        /* the six tensors the indicator reads, by their place in the model's layout */
        static const int kinds[6] = {LS_LT_LN1W, LS_LT_QKVW, LS_LT_PROJW, LS_LT_LN2W, LS_LT_FCW, LS_LT_FCPW};
        const float *t[6];
        for (int k = 0; k < 6 && rc == LS_OK; k++) rc = ls_ckpt_tensor(f, &mc, ls_model_layout_index(&mc, l, kinds[k]), &t[k]);
        if (rc) break;
        const float *ln1 = t[0], *qkv = t[1], *proj = t[2], *ln2 = t[3], *fc = t[4], *mproj = t[5];
        const double *cv = calib ? calib + (size_t)l * (3 * C + F) : NULL; /* qkv, proj, fc, mproj inputs */
        double acc[NB] = {0};
        void (*term)(const linear_t *, double *) = measured ? error_term : variance_term;
        for (int k = 0; k < C; k++) v_ln[k] = (double)ln1[k] * ln1[k];
        term(&(linear_t){qkv, 3 * C, C, cv ? cv : v_ln}, acc);
        if (!cv) propagate(qkv + (size_t)2 * C * C, C, C, v_ln, v_att); /* the V rows */
        term(&(linear_t){proj, C, C, cv ? cv + C : v_att}, acc);
        for (int k = 0; k < C; k++) v_ln[k] = (double)ln2[k] * ln2[k];
        term(&(linear_t){fc, F, C, cv ? cv + 2 * C : v_ln}, acc);
        if (!cv) propagate(fc, F, C, v_ln, v_mlp);
        for (int k = 0; k < F && !cv; k++) v_mlp[k] *= 0.425;
        term(&(linear_t){mproj, C, F, cv ? cv + 3 * C : v_mlp}, acc);
        for (int b = 0; b < NB; b++) omega[l * NB + b] = acc[b];
    }
    if (rc == LS_OK) rc = ls_plan_quality_normalise(a, omega);
done:
    free(v_ln);
    free(v_att);
    free(v_mlp);
    ls_st_close(f);
    return rc;
}

int ls_plan_quality_from_checkpoint(const char *path, const ls_plan_arch *a, double *omega) {
    return checkpoint_indicator(path, a, omega, 0, NULL);
}

int ls_plan_quality_measured(const char *path, const ls_plan_arch *a, double *omega) {
    return checkpoint_indicator(path, a, omega, 1, NULL);
}

/* ---------------------------------------------------------------- calibration */

typedef struct {
    int L, C, F;
    double *sum, *sq; /* per layer 3C + F features */
    double *rs;       /* sums of 1/sigma^2 of the LayerNorms' input rows: ln1, ln2 per layer, then lnf */
    double rows;
} calib_acc;

/* Adds the last forward's Linear inputs to the sums (ls_eval_tokens_each's callback). */
static int calib_add(const ls_model *m, void *ctx) {
    calib_acc *c = ctx;
    size_t S = (size_t)3 * c->C + c->F;
    int rows = 0;
    for (int l = 0; l < c->L; l++) {
        size_t off = l * S;
        for (int kind = 0; kind < LS_LIN_COUNT; kind++) {
            int in;
            const float *x = ls_model_lin_input(m, l, kind, &rows, &in);
            if (!x) return ls_err(LS_ESTATE, "calibration: no activations after a forward");
            double *s = c->sum + off, *q = c->sq + off;
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < in; k++) {
                    double v = x[(size_t)r * in + k];
                    s[k] += v, q[k] += v * v;
                }
            off += (size_t)in;
        }
    }
    for (int l = 0; l <= c->L; l++)
        for (int w = 0; w < (l < c->L ? 2 : 1); w++) {
            const float *r = ls_model_ln_rstd(m, l, w, &rows);
            if (!r) return ls_err(LS_ESTATE, "calibration: no activations after a forward");
            for (int i = 0; i < rows; i++) c->rs[2 * l + w] += (double)r[i] * r[i];
        }
    c->rows += rows;
    return LS_OK;
}

int ls_plan_calib_var(ls_model *m, const uint16_t *tok, size_t n, int T, int B, size_t max_tokens, double *var,
                      double *rstd2, ls_eval_result *r) {
    const ls_model_config *mc = ls_model_cfg(m);
    size_t S = (size_t)3 * mc->d_model + mc->d_ff, NV = (size_t)mc->n_layer * S, NR = 2 * (size_t)mc->n_layer + 1;
    calib_acc c = {mc->n_layer,
                   mc->d_model,
                   mc->d_ff,
                   calloc(NV, sizeof(double)),
                   calloc(NV, sizeof(double)),
                   calloc(NR, sizeof(double)),
                   0};
    int rc = c.sum && c.sq && c.rs ? ls_eval_tokens_each(m, tok, n, T, B, max_tokens, calib_add, &c, r)
                                   : ls_err(LS_ENOMEM, "calibration sums");
    if (rc == LS_OK && !(c.rows > 1)) rc = ls_err(LS_EINVAL, "calibration: fewer than 2 tokens forwarded");
    for (size_t i = 0; i < NV && rc == LS_OK; i++) {
        double mean = c.sum[i] / c.rows, v = c.sq[i] / c.rows - mean * mean;
        var[i] = v > 0 ? v : 0; /* rounding can leave -0 for a constant input */
    }
    for (size_t i = 0; i < NR && rc == LS_OK && rstd2; i++) rstd2[i] = c.rs[i] / c.rows;
    free(c.sum);
    free(c.sq);
    free(c.rs);
    return rc;
}

int ls_plan_quality_calibrated(const char *path, const char *const *paths, int n_paths, size_t max_tokens,
                               const ls_plan_arch *a, double *omega, int flags, ls_eval_result *r) {
    ls_model *m = NULL;
    ls_bpe *bpe = NULL;
    ls_corpus *c = NULL;
    double *var = NULL, *rstd2 = NULL;
    int rc = ls_ckpt_load(path, LS_CKPT_WEIGHTS, &m, NULL); /* fp32 only */
    if (rc == LS_OK) rc = ls_corpus_load_for(path, paths, n_paths, NULL, &c, &bpe);
    if (rc == LS_OK) {
        const ls_model_config *mc = ls_model_cfg(m);
        size_t L = (size_t)mc->n_layer, S = 3 * (size_t)mc->d_model + mc->d_ff;
        var = malloc(sizeof(double) * L * S);
        rstd2 = malloc(sizeof(double) * (2 * L + 1));
        size_t n;
        const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &n); /* the held-out text stays unseen */
        rc = var && rstd2 ? ls_plan_calib_var(m, tok, n, mc->n_ctx, 8, max_tokens, var, rstd2, r)
                          : ls_err(LS_ENOMEM, "calibration");
        if (rc < 0) rc = ls_err_wrap(rc, "calibration on the train split");
        /* relative: an error added to the residual stream stays in it, and every LayerNorm
         * after it reads it divided by that LayerNorm's sigma; each linear's error is weighted by
         * the mean 1/sigma^2 of those readers (rstd2[i] for the i-th LayerNorm, lnf last) */
        int relative = rc == LS_OK && (flags & LS_PLAN_QUALITY_RELATIVE);
        for (size_t i = 2 * L; relative && i-- > 0;) rstd2[i] += rstd2[i + 1]; /* suffix sums */
        for (size_t l = 0; relative && l < L; l++) {
            size_t a = 2 * l + 1, m = 2 * l + 2; /* the attention's first reader is ln2 of l; the MLP's ln1 of l+1 */
            double w_att = rstd2[a] / (double)(2 * L + 1 - a), w_mlp = rstd2[m] / (double)(2 * L + 1 - m);
            for (size_t k = 0; k < S; k++) var[l * S + k] *= k < 2 * (size_t)mc->d_model ? w_att : w_mlp;
        }
    }
    if (m) ls_model_free(m);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    if (rc == LS_OK) rc = checkpoint_indicator(path, a, omega, flags & LS_PLAN_QUALITY_MEASURED, var);
    free(var);
    free(rstd2);
    return rc;
}

/* ---------------------------------------------------------------- files */

int ls_plan_quality_from_file(const char *path, const ls_plan_arch *a, double *omega) {
    cJSON *j;
    LS_TRY(ls_json_read_format(path, "llmsys-indicator", 1, &j));
    int rc = LS_OK;
    const cJSON *om = cJSON_GetObjectItemCaseSensitive(j, "omega");
    if (!cJSON_IsArray(om) || cJSON_GetArraySize(om) != a->n_layer) {
        rc = ls_err(LS_EFORMAT, "%s: \"omega\" must list %d layers for %s", path, a->n_layer, a->name);
    } else {
        int i = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, om) {
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != NB) {
                rc = ls_err(LS_EFORMAT, "%s: omega[%d] must hold 4 numbers (bits 3, 4, 8, 16)", path, i);
                break;
            }
            for (int k = 0; k < NB; k++) {
                const cJSON *x = cJSON_GetArrayItem(row, k);
                if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || !isfinite(x->valuedouble)) {
                    rc = ls_err(LS_EFORMAT, "%s: omega[%d][%d] must be a finite number >= 0", path, i, k);
                    break;
                }
                omega[i * NB + k] = x->valuedouble;
            }
            if (rc) break;
            i++;
        }
    }
    cJSON_Delete(j);
    if (rc == LS_OK) rc = ls_plan_quality_normalise(a, omega);
    return rc;
}

int ls_plan_quality_write(const char *path, const ls_plan_arch *a, const double *omega) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "indicator JSON");
    cJSON_AddStringToObject(j, "format", "llmsys-indicator");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "model", a->name);
    cJSON *bits = cJSON_AddArrayToObject(j, "bits");
    for (int k = 0; k < NB; k++) cJSON_AddItemToArray(bits, cJSON_CreateNumber(ls_plan_bits[k]));
    cJSON *om = cJSON_AddArrayToObject(j, "omega");
    for (int i = 0; i < a->n_layer; i++) {
        cJSON *row = cJSON_CreateDoubleArray(omega + i * NB, NB);
        cJSON_AddItemToArray(om, row);
    }
    int rc = ls_json_write_file(path, j);
    cJSON_Delete(j);
    return rc;
}

int ls_plan_quality_load(const char *how, const char *model, const ls_plan_arch *a, double *omega) {
    if (!how || !strcmp(how, "default"))
        return ls_is_file(model) ? ls_plan_quality_from_checkpoint(model, a, omega) : ls_plan_quality_default(a, omega);
    if (!strcmp(how, "variance") || !strcmp(how, "measured")) {
        if (!ls_is_file(model))
            return ls_err(LS_EINVAL, "--indicator %s needs --model to be an llmsys checkpoint path", how);
        return !strcmp(how, "variance") ? ls_plan_quality_from_checkpoint(model, a, omega)
                                        : ls_plan_quality_measured(model, a, omega);
    }
    return ls_plan_quality_from_file(how, a, omega);
}

int ls_plan_quality_method(const char *how, const char *model, const ls_plan_arch *a, double *omega) {
    if (!strcmp(how, "default")) return ls_plan_quality_default(a, omega);
    if ((!strcmp(how, "variance") || !strcmp(how, "measured")) && !ls_is_file(model)) /* a catalog name */
        return ls_err(LS_EINVAL, "--method %s needs --model to be an llmsys checkpoint path (%s: use --method default)",
                      how, model);
    if (!strcmp(how, "variance")) return ls_plan_quality_from_checkpoint(model, a, omega);
    if (!strcmp(how, "measured")) return ls_plan_quality_measured(model, a, omega);
    return ls_err(LS_EINVAL, "--method '%s': variance, measured or default", how);
}
