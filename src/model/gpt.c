/* gpt.c - the GPT model: parameter layout and init, the training forward/backward over
 * (B,T) batches built from layers.c, and incremental decoding with a KV cache.
 *
 * Goal: a model you can read top to bottom (after llm.c's train_gpt2.c). Non-goals:
 * activation recomputation, untied heads. The block Linear layers may run in lower
 * precision per layer (precision.c; fp32 master weights). */
#include "llmsys/model.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/precision.h"

/* Tensor index of layer tensor k (ls_layer_tensor) of layer l = 2 + l*LS_LT_COUNT + k. */

typedef struct {
    ls_tensor_spec spec; /* name, shape, numel from the layout */
    size_t offset;
} tensor_info;

/* Activations of one forward, all views into one allocation sized for (B, T). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
    float *qkv;                       /* (N,3C) */
    float *att;                       /* (B,NH,T,T) softmax probabilities */
    float *atty;                      /* (N,C) attention output before the projection */
    float *res2;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C) (N) (N) */
    float *fch, *fch_gelu;            /* (N,F) (N,F) */
    float *res3;                      /* (N,C) residual after the MLP */
} layer_acts;

struct ls_model {
    ls_model_config cfg;
    int n_tensors;
    tensor_info *tensors;
    size_t n_params;
    float *params, *grads, *adam_m, *adam_v;

    /* activations (lazily sized by forward) */
    float *acts;
    size_t acts_cap; /* floats */
    int B, T;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
    layer_acts *layers;
    /* backward scratch */
    float *dres, *dln, *dqkv, *datty, *dfch_gelu, *datt, *dlogits;
    int *tokens, *targets;
    int has_targets, n_valid;
    const float *xent_w; /* per-position loss weights for ls_model_backward_weighted, else NULL */

    /* per-layer precision of the block Linear layers (precision.c); NULL: all fp32 */
    ls_model_prec *mprec;
    /* the BPE vocabulary the model was trained on; NULL: bytes */
    ls_bpe *tok;

    /* wall-time profile of forward/backward by layer kind (bench) */
    int prof_on;
    ls_model_prof prof;

    /* incremental decoding (batch 1): the inference pass over fp32 views of the
     * parameters with one KV slot, allocated on first use */
    float *kv;
    int kv_pos;
    float *kv_k, *kv_v; /* (L, n_ctx, C) each */
    float *dec_logits;  /* (V) */
    ls_gpt_block *kv_blocks;
    ls_gpt_weights kv_w;
    ls_gpt_scratch kv_scratch;
};

static float *P(ls_model *m, int i) { return m->params + m->tensors[i].offset; }
static float *G(ls_model *m, int i) { return m->grads + m->tensors[i].offset; }
static int LI(int l, int k) { return 2 + l * LS_LT_COUNT + k; }

int ls_model_init(ls_model **out, const ls_model_config *cfg, uint64_t seed) {
    *out = NULL;
    LS_TRY(ls_model_config_validate(cfg));
    ls_model *m = calloc(1, sizeof *m);
    if (!m) return ls_err(LS_ENOMEM, "model: out of memory");
    m->cfg = *cfg;
    int L = cfg->n_layer;
    m->n_tensors = ls_model_layout_count(cfg);
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    if (!m->tensors) {
        free(m);
        return ls_err(LS_ENOMEM, "model: out of memory");
    }
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        LS_ASSERT(ls_model_layout(cfg, i, &m->tensors[i].spec) == LS_OK);
        m->tensors[i].offset = off;
        off += m->tensors[i].spec.numel;
    }
    LS_ASSERT(off == ls_model_config_num_params(cfg));
    m->n_params = off;

    /* params, grads, adam m, adam v: one allocation each */
    size_t bytes = m->n_params * sizeof(float);
    m->params = ls_aligned_calloc(64, bytes);
    m->grads = ls_aligned_calloc(64, bytes);
    m->adam_m = ls_aligned_calloc(64, bytes);
    m->adam_v = ls_aligned_calloc(64, bytes);
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v) {
        ls_model_free(m);
        char b[32];
        return ls_err(LS_ENOMEM, "model: cannot allocate %s of parameters",
                      ls_fmt_bytes(4.0 * (double)bytes, b, sizeof b));
    }

    /* GPT-2 init: N(0, 0.02) for weights and embeddings, residual projections scaled by
     * 1/sqrt(2L) (they add into the residual stream twice per layer), zero biases,
     * LayerNorm gain 1. Filled in tensor order from one stream: reproducible by seed. */
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)L);
    for (int i = 0; i < m->n_tensors; i++) {
        const ls_tensor_spec *t = &m->tensors[i].spec;
        float *p = m->params + m->tensors[i].offset;
        int in_layer = t->layer >= 0;
        int is_ln_w = in_layer ? t->kind == LS_LT_LN1W || t->kind == LS_LT_LN2W : t->kind == LS_GT_LNFW;
        if (is_ln_w) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else if (t->ndim == 2) {
            int is_resid = in_layer && (t->kind == LS_LT_PROJW || t->kind == LS_LT_FCPW);
            float sd = is_resid ? resid_std : 0.02f;
            for (size_t j = 0; j < t->numel; j++) p[j] = sd * ls_rng_normal(&rng);
        } /* biases and LayerNorm shifts stay 0 */
    }
    *out = m;
    return LS_OK;
}

