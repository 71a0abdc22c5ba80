/* prefill_avx512.c - the register tile of the integer prefill GEMM on AVX-512 VNNI
 * (prefill.c packs the operands and loops over the tiles).
 *
 * 16 tokens per zmm: activations are packed as [token block][column quad][16 tokens][4
 * bytes] (u8 = code + 128), so one vpdpbusd takes 16 tokens' 4 columns against a
 * broadcast of one weight row's 4 centred codes; the +128 offset is removed per group by
 * starting each sum at -128·Σcodes. Two tiles, the same integer sums and fp32 operations
 * in the same order (bit-identical outputs): 6 weight rows x 2 token blocks, the 12 int32
 * sums and the 12 fp32 outputs in registers (the outputs updated once per group, stored
 * once per tile); and 32 rows x 2 token blocks, four passes of 8 rows whose 16 fp32
 * outputs live in out (updated once per group), the default (ls_quant_pf_avx512_level in
 * quant.c). */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_internal.h"

#define TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define LS_UNROLL _Pragma("GCC unroll 4")

/* tile shape, measured at the "small" model's shapes (docs/serve.md): 6 x 2 ahead of 8 x 2,
 * 4 x 3, 4 x 2, 8 x 1 and 3 x 4 by 3-10 % at K = 256, 5-7 % behind 8 x 2 at K = 1024 */
enum { RB5 = 6, TB5 = 2 };

TARGET static inline __attribute__((always_inline)) void tile5(const ls_quant_pf *p, int RB, int TB, int tb0,
                                                               float *out /* [RB][TB*16], zeroed */) {
    const ls_quant_xpack *a = &p->x;
    const uint8_t *x0 = a->xp + (size_t)tb0 * a->K4 * 64;
    __m512 fo[RB5][TB5]; /* the fp32 outputs, in registers over all groups */
    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
        LS_UNROLL
        for (int t = 0; t < TB; t++) fo[i][t] = _mm512_setzero_ps();
    }
    for (int g = 0; g < a->G; g++) {
        /* each sum starts at -128·Σcodes: the u8 offset of the activations, removed */
        __m512i acc[RB5][TB5];
        _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
            __m512i off = _mm512_set1_epi32(-p->ws[i][g]);
            LS_UNROLL
            for (int t = 0; t < TB; t++) acc[i][t] = off;
        }
        for (int k = g * a->K4 / a->G, k1 = k + a->K4 / a->G; k < k1; k++) {
            __m512i xv[TB5];
            LS_UNROLL
            for (int t = 0; t < TB; t++) xv[t] = _mm512_load_si512((const void *)(x0 + ((size_t)t * a->K4 + k) * 64));
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                int32_t wd;
                memcpy(&wd, p->w[i] + 4 * (size_t)k, 4);
                __m512i wb = _mm512_set1_epi32(wd);
                LS_UNROLL
                for (int t = 0; t < TB; t++) acc[i][t] = _mm512_dpbusd_epi32(acc[i][t], xv[t], wb);
            }
        }
        LS_UNROLL
        for (int t = 0; t < TB; t++) {
            size_t xo = ((size_t)(tb0 + t) * a->G + g) * 16;
            __m512 xs = _mm512_load_ps(a->xs + xo), xsum = _mm512_load_ps(a->xsum + xo);
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                fo[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]), _mm512_mul_ps(_mm512_set1_ps(p->s[i][g]), xs),
                                           fo[i][t]);
                if (p->c[0]) fo[i][t] = _mm512_fmadd_ps(_mm512_set1_ps(p->c[i][g]), xsum, fo[i][t]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
        LS_UNROLL
        for (int t = 0; t < TB; t++) _mm512_store_ps(out + (size_t)i * TB * 16 + t * 16, fo[i][t]);
    }
}

TARGET static void tile_avx512(const ls_quant_pf *p, int tb0, int ntb, float *out) {
    if (p->RB == 1) tile5(p, 1, 1, tb0, out);
    else if (ntb == TB5) tile5(p, RB5, TB5, tb0, out);
    else tile5(p, RB5, 1, tb0, out);
}

const ls_quant_pf_level ls_quant_pf_avx512 = {16, 1, 1, {RB5, RB5, RB5}, {TB5, TB5, TB5}, tile_avx512};

/* vpdpbusd as asm: GCC 12 copies each accumulator twice around the intrinsic */
TARGET static inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i x, __m512i w) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
}

/* Rows i0..i0+RB-1 (RB <= 8) x TB <= 2 token blocks added to out [.][TB*16]: per group the
 * RB·TB int32 sums in registers, then each output loaded, updated as in tile5 and stored. */
TARGET static inline __attribute__((always_inline)) void tile8m(const ls_quant_pf *p, int i0, int RB, int TB, int tb0,
                                                                float *out) {
    const ls_quant_xpack *a = &p->x;
    const uint8_t *x0 = a->xp + (size_t)tb0 * a->K4 * 64;
    int kg = a->K4 / a->G;
    for (int g = 0; g < a->G; g++) {
        __m512i acc[8][2];
        _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
            __m512i off = _mm512_set1_epi32(-p->ws[i0 + i][g]);
            LS_UNROLL
            for (int t = 0; t < TB; t++) acc[i][t] = off;
        }
        for (int k = g * kg; k < (g + 1) * kg; k++) {
            __m512i xv[2];
            LS_UNROLL
            for (int t = 0; t < TB; t++) xv[t] = _mm512_load_si512((const void *)(x0 + ((size_t)t * a->K4 + k) * 64));
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                int32_t wd;
                memcpy(&wd, p->w[i0 + i] + 4 * (size_t)k, 4);
                __m512i wb = _mm512_set1_epi32(wd);
                LS_UNROLL
                for (int t = 0; t < TB; t++) acc[i][t] = dpbusd(acc[i][t], xv[t], wb);
            }
        }
        LS_UNROLL
        for (int t = 0; t < TB; t++) {
            size_t xo = ((size_t)(tb0 + t) * a->G + g) * 16;
            __m512 xs = _mm512_load_ps(a->xs + xo), xsum = _mm512_load_ps(a->xsum + xo);
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                float *o = out + (size_t)(i0 + i) * TB * 16 + t * 16;
                __m512 fo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][t]),
                                            _mm512_mul_ps(_mm512_set1_ps(p->s[i0 + i][g]), xs), _mm512_load_ps(o));
                if (p->c[0]) fo = _mm512_fmadd_ps(_mm512_set1_ps(p->c[i0 + i][g]), xsum, fo);
                _mm512_store_ps(o, fo);
            }
        }
    }
}

/* 32 rows: each Y line is written in whole cache lines once per 32 rows (6 rows wrote 8 of
 * its floats three times over: at a power-of-two N every line of a tile fell in one L1 set),
 * and a tile's activations stay in L1 over the four passes */
enum { RBW = 32, TBW = 2 };

TARGET static void tile_avx512w(const ls_quant_pf *p, int tb0, int ntb, float *out) {
    /* p->RB is always RBW: the level pads its last block of rows with zero rows */
    if (ntb == TBW)
        for (int i0 = 0; i0 < RBW; i0 += 8) tile8m(p, i0, 8, TBW, tb0, out);
    else
        for (int i0 = 0; i0 < RBW; i0 += 8) tile8m(p, i0, 8, 1, tb0, out);
}

const ls_quant_pf_level ls_quant_pf_avx512w = {16, 1, 1, {RBW, RBW, RBW}, {TBW, TBW, TBW}, tile_avx512w, 1};
