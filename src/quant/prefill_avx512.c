/* prefill_avx512.c - quantized prefill GEMM on AVX-512 VNNI: activations to int8 per
 * (token, weight group), times the weights' int8 codes (4/3-bit codes unpacked to int8 for
 * a block of rows at a time), int32 accumulation over each group, fp32 across groups.
 *
 * Layout: 16 tokens per zmm lane set. Activations are packed once per call as
 * [token block][column quad][16 tokens][4 bytes] (u8 = code + 128), so one vpdpbusd takes
 * 16 tokens' 4 columns against a broadcast of one weight row's 4 codes; the +128 offset is
 * removed per group with 128·Σcodes. Tiles: 8 weight rows x 2 token blocks (16 int32
 * accumulators in registers; the fp32 sums in an L1 buffer, updated once per group). Per group g of row r and token t:
 *     y += float(Σ c·x̂q - 128·Σc) · s_g·xs_tg + (m_g + ctr·s_g) · xs_tg·Σx̂q
 * with c = q - ctr the centred code (ctr = 0 / 8 / 4 for 8 / 4 / 3 bits). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define LS_UNROLL _Pragma("GCC unroll 4")

typedef struct {
    int K4, G, kpg;        /* column quads, groups, quads per group */
    const uint8_t *xp;     /* [MB][K4][16][4] */
    const float *xs, *xsm; /* [MB][G][16]: x scale; x scale · Σ codes (NULL for 8 bits) */
} pf_act;

enum { PF_RB = 8 }; /* weight rows per tile */

typedef struct {
    const int8_t *w[PF_RB];           /* centred codes of each row, cols_pad bytes */
    const float *s[PF_RB], *c[PF_RB]; /* per group: scale; offset m + ctr·s (NULL for 8 bits) */
    const int32_t *ws[PF_RB];         /* per group: 128·Σ codes */
} pf_rows;

TARGET static inline __attribute__((always_inline)) void pf_tile(const pf_act *a, const pf_rows *w, int RB, int TB,
                                                                 int tb0, float *out /* [RB][TB*16] */) {
    /* the fp32 sums live in out (L1), touched once per group: the registers hold the
     * RB x TB int32 sums and the TB activation vectors */
    memset(out, 0, sizeof(float) * (size_t)RB * TB * 16);
    const uint8_t *xb[2];
    LS_UNROLL
    for (int t = 0; t < TB; t++) xb[t] = a->xp + (size_t)(tb0 + t) * a->K4 * 64;
    for (int g = 0; g < a->G; g++) {
        /* each sum starts at -128·Σcodes: the u8 offset of the activations, removed */
        __m512i acc[PF_RB][2];
        _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
            __m512i off = _mm512_set1_epi32(-w->ws[i][g]);
            LS_UNROLL
            for (int t = 0; t < TB; t++) acc[i][t] = off;
        }
        int k0 = g * a->kpg, k1 = k0 + a->kpg;
        for (int k = k0; k < k1; k++) {
            __m512i xv[2];
            LS_UNROLL
            for (int t = 0; t < TB; t++) xv[t] = _mm512_load_si512((const void *)(xb[t] + (size_t)k * 64));
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                int32_t wd;
                memcpy(&wd, w->w[i] + 4 * (size_t)k, 4);
                __m512i wb = _mm512_set1_epi32(wd);
                LS_UNROLL
                for (int t = 0; t < TB; t++) acc[i][t] = _mm512_dpbusd_epi32(acc[i][t], xv[t], wb);
            }
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
            __m512 sg = _mm512_set1_ps(w->s[i][g]);
            LS_UNROLL
            for (int t = 0; t < TB; t++) {
                size_t xo = ((size_t)(tb0 + t) * a->G + g) * 16;
                float *o = out + (size_t)i * TB * 16 + t * 16;
                __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]), _mm512_mul_ps(sg, _mm512_load_ps(a->xs + xo)),
                                           _mm512_load_ps(o));
                if (w->c[0]) f = _mm512_fmadd_ps(_mm512_set1_ps(w->c[i][g]), _mm512_load_ps(a->xsm + xo), f);
                _mm512_store_ps(o, f);
            }
        }
    }
}

