/* kernels_body.h - the SIMD kernels for every weight format, written once and compiled
 * twice: kernels_avx2.c (AVX2/FMA/F16C) and kernels_avx512.c (adds AVX-512 VL/BW/VNNI),
 * each with function-level target attributes so the library needs no global -m flags.
 * The includer defines LS_KTARGET (the target attribute string), LS_KVNNI (0/1) and
 * LS_KFN(name) (the exported name with the level's suffix); callers dispatch on
 * ls_cpu_isa().
 *
 * Every output element is reduced the same way whatever the batch, the row tiling, the
 * thread split and the level (so batched and pipelined decode match one-at-a-time decode
 * bit for bit, and the AVX-512 path matches the AVX2 path): float formats with four 8-lane
 * accumulators striped over each 32-value block; integer formats with one 8-lane
 * accumulator over pairs of 32-value blocks, the pair's integer dot products exact (VNNI's
 * vpdpbusd gives the same int32 lane sums as AVX2's vpmaddubsw + vpmaddwd, which cannot
 * saturate here); then a fixed horizontal sum. Decode is memory-bound: the next tile is
 * prefetched in software (see tile_i8). */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llmsys/core.h"
#include "quant/quant_internal.h"

#define TARGET __attribute__((target(LS_KTARGET)))
/* tiles keep arrays of vectors in registers only when their loops are fully unrolled */
#define LS_UNROLL _Pragma("GCC unroll 4")

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
        __m256 s = _mm256_set1_ps(ls_f16_to_f32(q->hscale[(size_t)r * q->ngroups + (b * 32) / q->group]));
        for (int j = 0; j < 4; j++) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(p + 8 * j));
            w[j] = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
        }
        break;
    }
    case 4: {
        const uint8_t *p = row + (size_t)b * 16;
        size_t gi = (size_t)r * q->ngroups + (b * 32) / q->group;
        __m256 s = _mm256_set1_ps(ls_f16_to_f32(q->hscale[gi])), mn = _mm256_set1_ps(ls_f16_to_f32(q->hmin[gi]));
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
        __m256 s = _mm256_set1_ps(ls_f16_to_f32(q->hscale[gi])), mn = _mm256_set1_ps(ls_f16_to_f32(q->hmin[gi]));
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

/* Values 8j..8j+7 of 32-value block b of a float-format row (fp32 or fp16), returned by
 * value: filling an array through a pointer made GCC copy each block through the stack. */
TARGET static inline __attribute__((always_inline)) __m256 fblock(int BITS, const uint8_t *row, int b, int j) {
    if (BITS == 32) return _mm256_loadu_ps((const float *)row + (size_t)b * 32 + 8 * j);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + (size_t)b * 32 + 8 * j)));
}

/* Float formats (fp32, fp16): one W row against NT X rows (NT a compile-time constant at
 * each call site), four accumulators striped over each 32-value block, then hsum. */
TARGET static inline __attribute__((always_inline)) void row_tile(const ls_qmat *q, int BITS, int r, const float *X,
                                                                   int ldx, int NT, float *Y, int ldy) {
    const uint8_t *row = q->data + (size_t)r * q->row_bytes;
    int nb = q->cols_pad / 32;
    __m256 acc[4][4];
    LS_UNROLL
    for (int t = 0; t < NT; t++)
        LS_UNROLL
        for (int j = 0; j < 4; j++) acc[t][j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        LS_UNROLL
        for (int j = 0; j < 4; j++) {
            __m256 w = fblock(BITS, row, b, j);
            LS_UNROLL
            for (int t = 0; t < NT; t++)
                acc[t][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(X + (size_t)t * ldx + (size_t)b * 32 + 8 * j), acc[t][j]);
        }
    }
    LS_UNROLL
    for (int t = 0; t < NT; t++) Y[(size_t)t * ldy + r] = hsum(acc[t]);
}

/* Float formats, one X row: RB W rows at a time sharing the x loads, with the next tile
 * prefetched (as tile_i8). Each output is reduced exactly as row_tile does it (four
 * accumulators striped over each block, then hsum), so results match batched decode. */
