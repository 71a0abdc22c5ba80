/* qckpt.c - writing quantized checkpoints (per-layer bits, packed groups), reading
 * bits-map files, and `llmsys quantize` (quantize, then held-out bits/byte against fp32). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/safetensors.h"
#include "llmsys/serve.h"
#include "model/layers.h"

int ls_quant_read_bits_map(const char *path, int **bits, int *n) {
    char *text;
    size_t len;
    *bits = NULL;
    *n = 0;
    LS_TRY(ls_file_read(path, &text, &len));
    int cap = 64, cnt = 0, rc = LS_OK;
    int *b = malloc(sizeof(int) * cap);
    if (!b) {
        free(text);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    const char *p = text;
    while (*p && isspace((unsigned char)*p)) p++;
    if (*p == '{' || *p == '[') {
        cJSON *j;
        if ((rc = ls_json_parse(text, len, path, &j)) == LS_OK) {
            cJSON *arr = cJSON_IsArray(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "bits");
            if (!cJSON_IsArray(arr)) rc = ls_err(LS_EFORMAT, "%s: expected {\"bits\": [...]} or a list of integers", path);
            cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                if (rc) break;
                if (!cJSON_IsNumber(it)) { rc = ls_err(LS_EFORMAT, "%s: bits[%d] is not a number", path, cnt); break; }
                if (cnt == cap) { int *nb = realloc(b, sizeof(int) * (cap *= 2)); if (!nb) { rc = ls_err(LS_ENOMEM, "out of memory"); break; } b = nb; }
                b[cnt++] = it->valueint;
            }
            cJSON_Delete(j);
        }
    } else {
        while (rc == LS_OK && *p) {
            if (isspace((unsigned char)*p) || *p == ',') { p++; continue; }
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) { rc = ls_err(LS_EFORMAT, "%s: unexpected '%c' in bits map", path, *p); break; }
            if (cnt == cap) { int *nb = realloc(b, sizeof(int) * (cap *= 2)); if (!nb) { rc = ls_err(LS_ENOMEM, "out of memory"); break; } b = nb; }
            b[cnt++] = (int)v;
            p = end;
        }
    }
    free(text);
    for (int i = 0; rc == LS_OK && i < cnt; i++)
        if (b[i] != 3 && b[i] != 4 && b[i] != 8 && b[i] != 16 && b[i] != 32)
            rc = ls_err(LS_EINVAL, "%s: layer %d has unsupported bit width %d (use 3, 4, 8 or 16)", path, i, b[i]);
    if (rc == LS_OK && cnt == 0) rc = ls_err(LS_EFORMAT, "%s: empty bits map", path);
    if (rc) {
        free(b);
        return rc;
    }
    *bits = b;
    *n = cnt;
    return LS_OK;
}

/* 1 and *layer when name is a block's Linear weight in the model's layout. */
static int is_linear_weight(const char *name, int *layer) {
    int kind;
    return ls_model_layout_parse(name, layer, &kind) && ls_model_linear_of(kind) >= 0;
}

