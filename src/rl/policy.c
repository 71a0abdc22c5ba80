/* policy.c - the model side of RL: supervised warm start on the task format, greedy
 * held-out evaluation, and packing of trajectories into policy-gradient batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/rl.h"

/* BOS + bytes of s into tok; returns the count. */
static int encode(const char *s, int *tok, int cap) {
    int n = 0;
    tok[n++] = LS_TOK_BOS;
    for (; *s && n < cap; s++) tok[n++] = (unsigned char)*s;
    return n;
}

int ls_rl_sft(ls_model *m, const ls_rl_task *t, int n, int steps, int B, float lr, uint64_t seed, float *loss) {
    const ls_model_config *c = ls_model_cfg(m);
    int T = c->n_ctx;
    if (n < 1 || steps < 0 || B < 1 || B > LS_RL_SFT_MAX_BATCH)
        return ls_err(LS_EINVAL, "sft: need tasks, steps >= 0 and a batch in [1, %d]", LS_RL_SFT_MAX_BATCH);
    for (int i = 0; i < n; i++)
        if ((int)(strlen(t[i].prompt) + strlen(t[i].demo ? t[i].demo : t[i].answer)) + 2 > T)
            return ls_err(LS_EINVAL, "sft: task %lld needs %zu tokens, the model's context is %d", (long long)t[i].id,
                          strlen(t[i].prompt) + strlen(t[i].answer) + 2, T);
    int *tok = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
    int *row = malloc(sizeof(int) * (size_t)T);
    if (!tok || !tgt || !row) {
        free(tok), free(tgt), free(row);
        return ls_err(LS_ENOMEM, "sft: out of memory");
    }
    ls_adamw_config oc = ls_adamw_defaults();
    oc.lr = lr;
    oc.warmup_steps = steps / 20;
    oc.total_steps = steps;
    oc.min_lr_frac = 0.1f;
    ls_rng rng;
    ls_rng_seed(&rng, seed);
    int rc = LS_OK;
    float last = NAN;
    for (int s = 0; s < steps && rc == LS_OK; s++) {
        int Tb = 1;
        int idx[LS_RL_SFT_MAX_BATCH]; /* the rows a step draws */
        for (int b = 0; b < B; b++) {
            idx[b] = (int)ls_rng_below(&rng, (uint64_t)n);
            int L = (int)(strlen(t[idx[b]].prompt) + strlen(t[idx[b]].demo ? t[idx[b]].demo : t[idx[b]].answer)) + 2;
            Tb = L > Tb ? L : Tb;
        }
        for (int b = 0; b < B; b++) {
            const ls_rl_task *k = &t[idx[b]];
            int np = encode(k->prompt, row, T), L = np;
            for (const char *a = k->demo ? k->demo : k->answer; *a; a++) row[L++] = (unsigned char)*a;
            row[L++] = LS_TOK_EOS;
            for (int j = 0; j < Tb; j++) {
                tok[b * Tb + j] = j < L ? row[j] : LS_TOK_PAD;
                /* position j predicts j+1: only answer bytes and EOS count */
                tgt[b * Tb + j] = (j + 1 < L && j + 1 >= np) ? row[j + 1] : -1;
            }
        }
        ls_model_zero_grad(m);
        last = ls_model_forward(m, tok, tgt, B, Tb);
        if (isnan(last)) {
            rc = ls_err_wrap(LS_EINVAL, "sft step %d", s);
            break;
        }
        rc = ls_model_backward_checked(m);
        if (rc == LS_OK) ls_model_adamw_step(m, &oc, s);
    }
    free(tok), free(tgt), free(row);
    if (loss) *loss = last;
    return rc;
}

int ls_rl_eval(ls_model *m, const ls_rl_task *t, int n, float temperature, int samples, double *mean_reward,
               double *exact_frac) {
    const ls_model_config *c = ls_model_cfg(m);
    int T = c->n_ctx;
    if (temperature <= 0.0f || samples < 1) samples = 1;
    int *tok = malloc(sizeof(int) * (size_t)T), *out = malloc(sizeof(int) * (size_t)T);
    char *txt = malloc((size_t)T + 1);
    if (!tok || !out || !txt) {
        free(tok), free(out), free(txt);
        return ls_err(LS_ENOMEM, "eval: out of memory");
    }
    ls_sample_config sc = {temperature > 0.0f ? temperature : 0.0f, 0, 1.0f};
    ls_rng rng;
    ls_rng_seed(&rng, 12345);
    double sum = 0.0, exact = 0.0;
    int rc = LS_OK;
    for (int i = 0; i < n && rc == LS_OK; i++) {
        int np = encode(t[i].prompt, tok, T);
        if (np >= T) {
            rc = ls_err(LS_EINVAL, "eval: task %lld's prompt fills the context", (long long)t[i].id);
            break;
        }
        for (int s = 0; s < samples && rc == LS_OK; s++) {
            int nout = 0;
            rc = ls_model_generate(m, tok, np, T - np, &sc, &rng, out, &nout);
            int len = 0;
            for (int j = 0; j < nout && out[j] != LS_TOK_EOS; j++) txt[len++] = out[j] < 256 ? (char)out[j] : '\x7f';
            double r = ls_rl_reward(&t[i], txt, (size_t)len);
            sum += r;
            exact += r >= 1.0;
        }
    }
    free(tok), free(out), free(txt);
    if (rc == LS_OK) {
        *mean_reward = n ? sum / ((double)n * samples) : 0.0;
        if (exact_frac) *exact_frac = n ? exact / ((double)n * samples) : 0.0;
    }
    return rc;
}

int ls_rl_batch_pack(const ls_rl_traj *tr, int n, int n_ctx, ls_rl_batch *b) {
    memset(b, 0, sizeof *b);
    if (n < 1) return ls_err(LS_EINVAL, "rl batch: empty batch");
    int T = 2;
    for (int i = 0; i < n; i++) {
        int L = tr[i].n_prompt + tr[i].n_gen;
        if (L > n_ctx)
            return ls_err(LS_EINVAL, "rl batch: trajectory %lld of %d tokens exceeds the context", (long long)tr[i].id,
                          L);
        T = L > T ? L : T;
    }
    size_t N = (size_t)n * T;
    b->B = n, b->T = T;
    b->tokens = malloc(sizeof(int) * N), b->targets = malloc(sizeof(int) * N);
    b->logp_behav = calloc(N, sizeof(float)), b->adv = calloc(N, sizeof(float));
    if (!b->tokens || !b->targets || !b->logp_behav || !b->adv) {
        ls_rl_batch_free(b);
        return ls_err(LS_ENOMEM, "rl batch: out of memory");
    }
    for (int i = 0; i < n; i++) {
        const ls_rl_traj *x = &tr[i];
        int L = x->n_prompt + x->n_gen;
        for (int j = 0; j < T; j++) {
            size_t k = (size_t)i * T + j;
            b->tokens[k] = j < L ? x->tok[j] : LS_TOK_PAD;
            int y = j + 1;
            b->targets[k] = (y < L && y >= x->n_prompt) ? x->tok[y] : -1;
            if (b->targets[k] >= 0) b->logp_behav[k] = x->lp[y - x->n_prompt], b->adv[k] = x->adv;
        }
    }
    return LS_OK;
}

void ls_rl_batch_free(ls_rl_batch *b) {
    free(b->tokens), free(b->targets), free(b->logp_behav), free(b->adv);
    memset(b, 0, sizeof *b);
}