TARGET static inline __attribute__((always_inline)) void tile_f(const ls_qmat *q, int BITS, int RB, int r, const float *x,
                                                                float *Y) {
    int nb = q->cols_pad / 32;
    const size_t BB = BITS == 32 ? 128 : 64; /* bytes per 32-value block */
    int ahead = r + 2 * RB <= q->rows;
    size_t pfd = ahead ? (size_t)RB * q->row_bytes : 0;
    const uint8_t *row[4];
    __m256 acc[4][4];
    LS_UNROLL
    for (int i = 0; i < RB; i++) {
        row[i] = q->data + (size_t)(r + i) * q->row_bytes;
        LS_UNROLL
        for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        __m256 xv[4];
        LS_UNROLL
        for (int j = 0; j < 4; j++) xv[j] = _mm256_loadu_ps(x + (size_t)b * 32 + 8 * j);
        LS_UNROLL
        for (int i = 0; i < RB; i++) {
            const char *pf = (const char *)row[i] + pfd + (size_t)b * BB;
            _mm_prefetch(pf, _MM_HINT_T1);
            if (BITS == 32) _mm_prefetch(pf + 64, _MM_HINT_T1);
            LS_UNROLL
            for (int j = 0; j < 4; j++) acc[i][j] = _mm256_fmadd_ps(fblock(BITS, row[i], b, j), xv[j], acc[i][j]);
        }
    }
    LS_UNROLL
    for (int i = 0; i < RB; i++) Y[r + i] = hsum(acc[i]);
}

/* 32 quantized values of block b as bytes: int8 for 8 bits, 0..15 / 0..7 for 4 / 3 bits. */
TARGET static inline __attribute__((always_inline)) __m256i unpack_q(int bits, const uint8_t *row, int b) {
    if (bits == 8) return _mm256_loadu_si256((const __m256i *)(row + (size_t)b * 32));
    if (bits == 4) {
        __m128i v = _mm_loadu_si128((const __m128i *)(row + (size_t)b * 16)), m = _mm_set1_epi8(15);
        return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
    }
    return ls_quant_unpack3(row + (size_t)b * 12);
}

/* Σ q·x̂ of one pair of blocks (b = 2·pr, b+1) of one W row against one X row, as 8 int32
 * lanes in the order of the row's xsv: 4 bits: lanes 0-3 block b, 4-7 block b+1 (the two
 * nibble halves' int16 sums are added before widening: |sum| <= 4·15·127 fits);
 * 8/3 bits: merge_pair of the two blocks' sums (even lanes b, odd lanes b+1). TAIL: block b+1 does not exist (odd count).
 * WQ holds the row's pair codes from pair_codes (8 bits: |q| and q for the sign trick). */
typedef struct {
    __m256i a, b, c, d;
} codes4;

TARGET static inline __attribute__((always_inline)) codes4 pair_codes(int BITS, int TAIL, const uint8_t *row, int pr) {
    codes4 w;
    if (BITS == 4) {
        const uint8_t *p = row + (size_t)pr * 32;
        __m256i v = TAIL ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_si256((const __m256i *)p);
        __m256i m = _mm256_set1_epi8(15);
        w.a = _mm256_and_si256(v, m);
        w.b = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
        w.c = w.d = w.a;
    } else if (BITS == 8) {
        const uint8_t *p = row + (size_t)pr * 64;
        w.c = _mm256_loadu_si256((const __m256i *)p);
        w.d = TAIL ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(p + 32));
        w.a = _mm256_abs_epi8(w.c);
        w.b = _mm256_abs_epi8(w.d);
    } else {
        w.a = unpack_q(3, row, 2 * pr);
        w.b = TAIL ? _mm256_setzero_si256() : unpack_q(3, row, 2 * pr + 1);
        w.c = w.d = w.a;
    }
    return w;
}