int ls_quant_checkpoint(const char *in_path, const int *bits, int n_layer, int group, const char *out_path) {
    ls_st_file *f;
    ls_model_config cfg;
    LS_TRY(ls_ckpt_open(in_path, &f, &cfg));
    int rc = LS_OK;
    if (ls_st_meta(f, "llmsys.quant")) {
        ls_st_close(f);
        return ls_err(LS_EINVAL, "%s: already quantized; quantize from the fp32 checkpoint", in_path);
    }
    if (n_layer != cfg.n_layer) {
        ls_st_close(f);
        return ls_err(LS_EINVAL, "bits map has %d entries but %s has %d layers", n_layer, in_path, cfg.n_layer);
    }
    if (!ls_quant_group_valid(group)) {
        ls_st_close(f);
        return ls_err(LS_EINVAL, "unsupported group size %d (use 32, 64, 128 or 256)", group);
    }
    for (int l = 0; l < n_layer; l++)
        if (!ls_quant_bits_valid(bits[l])) {
            ls_st_close(f);
            return ls_err(LS_EINVAL, "layer %d: unsupported bit width %d (use 3, 4, 8 or 16)", l, bits[l]);
        }
    int nt = ls_st_count(f);
    ls_qmat *qm = calloc((size_t)nt, sizeof(ls_qmat));
    char **names = calloc((size_t)nt * 3, sizeof(char *));
    float **tmpf = calloc((size_t)nt, sizeof(float *));
    ls_st_writer *w = NULL;
    if (!qm || !names || !tmpf) { rc = ls_err(LS_ENOMEM, "out of memory"); goto done; }
    if ((rc = ls_st_writer_init(&w))) goto done;
    for (int i = 0; i < nt && rc == LS_OK; i++) {
        const ls_st_tensor *t = ls_st_get(f, i);
        int l;
        if (!strncmp(t->name, "opt.", 4)) continue; /* optimizer state is not served */
        if (!is_linear_weight(t->name, &l) || bits[l] == 32) {
            rc = ls_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            continue;
        }
        if (t->dtype != LS_DT_F32 || t->ndim != 2 || l < 0 || l >= n_layer) {
            rc = ls_err(LS_EFORMAT, "%s: %s must be a 2-D F32 tensor of a layer < %d", in_path, t->name, n_layer);
            break;
        }
        int rows = (int)t->shape[0], cols = (int)t->shape[1];
        if ((rc = ls_qmat_quantize(&qm[i], t->data, rows, cols, bits[l], group))) break;
        if (bits[l] == 16) {
            /* F16 under the plain name, unpadded */
            uint16_t *h = malloc((size_t)rows * cols * 2);
            if (!h) { rc = ls_err(LS_ENOMEM, "out of memory"); break; }
            for (int r = 0; r < rows; r++) memcpy(h + (size_t)r * cols, qm[i].data + (size_t)r * qm[i].row_bytes, (size_t)cols * 2);
            tmpf[i] = (float *)h;
            rc = ls_st_writer_add(w, t->name, LS_DT_F16, 2, t->shape, h);
            continue;
        }
        const char *sfx[3] = {".q", ".scale", ".min"};
        for (int k = 0; k < 3; k++) {
            names[3 * i + k] = malloc(strlen(t->name) + 8);
            if (!names[3 * i + k]) { rc = ls_err(LS_ENOMEM, "out of memory"); break; }
            sprintf(names[3 * i + k], "%s%s", t->name, sfx[k]);
        }
        if (rc) break;
        int64_t qs[2] = {rows, (int64_t)qm[i].row_bytes}, ss[2] = {rows, qm[i].ngroups};
        if ((rc = ls_st_writer_add(w, names[3 * i], LS_DT_U8, 2, qs, qm[i].data))) break;
        if ((rc = ls_st_writer_add(w, names[3 * i + 1], LS_DT_F16, 2, ss, qm[i].hscale))) break;
        if (qm[i].hmin) rc = ls_st_writer_add(w, names[3 * i + 2], LS_DT_F16, 2, ss, qm[i].hmin);
    }
    if (rc == LS_OK) {
        /* keep the source's metadata (config, step) and add the quantization map */
        static const char *const keep[] = {"llmsys.config", "llmsys.step", "llmsys.name", "llmsys.tokenizer"};
        for (size_t k = 0; k < sizeof keep / sizeof keep[0] && rc == LS_OK; k++) {
            const char *v = ls_st_meta(f, keep[k]);
            if (v) rc = ls_st_writer_meta(w, keep[k], v);
        }
        size_t cap = 64 + (size_t)n_layer * 4;
        char *qj = malloc(cap);
        if (!qj) rc = ls_err(LS_ENOMEM, "out of memory");
        if (rc == LS_OK) {
            int o = snprintf(qj, cap, "{\"version\":%d,\"group\":%d,\"bits\":[", LS_QUANT_FORMAT_VERSION, group);
            for (int l = 0; l < n_layer; l++) o += snprintf(qj + o, cap - o, "%s%d", l ? "," : "", bits[l]);
            snprintf(qj + o, cap - o, "]}");
            rc = ls_st_writer_meta(w, "llmsys.quant", qj);
        }
        free(qj);
    }
    if (rc == LS_OK) rc = ls_st_writer_write(w, out_path);
done:
    ls_st_writer_free(w);
    for (int i = 0; qm && i < nt; i++) {
        ls_qmat_free(&qm[i]);
        if (names) free(names[3 * i]), free(names[3 * i + 1]), free(names[3 * i + 2]);
        if (tmpf) free(tmpf[i]);
    }
    free(qm), free(names), free(tmpf);
    ls_st_close(f);
    return rc;
}

