/* cost.c - the planner's phase-aware cost and memory model (analytical from the GPU
 * catalog, or fitted from a `llmsys profile` device file) and plan evaluation.
 * Every term is documented in docs/plan.md. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/plan.h"
#include "plan/internal.h"

const int ls_plan_bits[LS_PLAN_NBITS] = {3, 4, 8, 16};

int ls_plan_bits_index(int bits) {
    for (int k = 0; k < LS_PLAN_NBITS; k++)
        if (ls_plan_bits[k] == bits) return k;
    return -1;
}

int ls_plan_bits_mask_parse(const char *list, int *mask) {
    if (*list && !ls_list_ok(list, 64)) /* strtok would skip an empty entry: "4,,8", "4," */
        return ls_err(LS_EINVAL, "'%.64s': a comma-separated list of 3, 4, 8, 16, none empty", list);
    char *tmp = strdup(list);
    int m = 0, rc = tmp ? LS_OK : ls_err(LS_ENOMEM, "out of memory");
    for (char *save = NULL, *t = tmp ? strtok_r(tmp, ",", &save) : NULL; t && rc == LS_OK;
         t = strtok_r(NULL, ",", &save)) {
        char *end;
        long b = strtol(t, &end, 10);
        int k = *end || b < 3 || b > 16 ? -1 : ls_plan_bits_index((int)b);
        if (k < 0) rc = ls_err(LS_EINVAL, "'%s' is not one of 3, 4, 8, 16", t);
        m |= k < 0 ? 0 : 1 << k;
    }
    free(tmp);
    if (rc == LS_OK && !m) rc = ls_err(LS_EINVAL, "'%s' names no bit width (3, 4, 8, 16)", list);
    if (rc == LS_OK) *mask = m;
    return rc;
}

/* Modelling constants (docs/plan.md, "Cost model"). */
#define EFF_COMPUTE 0.55  /* achieved fraction of peak tensor throughput in large GEMMs */
#define EFF_BW 0.80       /* achieved fraction of peak memory bandwidth in streaming reads */
#define CUDA_CORE_RATIO 8 /* tensor-core peak / CUDA-core peak (dequantization runs on CUDA cores) */
#define LAUNCH_S 30e-6    /* kernel launches and small ops of one layer (norms, residuals, rotary) */
#define GROUP 128         /* weights per fp16 scale in 3/4-bit group quantization */
#define INTRA_LAT_S 10e-6 /* device-to-device latency inside a node */
#define GB 1e9

double ls_plan_usable_bytes(double capacity) { return 0.95 * capacity - 1.93 * GB; }

static double kv_dim(const ls_plan_arch *a) { return (double)a->d_model / a->n_head * a->n_kv_head; }

double ls_plan_layer_params(const ls_plan_arch *a) {
    double d = a->d_model, f = a->d_ff;
    return d * (d + 2 * kv_dim(a)) + d * d + (a->gated ? 3.0 : 2.0) * d * f;
}

double ls_plan_layer_weight_bytes(const ls_plan_arch *a, int bits) {
    double n = ls_plan_layer_params(a);
    double scales = bits <= 4 ? n / GROUP * 2.0 : (bits == 8 ? (a->d_model + 2 * kv_dim(a) + 2 * a->d_ff) * 2.0 : 0);
    double small = 6.0 * a->d_model * 2.0; /* norm gains/biases and linear biases kept in fp16 (approx.) */
    return n * bits / 8.0 + scales + small;
}

double ls_plan_layer_kv_bytes(const ls_plan_arch *a, const ls_plan_workload *w) {
    return 2.0 * w->batch * (double)(w->prompt + w->gen) * kv_dim(a) * 2.0;
}

double ls_plan_embed_bytes(const ls_plan_arch *a) {
    return (double)a->vocab * a->d_model * 2.0 + (a->pos_embed ? (double)a->n_ctx * a->d_model * 2.0 : 0);
}

double ls_plan_head_bytes(const ls_plan_arch *a) {
    /* the last stage needs the LM head even when it is tied to the embedding (its own copy) */
    return (double)a->vocab * a->d_model * 2.0 + 2.0 * a->d_model * 2.0;
}

