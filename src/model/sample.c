/* sample.c - token sampling from logits: greedy (temperature 0), temperature, top-k and
 * top-p (nucleus) filtering. */
#include "llmsys/model.h"

#include <math.h>
#include <stdlib.h>

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

int ls_sample_probs(const float *logits, int V, const ls_sample_config *s, float *probs) {
    if (V < 1) return ls_err(LS_EINVAL, "sample: vocabulary size must be >= 1");
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return ls_err(LS_EINVAL, "sample: temperature must be a finite value >= 0, got %g", (double)s->temperature);
    if (s->top_k < 0) return ls_err(LS_EINVAL, "sample: top_k must be >= 0, got %d", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return ls_err(LS_EINVAL, "sample: top_p must be in (0, 1], got %g", (double)s->top_p);
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
    if (s->temperature == 0.0f && V >= 1) return argmax(logits, V);
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