/* Stores tile outputs out[RB][TB*16] to Y rows r.., tokens tb0*16.. (those < M). */
static void pf_store(const float *out, int RB, int TB, int tb0, int r, int M, int N, float *Y) {
    for (int i = 0; i < RB; i++)
        for (int l = 0; l < TB * 16; l++) {
            int t = tb0 * 16 + l;
            if (t < M) Y[(size_t)t * N + r + i] = out[(size_t)i * TB * 16 + l];
        }
}

/* Centred int8 codes of row r (cols_pad bytes) into dst (4/3 bits; 8 bits are used in
 * place); 128·Σ codes, scale and offset per group. */
TARGET static void pf_unpack_row(const ls_qmat *q, int r, int8_t *dst, int32_t *ws, float *s, float *c) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int ctr = q->bits == 8 ? 0 : 1 << (q->bits - 1), nb = q->cols_pad / 32, bpg = q->group / 32;
    if (q->bits == 4) {
        __m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
        for (int b = 0; b < nb; b++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(row + 16 * b));
            _mm_storeu_si128((__m128i *)(dst + 32 * b), _mm_sub_epi8(_mm_and_si128(v, m), e));
            _mm_storeu_si128((__m128i *)(dst + 32 * b + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), e));
        }
    } else if (q->bits == 3) {
        __m256i four = _mm256_set1_epi8(4);
        for (int b = 0; b < nb; b++)
            _mm256_storeu_si256((__m256i *)(dst + 32 * b), _mm256_sub_epi8(ls_quant_unpack3(row + 12 * b), four));
    }
    const int8_t *cd = q->bits == 8 ? (const int8_t *)row : dst;
    __m256i flip = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    for (int g = 0; g < q->ngroups; g++) {
        /* Σ (c + 128) per 8 bytes with vpsadbw, then minus 128 per byte */
        __m256i acc = z;
        for (int b = g * bpg; b < (g + 1) * bpg; b++)
            acc = _mm256_add_epi64(
                acc, _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(cd + 32 * b)), flip), z));
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        int32_t sum = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * q->group;
        ws[g] = 128 * sum;
        s[g] = ls_qmat_scale(q, r, g);
        if (c) c[g] = ls_qmat_min(q, r, g) + (float)ctr * s[g];
    }
}

