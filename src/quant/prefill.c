/* prefill.c - what the integer prefill GEMMs (prefill_avx2.c, prefill_avx512.c,
 * prefill_amx.c) share: activations rounded to int8 per (token, weight group) and packed in
 * token blocks, the per-row weight codes, scales and offsets of a block of rows, and the
 * loop over row blocks and token tiles that calls a level's tile. AVX2 code: it runs on
 * every level. Per group g of row r and token t the tiles compute
 *     y += s_g·xs_tg·Σ (q - ctr)·x̂  +  (m_g + ctr·s_g)·Σx_tg
 * (ctr = 0 / 8 / 4 for 8 / 4 / 3 bits, Σx exact in fp32), so the error against the
 * product of the dequantized weights is Σ_g Σ|w - mid_g|·absmax_g(x)/254. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))

/* Token t of X (xr: cols_pad floats) rounded to int8 per group into dst (cols_pad bytes,
 * natural order; u8: code + 128), its scales and sums into p. */
TARGET static void pack_token(const ls_qmat *q, const float *xr, int t, ls_quant_xpack *p, uint8_t *dst) {
    int TW = p->TW, tb = t / TW, l = t % TW, gs = q->group, ctr = q->bits == 8 ? 0 : 1 << (q->bits - 1);
    const __m256 signm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i flip = _mm256_set1_epi8(p->u8 ? (char)0x80 : 0), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < p->G; g++) {
        const float *x = xr + (size_t)g * gs;
        __m256 am = _mm256_setzero_ps(), fs = am;
        for (int c = 0; c < gs; c += 8) {
            __m256 v = _mm256_loadu_ps(x + c);
            am = _mm256_max_ps(am, _mm256_and_ps(v, signm));
            fs = _mm256_add_ps(fs, v);
        }
        /* horizontal max and sum in registers */
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(fs), _mm256_extractf128_ps(fs, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4)), s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        float sum = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
        __m256 iv = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m256i isum = _mm256_setzero_si256();
        /* |x|·127/absmax rounds to at most 127: the codes need no clamp */
        for (int c = 0; c < gs; c += 32) {
            __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c), iv));
            __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8), iv));
            __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 16), iv));
            __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 24), iv));
            if (p->xcs) isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_add_epi32(v0, v1), _mm256_add_epi32(v2, v3)));
            /* packs interleave the 128-bit lanes: dwords 0,4,1,5,2,6,3,7 restore column order */
            __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
            b = _mm256_xor_si256(_mm256_permutevar8x32_epi32(b, perm), flip);
            _mm256_storeu_si256((__m256i *)(dst + (size_t)g * gs + c), b);
        }
        size_t o = ((size_t)tb * p->G + g) * TW + l;
        p->xs[o] = amax / 127.0f;
        p->xsum[o] = sum;
        if (p->xcs) {
            int32_t i8[8], is = 0;
            _mm256_storeu_si256((__m256i *)i8, isum);
            for (int k = 0; k < 8; k++) is += i8[k];
            p->xcs[o] = -ctr * is;
        }
    }
}

/* An 8 × 8 block of 32-bit values: rows src[j·stride], j < 8, into t[k] = column k. */
TARGET static inline __attribute__((always_inline)) void transpose8(const float *src, size_t stride, __m256 t[8]) {
    __m256 v[8], u[8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) v[j] = _mm256_loadu_ps(src + j * stride);
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j += 2) {
        u[j] = _mm256_unpacklo_ps(v[j], v[j + 1]);
        u[j + 1] = _mm256_unpackhi_ps(v[j], v[j + 1]);
    }
    /* v[0..3]: columns 0-3 (lanes 0-3) and 4-7 (lanes 4-7) of rows 0-3; v[4..7]: rows 4-7 */
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j += 4) {
        v[j] = _mm256_shuffle_ps(u[j], u[j + 2], 0x44);
        v[j + 1] = _mm256_shuffle_ps(u[j], u[j + 2], 0xee);
        v[j + 2] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0x44);
        v[j + 3] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0xee);
    }
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++) {
        t[j] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x20);
        t[j + 4] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x31);
    }
}

/* A block of TW tokens' codes (tmp: TW rows of K bytes) into xp's [K/4][TW][4] layout:
 * 8 × 8 dword transposes. */