double ls_plan_workspace_bytes(const ls_plan_arch *a, const ls_plan_workload *w, int mb_pre, int mb_dec) {
    double d = a->d_model, f = a->d_ff * (a->gated ? 2.0 : 1.0);
    double pre = (double)mb_pre * w->prompt * (4 * d + f) * 2.0 + (double)mb_pre * a->n_head * (double)w->prompt * w->prompt * 2.0;
    double dec = (double)mb_dec * (4 * d + f) * 2.0 + (double)mb_dec * a->n_head * (double)(w->prompt + w->gen) * 2.0;
    double logits = (double)(mb_pre > mb_dec ? mb_pre : mb_dec) * a->vocab * 4.0;
    return (pre > dec ? pre : dec) + logits;
}

/* ---------------------------------------------------------------- analytical times */

/* Peak throughput of the matrix multiplies of a format: int8 tensor cores for W8A8 when
 * present, else fp16 (weight-only formats dequantize to fp16). */
static double fmt_peak(const ls_plan_gpu *g, int bits) {
    if (bits == 8 && g->int8_ops > 0) return g->int8_ops;
    return g->fp16_flops;
}

/* Dequantization work per weight element (unpack, scale, convert) of a weight-only format. */
static double deq_ops(const ls_plan_gpu *g, int bits) {
    if (bits == 16) return 0;
    if (bits == 8) return g->int8_ops > 0 ? 0 : 2;
    return bits == 4 ? 4 : 6;
}

static double deq_s(const ls_plan_arch *a, const ls_plan_gpu *g, int bits) {
    return ls_plan_layer_params(a) * deq_ops(g, bits) / (g->fp16_flops / CUDA_CORE_RATIO);
}

static double prof_bits_ok(const ls_plan_profile *p, int bits) {
    int k = ls_plan_bits_index(bits);
    return k >= 0 && p->has_bits[k];
}

double ls_plan_layer_prefill_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int bits, int mb, int seq) {
    const ls_plan_device *d = &cl->dev[dev];
    double bs = (double)mb * seq;
    if (d->prof >= 0) {
        const ls_plan_profile *p = &cl->prof[d->prof];
        if (!prof_bits_ok(p, bits)) return INFINITY;
        const double *c = p->pre[ls_plan_bits_index(bits)];
        return c[0] + c[1] * bs + c[2] * bs * seq;
    }
    const ls_plan_gpu *g = &d->gpu;
    double lin = 2.0 * bs * ls_plan_layer_params(a) / (fmt_peak(g, bits) * EFF_COMPUTE);
    double attn = 2.0 * bs * seq * a->d_model / (g->fp16_flops * EFF_COMPUTE);
    double wread = ls_plan_layer_weight_bytes(a, bits) / (g->bw_Bps * EFF_BW);
    return lin + attn + wread + deq_s(a, g, bits) + LAUNCH_S;
}

double ls_plan_layer_decode_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int bits, int mb, double ctx) {
    const ls_plan_device *d = &cl->dev[dev];
    if (d->prof >= 0) {
        const ls_plan_profile *p = &cl->prof[d->prof];
        if (!prof_bits_ok(p, bits)) return INFINITY;
        const double *c = p->dec[ls_plan_bits_index(bits)];
        return c[0] + c[1] * mb + c[2] * mb * ctx;
    }
    const ls_plan_gpu *g = &d->gpu;
    double kv = (double)mb * ctx * 2.0 * kv_dim(a) * 2.0;
    double mem = (ls_plan_layer_weight_bytes(a, bits) + kv) / (g->bw_Bps * EFF_BW);
    double lin = 2.0 * mb * ls_plan_layer_params(a) / (fmt_peak(g, bits) * EFF_COMPUTE);
    double attn = 4.0 * mb * ctx * a->d_model / (g->fp16_flops * EFF_COMPUTE);
    return mem + lin + attn + deq_s(a, g, bits) + LAUNCH_S;
}

double ls_plan_head_prefill_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int mb, int seq) {
    const ls_plan_device *d = &cl->dev[dev];
    if (d->prof >= 0) {
        const double *c = cl->prof[d->prof].head_pre;
        return c[0] + c[1] * mb + c[2] * (double)mb * seq;
    }
    const ls_plan_gpu *g = &d->gpu;
    /* logits of the last position of each sequence only */
    return 2.0 * mb * a->d_model * (double)a->vocab / (g->fp16_flops * EFF_COMPUTE) +
           ls_plan_head_bytes(a) / (g->bw_Bps * EFF_BW) + LAUNCH_S;
}