void ls_model_free(ls_model *m) {
    if (!m) return;
    ls_aligned_free(m->params), ls_aligned_free(m->grads);
    ls_aligned_free(m->adam_m), ls_aligned_free(m->adam_v);
    ls_aligned_free(m->acts);
    ls_aligned_free(m->kv), free(m->kv_blocks), ls_gpt_scratch_free(&m->kv_scratch);
    free(m->layers);
    free(m->tokens), free(m->targets);
    free(m->tensors);
    ls_model_prec_free(m->mprec);
    ls_bpe_free(m->tok);
    free(m);
}

ls_model_prec **ls_model_prec_slot(ls_model *m) { return &m->mprec; }

const ls_model_config *ls_model_cfg(const ls_model *m) { return &m->cfg; }
int ls_model_num_tensors(const ls_model *m) { return m->n_tensors; }
size_t ls_model_num_params(const ls_model *m) { return m->n_params; }
float *ls_model_params(ls_model *m) { return m->params; }
float *ls_model_grads(ls_model *m) { return m->grads; }
float *ls_model_adam_m(ls_model *m) { return m->adam_m; }
float *ls_model_adam_v(ls_model *m) { return m->adam_v; }

ls_param ls_model_tensor(ls_model *m, int i) {
    ls_param p = {0};
    if (i < 0 || i >= m->n_tensors) return p;
    const ls_tensor_spec *t = &m->tensors[i].spec;
    size_t off = m->tensors[i].offset;
    p.name = t->name;
    p.data = m->params + off;
    p.grad = m->grads + off;
    p.adam_m = m->adam_m + off;
    p.adam_v = m->adam_v + off;
    p.ndim = t->ndim;
    p.shape[0] = t->shape[0];
    p.shape[1] = t->shape[1];
    p.numel = t->numel;
    return p;
}

int ls_model_find_tensor(const ls_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].spec.name, name) == 0) return i;
    return -1;
}

void ls_model_set_threads(int n) {
    if (n <= 0) n = ls_num_cores();
    omp_set_num_threads(n); /* OpenBLAS runs single-threaded inside the model's OpenMP blocks */
}

/* ---------------------------------------------------------------- activations */

/* ensure_acts carves these floats. */
size_t ls_model_acts_floats(const ls_model_config *c, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab;
    size_t L = (size_t)c->n_layer, A = (size_t)B * c->n_head * T * T;
    size_t per_layer = N * C + 2 * N + 3 * N * C + A + N * C + N * C + N * C + 2 * N + 2 * N * F + N * C;
    return N * C + L * per_layer + N * C + 2 * N + 2 * N * V + N    /* forward */
           + N * C + N * C + 3 * N * C + N * C + N * F + A + N * V; /* backward */
}