/* Two blocks' int32 lane sums into one vector: even lanes p0[2k]+p0[2k+1], odd lanes
 * p1[2k]+p1[2k+1]. Shifts, adds and a blend run on the simple integer pipes (vphaddd,
 * which does the same up to lane order, is several times slower on Zen). */
TARGET static inline __attribute__((always_inline)) __m256i merge_pair(__m256i p0, __m256i p1) {
    return _mm256_blend_epi32(_mm256_add_epi32(p0, _mm256_srli_epi64(p0, 32)), _mm256_add_epi32(p1, _mm256_slli_epi64(p1, 32)),
                              0xaa);
}

TARGET static inline __attribute__((always_inline)) __m256i pair_dot(int BITS, codes4 w, __m256i x0, __m256i x1) {
#if LS_KVNNI
    __m256i z = _mm256_setzero_si256();
    if (BITS == 4) return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(z, w.a, x0), w.b, x1);
    if (BITS == 8) /* |q| · (x with q's sign): the unsigned operand comes first */
        return merge_pair(_mm256_dpbusd_epi32(z, w.a, _mm256_sign_epi8(x0, w.c)),
                          _mm256_dpbusd_epi32(z, w.b, _mm256_sign_epi8(x1, w.d)));
    return merge_pair(_mm256_dpbusd_epi32(z, w.a, x0), _mm256_dpbusd_epi32(z, w.b, x1));
#else
    __m256i ones = _mm256_set1_epi16(1);
    if (BITS == 4)
        return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w.a, x0), _mm256_maddubs_epi16(w.b, x1)), ones);
    if (BITS == 8) {
        /* |q| · (x with q's sign): maddubs wants its first operand unsigned */
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w.a, _mm256_sign_epi8(x0, w.c)), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w.b, _mm256_sign_epi8(x1, w.d)), ones);
        return merge_pair(p0, p1);
    }
    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w.a, x0), ones);
    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w.b, x1), ones);
    return merge_pair(p0, p1);
#endif
}

/* Integer formats: RB W rows (r, r+1, ...) against NT int8 X rows. Each output is
 * reduced the same way whatever RB and NT (so the result does not depend on batch
 * composition, row blocking or the thread split): per pair of 32-blocks
 *     acc += float(Σ q·x̂ lanes) · (xs lanes · weight-group scale lanes)
 * in one 8-lane accumulator, then a fixed horizontal sum plus the offset terms. RB rows
 * at once share the activation loads and give the prefetchers RB streams. */