double ls_plan_head_decode_s(const ls_plan_arch *a, const ls_plan_cluster *cl, int dev, int mb) {
    const ls_plan_device *d = &cl->dev[dev];
    if (d->prof >= 0) {
        const double *c = cl->prof[d->prof].head_dec;
        return c[0] + c[1] * mb;
    }
    return ls_plan_head_prefill_s(a, cl, dev, mb, 1);
}

double ls_plan_link_s(const ls_plan_cluster *cl, int from, int to, double bytes) {
    const ls_plan_device *a = &cl->dev[from];
    if (a->prof >= 0) {
        const ls_plan_profile *p = &cl->prof[a->prof];
        return p->link_lat_s + bytes / p->link_Bps;
    }
    if (a->node == cl->dev[to].node) return INTRA_LAT_S + bytes / a->gpu.link_Bps;
    return cl->inter_lat_s + bytes / cl->inter_Bps;
}

/* Activation element size on the wire: fp16 between catalog GPUs; a profiled device's own
 * (fp32 between llmsys CPU stages, the default). */
double ls_plan_act_bytes(const ls_plan_cluster *cl, int dev) {
    const ls_plan_device *d = &cl->dev[dev];
    return d->prof >= 0 ? cl->prof[d->prof].act_bytes : 2.0;
}

void ls_plan_stage_fixed(const ls_plan_problem *p, const int *order, int n, int j, int mb_pre, int mb_dec, double *mem,
                         double *pre_s, double *dec_s) {
    const ls_plan_arch *a = p->arch;
    const ls_plan_cluster *cl = p->cl;
    int d = order[j];
    *mem = j == 0 ? ls_plan_embed_bytes(a) : 0;
    if (j == n - 1) {
        /* a single stage with a tied head keeps one copy of the matrix */
        *mem += (n == 1 && a->tied) ? 2.0 * a->d_model * 2.0 : ls_plan_head_bytes(a);
        *pre_s = ls_plan_head_prefill_s(a, cl, d, mb_pre, p->wl.prompt);
        *dec_s = ls_plan_head_decode_s(a, cl, d, mb_dec);
    } else {
        double act = ls_plan_act_bytes(cl, d);
        *pre_s = ls_plan_link_s(cl, d, order[j + 1], (double)mb_pre * p->wl.prompt * a->d_model * act);
        *dec_s = ls_plan_link_s(cl, d, order[j + 1], (double)mb_dec * a->d_model * act);
    }
}

/* ---------------------------------------------------------------- profiles */

/* Least squares for y ~ X c with nf features (nf <= 3), falling back to fewer features
 * when a coefficient comes out negative (a time term cannot be negative). */
static void fit(const double (*x)[3], const double *y, int n, int nf, double *c) {
    for (int k = 0; k < 3; k++) c[k] = 0;
    int use[3] = {1, nf > 1, nf > 2};
    for (int attempt = 0; attempt < 3; attempt++) {
        int idx[3], m = 0;
        for (int k = 0; k < 3; k++)
            if (use[k]) idx[m++] = k;
        if (m == 0 || n == 0) return;
        double A[3][4] = {{0}};
        for (int r = 0; r < n; r++)
            for (int i = 0; i < m; i++) {
                for (int j = 0; j < m; j++) A[i][j] += x[r][idx[i]] * x[r][idx[j]];
                A[i][m] += x[r][idx[i]] * y[r];
            }
        for (int i = 0; i < m; i++) A[i][i] *= 1.0 + 1e-9; /* tiny ridge for rank-deficient rows */
        /* Gauss-Jordan with partial pivoting */
        int ok = 1;
        for (int i = 0; i < m && ok; i++) {
            int piv = i;
            for (int r = i + 1; r < m; r++)
                if (fabs(A[r][i]) > fabs(A[piv][i])) piv = r;
            if (fabs(A[piv][i]) < 1e-300) {
                ok = 0;
                break;
            }
            for (int j = 0; j <= m; j++) {
                double t = A[i][j];
                A[i][j] = A[piv][j];
                A[piv][j] = t;
            }
            for (int r = 0; r < m; r++) {
                if (r == i) continue;
                double f = A[r][i] / A[i][i];
                for (int j = i; j <= m; j++) A[r][j] -= f * A[i][j];
            }
        }
        int neg = -1;
        double sol[3] = {0};
        for (int i = 0; i < m && ok; i++) {
            sol[i] = A[i][m] / A[i][i];
            if (sol[i] < 0 && neg < 0) neg = idx[i];
        }
        if (ok && neg < 0) {
            for (int i = 0; i < m; i++) c[idx[i]] = sol[i];
            return;
        }
        /* drop the offending (or the highest-order) feature and refit */
        if (neg < 0) neg = idx[m - 1];
        if (m == 1) {
            /* single feature: proportional fit through the mean */
            double sy = 0, sx = 0;
            for (int r = 0; r < n; r++) sy += y[r], sx += x[r][idx[0]];
            c[idx[0]] = sx > 0 ? sy / sx : 0;
            return;
        }
        use[neg] = 0;
    }
}

