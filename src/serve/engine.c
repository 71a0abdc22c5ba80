/* engine.c - the inference engine: a contiguous range of GPT layers with (quantized)
 * weights loaded by name from a checkpoint and a slot-based KV cache, run by the model's
 * inference forward pass (ls_gpt_forward); whole-model scoring, generation and eval. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/safetensors.h"
#include "llmsys/serve.h"

/* Owned storage of one layer; the forward pass reads it through the ls_gpt_block view. */
typedef struct {
    float *ln1w, *ln1b, *ln2w, *ln2b;
    float *bias[LS_LIN_COUNT];
    ls_qmat lin[LS_LIN_COUNT]; /* qkv (3C,C), proj (C,C), fc (F,C), mproj (C,F) */
    int bits;
} eng_layer;

struct ls_engine {
    ls_model_config cfg;
    int lb, le, max_seqs, nthreads;
    eng_layer *layers;              /* le - lb */
    ls_gpt_block *blocks;           /* views of layers plus the KV cache (max_seqs, n_ctx, C) */
    float *wte, *wpe, *lnfw, *lnfb; /* first/last stage only (wte: both) */
    ls_qmat head;                   /* wte as an F32 qmat for batch-invariant logits */
    ls_gpt_weights w;               /* what ls_gpt_forward runs */
    ls_gpt_scratch scratch;
    ls_bpe *tok; /* the checkpoint's BPE vocabulary (NULL: bytes): bytes per token */
};

ls_engine_opts ls_engine_defaults(void) {
    ls_engine_opts o = {0, 0, NULL, 64, 8, 1};
    return o;
}

/* ---------------------------------------------------------------- checkpoint helpers */

/* Copies layout tensor i of the checkpoint into a new allocation. */
static int copy_f32(ls_st_file *f, const ls_model_config *c, int i, float **dst) {
    const float *src;
    ls_tensor_spec sp;
    LS_TRY(ls_model_layout(c, i, &sp));
    LS_TRY(ls_ckpt_tensor(f, c, i, &src));
    *dst = malloc(sp.numel * sizeof(float));
    if (!*dst) return ls_err(LS_ENOMEM, "engine: out of memory for %s", sp.name);
    memcpy(*dst, src, sp.numel * sizeof(float));
    return LS_OK;
}

/* Loads a (rows, groups) scale or min tensor into fp16: F16 (format version 2) as is,
 * F32 (version 1) rounded to nearest fp16. */
static int load_half(ls_st_file *f, const char *nm, const int64_t *shape, uint16_t *dst) {
    const ls_st_tensor *t = ls_st_find(f, nm);
    size_t n = (size_t)shape[0] * (size_t)shape[1];
    if (t && t->dtype == LS_DT_F32 && ls_st_expect(f, nm, LS_DT_F32, 2, shape, &t) == LS_OK) {
        for (size_t i = 0; i < n; i++) dst[i] = ls_f32_to_f16(((const float *)t->data)[i]);
        return LS_OK;
    }
    LS_TRY(ls_st_expect(f, nm, LS_DT_F16, 2, shape, &t));
    memcpy(dst, t->data, n * 2);
    return LS_OK;
}

