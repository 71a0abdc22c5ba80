/* layers.c - forward and backward of each GPT layer over float arrays (after llm.c).
 * Every matmul (including attention's per-head products) goes through cblas_sgemm;
 * elementwise loops are OpenMP-parallel over rows, heads or channel blocks, each
 * thread owning its outputs, so results never depend on the thread count. */
#include "model/layers.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* A parallel region costs microseconds even on an idle machine, and far more on a busy
 * one (a barrier waits for a descheduled thread): loops with less work than this many
 * elements run on the calling thread. Depends only on sizes, so results stay
 * deterministic. */
#define PAR_MIN_WORK 65536L
#define PAR_WORTH(work) ((work) >= PAR_MIN_WORK)

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

/* One threading runtime for the whole model: OpenBLAS's own pthreads pool and OpenMP's
 * spinning workers would otherwise fight over the cores (measured 4x slower on 2 cores),
 * so the M rows of C are split across OpenMP threads, one single-threaded sgemm each.
 * The split depends only on the shape and the thread count (deterministic results). */
static int gemm_parts(int M, int N, int K) {
    int parts = ((long)M * N * K) < (1L << 22) ? 1 : omp_get_max_threads(); /* < ~100 µs: one thread */
    int panels = (M + 15) / 16;                                             /* whole 16-row panels */
    return parts > panels ? (panels > 0 ? panels : 1) : parts;
}

static void part_rows(int k, int parts, int M, int *r0, int *r1) {
    int panels = (M + 15) / 16;
    *r0 = (int)((long)panels * k / parts) * 16;
    *r1 = (int)((long)panels * (k + 1) / parts) * 16;
    if (*r1 > M) *r1 = M;
    if (*r0 > M) *r0 = M;
}

static void gemm_part(int k, int parts, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                      float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int r0, r1;
    part_rows(k, parts, M, &r0, &r1);
    if (r1 <= r0) return;
    const float *a = ta == CblasNoTrans ? A + (size_t)r0 * lda : A + r0;
    cblas_sgemm(CblasRowMajor, ta, tb, r1 - r0, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)r0 * ldc, ldc);
}

void ls_sgemm_rows(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc) {
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int saved = ls_blas_threads_push_single();
    int parts = gemm_parts(M, N, K);
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int k = 0; k < parts; k++) gemm_part(k, parts, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    ls_blas_threads_pop(saved);
}

/* ---------------------------------------------------------------- fast math */

/* expf for -87 <= x <= 0 without a libm call, so softmax and GELU loops vectorise: x = n·ln2 + r with
 * |r| <= ln2/2 (Cody-Waite split of ln2), e^r by its degree-7 Taylor polynomial
 * (truncation < 2e-9 relative), 2^n built in the exponent bits. About 1 ulp. */
static inline float exp_small(float x) {
    float t = x * 1.4426950408889634f;
    float big = t + 12582912.0f, fn = big - 12582912.0f; /* round to nearest (1.5·2^23 trick) */
    float r = (x - fn * 0.693145751953125f) - fn * 1.428606765330187e-06f;
    float p =
        1.0f +
        r * (1.0f +
             r * (0.5f + r * (1.6666667e-1f +
                              r * (4.1666668e-2f + r * (8.3333338e-3f + r * (1.3888889e-3f + r * 1.9841270e-4f))))));
    /* n = fn sits in big's low mantissa bits (big = 1.5·2^23 + n): read it there, in unsigned
     * arithmetic, since converting fn itself is undefined when x is NaN. fn >= -126 for x >= -87. */
    uint32_t ib;
    memcpy(&ib, &big, sizeof ib);
    uint32_t bits = (ib - 0x4B400000u + 127u) << 23;
    float sc;
    memcpy(&sc, &bits, sizeof sc);
    return p * sc;
}

/* e^x for any x <= 0 (0 below -87, where expf underflows anyway); branch-free. */
static inline float exp_neg(float x) {
    float in = (float)(x > -87.0f);
    return in * exp_small(x * in);
}

/* In-place softmax over row[0..n) and zeros over row[n..T): vectorised passes (max, exp,
 * sum, scale); the reductions' order is fixed by the compiler, so results are stable.
 * Returns log Σ exp(row - max) + max, the log-sum-exp of the input. */
