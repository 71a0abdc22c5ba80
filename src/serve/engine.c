/* engine.c - the inference engine: a contiguous range of GPT layers over (quantized)
 * weights loaded by name from a checkpoint, a slot-based KV cache, and micro-batch
 * forward passes for prefill (GEMM) and decode (batched mat-vec). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/safetensors.h"
#include "llmsys/serve.h"

static const char *const LIN_NAMES[4] = {"attn.qkv.w", "attn.proj.w", "mlp.fc.w", "mlp.proj.w"};

typedef struct {
    float *ln1w, *ln1b, *ln2w, *ln2b;
    float *qkvb, *projb, *fcb, *mprojb;
    ls_qmat lin[4]; /* qkv (3C,C), proj (C,C), fc (F,C), mproj (C,F) */
    float *kcache, *vcache; /* (max_seqs, n_ctx, C) */
    int bits;
} eng_layer;

struct ls_engine {
    ls_model_config cfg;
    int lb, le, max_seqs, nthreads;
    eng_layer *layers; /* le - lb */
    float *wte, *wpe, *lnfw, *lnfb; /* first/last stage only (wte: both) */
    ls_qmat head;                   /* wte as an F32 qmat for batch-invariant logits */
    size_t scratch_tokens;          /* capacity of the scratch buffers in tokens */
    float *x, *h, *qkv, *att, *fc;  /* scratch */
};

ls_engine_opts ls_engine_defaults(void) {
    ls_engine_opts o = {0, 0, NULL, 64, 8, 1};
    return o;
}

/* ---------------------------------------------------------------- checkpoint helpers */

static int read_config(ls_st_file *f, ls_model_config *cfg) {
    const char *cj = ls_st_meta(f, "llmsys.config");
    if (!cj) return ls_err(LS_EFORMAT, "%s: no \"llmsys.config\" metadata (not an llmsys checkpoint)", ls_st_path(f));
    if (ls_model_config_from_json(cj, cfg) != LS_OK) return ls_err_wrap(LS_EFORMAT, "%s", ls_st_path(f));
    if (ls_model_config_validate(cfg) != LS_OK) return ls_err_wrap(LS_EFORMAT, "%s", ls_st_path(f));
    return LS_OK;
}

