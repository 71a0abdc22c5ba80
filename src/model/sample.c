/* sample.c - token sampling from logits: greedy (temperature 0), temperature, top-k and
 * top-p (nucleus) filtering; text generation from a prompt and its JSON report. */
#include "llmsys/model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float v;
    int i;
} scored;

/* Descending by value; ties broken by the lower index so the kept set is well defined. */
static int cmp_desc(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int argmax(const float *l, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

static int check_config(int V, const ls_sample_config *s) {
    if (V < 1) return ls_err(LS_EINVAL, "sample: vocabulary size must be >= 1");
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return ls_err(LS_EINVAL, "sample: temperature must be a finite value >= 0, got %g", (double)s->temperature);
    if (s->top_k < 0) return ls_err(LS_EINVAL, "sample: top_k must be >= 0, got %d", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return ls_err(LS_EINVAL, "sample: top_p must be in (0, 1], got %g", (double)s->top_p);
    return LS_OK;
}

int ls_sample_probs(const float *logits, int V, const ls_sample_config *s, float *probs) {
    LS_TRY(check_config(V, s));
    for (int i = 0; i < V; i++) probs[i] = 0.0f;
    if (s->temperature == 0.0f) {
        probs[argmax(logits, V)] = 1.0f;
        return 1;
    }
    scored *sc = malloc((size_t)V * sizeof *sc);
    if (!sc) return ls_err(LS_ENOMEM, "sample: out of memory");
    for (int i = 0; i < V; i++) sc[i] = (scored){logits[i] / s->temperature, i};
    qsort(sc, (size_t)V, sizeof *sc, cmp_desc);
    int keep = V;
    if (s->top_k > 0 && s->top_k < keep) keep = s->top_k;
    /* softmax over the top-k survivors (sorted, so sc[0] is the max) */
    double sum = 0.0;
    for (int r = 0; r < keep; r++) sum += exp((double)sc[r].v - sc[0].v);
    if (s->top_p < 1.0f) {
        /* smallest prefix whose probability mass reaches top_p (always >= 1 token) */
        double cum = 0.0;
        int r = 0;
        while (r < keep) {
            cum += exp((double)sc[r].v - sc[0].v) / sum;
            r++;
            if (cum >= s->top_p) break;
        }
        keep = r;
        sum = 0.0;
        for (int q = 0; q < keep; q++) sum += exp((double)sc[q].v - sc[0].v);
    }
    for (int r = 0; r < keep; r++) probs[sc[r].i] = (float)(exp((double)sc[r].v - sc[0].v) / sum);
    free(sc);
    return keep;
}

int ls_sample_logits(const float *logits, int V, const ls_sample_config *s, ls_rng *rng) {
    LS_TRY(check_config(V, s));
    if (s->temperature == 0.0f) return argmax(logits, V); /* greedy: no draw, rng untouched */
    float *p = malloc((size_t)(V > 0 ? V : 1) * sizeof *p);
    if (!p) return ls_err(LS_ENOMEM, "sample: out of memory");
    int rc = ls_sample_probs(logits, V, s, p);
    if (rc < 0) {
        free(p);
        return rc;
    }
    /* inverse CDF over the kept tokens; the last kept token absorbs rounding */
    double u = ls_rng_uniform_f64(rng), cum = 0.0;
    int last = -1, tok = -1;
    for (int i = 0; i < V && tok < 0; i++) {
        if (p[i] <= 0.0f) continue;
        last = i;
        cum += p[i];
        if (u < cum) tok = i;
    }
    free(p);
    return tok >= 0 ? tok : last;
}

int ls_model_generate_text(ls_model *m, const char *prompt, int n_new, const ls_sample_config *s, ls_rng *rng, int *out,
                           int *got) {
    int ctx = ls_model_cfg(m)->n_ctx;
    int *ptok = NULL;
    size_t plen = 0;
    LS_TRY(ls_text_encode(ls_model_tokenizer(m), prompt, strlen(prompt), &ptok, &plen));
    int *win = malloc((size_t)ctx * sizeof(int));
    if (!win) {
        free(ptok);
        return ls_err(LS_ENOMEM, "out of memory");
    }
    int nw = 0;
    /* keep the end of a prompt longer than the context: it decides the continuation */
    if (plen + 1 < (size_t)ctx) win[nw++] = LS_TOK_BOS;
    size_t from = plen > (size_t)(ctx - 1) ? plen - (size_t)(ctx - 1) : 0;
    for (size_t i = from; i < plen; i++) win[nw++] = ptok[i];
    free(ptok);
    *got = 0;
    int rc = LS_OK;
    while (*got < n_new) {
        int room = ctx - nw, want = n_new - *got, k = 0;
        if (want > room) want = room;
        rc = ls_model_generate(m, win, nw, want, s, rng, out + *got, &k);
        if (rc < 0 || k == 0) break;
        *got += k;
        if (out[*got - 1] == LS_TOK_EOS) break;
        /* slide: the last half context of prompt + output becomes the new prompt */
        int keep = ctx / 2 > 0 ? ctx / 2 : 1, total = nw + k;
        int *all = malloc((size_t)total * sizeof(int));
        if (!all) {
            rc = ls_err(LS_ENOMEM, "out of memory");
            break;
        }
        memcpy(all, win, (size_t)nw * sizeof(int));
        memcpy(all + nw, out + *got - k, (size_t)k * sizeof(int));
        if (keep > total) keep = total;
        memcpy(win, all + total - keep, (size_t)keep * sizeof(int));
        nw = keep;
        free(all);
    }
    free(win);
    return rc;
}

int ls_generate_report_write(const char *path, const ls_model *m, const char *model, const char *prompt,
                             const int *out, int got, double seconds) {
    char *text = ls_text_utf8(ls_model_tokenizer(m), out, 0, got);
    cJSON *j = cJSON_CreateObject();
    int rc;
    if (!text || !j) {
        rc = ls_err(LS_ENOMEM, "out of memory building the report");
    } else {
        cJSON_AddStringToObject(j, "command", "generate");
        cJSON_AddStringToObject(j, "model", model);
        cJSON_AddStringToObject(j, "prompt", prompt);
        cJSON_AddStringToObject(j, "text", text);
        cJSON_AddNumberToObject(j, "tokens", got);
        cJSON_AddNumberToObject(j, "tokens_per_s", seconds > 0 ? got / seconds : 0);
        rc = ls_json_write_file(path, j);
    }
    free(text);
    cJSON_Delete(j);
    return rc;
}