static int prof_rows(const cJSON *arr, const char *path, const char *what, int want_bits, int bits,
                     const char *k1, const char *k2, double (*x)[3], double *y, int cap, int *n,
                     int kind /* 0 prefill layer, 1 decode layer, 2 head prefill, 3 head decode */) {
    const cJSON *e;
    *n = 0;
    cJSON_ArrayForEach(e, arr) {
        int b = 0, bt = 0, s = 0;
        double sec = -1;
        if (want_bits) {
            if (ls_json_get_int(e, "bits", 0, &b)) return ls_err_wrap(LS_EFORMAT, "%s: %s row", path, what);
            if (b != bits) continue;
        }
        if (ls_json_get_int(e, k1, 0, &bt) || (k2 && ls_json_get_int(e, k2, 0, &s)) ||
            ls_json_get_double(e, "seconds", -1, &sec))
            return ls_err_wrap(LS_EFORMAT, "%s: %s row", path, what);
        if (bt <= 0 || (k2 && s <= 0) || !(sec >= 0) || !isfinite(sec))
            return ls_err(LS_EFORMAT, "%s: %s row %d: batch/%s must be > 0 and seconds >= 0", path, what, *n,
                          k2 ? k2 : "seconds");
        if (*n >= cap) break;
        double bs = (double)bt * s;
        x[*n][0] = 1;
        if (kind == 0) x[*n][1] = bs, x[*n][2] = bs * s;
        else if (kind == 1) x[*n][1] = bt, x[*n][2] = bs;
        else if (kind == 2) x[*n][1] = bt, x[*n][2] = bs;
        else x[*n][1] = bt, x[*n][2] = 0;
        y[*n] = sec;
        (*n)++;
    }
    return LS_OK;
}

int ls_plan_profile_load(const char *path, ls_plan_profile *out) {
    memset(out, 0, sizeof *out);
    cJSON *j;
    LS_TRY(ls_json_read_file(path, &j));
    int rc = ls_plan_profile_parse(j, path, out);
    cJSON_Delete(j);
    return rc;
}