TARGET static void transpose_block(const uint8_t *tmp, int TW, int K, uint8_t *xp) {
    for (int k = 0; k < K / 4; k += 8)
        for (int l = 0; l < TW; l += 8) {
            __m256 t[8];
            transpose8((const float *)(tmp + (size_t)l * K + 4 * (size_t)k), (size_t)K / 4, t);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) _mm256_storeu_ps((float *)(xp + ((size_t)(k + j) * TW + l) * 4), t[j]);
        }
}

int ls_quant_pack_x(const ls_qmat *q, const float *X, int M, int TW, int u8, int want_xcs, ls_quant_xpack *p) {
    memset(p, 0, sizeof *p);
    int K = q->cols_pad;
    p->TW = TW, p->u8 = u8, p->K4 = K / 4, p->G = q->ngroups, p->MB = (M + TW - 1) / TW;
    size_t na = (size_t)p->MB * p->G * TW;
    p->xp = ls_aligned_alloc(64, (size_t)p->MB * p->K4 * TW * 4);
    p->xs = ls_aligned_calloc(64, sizeof(float) * na);
    p->xsum = ls_aligned_calloc(64, sizeof(float) * na);
    if (want_xcs) p->xcs = ls_aligned_calloc(64, sizeof(int32_t) * na);
    float *xr = ls_aligned_calloc(32, sizeof(float) * (size_t)K);
    uint8_t *tmp = ls_aligned_alloc(64, (size_t)TW * K);
    if (!p->xp || !p->xs || !p->xsum || (want_xcs && !p->xcs) || !xr || !tmp) {
        ls_aligned_free(xr), ls_aligned_free(tmp);
        ls_quant_xpack_free(p);
        return ls_err(LS_ENOMEM, "prefill: out of memory");
    }
    for (int tb = 0; tb < p->MB; tb++) {
        /* padding tokens hold code 0 (byte 128 when stored as u8) and zero scales and sums */
        if ((tb + 1) * TW > M) memset(tmp, u8 ? 128 : 0, (size_t)TW * K);
        for (int t = tb * TW; t < M && t < (tb + 1) * TW; t++) {
            const float *xt = X + (size_t)t * q->cols;
            if (q->cols < K) memcpy(xr, xt, sizeof(float) * (size_t)q->cols), xt = xr;
            pack_token(q, xt, t, p, tmp + (size_t)(t % TW) * K);
        }
        transpose_block(tmp, TW, K, p->xp + (size_t)tb * p->K4 * TW * 4);
    }
    ls_aligned_free(xr), ls_aligned_free(tmp);
    return LS_OK;
}

void ls_quant_xpack_free(ls_quant_xpack *p) {
    ls_aligned_free(p->xp), ls_aligned_free(p->xs), ls_aligned_free(p->xsum), ls_aligned_free(p->xcs);
    memset(p, 0, sizeof *p);
}

/* Codes of row r (cols_pad bytes) into dst as the level's tile reads them (see
 * ls_quant_pf), and per group: scale, offset m + ctr·s (4/3 bits), 128·Σ centred codes. */
TARGET static void prep_row(const ls_qmat *q, int r, int centred, int8_t *dst, float *s, float *c, int32_t *ws) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int ctr = q->bits == 8 ? 0 : 1 << (q->bits - 1), nb = q->cols_pad / 32, bpg = q->group / 32;
    __m256i e = _mm256_set1_epi8((char)(centred ? ctr : 0));
    for (int b = 0; b < nb; b++) {
        __m256i v;
        if (q->bits == 8) v = _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(row + 32 * b)));
        else if (q->bits == 4) {
            __m128i h = _mm_loadu_si128((const __m128i *)(row + 16 * b)), m = _mm_set1_epi8(15);
            v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(h, 4), m), _mm_and_si128(h, m));
        } else v = ls_quant_unpack3(row + 12 * b);
        if (q->bits != 8 || !centred) _mm256_storeu_si256((__m256i *)(dst + 32 * b), _mm256_sub_epi8(v, e));
    }
    /* 8 bits centred: the codes are used in place (the tile reads q->data) */
    const int8_t *cd = q->bits == 8 && centred ? (const int8_t *)row : dst;
    __m256i flip = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    /* fp16 scales and minima 8 at a time (the arrays carry 8 values of slack) */
    const uint16_t *hs = q->hscale + (size_t)r * q->ngroups, *hm = q->hmin ? q->hmin + (size_t)r * q->ngroups : NULL;
    for (int g = 0; g < q->ngroups; g += 8) {
        float sv[8], cv[8];
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hs + g)));
        _mm256_storeu_ps(sv, v);
        if (c) _mm256_storeu_ps(cv, _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hm + g))),
                                                  _mm256_mul_ps(_mm256_set1_ps((float)ctr), v)));
        for (int j = 0; j < 8 && g + j < q->ngroups; j++) {
            s[g + j] = sv[j];
            if (c) c[g + j] = cv[j];
        }
    }
    for (int g = 0; ws && g < q->ngroups; g++) {
        /* Σ (code + 128) per 8 bytes with vpsadbw, then minus 128 per byte */
        __m256i acc = z;
        for (int b = g * bpg; b < (g + 1) * bpg; b++)
            acc = _mm256_add_epi64(
                acc, _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(cd + 32 * b)), flip), z));
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        ws[g] = 128 * ((int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 128 * q->group);
    }
}