ls_quantize_opts ls_quantize_defaults(void) { return (ls_quantize_opts){.group = 64, .heldout = 0.05}; }

/* What would fail once out is written, before it is. */
static int quantize_check(const ls_quantize_opts *o) {
    if ((o->bits != 0) == (o->bits_map != NULL))
        return ls_err(LS_EINVAL, "give exactly one of --bits B or --bits-map FILE");
    if (o->bits && o->bits != 16 && o->bits != 8 && o->bits != 4 && o->bits != 3)
        return ls_err(LS_EINVAL, "--bits must be 16, 8, 4 or 3, got %d", o->bits);
    if (!ls_quant_group_valid(o->group))
        return ls_err(LS_EINVAL, "--group must be 32, 64, 128 or 256, got %d", o->group);
    if (!(o->heldout > 0 && o->heldout <= 0.5))
        return ls_err(LS_EINVAL, "--heldout must be in (0, 0.5], got %g", o->heldout);
    if (ls_path_replaces(o->model, o->out))
        return ls_err(LS_EINVAL, "--out %s is the --model checkpoint; write the quantized one elsewhere", o->out);
    if (o->n_eval) LS_TRY(ls_quant_eval_check(o->model, o->eval, o->n_eval, o->heldout, o->eval_tokens));
    if (o->report) LS_TRY(ls_out_path_check("report", o->report));
    return ls_out_path_check("out", o->out);
}

int ls_quantize(const ls_quantize_opts *o, ls_quantize_result *r) {
    memset(r, 0, sizeof *r);
    LS_TRY(quantize_check(o));
    ls_model_config cfg;
    int *fbits = NULL;
    LS_TRY(ls_ckpt_info(o->model, &cfg, &fbits, NULL));
    free(fbits);
    if (o->bits_map) {
        LS_TRY(ls_quant_read_bits_map(o->bits_map, &r->bits, &r->n_layer));
    } else {
        r->n_layer = cfg.n_layer;
        r->bits = malloc(sizeof(int) * (size_t)cfg.n_layer);
        if (!r->bits) return ls_err(LS_ENOMEM, "out of memory");
        for (int l = 0; l < cfg.n_layer; l++) r->bits[l] = o->bits;
    }
    double t0 = ls_now();
    ls_engine *e = NULL;
    int rc = ls_quant_checkpoint(o->model, r->bits, r->n_layer, o->group, o->out);
    r->seconds = ls_now() - t0;
    if (rc == LS_OK) rc = ls_engine_open(&e, o->out, NULL);
    if (rc == LS_OK) r->weight_bytes = ls_engine_weight_bytes(e);
    ls_engine_free(e);
    r->fp32_bytes = (double)cfg.n_layer * (4.0 * cfg.d_model * cfg.d_model + 2.0 * cfg.d_model * cfg.d_ff) * 4;
    if (rc != LS_OK) ls_quantize_result_free(r);
    return rc;
}

void ls_quantize_result_free(ls_quantize_result *r) {
    free(r->bits);
    r->bits = NULL;
    r->n_layer = 0;
}