static float softmax_row(float *restrict row, int n, int T) {
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        float e = exp_neg(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] *= inv;
    for (int j = n; j < T; j++) row[j] = 0.0f;
    return logf(sum) + mx;
}

/* Softmax backward in place: d = p ⊙ (d - Σ p·d) over [0..n), zero over [n..T). */
static void softmax_bwd_row(float *restrict d, const float *restrict p, int n, int T) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < n; j++) dot += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j < n; j++) d[j] = p[j] * (d[j] - dot);
    for (int j = n; j < T; j++) d[j] = 0.0f;
}

/* ---------------------------------------------------------------- encoder */

void ls_encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C) {
    // out (B,T,C), tokens (B,T), wte (V,C), wpe (maxT,C)
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)B * T * C))
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
#pragma omp parallel if (PAR_WORTH((long)B * T * C))
    {
#pragma omp for schedule(static) nowait
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * CBLK, c1 = c0 + CBLK < C ? c0 + CBLK : C;
            for (int n = 0; n < B * T; n++) {
                const float *d = dout + (size_t)n * C;
                float *g = dwte + (size_t)tokens[n] * C;
                for (int c = c0; c < c1; c++) g[c] += d[c];
            }
        }
#pragma omp for schedule(static) nowait
        for (int t = 0; t < T; t++) {
            float *g = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++) g[c] += d[c];
            }
        }
    }
}

/* ---------------------------------------------------------------- layernorm */

#define LN_EPS 1e-5f

void ls_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                          int C) {
    // out (N,C), mean (N), rstd (N), inp (N,C), w (C), b (C)
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
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
    // dinp (N,C) += ..., dw (C) += Σ dout·norm, db (C) += Σ dout. Rows and channel blocks
    // write disjoint outputs, so both loops share one parallel region without a barrier.
    int nblk = (C + CBLK - 1) / CBLK;
#pragma omp parallel if (PAR_WORTH((long)N * C))
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float dmean = 0.0f, dnorm_norm = 0.0f;
#pragma omp simd reduction(+ : dmean, dnorm_norm)
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
#pragma omp for schedule(static) nowait
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
}

/* ---------------------------------------------------------------- matmul */

void ls_matmul_forward(float *out, const float *inp, const float *w, const float *bias, const float *residual, int N,
                       int IC, int OC) {
    // out (N,OC) = [residual (N,OC)] + inp (N,IC) · wᵀ (IC,OC) + [bias (OC)]; each thread
    // initialises and multiplies its own block of rows (one parallel region).
    float beta = bias || residual ? 1.0f : 0.0f;
    int parts = gemm_parts(N, OC, IC);
    int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int k = 0; k < parts; k++) {
        int r0, r1;
        part_rows(k, parts, N, &r0, &r1);
        for (int n = r0; n < r1 && beta != 0.0f; n++) {
            float *o = out + (size_t)n * OC;
            const float *r = residual ? residual + (size_t)n * OC : NULL;
            if (r && bias)
                for (int c = 0; c < OC; c++) o[c] = r[c] + bias[c];
            else if (bias)
                for (int c = 0; c < OC; c++) o[c] = bias[c];
            else if (r != o)
                memcpy(o, r, (size_t)OC * sizeof(float));
        }
        gemm_part(k, parts, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
    }
    ls_blas_threads_pop(saved);
}

static void gelu_rows_bwd(float *d, const float *pre, int r0, int r1, int IC); /* with the fused matmul + GELU */

