/* infer.c - the GPT inference forward pass over weight views (fp32 or quantized per
 * Linear layer) with a slot-based KV cache and micro-batches of sequences: prefill rows
 * through GEMM, decode rows through the batch-invariant row kernels. Used by the model's
 * own incremental decoding and by the serving engine. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/model.h"
#include "model/layers.h"

void ls_linear_forward(const ls_linear *l, const float *X, int M, float *Y, const float *residual, int rowwise,
                       int nthreads) {
    if (!l->q) {
        ls_matmul_forward(Y, X, l->w, l->b, residual, M, l->cols, l->rows);
        return;
    }
    LS_ASSERT(!residual);
    if (rowwise)
        ls_qmat_matmul_rows(l->q, X, M, Y, nthreads, LS_QIMPL_AUTO);
    else
        ls_qmat_matmul(l->q, X, M, Y, LS_QIMPL_AUTO);
    if (l->b)
        for (size_t t = 0; t < (size_t)M; t++)
            for (int c = 0; c < l->rows; c++) Y[t * (size_t)l->rows + c] += l->b[c];
}

void ls_gpt_scratch_free(ls_gpt_scratch *s) {
    free(s->x), free(s->h), free(s->qkv), free(s->att), free(s->fc), free(s->stats), free(s->prob);
    memset(s, 0, sizeof *s);
}

static int reserve(ls_gpt_scratch *s, const ls_model_config *c, size_t ntok) {
    if (ntok <= s->cap_tokens) return LS_OK;
    size_t C = (size_t)c->d_model, F = (size_t)c->d_ff;
    ls_gpt_scratch_free(s);
    s->x = malloc(ntok * C * 4), s->h = malloc(ntok * C * 4), s->qkv = malloc(ntok * 3 * C * 4);
    s->att = malloc(ntok * C * 4), s->fc = malloc(ntok * 2 * F * 4), s->stats = malloc(ntok * 2 * 4);
    s->prob = malloc((size_t)c->n_ctx * 4);
    if (!s->x || !s->h || !s->qkv || !s->att || !s->fc || !s->stats || !s->prob) {
        ls_gpt_scratch_free(s);
        return ls_err(LS_ENOMEM, "engine: out of memory for %zu tokens of activations", ntok);
    }
    s->cap_tokens = ntok;
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

/* Y = X·Wᵀ + b over the micro-batch: runs of single-token sequences through the
 * batch-invariant row kernel, longer sequences through the GEMM path. With resid, the
 * result is added into resid instead: fused into sgemm for fp32 weights, else computed
 * into Y and added after. */
static void seq_linear(const ls_gpt_weights *w, const ls_linear *l, const float *X, float *Y, float *resid,
                       const ls_gpt_seq *seqs, int nseq) {
    int K = l->cols, N = l->rows;
    size_t off = 0;
    float *out = resid && !l->q ? resid : Y;
    const float *res = out == resid ? resid : NULL;
    for (int i = 0; i < nseq;) {
        int j = i + 1, m = seqs[i].n;
        if (m == 1) {
            while (j < nseq && seqs[j].n == 1) j++;
            m = j - i;
        }
        ls_linear_forward(l, X + off * K, m, out + off * N, res ? res + off * N : NULL, seqs[i].n == 1, w->nthreads);
        off += (size_t)m;
        i = j;
    }
    if (resid && out != resid)
        for (size_t i = 0; i < off * N; i++) resid[i] += Y[i];
}

/* One head of one query at position p over the cached keys K and values V (row stride
 * C): o = softmax(q·Kᵀ/√hs)·V. Scalar loops in a fixed order. */