/* The corpus at paths split as in training (heldout share), tokenized as ckpt was trained. */
static int load_corpus(const char *ckpt, const char *const *paths, int n_paths, double heldout, ls_corpus **c,
                       ls_bpe **bpe) {
    ls_corpus_opts co = ls_corpus_defaults();
    co.heldout_frac = heldout;
    return ls_corpus_load_for(ckpt, paths, n_paths, &co, c, bpe);
}

int ls_quant_eval_check(const char *fp32_path, const char *const *paths, int n_paths, double heldout,
                        size_t max_tokens) {
    ls_st_file *f;
    ls_model_config cfg;
    LS_TRY(ls_ckpt_open(fp32_path, &f, &cfg));
    ls_st_close(f);
    ls_corpus *c;
    ls_bpe *bpe;
    LS_TRY(load_corpus(fp32_path, paths, n_paths, heldout, &c, &bpe));
    size_t n, avail;
    ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    int rc =
        ls_eval_windows(n, cfg.n_ctx, max_tokens, &avail) > 0
            ? LS_OK
            : ls_err(LS_EINVAL, "too little held-out data to evaluate: %zu tokens, need at least %d", n, cfg.n_ctx + 1);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    return rc;
}

int ls_quant_eval_heldout(const char *fp32_path, const char *qpath, const char *const *paths, int n_paths,
                          double heldout, size_t max_tokens, double *bpb_f, double *bpb_q) {
    ls_corpus *c;
    ls_bpe *bpe;
    LS_TRY(load_corpus(qpath, paths, n_paths, heldout, &c, &bpe));
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_HELDOUT, &n);
    ls_eval_result rf, rq;
    ls_engine *e = NULL;
    ls_model *m = NULL;
    int rc = ls_engine_open(&e, qpath, NULL);
    if (rc == LS_OK) rc = ls_engine_eval_tokens(e, tok, n, ls_engine_config(e)->n_ctx, max_tokens, &rq);
    if (rc == LS_OK && bpb_f) rc = ls_ckpt_load(fp32_path, LS_CKPT_WEIGHTS, &m, NULL);
    if (rc == LS_OK && bpb_f) rc = ls_eval_tokens(m, tok, n, ls_engine_config(e)->n_ctx, 8, max_tokens, &rf);
    if (m) ls_model_free(m);
    ls_engine_free(e);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    if (rc == LS_OK) {
        if (bpb_f) *bpb_f = rf.bits_per_byte;
        *bpb_q = rq.bits_per_byte;
    }
    return rc;
}

int ls_eval_checkpoint(const char *path, const char *const *paths, int n_paths, const ls_corpus_opts *co, ls_split s,
                       int T, int B, size_t max_tokens, ls_eval_ckpt_result *out) {
    if (!(co->heldout_frac > 0 && co->heldout_frac <= 0.5)) /* before the inputs are read */
        return ls_err(LS_EINVAL, "--heldout must be in (0, 0.5], got %g", co->heldout_frac);
    ls_model *m = NULL;
    ls_engine *qe = NULL; /* quantized checkpoints run on the engine */
    ls_corpus *c = NULL;
    int quantized = ls_ckpt_is_quantized(path);
    int rc = quantized == 1  ? ls_engine_open(&qe, path, NULL)
             : quantized < 0 ? quantized
                             : ls_ckpt_load(path, LS_CKPT_WEIGHTS, &m, NULL);
    ls_bpe *bpe = NULL; /* the checkpoint's vocabulary: the text is tokenized as in training */
    if (rc == LS_OK) rc = ls_corpus_load_for(path, paths, n_paths, co, &c, &bpe);
    if (rc == LS_OK) {
        size_t n;
        const uint16_t *tok = ls_corpus_tokens(c, s, &n);
        if (T <= 0) T = (qe ? ls_engine_config(qe) : ls_model_cfg(m))->n_ctx;
        double t0 = ls_now();
        rc = qe ? ls_engine_eval_tokens(qe, tok, n, T, max_tokens, &out->r)
                : ls_eval_tokens(m, tok, n, T, B, max_tokens, &out->r);
        if (rc < 0) rc = ls_err_wrap(rc, "%s split", ls_split_name(s));
        out->wall_s = ls_now() - t0;
        out->unigram_entropy = rc == LS_OK ? ls_corpus_unigram_entropy(c, s) : 0;
    }
    if (m) ls_model_free(m);
    if (qe) ls_engine_free(qe);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    return rc;
}