/* Both matmul backwards in one: dw (OC,IC) += doutᵀ·inp and dbias (OC) += column sums of
 * dout; dinp (N,IC) += dout·w, or, given gelu_pre, dinp = (dout·w) ⊙ gelu'(gelu_pre)
 * (overwritten, so the sgemm runs with beta 0 and each thread applies GELU's derivative to
 * its block of rows while it is still in cache). The three pieces write disjoint outputs:
 * one parallel region, no barrier between them. */
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                            const float *gelu_pre, int N, int IC, int OC) {
    int pa = dinp ? gemm_parts(N, IC, OC) : 0, pb = gemm_parts(OC, IC, N);
    /* the GELU pass is elementwise work of its own: worth threads even when the sgemm is not */
    if (gelu_pre && pa == 1 && PAR_WORTH((long)N * IC)) pa = omp_get_max_threads() < N ? omp_get_max_threads() : N;
    int nblk = dbias ? (OC + CBLK - 1) / CBLK : 0;
    int saved = ls_blas_threads_push_single();
#pragma omp parallel if (pa > 1 || pb > 1 || PAR_WORTH((long)N * OC))
    {
#pragma omp for schedule(static) nowait
        for (int k = 0; k < pa; k++) {
            gemm_part(k, pa, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC, gelu_pre ? 0.0f : 1.0f, dinp,
                      IC);
            if (gelu_pre) {
                int r0, r1;
                part_rows(k, pa, N, &r0, &r1);
                gelu_rows_bwd(dinp, gelu_pre, r0, r1, IC);
            }
        }
#pragma omp for schedule(static) nowait
        for (int k = 0; k < pb; k++)
            gemm_part(k, pb, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
#pragma omp for schedule(static) nowait
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
    ls_blas_threads_pop(saved);
}

void ls_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        int N, int IC, int OC) {
    // dinp (N,IC) += dout (N,OC) · w (OC,IC); dw (OC,IC) += doutᵀ (OC,N) · inp (N,IC);
    // dbias (OC) += column sums.
    matmul_backward(dinp, dw, dbias, dout, inp, w, NULL, N, IC, OC);
}

/* ---------------------------------------------------------------- attention */

void ls_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C). Per (b,h): S = Q·Kᵀ/√hs (T,T) by sgemm,
    // causal softmax in place, Y = P·V (T,hs) by sgemm straight into out's column block.
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)B * NH * T * T * (C / NH) / 16))
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *P = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, P, T);
        for (int t = 0; t < T; t++) softmax_row(P + (size_t)t * T, t + 1, T); /* causal: keys 0..t */
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
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)B * NH * T * T * (C / NH) / 16))
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
        for (int t = 0; t < T; t++) softmax_bwd_row(dS + (size_t)t * T, P + (size_t)t * T, t + 1, T);
        // dQ += scale · dS · K ; dK += scale · dSᵀ · Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dS, T, k, C3, 1.0f, dq, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dS, T, q, C3, 1.0f, dk, C3);
    }
    ls_blas_threads_pop(saved);
}

/* ---------------------------------------------------------------- gelu */

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* tanh(u) = sign(u)·(1 - e)/(1 + e), e = exp(-2|u|); 1 for |u| >= 9 where tanh is 1 in
 * float. Absolute error ~1e-7. Branch-free (a 0/1 mask instead of a clamp: GCC will not
 * vectorise fminf or a ternary here at -O2) so the GELU loops vectorise. */
static inline float tanh_fast(float u) {
    float a = fabsf(u);
    float in = (float)(a < 9.0f);
    float e = exp_small(-2.0f * a * in);
    return copysignf(in * ((1.0f - e) / (1.0f + e)) + (1.0f - in), u);
}

/* Elementwise loops run in chunks: threads split the chunks, each chunk is one simd loop. */
#define EW_CHUNK 4096

static void gelu_fwd_chunk(float *restrict out, const float *restrict inp, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_S * (x + 0.044715f * x * x * x)));
    }
}