int ls_model_batch_fit(const ls_model_config *c, int batch, int ranks, int T) {
    if (T < 1) T = 1;
    int64_t rows = ls_mem_max_items(4.0 * (double)ls_model_acts_floats(c, 1, T) + 2.0 * T * sizeof(int));
    if (rows > INT_MAX / T) rows = INT_MAX / T;
    if (batch / ranks <= rows) return LS_OK;
    char mem[32];
    return ls_err(LS_EINVAL,
                  "--batch must be at most %lld here (a rank's activations for %d-token sequences within this "
                  "machine's %s), got %d",
                  (long long)rows * ranks, T, ls_fmt_bytes(ls_mem_total(), mem, sizeof mem), batch);
}

/* Carves the activation and backward buffers for (B, T) out of one allocation, growing
 * it when this shape needs more than any before. */
static int ensure_acts(ls_model *m, int B, int T) {
    if (m->B == B && m->T == T && m->acts) return LS_OK;
    size_t N = (size_t)B * T, C = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff, V = (size_t)m->cfg.vocab;
    size_t L = (size_t)m->cfg.n_layer, A = (size_t)B * m->cfg.n_head * T * T;
    size_t need = ls_model_acts_floats(&m->cfg, B, T);
    if (!m->layers) {
        m->layers = calloc(L, sizeof *m->layers);
        if (!m->layers) return ls_err(LS_ENOMEM, "model: out of memory");
    }
    if (need > m->acts_cap) {
        ls_aligned_free(m->acts);
        m->acts = ls_aligned_alloc(64, need * sizeof(float));
        if (!m->acts) {
            m->acts_cap = 0;
            m->B = m->T = 0;
            char b[32];
            return ls_err(LS_ENOMEM, "model: cannot allocate %s of activations for B=%d T=%d",
                          ls_fmt_bytes(4.0 * (double)need, b, sizeof b), B, T);
        }
        m->acts_cap = need;
    }
    free(m->tokens);
    free(m->targets);
    m->tokens = malloc(N * sizeof(int));
    m->targets = malloc(N * sizeof(int));
    if (!m->tokens || !m->targets) return ls_err(LS_ENOMEM, "model: out of memory");
    float *p = m->acts;
#define TAKE(ptr, n) (ptr = p, p += (n))
/* a LayerNorm's output (N, C) and the per-row mean and 1/std its backward pass reuses */
#define TAKE_LN(out, mean, rstd) (TAKE(out, N * C), TAKE(mean, N), TAKE(rstd, N))
    TAKE(m->encoded, N * C);
    for (size_t l = 0; l < L; l++) {
        layer_acts *a = &m->layers[l];
        TAKE_LN(a->ln1, a->ln1_mean, a->ln1_rstd);
        TAKE(a->qkv, 3 * N * C);
        TAKE(a->att, A);
        TAKE(a->atty, N * C);
        TAKE(a->res2, N * C);
        TAKE_LN(a->ln2, a->ln2_mean, a->ln2_rstd);
        TAKE(a->fch, N * F);
        TAKE(a->fch_gelu, N * F);
        TAKE(a->res3, N * C);
    }
    TAKE_LN(m->lnf, m->lnf_mean, m->lnf_rstd);
    TAKE(m->logits, N * V);
    TAKE(m->probs, N * V);
    TAKE(m->losses, N);
    TAKE(m->dres, N * C);
    TAKE(m->dln, N * C);
    TAKE(m->dqkv, 3 * N * C);
    TAKE(m->datty, N * C);
    TAKE(m->dfch_gelu, N * F);
    TAKE(m->datt, A);
    TAKE(m->dlogits, N * V);
#undef TAKE_LN
#undef TAKE
    LS_ASSERT((size_t)(p - m->acts) == need);
    m->B = B;
    m->T = T;
    return LS_OK;
}

/* ---------------------------------------------------------------- profiling */

void ls_model_profile_enable(ls_model *m, int on) {
    m->prof_on = on;
    memset(&m->prof, 0, sizeof m->prof);
}

ls_model_prof ls_model_profile_get(const ls_model *m) { return m->prof; }