int ls_eval_report_write(const char *report, const char *model, ls_split s, const ls_eval_ckpt_result *r) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "out of memory building the report");
    cJSON_AddStringToObject(j, "command", "eval");
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddStringToObject(j, "split", ls_split_name(s));
    cJSON_AddNumberToObject(j, "loss", r->r.loss);
    cJSON_AddNumberToObject(j, "bits_per_byte", r->r.bits_per_byte);
    cJSON_AddNumberToObject(j, "perplexity", r->r.perplexity);
    cJSON_AddNumberToObject(j, "unigram_entropy", r->unigram_entropy);
    cJSON_AddNumberToObject(j, "tokens", (double)r->r.tokens);
    cJSON_AddNumberToObject(j, "bytes", (double)r->r.bytes);
    cJSON_AddNumberToObject(j, "wall_s", r->wall_s);
    int rc = ls_json_write_file(report, j);
    cJSON_Delete(j);
    return rc;
}

int ls_quantize_report_write(const char *report, const char *model, const char *out, int group,
                             const ls_quantize_result *q, int with_eval, double bpb_f, double bpb_q) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return ls_err(LS_ENOMEM, "out of memory building the report");
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddStringToObject(j, "out", out);
    cJSON_AddNumberToObject(j, "group", group);
    cJSON_AddItemToObject(j, "bits", cJSON_CreateIntArray(q->bits, q->n_layer));
    cJSON_AddNumberToObject(j, "weight_bytes", (double)q->weight_bytes);
    cJSON_AddNumberToObject(j, "seconds", q->seconds);
    if (with_eval) {
        cJSON_AddNumberToObject(j, "bpb_fp32", bpb_f);
        cJSON_AddNumberToObject(j, "bpb_quantized", bpb_q);
    }
    int rc = ls_json_write_file(report, j);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- sensitivity */

/* An engine of model with layer `one` at b bits and the others at 16 (one < 0: all at 16). */
static int engine_one_layer(const char *model, int L, int one, int b, ls_engine **e) {
    int *bits = malloc(sizeof(int) * (size_t)L);
    if (!bits) return ls_err(LS_ENOMEM, "sensitivity: out of memory");
    for (int l = 0; l < L; l++) bits[l] = l == one ? b : 16;
    ls_engine_opts eo = ls_engine_defaults();
    eo.bits = bits;
    int rc = ls_engine_open(e, model, &eo);
    free(bits);
    return rc;
}

/* log-softmax of the logits row x (V) into y. */
static void log_softmax(const float *x, int V, double *y) {
    double mx = x[0], s = 0;
    for (int v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < V; v++) s += exp(x[v] - mx);
    for (int v = 0; v < V; v++) y[v] = x[v] - mx - log(s);
}

/* The windows of tok through engine e (T tokens each, spread over avail): every position's
 * log-probabilities into lp (windows x T x V) when ref is NULL; else the mean KL(ref || e)
 * into *kl, and the mean next-token NLL into *nll. */
