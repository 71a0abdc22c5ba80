/* prefill_avx2.c - the register tile of the integer prefill GEMM on AVX2 (no VNNI;
 * prefill.c packs the operands and loops over the tiles).
 *
 * 8 tokens per ymm: activations are packed as [token block][column quad][8 tokens][4
 * bytes] (int8), and one weight row's 4 codes are broadcast against them. vpmaddubsw
 * multiplies unsigned bytes by signed ones into int16 pairs, saturating, so:
 *   4/3 bits: the unsigned codes (0..15 / 0..7) times x̂ (|x̂| <= 127): a pair is at most
 *     2·15·127 = 3810, so the int16 sums of 8 quads (32 columns) stay below 30480 and are
 *     widened once by vpmaddwd; each group's int32 sums start at -ctr·Σx̂ (centring);
 *   8 bits: |q| times x̂ with q's sign (vpsignb), at most 2·127·127 = 32258: widened per
 *     quad.
 * Tiles: 3 weight rows x 2 token blocks (8 bits) and 8 rows x 1 block (4/3 bits), the
 * int32 sums in registers, the rows' codes in L1 for all token blocks, the fp32 sums in an
 * L1 buffer updated once per group. */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define LS_UNROLL _Pragma("GCC unroll 8")

/* tile shapes (W rows x token blocks), measured (docs/serve.md): 8 bits 3 x 2, 4/3 bits 8 x 1 */
enum { RB8 = 3, TB8 = 2, RBQ = 8, CH2 = 8 /* quads per int16 chain, 4/3 bits */ };

TARGET static inline __attribute__((always_inline)) __m256i bcast4(const int8_t *p) {
    int32_t d;
    memcpy(&d, p, 4);
    return _mm256_set1_epi32(d);
}

TARGET static inline __attribute__((always_inline)) void tile2(const ls_quant_pf *p, int BITS, int RB, int TB, int tb0,
                                                               float *out /* [RB][TB*8], zeroed */) {
    const ls_quant_xpack *a = &p->x;
    int kpg = p->q->group / 4;
    size_t xstride = (size_t)a->K4 * 32; /* bytes per token block */
    const uint8_t *x0 = a->xp + (size_t)tb0 * xstride;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int g = 0; g < a->G; g++) {
        __m256i acc[RBQ][TB8];
        LS_UNROLL
        for (int t = 0; t < TB; t++) {
            __m256i init = BITS == 8 ? _mm256_setzero_si256()
                                     : _mm256_load_si256((const __m256i *)(a->xcs + ((size_t)(tb0 + t) * a->G + g) * 8));
            LS_UNROLL
            for (int i = 0; i < RB; i++) acc[i][t] = init;
        }
        if (BITS == 8) {
            for (int k = g * kpg; k < (g + 1) * kpg; k++) {
                __m256i xv[TB8];
                LS_UNROLL
                for (int t = 0; t < TB; t++) xv[t] = _mm256_load_si256((const __m256i *)(x0 + t * xstride + (size_t)k * 32));
                LS_UNROLL
                for (int i = 0; i < RB; i++) {
                    __m256i wa = bcast4(p->w[i] + 4 * (size_t)k), wsg = bcast4(p->wq[i] + 4 * (size_t)k);
                    LS_UNROLL
                    for (int t = 0; t < TB; t++)
                        acc[i][t] = _mm256_add_epi32(
                            acc[i][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv[t], wsg)), ones));
                }
            }
        } else {
            for (int k = g * kpg; k < (g + 1) * kpg; k += CH2) {
                LS_UNROLL
                for (int i = 0; i < RB; i++) {
                    LS_UNROLL
                    for (int t = 0; t < TB; t++) {
                        const uint8_t *x = x0 + t * xstride + (size_t)k * 32;
                        __m256i s = _mm256_maddubs_epi16(bcast4(p->w[i] + 4 * (size_t)k), _mm256_load_si256((const __m256i *)x));
                        LS_UNROLL
                        for (int j = 1; j < CH2; j++)
                            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(bcast4(p->w[i] + 4 * (size_t)(k + j)),
                                                                         _mm256_load_si256((const __m256i *)(x + 32 * j))));
                        acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(s, ones));
                    }
                }
            }
        }
        /* into fp32 once per group: the token block's x scales and sums loaded once */
        LS_UNROLL
        for (int t = 0; t < TB; t++) {
            size_t xo = ((size_t)(tb0 + t) * a->G + g) * 8;
            __m256 xs = _mm256_load_ps(a->xs + xo), xsum = _mm256_load_ps(a->xsum + xo);
            LS_UNROLL
            for (int i = 0; i < RB; i++) {
                __m256 *o = (__m256 *)(out + (size_t)(i * TB + t) * 8);
                *o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_mul_ps(_mm256_set1_ps(p->s[i][g]), xs), *o);
                if (BITS != 8) *o = _mm256_fmadd_ps(_mm256_set1_ps(p->c[i][g]), xsum, *o);
            }
        }
    }
}

TARGET static void tile_avx2(const ls_quant_pf *p, int tb0, int ntb, float *out) {
    /* one instantiation per format and tile shape */
    int b = p->q->bits;
    if (p->RB == 1) {
        if (b == 8) tile2(p, 8, 1, 1, tb0, out);
        else if (b == 4) tile2(p, 4, 1, 1, tb0, out);
        else tile2(p, 3, 1, 1, tb0, out);
    } else if (b == 8) {
        if (ntb == TB8) tile2(p, 8, RB8, TB8, tb0, out);
        else tile2(p, 8, RB8, 1, tb0, out);
    } else if (b == 4) tile2(p, 4, RBQ, 1, tb0, out);
    else tile2(p, 3, RBQ, 1, tb0, out);
}

const ls_quant_pf_level ls_quant_pf_avx2 = {8, 0, 0, {RB8, RBQ, RBQ}, {TB8, 1, 1}, tile_avx2};