/* Runs stmt, adding its wall time to m->prof.field when profiling is on. */
#define PROF(field, stmt)                                                                                              \
    do {                                                                                                               \
        if (m->prof_on) {                                                                                              \
            double prof_t0_ = ls_now();                                                                                \
            stmt;                                                                                                      \
            m->prof.field += ls_now() - prof_t0_;                                                                      \
        } else {                                                                                                       \
            stmt;                                                                                                      \
        }                                                                                                              \
    } while (0)

/* ---------------------------------------------------------------- forward / backward */

const float *ls_model_lin_input(const ls_model *m, int l, int kind, int *rows, int *in) {
    if (!m->acts || !m->layers || l < 0 || l >= m->cfg.n_layer || kind < 0 || kind >= LS_LIN_COUNT) return NULL;
    const layer_acts *a = &m->layers[l];
    const float *x[LS_LIN_COUNT] = {a->ln1, a->atty, a->ln2, a->fch_gelu};
    *rows = m->B * m->T;
    *in = kind == LS_LIN_MPROJ ? m->cfg.d_ff : m->cfg.d_model;
    return x[kind];
}

const float *ls_model_ln_rstd(const ls_model *m, int l, int which, int *rows) {
    if (!m->acts || !m->layers || l < 0 || l > m->cfg.n_layer || which < 0 || which > 1) return NULL;
    *rows = m->B * m->T;
    if (l == m->cfg.n_layer) return m->lnf_rstd;
    return which ? m->layers[l].ln2_rstd : m->layers[l].ln1_rstd;
}

float ls_model_forward(ls_model *m, const int *tokens, const int *targets, int B, int T) {
    const ls_model_config *c = &m->cfg;
    int V = c->vocab, C = c->d_model, F = c->d_ff, NH = c->n_head, L = c->n_layer;
    m->has_targets = 0;
    if (B < 1 || T < 1 || T > c->n_ctx) {
        ls_err(LS_EINVAL, "model forward: need B >= 1 and 1 <= T <= n_ctx=%d, got B=%d T=%d", c->n_ctx, B, T);
        return NAN;
    }
    size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            ls_err(LS_ERANGE, "model forward: token %d at position %zu is outside [0, %d)", tokens[i], i, V);
            return NAN;
        }
        if (targets && (targets[i] < -1 || targets[i] >= V)) {
            ls_err(LS_ERANGE, "model forward: target %d at position %zu is outside [-1, %d)", targets[i], i, V);
            return NAN;
        }
    }
    if (ensure_acts(m, B, T) != LS_OK) return NAN;
    PROF(memory, memcpy(m->tokens, tokens, N * sizeof(int)));
    if (targets) PROF(memory, memcpy(m->targets, targets, N * sizeof(int)));

    PROF(encoder, ls_encoder_forward(m->encoded, tokens, P(m, 0), P(m, 1), B, T, C)); // (B,T,C)
    const float *residual = m->encoded;
    for (int l = 0; l < L; l++) {
        layer_acts *a = &m->layers[l];
        PROF(layernorm, ls_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, residual, P(m, LI(l, LS_LT_LN1W)),
                                             P(m, LI(l, LS_LT_LN1B)), (int)N, C)); // (N,C)
        PROF(matmul, ls_lin_forward(m->mprec, LS_LIN(l, LS_LIN_QKV), a->qkv, a->ln1, P(m, LI(l, LS_LT_QKVW)),
                                    P(m, LI(l, LS_LT_QKVB)), NULL, (int)N, C,
                                    3 * C));                                         // (N,3C)
        PROF(attention, ls_attention_forward(a->atty, a->att, a->qkv, B, T, C, NH)); // (N,C)
        PROF(matmul, ls_lin_forward(m->mprec, LS_LIN(l, LS_LIN_PROJ), a->res2, a->atty, P(m, LI(l, LS_LT_PROJW)),
                                    P(m, LI(l, LS_LT_PROJB)), residual, (int)N, C,
                                    C)); // (N,C) = residual + attention branch
        PROF(layernorm, ls_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P(m, LI(l, LS_LT_LN2W)),
                                             P(m, LI(l, LS_LT_LN2B)), (int)N, C));
        /* fc + GELU fused: (N,F) pre-activation kept for backward, (N,F) activation */
        PROF(matmul, ls_lin_gelu_forward(m->mprec, LS_LIN(l, LS_LIN_FC), a->fch, a->fch_gelu, a->ln2,
                                         P(m, LI(l, LS_LT_FCW)), P(m, LI(l, LS_LT_FCB)), (int)N, C, F));
        PROF(matmul, ls_lin_forward(m->mprec, LS_LIN(l, LS_LIN_MPROJ), a->res3, a->fch_gelu, P(m, LI(l, LS_LT_FCPW)),
                                    P(m, LI(l, LS_LT_FCPB)), a->res2, (int)N, F,
                                    C)); // (N,C) = res2 + MLP branch
        residual = a->res3;
    }
    int tl = 2 + L * LS_LT_COUNT;
    PROF(layernorm,
         ls_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, residual, P(m, tl), P(m, tl + 1), (int)N, C));
    PROF(matmul, ls_matmul_forward(m->logits, m->lnf, P(m, 0), NULL, NULL, (int)N, C, V)); // (N,V), tied head
    if (!targets) return 0.0f;
    float loss = 0.0f;
    PROF(xent, loss = ls_softmax_xent_forward(m->probs, m->losses, m->logits, targets, (int)N, V, &m->n_valid));
    m->has_targets = 1;
    return loss;
}