/* Reads the "llmsys.quant" metadata: group and per-layer bits (NULL meta: all 32). */
static int read_quant_meta(ls_st_file *f, int n_layer, int *group, int *bits) {
    const char *qj = ls_st_meta(f, "llmsys.quant");
    for (int l = 0; l < n_layer; l++) bits[l] = 32;
    *group = 64;
    if (!qj) return LS_OK;
    cJSON *j = cJSON_Parse(qj);
    if (!j) return ls_err(LS_EFORMAT, "%s: \"llmsys.quant\" metadata is not JSON", ls_st_path(f));
    int rc = LS_OK, ver = 0;
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bits");
    if (ls_json_get_int(j, "version", 0, &ver) || ver != 1) rc = ls_err(LS_EFORMAT, "%s: llmsys.quant version %d unsupported", ls_st_path(f), ver);
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

static int expect_f32(ls_st_file *f, const char *name, int ndim, int64_t d0, int64_t d1, const float **out) {
    int64_t shape[2] = {d0, d1};
    const ls_st_tensor *t;
    LS_TRY(ls_st_expect(f, name, LS_DT_F32, ndim, shape, &t));
    *out = t->data;
    return LS_OK;
}

static int copy_f32(ls_st_file *f, const char *name, int ndim, int64_t d0, int64_t d1, float **dst) {
    const float *src;
    LS_TRY(expect_f32(f, name, ndim, d0, d1, &src));
    size_t n = (size_t)d0 * (ndim == 2 ? (size_t)d1 : 1);
    *dst = malloc(n * sizeof(float));
    if (!*dst) return ls_err(LS_ENOMEM, "engine: out of memory for %s", name);
    memcpy(*dst, src, n * sizeof(float));
    return LS_OK;
}

/* Loads one Linear weight of a layer into q: stored at file_bits, wanted at bits. */
static int load_linear(ls_st_file *f, const char *name, int rows, int cols, int file_bits, int group, int bits,
                       ls_qmat *q) {
    char nm[160];
    if (file_bits == 32) {
        const float *w;
        LS_TRY(expect_f32(f, name, 2, rows, cols, &w));
        return ls_qmat_quantize(q, w, rows, cols, bits, group);
    }
    if (bits != file_bits)
        return ls_err(LS_EINVAL, "%s: %s is stored at %d bits, cannot serve it at %d bits (quantize from the fp32 checkpoint)",
                      ls_st_path(f), name, file_bits, bits);
    LS_TRY(ls_qmat_alloc(q, rows, cols, bits, group));
    const ls_st_tensor *t;
    if (bits == 16) {
        int64_t shape[2] = {rows, cols};
        if (ls_st_expect(f, name, LS_DT_F16, 2, shape, &t) != LS_OK) goto fail;
        for (int r = 0; r < rows; r++)
            memcpy(q->data + (size_t)r * q->row_bytes, (const uint8_t *)t->data + (size_t)r * cols * 2, (size_t)cols * 2);
        return LS_OK;
    }
    int64_t qs[2] = {rows, (int64_t)q->row_bytes}, ss[2] = {rows, q->ngroups};
    snprintf(nm, sizeof nm, "%s.q", name);
    if (ls_st_expect(f, nm, LS_DT_U8, 2, qs, &t) != LS_OK) goto fail;
    memcpy(q->data, t->data, q->row_bytes * (size_t)rows);
    snprintf(nm, sizeof nm, "%s.scale", name);
    if (ls_st_expect(f, nm, LS_DT_F32, 2, ss, &t) != LS_OK) goto fail;
    memcpy(q->scale, t->data, (size_t)rows * q->ngroups * 4);
    if (bits < 8) {
        snprintf(nm, sizeof nm, "%s.min", name);
        if (ls_st_expect(f, nm, LS_DT_F32, 2, ss, &t) != LS_OK) goto fail;
        memcpy(q->min, t->data, (size_t)rows * q->ngroups * 4);
    }
    return LS_OK;
fail:
    ls_qmat_free(q);
    return LS_EFORMAT;
}

static void lin_shape(const ls_model_config *c, int i, int *rows, int *cols) {
    int C = c->d_model, F = c->d_ff;
    const int r[4] = {3 * C, C, F, C}, k[4] = {C, C, C, F};
    *rows = r[i];
    *cols = k[i];
}

/* ---------------------------------------------------------------- open / free */

void ls_engine_free(ls_engine *e) {
    if (!e) return;
    if (e->layers) {
        for (int i = 0; i < e->le - e->lb; i++) {
            eng_layer *L = &e->layers[i];
            free(L->ln1w), free(L->ln1b), free(L->ln2w), free(L->ln2b);
            free(L->qkvb), free(L->projb), free(L->fcb), free(L->mprojb);
            for (int j = 0; j < 4; j++) ls_qmat_free(&L->lin[j]);
            ls_aligned_free(L->kcache), ls_aligned_free(L->vcache);
        }
        free(e->layers);
    }
    free(e->wte), free(e->wpe), free(e->lnfw), free(e->lnfb);
    ls_qmat_free(&e->head);
    free(e->x), free(e->h), free(e->qkv), free(e->att), free(e->fc);
    free(e);
}

int ls_engine_open(ls_engine **out, const char *path, const ls_engine_opts *o) {
    *out = NULL;
    ls_engine_opts d = ls_engine_defaults();
    if (!o) o = &d;
    ls_st_file *f;
    LS_TRY(ls_st_open(path, &f));
    ls_engine *e = calloc(1, sizeof *e);
    int *fbits = NULL, rc = LS_OK, group = 64;
    if (!e) {
        ls_st_close(f);
        return ls_err(LS_ENOMEM, "engine: out of memory");
    }
    if ((rc = read_config(f, &e->cfg))) goto done;
    const ls_model_config *c = &e->cfg;
    fbits = malloc(sizeof(int) * c->n_layer);
    if (!fbits) { rc = ls_err(LS_ENOMEM, "engine: out of memory"); goto done; }
    if ((rc = read_quant_meta(f, c->n_layer, &group, fbits))) goto done;
    int file_quant = ls_st_meta(f, "llmsys.quant") != NULL;
    if (!file_quant) group = o->group > 0 ? o->group : 64;
    if (!ls_quant_group_valid(group)) { rc = ls_err(LS_EINVAL, "engine: unsupported group size %d", group); goto done; }
    e->lb = o->layer_begin;
    e->le = o->layer_end > 0 ? o->layer_end : c->n_layer;
    if (e->lb < 0 || e->le > c->n_layer || e->lb >= e->le) {
        rc = ls_err(LS_EINVAL, "%s: layer range [%d, %d) is outside the model's %d layers", path, e->lb, e->le, c->n_layer);
        goto done;
    }
    e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 8;
    e->nthreads = o->nthreads > 0 ? o->nthreads : 1;
    int C = c->d_model, F = c->d_ff, T = c->n_ctx, V = c->vocab;
    e->layers = calloc((size_t)(e->le - e->lb), sizeof(eng_layer));
    if (!e->layers) { rc = ls_err(LS_ENOMEM, "engine: out of memory"); goto done; }
    for (int l = e->lb; l < e->le; l++) {
        eng_layer *L = &e->layers[l - e->lb];
        int bits = o->bits ? o->bits[l - e->lb] : fbits[l];
        if (!ls_quant_bits_valid(bits)) { rc = ls_err(LS_EINVAL, "layer %d: unsupported bit width %d (use 3, 4, 8 or 16)", l, bits); goto done; }
        L->bits = bits;
        char nm[128];
#define P(field, suffix, n)                                                  \
    snprintf(nm, sizeof nm, "h.%d." suffix, l);                              \
    if ((rc = copy_f32(f, nm, 1, n, 0, &L->field))) goto done;
        P(ln1w, "ln1.w", C) P(ln1b, "ln1.b", C) P(ln2w, "ln2.w", C) P(ln2b, "ln2.b", C)
        P(qkvb, "attn.qkv.b", 3 * C) P(projb, "attn.proj.b", C) P(fcb, "mlp.fc.b", F) P(mprojb, "mlp.proj.b", C)
#undef P
        for (int j = 0; j < 4; j++) {
            int rows, cols;
            lin_shape(c, j, &rows, &cols);
            snprintf(nm, sizeof nm, "h.%d.%s", l, LIN_NAMES[j]);
            if ((rc = load_linear(f, nm, rows, cols, fbits[l], group, bits, &L->lin[j]))) goto done;
        }
        size_t kv = (size_t)e->max_seqs * T * C * sizeof(float);
        L->kcache = ls_aligned_calloc(64, kv);
        L->vcache = ls_aligned_calloc(64, kv);
        if (!L->kcache || !L->vcache) { rc = ls_err(LS_ENOMEM, "engine: out of memory for the KV cache"); goto done; }
    }
    if (e->lb == 0 && (rc = copy_f32(f, "wpe", 2, T, C, &e->wpe))) goto done;
    if (e->lb == 0 || e->le == c->n_layer)
        if ((rc = copy_f32(f, "wte", 2, V, C, &e->wte))) goto done;
    if (e->le == c->n_layer) {
        if ((rc = copy_f32(f, "lnf.w", 1, C, 0, &e->lnfw)) || (rc = copy_f32(f, "lnf.b", 1, C, 0, &e->lnfb))) goto done;
        if ((rc = ls_qmat_quantize(&e->head, e->wte, V, C, 32, 32))) goto done;
    }
done:
    free(fbits);
    ls_st_close(f);
    if (rc) {
        ls_engine_free(e);
        return rc;
    }
    *out = e;
    return LS_OK;
}

const ls_model_config *ls_engine_config(const ls_engine *e) { return &e->cfg; }
int ls_engine_layer_bits(const ls_engine *e, int l) { return l >= e->lb && l < e->le ? e->layers[l - e->lb].bits : 0; }
void ls_engine_range(const ls_engine *e, int *begin, int *end) { *begin = e->lb, *end = e->le; }
int ls_engine_max_seqs(const ls_engine *e) { return e->max_seqs; }

size_t ls_engine_weight_bytes(const ls_engine *e) {
    size_t n = 0;
    for (int i = 0; i < e->le - e->lb; i++)
        for (int j = 0; j < 4; j++) n += ls_qmat_bytes(&e->layers[i].lin[j]);
    return n;
}

/* ---------------------------------------------------------------- forward */

static int reserve(ls_engine *e, size_t ntok) {
    if (ntok <= e->scratch_tokens) return LS_OK;
    size_t C = (size_t)e->cfg.d_model, F = (size_t)e->cfg.d_ff;
    free(e->x), free(e->h), free(e->qkv), free(e->att), free(e->fc);
    e->x = malloc(ntok * C * 4), e->h = malloc(ntok * C * 4), e->qkv = malloc(ntok * 3 * C * 4);
    e->att = malloc(ntok * C * 4), e->fc = malloc(ntok * F * 4);
    if (!e->x || !e->h || !e->qkv || !e->att || !e->fc) {
        e->scratch_tokens = 0;
        return ls_err(LS_ENOMEM, "engine: out of memory for %zu tokens of activations", ntok);
    }
    e->scratch_tokens = ntok;
    return LS_OK;
}

static void layernorm(float *out, const float *x, const float *w, const float *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *xi = x + (size_t)n * C;
        float m = 0.0f, v = 0.0f;
        for (int c = 0; c < C; c++) m += xi[c];
        m /= (float)C;
        for (int c = 0; c < C; c++) v += (xi[c] - m) * (xi[c] - m);
        v /= (float)C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (xi[c] - m) * s * w[c] + b[c];
    }
}