static void head_scalar(const float *q, const float *K, const float *V, int p, int C, int hs, float scale, float *prob,
                        float *o) {
    float mx = -INFINITY;
    for (int j = 0; j <= p; j++) {
        const float *k = K + (size_t)j * C;
        float d = 0.0f;
        for (int k2 = 0; k2 < hs; k2++) d += q[k2] * k[k2];
        prob[j] = d * scale;
        mx = prob[j] > mx ? prob[j] : mx;
    }
    float sum = 0.0f;
    for (int j = 0; j <= p; j++) {
        prob[j] = expf(prob[j] - mx);
        sum += prob[j];
    }
    float inv = 1.0f / sum;
    for (int k2 = 0; k2 < hs; k2++) o[k2] = 0.0f;
    for (int j = 0; j <= p; j++) {
        const float *v = V + (size_t)j * C;
        float pj = prob[j] * inv;
        for (int k2 = 0; k2 < hs; k2++) o[k2] += pj * v[k2];
    }
}

/* The same with two cblas_sgemm (M = 1) straight from the strided cache. */
static void head_blas(const float *q, const float *K, const float *V, int p, int C, int hs, float scale, float *prob,
                      float *o) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, p + 1, hs, scale, q, hs, K, C, 0.0f, prob, p + 1);
    float mx = prob[0];
    for (int j = 1; j <= p; j++) mx = prob[j] > mx ? prob[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j <= p; j++) {
        prob[j] = expf(prob[j] - mx);
        sum += prob[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= p; j++) prob[j] *= inv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, hs, p + 1, 1.0f, prob, p + 1, V, C, 0.0f, o, hs);
}

/* Appends each sequence's keys and values to its slot, then causal attention of its new
 * queries over the slot's cache: s->att (Σn, C) from s->qkv (Σn, 3C), head by head. */
static void attention(const ls_gpt_weights *w, const ls_gpt_block *b, ls_gpt_scratch *sc, const ls_gpt_seq *seqs,
                      int nseq, float *prob) {
    const ls_model_config *c = &w->cfg;
    int C = c->d_model, NH = c->n_head, hs = C / NH, T = c->n_ctx;
    float scale = 1.0f / sqrtf((float)hs);
    size_t off = 0;
    for (int i = 0; i < nseq; i++) {
        const ls_gpt_seq *s = &seqs[i];
        float *K = b->kcache + (size_t)s->slot * T * C, *Vc = b->vcache + (size_t)s->slot * T * C;
        for (int t = 0; t < s->n; t++) {
            const float *qkv = sc->qkv + (off + t) * 3 * C;
            memcpy(K + (size_t)(s->pos + t) * C, qkv + C, sizeof(float) * C);
            memcpy(Vc + (size_t)(s->pos + t) * C, qkv + 2 * C, sizeof(float) * C);
        }
        for (int t = 0; t < s->n; t++) {
            const float *q = sc->qkv + (off + t) * 3 * C;
            float *o = sc->att + (off + t) * C;
            for (int h = 0; h < NH; h++)
                (w->blas ? head_blas : head_scalar)(q + h * hs, K + h * hs, Vc + h * hs, s->pos + t, C, hs, scale, prob,
                                                    o + h * hs);
        }
        off += (size_t)s->n;
    }
}

static void gelu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static void norm(const ls_gpt_weights *w, ls_gpt_scratch *sc, float *out, const float *x, const float *g,
                 const float *b, int N) {
    if (w->blas)
        ls_layernorm_forward(out, sc->stats, sc->stats + N, x, g, b, N, w->cfg.d_model);
    else
        layernorm(out, x, g, b, N, w->cfg.d_model);
}

size_t ls_gpt_out_floats(const ls_gpt_weights *w, const ls_gpt_seq *seqs, int nseq, int all_logits) {
    size_t ntok = 0;
    for (int i = 0; i < nseq; i++) ntok += (size_t)seqs[i].n;
    if (w->layer_end != w->cfg.n_layer) return ntok * w->cfg.d_model;
    return (all_logits ? ntok : (size_t)nseq) * w->cfg.vocab;
}