const float *ls_model_logits(const ls_model *m) { return m->logits; }
const float *ls_model_losses(const ls_model *m) { return m->has_targets ? m->losses : NULL; }

void ls_model_zero_grad(ls_model *m) { PROF(memory, memset(m->grads, 0, m->n_params * sizeof(float))); }

int ls_model_backward_checked(ls_model *m) {
    if (!m->has_targets) return ls_err(LS_ESTATE, "model backward: needs a forward with targets first");
    const ls_model_config *c = &m->cfg;
    int B = m->B, T = m->T, V = c->vocab, C = c->d_model, F = c->d_ff, NH = c->n_head, L = c->n_layer;
    size_t N = (size_t)B * T;
    if (m->n_valid == 0) return LS_OK; /* loss 0 over no targets: zero gradient */
    int tl = 2 + L * LS_LT_COUNT;

    PROF(memory, memset(m->dlogits, 0, N * V * sizeof(float)));
    if (m->xent_w)
        PROF(xent, ls_softmax_xent_backward_weighted(m->dlogits, m->probs, m->targets, m->xent_w, (int)N, V));
    else
        PROF(xent, ls_softmax_xent_backward(m->dlogits, m->probs, m->targets, 1.0f / (float)m->n_valid, (int)N, V));
    PROF(memory, memset(m->dln, 0, N * C * sizeof(float)));
    PROF(matmul, ls_matmul_backward(m->dln, G(m, 0), NULL, m->dlogits, m->lnf, P(m, 0), (int)N, C, V));
    PROF(memory, memset(m->dres, 0, N * C * sizeof(float)));
    const float *last = L > 0 ? m->layers[L - 1].res3 : m->encoded;
    PROF(layernorm, ls_layernorm_backward(m->dres, G(m, tl), G(m, tl + 1), m->dln, last, P(m, tl), m->lnf_mean,
                                          m->lnf_rstd, (int)N, C));

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *a = &m->layers[l];
        const float *residual = l == 0 ? m->encoded : m->layers[l - 1].res3;
        /* dres is d(loss)/d(res3) == d/d(res2 through the skip) and d/d(mlp output) */
        /* mlp.proj backward fused with GELU's: dfch_gelu = d(loss)/d(fch), overwritten */
        PROF(matmul, ls_lin_gelu_backward(m->mprec, LS_LIN(l, LS_LIN_MPROJ), m->dfch_gelu, G(m, LI(l, LS_LT_FCPW)),
                                          G(m, LI(l, LS_LT_FCPB)), m->dres, a->fch_gelu, P(m, LI(l, LS_LT_FCPW)),
                                          a->fch, (int)N, F, C));
        PROF(memory, memset(m->dln, 0, N * C * sizeof(float)));
        PROF(matmul,
             ls_lin_backward(m->mprec, LS_LIN(l, LS_LIN_FC), m->dln, G(m, LI(l, LS_LT_FCW)), G(m, LI(l, LS_LT_FCB)),
                             m->dfch_gelu, a->ln2, P(m, LI(l, LS_LT_FCW)), (int)N, C, F));
        PROF(layernorm, ls_layernorm_backward(m->dres, G(m, LI(l, LS_LT_LN2W)), G(m, LI(l, LS_LT_LN2B)), m->dln,
                                              a->res2, P(m, LI(l, LS_LT_LN2W)), a->ln2_mean, a->ln2_rstd, (int)N, C));
        /* now dres = d(loss)/d(res2) */
        PROF(memory, memset(m->datty, 0, N * C * sizeof(float)));
        PROF(matmul,
             ls_lin_backward(m->mprec, LS_LIN(l, LS_LIN_PROJ), m->datty, G(m, LI(l, LS_LT_PROJW)),
                             G(m, LI(l, LS_LT_PROJB)), m->dres, a->atty, P(m, LI(l, LS_LT_PROJW)), (int)N, C, C));
        PROF(memory, memset(m->dqkv, 0, 3 * N * C * sizeof(float)));
        PROF(attention, ls_attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att, B, T, C, NH));
        PROF(memory, memset(m->dln, 0, N * C * sizeof(float)));
        PROF(matmul,
             ls_lin_backward(m->mprec, LS_LIN(l, LS_LIN_QKV), m->dln, G(m, LI(l, LS_LT_QKVW)), G(m, LI(l, LS_LT_QKVB)),
                             m->dqkv, a->ln1, P(m, LI(l, LS_LT_QKVW)), (int)N, C, 3 * C));
        PROF(layernorm, ls_layernorm_backward(m->dres, G(m, LI(l, LS_LT_LN1W)), G(m, LI(l, LS_LT_LN1B)), m->dln,
                                              residual, P(m, LI(l, LS_LT_LN1W)), a->ln1_mean, a->ln1_rstd, (int)N, C));
        /* now dres = d(loss)/d(residual into layer l) */
    }
    PROF(encoder, ls_encoder_backward(G(m, 0), G(m, 1), m->dres, m->tokens, B, T, C));
    return LS_OK;
}

