/* layers.c - forward and backward of each GPT layer over float arrays (after llm.c).
 * Every matmul (including attention's per-head products) goes through cblas_sgemm;
 * elementwise loops are OpenMP-parallel over rows, heads or channel blocks, each
 * thread owning its outputs, so results never depend on the thread count. */
#include "model/layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Channel block for column reductions (bias / LayerNorm parameter gradients): a thread
 * owns CBLK consecutive channels and sums over all rows in row order. */
#define CBLK 32

int ls_blas_threads_push_single(void) {
    int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}

void ls_blas_threads_pop(int saved) {
    if (saved != 1) openblas_set_num_threads(saved);
}

/* ---------------------------------------------------------------- encoder */

void ls_encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C) {
    // out (B,T,C), tokens (B,T), wte (V,C), wpe (maxT,C)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *e = wte + (size_t)tokens[n] * C, *p = wpe + (size_t)(n % T) * C;
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void ls_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C) {
    // dwte (V,C), dwpe (maxT,C), dout (B,T,C). Rows of dwte are hit by repeated tokens, so
    // threads split the channels instead of the positions.
    int nblk = (C + CBLK - 1) / CBLK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CBLK, c1 = c0 + CBLK < C ? c0 + CBLK : C;
        for (int n = 0; n < B * T; n++) {
            const float *d = dout + (size_t)n * C;
            float *g = dwte + (size_t)tokens[n] * C;
            for (int c = c0; c < c1; c++) g[c] += d[c];
        }
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float *g = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) g[c] += d[c];
        }
    }
}

/* ---------------------------------------------------------------- layernorm */

#define LN_EPS 1e-5f

void ls_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int N, int C) {
    // out (N,C), mean (N), rstd (N), inp (N,C), w (C), b (C)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + LN_EPS);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void ls_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int C) {
    // dinp (N,C) += ..., dw (C) += Σ dout·norm, db (C) += Σ dout
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dmean = 0.0f, dnorm_norm = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s, dn = d[c] * w[c];
            dmean += dn;
            dnorm_norm += dn * norm;
        }
        dmean /= (float)C;
        dnorm_norm /= (float)C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s, dn = d[c] * w[c];
            di[c] += (dn - dmean - norm * dnorm_norm) * s;
        }
    }
    int nblk = (C + CBLK - 1) / CBLK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * CBLK, c1 = c0 + CBLK < C ? c0 + CBLK : C;
        float gw[CBLK] = {0}, gb[CBLK] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                gw[c - c0] += d[c] * (x[c] - m) * s;
                gb[c - c0] += d[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dw[c] += gw[c - c0];
            db[c] += gb[c - c0];
        }
    }
}

/* ---------------------------------------------------------------- matmul */

void ls_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int IC, int OC,
                       int accumulate) {
    // out (N,OC) (+)= inp (N,IC) · wᵀ (IC,OC) + bias (OC)
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            if (accumulate)
                for (int c = 0; c < OC; c++) o[c] += bias[c];
            else
                for (int c = 0; c < OC; c++) o[c] = bias[c];
        }
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

void ls_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        int N, int IC, int OC) {
    // dinp (N,IC) += dout (N,OC) · w (OC,IC)
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
    // dw (OC,IC) += doutᵀ (OC,N) · inp (N,IC)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) {
        int nblk = (OC + CBLK - 1) / CBLK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * CBLK, c1 = c0 + CBLK < OC ? c0 + CBLK : OC;
            float g[CBLK] = {0};
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
                for (int c = c0; c < c1; c++) g[c - c0] += d[c];
            }
            for (int c = c0; c < c1; c++) dbias[c] += g[c - c0];
        }
    }
}

/* ---------------------------------------------------------------- attention */

void ls_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C). Per (b,h): S = Q·Kᵀ/√hs (T,T) by sgemm,
    // causal softmax in place, Y = P·V (T,hs) by sgemm straight into out's column block.
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *P = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, P, T);
        for (int t = 0; t < T; t++) {
            float *row = P + (size_t)t * T;
            float mx = row[0];
            for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
            float sum = 0.0f;
            for (int j = 0; j <= t; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int j = 0; j <= t; j++) row[j] *= inv;
            for (int j = t + 1; j < T; j++) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, v, C3, 0.0f,
                    out + (size_t)b * T * C + (size_t)h * hs, C);
    }
    ls_blas_threads_pop(saved);
}

void ls_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B,
                           int T, int C, int NH) {
    // dqkv (B,T,3C) +=, scratch (B,NH,T,T), dout (B,T,C), att (B,NH,T,T) probabilities
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t qo = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + qo, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
        const float *P = att + (size_t)bh * T * T;
        const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
        float *dS = scratch + (size_t)bh * T * T;
        // dP (T,T) = dY · Vᵀ ; dV += Pᵀ · dY
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, dS, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dy, C, 1.0f, dv, C3);
        // softmax backward: dS = P ⊙ (dP - Σ_j P·dP), zero above the diagonal
        for (int t = 0; t < T; t++) {
            const float *p = P + (size_t)t * T;
            float *d = dS + (size_t)t * T;
            float dot = 0.0f;
            for (int j = 0; j <= t; j++) dot += p[j] * d[j];
            for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot);
            for (int j = t + 1; j < T; j++) d[j] = 0.0f;
        }
        // dQ += scale · dS · K ; dK += scale · dSᵀ · Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dS, T, k, C3, 1.0f, dq, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dS, T, q, C3, 1.0f, dk, C3);
    }
    ls_blas_threads_pop(saved);
}

/* ---------------------------------------------------------------- gelu */

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

void ls_gelu_forward(float *out, const float *inp, int N) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
    }
}

void ls_gelu_backward(float *dinp, const float *inp, const float *dout, int N) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float th = tanhf(GELU_S * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

/* ---------------------------------------------------------------- softmax + cross-entropy */

float ls_softmax_xent_forward(float *probs, float *losses, const float *logits, const int *targets, int N, int V,
                              int *n_valid) {
    // probs (N,V), losses (N), logits (N,V), targets (N) with -1 = ignore
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float mx = l[0];
        for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            p[i] = expf(l[i] - mx);
            sum += p[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        int t = targets ? targets[n] : -1;
        /* -log softmax from the logits (log-sum-exp), exact even where p underflows */
        losses[n] = t >= 0 ? logf(sum) + mx - l[t] : 0.0f;
    }
    double total = 0.0;
    int cnt = 0;
    for (int n = 0; n < N; n++) {
        if (targets && targets[n] >= 0) {
            total += losses[n];
            cnt++;
        }
    }
    if (n_valid) *n_valid = cnt;
    return cnt ? (float)(total / cnt) : 0.0f;
}

void ls_softmax_xent_backward(float *dlogits, const float *probs, const int *targets, float dloss, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0) continue;
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) d[i] += (p[i] - (i == t ? 1.0f : 0.0f)) * dloss;
    }
}