TARGET void ls_quant_prefill_avx512(const ls_qmat *q, const float *X, int M, float *Y) {
    int K = q->cols_pad, K4 = K / 4, G = q->ngroups, gs = q->group, MB = (M + 15) / 16, N = q->rows;
    uint8_t *xp = ls_aligned_alloc(64, (size_t)MB * K4 * 64);
    float *xs = ls_aligned_alloc(64, sizeof(float) * (size_t)MB * G * 16);
    float *xsm = q->hmin ? ls_aligned_alloc(64, sizeof(float) * (size_t)MB * G * 16) : NULL;
    int8_t *wbuf = ls_aligned_alloc(64, (size_t)PF_RB * K);
    int32_t *wsum = malloc(sizeof(int32_t) * PF_RB * (size_t)G);
    float *sc = malloc(sizeof(float) * 2 * PF_RB * (size_t)G), out[PF_RB * 32] __attribute__((aligned(64)));
    LS_ASSERT(xp && xs && (xsm || !q->hmin) && wbuf && wsum && sc);
    /* activations: int8 per (token, group), absmax/127, 16 columns at a time; each 4
     * columns (one dword) of token l go to quad k's 64-byte vector at lane l: a 4-dword
     * scatter per 16 columns. Padding tokens and columns hold code 0 (byte 128). */
    if (M % 16) memset(xp, 128, (size_t)MB * K4 * 64);
    memset(xs, 0, sizeof(float) * (size_t)MB * G * 16);
    if (xsm) memset(xsm, 0, sizeof(float) * (size_t)MB * G * 16);
    const __m128i sidx = _mm_setr_epi32(0, 16, 32, 48);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
    const __m512i signm = _mm512_set1_epi32(0x7fffffff);
    for (int t = 0; t < M; t++) {
        int tb = t / 16, l = t % 16;
        const float *x = X + (size_t)t * q->cols;
        for (int g = 0; g < G; g++) {
            int c0 = g * gs;
            __m512 am = _mm512_setzero_ps();
            for (int c = c0; c < c0 + gs; c += 16) {
                int n = q->cols - c;
                __mmask16 mk = n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
                am = _mm512_max_ps(am, _mm512_castsi512_ps(_mm512_and_si512(
                                           _mm512_castps_si512(_mm512_maskz_loadu_ps(mk, x + c)), signm)));
            }
            float amax = _mm512_reduce_max_ps(am), inv = amax > 0 ? 127.0f / amax : 0.0f;
            __m512 iv = _mm512_set1_ps(inv);
            __m512i sum = _mm512_setzero_si512();
            for (int c = c0; c < c0 + gs; c += 16) {
                int n = q->cols - c;
                __mmask16 mk = n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
                __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + c), iv));
                v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
                sum = _mm512_add_epi32(sum, v);
                __m128i bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(v, off));
                _mm_i32scatter_epi32((int *)(xp + ((size_t)tb * K4 + c / 4) * 64 + l * 4), sidx, bytes, 4);
            }
            xs[((size_t)tb * G + g) * 16 + l] = amax / 127.0f;
            if (xsm) xsm[((size_t)tb * G + g) * 16 + l] = amax / 127.0f * (float)_mm512_reduce_add_epi32(sum);
        }
    }
    pf_act a = {K4, G, gs / 4, xp, xs, xsm};
    for (int r = 0; r < N; r += PF_RB) {
        int RB = N - r < PF_RB ? N - r : PF_RB;
        pf_rows w;
        for (int i = 0; i < RB; i++) {
            pf_unpack_row(q, r + i, wbuf + (size_t)i * K, wsum + (size_t)i * G, sc + (size_t)i * G,
                          q->hmin ? sc + (size_t)(PF_RB + i) * G : NULL);
            w.w[i] = q->bits == 8 ? (const int8_t *)(q->data + (size_t)(r + i) * q->row_bytes) : wbuf + (size_t)i * K;
            w.ws[i] = wsum + (size_t)i * G;
            w.s[i] = sc + (size_t)i * G;
            w.c[i] = q->hmin ? sc + (size_t)(PF_RB + i) * G : NULL;
        }
        int tb = 0;
        if (RB == PF_RB) {
            for (; tb + 2 <= MB; tb += 2) {
                pf_tile(&a, &w, PF_RB, 2, tb, out);
                pf_store(out, PF_RB, 2, tb, r, M, N, Y);
            }
            for (; tb < MB; tb++) {
                pf_tile(&a, &w, PF_RB, 1, tb, out);
                pf_store(out, PF_RB, 1, tb, r, M, N, Y);
            }
        } else {
            for (int i = 0; i < RB; i++) {
                pf_rows w1 = {{w.w[i]}, {w.s[i]}, {w.c[i]}, {w.ws[i]}};
                for (tb = 0; tb < MB; tb++) {
                    pf_tile(&a, &w1, 1, 1, tb, out);
                    pf_store(out, 1, 1, tb, r + i, M, N, Y);
                }
            }
        }
    }
    ls_aligned_free(xp), ls_aligned_free(xs), ls_aligned_free(xsm), ls_aligned_free(wbuf);
    free(wsum), free(sc);
}