void ls_model_backward(ls_model *m) { (void)ls_model_backward_checked(m); }

int ls_model_backward_weighted(ls_model *m, const float *w) {
    m->xent_w = w;
    int rc = ls_model_backward_checked(m);
    m->xent_w = NULL;
    return rc;
}

/* ---------------------------------------------------------------- KV-cache decoding */

/* A Linear view of this model's fp32 weight and bias for the inference pass. */
static ls_linear fp32_linear(ls_model *m, int l, int lin) {
    int rows, cols, k = ls_model_linear_tensor(lin);
    ls_model_linear_shape(&m->cfg, lin, &rows, &cols);
    return (ls_linear){P(m, LI(l, k)), NULL, P(m, LI(l, k + 1)), rows, cols};
}

int ls_model_kv_reset(ls_model *m) {
    const ls_model_config *c = &m->cfg;
    if (!m->kv) {
        size_t C = (size_t)c->d_model, L = (size_t)c->n_layer, T = (size_t)c->n_ctx;
        size_t need = 2 * L * T * C + (size_t)c->vocab;
        m->kv = ls_aligned_alloc(64, need * sizeof(float));
        m->kv_blocks = calloc(L, sizeof *m->kv_blocks);
        if (!m->kv || !m->kv_blocks) {
            ls_aligned_free(m->kv), free(m->kv_blocks);
            m->kv = NULL, m->kv_blocks = NULL;
            return ls_err(LS_ENOMEM, "model: cannot allocate the KV cache");
        }
        float *p = m->kv;
        m->kv_k = p, p += L * T * C;
        m->kv_v = p, p += L * T * C;
        m->dec_logits = p;
        for (int l = 0; l < c->n_layer; l++) {
            ls_gpt_block *b = &m->kv_blocks[l];
            b->ln1w = P(m, LI(l, LS_LT_LN1W)), b->ln1b = P(m, LI(l, LS_LT_LN1B));
            b->ln2w = P(m, LI(l, LS_LT_LN2W)), b->ln2b = P(m, LI(l, LS_LT_LN2B));
            for (int j = 0; j < LS_LIN_COUNT; j++) b->lin[j] = fp32_linear(m, l, j);
            b->kcache = m->kv_k + (size_t)l * T * C;
            b->vcache = m->kv_v + (size_t)l * T * C;
        }
        int tl = 2 + c->n_layer * LS_LT_COUNT;
        m->kv_w = (ls_gpt_weights){*c,
                                   0,
                                   c->n_layer,
                                   m->kv_blocks,
                                   P(m, 0),
                                   P(m, 1),
                                   P(m, tl),
                                   P(m, tl + 1),
                                   {P(m, 0), NULL, NULL, c->vocab, c->d_model},
                                   1,
                                   1,
                                   1};
    }
    m->kv_pos = 0;
    return LS_OK;
}