static int engine_pass(ls_engine *e, const uint16_t *tok, int T, size_t windows, size_t avail, double *lp,
                       const double *ref, double *kl, double *nll) {
    int V = ls_engine_config(e)->vocab, *in = malloc(sizeof(int) * (size_t)T);
    ls_engine_seq sq = {0, 0, T};
    float *lg = malloc(sizeof(float) * ls_engine_out_floats(e, &sq, 1, 1));
    double *row = malloc(sizeof(double) * (size_t)V), skl = 0, snll = 0;
    int rc = in && lg && row ? LS_OK : ls_err(LS_ENOMEM, "sensitivity: out of memory");
    for (size_t w = 0; w < windows && rc == LS_OK; w++) {
        size_t p0 = ls_eval_window_start(w, windows, avail, T);
        for (int t = 0; t < T; t++) in[t] = tok[p0 + (size_t)t];
        rc = ls_engine_forward(e, &sq, 1, in, NULL, lg, 1);
        for (int t = 0; t < T && rc == LS_OK; t++) {
            double *y = ref ? row : lp + (w * T + (size_t)t) * V;
            log_softmax(lg + (size_t)t * V, V, y);
            const double *r = ref ? ref + (w * T + (size_t)t) * V : y;
            for (int v = 0; ref && v < V; v++) skl += exp(r[v]) * (r[v] - y[v]);
            snll -= y[tok[p0 + (size_t)t + 1]];
        }
    }
    if (kl) *kl = skl / ((double)windows * T);
    if (nll) *nll = snll / ((double)windows * T);
    free(in);
    free(lg);
    free(row);
    return rc;
}

int ls_quant_layer_kl(const char *model, const uint16_t *tok, size_t n, size_t max_tokens, int nthreads,
                      const int *bits, int nb, double *kl, double *nll) {
    ls_model_config cfg;
    int *qb = NULL;
    LS_TRY(ls_ckpt_info(model, &cfg, &qb, NULL));
    free(qb);
    int L = cfg.n_layer, T = cfg.n_ctx, V = cfg.vocab;
    size_t avail, windows = ls_eval_windows(n, T, max_tokens, &avail), cap = (size_t)1 << 27; /* doubles: 1 GiB */
    if (!windows) return ls_err(LS_EINVAL, "sensitivity: %zu tokens, need at least %d", n, T + 1);
    if (windows * T > cap / (size_t)V)
        return ls_err(LS_EINVAL,
                      "sensitivity: %zu tokens of %d-token windows would hold %zu reference "
                      "distributions of %d; at most %zu tokens here",
                      windows * T, T, windows * T, V, cap / V);
    double *ref = malloc(sizeof(double) * windows * T * V);
    ls_engine *e = NULL;
    int blas = ls_blas_threads_push_single(); /* the reference too: the same sums as the passes' */
    int rc = ref ? engine_one_layer(model, L, -1, 16, &e) : ls_err(LS_ENOMEM, "sensitivity: reference");
    if (rc == LS_OK) rc = engine_pass(e, tok, T, windows, avail, ref, NULL, NULL, nll ? nll + L * nb : NULL);
    ls_engine_free(e);
    /* the (layer, width) passes are independent: nthreads at a time, each on its own engine
     * and one BLAS thread (two passes' OpenBLAS threads would only spin: 1.7x slower measured);
     * the first failure is kept, its message copied out of the thread that raised it */
    int stop = rc != LS_OK, first = LS_OK, jobs = L * nb;
    char msg[1024] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads > 1 ? nthreads : 1)
    for (int job = 0; job < jobs; job++) {
        int halt;
#pragma omp atomic read
        halt = stop;
        if (halt) continue;
        ls_engine *ej = NULL;
        int st = engine_one_layer(model, L, job / nb, bits[job % nb], &ej);
        if (st == LS_OK) st = engine_pass(ej, tok, T, windows, avail, NULL, ref, &kl[job], nll ? &nll[job] : NULL);
        ls_engine_free(ej);
        if (st != LS_OK) {
#pragma omp critical(layer_kl_fail)
            {
                if (first == LS_OK) first = st, snprintf(msg, sizeof msg, "%s", ls_errmsg());
#pragma omp atomic write
                stop = 1;
            }
        }
    }
    ls_blas_threads_pop(blas);
    free(ref);
    return rc != LS_OK ? rc : first != LS_OK ? ls_err(first, "%s", msg) : LS_OK;
}