/* Loads one Linear weight of a layer into q: stored at file_bits, wanted at bits. */
static int load_linear(ls_st_file *f, const char *name, int rows, int cols, int file_bits, int group, int bits,
                       ls_qmat *q) {
    char nm[160];
    if (file_bits == 32) {
        int64_t shape[2] = {rows, cols};
        const ls_st_tensor *t;
        LS_TRY(ls_st_expect(f, name, LS_DT_F32, 2, shape, &t));
        return ls_qmat_quantize(q, (const float *)t->data, rows, cols, bits, group);
    }
    if (bits != file_bits)
        return ls_err(LS_EINVAL,
                      "%s: %s is stored at %d bits, cannot serve it at %d bits (quantize from the fp32 checkpoint)",
                      ls_st_path(f), name, file_bits, bits);
    LS_TRY(ls_qmat_alloc(q, rows, cols, bits, group));
    const ls_st_tensor *t;
    if (bits == 16) {
        int64_t shape[2] = {rows, cols};
        if (ls_st_expect(f, name, LS_DT_F16, 2, shape, &t) != LS_OK) goto fail;
        for (int r = 0; r < rows; r++)
            memcpy(q->data + (size_t)r * q->row_bytes, (const uint8_t *)t->data + (size_t)r * cols * 2,
                   (size_t)cols * 2);
        return LS_OK;
    }
    int64_t qs[2] = {rows, (int64_t)q->row_bytes}, ss[2] = {rows, q->ngroups};
    snprintf(nm, sizeof nm, "%s.q", name);
    if (ls_st_expect(f, nm, LS_DT_U8, 2, qs, &t) != LS_OK) goto fail;
    memcpy(q->data, t->data, q->row_bytes * (size_t)rows);
    snprintf(nm, sizeof nm, "%s.scale", name);
    if (load_half(f, nm, ss, q->hscale) != LS_OK) goto fail;
    if (bits < 8) {
        snprintf(nm, sizeof nm, "%s.min", name);
        if (load_half(f, nm, ss, q->hmin) != LS_OK) goto fail;
    }
    return LS_OK;
fail:
    ls_qmat_free(q);
    return LS_EFORMAT;
}

/* ---------------------------------------------------------------- open / free */

void ls_engine_free(ls_engine *e) {
    if (!e) return;
    ls_bpe_free(e->tok);
    if (e->layers) {
        for (int i = 0; i < e->le - e->lb; i++) {
            eng_layer *L = &e->layers[i];
            free(L->ln1w), free(L->ln1b), free(L->ln2w), free(L->ln2b);
            for (int j = 0; j < LS_LIN_COUNT; j++) free(L->bias[j]), ls_qmat_free(&L->lin[j]);
            if (e->blocks) ls_aligned_free(e->blocks[i].kcache), ls_aligned_free(e->blocks[i].vcache);
        }
        free(e->layers);
    }
    free(e->blocks);
    free(e->wte), free(e->wpe), free(e->lnfw), free(e->lnfb);
    ls_qmat_free(&e->head);
    ls_gpt_scratch_free(&e->scratch);
    free(e);
}

/* Where a layer's LayerNorm or bias vector of tensor kind k (not a Linear weight) lives. */
static float **layer_vector(eng_layer *L, int k) {
    return k == LS_LT_LN1W   ? &L->ln1w
           : k == LS_LT_LN1B ? &L->ln1b
           : k == LS_LT_LN2W ? &L->ln2w
           : k == LS_LT_LN2B ? &L->ln2b
                             : &L->bias[ls_model_linear_of(k - 1)];
}

/* Points held layer l's ls_gpt_block view at its storage and gives it a KV cache. */
static int bind_block(ls_engine *e, int l) {
    const ls_model_config *c = &e->cfg;
    eng_layer *L = &e->layers[l - e->lb];
    ls_gpt_block *B = &e->blocks[l - e->lb];
    *B = (ls_gpt_block){L->ln1w, L->ln1b, L->ln2w, L->ln2b, {{0}}, NULL, NULL};
    for (int j = 0; j < LS_LIN_COUNT; j++)
        B->lin[j] = (ls_linear){NULL, &L->lin[j], L->bias[j], L->lin[j].rows, L->lin[j].cols};
    size_t kv = (size_t)e->max_seqs * c->n_ctx * c->d_model * sizeof(float);
    B->kcache = ls_aligned_calloc(64, kv);
    B->vcache = ls_aligned_calloc(64, kv);
    if (!B->kcache || !B->vcache) return ls_err(LS_ENOMEM, "engine: out of memory for the KV cache");
    return LS_OK;
}

/* Loads the tensors of layer l in layout order: LayerNorm and bias vectors as fp32, the
 * Linear weights stored at file_bits and held at bits. */
