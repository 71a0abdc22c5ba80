/* kernels_avx2.c - AVX2/FMA/F16C kernels for every weight format, compiled per function
 * with target attributes so the library needs no global -mavx2; callers check
 * ls_quant_cpu_fast() first.
 *
 * Every output element is reduced the same way whatever the batch: four 8-lane
 * accumulators striped over each 32-value block, summed ((a0+a1)+(a2+a3)) and then
 * horizontally in a fixed order. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))

int ls_quant_cpu_fast(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* Dequantizes 32-value block b of row r into w[0..3] (values 8j..8j+7 in w[j]). */
TARGET static inline __attribute__((always_inline)) void load_block(const ls_qmat *q, const uint8_t *row, int r,
                                                                     int b, __m256 w[4]) {
    switch (q->bits) {
    case 32: {
        const float *p = (const float *)row + (size_t)b * 32;
        for (int j = 0; j < 4; j++) w[j] = _mm256_loadu_ps(p + 8 * j);
        break;
    }
    case 16: {
        const uint16_t *p = (const uint16_t *)row + (size_t)b * 32;
        for (int j = 0; j < 4; j++) w[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8 * j)));
        break;
    }
    case 8: {
        const uint8_t *p = row + (size_t)b * 32;
        __m256 s = _mm256_set1_ps(q->scale[(size_t)r * q->ngroups + (b * 32) / q->group]);
        for (int j = 0; j < 4; j++) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(p + 8 * j));
            w[j] = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
        }
        break;
    }
    case 4: {
        const uint8_t *p = row + (size_t)b * 16;
        size_t gi = (size_t)r * q->ngroups + (b * 32) / q->group;
        __m256 s = _mm256_set1_ps(q->scale[gi]), mn = _mm256_set1_ps(q->min[gi]);
        __m256i m15 = _mm256_set1_epi32(15);
        __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
        w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v0, m15)), s, mn);
        w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v1, m15)), s, mn);
        w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4)), s, mn);
        w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4)), s, mn);
        break;
    }
    default: { /* 3 */
        const uint8_t *p = row + (size_t)b * 12;
        size_t gi = (size_t)r * q->ngroups + (b * 32) / q->group;
        __m256 s = _mm256_set1_ps(q->scale[gi]), mn = _mm256_set1_ps(q->min[gi]);
        uint32_t hw;
        memcpy(&hw, p + 8, 4);
        __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        __m256i hi = _mm256_set1_epi32((int)hw);
        __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
        __m256i sh = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (int j = 0; j < 4; j++) {
            __m256i l = _mm256_and_si256(_mm256_srli_epi32(lo, 2 * j), three);
            __m256i h = _mm256_and_si256(_mm256_srlv_epi32(hi, _mm256_add_epi32(sh, _mm256_set1_epi32(8 * j))), one);
            __m256i v = _mm256_or_si256(l, _mm256_slli_epi32(h, 2));
            w[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, mn);
        }
        break;
    }
    }
}

TARGET static inline float hsum(__m256 a[4]) {
    __m256 s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* Raw quantized values (no scale or offset) of 32-value block b, as floats. */
TARGET static inline __attribute__((always_inline)) void load_q(int bits, const uint8_t *row, int b, __m256 w[4]) {
    if (bits == 8) {
        const uint8_t *p = row + (size_t)b * 32;
        for (int j = 0; j < 4; j++)
            w[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * j))));
    } else if (bits == 4) {
        const uint8_t *p = row + (size_t)b * 16;
        __m256i m15 = _mm256_set1_epi32(15);
        __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
        w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v0, m15));
        w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v1, m15));
        w[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
        w[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
    } else {
        const uint8_t *p = row + (size_t)b * 12;
        uint32_t hw;
        memcpy(&hw, p + 8, 4);
        __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
        __m256i hi = _mm256_set1_epi32((int)hw);
        __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
        __m256i sh = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (int j = 0; j < 4; j++) {
            __m256i l = _mm256_and_si256(_mm256_srli_epi32(lo, 2 * j), three);
            __m256i h = _mm256_and_si256(_mm256_srlv_epi32(hi, _mm256_add_epi32(sh, _mm256_set1_epi32(8 * j))), one);
            h = _mm256_slli_epi32(h, 2);
            w[j] = _mm256_cvtepi32_ps(_mm256_or_si256(l, h));
        }
    }
}

