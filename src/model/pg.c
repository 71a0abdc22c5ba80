/* pg.c - the policy-gradient loss of the GPT (PPO clipped ratio, truncated importance
 * weights) built on the model's own forward and a per-position weighted backward. */
#include <math.h>
#include <stdlib.h>

#include "llmsys/model.h"
#include "model/layers.h"

void ls_softmax_xent_backward_weighted(float *dlogits, const float *probs, const int *targets, const float *w, int N,
                                       int V) {
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0 || w[n] == 0.0f) continue;
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V, s = w[n];
        for (int i = 0; i < V; i++) d[i] += (p[i] - (i == t ? 1.0f : 0.0f)) * s;
    }
}

float ls_pg_token(float logp, float logp_prox, float logp_behav, float adv, const ls_pg_config *c, float *dnll) {
    float r = expf(logp - logp_prox);
    float is = expf(logp_prox - logp_behav);
    if (c->is_cap > 0.0f && is > c->is_cap) is = c->is_cap;
    float lo = 1.0f - c->clip_eps, hi = 1.0f + c->clip_eps;
    float rc = r < lo ? lo : (r > hi ? hi : r);
    float a = r * adv, b = rc * adv;
    /* the unclipped branch is the minimum (or both agree): gradient flows through r */
    int active = a <= b;
    if (dnll) *dnll = active ? is * r * adv : 0.0f; /* d(-is·r·A)/d(logp) = -is·r·A; nll = -logp */
    return -is * (a < b ? a : b);
}

int ls_model_logprobs(ls_model *m, const int *tokens, const int *targets, int B, int T, float *logp) {
    float l = ls_model_forward(m, tokens, targets, B, T);
    if (isnan(l)) return ls_err_wrap(LS_EINVAL, "logprobs");
    const float *nll = ls_model_losses(m);
    for (size_t i = 0; i < (size_t)B * T; i++) logp[i] = targets[i] < 0 ? 0.0f : -nll[i];
    return LS_OK;
}

int ls_model_pg_loss(ls_model *m, const int *tokens, const int *targets, int B, int T, const float *logp_prox,
                     const float *logp_behav, const float *adv, const ls_pg_config *c, ls_pg_stats *st) {
    size_t N = (size_t)B * T;
    float l = ls_model_forward(m, tokens, targets, B, T);
    if (isnan(l)) return ls_err_wrap(LS_EINVAL, "policy-gradient loss");
    const float *nll = ls_model_losses(m);
    float *w = malloc(N * sizeof(float));
    if (!w) return ls_err(LS_ENOMEM, "policy-gradient loss: out of memory");
    int n = 0;
    for (size_t i = 0; i < N; i++) n += targets[i] >= 0;
    double loss = 0.0, clipped = 0.0, rsum = 0.0, issum = 0.0;
    for (size_t i = 0; i < N; i++) {
        w[i] = 0.0f;
        if (targets[i] < 0) continue;
        float lp = -nll[i], prox = logp_prox ? logp_prox[i] : lp, dn;
        loss += ls_pg_token(lp, prox, logp_behav[i], adv[i], c, &dn);
        w[i] = dn / (float)n;
        clipped += dn == 0.0f && adv[i] != 0.0f;
        rsum += exp((double)lp - prox);
        double is = exp((double)prox - logp_behav[i]);
        issum += c->is_cap > 0 && is > c->is_cap ? c->is_cap : is;
    }
    int rc = n > 0 ? ls_model_backward_weighted(m, w) : LS_OK;
    free(w);
    if (st) {
        st->n_tokens = n;
        st->loss = n ? loss / n : 0.0;
        st->clip_frac = n ? clipped / n : 0.0;
        st->mean_ratio = n ? rsum / n : 1.0;
        st->mean_is = n ? issum / n : 1.0;
    }
    return rc;
}