/* Stores tile outputs out[RB][n] to Y rows r.., tokens t0.. (those < M), token by token:
 * each Y line written once (row by row, a power-of-two N put every token's line in one
 * L1 set and halved the GEMM's rate at N = 1024). 8 × 8 blocks are transposed in
 * registers; out holds whole 8-row blocks (rows past RB of no use), stored whole while inside
 * the Y line. Call with ascending r. */
TARGET static void store_tile(const float *out, int RB, int n, int t0, int r, int M, int N, float *Y) {
    int nl = M - t0 < n ? M - t0 : n, l = 0;
    if (RB <= 4) /* 4 × 8 blocks (the avx2 8-bit tile's 3 rows, single rows) */
        for (; l + 8 <= nl; l += 8) {
            __m256 v0 = _mm256_loadu_ps(out + l), v1 = _mm256_loadu_ps(out + (size_t)n + l);
            __m256 v2 = _mm256_loadu_ps(out + 2 * (size_t)n + l), v3 = _mm256_loadu_ps(out + 3 * (size_t)n + l);
            __m256 u0 = _mm256_unpacklo_ps(v0, v1), u1 = _mm256_unpackhi_ps(v0, v1);
            __m256 u2 = _mm256_unpacklo_ps(v2, v3), u3 = _mm256_unpackhi_ps(v2, v3);
            /* t[k]: rows 0-3 of token k (lanes 0-3) and of token k + 4 (lanes 4-7) */
            __m256 t[4] = {_mm256_shuffle_ps(u0, u2, 0x44), _mm256_shuffle_ps(u0, u2, 0xee),
                           _mm256_shuffle_ps(u1, u3, 0x44), _mm256_shuffle_ps(u1, u3, 0xee)};
            __m128i mask = _mm_cmpgt_epi32(_mm_set1_epi32(RB), _mm_setr_epi32(0, 1, 2, 3));
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                __m128 y = k < 4 ? _mm256_castps256_ps128(t[k % 4]) : _mm256_extractf128_ps(t[k % 4], 1);
                float *dst = Y + (size_t)(t0 + l + k) * N + r;
                if (r + 4 <= N) _mm_storeu_ps(dst, y); /* past RB: rows of no use, overwritten later */
                else _mm_maskstore_ps(dst, mask, y);
            }
        }
    for (; l + 8 <= nl; l += 8)
        for (int i = 0; i < RB; i += 8) {
            __m256 t[8];
            transpose8(out + (size_t)i * n + l, (size_t)n, t);
            __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(RB - i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                float *dst = Y + (size_t)(t0 + l + k) * N + r + i;
                /* past RB: rows of no use, overwritten later by the next row block (rows
                 * ascend), unless past the end of the Y line: masked there */
                if (r + i + 8 <= N) _mm256_storeu_ps(dst, t[k]);
                else _mm256_maskstore_ps(dst, mask, t[k]);
            }
        }
    for (; l < nl; l++)
        for (int i = 0; i < RB; i++) Y[(size_t)(t0 + l) * N + r + i] = out[(size_t)i * n + l];
}