static void gelu_bwd_chunk(float *restrict dinp, const float *restrict inp, const float *restrict dout, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        float th = tanh_fast(GELU_S * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

static void gelu_bwd_inplace_chunk(float *restrict d, const float *restrict inp, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        float th = tanh_fast(GELU_S * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        d[i] *= 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    }
}

void ls_gelu_forward(float *out, const float *inp, int N) {
    int nch = (N + EW_CHUNK - 1) / EW_CHUNK;
#pragma omp parallel for schedule(static) if (PAR_WORTH(N))
    for (int k = 0; k < nch; k++) {
        int i0 = k * EW_CHUNK, n = N - i0 < EW_CHUNK ? N - i0 : EW_CHUNK;
        gelu_fwd_chunk(out + i0, inp + i0, n);
    }
}

void ls_gelu_backward(float *dinp, const float *inp, const float *dout, int N) {
    int nch = (N + EW_CHUNK - 1) / EW_CHUNK;
#pragma omp parallel for schedule(static) if (PAR_WORTH(N))
    for (int k = 0; k < nch; k++) {
        int i0 = k * EW_CHUNK, n = N - i0 < EW_CHUNK ? N - i0 : EW_CHUNK;
        gelu_bwd_chunk(dinp + i0, inp + i0, dout + i0, n);
    }
}

void ls_gelu_backward_inplace(float *d, const float *inp, int N) {
    int nch = (N + EW_CHUNK - 1) / EW_CHUNK;
#pragma omp parallel for schedule(static) if (PAR_WORTH(N))
    for (int k = 0; k < nch; k++) {
        int i0 = k * EW_CHUNK, n = N - i0 < EW_CHUNK ? N - i0 : EW_CHUNK;
        gelu_bwd_inplace_chunk(d + i0, inp + i0, n);
    }
}

/* ---------------------------------------------------------------- fused matmul + GELU */

/* GELU over rows [r0, r1) of an (N, OC) matrix, in EW_CHUNK pieces. */
static void gelu_rows_fwd(float *out, const float *pre, int r0, int r1, int OC) {
    long i0 = (long)r0 * OC, i1 = (long)r1 * OC;
    for (long i = i0; i < i1; i += EW_CHUNK)
        gelu_fwd_chunk(out + i, pre + i, (int)(i1 - i < EW_CHUNK ? i1 - i : EW_CHUNK));
}

static void gelu_rows_bwd(float *d, const float *pre, int r0, int r1, int IC) {
    long i0 = (long)r0 * IC, i1 = (long)r1 * IC;
    for (long i = i0; i < i1; i += EW_CHUNK)
        gelu_bwd_inplace_chunk(d + i, pre + i, (int)(i1 - i < EW_CHUNK ? i1 - i : EW_CHUNK));
}

void ls_matmul_gelu_forward(float *pre, float *out, const float *inp, const float *w, const float *bias, int N, int IC,
                            int OC) {
    // pre (N,OC) = inp·wᵀ + bias; out (N,OC) = gelu(pre). Each thread applies GELU to its
    // block of rows right after its sgemm, while the block is still in cache.
    int parts = gemm_parts(N, OC, IC);
    if (parts == 1 && PAR_WORTH((long)N * OC)) parts = omp_get_max_threads() < N ? omp_get_max_threads() : N;
    int saved = ls_blas_threads_push_single();
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int k = 0; k < parts; k++) {
        int r0, r1;
        part_rows(k, parts, N, &r0, &r1);
        for (int n = r0; n < r1 && bias; n++) memcpy(pre + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        gemm_part(k, parts, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, bias ? 1.0f : 0.0f, pre, OC);
        gelu_rows_fwd(out, pre, r0, r1, OC);
    }
    ls_blas_threads_pop(saved);
}

void ls_matmul_gelu_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                             const float *gelu_pre, int N, int IC, int OC) {
    // For y = gelu_out (N,IC) · wᵀ + b where gelu_out = gelu(gelu_pre): dinp (N,IC) is
    // OVERWRITTEN with d(loss)/d(gelu_pre) = (dout·w) ⊙ gelu'(gelu_pre) (no memset needed);
    // dw (OC,IC) += doutᵀ·inp and dbias (OC) += column sums accumulate as usual.
    matmul_backward(dinp, dw, dbias, dout, inp, w, gelu_pre, N, IC, OC);
}

/* ---------------------------------------------------------------- softmax + cross-entropy */

float ls_softmax_xent_forward(float *probs, float *losses, const float *logits, const int *targets, int N, int V,
                              int *n_valid) {
    // probs (N,V), losses (N), logits (N,V), targets (N) with -1 = ignore
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)N * V))
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        memcpy(p, l, (size_t)V * sizeof(float));
        float lse = softmax_row(p, V, V);
        int t = targets ? targets[n] : -1;
        /* -log softmax from the logits (log-sum-exp), exact even where p underflows */
        losses[n] = t >= 0 ? lse - l[t] : 0.0f;
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
#pragma omp parallel for schedule(static) if (PAR_WORTH((long)N * V))
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0) continue;
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) d[i] += (p[i] - (i == t ? 1.0f : 0.0f)) * dloss;
    }
}