static int load_layer(ls_engine *e, ls_st_file *f, int l, int file_bits, int group, int bits) {
    const ls_model_config *c = &e->cfg;
    eng_layer *L = &e->layers[l - e->lb];
    L->bits = bits;
    for (int k = 0; k < LS_LT_COUNT; k++) {
        int i = ls_model_layout_index(c, l, k), lin = ls_model_linear_of(k);
        ls_tensor_spec sp;
        LS_TRY(ls_model_layout(c, i, &sp));
        if (lin >= 0) {
            LS_TRY(load_linear(f, sp.name, (int)sp.shape[0], (int)sp.shape[1], file_bits, group, bits, &L->lin[lin]));
            continue;
        }
        LS_TRY(copy_f32(f, c, i, layer_vector(L, k)));
    }
    return bind_block(e, l);
}

/* What ls_gpt_forward runs: the held blocks, the embeddings and the LM head. */
static void set_view(ls_engine *e) {
    const ls_model_config *c = &e->cfg;
    ls_linear head = {NULL, &e->head, NULL, c->vocab, c->d_model};
    e->w = (ls_gpt_weights){*c,      e->lb,   e->le, e->blocks,   e->wte,      e->wpe,
                            e->lnfw, e->lnfb, head,  e->max_seqs, e->nthreads, 0};
}