int ls_model_kv_pos(const ls_model *m) { return m->kv ? m->kv_pos : 0; }

const float *ls_model_kv_step(ls_model *m, int token) {
    const ls_model_config *c = &m->cfg;
    if (!m->kv && ls_model_kv_reset(m) != LS_OK) return NULL;
    if (token < 0 || token >= c->vocab) {
        ls_err(LS_ERANGE, "model decode: token %d outside [0, %d)", token, c->vocab);
        return NULL;
    }
    int t = m->kv_pos;
    if (t >= c->n_ctx) {
        ls_err(LS_ERANGE, "model decode: context full (n_ctx=%d)", c->n_ctx);
        return NULL;
    }
    ls_gpt_seq s = {0, t, 1};
    int saved = ls_blas_threads_push_single(); /* one row: threads would only add overhead */
    int rc = ls_gpt_forward(&m->kv_w, &m->kv_scratch, &s, 1, &token, NULL, m->dec_logits, 0);
    ls_blas_threads_pop(saved);
    if (rc != LS_OK) return NULL;
    m->kv_pos = t + 1;
    return m->dec_logits;
}

int ls_model_generate(ls_model *m, const int *prompt, int n_prompt, int n_new, const ls_sample_config *s, ls_rng *rng,
                      int *out, int *n_out) {
    *n_out = 0;
    const ls_model_config *c = &m->cfg;
    if (n_prompt < 1) return ls_err(LS_EINVAL, "generate: the prompt needs at least one token");
    if (n_prompt > c->n_ctx)
        return ls_err(LS_EINVAL, "generate: prompt of %d tokens exceeds the context (n_ctx=%d)", n_prompt, c->n_ctx);
    if (n_new < 0) return ls_err(LS_EINVAL, "generate: n_new must be >= 0, got %d", n_new);
    LS_TRY(ls_model_kv_reset(m));
    const float *logits = NULL;
    for (int i = 0; i < n_prompt; i++) {
        logits = ls_model_kv_step(m, prompt[i]);
        if (!logits) return ls_err_wrap(LS_EINVAL, "generate: prompt token %d", i);
    }
    for (int i = 0; i < n_new; i++) {
        int tok = ls_sample_logits(logits, c->vocab, s, rng);
        if (tok < 0) return tok;
        out[(*n_out)++] = tok;
        if (tok == LS_TOK_EOS || m->kv_pos >= c->n_ctx || i == n_new - 1) break;
        logits = ls_model_kv_step(m, tok);
        if (!logits) return ls_err_wrap(LS_EINVAL, "generate");
    }
    return LS_OK;
}

int ls_model_set_tokenizer(ls_model *m, ls_bpe *tok) {
    if (tok && ls_bpe_vocab_size(tok) != m->cfg.vocab) {
        int v = ls_bpe_vocab_size(tok);
        ls_bpe_free(tok);
        return ls_err(LS_EINVAL, "tokenizer has %d tokens but the model's vocabulary is %d", v, m->cfg.vocab);
    }
    ls_bpe_free(m->tok);
    m->tok = tok;
    return LS_OK;
}

const ls_bpe *ls_model_tokenizer(const ls_model *m) { return m->tok; }