TARGET static inline __attribute__((always_inline)) void tile_i8(const ls_qmat *q, int BITS, int RB, int NT, int r,
                                                                 const ls_quant_act *a, int m, float *Y,
                                                                 const float *scr) {
    int nb = q->cols_pad / 32, np = (nb + 1) / 2, bpg = q->group / 32, ng = q->ngroups, ldy = q->rows;
    int ng8 = (ng + 7) & ~7;
    const uint8_t *row[4];
    const float *sc[4], *mnf[4];
    const int8_t *xp[4];
    const float *xv[4];
    __m256 acc[4][4];
    LS_UNROLL
    for (int i = 0; i < RB; i++) {
        row[i] = q->data + (size_t)(r + i) * q->row_bytes;
        sc[i] = scr + (size_t)2 * i * ng8;
        mnf[i] = q->hmin ? sc[i] + ng8 : NULL;
        LS_UNROLL
        for (int t = 0; t < NT; t++) acc[i][t] = _mm256_setzero_ps();
    }
    LS_UNROLL
    for (int t = 0; t < NT; t++) {
        xp[t] = a->xp + (size_t)(m + t) * np * 64;
        xv[t] = a->xsv + (size_t)(m + t) * np * 8;
    }
#define LS_PAIR_STEP(TAIL, PR, SGV)                                                                           \
    do {                                                                                                      \
        __m256i x0[4], x1[4];                                                                                 \
        __m256 xs_[4];                                                                                        \
        LS_UNROLL                                                                                             \
        for (int t = 0; t < NT; t++) {                                                                        \
            x0[t] = _mm256_loadu_si256((const __m256i *)(xp[t] + (size_t)(PR) * 64));                        \
            x1[t] = _mm256_loadu_si256((const __m256i *)(xp[t] + (size_t)(PR) * 64 + 32));                   \
            xs_[t] = _mm256_loadu_ps(xv[t] + (size_t)(PR) * 8);                                               \
        }                                                                                                     \
        LS_UNROLL                                                                                             \
        for (int i = 0; i < RB; i++) {                                                                        \
            _mm_prefetch((const char *)row[i] + pfd + (size_t)(PR) * PB, _MM_HINT_T1);                        \
            codes4 w = pair_codes(BITS, TAIL, row[i], PR);                                                    \
            LS_UNROLL                                                                                         \
            for (int t = 0; t < NT; t++)                                                                      \
                acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pair_dot(BITS, w, x0[t], x1[t])),              \
                                            _mm256_mul_ps(xs_[t], SGV[i]), acc[i][t]);                       \
        }                                                                                                     \
    } while (0)
    const size_t PB = BITS == 4 ? 32 : BITS == 8 ? 64 : 24; /* packed bytes per pair */
    /* Software prefetch of the next tile (the RB rows after these): each row is only a
     * few 4 KiB pages, too short for the hardware prefetchers to ramp up on, and the
     * scales and mins are further streams. Measured on the development machine (AMD
     * Zen 5, one thread): int8/int4 decode from ~60 % to ~85 % of read bandwidth.
     * The last tile prefetches its own rows (no pointer past the matrix). */
    int ahead = r + 2 * RB <= q->rows;
    size_t pfd = ahead ? (size_t)RB * q->row_bytes : 0;
    if (ahead) {
        const char *ps = (const char *)(q->hscale + (size_t)(r + RB) * ng);
        const char *pm = q->hmin ? (const char *)(q->hmin + (size_t)(r + RB) * ng) : NULL;
        for (size_t o = 0; o < (size_t)RB * ng * 2; o += 64) {
            _mm_prefetch(ps + o, _MM_HINT_T0);
            if (pm) _mm_prefetch(pm + o, _MM_HINT_T0);
        }
    }
    __m256 sg[4];
    if (bpg >= 2) {
        /* whole pairs per weight group: the group scale broadcast per pair (a load) keeps
         * one flat loop and few live registers */
        int sh = bpg == 2 ? 0 : bpg == 4 ? 1 : 2;
        for (int pr = 0; pr < np; pr++) {
            LS_UNROLL
            for (int i = 0; i < RB; i++) sg[i] = _mm256_broadcast_ss(sc[i] + (pr >> sh));
            LS_PAIR_STEP(0, pr, sg);
        }
    } else {
        /* group 32: the two blocks of a pair have their own scales, laid out like xsv */
        for (int pr = 0; pr < nb / 2; pr++) {
            LS_UNROLL
            for (int i = 0; i < RB; i++) {
                /* literal immediates: unoptimised builds do not fold BITS */
                __m256 s0 = _mm256_broadcast_ss(sc[i] + 2 * pr), s1 = _mm256_broadcast_ss(sc[i] + 2 * pr + 1);
                sg[i] = BITS == 4 ? _mm256_blend_ps(s0, s1, 0xf0) : _mm256_blend_ps(s0, s1, 0xaa);
            }
            LS_PAIR_STEP(0, pr, sg);
        }
        if (nb & 1) {
            LS_UNROLL
            for (int i = 0; i < RB; i++) sg[i] = _mm256_broadcast_ss(sc[i] + nb - 1);
            LS_PAIR_STEP(1, nb / 2, sg);
        }
    }