int ls_quant_indicator_kl(const char *model, const char *const *paths, int n_paths, size_t max_tokens, int nthreads,
                          const ls_plan_arch *a, double *omega) {
    ls_corpus *c;
    ls_bpe *bpe;
    LS_TRY(ls_corpus_load_for(model, paths, n_paths, NULL, &c, &bpe));
    size_t n;
    const uint16_t *tok = ls_corpus_tokens(c, LS_SPLIT_TRAIN, &n); /* the held-out text stays unseen */
    int L = a->n_layer, nb = 0, bits[LS_PLAN_NBITS], at[LS_PLAN_NBITS]; /* every width but 16, the reference */
    for (int k = 0; k < LS_PLAN_NBITS; k++)
        if (ls_plan_bits[k] != 16) bits[nb] = ls_plan_bits[k], at[nb++] = k;
    double *kl = malloc(sizeof(double) * (size_t)L * nb);
    int rc = kl ? ls_quant_layer_kl(model, tok, n, max_tokens, nthreads, bits, nb, kl, NULL)
                : ls_err(LS_ENOMEM, "indicator");
    for (int l = 0; l < L && rc == LS_OK; l++) {
        for (int k = 0; k < LS_PLAN_NBITS; k++) omega[l * LS_PLAN_NBITS + k] = 0; /* 16 bits: the reference */
        for (int j = 0; j < nb; j++) omega[l * LS_PLAN_NBITS + at[j]] = kl[l * nb + j];
    }
    if (rc == LS_OK) rc = ls_plan_quality_normalise(a, omega);
    free(kl);
    ls_corpus_free(c);
    ls_bpe_free(bpe);
    return rc;
}

static int indicator_is(const ls_indicator_opts *o, const char *m) {
    return !strcmp(o->method ? o->method : "variance", m);
}

int ls_indicator_check(const ls_indicator_opts *o) {
    int kl = indicator_is(o, "kl"), calibrated = indicator_is(o, "variance") || indicator_is(o, "measured");
    if (kl && !o->n_calib) return ls_err(LS_EINVAL, "--method kl measures on text: give --calib-data PATH");
    if (o->n_calib && !kl && !calibrated)
        return ls_err(LS_EINVAL, "--calib-data takes --method variance, measured or kl, not '%s'", o->method);
    if (o->relative && (!o->n_calib || kl))
        return ls_err(LS_EINVAL, "--relative scales a calibrated variance or measured indicator: give "
                                 "--calib-data, and not --method kl");
    if (o->n_calib && !ls_is_file(o->model))
        return ls_err(LS_EINVAL, "--calib-data needs --model to be an llmsys checkpoint path, got '%s'", o->model);
    return LS_OK;
}

int ls_indicator_compute(const ls_indicator_opts *o, const ls_plan_arch *a, double *omega, ls_eval_result *calib) {
    memset(calib, 0, sizeof *calib);
    LS_TRY(ls_indicator_check(o));
    int kl = indicator_is(o, "kl");
    size_t tokens = o->calib_tokens >= 0 ? (size_t)o->calib_tokens : kl ? 4096 : 16384;
    if (kl) return ls_quant_indicator_kl(o->model, o->calib, o->n_calib, tokens, o->nthreads, a, omega);
    if (!o->n_calib) return ls_plan_quality_method(o->method ? o->method : "variance", o->model, a, omega);
    int flags =
        (indicator_is(o, "measured") ? LS_PLAN_QUALITY_MEASURED : 0) | (o->relative ? LS_PLAN_QUALITY_RELATIVE : 0);
    return ls_plan_quality_calibrated(o->model, o->calib, o->n_calib, tokens, a, omega, flags, calib);
}