/* One W row against NT X rows; NT is a compile-time constant at each call site. Float
 * formats: four accumulators striped over each block. Quantized formats: per group,
 * Σ q·x in four striped accumulators, folded ((a0+a1)+(a2+a3)) and scaled into one
 * accumulator; the offset term min·Σx uses the precomputed group sums xsum. */
TARGET static inline __attribute__((always_inline)) void row_tile(const ls_qmat *q, int BITS, int r, const float *X,
                                                                   int ldx, int NT, float *Y, int ldy, const float *xsum) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int nb = q->cols_pad / 32;
    if (BITS >= 16) {
        __m256 acc[4][4];
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < 4; j++) acc[t][j] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256 w[4];
            load_block(q, row, r, b, w);
            for (int t = 0; t < NT; t++) {
                const float *x = X + (size_t)t * ldx + (size_t)b * 32;
                for (int j = 0; j < 4; j++) acc[t][j] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(x + 8 * j), acc[t][j]);
            }
        }
        for (int t = 0; t < NT; t++) Y[(size_t)t * ldy + r] = hsum(acc[t]);
        return;
    }
    int bpg = q->group / 32, ng = q->ngroups;
    const float *sc = q->scale + (size_t)r * ng, *mn = q->min ? q->min + (size_t)r * ng : NULL;
    __m256 acc[4];
    float extra[4] = {0, 0, 0, 0};
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m256 ag[4][4];
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < 4; j++) ag[t][j] = _mm256_setzero_ps();
        for (int b = g * bpg; b < (g + 1) * bpg; b++) {
            __m256 w[4];
            load_q(BITS, row, b, w);
            for (int t = 0; t < NT; t++) {
                const float *x = X + (size_t)t * ldx + (size_t)b * 32;
                for (int j = 0; j < 4; j++) ag[t][j] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(x + 8 * j), ag[t][j]);
            }
        }
        __m256 sv = _mm256_set1_ps(sc[g]);
        for (int t = 0; t < NT; t++) {
            __m256 f = _mm256_add_ps(_mm256_add_ps(ag[t][0], ag[t][1]), _mm256_add_ps(ag[t][2], ag[t][3]));
            acc[t] = _mm256_fmadd_ps(sv, f, acc[t]);
            if (mn) extra[t] += mn[g] * xsum[(size_t)t * ng + g];
        }
    }
    for (int t = 0; t < NT; t++) {
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        Y[(size_t)t * ldy + r] = _mm_cvtss_f32(v) + extra[t];
    }
}

/* 32 quantized values of block b as bytes: int8 for 8 bits, 0..15 / 0..7 for 4 / 3 bits. */
TARGET static inline __attribute__((always_inline)) __m256i unpack_q(int bits, const uint8_t *row, int b) {
    if (bits == 8) return _mm256_loadu_si256((const __m256i *)(row + (size_t)b * 32));
    if (bits == 4) {
        __m128i v = _mm_loadu_si128((const __m128i *)(row + (size_t)b * 16)), m = _mm_set1_epi8(15);
        return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
    }
    const uint8_t *p = row + (size_t)b * 12;
    int64_t lo8;
    uint32_t hw;
    memcpy(&lo8, p, 8);
    memcpy(&hw, p + 8, 4);
    /* byte k: bits 2(k/8).. of byte k%8, then bit k of hw as bit 2 */
    __m256i l = _mm256_srlv_epi64(_mm256_set1_epi64x(lo8), _mm256_setr_epi64x(0, 2, 4, 6));
    l = _mm256_and_si256(l, _mm256_set1_epi8(3));
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)hw), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bitm), bitm), _mm256_set1_epi8(4));
    return _mm256_or_si256(l, h);
}