#undef LS_PAIR_STEP
    /* Σ s(q-c)x̂ + (m+cs)Σx = Σ s·q·x̂ + m·Σx + c·s·(Σx - Σx̂): the centring and offset
     * terms are two dot products over the row's groups, done here in one vector pass */
    LS_UNROLL
    for (int i = 0; i < RB; i++) {
        const float *mn = mnf[i];
        LS_UNROLL
        for (int t = 0; t < NT; t++) {
            float extra = 0.0f;
            if (mn) {
                /* two accumulators: the two dot products are independent chains */
                const float *xsm = a->xsum + (size_t)(m + t) * ng, *dx = a->xcorr + (size_t)(m + t) * ng;
                __m256 e0 = _mm256_setzero_ps(), e1 = e0;
                int g = 0;
                for (; g + 8 <= ng; g += 8) {
                    e0 = _mm256_fmadd_ps(_mm256_loadu_ps(mn + g), _mm256_loadu_ps(xsm + g), e0);
                    e1 = _mm256_fmadd_ps(_mm256_loadu_ps(sc[i] + g), _mm256_loadu_ps(dx + g), e1);
                }
                float tail = 0.0f;
                for (; g < ng; g++) tail += mn[g] * xsm[g] + sc[i][g] * dx[g];
                __m256 e = _mm256_add_ps(e0, e1);
                __m128 v = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
                v = _mm_add_ps(v, _mm_movehl_ps(v, v));
                v = _mm_add_ss(v, _mm_movehdup_ps(v));
                extra = _mm_cvtss_f32(v) + tail;
            }
            __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[i][t]), _mm256_extractf128_ps(acc[i][t], 1));
            v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            v = _mm_add_ss(v, _mm_movehdup_ps(v));
            Y[(size_t)(m + t) * ldy + r + i] = _mm_cvtss_f32(v) + extra;
        }
    }
}

/* The fp16 scales (and mins) of W rows r..r+RB-1 as fp32 into scr (row i at 2·i·ng8,
 * its mins ng8 further), read from L1 by tile_i8 for every X row. The arrays carry 8
 * halves of slack, so whole vectors may be read past a row's end. */
TARGET static inline __attribute__((always_inline)) void scales_f32(const ls_qmat *q, int r, int RB, float *scr) {
    int ng = q->ngroups, ng8 = (ng + 7) & ~7;
    for (int i = 0; i < RB; i++) {
        float *sf = scr + (size_t)2 * i * ng8;
        const uint16_t *hs = q->hscale + (size_t)(r + i) * ng, *hm = q->hmin ? q->hmin + (size_t)(r + i) * ng : NULL;
        for (int g = 0; g < ng; g += 8) {
            _mm256_store_ps(sf + g, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hs + g))));
            if (hm) _mm256_store_ps(sf + ng8 + g, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hm + g))));
        }
    }
}

/* RB W rows from r against all M X rows, NT at a time (then the remainder in one tile). */
TARGET static inline __attribute__((always_inline)) void rowblk_i8(const ls_qmat *q, int BITS, int RB, int NT, int r,
                                                                   const ls_quant_act *a, int M, float *Y, float *scr) {
    scales_f32(q, r, RB, scr);
    int m = 0;
    for (; m + NT <= M; m += NT) tile_i8(q, BITS, RB, NT, r, a, m, Y, scr);
    /* the 1-3 X rows left in one tile (each output the same whatever the tile) */
    if (M - m == 3) tile_i8(q, BITS, RB, 3, r, a, m, Y, scr);
    else if (M - m == 2) tile_i8(q, BITS, RB, 2, r, a, m, Y, scr);
    else if (M - m == 1) tile_i8(q, BITS, RB, 1, r, a, m, Y, scr);
}

/* Rows [r0, r1) of an integer format, tile shape by batch size, chosen by measurement
 * (docs/serve.md, quantized kernels): one X row (decode of one sequence): 4 W rows at a
 * time, or 1 where a->decode_rows says so (AMD Zen, where 1-row tiles streamed 10-25 %
 * faster; on the Intel development machine 4 rows were 5-10 % faster); 2-3 X rows: 4 W
 * rows x all of them (10-55 % over 2 x 2); 4 and more: 2 W rows x 4 X rows, the 1-3 X
 * rows left in one 2 x 1-3 tile (not one by one). The W rows' bytes stay in L1 for all X
 * rows. */