int ls_engine_open(ls_engine **out, const char *path, const ls_engine_opts *o) {
    *out = NULL;
    ls_engine_opts d = ls_engine_defaults();
    if (!o) o = &d;
    ls_st_file *f;
    ls_model_config cfg;
    LS_TRY(ls_ckpt_open(path, &f, &cfg));
    ls_engine *e = calloc(1, sizeof *e);
    int *fbits = NULL, rc = LS_OK, group = 64;
    if (!e) {
        ls_st_close(f);
        return ls_err(LS_ENOMEM, "engine: out of memory");
    }
    e->cfg = cfg;
    const ls_model_config *c = &e->cfg;
    fbits = malloc(sizeof(int) * c->n_layer);
    if (!fbits) {
        rc = ls_err(LS_ENOMEM, "engine: out of memory");
        goto done;
    }
    int file_quant = ls_ckpt_quant_meta(f, c->n_layer, &group, fbits);
    if (file_quant < 0) {
        rc = file_quant;
        goto done;
    }
    if ((rc = ls_ckpt_tokenizer(f, c, &e->tok))) goto done;
    if (!file_quant) group = o->group > 0 ? o->group : 64;
    if (!ls_quant_group_valid(group)) {
        rc = ls_err(LS_EINVAL, "engine: unsupported group size %d", group);
        goto done;
    }
    e->lb = o->layer_begin;
    e->le = o->layer_end > 0 ? o->layer_end : c->n_layer;
    if (e->lb < 0 || e->le > c->n_layer || e->lb >= e->le) {
        rc = ls_err(LS_EINVAL, "%s: layer range [%d, %d) is outside the model's %d layers", path, e->lb, e->le,
                    c->n_layer);
        goto done;
    }
    e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 8;
    e->nthreads = o->nthreads > 0 ? o->nthreads : 1;
    int C = c->d_model, V = c->vocab;
    e->layers = calloc((size_t)(e->le - e->lb), sizeof(eng_layer));
    e->blocks = calloc((size_t)(e->le - e->lb), sizeof(ls_gpt_block));
    if (!e->layers || !e->blocks) {
        rc = ls_err(LS_ENOMEM, "engine: out of memory");
        goto done;
    }
    for (int l = e->lb; l < e->le; l++) {
        int bits = o->bits ? o->bits[l - e->lb] : fbits[l];
        if (!ls_quant_bits_valid(bits)) {
            rc = ls_err(LS_EINVAL, "layer %d: unsupported bit width %d (use 3, 4, 8 or 16)", l, bits);
            goto done;
        }
        if ((rc = load_layer(e, f, l, fbits[l], group, bits))) goto done;
    }
    if (e->lb == 0 && (rc = copy_f32(f, c, ls_model_layout_index(c, -1, LS_GT_WPE), &e->wpe))) goto done;
    if (e->lb == 0 || e->le == c->n_layer)
        if ((rc = copy_f32(f, c, ls_model_layout_index(c, -1, LS_GT_WTE), &e->wte))) goto done;
    if (e->le == c->n_layer) {
        if ((rc = copy_f32(f, c, ls_model_layout_index(c, -1, LS_GT_LNFW), &e->lnfw)) ||
            (rc = copy_f32(f, c, ls_model_layout_index(c, -1, LS_GT_LNFB), &e->lnfb)))
            goto done;
        if ((rc = ls_qmat_quantize(&e->head, e->wte, V, C, 32, 32))) goto done;
    }
    set_view(e);
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

int ls_engine_new(ls_engine **out, const ls_model_config *cfg, const float *params, const ls_engine_opts *o) {
    *out = NULL;
    ls_engine_opts d = ls_engine_defaults();
    if (!o) o = &d;
    LS_TRY(ls_model_config_validate(cfg));
    if (o->layer_begin != 0 || o->layer_end > 0 || o->bits)
        return ls_err(LS_EINVAL, "engine: one from parameters in memory holds the whole model at fp32");
    ls_engine *e = calloc(1, sizeof *e);
    if (!e) return ls_err(LS_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->lb = 0, e->le = cfg->n_layer;
    e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 8;
    e->nthreads = o->nthreads > 0 ? o->nthreads : 1;
    size_t n = ls_model_config_num_params(cfg);
    float *zero = params ? NULL : calloc(n, sizeof(float));
    e->layers = calloc((size_t)cfg->n_layer, sizeof(eng_layer));
    e->blocks = calloc((size_t)cfg->n_layer, sizeof(ls_gpt_block));
    int rc = e->layers && e->blocks && (params || zero) ? LS_OK : ls_err(LS_ENOMEM, "engine: out of memory");
    /* storage for every tensor but the Linear weights, which ls_engine_load_params quantizes */
    for (int i = 0; rc == LS_OK && i < ls_model_layout_count(cfg); i++) {
        ls_tensor_spec s;
        if ((rc = ls_model_layout(cfg, i, &s)) || s.linear >= 0) continue;
        float **const glob[4] = {&e->wte, &e->wpe, &e->lnfw, &e->lnfb};
        float **p = s.layer < 0 ? glob[s.kind] : layer_vector(&e->layers[s.layer], s.kind);
        if (!(*p = malloc(sizeof(float) * s.numel))) rc = ls_err(LS_ENOMEM, "engine: out of memory for %s", s.name);
    }
    for (int l = 0; e->layers && l < cfg->n_layer; l++) e->layers[l].bits = 32;
    if (rc == LS_OK) rc = ls_engine_load_params(e, params ? params : zero, n);
    for (int l = 0; rc == LS_OK && l < cfg->n_layer; l++) rc = bind_block(e, l);
    free(zero);
    if (rc) {
        ls_engine_free(e);
        return rc;
    }
    set_view(e);
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

size_t ls_engine_out_floats(const ls_engine *e, const ls_engine_seq *seqs, int nseq, int all_logits) {
    return ls_gpt_out_floats(&e->w, seqs, nseq, all_logits);
}

int ls_engine_forward(ls_engine *e, const ls_engine_seq *seqs, int nseq, const int *tokens, const float *act_in,
                      float *out, int all_logits) {
    return ls_gpt_forward(&e->w, &e->scratch, seqs, nseq, tokens, act_in, out, all_logits);
}

/* ---------------------------------------------------------------- whole-model helpers */

static int require_whole(const ls_engine *e, const char *what) {
    if (e->lb != 0 || e->le != e->cfg.n_layer)
        return ls_err(LS_EINVAL, "%s needs an engine holding the whole model", what);
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
    if (n_prompt < 1 || n_prompt > T)
        return ls_err(LS_EINVAL, "generate: prompt of %d tokens (need 1..%d)", n_prompt, T);
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
    size_t avail, windows = ls_eval_windows(n, T, max_tokens, &avail);
    if (windows == 0) return ls_err(LS_EINVAL, "too little data to evaluate: %zu tokens, need at least %d", n, T + 1);
    int *tok = malloc(sizeof(int) * (size_t)(T + 1));
    float *nll = malloc(sizeof(float) * (size_t)T);
    double sum = 0.0;
    int rc = tok && nll ? LS_OK : ls_err(LS_ENOMEM, "eval: out of memory");
    for (size_t w = 0; rc == LS_OK && w < windows; w++) {
        /* window w predicts tokens[wT+1 .. wT+T]: score T+1 tokens would exceed the context,
         * so run the T inputs and read each position's log-prob of the next token */
        size_t at = ls_eval_window_start(w, windows, avail, T);
        for (int k = 0; k <= T; k++) tok[k] = tokens[at + (size_t)k];
        rc = score_window(e, tok, T, nll);
        for (int k = 0; rc == LS_OK && k < T; k++) {
            int y = tok[k + 1];
            if (y == LS_TOK_BOS) continue; /* BOS always follows EOS: no information */
            sum += nll[k];
            r->tokens++;
            r->bytes += ls_text_token_bytes(e->tok, y);
        }
    }
    free(tok), free(nll);
    LS_TRY(rc);
    return ls_eval_finish(r, sum);
}

int ls_ckpt_is_quantized(const char *path) {
    ls_st_file *f;
    ls_model_config cfg;
    LS_TRY(ls_ckpt_open(path, &f, &cfg));
    int q = ls_st_meta(f, "llmsys.quant") != NULL;
    ls_st_close(f);
    return q;
}

int ls_ckpt_info(const char *path, ls_model_config *cfg, int **bits, int *group) {
    ls_st_file *f;
    *bits = NULL;
    LS_TRY(ls_ckpt_open(path, &f, cfg));
    int g = 64, rc = LS_OK;
    *bits = malloc(sizeof(int) * cfg->n_layer);
    rc = *bits ? ls_ckpt_quant_meta(f, cfg->n_layer, &g, *bits) : ls_err(LS_ENOMEM, "out of memory");
    ls_st_close(f);
    if (rc < 0) {
        free(*bits);
        *bits = NULL;
        return rc;
    }
    if (group) *group = g;
    return LS_OK;
}

/* ---------------------------------------------------------------- in-memory weights */

int ls_engine_load_params(ls_engine *e, const float *params, size_t n) {
    LS_TRY(require_whole(e, "load params"));
    const ls_model_config *c = &e->cfg;
    if (n != ls_model_config_num_params(c))
        return ls_err(LS_EINVAL, "engine: %zu parameters given, the model has %zu", n, ls_model_config_num_params(c));
    for (int l = 0; l < c->n_layer; l++)
        if (e->layers[l].bits != 32) return ls_err(LS_EUNSUPPORTED, "engine: load params needs an fp32 engine");
    int V = c->vocab, C = c->d_model;
    const float *p = params;
    /* params are the model's tensors in layout order, as ls_model_params gives them */
    for (int i = 0; i < ls_model_layout_count(c); i++) {
        ls_tensor_spec s;
        LS_TRY(ls_model_layout(c, i, &s));
        if (s.linear >= 0) {
            ls_qmat *q = &e->layers[s.layer].lin[s.linear]; /* the block's view points at it */
            ls_qmat_free(q);
            LS_TRY(ls_qmat_quantize(q, p, (int)s.shape[0], (int)s.shape[1], 32, 32));
        } else {
            float *const glob[4] = {e->wte, e->wpe, e->lnfw, e->lnfb};
            memcpy(s.layer < 0 ? glob[s.kind] : *layer_vector(&e->layers[s.layer], s.kind), p, sizeof(float) * s.numel);
        }
        p += s.numel;
    }
    LS_ASSERT((size_t)(p - params) == n);
    ls_qmat_free(&e->head);
    return ls_qmat_quantize(&e->head, e->wte, V, C, 32, 32);
}