int ls_gpt_forward(const ls_gpt_weights *w, ls_gpt_scratch *sc, const ls_gpt_seq *seqs, int nseq, const int *tokens,
                   const float *act_in, float *out, int all_logits) {
    const ls_model_config *c = &w->cfg;
    int C = c->d_model, F = c->d_ff, V = c->vocab;
    if (nseq <= 0) return ls_err(LS_EINVAL, "engine: empty micro-batch");
    size_t ntok = 0;
    for (int i = 0; i < nseq; i++) {
        const ls_gpt_seq *s = &seqs[i];
        if (s->slot < 0 || s->slot >= w->slots)
            return ls_err(LS_EINVAL, "engine: KV slot %d out of range [0, %d)", s->slot, w->slots);
        if (s->n < 1 || s->pos < 0 || s->n > c->n_ctx - s->pos) /* no int overflow at pos near INT_MAX */
            return ls_err(LS_EINVAL, "engine: sequence of %d tokens at position %d exceeds the context (%d)", s->n,
                          s->pos, c->n_ctx);
        ntok += (size_t)s->n;
    }
    LS_TRY(reserve(sc, c, ntok));
    float *x = sc->x;
    if (w->layer_begin == 0) {
        if (!tokens) return ls_err(LS_EINVAL, "engine: the first stage needs tokens");
        size_t t = 0;
        for (int i = 0; i < nseq; i++)
            for (int j = 0; j < seqs[i].n; j++, t++) {
                int tok = tokens[t];
                if (tok < 0 || tok >= V) return ls_err(LS_EINVAL, "engine: token %d out of range [0, %d)", tok, V);
                const float *te = w->wte + (size_t)tok * C, *pe = w->wpe + (size_t)(seqs[i].pos + j) * C;
                for (int k = 0; k < C; k++) x[t * C + k] = te[k] + pe[k];
            }
    } else {
        if (!act_in) return ls_err(LS_EINVAL, "engine: a later stage needs activations");
        memcpy(x, act_in, ntok * C * sizeof(float));
    }
    for (int l = 0; l < w->layer_end - w->layer_begin; l++) {
        const ls_gpt_block *b = &w->blocks[l];
        norm(w, sc, sc->h, x, b->ln1w, b->ln1b, (int)ntok);
        seq_linear(w, &b->lin[LS_LIN_QKV], sc->h, sc->qkv, NULL, seqs, nseq);
        attention(w, b, sc, seqs, nseq, sc->prob);
        seq_linear(w, &b->lin[LS_LIN_PROJ], sc->att, sc->h, x, seqs, nseq); /* x += attention branch */
        norm(w, sc, sc->h, x, b->ln2w, b->ln2b, (int)ntok);
        seq_linear(w, &b->lin[LS_LIN_FC], sc->h, sc->fc, NULL, seqs, nseq);
        float *act = sc->fc;
        if (w->blas) {
            act = sc->fc + ntok * F;
            ls_gelu_forward(act, sc->fc, (int)(ntok * F));
        } else {
            gelu(sc->fc, ntok * F);
        }
        seq_linear(w, &b->lin[LS_LIN_MPROJ], act, sc->h, x, seqs, nseq); /* x += MLP branch */
    }
    if (w->layer_end != c->n_layer) {
        memcpy(out, x, ntok * C * sizeof(float));
        return LS_OK;
    }
    if (all_logits) {
        norm(w, sc, sc->h, x, w->lnfw, w->lnfb, (int)ntok);
        ls_linear_forward(&w->head, sc->h, (int)ntok, out, NULL, 0, w->nthreads);
        return LS_OK;
    }
    /* last token of each sequence, through the batch-invariant row kernel */
    size_t t = 0;
    for (int i = 0; i < nseq; i++) {
        t += (size_t)seqs[i].n;
        memcpy(sc->att + (size_t)i * C, x + (t - 1) * C, sizeof(float) * C);
    }
    norm(w, sc, sc->h, sc->att, w->lnfw, w->lnfb, nseq);
    ls_linear_forward(&w->head, sc->h, nseq, out, NULL, 1, w->nthreads);
    return LS_OK;
}