int ls_plan_profile_parse(const cJSON *j, const char *path, ls_plan_profile *out) {
    memset(out, 0, sizeof *out);
    LS_TRY(ls_json_check_format(j, path, "llmsys-profile", 1));
    int rc = LS_OK;
    enum { CAP = 512 };
    double(*x)[3] = malloc(sizeof(double[3]) * CAP);
    double *y = malloc(sizeof(double) * CAP);
    if (!x || !y) {
        rc = ls_err(LS_ENOMEM, "profile");
        goto done;
    }
    const char *dev;
    if ((rc = ls_json_get_string(j, "device", "cpu", &dev))) goto done;
    snprintf(out->device, sizeof out->device, "%s", dev);
    if ((rc = ls_json_get_int(j, "threads", 1, &out->threads))) goto done;
    if ((rc = ls_json_get_double(j, "act_bytes", 4, &out->act_bytes))) goto done;
    if (out->act_bytes != 2 && out->act_bytes != 4) {
        rc = ls_err(LS_EFORMAT, "%s: \"act_bytes\" must be 2 (fp16) or 4 (fp32)", path);
        goto done;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (m) {
        if ((rc = ls_json_get_int(m, "n_layer", 0, &out->n_layer))) goto done;
        if ((rc = ls_json_get_int(m, "d_model", 0, &out->d_model))) goto done;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "prefill");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "decode");
    if (!cJSON_IsArray(pre) || !cJSON_IsArray(dec)) {
        rc = ls_err(LS_EFORMAT, "%s: needs \"prefill\" and \"decode\" arrays", path);
        goto done;
    }
    int any = 0;
    for (int k = 0; k < LS_PLAN_NBITS; k++) {
        int np, nd;
        if ((rc = prof_rows(pre, path, "prefill", 1, ls_plan_bits[k], "batch", "seq", x, y, CAP, &np, 0))) goto done;
        if (np) fit((const double(*)[3])x, y, np, 3, out->pre[k]);
        if ((rc = prof_rows(dec, path, "decode", 1, ls_plan_bits[k], "batch", "ctx", x, y, CAP, &nd, 1))) goto done;
        if (nd) fit((const double(*)[3])x, y, nd, 3, out->dec[k]);
        out->has_bits[k] = np > 0 && nd > 0;
        any |= out->has_bits[k];
    }
    if (!any) {
        rc = ls_err(LS_EFORMAT, "%s: no bit width has both prefill and decode rows", path);
        goto done;
    }
    const cJSON *head = cJSON_GetObjectItemCaseSensitive(j, "head");
    if (head) {
        int n;
        const cJSON *hp = cJSON_GetObjectItemCaseSensitive(head, "prefill");
        const cJSON *hd = cJSON_GetObjectItemCaseSensitive(head, "decode");
        if ((rc = prof_rows(hp, path, "head.prefill", 0, 0, "batch", "seq", x, y, CAP, &n, 2))) goto done;
        if (n) fit((const double(*)[3])x, y, n, 3, out->head_pre);
        if ((rc = prof_rows(hd, path, "head.decode", 0, 0, "batch", NULL, x, y, CAP, &n, 3))) goto done;
        double hc[3];
        if (n) {
            fit((const double(*)[3])x, y, n, 2, hc);
            out->head_dec[0] = hc[0];
            out->head_dec[1] = hc[1];
        }
    }
    const cJSON *link = cJSON_GetObjectItemCaseSensitive(j, "link");
    double lat = 50e-6, bw = 1e9;
    if (link) {
        if ((rc = ls_json_get_double(link, "latency_s", lat, &lat))) goto done;
        if ((rc = ls_json_get_double(link, "bandwidth_Bps", bw, &bw))) goto done;
    }
    if (!(lat >= 0) || !(bw > 0)) {
        rc = ls_err(LS_EFORMAT, "%s: link latency must be >= 0 and bandwidth > 0", path);
        goto done;
    }
    out->link_lat_s = lat;
    out->link_Bps = bw;
done:
    if (rc < 0 && !strstr(ls_errmsg(), path)) ls_err_wrap(rc, "%s", path);
    free(x);
    free(y);
    return rc;
}

/* ---------------------------------------------------------------- problem */

int ls_plan_problem_init(ls_plan_problem *p, const ls_plan_arch *a, const ls_plan_cluster *cl, ls_plan_workload wl) {
    memset(p, 0, sizeof *p);
    p->arch = a;
    p->cl = cl;
    p->wl = wl;
    p->theta = 0;
    p->qmax = INFINITY;
    p->bits_mask = (1 << LS_PLAN_NBITS) - 1;
    p->time_limit_s = 10;
    LS_TRY(ls_plan_arch_validate(a));
    return ls_plan_quality_default(a, p->omega);
}