int ls_quant_prefill_run(const ls_qmat *q, const float *X, int M, float *Y, const ls_quant_pf_level *lv) {
    ls_quant_pf p;
    memset(&p, 0, sizeof p);
    p.q = q;
    LS_TRY(ls_quant_pack_x(q, X, M, lv->TW, lv->u8, !lv->centred && q->hmin, &p.x));
    int f = q->bits == 8 ? 0 : q->bits == 4 ? 1 : 2, K = q->cols_pad, G = q->ngroups, RBm = lv->RB[f], TBm = lv->TB[f];
    int8_t *wbuf = ls_aligned_alloc(64, (size_t)RBm * K);
    int32_t *wsum = calloc((size_t)RBm * G, sizeof(int32_t));
    float *sc = calloc(2 * (size_t)RBm * G, sizeof(float));
    /* whole 8-row blocks for store_tile (the rows past RB: zero, or left by a wider tile; never kept) */
    float *out = ls_aligned_calloc(64, sizeof(float) * (size_t)((RBm + 7) / 8 * 8) * TBm * lv->TW);
    if (!wbuf || !wsum || !sc || !out) {
        ls_aligned_free(wbuf), free(wsum), free(sc), ls_aligned_free(out);
        ls_quant_xpack_free(&p.x);
        return ls_err(LS_ENOMEM, "prefill: out of memory");
    }
    for (int r = 0; r < q->rows; r += RBm) {
        p.RB = q->rows - r < RBm ? q->rows - r : RBm;
        /* a padding level's last block: zero rows (codes, scales, offsets) up to RBm, and
         * 8-bit rows copied so that all rows lie at stride K */
        int padded = lv->pad && p.RB < RBm;
        for (int i = 0; i < (padded ? RBm : p.RB); i++) {
            int8_t *d = wbuf + (size_t)i * K;
            float *si = sc + (size_t)i * G, *ci = q->hmin ? sc + (size_t)(RBm + i) * G : NULL;
            if (i < p.RB) prep_row(q, r + i, lv->centred, d, si, ci, lv->u8 ? wsum + (size_t)i * G : NULL);
            else {
                memset(d, 0, (size_t)K);
                memset(si, 0, sizeof(float) * (size_t)G);
                if (ci) memset(ci, 0, sizeof(float) * (size_t)G);
            }
            /* the row's packed data; a padding row's: its zero codes */
            const int8_t *row = i < p.RB ? (const int8_t *)(q->data + (size_t)(r + i) * q->row_bytes) : d;
            if (padded && i < p.RB && q->bits == 8 && lv->centred) memcpy(d, row, (size_t)K);
            p.w[i] = q->bits == 8 && lv->centred && !padded ? row : d;
            p.wq[i] = row;
            p.s[i] = si, p.c[i] = ci, p.ws[i] = wsum + (size_t)i * G;
        }
        if (p.RB == RBm || padded) {
            int nst = p.RB; /* rows stored */
            p.RB = RBm;
            int tb = 0;
            for (; tb + TBm <= p.x.MB; tb += TBm) {
                memset(out, 0, sizeof(float) * (size_t)RBm * TBm * lv->TW);
                lv->tile(&p, tb, TBm, out);
                store_tile(out, nst, TBm * lv->TW, tb * lv->TW, r, M, q->rows, Y);
            }
            for (; tb < p.x.MB; tb++) {
                memset(out, 0, sizeof(float) * (size_t)RBm * lv->TW);
                lv->tile(&p, tb, 1, out);
                store_tile(out, nst, lv->TW, tb * lv->TW, r, M, q->rows, Y);
            }
            continue;
        }
        /* the last rows, one at a time */
        for (int i = 0; i < p.RB; i++) {
            ls_quant_pf p1 = p;
            p1.RB = 1, p1.w[0] = p.w[i], p1.wq[0] = p.wq[i], p1.s[0] = p.s[i], p1.c[0] = p.c[i], p1.ws[0] = p.ws[i];
            for (int tb = 0; tb < p.x.MB; tb++) {
                memset(out, 0, sizeof(float) * (size_t)lv->TW);
                lv->tile(&p1, tb, 1, out);
                store_tile(out, 1, lv->TW, tb * lv->TW, r + i, M, q->rows, Y);
            }
        }
    }
    ls_aligned_free(wbuf), free(wsum), free(sc), ls_aligned_free(out);
    ls_quant_xpack_free(&p.x);
    return LS_OK;
}