/* Y (rows of seqs) = X · Wᵀ + b: n == 1 runs of sequences through the batch-invariant
 * row kernel, longer sequences through the GEMM path. */
static void linear(const ls_engine *e, const ls_qmat *W, const float *bias, const float *X, float *Y,
                   const ls_engine_seq *seqs, int nseq) {
    int K = W->cols, N = W->rows;
    size_t off = 0;
    for (int i = 0; i < nseq;) {
        if (seqs[i].n == 1) {
            int j = i;
            while (j < nseq && seqs[j].n == 1) j++;
            ls_qmat_matmul_rows(W, X + off * K, j - i, Y + off * N, e->nthreads, LS_QIMPL_AUTO);
            off += (size_t)(j - i);
            i = j;
        } else {
            ls_qmat_matmul(W, X + off * K, seqs[i].n, Y + off * N, LS_QIMPL_AUTO);
            off += (size_t)seqs[i].n;
            i++;
        }
    }
    if (bias)
        for (size_t t = 0; t < off; t++)
            for (int c = 0; c < N; c++) Y[t * N + c] += bias[c];
}

static void attention(ls_engine *e, eng_layer *L, const ls_engine_seq *seqs, int nseq) {
    const ls_model_config *c = &e->cfg;
    int C = c->d_model, NH = c->n_head, hs = C / NH, T = c->n_ctx;
    float scale = 1.0f / sqrtf((float)hs);
    float *sc = malloc(sizeof(float) * T);
    LS_ASSERT(sc);
    size_t off = 0;
    for (int i = 0; i < nseq; i++) {
        const ls_engine_seq *s = &seqs[i];
        float *K = L->kcache + (size_t)s->slot * T * C, *Vc = L->vcache + (size_t)s->slot * T * C;
        for (int t = 0; t < s->n; t++) {
            const float *qkv = e->qkv + (off + t) * 3 * C;
            memcpy(K + (size_t)(s->pos + t) * C, qkv + C, sizeof(float) * C);
            memcpy(Vc + (size_t)(s->pos + t) * C, qkv + 2 * C, sizeof(float) * C);
        }
        for (int t = 0; t < s->n; t++) {
            int p = s->pos + t;
            const float *q = e->qkv + (off + t) * 3 * C;
            float *o = e->att + (off + t) * C;
            for (int h = 0; h < NH; h++) {
                const float *qh = q + h * hs;
                float mx = -INFINITY;
                for (int j = 0; j <= p; j++) {
                    const float *k = K + (size_t)j * C + h * hs;
                    float d = 0.0f;
                    for (int k2 = 0; k2 < hs; k2++) d += qh[k2] * k[k2];
                    sc[j] = d * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                float sum = 0.0f;
                for (int j = 0; j <= p; j++) {
                    sc[j] = expf(sc[j] - mx);
                    sum += sc[j];
                }
                float inv = 1.0f / sum, *oh = o + h * hs;
                for (int k2 = 0; k2 < hs; k2++) oh[k2] = 0.0f;
                for (int j = 0; j <= p; j++) {
                    const float *v = Vc + (size_t)j * C + h * hs;
                    float pj = sc[j] * inv;
                    for (int k2 = 0; k2 < hs; k2++) oh[k2] += pj * v[k2];
                }
            }
        }
        off += (size_t)s->n;
    }
    free(sc);
}

static void gelu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

size_t ls_engine_out_floats(const ls_engine *e, const ls_engine_seq *seqs, int nseq, int all_logits) {
    size_t ntok = 0;
    for (int i = 0; i < nseq; i++) ntok += (size_t)seqs[i].n;
    if (e->le != e->cfg.n_layer) return ntok * e->cfg.d_model;
    return (all_logits ? ntok : (size_t)nseq) * e->cfg.vocab;
}

int ls_engine_forward(ls_engine *e, const ls_engine_seq *seqs, int nseq, const int *tokens, const float *act_in,
                      float *out, int all_logits) {
    const ls_model_config *c = &e->cfg;
    int C = c->d_model, F = c->d_ff, V = c->vocab;
    if (nseq <= 0) return ls_err(LS_EINVAL, "engine: empty micro-batch");
    size_t ntok = 0;
    for (int i = 0; i < nseq; i++) {
        const ls_engine_seq *s = &seqs[i];
        if (s->slot < 0 || s->slot >= e->max_seqs) return ls_err(LS_EINVAL, "engine: KV slot %d out of range [0, %d)", s->slot, e->max_seqs);
        if (s->n < 1 || s->pos < 0 || s->pos + s->n > c->n_ctx)
            return ls_err(LS_EINVAL, "engine: sequence of %d tokens at position %d exceeds the context (%d)", s->n, s->pos, c->n_ctx);
        ntok += (size_t)s->n;
    }
    LS_TRY(reserve(e, ntok));
    float *x = e->x;
    if (e->lb == 0) {
        if (!tokens) return ls_err(LS_EINVAL, "engine: the first stage needs tokens");
        size_t t = 0;
        for (int i = 0; i < nseq; i++)
            for (int j = 0; j < seqs[i].n; j++, t++) {
                int tok = tokens[t];
                if (tok < 0 || tok >= V) return ls_err(LS_EINVAL, "engine: token %d out of range [0, %d)", tok, V);
                const float *te = e->wte + (size_t)tok * C, *pe = e->wpe + (size_t)(seqs[i].pos + j) * C;
                for (int k = 0; k < C; k++) x[t * C + k] = te[k] + pe[k];
            }
    } else {
        if (!act_in) return ls_err(LS_EINVAL, "engine: a later stage needs activations");
        memcpy(x, act_in, ntok * C * sizeof(float));
    }
    for (int l = 0; l < e->le - e->lb; l++) {
        eng_layer *L = &e->layers[l];
        layernorm(e->h, x, L->ln1w, L->ln1b, (int)ntok, C);
        linear(e, &L->lin[0], L->qkvb, e->h, e->qkv, seqs, nseq);
        attention(e, L, seqs, nseq);
        linear(e, &L->lin[1], L->projb, e->att, e->h, seqs, nseq);
        for (size_t i = 0; i < ntok * C; i++) x[i] += e->h[i];
        layernorm(e->h, x, L->ln2w, L->ln2b, (int)ntok, C);
        linear(e, &L->lin[2], L->fcb, e->h, e->fc, seqs, nseq);
        gelu(e->fc, ntok * F);
        linear(e, &L->lin[3], L->mprojb, e->fc, e->h, seqs, nseq);
        for (size_t i = 0; i < ntok * C; i++) x[i] += e->h[i];
    }
    if (e->le != c->n_layer) {
        memcpy(out, x, ntok * C * sizeof(float));
        return LS_OK;
    }
    if (all_logits) {
        layernorm(e->h, x, e->lnfw, e->lnfb, (int)ntok, C);
        ls_qmat_matmul(&e->head, e->h, (int)ntok, out, LS_QIMPL_AUTO);
        return LS_OK;
    }
    /* last token of each sequence, through the batch-invariant row kernel */
    size_t t = 0;
    for (int i = 0; i < nseq; i++) {
        t += (size_t)seqs[i].n;
        memcpy(e->att + (size_t)i * C, x + (t - 1) * C, sizeof(float) * C);
    }
    layernorm(e->h, e->att, e->lnfw, e->lnfb, nseq, C);
    ls_qmat_matmul_rows(&e->head, e->h, nseq, out, e->nthreads, LS_QIMPL_AUTO);
    return LS_OK;
}

/* ---------------------------------------------------------------- whole-model helpers */

static int require_whole(const ls_engine *e, const char *what) {
    if (e->lb != 0 || e->le != e->cfg.n_layer) return ls_err(LS_EINVAL, "%s needs an engine holding the whole model", what);
    return LS_OK;
}

/* nll[k] = -log p(tok[k+1] | tok[..k]) for k < T over the T inputs tok[0..T). */
static int score_window(ls_engine *e, const int *tok, int T, float *nll) {
    int V = e->cfg.vocab;
    float *lg = malloc(sizeof(float) * (size_t)T * V);
    if (!lg) return ls_err(LS_ENOMEM, "score: out of memory");
    ls_engine_seq s = {0, 0, T};
    int rc = ls_engine_forward(e, &s, 1, tok, NULL, lg, 1);
    for (int t = 0; rc == LS_OK && t < T; t++) {
        const float *r = lg + (size_t)t * V;
        float mx = r[0];
        for (int v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += exp((double)(r[v] - mx));
        nll[t] = (float)(log(sum) + mx - r[tok[t + 1]]);
    }
    free(lg);
    return rc;
}

int ls_engine_score(ls_engine *e, const int *tokens, int n, float *nll) {
    LS_TRY(require_whole(e, "score"));
    if (n < 2 || n > e->cfg.n_ctx) return ls_err(LS_EINVAL, "score: %d tokens (need 2..%d)", n, e->cfg.n_ctx);
    return score_window(e, tokens, n - 1, nll);
}

int ls_engine_generate(ls_engine *e, const int *prompt, int n_prompt, int n_new, int *out, int *n_out) {
    LS_TRY(require_whole(e, "generate"));
    *n_out = 0;
    int T = e->cfg.n_ctx, V = e->cfg.vocab;
    if (n_prompt < 1 || n_prompt > T) return ls_err(LS_EINVAL, "generate: prompt of %d tokens (need 1..%d)", n_prompt, T);
    float *lg = malloc(sizeof(float) * V);
    if (!lg) return ls_err(LS_ENOMEM, "generate: out of memory");
    ls_engine_seq s = {0, 0, n_prompt};
    int rc = ls_engine_forward(e, &s, 1, prompt, NULL, lg, 0);
    int pos = n_prompt;
    while (rc == LS_OK && *n_out < n_new) {
        int best = 0;
        for (int v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
        out[(*n_out)++] = best;
        if (best == LS_TOK_EOS || pos >= T || *n_out >= n_new) break;
        s = (ls_engine_seq){0, pos, 1};
        rc = ls_engine_forward(e, &s, 1, &best, NULL, lg, 0);
        pos++;
    }
    free(lg);
    return rc;
}

int ls_engine_eval_tokens(ls_engine *e, const uint16_t *tokens, size_t n, int T, size_t max_tokens, ls_eval_result *r) {
    memset(r, 0, sizeof *r);
    LS_TRY(require_whole(e, "eval"));
    if (T < 1 || T > e->cfg.n_ctx) return ls_err(LS_EINVAL, "eval seq %d outside [1, %d]", T, e->cfg.n_ctx);
    if (max_tokens > 0 && max_tokens + 1 < n) n = max_tokens + 1;
    size_t windows = n > 0 ? (n - 1) / (size_t)T : 0;
    if (windows == 0) return ls_err(LS_EINVAL, "too little data to evaluate: %zu tokens, need at least %d", n, T + 1);
    int *tok = malloc(sizeof(int) * (size_t)(T + 1));
    float *nll = malloc(sizeof(float) * (size_t)T);
    double sum = 0.0;
    int rc = tok && nll ? LS_OK : ls_err(LS_ENOMEM, "eval: out of memory");
    for (size_t w = 0; rc == LS_OK && w < windows; w++) {
        /* window w predicts tokens[wT+1 .. wT+T]: score T+1 tokens would exceed the context,
         * so run the T inputs and read each position's log-prob of the next token */
        for (int k = 0; k <= T; k++) tok[k] = tokens[w * (size_t)T + (size_t)k];
        rc = score_window(e, tok, T, nll);
        for (int k = 0; rc == LS_OK && k < T; k++) {
            int y = tok[k + 1];
            if (y == LS_TOK_BOS) continue; /* BOS always follows EOS: no information */
            sum += nll[k];
            r->tokens++;
            if (y < 256) r->bytes++;
        }
    }
    free(tok), free(nll);
    LS_TRY(rc);
    if (r->tokens == 0 || r->bytes == 0) return ls_err(LS_EINVAL, "no text to evaluate");
    r->loss = sum / (double)r->tokens;
    r->bits_per_byte = sum / log(2.0) / (double)r->bytes;
    r->perplexity = exp(r->loss);
    return LS_OK;
}

int ls_ckpt_is_quantized(const char *path) {
    ls_st_file *f;
    LS_TRY(ls_st_open(path, &f));
    int q = ls_st_meta(f, "llmsys.quant") != NULL;
    ls_st_close(f);
    return q;
}

int ls_ckpt_info(const char *path, ls_model_config *cfg, int **bits, int *group) {
    ls_st_file *f;
    *bits = NULL;
    LS_TRY(ls_st_open(path, &f));
    int g = 64, rc = read_config(f, cfg);
    if (rc == LS_OK) {
        *bits = malloc(sizeof(int) * cfg->n_layer);
        rc = *bits ? read_quant_meta(f, cfg->n_layer, &g, *bits) : ls_err(LS_ENOMEM, "out of memory");
    }
    ls_st_close(f);
    if (rc) {
        free(*bits);
        *bits = NULL;
    } else if (group) {
        *group = g;
    }
    return rc;
}

/* ---------------------------------------------------------------- in-memory weights */

int ls_engine_load_params(ls_engine *e, const float *params, size_t n) {
    LS_TRY(require_whole(e, "load params"));
    const ls_model_config *c = &e->cfg;
    if (n != ls_model_config_num_params(c))
        return ls_err(LS_EINVAL, "engine: %zu parameters given, the model has %zu", n, ls_model_config_num_params(c));
    for (int l = 0; l < c->n_layer; l++)
        if (e->layers[l].bits != 32) return ls_err(LS_EUNSUPPORTED, "engine: load params needs an fp32 engine");
    int C = c->d_model, F = c->d_ff, V = c->vocab, T = c->n_ctx;
    const float *p = params;
    memcpy(e->wte, p, sizeof(float) * (size_t)V * C), p += (size_t)V * C;
    memcpy(e->wpe, p, sizeof(float) * (size_t)T * C), p += (size_t)T * C;
    for (int l = 0; l < c->n_layer; l++) {
        eng_layer *L = &e->layers[l];
        /* model.h tensor order: ln1 w/b, qkv w/b, proj w/b, ln2 w/b, fc w/b, mlp.proj w/b */
        float *vec[8] = {L->ln1w, L->ln1b, L->qkvb, L->projb, L->ln2w, L->ln2b, L->fcb, L->mprojb};
        const int vlen[8] = {C, C, 3 * C, C, C, C, F, C};
        const int order[12] = {-1, -2, 0, -3, 1, -4, -5, -6, 2, -7, 3, -8}; /* >= 0: Linear j; < 0: vector -k-1 */
        for (int k = 0; k < 12; k++) {
            if (order[k] >= 0) {
                int rows, cols, j = order[k];
                lin_shape(c, j, &rows, &cols);
                ls_qmat_free(&L->lin[j]);
                LS_TRY(ls_qmat_quantize(&L->lin[j], p, rows, cols, 32, 32));
                p += (size_t)rows * cols;
            } else {
                int v = -order[k] - 1;
                memcpy(vec[v], p, sizeof(float) * (size_t)vlen[v]);
                p += vlen[v];
            }
        }
    }
    memcpy(e->lnfw, p, sizeof(float) * (size_t)C), p += C;
    memcpy(e->lnfb, p, sizeof(float) * (size_t)C), p += C;
    LS_ASSERT((size_t)(p - params) == n);
    ls_qmat_free(&e->head);
    return ls_qmat_quantize(&e->head, e->wte, V, C, 32, 32);
}