int ls_plan_qtarget_parse(const char *s, ls_plan_qtarget *out) {
    char *end;
    if (!strcmp(s, "none")) {
        out->kind = LS_PLAN_Q_NONE;
        out->value = 0;
        return LS_OK;
    }
    const char *colon = strchr(s, ':');
    if (!colon) return ls_err(LS_EINVAL, "quality '%s': expected theta:X, max:X, bits:B or none", s);
    double v = strtod(colon + 1, &end);
    if (end == colon + 1 || *end || !isfinite(v) || v < 0)
        return ls_err(LS_EINVAL, "quality '%s': value must be a non-negative number", s);
    size_t l = (size_t)(colon - s);
    if (l == 5 && !strncmp(s, "theta", 5)) out->kind = LS_PLAN_Q_THETA;
    else if (l == 3 && !strncmp(s, "max", 3)) out->kind = LS_PLAN_Q_MAX;
    else if (l == 4 && !strncmp(s, "bits", 4)) {
        out->kind = LS_PLAN_Q_BITS;
        if (ls_plan_bits_index((int)v) < 0 || v != floor(v))
            return ls_err(LS_EINVAL, "quality '%s': bits must be 3, 4, 8 or 16", s);
    } else
        return ls_err(LS_EINVAL, "quality '%s': expected theta:X, max:X, bits:B or none", s);
    out->value = v;
    return LS_OK;
}

int ls_plan_problem_set_quality(ls_plan_problem *p, ls_plan_qtarget q) {
    p->theta = 0;
    p->qmax = INFINITY;
    if (q.kind == LS_PLAN_Q_THETA) p->theta = q.value;
    else if (q.kind == LS_PLAN_Q_MAX) p->qmax = q.value;
    else if (q.kind == LS_PLAN_Q_BITS) {
        int k = ls_plan_bits_index((int)q.value);
        if (k < 0) return ls_err(LS_EINVAL, "quality bits:%g: not a supported bit width", q.value);
        double s = 0;
        for (int i = 0; i < p->arch->n_layer; i++) s += p->omega[i * LS_PLAN_NBITS + k];
        p->qmax = s * (1 + 1e-9) + 1e-15;
    }
    return LS_OK;
}

int ls_plan_problem_validate(const ls_plan_problem *p) {
    const ls_plan_workload *w = &p->wl;
    if (w->batch < 1 || w->batch > 1 << 16) return ls_err(LS_EINVAL, "--batch %d: must be in 1..65536", w->batch);
    if (w->prompt < 1 || w->prompt > 1 << 20) return ls_err(LS_EINVAL, "--prompt %d: must be in 1..1048576", w->prompt);
    if (w->gen < 1 || w->gen > 1 << 20) return ls_err(LS_EINVAL, "--gen %d: must be in 1..1048576", w->gen);
    if ((long)w->prompt + w->gen > p->arch->n_ctx)
        return ls_err(LS_EINVAL, "--prompt %d + --gen %d exceeds the context of %s (%d tokens)", w->prompt, w->gen,
                      p->arch->name, p->arch->n_ctx);
    if (p->cl->n_dev < 1) return ls_err(LS_EINVAL, "cluster %s has zero devices", p->cl->name);
    if (!(p->bits_mask & ((1 << LS_PLAN_NBITS) - 1))) return ls_err(LS_EINVAL, "no bit width allowed");
    for (int d = 0; d < p->cl->n_dev; d++) {
        const ls_plan_device *dv = &p->cl->dev[d];
        if (dv->prof >= 0) {
            const ls_plan_profile *pr = &p->cl->prof[dv->prof];
            if (pr->d_model && pr->d_model != p->arch->d_model)
                return ls_err(LS_EINVAL, "profile of %s was measured on d_model %d, planning a model with d_model %d",
                              pr->device, pr->d_model, p->arch->d_model);
        }
    }
    return LS_OK;
}

/* ---------------------------------------------------------------- evaluation */