TARGET static inline __attribute__((always_inline)) void rows_i8(const ls_qmat *q, int BITS, int r0, int r1,
                                                                  const ls_quant_act *a, int M, float *Y) {
    int ng8 = (q->ngroups + 7) & ~7;
    float stackbuf[2 * 4 * 256] __attribute__((aligned(32))), *scr = stackbuf, *heap = NULL;
    if (ng8 > 256) {
        heap = ls_aligned_alloc(32, sizeof(float) * 2 * 4 * (size_t)ng8);
        LS_ASSERT(heap);
        scr = heap;
    }
    int r = r0;
    if (M == 1 && a->decode_rows == 1) {
        for (; r < r1; r++) rowblk_i8(q, BITS, 1, 1, r, a, M, Y, scr);
    } else if (M == 1) {
        for (; r + 4 <= r1; r += 4) rowblk_i8(q, BITS, 4, 1, r, a, M, Y, scr);
        for (; r < r1; r++) rowblk_i8(q, BITS, 1, 1, r, a, M, Y, scr);
    } else if (M == 2) { /* 4 W rows x both X rows */
        for (; r + 4 <= r1; r += 4) rowblk_i8(q, BITS, 4, 2, r, a, M, Y, scr);
        for (; r < r1; r++) rowblk_i8(q, BITS, 1, 2, r, a, M, Y, scr);
    } else if (M == 3) {
        for (; r + 4 <= r1; r += 4) rowblk_i8(q, BITS, 4, 3, r, a, M, Y, scr);
        for (; r < r1; r++) rowblk_i8(q, BITS, 1, 3, r, a, M, Y, scr);
    } else {
        for (; r + 2 <= r1; r += 2) rowblk_i8(q, BITS, 2, 4, r, a, M, Y, scr);
        for (; r < r1; r++) rowblk_i8(q, BITS, 1, 4, r, a, M, Y, scr);
    }
    ls_aligned_free(heap);
}

/* All rows [r0, r1) of a float format; BITS is a constant in each instantiation below. */
TARGET static inline __attribute__((always_inline)) void rows_fmt(const ls_qmat *q, int BITS, int r0, int r1,
                                                                   const float *Xpad, int M, float *Y) {
    int ldx = q->cols_pad, ldy = q->rows;
    if (M == 1) {
        int r = r0;
        for (; r + 2 <= r1; r += 2) tile_f(q, BITS, 2, r, Xpad, Y);
        if (r < r1) tile_f(q, BITS, 1, r, Xpad, Y);
        return;
    }
    for (int r = r0; r < r1; r++) {
        int m = 0;
        for (; m + 4 <= M; m += 4) row_tile(q, BITS, r, Xpad + (size_t)m * ldx, ldx, 4, Y + (size_t)m * ldy, ldy);
        const float *x = Xpad + (size_t)m * ldx;
        float *y = Y + (size_t)m * ldy;
        switch (M - m) {
        case 3: row_tile(q, BITS, r, x, ldx, 3, y, ldy); break;
        case 2: row_tile(q, BITS, r, x, ldx, 2, y, ldy); break;
        case 1: row_tile(q, BITS, r, x, ldx, 1, y, ldy); break;
        default: break;
        }
    }
}

TARGET void LS_KFN(ls_quant_rows)(const ls_qmat *q, int r0, int r1, const float *Xpad, int M, float *Y,
                               const ls_quant_act *a) {
    switch (q->bits) {
    case 32: rows_fmt(q, 32, r0, r1, Xpad, M, Y); break;
    case 16: rows_fmt(q, 16, r0, r1, Xpad, M, Y); break;
    case 8: rows_i8(q, 8, r0, r1, a, M, Y); break;
    case 4: rows_i8(q, 4, r0, r1, a, M, Y); break;
    default: rows_i8(q, 3, r0, r1, a, M, Y); break;
    }
}

TARGET void LS_KFN(ls_quant_dequant_row)(const ls_qmat *q, int r, float *out) {
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