/* Integer formats against NT int8-quantized X rows: per block Σ q·xq in int32 lanes
 * (maddubs + madd), scaled by the block's x scale into a group accumulator, which is
 * scaled by the weight group's scale into the row accumulator. */
TARGET static inline __attribute__((always_inline)) void row_tile_i8(const ls_qmat *q, int BITS, int r, const int8_t *XQ,
                                                                      const float *XS, int ldx, int NT, float *Y, int ldy,
                                                                      const float *xsum, const float *xqsum) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int bpg = q->group / 32, ng = q->ngroups, nb = q->cols_pad / 32;
    const float *sc = q->scale + (size_t)r * ng, *mn = q->min ? q->min + (size_t)r * ng : NULL;
    __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    float extra[4] = {0, 0, 0, 0};
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        /* two accumulators per row, alternating blocks: one FMA chain would cap a row at
         * one block per FMA latency (4 cycles), below memory speed */
        __m256 ag[4][2];
        for (int t = 0; t < NT; t++) ag[t][0] = ag[t][1] = _mm256_setzero_ps();
        for (int b = g * bpg; b < (g + 1) * bpg; b++) {
            /* 8 bits: signed codes (|q| times sign-adjusted x). 4/3 bits: unsigned codes
             * straight into maddubs; the centring (q - c) is applied per group below */
            __m256i qv = unpack_q(BITS, row, b);
            __m256i qa = BITS == 8 ? _mm256_abs_epi8(qv) : qv;
            for (int t = 0; t < NT; t++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(XQ + (size_t)t * ldx + (size_t)b * 32));
                if (BITS == 8) xv = _mm256_sign_epi8(xv, qv);
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, xv), ones);
                ag[t][b & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(XS[(size_t)t * nb + b]), ag[t][b & 1]);
            }
        }
        __m256 sv = _mm256_set1_ps(sc[g]);
        for (int t = 0; t < NT; t++) {
            acc[t] = _mm256_fmadd_ps(sv, _mm256_add_ps(ag[t][0], ag[t][1]), acc[t]);
        }
    }
    /* Σ s(q-c)x̂ + (m+cs)Σx = Σ s·q·x̂ + m·Σx + c·s·(Σx - Σx̂): the centring and offset
     * terms are two dot products over the row's groups, done here in one vector pass */
    if (mn) {
        float c = (float)(BITS == 4 ? 8 : 4);
        for (int t = 0; t < NT; t++) {
            const float *xsm = xsum + (size_t)t * ng, *dx = xqsum + (size_t)t * ng;
            __m256 e = _mm256_setzero_ps();
            int g = 0;
            for (; g + 8 <= ng; g += 8)
                e = _mm256_fmadd_ps(_mm256_loadu_ps(mn + g), _mm256_loadu_ps(xsm + g),
                                    _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(c), _mm256_loadu_ps(sc + g)),
                                                    _mm256_loadu_ps(dx + g), e));
            float tail = 0.0f;
            for (; g < ng; g++) tail += mn[g] * xsm[g] + c * sc[g] * dx[g];
            __m128 v = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
            v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            v = _mm_add_ss(v, _mm_movehdup_ps(v));
            extra[t] = _mm_cvtss_f32(v) + tail;
        }
    }
    for (int t = 0; t < NT; t++) {
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        Y[(size_t)t * ldy + r] = _mm_cvtss_f32(v) + extra[t];
    }
}