int ls_plan_evaluate(const ls_plan_problem *p, ls_plan_result *pl) {
    const ls_plan_arch *a = p->arch;
    const ls_plan_cluster *cl = p->cl;
    const ls_plan_workload *w = &p->wl;
    int L = a->n_layer, S = pl->n_stage;
    if (S < 1 || S > cl->n_dev) return ls_err(LS_EINVAL, "plan: %d stages for %d devices", S, cl->n_dev);
    if (pl->mb_prefill < 1 || pl->mb_decode < 1 || pl->mb_prefill > w->batch || pl->mb_decode > w->batch)
        return ls_err(LS_EINVAL, "plan: micro-batch sizes %d/%d outside 1..%d", pl->mb_prefill, pl->mb_decode, w->batch);
    if (pl->begin[0] != 0 || pl->begin[S] != L)
        return ls_err(LS_EINVAL, "plan: stages cover [%d, %d), model has %d layers", pl->begin[0], pl->begin[S], L);
    unsigned char used[LS_PLAN_MAX_DEV] = {0};
    for (int j = 0; j < S; j++) {
        if (pl->begin[j + 1] <= pl->begin[j]) return ls_err(LS_EINVAL, "plan: stage %d is empty or out of order", j);
        if (pl->dev[j] < 0 || pl->dev[j] >= cl->n_dev || used[pl->dev[j]])
            return ls_err(LS_EINVAL, "plan: stage %d uses an invalid or repeated device", j);
        used[pl->dev[j]] = 1;
    }
    for (int i = 0; i < L; i++) {
        int k = ls_plan_bits_index(pl->bits[i]);
        if (k < 0 || !(p->bits_mask & (1 << k))) return ls_err(LS_EINVAL, "plan: layer %d has bits %d", i, pl->bits[i]);
    }
    int mp = (w->batch + pl->mb_prefill - 1) / pl->mb_prefill;
    int md = (w->batch + pl->mb_decode - 1) / pl->mb_decode;
    double ctx = w->prompt + w->gen / 2.0;
    double kv = ls_plan_layer_kv_bytes(a, w);
    double ws = ls_plan_workspace_bytes(a, w, pl->mb_prefill, pl->mb_decode);
    double sumP = 0, maxP = 0, sumD = 0, maxD = 0, q = 0;
    int bad_mem = -1;
    double worst_over = 0;
    for (int j = 0; j < S; j++) {
        int d = pl->dev[j];
        double P = 0, D = 0, mem = ws;
        for (int i = pl->begin[j]; i < pl->begin[j + 1]; i++) {
            P += ls_plan_layer_prefill_s(a, cl, d, pl->bits[i], pl->mb_prefill, w->prompt);
            D += ls_plan_layer_decode_s(a, cl, d, pl->bits[i], pl->mb_decode, ctx);
            mem += ls_plan_layer_weight_bytes(a, pl->bits[i]) + kv;
            q += p->omega[i * LS_PLAN_NBITS + ls_plan_bits_index(pl->bits[i])];
        }
        double fm, fp, fd;
        ls_plan_stage_fixed(p, pl->dev, S, j, pl->mb_prefill, pl->mb_decode, &fm, &fp, &fd);
        mem += fm, P += fp, D += fd;
        pl->stage_prefill_s[j] = P;
        pl->stage_decode_s[j] = D;
        pl->stage_mem[j] = mem;
        pl->stage_usable[j] = cl->dev[d].usable_bytes;
        sumP += P;
        sumD += D;
        if (P > maxP) maxP = P;
        if (D > maxD) maxD = D;
        if (mem > cl->dev[d].usable_bytes && mem - cl->dev[d].usable_bytes > worst_over) {
            worst_over = mem - cl->dev[d].usable_bytes;
            bad_mem = j;
        }
    }
    pl->prefill_s = sumP + (mp - 1) * maxP;
    double round = md * maxD > sumD ? md * maxD : sumD;
    pl->decode_s = (w->gen - 1) * round;
    pl->total_s = pl->prefill_s + pl->decode_s;
    pl->throughput_tok_s = (double)w->batch * w->gen / pl->total_s;
    pl->quality = q;
    pl->objective = pl->total_s + p->theta * q;
    if (bad_mem >= 0)
        return ls_err(LS_EINFEASIBLE, "plan: stage %d on %s needs %.2f GB, %.2f GB over its usable %.2f GB", bad_mem,
                      cl->dev[pl->dev[bad_mem]].name, pl->stage_mem[bad_mem] / GB, worst_over / GB,
                      pl->stage_usable[bad_mem] / GB);
    if (q > p->qmax)
        return ls_err(LS_EINFEASIBLE, "plan: quality indicator %.4g exceeds the target %.4g", q, p->qmax);
    if (!isfinite(pl->total_s)) return ls_err(LS_EINFEASIBLE, "plan: a stage uses a bit width its device lacks");
    return LS_OK;
}