TARGET static inline __attribute__((always_inline)) void rows_i8(const ls_qmat *q, int BITS, int r0, int r1,
                                                                  const int8_t *XQ, const float *XS, int M, float *Y,
                                                                  const float *xsum, const float *xqsum) {
    int ldx = q->cols_pad, ldy = q->rows, ng = q->ngroups, nb = q->cols_pad / 32;
    for (int r = r0; r < r1; r++) {
        int m = 0;
        for (; m + 4 <= M; m += 4)
            row_tile_i8(q, BITS, r, XQ + (size_t)m * ldx, XS + (size_t)m * nb, ldx, 4, Y + (size_t)m * ldy, ldy,
                        xsum ? xsum + (size_t)m * ng : NULL, xqsum ? xqsum + (size_t)m * ng : NULL);
        const float *xs = xsum ? xsum + (size_t)m * ng : NULL, *xqs = xqsum ? xqsum + (size_t)m * ng : NULL;
        const int8_t *xq = XQ + (size_t)m * ldx;
        const float *xsc = XS + (size_t)m * nb;
        switch (M - m) {
        case 3: row_tile_i8(q, BITS, r, xq, xsc, ldx, 3, Y + (size_t)m * ldy, ldy, xs, xqs); break;
        case 2: row_tile_i8(q, BITS, r, xq, xsc, ldx, 2, Y + (size_t)m * ldy, ldy, xs, xqs); break;
        case 1: row_tile_i8(q, BITS, r, xq, xsc, ldx, 1, Y + (size_t)m * ldy, ldy, xs, xqs); break;
        default: break;
        }
    }
}

/* All rows [r0, r1) of one format; BITS is a constant in each instantiation below. */
TARGET static inline __attribute__((always_inline)) void rows_fmt(const ls_qmat *q, int BITS, int r0, int r1,
                                                                   const float *Xpad, int M, float *Y, const float *xsum) {
    int ldx = q->cols_pad, ldy = q->rows, ng = q->ngroups;
    /* quantized formats hold 2 rows of group accumulators in registers, float formats 4 */
    for (int r = r0; r < r1; r++) {
        int m = 0;
        if (BITS >= 16)
            for (; m + 4 <= M; m += 4) row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 4, Y + (size_t)m * ldy, ldy, NULL);
        else
            for (; m + 2 <= M; m += 2)
                row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 2, Y + (size_t)m * ldy, ldy, xsum ? xsum + (size_t)m * ng : NULL);
        const float *xs = xsum ? xsum + (size_t)m * ng : NULL;
        switch (M - m) {
        case 3: row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 3, Y + (size_t)m * ldy, ldy, xs); break;
        case 2: row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 2, Y + (size_t)m * ldy, ldy, xs); break;
        case 1: row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 1, Y + (size_t)m * ldy, ldy, xs); break;
        default: break;
        }
    }
}

TARGET void ls_quant_rows_avx2(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y, const float *xsum,
                               const int8_t *xq, const float *xs, const float *xqsum) {
    switch (q->bits) {
    case 32: rows_fmt(q, 32, r0, r1, Xpad, M, Y, xsum); break;
    case 16: rows_fmt(q, 16, r0, r1, Xpad, M, Y, xsum); break;
    case 8: rows_i8(q, 8, r0, r1, xq, xs, M, Y, xsum, xqsum); break;
    case 4: rows_i8(q, 4, r0, r1, xq, xs, M, Y, xsum, xqsum); break;
    default: rows_i8(q, 3, r0, r1, xq, xs, M, Y, xsum, xqsum); break;
    }
}

TARGET void ls_quant_dequant_row_avx2(const ls_qmat *q, int r, float *out) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int nb = q->cols_pad / 32;
    for (int b = 0; b < nb; b++) {
        __m256 w[4];
        load_block(q, row, r, b, w);
        for (int j = 0; j < 4; j++) _mm256_storeu_ps(out + (size_t)b * 32 + 8 * j, w[j]);
    }
    if (q->bits == 32)
        for (int c = q->cols; c < q->cols_pad; c++) out[c] = 0.0f;
}
